// Stage: naive. One thread computes one element of C, reading a row of A and a column of B.
//
// Changed from the previous stage: nothing; this is the starting point of the ladder.
// Launch geometry (naive.py): block BLOCK x BLOCK threads (32 x 32 = 1024), a 1-D grid of
//   ceil(M/BLOCK) * ceil(N/BLOCK) blocks, block-rows fastest (a 2-D grid's y extent stops at 65535,
//   which a 1 x 3,000,000 C would pass).
// Thread mapping: threadIdx.x walks ROWS of C. The 32 threads of a warp share threadIdx.y, so they
//   hold 32 consecutive rows and one column: their A reads are K floats apart (32 separate 32-byte
//   sectors per load instruction instead of one broadcast) and their C writes are N floats apart.
// Bottleneck it shows: uncoalesced global memory access; each warp-wide A load touches 32 sectors.
// What to look for: the coalesced stage does the same arithmetic with the mapping swapped.
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/naive.cu. (There a column-major A makes this mapping's A
//   reads coalesced, consecutive rows being adjacent: the layout decides which mapping is slow.)
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 32
#endif

extern "C" __global__ void __launch_bounds__(BLOCK * BLOCK)
matmul_naive(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K, int lda, int ldb, int ldc) {
    const int grid_m = CEIL_DIV(M, BLOCK);
    const int row = (blockIdx.x % grid_m) * BLOCK + threadIdx.x;  // x -> rows: the uncoalesced choice
    const int col = (blockIdx.x / grid_m) * BLOCK + threadIdx.y;
    if (row >= M || col >= N) return;  // ragged edge blocks: the divergence is only at the border
    float acc = 0.0f;
    INNER_UNROLL
    for (int k = 0; k < K; ++k) {
        acc += A[row * lda + k] * B[k * ldb + col];  // A(row, k) * B(k, col)
    }
    C[row * ldc + col] = acc;
}
