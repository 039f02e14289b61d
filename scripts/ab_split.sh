#!/usr/bin/env bash
# Same-run before/after of every stage on one GPU: the lab.compare run of an earlier tree
# (unpacked into DIR) and of this one, size by size, alternated so both see the same clocks.
# The earlier tree's `mma` ran Hopper's warpgroup MMA where it could (today's `wgmma` stage) and
# mma.sync under `mma:wgmma=0` (today's `mma`), so BEFORE_STAGES names both.
# Writes $OUT/{before,after}-<size>.csv (+ .env.json) and their logs.
# Usage: BEFORE_STAGES=all,mma:wgmma=0 bash scripts/ab_split.sh DIR SIZE [SIZE ...]
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
DIR=$1
shift
PRECISIONS=${PRECISIONS:-fp32,tf32,3xtf32,bf16,fp16}
export PYTHONUNBUFFERED=1
for size in "$@"; do
  (cd "$DIR" && PYTHONPATH=. timeout "${LIMIT:-280}" python3 -m lab.compare \
     --stage "${BEFORE_STAGES:-all}" --precision "$PRECISIONS" --sizes "$size" \
     --csv "$OUT/before-$size.csv") > "$OUT/before-$size.log" 2>&1
  tail -1 "$OUT/before-$size.log"
  PYTHONPATH=. timeout "${LIMIT:-280}" python3 -m lab.compare --stage "${AFTER_STAGES:-all}" \
     --precision "$PRECISIONS" --sizes "$size" --csv "$OUT/after-$size.csv" \
     > "$OUT/after-$size.log" 2>&1
  tail -1 "$OUT/after-$size.log"
done
