"""What the Triton launchers share: tl.dot's precision arguments, the argument list, the
register-tiling stages' block tile, the pieces of kernel code several stages repeat (the
@triton.jit helpers below), the TMA twins' (tma_wgmma, persistent) descriptors and scratch
allocator, and the tile rules and launcher code that those two and warp_specialized's Gluon twin
share (TmaTwin, the last section), fp8's per-tensor scales included (scale_args).

Launching a @triton.jit kernel as a Prepared (compiled once up front, so that the timed call only
launches) is the toolchain's: lab/toolchain/triton.py, re-exported here for the stages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
# where triton.set_allocator keeps its function (read by _ensure_tma_scratch only)
from triton.runtime import _allocation as _triton_allocation

from lab.base import precisions
from lab.base.checks import SCALE_BLOCK
from lab.base.contract import Offer
from lab.base.errors import LabError
from lab.base.device import DEFAULT_SMS
from lab.toolchain import triton as toolchain
from lab.toolchain.triton import (  # noqa: F401 (re-exported for the stages)
    FakeDriver, compiled_resources, interpreted, launcher, recording)

# Whether this process's Triton kernels are interpreted: TRITON_INTERPRET=1 must be set before
# the first @triton.jit kernel is imported, and every stage imports this module first.
toolchain.kernels_imported(os.environ.get("TRITON_INTERPRET") == "1")


# ------------------------------------------------------------------- precisions of tl.dot

# tl.dot's input_precision for each of the lab's precisions (lab/stages.py PRECISIONS): fp32
# operands as IEEE fp32, TF32, or 3xTF32 ("tf32x3": the operands split into a TF32 high part and
# a TF32 residual, three products); bf16/fp16 and fp8 (e4m3, tl.float8e4nv) operands go to the
# tensor cores as they are (the argument only applies to fp32 operands). The accumulator is fp32
# in every case. fp8 (the TMA twins only, which apply its scales): tl.dot of two float8e4nv
# tiles on sm_90 is wgmma ...f32.e4m3.e4m3, and its max_num_imprecise_acc, left at Triton's
# default (2^30 on sm_90, the compile option max_num_imprecise_acc_default), keeps the whole sum
# in wgmma's own fp32 accumulator: Triton never adds partial sums into a second fp32 register
# set every few k-steps (a smaller max_num_imprecise_acc would).
DOT_PRECISION = {"fp32": "ieee", "tf32": "tf32", "3xtf32": "tf32x3", "bf16": "ieee",
                 "fp16": "ieee", "fp8": "ieee", "fp8_row": "ieee", "fp8_block": "ieee"}
# The precisions a Triton twin gains by passing DOT_PRECISION to tl.dot (and loading the operands
# in their own dtype): the twins whose registry entry offers them.
TL_DOT_PRECISIONS = ("fp32", "tf32", "3xtf32", "bf16", "fp16")
# Where tl.dot meets the tensor cores: Triton emits mma.sync for it from sm_80 on. Compiled for
# sm_75, Triton 3.9 lowers a tf32, bf16 or fp16 tl.dot to FMA instructions instead (no mma in
# the PTX: a CUDA-core kernel, and for tf32 an fp32 one, TF32 being Ampere's), and it refuses
# e4m3 operands below sm_89 (the fp8 record's min_capability). So a twin whose tl.dot computes in
# a tensor-core precision declares sm_80 for it (Offer.requires: tl_dot_requires); its fp32
# (IEEE, FMA) rows run from sm_75 like the CUDA-core ladder.
TL_DOT_REQUIRES = {"tf32": (8, 0), "3xtf32": (8, 0), "bf16": (8, 0), "fp16": (8, 0)}


def tl_dot_requires(precisions) -> dict:
    """Offer.requires of a twin whose tl.dot computes in `precisions`: TL_DOT_REQUIRES for those
    of them that run on the tensor cores."""
    return {p: cc for p, cc in TL_DOT_REQUIRES.items() if p in precisions}


def dot_meta(kernel, p) -> dict:
    """The constexprs INPUT_PRECISION and UPCAST of a kernel for problem p (its p.precision).

    UPCAST: the Triton interpreter multiplies bf16 tiles as raw 16-bit integers (a relative error
    of ~1e9 in Triton 3.9's interpreter), so under the interpreter bf16 tiles are converted to fp32
    before tl.dot. The products of two bf16 values are exact in fp32, so this computes what the
    tensor cores compute (fp32 products, fp32 accumulation); compiled kernels never upcast. fp8
    needs no upcast: the interpreter's tl.dot decodes float8 tiles to fp16 itself (exactly) and
    multiplies them in fp32."""
    precision = getattr(p, "precision", "fp32")
    return {"INPUT_PRECISION": DOT_PRECISION[precision],
            "UPCAST": interpreted(kernel) and precision == "bf16"}


def problem_args(p) -> tuple:
    """The argument list every stage's kernel takes: (a, b, c, M, N, K, stride_am, stride_ak,
    stride_bk, stride_bn, stride_cm, stride_cn), from the shared description of the operands
    (lab/base/problem.py). Triton specializes a stride equal to 1 as a constant and one divisible by
    16 as such, so the row-major case compiles to the kernel it was before strides were added."""
    return (p.a.tensor, p.b.tensor, p.c.tensor, p.M, p.N, p.K, p.a.s0, p.a.s1, p.b.s0, p.b.s1,
            p.c.s0, p.c.s1)


def offsets_meta(p) -> dict:
    """The constexpr OFFSET64 every stage's kernel takes, for problem p: on where an operand spans
    2^31 elements or more (lab/base/problem.py: Problem.offsets64), and the kernel then computes its
    offsets in 64 bits (wide_strides below); off, the kernel is the one it was before the switch."""
    return {"OFFSET64": bool(p.offsets64)}


# ------------------------------------------------- the register-tiling stages' block tile

SMEM_LIMIT = 227 * 1024  # an H100 block's opt-in shared memory


def block_k(BK: int) -> int:
    """tl.dot's K-tile: at least 16."""
    return max(BK, 16)


def validate_block_tile(stage: str, BM: int, BN: int, BK: int, num_stages: int) -> None:
    """Raise LabError (one sentence) for a tile Triton cannot compile on an H100."""
    smem = max(1, num_stages) * (BM + BN) * block_k(BK) * 4
    if smem > SMEM_LIMIT:
        raise LabError(f"{stage} (Triton) with BM={BM}, BN={BN}, BK={BK}, num_stages={num_stages} "
                       f"needs about {smem // 1024} KiB of shared memory, more than an H100's "
                       f"227 KiB; lower num_stages or BK")


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def block_tile_launch(launch, kernel, p, BM: int, BN: int, BK: int, num_warps: int,
                      num_stages: int, **meta):
    """`launch(kernel, grid, args, **meta)` for the register-tiling stages' BM x BN block tile (a
    1-D grid of ceil(M/BM) * ceil(N/BN) programs, BLOCK_K = block_k(BK)) on problem p. `launch`
    is the calling stage's own `launcher` (lab.profile swaps that one for a recorder)."""
    grid = (cdiv(p.M, BM) * cdiv(p.N, BN),)
    return launch(kernel, grid, (*problem_args(p),), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=block_k(BK),
                  **meta, **offsets_meta(p), num_warps=num_warps, num_stages=num_stages)


# ----------------------------------------------------- kernel pieces several stages repeat
#
# Triton inlines a @triton.jit function into its caller before it optimizes, so each of these
# compiles to exactly the code it replaced (same TTGIR and PTX). One rule follows from the
# inlining: a hint (tl.multiple_of, tl.max_contiguous, tl.max_constancy) holds only on a value
# computed inside the helper; given to one of its arguments it would be lost with the call.
# The stages call them through the module (`from triton_kernels import _common as common`,
# `common.grouped_block(...)`), never imported by name: lab.profile takes every @triton.jit
# function a stage module holds for a kernel that ncu may meet (triton_kernel_names).


@triton.jit
def wide_strides(stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn):
    """The six strides as int64. A kernel calls it first thing under its constexpr OFFSET64
    (offsets_meta: an operand spans 2^31 elements or more), rebinding its strides, so that every
    offset made from them (rows times a stride, a pointer's step along K) is 64-bit: Triton
    widens an int32 tensor multiplied by an int64 scalar. (tl.cast, not .to(): a stride of 1
    arrives as a constant.) Without OFFSET64 nothing is called and the offsets stay 32-bit."""
    return (tl.cast(stride_am, tl.int64), tl.cast(stride_ak, tl.int64),
            tl.cast(stride_bk, tl.int64), tl.cast(stride_bn, tl.int64),
            tl.cast(stride_cm, tl.int64), tl.cast(stride_cn, tl.int64))


@triton.jit
def grouped_block(pid, grid_m, grid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program pid in grouped order (common.cuh's block_tile, Triton's tutorial
    order): GROUP_M block-rows walked column by column, so that the programs resident at one
    time share GROUP_M block-rows of A and a few block-columns of B in L2. GROUP_M = 1 is the
    plain order, pid_n = pid % grid_n."""
    width = GROUP_M * grid_n  # programs in one group of GROUP_M block-rows
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    return pid_m, pid_n


# ------------------------------------------- fp8's per-tensor scales (the TMA twins' kernels)


def scale_args(p) -> tuple:
    """(scale_a, scale_b): the two kernel arguments of fp8's per-tensor scales for problem p, the
    one-element float32 tensors themselves (lab/base/problem.py Problem.scales; lab/plan.py finds them
    in a launch's arguments and swaps them on a replay), or (None, None) in the other precisions,
    where Triton makes the arguments constexprs that the kernel never reads (its `if scale_a_ptr
    is not None` is decided at compile time), so those kernels compile to what they were before
    fp8."""
    return tuple(p.scales) if getattr(p, "scales", None) is not None else (None, None)


SCALE_CODES = {"row": 1, "block": 2}  # the constexpr SCALE of a kernel that reads these scales


def scale_meta(p) -> dict:
    """The meta-parameters of fp8_row's and fp8_block's scales for problem p: SCALE (1 row, 2
    block) and the scale tensors' strides (stride_sa0, stride_sa1, stride_sb0, stride_sb1); {} for
    per-tensor scales and the other precisions, whose kernels read none of them."""
    kind = precisions.get(getattr(p, "precision", "fp32")).scale
    if kind not in SCALE_CODES:
        return {}
    sa, sb = p.scales
    return {"SCALE": SCALE_CODES[kind], "stride_sa0": sa.stride(0), "stride_sa1": sa.stride(1),
            "stride_sb0": sb.stride(0), "stride_sb1": sb.stride(1)}


# -------------------------------------- TMA tensor descriptors (the tma_wgmma and persistent twins)
#
# A descriptor is built on the device (tl.make_tensor_descriptor), from the kernel's plain
# arguments (a pointer, sizes, a leading dimension), so that a launch stays a list of tensors and
# integers that lab.matmul's plans replay (lab/plan.py: a descriptor built on the host holds its
# tensor inside an object the plan cannot see). Which operand is read how, and which is copied
# first, is decided on the host: triton_kernels/_realign.py tma_lines / tma_operands / tma_layout.


@triton.jit
def tma_descriptor(ptr, rows, cols, ld, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                   TRANSPOSED: tl.constexpr):
    """A TMA descriptor of the rows x cols matrix at ptr, read in BLOCK_R x BLOCK_C tiles: its lines
    are rows ld elements apart, or, TRANSPOSED (a column-major matrix), columns ld elements apart,
    described as the transpose (cols x rows, BLOCK_C x BLOCK_R tiles). The last stride is the
    literal 1 a descriptor requires; elements past the edges read as zero and are never written."""
    if TRANSPOSED:
        desc = tl.make_tensor_descriptor(ptr, shape=[cols, rows], strides=[ld, 1],
                                         block_shape=[BLOCK_C, BLOCK_R])
    else:
        desc = tl.make_tensor_descriptor(ptr, shape=[rows, cols], strides=[ld, 1],
                                         block_shape=[BLOCK_R, BLOCK_C])
    return desc


@triton.jit
def tma_store(desc, row0, col0, tile, TRANSPOSED: tl.constexpr):
    """tile written at (row0, col0) of the matrix `desc` describes (one TMA store; the parts past
    the matrix's edges are dropped by the hardware)."""
    if TRANSPOSED:
        desc.store([col0, row0], tile.T)
    else:
        desc.store([row0, col0], tile)


@triton.jit
def c_descriptor(c_ptr, M, N, ldc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 C_T: tl.constexpr, SUBTILE: tl.constexpr):
    """The descriptor C's tiles are stored through (tma_store_c): BLOCK_M x BLOCK_N boxes, or
    SUBTILE BLOCK_M x BLOCK_N/2 ones."""
    if SUBTILE:
        desc = tma_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N // 2, C_T)
    else:
        desc = tma_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, C_T)
    return desc


@triton.jit
def tma_store_c(desc, c, m0, n0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, C_T: tl.constexpr,
                SUBTILE: tl.constexpr):
    """C's BLOCK_M x BLOCK_N tile c written at (m0, n0) through desc (c_descriptor with the same
    SUBTILE): one TMA store, or SUBTILE two, of its left and right halves (the split is a
    renaming of the accumulator's registers). A half needs half the shared-memory staging tile,
    which is what lets an fp32 C fit beside the ring (the twins' smem_bytes)."""
    if SUBTILE:
        c0, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        tma_store(desc, m0, n0, c0, C_T)
        tma_store(desc, m0, n0 + BLOCK_N // 2, c1, C_T)
    else:
        tma_store(desc, m0, n0, c, C_T)


@triton.jit
def masked_store(c_ptr, tile, row0, col0, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, OFFSET64: tl.constexpr):
    """tile written at (row0, col0) of the M x N matrix C at c_ptr with strides (stride_cm,
    stride_cn), masked at C's edges: the store of a C no descriptor can describe. OFFSET64: C spans
    2^31 elements or more, so the offsets are 64-bit (descriptors need no such switch: TMA's
    addresses are 64-bit and its coordinates per dimension)."""
    if OFFSET64:
        stride_cm, stride_cn = tl.cast(stride_cm, tl.int64), tl.cast(stride_cn, tl.int64)
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = col0 + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, tile,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def masked_store_c(c_ptr, c, row0, col0, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, OFFSET64: tl.constexpr, SUBTILE: tl.constexpr):
    """masked_store of C's BLOCK_M x BLOCK_N tile c, or SUBTILE of its left and right halves one
    after the other (as tma_store_c): Triton converts the accumulator's layout for the store
    through shared memory, and half a tile needs half of it, which is what lets an fp32 C with no
    descriptor fit beside the persistent twin's ring (7919 x 6007 in tf32)."""
    if SUBTILE:
        c0, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        masked_store(c_ptr, c0, row0, col0, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N // 2,
                     OFFSET64)
        masked_store(c_ptr, c1, row0, col0 + BLOCK_N // 2, M, N, stride_cm, stride_cn, BLOCK_M,
                     BLOCK_N // 2, OFFSET64)
    else:
        masked_store(c_ptr, c, row0, col0, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                     OFFSET64)


# ------------------- Gluon: TMA, mbarrier and layout wrappers (the warp_specialized twin, Gluon)
#
# Gluon (triton.experimental.gluon, shipped with Triton 3.6) makes a kernel write out what
# tl.make_tensor_descriptor, a descriptor's .store and tl.dot's accumulator hide in the tl twins.
# These are the Gluon spellings of those single idioms (a descriptor and its swizzle, the TMA
# copies' names, a ring's mbarrier pairs, the store of a register tile through TMA, wgmma's
# accumulator layout), so that the Gluon kernel's file holds its lesson (the partitions, the
# ring's waits and arrivals, wgmma) and not their scaffolding. Gluon inlines a @gluon.jit
# function into its caller as Triton does, so each compiles to the code it replaced in the
# kernel (tests/test_warp_specialized_triton.py compares the PTX).

# Triton 3.9 renames the TMA copies (async_load / async_store; the 3.6 names raise there)
gl_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
gl_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def gl_descriptor(ptr, rows, cols, ld, BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr,
                  TRANSPOSED: gl.constexpr):
    """As tma_descriptor, in Gluon: the layout (the swizzle, NVMMASharedLayout.get_default_for:
    128 bytes for 128-byte lines) is named here, and the shared-memory tiles a kernel allocates
    in desc.layout get it."""
    if TRANSPOSED:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_C, BLOCK_R],
                                                                    ptr.dtype.element_ty)
        desc = tma.make_tensor_descriptor(ptr, [cols, rows], [ld, 1], [BLOCK_C, BLOCK_R], layout)
    else:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_R, BLOCK_C],
                                                                    ptr.dtype.element_ty)
        desc = tma.make_tensor_descriptor(ptr, [rows, cols], [ld, 1], [BLOCK_R, BLOCK_C], layout)
    return desc


@gluon.constexpr_function
def wgmma_layout(BLOCK_M, BLOCK_N, num_warps, dtype):
    """The register layout of wgmma's BLOCK_M x BLOCK_N fp32 accumulator over num_warps warps
    (NVMMADistributedLayout version 3): one warp per 16 rows (a warpgroup's wgmma covers 64), the
    warps left over side by side along N (BLOCK_M = 64 with 8 warps: [4, 2]); the instruction's
    N is the columns one warp holds, its K 256 bits of the operands' dtype (k16 for 16-bit
    types, k8 for TF32, k32 for fp8)."""
    rows = max(1, min(num_warps, BLOCK_M // 16))
    warps = [rows, num_warps // rows]
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps,
                                     instr_shape=[16, BLOCK_N // warps[1],
                                                  256 // dtype.primitive_bitwidth])


@gluon.jit
def ring_barriers(STAGES: gl.constexpr):
    """(full, empty): an mbarrier pair per slot of a STAGES-slot ring, each initialized with a
    count of 1 (full[s]: the producer's expect, completed by the TMA bytes; empty[s]: one arrival
    of the consumers), in the order tma_tiles.cuh's init_ring does it."""
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    return full, empty


@gluon.jit
def gl_tma_store_tile(desc, row0, col0, tile):
    """tile (registers) written at (row0, col0) of the matrix `desc` describes, as a tl
    descriptor's .store does it: into a staging tile in shared memory in the descriptor's layout
    (allocated here, so after a ring's last use it takes the ring's memory), a fence so that the
    TMA unit sees the generic proxy's writes (fence.proxy.async), one TMA store
    (cp.async.bulk.tensor, clipped at the matrix's edges) and its wait."""
    staging = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
    staging.store(tile)
    fence_async_shared()
    gl_tma_store(desc, [row0, col0], staging)
    tma.store_wait(0)


def sm_arch(device) -> str | None:
    """sm_XY of the CUDA device `device`, or None for CPU tensors (the interpreter) and meta
    tensors (lab.profile's recording)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _tma_scratch(size: int, alignment: int, stream):
    """Triton's allocator call: `size` bytes of global memory for one launch (torch's caching
    allocator, current device, current stream; its blocks are 512-byte aligned)."""
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_tma_scratch() -> None:
    """Give Triton an allocator (_tma_scratch) where none is set in this thread's context, and
    leave one the caller set alone."""
    if isinstance(_triton_allocation._allocator.get(), _triton_allocation.NullAllocator):
        triton.set_allocator(_tma_scratch)


def _run_with_scratch(run, *args) -> None:
    _ensure_tma_scratch()
    run(*args)


def with_tma_scratch(launch):
    """`launch` (launcher()'s Prepared of a kernel that builds tensor descriptors on the device),
    each of its steps made to first set Triton's global-scratch allocator if this thread has
    none.

    What the allocator is for: a descriptor built in a kernel is a 128-byte tensormap that each
    program writes to global memory (TMA reads a descriptor from memory: a kernel parameter, or
    global memory for one made on the device), in a scratch buffer that Triton's launcher asks
    triton.set_allocator's function for at every launch (programs x descriptors x 128 bytes, e.g.
    512 programs x 3 x 128 = 192 KiB at 4096^3). Triton
    keeps the allocator in a context variable, empty in a new thread, so the check (a few hundred
    nanoseconds of host time) is in the call, not only in prepare(): a plan replayed by another
    thread still finds one. Under the interpreter nothing is allocated and `launch` is returned as
    it is."""
    from lab.base.contract import Prepared

    if not launch.steps or not any(getattr(t, "is_cuda", False)
                                   for _, args in launch.steps for t in args):
        return launch
    _ensure_tma_scratch()
    steps = [(_run_with_scratch, (run, *args)) for run, args in launch.steps]
    return Prepared.of_steps(steps, resources=launch.resources, **launch.extra)


# ---------------- the TMA twins' tile and launcher (tma_wgmma, persistent, warp_specialized)

TMA_PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16", "fp8", "fp8_row", "fp8_block")
TMA_ELEM_BYTES = precisions.elem_bytes(*TMA_PRECISIONS)  # A's and B's bytes
# C's bytes (its staging tile for the TMA store): the operands' except the fp8 precisions', whose
# C is bfloat16 (lab/base/precisions.py)
TMA_C_BYTES = precisions.c_bytes(*TMA_PRECISIONS)
# precisions whose operands wgmma reads K-major only (its transpose bits exist for 16-bit types):
# kmajor's automatic value is on for them, and a kernel with no transposing round trip
# (warp_specialized's Gluon twin) refuses kmajor=0
KMAJOR_ONLY = precisions.where(kmajor_only=True)
FP8_MIN_BLOCK_K = 32  # an fp8 wgmma's k (tl.dot refuses a smaller k-tile of 8-bit operands)
AUTO_SWITCH = -1  # a -1/0/1 parameter's automatic value (kmajor, subtile)
ZERO_AUTOMATIC = ("BLOCK_N", "BLOCK_K", "num_stages")  # 0 is their automatic value


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pow2(x) -> bool:
    return _is_int(x) and x > 0 and x & (x - 1) == 0


def tma_param_refusal(c: dict, switches: tuple[str, ...]) -> str | None:
    """Why the TMA twins cannot take the parameters `c` (automatic values, 0 and -1, allowed), in
    words that follow "<stage> (Triton) with ...: ", or None. `switches`: the -1/0/1 parameters."""
    for name in switches:  # True and False stand for 1 and 0
        if not (_is_int(c[name]) or isinstance(c[name], bool)) or c[name] not in (AUTO_SWITCH, 0, 1):
            return f"{name} must be -1 (automatic), 0 or 1"
    tiles = (c["BLOCK_M"], c["BLOCK_N"] or 64, c["BLOCK_K"] or 16)
    if not all(_pow2(t) and 16 <= t <= 256 for t in tiles) or c["BLOCK_M"] < 64:
        return ("BLOCK_M must be 64, 128 or 256 (a warpgroup's wgmma covers 64 rows) and BLOCK_N "
                "and BLOCK_K powers of two from 16 to 256 (a TMA box's largest side; BLOCK_N and "
                "BLOCK_K may be 0: automatic)")
    if c["num_warps"] not in (4, 8, 16) or not _is_int(c["num_warps"]):
        return "num_warps must be 4, 8 or 16 (wgmma is issued by warpgroups of 4 warps)"
    if not _is_int(c["GROUP_M"]) or c["GROUP_M"] < 1:
        return "GROUP_M must be 1 or more"
    if not _is_int(c["num_stages"]) or c["num_stages"] < 0:
        return "num_stages must be 0 (automatic) or a pipeline depth of 1 or more"
    return None


def limit_refusal(given: dict, limits: dict) -> str | None:
    """Why parameters that pass tma_param_refusal break one of a twin's own limits (TmaTwin's
    `limits`: name -> (value, reason)), in words that follow "<stage> (Triton) with ...: ", or
    None. num_warps: the values it takes; min_stages: the fewest ring slots (0, automatic,
    allowed); rows_per_warp: BLOCK_M's rows per warp at most (its reason names the warps)."""
    if "num_warps" in limits and given["num_warps"] not in limits["num_warps"][0]:
        allowed, why = limits["num_warps"]
        return f"num_warps must be {' or '.join(str(n) for n in allowed)} ({why})"
    if "min_stages" in limits and 0 < given["num_stages"] < limits["min_stages"][0]:
        n, why = limits["min_stages"]
        return f"num_stages must be 0 (automatic) or {n} or more ({why})"
    if "rows_per_warp" in limits:
        n, words = limits["rows_per_warp"]
        if given["BLOCK_M"] > n * given["num_warps"]:
            return f"BLOCK_M must be at most {n} {words}"
    return None


def tma_fit_refusal(precision: str, c: dict, smem: int) -> str | None:
    """Why a concrete tile `c` (no automatic values left) needing `smem` bytes of shared memory
    cannot compile in `precision`, in words that follow the configuration, or None."""
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if precisions.get(precision).scale == "block":  # a k-step's own sum beside the accumulator
        per_thread *= 2
    if precisions.get(precision).elem_bytes == 1 and c["BLOCK_K"] < FP8_MIN_BLOCK_K:
        return (f"has a k-step of {c['BLOCK_K']}, below fp8 wgmma's k of {FP8_MIN_BLOCK_K}; "
                f"raise BLOCK_K")
    if precisions.get(precision).scale == "block" and (SCALE_BLOCK % c["BLOCK_K"]
                                                        or SCALE_BLOCK % c["BLOCK_N"]):
        return (f"has a tile that spans more than one of B's {SCALE_BLOCK} x {SCALE_BLOCK} "
                f"scale blocks: BLOCK_K and BLOCK_N must divide {SCALE_BLOCK} in {precision}")
    if per_thread > 128:
        return (f"gives each thread {per_thread} fp32 accumulators, more than the 128 that fit in "
                f"its registers; raise num_warps or lower BLOCK_M/BLOCK_N")
    if smem > SMEM_LIMIT:
        halves = ", or store C in halves (subtile=1)" if c.get("subtile") == 0 else ""
        return (f"needs about {smem // 1024} KiB of shared memory in {precision}, more than an "
                f"H100's 227 KiB; lower num_stages, BLOCK_K or BLOCK_N{halves}")
    return None


def tma_resolve(given: dict, auto: dict, fallbacks: tuple[dict, ...], fits, M: int | None = None,
                N: int | None = None, sms: int = 132, small_grid_block_n: int = 128) -> dict:
    """`given` with its automatic values made concrete: each 0 among BLOCK_N, BLOCK_K, num_stages
    and each -1 among the switches takes `auto`'s value (the precision's row), with two rules:
    - shape: given M and N, an automatic BLOCK_N is `small_grid_block_n` where `auto`'s would give
      fewer tiles than the GPU has SMs (a 1025^3 product: 9 x 5 = 45 tiles of 128 x 256 for 132
      SMs, 81 of 128 x 128);
    - fit: where fits(resolved) is False, the automatic values take the first of `fallbacks`
      (each a dict of values over `auto`'s: a smaller tile, a shallower ring) that fits, so that
      an explicit value given beside them (num_warps=4, num_stages=5) still runs with the rest
      chosen for it.
    Explicit values always stay as given; validate() refuses what still does not fit."""
    automatic = [k for k, v in given.items()
                 if k in auto and v == (0 if k in ZERO_AUTOMATIC else AUTO_SWITCH)]
    r = dict(given)
    for row in (auto, *({**auto, **f} for f in fallbacks)):
        r = {**given, **{k: row[k] for k in automatic}}
        if ("BLOCK_N" in automatic and M is not None and N is not None
                and r["BLOCK_N"] > small_grid_block_n
                and cdiv(M, r["BLOCK_M"]) * cdiv(N, r["BLOCK_N"]) < sms):
            r["BLOCK_N"] = small_grid_block_n
        if fits(r):
            break
    return r


def refuse_other_gpus(stage: str, device) -> None:
    """The TMA twins run on sm_90 only: one sentence for tensors on another GPU."""
    arch = sm_arch(device)
    if arch is not None and arch != "sm_90":
        raise LabError(f"stage {stage} (triton) needs an sm_90 GPU (H100, H200), where Triton "
                       f"lowers tensor descriptors to TMA and tl.dot to wgmma, and this GPU is "
                       f"{arch}; use stage mma here")


def tma_launch(stage: str, kernel, grid: tuple, args: tuple, **meta):
    """launcher(kernel, grid, args, **meta) for a TMA twin, with the global-scratch allocator its
    device-side descriptors need (with_tma_scratch); a tile Triton cannot fit in the GPU's
    shared memory is refused in one sentence (the estimate validate() makes is a bound, the
    compiled kernel's figure is the fact)."""
    from triton.runtime.errors import OutOfResources

    try:
        launch = launcher(kernel, grid, args, **meta)
    except OutOfResources as exc:
        raise LabError(f"{stage} (Triton) with {config_words(meta)} does not fit this GPU "
                       f"({str(exc).strip().rstrip('.')}); lower num_stages, BLOCK_K or "
                       f"BLOCK_N") from None
    return with_tma_scratch(launch)


# The values a TMA twin's layout and switch meta-parameters take in its lesson's case (the kernel
# in triton_kernels/<stage>.py): C written by one TMA store of a row-major tile (C_DESC, not C_T),
# whole (not SUBTILE), compiled (not the interpreter's UPCAST), 32-bit offsets (not OFFSET64).
# The lesson kernel takes none of these; its variant (triton_kernels/variants/<stage>.py, the
# twin's former kernel, of the same name) takes them all.
LESSON_CASE = {"C_DESC": True, "C_T": False, "SUBTILE": False, "UPCAST": False,
               "OFFSET64": False, "SCALE": 0}
LAUNCH_OPTIONS = ("num_warps", "num_stages")  # meta that is not a kernel parameter


def lesson_or_variant(lesson, variant, meta: dict):
    """(kernel, meta): `lesson` and the meta-parameters it takes (with the launch options) where
    every other one holds its LESSON_CASE value, else `variant` and all of `meta`. The lesson
    compiles to the variant's PTX there (tests/test_hopper_triton.py,
    tests/test_warp_specialized_triton.py), so what runs computes as the former kernel did."""
    takes = set(lesson.arg_names) | set(LAUNCH_OPTIONS)
    rest = {k: v for k, v in meta.items() if k not in takes}
    if all(k in LESSON_CASE and LESSON_CASE[k] == v for k, v in rest.items()):
        return lesson, {k: v for k, v in meta.items() if k in takes}
    return variant, meta


def config_words(meta: dict) -> str:
    """The tile and depth of a launch's meta-parameters, as a refusal names them."""
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    return ", ".join(f"{k}={meta[k]}" for k in keys if k in meta)


@dataclass(frozen=True)
class TmaSetup:
    """What TmaTwin.setup() gives a twin's prepare() to launch with: the configuration that runs,
    the problem its kernel reads (q: the buffers in place of the operands copied in every call),
    those copies and their setup time, the layout constexprs (A_T, B_T, C_DESC, C_T), the kernel's
    argument list (a, b, c, M, N, K, lda, ldb, ldc, stride_cm, stride_cn, scale_a, scale_b: fp8's
    scale tensors, None in the other precisions, scale_args), the GPU's SM count and the number of
    BLOCK_M x BLOCK_N tiles of C."""

    config: dict
    q: object
    copies: dict
    setup_ms: float | None
    layout: dict
    args: tuple
    sms: int
    tiles: int

    @property
    def meta(self) -> dict:
        """The meta-parameters every TMA twin's kernel takes: the tile, GROUP_M, the layout
        constexprs, OFFSET64 and num_warps (a stage adds its own: the ring's depth, ...)."""
        c = self.config
        return {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"],
                "GROUP_M": c["GROUP_M"], **self.layout, **offsets_meta(self.q),
                "num_warps": c["num_warps"]}


@dataclass(frozen=True, eq=False)
class TmaTwin:
    """The launcher code of a TMA twin (tma_wgmma, persistent, warp_specialized), from its own
    tables: what each of those modules declares is its kernel, PARAM_ORDER, DEFAULTS, AUTO (the
    automatic row per precision, whose keys are the precisions it offers), FALLBACKS, SWITCHES
    (its -1/0/1 parameters), smem_bytes(config, precision) and prepare(); this class turns them
    into the contract's validate, resolve and show, its Offer, and the setup and launch around
    the kernel that every prepare() shares.

    limits: the stage's own limits beside tma_param_refusal's, as data, each with the reason its
        refusal gives (limit_refusal: num_warps, min_stages, rows_per_warp; kmajor_only: the
        precisions whose operands the kernel reads K-major only, so kmajor=0 is refused
        there). A refusal of a concrete tile names the tile, the warps, the ring's depth and,
        where the stage has it, subtile. interpreted: False for a Gluon kernel, which the
        Triton interpreter cannot run: setup() refuses CPU tensors."""

    stage: str
    param_order: tuple[str, ...]
    defaults: dict
    auto: dict
    fallbacks: tuple[dict, ...]
    switches: tuple[str, ...]
    smem_bytes: Callable[[dict, str], int]
    kernels: tuple[str, ...]
    interpreted: bool = True
    limits: dict | None = None

    @property
    def fit_shown(self) -> tuple[str, ...]:
        """The parameters a refusal of a concrete tile names."""
        return tuple(k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages",
                                 "subtile") if k in self.param_order)

    # ---------------------------------------------------------------- parameters
    def given(self, params: dict) -> dict:
        """The parameters with the defaults under them (automatic values still 0 and -1)."""
        return {**self.defaults, **params}

    def refusal(self, c: dict, precision: str) -> str | None:
        """Why concrete configuration `c` cannot run in `precision`, or None."""
        precisions, why = (self.limits or {}).get("kmajor_only", ((), ""))
        if precision in precisions and c["kmajor"] == 0:
            return (f"reads {precision} operands K-major only (wgmma's rule for operands other "
                    f"than 16-bit ones, and {why}): kmajor must be -1 or 1 in {precision}")
        return tma_fit_refusal(precision, c, self.smem_bytes(c, precision))

    def config(self, precision: str, params: dict, M: int | None = None, N: int | None = None,
               sms: int = DEFAULT_SMS) -> dict:
        """The configuration that runs: the registry's order, automatic values made concrete for
        `precision` (and, given M and N, the shape: tma_resolve)."""
        r = tma_resolve(self.given(params), self.auto[precision], self.fallbacks,
                        lambda c: self.refusal(c, precision) is None, M=M, N=N, sms=sms)
        return {k: r[k] for k in self.param_order}

    def validate(self, params, precision: str | None = None) -> None:
        """The contract's validate: one sentence for an unknown parameter, a value the kernel
        cannot take, or a tile that would not fit, in `precision` (every precision when None);
        automatic values are checked as the values they stand for."""
        unknown = sorted(set(params) - set(self.param_order))
        if unknown:
            raise LabError(f"stage {self.stage} (triton) has no parameter {', '.join(unknown)} "
                           f"(it takes {', '.join(self.param_order)})")
        given = self.given(params)
        where = f"{self.stage} (Triton) with " + ", ".join(f"{k}={given[k]}"
                                                         for k in self.param_order)
        if precision is not None and precision not in self.auto:
            raise LabError(f"{where}: the precision must be one of {', '.join(self.auto)}, not "
                           f"{precision}")
        why = tma_param_refusal(given, self.switches) or limit_refusal(given, self.limits or {})
        if why:
            raise LabError(f"{where}: {why}")
        for prec in (precision,) if precision else tuple(self.auto):
            c = self.config(prec, params)
            why = self.refusal(c, prec)
            if why:
                shown = ", ".join(f"{k}={c[k]}" for k in self.fit_shown)
                raise LabError(f"{self.stage} (Triton) in {prec} with {shown} {why}")

    def resolve(self, params, M: int, N: int, K: int, precision: str, sms: int) -> dict:
        """The contract's resolve: the parameters as prepare() compiles them for an M x N x K
        problem on `sms` SMs."""
        return self.config(precision, params, M=M, N=N, sms=sms)

    def show(self, config: dict) -> str:
        """The configuration as the `params` column writes it: name=value,... in registry
        order."""
        return ",".join(f"{k}={config[k]}" for k in self.param_order if k in config)

    def offer(self) -> Offer:
        return Offer(self.stage, "triton", precisions=tuple(self.auto), kernels=self.kernels,
                     validate=self.validate, resolve=self.resolve, show=self.show,
                     interpreted=self.interpreted, arch="sm_90a")  # TMA and wgmma: sm_90 only

    # ---------------------------------------------------------------- prepare()
    def setup(self, p, params: dict, sm_count) -> TmaSetup:
        """prepare()'s setup on problem p (lab/base/entry.py, with p.precision): the GPU refused
        in one sentence unless it is an sm_90 one, the configuration resolved for the shape on
        sm_count(device) SMs (the stage module's own function), and a buffer for each operand a
        descriptor cannot read, or (kmajor) that is not K-major (triton_kernels/_realign.py); fp8's
        scale tensors go to the kernel as its last two tensor arguments (scale_args)."""
        from triton_kernels._realign import tma_layout, tma_operands

        device = p.c.tensor.device
        refuse_other_gpus(self.stage, device)
        if not self.interpreted and device.type == "cpu":
            raise LabError(f"stage {self.stage} (triton) is a Gluon kernel, which the Triton "
                           f"interpreter cannot run: it needs an sm_90 GPU (H100, H200); use "
                           f"stage tma_wgmma's Triton twin on the CPU")
        sms = sm_count(device)
        config = self.config(p.precision, params, M=p.M, N=p.N, sms=sms)
        q, copies, setup_ms = tma_operands(p, bool(config["kmajor"]))
        (lda, ldb, ldc), layout = tma_layout(q)
        args = (q.a.tensor, q.b.tensor, q.c.tensor, q.M, q.N, q.K, lda, ldb, ldc, q.c.s0, q.c.s1,
                *scale_args(q))
        tiles = cdiv(q.M, config["BLOCK_M"]) * cdiv(q.N, config["BLOCK_N"])
        return TmaSetup(config, q, copies, setup_ms, layout, args, sms, tiles)

    def launch(self, s: TmaSetup, kernel, variant, grid: tuple, extra: dict | None = None,
               **meta):
        """The launch prepare() returns: tma_launch(kernel, grid, s.args, **meta) of the lesson
        kernel, or of its variant where the problem is not the lesson's case
        (lesson_or_variant), its `params` column the configuration that ran (Row.set_resources
        copies it), its `config`, `layout` and `extra` attributes set, and the copies run before
        it in every call (timed: one kernel, then the GEMM; with_copies)."""
        from triton_kernels._realign import with_copies

        kernel, meta = lesson_or_variant(kernel, variant, meta)
        launch = tma_launch(self.stage, kernel, grid, s.args, **meta)
        launch.resources = {**(launch.resources or {}), "params": self.show(s.config)}
        launch.extra.update(config=s.config, layout=s.layout, **(extra or {}))
        return with_copies(launch, s.copies, s.setup_ms, s.q)
