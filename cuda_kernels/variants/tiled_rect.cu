// Variant of ../tiled_rect.cu for every layout (nn, nt, tn, tt) and for operands past 2^31 elements
// (OFFSET64): the launcher compiles it for every problem but the lesson case (nn, 32-bit offsets).
// A reader can skip it: the lesson, ../tiled_rect.cu, is the same kernel written out for nn.
// Stage: tiled_rect. Rectangular output tiles: a block of TILE_ROWS x TILE_COLS threads computes a
// TILE_ROWS x TILE_COLS tile of C (8 x 32 = 256 threads by default; variants such as
// --stage tiled_rect:rows=16,cols=32).
//
// Changed from tiled: the block is no longer square. The K-tile stays square in the B direction:
//   per k-step the block stages an A tile of TILE_ROWS x TILE_COLS (rows of C x K-width TILE_COLS)
//   and a B tile of TILE_COLS x TILE_COLS (K x columns of C). (tiled's default stages 2*TILE = 64
//   deep K slices, ktile 2; the like-for-like comparison for the K depth is tiled:ktile=1.) The A tile has one element per
//   thread; the B tile has TILE_COLS / TILE_ROWS elements per thread, so each thread loads
//   TILE_COLS / TILE_ROWS rows of it (4 at the default 8 x 32): thread (ty, tx) loads B-tile rows
//   ty, ty + TILE_ROWS, ty + 2*TILE_ROWS, ...
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
// Layouts (common.cuh): A(i, k) and B(k, j) are read through A_OFF / B_OFF and C is stored with
//   ldc. The nn loaders above are coalesced because tx walks k in A and j in B, the contiguous
//   dimensions of row-major operands. The transposed builds change the loader of that operand so
//   consecutive threads walk its contiguous dimension instead, then pad the shared tile the warp
//   now stores down a column of (the nn build has no padding: the kernel it always was):
//   - TRANS_B: the B tile is square, so tx and the row index swap roles (tx walks k, each thread
//     covers columns ty, ty + TILE_ROWS, ...); Bs rows get 1 extra float, which puts the 32
//     floats of a column store in 32 banks (Bs is only read along rows, so nothing else changes).
//   - TRANS_A: the A tile's contiguous dimension (its TILE_ROWS rows) is shorter than a warp, so
//     the block's threads are renumbered t = ty * TILE_COLS + tx and thread t loads row t %
//     TILE_ROWS, column t / TILE_ROWS: a warp reads 32 / TILE_ROWS column segments of TILE_ROWS
//     contiguous floats (every byte of each 32-byte sector used; tx walking k would use 4 of 32).
//     As rows get A_PAD extra floats: a multiple of 4, so As[ty][k..k+3] is still one aligned
//     LDS.128 in the inner loop, and 32 / TILE_ROWS when that is larger, which spreads the warp's
//     store (TILE_ROWS rows x 32 / TILE_ROWS consecutive k) over 32 different banks.
//   Measured on the H100 at 4096^3 (8 x 32): nn 16.6 ms, nt 16.9, tn 16.7, tt 17.5; with the nn
//   A loader, tn and tt took 24.8 and 24.2 ms.
#include "common.cuh"

#ifndef TILE_ROWS
#define TILE_ROWS 8
#endif
#ifndef TILE_COLS
#define TILE_COLS 32
#endif
#define B_ROWS_PER_THREAD (TILE_COLS / TILE_ROWS)

static_assert(TILE_COLS % TILE_ROWS == 0, "TILE_COLS must be a multiple of TILE_ROWS");
static_assert(TILE_ROWS * TILE_COLS >= 32 && TILE_ROWS * TILE_COLS <= 1024,
              "a block holds 32 to 1024 threads");

// Shared-memory padding, only in the builds whose loaders store down a column (Layouts above).
#if TRANS_A
#define A_PAD (32 / TILE_ROWS > 4 ? 32 / TILE_ROWS : 4)
#else
#define A_PAD 0
#endif
#if TRANS_B
#define B_PAD 1
#else
#define B_PAD 0
#endif

extern "C" __global__ void __launch_bounds__(TILE_ROWS * TILE_COLS)
matmul_tiled_rect(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ float As[TILE_ROWS][TILE_COLS + A_PAD];  // rows of C x K-width of the step
    __shared__ float Bs[TILE_COLS][TILE_COLS + B_PAD];  // K-width of the step x columns of C
    const int tx = threadIdx.x, ty = threadIdx.y;
    int bm, bn;
    block_tile(CEIL_DIV(M, TILE_ROWS), CEIL_DIV(N, TILE_COLS), bm, bn);
    const int row = bm * TILE_ROWS + ty;
    const int col = bn * TILE_COLS + tx;
#if TRANS_A
    // Column-major A: thread t loads row t % TILE_ROWS of column t / TILE_ROWS of the A tile.
    const int t = ty * TILE_COLS + tx;
    const int ta = t % TILE_ROWS, tk = t / TILE_ROWS;
    const int ia = bm * TILE_ROWS + ta;
#endif
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE_COLS) {
#if TRANS_A
        As[ta][tk] = (ia < M && k0 + tk < K) ? A[A_OFF(ia, k0 + tk)] : 0.0f;
#else
        // A tile: one element per thread; tx walks a 32-float (128-byte) row segment of A.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[A_OFF(row, k0 + tx)] : 0.0f;
#endif
        // B tile: TILE_COLS / TILE_ROWS rows per thread; tx walks a row of B each time (a column
        // of B, i.e. k, in the TRANS_B build).
#pragma unroll
        for (int i = 0; i < B_ROWS_PER_THREAD; ++i) {
#if TRANS_B
            const int jr = ty + i * TILE_ROWS, jb = bn * TILE_COLS + jr;
            Bs[tx][jr] = (k0 + tx < K && jb < N) ? B[B_OFF(k0 + tx, jb)] : 0.0f;
#else
            const int kr = ty + i * TILE_ROWS;
            Bs[kr][tx] = (k0 + kr < K && col < N) ? B[B_OFF(k0 + kr, col)] : 0.0f;
#endif
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
    if (row < M && col < N) C[(offset_t)row * ldc + col] = acc;
}
