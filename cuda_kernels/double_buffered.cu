// Stage: double_buffered. warptiling whose global loads, shared-memory stores and fragment reads
// overlap the FMAs instead of waiting for them.
//
// Changed from warptiling: the next k-tile is in flight during this one's FMAs (the launcher's
//   pipeline=regs, the default). Two shared buffers: at the top of k-tile kt each thread issues
//   its global loads of tile kt+1 into registers (ra, rb: LDG.E.128), runs the FMAs of tile kt
//   from buffer kt % 2, and only at its last k-step stores the registers into buffer (kt+1) % 2
//   (STS), then the barrier. The loads' latency is hidden by a whole tile of FMAs (BK*TM*TN per
//   thread); the price is the staging registers (4 per float4 chunk). One barrier per k-step
//   instead of two, and warptiling's fragment prefetch now crosses the tile boundary too: the
//   first fragments of tile kt+1 are read right after that barrier, before the last FMAs of kt.
// Why one barrier is enough: buffer (kt+1) % 2 is written at the last k-step of tile kt. It last
//   held tile kt-1, read at k-steps 1..BK-1 of tile kt-1 (before tile kt-1's barrier) and at
//   k-step 0 right after tile kt-2's barrier; tile kt's stores come after tile kt-1's barrier
//   (write after read). The stores of tile kt+1 precede tile kt's barrier, and every read of tile
//   kt+1 follows it (read after write).
// The k loop runs in bodies of 8 k-steps, the last one peeled: there the hand-over's place is known
//   at compile time, and NVRTC unrolls the whole tile (2048 FFMA at the defaults).
// Warp tile: warptiling's with one subtile per warp (WNITER = 1, so WMITER = 1): TM x TN (8 x 16
//   at the defaults) is a lane's whole tile, its 32 lanes TR = WM/TM rows by TC = WN/TN columns.
// The A loader: a warp loads 16 rows x 2 float4 of k, warptiling's slab with its lanes and warps
//   in another order, so the transposing stores are conflict-free at every BK.
// Launch geometry (double_buffered.py): block 32*(BM/WM)*(BN/WN) threads (1-D; 128 at the
//   defaults), a 1-D grid of ceil(M/BM)*ceil(N/BN) blocks ordered by block_tile() (GROUP,
//   common.cuh), dynamic shared memory DYNAMIC_SMEM_BYTES (two buffers of one A and one B tile,
//   33 KiB at the defaults; the launcher sets the >48 KiB attribute when it needs it).
// Edges: as in warptiling.
// Bottleneck it attacks: latency. warptiling waits for each k-step's global loads with only one
//   other block to switch to; here loads, stores and fragment reads of the next tiles are in
//   flight during the FMAs.
// Lesson case: row-major A and B, 16-byte-aligned lines, 32-bit offsets, pipeline=regs; every
//   other layout, unaligned lines, operands past 2^31 elements and the cp.async ring of 2..4
//   buffers (pipeline=cp_async) run cuda_kernels/variants/double_buffered.cu. That file writes
//   the same pipeline with loader and fragment objects; this one, as warptiling plus its change,
//   compiles to the same FFMA, LDS, STS, LDG and barriers in the same registers or fewer, and
//   differs in address arithmetic (up to 1% of the instructions; tests/test_lessons_warp.py).
#include "common.cuh"

// BM, BN, BK, WM, WN, TM, TN: -D defines that cuda_kernels/double_buffered.py always passes,
// from the registry (lab/stages.py; its defaults: BM 128, BN 128, BK 16, WM 64, WN 64, TM 8,
// TN 16). MIN_BLOCKS (blocks per SM for __launch_bounds__; the launcher's choice): common.cuh.
// WNITER: one warp subtile (the launcher passes none), so WMITER = 1 and TM x TN is a lane's
// whole tile: TR = WM/TM lane rows by TC = WN/TN lane columns.
#ifndef WNITER
#define WNITER 1
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
// 32). A warp loads 16 rows x 2 float4 of k, so its scalar store j writes rows kk+j and kk+4+j
// (16 banks apart) at 16 consecutive m's each: 32 distinct banks. Rows stay 16-byte aligned.
#define AS_LD (BM + 4)

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are made of groups of 4");
static_assert(BK % 8 == 0, "the A loader walks k in slabs of 8");  // and the k loop in bodies of 8
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

// Floats of one shared buffer: a k-step's A tile As[k][m] (BK rows of AS_LD), then its B tile
// Bs[k][n]. Two buffers in dynamic shared memory: DYNAMIC_SMEM_BYTES, what the launcher passes
// (double_buffered.py: smem_bytes). (Offsets into a flat array, as int arithmetic: typed as
// buffer structs, the 64-bit address arithmetic cost 6-9 registers in the BK = 8 builds.)
#define BUF (BK * AS_LD + BK * BN)
#define DYNAMIC_SMEM_BYTES (2 * BUF * 4)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_double_buffered(const float* __restrict__ A, const float* __restrict__ B,
                       float* __restrict__ C, int M, int N, int K, int lda, int ldb,
                       int ldc) {
    extern __shared__ __align__(16) float smem[];   // k-tile kt in buffer kt % 2

    const int tid = threadIdx.x;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM;
    const int n0 = bn * BN;

    // Warp and lane coordinates (see the header): warp (wr, wc) of the block, lane (tr, tc).
    const int warp = tid / 32, lane = tid % 32;
    const int wr = warp / WARPS_N, wc = warp % WARPS_N;
    const int tr = lane / TC, tc = lane % TC;
    // This thread's first float4 in row 0 of an A tile, of a B tile (warptiling: as_row, bs_row).
    const int a_off = wr * WM + 4 * tr, b_off = wc * WN + 4 * tc;

    // Loader mapping, in float4 chunks e = tid + j*THREADS. A in groups of 16 rows: chunk e is on
    // row e % 16 + 16*(e / (4*BK)) at k 4*(e / 16 % (BK/4)): a warp reads 16 rows x 2 float4
    // (whole 32-byte sectors). B as in vectorized: row e / (BN/4), column 4*(e % (BN/4)). Sizes
    // are powers of two: chunk j lies a compile-time offset from chunk 0, and the K loop only
    // advances two pointers.
    const int a_r = tid % 16 + 16 * (tid / 16 / (BK / 4)), a_c = 4 * (tid / 16 % (BK / 4));
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

    // One k-step's tiles into the registers ra, rb, as warptiling loads them: full, the block is
    // inside C and the k-step inside K (each call below is its own inlined copy, the full one
    // without a bounds test). store_tiles puts them into a shared buffer.
    float4 ra[A_LOADS], rb[B_LOADS];
    auto load_tiles = [&](bool full, int k0, const float* a_ptr, const float* b_ptr) {
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int dr = 16 * (j * THREADS / (4 * BK)), dk = j * THREADS / 4 % BK;
            const int r = a_r + dr, k = a_c + dk;   // (m, k) of the chunk in the A tile
            const int n = full ? 4 : m0 + r < M ? min(4, max(0, K - (k0 + k))) : 0;
            ra[j] = load4_or_fill(a_ptr + dr * lda + dk, n);
        }
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int r = b_r + j * THREADS / (BN / 4);   // row k of the B tile; b_c: its n
            const int n = full ? 4 : k0 + r < K ? min(4, max(0, N - (n0 + b_c))) : 0;
            rb[j] = load4_or_fill(b_ptr + j * THREADS / (BN / 4) * ldb, n);
        }
    };
    auto store_tiles = [&](float* tile) {  // the buffer at `tile`
        float (*As)[AS_LD] = reinterpret_cast<float (*)[AS_LD]>(tile);
        float (*Bs)[BN] = reinterpret_cast<float (*)[BN]>(tile + BK * AS_LD);
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int dr = 16 * (j * THREADS / (4 * BK)), dk = j * THREADS / 4 % BK;
            const int r = a_r + dr, k = a_c + dk;
            const float4 v = ra[j];
            // The transposing store: 4 k's of row r down column r of As (scalar STS each).
            As[k + 0][r] = v.x;
            As[k + 1][r] = v.y;
            As[k + 2][r] = v.z;
            As[k + 3][r] = v.w;
        }
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int r = b_r + j * THREADS / (BN / 4);
            *reinterpret_cast<float4*>(&Bs[r][b_c]) = rb[j];   // one STS.128
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

    // k-tile kt's loads into ra, rb.
    auto load_tile = [&](int kt) {
        const int k0 = kt * BK;
        if (inside && k0 + BK <= K)
            load_tiles(true, k0, a_ptr, b_ptr);
        else
            load_tiles(false, k0, a_ptr, b_ptr);
        a_ptr += BK;        // BK columns right
        b_ptr += BK * ldb;  // BK rows down
    };

    load_tile(0);
    store_tiles(smem);
    __syncthreads();
    // Two register sets of fragments, k-step k in set k % 2: the LDS.128 of k+1 are issued before
    // the FFMAs of k. s8, a k-step's place in its body of 8, is a compile-time constant even when
    // the bodies are not unrolled (unroll=0): the set is a register name, no local memory.
    float4 a[2][AF], b[2][BF];
    load_fragments(a[0], b[0], smem + a_off, smem + BK * AS_LD + b_off, 0);
    for (int kt = 0; kt < CEIL_DIV(K, BK); ++kt) {
        const bool more = kt + 1 < CEIL_DIV(K, BK);
        if (more) load_tile(kt + 1);  // in flight during this tile's FMAs
        // tile kt's buffer (its A tile As, then its B tile Bs) and tile kt+1's
        float *As = smem + kt % 2 * BUF, *Bs = As + BK * AS_LD, *next = smem + (kt + 1) % 2 * BUF;

        INNER_UNROLL
        for (int kb = 0; kb < BK - 8; kb += 8) {
#pragma unroll
            for (int s8 = 0; s8 < 8; ++s8) {
                load_fragments(a[1 - s8 % 2], b[1 - s8 % 2], As + a_off, Bs + b_off, kb + s8 + 1);
                fma_k(a[s8 % 2], b[s8 % 2]);
            }
        }
        // The last 8 k-steps, peeled: the hand-over to tile kt+1 comes before the FMAs of the last.
#pragma unroll
        for (int s8 = 0; s8 < 8; ++s8) {
            if (s8 < 7) {
                load_fragments(a[1 - s8 % 2], b[1 - s8 % 2], As + a_off, Bs + b_off, BK - 7 + s8);
            } else if (more) {
                // buffer (kt+1) % 2 was last read before the previous barrier (of tile kt-1)
                store_tiles(next);
                __syncthreads();  // the one barrier per k-step: all of tile kt+1 is in
                load_fragments(a[0], b[0], next + a_off, next + BK * AS_LD + b_off, 0);
            }
            fma_k(a[s8 % 2], b[s8 % 2]);
        }
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
            const int n = N - col;   // columns of the group inside C (4 or more: all 4)
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
