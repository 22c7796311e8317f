#!/usr/bin/env bash
# build-coredns.sh: build CoreDNS, the cluster DNS of a local Kubernetes,
# from the Go module proxy into ${COREDNS_CACHE}/<version>/bin/coredns. The
# version is COREDNS_VERSION, or, when that is empty, the one kubeadm of
# KUBE_VERSION names (`kubeadm config images list`: kubeadm's
# constants.CoreDNSVersion; v1.13.1 for Kubernetes v1.35, v1.14.2 for
# v1.36), asked of the kubeadm `make kube-binaries` built in
# ${KUBE_CACHE}/<kube version>/bin. A version already built (in the stamp,
# and reporting its version when run) is not built again. `make coredns`
# runs this for each of $(KUBE_VERSIONS); docs/kubernetes-local.md has the
# layout and times.
#
# The main is hack/coredns/main.go: CoreDNS's coremain with only the
# plugins of kubeadm's Corefile (and log), not upstream's main, which links
# every in-tree plugin (the cloud DNS providers' SDKs among them). It is
# copied into a wrapper module (<version>/src) that requires
# github.com/coredns/coredns at the version, so Steward's go.mod does not
# grow. Reproducible: CGO_ENABLED=0, -trimpath, -buildvcs=false, -s -w, and
# coremain.GitCommit set to the release's commit as the proxy records it.
# The steps build-kube.sh takes too (the cache's layout and lock, the module
# download, the wrapper module, the build, the stamp) are
# hack/lib/gobuild.sh's.
#
# Environment:
#   COREDNS_VERSION  CoreDNS release to build (vX.Y.Z)
#   KUBE_VERSION     else: the Kubernetes release whose kubeadm names it
#   KUBE_CACHE       where that kubeadm is (default .cache/kube)
#   COREDNS_CACHE    where the versions go (default .cache/coredns)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
gb_tool=build-coredns
. "$root/hack/lib/gobuild.sh"
module=github.com/coredns/coredns
version="${COREDNS_VERSION:-}"
if [ -z "$version" ]; then
	kube="${KUBE_VERSION:-}"
	if [ -z "$kube" ]; then
		echo "build-coredns: give COREDNS_VERSION (vX.Y.Z) or KUBE_VERSION (the Kubernetes release whose kubeadm names it)" >&2
		exit 2
	fi
	kubeadm="${KUBE_CACHE:-$root/.cache/kube}/$kube/bin/kubeadm"
	if [ ! -x "$kubeadm" ]; then
		echo "build-coredns: no kubeadm of Kubernetes $kube in $kubeadm to ask for its CoreDNS version: run make kube-binaries KUBE_VERSIONS=$kube first" >&2
		exit 1
	fi
	list="$("$kubeadm" config images list --kubernetes-version "$kube" 2>&1)" || {
		echo "build-coredns: $kubeadm config images list failed:" >&2
		printf '%s\n' "$list" >&2
		exit 1
	}
	version="$(printf '%s\n' "$list" | sed -n 's#^.*/coredns/coredns:\(v[0-9][0-9.]*\)$#\1#p')"
	if [ -z "$version" ]; then
		echo "build-coredns: kubeadm of Kubernetes $kube names no coredns/coredns image:" >&2
		printf '%s\n' "$list" >&2
		exit 1
	fi
fi
case "$version" in v*) ;; *) version="v$version" ;; esac
if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "build-coredns: $version is not a CoreDNS release version (want vX.Y.Z, for example v1.14.2)" >&2
	exit 2
fi
gb_open "${COREDNS_CACHE:-$root/.cache/coredns}" "$version"

# reports: bin/coredns is there, named in the stamp, and says it is $version
# (`coredns -version` prints "CoreDNS-1.14.2" first).
reports() {
	local got
	[ -x "$bin/coredns" ] && [ -f "$stamp" ] && grep -qx "coredns $version" "$stamp" || return 1
	got="$("$bin/coredns" -version 2>/dev/null)" || return 1
	[[ "$got" == "CoreDNS-${version#v}"* ]]
}
if reports; then
	echo "build-coredns: $version already built in $bin"
	exit 0
fi

start=$(date +%s)
gb_env
gb_download "$module@$version" \
	"CoreDNS $version cannot be built: $module@$version is not available from the Go module proxy" \
	"check that the proxy serves $module (go list -m -versions $module), or pick a version it has with COREDNS_VERSION"
modsum="$(gb_field Sum)"
commit="$(gb_field Hash | head -n1)"
commit="${commit:0:7}"

gb_wrapper steward.local/coredns-build
cp "$root/hack/coredns/main.go" "$src/"
go mod edit -require "$module@$version"
if ! out="$(go mod tidy 2>&1)"; then
	printf '%s\n' "$out" >&2
	echo "build-coredns: resolving the modules of $module@$version failed (above): the Go module proxy ($(go env GOPROXY)) must serve its dependencies too" >&2
	exit 1
fi
if ! gb_build "-s -w -X $module/coremain.GitCommit=$commit" "$dir/bin.new/coredns" .; then
	echo "build-coredns: building CoreDNS $version failed (the compiler's errors are above); this script is known to build v1.13 and v1.14" >&2
	exit 1
fi
gb_install "# $module $version $modsum, $(go env GOVERSION)" coredns coredns
if ! reports; then
	echo "build-coredns: built $bin/coredns does not report CoreDNS $version" >&2
	sed -i "/^coredns /d" "$stamp"
	exit 1
fi
echo "build-coredns: built $version in $bin in $(($(date +%s) - start)) s"
