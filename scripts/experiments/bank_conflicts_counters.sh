#!/usr/bin/env bash
# The shared-memory bank counters behind docs/stages/bank_conflicts.md, on a GPU machine with ncu.
#
#   bash scripts/experiments/bank_conflicts_counters.sh            # N=2048 by default; OUT=out by default
#   PARTS=table bash scripts/experiments/bank_conflicts_counters.sh    # only part 1 (about 2-3 minutes)
#   PARTS=sass  bash scripts/experiments/bank_conflicts_counters.sh    # only part 2 (about 4-6 minutes)
#
# Part 1 ("table"): python -m lab.profile on the CUDA variants (fix = none, pad, swizzle, raw at
#   BK = 8; none and swizzle at BK = 16) and cuBLAS, layout nn (lab.profile builds row-major
#   operands only): the lab's usual table, which already has the hardware shared-memory counters
#   (lab/ncu.py METRICS: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum and
#   l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum) next to stalls and duration.
#   -> $OUT/bank_conflicts-profile-$N.csv
# Part 2 ("sass"): ncu run directly (lab.ncu.ncu_command: one launch inside the NVTX range
#   lab_profile, clocks untouched) on CUDA variants in layouts nn and nt and on the Triton twin
#   (nn, nt, nn with num_stages=3), with METRICS below: the same hardware counters plus the
#   instruction-level ones of the Source page (smsp__sass_*: shared instructions executed and
#   their wavefronts, attributed per SASS instruction). Each CUDA row also gets the bank model's
#   prediction (tests/test_bank_conflicts.py) for the same variant, so measured and predicted sit
#   side by side (model_ld_wf: lanes sharing a float4 share a pass; model_ld_wf_q: 128-bit loads
#   served per quarter warp; the page expects the measurement between the two).
#   -> $OUT/bank_conflicts-counters-$N.csv (one row per launch; metric columns in base units; a
#   metric this ncu does not know is dropped, retried, and listed in the "dropped" column; one
#   that ncu accepts but leaves without a value is listed in the "empty" column).
#   Computed columns: sass_st_excess = SASS-level store wavefronts - the conflict-free minimum
#   (model_st_wf - model_st_conf: 1 per STS, 4 per STS.128), i.e. the store bank conflicts of the
#   instructions themselves (ncu 2025.3 has no per-instruction bank-conflict counter for plain
#   LDS/STS: smsp__sass_l1tex_data_bank_conflicts_* exists only for LDGSTS, LDSM and STSM, see
#   $OUT/bank_conflicts-metrics.txt); hw_st_extra / hw_ld_extra = the l1tex wavefronts minus the
#   SASS-level ones, the passes the L1 data stage made that no shared instruction accounts for.
# Also: $OUT/bank_conflicts-metrics.txt (every shared-memory wavefront/conflict/ideal metric this
#   ncu knows), $OUT/bank_conflicts-triton-layouts.txt (the twin's shared layouts as this
#   machine's Triton compiles them), $OUT/bank_conflicts-env.txt, $OUT/bank_conflicts.log.
#
# Why both kinds of counter: at BK = 8 the bank model says vectorized's store (fix=none) is
# conflict-free, yet l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st read about 0.64M at
# 2048^3 for vectorized (and 20M for tiled's conflict-free stores at 4096^3,
# results/2026-11-22-h100/05-profile-ladder-ncu.csv). If the smsp__sass_* conflicts read 0 where
# the model says 0 and the l1tex figure stays about the same for none, pad and swizzle, that
# figure is not the scatter's doing; fix=raw (2-way by the model) is the positive control.
# Measured on an NVIDIA H100 80GB HBM3: results/2026-11-23-h100/01-bank_conflicts-*; what held
# and what did not is in docs/stages/bank_conflicts.md ("Measured: the counters"). That run had
# smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_{st,ld} in METRICS, which that ncu
# (2025.3.1) does not have: their columns came back empty. They are replaced by the computed
# columns above and by the LDGSTS counters it does have.
set -uo pipefail
OUT=${OUT:-out}
N=${N:-2048}
PARTS=${PARTS:-table,sass}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
LOG="$OUT/bank_conflicts.log"
: > "$LOG"

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
  ncu --version 2>&1 | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/bank_conflicts-env.txt" 2>&1
cat "$OUT/bank_conflicts-env.txt"

ncu --query-metrics 2>/dev/null | awk '{print $1}' | grep -E 'shared' \
  | grep -E '(wavefront|conflict|ideal|excessive)' > "$OUT/bank_conflicts-metrics.txt"
echo "$(wc -l < "$OUT/bank_conflicts-metrics.txt") shared-memory metric names -> $OUT/bank_conflicts-metrics.txt"

python3 - > "$OUT/bank_conflicts-triton-layouts.txt" 2>> "$LOG" <<'EOF'
import json, triton
from triton_kernels.bank_conflicts import shared_layouts
print("triton", triton.__version__)
for layout in ("nn", "nt"):
    for stages in (1, 3):
        print(layout, f"num_stages={stages}", json.dumps(shared_layouts(layout, num_stages=stages),
                                                         indent=1))
EOF
echo "Triton's shared layouts -> $OUT/bank_conflicts-triton-layouts.txt"

if [[ ",$PARTS," == *",table,"* ]]; then
  echo "part 1: lab.profile at $N^3 (CUDA variants + cuBLAS)"
  python3 -m lab.profile --backend cuda --size "$N" --csv "$OUT/bank_conflicts-profile-$N.csv" \
    --stage bank_conflicts:fix=none --stage bank_conflicts:fix=pad \
    --stage bank_conflicts:fix=swizzle --stage bank_conflicts:fix=raw \
    --stage bank_conflicts:fix=none,BK=16 --stage bank_conflicts:fix=swizzle,BK=16 \
    2>> "$LOG" | tail -40
fi

if [[ ",$PARTS," == *",sass,"* ]]; then
  echo "part 2: ncu with instruction-level shared-memory counters at $N^3"
  python3 - "$OUT" "$N" <<'EOF' 2>> "$LOG"
import csv, subprocess, sys, time
from pathlib import Path

from lab import ncu as N
from lab.profile import kernel_filter
from lab.stages import parse_variants

out, n = Path(sys.argv[1]), int(sys.argv[2])
# The metrics (ncu 2025.3 names, sm_90). Hardware counters of the L1TEX data stage, then the
# instruction-level (SASS-attributed) counters the Source page uses. ncu 2025.3 has no
# instruction-level bank-conflict counter for plain LDS/STS (only for LDGSTS, LDSM, STSM): the
# store conflicts of the instructions are computed below (sass_st_excess).
METRICS = [
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
]
RUNS = [  # (variant, backend, layout)
    *((f"bank_conflicts:fix={f}", "cuda", "nn") for f in ("none", "pad", "swizzle", "raw")),
    *((f"bank_conflicts:fix={f}", "cuda", "nt") for f in ("none", "swizzle", "raw")),
    *((f"bank_conflicts:fix={f},BK=16", "cuda", "nn") for f in ("none", "pad", "swizzle", "raw")),
    *((f"bank_conflicts:fix={f},BK=32", "cuda", "nn") for f in ("none", "swizzle")),
    ("bank_conflicts", "triton", "nn"), ("bank_conflicts", "triton", "nt"),
    ("bank_conflicts:num_stages=3", "triton", "nn"),
]
CHILD = r"""
import sys, torch
from lab import check
from lab.ncu import NVTX_RANGE
from lab.stages import parse_variants
spec, backend, layout, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
v = parse_variants([spec])[0]
a, b = check.make_inputs(n, n, n, 0, "cuda", layout=layout)
c = torch.empty((n, n), device="cuda")
launch = v.stage.module(backend).prepare(a, b, c, **v.params_for(backend))
launch()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push(NVTX_RANGE)
launch()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
r = check.check(launch, c, check.reference(a, b), n)
print(f"child {spec} {backend} {layout}: check {'passed' if r.passed else 'FAILED ' + r.reason}",
      file=sys.stderr)
"""

try:  # the bank model of tests/test_bank_conflicts.py: the prediction for each CUDA row
    sys.path.insert(0, "tests")
    import test_bank_conflicts as model
except Exception as exc:  # pragma: no cover - e.g. no pytest on this machine
    print(f"no bank model ({exc}); prediction columns left empty", file=sys.stderr)
    model = None


def predicted(variant, layout):
    if model is None:
        return {}
    p = variant.params_for("cuda")
    cfg = model.Config(p["BM"], p["BN"], p["BK"], p["TM"], p["TN"])
    if n % cfg.BM or n % cfg.BN or n % cfg.BK:
        return {}
    s = model.summary(cfg, p["fix"], layout)
    steps = (n // cfg.BM) * (n // cfg.BN) * (n // cfg.BK)  # block k-steps
    return {f"model_{k}": v * steps for k, v in s.items() if k in
            ("st_wf", "st_conf", "ld_wf", "ld_conf", "ld_wf_q")}


def computed(row):
    """sass_st_excess: the SASS-level store wavefronts above the conflict-free minimum (the
    model's wavefronts less its conflicts), i.e. the instructions' own store bank conflicts;
    hw_{st,ld}_extra: l1tex wavefronts not accounted for by any shared instruction."""
    def get(name):
        value = row.get(name)
        return None if value is None or value != value else value  # None or NaN -> None

    out = {}
    sass_st = get("smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
    sass_ld = get("smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")
    hw_st = get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
    hw_ld = get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")
    if sass_st is not None and row.get("model_st_wf") is not None:
        out["sass_st_excess"] = sass_st - (row["model_st_wf"] - row["model_st_conf"])
    if sass_st is not None and hw_st is not None:
        out["hw_st_extra"] = hw_st - sass_st
    if sass_ld is not None and hw_ld is not None:
        out["hw_ld_extra"] = hw_ld - sass_ld
    return out


ncu = N.require_tool("ncu", "this script runs it")
rows = []
for spec, backend, layout in RUNS:
    v = parse_variants([spec])[0]
    target = [sys.executable, "-c", CHILD, v.label, backend, layout, str(n)]
    metrics, dropped = list(METRICS), []
    start = time.perf_counter()
    for _ in range(6):
        cmd = N.ncu_command(ncu, target, kernel_filter(v, backend), metrics, nvtx=True)
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        text = res.stdout + "\n" + res.stderr
        bad = N.unknown_metrics(text, metrics)
        if not bad:
            break
        dropped += bad
        metrics = [m for m in metrics if m not in bad]
    try:
        kernels = N.parse_raw_csv(res.stdout)
    except Exception as exc:
        print(f"{v.label} {backend} {layout}: no table ({exc}); ncu said:\n{N.tail(text)}",
              file=sys.stderr)
        continue
    if not kernels:
        print(f"{v.label} {backend} {layout}: no kernel profiled:\n{N.tail(text)}", file=sys.stderr)
        continue
    k = kernels[0]
    check = next((ln for ln in res.stderr.splitlines() if ln.startswith("child ")), "")
    row = {"variant": v.label, "backend": backend, "layout": layout, "M": n, "N": n, "K": n,
           "kernel": k.kernel, "check": "passed" if "passed" in check else check or "unknown",
           "dropped": " ".join(dropped),
           "empty": " ".join(m for m in metrics if k.get(m) is None)}
    row.update({m: k.get(m) for m in METRICS})
    if backend == "cuda":
        row.update(predicted(v, layout))
    row.update(computed(row))
    rows.append(row)
    print(f"  {v.label:34s} {backend:6s} {layout}: st conflicts hw "
          f"{row.get('l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum')}, sass excess "
          f"{row.get('sass_st_excess')}, model {row.get('model_st_conf', '-')}; hw extra st "
          f"{row.get('hw_st_extra')} ld {row.get('hw_ld_extra')} "
          f"({time.perf_counter() - start:.0f} s)")

path = out / f"bank_conflicts-counters-{n}.csv"
columns = list(dict.fromkeys(c for r in rows for c in r))
with path.open("w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    w.writerows(rows)
print(f"wrote {path} ({len(rows)} rows of {len(RUNS)})")
EOF
fi
echo "log: $LOG"
