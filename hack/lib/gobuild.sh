# gobuild.sh: the steps hack/build-kube.sh and hack/build-coredns.sh share
# to build a release of a Go module from the Go module proxy, reproducibly,
# into a cache laid out as CACHE/<version>/{bin/,stamp,src/,.lock}: sourced
# (not run) after the script set gb_tool, its name for messages.
#
#   gb_open CACHE VERSION   make CACHE/VERSION/bin, take its lock (one build
#                           of a version at a time: two worktrees may share
#                           a cache); sets dir, bin, stamp
#   gb_env                  the wrapper's own Go settings only
#   gb_download MOD@V WHAT HINT
#                           go mod download -json; on failure the proxy's
#                           error, after "WHAT:" and before HINT (exit 1);
#                           sets info (gb_field NAME reads it)
#   gb_wrapper MODULE       an empty wrapper module DIR/src (cwd), and
#                           DIR/bin.new for the build's output
#   gb_build LDFLAGS OUT PKGS...
#                           go build -trimpath -ldflags LDFLAGS -o OUT
#   gb_install HEADER ALL BUILT
#                           the stamp (HEADER, the entries of ALL kept that
#                           were not BUILT), then each of BUILT moved from
#                           bin.new to bin and recorded in the stamp once in
#                           place
#
# A stamp line "NAME VERSION" says bin/NAME is that version; the scripts
# check it (and what the binary reports) before building again.

gb_open() {
	local cache="$1" version="$2"
	mkdir -p "$cache"
	cache="$(cd "$cache" && pwd)"
	dir="$cache/$version"
	bin="$dir/bin"
	stamp="$dir/stamp"
	mkdir -p "$bin"
	exec 9>"$dir/.lock"
	flock 9
}

# gb_env: only the wrapper's own settings: a GOFLAGS from the caller
# (-mod=vendor, -tags, ...) or a go.work above would change what is built;
# the cache may lie inside a Git checkout, whose state must not be stamped
# in. CGO_ENABLED=0: static binaries, which the images of cmd/localkube
# need.
gb_env() {
	export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off CGO_ENABLED=0
}

gb_download() {
	local modver="$1" what="$2" hint="$3"
	info="$(go mod download -json "$modver" 2>&1)" || {
		echo "$gb_tool: $what ($(go env GOPROXY)):" >&2
		printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/  \1/p' | sed 's/\\n\\t/ /g' >&2
		echo "$gb_tool: $hint" >&2
		exit 1
	}
}

# gb_field NAME: the string field NAME of the module's download (Dir,
# GoMod, Sum, Info, Hash, ...).
gb_field() { printf '%s\n' "$info" | sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p"; }

gb_wrapper() {
	src="$dir/src"
	rm -rf "$src" "$dir/bin.new"
	mkdir -p "$src" "$dir/bin.new"
	cd "$src"
	go mod init "$1" >/dev/null 2>&1
}

gb_build() {
	local ldflags="$1" out="$2"
	shift 2
	go build -trimpath -ldflags "$ldflags" -o "$out" "$@"
}

gb_install() {
	local header="$1" all="$2" built="$3" c
	# Replace the binaries, then record them: a binary is in the stamp
	# only once it is in place.
	{
		echo "$header"
		for c in $all; do
			case " $built " in *" $c "*) continue ;; esac
			grep -qx "$c $version" "$stamp" 2>/dev/null && echo "$c $version"
		done
	} >"$stamp.tmp" || true
	mv "$stamp.tmp" "$stamp"
	for c in $built; do
		mv -f "$dir/bin.new/$c" "$bin/$c"
		echo "$c $version" >>"$stamp"
	done
	rmdir "$dir/bin.new"
}
