#!/usr/bin/env bash
# Build Helm 3 from the Go module proxy (helm.sh/helm/v3 has no replace directives, so a plain
# `go install` works).
#
#   hack/build-helm.sh          # build (or no-op) and print the helm binary path on stdout
#
# Version: HELM_VERSION (default below). Output:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sparse/helm/v<version>/bin/helm
# No-op when the binary exists. Built into a temp dir and moved into place with one rename, so an
# interrupted run leaves nothing half-built; a flock serialises concurrent runs.
# Log lines go to stderr; only the binary path goes to stdout.
set -euo pipefail

HELM=${HELM_VERSION:-3.22.0}; HELM=${HELM#v}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/sparse/helm
DEST=$ROOT/v$HELM
NCPU=$(nproc 2>/dev/null || echo 2)
P=${GO_BUILD_P:-$(( NCPU < 2 ? NCPU : 2 ))}

log() { printf '[build-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

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
# Stamp the version the way Helm's Makefile does (internal/version.version).
GOBIN="$WORK/pub/bin" "$GO" install -p "$P" -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v3/cmd/helm@v$HELM" >&2
"$WORK/pub/bin/helm" version --short >&2
printf 'helm=v%s\ngo=%s\nbuilt=%s\n' "$HELM" "$("$GO" env GOVERSION)" "$(date -u +%FT%TZ)" \
  > "$WORK/pub/VERSIONS"
mv "$WORK/pub" "$DEST"
log "done in $(( $(date +%s) - START ))s"
echo "$DEST/bin/helm"
