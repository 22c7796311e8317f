#!/usr/bin/env bash
# build-etcd.sh VERSION... : build etcd, etcdctl and etcdutl for released
# versions from the Go module proxy, cache them under .cache/etcd/vX.Y.Z, and
# import them into a Steward binary store (default .cache/store). Every
# version lands through `steward binaries import`, which writes the
# manifest (the SHA-256 of each file) Steward checks before it runs one; a
# stored version without a manifest is imported again (--force).
#
# A version whose cached binaries already report the right version is not
# rebuilt. A version that fails to build does not stop the others: every
# version built is imported, then the script exits 1 naming the failed ones. The etcd server module cannot be `go install`ed directly (its
# go.mod has replace directives), so each version gets a tiny wrapper module
# that requires the released modules and builds their main packages.
#
# Environment:
#   STEWARD      path to a steward binary used for the import (default: bin/steward,
#                built with `make build` when missing)
#   STORE        binary store to import into (default: .cache/store)
#   CACHE        build cache (default: .cache/etcd)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${CACHE:-$root/.cache/etcd}"
store="${STORE:-$root/.cache/store}"
steward="${STEWARD:-$root/bin/steward}"

if [ "$#" -eq 0 ]; then
	echo "usage: $0 VERSION..." >&2
	echo "example: $0 v3.5.35 v3.6.16 v3.7.3" >&2
	exit 2
fi

have_version() { # have_version BINARY VERSION
	# Capture first: with pipefail, `etcd --version | grep -q` fails when grep
	# exits early and etcd gets SIGPIPE.
	local out
	[ -x "$1" ] && out="$("$1" --version 2>/dev/null)" && grep -q "^etcd Version: ${2#v}\$" <<<"$out"
}

build_one() {
	local v="$1"
	case "$v" in v*) ;; *) v="v$v" ;; esac
	if ! [[ "$v" =~ ^v3\.[0-9]+\.[0-9]+$ ]]; then
		echo "build-etcd: $v is not an etcd release version (want v3.MINOR.PATCH)" >&2
		return 2
	fi
	local out="$cache/$v"
	if have_version "$out/etcd" "$v" && [ -x "$out/etcdctl" ] && [ -x "$out/etcdutl" ]; then
		echo "build-etcd: $v already built in $out"
		return 0
	fi
	local work="$cache/src-$v"
	rm -rf "$work"
	mkdir -p "$work/etcd" "$work/etcdctl" "$out"
	cat >"$work/etcd/main.go" <<'EOF'
// Command etcd is the etcd server, built from the released module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	cat >"$work/etcdctl/main.go" <<'EOF'
// Command etcdctl is etcd's client CLI, built from the released module.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
EOF
	(
		cd "$work"
		export GOFLAGS=-mod=mod GOWORK=off
		go mod init steward.local/etcd-build >/dev/null 2>&1
		go get "go.etcd.io/etcd/server/v3@$v" "go.etcd.io/etcd/api/v3@$v" \
			"go.etcd.io/etcd/client/v3@$v" "go.etcd.io/etcd/client/pkg/v3@$v" \
			"go.etcd.io/etcd/pkg/v3@$v" "go.etcd.io/etcd/etcdctl/v3@$v" \
			"go.etcd.io/etcd/etcdutl/v3@$v"
		go mod tidy
		# etcdutl's module root is itself a main package.
		go get "go.etcd.io/etcd/etcdutl/v3@$v"
		CGO_ENABLED=0 go build -trimpath -o "$out/etcd" ./etcd
		CGO_ENABLED=0 go build -trimpath -o "$out/etcdctl" ./etcdctl
		CGO_ENABLED=0 go build -trimpath -o "$out/etcdutl" go.etcd.io/etcd/etcdutl/v3
	)
	if ! have_version "$out/etcd" "$v"; then
		echo "build-etcd: built $out/etcd does not report version $v" >&2
		return 1
	fi
	rm -rf "$work"
	echo "build-etcd: built $v in $out"
}

# Build every version, and import every one built, even when another
# fails: a failed version is named at the end and the script exits
# non-zero, but the versions built before and after it are usable. Each
# build runs in a subshell with errexit of its own (errexit does not apply
# inside a function called as an `if` condition).
built=()
failed=()
for v in "$@"; do
	set +e
	(set -e; build_one "$v")
	rc=$?
	set -e
	case "$v" in v*) ;; *) v="v$v" ;; esac
	if [ "$rc" -eq 0 ]; then
		built+=("$v")
	else
		echo "build-etcd: building $v failed (exit $rc)" >&2
		failed+=("$v")
	fi
done

if [ "${NO_IMPORT:-}" != "1" ] && [ "${#built[@]}" -gt 0 ]; then
	if [ ! -x "$steward" ]; then
		(cd "$root" && make build)
	fi
	for v in "${built[@]}"; do
		# A version directory without a manifest (a store laid out by hand or
		# by an older script) cannot be checked before launch, and Steward
		# refuses to run its binaries: import it again, which writes the
		# manifest. --force sets the unrecorded directory aside
		# (etcd-vX.Y.Z.replaced-*), never deletes it.
		force=""
		if [ -d "$store/etcd-$v" ] && [ ! -f "$store/etcd-$v/manifest.json" ]; then
			echo "build-etcd: $store/etcd-$v has no manifest.json: importing $v again to record its SHA-256"
			force="--force"
		fi
		if ! "$steward" binaries import --store "$store" --version "$v" $force "$cache/$v"; then
			echo "build-etcd: importing $v into $store failed" >&2
			failed+=("$v")
		fi
	done
fi

if [ "${#failed[@]}" -gt 0 ]; then
	echo "build-etcd: failed: ${failed[*]} (the others are built$([ "${NO_IMPORT:-}" = 1 ] || echo " and imported into $store"))" >&2
	exit 1
fi
