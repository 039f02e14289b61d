// Stage: tiled. Shared-memory tiling with a TILE x TILE block (TILE 32 by default; 8 and 16 are
// variants: --stage tiled:tile=16).
//
// Changed from coalesced: the block first copies a TILE x TILE tile of A and of B into shared
//   memory (one coalesced load per thread per matrix), synchronizes, and then every thread runs its
//   TILE-long inner product out of shared memory. Each global element is now loaded once per block
//   instead of once per thread: global traffic drops by a factor of TILE.
// Launch geometry (tiled.py): block TILE x TILE threads, a 1-D grid of ceil(M/TILE) * ceil(N/TILE)
//   blocks mapped to tiles of C by block_tile() (GROUP, common.cuh), 2 * TILE * KTILE * 4 bytes of
//   static shared memory (16 KiB at TILE 32, KTILE 64).
// Edges: loads outside A or B write 0 into the tile, so the inner loop needs no branch; only the
//   final store is guarded. Any M, N, K >= 1 works.
// Bottleneck it attacks: global memory traffic. What remains: two shared-memory reads per FMA
//   (As[ty][k] is a broadcast within a warp, Bs[k][tx] is conflict-free), so the shared-memory
//   pipe limits it; register tiling (blocktile stages) is the next step.
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/tiled.cu (its loaders swap tx and ty for a transposed
//   operand, so the loads stay coalesced, and pad the shared rows that then take column stores).
#include "common.cuh"

#ifndef TILE
#define TILE 32
#endif
// KTILE: depth of the K slice staged per barrier pair (a multiple of TILE). KTILE = TILE is the
// classic square-tile kernel; KTILE = 2*TILE has each thread load two elements of A and two of B
// per stage: twice the loads in flight and half the barriers per FMA.
#ifndef KTILE
#define KTILE TILE
#endif
#if KTILE % TILE != 0
#error "KTILE must be a multiple of TILE"
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ float As[TILE][KTILE];
    __shared__ float Bs[KTILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    int bm, bn;
    block_tile(CEIL_DIV(M, TILE), CEIL_DIV(N, TILE), bm, bn);
    const int row = bm * TILE + ty;
    const int col = bn * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KTILE) {
        // Coalesced tile loads: tx walks k along row `row` of A and the columns along row kb of B;
        // zero-fill outside the matrices so the inner loop needs no branch.
#pragma unroll
        for (int j = 0; j < KTILE / TILE; ++j) {
            const int ka = k0 + j * TILE + tx;
            As[ty][j * TILE + tx] = (row < M && ka < K) ? A[row * lda + ka] : 0.0f;
            const int kb = k0 + j * TILE + ty;
            Bs[j * TILE + ty][tx] = (kb < K && col < N) ? B[kb * ldb + col] : 0.0f;
        }
        __syncthreads();
        INNER_UNROLL
        for (int k = 0; k < KTILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: broadcast in the warp; Bs: 32 banks, no conflict
        }
        __syncthreads();  // nobody may overwrite the tiles while a neighbour still reads them
    }
    if (row < M && col < N) C[row * ldc + col] = acc;
}
