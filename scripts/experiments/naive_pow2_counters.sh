#!/usr/bin/env bash
# Why naive is 3x slower at 1024^3 than at 1025^3: Nsight Compute's L1 counters for the naive CUDA
# kernel at several sizes (one launch each, after a warm-up launch). Needs a GPU and ncu.
# Writes $OUT/naive-l1-<size>.csv (raw ncu CSV) and $OUT/naive-l1-metrics.txt (the L1 metrics
# this ncu knows that count conflicts). Usage: bash scripts/experiments/naive_pow2_counters.sh 1024 1025 ...
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=.
ncu --query-metrics 2>/dev/null | awk '{print $1}' | grep -E '^l1tex__' \
  | grep -E '(conflict|set_access|wavefront)' | grep -E '(global_op_ld|mem_lg|_lg_)' \
  > "$OUT/naive-l1-metrics.txt"
METRICS=$(sed 's/$/.sum/' "$OUT/naive-l1-metrics.txt" | paste -sd, -)
METRICS="$METRICS,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio"
for n in "$@"; do
  ncu --clock-control none --kernel-name matmul_naive --launch-skip 1 --launch-count 1 \
      --metrics "$METRICS" --csv --page raw \
      python3 -c "
import torch
from lab import check
from cuda_kernels import naive
a, b = check.make_inputs($n, $n, $n, 0, 'cuda')
c = torch.empty($n, $n, device='cuda')
launch = naive.prepare(a, b, c)
launch(); launch(); torch.cuda.synchronize()
" > "$OUT/naive-l1-$n.csv" 2>> "$OUT/naive-l1.err"
  echo "$n: $(wc -l < "$OUT/naive-l1-$n.csv") lines"
done
