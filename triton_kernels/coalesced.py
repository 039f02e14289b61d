"""Stage coalesced, Triton twin: one program per BLOCK x BLOCK patch of C, no tile reuse.

CUDA stage: cuda_kernels/coalesced.cu (threadIdx.x walking columns of C).
Same work as the naive twin, with the accumulator in natural order (acc[i, j] = C[rows[i], cols[j]]):
the fast axis walks columns, so B's row k and the final store of C are contiguous per warp.

What Triton does for you: it vectorizes the B loads and C stores (several consecutive floats per
thread, 16-byte accesses when it can prove alignment) and chooses the lane order from the pointer
arithmetic; the CUDA stage gets coalescing only because the programmer swapped threadIdx.x and
threadIdx.y, and never gets vector accesses until the vectorized stage.
Launch: grid (ceil(N/BLOCK), ceil(M/BLOCK)), num_warps 4.
"""

import triton
import triton.language as tl

from triton_kernels._common import cdiv, launcher


@triton.jit
def matmul_coalesced_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # program axis 0 walks columns
    rows = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)  # acc[i, j] = C[rows[i], cols[j]]
    for k in range(0, K):
        a = tl.load(a_ptr + rows * K + k, mask=rows < M, other=0.0)  # A[rows, k]
        b = tl.load(b_ptr + k * N + cols, mask=cols < N, other=0.0)  # B[k, cols]: contiguous
        acc += a[:, None] * b[None, :]
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def prepare(a, b, c, block: int = 32, num_warps: int = 4, **_):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(N, block), cdiv(M, block))
    return launcher(matmul_coalesced_kernel, grid, (a, b, c, M, N, K), BLOCK=block,
                    num_warps=num_warps)
