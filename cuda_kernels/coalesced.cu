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
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/coalesced.cu (whose header says what a transposed B costs
//   this mapping: naive's uncoalesced reads, on B instead of A).
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
        acc += A[row * lda + k] * B[k * ldb + col];  // A(row, k) * B(k, col)
    }
    C[row * ldc + col] = acc;
}
