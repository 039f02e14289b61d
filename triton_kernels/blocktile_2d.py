"""Stage blocktile_2d, Triton twin: the CUDA stage's 128 x 128 block tile with its 8 warps.

CUDA stage: cuda_kernels/blocktile_2d.cu. The kernel is blocktile_1d's twin written out again
under its own name; only the tile and the warp count change, and that is the point: in CUDA, going from a column of TM results
per thread to a TM x TN register tile is a rewrite of the inner loop; in Triton it is a launch
parameter. Each program computes a BLOCK_M x BLOCK_N (BM x BN, 128 x 128) tile of C with masked,
zero-filled tile loads and tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.

What Triton does for you that the CUDA stage does by hand:
- the 2-D register tile: 8 warps (256 threads) on a 128 x 128 accumulator give each thread 64
  results, as the CUDA kernel's TM x TN = 8 x 8; tl.dot's layout decides which 64 and loads the
  A and B fragments from shared memory into registers for the outer products (the compiled kernel
  reads them with LDS.128, like the CUDA kernel's groups of 4);
- staging tiles through shared memory, the barriers, and bank-conflict-free shared layouts (the
  CUDA kernel pads As and groups its columns by hand for that);
- vectorized global loads whenever it can prove 16-byte alignment and contiguity (pointer
  arguments 16-byte aligned, integer arguments divisible by 16 specialized): at 4096^3 this twin
  already loads with LDG.E.128, which the CUDA stage only does in vectorized; at 4095 it falls
  back to 32-bit loads on its own (for row-major operands, whose row strides are K and N).
  triton_kernels/vectorized.py adds explicit hints;
- software pipelining when num_stages > 1 (default 1: the CUDA kernel does not prefetch; try
  --stage blocktile_2d:num_stages=3).
BLOCK_K = max(BK, 16): tl.dot needs a K-tile of at least 16 (16 at the default BK = 8; no
broadcast-multiply fallback).
Knobs: BM, BN, BK (tile), num_warps (default 8 = the CUDA block's 256 threads / 32; keep it at
(BM/TM)*(BN/TN)/32 when you change the tile), num_stages.
Changed from blocktile_1d's twin: BLOCK_M x BLOCK_N = 128 x 128 and 8 warps (64 outputs per
thread instead of 8). Bottleneck it attacks (as the CUDA stage): loads per FMA, now from both
operands' reuse in registers.
Layouts: the kernel takes all six strides (A, B and C may be row-major,
transposed, offset or sliced views; nothing is copied). Triton specializes an integer argument
equal to 1 as a constant and one divisible by 16 as such, so for row-major operands (stride_ak =
stride_bn = stride_cn = 1) it compiles as it did with plain row-major indexing.
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs, column-blocks fastest
(pid % grid_n is the column-block, pid // grid_n the row-block: the order of the former 2-D grid
(ceil(N/BLOCK_N), ceil(M/BLOCK_M)), whose second axis stopped at 65535 programs), num_warps 8.
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import block_tile_launch, launcher, validate_block_tile


# blocktile_1d's program, written out again: only its launch changes (a 128 x 128 tile, 8 warps).
# In Triton the step from 1-D to 2-D thread tiles is not a code change: tl.dot's layout picks
# each thread's share of the accumulator (64 outputs here, 8 there) from the tile shape and the
# warp count.
@triton.jit
def matmul_blocktile_2d_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                               stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # column-blocks fastest
    rm = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    # Pointers walk K like the CUDA kernel's a_ptr/b_ptr: the row/column part is computed once.
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=in_m & (k0 + rk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k0 + rk[:, None] < K) & in_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=in_m & in_n)


def validate(BM: int = 128, BN: int = 128, BK: int = 8, num_stages: int = 1, **_) -> None:
    validate_block_tile("blocktile_2d", BM, BN, BK, num_stages)


OFFER = Offer("blocktile_2d", "triton", kernels=("matmul_blocktile_2d_kernel",),
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8, num_stages: int = 1,
            **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return block_tile_launch(launcher, matmul_blocktile_2d_kernel, p, BM, BN, BK, num_warps,
                             num_stages)
