#!/usr/bin/env bash
# Build etcd, kube-apiserver and kube-scheduler from the Go module proxy.
#
#   hack/build-control-plane.sh          # build (or no-op) and print the bin dir on stdout
#
# Versions come from hack/versions.env (override with K8S_VERSION=... ETCD_VERSION=...).
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/sparse/control-plane/v<k8s>-etcd<etcd>/bin/
#
# - No-op (prints the path) when all three binaries are already there.
# - Idempotent and safe after an interruption: everything is built into a temp dir under the
#   cache root and moved into place with one rename at the end; a flock serialises concurrent
#   runs. Go's build cache makes a re-run after an interruption much cheaper.
# - k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces every staging module with
#   ./staging/...), so a throw-away wrapper module requires it and replaces every staging module
#   (list derived from the release's own go.mod) with its published v0.Y.Z tag.
# - Parallelism: GO_BUILD_P (default: number of CPUs, at most 2).
# Log lines go to stderr; only the final bin path goes to stdout.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_k8s_override=${K8S_VERSION:-}; _etcd_override=${ETCD_VERSION:-}
# shellcheck source=versions.env
. "$HERE/versions.env"
K8S=${_k8s_override:-$K8S_VERSION}; K8S=${K8S#v}
ETCD=${_etcd_override:-$ETCD_VERSION}; ETCD=${ETCD#v}

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/sparse/control-plane
DEST=$ROOT/v$K8S-etcd$ETCD
BIN=$DEST/bin
NCPU=$(nproc 2>/dev/null || echo 2)
P=${GO_BUILD_P:-$(( NCPU < 2 ? NCPU : 2 ))}

log() { printf '[build-control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
built() { [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-scheduler" ]; }

# Go's per-module chatter ("go: downloading ...", "go: added ...") is counted, not printed;
# everything else (errors included) goes to stderr as it comes.
quiet_go() {
  "$@" 2>&1 | awk '/^go: (downloading|added|upgraded|finding|extracting) /{n++; next} {print; fflush()}
    END {if (n) printf "%d go module messages (downloads) not shown\n", n}' >&2
}

START=$(date +%s)
if built; then echo "$BIN"; exit 0; fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then
  log "another build holds $ROOT/.build.lock; waiting"
  flock 9
fi
if built; then log "built by a concurrent run"; echo "$BIN"; exit 0; fi
# Leftovers of an interrupted run (we hold the lock, so nobody else is using them).
rm -rf "$ROOT"/.tmp-* "$DEST"

WORK=$(mktemp -d "$ROOT/.tmp-v$K8S-etcd$ETCD.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/bin; mkdir -p "$OUT"

export CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=mod -modcacherw"
log "k8s v$K8S, etcd v$ETCD, go $("$GO" env GOVERSION), -p $P, work dir $WORK"

# --- kube-apiserver + kube-scheduler -------------------------------------------------------
MINOR=$(echo "$K8S" | cut -d. -f2)
mkdir "$WORK/k8s"; cd "$WORK/k8s"
"$GO" mod init local/sparse-k8sbins >/dev/null 2>&1
log "resolving k8s.io/kubernetes@v$K8S"
GOMODFILE=$("$GO" mod download -json "k8s.io/kubernetes@v$K8S" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$GOMODFILE" ] || { log "cannot fetch go.mod of k8s.io/kubernetes@v$K8S"; exit 1; }
n=0
for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$GOMODFILE"); do
  "$GO" mod edit -replace="$m=$m@v0.${K8S#1.}"
  n=$((n+1))
done
[ "$n" -gt 0 ] || { log "no staging replaces found in $GOMODFILE"; exit 1; }
log "replaced $n staging modules with v0.${K8S#1.}"
GD=$(sed -n 's/^godebug \(.*\)$/\1/p' "$GOMODFILE" | head -1)
[ -n "$GD" ] && "$GO" mod edit -godebug="$GD"
log "go get (module downloads)"
quiet_go "$GO" get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S" "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S"
COMMIT=$("$GO" mod download -json "k8s.io/kubernetes@v$K8S" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -1)
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LD="-s -w"
for V in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $V.gitVersion=v$K8S -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean -X $V.buildDate=$BUILD_DATE"
  [ -n "$COMMIT" ] && LD="$LD -X $V.gitCommit=$COMMIT"
done
log "compiling kube-apiserver + kube-scheduler (slow: 10-30 min cold on 2 cores)"
quiet_go "$GO" build -p "$P" -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$LD" -o "$OUT/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler

# --- etcd (own module so its gRPC/otel versions cannot clash with Kubernetes') --------------
mkdir "$WORK/etcd"; cd "$WORK/etcd"
"$GO" mod init local/sparse-etcdbin >/dev/null 2>&1
log "go get go.etcd.io/etcd/server/v3@v$ETCD"
quiet_go "$GO" get -tool "go.etcd.io/etcd/server/v3@v$ETCD"
log "compiling etcd"
quiet_go "$GO" build -p "$P" -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD-goproxy" \
  -o "$OUT/etcd" go.etcd.io/etcd/server/v3

"$OUT/kube-apiserver" --version >&2
"$OUT/etcd" --version >&2

# --- atomic publish -----------------------------------------------------------------------
rm -rf "$DEST.old"; [ -e "$DEST" ] && mv "$DEST" "$DEST.old"
mkdir -p "$WORK/pub" && mv "$OUT" "$WORK/pub/bin"
printf 'k8s=v%s\netcd=v%s\ngo=%s\nbuilt=%s\n' "$K8S" "$ETCD" "$("$GO" env GOVERSION)" "$BUILD_DATE" > "$WORK/pub/VERSIONS"
mv "$WORK/pub" "$DEST"
rm -rf "$DEST.old"
log "done in $(( $(date +%s) - START ))s"
echo "$BIN"
