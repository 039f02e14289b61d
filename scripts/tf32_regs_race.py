"""The Triton mma twin's regs_mn path with and without its wait for the previous k-tile's wgmma.

In TF32 with regs_mn, A's tile goes to wgmma from registers. Triton 3.6's pipeline leaves up to
three wgmma in flight across the k-loop's back edge, and ptxas gives the next k-tile's A
fragments the same registers: without the kernel's RS_WAIT (wgmma.wait_group 0 at the top of
the loop) an HGMMA still in flight can read fragments of the next k-tile. This script runs a few
configurations many times each on the same inputs, both ways, and counts the runs whose C is not
bit-identical to the first run's, and the runs lab.check refuses (a deterministic kernel gives
the same bits every time).

Usage (GPU): python scripts/tf32_regs_race.py [--size 4096] [--runs 50] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONFIGS = (  # the kernel's tile (BLOCK_M x BLOCK_N), k-step, warps, stages
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=32, num_warps=4, num_stages=3),
)


def main(argv=None) -> int:
    from lab.cli import guarded

    return guarded(_run, argv)


def _run(argv) -> int:
    import torch

    import triton_kernels.mma as mma
    from lab import check as chk
    from lab.errors import LabError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise LabError("this script needs a CUDA GPU")
    n = args.size
    a, b = chk.make_inputs(n, n, n, 0, "cuda")  # layout nn: B^T from registers
    ref = chk.reference(a, b)
    real_wait = mma._rs_wait
    rows = []
    for cfg in CONFIGS:
        for wait in (False, True):
            mma._rs_wait = real_wait if wait else (lambda device: False)
            try:
                c = torch.empty((n, n), device="cuda")
                launch = mma.prepare(a, b, c, precision="tf32", regs_mn=1, kmajor_b=0, **cfg)
            finally:
                mma._rs_wait = real_wait
            launch()
            torch.cuda.synchronize()
            first = c.clone()
            differ = refused = 0
            worst = 0.0
            for _ in range(args.runs):
                c.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                if not torch.equal(c, first):
                    differ += 1
                result = chk.compare(c, ref, n, "tf32")
                refused += not result.passed
                if result.passed:
                    worst = max(worst, result.rel_err)
            row = {**cfg, "rs_wait": int(wait), "size": n, "runs": args.runs,
                   "runs_not_identical": differ, "runs_refused": refused,
                   "worst_rel_err": f"{worst:.3g}"}
            rows.append(row)
            print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
