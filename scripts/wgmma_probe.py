"""Check and time cuda_kernels/mma_wgmma.cu directly, outside the stage's launcher: every precision,
the three layouts it takes, several sizes, and a sweep of its build parameters at one size.

    PYTHONPATH=. python scripts/wgmma_probe.py [--out DIR] [--sizes 4096,8192] [--sweep 4096]

Needs an sm_90 GPU (H100, H200). Prints one line per check and per timing; with --out it also
writes probe.csv there. Each row's error is ||C - ref|| / ||ref|| against float64 of the inputs the
kernel received; cuBLAS at the same precision (tf32: torch with TF32 allowed; 3xtf32: fp32) is
timed beside it.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from pathlib import Path

PRECS = {"tf32": ("PREC_TF32", 4), "3xtf32": ("PREC_3XTF32", 4), "bf16": ("PREC_BF16", 2),
         "fp16": ("PREC_FP16", 2)}


def operands(torch, M, N, K, layout, dtype, gen):
    def mat(rows, cols, trans):
        if trans:
            return torch.randn(cols, rows, generator=gen, device="cuda").to(dtype).t()
        return torch.randn(rows, cols, generator=gen, device="cuda").to(dtype)

    return mat(M, K, layout[0] == "t"), mat(K, N, layout[1] == "t")


def plan(A, B, C):
    """(Ap, lda, a_kmajor, Bp, ldb, M', N', csm, csn) for D = A' B' with B' K-major."""
    M, K = A.shape
    N = B.shape[1]
    a_kmajor = A.stride(1) == 1
    b_kmajor = B.stride(0) == 1
    if b_kmajor:  # D = C, A' = A, B'(n, k) = B(k, n)
        lda = A.stride(0) if a_kmajor else A.stride(1)
        return A, lda, a_kmajor, B, B.stride(1), M, N, C.stride(0), C.stride(1)
    if a_kmajor:  # D = C^T = B^T A^T: A'(n, k) = B(k, n) (n contiguous), B'(m, k) = A(m, k)
        return B, B.stride(0), False, A, A.stride(0), N, M, C.stride(1), C.stride(0)
    raise ValueError("neither operand is K-major")


def build(prec, a_kmajor, bn, wgs, stages, group, copy_at=0, sum_tiles=1):
    from cuda_kernels._build import compile_kernel

    define, _ = PRECS[prec]
    return compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma",
                          {define: 1, "A_KMAJOR": int(a_kmajor), "BN": bn, "WGS": wgs,
                           "STAGES": stages, "GROUP": group, "COPY_AT": copy_at,
                           "SUM_TILES": sum_tiles},
                          arch="sm_90a")


def smem_bytes(prec, a_kmajor, bn, wgs, stages):
    e = PRECS[prec][1]
    bm, bk = 64 * wgs, 128 // e
    a_line = 144 if a_kmajor else bm * e + (32 if e == 4 else 16)
    a_lines = bm if a_kmajor else bk
    a_bytes = -(-a_line * a_lines // 1024) * 1024
    slot = bn * 128 * (2 if prec == "3xtf32" else 1) + a_bytes
    return stages * slot + 1024


def launch_fn(A, B, C, prec, bn, wgs, stages, group, copy_at=0, sum_tiles=1):
    import numpy as np

    from cuda_kernels._build import launcher

    Ap, lda, akm, Bp, ldb, Mp, Np, csm, csn = plan(A, B, C)
    K = A.shape[1]
    b = build(prec, akm, bn, wgs, stages, group, copy_at, sum_tiles)
    grid = (-(-Mp // (64 * wgs)) * -(-Np // bn), 1, 1)
    smem = smem_bytes(prec, akm, bn, wgs, stages)
    args = (Ap, Bp, C, np.int32(Mp), np.int32(Np), np.int32(K), np.int32(lda), np.int32(ldb),
            np.int64(csm), np.int64(csn))
    return launcher(b, grid, (128 * wgs, 1, 1), args, smem), b


def rel_err(torch, C, A, B):
    ref = A.double() @ B.double()
    return float((C.double() - ref).norm() / ref.norm())


def cublas(torch, prec, A, B):
    def run():
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        return A @ B
    return run


def bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


DEFAULTS = {"tf32": (256, 2, 4, 8, 0), "3xtf32": (128, 2, 4, 8, 2), "bf16": (256, 2, 4, 8, 0),
            "fp16": (256, 2, 4, 8, 0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--precisions", default="tf32,3xtf32,bf16,fp16")
    ap.add_argument("--sweep", type=int, default=0, help="sweep build parameters at this size")
    ap.add_argument("--layouts", default="nn,nt,tt")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("wgmma_probe needs an sm_90 GPU (H100 or H200)", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    rows = []
    precs = args.precisions.split(",")

    def record(**row):
        rows.append(row)
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
              flush=True)

    # correctness: odd sizes, every layout, every precision, defaults
    for prec in precs:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
        for layout in args.layouts.split(","):
            for (M, N, K) in ((1000, 1000, 1000), (4096, 4096, 4096), (200, 72, 40), (64, 64, 8),
                              (1, 1000, 128), (1000, 8, 1000)):
                A, B = operands(torch, M, N, K, layout, dtype, gen)
                C = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                try:
                    fn, bld = launch_fn(A, B, C, prec, *DEFAULTS[prec])
                    fn()
                    torch.cuda.synchronize()
                    err = rel_err(torch, C, A, B)
                    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
                    cerr = rel_err(torch, (A @ B), A, B)
                    record(kind="check", prec=prec, layout=layout, size=f"{M}x{N}x{K}", err=err,
                           cublas_err=cerr, nan=int(torch.isnan(C).any().item()), regs=bld.registers)
                except Exception as exc:  # noqa: BLE001
                    record(kind="check", prec=prec, layout=layout, size=f"{M}x{N}x{K}",
                           error=str(exc)[:300])
    # timings at the defaults
    for prec in precs:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
        for s in [int(x) for x in args.sizes.split(",") if x]:
            for layout in ("nn",):
                A, B = operands(torch, s, s, s, layout, dtype, gen)
                C = torch.empty((s, s), device="cuda", dtype=dtype)
                fn, bld = launch_fn(A, B, C, prec, *DEFAULTS[prec])
                fn()
                torch.cuda.synchronize()
                err = rel_err(torch, C, A, B) if s <= 4096 else float("nan")
                t = bench(fn)
                tc = bench(cublas(torch, prec, A, B))
                record(kind="time", prec=prec, layout=layout, size=s, ms=t, cublas_ms=tc,
                       pct=100 * tc / t, tflops=2 * s ** 3 / t / 1e9, err=err)
    if args.sweep:
        s = args.sweep
        for prec in precs:
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
            A, B = operands(torch, s, s, s, "nn", dtype, gen)
            C = torch.empty((s, s), device="cuda", dtype=dtype)
            tc = bench(cublas(torch, prec, A, B))
            for bn, wgs, stages, copy_at, sum_tiles in itertools.product(
                    (128, 256), (2,), (3, 4, 5), (0, 2), (1, 2) if prec == "3xtf32" else (1,)):
                group = 8
                if smem_bytes(prec, False, bn, wgs, stages) > 232448:
                    continue
                try:
                    fn, bld = launch_fn(A, B, C, prec, bn, wgs, stages, group, copy_at, sum_tiles)
                    C.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = rel_err(torch, C, A, B)
                    t = bench(fn)
                    record(kind="sweep", prec=prec, size=s, bn=bn, wgs=wgs, stages=stages,
                           copy_at=copy_at, sum_tiles=sum_tiles, ms=t, pct=100 * tc / t, err=err, regs=bld.registers,
                           spill=bld.spill_bytes)
                except Exception as exc:  # noqa: BLE001
                    record(kind="sweep", prec=prec, bn=bn, wgs=wgs, stages=stages,
                           error=str(exc)[:200])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        keys = sorted({k for r in rows for k in r})
        with open(args.out / "probe.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
