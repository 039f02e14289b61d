"""A target for Nsight Compute: one stage x backend x precision at one shape, launched WARM times
and then once more (the launch to profile: `ncu --launch-skip WARM --launch-count 1`).

    ncu --launch-skip 2 --launch-count 1 -k regex:matmul --section ... \
        python scripts/experiments/ncu_mma_target.py mma cuda bf16 4096 BM=128,BN=256,BK=64

Parameters are a comma list of name=value (integers, or words such as pipeline=cp_async), as lab.compare's stage:params. The output
is checked against the float64 reference first (a wrong kernel is not worth profiling).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WARM = 2


def main(argv: list[str]) -> int:
    import torch

    from lab import check as chk
    from lab.base.dtypes import DTYPE_NAMES
    from lab.stages import get_stage

    stage, backend, precision, size = argv[:4]
    params = {}
    for item in (argv[4].split(",") if len(argv) > 4 and argv[4] else []):
        k, v = item.split("=")
        params[k] = int(v) if v.lstrip("-").isdigit() else v
    M, N, K = (int(x) for x in (size.split("x") if "x" in size else (size,) * 3))
    dtype = getattr(torch, DTYPE_NAMES[precision])
    a, b = chk.make_inputs(M, N, K, 0, "cuda", dtype=dtype)
    c = torch.empty((M, N), dtype=dtype, device="cuda")
    launch = get_stage(stage).module(backend).prepare(a, b, c, precision=precision, **params)
    result = chk.check(launch, c, chk.reference(a, b), K, precision)
    if not result.passed:
        print(f"{stage} {backend} {precision} {size} {params}: {result.reason}", file=sys.stderr)
        return 1
    for _ in range(WARM - 1):  # check() ran the first
        launch()
    torch.cuda.synchronize()
    launch()  # the profiled one
    torch.cuda.synchronize()
    print(f"{stage} {backend} {precision} {size} {params}: rel_err {result.rel_err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
