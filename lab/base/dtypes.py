"""Which precision a call computes in, and the dtypes each precision means.

Read off the precision records (lab/base/precisions.py): the operands' and C's torch dtype names per
precision, the precision a dtype means when none is named, the precisions with per-tensor scales;
`precision_for` resolves a call's precision and refuses one the stage does not offer in one
sentence that names what would run (`mma` with float32 tensors: precision='tf32' or '3xtf32').
"""

from __future__ import annotations

from lab.base import precisions as _precisions
from lab.base.errors import LabError

# precision -> torch dtype name of A and B (the accumulation is fp32 in every precision)
DTYPE_NAMES = {r.name: r.dtype for r in _precisions.RECORDS}
# precision -> torch dtype name of C: the operands' dtype, as torch.matmul writes it, except fp8,
# whose C is bfloat16 (as torch._scaled_mm's out_dtype=torch.bfloat16 writes it; an e4m3 C would
# keep 3 bits of each result)
OUT_DTYPE_NAMES = {r.name: r.c_dtype for r in _precisions.RECORDS}
# the precision a dtype means when none is named (float32 tensors: IEEE fp32)
PRECISION_OF_DTYPE = {dt: _precisions.of_dtype(dt) for dt in dict.fromkeys(DTYPE_NAMES.values())}
# precisions whose operands come with scales (fp8: per tensor, C = scale_a * scale_b * (A @ B);
# fp8_row: per row of A and column of B; fp8_block: per 1 x 128 slice of A and 128 x 128 block of B)
SCALED = _precisions.where(scaled=True)
SCALE_KIND = {r.name: r.scale for r in _precisions.RECORDS if r.scale}


def dtypes_of(stage, backend: str | None = None) -> tuple[str, ...]:
    """The operand dtypes a registered stage takes (from its precisions)."""
    precisions = stage.precisions_for(backend) if backend else stage.all_precisions()
    return tuple(dict.fromkeys(DTYPE_NAMES[p] for p in precisions if p in DTYPE_NAMES))


def precision_for(a, precision: str | None, where: str, supported: tuple[str, ...]) -> str:
    """The precision of a call: the one named, or the one A's dtype implies (float32 -> fp32,
    bfloat16 -> bf16, float16 -> fp16); LabError (one sentence) if the stage cannot compute in it."""
    if precision is None:
        dt = str(getattr(a, "dtype", "")).removeprefix("torch.")
        precision = PRECISION_OF_DTYPE.get(dt)
        if precision is None or precision not in supported:
            raise LabError(_dtype_refusal(where, dt or type(a).__name__, precision, supported))
        return precision
    if precision not in DTYPE_NAMES:
        raise LabError(f"unknown precision {precision!r}; choose from {', '.join(DTYPE_NAMES)}")
    if precision not in supported:
        raise LabError(f"{where} computes in {', '.join(supported)}, not {precision}")
    return precision


def _dtype_refusal(where: str, dt: str, implied: str | None, supported: tuple[str, ...]) -> str:
    """Why a call whose A is `dt` (implying the precision `implied`, if any) cannot run, and what
    would: the precisions the stage offers for that dtype, or the dtypes it takes."""
    same = [p for p in supported if DTYPE_NAMES[p] == dt]
    takes = list(dict.fromkeys(DTYPE_NAMES[p] for p in supported))
    if implied is not None and same:  # e.g. float32 on a tensor-core stage: name the choices
        others = [d for d in takes if d != dt]
        tail = f", or give it {' or '.join(others)} tensors" if others else ""
        choices = " or ".join(repr(p) for p in same)
        return (f"{where} does not compute in {implied}; with {dt} tensors pass "
                f"precision={choices}{tail}")
    return f"{where} takes {' or '.join(takes)} tensors, but A is {dt}"
