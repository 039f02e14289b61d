// Variant of ../bank_conflicts.cu for every layout (nn, nt, tn, tt), for lines that are not 16-byte
// aligned (VEC_A / VEC_B / VEC_C = 0) and for operands past 2^31 elements (OFFSET64): the
// launcher compiles it for every other problem. A reader can skip it: ../bank_conflicts.cu is
// the lesson.
// Stage: bank_conflicts. vectorized with the shared-memory layout of its transposing store chosen
// so that no warp-wide shared access has a bank conflict, at every BK.
//
// Changed from vectorized: only where the shared tiles put their elements. Both tiles are flat
// arrays addressed through as_off(k, m) and bs_off(k, n) (every shared access goes through them),
// and FIX (compile time) picks the layout of the tile whose store SCATTERS each float4 down 4 rows:
// As for a row-major A (4 k's of row m go to As(k..k+3, m)), Bs for a transposed B (TRANS_B).
// The other tile is written with one STS.128 per float4 along its rows and needs no fix.
//   FIX 0 none     vectorized's layout, unchanged (the control): rows of As BM + 4 floats, rows
//                  of Bs BN (BN + 4 with TRANS_B).
//   FIX 1 pad      rows unpadded; GPAD = 128 / BK floats after every group of 4 rows.
//   FIX 2 swizzle  no padding; element (k, x) is stored at column x ^ ((k / 4) * (128 / BK)).
//   FIX 3 raw      no padding, no swizzle: the textbook conflicted layout (a positive control for
//                  the profiler counters, not a candidate).
//   Default: swizzle (conflict-free at every BK and layout, no extra memory; at BK = 8 none, pad
//   and swizzle are all conflict-free and compile to the same instruction mix, so the choice
//   only matters at BK = 16 and 32).
// Everything else (float4 global access, VEC_A/VEC_B/VEC_C, the four layouts, GROUP, the thread
// tile, the edge paths) is vectorized.cu line for line. FIX=0 has vectorized's layout and its
// instruction mix (512 FFMA, 32 LDS.128, 8 STS; 1168 SASS instructions at the defaults); ptxas
// gives it 127 registers instead of 123 (the shared base addresses are set up differently), still
// 2 blocks per SM.
//
// The bank arithmetic (32 banks of 4 bytes: word w of shared memory is in bank w % 32). One STS of
// the scatter writes component j of every lane's float4. Lane l of a warp holds row
// r = r0 + l / AW and k-group i = l % AW (k = 4i + j), AW = BK/4 chunks per tile row, r0 a
// multiple of 32/AW; the tile width (BM or BN: 32, 64 or 128) is a multiple of 32 words. So the
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
// model for every valid parameter set and layout, against the offsets this file computes.
//
// Launch geometry (bank_conflicts.py): block (BM/TM)*(BN/TN) threads (1-D; 256 by default), a 1-D
//   grid of ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh), static
//   shared memory only: none BK*(BM+4) + BK*BN (+4*BK with TRANS_B) floats, pad BK*(BM+BN) + 32
//   per scattered tile, swizzle and raw BK*(BM+BN) floats (8192 B at the defaults).
// Bottleneck it attacks: the shared-store bank conflicts of the transposing scatter, which
//   vectorized has at BK = 16 and 32 (and in every layout that scatters: nn, nt, tt's B). At its
//   default BK = 8 vectorized's store is already conflict-free; the profiler's store-conflict
//   counter still reads about 0.64M at 2048^3 there, which is why the stage keeps FIX=0 and FIX=3
//   as controls (docs/stages/bank_conflicts.md: what the counters should read per fix).
// Layouts and alignment: as vectorized.cu (its header). A transposed A is stored with one STS.128
//   per float4 along m, so none of the fixes touches As then; a transposed B is the scatter.
#include "common.cuh"

// BM, BN, BK, TM, TN: -D defines that cuda_kernels/bank_conflicts.py always passes, from the registry
// (lab/stages.py; its defaults: BM 128, BN 128, BK 8, TM 8, TN 8).
// MIN_BLOCKS and the alignment switches VEC_A, VEC_B, VEC_C (as in vectorized.cu): common.cuh.
#define FIX_NONE 0
#define FIX_PAD 1
#define FIX_SWIZZLE 2
#define FIX_RAW 3
#ifndef FIX
#define FIX FIX_SWIZZLE
#endif

#define TROWS (BM / TM)
#define TCOLS (BN / TN)
#define THREADS (TROWS * TCOLS)
#define A_CHUNKS (BM * BK / 4 / THREADS)   // float4 chunks of the A tile per thread per k-step
#define B_CHUNKS (BK * BN / 4 / THREADS)
// float4 chunks per line of each tile as its loader walks it: a line runs along the operand's
// contiguous dimension (row-major A: k, BK floats; transposed A: m, BM floats; row-major B: n,
// BN floats; transposed B: k, BK floats).
#define A_CW ((TRANS_A ? BM : BK) / 4)
#define B_CW ((TRANS_B ? BK : BN) / 4)
using WalkA = LineWalk<A_CW>;   // the loaders' walks (common.cuh): chunk q of a tile is on line
using WalkB = LineWalk<B_CW>;   // q / CW, 4 * (q % CW) floats along it

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of float4 groups");
static_assert(BK % 4 == 0 && 128 % BK == 0, "BK is 4, 8, 16, 32, 64 or 128 floats");
static_assert(BM % 32 == 0 && BN % 32 == 0, "tile rows are whole 32-bank lines");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile is a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(BM/TM)*(BN/TN) threads: 32..1024");
static_assert(A_CHUNKS >= 1 && A_CHUNKS * THREADS * 4 == BM * BK, "A tile: whole float4s each");
static_assert(B_CHUNKS >= 1 && B_CHUNKS * THREADS * 4 == BK * BN, "B tile: whole float4s each");
static_assert(FIX >= FIX_NONE && FIX <= FIX_RAW, "FIX: 0 none, 1 pad, 2 swizzle, 3 raw");

// The layout of a BK-row shared tile whose rows hold W floats. SCATTER: its store is the
// transposing scatter (so FIX applies to it). NONE_PAD: the row padding vectorized gives it.
template <int W, bool SCATTER, int NONE_PAD>
struct Tile {
    static constexpr int LD = W + (FIX == FIX_NONE ? NONE_PAD : 0);            // row stride
    static constexpr int GPAD = (FIX == FIX_PAD && SCATTER) ? 128 / BK : 0;    // per 4 rows
    static constexpr int SWZ = (FIX == FIX_SWIZZLE && SCATTER) ? 128 / BK : 0;  // XOR per 4 rows
    static constexpr int SIZE = BK * LD + (BK / 4) * GPAD;                      // floats
    // Word offset of element (k, x0 + x1), k < BK, x0 + x1 < W. The callers pass the per-thread
    // part of the column as x0 and the compile-time part as x1: when x1 is a multiple of 32 the
    // XOR (below 32) only touches x0, (x0 + x1) ^ h = (x0 ^ h) + x1, so x1 and the row start stay
    // LDS/STS immediates and a thread keeps one swizzled column per 4-row group, not one per
    // access (without the split, ptxas held or recomputed one per access: 145 registers and one
    // block per SM at BK = 16, 167 at BK = 32, instead of 127 and 125).
    static __device__ __forceinline__ int off(int k, int x0, int x1 = 0) {
        if (x1 % 32 != 0) {   // (small tiles) no split: the plain formula
            x0 += x1;
            x1 = 0;
        }
        return k * LD + (k >> 2) * GPAD + (x0 ^ ((k >> 2) * SWZ)) + x1;
    }

    // The loader's stores (common.cuh: load_kmajor_tiles) of a float4 chunk whose column is
    // x0 + dx (x0 the thread's, dx compile-time, as off() wants them). along: 4 consecutive
    // columns of row k, one STS.128. across: the scatter, 4 consecutive k's down column x0 + dx,
    // one STS each; k is a multiple of 4, so k..k+3 are one group of 4 rows: one GPAD, one XOR.
    static __device__ __forceinline__ void along(float (&t)[SIZE], int k, int x0, int dx,
                                                 float4 v) {
        *reinterpret_cast<float4*>(&t[off(k, x0, dx)]) = v;
    }
    static __device__ __forceinline__ void across(float (&t)[SIZE], int k, int x0, int dx,
                                                  float4 v) {
        t[off(k + 0, x0, dx)] = v.x;
        t[off(k + 1, x0, dx)] = v.y;
        t[off(k + 2, x0, dx)] = v.z;
        t[off(k + 3, x0, dx)] = v.w;
    }
};
using ATile = Tile<BM, !TRANS_A, 4>;                  // As(k, m): A transposed
using BTile = Tile<BN, (bool)TRANS_B, TRANS_B ? 4 : 0>;  // Bs(k, n)

// Element (k, m) of As and (k, n) of Bs: every shared access of the kernel goes through these
// (through ATile::off / BTile::off), and tests/test_bank_conflicts.py compares them with its model.
__device__ __forceinline__ int as_off(int k, int m) { return ATile::off(k, m); }
__device__ __forceinline__ int bs_off(int k, int n) { return BTile::off(k, n); }

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_bank_conflicts(const float* __restrict__ A, const float* __restrict__ B,
                      float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ __align__(16) float As[ATile::SIZE];   // transposed: As(k, m) at as_off(k, m)
    __shared__ __align__(16) float Bs[BTile::SIZE];   // Bs(k, n) at bs_off(k, n)

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;
    const int tc = tid % TCOLS;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping (vectorized.cu): chunk q = tid + p*THREADS of a tile W floats wide is at row
    // q / (W/4), column 4*(q % (W/4)); a transposed operand is chunked along its columns.
    int a_r, a_c, b_r, b_c;  // common.cuh's a_chunk0 / b_chunk0, as in vectorized.cu
    const float* a_ptr = a_chunk0<WalkA>(A, lda, m0, 0, tid, a_r, a_c);
    const float* b_ptr = b_chunk0<WalkB>(B, ldb, 0, n0, tid, b_r, b_c);
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    float acc[TM][TN];
    zero_acc(acc);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // One k-step's tiles into shared memory (A transposed), as in vectorized.cu, with the
        // stores through ATile::off / BTile::off (Tile::along, Tile::across). A row-major A and
        // a transposed B are the scatter (mirror images of each other: the same fix applies); a
        // transposed A and a row-major B are stored whole, one STS.128 per chunk.
        load_kmajor_ktile<BK, VEC_A, VEC_B, A_CHUNKS, B_CHUNKS, THREADS, WalkA, WalkB, ATile,
                          BTile>(As, Bs, inside, a_ptr, b_ptr, a_r, a_c, b_r, b_c, m0, n0, k0, M,
                                 N, K, lda, ldb);
        __syncthreads();
        a_ptr += a_step<BK>(lda);
        b_ptr += b_step<BK>(ldb);

        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            // Fragments: TM/4 float4 of row k of As and TN/4 float4 of row k of Bs (LDS.128 each).
            float4 a[TM / 4], b[TN / 4];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g)
                a[g] = *reinterpret_cast<const float4*>(
                    &As[ATile::off(k, 4 * tr, g * 4 * TROWS)]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                b[g] = *reinterpret_cast<const float4*>(
                    &Bs[BTile::off(k, 4 * tc, g * 4 * TCOLS)]);
            outer_product4(acc, a, b);
        }
        __syncthreads();
    }

    // float4 stores straight from registers to global memory (no shared memory on the way out),
    // as in vectorized.cu (common.cuh's store_tile4).
    store_tile4<TM, TN, TROWS, TCOLS, VEC_C>(C, ldc, M, N, m0, n0, tr, tc, acc);
}
