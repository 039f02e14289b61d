// Stage: vectorized. blocktile_2d with 128-bit (float4) memory access and a transposed A tile.
//
// Changed from blocktile_2d:
//   1. Global memory is read and written as float4: a thread copies 4 consecutive floats of a row
//      of A or B with one LDG.E.128 and writes 4 consecutive floats of C with one STG.E.128, so the
//      tile loads take a quarter of the load instructions (2 instead of 8 per thread per k-step
//      at the defaults) and the same 128-byte lines are requested by a quarter of the instructions.
//   2. The A tile is stored TRANSPOSED in shared memory, As[k][m]. blocktile_2d kept As[m][k], so
//      the TM values of A a thread needs for one k were a column of the tile: ptxas read them in
//      blocks spanning several k's (28 LDS.128 + 8 LDS.64 per k-step, A and B) and kept those
//      k's live in registers. Now they are 4 consecutive floats of row k: one LDS.128 per group
//      of 4, for A as for B (32 LDS.128 per k-step), and only the current k's fragments
//      (TM + TN values) are live.
//   The price of (2): the float4 read from a row of A is scattered into 4 rows of As with 4
//   scalar STS, once per k-step, against 8 LDS.128 per k-step read back.
// Thread tile: as in blocktile_2d, thread (tr, tc) owns rows g*4*(BM/TM) + 4*tr + {0..3} and columns
//   g*4*(BN/TN) + 4*tc + {0..3}; each group of 4 is exactly one float4 in shared memory and in C.
// Launch geometry (vectorized.py): block (BM/TM)*(BN/TN) threads (1-D; 256 by default), a 1-D
//   grid of ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh), static
//   shared memory (BK*(BM+4) + BK*BN) * 4 bytes (8.1 KiB), no dynamic shared memory.
// Edges: interior blocks on full k-steps load with no bounds test. Edge tiles test each chunk: a
//   chunk wholly inside A (or B) is one float4; a chunk that straddles the edge (a width that is
//   not a multiple of 4, e.g. K = 13 with lda = 16) or lies outside is loaded element by element
//   with zero fill. Stores the same.
// Bottleneck it attacks: load/store instruction count and the A-fragment reads of blocktile_2d.
//   Per k-step a warp issues 64 FFMA and 4 LDS.128 (6 shared wavefronts: A's two float4 are
//   shared by the warp, B's 16 distinct float4 are 256 contiguous bytes), so the FMA pipe, not
//   shared memory, is the limit; what remains is latency: nothing is prefetched, so each k-step
//   waits for its global loads, hidden only by the other resident block (double buffering next).
// Measured on the H100 at 4096^3 (defaults, lab.compare): 3.45 ms, blocktile_2d 3.72.
// Lesson case: row-major A and B, 16-byte-aligned lines, 32-bit offsets; every other layout,
//   unaligned lines and operands past 2^31 elements run cuda_kernels/variants/vectorized.cu.
#include "common.cuh"

// BM, BN, BK, TM, TN: -D defines that cuda_kernels/vectorized.py always passes, from the registry
// (lab/stages.py; its defaults: BM 128, BN 128, BK 8, TM 8, TN 8).
// MIN_BLOCKS (blocks per SM for __launch_bounds__; the launcher's choice): common.cuh.

#define TROWS (BM / TM)            // thread rows in the block
#define TCOLS (BN / TN)            // thread columns in the block
#define THREADS (TROWS * TCOLS)
#define A_LOADS (BM * BK / 4 / THREADS)   // float4s of the A tile per thread per k-step
#define B_LOADS (BK * BN / 4 / THREADS)
// As[k][m] rows are padded by 4 floats. The float4 of A that lane l reads (row r = l / (BK/4),
// k = 4*(l % (BK/4))) is stored as As[k..k+3][r]; with BM + 4 the lanes that differ only in k
// land 16 banks apart (4*(BM+4) = 16 mod 32 words), so the 4 scalar stores are conflict-free at
// BK = 8. Rows stay 16-byte aligned for the LDS.128 reads.
#define AS_LD (BM + 4)

// The launcher's validate() rejects these combinations with a sentence; these are the backstop.
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of groups of 4");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile must be a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(BM/TM)*(BN/TN) threads must be within 32..1024");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS * 4 == BM * BK, "A tile: whole float4s per thread");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS * 4 == BK * BN, "B tile: whole float4s per thread");

// Float4 chunk e of a tile whose rows hold w floats: row e / (w/4), column 4 * (e % (w/4)). (Two
// functions rather than the expressions written inline: where BN/4 == TCOLS, b_r and b_c equal
// tr and 4*tc, the inline form is merged with them early and ptxas allocates other registers.)
__device__ __forceinline__ int chunk_row(int e, int w) { return e / (w / 4); }
__device__ __forceinline__ int chunk_col(int e, int w) { return 4 * (e % (w / 4)); }

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                  float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                  int ldc) {
    __shared__ __align__(16) float As[BK][AS_LD];   // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;
    const int tc = tid % TCOLS;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping, in float4 chunks: chunk e = tid + j*THREADS of a tile W floats wide is at
    // row e / (W/4), column 4*(e % (W/4)); consecutive threads take consecutive chunks of a row,
    // so a warp reads contiguous 16-byte pieces (whole 128-byte lines for B). As in blocktile_2d,
    // a per-thread base plus compile-time offsets (chunk j is j*THREADS/(W/4) rows further): the
    // K loop only advances two pointers.
    const int a_r = chunk_row(tid, BK), a_c = chunk_col(tid, BK);
    const float* a_ptr = A + (m0 + a_r) * lda + a_c;
    const int b_r = chunk_row(tid, BN), b_c = chunk_col(tid, BN);
    const float* b_ptr = B + b_r * ldb + n0 + b_c;
    // Blocks that lie entirely inside C take the unguarded load path on every full k-step.
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    // Component i of a float4 (i is a compile-time constant after unrolling: a register name).
    // The fragments stay float4s read through this: copied into float a[TM], b[TN] they compiled
    // to other SASS (124 registers instead of 123 at the defaults).
    auto at4 = [](const float4& v, int i) {
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
    };
    // 4 consecutive floats p[0..3] of which the first n (0..4) lie inside the operand: one
    // 128-bit load when all 4 do, else one float at a time with zero fill (the edge tiles).
    auto load4_or_fill = [](const float* p, int n) {
        if (n >= 4) return *reinterpret_cast<const float4*>(p);
        return make_float4(n > 0 ? p[0] : 0.0f, n > 1 ? p[1] : 0.0f, n > 2 ? p[2] : 0.0f, 0.0f);
    };
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        if (inside && k0 + BK <= K) {  // no bounds test: one LDG.E.128 per float4
#pragma unroll
            for (int j = 0; j < A_LOADS; ++j) {
                const int r = j * THREADS / (BK / 4);  // chunk j: tid + j*THREADS, r rows further
                const float4 v = *reinterpret_cast<const float4*>(&a_ptr[r * lda]);
                // The transposing store: the 4 k's of row m go down column m of As, an STS each.
                As[a_c + 0][a_r + r] = v.x;
                As[a_c + 1][a_r + r] = v.y;
                As[a_c + 2][a_r + r] = v.z;
                As[a_c + 3][a_r + r] = v.w;
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / (BN / 4);
                *reinterpret_cast<float4*>(&Bs[b_r + r][b_c]) =
                    *reinterpret_cast<const float4*>(&b_ptr[r * ldb]);  // one STS.128
            }
        } else {
            // Edge tile: each chunk counts how many of its 4 floats lie inside (0 past the last
            // row) and reads those, zero for the rest, so the FMA loop below needs no branch.
#pragma unroll
            for (int j = 0; j < A_LOADS; ++j) {
                const int r = j * THREADS / (BK / 4);
                const float4 v = load4_or_fill(
                    &a_ptr[r * lda], m0 + (a_r + r) < M ? min(4, max(0, K - (k0 + a_c))) : 0);
                As[a_c + 0][a_r + r] = v.x;
                As[a_c + 1][a_r + r] = v.y;
                As[a_c + 2][a_r + r] = v.z;
                As[a_c + 3][a_r + r] = v.w;
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / (BN / 4);
                *reinterpret_cast<float4*>(&Bs[b_r + r][b_c]) = load4_or_fill(
                    &b_ptr[r * ldb], k0 + (b_r + r) < K ? min(4, max(0, N - (n0 + b_c))) : 0);
            }
        }
        __syncthreads();
        a_ptr += BK;        // BK columns right
        b_ptr += BK * ldb;  // BK rows down

        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            // Fragments in registers: TM values of row k of As and TN of row k of Bs; each group
            // of 4 is 16 aligned bytes, one LDS.128.
            float4 a[TM / 4], b[TN / 4];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g)
                a[g] = *reinterpret_cast<const float4*>(&As[k][g * 4 * TROWS + 4 * tr]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                b[g] = *reinterpret_cast<const float4*>(&Bs[k][g * 4 * TCOLS + 4 * tc]);
            // The outer product: TM*TN independent FMAs, every operand already in a register.
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += at4(a[i / 4], i % 4) * at4(b[j / 4], j % 4);
        }
        __syncthreads();
    }
    // float4 stores straight from registers: for each row and group a warp row writes 16
    // consecutive float4 = 256 bytes. A group that straddles C's right edge is stored one float
    // at a time.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + (i / 4) * 4 * TROWS + 4 * tr + i % 4;
        if (row >= M) continue;
        float* c_row = C + row * ldc;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int col = n0 + (j / 4) * 4 * TCOLS + 4 * tc;
            const float4 v = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            float* c = c_row + col;
            const int n = min(4, N - col);   // columns of the group inside C
            if (n >= 4) {
                *reinterpret_cast<float4*>(c) = v;
            } else {
                if (n > 0) c[0] = v.x;
                if (n > 1) c[1] = v.y;
                if (n > 2) c[2] = v.z;
            }
        }
    }
}
