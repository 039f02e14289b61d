#!/usr/bin/env bash
# Same-run before/after on one GPU: the lab.compare run of an earlier tree (its files unpacked
# into DIR, e.g. `git archive <commit> lab cuda_kernels triton_kernels | tar -x -C DIR`) and of
# this one, size by size, alternated ROUNDS times so that both see the same clocks.
# BEFORE_STAGES / AFTER_STAGES name the stages on each side (default: all), for a stage that the
# earlier tree spelled differently (e.g. BEFORE_STAGES=all,mma:wgmma=0 against today's mma and
# wgmma stages); PRECISIONS (default: all five); LIMIT seconds per lab.compare run.
# Writes $OUT/{before,after}-<size>[-<round>].csv (+ .env.json) and their logs.
# Usage: bash scripts/ab.sh DIR SIZE [SIZE ...]
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
DIR=$1
shift
PRECISIONS=${PRECISIONS:-fp32,tf32,3xtf32,bf16,fp16}
ROUNDS=${ROUNDS:-1}
export PYTHONUNBUFFERED=1
for round in $(seq 1 "$ROUNDS"); do
  for size in "$@"; do
    tag=$size$([ "$ROUNDS" -gt 1 ] && echo "-$round")
    (cd "$DIR" && PYTHONPATH=. timeout "${LIMIT:-280}" python3 -m lab.compare \
       --stage "${BEFORE_STAGES:-all}" --precision "$PRECISIONS" --sizes "$size" \
       --csv "$OUT/before-$tag.csv") > "$OUT/before-$tag.log" 2>&1
    tail -1 "$OUT/before-$tag.log"
    PYTHONPATH=. timeout "${LIMIT:-280}" python3 -m lab.compare --stage "${AFTER_STAGES:-all}" \
       --precision "$PRECISIONS" --sizes "$size" --csv "$OUT/after-$tag.csv" \
       > "$OUT/after-$tag.log" 2>&1
    tail -1 "$OUT/after-$tag.log"
  done
done
