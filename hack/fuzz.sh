#!/bin/sh
# Fuzz every target hack/fuzz-targets lists, one after another, for
# FUZZTIME each (default 10m) with FUZZPARALLEL workers (default 1: the
# shared machines have two cores). Stops at the first target that finds a
# failing input; Go writes it under the package's testdata/fuzz/TARGET/,
# where it becomes part of the seed corpus once checked in.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10m}
FUZZPARALLEL=${FUZZPARALLEL:-1}
GO=${GO:-go}
grep -v '^#' hack/fuzz-targets | while read -r pkg target; do
	[ -n "$pkg" ] || continue
	echo "== $target ($pkg), $FUZZTIME"
	$GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -parallel "$FUZZPARALLEL" "$pkg"
done
