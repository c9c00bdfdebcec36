#!/bin/bash
for k in 1 2; do
  for t in base head; do
    if [ $t = base ]; then d=/tmp/base_nov30; else d=/work/main; fi
    echo "== $t run$k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > /work/runs/ab/$t-run$k.txt
    (cd $d && .venv/bin/python -m bench.latency --out /work/runs/ab/$t-run$k.json) >> /work/runs/ab/$t-run$k.txt 2>&1
    echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /work/runs/ab/$t-run$k.txt
  done
done
echo done > /work/runs/ab/DONE
