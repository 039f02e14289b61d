"""cuBLAS fp8 (torch._scaled_mm) with and without fast accumulation: the error against float64
of the e4m3 inputs as K grows, and the time of both at a few sizes. What sets lab/check.py's fp8
threshold and lab/run.py's choice of baseline (FP8_FAST_ACCUM).

    PYTHONPATH=. python scripts/experiments/fp8_accuracy.py [--out DIR]

Inputs: lab.check.make_scaled_inputs (standard normal, per-tensor scales). Errors: lab.check.compare
(rel_err, Frobenius; max_rel, the worst element over the result's RMS). Times: lab.timing.bench,
L2 flushed, A row-major and B column-major (the layout _scaled_mm takes). Needs an sm_89+ GPU.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--ks", default="256,1024,4096,8192,16384,65536")
    ap.add_argument("--sizes", default="4096,8192")
    args = ap.parse_args(argv)

    import torch

    from lab.check import compare, make_scaled_inputs, reference
    from lab.run import scaled_mm_launch
    from lab.timing import bench

    rows = []

    def record(**row):
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    for K in (int(x) for x in args.ks.split(",")):
        M = N = 1024
        a, b, sa, sb = make_scaled_inputs(M, N, K, 1, "cuda", "nt")
        ref = reference(a, b, (sa, sb))
        for fast in (True, False):
            c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
            scaled_mm_launch(a, b, c, (sa, sb), fast)()
            torch.cuda.synchronize()
            r = compare(c, ref, K, "fp8")
            exact = (ref.to(torch.bfloat16).double() - ref).norm().item() / ref.norm().item()
            record(kind="error", M=M, N=N, K=K, fast_accum=fast, rel_err=f"{r.rel_err:.3e}",
                   max_rel=f"{r.max_rel:.3e}", bf16_rounding_only=f"{exact:.3e}",
                   passed=r.passed)
    for n in (int(x) for x in args.sizes.split(",")):
        a, b, sa, sb = make_scaled_inputs(n, n, n, 2, "cuda", "nt")
        for fast in (True, False):
            c = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
            t = bench(scaled_mm_launch(a, b, c, (sa, sb), fast), rep_ms=100)
            record(kind="time", M=n, N=n, K=n, fast_accum=fast, ms=f"{t.median_ms:.4f}",
                   tflops=f"{2 * n**3 / t.median_ms / 1e9:.1f}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(out / "fp8-accuracy.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
