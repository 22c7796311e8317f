#!/usr/bin/env bash
# e2e.sh runs the end-to-end test packages (./test/...) as two groups side
# by side, and prints and keeps their results as one (make test-e2e-run,
# docs/testing.md "Running side by side"):
#
#   - the packages whose tests bring up a local Kubernetes (their tests
#     import internal/localkube): their clusters take the machine-wide lock
#     one after the other (test/harness/localkube.go), so together they are
#     the suite's longest chain. They run in one `go test -p 1`, started at
#     once, so the chain begins with the suite instead of when go test's
#     package order reaches it, and none holds a slot while waiting for
#     the lock;
#   - every other package, in another `go test -p $((E2E_P-1))`.
#
# The two groups run E2E_P test binaries at most, as one `go test -p E2E_P`
# did. Each group's events go to their own file (ARTIFACTS/e2e-kube.json,
# e2e-others.json) through hack/testtimes, which prints each test's result
# as it ends, prefixed by its package; the files are then joined into
# ARTIFACTS/e2e.json and summarized once. The exit code is 1 when either
# group failed (go test's own, through pipefail), 0 otherwise.
#
# Environment: GO, E2E_P (>= 2), E2E_PARALLEL, E2E_TIMEOUT, ARTIFACTS,
# E2E_PKGS (default ./test/...), and
# what the tests read (STEWARD_TEST_*, exported by the Makefile).
set -uo pipefail

GO=${GO:-go}
E2E_P=${E2E_P:-3}
E2E_PARALLEL=${E2E_PARALLEL:-2}
E2E_TIMEOUT=${E2E_TIMEOUT:-45m}
ARTIFACTS=${ARTIFACTS:-test-artifacts}
E2E_PKGS=${E2E_PKGS:-./test/...} # the packages to run (a subset: make test-e2e-run E2E_PKGS="./test/e2e/core ./test/e2e/operator")

if ((E2E_P < 2)); then
	echo "e2e.sh: E2E_P=$E2E_P: the two groups need at least 2 test binaries at once" >&2
	exit 2
fi

# Which packages bring up a local Kubernetes: read from their imports, so
# a new such package joins the chain without a list to keep.
listing=$("$GO" list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' $E2E_PKGS) || {
	echo "e2e.sh: go list $E2E_PKGS failed: name packages that exist in E2E_PKGS" >&2
	exit 2
}
mapfile -t lines <<<"$listing"
kube=() other=()
for l in "${lines[@]}"; do
	pkg=${l%% *}
	if [[ " $l " == *" github.com/etcd-steward/steward/internal/localkube "* ]]; then
		kube+=("$pkg")
	else
		other+=("$pkg")
	fi
done

mkdir -p "$ARTIFACTS"
run() { # run NAME P PACKAGES...: one group, its events in ARTIFACTS/e2e-NAME.json
	local name=$1 p=$2
	shift 2
	"$GO" test -json -count=1 -p "$p" -parallel "$E2E_PARALLEL" -timeout "$E2E_TIMEOUT" \
		-artifacts -outputdir "$ARTIFACTS" "$@" |
		"$GO" run ./hack/testtimes -progress-only -save "$ARTIFACTS/e2e-$name.json"
}

echo "e2e: ${#kube[@]} local-Kubernetes packages one after the other (${kube[*]##*/}), ${#other[@]} others $((E2E_P - 1)) at a time"
pids=() files=()
if ((${#kube[@]} > 0)); then
	run kube 1 "${kube[@]}" &
	pids+=($!) files+=("$ARTIFACTS/e2e-kube.json")
fi
if ((${#other[@]} > 0)); then
	run others $((E2E_P - 1)) "${other[@]}" &
	pids+=($!) files+=("$ARTIFACTS/e2e-others.json")
fi
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done

cat "${files[@]}" >"$ARTIFACTS/e2e.json"
"$GO" run ./hack/testtimes -quiet <"$ARTIFACTS/e2e.json" || rc=1
exit $rc
