// PLANTED DEFECT: a fast-but-wrong kernel that the lab must reject. Not a stage, never registered.
//
// What it is: a register-tiled SGEMM (128 x 128 block tile, BK = 8, an 8 x 16 thread tile, 128
// threads, float4 loads, the A tile stored transposed) whose per-thread accumulator is declared
// too small: `float acc[ACC]` with ACC = 64 while the thread tile has TM * TN = 128 results, and
// every loop indexes acc[i * TN + j] up to 127. It reads like an ordinary edit gone wrong: the
// accumulator was sized for an 8 x 8 thread tile, TN was raised to 16, the declaration was not.
// The same class of defect as the public fork larme/Faster_SGEMM_CUDA's `sgemmZeroRegisters`
// (a 64-entry accumulator indexed up to 127), written from scratch for the lab's argument list
// (A, B, C, M, N, K, lda, ldb, ldc); C is row-major, A and B may be transposed (TRANS_A/TRANS_B).
//
// What the compiler does with it (NVRTC 13.0, sm_90; tests/test_planted.py checks the SASS): an
// index past the end of a local array is undefined behaviour, and once the loops are unrolled
// every such index is a constant, so the compiler may assume those statements never matter. The
// build keeps the 64 accumulators that exist and drops the rest: half the FFMAs of the fixed
// build (-DACC=128) and half its stores to C. So the kernel is fast (half the arithmetic) and
// half of C (rows 4..7 of every thread tile) is never written: in a NaN-poisoned C those
// elements stay NaN, in an uninitialised C they are whatever memory held.
//
// Why a naive check passes it: `if (fabs(c - ref) > tol) ++mismatches;` is false for NaN, so an
// element the kernel never wrote (NaN) counts as a match; the written half is correct. The lab's
// check (lab/check.py) fails any non-finite element, and its Frobenius and element tests fail a
// C left with garbage. The g++ emulator (tests/cuda_emulator.py) stops it at the first
// out-of-bounds index (AddressSanitizer / UBSan).
//
// Launch geometry (tests/planted/kernel.py): 1-D grid of ceil(M/128) * ceil(N/128) blocks in
// GROUP order (common.cuh), 128 threads, static shared memory BK * (BM + 4 + BN) * 4 bytes.
#include "common.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 16
#ifndef ACC
#define ACC 64   // THE DEFECT: should be TM * TN = 128 (tests build the fixed kernel with -DACC=128)
#endif
#ifndef VEC      // 1: nn layout with 16-byte aligned rows (lda, ldb multiples of 4): float4 loads
#define VEC 1
#endif
#define TROWS (BM / TM)           // 16 thread rows
#define TCOLS (BN / TN)           // 8 thread columns
#define THREADS (TROWS * TCOLS)   // 128
#define AS_LD (BM + 4)

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_zero_registers(const float* __restrict__ A, const float* __restrict__ B,
                      float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ __align__(16) float As[BK][AS_LD];   // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS, tc = tid % TCOLS;
    int bm, bn;
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM, n0 = bn * BN;
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i * TN + j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        if (VEC && !TRANS_A && !TRANS_B && inside && k0 + BK <= K) {
            // 2 float4 of A (rows of 8 k's) and 2 float4 of B (rows of 128 n's) per thread.
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int q = tid + p * THREADS;
                const int r = q / (BK / 4), c = 4 * (q % (BK / 4));
                const float4 v = *reinterpret_cast<const float4*>(&A[(m0 + r) * lda + k0 + c]);
                As[c + 0][r] = v.x;
                As[c + 1][r] = v.y;
                As[c + 2][r] = v.z;
                As[c + 3][r] = v.w;
            }
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int q = tid + p * THREADS;
                const int r = q / (BN / 4), c = 4 * (q % (BN / 4));
                *reinterpret_cast<float4*>(&Bs[r][c]) =
                    *reinterpret_cast<const float4*>(&B[(k0 + r) * ldb + n0 + c]);
            }
        } else {   // edges, other layouts, unaligned rows: one float at a time, zero fill
            for (int q = tid; q < BM * BK; q += THREADS) {
                const int r = q / BK, c = q % BK;
                As[c][r] = (m0 + r < M && k0 + c < K) ? A[A_OFF(m0 + r, k0 + c)] : 0.0f;
            }
            for (int q = tid; q < BK * BN; q += THREADS) {
                const int r = q / BN, c = q % BN;
                Bs[r][c] = (k0 + r < K && n0 + c < N) ? B[B_OFF(k0 + r, n0 + c)] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][tr * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i * TN + j] += a[i] * b[j];   // up to acc[127]
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + tr * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = n0 + tc * TN + j;
            if (row < M && col < N) C[row * ldc + col] = acc[i * TN + j];
        }
    }
}
