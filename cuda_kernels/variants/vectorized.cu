// Variant of ../vectorized.cu for every layout (nn, nt, tn, tt), for lines that are not 16-byte
// aligned (VEC_A / VEC_B / VEC_C = 0) and for operands past 2^31 elements (OFFSET64): the
// launcher compiles it for every other problem. A reader can skip it: ../vectorized.cu is the lesson.
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
// Layouts (common.cuh): a float4 is 4 consecutive floats in memory, so it runs along an operand's
//   contiguous dimension: along k for a row-major A, along i (4 rows of one column) for a
//   transposed A (TRANS_A), along j for a row-major B, along k (4 k's of one column) for a
//   transposed B (TRANS_B); C is row-major, along j. The transposed A is the easy case: 4 rows of
//   A at one k are 4 consecutive floats of As[k][m], one STS.128, where the row-major A needs the
//   4 scalar stores of (2). A transposed B is the mirror image of the row-major A: its float4 (4
//   k's of column j) is scattered into Bs[k..k+3][j] with 4 scalar stores, and Bs rows get 4
//   floats of padding for the same reason As rows have them. The FMA loop is the same in every
//   layout, and the nn build is the kernel as it was before layouts (same registers, same SASS
//   instruction mix). Measured on the H100 at 4096^3 (defaults, lab.compare): nn 3.45 ms,
//   nt 3.45, tn 3.20 (the one STS.128 instead of 4 scalar stores), tt 3.41; nt without the Bs
//   padding took 3.54 ms instead of 3.49 (same harness without L2 flush).
// Alignment: a float4 access must be 16-byte aligned: the operand's base pointer and its leading
//   dimension (lda, ldb, ldc: the distance between its lines) must be multiples of 16 bytes,
//   4 floats; chunks start at multiples of 4 along a line. The launcher compiles VEC_A=0, VEC_B=0
//   or VEC_C=0 for an operand whose lines are not aligned (vectorized.py: vector_flags): then the
//   same 4-float chunks are read or written one float at a time, and any size stays correct.
// Edges: interior blocks on full k-steps load with no bounds test. Edge tiles test each chunk: a
//   chunk wholly inside A (or B) is one float4; a chunk that straddles the edge (a width that is
//   not a multiple of 4, e.g. K = 13 with lda = 16) or lies outside is loaded element by element
//   with zero fill. Stores the same.
// Bottleneck it attacks: load/store instruction count and the A-fragment reads of blocktile_2d.
//   Per k-step a warp issues 64 FFMA and 4 LDS.128 (6 shared wavefronts: A's two float4 are
//   shared by the warp, B's 16 distinct float4 are 256 contiguous bytes), so the FMA pipe, not
//   shared memory, is the limit; what remains is latency: nothing is prefetched, so each k-step
//   waits for its global loads, hidden only by the other resident block (double buffering next).
#include "common.cuh"

// BM, BN, BK, TM, TN: -D defines that cuda_kernels/vectorized.py always passes, from the registry
// (lab/stages.py; its defaults: BM 128, BN 128, BK 8, TM 8, TN 8).
// MIN_BLOCKS and the alignment switches VEC_A, VEC_B, VEC_C (see Alignment): common.cuh.

#define TROWS (BM / TM)
#define TCOLS (BN / TN)
#define THREADS (TROWS * TCOLS)
#define A_CHUNKS (BM * BK / 4 / THREADS)   // float4 chunks of the A tile per thread per k-step
#define B_CHUNKS (BK * BN / 4 / THREADS)
// As[k][m] rows are padded by 4 floats. The float4 of A that lane l reads (row r = l / (BK/4),
// k = 4*(l % (BK/4))) is stored as As[k..k+3][r]; with BM + 4 the lanes that differ only in k
// land 16 banks apart (4*(BM+4) = 16 mod 32 words), so the 4 scalar stores are conflict-free at
// BK = 8. Rows stay 16-byte aligned for the LDS.128 reads.
#define AS_LD (BM + 4)
// Bs rows: unpadded for a row-major B (one STS.128 per chunk). A transposed B's float4 (4 k's of
// column j) is stored into 4 rows of Bs; lane l of a warp holds column l / (BK/4), k = 4*(l % (BK/4)),
// and with BN + 4 the lanes that differ only in k land 16 banks apart (4*(BN+4) = 16 mod 32
// words), so the 4 scalar stores are conflict-free at BK = 8, as the As stores are.
#define BS_LD (TRANS_B ? BN + 4 : BN)
// float4 chunks per line of each tile as its loader walks it: a line runs along the operand's
// contiguous dimension (row-major A: k, BK floats; transposed A: m, BM floats; row-major B: n,
// BN floats; transposed B: k, BK floats).
#define A_CW ((TRANS_A ? BM : BK) / 4)
#define B_CW ((TRANS_B ? BK : BN) / 4)
using WalkA = LineWalk<A_CW>;   // the loaders' walks (common.cuh): chunk q of a tile is on line
using WalkB = LineWalk<B_CW>;   // q / CW, 4 * (q % CW) floats along it

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of float4 groups");
static_assert(BK % 4 == 0, "the k-step is made of float4 chunks");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile must be a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(BM/TM)*(BN/TN) threads must be within 32..1024");
static_assert(A_CHUNKS >= 1 && A_CHUNKS * THREADS * 4 == BM * BK, "A tile: whole float4s per thread");
static_assert(B_CHUNKS >= 1 && B_CHUNKS * THREADS * 4 == BK * BN, "B tile: whole float4s per thread");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                  float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ __align__(16) float As[BK][AS_LD];   // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BS_LD];

    const int tid = threadIdx.x;
    const int tr = tid / TCOLS;
    const int tc = tid % TCOLS;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping, in float4 chunks: chunk q = tid + p*THREADS of a tile W floats wide is at
    // row q / (W/4), column 4*(q % (W/4)); consecutive threads take consecutive chunks of a row,
    // so a warp reads contiguous 16-byte pieces (whole 128-byte lines for B). Base + compile-time
    // offsets, as in blocktile_2d: the K loop only advances two pointers.
    // A transposed operand is chunked along its columns (rows i of A, k's of B) instead, the
    // direction that is contiguous in memory: chunk q is at column q / (W/4), row 4*(q % (W/4)) of
    // the tile, W its height (BM for A, BK for B).
    int a_r, a_c, b_r, b_c;  // this thread's chunk 0: (m, k) in the A tile, (k, n) in the B tile
    const float* a_ptr = a_chunk0<WalkA>(A, lda, m0, 0, tid, a_r, a_c);  // common.cuh
    const float* b_ptr = b_chunk0<WalkB>(B, ldb, 0, n0, tid, b_r, b_c);
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    float acc[TM][TN];
    zero_acc(acc);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // One k-step's tiles into shared memory (A transposed): common.cuh's load_kmajor_ktile,
        // the float4 loader (load_chunks: edge chunks element by element with zero fill). A line
        // of A that runs along k (row-major A) is scattered down 4 rows of As (scatter4;
        // conflict-free: see AS_LD); a line along m or n is one STS.128. An interior block on a
        // whole k-step takes a copy with no bounds test compiled in.
        load_kmajor_ktile<BK, VEC_A, VEC_B, A_CHUNKS, B_CHUNKS, THREADS, WalkA, WalkB>(
            As, Bs, inside, a_ptr, b_ptr, a_r, a_c, b_r, b_c, m0, n0, k0, M, N, K, lda, ldb);
        __syncthreads();
        a_ptr += a_step<BK>(lda);  // BK*lda (transposed A) or BK
        b_ptr += b_step<BK>(ldb);  // BK (transposed B) or BK*ldb

        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            // Fragments: TM/4 float4 of row k of As and TN/4 float4 of row k of Bs (LDS.128 each).
            float4 a[TM / 4], b[TN / 4];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g)
                a[g] = *reinterpret_cast<const float4*>(&As[k][g * 4 * TROWS + 4 * tr]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                b[g] = *reinterpret_cast<const float4*>(&Bs[k][g * 4 * TCOLS + 4 * tc]);
            outer_product4(acc, a, b);  // TM*TN FFMA on register names (common.cuh)
        }
        __syncthreads();
    }

    // float4 stores straight from registers: for each row and group a warp row writes 16
    // consecutive float4 = 256 bytes (common.cuh's store_tile4).
    store_tile4<TM, TN, TROWS, TCOLS, VEC_C>(C, ldc, M, N, m0, n0, tr, tc, acc);
}
