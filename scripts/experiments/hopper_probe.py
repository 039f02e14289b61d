"""Check and time a Hopper stage's CUDA launcher directly, with build defines swept: every
precision and layout it takes, several shapes, and configurations over its automatic row.

    PYTHONPATH=. python scripts/experiments/hopper_probe.py --stage tma_wgmma \
        [--precisions bf16,fp16,tf32] [--layouts nn,nt,tn,tt] [--check-sizes 1025,333x257x129] \
        [--sizes 4096,8192] [--configs "BN=128;STAGES=5"] [--out DIR]

Each check runs the launcher's `launch(problem, precision, group, config)` for the configuration
(the module's DEFAULTS with the given KEY=V over it; a key the module does not know goes to
NVRTC as a define) and compares C with float64 of the inputs (lab.check.compare). Each timing is
lab.timing.bench_adjacent: the launch and torch.matmul at the same precision (tf32: TF32
allowed; the fp8 precisions: torch._scaled_mm as lab.compare's cuBLAS row, lab/run.py
cublas_launch) interleaved, L2 flushed. Needs an sm_90 GPU. One line per row on stdout; --out DIR
also writes probe.csv.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import sys
import traceback
from pathlib import Path



def parse_size(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    return tuple(parts * 3) if len(parts) == 1 else tuple(parts)


def parse_config(text: str) -> dict:
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        k, _, v = item.partition("=")
        out[k.strip()] = int(v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", default="tma_wgmma")
    ap.add_argument("--precisions", default="bf16,fp16,tf32")
    ap.add_argument("--layouts", default="nn,nt,tn,tt")
    ap.add_argument("--check-sizes", default="1025,333x257x129,64x8x8")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--timed-layouts", default="nn")
    ap.add_argument("--configs", default="", help="';'-separated KEY=V,... over the defaults")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch

    from lab.check import compare, inputs_for, reference
    from lab.base.dtypes import OUT_DTYPE_NAMES
    from lab.run import cublas_launch
    from lab.timing import bench_adjacent

    mod = importlib.import_module(f"cuda_kernels.{args.stage}")
    configs = [parse_config(c) for c in args.configs.split(";")] if args.configs else [{}]
    rows = []

    def record(**row):
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    for prec in args.precisions.split(","):
        dtype = getattr(torch, OUT_DTYPE_NAMES[prec])  # C's
        for cfg in configs:
            full = {**mod.STAGE.defaults_for(prec), **cfg}
            label = ",".join(f"{k}={v}" for k, v in full.items())
            sizes = [x for x in args.sizes.split(",") if x]
            for size_text in [x for x in args.check_sizes.split(",") if x] + sizes:
                M, N, K = parse_size(size_text)
                timed = size_text in sizes
                for layout in args.layouts.split(","):
                    if timed and layout not in args.timed_layouts.split(","):
                        continue
                    a, b, scales = inputs_for(prec, M, N, K, 0, "cuda", layout)
                    given = {} if scales is None else dict(scale_a=scales[0], scale_b=scales[1])
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                    try:
                        first = mod.prepare(a, b, c, precision=prec, **given)
                        launch = mod.launch(first.problem, prec, 8, full)
                        launch()
                        torch.cuda.synchronize()
                        res = compare(c.float(), reference(a, b, scales), K, prec)
                    except Exception as e:  # a probe row fails, the rest go on
                        record(stage=args.stage, prec=prec, cfg=label, M=M, N=N, K=K,
                               layout=layout, status="error", detail=repr(e)[:300])
                        traceback.print_exc()
                        continue
                    row = dict(stage=args.stage, prec=prec, cfg=label, M=M, N=N, K=K,
                               layout=layout, status="pass" if res.passed else "FAIL",
                               rel_err=f"{res.rel_err:.3e}", detail=res.reason,
                               blocks=(launch.resources or {}).get("grid_blocks"))
                    if timed and res.passed:
                        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
                        cb = torch.empty_like(c)
                        blas = (cublas_launch(a, b, prec, scales) if scales is not None
                                else lambda: torch.matmul(a, b, out=cb))
                        t, base = bench_adjacent(launch, blas)
                        torch.backends.cuda.matmul.allow_tf32 = False
                        tflops = 2 * M * N * K / t.median_ms / 1e9
                        row.update(ms=f"{t.median_ms:.4f}", cublas_ms=f"{base.median_ms:.4f}",
                                   tflops=f"{tflops:.1f}",
                                   pct_cublas=f"{100 * base.median_ms / t.median_ms:.1f}")
                    record(**row)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(out / f"probe-{args.stage}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0 if all(r["status"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
