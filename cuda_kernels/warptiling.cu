// Stage: warptiling. Block tile -> warp tile -> thread tile.
//
// Changed from bank_conflicts (and vectorized): a third level of tiling. The block's BM x BN tile
//   of C is cut into (BM/WM) x (BN/WN) warp tiles, one per warp; a warp tile into WMITER x WNITER
//   warp subtiles of WSUBM x WSUBN (WSUBM = WM/WMITER, WSUBN = WN/WNITER); a subtile into the 32
//   lanes' TM x TN thread tiles, TR = WSUBM/TM rows by TC = WSUBN/TN columns of lanes. A thread
//   owns WMITER*TM x WNITER*TN results (8 x 16 = 128 at the defaults) and each warp works on its
//   own compact region, so the fragments one warp reads from shared memory are few, contiguous
//   and reused by all of its FMAs: per k, per warp, 2 LDS.128 of A and 4 of B feed 128 FFMA
//   (vectorized: 4 LDS.128 for 64 FFMA), and every one of those LDS.128 reads one contiguous run
//   of 128 bytes or less (one shared-memory wavefront, no bank conflict).
// The fragments are double-buffered in registers (the launcher's frags=2, the default): the A
//   and B values of k+1 are loaded into a second set of registers while the FMAs of k run. At
//   this tile size that is part of the warp tile, not a separate step: 128 accumulators take a
//   thread to 221 registers, 2 blocks of 4 warps per SM, so a scheduler has 2 warps and nothing
//   else to run while an LDS.128 (~30 cycles) is in flight; and NVRTC unrolls the k loop only up
//   to 512 FFMA per body (4 of the 16 k's), so only a second, loop-carried set carries the
//   prefetch across those bodies. The default build is this loop; frags=1 (one set, vectorized's
//   loop: 168 registers, 3 blocks per SM) is the control, built from the variant file.
// The A loader walks the tile in slabs of 8 k's (bank_conflicts' problem, solved the way that
//   fits this tile): padded rows As[k][m] of BM + 4 floats are conflict-free for vectorized's
//   loader only at BK = 8 (lanes 8 k's apart hit the same bank), and this stage's default is
//   BK = 16. A warp loads 16 rows x 8 k's (two float4 per row: 32-byte sectors, as many as 8 rows
//   x 16 k's), and its 4 scalar stores land in 32 distinct banks whatever BK is.
// Thread tile inside a subtile: lane (tr, tc) = (lane / TC, lane % TC) owns rows g*4*TR + 4*tr +
//   {0..3} (g < TM/4) and columns h*4*TC + 4*tc + {0..3} (h < TN/4): groups of 4 interleaved so
//   that a warp's float4 reads of one k are one contiguous run (TR*16 bytes of A, TC*16 of B).
// Launch geometry (warptiling.py): block 32*(BM/WM)*(BN/WN) threads (1-D; 128 at the defaults),
//   a 1-D grid of ceil(M/BM)*ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh),
//   static shared memory (BK*(BM+4) + BK*BN) * 4 bytes (16.25 KiB at the defaults).
// Edges: as in vectorized, interior blocks on full k-steps load with no bounds test; edge tiles
//   count the floats of each chunk inside A (or B), zero-fill the rest, and store C per float at
//   its right edge.
// Bottleneck it attacks: instruction overhead per FMA (fewer LDS per FFMA, one wavefront per LDS)
//   and shared-memory latency between k's. Not attacked here: the global-load latency at each
//   k-tile (no prefetch: each k-tile waits for its loads, hidden only by the other resident
//   block); the double_buffered stage does that.
// Lesson case: row-major A and B, 16-byte-aligned lines, 32-bit offsets, frags=2 and K not split;
//   every other layout, unaligned lines, operands past 2^31 elements, frags=1 and split-K (the
//   launcher's splitk > 1: partial tiles into a workspace, summed by splitk_reduce.cu) run
//   cuda_kernels/variants/warptiling.cu, the same kernel with those switches.
#include "common.cuh"

// BM, BN, BK, WM, WN, TM, TN: -D defines that cuda_kernels/warptiling.py always passes, from
// the registry (lab/stages.py; its defaults: BM 128, BN 128, BK 16, WM 64, WN 64, TM 8, TN 4).
// MIN_BLOCKS (blocks per SM for __launch_bounds__; the launcher's choice): common.cuh.
#ifndef WNITER
#define WNITER 4
#endif

#define WARPS_N (BN / WN)
#define THREADS (32 * (BM / WM) * WARPS_N)
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define TR (WSUBM / TM)  // lane rows of a warp subtile
#define TC (WSUBN / TN)  // lane columns
#define AF (WMITER * TM / 4)  // float4 of A per thread per k
#define BF (WNITER * TN / 4)  // float4 of B per thread per k
#define A_LOADS (BM * BK / 4 / THREADS)  // float4s of the A tile per thread per k-step
#define B_LOADS (BK * BN / 4 / THREADS)
// As[k][m]: rows padded by 4 floats, so row k+1 starts 4 banks after row k (BM is a multiple of
// 32). With the slab loader a warp's scalar store j writes rows kk+j and kk+4+j (16 banks apart)
// at 16 consecutive m's each: 32 distinct banks. Rows stay 16-byte aligned for LDS.128.
#define AS_LD (BM + 4)

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of groups of 4");
static_assert(BK % 8 == 0, "the A loader walks k in slabs of 8");
static_assert(BM % WM == 0 && BN % WN == 0, "the block tile is a whole number of warp tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "32 * (BM/WM) * (BN/WN) threads: 32..1024");
static_assert(WMITER >= 1 && WMITER * 32 * TM * TN * WNITER == WM * WN,
              "a warp tile is WMITER x WNITER subtiles of 32 thread tiles");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "whole subtiles");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0 && TR * TC == 32, "32 lanes per subtile");
static_assert(A_LOADS >= 1 && A_LOADS * THREADS * 4 == BM * BK, "A tile: whole float4s per thread");
static_assert(B_LOADS >= 1 && B_LOADS * THREADS * 4 == BK * BN, "B tile: whole float4s per thread");

// One k's fragments: AF float4 of row k of As and BF float4 of row k of Bs (LDS.128 each).
// as_row / bs_row point at this thread's first float4 in row 0; the rest are compile-time offsets:
// subtile (f / (TM/4)) and group (f % (TM/4)) of A, likewise of B.
__device__ __forceinline__ void load_fragments(float4 (&a)[AF], float4 (&b)[BF],
                                               const float* as_row, const float* bs_row, int k) {
#pragma unroll
    for (int f = 0; f < AF; ++f)
        a[f] = *reinterpret_cast<const float4*>(
            as_row + k * AS_LD + (f / (TM / 4)) * WSUBM + (f % (TM / 4)) * 4 * TR);
#pragma unroll
    for (int f = 0; f < BF; ++f)
        b[f] = *reinterpret_cast<const float4*>(
            bs_row + k * BN + (f / (TN / 4)) * WSUBN + (f % (TN / 4)) * 4 * TC);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_warptiling(const float* __restrict__ A, const float* __restrict__ B,
                  float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                  int ldc) {
    __shared__ __align__(16) float As[BK][AS_LD];   // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Warp and lane coordinates (see the header): warp (wr, wc) of the block, lane (tr, tc).
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int tr = lane / TC, tc = lane % TC;
    const float* as_row = &As[0][wr * WM + 4 * tr];
    const float* bs_row = &Bs[0][wc * WN + 4 * tc];

    // Loader mapping, in float4 chunks e = tid + p*THREADS. A in slabs of 8 k's: chunk e is on
    // row (e % (2*BM)) / 2 at k 8*(e / (2*BM)) + 4*(e % 2), two chunks per row and slab. B as in
    // vectorized: row e / (BN/4), column 4*(e % (BN/4)). Sizes are powers of two, so chunk p lies
    // a compile-time offset from chunk 0 and the K loop only advances two pointers.
    const int a_r = (tid % (2 * BM)) / 2, a_c = 8 * (tid / (2 * BM)) + 4 * (tid % 2);
    const float* a_ptr = A + (m0 + a_r) * lda + a_c;
    const int b_c = 4 * (tid % (BN / 4)), b_r = tid / (BN / 4);
    const float* b_ptr = B + b_r * ldb + n0 + b_c;
    // Blocks that lie entirely inside C take the unguarded load path on every full k-step.
    const bool inside = m0 + BM <= M && n0 + BN <= N;

    // Component i of a float4 (i is a compile-time constant after unrolling: a register name).
    auto at4 = [](const float4& v, int i) {
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
    };
    // 4 consecutive floats p[0..3] of which the first n (0..4) lie inside the operand: one
    // 128-bit load when all 4 do, else one float at a time with zero fill (the edge tiles).
    auto load4_or_fill = [](const float* p, int n) {
        if (n >= 4) return *reinterpret_cast<const float4*>(p);
        return make_float4(n > 0 ? p[0] : 0.0f, n > 1 ? p[1] : 0.0f, n > 2 ? p[2] : 0.0f, 0.0f);
    };
    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;

    // One k-step's tiles into shared memory, as in vectorized. full: the block is inside C and
    // the k-step inside K (each call below is its own inlined copy, the full one without a
    // bounds test).
    auto load_tiles = [&](bool full, int k0, const float* a_ptr, const float* b_ptr) {
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int dr = j * THREADS % (2 * BM) / 2, dk = 8 * (j * THREADS / (2 * BM));
            const int r = a_r + dr, k = a_c + dk;   // (m, k) of the chunk in the A tile
            const int n = full ? 4 : m0 + r < M ? min(4, max(0, K - (k0 + k))) : 0;
            const float4 v = load4_or_fill(a_ptr + dr * lda + dk, n);
            // The transposing store: 4 k's of row r down column r of As (scalar STS each).
            As[k + 0][r] = v.x;
            As[k + 1][r] = v.y;
            As[k + 2][r] = v.z;
            As[k + 3][r] = v.w;
        }
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int r = b_r + j * THREADS / (BN / 4);   // row k of the B tile; b_c: its n
            const int n = full ? 4 : k0 + r < K ? min(4, max(0, N - (n0 + b_c))) : 0;
            const float4 v = load4_or_fill(b_ptr + j * THREADS / (BN / 4) * ldb, n);
            *reinterpret_cast<float4*>(&Bs[r][b_c]) = v;   // one STS.128
        }
    };
    // The outer product of one k: WMITER*TM x WNITER*TN independent FMAs on register names.
    auto fma_k = [&](const float4 (&a)[AF], const float4 (&b)[BF]) {
#pragma unroll
        for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
            for (int j = 0; j < WNITER * TN; ++j)
                acc[i][j] += at4(a[i / 4], i % 4) * at4(b[j / 4], j % 4);
    };

    for (int kt = 0; kt < CEIL_DIV(K, BK); ++kt) {
        const int k0 = kt * BK;
        if (inside && k0 + BK <= K)
            load_tiles(true, k0, a_ptr, b_ptr);
        else
            load_tiles(false, k0, a_ptr, b_ptr);
        __syncthreads();
        a_ptr += BK;        // BK columns right
        b_ptr += BK * ldb;  // BK rows down

        // Two register sets of fragments, k even in set 0 and k odd in set 1: the LDS.128 of
        // k+1 are issued before the FFMAs of k. Written two k's per iteration so that the set is
        // a compile-time choice even when the loop is not unrolled (unroll=0): no local memory.
        float4 a0[AF], b0[BF], a1[AF], b1[BF];
        load_fragments(a0, b0, as_row, bs_row, 0);
        INNER_UNROLL
        for (int k = 0; k < BK; k += 2) {
            load_fragments(a1, b1, as_row, bs_row, k + 1);
            fma_k(a0, b0);
            if (k + 2 < BK) load_fragments(a0, b0, as_row, bs_row, k + 2);
            fma_k(a1, b1);
        }
        __syncthreads();
    }

    // float4 stores straight from registers; for one (row, column group) a warp writes TR rows x
    // TC*16 bytes. A group that straddles C's right edge is stored one float at a time.
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i) {
        const int row = m0 + wr * WM + i / TM * WSUBM + i % TM / 4 * 4 * TR + 4 * tr + i % 4;
        if (row >= M) continue;
        float* c_row = C + row * ldc;
#pragma unroll
        for (int j = 0; j < WNITER * TN; j += 4) {
            const int col = n0 + wc * WN + j / TN * WSUBN + j % TN / 4 * 4 * TC + 4 * tc;
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
