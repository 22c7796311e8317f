#!/usr/bin/env bash
# build-kube-apiserver.sh: build kube-apiserver for a Kubernetes release from
# the Go module proxy into .cache/bin/kube-apiserver, for the tests that run a
# real API server above a Steward cluster. Skips the build when the binary for
# that version is already there (.cache/bin/kube-apiserver.version).
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
# modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/src/k8s.io/...
# directories. A wrapper module requires k8s.io/kubernetes and replaces each
# of those staging modules by its published release (v0.MINOR.PATCH for
# Kubernetes v1.MINOR.PATCH); the sample-* modules are not published and not
# needed. The wrapper's main is cmd/kube-apiserver's: app.NewAPIServerCommand()
# run through k8s.io/component-base/cli.Run. The build takes about 3.5 minutes
# on two cores with a warm module cache and gives a binary of about 150 MB.
#
# Environment:
#   KUBE_VERSION  Kubernetes release to build (default v1.36.3)
#   CACHE         work directory for the wrapper module (default .cache/kube-apiserver)
#   BIN           output directory (default .cache/bin)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${KUBE_VERSION:-v1.36.3}"
case "$version" in v*) ;; *) version="v$version" ;; esac
if ! [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "build-kube-apiserver: $version is not a Kubernetes release version (want v1.MINOR.PATCH)" >&2
	exit 2
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
minor="${BASH_REMATCH[1]}"
cache="${CACHE:-$root/.cache/kube-apiserver}"
bin="${BIN:-$root/.cache/bin}"
out="$bin/kube-apiserver"
stamp="$bin/kube-apiserver.version"

have_version() {
	# Capture first: with pipefail, `kube-apiserver --version | grep -q`
	# fails when grep exits early and the binary gets SIGPIPE.
	local got
	[ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ] &&
		got="$("$out" --version 2>/dev/null)" && [ "$got" = "Kubernetes $version" ]
}

if have_version; then
	echo "build-kube-apiserver: $version already built in $bin"
	exit 0
fi

work="$cache/src-$version"
rm -rf "$work"
mkdir -p "$work" "$bin"
start=$(date +%s)
(
	cd "$work"
	# Only the wrapper's own settings: a GOFLAGS from the caller (-mod=vendor,
	# -tags, ...) or a go.work above would change what is built.
	export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
	go mod init steward.local/kube-apiserver-build >/dev/null 2>&1
	# The staging modules are the ones k8s.io/kubernetes' own go.mod replaces
	# with ./staging/src/k8s.io/<name>.
	gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
	if [ ! -f "$gomod" ]; then
		echo "build-kube-apiserver: go.mod of k8s.io/kubernetes@$version not found" >&2
		exit 1
	fi
	staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s\.io/.*#\1#p' "$gomod" | grep -v '^k8s\.io/sample-' || true)"
	if [ -z "$staging" ]; then
		echo "build-kube-apiserver: no staging replacements in $gomod" >&2
		exit 1
	fi
	edits=(-require "k8s.io/kubernetes@$version")
	for m in $staging; do
		edits+=(-replace "$m=$m@$staging_version")
	done
	go mod edit "${edits[@]}"
	# cmd/kube-apiserver/apiserver.go of the release, as a wrapper main.
	cat >main.go <<'EOF'
// Command kube-apiserver is cmd/kube-apiserver of the Kubernetes release,
// built from the Go module proxy.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
EOF
	go mod tidy
	# The version stamps hack/lib/version.sh sets in an official build, so
	# --version and /version report the release instead of v0.0.0-master.
	pkg=k8s.io/component-base/version
	ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	go build -trimpath -ldflags "$ldflags" -o "$out.tmp" .
)
mv "$out.tmp" "$out"
echo "$version" >"$stamp"
if ! have_version; then
	echo "build-kube-apiserver: built $out does not report Kubernetes $version: $("$out" --version 2>&1 || true)" >&2
	rm -f "$stamp"
	exit 1
fi
rm -rf "$work"
echo "build-kube-apiserver: built $version in $bin ($(($(date +%s) - start)) s)"
