"""realign, shared by the Triton twins that offer it (double_buffered, warptiling), and the copies
of the TMA twins (tma_wgmma, persistent: the last section, tma_operands).

A 16-byte load or cp.async needs 4 floats that are contiguous, start on a 16-byte boundary and lie
under one mask value. realign=True copies each A or B that cannot give that (needs_realign: no
unit stride, a leading dimension that is not a multiple of REALIGN_LD elements, or a base pointer
off a 16-byte boundary) into a buffer:
  setup, once in prepare(), outside the timing (realign_setup: launch.setup_ms): the buffer is
    allocated in the operand's own layout (a column-major operand stays column-major; one with no
    unit stride becomes row-major), its leading dimension rounded up to a multiple of REALIGN_LD
    elements, its storage 16-byte aligned, and zeroed (realign_buffer);
  timed, at the start of every call (with_copies): one launch of realign_copy_kernel copies
    every such operand into its buffer (both A and B in one grid: one kernel instead of a
    torch copy_ per operand), then the stage's launch (its kernel, or kernels: split-K's GEMM and
    reduction) on the buffers. The copies never write the padding, so it stays zero.
The kernel side (realign_flags): a buffer's hint (VEC_A / VEC_B, its layout letter) is on, and
PAD_A / PAD_B tell the kernel that past the operand's contiguous dimension, up to that size
rounded up to a multiple of 4, lie zeros it may read, so that its mask (or its wrap) along that
dimension can be constant per float4 whatever the size. The launch callable names the copied
operands (launch.realigned: (), ("A",), ("B",) or ("A", "B")) and, when there are any, offers
the stage's launch without the copies as launch.kernel_only (for a profiler).
"""

from __future__ import annotations

from dataclasses import replace

import triton
import triton.language as tl

from lab.base.contract import Prepared
from lab.base.timer import timer
from lab.toolchain.triton import launcher


def cdiv(a: int, b: int) -> int:
    return -(-a // b)

# a buffer's leading dimension is a multiple of this many elements (64 bytes of fp32), so that
# Triton's integer specialization sees it (divisible by 16) as well as the hints do
REALIGN_LD = 16


# the copy kernel's tile: COPY_LINES lines of COPY_WIDTH elements (512 bytes of fp32 per line)
COPY_LINES = 16
COPY_WIDTH = 128


@triton.jit
def _copy_lines(src, dst, lines, width, s_line, s_elem, d_line, t,
                BLOCK_L: tl.constexpr, BLOCK_W: tl.constexpr):
    """Tile t of a (lines x width) copy: dst[i * d_line + j] = src[i * s_line + j * s_elem]."""
    per_line = tl.cdiv(width, BLOCK_W)
    i = ((t // per_line) * BLOCK_L + tl.arange(0, BLOCK_L)).to(tl.int64)[:, None]
    j = ((t % per_line) * BLOCK_W + tl.arange(0, BLOCK_W)).to(tl.int64)[None, :]
    m = (i < lines) & (j < width)
    x = tl.load(src + i * s_line + j * s_elem, mask=m)
    tl.store(dst + i * d_line + j, x, mask=m)


@triton.jit
def realign_copy_kernel(src0, dst0, lines0, width0, s0_line, s0_elem, d0_line, tiles0,
                        src1, dst1, lines1, width1, s1_line, s1_elem, d1_line,
                        BLOCK_L: tl.constexpr, BLOCK_W: tl.constexpr):
    """Both operands' copies in one grid: programs [0, tiles0) copy the first, the rest the
    second (the same tensors twice, with no programs left for it, when only one is copied)."""
    pid = tl.program_id(0)
    if pid < tiles0:
        _copy_lines(src0, dst0, lines0, width0, s0_line, s0_elem, d0_line, pid, BLOCK_L, BLOCK_W)
    else:
        _copy_lines(src1, dst1, lines1, width1, s1_line, s1_elem, d1_line, pid - tiles0,
                    BLOCK_L, BLOCK_W)


def _lines(buf, user) -> tuple:
    """One copy as lines of the buffer's contiguous dimension: (src, dst, lines, width, source
    stride between lines, source stride within a line, buffer stride between lines)."""
    if buf.stride(1) == 1:  # a row-major buffer: lines are rows
        return (user, buf, buf.shape[0], buf.shape[1], user.stride(0), user.stride(1),
                buf.stride(0))
    return (user, buf, buf.shape[1], buf.shape[0], user.stride(1), user.stride(0), buf.stride(1))


def copy_into_buffers(pairs: tuple) -> Prepared:
    """The copy of every (buffer view, user tensor) pair in `pairs` (one or two) as one launch of
    realign_copy_kernel (a Prepared with steps); no steps when there is nothing to copy."""
    jobs = [_lines(buf, user) for buf, user in pairs]
    tiles = [cdiv(j[2], COPY_LINES) * cdiv(j[3], COPY_WIDTH) for j in jobs]
    total = sum(tiles)
    if total == 0:
        return Prepared.of_steps([])
    first, second = jobs[0], jobs[-1]
    return launcher(realign_copy_kernel, (total,), (*first, tiles[0], *second), helper=True,
                    BLOCK_L=COPY_LINES, BLOCK_W=COPY_WIDTH, num_warps=4)


def needs_realign(op) -> bool:
    """Whether realign=True copies this operand: no unit stride, a leading dimension that is not a
    multiple of REALIGN_LD elements, or a base pointer that is not 16-byte aligned."""
    return not op.blas or op.ld % REALIGN_LD != 0 or op.tensor.data_ptr() % 16 != 0


def realign_buffer(op, col_major: bool | None = None):
    """Setup, once in prepare() (untimed): a zeroed buffer for operand `op` in its own layout (a
    column-major operand stays column-major; one with no unit stride becomes row-major), or in
    the layout `col_major` names (the TMA twins' K-major copies), its leading dimension rounded up
    to a multiple of REALIGN_LD elements, its storage 16-byte aligned. Returns the Operand the
    kernel reads (the buffer's view, with its real strides). The timed call fills the view; the
    padding is never written again, so it stays zero."""
    import torch

    from lab.base.problem import Operand

    t = op.tensor
    col_major = op.col_major if col_major is None else col_major
    lines, width = (op.cols, op.rows) if col_major else (op.rows, op.cols)
    ld = cdiv(width, REALIGN_LD) * REALIGN_LD
    per16 = max(1, 16 // t.element_size())  # elements per 16 bytes
    store = torch.zeros(lines * ld + per16, dtype=t.dtype, device=t.device)
    skip = (-store.data_ptr() % 16) // t.element_size()  # to the first 16-byte boundary (0 here)
    view = store[skip:skip + lines * ld].view(lines, ld)[:, :width]
    if col_major:
        view = view.t()
    return Operand(op.name, view, op.rows, op.cols, *view.stride())


def realign_operands(p):
    """(the Problem with its misaligned A and/or B pointing at buffers made here, {name: (buffer
    view, user tensor)}: the copies the timed call makes)."""
    copies, buffers = {}, {}
    for attr in ("a", "b"):
        op = getattr(p, attr)
        if needs_realign(op):
            buf = realign_buffer(op)
            copies[op.name] = (buf.tensor, op.tensor)
            buffers[attr] = buf
    return replace(p, **buffers), copies


def realign_setup(p, realign: bool):
    """prepare()'s setup for the `realign` knob: (problem, copies, setup_ms). realign=False, or
    nothing misaligned: (p, {}, None); else realign_operands(p) and the milliseconds it took
    (allocating and zeroing the buffers, outside the timing)."""
    if not realign:
        return p, {}, None
    clock = timer(p.a.tensor.is_cuda)
    p, copies = realign_operands(p)
    return p, copies, (clock.stop() if copies else None)


def realign_flags(p, copies: dict) -> dict:
    """The kernel's flags for the copied operands, to update vec_hints(p) with: a buffer has
    16-byte lines and a 16-byte base by construction, so its hint is on (VEC_A / VEC_B: its layout
    letter); its zero padding makes the mask along its contiguous dimension constant per float4
    (PAD_A / PAD_B), whatever that size is."""
    flags = {}
    for name, attr in (("A", "a"), ("B", "b")):
        if name in copies:
            flags[f"VEC_{name}"] = getattr(p, attr).letter
            flags[f"PAD_{name}"] = True
    return flags


def with_copies(launch, copies: dict, setup_ms: float | None, problem=None):
    """The launch callable of a stage with realign: `launch` itself (launch.realigned = ()) when
    nothing is copied; else a callable that copies the operands into their buffers (one launch
    of realign_copy_kernel), then runs `launch` (timed, every call). It keeps launch's
    attributes (resources, a split-K workspace) and adds kernel_only (launch without the copies,
    for a profiler), copy_pairs ((buffer view, user tensor) per copied operand), realigned (the
    operands copied), setup_ms (launch's own setup plus the buffers') and kernel_problem (the
    Problem the kernel reads: `problem`, the buffers in place of the copied operands)."""
    if not copies:
        launch.extra.update(realigned=(), kernel_problem=problem)
        return launch

    pairs = tuple(copies.values())
    copy = copy_into_buffers(pairs)
    own = launch.setup_ms
    fields = dict(resources=launch.resources,
                  setup_ms=setup_ms if own is None else own + (setup_ms or 0.0),
                  kernel_only=launch,  # the kernel(s) alone, for a profiler
                  **launch.extra,
                  copy_pairs=pairs,  # (buffer view, user tensor) per copied operand
                  realigned=tuple(copies),  # the operands copied: ("A",), ("B",), both
                  kernel_problem=problem)
    if launch.steps is None:  # an opaque launch: an opaque call
        def launch_with_copy():
            copy()
            launch()

        return Prepared(launch_with_copy, **fields)
    # timed, every call: the copies (one kernel), then the kernel(s); the setup made zeroed
    # buffers that every call refills, so a replay may reuse them
    return Prepared.of_steps([copy, launch], **{**fields, "setup_reusable": True})


# ------------------------------------------------ TMA descriptors: what one reads, what is copied
#
# The TMA twins (tma_wgmma, persistent) read A and B through tensor descriptors
# (tl.make_tensor_descriptor, triton_kernels/_common.py tma_descriptor). A descriptor describes a
# matrix whose last dimension has unit stride and whose base address and line stride are
# multiples of 16 bytes: a row-major operand is read as it is, a column-major one through a
# descriptor of its transpose. Any other A or B (a leading dimension that is not a multiple of 16
# bytes, such as a bf16 matrix of 3001 columns; an unaligned base; no unit stride) is copied in
# every call, timed, into a buffer of realign_buffer's form (tma_operands, then with_copies): the
# copy is what a caller holding such an operand pays, as cuBLAS's slower kernels are what it pays
# there.

TMA_ALIGN = 16  # bytes: a descriptor's base address and line stride are multiples of this


def tma_lines(op, transposed_first: bool = False) -> tuple[bool, int] | None:
    """How a TMA descriptor reads operand `op` where it lies: (transposed, ld) -- the rows of a
    row-major operand (False, its row stride) or of a column-major operand's transpose (True, its
    column stride) -- or None where no descriptor can: no unit stride, a base off a 16-byte
    boundary, lines not a multiple of 16 bytes apart, or lines that overlap. A single line has no
    stride to check: ld is then its length rounded up to 16 bytes (the descriptor never steps
    it). Where both orientations serve (a vector), `transposed_first` says which to take."""
    t = op.tensor
    if t.data_ptr() % TMA_ALIGN:
        return None
    per = max(1, TMA_ALIGN // t.element_size())  # elements per 16 bytes
    ways = ((False, op.s1, op.s0, op.rows, op.cols), (True, op.s0, op.s1, op.cols, op.rows))
    for transposed, unit, ld, lines, width in (ways[::-1] if transposed_first else ways):
        if unit != 1:
            continue
        if lines <= 1:
            return transposed, cdiv(width, per) * per
        if ld >= width and ld % per == 0:
            return transposed, ld
    return None


def tma_operands(p, kmajor: bool):
    """prepare()'s setup for the TMA twins: (problem, copies, setup_ms). Each A or B that no
    descriptor reads where it lies (tma_lines) -- or, with `kmajor`, that is not K-major (A
    column-major, B row-major: TF32 and fp8 wgmma read their shared operands K-major only; an fp8
    buffer's lines are multiples of 16 one-byte elements) -- gets a zeroed buffer (realign_buffer:
    K-major with kmajor, else in the operand's own layout), allocated here, outside the timing
    (setup_ms; None when nothing is copied). The problem points at the buffers; copies, {name:
    (buffer view, user tensor)}, are what with_copies runs in every call."""
    buffers, copies, clock = {}, {}, None
    for attr, k_major_transposed in (("a", False), ("b", True)):
        op = getattr(p, attr)
        lines = tma_lines(op, transposed_first=k_major_transposed)
        if lines is not None and not (kmajor and lines[0] != k_major_transposed):
            continue
        clock = clock or timer(p.a.tensor.is_cuda)
        buf = realign_buffer(op, col_major=k_major_transposed if kmajor else None)
        copies[op.name] = (buf.tensor, op.tensor)
        buffers[attr] = buf
    return replace(p, **buffers), copies, (clock.stop() if copies else None)


def tma_layout(p) -> tuple[tuple[int, int, int], dict]:
    """((lda, ldb, ldc), {A_T, B_T, C_DESC, C_T}) for a TMA twin's kernel on problem p (its A and B
    readable by descriptors: after tma_operands). A_T / B_T: the operand is read through a
    descriptor of its transpose (it is column-major). C is written through a descriptor where one
    can describe it (C_DESC, C_T as for A and B), else by a masked store through its two strides
    (any C: lab.base leaves a Triton stage's C as the caller gave it), and ldc is then 0."""
    (a_t, lda), (b_t, ldb) = tma_lines(p.a), tma_lines(p.b, transposed_first=True)
    c = tma_lines(p.c)
    c_t, ldc = c if c is not None else (False, 0)
    return (lda, ldb, ldc), {"A_T": a_t, "B_T": b_t, "C_DESC": c is not None, "C_T": c_t}
