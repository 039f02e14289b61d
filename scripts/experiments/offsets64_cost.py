"""What the 64-bit-offset builds cost where they are not needed: each stage's launch at its
defaults for an ordinary problem (4096^3; gemv at 4097x1x4096), built as usual (32-bit offsets)
and again with Problem.offsets64 forced on (the build a problem past 2^31 elements gets:
-DOFFSET64=1 in CUDA, the OFFSET64 constexpr in Triton), both checked and then timed interleaved
(lab.timing.bench_adjacent, L2 flushed).

    PYTHONPATH=. python scripts/experiments/offsets64_cost.py [--out DIR] [--stages a,b] [--size N]

One line per stage x backend; --out DIR also writes offsets64-cost.csv. Needs a GPU.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

CASES = (("tiled", "fp32"), ("vectorized", "fp32"), ("warptiling", "fp32"),
         ("double_buffered", "fp32"), ("gemv", "fp32"), ("mma", "bf16"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--stages", default=",".join(s for s, _ in CASES))
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args(argv)

    import torch

    from lab.check import compare, make_inputs, reference
    from lab.stages import Variant, get_stage
    from lab.timing import bench_adjacent

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    wanted = set(args.stages.split(","))
    for name, precision in CASES:
        if name not in wanted:
            continue
        stage = get_stage(name)
        n = args.size
        M, N, K = (n + 1, 1, n) if name == "gemv" else (n, n, n)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
        a, b = make_inputs(M, N, K, 0, "cuda", dtype, "nn")
        ref = reference(a, b)
        for backend in ("cuda", "triton"):
            module = stage.module(backend)
            params = Variant(stage, stage.defaults()).params_for(backend)
            c32 = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            c64 = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
            p = module.prepare(a, b, c32, precision=precision, **params).problem
            launch32 = module.prepare.inner(p, **params)
            p64 = replace(module.prepare(a, b, c64, precision=precision, **params).problem,
                          offsets64=True)
            launch64 = module.prepare.inner(p64, **params)
            launch32()
            launch64()
            torch.cuda.synchronize()
            ok = [compare(c.float(), ref, K, precision).passed for c in (c32, c64)]
            t64, t32 = bench_adjacent(launch64, launch32)
            row = dict(stage=name, backend=backend, precision=precision, M=M, N=N, K=K,
                       check32="pass" if ok[0] else "FAIL", check64="pass" if ok[1] else "FAIL",
                       ms32=f"{t32.median_ms:.4f}", ms64=f"{t64.median_ms:.4f}",
                       ratio=f"{t64.median_ms / t32.median_ms:.3f}")
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "offsets64-cost.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0 if all(r["check32"] == r["check64"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
