#!/usr/bin/env bash
# One command that checks and times many stages on a GPU machine: GPU tests, then lab.compare
# with a CSV. Usage (on the GPU machine, from the repo root):
#   bash scripts/gpu_run.sh "<stages>" "<sizes>" [extra lab.compare args]
# Writes everything under $OUT (or ./out): pytest log, compare log, CSV + env JSON.
# The device's copy of the tree has no .git: put the commit into the command you send, e.g.
#   LAB_COMMIT=<output of `git rev-parse --short HEAD` here> LAB_DIRTY=0 bash scripts/gpu_run.sh ...
# so that the .env.json beside the CSV names the code that ran.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
STAGES=${1:-all}
SIZES=${2:-1024,1025,2048,4096}
shift 2 || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/nvidia-smi.txt"
if [ "${SKIP_PYTEST:-0}" != 1 ]; then
  python3 -m pytest -q -m gpu -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
fi
python3 -m lab.compare --stage "$STAGES" --sizes "$SIZES" --csv "$OUT/compare.csv" "$@" 2>&1 | tee "$OUT/compare.log"
