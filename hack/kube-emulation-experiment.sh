#!/usr/bin/env bash
# The experiment behind docs/kubernetes-upgrades.md "Emulation and the
# point of no return": what kube-apiserver NEW accepts as
# --emulated-version, what /version answers, and which feature gates and
# API paths differ between OLD, NEW emulating OLD's minor, and NEW.
#
#   hack/kube-emulation-experiment.sh [OLD NEW]   (default v1.35.4 v1.36.3)
#
# Needs the binaries of `make kube-binaries` (KUBE_CACHE, default
# .cache/kube) and an etcd (ETCD_CACHE, default .cache/etcd, its newest
# v3.6.*); runs everything on ADDR (default 127.0.251.99, ports 23790,
# 23800, 26443) in a temporary directory it removes.
set -euo pipefail
OLD=${1:-v1.35.4}
NEW=${2:-v1.36.3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KUBE_CACHE=${KUBE_CACHE:-$ROOT/.cache/kube}
ETCD_CACHE=${ETCD_CACHE:-$ROOT/.cache/etcd}
ADDR=${ADDR:-127.0.251.99}
ETCD=$(ls -d "$ETCD_CACHE"/v3.6.* | tail -1)/etcd
D=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT
openssl genrsa -out "$D/sa.key" 2048 2>/dev/null
openssl rsa -in "$D/sa.key" -pubout -out "$D/sa.pub" 2>/dev/null
echo "secret,admin,admin,system:masters" >"$D/tokens.csv"
"$ETCD" --data-dir "$D/etcd" --listen-client-urls "http://$ADDR:23790" --advertise-client-urls "http://$ADDR:23790" \
	--listen-peer-urls "http://$ADDR:23800" --initial-advertise-peer-urls "http://$ADDR:23800" \
	--initial-cluster "default=http://$ADDR:23800" >"$D/etcd.log" 2>&1 &
pids+=($!)
common=(--token-auth-file="$D/tokens.csv" --etcd-servers="http://$ADDR:23790" --service-account-issuer=https://kubernetes.default.svc
	--service-account-key-file="$D/sa.pub" --service-account-signing-key-file="$D/sa.key" --cert-dir="$D/certs"
	--bind-address="$ADDR" --secure-port=26443 --authorization-mode=AlwaysAllow --service-cluster-ip-range=10.96.0.0/12)
get() { curl -sk -H "Authorization: Bearer secret" "https://$ADDR:26443$1"; }
minor() { echo "$1" | sed -E 's/^v([0-9]+)\.([0-9]+)\..*/\1.\2/'; }
old_minor=$(minor "$OLD")
new_minor=$(minor "$NEW")
too_old="1.$(($(echo "$new_minor" | cut -d. -f2) - 4))"
too_new="1.$(($(echo "$new_minor" | cut -d. -f2) + 1))"

echo "== $NEW refusals"
for v in "$too_old" "$too_new" "${NEW#v}"; do
	err=$(timeout 20 "$KUBE_CACHE/$NEW/bin/kube-apiserver" "${common[@]}" --emulated-version="$v" 2>&1 |
		grep -m1 -oE 'err="[^"]*"' || true)
	echo "--emulated-version=$v: ${err:-accepted (ran 20 s)}"
done

# run NAME BINARY FLAGS...: serve until ready, record /version, the
# feature gates and the OpenAPI v3 paths, stop.
run() {
	local name=$1 bin=$2
	shift 2
	"$bin" "${common[@]}" "$@" >"$D/$name.log" 2>&1 &
	local pid=$!
	for _ in $(seq 1 120); do
		curl -sfk -H "Authorization: Bearer secret" "https://$ADDR:26443/readyz" >/dev/null 2>&1 && break
		sleep 1
	done
	echo "== $name /version: $(get /version | tr -d ' \n' | grep -oE '"(gitVersion|emulationMinor|minCompatibilityMinor)":"[^"]*"' | tr '\n' ' ')"
	get /metrics | grep '^kubernetes_feature_enabled' | sort >"$D/feat-$name"
	get /openapi/v3 | grep -o '"apis/[^"]*"' | sort >"$D/paths-$name"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}
run old "$KUBE_CACHE/$OLD/bin/kube-apiserver"
run emulating "$KUBE_CACHE/$NEW/bin/kube-apiserver" --emulated-version="$old_minor"
run new "$KUBE_CACHE/$NEW/bin/kube-apiserver"

python3 - "$D" <<'EOF'
import re, sys
d = sys.argv[1]
def feats(n):
    out = {}
    for l in open(f"{d}/feat-{n}"):
        m = re.match(r'kubernetes_feature_enabled\{name="([^"]+)",stage="[^"]*"\} (\d)', l)
        if m:
            out[m.group(1)] = m.group(2) == "1"
    return out
old, emu, new = feats("old"), feats("emulating"), feats("new")
both = set(old) & set(emu)
print(f"feature gates in old and emulating: {len(both)}, enabled differently: {sorted(k for k in both if old[k] != emu[k])}")
on = sorted(k for k, v in new.items() if v and not emu.get(k, False))
print(f"on in new, off or absent emulating: {len(on)}: {' '.join(on)}")
for a, b in (("old", "emulating"), ("emulating", "new")):
    pa, pb = set(open(f"{d}/paths-{a}")), set(open(f"{d}/paths-{b}"))
    print(f"OpenAPI v3 paths {a} vs {b}: {len(pa ^ pb)} differ")
EOF
