// Variant of ../warptiling.cu for every layout, unaligned lines (VEC_A / VEC_B / VEC_C = 0),
// operands past 2^31 elements (OFFSET64), split-K (SPLITK > 1) and one fragment set
// (FRAG_BUFFERS = 1): the launcher compiles it for every other build. A reader can skip it.
// Stage: warptiling. Block tile -> warp tile -> thread tile, and split-K for the tall-K shapes.
//
// Changed from vectorized:
//   1. A third level of tiling. The block's BM x BN tile of C is cut into (BM/WM) x (BN/WN) warp
//      tiles, one per warp; a warp tile into WMITER x WNITER warp subtiles of WSUBM x WSUBN
//      (WSUBM = WM/WMITER, WSUBN = WN/WNITER); a subtile into the 32 lanes' TM x TN thread tiles,
//      TR = WSUBM/TM rows by TC = WSUBN/TN columns of lanes. A thread owns WMITER*TM x WNITER*TN
//      results (8 x 16 = 128 at the defaults) and each warp works on its own compact region, so
//      the fragments one warp reads from shared memory are few, contiguous and reused by all of
//      its FMAs: per k, per warp, 2 LDS.128 of A and 4 of B feed 128 FFMA (vectorized: 4 LDS.128
//      for 64 FFMA), and every one of those LDS.128 reads one contiguous run of 128 bytes or
//      less (one shared-memory wavefront, no bank conflict).
//   2. Register double buffering of the fragments (FRAG_BUFFERS = 2, the launcher's `frags`): the
//      A and B values for k+1 are loaded from shared memory into a second set of registers while
//      the FMAs of k run, so with only 1-2 warps per scheduler the LDS latency (~30 cycles) is not
//      exposed between k's. NVRTC unrolls the k loop only up to 512 FFMA per loop body (4 of the
//      16 k's at the defaults, compiled here), and a loop-carried second set is what carries the
//      prefetch across those iterations. The cost is registers: 221 at the defaults (2 blocks of
//      128 threads per SM); FRAG_BUFFERS = 1 fits in 168 (3 blocks).
//   3. A conflict-free transposed store of A for every BK. vectorized's As[k][m] padding (BM + 4)
//      is conflict-free only at BK = 8 (lanes 8 k's apart hit the same bank); here the loader
//      walks the A tile in slabs of 8 k's: a warp loads 16 rows x 8 k's (two float4 per row,
//      32-byte sectors, the same sectors as 8 rows x 16 k's) and its 4 scalar stores land in 32
//      distinct banks whatever BK is. A transposed B is scattered the same way.
//   4. Split-K (SPLITK = S > 1): blockIdx.y = s picks the contiguous k-tiles [s*T/S, (s+1)*T/S)
//      of the T = ceil(K/BK) (sizes differ by at most one tile; when T < S some splits get none
//      and write zeros). Each split writes its partial BM x BN tile into its own slab of a
//      workspace (the launcher passes the workspace as C and its row length as ldc), and
//      splitk_reduce.cu sums the S slabs in a fixed order into C. For 320x192x786432 the 6..15
//      output tiles alone would occupy 6..15 of 132 SMs.
// Thread tile inside a subtile: lane (tr, tc) = (lane / TC, lane % TC) owns rows g*4*TR + 4*tr +
//   {0..3} (g < TM/4) and columns h*4*TC + 4*tc + {0..3} (h < TN/4): groups of 4 interleaved so
//   that a warp's float4 reads of one k are one contiguous run (TR*16 bytes of A, TC*16 of B).
// Launch geometry (warptiling.py): block 32*(BM/WM)*(BN/WN) threads (1-D; 128 at the defaults),
//   grid (ceil(M/BM)*ceil(N/BN), SPLITK): x is the 1-D tile index ordered by block_tile() (GROUP,
//   common.cuh), y the split; static shared memory (BK*(BM+4) + BK*BN) * 4 bytes (16.25 KiB at
//   the defaults; a transposed B pads Bs rows by 4 floats too), no dynamic shared memory.
// Layouts (common.cuh) and alignment: as in vectorized. A float4 runs along an operand's
//   contiguous dimension; VEC_A / VEC_B / VEC_C = 0 (the launcher's vector_flags) read or write
//   the same 4-float chunks one float at a time for operands whose lines are not 16-byte aligned.
//   The split-K workspace rows are padded to a multiple of 4 floats, so partial tiles are always
//   stored as float4 (VEC_OUT).
// Bottleneck it attacks: instruction overhead per FMA (fewer LDS per FFMA, one wavefront per LDS)
//   and shared-memory latency between k's; split-K attacks idle SMs when M x N has few tiles.
//   Not attacked here: the global-load latency at each k-tile (no prefetch: each k-tile waits for
//   its loads, hidden only by the other resident blocks); the double_buffered stage does that.
#include "common.cuh"

// BM, BN, BK, WM, WN, TM, TN: -D defines that cuda_kernels/warptiling.py always passes, from
// the registry (lab/stages.py; its defaults: BM 128, BN 128, BK 16, WM 64, WN 64, TM 8, TN 4).
#ifndef WNITER
#define WNITER 4
#endif
#ifndef SPLITK  // > 1: blockIdx.y picks a K range; C is the workspace of SPLITK slabs of M x ldc
#define SPLITK 1
#endif
#ifndef FRAG_BUFFERS
#define FRAG_BUFFERS 2
#endif
// MIN_BLOCKS and the alignment switches VEC_A, VEC_B, VEC_C (as in vectorized.cu): common.cuh.
// Split-K partials go to the workspace, whose rows the launcher pads to a multiple of 4 floats.
#define VEC_OUT (SPLITK > 1 ? 1 : VEC_C)

#define WARPS_N (BN / WN)
#define THREADS (32 * (BM / WM) * WARPS_N)
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define TR (WSUBM / TM)  // lane rows of a warp subtile
#define TC (WSUBN / TN)  // lane columns
#define AF (WMITER * TM / 4)  // float4 of A per thread per k
#define BF (WNITER * TN / 4)  // float4 of B per thread per k
#define A_CHUNKS (BM * BK / 4 / THREADS)  // float4 chunks of the A tile per thread per k-step
#define B_CHUNKS (BK * BN / 4 / THREADS)
// As[k][m]: rows padded by 4 floats, so row k+1 starts 4 banks after row k (BM is a multiple of
// 32). With the slab loader a warp's scalar store j writes rows kk+j and kk+4+j (16 banks apart)
// at 16 consecutive m's each: 32 distinct banks. Rows stay 16-byte aligned for LDS.128.
#define AS_LD (BM + 4)
#define BS_LD (TRANS_B ? BN + 4 : BN)

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of float4 groups");
static_assert(BK % 8 == 0, "the loaders walk k in slabs of 8");
static_assert(BM % WM == 0 && BN % WN == 0, "the block tile is a whole number of warp tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "32 * (BM/WM) * (BN/WN) threads: 32..1024");
static_assert(WMITER >= 1 && WMITER * 32 * TM * TN * WNITER == WM * WN,
              "a warp tile is WMITER x WNITER subtiles of 32 thread tiles");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "whole subtiles");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0 && TR * TC == 32, "32 lanes per subtile");
static_assert(A_CHUNKS >= 1 && A_CHUNKS * THREADS * 4 == BM * BK,
              "A tile: whole float4s per thread");
static_assert(B_CHUNKS >= 1 && B_CHUNKS * THREADS * 4 == BK * BN,
              "B tile: whole float4s per thread");

// Loader walks (common.cuh: load_chunks). Chunk q (= tid + p*THREADS) of a tile, as (line, first
// float along the line) of the operand's lines. Row-major A and transposed B (SlabWalk, float4
// along k): 8-k slabs, two chunks per line within a slab, so a warp covers 16 lines x 8 k's.
// Transposed A and row-major B (LineWalk, float4 along m or n): chunks run along the line, a warp
// covers 32 consecutive chunks. THREADS, 2*BM, BM/4, ... are powers of two, so the offset of chunk
// p from chunk 0 is a compile-time constant.
template <int W>  // W lines (m for A, n for B)
struct SlabWalk {
    static __device__ __forceinline__ int line(int q) { return (q % (2 * W)) / 2; }
    static __device__ __forceinline__ int pos(int q) { return 8 * (q / (2 * W)) + 4 * (q % 2); }
};
using WalkA = Pick<TRANS_A, LineWalk<BM / 4>, SlabWalk<BM>>::type;
using WalkB = Pick<TRANS_B, SlabWalk<BN>, LineWalk<BN / 4>>::type;

// One k's fragments: AF float4 of row k of As and BF float4 of row k of Bs (LDS.128 each).
// as_row / bs_row point at this thread's first float4 in row 0; the rest are compile-time offsets.
__device__ __forceinline__ void load_fragments(float4 (&a)[AF], float4 (&b)[BF],
                                               const float* as_row, const float* bs_row, int k) {
#pragma unroll
    for (int f = 0; f < AF; ++f)  // f = wmi * (TM/4) + g
        a[f] = *reinterpret_cast<const float4*>(
            as_row + k * AS_LD + (f / (TM / 4)) * WSUBM + (f % (TM / 4)) * 4 * TR);
#pragma unroll
    for (int f = 0; f < BF; ++f)  // f = wni * (TN/4) + h
        b[f] = *reinterpret_cast<const float4*>(
            bs_row + k * BS_LD + (f / (TN / 4)) * WSUBN + (f % (TN / 4)) * 4 * TC);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_warptiling(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K, int lda, int ldb, int ldc) {
    __shared__ __align__(16) float As[BK][AS_LD];  // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BS_LD];

    const int tid = threadIdx.x;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // This split's k-tiles [kt0, kt1): contiguous, sizes differing by at most one tile, possibly
    // empty (then the loop does not run and the slab gets zeros, which the sum needs).
    const int ktiles = CEIL_DIV(K, BK);
#if SPLITK > 1
    const int split = blockIdx.y;
    const int kt0 = (int)((long long)split * ktiles / SPLITK);
    const int kt1 = (int)((long long)(split + 1) * ktiles / SPLITK);
    C += (size_t)split * M * ldc;  // this split's slab of the workspace
#else
    const int kt0 = 0, kt1 = ktiles;
#endif

    // Warp and lane coordinates (see the header): warp (wr, wc) of the block, lane (tr, tc).
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int tr = lane / TC, tc = lane % TC;
    const float* as_row = &As[0][wr * WM + 4 * tr];
    const float* bs_row = &Bs[0][wc * WN + 4 * tc];

    // Loader: chunk 0 of this thread and its address; the k loop only advances two pointers.
    int a_m, a_k, b_k, b_n;  // (m, k) in the A tile, (k, n) in the B tile
    const float* a_ptr = a_chunk0<WalkA>(A, lda, m0, kt0 * BK, tid, a_m, a_k);
    const float* b_ptr = b_chunk0<WalkB>(B, ldb, kt0 * BK, n0, tid, b_k, b_n);
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    float acc[WMITER * TM][WNITER * TN];
    zero_acc(acc);

    for (int kt = kt0; kt < kt1; ++kt) {
        const int k0 = kt * BK;
        // One k-step's tiles into shared memory (A transposed), as in vectorized.cu: STS.128
        // along m or n, scatter4 along k (common.cuh's load_kmajor_ktile).
        load_kmajor_ktile<BK, VEC_A, VEC_B, A_CHUNKS, B_CHUNKS, THREADS, WalkA, WalkB>(
            As, Bs, inside, a_ptr, b_ptr, a_m, a_k, b_k, b_n, m0, n0, k0, M, N, K, lda, ldb);
        __syncthreads();
        a_ptr += a_step<BK>(lda);
        b_ptr += b_step<BK>(ldb);

        // Two register sets of fragments, k even in set 0 and k odd in set 1: the LDS.128 of
        // k+1 are issued before the FFMAs of k. Written two k's per iteration so that the set is
        // a compile-time choice even when the loop is not unrolled (unroll=0): no local memory.
#if FRAG_BUFFERS == 2
        float4 a0[AF], b0[BF], a1[AF], b1[BF];
        load_fragments(a0, b0, as_row, bs_row, 0);
        INNER_UNROLL
        for (int k = 0; k < BK; k += 2) {
            load_fragments(a1, b1, as_row, bs_row, k + 1);
            outer_product4(acc, a0, b0);
            if (k + 2 < BK) load_fragments(a0, b0, as_row, bs_row, k + 2);
            outer_product4(acc, a1, b1);
        }
#else  // one set: ptxas hoists the next k's LDS.128 only within an unrolled loop body
        INNER_UNROLL
        for (int k = 0; k < BK; ++k) {
            float4 a0[AF], b0[BF];
            load_fragments(a0, b0, as_row, bs_row, k);
            outer_product4(acc, a0, b0);
        }
#endif
        __syncthreads();
    }

    // Epilogue: float4 stores; for one (row, column group) a warp writes TR rows x TC*16 bytes.
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i) {
        const int row = m0 + wr * WM + (i / TM) * WSUBM + ((i % TM) / 4) * 4 * TR + 4 * tr + i % 4;
        if (row >= M) continue;
        float* c_row = C + (offset_t)row * ldc;
#pragma unroll
        for (int f = 0; f < BF; ++f) {
            const int col =
                n0 + wc * WN + (f / (TN / 4)) * WSUBN + (f % (TN / 4)) * 4 * TC + 4 * tc;
            const float4 v = make_float4(acc[i][4 * f], acc[i][4 * f + 1], acc[i][4 * f + 2],
                                         acc[i][4 * f + 3]);
            store4<VEC_OUT>(c_row + col, v, min(4, N - col));
        }
    }
}
