#!/usr/bin/env bash
# install-containerd.sh: make sure containerd (with ctr and the runc shim)
# and runc are installed, for the test that imports and runs the images
# `localkube images` builds (test/e2e/kube/images_test.go) and the local
# Kubernetes nodes (docs/kubernetes-local.md). Installs Debian's packages
# when one is missing; does nothing when all are there. Nothing is started:
# the tests run containerd themselves, each with its own root, state and
# socket.
set -euo pipefail
missing=""
for tool in containerd ctr containerd-shim-runc-v2 runc; do
	command -v "$tool" >/dev/null || missing="$missing $tool"
done
if [ -z "$missing" ]; then
	echo "install-containerd: $(containerd --version), $(runc --version | head -1)"
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "install-containerd:$missing missing and this machine has no apt-get: install containerd 1.6 or later and runc (containerd, ctr, containerd-shim-runc-v2 and runc on PATH)" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends containerd runc
# Where systemd runs, the package starts a containerd on /run/containerd;
# it is left alone (Docker may use it): the tests' own do not touch it.
echo "install-containerd: $(containerd --version), $(runc --version | head -1)"
