"""persistent's CUDA kernel in fp8_block built with extra defines (build switches that are not
registry parameters, such as SCALE_TMA or SCALE_AHEAD; at commit 5f14903 also the FFMA yield
rewrite FFMA_YIELD and the 128 x 192 tile, results/2026-11-30-h200/fp8-block-ffma-yield.txt),
each timed beside the
block-scale stand-in (per-tensor cuBLAS fp8 with promoted accumulation, lab/run.py) by
lab.timing.bench_adjacent with L2 flushed, and checked against the float64 reference where the
shape is small enough.

    python scripts/experiments/fp8_block_variants.py - SCALE_TMA=1 SCALE_AHEAD=3 \
        --sizes 4096x7168x16384,8192x8192x8192 [--rounds 2]

Each argument is one build: KEY=V,... over the automatic row (`-`: the automatic row itself).
Prints one line per build and shape: cfg, shape, ms, TFLOPS, the stand-in's ms, % of it, error.
Rounds repeat the whole list in the same order, so a drift of the clock shows as a drift.
"""

from __future__ import annotations

import argparse

import torch

from cuda_kernels import persistent
from lab import check as chk
from lab.base.describe import describe
from lab.base.needs import CUDA
from lab.run import scaled_mm_launch
from lab.timing import bench_adjacent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cfgs", nargs="+")
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rep-ms", type=float, default=60.0)
    args = ap.parse_args()
    prec = "fp8_block"
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    for rnd in range(args.rounds):
        for M, N, K in shapes:
            a, b, (sa, sb) = chk.inputs_for(prec, M, N, K, rnd, "cuda", "nt")
            # the stand-in: per-tensor cuBLAS fp8 (unit scales) with promoted accumulation
            one = torch.ones(1, dtype=torch.float32, device="cuda")
            base = scaled_mm_launch(a, b, torch.empty((M, N), dtype=torch.bfloat16, device="cuda"),
                                    (one, one), fast_accum=False)
            ref = chk.reference(a, b, (sa, sb)) if M * N * K <= 2 ** 36 else None
            for cfg in args.cfgs:
                extra = {} if cfg == "-" else {k: int(v) for k, _, v in
                                               (x.partition("=") for x in cfg.split(","))}
                c = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
                p = describe(a, b, c, CUDA, prec, (sa, sb))
                knobs = {k: v for k, v in persistent.STAGE.resolve(
                    {k: v for k, v in extra.items() if k in persistent.STAGE.knobs}, M, N, K, prec,
                    torch.cuda.get_device_properties(0).multi_processor_count).items()
                    if k in persistent.STAGE.knobs}
                run = persistent.STAGE.launch(p, prec, 8, {**knobs, **extra})
                t, tb = bench_adjacent(run, base, rep_ms=args.rep_ms)
                run()
                torch.cuda.synchronize()
                err = "n/a" if ref is None else f"{chk.compare(c, ref, K, prec).rel_err:.2e}"
                tflops = 2 * M * N * K / t.median_ms / 1e9
                print(f"round={rnd} cfg={cfg} {M}x{N}x{K} ms={t.median_ms:.4f} tflops={tflops:.0f} "
                      f"standin_ms={tb.median_ms:.4f} pct={100 * tb.median_ms / t.median_ms:.1f} err={err}",
                      flush=True)


if __name__ == "__main__":
    main()
