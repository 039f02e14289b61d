// Stage: blocktile_2d. 2-D register tiling: each thread computes a TM x TN tile of C (8 x 8).
//
// Changed from blocktile_1d: a thread no longer owns one column but TM rows x TN columns. Per k it
//   copies TM values of A and TN values of B from shared memory into registers and does their
//   outer product: TM*TN FMAs (64) for TM + TN shared values (16), where blocktile_1d needed
//   1 + TM values for TM FMAs. The block tile grows to BM x BN = 128 x 128 with
//   (BM/TM) * (BN/TN) = 256 threads, so each value loaded from global memory is reused 128 times.
// Which TM rows and TN columns: groups of 4. Thread (tr, tc) = (tid / (BN/TN), tid % (BN/TN))
//   owns rows  g*4*(BM/TM) + 4*tr + {0..3}  and columns  g*4*(BN/TN) + 4*tc + {0..3}  for each group
//   g < TM/4 (TN/4); at the defaults rows {4tr..4tr+3, 64+4tr..64+4tr+3}, likewise for columns.
//   Why not 8 contiguous columns: a warp (16 threads across, 2 down) would then read B at a stride
//   of 8 floats, so threads 0 and 4 of a quarter-warp hit the same banks; with groups of 4, a
//   quarter-warp reads 32 consecutive floats (one conflict-free 128-byte wavefront) and ptxas turns
//   each group into one LDS.128. The C stores of a warp are 64-byte runs for the same reason.
// Launch geometry (blocktile_2d.py): block (BM/TM)*(BN/TN) threads (1-D), a 1-D grid of
//   ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh), static shared
//   memory (BM*(BK+2) + BK*BN) * 4 bytes (9 KiB at the defaults), no dynamic shared memory.
// Bottleneck it attacks: shared-memory traffic per FMA. blocktile_1d issued 8 LDS + 16 LDS.128
//   (24 shared loads) per warp for 64 FFMA per k-step of 8; here a warp issues 36 shared loads
//   for 512 FFMA per k-step (SASS: 28 LDS.128 + 8 LDS.64): B as one LDS.128 per group of 4
//   columns per k; A, whose TM values for one k are a COLUMN of As[m][k], in blocks along k and
//   across the 4 rows of a group, which keeps several k's of A live: 128 registers, 2 blocks/SM.
// Edges: blocks wholly inside C take an unguarded load path on full k-steps; edge tiles are loaded
//   with bounds tests and zero fill, so the FMA loop has no branch; stores are guarded.
// What remains: 4-byte global access (per thread 8 LDG per k-step and 64 STG at the end, where
//   float4 needs 2 and 16), and A fragments that are a column of As, so several k's of A stay
//   live in registers; vectorized transposes As (a thread's A values for one k become one
//   LDS.128) and uses float4 for global memory.
// Lesson case: row-major A and B, 32-bit offsets; every other layout and operands past 2^31
//   elements run cuda_kernels/variants/blocktile_2d.cu (loaders that walk a transposed operand
//   down its columns, padded Bs rows for a transposed B's stores).
#include "common.cuh"

// BM, BN, BK, TM, TN: -D defines that cuda_kernels/blocktile_2d.py always passes, from the registry
// (lab/stages.py; its defaults: BM 128, BN 128, BK 8, TM 8, TN 8).
// MIN_BLOCKS (blocks per SM for __launch_bounds__; the launcher's choice): common.cuh.

#define TROWS (BM / TM)            // thread rows in the block
#define TCOLS (BN / TN)            // thread columns in the block
#define THREADS (TROWS * TCOLS)
// Each thread copies A_LOADS elements of the A tile and B_LOADS of the B tile per k-step.
#define A_LOADS (BM * BK / THREADS)
#define B_LOADS (BK * BN / THREADS)
// As rows are padded by 2 floats. A warp's two thread rows read tile rows 4 apart, i.e.
// 4*(BK+2) floats = 8 banks apart for every BK, so their A reads never share a bank (unpadded:
// 32 floats apart, the same bank, a 2-way conflict on every A read). Why not +4, which keeps
// rows 16-byte aligned: ptxas then reads each row's k's as LDS.128 and keeps 4 k's of all 8 rows
// live, and with NVRTC 13.0 the defaults need more than 128 registers (72 spill bytes at 2
// blocks/SM). With +2 ptxas reads the 4 rows of a group, contiguous in As, with LDS.128/LDS.64
// and fits in 128 registers.
#define AS_LD (BK + 2)

// The launcher's validate() rejects these combinations with a sentence; these are the backstop.
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of groups of 4");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile must be a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(BM/TM)*(BN/TN) threads must be within 32..1024");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS == BM * BK, "A tile must split evenly over threads");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS == BK * BN, "B tile must split evenly over threads");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_blocktile_2d(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                    int ldc) {
    __shared__ __align__(16) float As[BM][AS_LD];
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;     // this thread's row of thread tiles
    const int tc = tid % TCOLS;     // and its column
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping, as in blocktile_1d. Element e = tid + j*THREADS of a tile of width W sits at
    // row e / W, column e % W: consecutive threads take consecutive columns (coalesced global
    // reads). W and THREADS are powers of two, so that is a per-thread base (tid / W, tid % W)
    // plus the compile-time offsets (j*THREADS / W, j*THREADS % W): no index math left in the K
    // loop, which only advances two pointers. (The base goes through row_of() and col_of(): as
    // plain divisions, ptxas orders the prologue of one tile shape, BM 128 BN 64 TM 4 TN 8,
    // differently from the kernel measured before; NVRTC 13.0.)
    auto row_of = [](int e, int w) { return e / w; };
    auto col_of = [](int e, int w) { return e % w; };
    const int a_r = row_of(tid, BK), a_c = col_of(tid, BK);
    const int b_r = row_of(tid, BN), b_c = col_of(tid, BN);
    const float* a_ptr = A + (m0 + a_r) * lda + a_c;
    const float* b_ptr = B + b_r * ldb + n0 + b_c;
    // Blocks that lie entirely inside C take the unguarded load path on every full k-step: one
    // uniform branch per k-step instead of a bounds test per load.
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        if (inside && k0 + BK <= K) {  // no bounds test
#pragma unroll
            for (int j = 0; j < A_LOADS; ++j) {
                const int r = j * THREADS / BK, c = j * THREADS % BK;  // element j: tid + j*THREADS
                As[a_r + r][a_c + c] = a_ptr[r * lda + c];
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / BN, c = j * THREADS % BN;
                Bs[b_r + r][b_c + c] = b_ptr[r * ldb + c];
            }
        } else {
            // Edge tile: zero outside A and B, so the FMA loop below needs no branch (a zero
            // adds nothing to any accumulator).
#pragma unroll
            for (int j = 0; j < A_LOADS; ++j) {
                const int r = j * THREADS / BK, c = j * THREADS % BK;
                As[a_r + r][a_c + c] =
                    (m0 + a_r + r < M && k0 + a_c + c < K) ? a_ptr[r * lda + c] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / BN, c = j * THREADS % BN;
                Bs[b_r + r][b_c + c] =
                    (k0 + b_r + r < K && n0 + b_c + c < N) ? b_ptr[r * ldb + c] : 0.0f;
            }
        }
        __syncthreads();
        a_ptr += BK;        // BK columns right
        b_ptr += BK * ldb;  // BK rows down

        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            // Fragments in registers: TM values of column k of the A tile, TN of row k of B.
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(i / 4) * 4 * TROWS + 4 * tr + i % 4][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][(j / 4) * 4 * TCOLS + 4 * tc + j % 4];
            // The outer product: TM*TN independent FMAs, every operand already in a register.
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    // Guarded scalar stores. For a fixed (i, j) the 16 threads of a warp row write every 4th float
    // of a 64-float run; the four j of a group fill the gaps, and L2 merges them into full sectors.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + (i / 4) * 4 * TROWS + 4 * tr + i % 4;
        if (row >= M) continue;
        float* c_row = C + row * ldc;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = n0 + (j / 4) * 4 * TCOLS + 4 * tc + j % 4;
            if (col < N) c_row[col] = acc[i][j];
        }
    }
}
