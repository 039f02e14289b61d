"""A Triton stage's kernel as its launcher would launch it, captured without launching: the
stage's own prepare() runs under triton_kernels._common.recording() (triton_launch), then
JITFunction.warmup compiles the recorded launch for this GPU, or for sm_90 without one
(_triton_compile). Under TRITON_INTERPRET=1 there is nothing to compile (TritonInterpreted)."""

from __future__ import annotations

from lab.base.errors import LabError


class TritonInterpreted(LabError):
    """TRITON_INTERPRET=1: the Triton kernels of this process are interpreted, never compiled."""


def triton_compiled(variant, shape, precision: str = "fp32"):
    """(compiled kernel, where it was compiled for): see _triton_compile."""
    compiled, where, _ = _triton_compile(variant, shape, precision)
    return compiled, where


def triton_launch(variant, shape, precision: str = "fp32") -> dict:
    """What a Triton stage's prepare() launches for this shape and precision, recorded, never
    launched: {kernel, grid, args, meta}.

    The stage's own prepare runs inside triton_kernels._common.recording(), which records each
    launch instead of compiling it; the one kept is the last launch of the first kernel the
    stage's OFFER names (its GEMM, not a split-K sum or a copy). With a GPU the inputs
    are real (uninitialised) tensors; without one they are 'meta' tensors (shape and dtype only).
    The tensors are in `precision`'s dtype (lab.base.dtypes.DTYPE_NAMES) and the Problem carries the
    precision, so the stage passes the meta it passes when it runs (tl.dot's INPUT_PRECISION:
    triton_kernels._common.dot_meta)."""
    import torch

    from lab.base.describe import describe
    from lab.base.checks import scale_shapes
    from lab.base.dtypes import DTYPE_NAMES, OUT_DTYPE_NAMES, SCALE_KIND, SCALED
    from lab.base.needs import TRITON

    from lab.toolchain.triton import recording

    module = variant.stage.module("triton")
    params = variant.params_for("triton")
    main = variant.stage.offer("triton").kernel_names(params, precision)[0]
    device = "cuda" if torch.cuda.is_available() else "meta"
    M, N, K = shape
    dtype = getattr(torch, DTYPE_NAMES[precision])
    a = torch.empty((M, K), device=device, dtype=dtype)
    b = torch.empty((K, N), device=device, dtype=dtype)
    c = torch.empty((M, N), device=device, dtype=getattr(torch, OUT_DTYPE_NAMES[precision]))
    scales = (tuple(torch.ones(shape, device=device) for shape in
                    scale_shapes(SCALE_KIND[precision], M, N, K)) if precision in SCALED else None)
    # the stage's own part of prepare (meta tensors cannot pass the shared device check)
    with recording() as calls:
        module.prepare.inner(describe(a, b, c, TRITON, precision, scales), **params)
    launched = [call for call in calls if call[0].fn.__name__ == main]
    if not launched:
        raise LabError(f"triton_kernels.{variant.stage.name}.prepare launched no {main} (the first "
                       f"kernel its OFFER names) through lab.toolchain.triton.launcher")
    kernel, grid, args, meta = launched[-1]
    return {"kernel": kernel, "grid": grid, "args": args, "meta": meta}


def _triton_compile(variant, shape, precision: str = "fp32"):
    """Compile a Triton stage for this shape and precision exactly as its launcher would, without
    launching: triton_launch() records the kernel, grid, arguments and meta-parameters its
    prepare() would launch (operands in the precision's dtype, the precision's tl.dot meta), then
    JITFunction.warmup compiles them, for the device's target with a GPU and for sm_90 (the H100)
    without one. Returns (compiled, where, grid)."""
    import warnings

    import torch

    from lab.toolchain.triton import FakeDriver, interpreted

    captured = triton_launch(variant, shape, precision)
    kernel = captured["kernel"]

    if interpreted(kernel):
        raise TritonInterpreted("TRITON_INTERPRET=1 is set, so Triton kernels are interpreted and "
                                "have no PTX or SASS; unset it")
    from triton.runtime import driver

    gpu = torch.cuda.is_available()
    previous = driver._active if not gpu else None
    where = "this GPU"
    try:
        if not gpu:
            from triton.backends.compiler import GPUTarget

            driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
            where = "sm_90 (no GPU here: compiled, never run)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = kernel.warmup(*captured["args"], grid=captured["grid"], **captured["meta"])
    except LabError:
        raise
    except Exception as exc:
        raise LabError(f"Triton could not compile {variant.label} for {where} "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                       "Triton's PTX and SASS need a GPU here") from None
    finally:
        if not gpu:
            driver._active = previous
    return compiled, where, captured["grid"]
