"""Stage blocktile_1d, Triton twin: the CUDA stage's 64 x 64 block tile with its 16 warps.

CUDA stage: cuda_kernels/blocktile_1d.cu. Each program computes a BLOCK_M x BLOCK_N (BM x BN,
64 x 64) tile of C: per k-step it loads a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile
of B (masked at the edges with zero fill, like the CUDA tiles) and accumulates their product with
tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.

What Triton does for you that the CUDA stage does by hand:
- register tiling: the CUDA kernel decides that thread t owns TM = 8 results down one column and
  caches one B value in a register for TM FMAs. Here there is nothing to write: with 16 warps
  (512 threads) on a 64 x 64 accumulator each thread also holds 8 results, but tl.dot's layout
  (the compiler's "blocked" FMA layout for fp32) chooses which 8, and how the A and B fragments are
  read from shared memory and reused in registers;
- staging the tiles through shared memory, the barriers, and the shared-memory layout;
- vectorized global loads (ld.global.v4) whenever it can prove 16-byte alignment and contiguity:
  pointer arguments are assumed 16-byte aligned and integer arguments divisible by 16 are
  specialized (so at K = N = 4096 the row strides of row-major A and B are known multiples of 16);
  see triton_kernels/vectorized.py for the explicit hints;
- software pipelining (prefetching the next tiles while computing this one) when num_stages > 1.
  The default is num_stages=1: the CUDA kernel does not prefetch, so neither does its twin by
  default; --stage blocktile_1d:num_stages=3 shows what the pipeliner buys.
BLOCK_K: tl.dot needs a K-tile of at least 16, so BLOCK_K = max(BK, 16): at the default BK = 8 the
twin steps 16 deep per iteration where the CUDA kernel steps 8 (no broadcast-multiply fallback;
the product is the same, the shared-memory tile is twice as deep).
Knobs: BM, BN, BK (tile), num_warps (default 16 = the CUDA block's 512 threads / 32; change it
with the tile to keep the two equal: threads = BM*BN/TM), num_stages.
Changed from tiled's twin: a 64 x 64 tile (BM x BN) instead of 32 x 32 and 16 warps instead of 4,
as the CUDA stage; BLOCK_K is its own parameter (BK) instead of the tile edge.
Bottleneck it attacks (as the CUDA stage): shared-memory traffic per FMA, through more outputs
per thread held in registers (8 accumulators per thread, as the CUDA kernel's TM = 8).
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant
and one divisible by 16 as such, so for row-major operands (stride_ak = stride_bn = stride_cn = 1)
the kernel compiles as it did with plain row-major indexing; a transposed operand compiles its own
kernel, whose tile loads the compiler coalesces along the other dimension.
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs, column-blocks fastest
(pid % grid_n is the column-block, pid // grid_n the row-block: the order of the former 2-D grid
(ceil(N/BLOCK_N), ceil(M/BLOCK_M)), whose second axis stopped at 65535 programs), num_warps 16.
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import block_tile_launch, launcher, validate_block_tile


@triton.jit
def matmul_blocktile_1d_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
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


def validate(BM: int = 64, BN: int = 64, BK: int = 8, num_stages: int = 1, **_) -> None:
    validate_block_tile("blocktile_1d", BM, BN, BK, num_stages)


OFFER = Offer("blocktile_1d", "triton", kernels=("matmul_blocktile_1d_kernel",),
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BM: int = 64, BN: int = 64, BK: int = 8, num_warps: int = 16, num_stages: int = 1,
            **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return block_tile_launch(launcher, matmul_blocktile_1d_kernel, p, BM, BN, BK, num_warps,
                             num_stages)
