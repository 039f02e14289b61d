// Variant of ../tiled_padded.cu for every layout (nn, nt, tn, tt) and for operands past 2^31 elements
// (OFFSET64): the launcher compiles it for every problem but the lesson case (nn, 32-bit offsets).
// A reader can skip it: the lesson, ../tiled_padded.cu, is the same kernel written out for nn.
// Stage: tiled_padded. The tiled kernel with every bounds check removed: the launcher pads A, B
// and C with zeros to tile multiples once, before timing, so every tile is full.
// TILE 32 by default; 8 and 16 are variants (--stage tiled_padded:tile=16).
//
// Changed from tiled: nothing but the edges. tiled.cu tests `row < M && ka < K` and
//   `kb < K && col < N` for every element it stages and `row < M && col < N` before its store;
//   here every load and store is unconditional: no thread of any block takes a different path
//   from its neighbours (no divergence at the edge blocks, no predicated loads), and the loop body
//   is address arithmetic, loads, shared stores, barriers and KTILE FMAs. Tiles (TILE x TILE
//   threads, KTILE-deep K slices) and block order (block_tile(), GROUP) are tiled's.
// Arguments: (A, B, C, M, N, K, lda, ldb, ldc) with the PADDED sizes: M, N, K here are Mp, Np
//   (multiples of TILE) and Kp (a multiple of KTILE); A is Mp x Kp, B is Kp x Np, C is Mp x Np.
//   The launcher (tiled_padded.py) copies an operand into a zero-padded row-major buffer only
//   when its sizes are not multiples already; the others are passed unchanged, in their own
//   layout and leading dimension. C is cropped back (c.copy_(cpad[:M, :N])) inside the timed
//   callable when M or N is not a multiple of TILE. Zero padding adds exactly 0 to every dot
//   product, so the cropped result is the unpadded one.
// Launch geometry (tiled_padded.py): block TILE x TILE threads, a 1-D grid of (Mp/TILE)*(Np/TILE)
//   blocks mapped to tiles by block_tile() (GROUP, common.cuh), 2 * TILE * KTILE * 4 bytes of
//   static shared memory (16 KiB at TILE 32, KTILE 64).
// Bottleneck it attacks: the edge handling of tiled: the predicate arithmetic in every k-step and
//   the partly idle warps of the last block-row and block-column. The price: a one-time padding
//   copy (launch.setup_ms, not timed) and, when M or N is not a multiple of TILE, a crop copy
//   that IS timed. What remains is tiled's bottleneck: shared-memory reads, two per FMA.
// Layouts (common.cuh): as in tiled.cu. A column-major A (TRANS_A) or B (TRANS_B) swaps that
//   operand's loader roles so threadIdx.x walks its contiguous dimension (rows of A, k of B) and
//   the loads stay coalesced; the warp then stores down a column of the shared tile, so those
//   builds pad the shared rows (As by 4 floats, keeping the LDS.128 reads of As[ty][k..k+3]
//   aligned; Bs by 1). An operand the launcher padded is row-major, so e.g. a transposed A that
//   needed padding runs in an 'n' build. The nn build has no padding: the kernel it always was.
//   Measured on the H100 at 4096^3 (defaults, nothing padded): nn 14.2 ms, nt 14.2, tn 15.0,
//   tt 15.0.
#include "common.cuh"

#ifndef TILE
#define TILE 32
#endif
#ifndef KTILE
#define KTILE TILE
#endif
#if KTILE % TILE != 0
#error "KTILE must be a multiple of TILE"
#endif

// Shared-memory padding, only in the builds whose loaders write a column of the tile (tiled.cu).
#if TRANS_A
#define A_PAD 4  // keeps each As row 16-byte aligned: the inner loop's LDS.128 survives
#else
#define A_PAD 0
#endif
#if TRANS_B
#define B_PAD 1  // Bs is read along rows only (Bs[k][tx]): one float makes the column store free
#else
#define B_PAD 0
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
matmul_tiled_padded(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ float As[TILE][KTILE + A_PAD];
    __shared__ float Bs[KTILE][TILE + B_PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    int bm, bn;
    block_tile(M / TILE, N / TILE, bm, bn);  // exact: Mp and Np are multiples of TILE
    const int row = bm * TILE + ty;
    const int col = bn * TILE + tx;
    // Each branch knows its layout, so the offsets are written out (A_OFF / B_OFF spelled for
    // that layout). Measured on the H100 at 4096^3: through the macros, ptxas allocated the nn
    // build's registers differently and its unroll=0 variant ran 5% slower (20.8 vs 19.8 ms);
    // spelled out, it is the pre-layout kernel again (19.8 ms).
#if TRANS_A
    // tx walks down column ty of A (contiguous)
    const float* a = A + (offset_t)ty * lda + bm * TILE + tx;
#else
    const float* a = A + (offset_t)row * lda + tx;  // walks right along row `row` of A
#endif
#if TRANS_B
    // tx walks down k in column bn*TILE+ty
    const float* b = B + (offset_t)(bn * TILE + ty) * ldb + tx;
#else
    const float* b = B + (offset_t)ty * ldb + col;  // walks down column `col` of B
#endif
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KTILE) {
        // Coalesced, unconditional tile loads: tx walks the contiguous dimension of each operand.
#pragma unroll
        for (int j = 0; j < KTILE / TILE; ++j) {
#if TRANS_A
            As[tx][j * TILE + ty] = a[(offset_t)(k0 + j * TILE) * lda];  // k: lda apart
#else
            As[ty][j * TILE + tx] = a[k0 + j * TILE];
#endif
#if TRANS_B
            Bs[j * TILE + tx][ty] = b[k0 + j * TILE];  // k runs down a column: adjacent
#else
            Bs[j * TILE + ty][tx] = b[(offset_t)(k0 + j * TILE) * ldb];
#endif
        }
        __syncthreads();
        INNER_UNROLL
        for (int k = 0; k < KTILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: broadcast in the warp; Bs: 32 banks, no conflict
        }
        __syncthreads();
    }
    C[(offset_t)row * ldc + col] = acc;
}
