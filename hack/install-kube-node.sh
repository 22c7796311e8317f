#!/usr/bin/env bash
# install-kube-node.sh: make sure the parts of a local Kubernetes node that
# come from Debian are installed (internal/localkube, `make kube-up`, the
# test/e2e/localkube tests): containerd and its ctr, runc, the CNI plugins
# (/usr/lib/cni), iptables (kube-proxy's iptables mode), conntrack and
# iproute2 (ip: the bridge, veths, addresses).
# Installs the missing packages with apt-get; does nothing when all are
# there. None of the packages starts anything by itself on a machine
# without systemd, and none adds a rule or changes a sysctl: localkube
# starts one containerd per node, by hand, inside the node's namespaces.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v conntrack >/dev/null || [ -x /usr/sbin/conntrack ] || missing+=(conntrack)
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-kube-node: containerd $(containerd --version | awk '{print $3}'), $(runc --version | head -1), CNI plugins in /usr/lib/cni, iptables, conntrack, ip: present"
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "install-kube-node: missing ${missing[*]} and this machine has no apt-get: install containerd, runc, the CNI plugins (/usr/lib/cni), iptables, conntrack and iproute2" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
echo "install-kube-node: installing ${missing[*]}"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends containerd runc containernetworking-plugins iptables conntrack iproute2
echo "install-kube-node: containerd $(containerd --version | awk '{print $3}'), $(runc --version | head -1)"
