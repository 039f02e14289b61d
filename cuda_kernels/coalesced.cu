// Stage: coalesced. One thread per element of C, as in naive, with the thread mapping swapped.
//
// Changed from naive: threadIdx.x now walks COLUMNS of C. A warp (32 consecutive threadIdx.x, one
//   threadIdx.y) holds one row and 32 consecutive columns, so per k it reads one A element (a
//   broadcast: one sector) and 32 consecutive B floats (128 bytes: four sectors, one request), and
//   its final store of C is 128 contiguous bytes. The loop walks pointers (a += 1, b += N) instead
//   of recomputing row*K + k and k*N + col, which saves a 64-bit IMAD.WIDE per load.
// Launch geometry (coalesced.py): block 32 x ROWS threads (ROWS 32 by default), a 1-D grid of
//   ceil(M/ROWS) * ceil(N/32) blocks mapped to tiles of C by block_tile() (GROUP, common.cuh).
// Bottleneck it attacks: wasted memory transactions. What remains: every FMA still needs two loads
//   (one from L1/L2 for B, one broadcast for A), so the load/store unit, not the FMA pipe, limits it.
#include "common.cuh"

#ifndef ROWS
#define ROWS 32
#endif

extern "C" __global__ void __launch_bounds__(32 * ROWS)
matmul_coalesced(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K) {
    int bm, bn;
    block_tile(CEIL_DIV(M, ROWS), CEIL_DIV(N, 32), bm, bn);
    const int col = bn * 32 + threadIdx.x;  // x -> columns: consecutive addresses
    const int row = bm * ROWS + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + row * K;
    const float* b = B + col;
    float acc = 0.0f;
    INNER_UNROLL
    for (int k = 0; k < K; ++k) {
        acc += a[k] * *b;
        b += N;
    }
    C[row * N + col] = acc;
}
