#!/usr/bin/env bash
# build-versitygw.sh: build the versitygw S3 gateway (a real S3-compatible
# server with a posix backend) from the Go module proxy into .cache/bin, for
# the tests of S3 backup storage. Skips the build when the binary is there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${VERSITYGW_VERSION:-v1.8.0}"
bin="$root/.cache/bin"
mkdir -p "$bin"
if [ -x "$bin/versitygw" ] && [ -f "$bin/versitygw.version" ] && [ "$(cat "$bin/versitygw.version")" = "$version" ]; then
	echo "build-versitygw: $version already built in $bin"
	exit 0
fi
GOBIN="$bin" GOFLAGS= go install "github.com/versity/versitygw/cmd/versitygw@$version"
echo "$version" >"$bin/versitygw.version"
echo "build-versitygw: built $version in $bin"
