#!/usr/bin/env bash
# The before/after measurement of lab/timing.py's baseline protocol (docs/TRUST.md): the same
# plan run with --repeat 5 under each protocol, --cublas-timing once (one cuBLAS row per shape,
# timed before the stages: the older protocol) and adjacent (cuBLAS timed beside each row), then
# the spread of every row's % of cuBLAS over the 5 repeats, side by side.
# Usage on a GPU machine, from the repo root: bash scripts/spread_protocols.sh OUTDIR [stages] [sizes]
set -uo pipefail
DIR=${1:-out}; STAGES=${2:-tiled,vectorized}; SIZES=${3:-1025,4096}
mkdir -p "$DIR"
export PYTHONPATH=. PYTHONUNBUFFERED=1
for proto in once adjacent; do
  python3 -m lab.compare --stage "$STAGES" --sizes "$SIZES" --repeat 5 --cublas-timing "$proto" \
    --csv "$DIR/spread-$proto.csv" 2>&1 | tee "$DIR/spread-$proto.log" | grep -v '^  '
done
python3 scripts/spread_table.py "$DIR/spread-once.csv" "$DIR/spread-adjacent.csv" | tee "$DIR/spread-table.md"
