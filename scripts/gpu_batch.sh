#!/usr/bin/env bash
# One GPU call that does many things, each step's output under $OUT/work, packed at the end into
# $OUT/batch.tgz (the device returns at most 8 files). Steps are named on the command line:
#   doctor   python -m lab.doctor --json
#   trust    scripts/trust_measure.py (docs/TRUST.md's measurements)
#   tests    pytest -m gpu on the files in $TESTS (default: every GPU test), stopped after $TEST_LIMIT s
#   compare  python -m lab.compare with $STAGES, $SIZES and $COMPARE_ARGS, CSV $NAME.csv
#   tune     python -m lab.autotune with $TUNE_STAGES, $TUNE_SIZES, $TUNE_ARGS (log $TUNE_NAME.log)
#   ceiling  scripts/experiments/mma_ceiling.py (mma.sync's rate from registers alone)
#   stalls   scripts/experiments/ncu_stalls.sh (ncu sections of a few kernels; $TARGETS chooses)
#   counters scripts/experiments/bank_conflicts_counters.sh
# Usage (device): LAB_COMMIT=<sha> STAGES=... SIZES=... bash scripts/gpu_batch.sh doctor compare
set -uo pipefail
OUT=${OUT:-out}
W="$OUT/work"
mkdir -p "$W"
export PYTHONPATH=. PYTHONUNBUFFERED=1
export LAB_TUNE_CACHE=${LAB_TUNE_CACHE:-$W/autotune.json}
[ -f results/autotune.json ] && [ ! -f "$LAB_TUNE_CACHE" ] && cp results/autotune.json "$LAB_TUNE_CACHE"
NAME=${NAME:-compare}
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    doctor) python3 -m lab.doctor --json "$W/doctor.json" 2>&1 | tee "$W/doctor.txt" ;;
    trust) python3 scripts/trust_measure.py "$W" 2>&1 | tee "$W/trust.log" | tail -30 ;;
    tests) # SIGINT at $TEST_LIMIT seconds: pytest then prints its summary and writes the junit file
           timeout -s INT "${TEST_LIMIT:-540}" python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
             --junitxml "$W/pytest-gpu.xml" ${TESTS:-} 2>&1 | tee "$W/pytest-gpu.log" | tail -25 ;;
    compare) python3 -m lab.compare --stage "$STAGES" --sizes "$SIZES" ${COMPARE_ARGS:-} \
               --csv "$W/$NAME.csv" 2>&1 | tee "$W/$NAME.log" | grep -v '^  ' ;;
    tune) python3 -m lab.autotune --stage "$TUNE_STAGES" --sizes "$TUNE_SIZES" ${TUNE_ARGS:-} 2>&1 \
            | tee "$W/${TUNE_NAME:-tune}.log" | grep -v '^  .* search \[' | tail -40 ;;
    ceiling) python3 scripts/experiments/mma_ceiling.py "$W/mma-ceiling.csv" 2>&1 | tee "$W/mma-ceiling.log" \
               | grep best ;;
    stalls) bash scripts/experiments/ncu_stalls.sh "$W" 2>&1 | tee "$W/stalls.log" | tail -80 ;;
    counters) bash scripts/experiments/bank_conflicts_counters.sh "$W" 2>&1 | tee "$W/counters.log" | tail -30 ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -czf "$OUT/batch.tgz" -C "$OUT" work && ls -la "$W"
