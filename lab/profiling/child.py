"""The child process ncu and compute-sanitizer run ("the target", python -m lab.profile --_target
cuda|triton|cublas): inputs in the precision's dtype, the launcher, the warm-up, one launch inside
the NVTX range ncu looks for, and the optional check against the float64 reference."""

from __future__ import annotations

import sys

from lab.base.errors import LabError
from lab.profiling.targets import CHECK_FAILED


def _nvtx():
    """push/pop for the profiled range: torch's NVTX, else CuPy's."""
    try:
        import torch

        torch.cuda.nvtx.range_push("probe")
        torch.cuda.nvtx.range_pop()
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except Exception:  # pragma: no cover - torch without NVTX
        from cupy.cuda import nvtx

        return nvtx.RangePush, nvtx.RangePop


def run_target(args, shape) -> int:
    """The child: inputs, launcher, warm-up, one launch inside the NVTX range, optional check."""
    import torch

    from lab import check as chk
    from lab.ncu import NVTX_RANGE
    from lab.base.dtypes import OUT_DTYPE_NAMES

    if not torch.cuda.is_available():
        raise LabError("the profiling target launches kernels and needs a CUDA GPU, but torch "
                       "sees none")
    M, N, K = shape
    precision = args.precision
    # the operands as lab.compare makes them (fp8: e4m3 with per-tensor scales), C in the
    # precision's output dtype
    a, b, scales = chk.inputs_for(precision, M, N, K, args.seed, "cuda")
    c = torch.empty((M, N), device="cuda", dtype=getattr(torch, OUT_DTYPE_NAMES[precision]))
    kernel_only = None  # a stage's Prepared may offer its kernel without per-call copies
    if args.target == "cublas":
        from lab.run import _cublas_mode, scaled_mm_launch

        label = "cublas"

        def launch():  # as lab.compare's cuBLAS row: TF32 allowed for tf32 only
            _cublas_mode(precision)
            torch.matmul(a, b, out=c)
        if scales is not None:  # fp8: torch._scaled_mm, as lab.compare's cuBLAS row
            from lab.base.dtypes import SCALE_KIND

            launch = scaled_mm_launch(a, b, c, scales, kind=SCALE_KIND[precision])
    else:
        from lab.stages import parse_variants

        variants = parse_variants(args.stage or [])
        if len(variants) != 1:
            raise LabError("the profiling target takes exactly one stage variant")
        variant = variants[0]
        label = variant.label
        given = {} if scales is None else dict(scale_a=scales[0], scale_b=scales[1])
        launch = variant.stage.module(args.target).prepare(a, b, c, precision=precision,
                                                           **variant.params_for(args.target),
                                                           **given)
        kernel_only = launch.kernel_only
    for _ in range(args.warmup):
        launch()
    torch.cuda.synchronize()
    if args.no_nvtx:
        launch()
    else:  # a launch that copies an operand first (wgmma's kmajor_b) offers the kernel alone
        push, pop = _nvtx()
        push(NVTX_RANGE)
        (kernel_only or launch)()
        pop()
    torch.cuda.synchronize()
    if args.check:
        result = chk.check(launch, c, chk.reference(a, b, scales), K, precision)
        if not result.passed:
            print(f"{CHECK_FAILED}: {label} {args.target} {precision} {shape}: {result.reason}",
                  file=sys.stderr)
            return 1
    print(f"lab.profile target: {label} {args.target} {precision} {shape}: launched "
          f"{args.warmup} + 1 times" + (", checked" if args.check else ""), file=sys.stderr)
    return 0
