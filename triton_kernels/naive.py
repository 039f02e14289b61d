"""Stage naive, Triton twin: one program per BLOCK x BLOCK patch of C, no tile reuse.

CUDA stage: cuda_kernels/naive.cu (one thread per C element, threadIdx.x walking rows).
Per k, the program loads the BLOCK values of A's column k and of B's row k that its patch needs and
adds their outer product; each thread loads exactly the operands of the few C elements it holds.
No tile is staged in shared memory and no loaded value is reused beyond a thread's own elements.

The naive twist: the accumulator is held transposed (acc[j, i] = C[rows[i], cols[j]]), so the
tensor's fast axis (dim 1, where Triton puts consecutive lanes) walks ROWS of C, as threadIdx.x
does in the CUDA kernel, and the store to C is strided.

What Triton does for you: its coalescing pass reads the pointer arithmetic, sees which dimension is
contiguous in memory, and picks the lane order (and vector width) for each load and store itself,
converting layouts through shared memory where needed. The index order you write does not decide
coalescing the way threadIdx.x does in CUDA; compare this row with the coalesced twin, and the two
CUDA rows, to see how much of the CUDA mistake the compiler repairs.
Layouts: the kernel takes all six strides (A, B and C may be row-major, transposed, offset or
sliced views; nothing is copied). Triton specializes an integer argument equal to 1 as a constant,
so the stride that is 1 in a given layout costs nothing, and each layout compiles its own kernel.
Launch: a 1-D grid of ceil(M/BLOCK) * ceil(N/BLOCK) programs, row-blocks fastest (as the CUDA
twin's blocks; a 2-D grid's second axis stops at 65535 programs), num_warps 4 (128 threads; the
CUDA block has 1024).
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args


@triton.jit
def matmul_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, BLOCK: tl.constexpr,
                        OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_m = tl.cdiv(M, BLOCK)
    pid = tl.program_id(0)
    rm = (pid % grid_m) * BLOCK + tl.arange(0, BLOCK)  # row-blocks fastest, as blockIdx.x
    rn = (pid // grid_m) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)  # acc[j, i] = C[rm[i], rn[j]]: transposed
    for k in range(0, K):
        a = tl.load(a_ptr + rm * stride_am + k * stride_ak, mask=rm < M, other=0.0)  # A[rm, k]
        b = tl.load(b_ptr + k * stride_bk + rn * stride_bn, mask=rn < N, other=0.0)  # B[k, rn]
        acc += b[:, None] * a[None, :]  # each thread multiplies the operands of its own elements
    tl.store(c_ptr + rm[None, :] * stride_cm + rn[:, None] * stride_cn, acc,
             mask=(rm[None, :] < M) & (rn[:, None] < N))


OFFER = Offer("naive", "triton", kernels=("matmul_naive_kernel",))


@entry(OFFER)
def prepare(p, block: int = 32, num_warps: int = 4, **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    grid = (cdiv(p.M, block) * cdiv(p.N, block),)
    return launcher(matmul_naive_kernel, grid, (*problem_args(p),), BLOCK=block,
                    **offsets_meta(p), num_warps=num_warps)
