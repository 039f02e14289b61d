// Variant of ../double_buffered.cu for every layout, unaligned lines (VEC_A / VEC_B / VEC_C = 0),
// operands past 2^31 elements (OFFSET64) and the cp.async pipeline (PIPELINE = 1): the launcher
// compiles it for every other build. A reader can skip it.
// Stage: double_buffered. A warp-tiled SIMT GEMM whose global loads, shared-memory stores and
// fragment reads overlap the FMAs instead of waiting for them.
//
// Changed from warptiling (the block tile is split into WM x WN warp tiles, each lane owning a
// TM x TN register tile of C):
//   1. Two (or STAGES) shared-memory buffers. While the FMAs work on tile t, tile t+1 is already
//      on its way from global memory, so a k-step never waits for DRAM/L2 latency, and each
//      k-step needs ONE __syncthreads instead of two. Two pipelines (PIPELINE, a -D define):
//      regs (0): at the top of tile t each thread issues its global loads of tile t+1 into
//         registers (LDG.E.128), runs the FMAs of tile t from buffer t%2, and only then stores
//         the registers into buffer (t+1)%2 (STS), then the barrier. The loads' latency is
//         hidden by a whole tile of FMAs (BK*TM*TN per thread); the price is the staging
//         registers (4 per float4 chunk) and the STS instructions.
//      cp_async (1): cp.async (sm_80+, LDGSTS in SASS) copies global memory straight into
//         shared memory without registers, asynchronously. STAGES buffers form a ring: STAGES-1
//         tiles are in flight while one is computed. Each thread commits one cp.async group per
//         tile (an empty group where there is no tile left, so the count stays uniform) and
//         waits with cp.async.wait_group STAGES-2 for the oldest group: its own copies of the
//         next tile; the barrier after it makes everyone's copies visible.
//   2. Fragment double buffering: the A and B values of k-step k+1 are read from shared memory
//      into registers (LDS.128) before the FMAs of k-step k, and at the last k-step of a tile
//      the first fragments of the next tile are read right after the barrier, before the last
//      k-step's FMAs, so shared-memory latency is covered by FMAs as well.
//
// The one barrier per k-step, and why it is enough (every buffer reuse, write after read):
//   regs: buffer b = (t+1)%2 is written (STS) at the last k-step of tile t. Its previous
//      contents (tile t-1) were read at k-steps 1..BK-1 of tile t-1, all before tile t-1's
//      barrier, and k-step 0 right after tile t-2's barrier; tile t's STS comes after tile t-1's
//      barrier. Read after write: the STS of tile t+1 precede tile t's barrier, every read of
//      tile t+1 follows it.
//   cp_async: ring slot (t+STAGES-1)%STAGES = (t-1)%STAGES is refilled at the top of tile t,
//      after tile t-1's barrier; tile t-1 was read before that barrier (its last k-step's
//      fragments were prefetched before it). Read after write: at the last k-step of tile t the
//      thread has committed groups 0..t+STAGES-1, wait_group STAGES-2 leaves at most the newest
//      STAGES-2 pending, so group t+1 (tile t+1) is complete; the barrier then publishes every
//      thread's copies before anyone reads tile t+1.
//   (tests/cuda_emulator.py runs the cp.async path on the CPU with copies that land only when
//   waited for, and NaN in the destination until then: a missing or too shallow wait, or a
//   refill of a buffer still being read, puts NaN into C there.)
//
// Shared layouts. regs: both tiles k-major, As[k][m] and Bs[k][n] (as in vectorized): a thread's
//   A (or B) values for one k are float4 groups of one row, LDS.128 each. A row-major A (or a
//   transposed B) arrives along k, so its float4 is stored as 4 scalar STS down 4 rows; rows are
//   BM+4 (BN+4) floats and a warp loads 16 lines x 2 chunks, which makes those stores
//   conflict-free at every BK (lanes that differ in the chunk land 16 banks apart).
//   cp_async copies bytes as they are in memory (no transposition), so each tile keeps its
//   operand's layout: As[m][k] for a row-major A, As[k][m] for a transposed A, Bs[k][n] for a
//   row-major B, Bs[n][k] for a transposed B. A k-contiguous tile ("k-inner": As[m][k], Bs[n][k])
//   has rows of BK+4 floats and is read 2 k-steps at a time: one LDS.64 gives one row's values
//   for k and k+1 (ptxas merges neighbouring pairs into LDS.128 where registers allow), so the
//   fragment of a k-inner operand is loaded per pair of k-steps.
// Register tile: warp w owns rows wm0..wm0+WM-1 and columns wn0..wn0+WN-1 of the block tile; its
//   32 lanes form a LR x LC grid (LR = WM/TM, LC = WN/TN, LR*LC = 32), lane (lr, lc). For a
//   k-major operand a lane's TM rows are float4 groups interleaved with the other lanes' (rows
//   4*lr + 4*LR*g + {0..3}: the LR lanes of one LDS.128 read LR consecutive float4, one 128-byte
//   wavefront for LR <= 8); for a k-inner operand they are single rows lr + LR*i (consecutive
//   lanes read consecutive rows, whose BK+4 stride puts them on different banks). Columns the
//   same with LC. (siboehm/SGEMM_CUDA's warptiling names the same thing a TM x TN sub-tile
//   repeated WMITER x WNITER times: our TM x TN is the whole per-thread tile.)
// Launch geometry (double_buffered.py): block (BM/WM)*(BN/WN)*32 threads (1-D), a 1-D grid of
//   ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() (GROUP, common.cuh), dynamic shared
//   memory DYNAMIC_SMEM_BYTES (2 or STAGES buffers of one A and one B tile; the launcher sets
//   the >48 KiB attribute when it needs it), no static shared memory.
// Layouts: TRANS_A / TRANS_B (common.cuh). A tile loader walks its operand's contiguous dimension
//   in float4 chunks (VEC_A / VEC_B: the lines are 16-byte aligned; else 4 single floats, and
//   cp.async copies 4 bytes at a time); C is row-major: float4 stores (VEC_C) where a lane's
//   columns are float4 groups, single stores where B is k-inner.
// Edges: interior blocks on full k-steps copy with no bounds test; other tiles test each chunk
//   (and each float in the single-float path) and zero-fill what lies outside A or B: the regs
//   path loads zeros, cp.async passes a source size below the copy size (the rest is
//   zero-filled; a size of 0 reads nothing and gets the operand's first element as a harmless
//   address).
// Bottleneck it attacks: latency. vectorized waits for each k-step's global loads with only
//   one other block to switch to; here loads, stores and fragment reads of the next tiles are in
//   flight during the FMAs, and the larger warp-tiled register tile (TM x TN = 8 x 16 at the
//   defaults, 128 FFMA per 6 LDS.128) raises the share of FFMA among the issued instructions.
#define LAB_CP_ASYNC 1  // common.cuh's cp.async helpers
#include "common.cuh"

// BM, BN, BK, WM, WN, TM, TN: -D defines that cuda_kernels/double_buffered.py always passes,
// from the registry (lab/stages.py; its defaults: BM 128, BN 128, BK 16, WM 64, WN 64, TM 8,
// TN 16).
#ifndef PIPELINE  // 0: regs (global -> registers -> shared), 1: cp_async (global -> shared)
#define PIPELINE 0
#endif
#ifndef STAGES  // ring depth of the cp_async pipeline (the regs pipeline always has 2 buffers)
#define STAGES 2
#endif
// MIN_BLOCKS and VEC_A / VEC_B / VEC_C (1 where A's lines, B's lines, C's rows are 16-byte
// aligned): common.cuh.

#define WARPS_N (BN / WN)
#define THREADS (32 * (BM / WM) * WARPS_N)
#define LR (WM / TM)  // lanes of a warp along m
#define LC (WN / TN)  // lanes of a warp along n

// Shared tiles. k-inner (k contiguous in shared memory) only where cp.async keeps the operand's
// own layout: a row-major A, a transposed B.
#define A_KIN (PIPELINE == 1 && !TRANS_A)
#define B_KIN (PIPELINE == 1 && TRANS_B)
// Row lengths: k-inner rows BK+4 ((BK+4)/4 is odd, so row r starts (BK+4)*r banks on, and the 8
// consecutive rows of one fragment read (LDS.64 or a merged LDS.128) use 8 disjoint bank groups);
// k-major rows that receive scattered scalar stores BM+4 / BN+4 (see the header); rows written
// whole (STS.128 or 16-byte cp.async) unpadded.
#define A_LD (A_KIN ? BK + 4 : TRANS_A ? BM : BM + 4)
#define B_LD (B_KIN ? BK + 4 : TRANS_B ? BN + 4 : BN)
#define A_TILE (A_KIN ? BM * A_LD : BK * A_LD)  // floats
#define B_TILE (B_KIN ? BN * B_LD : BK * B_LD)
#define NBUF (PIPELINE == 1 ? STAGES : 2)
// What the launcher must pass as dynamic shared memory (double_buffered.py: smem_bytes computes
// the same; tests/cuda_emulator.py allocates exactly this when not told otherwise).
#define DYNAMIC_SMEM_BYTES (NBUF * (A_TILE + B_TILE) * 4)

static_assert(BM % WM == 0 && BN % WN == 0, "the block tile must be a whole number of warp tiles");
static_assert(WM % TM == 0 && WN % TN == 0 && LR * LC == 32,
              "a warp tile must be 32 thread tiles: (WM/TM)*(WN/TN) == 32");
static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of float4 groups");
static_assert(BK % 8 == 0, "the k-loop body is 8 k-steps (the last 8 are peeled)");
static_assert(THREADS >= 32 && THREADS <= 1024, "a block holds 32..1024 threads");
static_assert(PIPELINE == 0 ? STAGES == 2 : STAGES >= 2 && STAGES <= 8, "STAGES");
#if PIPELINE == 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "pipeline=cp_async needs cp.async: compute capability 8.0 or newer"
#endif

// ------------------------------------------------------------------------------ tile copies

// One operand's tile as its loader sees it: NL lines of W floats along the operand's contiguous
// dimension, cut into float4 chunks. Chunk q = tid + p*THREADS (p < CHUNKS) is
//   line = q % IL + IL * ((q / IL) / CW),  chunk = (q / IL) % CW     (CW = W/4 chunks per line).
// IL = 1 for lines along m or n (a warp copies 32 consecutive chunks: whole 128-byte lines);
// IL = 16 for lines along k (short: BK floats): a warp copies chunks c, c+1 of 16 lines, i.e.
// whole 32-byte sectors, and the scattered stores of chunk c and c+1 land 16 banks apart.
// All sizes are powers of two, so chunk p's line and chunk differ from chunk 0's by compile-time
// constants (dl, dc below) and the K loop only advances one pointer.
// SCATTER: the chunk's 4 floats go down 4 rows of a k-major tile (regs pipeline, lines along k);
// else they are 4 consecutive floats of the shared tile (one STS.128 or one 16-byte cp.async).
template <int NL, int W, int IL, int LD, bool SCATTER, bool VEC>
struct TileCopy {
    static constexpr int CW = W / 4;
    static constexpr int S = THREADS / IL;
    static constexpr int CHUNKS = NL * CW / THREADS;
    static_assert(CHUNKS >= 1 && CHUNKS * THREADS == NL * CW, "whole chunks per thread");
    static_assert(NL % IL == 0 && THREADS % IL == 0, "interleave");

    const float* base;  // the operand's first element: a harmless address for empty copies
    const float* g;     // this thread's chunk 0 in the next tile to copy
    int line, c4;       // chunk 0's line and first float along the line, in the tile
    int soff;           // chunk 0's offset in the shared tile

    // origin: the tile's element (line 0, float 0) for the first tile; ld: the operand's leading
    // dimension (lines are ld apart in memory).
    __device__ __forceinline__ TileCopy(const float* operand, const float* origin, int ld,
                                        int tid) {
        line = tid % IL + IL * ((tid / IL) / CW);
        c4 = 4 * ((tid / IL) % CW);
        soff = SCATTER ? c4 * LD + line : line * LD + c4;
        base = operand;
        g = origin + (offset_t)line * ld + c4;
    }

    // Floats of chunk p inside the operand: 4 (FULL), else 0..4 (x: the line's coordinate, its
    // tile origin x0 and limit; y: the same along the line).
    template <bool FULL>
    __device__ __forceinline__ int valid(int p, int x0, int xlim, int y0, int ylim) const {
        if (FULL) return 4;  // first: unused offsets moved ptxas's schedule of one build
        const int dl = IL * ((p * S) / CW), dc = 4 * ((p * S) % CW);
        return chunk_valid<FULL>(x0 + line + dl, xlim, y0 + c4 + dc, ylim);
    }

    // regs pipeline: global -> registers (zeros outside the operand)
    template <bool FULL>
    __device__ __forceinline__ void copy(float4 (&r)[CHUNKS], int ld, int x0, int xlim, int y0,
                                         int ylim) const {
#pragma unroll
        for (int p = 0; p < CHUNKS; ++p) {
            const int dl = IL * ((p * S) / CW), dc = 4 * ((p * S) % CW);
            r[p] = load4<VEC>(g + (offset_t)dl * ld + dc, valid<FULL>(p, x0, xlim, y0, ylim));
        }
    }

    // regs pipeline: registers -> shared tile
    __device__ __forceinline__ void store(float* tile, const float4 (&r)[CHUNKS]) const {
#pragma unroll
        for (int p = 0; p < CHUNKS; ++p) {
            const int dl = IL * ((p * S) / CW), dc = 4 * ((p * S) % CW);
            if (SCATTER) {
                float* d = tile + soff + dc * LD + dl;
                d[0] = r[p].x;
                d[LD] = r[p].y;
                d[2 * LD] = r[p].z;
                d[3 * LD] = r[p].w;
            } else {
                *reinterpret_cast<float4*>(tile + soff + dl * LD + dc) = r[p];
            }
        }
    }

    // cp_async pipeline: global -> shared tile, asynchronously (never SCATTER)
    template <bool FULL>
    __device__ __forceinline__ void copy(float* tile, int ld, int x0, int xlim, int y0,
                                         int ylim) const {
#pragma unroll
        for (int p = 0; p < CHUNKS; ++p) {
            const int dl = IL * ((p * S) / CW), dc = 4 * ((p * S) % CW);
            float* d = tile + soff + dl * LD + dc;
            const float* s = g + (offset_t)dl * ld + dc;
            const int v = valid<FULL>(p, x0, xlim, y0, ylim);
            if (VEC) {
                if (FULL) cp_async16(d, s);
                else cp_async16_zfill(d, v > 0 ? s : base, 4 * v);
            } else {  // the line is not 16-byte aligned: 4 single floats
#pragma unroll
                for (int e = 0; e < 4; ++e) cp_async4(d + e, e < v ? s + e : base, e < v ? 4 : 0);
            }
        }
    }

    __device__ __forceinline__ void advance(offset_t step) { g += step; }
};

// ------------------------------------------------------------------------------ fragments

// A thread's values of one operand (T of them per k-step: rows of A or columns of B), read from
// a shared tile into registers, double-buffered:
//   k-major tile (KIN false): q[s][g] = float4 group g for k-step k, s = k % 2 (one LDS.128 per
//                             group of 4 rows/columns);
//   k-inner tile (KIN true):  q[s][i] = element i for k-steps k2, k2+1 (k2 even), s = (k/2) % 2
//                             (one LDS.64 per element and pair of k-steps).
// A k-inner pair costs 2*T registers per buffer, the same as two k-major k-steps; a group of 4
// k-steps per LDS.128 would halve the loads but hold 4*T per buffer (8*T double-buffered): with
// the 8 x 16 tile's 128 accumulators that spilled (255 registers and 128 to 4.8 KB of spills,
// NVRTC 13.0, sm_90).
// `s8` below is the k-step's position in the 8-step loop body (a compile-time constant even when
// the loop over bodies is not unrolled), so every register index is known at compile time.
template <int T, bool KIN, int LANES, int LD>
struct Frag {
    using V = typename Pick<KIN, float2, float4>::type;
    V q[2][KIN ? T : T / 4];
    int off;  // this thread's element 0 at k = 0, in the tile

    // w0: the warp's first row (column); lpos: the lane's row (column) in the lane grid
    __device__ __forceinline__ Frag(int w0, int lpos)
        : off(KIN ? (w0 + lpos) * LD : w0 + 4 * lpos) {}

    // Registers for k-step k (body position s8, 0..8) from `tile`.
    __device__ __forceinline__ void load(const float* tile, int k, int s8) {
        if (KIN) {
            if (s8 % 2) return;  // the pair is already in registers
#pragma unroll
            for (int i = 0; i < T; ++i)
                q[(s8 / 2) % 2][i] = *reinterpret_cast<const V*>(tile + off + i * LANES * LD + k);
        } else {
#pragma unroll
            for (int g = 0; g < T / 4; ++g)
                q[s8 % 2][g] = *reinterpret_cast<const V*>(tile + off + k * LD + 4 * LANES * g);
        }
    }

    __device__ __forceinline__ float get(int s8, int i) const {
        return KIN ? at(q[(s8 / 2) % 2][i], s8 % 2) : at(q[s8 % 2][i / 4], i % 4);
    }

    // Offset of element i inside the warp tile's rows (columns), relative to the warp's first.
    static __device__ __forceinline__ int pos(int lpos, int i) {
        return KIN ? lpos + LANES * i : 4 * lpos + 4 * LANES * (i / 4) + i % 4;
    }
};

// ------------------------------------------------------------------------------ the kernel

// The TM x TN outer product of one k-step (body position s8) into the accumulators.
template <typename FA, typename FB>
__device__ __forceinline__ void fma_step(float (&acc)[TM][TN], const FA& fa, const FB& fb, int s8) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += fa.get(s8, i) * fb.get(s8, j);
}

// A: row-major lines are rows (along k, IL 16); transposed, lines are columns (along m).
using CopyA = TileCopy<TRANS_A ? BK : BM, TRANS_A ? BM : BK, TRANS_A ? 1 : 16, A_LD,
                       !TRANS_A && !A_KIN, VEC_A>;
// B: row-major lines are rows (along n); transposed, lines are columns (along k, IL 16).
using CopyB = TileCopy<TRANS_B ? BN : BK, TRANS_B ? BK : BN, TRANS_B ? 16 : 1, B_LD,
                       TRANS_B && !B_KIN, VEC_B>;
using FragA = Frag<TM, A_KIN, LR, A_LD>;
using FragB = Frag<TN, B_KIN, LC, B_LD>;

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_double_buffered(const float* __restrict__ A, const float* __restrict__ B,
                       float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
    extern __shared__ __align__(16) float smem[];  // NBUF x (A tile, B tile)

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int lr = lane / LC, lc = lane % LC;  // lanes along n fastest: LC lanes share A values
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM, n0 = bn * BN;
    const bool inside = m0 + BM <= M && n0 + BN <= N;
    const int tiles = CEIL_DIV(K, BK);

    CopyA copy_a(A, TRANS_A ? A + m0 : A + (offset_t)m0 * lda, lda, tid);
    CopyB copy_b(B, TRANS_B ? B + (offset_t)n0 * ldb : B + n0, ldb, tid);
    FragA frag_a(wm0, lr);
    FragB frag_b(wn0, lc);

    float acc[TM][TN];
    zero_acc(acc);  // common.cuh

    // Tiles are copied in order 0, 1, 2, ...: `next` is the next one to copy.
    int next = 0;
#if PIPELINE == 0
    float4 ra[CopyA::CHUNKS], rb[CopyB::CHUNKS];  // tile t+1, in flight during tile t's FMAs
    // Global loads of tile `next` into ra/rb (common.cuh's copy_ktile: an interior block on a
    // whole k-tile compiles no bounds tests).
    auto load_next = [&]() {
        const int k0 = next * BK;
        if (inside && k0 + BK <= K) {
            copy_a.copy<true>(ra, lda, A_TILE_AT(k0));  // common.cuh: the tile's lines, per layout
            copy_b.copy<true>(rb, ldb, B_TILE_AT(k0));
        } else {
            copy_a.copy<false>(ra, lda, A_TILE_AT(k0));
            copy_b.copy<false>(rb, ldb, B_TILE_AT(k0));
        }
        copy_a.advance(a_step<BK>(lda));
        copy_b.advance(b_step<BK>(ldb));
        ++next;
    };
    load_next();
    copy_a.store(smem, ra);
    copy_b.store(smem + A_TILE, rb);
    __syncthreads();
#else
    // Copy tile `next` into ring slot `slot` and commit its group (an empty group past the last
    // tile, so that "wait for all but the newest STAGES-2 groups" always means "tile t+1").
    auto copy_next = [&](int slot) {
        if (next < tiles)  // common.cuh's copy_ktile, as in mma.cu
            copy_ktile<BK, A_TILE>(copy_a, copy_b, smem + slot * (A_TILE + B_TILE), inside, m0, n0,
                                   next * BK, M, N, K, lda, ldb);
        ++next;
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) copy_next(s);
    cp_async_wait<STAGES - 2>();  // tile 0 is in (our copies); the barrier publishes everyone's
    __syncthreads();
    int fill = STAGES - 1;  // the ring slot the next copy goes to
#endif
    frag_a.load(smem, 0, 0);  // k-step 0's fragments (k-inner: k-steps 0 and 1)
    frag_b.load(smem + A_TILE, 0, 0);

    int rd = 0;  // the buffer (ring slot) tile t is read from
    for (int t = 0; t < tiles; ++t) {
        const bool more = t + 1 < tiles;
#if PIPELINE == 0
        const int nx = rd ^ 1;
        if (more) load_next();  // tile t+1 -> registers; used only after this tile's FMAs
#else
        const int nx = rd + 1 == STAGES ? 0 : rd + 1;
        copy_next(fill);        // tile t+STAGES-1 -> slot (t-1)%STAGES, freed by the last barrier
        fill = fill + 1 == STAGES ? 0 : fill + 1;
#endif
        const float* As = smem + rd * (A_TILE + B_TILE);
        const float* Bs = As + A_TILE;
        float* An = smem + nx * (A_TILE + B_TILE);  // tile t+1's buffer
        float* Bn = An + A_TILE;

        // k-steps 0..BK-9: prefetch k-step k+1 from this tile, then the FMAs of k-step k
        INNER_UNROLL
        for (int kb = 0; kb < BK - 8; kb += 8) {
#pragma unroll
            for (int s8 = 0; s8 < 8; ++s8) {
                frag_a.load(As, kb + s8 + 1, s8 + 1);
                frag_b.load(Bs, kb + s8 + 1, s8 + 1);
                fma_step(acc, frag_a, frag_b, s8);
            }
        }
        // the last 8 k-steps (peeled, so that where the handoff goes is known at compile time)
#pragma unroll
        for (int s8 = 0; s8 < 8; ++s8) {
            if (s8 < 7) {
                frag_a.load(As, BK - 7 + s8, s8 + 1);
                frag_b.load(Bs, BK - 7 + s8, s8 + 1);
            } else if (more) {  // last k-step: hand over to tile t+1 before its FMAs
#if PIPELINE == 0
                copy_a.store(An, ra);  // buffer nx was last read before the previous barrier
                copy_b.store(Bn, rb);
#else
                cp_async_wait<STAGES - 2>();  // our copies of tile t+1 have landed
#endif
                __syncthreads();  // everyone's tile t+1 is in shared memory
                frag_a.load(An, 0, 8);
                frag_b.load(Bn, 0, 8);
            }
            fma_step(acc, frag_a, frag_b, s8);
        }
        rd = nx;
    }

    // C: a lane's columns are float4 groups (k-major B: one STG.128 each with VEC_C) or single
    // columns LC apart (k-inner B); rows never share a store.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + wm0 + FragA::pos(lr, i);
        if (row >= M) continue;
        float* c_row = C + (offset_t)row * ldc;
        if (!B_KIN) {
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const int col = n0 + wn0 + FragB::pos(lc, 4 * g);
                const float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2],
                                             acc[i][4 * g + 3]);
                store4<VEC_C>(c_row + col, v, N - col);
            }
        } else {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int col = n0 + wn0 + FragB::pos(lc, j);
                if (col < N) c_row[col] = acc[i][j];
            }
        }
    }
}
