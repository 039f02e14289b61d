// Stage: tiled_padded. The tiled kernel with every bounds check removed: the launcher pads A, B
// and C with zeros to multiples of TILE once, before timing, so every tile is full.
// TILE 32 by default; 8 and 16 are variants (--stage tiled_padded:tile=16).
//
// Changed from tiled: no `row < M`, `k0 + tx < K`, `col < N` tests anywhere. tiled.cu computes two
//   predicates per k-step for the tile loads plus one for the final store; here every load and
//   store is unconditional, so no thread of any block takes a different path from its neighbours
//   (no divergence at the edge blocks) and the loop body is only address arithmetic, two loads,
//   two shared stores, barriers and TILE FMAs.
// Arguments: (A, B, C, M, N, K) with the PADDED sizes: M, N, K here are Mp, Np, Kp, multiples of
//   TILE, and A is Mp x Kp, B is Kp x Np, C is Mp x Np (row-major, leading dimensions Kp, Np, Np).
//   The launcher (tiled_padded.py) passes the caller's tensors unchanged where a dimension is
//   already a multiple, and crops C back (c.copy_(cpad[:M, :N])) inside the timed callable when
//   M or N is not. Zero rows/columns of padding contribute exactly 0 to every dot product, so the
//   cropped result equals the unpadded one.
// Launch geometry (tiled_padded.py): block TILE x TILE threads, grid (Np/TILE, Mp/TILE), exactly
//   as tiled; 2 * TILE * TILE * 4 bytes of static shared memory (8 KiB at TILE 32).
// Bottleneck it attacks: the edge-handling work and divergence of tiled (branch/predicate
//   instructions in the loop, and partially idle warps in the last row/column of blocks). The
//   price: a one-time padding copy (reported as launch.setup_ms, not timed) and, when M or N is
//   not a multiple of TILE, a crop copy that IS timed. What remains is tiled's bottleneck: two
//   shared-memory reads per FMA.
#include "common.cuh"

#ifndef TILE
#define TILE 32
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
matmul_tiled_padded(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K) {
    // M is not needed: the grid covers exactly Mp / TILE rows of blocks.
    (void)M;
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    const float* a = A + row * K + tx;  // walks right along row `row` of A, TILE floats a step
    const float* b = B + ty * N + col;  // walks down column `col` of B, TILE rows a step
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = a[k0];      // coalesced: tx walks a row of A's tile
        Bs[ty][tx] = b[k0 * N];  // coalesced: tx walks a row of B's tile
        __syncthreads();
        INNER_UNROLL
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();
    }
    C[row * N + col] = acc;
}
