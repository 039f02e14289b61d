// Stage: tiled_rect. Rectangular output tiles: a block of TILE_ROWS x TILE_COLS threads computes a
// TILE_ROWS x TILE_COLS tile of C (8 x 32 = 256 threads by default; variants such as
// --stage tiled_rect:rows=16,cols=32).
//
// Changed from tiled: the block is no longer square. The K-tile stays square in the B direction:
//   per k-step the block stages an A tile of TILE_ROWS x TILE_COLS (rows of C x K-width TILE_COLS)
//   and a B tile of TILE_COLS x TILE_COLS (K x columns of C). (tiled's default stages 2*TILE = 64
//   deep K slices, ktile 2; the like-for-like comparison for the K depth is tiled:ktile=1.) The A
//   tile has one element per thread; the B tile has B_LOADS = TILE_COLS / TILE_ROWS elements per
//   thread, so each thread loads B_LOADS rows of it (4 at the default 8 x 32): thread (ty, tx)
//   loads B-tile rows ty, ty + TILE_ROWS, ty + 2*TILE_ROWS, ...
// Why: with square tiles, the tile edge sets both the block size and the width of every row a
//   warp loads. tile=8 gives small 64-thread blocks but each row of a tile is 8 floats = 32 of the
//   128 bytes of a cache line; tile=32 gives full 128-byte rows but 1024-thread blocks, which
//   leave only 2 blocks per SM (1 on a 48-warp sm_89) and idle the whole block at each barrier.
//   8 x 32 keeps 128-byte rows (a warp = one 32-float row of each tile, fully coalesced) with
//   256-thread blocks: more, smaller blocks per SM to hide each other's barrier and load stalls.
//   The cost: each B element staged in shared memory is reused only TILE_ROWS times (by the
//   TILE_ROWS rows of this block) instead of 32, so B traffic from L2/DRAM is 32/TILE_ROWS times
//   that of tiled:tile=32 (4x at the default), while A traffic is the same.
// Launch geometry (tiled_rect.py): block (TILE_COLS, TILE_ROWS) threads, a 1-D grid of
//   ceil(M/TILE_ROWS) * ceil(N/TILE_COLS) blocks mapped to tiles of C by block_tile() (GROUP,
//   common.cuh, tiled's default 16), static shared memory
//   (TILE_ROWS*TILE_COLS + TILE_COLS*TILE_COLS) * 4 bytes (5 KiB at 8 x 32).
// Constraints (checked by the launcher's validate() before compiling, and here by static_assert):
//   TILE_COLS % TILE_ROWS == 0 and 32 <= TILE_ROWS * TILE_COLS <= 1024.
// Edges: as in tiled, loads outside A or B write 0 into the tile and only the store is guarded,
//   so any M, N, K >= 1 works.
// Bottleneck it attacks: occupancy/latency hiding (block granularity) without giving up
//   coalescing. What remains: two shared-memory reads per FMA, as in tiled.
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/tiled_rect.cu (a transposed A's tile is only TILE_ROWS
//   long in its contiguous dimension, so that file renumbers the threads to keep its loads
//   coalesced).
#include "common.cuh"

#ifndef TILE_ROWS
#define TILE_ROWS 8
#endif
#ifndef TILE_COLS
#define TILE_COLS 32
#endif
#define B_LOADS (TILE_COLS / TILE_ROWS)  // rows of the B tile each thread loads

static_assert(TILE_COLS % TILE_ROWS == 0, "TILE_COLS must be a multiple of TILE_ROWS");
static_assert(TILE_ROWS * TILE_COLS >= 32 && TILE_ROWS * TILE_COLS <= 1024,
              "a block holds 32 to 1024 threads");

extern "C" __global__ void __launch_bounds__(TILE_ROWS * TILE_COLS)
matmul_tiled_rect(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ float As[TILE_ROWS][TILE_COLS];  // rows of C x K-width of the step
    __shared__ float Bs[TILE_COLS][TILE_COLS];  // K-width of the step x columns of C
    const int tx = threadIdx.x, ty = threadIdx.y;
    int bm, bn;
    block_tile(CEIL_DIV(M, TILE_ROWS), CEIL_DIV(N, TILE_COLS), bm, bn);
    const int row = bm * TILE_ROWS + ty;
    const int col = bn * TILE_COLS + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE_COLS) {
        // A tile: one element per thread; tx walks a 32-float (128-byte) row segment of A.
        const int ka = k0 + tx;
        As[ty][tx] = (row < M && ka < K) ? A[row * lda + ka] : 0.0f;
        // B tile: B_LOADS rows per thread; tx walks a row of B each time.
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int kr = j * TILE_ROWS + ty;  // the row of the B tile
            Bs[kr][tx] = (k0 + kr < K && col < N) ? B[(k0 + kr) * ldb + col] : 0.0f;
        }
        __syncthreads();
        // As[ty][k] is one address per row of threads (a broadcast); Bs[k][tx] is 32 consecutive
        // floats across a warp (conflict-free).
        INNER_UNROLL
        for (int k = 0; k < TILE_COLS; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * ldc + col] = acc;
}
