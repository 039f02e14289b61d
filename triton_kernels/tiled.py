"""Stage tiled, Triton twin: a block-tiled kernel with the CUDA stage's TILE x TILE x TILE tile.

CUDA stage: cuda_kernels/tiled.cu. Each program computes a TILE x TILE block of C; per k-step it
loads a TILE x TILE tile of A and of B (masked at the edges, zero-filled like the CUDA tiles) and
accumulates their product with tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.
Changed from coalesced's twin: the k-loop steps a TILE x TILE tile of A and of B (staged through
shared memory by the compiler) instead of one column of A and one row of B.
The other precisions (tf32, 3xtf32, bf16, fp16: tl.dot's precision as an argument, and the
interpreter's bf16 upcast) are the variant file's, triton_kernels/variants/tiled.py, the former
kernel unchanged and under the same name; prepare() runs it for a problem in those precisions and
this file's kernel in fp32, for which the two compile to the same PTX
(tests/test_lessons_triton_variants.py).

What Triton does for you that the CUDA stage does by hand:
- staging tiles through shared memory, the barriers around it, and the layout of the tiles there;
- register tiling: tl.dot spreads the TILE x TILE accumulator over the program's threads, several
  outputs per thread, which the CUDA stage only reaches in the blocktile stages;
- software pipelining (prefetching the next tiles while computing this one) when num_stages > 1.
  The default here is num_stages=1 so the twin, like the CUDA kernel, does not prefetch; try
  --stage tiled:num_stages=3 to see what the pipeliner buys.
tl.dot needs tiles of at least 16, so tile=8 computes the product as a broadcast multiply and sum.
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant
and one divisible by 16 as such, so for row-major operands (stride_ak = stride_bn = stride_cn = 1)
the kernel compiles as it did with plain row-major indexing; a transposed operand compiles its own
kernel, whose tile loads the compiler coalesces along the other dimension.
Launch: a 1-D grid of ceil(M/TILE) * ceil(N/TILE) programs, column-blocks fastest (pid % grid_n
is the column-block, pid // grid_n the row-block: the order of the former 2-D grid
(ceil(N/TILE), ceil(M/TILE)), whose second axis stopped at 65535 programs), num_warps 4 (a CUDA
block of TILE*TILE threads).
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args
from triton_kernels.variants import tiled as variant


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, TILE: tl.constexpr, USE_DOT: tl.constexpr,
                        OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, TILE)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * TILE + tl.arange(0, TILE)  # column-blocks fastest
    rm = (pid // grid_n) * TILE + tl.arange(0, TILE)
    rk = tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), dtype=tl.float32)
    for k0 in range(0, K, TILE):  # one TILE x TILE tile of A and of B per k-step, zero-filled
        ka = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ka[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        if USE_DOT:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:  # tile 8, under tl.dot's 16: a broadcast multiply and sum on the CUDA cores
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


# fp32 is the lesson; tf32, 3xtf32, bf16 and fp16 run the variant (triton_kernels/variants/tiled.py)
OFFER = Offer("tiled", "triton", precisions=variant.PRECISIONS, kernels=("matmul_tiled_kernel",),
              validate=variant.validate, requires=common.tl_dot_requires(variant.PRECISIONS))


@entry(OFFER)
def prepare(p, tile: int = 32, num_warps: int = 4, num_stages: int = 1, **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    if p.precision != "fp32":
        return variant.variant_launch(p, tile, num_warps, num_stages)
    grid = (cdiv(p.M, tile) * cdiv(p.N, tile),)
    return launcher(matmul_tiled_kernel, grid, (*problem_args(p),), TILE=tile,
                    USE_DOT=tile >= 16, **offsets_meta(p), num_warps=num_warps,
                    num_stages=num_stages)
