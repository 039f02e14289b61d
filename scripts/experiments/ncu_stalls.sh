#!/usr/bin/env bash
# Nsight Compute sections (speed of light, compute and memory workload, warp states, scheduler,
# occupancy) for the kernels named in scripts/experiments/ncu_stalls.sh's TARGETS, one text report each, into
# $1 (default out). Each target line: stage backend precision size params (scripts/experiments/ncu_mma_target.py).
# EXTRA_SECTIONS (e.g. "--section SourceCounters": the SASS lines where warps stall) and
# EXTRA_METRICS (a comma list, "regex:..." allowed) are added to every report.
set -uo pipefail
OUTDIR=${1:-out}
mkdir -p "$OUTDIR"
export PYTHONPATH=.
NCU=${NCU:-ncu}
TARGETS=${TARGETS:-"mma cuda bf16 4096 BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=3,frags=2
mma cuda bf16 4096 -
mma triton bf16 4096 -
double_buffered cuda fp32 4096 BM=64,BN=128,BK=16,WM=64,WN=32,TM=8,TN=8,pipeline=cp_async,stages=2,group=4"}
i=0
while read -r stage backend precision size params; do
  [ -z "$stage" ] && continue
  i=$((i+1))
  [ "$params" = "-" ] && params=""
  name="$OUTDIR/ncu-$i-$stage-$backend-$precision-$size.txt"
  echo "=== $stage $backend $precision $size $params -> $name"
  $NCU --target-processes all -k regex:matmul --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats ${EXTRA_SECTIONS:-} \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__cycles_elapsed.avg.per_second${EXTRA_METRICS:+,$EXTRA_METRICS} \
    python3 scripts/experiments/ncu_mma_target.py "$stage" "$backend" "$precision" "$size" "$params" > "$name" 2>&1
  echo "rc $?"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Stall|hmma|bank_conflicts|Registers Per|Achieved Occupancy" "$name" | head -30
done <<< "$TARGETS"
