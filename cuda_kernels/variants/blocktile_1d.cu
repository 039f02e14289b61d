// Variant of ../blocktile_1d.cu for every layout (nn, nt, tn, tt) and for operands past 2^31 elements
// (OFFSET64): the launcher compiles it for every problem but the lesson case (nn, 32-bit offsets).
// A reader can skip it: the lesson, ../blocktile_1d.cu, is the same kernel written out for nn.
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
//   and any M, N, K >= 1 is correct; only the final stores are guarded. (A transposed operand
//   clamps its rows past M, or columns past N, instead: see A_CLAMP.)
// Layouts (common.cuh): the loaders read A(i, k) and B(k, j) through lda / ldb, each in the order
//   that is contiguous in memory, so a warp's global reads stay coalesced in every layout: row-major
//   A runs along k, a transposed A (TRANS_A) along i, row-major B along j, a transposed B
//   (TRANS_B) along k. The FMA loop is the same in every layout; what differs is the mapping of
//   loader threads to tile elements and, for a transposed operand, 4 floats of padding per row of
//   its shared tile, which keeps the transposing stores free of bank conflicts. The nn build is
//   the kernel as it was before layouts (same registers, same SASS instruction mix).
//   Measured on the H100 at 4096^3 (defaults, lab.compare): nn 6.73 ms, nt 7.03, tn 6.76,
//   tt 7.21. Without the padding nt took 8.0 ms (instead of 7.1, same harness without L2 flush)
//   and tn 7.0; with a whole warp on one column of A (A_RUN 32) and no padding, tn took 7.4.
// What remains: still (1 + TM/4) / TM shared loads per FMA and a single column per thread, so the
//   B value cannot be reused across columns; blocktile_2d computes a TM x TN tile per thread.
#include "common.cuh"

// BM, BN, BK, TM: -D defines that cuda_kernels/blocktile_1d.py always passes, from the registry
// (lab/stages.py; its defaults: BM 64, BN 64, BK 8, TM 8).
// MIN_BLOCKS (common.cuh): blocks per SM the register allocator must leave room for (the launcher
// picks it so the cap is comfortably above what the kernel needs; see blocktile_1d.py).

#define THREADS (BM * BN / TM)
// Shared-tile row lengths. Row-major operands: the unpadded tiles. A transposed operand's loader
// writes the tile across its rows (see the loaders), so those rows get 4 floats of padding: rows
// stay 16-byte aligned (As[r][0..BK) is still read as LDS.128) and the stores of a warp fall into
// 32 different banks (see the loaders).
#define AS_LD (TRANS_A ? BK + 4 : BK)
#define BS_LD (TRANS_B ? BN + 4 : BN)
// A transposed A is read in runs of A_RUN consecutive rows (32 bytes: one full sector) of one
// column; a warp covers 32 / A_RUN columns (k).
#define A_RUN 8
// Edges of a transposed operand with one element per thread per k-step (A_LOADS or B_LOADS == 1,
// as at the defaults): a row of A past M (a column of B past N) is not tested but clamped to the
// last one in the thread's pointer. Such a row of As only feeds rows of C that are never stored,
// so its values do not matter as long as the load stays inside A. That takes a compare and its
// operand out of the K loop, which the tt build needs to fit in 32 registers (NVRTC 13.0's ptxas
// spills 24 bytes otherwise, and the spill-free build, 96 registers at one block per SM, took
// 14.1 ms at 4096^3 instead of 7.3). With several elements per thread each would need its own clamped offset, so
// those keep the test. Past K there is no such freedom: those elements are zero, as in nn.
#define A_CLAMP (TRANS_A && A_LOADS == 1)
#define B_CLAMP (TRANS_B && B_LOADS == 1)
// Each thread copies A_LOADS elements of the A tile and B_LOADS of the B tile per k-step.
#define A_LOADS (BM * BK / THREADS)
#define B_LOADS (BK * BN / THREADS)

// The launcher's validate() rejects these combinations with a sentence; these are the backstop.
static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(THREADS >= 32 && THREADS <= 1024, "BM*BN/TM threads must be within 32..1024");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS == BM * BK, "A tile must split evenly over threads");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS == BK * BN, "B tile must split evenly over threads");
static_assert(!TRANS_A || BM % A_RUN == 0, "a transposed A is loaded in runs of A_RUN rows");

// The loaders' walks (common.cuh: load_scalars). Element e = tid + p*THREADS of a transposed A's
// tile is row (e / (A_RUN*BK)) * A_RUN + e % A_RUN, column (e / A_RUN) % BK: a warp reads A_RUN
// consecutive rows (contiguous in a column-major A) of each of 32/A_RUN columns. Stored into
// As[m][k] with rows BK + 4 floats apart, the 32 stores of a warp hit 32 different banks (at
// BK = 8, 16, 32); a whole warp on one column would hit 4 banks 8 times each. The other tiles take
// common.cuh's ScalarWalk: row-major along rows, a transposed B down its columns.
template <int Run, int Cols>
struct RunWalk {
    static __device__ __forceinline__ int row(int e) { return e / (Run * Cols) * Run + e % Run; }
    static __device__ __forceinline__ int col(int e) { return e / Run % Cols; }
};
using WalkA = Pick<TRANS_A, RunWalk<A_RUN, BK>, ScalarWalk<BM, BK, false>>::type;
using WalkB = ScalarWalk<BK, BN, TRANS_B>;

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                    int ldc) {
    // As keeps A's row-major layout: row m of the tile is BK contiguous floats, so one thread's
    // reads As[r][0..BK) for a fixed row become 128-bit loads, and since every thread of a warp
    // reads the same row (same t / BN), each is a broadcast: one shared-memory wavefront.
    __shared__ __align__(16) float As[BM][AS_LD];
    // Bs[k][c]: consecutive threads read consecutive columns -> 32 different banks, no conflict.
    __shared__ __align__(16) float Bs[BK][BS_LD];

    const int tid = threadIdx.x;
    const int tc = tid % BN;        // this thread's column inside the tile
    const int tr = tid / BN;        // its strip of TM rows: rows tr*TM .. tr*TM + TM-1
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Loader mapping, fixed for the whole K loop. Element e = tid + p*THREADS of a tile of width W
    // sits at row e / W, column e % W: consecutive threads take consecutive columns (coalesced).
    // W and THREADS are powers of two, so that is a per-thread base (tid / W, tid % W) plus the
    // compile-time offsets (p*THREADS / W, p*THREADS % W): no index math left in the K loop,
    // which only advances two pointers. A: a warp reads 32/BK rows of BK consecutive floats; B: 32
    // consecutive floats of one row (128 bytes).
    // Transposed operands are read along their columns instead (WalkA, WalkB above). A transposed
    // B's element e is column e / BK, row e % BK: consecutive threads take consecutive k of one
    // column of B (contiguous in a column-major B), BK floats per column. Bs rows are BN + 4
    // floats apart, so the warp's stores Bs[k][j] for 8 k's x 4 j's hit 32 banks at BK = 8 (2-way
    // at BK = 16; unpadded they would be BK-way conflicts).
    // A_CLAMP, B_CLAMP: a row past M (a column past N) reads the last one instead (see A_CLAMP).
    // (a_r, a_c) and (b_r, b_c) are WalkA and WalkB of tid, written out: computed through the
    // walks' functions, the tn and tt builds' SASS came out in another instruction order (NVRTC
    // 13.0, sm_90; tc and tr above share tid / BN and tid % BN with them), so it stays as measured.
    const int a_r = TRANS_A ? tid / (A_RUN * BK) * A_RUN + tid % A_RUN : tid / BK,
              a_c = TRANS_A ? tid / A_RUN % BK : tid % BK;
    const float* a_ptr =
        TRANS_A ? A + (offset_t)a_c * lda + (A_CLAMP ? min(m0 + a_r, M - 1) : m0 + a_r)
                : A + (offset_t)(m0 + a_r) * lda + a_c;
    const int b_r = TRANS_B ? tid % BK : tid / BN, b_c = TRANS_B ? tid / BK : tid % BN;
    const float* b_ptr =
        TRANS_B ? B + (offset_t)(B_CLAMP ? min(n0 + b_c, N - 1) : n0 + b_c) * ldb + b_r
                : B + (offset_t)b_r * ldb + n0 + b_c;
    // No separate unguarded path for interior blocks here (blocktile_2d has one): with one A and
    // one B element per thread per k-step the two bounds tests are a few predicated instructions,
    // and the two-path version needs 63 registers instead of 32, which halves the blocks per SM.

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Guarded loads (common.cuh: load_scalars): out-of-range elements become 0, so the FMA
        // loop below needs no branch (a zero in A or B adds nothing to any accumulator). A clamped
        // operand's rows (columns) are not tested.
        load_scalars<A_LOADS, THREADS, WalkA, TRANS_A, !A_CLAMP, true>(As, a_ptr, lda, a_r, a_c,
                                                                       m0, M, k0, K);
        load_scalars<B_LOADS, THREADS, WalkB, TRANS_B, true, !B_CLAMP>(Bs, b_ptr, ldb, b_r, b_c,
                                                                       k0, K, n0, N);
        __syncthreads();
        a_ptr += a_step<BK>(lda);  // common.cuh: BK*lda (transposed A) or BK
        b_ptr += b_step<BK>(ldb);  // BK (transposed B) or BK*ldb

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
            if (row < M) C[(offset_t)row * ldc + col] = acc[i];
        }
    }
}
