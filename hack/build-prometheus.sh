#!/usr/bin/env bash
# Build Prometheus and promtool from the Go module proxy into ~/.cache/sparse/bin (for the
# e2e test of the pair worker, tests/e2e/test_pair_estimates.py). Prometheus 3.x is published
# as module versions v0.3xx.y of github.com/prometheus/prometheus. The build is large (about
# 20-40 min on two cores); run it in the background with nice.
set -euo pipefail
VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
BIN="${SPARSE_PROMETHEUS_BIN:-$HOME/.cache/sparse/bin}"
mkdir -p "$BIN"
if [[ -x "$BIN/prometheus" && -x "$BIN/promtool" ]]; then
  echo "prometheus and promtool already in $BIN"; exit 0
fi
GOBIN="$BIN" GOFLAGS="-buildvcs=false -p=${GO_PARALLEL:-1}" go install -ldflags="-s -w" \
  "github.com/prometheus/prometheus/cmd/prometheus@${VERSION}" \
  "github.com/prometheus/prometheus/cmd/promtool@${VERSION}"
"$BIN/prometheus" --version | head -1
