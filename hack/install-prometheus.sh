#!/usr/bin/env bash
# install-prometheus.sh: make sure prometheus and promtool are installed, for
# the alert rules' unit tests (`promtool test rules`, pkg/metrics) and the
# end-to-end test that scrapes a cluster with a real Prometheus
# (test/e2e/core/metrics_test.go). Installs Debian's `prometheus` package (which
# ships both) when either is missing; does nothing when both are there.
#
# Environment:
#   PROMETHEUS, PROMTOOL  binaries to check (default: from PATH)
set -euo pipefail
prom="${PROMETHEUS:-prometheus}"
tool="${PROMTOOL:-promtool}"
if command -v "$prom" >/dev/null && command -v "$tool" >/dev/null; then
	echo "install-prometheus: $("$tool" --version 2>&1 | head -1)"
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "install-prometheus: prometheus or promtool is missing and this machine has no apt-get: install Prometheus 2.x (prometheus and promtool on PATH, or set PROMETHEUS and PROMTOOL)" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends prometheus
# The package starts a Prometheus service on :9090 where systemd runs; the
# tests run their own server and need none.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
	$sudo systemctl disable --now prometheus || true
fi
echo "install-prometheus: $("$tool" --version 2>&1 | head -1)"
