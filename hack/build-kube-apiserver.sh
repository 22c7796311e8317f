#!/usr/bin/env bash
# build-kube-apiserver.sh: kube-apiserver of one Kubernetes release at
# .cache/bin/kube-apiserver (STEWARD_TEST_KUBE_APISERVER), for the tests that
# run a real API server above a Steward cluster. hack/build-kube.sh builds
# it into the per-version layout ($KUBE_CACHE/<version>/bin, shared with
# `make kube-binaries`, so the second of the two builds reuses the first's
# work); this links it from there and records the version
# (.cache/bin/kube-apiserver.version). Nothing is built when that version is
# already there.
#
# Environment:
#   KUBE_VERSION  Kubernetes release (default v1.36.3)
#   KUBE_CACHE    the per-version layout (default .cache/kube)
#   BIN           where the link goes (default .cache/bin)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${KUBE_VERSION:-v1.36.3}"
case "$version" in v*) ;; *) version="v$version" ;; esac
bin="${BIN:-$root/.cache/bin}"
cache="${KUBE_CACHE:-$root/.cache/kube}"
out="$bin/kube-apiserver"
stamp="$bin/kube-apiserver.version"

KUBE_VERSION="$version" KUBE_CACHE="$cache" KUBE_COMPONENTS=kube-apiserver "$root/hack/build-kube.sh"
cache="$(cd "$cache" && pwd)"
target="$cache/$version/bin/kube-apiserver"
mkdir -p "$bin"
if [ "$(readlink "$out" 2>/dev/null || true)" != "$target" ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$version" ]; then
	# Replaced in one rename: a test starting now runs the old binary or the
	# new one, never a missing one.
	ln -sfn "$target" "$out.tmp"
	mv -T "$out.tmp" "$out"
	echo "$version" >"$stamp.tmp"
	mv "$stamp.tmp" "$stamp"
	echo "build-kube-apiserver: $out -> $target"
fi
