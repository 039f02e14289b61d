// Stage: coalesced. One thread per element of C, as in naive, with the thread mapping swapped.
//
// Changed from naive: threadIdx.x now walks COLUMNS of C. A warp (32 consecutive threadIdx.x, one
//   threadIdx.y) holds one row and 32 consecutive columns, so per k it reads one A element (a
//   broadcast: one sector) and 32 consecutive B floats (128 bytes: four sectors, one request), and
//   its final store of C is 128 contiguous bytes.
// Launch geometry (coalesced.py): block BLOCK x BLOCK (32 x 32), grid (ceil(N/BLOCK), ceil(M/BLOCK)).
// Bottleneck it attacks: wasted memory transactions. What remains: every FMA still needs two loads
//   (one from L1/L2 for B, one broadcast for A), so the load/store unit, not the FMA pipe, limits it.
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 32
#endif

extern "C" __global__ void __launch_bounds__(BLOCK * BLOCK)
matmul_coalesced(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K) {
    const int col = blockIdx.x * BLOCK + threadIdx.x;  // x -> columns: consecutive addresses
    const int row = blockIdx.y * BLOCK + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    INNER_UNROLL
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
