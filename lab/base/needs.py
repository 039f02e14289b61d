"""What a backend's kernels require of their operands (`Needs`), and the two markers.

`CUDA` (BLAS layouts: A and B row- or column-major with a leading dimension, C row-major) and
`TRITON` (any strides). `entry` (lab/base/entry.py) picks one from the Offer's backend and narrows
its dtypes to the call's precision; `describe` (lab/base/describe.py) fits a Problem to it.
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Needs:
    """What a stage's kernels require of their operands.

    blas: A and B row- or column-major, C row-major (CUDA kernels: leading dimensions and a
    layout per operand); False: any strides (Triton kernels take all six strides)."""

    blas: bool = True
    dtypes: tuple[str, ...] = ("float32",)  # what A, B and C may be (one precision's dtype)
    out: str | None = None  # C's dtype where it differs from A's and B's (fp8: bfloat16)


CUDA = Needs(blas=True)
TRITON = Needs(blas=False)
