"""Stage coalesced, Triton twin: one "thread" per element of C, no reuse, natural index order.

CUDA stage: cuda_kernels/coalesced.cu (threadIdx.x walking columns of C).
Each program owns a BLOCK x BLOCK patch of C with dim 1 (the fast axis) walking columns, and for
every k loads one A and one B element per output element, exactly as the naive twin does.

What Triton does for you: the coalescing pass would have chosen this lane order even for the naive
index order, and it vectorizes the B loads and C stores when it can prove contiguity; the CUDA
stage gets coalescing only because the programmer swapped threadIdx.x and threadIdx.y.
Launch: grid (ceil(N/BLOCK), ceil(M/BLOCK)), num_warps 4.
"""

import triton
import triton.language as tl

from triton_kernels._common import cdiv, launcher


@triton.jit
def matmul_coalesced_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[None, :]  # dim 1 walks columns of C
    rows = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[:, None]
    mask = (rows < M) & (cols < N)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(a_ptr + rows * K + k + cols * 0, mask=mask, other=0.0)
        b = tl.load(b_ptr + k * N + cols + rows * 0, mask=mask, other=0.0)
        acc += a * b
    tl.store(c_ptr + rows * N + cols, acc, mask=mask)


def prepare(a, b, c, block: int = 32, num_warps: int = 4, **_):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(N, block), cdiv(M, block))
    return launcher(matmul_coalesced_kernel, grid, (a, b, c, M, N, K), BLOCK=block,
                    num_warps=num_warps)
