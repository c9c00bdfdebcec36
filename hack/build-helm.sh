#!/usr/bin/env bash
# Build Helm 3 from the Go module proxy (helm.sh/helm/v3 has no replace directives, so a plain
# `go install` works).
#
#   hack/build-helm.sh          # build (or no-op) and print the helm binary path on stdout
#
# Version: HELM_VERSION from hack/versions.env (the environment overrides it). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sparse/helm/v<version>/bin/helm
# No-op when the binary exists. Built into a temp dir and moved into place with one rename, so an
# interrupted run leaves nothing half-built; a flock serialises concurrent runs.
# Log lines go to stderr; only the binary path goes to stdout.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ENV_HELM=${HELM_VERSION:-}
# shellcheck source=versions.env
. "$HERE/versions.env"
HELM=${ENV_HELM:-$HELM_VERSION}; HELM=${HELM#v}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/sparse/helm
DEST=$ROOT/v$HELM
NCPU=$(nproc 2>/dev/null || echo 2)
P=${GO_BUILD_P:-$(( NCPU < 2 ? NCPU : 2 ))}

log() { printf '[build-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Go's per-module chatter ("go: downloading ...", "go: added ...") is counted, not printed;
# everything else (errors included) goes to stderr as it comes.
quiet_go() {
  "$@" 2>&1 | awk '/^go: (downloading|added|upgraded|finding|extracting) /{n++; next} {print; fflush()}
    END {if (n) printf "%d go module messages (downloads) not shown\n", n}' >&2
}

START=$(date +%s)
if [ -x "$DEST/bin/helm" ]; then echo "$DEST/bin/helm"; exit 0; fi
mkdir -p "$ROOT"
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then log "another build holds $ROOT/.build.lock; waiting"; flock 9; fi
if [ -x "$DEST/bin/helm" ]; then echo "$DEST/bin/helm"; exit 0; fi
rm -rf "$ROOT"/.tmp-* "$DEST"

WORK=$(mktemp -d "$ROOT/.tmp-v$HELM.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/pub/bin"
export CGO_ENABLED=0 GOWORK=off GOFLAGS="-modcacherw"
log "helm v$HELM, go $("$GO" env GOVERSION), -p $P"
# Stamp versions the way Helm's Makefile does. Without the k8sVersion* variables, Helm's default
# .Capabilities.KubeVersion (helm template, helm lint) stays at v1.20.0 and charts with a
# kubeVersion constraint fail to render. They come from the client-go version in Helm's go.mod.
GOMODFILE=$("$GO" mod download -json "helm.sh/helm/v3@v$HELM" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
KMINOR=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$GOMODFILE" | head -1)
[ -n "$KMINOR" ] || { log "cannot find k8s.io/client-go in $GOMODFILE"; exit 1; }
H=helm.sh/helm/v3
LD="-s -w -X $H/internal/version.version=v$HELM -X $H/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  LD="$LD -X $H/$pkg.k8sVersionMajor=1 -X $H/$pkg.k8sVersionMinor=$KMINOR"
done
GOBIN="$WORK/pub/bin" quiet_go "$GO" install -p "$P" -trimpath -ldflags "$LD" "$H/cmd/helm@v$HELM"
"$WORK/pub/bin/helm" version --short >&2
printf 'helm=v%s\ndefault-kube=v1.%s.0\ngo=%s\nbuilt=%s\n' "$HELM" "$KMINOR" "$("$GO" env GOVERSION)" "$(date -u +%FT%TZ)" \
  > "$WORK/pub/VERSIONS"
mv "$WORK/pub" "$DEST"
log "done in $(( $(date +%s) - START ))s"
echo "$DEST/bin/helm"
