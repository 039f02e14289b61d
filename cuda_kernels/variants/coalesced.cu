// Variant of ../coalesced.cu for every layout (nn, nt, tn, tt) and for operands past 2^31 elements
// (OFFSET64): the launcher compiles it for every problem but the lesson case (nn, 32-bit offsets).
// A reader can skip it: the lesson, ../coalesced.cu, is the same kernel written out for nn.
// Stage: coalesced. One thread per element of C, as in naive, with the thread mapping swapped.
//
// Changed from naive: threadIdx.x now walks COLUMNS of C. A warp (32 consecutive threadIdx.x, one
//   threadIdx.y) holds one row and 32 consecutive columns, so per k it reads one A element (a
//   broadcast: one sector) and 32 consecutive B floats (128 bytes: four sectors, one request), and
//   its final store of C is 128 contiguous bytes.
// Measured on the H100 (4096^3): walking pointers (a += 1, b += N) instead of indexing
//   A[row*K + k], B[k*N + col] made this kernel 58% SLOWER (43.7 ms vs 27.6 ms): the indexed form
//   lets the compiler issue the unrolled iterations' loads back to back. The loop is limited by
//   memory latency, so the number of loads in flight (KUNROLL) is the knob that matters.
// Launch geometry (coalesced.py): block 32 x ROWS threads (ROWS 32 by default), a 1-D grid of
//   ceil(M/ROWS) * ceil(N/32) blocks mapped to tiles of C by block_tile() (GROUP, common.cuh).
// Bottleneck it attacks: wasted memory transactions. What remains: every FMA still needs two loads
//   (one from L1/L2 for B, one broadcast for A), so the load/store unit, not the FMA pipe, limits it.
// Layouts (common.cuh): A(i, k) and B(k, j) are read through A_OFF / B_OFF, C is row-major with
//   leading dimension ldc. The mapping is chosen for a row-major B: a warp's 32 columns are
//   adjacent there. A transposed B (TRANS_B) stores column j as a contiguous line, so the same
//   32 columns are ldb floats apart and every B load touches 32 sectors: nt and tt bring back
//   naive's uncoalesced reads, on B instead of A. TRANS_A keeps the warp's A read a broadcast
//   (one element per k), but consecutive k are now lda floats apart: a thread no longer walks
//   along a cache line of A (the block's ROWS warps share each line instead), a smaller cost.
//   Measured on the H100 at 4096^3: nn 21.2 ms, tn 25.5, nt 276 and tt 276 (naive's time: the
//   same 32 sectors per load). The tiled stages fix this: their loaders pick the thread mapping
//   per layout.
#include "common.cuh"

#ifndef ROWS
#define ROWS 32
#endif
#ifndef KUNROLL
#define KUNROLL 16  // iterations unrolled, so KUNROLL pairs of loads are in flight per thread
#endif

extern "C" __global__ void __launch_bounds__(32 * ROWS)
matmul_coalesced(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K, int lda, int ldb, int ldc) {
    int bm, bn;
    block_tile(CEIL_DIV(M, ROWS), CEIL_DIV(N, 32), bm, bn);
    const int col = bn * 32 + threadIdx.x;  // x -> columns: consecutive addresses
    const int row = bm * ROWS + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
#if UNROLL
#pragma unroll KUNROLL
#else
#pragma unroll 1
#endif
    for (int k = 0; k < K; ++k) {
        acc += A[A_OFF(row, k)] * B[B_OFF(k, col)];
    }
    C[(offset_t)row * ldc + col] = acc;
}
