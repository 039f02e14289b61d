// tma_tiles.cuh: the tiles of the TMA stages (tma_wgmma.cu, warp_specialized.cu,
// persistent.cu and its variant): element type, tile sizes, the shared-memory layout of a ring
// slot, the TMA loads of one k-tile, the wgmma of one k-step with both operands' descriptors, the
// epilogue's stores from registers, and 3xTF32's split (the stages with a producer warpgroup).
// What only persistent uses (its tile walk, clusters, TMA stores of C, TF32's register A) lives in
// persistent.cu and cuda_kernels/variants/persistent.cu. Include it after the stage's defaults
// (PREC_*, WGS, BN, STAGES, GROUP) and before the kernel; tma_wgmma.cu's header describes the
// tiles and boxes.
//
// fp8 (PREC_FP8): float8 e4m3 operands, one byte each, read K-major only (8-bit wgmma has no
// transpose bits: layout nt, the launcher copies the others), so a k-tile's line of 128 bytes is
// 128 elements of K and a k-step of 32 is 32 bytes, as bf16's 16: the slots, boxes, swizzle and
// descriptors are bf16's byte for byte. C is bfloat16 (C_ELEM = 2 bytes: the epilogue's stores
// are bf16's); the kernel multiplies the fp32 accumulators by scale_a * scale_b (scale_acc)
// before rounding them to bf16.
#pragma once

// The stages' defaults (each 0 of the launchers' parameters means these; cuda_kernels/_tma.py).
#if !defined(PREC_TF32) && !defined(PREC_3XTF32) && !defined(PREC_BF16) && !defined(PREC_FP16) && \
    !defined(PREC_FP8)
#define PREC_BF16 1
#endif
// 3xTF32 (the kernels with a producer warpgroup, whose idle warps split B: warp_specialized.cu,
// persistent.cu): each fp32 operand split into a TF32 head and tail, three TF32 products (split3x
// below)
#if defined(PREC_3XTF32)
#define SPLIT 1
#ifndef CONSUMERS
#error "3xTF32 needs a producer warpgroup to split B (warp_specialized.cu, persistent.cu)"
#endif
#else
#define SPLIT 0
#endif
#ifdef CONSUMERS  // a warp-specialized stage: CONSUMERS warpgroups compute, one more loads
#define WGS CONSUMERS
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536,
              "the warpgroups' registers must fit an SM's 65,536");
#endif
#ifndef WGS
#define WGS 2
#endif
#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP
#define GROUP 8
#endif

#include "common.cuh"
#include "hopper.cuh"
#include "wgmma_ss_ops.cuh"

#define A_KMAJOR (!TRANS_A)
#define B_KMAJOR (TRANS_B)
#if ELEM == 4 && !B_KMAJOR
#error "TF32 wgmma reads a shared B K-major only: build layout nt or tt (the launcher copies the others)"
#endif
#if ELEM == 1 && !(A_KMAJOR && B_KMAJOR)
#error "fp8 wgmma reads shared operands K-major only: build layout nt (the launcher copies the others)"
#endif
// TF32 with an M-major A: wgmma reads 32-bit shared operands K-major only, so A must go through
// registers, which only a kernel that loads it so does (A_REGS_LOOP: variants/persistent.cu)
#if ELEM == 4 && !A_KMAJOR && (SPLIT || !defined(A_REGS_LOOP))
#error "TF32 with an M-major A (layout tt) needs a kernel with A_REGS_LOOP (variants/persistent.cu); 3xTF32 reads A K-major"
#endif
#if SPLIT
#include "wgmma_ops.cuh"  // A from registers
#endif

constexpr int BM = 64 * WGS;
constexpr int BK = 128 / ELEM;            // elements of K per tile: one 128-byte line
constexpr int KSTEP = 32 / ELEM;           // elements of K per wgmma: 32 bytes (8, 16, 32)
constexpr int NSTEP = BK / KSTEP;          // wgmma per tile and warpgroup (4)
constexpr int A_BYTES = BM * 128;          // BM x BK, either way round
constexpr int B_BYTES = BN * 128;
constexpr int TMA_BYTES = A_BYTES + B_BYTES;  // what TMA writes into a slot per k-tile
constexpr int SLOT = TMA_BYTES + SPLIT * B_BYTES;  // 3xTF32: and the B tile's tails after it
constexpr int MN_CHUNK = BK * 128;         // one box of an M- or N-major tile: BK lines of 128 bytes
constexpr int MN_ELEMS = 128 / ELEM;       // its width: elements of M or N in a line
constexpr int ACC = BN / 2;                // accumulators per thread
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN must be 64, 128, 192 or 256");
static_assert(WGS >= 1 && WGS <= 3, "WGS must be 1, 2 or 3");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be 2..8");
static_assert(SLOT % 1024 == 0, "ring slots must stay 1024-byte aligned");

// The wgmma of one k-step: D (64 x BN) += A (64 x KSTEP) B (KSTEP x BN), both from shared memory.
__device__ __forceinline__ void mma_step(float* d, u64 a, u64 b) {
#if defined(PREC_TF32)
#define WG_CALL(n) wgmma_ss_tf32_n##n(d, a, b, 1)
#elif defined(PREC_BF16)
#define WG_CALL(n) wgmma_ss_bf16_n##n<!A_KMAJOR, !B_KMAJOR>(d, a, b, 1)
#elif defined(PREC_FP8)
#define WG_CALL(n) wgmma_ss_e4m3_n##n(d, a, b, 1)
#else
#define WG_CALL(n) wgmma_ss_f16_n##n<!A_KMAJOR, !B_KMAJOR>(d, a, b, 1)
#endif
    if constexpr (BN == 64) WG_CALL(64);
    else if constexpr (BN == 128) WG_CALL(128);
    else if constexpr (BN == 192) WG_CALL(192);
    else WG_CALL(256);
#undef WG_CALL
}

// Descriptors of warpgroup wg's A rows and of the B tile, for k-step s of the tile in `slot`.
__device__ __forceinline__ u64 a_desc(u32 slot, int wg, int s) {
#if A_KMAJOR
    return desc_kmajor(slot + wg * 64 * 128 + s * KSTEP * ELEM);
#else
    return desc_mnmajor(slot + wg * MN_CHUNK + s * KSTEP * 128, MN_CHUNK);
#endif
}
__device__ __forceinline__ u64 b_desc(u32 slot, int s) {
#if B_KMAJOR
    return desc_kmajor(slot + A_BYTES + s * KSTEP * ELEM);
#else
    return desc_mnmajor(slot + A_BYTES + s * KSTEP * 128, MN_CHUNK);
#endif
}

// Thread 0: A's part of a k-tile (from k0, rows from m0) into `slot`: one K-major box, or BM /
// MN_ELEMS M-major boxes. Every block loads its own A, clustered or not.
__device__ __forceinline__ void load_a(const TensorMap* ta, u32 slot, u32 bar, int k0, int m0) {
#if A_KMAJOR
    tma_load_2d(slot, ta, k0, m0, bar);
#else
#pragma unroll
    for (int c = 0; c < BM / MN_ELEMS; ++c)
        tma_load_2d(slot + c * MN_CHUNK, ta, m0 + MN_ELEMS * c, k0, bar);
#endif
}

// Thread 0: tile kt of A and B into `slot`, announced on `bar` (the whole boxes' bytes: TMA counts
// zero-filled elements too).
__device__ __forceinline__ void load_tile(const TensorMap* ta, const TensorMap* tb, u32 slot,
                                          u32 bar, int kt, int m0, int n0) {
    mbar_expect_tx(bar, TMA_BYTES);
    const int k0 = kt * BK;
    load_a(ta, slot, bar, k0, m0);
#if B_KMAJOR
    tma_load_2d(slot + A_BYTES, tb, k0, n0, bar);
#else
#pragma unroll
    for (int c = 0; c < BN / MN_ELEMS; ++c)
        tma_load_2d(slot + A_BYTES + c * MN_CHUNK, tb, n0 + MN_ELEMS * c, k0, bar);
#endif
}

// Thread 0, before anything else: the tensor maps' descriptors prefetched, and the ring's
// barriers initialised: full[s] completes when thread 0's one arrival and the slot's TMA bytes are
// in, empty[s] when `releases` arrivals (a consumer warp's each) say the slot was read.
__device__ __forceinline__ void init_ring(const TensorMap* ta, const TensorMap* tb, u32 full0,
                                          u32 empty0, int releases) {
    tma_prefetch(ta);
    tma_prefetch(tb);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, releases);
    }
    mbar_fence_init();
}

// A warpgroup's wgmma over the k-tile in `slot` (rows 64 wg .. of A), one commit group.
__device__ __forceinline__ void mma_tile(float* acc, u32 slot, int wg) {
    wg_fence();
#pragma unroll
    for (int j = 0; j < NSTEP; ++j) mma_step(acc, a_desc(slot, wg, j), b_desc(slot, j));
    wg_commit();
}

#if defined(PREC_FP8)
// fp8's per-tensor scales: C = scale_a * scale_b * (A @ B). Each consumer thread reads the two
// one-element float32 tensors once (before its first tile's k-loop) and multiplies its fp32
// accumulators by their product here, before the stores round them to bf16.
__device__ __forceinline__ void scale_acc(float* acc, float scale) {
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] *= scale;
}
#endif

// A warpgroup's 64 x BN accumulators into C (row-major, ldc), rows from m0 (its first row) and
// columns from n0, where they fall inside M x N. `warp` is the warp's index in its warpgroup.
// PAIRED: the accumulators of a wgmma whose register A paired its rows (variants/persistent.cu's
// a_frags_mn), rows 2 (lane / 4) and the next instead of lane / 4 and 8 below.
template <bool PAIRED = false>
__device__ __forceinline__ void store_acc(const float* acc, c_elem_t* __restrict__ C, int M, int N,
                                          long long ldc, int m0, int n0, int warp, int lane) {
    // Accumulator 4 j + {0, 1, 2, 3} of a thread: D(r, c), D(r, c+1), D(r+8, c), D(r+8, c+1) with
    // r = 16 (warp % 4) + lane / 4 in its warpgroup's 64 rows and c = 8 j + 2 (lane % 4) (PAIRED:
    // r = 16 (warp % 4) + 2 (lane / 4), and r + 1 for r + 8).
    constexpr int ROW_MUL = PAIRED ? 2 : 1, ROW_STEP = PAIRED ? 1 : 8;
    const int r = m0 + 16 * warp + ROW_MUL * (lane >> 2);
    const int cbase = n0 + 2 * (lane & 3);
    // a pair of adjacent elements is one aligned 2 x C_ELEM-byte store where C's base and ldc allow
    const bool pairs = (reinterpret_cast<u64>(C) % (2 * C_ELEM)) == 0 && ldc % 2 == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r + ROW_STEP * h;
        if (row >= M) continue;
        c_elem_t* line = C + row * ldc;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int c = cbase + 8 * j;
            const float x = acc[4 * j + 2 * h], y = acc[4 * j + 2 * h + 1];
#if C_ELEM == 4
            if (pairs && c + 1 < N) {
                *reinterpret_cast<float2*>(line + c) = make_float2(x, y);
            } else {
                if (c < N) line[c] = x;
                if (c + 1 < N) line[c + 1] = y;
            }
#else
#if defined(PREC_FP16)
            const u32 v = pack_f16(x, y);
#else  // bf16, and fp8's bf16 C
            const u32 v = pack_bf16(x, y);
#endif
            if (pairs && c + 1 < N) {
                *reinterpret_cast<u32*>(line + c) = v;
            } else {
                if (c < N) line[c] = static_cast<unsigned short>(v & 0xffffu);
                if (c + 1 < N) line[c + 1] = static_cast<unsigned short>(v >> 16);
            }
#endif
        }
    }
}

// ------------------------------------------------------------------------------ 3xTF32
// C = A_h B_h + A_h B_t + A_t B_h over fp32 A and B, each split into a TF32 head (x rounded to
// TF32) and tail (x minus its head, rounded), hopper.cuh's tf32_head / tf32_tail; the tails'
// product A_t B_t, 2^-22 of the whole, is left out. TMA lands A and B as they lie (fp32, 128-byte
// swizzled). The split is done in two places:
//   - B, the tile both consumer warpgroups read through its descriptor, by the producer
//     warpgroup's three idle warps (split_b): each 16-byte chunk is read, its head written back
//     in place and its tail at the same offset of the tail tile that follows B in the slot (the
//     same swizzle, so one descriptor base B_BYTES on reads it); then the slot's `ready` barrier.
//   - A, by each consumer warp into registers (a_frags_3x): wgmma takes A from registers
//     (wgmma_ops.cuh), so A's tails never go through shared memory and A is read from it once,
//     not three times.
// The tensor core's own accumulation over many k-steps loses accuracy (docs/stages/wgmma.md:
// 25x cuBLAS fp32's error at 4096^3), so every pair of k-tiles is summed afresh into `part` and
// added to the accumulators in fp32, as wgmma.cu's SUM_TILES = 2.
#if SPLIT
// Splitter thread t of n: every chunk t, t + n, ... of the B tile in `slot`, SPLIT_CHUNKS at a
// time: their loads are all issued before the first split and store, so their latencies overlap
// (the asm statements keep their written order in the PTX, and ptxas did not always move a
// load above a store of the chunk before: with one load, split and store after another the
// kernel ran 9% slower at 4096^3).
#ifndef SPLIT_CHUNKS
#define SPLIT_CHUNKS 4
#endif
__device__ __forceinline__ void split_b(u32 slot, int t, int n, u32 tiny_word) {
    constexpr int CH = B_BYTES / 16;
    // every warp runs the same number of q0 steps (CH and the step are multiples of 32), so the
    // warp is converged at the REDUX below
    static_assert(CH % 32 == 0 && (SPLIT_CHUNKS * 96) % 32 == 0, "a warp's trip count differs");
    const u32 b = slot + A_BYTES;
    u32 v = 0;  // the OR of the bits of every element this thread splits (TF32X3_SCALE)
    for (int q0 = t; q0 < CH; q0 += SPLIT_CHUNKS * n) {
        u32 x[SPLIT_CHUNKS][4];
#pragma unroll
        for (int u = 0; u < SPLIT_CHUNKS; ++u)
            if (q0 + u * n < CH)
                asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(x[u][0]), "=r"(x[u][1]), "=r"(x[u][2]), "=r"(x[u][3])
                             : "r"(b + 16 * (q0 + u * n)));
#pragma unroll
        for (int u = 0; u < SPLIT_CHUNKS; ++u) {
            const u32 at = b + 16 * (q0 + u * n);
            if (q0 + u * n >= CH) break;
            u32 h[4], l[4];
#if TF32X3_SCALE
            v = or3(or3(v, x[u][0], x[u][1]), x[u][2], x[u][3]);
#endif
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                h[j] = tf32_head(x[u][j]);
                l[j] = tf32_tail(x[u][j], h[j]);
            }
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(h[0]),
                         "r"(h[1]), "r"(h[2]), "r"(h[3]));
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at + B_BYTES),
                         "r"(l[0]), "r"(l[1]), "r"(l[2]), "r"(l[3]));
        }
    }
#if TF32X3_SCALE
    // The warp's OR (REDUX), written by lane 0 into the warp's word. Measured on an H200 in
    // 3xtf32 at 4096^3 (scripts/experiments/hopper_probe.py): every lane ORing each chunk into
    // the word (shared atomics to one address) made the kernel 42% slower, a REDUX and a read,
    // OR and write of the word per step 7-10% (and spilled), this 4-8%.
    u32 w;
    asm volatile("redux.sync.or.b32 %0, %1, 0xffffffff;\n" : "=r"(w) : "r"(v));
    if ((t & 31) == 0) asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tiny_word), "r"(w));
#else
    (void)v;
    (void)tiny_word;
#endif
}

#if TF32X3_SCALE
// Whether a slot's B tile is tiny (hopper.cuh's tiny_bits: every |b| below 2^-24): each
// splitting warp's OR of the bits it split, one word per warp and slot, written before the warp
// arrives on the slot's ready barrier and read by the consumers after they waited on it.
__shared__ u32 tiny_or[STAGES][3];
#endif

// A warp's 16 rows of A (rows 64 wg + 16 warp ..) for all NSTEP k-steps of the tile in `slot`, in
// the register order of wgmma's TF32 A operand (f[s] = A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4),
// g = lane / 4, t = lane % 4, k from 8 s): ldmatrix.x4 of 16 lines x 32 bytes, lane l naming line
// l % 16 at 16-byte chunk 2 s + l / 16, which the 128-byte swizzle moved to chunk ^ (line % 8).
// Where the tile's B is `tiny` (block-uniform), the fragments are first scaled by the warp's 2^k
// (hopper.cuh's tf32x3_scale; returns k, 0 otherwise). Then split: h the heads, l the tails.
__device__ __forceinline__ int a_frags_3x(u32 slot, int wg, int warp, int lane,
                                          u32 (&h)[NSTEP][4], u32 (&l)[NSTEP][4], bool tiny) {
    const int row = 64 * wg + 16 * warp + (lane & 15);
    const u32 line = slot + row * 128;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s) {
        const u32 chunk = (2 * s + (lane >> 4)) ^ (row & 7);
        ldsm_x4(line + (chunk << 4), h[s][0], h[s][1], h[s][2], h[s][3]);
    }
    const int k = tf32x3_scale(h, tiny);
#pragma unroll
    for (int s = 0; s < NSTEP; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const u32 x = h[s][r];
            h[s][r] = tf32_head(x);
            l[s][r] = tf32_tail(x, h[s][r]);
        }
    return k;
}

// The three products of one k-tile into `part`, smallest first, one commit group; `fresh` starts
// the sum afresh (the first wgmma overwrites part).
__device__ __forceinline__ void mma_tile_3x(float* part, u32 slot, const u32 (&h)[NSTEP][4],
                                            const u32 (&l)[NSTEP][4], bool fresh) {
    wg_fence();
#pragma unroll
    for (int s = 0; s < NSTEP; ++s) {
        const u64 bh = desc_kmajor(slot + A_BYTES + s * KSTEP * ELEM);
        const u64 bt = desc_kmajor(slot + A_BYTES + B_BYTES + s * KSTEP * ELEM);
#define WG_RS(n, a, b, sd) wgmma_tf32_n##n(part, a[0], a[1], a[2], a[3], b, sd)
#define WG_3(n)                                  \
    WG_RS(n, l[s], bh, s > 0 || !fresh);         \
    WG_RS(n, h[s], bt, 1);                       \
    WG_RS(n, h[s], bh, 1)
        if constexpr (BN == 64) { WG_3(64); }
        else if constexpr (BN == 128) { WG_3(128); }
        else if constexpr (BN == 192) { WG_3(192); }
        else { WG_3(256); }
#undef WG_3
#undef WG_RS
    }
    wg_commit();
}

// The splitters (the producer warpgroup's warps 1-3; t = thread index among their 96): the B
// tiles of the block's ring iterations 0 .. n-1 in turn, each once its TMA bytes landed (full),
// announced on the slot's ready barrier (one arrival per warp), with the warp's word of tiny_or.
// Before a warp rewrites its word of a slot it waits, as the producer did before refilling the
// slot, for the slot's previous round to be released (empty): the consumers read the word before
// they release the slot. The wait has passed already (the TMA bytes that landed were issued after
// it); it states the order in barriers the consumers arrive on.
__device__ __forceinline__ void split_ring(u32 ring, u32 full0, u32 empty0, u32 ready0, int n,
                                           int t) {
    for (int it = 0; it < n; ++it) {
        const int s = it % STAGES;
        mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
#if TF32X3_SCALE  // lane 0 rewrites the warp's word at the end of split_b
        const u32 word = smem_u32(&tiny_or[s][t >> 5]);
        if ((t & 31) == 0 && it >= STAGES) mbar_wait(empty0 + 8 * s, ((it / STAGES) - 1) & 1);
#else
        const u32 word = 0;
        (void)empty0;
#endif
        split_b(ring + s * SLOT, t, 96, word);
        fence_async_smem();  // the st.shared seen by wgmma (the async proxy)
        __syncwarp();
        if ((t & 31) == 0) mbar_arrive(ready0 + 8 * s);
    }
}

// A consumer warpgroup's whole k-loop of one output tile, ring iterations it .. it + KT - 1, into
// acc (zeroed first): k-tile kt (even) starts a pair, kt + 1 ends it. A's heads and tails sit in
// two register sets by k-tile parity, since wgmma reads its register operand asynchronously: a set
// is loaded again only after the wgmma that read it were waited for. The next k-tile's A is
// loaded and split while this one's wgmma run; the pair's sum is waited for and added at its end.
// Subnormal products (TF32X3_SCALE, hopper.cuh): a pair of which either k-tile's B is tiny is
// summed k-tile by k-tile, each sum times the warp's 2^-k of its A (one FFMA, as exact as the FADD
// it replaces; k = 0 elsewhere, the same bits as before). `release(s)` frees slot s. Returns the
// next iteration.
template <class Release>
__device__ __forceinline__ int mma_tile_loop_3x(float* acc, u32 ring, u32 ready0, int it, int KT,
                                                int wg, int warp, int lane, Release release) {
    float part[ACC];
    u32 ah[2][NSTEP][4], at[2][NSTEP][4];
    bool tiny0 = false, tiny1 = false;  // whether set 0's / set 1's k-tile has a tiny B
    int k0 = 0, k1 = 0;                 // the warp's scale 2^k of set 0's / set 1's A
    auto prep = [&](int i, u32(&h)[NSTEP][4], u32(&l)[NSTEP][4], bool& tiny, int& k) {
        const int s = i % STAGES;
        mbar_wait(ready0 + 8 * s, (i / STAGES) & 1);
#if TF32X3_SCALE  // read by lane 0, which later releases the slot, and passed to the warp
        u32 bits = 0;
        if (lane == 0) bits = or3(tiny_or[s][0], tiny_or[s][1], tiny_or[s][2]);
        tiny = tiny_bits(__shfl_sync(0xffffffffu, bits, 0));
#endif
        k = a_frags_3x(ring + s * SLOT, wg, warp, lane, h, l, tiny);
    };
    auto add_part = [&](int k) {
        const float down = exp2_int(-k);
#pragma unroll
        for (int i = 0; i < ACC; ++i) {
            reg_fence(part[i]);
            acc[i] = TF32X3_SCALE ? fmaf(part[i], down, acc[i]) : acc[i] + part[i];
        }
    };
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    if (KT > 0) prep(it, ah[0], at[0], tiny0, k0);
    for (int kt = 0; kt < KT; kt += 2) {
        mma_tile_3x(part, ring + (it % STAGES) * SLOT, ah[0], at[0], true);
        if (kt + 1 == KT) {  // a last k-tile without a pair
            wg_wait<0>();
            add_part(k0);
            release(it % STAGES);
            return it + 1;
        }
        prep(it + 1, ah[1], at[1], tiny1, k1);  // set 1's wgmma (the last pair's end) were waited for
        ++it;
        const bool alone = TF32X3_SCALE && (tiny0 || tiny1);  // block-uniform
        if (alone) {  // the pair's first k-tile summed alone, the second afresh
            wg_wait<0>();
            add_part(k0);
        }
        mma_tile_3x(part, ring + (it % STAGES) * SLOT, ah[1], at[1], alone);
        wg_wait<1>();  // the pair's first k-tile is done: its slot, and set 0, are free
        release((it - 1) % STAGES);
        if (kt + 2 < KT) prep(it + 1, ah[0], at[0], tiny0, k0);
        wg_wait<0>();
        add_part(alone ? k1 : 0);
        release(it % STAGES);
        ++it;
    }
    return it;
}
#endif
