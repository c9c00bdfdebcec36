#!/usr/bin/env bash
# GPU-labelled rows for the predictor's dataset, in one short run on a lent GPU machine.
#
#   hack/gpu-sweep.sh prepare      # here (needs PyPI): wheels the GPU machine lacks -> .whl/
#   hack/gpu-sweep.sh run          # there, from the repo root, with .whl carried along
#
# The GPU machine has PyTorch, pynvml and click but no network and no msgspec; `prepare`
# downloads msgspec for its Python (3.12, x86-64). `run` installs it under /tmp/site, then
# measures the sweeps of SEEDS (default "0 1") on CUDA with the families taken in turn and a
# time budget (BUDGET_S, default 400 s, so a 10-minute call ends with time to spare), writing
# rows as they come to $OUT/dataset-gpu.csv (OUT defaults to results/). With RESUME set to an
# earlier GPU dataset (default: the committed one) its rows are kept and only the configs it
# lacks are measured. RETEST=N (default 0) first measures the first N configs again into
# $OUT/retest.csv, for the labels' test-retest noise. Commit the rows and retrain:
# `sparse-predictor train` uses GPU rows for the compute model when present.
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
    {  # what the rows were measured on, and which NVML probes this machine answers
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
      python3 - <<'EOF'
import os, torch, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
try:
    print("gpm supported:", bool(pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice))
except Exception as exc:
    print("gpm probe failed:", exc)
torch.ones(1, device="cuda")
pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
print("own pid", os.getpid(), "NVML compute pids", pids)
EOF
    } > "$out/gpu.txt" 2>&1 || true
    cat "$out/gpu.txt"
    seeds=()
    for s in ${SEEDS:-0 1}; do seeds+=(--seed "$s"); done
    if [ "${RETEST:-0}" -gt 0 ]; then
      PYTHONUNBUFFERED=1 python3 -m predictor.cli generate --device cuda --interleave \
        --limit "$RETEST" --out "$out/retest.csv" 2>&1 | tee "$out/retest.log"
    fi
    resume=()
    from="${RESUME-predictor/data/dataset-gpu-h200.csv}"
    if [ -n "$from" ] && [ -f "$from" ]; then
      cp "$from" "$out/dataset-gpu.csv"
      resume=(--resume)
    fi
    PYTHONUNBUFFERED=1 python3 -m predictor.cli generate --device cuda --interleave \
      "${seeds[@]}" "${resume[@]}" --budget-s "${BUDGET_S:-400}" --out "$out/dataset-gpu.csv" \
      2>&1 | tee "$out/generate.log"
    ;;
  *)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
