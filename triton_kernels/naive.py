"""Stage naive, Triton twin: one "thread" per element of C, no reuse of loaded operands.

CUDA stage: cuda_kernels/naive.cu (one thread per C element, threadIdx.x walking rows).
Here each program owns a BLOCK x BLOCK patch of C and, for every k, loads one A element and one B
element *per output element* (2-D pointer grids, no broadcast reuse, no tl.dot): the same work and
the same memory requests per FMA as the CUDA kernel.

The naive twist: the patch is indexed transposed, so the tensor's fast axis (dim 1, where Triton
would normally place consecutive lanes) walks ROWS of C, as threadIdx.x does in the CUDA kernel.

What Triton does for you: its coalescing pass reads the pointer arithmetic, sees that consecutive
addresses run along dim 0 here, and picks a layout whose lanes walk that dimension. You cannot write
the uncoalesced CUDA mistake in Triton by index order alone, so this twin runs about as fast as the
coalesced twin; compare the two CUDA rows to see what the compiler saved you.
Launch: grid (ceil(M/BLOCK), ceil(N/BLOCK)), num_warps 4.
"""

import triton
import triton.language as tl

from triton_kernels._common import cdiv, launcher


@triton.jit
def matmul_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[None, :]  # dim 1 walks rows of C
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[:, None]  # dim 0 walks columns
    mask = (rows < M) & (cols < N)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K):
        # Full 2-D pointer grids: every output element issues its own loads (no reuse).
        a = tl.load(a_ptr + rows * K + k + cols * 0, mask=mask, other=0.0)
        b = tl.load(b_ptr + k * N + cols + rows * 0, mask=mask, other=0.0)
        acc += a * b
    tl.store(c_ptr + rows * N + cols, acc, mask=mask)


def prepare(a, b, c, block: int = 32, num_warps: int = 4, **_):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(M, block), cdiv(N, block))
    return launcher(matmul_naive_kernel, grid, (a, b, c, M, N, K), BLOCK=block,
                    num_warps=num_warps)
