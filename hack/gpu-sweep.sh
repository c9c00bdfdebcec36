#!/usr/bin/env bash
# GPU-labelled rows for the predictor's dataset, in one short run on a lent GPU machine.
#
#   hack/gpu-sweep.sh prepare      # here (needs PyPI): wheels the GPU machine lacks -> .whl/
#   hack/gpu-sweep.sh run          # there, from the repo root, with .whl carried along
#
# The GPU machine has PyTorch, pynvml and click but no network and no msgspec; `prepare`
# downloads msgspec for its Python (3.12, x86-64). `run` installs it under /tmp/site, then
# measures the sweep on CUDA with the families taken in turn and a time budget (BUDGET_S,
# default 420 s, so a 10-minute call ends with time to spare), writing rows as they come to
# $OUT/dataset-gpu.csv (OUT defaults to results/). Merge the rows into the committed dataset
# and retrain: `sparse-predictor train` uses GPU rows for the compute model when present.
set -euo pipefail
cd "$(dirname "$0")/.."

MSGSPEC_VERSION="${MSGSPEC_VERSION:-0.23.0}"  # any release with a cp312 wheel

case "${1:-}" in
  prepare)
    mkdir -p .whl
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl "msgspec==${MSGSPEC_VERSION}"
    ls -l .whl
    ;;
  run)
    out="${OUT:-results}"
    mkdir -p "$out"
    if compgen -G ".whl/*.whl" >/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
      export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" || true
    PYTHONUNBUFFERED=1 python3 -m predictor.cli generate --device cuda --interleave \
      --budget-s "${BUDGET_S:-420}" --out "$out/dataset-gpu.csv" 2>&1 | tee "$out/generate.log"
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
