"""Fit a problem to a stage's needs: `describe(a, b, c, needs, precision, scales)`.

Triton kernels (`TRITON`) take any strides, so nothing changes. CUDA kernels (`CUDA`) take BLAS
layouts: A and B row- or column-major with a leading dimension, C row-major. A column-major C is
handled without a copy by computing C^T = B^T A^T (swap the operands and their layouts,
`swapped`); an operand with no unit stride (e.g. `x[::2, ::2]`) is copied once in `prepare()`,
outside the timed call, and the time goes into `setup_ms`; a C with no unit stride is computed
into a contiguous buffer and copied back inside the timed call (`copy_back`).
"""

from __future__ import annotations

from dataclasses import replace

from lab.base.dtypes import SCALE_KIND
from lab.base.needs import CUDA, Needs
from lab.base.problem import Operand, Problem
from lab.base.timer import timer

def describe(a, b, c, needs: Needs = CUDA, precision: str = "fp32",
             scales: tuple | None = None) -> Problem:
    """The problem as a stage with `needs` sees it in `precision` (after check_operands passed;
    `scales`: fp8's, from scales_for). Its `offsets64` is set when an operand spans more than
    32-bit offsets reach (Problem's __post_init__: needs_offsets64), so the launcher builds its
    64-bit kernels for it."""
    M, K = a.shape
    N = b.shape[1]
    p = Problem(M, N, K, Operand.of("A", a), Operand.of("B", b), Operand.of("C", c),
                precision=precision, scales=scales)
    if not needs.blas:
        return p
    clock = None
    kind = SCALE_KIND.get(precision, "")
    # C^T = B^T A^T: C^T is row-major; A^T, B^T swap roles and layouts (and row scales with them;
    # block scales are not the same kind on both sides, so a column-major C of fp8_block goes
    # through a row-major buffer instead, below)
    if p.c.col_major and kind != "block":
        if kind == "row":
            scales = (scales[1].t(), scales[0].t())
        p = replace(p, M=N, N=M, a=replace(p.b.transposed(), name="A"),
                    b=replace(p.a.transposed(), name="B"), c=replace(p.c.transposed(), name="C"),
                    swapped=True, scales=scales)
    if not p.c.row_major:  # no unit stride: compute into a buffer, copy back inside the call
        buf = c.new_empty((p.M, p.N))
        p = replace(p, copy_back=(buf, p.c.tensor), c=Operand.of("C", buf))
    copies = {}
    for name in ("a", "b"):
        op = getattr(p, name)
        if not op.blas:  # no unit stride at all: one copy, outside the timed call
            clock = clock or timer(a.is_cuda)
            copies[name] = Operand.of(op.name, op.tensor.contiguous())
    if clock is not None:
        p = replace(p, **copies, setup_ms=p.setup_ms + clock.stop())
    return p
