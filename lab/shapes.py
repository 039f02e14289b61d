"""Shapes are data: the default sets and the parser for --sizes."""

from __future__ import annotations

from typing import NamedTuple

from lab.base.errors import LabError
from lab.base.index_range import SIZE_LIMIT


class Shape(NamedTuple):
    M: int
    N: int
    K: int

    def __str__(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K


# On a GPU: aligned and unaligned squares, and a non-square shape with an odd K.
GPU_SIZES = "1024,1025,2048,4096,4096x2048x1000"
# Under the Triton interpreter (CPU mode): small, odd, not tile multiples.
CPU_SIZES = "64,65,17x33x129"
# Odd shapes the tests run on: 1s, primes, not multiples of any tile.
TEST_SHAPES = (Shape(1, 1, 1), Shape(17, 33, 129), Shape(65, 64, 63), Shape(3, 130, 2),
               Shape(64, 64, 64))
GPU_TEST_SHAPES = (*TEST_SHAPES, Shape(1, 1025, 17), Shape(1025, 1025, 1025),
                   Shape(1000, 1500, 257), Shape(256, 384, 1024))
# Named size sets --sizes takes in its comma list. sweep: the powers of two 256..8192 and, next to
# them, one more (odd, so no tile divides it: the unaligned edge each kernel must handle).
PRESETS = {
    "sweep": "256,257,512,1024,1025,2048,2049,4096,4097,8192",
}


def parse_sizes(text: str) -> list[Shape]:
    """'1024,1025,512x768x333' -> shapes. A plain number is square; MxNxK names all three; a
    preset name (sweep) stands for its sizes, in place. Repeated shapes count once."""
    shapes: list[Shape] = []
    tokens = []
    for token in (t.strip().lower() for t in text.split(",")):
        tokens += PRESETS[token].split(",") if token in PRESETS else [token]
    for token in tokens:
        if not token:
            continue
        parts = token.split("x")
        if len(parts) not in (1, 3):
            raise LabError(f"size {token!r} must be one number (square) or MxNxK, e.g. 512x768x333")
        try:
            dims = [int(p) for p in parts]
        except ValueError:
            raise LabError(
                f"size {token!r} must be whole numbers, one (square) or MxNxK, e.g. 512x768x333, "
                f"or a preset ({', '.join(PRESETS)})"
            ) from None
        if any(d < 1 for d in dims):
            raise LabError(f"size {token!r} must be positive: every dimension needs M, N, K >= 1")
        shape = Shape(*(dims * 3 if len(dims) == 1 else dims))
        # the kernels take sizes as 32-bit ints (lab/base/problem.py); a matrix past 2^31 elements
        # runs with 64-bit offsets
        if max(shape) > SIZE_LIMIT:
            raise LabError(f"size {token} has a dimension above {SIZE_LIMIT:,}, beyond the 32-bit "
                           f"sizes the kernels take; choose smaller sizes")
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise LabError("--sizes is empty; give sizes such as 1024,1025,512x768x333")
    return shapes
