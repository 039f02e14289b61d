#!/usr/bin/env bash
# Before/after timing in one command on a GPU machine: the same lab.compare run on an earlier tree (its files
# unpacked into DIR, e.g. `git archive <commit> | tar -x -C DIR`) and on this one, alternated
# ROUNDS times so that both see the same clocks. Writes $OUT/before-<i>.csv and $OUT/after-<i>.csv
# (with their .env.json) and appends both runs' output to $OUT/ab.log.
# Usage: bash scripts/ab_4096.sh DIR [ROUNDS] [lab.compare args...]
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
DIR=$1
ROUNDS=${2:-2}
shift 2 || shift $#
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--stage all --sizes 4096)
export PYTHONUNBUFFERED=1
for i in $(seq 1 "$ROUNDS"); do
  echo "== before, round $i" >> "$OUT/ab.log"
  (cd "$DIR" && PYTHONPATH=. python3 -m lab.compare "${ARGS[@]}" --csv "$OUT/before-$i.csv") >> "$OUT/ab.log" 2>&1
  echo "== after, round $i" >> "$OUT/ab.log"
  PYTHONPATH=. python3 -m lab.compare "${ARGS[@]}" --csv "$OUT/after-$i.csv" >> "$OUT/ab.log" 2>&1
  tail -2 "$OUT/ab.log"
done
