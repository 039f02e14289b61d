"""The one check every launcher's operands pass through, and the one description launchers read.

A stage's `prepare(a, b, c, **params)` and `lab.matmul` are public: a user may hand them any
tensors. Before a launcher's own code runs, `entry()` (the decorator on every `prepare`) does:

1. **Check** (`check_operands`): torch tensors, 2-D, inner dimensions equal, C of shape M x N,
   dtypes the stage supports, one device for all three (a CUDA GPU for CUDA stages), an output
   whose elements do not overlap each other (no broadcast `expand()`ed C) nor an input, and sizes
   and strides that fit the 32-bit integers the kernels take them as. Every refusal is one
   LabError sentence.
2. **Empty problems**: M = 0 or N = 0 launches nothing; K = 0 writes zeros (as `torch.matmul`).
3. **Describe** each operand once (`Operand`): rows, columns, the two strides, whether it is
   row-major (unit column stride: BLAS `n`) or column-major (unit row stride: BLAS `t`, a
   transposed view), its leading dimension and 16-byte alignment.
4. **Fit the stage** (`Needs`): Triton kernels take any strides, so nothing changes. CUDA kernels
   take BLAS layouts: A and B row- or column-major with a leading dimension, C row-major. A
   column-major C is handled without a copy by computing C^T = B^T A^T (swap the operands and
   their layouts); an operand with no unit stride (e.g. `x[::2, ::2]`) is copied once in
   `prepare()`, outside the timed call, and the time goes into `setup_ms`; a C with no unit stride
   is computed into a contiguous buffer and copied back inside the timed call.

Index range. The kernels compute element offsets (a row times a leading dimension, a tile's
base) in 32-bit ints: a 32-bit multiply-add and one register per offset, where a 64-bit offset
takes a wide multiply-add with its carry and a register pair.
Edge blocks form addresses up to a tile (at most 256 rows or columns) beyond an operand, so 32-bit
offsets are safe while every operand's furthest element, grown by INDEX_MARGIN rows and columns,
lies below 2^31 elements from its first (`max_square_side()`: up to 46,213 x 46,213). A problem
with an operand beyond that (the A of a 2048 x 1 x 1048576 matrix-vector product, a C of 47000 x
47000) is marked `Problem.offsets64`, and every launcher builds its kernels with 64-bit offsets for
it: the CUDA stages with OFFSET64=1 (cuda_kernels/common.cuh: offset_t), the Triton twins with
the constexpr OFFSET64 (triton_kernels/_common.py: wide_strides). The flag is derived from the
operands' shapes and strides alone, so lab.matmul's plan cache (whose signature holds them) keeps
one build per signature. Every other problem runs the 32-bit build, instruction for instruction
the kernel measured in results/. What stays refused: sizes and strides the kernels cannot take as
32-bit integers (a size above SIZE_LIMIT, a stride of 2^31 or more); operands that exist already
fit in GPU memory, and every stage's grid holds them (lab/toolchain's launchers refuse a grid
beyond CUDA's limits in one sentence). docs/LAYOUTS.md, "Operands past 2^31 elements", gives the
64-bit build's cost.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, replace
from typing import Callable

from lab.contract import Offer, Prepared
from lab import precisions as _precisions
from lab.errors import LabError

INDEX_LIMIT = 2**31 - 1  # the largest 32-bit signed int: offsets of the 32-bit build, strides
INDEX_MARGIN = 256  # rows/columns past the edge an edge tile may form an address for
# the largest M, N or K: a tile's index past the edge (below the size plus INDEX_MARGIN) must stay
# a 32-bit int, in both builds (sizes are 32-bit kernel arguments)
SIZE_LIMIT = INDEX_LIMIT - INDEX_MARGIN
# Read off the precision records (lab/precisions.py):
# precision -> torch dtype name of A and B (the accumulation is fp32 in every precision)
DTYPE_NAMES = {r.name: r.dtype for r in _precisions.RECORDS}
# precision -> torch dtype name of C: the operands' dtype, as torch.matmul writes it, except fp8,
# whose C is bfloat16 (as torch._scaled_mm's out_dtype=torch.bfloat16 writes it; an e4m3 C would
# keep 3 bits of each result)
OUT_DTYPE_NAMES = {r.name: r.c_dtype for r in _precisions.RECORDS}
# the precision a dtype means when none is named (float32 tensors: IEEE fp32)
PRECISION_OF_DTYPE = {dt: _precisions.of_dtype(dt) for dt in dict.fromkeys(DTYPE_NAMES.values())}
# precisions whose operands come with per-tensor scales: C = scale_a * scale_b * (A @ B)
SCALED = _precisions.where(scaled=True)


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


def scales_for(a, precision: str, scale_a, scale_b, where: str) -> tuple | None:
    """fp8's per-tensor scales as two float32 tensors of one element on A's device (a Python
    number becomes one; None is 1); None for a precision without scales. LabError (one
    sentence) for scales given to another precision, or a scale of another kind, size, dtype or
    device."""
    import torch

    if precision not in SCALED:
        if scale_a is not None or scale_b is not None:
            raise LabError(f"{where}: scale_a and scale_b are fp8's per-tensor scales, and this "
                           f"call computes in {precision}")
        return None
    out = []
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is None:
            s = 1.0
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            if not math.isfinite(s):
                raise LabError(f"{where}: {name} must be finite, not {s}")
            s = torch.full((1,), float(s), dtype=torch.float32, device=a.device)
        if not isinstance(s, torch.Tensor):
            raise LabError(f"{where}: {name} must be a number or a one-element float32 tensor, "
                           f"not {type(s).__name__}")
        if s.numel() != 1 or s.dtype != torch.float32:
            raise LabError(f"{where}: {name} must be one float32 value (a per-tensor scale), but "
                           f"it is {str(s.dtype).removeprefix('torch.')} of shape "
                           f"{tuple(s.shape)}")
        if s.device != a.device:
            raise LabError(f"{where}: {name} is on {_dev(s)} and the operands on {_dev(a)}; move "
                           f"it with .to(a.device)")
        out.append(s.detach().reshape(1) if s.dim() != 1 or s.requires_grad else s)
    return tuple(out)


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


# ------------------------------------------------------------------------------------ checking


def _dev(t) -> str:
    return "the CPU" if t.device.type == "cpu" else f"{t.device}"


def _overlaps(x, y) -> bool:
    """Whether the memory spans of x and y intersect (conservative: interleaved views count)."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    if x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False

    def bounds(t):
        lo = t.data_ptr()
        hi = lo + t.element_size() * (1 + sum((n - 1) * abs(s) for n, s in
                                              zip(t.shape, t.stride())))
        return lo, hi

    (a0, a1), (b0, b1) = bounds(x), bounds(y)
    return a0 < b1 and b0 < a1


def _self_overlapping(t) -> bool:
    """Two different (i, j) of t at one address: a broadcast (stride 0) or overlapping strides."""
    dims = sorted((abs(s), n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach = 1
    for stride, n in dims:
        if stride < reach:
            return True
        reach = stride * n
    return False


def check_operands(a, b, c, where: str, needs: Needs = CUDA, device: str | None = None) -> None:
    """Raise LabError (one sentence) unless C = A @ B can be computed by `where` on these.

    `device`: "cuda" when the kernel needs a CUDA GPU, "any" when CPU tensors are fine too (the
    Triton interpreter); None derives it from `needs` (blas -> cuda)."""
    import torch

    for name, t in (("A", a), ("B", b), ("C", c)):
        if not isinstance(t, torch.Tensor):
            raise LabError(f"{where}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 2:
            raise LabError(f"{where}: {name} must be a 2-D matrix, but it has {t.dim()} "
                           f"dimension{'s' if t.dim() != 1 else ''} (shape {tuple(t.shape)})")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise LabError(f"{where}: the inner dimensions differ: A is {M}x{K} and B is {K2}x{N}, so "
                       f"A @ B is undefined")
    if tuple(c.shape) != (M, N):
        raise LabError(f"{where}: C (out) must be {M}x{N} for a {M}x{K} A and a {K}x{N} B, but it "
                       f"is {c.shape[0]}x{c.shape[1]}")
    names = [str(t.dtype).removeprefix("torch.") for t in (a, b, c)]
    if needs.out is None and not a.dtype == b.dtype == c.dtype:
        raise LabError(f"{where}: A is {names[0]}, B is {names[1]} and C (out) is {names[2]}, but "
                       f"the three must have one dtype; convert with .to(), such as "
                       f"b.to({str(a.dtype)})")
    if needs.out is not None and a.dtype != b.dtype:
        raise LabError(f"{where}: A is {names[0]} and B is {names[1]}, but the two must have one "
                       f"dtype; convert with .to(), such as b.to({str(a.dtype)})")
    for name, dt in (("A", names[0]), ("B", names[1])):
        if dt not in needs.dtypes:
            raise LabError(f"{where} takes {' or '.join(needs.dtypes)} tensors, but {name} is {dt}")
    if needs.out is not None and names[2] != needs.out:
        raise LabError(f"{where} writes a {needs.out} C from {names[0]} operands, but C (out) is "
                       f"{names[2]}; pass out=torch.empty(..., dtype=torch.{needs.out})")
    if needs.out is None and names[2] not in needs.dtypes:
        raise LabError(f"{where} takes {' or '.join(needs.dtypes)} tensors, but C is {names[2]}")
    if not (a.device == b.device == c.device):
        raise LabError(f"{where}: A, B and C must be on one device, but they are on "
                       f"{_dev(a)}, {_dev(b)} and {_dev(c)}")
    if _self_overlapping(c):
        raise LabError(f"{where}: C (out) has elements that share memory (strides "
                       f"{tuple(c.stride())}, as from expand()); pass a C whose elements are "
                       f"distinct, such as torch.empty({M}, {N})")
    for name, t in (("A", a), ("B", b)):
        if _overlaps(c, t):
            raise LabError(overlap_message(where, name))
    for name, t in (("A", a), ("B", b), ("C", c)):
        if t.numel():
            op = Operand.of(name, t)
            check_index_range(name, op.rows, op.cols, op.s0, op.s1, where)
    # last: what is wrong with the operands themselves is worth saying first, on any device
    device = device or ("cuda" if needs.blas else "any")
    if device == "cuda" and a.device.type != "cuda":
        if not torch.cuda.is_available() and not needs.blas:  # a Triton kernel, compiled
            raise LabError(f"{where} runs CPU tensors only under the Triton interpreter, which is "
                           f"off in this process; set TRITON_INTERPRET=1 before importing the lab "
                           f"(lab.matmul switches it on by itself on a machine without a GPU)")
        if not torch.cuda.is_available():
            raise LabError(f"{where} is a CUDA kernel and needs a CUDA GPU, but this machine has "
                           f"none; backend='triton' runs the stage's Triton twin on CPU tensors "
                           f"under the Triton interpreter")
        raise LabError(f"{where} runs on a CUDA GPU, but the tensors are on {_dev(a)}; move them "
                       f"with .cuda() (Triton stages also run CPU tensors under the Triton "
                       f"interpreter, TRITON_INTERPRET=1)")
    if a.device.type not in ("cuda", "cpu"):
        raise LabError(f"{where} runs on CUDA (or, for Triton, on CPU tensors under the "
                       f"interpreter), not on {a.device.type} tensors")
    if a.device.type == "cuda":
        import torch

        current = torch.cuda.current_device()
        if a.device.index is not None and a.device.index != current:
            raise LabError(f"{where}: the tensors are on {a.device} but the current CUDA device "
                           f"is cuda:{current}, where the kernel would be launched; call "
                           f"torch.cuda.set_device({a.device.index}) or use "
                           f"`with torch.cuda.device({a.device.index}):`")


def overlap_message(where: str, name: str) -> str:
    return (f"{where}: C (out) shares memory with {name}; the kernel would read values it has "
            f"already overwritten, so pass a separate C")


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


# ------------------------------------------------------------------------------------ fitting


class _Timer:
    """CUDA events on the current stream on a GPU, perf_counter on the CPU."""

    def __init__(self, cuda: bool):
        # Inside a CUDA graph capture an event cannot be waited on; the copy is captured untimed.
        self.cuda = cuda
        self.capturing = cuda and _capturing()
        if self.capturing:
            return
        if cuda:
            import torch

            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.capturing:
            return 0.0
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return float(self.start.elapsed_time(self.end))
        return (time.perf_counter() - self.t0) * 1e3


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def timer(cuda: bool) -> _Timer:
    return _Timer(cuda)


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
    if p.c.col_major:  # C^T = B^T A^T: C^T is row-major; A^T, B^T swap roles and layouts
        p = replace(p, M=N, N=M, a=replace(p.b.transposed(), name="A"),
                    b=replace(p.a.transposed(), name="B"), c=replace(p.c.transposed(), name="C"),
                    swapped=True)
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


# The Triton interpreter runs every program in numpy: about 1.5 s for a 256^3 problem with the
# tiled stages (lab/run.py's CPU_MAX_WORK, the size CPU mode stops at), and in proportion beyond.
INTERPRETER_WARN_WORK = 256**3
INTERPRETER_S_PER_WORK = 1.5 / 256**3
_WARNED_INTERPRETER: list[bool] = []


def _warn_interpreter_time(where: str, M: int, N: int, K: int) -> None:
    """Once per process: a CPU call beyond 256^3 runs for a while under the interpreter."""
    work = M * N * K
    if work <= INTERPRETER_WARN_WORK or _WARNED_INTERPRETER:
        return
    import warnings

    _WARNED_INTERPRETER.append(True)
    seconds = work * INTERPRETER_S_PER_WORK
    warnings.warn(f"{where} runs {M}x{N}x{K} on CPU tensors under the Triton interpreter, which "
                  f"computes every program in numpy: expect about {seconds:,.0f} s or more (some "
                  f"1.5 s per 256^3 of M*N*K); a CUDA GPU runs it in milliseconds",
                  UserWarning, stacklevel=4)


def _copy_back(kernel: Prepared, buf, user_c) -> Prepared:
    import torch

    fields = dict(resources=kernel.resources, setup_ms=kernel.setup_ms, build=kernel.build,
                  kernel_only=kernel.kernel_only or kernel, **kernel.extra)
    if kernel.steps is not None:  # the copy is part of the computation (and of a replay)
        return Prepared.of_steps([kernel, (torch.Tensor.copy_, (user_c, buf))], **fields)

    def run():
        kernel()
        user_c.copy_(buf)  # a C with no unit stride: the copy is part of the computation

    return Prepared(run, resources=kernel.resources, setup_ms=kernel.setup_ms, build=kernel.build,
                    kernel_only=kernel.kernel_only or kernel, **kernel.extra)


def entry(offer: Offer, needs: Needs | None = None):
    """Decorator for a stage's `prepare(problem, **params)`, declared by its Offer: the public
    `prepare(a, b, c, precision=None, scale_a=None, scale_b=None, **params)` (the scales: fp8's
    per-tensor scales, scales_for) checks the parameters (offer.validate) and the
    operands, handles empty problems, describes the operands once (a frozen Problem, fitted to
    the kernel's needs and carrying the precision) and returns the stage's Prepared launch, with
    the shared code's one-time copies added to its `setup_ms` and the Problem as `.problem`."""
    needs = needs or (CUDA if offer.backend == "cuda" else TRITON)
    where = offer.where
    # CUDA kernels need a GPU; Triton kernels run CPU tensors only under the interpreter.
    device = "cuda" if offer.backend == "cuda" else None

    def wrap(inner: Callable) -> Callable:
        @functools.wraps(inner)
        def prepare(a, b, c, precision: str | None = None, scale_a=None, scale_b=None,
                    **params):
            precision = precision_for(a, precision, where, offer.precisions)
            offer.validate(params, precision)  # the stage's parameter rules first
            out = OUT_DTYPE_NAMES[precision]
            call_needs = replace(needs, dtypes=(DTYPE_NAMES[precision],),
                                 out=None if out == DTYPE_NAMES[precision] else out)
            interpreting = os.environ.get("TRITON_INTERPRET") == "1"
            check_operands(a, b, c, where, call_needs,
                           device or ("any" if interpreting else "cuda"))
            M, K = a.shape
            N = b.shape[1]
            if interpreting and a.device.type == "cpu":
                _warn_interpreter_time(where, M, N, K)
            if M == 0 or N == 0:  # nothing to compute
                return Prepared.of_steps([])
            if K == 0:  # an empty sum: C is zero, as torch.matmul gives
                import torch

                return Prepared.of_steps([(torch.Tensor.zero_, (c,))])
            # autograd plays no part here (an in-place write to a C that requires grad would be
            # refused); the tensors themselves are kept where they need no detaching, so a plan
            # (lab/plan.py) can find them in the launch's steps
            a, b, c = (t.detach() if t.requires_grad else t for t in (a, b, c))
            scales = scales_for(a, precision, scale_a, scale_b, where)
            p = describe(a, b, c, needs, precision, scales)
            launch = inner(p, **params)
            if not isinstance(launch, Prepared):
                raise TypeError(f"{where}: prepare() must return a lab.contract.Prepared, not "
                                f"{type(launch).__name__}")
            if p.copy_back is not None:
                launch = _copy_back(launch, *p.copy_back)
            if p.setup_ms:
                launch.add_setup(p.setup_ms)
            launch.problem = p
            return launch

        prepare.inner = inner
        prepare.offer = offer
        prepare.needs = needs
        return prepare

    return wrap


# ------------------------------------------------------------------------- zero padding


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class Padded:
    """A problem (lab.operands.Problem) with its operands zero-padded to tile multiples, and what
    that took.

    M and N are rounded up to multiples of `tile`, K to a multiple of `k_multiple` (the K depth of
    one stage in elements, TILE * ktile for the CUDA kernel; `tile` when not given). An operand
    that needs padding is copied into a zero, row-major buffer; one that does not is used as it
    is, in its own layout and leading dimension (the kernel reads layouts and leading dimensions).
    `problem` is the padded problem the kernel runs on; `with_crop` makes the timed call."""

    def __init__(self, p, tile: int, k_multiple: int | None = None):
        M, N, K = p.M, p.N, p.K
        self.M, self.N, self.K = M, N, K
        self.Mp, self.Np = _round_up(M, tile), _round_up(N, tile)
        self.Kp = _round_up(K, k_multiple or tile)
        self.pads_a = (self.Mp, self.Kp) != (M, K)
        self.pads_b = (self.Kp, self.Np) != (K, N)
        self.pads_c = (self.Mp, self.Np) != (M, N)
        self.c = p.c.tensor
        self.setup_ms = 0.0
        a, b, c = p.a, p.b, p.c
        if self.pads_a or self.pads_b or self.pads_c:
            clock = timer(p.c.tensor.is_cuda)
            if self.pads_a:
                a = Operand.of("A", _zero_padded(p.a.tensor, self.Mp, self.Kp))
            if self.pads_b:
                b = Operand.of("B", _zero_padded(p.b.tensor, self.Kp, self.Np))
            if self.pads_c:
                # The kernel writes every element of the padded C; start it as NaN (like the
                # harness does with c) so a kernel that skipped one could not pass on stale memory.
                c = Operand.of("C", p.c.tensor.new_full((self.Mp, self.Np), float("nan")))
            self.setup_ms = clock.stop()
        self.cpad = c.tensor
        self.problem = replace(p, M=self.Mp, N=self.Np, K=self.Kp, a=a, b=b, c=c, setup_ms=0.0,
                               copy_back=None)

    def with_crop(self, launch, **fields) -> Prepared:
        """The timed call as a Prepared: `launch` (a Prepared with steps, or a KernelLaunch's
        step) alone, or followed by the crop copy C <- padded C[:M, :N]; `fields` go to the
        Prepared (resources, ...), with this padding's setup_ms."""
        import torch

        steps = [launch]
        if self.pads_c:
            steps.append((torch.Tensor.copy_, (self.c, self.cpad[: self.M, : self.N])))
        return Prepared.of_steps(steps, setup_ms=self.setup_ms, **fields)


def _zero_padded(x, rows: int, cols: int):
    out = x.new_zeros((rows, cols))
    out[: x.shape[0], : x.shape[1]].copy_(x)
    return out
