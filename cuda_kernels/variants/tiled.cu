// Variant of ../tiled.cu for every layout (nn, nt, tn, tt) and for operands past 2^31 elements
// (OFFSET64): the launcher compiles it for every problem but the lesson case (nn, 32-bit offsets).
// A reader can skip it: the lesson, ../tiled.cu, is the same kernel written out for nn.
// Stage: tiled. Shared-memory tiling with a TILE x TILE block (TILE 32 by default; 8 and 16 are
// variants: --stage tiled:tile=16).
//
// Changed from coalesced: the block first copies a TILE x TILE tile of A and of B into shared
//   memory (one coalesced load per thread per matrix), synchronizes, and then every thread runs its
//   TILE-long inner product out of shared memory. Each global element is now loaded once per block
//   instead of once per thread: global traffic drops by a factor of TILE.
// Launch geometry (tiled.py): block TILE x TILE threads, a 1-D grid of ceil(M/TILE) * ceil(N/TILE)
//   blocks mapped to tiles of C by block_tile() (GROUP, common.cuh), 2 * TILE * KTILE * 4 bytes of
//   static shared memory in the nn build (16 KiB at TILE 32, KTILE 64; Layouts: the others pad).
// Edges: loads outside A or B write 0 into the tile, so the inner loop needs no branch; only the
//   final store is guarded. Any M, N, K >= 1 works.
// Bottleneck it attacks: global memory traffic. What remains: two shared-memory reads per FMA
//   (As[ty][k] is a broadcast within a warp, Bs[k][tx] is conflict-free), so the shared-memory
//   pipe limits it; register tiling (blocktile stages) is the next step.
// Layouts (common.cuh): A(i, k) and B(k, j) are read through A_OFF / B_OFF and C is stored with
//   ldc. A tile loader is coalesced only if consecutive threadIdx.x walk the operand's contiguous
//   dimension: k for a row-major A, i for a column-major (TRANS_A) one; j for a row-major B, k for
//   a column-major (TRANS_B) one. So the transposed builds swap the loader's roles (tx walks the
//   contiguous dimension, ty the other), and the warp then writes its 32 values down a COLUMN of
//   the shared tile. Rows 32 floats apart sit in one bank (a 32-way conflict on every store), so
//   those builds pad the shared row by one float (the column becomes 32 different banks) for B and
//   by four for A: As rows must stay 16-byte aligned so the inner loop still reads As[ty][k..k+3]
//   as one LDS.128, and +4 leaves a 4-way conflict on the once-per-stage store instead of four
//   times the loads in the inner loop (measured: see A_PAD). The inner loop is the same in every
//   layout; the nn build has no padding and is the kernel it was before layouts existed.
//   Measured on the H100 at 4096^3 (defaults): nn 14.4 ms, nt 14.5, tn 15.1, tt 15.2; with the
//   nn loaders (no swap) nt, tn and tt took 22.8, 22.6 and 30.5 ms.
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

// Shared-memory padding, only in the builds whose loaders write a column of the tile (above).
#if TRANS_A
// 4 keeps each As row 16-byte aligned, so the inner loop's LDS.128 survives. Measured (tn, H100,
// 4096^3): A_PAD 0 22.0 ms (32-way conflicts on the store), 1 18.7 ms (conflict-free store, but
// four scalar LDS instead of each LDS.128), 4 15.1 ms, 8 16.0 ms.
#define A_PAD 4
#else
#define A_PAD 0
#endif
#if TRANS_B
#define B_PAD 1  // Bs is read along rows only (Bs[k][tx]): one float makes the column store free
#else
#define B_PAD 0
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ float As[TILE][KTILE + A_PAD];
    __shared__ float Bs[KTILE][TILE + B_PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    int bm, bn;
    block_tile(CEIL_DIV(M, TILE), CEIL_DIV(N, TILE), bm, bn);
    const int row = bm * TILE + ty;
    const int col = bn * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KTILE) {
        // Coalesced tile loads: tx walks the contiguous dimension of each operand (see Layouts);
        // zero-fill outside the matrices so the inner loop needs no branch.
#pragma unroll
        for (int j = 0; j < KTILE / TILE; ++j) {
#if TRANS_A
            // Column-major A: tx walks rows (adjacent in memory), ty walks k.
            const int ia = bm * TILE + tx, ka = k0 + j * TILE + ty;
            As[tx][j * TILE + ty] = (ia < M && ka < K) ? A[A_OFF(ia, ka)] : 0.0f;
#else
            // Row-major A: tx walks k along row `row`.
            const int ka = k0 + j * TILE + tx;
            As[ty][j * TILE + tx] = (row < M && ka < K) ? A[A_OFF(row, ka)] : 0.0f;
#endif
#if TRANS_B
            // Column-major B: tx walks k (adjacent in memory), ty walks columns.
            const int kb = k0 + j * TILE + tx, jb = bn * TILE + ty;
            Bs[j * TILE + tx][ty] = (kb < K && jb < N) ? B[B_OFF(kb, jb)] : 0.0f;
#else
            // Row-major B: tx walks columns along row kb.
            const int kb = k0 + j * TILE + ty;
            Bs[j * TILE + ty][tx] = (kb < K && col < N) ? B[B_OFF(kb, col)] : 0.0f;
#endif
        }
        __syncthreads();
        INNER_UNROLL
        for (int k = 0; k < KTILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: broadcast in the warp; Bs: 32 banks, no conflict
        }
        __syncthreads();  // nobody may overwrite the tiles while a neighbour still reads them
    }
    if (row < M && col < N) C[(offset_t)row * ldc + col] = acc;
}
