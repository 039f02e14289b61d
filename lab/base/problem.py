"""The one description of a problem that launchers read: `Operand` and `Problem`.

An `Operand` is one matrix as a kernel sees it: rows, columns, the two strides, whether it is
row-major (unit column stride: BLAS `n`) or column-major (unit row stride: BLAS `t`, a transposed
view), its leading dimension and 16-byte alignment. A `Problem` is C = A @ B as a launcher must
compute it: sizes, the three Operands, the precision, fp8's scales, and what the shared code did
(lab/base/describe.py: a copy's cost, the transposed problem C^T = B^T A^T, a buffer for a C with
no unit stride); frozen, and marked `offsets64` where an operand needs 64-bit offsets
(lab/base/index_range.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lab.base.index_range import needs_offsets64

@dataclass(frozen=True)
class Operand:
    """One matrix as a kernel sees it. `tensor` is what the kernel reads or writes (the user's
    tensor, or a copy that prepare() made); element (i, j) is at tensor.data_ptr() + 4*(i*s0 +
    j*s1) bytes."""

    name: str  # "A", "B" or "C"
    tensor: object
    rows: int
    cols: int
    s0: int  # stride between rows, in elements
    s1: int  # stride between columns

    @classmethod
    def of(cls, name: str, tensor) -> "Operand":
        r, c = tensor.shape
        s0, s1 = tensor.stride()
        # A stride of a dimension of size 1 is never used; give it the value that makes the
        # operand look like the contiguous matrix it is.
        if r <= 1:
            s0 = max(c, 1) if s1 == 1 or c <= 1 else s0
        if c <= 1:
            s1 = 1
        return cls(name, tensor, r, c, s0, s1)

    @property
    def row_major(self) -> bool:
        return self.s1 == 1

    @property
    def col_major(self) -> bool:
        return self.s0 == 1 and not self.row_major

    @property
    def blas(self) -> bool:
        """Row- or column-major: a BLAS layout with a leading dimension."""
        return self.row_major or self.col_major

    @property
    def trans(self) -> bool:
        """BLAS 't': stored transposed (column-major)."""
        return self.col_major

    @property
    def ld(self) -> int:
        """Leading dimension: elements between consecutive rows (n) or columns (t)."""
        if not self.blas:
            raise ValueError(f"{self.name} has no unit stride, so no leading dimension")
        return self.s1 if self.trans else self.s0

    @property
    def letter(self) -> str:
        return "t" if self.trans else "n" if self.row_major else "s"

    def aligned(self, nbytes: int = 16) -> bool:
        """Base pointer and every line along the leading dimension start on nbytes boundaries."""
        return (self.tensor.data_ptr() % nbytes == 0
                and (self.ld * self.tensor.element_size()) % nbytes == 0)

    def transposed(self) -> "Operand":
        """The same memory seen as the transposed matrix."""
        return replace(self, tensor=self.tensor.t(), rows=self.cols, cols=self.rows, s0=self.s1,
                       s1=self.s0)


@dataclass(frozen=True)
class Problem:
    """C = A @ B as the launcher must compute it: sizes, the three operands, the precision, and
    what the shared code already did (a copy's cost, a transposed problem). Immutable: the
    harness describes a row once (describe()) and every launcher reads the same description."""

    M: int
    N: int
    K: int
    a: Operand
    b: Operand
    c: Operand
    setup_ms: float = 0.0  # one-time copies made here, outside the timed call
    precision: str = "fp32"  # fp32 | tf32 | 3xtf32 | bf16 | fp16 | fp8 (lab/stages.py PRECISIONS)
    # fp8: (scale_a, scale_b), float32 tensors of one element on the operands' device; the kernel
    # writes C = scale_a * scale_b * (A @ B). None for the other precisions.
    scales: tuple | None = None
    swapped: bool = False  # computing C^T = B^T A^T (C was column-major)
    copy_back: object = None  # (buffer, user C): the kernel writes buffer, then C <- buffer
    # some operand spans 2^31 elements or more (margin included): build with 64-bit offsets
    offsets64: bool = False

    def __post_init__(self) -> None:
        # Derived from the operands' shapes and strides, here, so that describe() and every
        # Problem made from one with replace() (a padded or realigned copy of an operand, the
        # transposed problem) are marked when their operands need it; once marked, a problem
        # stays marked (64-bit offsets are correct for any problem, only slower).
        if not self.offsets64 and needs_offsets64(self.a, self.b, self.c):
            object.__setattr__(self, "offsets64", True)

    @property
    def layout(self) -> str:
        return self.a.letter + self.b.letter
