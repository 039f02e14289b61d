// Stage: bank_conflicts. vectorized with the shared-memory layout of its transposing store chosen
// so that no warp-wide shared access has a bank conflict, at every BK.
//
// Changed from vectorized: only where As puts its elements. The tiles are flat arrays addressed
// through as_off and bs_off (tile_off: every shared access goes through them), and FIX (compile
// time) picks the layout of As, whose store SCATTERS each float4 of A down 4 rows (4 k's of row m
// go to As(k..k+3, m)): the store a layout can conflict on. Bs, written with one STS.128 per
// float4 along its rows, needs no fix: plain rows of BN floats, as in vectorized.
//   FIX 0 none     vectorized's layout, unchanged (the control): rows of As BM + 4 floats.
//   FIX 1 pad      rows unpadded; GPAD = 128 / BK floats after every group of 4 rows.
//   FIX 2 swizzle  no padding; element (k, m) is stored at column m ^ ((k / 4) * (128 / BK)).
//   FIX 3 raw      no padding, no swizzle: the textbook conflicted layout (a positive control for
//                  the profiler counters, not a candidate).
//   The registry's default: pad (conflict-free at every BK, 32 floats more; swizzle is too, with
//   no extra memory). At BK = 8 none, pad and swizzle are all conflict-free and compile to the
//   same instruction mix, so the choice only matters at BK = 16 and 32.
// Everything else (float4 global access, GROUP, the thread tile, the edge paths) is vectorized.cu
// line for line. FIX=0 has vectorized's layout and its instruction mix (512 FFMA, 32 LDS.128,
// 8 STS; 1168 SASS instructions at the defaults); ptxas gives it 127 registers instead of 123 (the
// shared base addresses are set up differently), still 2 blocks per SM.
//
// The bank arithmetic (32 banks of 4 bytes: word w of shared memory is in bank w % 32). One STS of
// the scatter writes component j of every lane's float4. Lane l of a warp holds row
// r = r0 + l / AW and k-group i = l % AW (k = 4i + j), AW = BK/4 chunks per tile row, r0 a
// multiple of 32/AW; the tile width BM (32, 64 or 128) is a multiple of 32 words. So the
// 32/AW rows of one k-group fill 32/AW consecutive banks, and the AW k-groups must move them to
// AW different blocks of 32/AW banks: their offsets must be distinct multiples of 32/AW, mod 32.
//   Rows padded by P floats: group i starts 4*P*i words later (mod 32). vectorized's P = 4 gives
//     16*i: the 2 groups of BK = 8 land 16 banks apart (conflict-free), but at BK = 16 groups
//     0 and 2 (and 1 and 3) collide (2-way) and at BK = 32 four groups share each offset (4-way).
//     The fix would need 4P = 128/BK * odd: P = 2 at BK = 16, P odd at BK = 32, and then rows no
//     longer start on 16-byte boundaries, which the LDS.128 fragment reads need. No row padding
//     works beyond BK = 8.
//   pad: the store never sees two rows of one group in one instruction (j is fixed), so pad the
//     GROUPS, not the rows: group i starts i*GPAD words later, GPAD = 128/BK = 32/AW (16, 8 or 4
//     floats, a multiple of 4: every row still starts on a 16-byte boundary). 32 floats in all.
//   swizzle: XOR the column with h(k) = (k/4) * (128/BK): group i's rows r0..r0+32/AW-1 (an
//     aligned block of banks) are moved to block r0 ^ i*(32/AW), a different one per i. h is a
//     multiple of 4 below 32, so it permutes whole float4s inside aligned 32-float blocks: the
//     LDS.128 reads stay aligned, contiguous within their block, conflict-free. No extra memory.
//   raw: every group at offset 0: AW-way conflicts (2-, 4-, 8-way at BK = 8, 16, 32).
// The reads: a warp's A fragment is 32/TCOLS consecutive float4s of one row of As, its B
// fragment min(32, TCOLS) consecutive float4s of one row of Bs; any row start that is a multiple
// of 4 (all fixes) or any float4 permutation inside aligned 32-float blocks (swizzle) leaves them
// at the minimum number of wavefronts. tests/test_bank_conflicts.py checks all of this with a bank
// model for every valid parameter set and layout, against the offsets of variants/bank_conflicts.cu
// (whose nn build is this file's, instruction for instruction: tests/test_lessons_vectorized.py).
//
// Launch geometry (bank_conflicts.py): block (BM/TM)*(BN/TN) threads (1-D; 256 by default), a 1-D
//   grid of ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh), static
//   shared memory only: none BK*(BM+4) + BK*BN floats, pad BK*(BM+BN) + 32, swizzle and raw
//   BK*(BM+BN) floats (8192 B at the defaults).
// Bottleneck it attacks: the shared-store bank conflicts of the transposing scatter, which
//   vectorized has at BK = 16 and 32. At its default BK = 8 vectorized's store is already
//   conflict-free; the profiler's store-conflict counter still reads about 0.64M at 2048^3
//   there, which is why the stage keeps FIX=0 and FIX=3 as controls (docs/stages/bank_conflicts.md:
//   what the counters should read per fix).
// Measured on the H100 at 4096^3 (BK = 8, lab.compare): pad 3.35 ms, none 3.37, swizzle 3.57,
//   vectorized 3.47: the stores were never the limit at BK = 8 (docs/stages/bank_conflicts.md).
// Lesson case: row-major A and B, 16-byte-aligned lines, 32-bit offsets; every other layout,
//   unaligned lines and operands past 2^31 elements run cuda_kernels/variants/bank_conflicts.cu
//   (where a transposed B is scattered too, and the same fixes apply to Bs).
#include "common.cuh"

// BM, BN, BK, TM, TN: -D defines that cuda_kernels/bank_conflicts.py always passes, from the registry
// (lab/stages.py; its defaults: BM 128, BN 128, BK 8, TM 8, TN 8).
// MIN_BLOCKS (blocks per SM for __launch_bounds__; the launcher's choice): common.cuh.
// FIX, the layout of As: a -D define that bank_conflicts.py always passes (the registry's default:
// pad), one of
#define FIX_NONE 0
#define FIX_PAD 1
#define FIX_SWIZZLE 2
#define FIX_RAW 3

#define TROWS (BM / TM)            // thread rows in the block
#define TCOLS (BN / TN)            // thread columns in the block
#define THREADS (TROWS * TCOLS)
#define A_LOADS (BM * BK / 4 / THREADS)   // float4s of the A tile per thread per k-step
#define B_LOADS (BK * BN / 4 / THREADS)
// The layout of As(k, m) (see the header): its row stride, the padding after every group of 4
// rows, the XOR of the column per group of 4 rows, and its size in floats.
#define AS_LD (BM + (FIX == FIX_NONE ? 4 : 0))
#define GPAD (FIX == FIX_PAD ? 128 / BK : 0)
#define SWZ (FIX == FIX_SWIZZLE ? 128 / BK : 0)
#define AS_SIZE (BK * AS_LD + (BK / 4) * GPAD)

// The launcher's validate() rejects these combinations with a sentence; these are the backstop.
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of groups of 4");
static_assert(128 % BK == 0 && BM % 32 == 0 && BN % 32 == 0, "BK divides 128; BM, BN 32-bank rows");
static_assert(FIX >= FIX_NONE && FIX <= FIX_RAW, "FIX: 0 none, 1 pad, 2 swizzle, 3 raw");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile must be a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(BM/TM)*(BN/TN) threads must be within 32..1024");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS * 4 == BM * BK, "A tile: whole float4s per thread");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS * 4 == BK * BN, "B tile: whole float4s per thread");

// Float4 chunk e of a tile whose rows hold w floats: row e / (w/4), column 4 * (e % (w/4)). (Two
// functions rather than the expressions written inline: where BN/4 == TCOLS, b_r and b_c equal
// tr and 4*tc, the inline form is merged with them early and ptxas allocates other registers.)
__device__ __forceinline__ int chunk_row(int e, int w) { return e / (w / 4); }
__device__ __forceinline__ int chunk_col(int e, int w) { return 4 * (e % (w / 4)); }

// Word offset of element (k, x0 + x1) of a shared tile of BK rows LD floats apart, with GPad floats
// after every group of 4 rows and the column XORed with (k / 4) * Swz. The callers pass the
// per-thread part of the column as x0 and the compile-time part as x1: when x1 is a multiple of
// 32 the XOR (below 32) only touches x0, (x0 + x1) ^ h = (x0 ^ h) + x1, so x1 and the row start
// stay LDS/STS immediates and a thread keeps one swizzled column per 4-row group, not one per
// access (without the split, ptxas held or recomputed one per access: 145 registers and one
// block per SM at BK = 16, 167 at BK = 32, instead of 127 and 125).
template <int LD, int GPad, int Swz>
__device__ __forceinline__ int tile_off(int k, int x0, int x1) {
    if (x1 % 32 != 0) {   // (small tiles) no split: the plain formula
        x0 += x1;
        x1 = 0;
    }
    return k * LD + (k >> 2) * GPad + (x0 ^ ((k >> 2) * Swz)) + x1;
}
// As(k, m) in FIX's layout; Bs(k, n) in plain rows of BN floats (B's float4s are stored whole,
// one STS.128 each: no fix). Every shared access of the kernel goes through these two.
#define as_off(k, m0, m1) tile_off<AS_LD, GPAD, SWZ>(k, m0, m1)
#define bs_off(k, n0, n1) tile_off<BN, 0, 0>(k, n0, n1)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_bank_conflicts(const float* __restrict__ A, const float* __restrict__ B,
                      float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                      int ldc) {
    __shared__ __align__(16) float As[AS_SIZE];   // transposed: As(k, m), through as_off
    __shared__ __align__(16) float Bs[BK * BN];   // Bs(k, n), through bs_off

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
                As[as_off(a_c + 0, a_r, r)] = v.x;
                As[as_off(a_c + 1, a_r, r)] = v.y;
                As[as_off(a_c + 2, a_r, r)] = v.z;
                As[as_off(a_c + 3, a_r, r)] = v.w;
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / (BN / 4);
                *reinterpret_cast<float4*>(&Bs[bs_off(b_r + r, b_c, 0)]) =
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
                As[as_off(a_c + 0, a_r, r)] = v.x;
                As[as_off(a_c + 1, a_r, r)] = v.y;
                As[as_off(a_c + 2, a_r, r)] = v.z;
                As[as_off(a_c + 3, a_r, r)] = v.w;
            }
#pragma unroll
            for (int j = 0; j < B_LOADS; ++j) {
                const int r = j * THREADS / (BN / 4);
                *reinterpret_cast<float4*>(&Bs[bs_off(b_r + r, b_c, 0)]) = load4_or_fill(
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
                a[g] = *reinterpret_cast<const float4*>(&As[as_off(k, 4 * tr, g * 4 * TROWS)]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                b[g] = *reinterpret_cast<const float4*>(&Bs[bs_off(k, 4 * tc, g * 4 * TCOLS)]);
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
