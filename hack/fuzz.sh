#!/bin/sh
# Fuzz every target hack/fuzz-targets lists, one after another, for
# FUZZTIME each (default 10m) with FUZZPARALLEL workers (default 1: the
# shared machines have two cores), minimizing each new input for at most
# FUZZMINIMIZETIME (default 10s; Go's own default of 60s can take most of a
# short run: a 75-second run spent 60 of them minimizing one input). Stops at the first target that finds a
# failing input; Go writes it under the package's testdata/fuzz/TARGET/,
# where it becomes part of the seed corpus once checked in.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10m}
FUZZPARALLEL=${FUZZPARALLEL:-1}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-10s}
GO=${GO:-go}
grep -v '^#' hack/fuzz-targets | while read -r pkg target; do
	[ -n "$pkg" ] || continue
	echo "== $target ($pkg), $FUZZTIME"
	$GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" -parallel "$FUZZPARALLEL" "$pkg"
done
