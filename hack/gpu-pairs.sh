#!/usr/bin/env bash
# Co-located pairs of the predictor's model families on one GPU, measured on a lent GPU machine
# (one call, under 10 minutes of device time):
#
#   hack/gpu-pairs.sh              # on the GPU machine, from the repo root
#
# For each family of predictor/data/dataset-gpu-h200.csv one config runs in its own worker
# process; every worker alone (solo step time, NVML GPU / memory-controller utilisation,
# process memory, GPM SM activity and DRAM bandwidth), then every pair of families at once,
# first with plain time-slicing, then under MPS with per-worker limits (active-thread
# percentage from the config's SM activity, pinned-memory limit). Rows go to
# $OUT/gpu-pairs.csv (OUT defaults to results/) as they come, and the whole CSV is printed to
# stdout at the end in case files do not come back. SECONDS_PER_RUN (default 4) per measurement;
# BUDGET_S (default 420) stops starting new pairs. Score the shipped interference model on
# the result with `sparse-bench interference evaluate --pairs results/gpu-pairs.csv` (add
# `mode == timeslice` / `mps` filters by splitting the file), or add it to the training data.
#
# Needs torch and pynvml (present on the lent machines) and nvidia-cuda-mps-control for the
# MPS half (skipped with a message when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results}"
mkdir -p "$out"
modes="timeslice"
if command -v nvidia-cuda-mps-control >/dev/null; then
  modes="timeslice,mps"
else
  echo "nvidia-cuda-mps-control not found: time-slicing only" >&2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >&2 || true
PYTHONUNBUFFERED=1 exec timeout "${TIMEOUT_S:-560}" python3 -m bench.interference.gpupairs \
  --out "$out/gpu-pairs.csv" --seconds "${SECONDS_PER_RUN:-4}" --budget-s "${BUDGET_S:-420}" \
  --modes "${MODES:-$modes}"
