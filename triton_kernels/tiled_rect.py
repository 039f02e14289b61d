"""Stage tiled_rect, Triton twin: rectangular rows x cols output tiles with a cols-wide K-step.

CUDA stage: cuda_kernels/tiled_rect.cu. Changed from tiled: each program computes a rows x cols
tile of C (default 8 x 32) instead of a square one; per k-step it loads a rows x cols tile of A and
a cols x cols tile of B (masked at the edges, zero-filled like the CUDA tiles), so every tile row
is cols floats wide (128 bytes at cols 32) however few rows the tile has. Parameters are the CUDA
stage's (rows 4/8/16/32, cols 16/32/64); the CUDA kernel's thread-count rules (cols % rows == 0:
each thread loads cols/rows rows of B; 32 <= rows*cols <= 1024 threads) do not bind a Triton
program, which takes any of those tiles. In the kernel the tile is BLOCK_M x BLOCK_N (rows x
cols) and the K-step BLOCK_K, the names of the blocktile twins that follow.
Bottleneck attacked: block granularity vs coalescing: small programs (more of them resident and
interleaving) that still load full 128-byte rows, at the cost of less reuse of each B element.

What Triton does for you that the CUDA stage does by hand:
- the B tile's "each thread loads cols/rows rows" split: Triton distributes a tile's loads over the
  program's threads itself, whatever its shape, coalescing along the contiguous dimension;
- shared-memory staging, barriers and register tiling inside tl.dot (several outputs per thread);
- software pipelining when num_stages > 1 (default 1, like the CUDA kernel).
What it does not do: choose the tile. Here, as in CUDA, the tile shape trades reuse of B (each B
element serves the tile's rows) for smaller, more numerous programs.
tl.dot needs every dimension >= 16, so rows 4 and 8 use a broadcast multiply and sum. To keep that
rows x BLOCK_K x cols product small (<= 2048 elements, 16 per thread at 4 warps, so it stays in
registers) the fallback walks K in steps of BLOCK_K = min(cols, 2048 / (rows*cols)) (8 at the
default 8 x 32): each program still loads the same A and B elements, in narrower K slices.
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant
and one divisible by 16 as such, so for row-major operands (stride_ak = stride_bn = stride_cn = 1)
the kernel compiles as it did with plain row-major indexing. The "full 128-byte rows" above are a
row-major operand's; for a transposed one the tile's contiguous lines run along the other
dimension, and the compiler coalesces along those instead.
Launch: a 1-D grid of ceil(M/rows) * ceil(N/cols) programs, column-blocks fastest (pid % grid_n is
the column-block, pid // grid_n the row-block: the order of the former 2-D grid (ceil(N/cols),
ceil(M/rows)), whose second axis stopped at 65535 programs), num_warps 4 by default (a CUDA block
of rows*cols threads; 8 x 32 = 256 threads = 8 warps).
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.errors import LabError
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args

FALLBACK_MAX_ELEMENTS = 2048


@triton.jit
def matmul_tiled_rect_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                             stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             USE_DOT: tl.constexpr, OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # column-blocks fastest
    rm = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)  # a rows x cols tile of C
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):  # a rows x BLOCK_K tile of A, a BLOCK_K x cols tile of B
        ka = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ka[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        if USE_DOT:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:  # rows 4 and 8, under tl.dot's 16: the narrow broadcast multiply and sum
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def k_step(rows: int, cols: int) -> int:
    """The K-step (BLOCK_K): cols with tl.dot (the CUDA tile), narrower for the broadcast
    fallback."""
    if rows >= 16 and cols >= 16:
        return cols
    return max(1, min(cols, FALLBACK_MAX_ELEMENTS // (rows * cols)))


def validate(params, precision: str) -> None:
    """tl.arange needs power-of-two extents: the registry's rows and cols are all such."""
    for name, default, allowed in (("rows", 8, (4, 8, 16, 32)), ("cols", 32, (16, 32, 64))):
        if params.get(name, default) not in allowed:
            raise LabError(f"tiled_rect (triton) takes {name} in {', '.join(map(str, allowed))}, "
                           f"not {params.get(name)}")


OFFER = Offer("tiled_rect", "triton", kernels=("matmul_tiled_rect_kernel",), validate=validate)


@entry(OFFER)
def prepare(p, rows: int = 8, cols: int = 32, num_warps: int = 4, num_stages: int = 1, **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    grid = (cdiv(p.M, rows) * cdiv(p.N, cols),)
    return launcher(matmul_tiled_rect_kernel, grid, (*problem_args(p),), BLOCK_M=rows,
                    BLOCK_N=cols, BLOCK_K=k_step(rows, cols), USE_DOT=rows >= 16 and cols >= 16,
                    **offsets_meta(p), num_warps=num_warps,
                    num_stages=num_stages)
