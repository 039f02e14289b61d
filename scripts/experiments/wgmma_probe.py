"""Check and time cuda_kernels/wgmma.cu directly, outside the stage's launcher: every precision,
the three layouts it takes, several sizes, and a sweep of its build parameters.

    PYTHONPATH=. python scripts/experiments/wgmma_probe.py [--out DIR] [--precisions tf32,3xtf32]
        [--config SUM_TILES=2,STAGES=4] [--sizes 4096,8192] [--sweep 4096,8192]
        [--configs "STAGES=3;STAGES=4"] [--once 4096]

--config sets build defines over the precision's WGMMA row (cuda_kernels/wgmma.py) for the checks
and timings; --sweep times sweep_grid()'s configurations at each size, or with --configs those
configurations (each over the WGMMA row); --once only launches the first precision's kernel
twice (for Nsight Compute's --launch-skip 1 --launch-count 1).

Needs an sm_90 GPU (H100, H200). Prints one line per check and per timing; with --out it also
writes probe.csv there. Each row's error is ||C - ref|| / ||ref|| against float64 of the inputs the
kernel received; cuBLAS at the same precision (tf32: torch with TF32 allowed; 3xtf32: fp32) is
timed beside it.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16")


def operands(torch, M, N, K, layout, dtype, gen):
    def mat(rows, cols, trans):
        if trans:
            return torch.randn(cols, rows, generator=gen, device="cuda").to(dtype).t()
        return torch.randn(rows, cols, generator=gen, device="cuda").to(dtype)

    return mat(M, K, layout[0] == "t"), mat(K, N, layout[1] == "t")


def config(bn, wgs, stages, copy_at=0, sum_tiles=None) -> dict:
    """Build defines of wgmma.cu beyond the precision, layout and group (SUM_TILES: 3xTF32
    only, which also loads its A' fragments before each tile's copy, as its WGMMA row does)."""
    c = {"WGS": wgs, "BN": bn, "STAGES": stages, "COPY_AT": copy_at}
    return c if sum_tiles is None else {**c, "LOAD_FIRST": 1, "SUM_TILES": sum_tiles}


def describe_cfg(cfg: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items())


def parse_cfg(text: str, prec: str) -> dict | None:
    """--config KEY=V,... over the precision's WGMMA row (None: the row itself)."""
    if not text:
        return None
    from cuda_kernels.wgmma import WGMMA

    cfg = dict(WGMMA[prec])
    for item in text.split(","):
        k, _, v = item.partition("=")
        try:
            cfg[k.strip()] = int(v)
        except ValueError:
            raise SystemExit(f"--config and --configs take KEY=INTEGER items separated by commas, "
                             f"not {item!r}")
    return cfg


def launch_fn(A, B, C, prec, cfg=None, group=8):
    """(the launch, its build) for C = A B with build defines `cfg` (default: the launcher's
    WGMMA row), planned as the stage's launcher plans it (cuda_kernels/wgmma.py: launch)."""
    from cuda_kernels import wgmma
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    launch = wgmma.launch(describe(A, B, C, CUDA), prec, group, cfg)
    return launch, launch.build


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


def sweep_grid(prec):
    """Build configurations tried by --sweep; those over the shared memory an H100 block can have
    are skipped."""
    if prec == "3xtf32":
        return ([config(128, 2, st, ca, su) for st in (3, 4) for ca in (0, 2) for su in (0, 1, 2)
                 if not (su == 2 and st < 4)]
                + [config(64, wgs, 4, 0, 1) for wgs in (2, 3)])
    return [config(bn, wgs, st, ca) for (bn, wgs) in ((256, 2), (192, 2), (192, 3), (128, 3))
            for st in (3, 4) for ca in (0, 2)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--precisions", default="tf32,3xtf32,bf16,fp16")
    ap.add_argument("--sweep", default="", help="sweep build parameters at these sizes (comma list)")
    ap.add_argument("--layouts", default="nn,nt,tt")
    ap.add_argument("--config", default="", help="KEY=V,... over the defaults, for the checks "
                    "and timings (for example SUM_TILES=2,STAGES=4)")
    ap.add_argument("--configs", default="", help="with --sweep: these configurations "
                    "(KEY=V,... each, separated by ';') instead of the built-in grid")
    ap.add_argument("--once", type=int, default=0, help="only launch the kernel (--config over "
                    "the first precision's defaults) twice at this size, for a profiler")
    args = ap.parse_args(argv)
    for prec in args.precisions.split(","):
        if prec not in PRECISIONS:
            print(f"--precisions takes {', '.join(PRECISIONS)}, not {prec!r}", file=sys.stderr)
            return 2
        parse_cfg(args.config, prec)  # a malformed --config stops here, before any GPU work
        for text in filter(None, args.configs.split(";")):
            parse_cfg(text, prec)
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
    if args.once:
        prec, s = precs[0], args.once
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
        A, B = operands(torch, s, s, s, "nn", dtype, gen)
        C = torch.empty((s, s), device="cuda", dtype=dtype)
        fn, _ = launch_fn(A, B, C, prec, parse_cfg(args.config, prec))
        fn()
        fn()
        torch.cuda.synchronize()
        return 0

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
                    fn, bld = launch_fn(A, B, C, prec, parse_cfg(args.config, prec))
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
                fn, bld = launch_fn(A, B, C, prec, parse_cfg(args.config, prec))
                fn()
                torch.cuda.synchronize()
                err = rel_err(torch, C, A, B) if s <= 4096 else float("nan")
                t = bench(fn)
                tc = bench(cublas(torch, prec, A, B))
                record(kind="time", prec=prec, layout=layout, size=s, ms=t, cublas_ms=tc,
                       pct=100 * tc / t, tflops=2 * s ** 3 / t / 1e9, err=err)
    for s in [int(x) for x in args.sweep.split(",") if x]:
        from cuda_kernels.wgmma import smem_bytes as wgmma_smem_bytes

        for prec in precs:
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
            A, B = operands(torch, s, s, s, "nn", dtype, gen)
            C = torch.empty((s, s), device="cuda", dtype=dtype)
            tc = bench(cublas(torch, prec, A, B))
            grid = ([parse_cfg(t, prec) for t in args.configs.split(";") if t]
                    or sweep_grid(prec))
            for cfg in grid:
                if wgmma_smem_bytes(prec, False, cfg) > 232448:
                    continue
                try:
                    fn, bld = launch_fn(A, B, C, prec, cfg)
                    C.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = rel_err(torch, C, A, B) if s <= 4096 else float("nan")
                    t = bench(fn)
                    record(kind="sweep", prec=prec, size=s, cfg=describe_cfg(cfg), ms=t,
                           pct=100 * tc / t, err=err, regs=bld.registers, spill=bld.spill_bytes)
                except Exception as exc:  # noqa: BLE001
                    record(kind="sweep", prec=prec, size=s, cfg=describe_cfg(cfg),
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
