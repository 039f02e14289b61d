"""The index range of the kernels' arguments, and when a problem needs 64-bit offsets.

The kernels compute element offsets (a row times a leading dimension, a tile's base) in 32-bit
ints: a 32-bit multiply-add and one register per offset, where a 64-bit offset takes a wide
multiply-add with its carry and a register pair. Edge blocks form addresses up to a tile (at most
256 rows or columns) beyond an operand, so 32-bit offsets are safe while every operand's furthest
element, grown by INDEX_MARGIN rows and columns, lies below 2^31 elements from its first
(`max_square_side()`: up to 46,213 x 46,213). A problem with an operand beyond that (the A of a
2048 x 1 x 1048576 matrix-vector product, a C of 47000 x 47000) is marked `Problem.offsets64`
(lab/base/problem.py, from `needs_offsets64`), and every launcher builds its kernels with 64-bit
offsets for it: the CUDA stages with OFFSET64=1 (cuda_kernels/common.cuh: offset_t), the Triton
twins with the constexpr OFFSET64 (triton_kernels/_common.py: wide_strides). The flag is derived
from the operands' shapes and strides alone, so lab.matmul's plan cache (whose signature holds
them) keeps one build per signature. Every other problem runs the 32-bit build, instruction for
instruction the kernel measured in results/.

What stays refused (`check_index_range`, one LabError sentence): sizes and strides the kernels
cannot take as 32-bit integers (a size above SIZE_LIMIT, a stride of 2^31 or more); operands that
exist already fit in GPU memory, and every stage's grid holds them (lab/toolchain's launchers
refuse a grid beyond CUDA's limits in one sentence). docs/LAYOUTS.md, "Operands past 2^31
elements", gives the 64-bit build's cost.
"""

from __future__ import annotations

import math

from lab.base.errors import LabError

INDEX_LIMIT = 2**31 - 1  # the largest 32-bit signed int: offsets of the 32-bit build, strides
INDEX_MARGIN = 256  # rows/columns past the edge an edge tile may form an address for
# the largest M, N or K: a tile's index past the edge (below the size plus INDEX_MARGIN) must stay
# a 32-bit int, in both builds (sizes are 32-bit kernel arguments)
SIZE_LIMIT = INDEX_LIMIT - INDEX_MARGIN

def span(rows: int, cols: int, s0: int, s1: int) -> int:
    """Elements from the first to one past the furthest element addressed, margin included."""
    return (rows + INDEX_MARGIN - 1) * abs(s0) + (cols + INDEX_MARGIN - 1) * abs(s1) + 1


def fits_32bit(rows: int, cols: int, s0: int, s1: int) -> bool:
    """Whether a rows x cols operand with strides (s0, s1) runs with 32-bit offsets."""
    return span(rows, cols, s0, s1) <= INDEX_LIMIT


def needs_offsets64(*operands) -> bool:
    """Whether any of these Operands spans more than 32-bit offsets reach (margin included)."""
    return any(not fits_32bit(op.rows, op.cols, op.s0, op.s1) for op in operands)


def max_square_side() -> int:
    """The largest n such that a contiguous n x n operand runs with 32-bit offsets (46,213; one
    more and the problem gets the 64-bit build)."""
    n = int(math.isqrt(INDEX_LIMIT))
    while not fits_32bit(n, n, n, 1):
        n -= 1
    return n


def check_index_range(name: str, rows: int, cols: int, s0: int, s1: int, where: str) -> None:
    """Raise LabError unless the kernels can take a rows x cols operand with strides (s0, s1):
    sizes up to SIZE_LIMIT and strides below 2^31, the 32-bit integers of their arguments. (How
    far the operand reaches does not matter: past 2^31 elements the problem gets 64-bit offsets,
    Problem.offsets64.) A stride of a dimension of length 1 is never used, so any value passes."""
    strides = [abs(s) for s, n in ((s0, rows), (s1, cols)) if n > 1]
    if max(rows, cols) > SIZE_LIMIT or any(s > INDEX_LIMIT for s in strides):
        raise LabError(
            f"{where}: {name} is {rows:,} x {cols:,} with strides {s0:,}, {s1:,}, but the lab's "
            f"kernels take sizes up to {SIZE_LIMIT:,} and strides up to {INDEX_LIMIT:,} as 32-bit "
            f"integers; split the product into smaller blocks")
