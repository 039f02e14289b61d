"""Check and time the Triton twins of the Hopper stages (triton_kernels/tma_wgmma.py,
triton_kernels/persistent.py) over a grid of configurations, next to torch.matmul.

    PYTHONPATH=. python scripts/experiments/hopper_triton_sweep.py \
        [--stages tma_wgmma,persistent] [--precisions bf16] [--layouts nn] \
        [--sizes 4096,8192,7919x6007x3001] [--configs "BLOCK_N=128;num_stages=5,BLOCK_K=32"] \
        [--no-grid] [--time-limit 540] [--out DIR]

Each configuration is the stage's automatic values with the given NAME=VALUE,... over them (the
launcher's own parameters: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, kmajor,
subtile, flatten); without --configs the sweep is the automatic row plus GRID (BLOCK_N, BLOCK_K,
num_stages, num_warps, and subtile for persistent), each configuration the launcher's validate()
refuses left out with its sentence. For every stage x precision x size x layout x configuration:
prepare() (compiling), one checked call (lab.check: float64 reference, NaN-poisoned C), then
lab.timing.bench_adjacent: the prepared call (its copies included, as every call pays them) and
torch.matmul at the same precision (tf32: TF32 allowed; 3xtf32 against cuBLAS fp32, which it
stands in for; fp8: torch._scaled_mm, as lab.compare's cuBLAS row) interleaved, L2 flushed before every repetition. Needs an sm_90 GPU.

One line per row on stdout, as it is measured (a time limit or a crash keeps what came before);
--out DIR also writes sweep.csv. A row that fails its check is printed and not timed.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import itertools
import sys
import time
from pathlib import Path

PRECISIONS = ("bf16", "fp16", "tf32", "3xtf32", "fp8")
# The grid swept around the automatic row; a combination validate() refuses (a ring or tile that
# does not fit, too many accumulators per thread) is reported and skipped.
# BLOCK_K is given in bytes of k per line (128 or 256: 64 or 128 bf16/fp16, 32 or 64 fp32).
GRID = {
    "tma_wgmma": {"BLOCK_N": (128, 256), "BLOCK_K": (128, 256), "num_stages": (3, 4, 5),
                  "num_warps": (8,)},
    "persistent": {"BLOCK_N": (128, 256), "BLOCK_K": (128, 256), "num_stages": (2, 3, 4),
                   "num_warps": (8,), "subtile": (0, 1)},
}
ELEM_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "3xtf32": 4, "fp8": 1}
EXTRA = {  # a few points off the grid: one warpgroup per 64 rows x 128 columns, wider groups
    "tma_wgmma": ({"BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
                  {"GROUP_M": 16}, {"GROUP_M": 4}),
    "persistent": ({"BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
                   {"GROUP_M": 16}, {"flatten": False}),
}


def parse_size(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) not in (1, 3):
        raise SystemExit(f"error: a size is N or MxNxK, not {text!r}")
    return tuple(parts * 3) if len(parts) == 1 else tuple(parts)


def parse_config(text: str) -> dict:
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"error: a configuration is NAME=VALUE,..., not {text!r}")
        v = v.strip()
        out[k.strip()] = {"true": True, "false": False}.get(v.lower(), None)
        if out[k.strip()] is None:
            try:
                out[k.strip()] = int(v)
            except ValueError:
                raise SystemExit(f"error: {k.strip()}={v}: values are integers, True or False")
    return out


def configurations(stage: str, given: str | None, grid: bool, precision: str) -> list[dict]:
    if given:
        return [parse_config(c) for c in given.split(";")]
    out = [{}]
    if grid:
        keys = list(GRID[stage])
        for values in itertools.product(*GRID[stage].values()):
            config = dict(zip(keys, values))
            config["BLOCK_K"] //= ELEM_BYTES[precision]
            out.append(config)
        out += list(EXTRA[stage])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="tma_wgmma,persistent")
    ap.add_argument("--precisions", default="bf16")
    ap.add_argument("--layouts", default="nn")
    ap.add_argument("--sizes", default="4096,8192,7919x6007x3001")
    ap.add_argument("--configs", default=None, help="';'-separated NAME=VALUE,... over the "
                    "automatic values (replaces the grid)")
    ap.add_argument("--no-grid", action="store_true", help="the automatic row only")
    ap.add_argument("--time-limit", type=float, default=540.0,
                    help="seconds; rows not started by then are left out (default 540)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    stages = args.stages.split(",")
    precisions = args.precisions.split(",")
    for prec in precisions:
        if prec not in PRECISIONS:
            raise SystemExit(f"error: precisions are {', '.join(PRECISIONS)}, not {prec!r}")
    plans = {(s, prec): configurations(s, args.configs, not args.no_grid, prec)
             for s in stages for prec in precisions}

    import torch

    from lab.check import check, inputs_for, reference
    from lab.base.errors import LabError
    from lab.base.dtypes import OUT_DTYPE_NAMES
    from lab.run import scaled_mm_launch
    from lab.timing import bench_adjacent

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("error: the TMA twins need an sm_90 GPU", file=sys.stderr)
        return 2
    start = time.monotonic()
    rows = []

    def record(**row):
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    layouts = args.layouts.split(",")
    for prec, (M, N, K), layout in itertools.product(precisions, sizes, layouts):
        # fp8: e4m3 operands with per-tensor scales, C bf16, cuBLAS through torch._scaled_mm
        a, b, scales = inputs_for(prec, M, N, K, M + N + K, "cuda", layout)
        given = {} if scales is None else dict(scale_a=scales[0], scale_b=scales[1])
        c = torch.empty(M, N, device="cuda", dtype=getattr(torch, OUT_DTYPE_NAMES[prec]))
        ref = reference(a, b, scales)
        ref_c = torch.empty_like(c)
        blas = (scaled_mm_launch(a, b, ref_c, scales) if scales is not None
                else lambda a=a, b=b, out=ref_c: torch.matmul(a, b, out=out))
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"  # 3xtf32: against cuBLAS fp32
        first = (M, N, K) == sizes[0] and layout == layouts[0]
        for stage in stages:
            mod = importlib.import_module(f"triton_kernels.{stage}")
            for config in plans[(stage, prec)]:
                if time.monotonic() - start > args.time_limit:
                    print(f"time limit: stopped after {len(rows)} rows", flush=True)
                    return _write(rows, args.out)
                base = dict(stage=stage, precision=prec, size=f"{M}x{N}x{K}", layout=layout)
                why = mod.OFFER.check(config, prec)
                if why:
                    if first:  # once per configuration
                        record(**base, config=_text(config), status="refused", reason=why)
                    continue
                try:
                    t0 = time.monotonic()
                    launch = mod.prepare(a, b, c, precision=prec, **config, **given)
                    prepare_s = time.monotonic() - t0
                    result = check(launch, c, ref, K, prec)
                except LabError as exc:
                    record(**base, config=_text(config), status="error", reason=str(exc))
                    continue
                shown = mod.config_text(launch.config)
                if not result.passed:
                    record(**base, config=shown, status="fail", reason=result.reason)
                    continue
                fn_t, base_t = bench_adjacent(launch, blas)
                res = launch.resources or {}
                record(**base, config=shown, status="ok", ms=f"{fn_t.median_ms:.4f}",
                       p20=f"{fn_t.p20_ms:.4f}", p80=f"{fn_t.p80_ms:.4f}",
                       tflops=f"{2.0 * M * N * K / fn_t.median_ms / 1e9:.1f}",
                       torch_ms=f"{base_t.median_ms:.4f}",
                       pct_torch=f"{100.0 * base_t.median_ms / fn_t.median_ms:.1f}",
                       rel_err=f"{result.rel_err:.2e}", copied="+".join(launch.realigned) or "-",
                       c_store="tma" if launch.layout["C_DESC"] else "masked",
                       regs=res.get("registers"), smem=res.get("smem_dynamic"),
                       spills=res.get("spill_bytes"), prepare_s=f"{prepare_s:.1f}")
                del launch
    return _write(rows, args.out)


def _text(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "automatic"


def _write(rows: list[dict], out: str | None) -> int:
    if out and rows:
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        keys = list(dict.fromkeys(k for row in rows for k in row))
        with open(path / "sweep.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {path / 'sweep.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
