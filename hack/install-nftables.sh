#!/usr/bin/env bash
# install-nftables.sh: make sure nft is installed, for the delayed links
# between test hosts (test/harness/delaylink.go: a redirect rule in a host's
# network namespace sends its peer connections through a userspace delaying
# proxy; TestDelayLink and BenchmarkHostsLatencyUpgrade). Installs Debian's
# `nftables` package when nft is missing; does nothing when it is there.
# The package installs no rule of its own on the machine.
#
# Environment:
#   NFT  binary to check (default: nft from PATH)
set -euo pipefail
nft="${NFT:-nft}"
if command -v "$nft" >/dev/null; then
	echo "install-nftables: $("$nft" --version 2>&1 | head -1)"
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "install-nftables: nft is missing and this machine has no apt-get: install nftables (nft on PATH, or set NFT)" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends nftables
echo "install-nftables: $("$nft" --version 2>&1 | head -1)"
