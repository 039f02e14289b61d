"""Stage vectorized, Triton twin: blocktile_2d's twin plus the CUDA launcher's alignment facts.

CUDA stage: cuda_kernels/vectorized.cu. Same tile as blocktile_2d (BLOCK_M x BLOCK_N = 128 x 128,
8 warps = the CUDA block's 256 threads), masked loads with zero fill, and
tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.

What Triton does for you that the CUDA stage does by hand:
- 128-bit global loads and stores (ld.global.v4 / LDG.E.128, STG.E.128): Triton emits them on its
  own wherever its alignment analysis can prove that 4 consecutive elements are contiguous,
  16-byte aligned and under one mask value. It learns that from (a) the arguments: pointers are
  specialized as 16-byte aligned, integers divisible by 16 as such and integers equal to 1 as the
  constant 1 (row-major, K = N = 4096: the row strides K and N are multiples of 16 and the column
  strides 1, so yes; 4095, 4097: no, and it falls back to 32-bit loads, exactly like the CUDA
  launcher's VEC_A=0/VEC_B=0), and (b) hints in the kernel, the knobs this file exposes:
    tl.multiple_of(x, d)      every value of x is a multiple of d (here: the offsets of an
                              operand's lines, e.g. rm*stride_am for the rows of a row-major A);
    tl.max_contiguous(x, d)   x is made of runs of d consecutive values (rm, rn, rk);
    tl.max_constancy(x, d)    x is constant over runs of d (here: the edge masks).
  The launcher passes VEC_A / VEC_B / VEC_C (vec_hints) from the CUDA launcher's rule: an
  operand gets the hints when one of its strides is 1, its leading dimension (the other stride)
  is a multiple of 4, its data pointer is 16-byte aligned and its size along the contiguous
  dimension is a multiple of 4 (so the edge mask is constant over each float4). The flag names
  the contiguous dimension: "n" (row-major: rows start on 16-byte boundaries, runs along k for A,
  along n for B and C) or "t" (column-major, a transposed view: columns start on 16-byte
  boundaries, runs along m for A and C, along k for B); "" means no hint. So a row-major N = 4100
  (not a multiple of 16, but of 4) still gets 128-bit access here, as in the CUDA stage.
  EVEN_K (K % BLOCK_K == 0) drops the K masks.
- the transposed A tile: where the CUDA stage stores As[k][m] so that a thread's A fragment is one
  LDS.128, tl.dot's shared-memory layout and fragment loads are chosen by the compiler (the
  compiled kernel reads its operands with LDS.128 as well);
- register tiling, shared-memory staging and barriers (see blocktile_2d's twin);
- software pipelining when num_stages > 1 (default 1: the CUDA kernel does not prefetch).
BLOCK_K = max(BK, 16): tl.dot needs a K-tile of at least 16 (16 at the default BK = 8).
Knobs: BM, BN, BK, num_warps (default 8 = 256 threads / 32), num_stages.
Changed from blocktile_2d's twin: the VEC_A / VEC_B / VEC_C / EVEN_K specializations and the hints
above; the tile, warps and tl.dot are the same. Bottleneck it attacks (as the CUDA stage): load and
store instruction count, by making 128-bit global access provable where it is legal.
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant,
so the row-major case (stride_ak = stride_bn = stride_cn = 1, flags "n") compiles as it did with
plain row-major indexing; each layout and flag set compiles its own kernel.
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs, column-blocks fastest
(pid % grid_n is the column-block, pid // grid_n the row-block: the order of the former 2-D grid
(ceil(N/BLOCK_N), ceil(M/BLOCK_M)), whose second axis stopped at 65535 programs), num_warps 8.
"""

import triton
import triton.language as tl

from lab.base.contract import PRECISIONS as ALL_PRECISIONS
from lab.base.precisions import get as precision_record
from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import (block_k, block_tile_launch, dot_meta, launcher,
                                    validate_block_tile)

# every precision but the fp8 ones (whose e4m3 tl.dot and scales belong to the TMA stages' twins)
PRECISIONS = tuple(p for p in ALL_PRECISIONS if not precision_record(p).scaled)


@triton.jit
def matmul_vectorized_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                             stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC_A: tl.constexpr,
                             VEC_B: tl.constexpr, VEC_C: tl.constexpr, EVEN_K: tl.constexpr,
                             INPUT_PRECISION: tl.constexpr = "ieee",
                             UPCAST: tl.constexpr = False, OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # column-blocks fastest
    rm = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    # rm, rn, rk: runs of BLOCK consecutive values starting at a multiple of BLOCK (Triton infers
    # this from pid * BLOCK + arange; said explicitly)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rk = tl.max_contiguous(rk, BLOCK_K)
    # Each operand's offsets along its two dimensions. The one whose stride is 1 is the contiguous
    # run (rk, rn or rm itself once the constant 1 is folded); the other starts each line.
    a_m, a_k = rm * stride_am, rk * stride_ak
    b_k, b_n = rk * stride_bk, rn * stride_bn
    c_m, c_n = rm * stride_cm, rn * stride_cn
    # A flag "n" says every row of its operand starts on a 16-byte boundary (4 floats), "t" every
    # column does (a transposed view): that line's offsets are multiples of 4.
    a_m = tl.multiple_of(a_m, 4) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, 4) if VEC_A == "t" else a_k
    b_k = tl.multiple_of(b_k, 4) if VEC_B == "n" else b_k
    b_n = tl.multiple_of(b_n, 4) if VEC_B == "t" else b_n
    c_m = tl.multiple_of(c_m, 4) if VEC_C == "n" else c_m
    c_n = tl.multiple_of(c_n, 4) if VEC_C == "t" else c_n
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    # Edge masks. A flag also promises that the size along its operand's contiguous dimension is
    # a multiple of 4, and the runs of rm, rn, rk start at multiples of 4: that dimension's mask
    # is then constant per float4 (M % 4 == 0 for a column-major A or C, N % 4 for a row-major B
    # or C; K % 4 for a row-major A or a column-major B, below).
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    in_m = tl.max_constancy(in_m, [4, 1]) if VEC_A == "t" or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, 4]) if VEC_B == "n" or VEC_C == "n" else in_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:
            in_k_a = k0 + rk[None, :] < K
            in_k_b = k0 + rk[:, None] < K
            in_k_a = tl.max_constancy(in_k_a, [1, 4]) if VEC_A == "n" else in_k_a
            in_k_b = tl.max_constancy(in_k_b, [4, 1]) if VEC_B == "t" else in_k_b
            a = tl.load(a_ptrs, mask=in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & in_n, other=0.0)
        if UPCAST:  # the interpreter's bf16 dot is wrong (_common.dot_meta)
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc, mask=in_m & in_n)


def validate(BM: int = 128, BN: int = 128, BK: int = 8, num_stages: int = 1, **_) -> None:
    validate_block_tile("vectorized", BM, BN, BK, num_stages)


def _vec(op) -> str:
    """One operand's flag: its contiguous direction ("n" rows, "t" columns) if 4 floats along it
    are one aligned float4 under one mask value (the CUDA launcher's rule), else ""."""
    if not op.blas or not op.aligned(16):  # a unit stride, ld % 4 == 0, 16-byte data pointer
        return ""
    along = op.cols if op.row_major else op.rows  # size along the contiguous dimension
    return op.letter if along % 4 == 0 else ""


def vec_hints(p) -> dict[str, str]:
    """VEC_A, VEC_B, VEC_C for the problem p (lab.base.problem.Problem): "n", "t" or "" each."""
    return {"VEC_A": _vec(p.a), "VEC_B": _vec(p.b), "VEC_C": _vec(p.c)}


def vector_meta(p, BK: int) -> dict:
    """The kernel's specializations for problem p and the tile's BK: EVEN_K and vec_hints."""
    return {"EVEN_K": p.K % block_k(BK) == 0, **vec_hints(p)}


# tl.dot takes the precision as one argument (_common.DOT_PRECISION): every precision is offered
OFFER = Offer("vectorized", "triton", precisions=PRECISIONS,
              kernels=("matmul_vectorized_kernel",),
              validate=lambda params, precision: validate(**params),
              requires=common.tl_dot_requires(PRECISIONS))


@entry(OFFER)
def prepare(p, BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8, num_stages: int = 1,
            **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return block_tile_launch(launcher, matmul_vectorized_kernel, p, BM, BN, BK, num_warps,
                             num_stages, **vector_meta(p, BK),
                             **dot_meta(matmul_vectorized_kernel, p))
