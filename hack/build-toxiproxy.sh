#!/usr/bin/env bash
# Build toxiproxy (network fault proxy for bench/embed) from the Go module proxy:
#
#   hack/build-toxiproxy.sh     # build (or no-op) and print the binary path on stdout
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/sparse/toxiproxy/server (bench/embed/servers.py looks
# there; SPARSE_TOXIPROXY overrides). TOXIPROXY_VERSION (default v2.5.0, the version measured in
# bench/reports/embed-latency) selects the module version. No-op when the binary exists.
set -euo pipefail

VERSION=${TOXIPROXY_VERSION:-v2.5.0}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
DEST=${XDG_CACHE_HOME:-$HOME/.cache}/sparse/toxiproxy
if [ -x "$DEST/server" ]; then
  echo "$DEST/server"
  exit 0
fi
TMP=$(mktemp -d "${DEST%/*}/.toxiproxy-XXXXXX" 2>/dev/null || { mkdir -p "${DEST%/*}"; mktemp -d "${DEST%/*}/.toxiproxy-XXXXXX"; })
trap 'rm -rf "$TMP"' EXIT
echo "building toxiproxy $VERSION (go install)" >&2
GOBIN="$TMP" "$GO" install "github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION" >&2
mkdir -p "$DEST"
mv "$TMP/server" "$DEST/server"
echo "$DEST/server"
