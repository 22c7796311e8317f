#!/usr/bin/env bash
# build-kube.sh: build the Kubernetes components of one release from the Go
# module proxy into ${KUBE_CACHE}/<version>/bin/: kubelet, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubectl and kubeadm.
# A component already there (named in <version>/stamp and reporting the
# version when run) is not built again; `make kube-binaries` runs this for
# each of $(KUBE_VERSIONS). docs/kubernetes-local.md has the layout, sizes and
# times.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
# modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/src/k8s.io/...
# directories. One wrapper module (<version>/src) requires k8s.io/kubernetes
# and replaces each of those staging modules by its published release
# (v0.MINOR.PATCH for Kubernetes v1.MINOR.PATCH; the sample-* modules are
# not published and not needed). Its mains are the release's own cmd/<name>
# files, copied from the module cache, so every component is the release's
# command. All of them are built by one `go build`, so they share the build
# cache and the packages they have in common are compiled once.
#
# The version is linked in as the release's own build does
# (hack/lib/version.sh): without it every binary reports v0.0.0-master, which
# breaks version skew checks and kubeadm. The other stamps are fixed so that
# a rebuild gives the same bytes: gitTreeState=clean, buildDate = the
# release's time on the module proxy, gitCommit empty (the proxy does not
# say which commit; the source is the module whose go.sum hash the stamp
# records). -trimpath, -buildvcs=false and CGO_ENABLED=0 (static binaries,
# which the images of cmd/localkube need). The steps build-coredns.sh takes
# too (the cache's layout and lock, the module download, the wrapper
# module, the build, the stamp) are hack/lib/gobuild.sh's.
#
# Environment:
#   KUBE_VERSION     Kubernetes release to build (default v1.36.3)
#   KUBE_CACHE       where the versions go (default .cache/kube)
#   KUBE_COMPONENTS  the components to build (default: all seven)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
gb_tool=build-kube
. "$root/hack/lib/gobuild.sh"
all_components="kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubeadm"
version="${KUBE_VERSION:-v1.36.3}"
case "$version" in v*) ;; *) version="v$version" ;; esac
if ! [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "build-kube: $version is not a Kubernetes release version (want v1.MINOR.PATCH, for example v1.36.3)" >&2
	exit 2
fi
minor="${BASH_REMATCH[1]}"
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
components="${KUBE_COMPONENTS:-$all_components}"
for c in $components; do
	case " $all_components " in
	*" $c "*) ;;
	*)
		echo "build-kube: unknown component $c in KUBE_COMPONENTS (known: $all_components)" >&2
		exit 2
		;;
	esac
done
# One build of a version at a time: make kube-binaries and make
# kube-apiserver (or two worktrees sharing one cache) may run together.
gb_open "${KUBE_CACHE:-$root/.cache/kube}" "$version"

# reports NAME: whether bin/NAME is there, named in the stamp, and says it
# is $version. The output is captured first: with pipefail, `X --version |
# grep -q` fails when grep exits early and X gets SIGPIPE.
reports() {
	local name="$1" exe="$bin/$1" got
	[ -x "$exe" ] && [ -f "$stamp" ] && grep -qx "$name $version" "$stamp" || return 1
	case "$name" in
	kubectl)
		got="$("$exe" version --client -o json 2>/dev/null)" || return 1
		[[ "$got" == *"\"gitVersion\": \"$version\""* ]]
		;;
	kubeadm)
		got="$("$exe" version -o short 2>/dev/null)" || return 1
		[ "$got" = "$version" ]
		;;
	*)
		got="$("$exe" --version 2>/dev/null)" || return 1
		[ "$got" = "Kubernetes $version" ]
		;;
	esac
}

missing=""
for c in $components; do
	reports "$c" || missing="$missing $c"
done
if [ -z "$missing" ]; then
	echo "build-kube: $version already built in $bin ($components)"
	exit 0
fi

start=$(date +%s)
gb_env
gb_download "k8s.io/kubernetes@$version" \
	"Kubernetes $version cannot be built: k8s.io/kubernetes@$version is not on the Go module proxy" \
	"pick a released version (v1.MINOR.PATCH, see https://kubernetes.io/releases/), for example KUBE_VERSION=v1.36.3"
modsrc="$(gb_field Dir)"
gomod="$(gb_field GoMod)"
modsum="$(gb_field Sum)"
# The release's time on the proxy, as buildDate: fixed for a version.
infofile="$(gb_field Info)"
build_date="$(sed -n 's/.*"Time": *"\([0-9TZ:-]*\)".*/\1/p' "$infofile" 2>/dev/null || true)"
if [ ! -f "$gomod" ] || [ ! -d "$modsrc/cmd" ] || [ -z "$build_date" ]; then
	echo "build-kube: the module cache's copy of k8s.io/kubernetes@$version is incomplete ($gomod, $modsrc): run go clean -modcache or remove that version from it and try again" >&2
	exit 1
fi
staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s\.io/.*#\1#p' "$gomod" | grep -v '^k8s\.io/sample-' || true)"
if [ -z "$staging" ]; then
	echo "build-kube: Kubernetes $version cannot be built this way: its go.mod ($gomod) replaces no staging modules" >&2
	exit 1
fi

gb_wrapper steward.local/kube-build
edits=(-require "k8s.io/kubernetes@$version")
for m in $staging; do
	edits+=(-replace "$m=$m@$staging_version")
done
go mod edit "${edits[@]}"
pkgs=()
for c in $missing; do
	if ! ls "$modsrc/cmd/$c"/*.go >/dev/null 2>&1; then
		echo "build-kube: Kubernetes $version has no cmd/$c to build" >&2
		exit 1
	fi
	mkdir -p "cmd/$c"
	for f in "$modsrc/cmd/$c"/*.go; do
		case "$f" in *_test.go) continue ;; esac
		cp "$f" "cmd/$c/"
	done
	chmod -R u+w "cmd/$c"
	pkgs+=("./cmd/$c")
done
go mod tidy
pkg=k8s.io/component-base/version
cgv=k8s.io/client-go/pkg/version
ldflags="-s -w"
for p in $pkg $cgv; do
	ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitCommit= -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
done
if ! gb_build "$ldflags" "$dir/bin.new/" "${pkgs[@]}"; then
	echo "build-kube: building Kubernetes $version (${missing# }) failed (the compiler's errors are above); this script is known to build v1.35 and v1.36" >&2
	exit 1
fi

gb_install "# k8s.io/kubernetes $version $modsum, $(go env GOVERSION)" "$all_components" "$missing"
for c in $components; do
	if ! reports "$c"; then
		echo "build-kube: built $bin/$c does not report Kubernetes $version" >&2
		sed -i "/^$c /d" "$stamp"
		exit 1
	fi
done
echo "build-kube: built $version ($missing ) in $bin in $(($(date +%s) - start)) s"
