// Stage: blocktile_1d. 1-D register tiling: each thread computes TM results down one column of C.
//
// Changed from tiled: the block tile is no longer square and no longer one output per thread. A
//   block of BM*BN/TM threads (512 by default) owns a BM x BN tile of C (64 x 64) and walks K in
//   steps of BK (8). Thread t owns column t % BN of the tile and the TM (8) consecutive rows
//   TM*(t / BN) .. +TM-1, kept in TM accumulator registers. Per k it reads ONE value of B from
//   shared memory into a register and reuses it for TM FMAs; the TM values of A it needs are the
//   same for the whole warp (a broadcast), and contiguous in k, so the compiler reads them as
//   128-bit LDS.128 across the unrolled k loop.
// Launch geometry (blocktile_1d.py): block BM*BN/TM threads (1-D), a 1-D grid of
//   ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh: groups of block-rows
//   for L2 reuse, as in tiled), static shared memory (BM*BK + BK*BN) * 4 bytes (4 KiB by
//   default), no dynamic shared memory. 32 registers: four 512-thread blocks per SM (see the .py).
// Bottleneck it attacks: shared-memory traffic per FMA. tiled reads one B value and a quarter of
//   an LDS.128 of A per FMA (1.25 shared loads per FMA); here the B value is reused for TM FMAs
//   and the A loads are broadcast LDS.128, so one k of a thread is TM FMAs for 1 + TM/4 shared
//   loads: 3 per 8 FMAs at the defaults (SASS per k-step of 8: 64 FFMA, 8 LDS, 16 LDS.128).
//   Global traffic also drops: a block loads (BM + BN) * BK values per BM * BN * BK FMAs, 1/32 of
//   a value per FMA at 64 x 64 instead of 1/16 at tiled's 32 x 32.
// Edges: the tile loads write 0 into shared memory outside A or B, so the FMA loop has no branch
//   and any M, N, K >= 1 is correct; only the final stores are guarded.
// What remains: still (1 + TM/4) / TM shared loads per FMA and a single column per thread, so the
//   B value cannot be reused across columns; blocktile_2d computes a TM x TN tile per thread.
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/blocktile_1d.cu (loaders that walk a transposed operand
//   down its columns, padded shared rows for their stores).
#include "common.cuh"

// BM, BN, BK, TM: -D defines that cuda_kernels/blocktile_1d.py always passes, from the registry
// (lab/stages.py; its defaults: BM 64, BN 64, BK 8, TM 8).
// MIN_BLOCKS (common.cuh): blocks per SM the register allocator must leave room for (the launcher
// picks it so the cap is comfortably above what the kernel needs; see blocktile_1d.py).

#define THREADS (BM * BN / TM)
// Each thread copies A_LOADS elements of the A tile and B_LOADS of the B tile per k-step.
#define A_LOADS (BM * BK / THREADS)
#define B_LOADS (BK * BN / THREADS)

// The launcher's validate() rejects these combinations with a sentence; these are the backstop.
static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(THREADS >= 32 && THREADS <= 1024, "BM*BN/TM threads must be within 32..1024");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS == BM * BK, "A tile must split evenly over threads");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS == BK * BN, "B tile must split evenly over threads");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                    int ldc) {
    // As keeps A's row-major layout: row m of the tile is BK contiguous floats, so one thread's
    // reads As[r][0..BK) for a fixed row become 128-bit loads, and since every thread of a warp
    // reads the same row (same t / BN), each is a broadcast: one shared-memory wavefront.
    __shared__ __align__(16) float As[BM][BK];
    // Bs[k][c]: consecutive threads read consecutive columns -> 32 different banks, no conflict.
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tc = tid % BN;        // this thread's column inside the tile
    const int tr = tid / BN;        // its strip of TM rows: rows tr*TM .. tr*TM + TM-1
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping, fixed for the whole K loop. Element e = tid + j*THREADS of a tile of width W
    // sits at row e / W, column e % W: consecutive threads take consecutive columns (coalesced).
    // W and THREADS are powers of two, so that is a per-thread base (tid / W, tid % W) plus the
    // compile-time offsets (j*THREADS / W, j*THREADS % W): no index math left in the K loop,
    // which only advances two pointers. A: a warp reads 32/BK rows of BK consecutive floats; B: 32
    // consecutive floats of one row (128 bytes).
    const int a_r = tid / BK, a_c = tid % BK;
    const float* a_ptr = A + (m0 + a_r) * lda + a_c;
    const int b_r = tid / BN, b_c = tid % BN;
    const float* b_ptr = B + b_r * ldb + n0 + b_c;
    // No separate unguarded path for interior blocks here (blocktile_2d has one): with one A and
    // one B element per thread per k-step the two bounds tests are a few predicated instructions,
    // and the two-path version needs 63 registers instead of 32, which halves the blocks per SM.

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Guarded loads: out-of-range elements become 0, so the FMA loop below needs no branch
        // (a zero in A or B adds nothing to any accumulator).
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int r = j * THREADS / BK, c = j * THREADS % BK;  // element j: tid + j*THREADS
            As[a_r + r][a_c + c] =
                (m0 + a_r + r < M && k0 + a_c + c < K) ? a_ptr[r * lda + c] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int r = j * THREADS / BN, c = j * THREADS % BN;
            Bs[b_r + r][b_c + c] =
                (k0 + b_r + r < K && n0 + b_c + c < N) ? b_ptr[r * ldb + c] : 0.0f;
        }
        __syncthreads();
        a_ptr += BK;        // BK columns right
        b_ptr += BK * ldb;  // BK rows down

        // The register-tiled product: one B value per k, reused TM times from a register.
        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tc];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[tr * TM + i][k] * b;
        }
        __syncthreads();  // the next k-step overwrites the tiles
    }

    // Guarded stores: for each i a warp writes 32 consecutive floats of one row of C.
    const int col = n0 + tc;
    if (col < N) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = m0 + tr * TM + i;
            if (row < M) C[row * ldc + col] = acc[i];
        }
    }
}
