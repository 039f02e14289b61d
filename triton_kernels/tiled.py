"""Stage tiled, Triton twin: a block-tiled kernel with the CUDA stage's TILE x TILE x TILE tile.

CUDA stage: cuda_kernels/tiled.cu. Each program computes a TILE x TILE block of C; per k-step it
loads a TILE x TILE tile of A and of B (masked at the edges, zero-filled like the CUDA tiles) and
accumulates their product with tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.

What Triton does for you that the CUDA stage does by hand:
- staging tiles through shared memory, the barriers around it, and the layout of the tiles there;
- register tiling: tl.dot spreads the TILE x TILE accumulator over the program's threads, several
  outputs per thread, which the CUDA stage only reaches in the blocktile stages;
- software pipelining (prefetching the next tiles while computing this one) when num_stages > 1.
  The default here is num_stages=1 so the twin, like the CUDA kernel, does not prefetch; try
  --stage tiled:num_stages=3 to see what the pipeliner buys.
tl.dot needs tiles of at least 16, so tile=8 computes the product as a broadcast multiply and sum.
Launch: grid (ceil(N/TILE), ceil(M/TILE)), num_warps 4 (a CUDA block of TILE*TILE threads).
"""

import triton
import triton.language as tl

from triton_kernels._common import cdiv, launcher


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K, TILE: tl.constexpr, USE_DOT: tl.constexpr):
    rn = tl.program_id(0) * TILE + tl.arange(0, TILE)
    rm = tl.program_id(1) * TILE + tl.arange(0, TILE)
    rk = tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), dtype=tl.float32)
    for k0 in range(0, K, TILE):
        ka = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + ka[None, :],
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ka[:, None] * N + rn[None, :],
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        if USE_DOT:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def prepare(a, b, c, tile: int = 32, num_warps: int = 4, num_stages: int = 1, **_):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(N, tile), cdiv(M, tile))
    return launcher(matmul_tiled_kernel, grid, (a, b, c, M, N, K), TILE=tile,
                    USE_DOT=tile >= 16, num_warps=num_warps, num_stages=num_stages)
