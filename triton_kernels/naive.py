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
Launch: grid (ceil(M/BLOCK), ceil(N/BLOCK)), num_warps 4 (128 threads; the CUDA block has 1024).
"""

import triton
import triton.language as tl

from triton_kernels._common import cdiv, launcher


@triton.jit
def matmul_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # program axis 0 walks rows, as blockIdx.x
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)  # acc[j, i] = C[rows[i], cols[j]]: transposed
    for k in range(0, K):
        a = tl.load(a_ptr + rows * K + k, mask=rows < M, other=0.0)  # A[rows, k]
        b = tl.load(b_ptr + k * N + cols, mask=cols < N, other=0.0)  # B[k, cols]
        acc += b[:, None] * a[None, :]  # each thread multiplies the operands of its own elements
    tl.store(c_ptr + rows[None, :] * N + cols[:, None], acc,
             mask=(rows[None, :] < M) & (cols[:, None] < N))


def prepare(a, b, c, block: int = 32, num_warps: int = 4, **_):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(M, block), cdiv(N, block))
    return launcher(matmul_naive_kernel, grid, (a, b, c, M, N, K), BLOCK=block,
                    num_warps=num_warps)
