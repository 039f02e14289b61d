"""What `realign` costs inside a timed call: the copies next to the kernel (GPU only).

For each stage variant and size given, this builds the Triton twin's launch with realign=True on
row-major fp32 operands (their rows are 4-byte aligned when K or N is odd) and times, with
lab.timing.bench (L2 flushed before every repetition, median of the repetitions):
- `torch_copies`: one torch `copy_` per copied operand (what the launch did before the copies
  became one kernel);
- `one_kernel`: triton_kernels._realign.copy_into_buffers (realign_copy_kernel, both operands in
  one grid);
- `kernel_only`: the stage's kernel(s) on the buffers, without the copies (launch.kernel_only);
- `launch`: the whole timed call (copies, then the kernel(s)), as lab.compare times it.
and cuBLAS fp32 (torch.matmul, TF32 off) on the same operands. Writes a CSV (one row per
measurement) and prints it.

    python scripts/realign_copy_cost.py --stage warptiling:auto,double_buffered:auto \
        --sizes 1025,7919x6007x3001 --csv out/realign-copy-cost.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str]) -> int:
    import pandas as pd
    import torch

    from lab import check as chk
    from lab.autotune import resolve_variant
    from lab.errors import LabError
    from lab.shapes import parse_sizes
    from lab.stages import parse_variants
    from lab.timing import bench
    from triton_kernels._realign import copy_into_buffers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage", default="warptiling:auto,double_buffered:auto")
    ap.add_argument("--sizes", default="1025,7919x6007x3001")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("realign_copy_cost: this script times kernels and needs a CUDA GPU",
              file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for M, N, K in parse_sizes(args.sizes):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", generator=g)
        b = torch.randn(K, N, device="cuda", generator=g)
        cublas = bench(lambda: torch.matmul(a, b)).median_ms
        ref = chk.reference(a, b)  # float64, once per shape
        for spec in args.stage.split(","):
            variant = parse_variants([spec])[0]
            variant, _ = resolve_variant(variant, "triton", M, N, K)
            params = {**variant.params_for("triton"), "realign": True}
            c = torch.empty(M, N, device="cuda")
            launch = variant.stage.module("triton").prepare(a, b, c, **params)
            result = chk.check(launch, c, ref, K)  # correct before timed
            if not result.passed:
                raise LabError(f"{spec} at {M}x{N}x{K} with realign=True is wrong: "
                               f"{result.reason}")
            err = result.rel_err
            named = {"launch": launch}
            if launch.realigned:
                named["kernel_only"] = launch.kernel_only
                pairs = list(launch.copy_pairs)
                named["one_kernel"] = copy_into_buffers(tuple(pairs))

                def torch_copies(pairs=pairs):
                    for buf, user in pairs:
                        buf.copy_(user)

                named["torch_copies"] = torch_copies
            for what, fn in named.items():
                ms = bench(fn).median_ms
                rows.append(dict(stage=spec, size=f"{M}x{N}x{K}", what=what, ms=round(ms, 5),
                                 cublas_ms=round(cublas, 5),
                                 pct_of_cublas=round(100 * cublas / ms, 1),
                                 realigned="+".join(launch.realigned) or "-",
                                 params=",".join(f"{k}={v}" for k, v in params.items()),
                                 max_rel_err=f"{err:.1e}"))
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.csv, index=False)
    print(df.to_string(index=False))
    return 0


if __name__ == "__main__":
    from lab.cli import guarded

    sys.exit(guarded(main, sys.argv[1:]))
