"""Stage coalesced, Triton twin: one program per BLOCK x BLOCK patch of C, no tile reuse.

CUDA stage: cuda_kernels/coalesced.cu (threadIdx.x walking columns of C).
Same work as the naive twin, with the accumulator in natural order (acc[i, j] = C[rows[i], cols[j]]):
the fast axis walks columns, so for a row-major B and C, B's row k and the final store of C are
contiguous per warp.

What Triton does for you: it vectorizes the B loads and C stores (several consecutive floats per
thread, 16-byte accesses when it can prove alignment) and chooses the lane order from the pointer
arithmetic; the CUDA stage gets coalescing only because the programmer swapped threadIdx.x and
threadIdx.y, and never gets vector accesses until the vectorized stage.
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant
(and one divisible by 16 as such), so for row-major operands (stride_ak = stride_bn = stride_cn =
1) the kernel compiles as it did with plain row-major indexing; each layout compiles its own kernel,
and for a transposed operand the compiler finds the contiguous dimension in the other direction.
Launch: a 1-D grid of ceil(M/BLOCK) * ceil(N/BLOCK) programs, column-blocks fastest (program pid
takes column-block pid % grid_n and row-block pid // grid_n: the order of the former 2-D grid
(ceil(N/BLOCK), ceil(M/BLOCK)), whose second axis stopped at 65535 programs), num_warps 4.
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args


@triton.jit
def matmul_coalesced_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                            stride_bn, stride_cm, stride_cn, BLOCK: tl.constexpr,
                            OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, BLOCK)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * BLOCK + tl.arange(0, BLOCK)  # column-blocks fastest
    rm = (pid // grid_n) * BLOCK + tl.arange(0, BLOCK)
    # Pointers walk K. (Recomputing rm*stride_am + k*stride_ak each step is the same arithmetic,
    # but with the 1-D grid's index math ptxas then scheduled the loads one at a time between the
    # FMAs: 27.5 ms instead of 17.9 ms at 4096^3 on an H100. Walking the pointers keeps the loads
    # of a step together, as before: 18.1 ms.)
    a_ptrs = a_ptr + rm * stride_am  # A[rm, 0]
    b_ptrs = b_ptr + rn * stride_bn  # B[0, rn]
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)  # acc[i, j] = C[rm[i], rn[j]]
    for k in range(0, K):
        a = tl.load(a_ptrs, mask=rm < M, other=0.0)  # A[rm, k]
        b = tl.load(b_ptrs, mask=rn < N, other=0.0)  # B[k, rn]
        acc += a[:, None] * b[None, :]
        a_ptrs += stride_ak
        b_ptrs += stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


OFFER = Offer("coalesced", "triton", kernels=("matmul_coalesced_kernel",))


@entry(OFFER)
def prepare(p, block: int = 32, num_warps: int = 4, **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    grid = (cdiv(p.M, block) * cdiv(p.N, block),)
    return launcher(matmul_coalesced_kernel, grid, (*problem_args(p),), BLOCK=block,
                    **offsets_meta(p), num_warps=num_warps)
