// Variant of ../persistent.cu: the same persistent kernel (matmul_persistent) for every build the
// launcher makes that is not persistent.cu's lesson case. cuda_kernels/persistent.py's
// lesson_case and cuda_kernels/_tma.py HopperStage.build choose the file: persistent.cu where one
// block per cluster stores C from registers and A is read from shared memory; this file for
//   - clusters (CLUSTER = 2): two blocks on neighbouring SMs take two tiles down M with the same
//     columns; each loads half of the shared B tile and multicasts it into both (TMA
//     .multicast::cluster), so a block reads 16 + 16 KiB from L2 per k-tile instead of 16 + 32.
//     A consumer releases a slot in both blocks (a remote mbarrier arrive), since the peer's
//     multicast writes it too (load_tile_multicast below; docs/stages/persistent.md, "Variant:
//     clusters of two blocks sharing B").
//   - the epilogue through shared memory and TMA stores (TMA_STORE = 1, the launcher's default
//     where C's lines are 16-byte aligned or go through an aligned buffer): store_acc_tma below
//     ("Variant: C through TMA stores").
//   - TF32 with an M-major A (A_REGS: layouts tt, and nn as C^T = B^T A^T, C_TRANS): A's fragments
//     from the landed TMA tile into registers and the register-A wgmma (a_frags_mn, mma_tile_rs,
//     store_acc_t below; "Variant: TF32 without a copy").
//   - fp8 with row-wise or block-wise scales (SCALE_ROW, SCALE_BLOCK beside PREC_FP8; precisions
//     fp8_row and fp8_block): row scales multiply the accumulators in the epilogue
//     (scale_rows_cols); block scales promote each k-tile's product into the fp32 sum
//     (mma_tile_fresh, then the consumer's loop; docs/stages/persistent.md, "fp8 with row-wise and
//     block-wise scales").
//   - split-K (SPLITK = 1; the row's SPLITK knob, 2 or more splits): few output tiles and a long
//     K (a 256 x 2304 layer with K = 16384 is 18 tiles of 128 x 256 for 132 SMs), so each tile's
//     k-tiles are cut into `splits` contiguous ranges, a work unit is a (tile, range) pair, and
//     the blocks walk units instead of tiles. A unit's fp32 sum goes to its slab of a workspace
//     (store_ws below), and a second kernel (cuda_kernels/splitk_reduce.cu) adds the slabs in a
//     fixed order and rounds C ("Variant: split-K for few tiles").
//   - stream-K (STREAMK = 1; the row's STREAMK knob): the tiles' k-tiles, T x KT of them in walk
//     order, cut into one contiguous range per block (range i is [i W / G, (i + 1) W / G) of the
//     W = T x KT, G blocks), so every SM gets the same work however T divides among the SMs (172
//     tiles on 132 SMs are two rounds, 1.3 tiles' work a block). A block's range covers the end
//     of one tile, whole tiles and the start of another: a whole tile's C is stored directly, a
//     part's fp32 sum goes to slab j of the workspace (j: its place among the tile's parts), and
//     splitk_reduce.cu (STREAMK) adds a tile's parts in a fixed order and rounds C ("Variant:
//     stream-K for wave-quantized layers"). The first (T / G) G tiles are not cut at all: they
//     run whole, G at a time, and only the rest are cut into ranges.
// Each is a define the launcher sets. With all of them off this is persistent.cu's kernel (the walk
// written as tile_of over cluster tiles, WALK), and its builds of that case are persistent.cu's
// instruction for instruction (tests/test_lessons_hopper.py). Read persistent.cu first: its header
// describes the tile walk, the ring across tiles and the launch. This file is the former
// persistent.cu (before the lesson was split out), with the pieces of tma_tiles.cuh only it used.
//
// Launch geometry (cuda_kernels/persistent.py): a 1-D grid of CLUSTER * min(cluster tiles, the
// clusters the GPU holds at once) blocks in clusters of CLUSTER, BM = 64 * CONSUMERS,
// 128 * (CONSUMERS + 1) threads, STAGES ring slots plus (TMA_STORE) 16 KiB of staging per
// consumer warpgroup of dynamic shared memory, plus 1 KiB, one block per SM.

#ifndef CONSUMERS
#define CONSUMERS 2
#endif
#if CONSUMERS == 3 && !defined(PRODUCER_REGS)  // 512 threads: 24 + 3 x 160 registers per lane
#define PRODUCER_REGS 24
#define CONSUMER_REGS 160
#endif
#ifndef CLUSTER
#define CLUSTER 2
#endif
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
#ifndef TMA_STORE
#define TMA_STORE 1
#endif

#define A_REGS_LOOP 1  // this kernel takes TF32 with an M-major A through registers (A_REGS)
#include "tma_tiles.cuh"

// fp8 with row-wise or block-wise scales (SCALE_ROW / SCALE_BLOCK beside PREC_FP8; precisions
// fp8_row and fp8_block, docs/stages/persistent.md "fp8 with row-wise and block-wise scales").
// The kernel takes the scale tensors' strides after the two scale pointers.
#if defined(SCALE_ROW) || defined(SCALE_BLOCK)
#if !defined(PREC_FP8)
#error "SCALE_ROW and SCALE_BLOCK scale fp8 operands (PREC_FP8)"
#endif
#define SCALES_STRIDED 1
#else
#define SCALES_STRIDED 0
#endif
#if defined(SCALE_BLOCK)
// SCALE_TMA (a build switch, off by default): the producer copies each k-tile's BM scales of A
// (M-major and 16-byte aligned, M a multiple of 4: the launcher builds it only then) into a small
// ring beside the operands' with one bulk copy announced on the slot's barrier, and the consumers
// read them from shared memory instead of loading them from global memory ahead of time
#ifndef SCALE_TMA
#define SCALE_TMA 0
#endif
#if SCALE_TMA
// the slot barrier's expected bytes raised without an arrival (the producer's one arrival is
// load_tile's arrive.expect_tx, issued after this)
__device__ __forceinline__ void mbar_expect_tx_only(u32 bar, u32 bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
            "r"(dst),
        "l"(reinterpret_cast<u64>(src)), "r"(bytes), "r"(bar)
        : "memory");
}
__device__ __forceinline__ float lds_f32(u32 addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
#endif
#ifndef SCALE_AHEAD
#define SCALE_AHEAD 2  // k-tiles ahead that fp8_block loads its scales (at least 1)
#endif
static_assert(SCALE_AHEAD >= 1 && SCALE_AHEAD <= 8, "SCALE_AHEAD must be 1..8");
static_assert(BN == 64 || BN == 128, "fp8_block: a tile lies in one 128-column scale block of B");
static_assert(BK == 128, "fp8_block: a k-tile is one 128-long scale block of K");
// fp8_block: a warpgroup's k-tile product alone in `part` (its first wgmma overwrites D,
// scale-d 0), one commit group; the caller scales it into the accumulators (promotion). `da`, `db`:
// the low words of the descriptors of the k-tile's first k-step (a_desc, b_desc: their high words
// are the same constant, K-major with the 128-byte swizzle); a k-step starts 32 bytes on, 2 in the
// address field, so the loop adds small numbers instead of building each descriptor
constexpr u64 DESC_HI = (static_cast<u64>(1024 >> 4) << 32) | (static_cast<u64>(1) << 62);  // hopper.cuh's gmma_desc
__device__ __forceinline__ void mma_tile_fresh(float* part, u32 da, u32 db) {
    wg_fence();
#pragma unroll
    for (int j = 0; j < NSTEP; ++j) {
        const u64 a = DESC_HI | (da + 2 * j), b = DESC_HI | (db + 2 * j);
        if constexpr (BN == 64)
            wgmma_ss_e4m3_n64(part, a, b, j > 0);
        else
            wgmma_ss_e4m3_n128(part, a, b, j > 0);
    }
    wg_commit();
}
#endif
#if defined(SCALE_ROW)
// fp8_row: a warpgroup's 64 x BN accumulators (rows from m0, columns from n0) times A's scale of
// their row and B's of their column (store_acc's register order), before C is rounded
__device__ __forceinline__ void scale_rows_cols(float* acc, const float* __restrict__ sa,
                                                const float* __restrict__ sb, long long sa0,
                                                long long sb1, int M, int N, int m0, int n0,
                                                int warp, int lane) {
    const int r = m0 + 16 * warp + (lane >> 2);
    const float a0 = r < M ? sa[r * sa0] : 0.f, a1 = r + 8 < M ? sa[(r + 8) * sa0] : 0.f;
    const int cbase = n0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int c = cbase + 8 * j;
        const float b0 = c < N ? sb[c * sb1] : 0.f, b1 = c + 1 < N ? sb[(c + 1) * sb1] : 0.f;
        acc[4 * j] *= a0 * b0;
        acc[4 * j + 1] *= a0 * b1;
        acc[4 * j + 2] *= a1 * b0;
        acc[4 * j + 3] *= a1 * b1;
    }
}
#endif

// TF32 with A M-major (A_REGS): wgmma reads 32-bit shared operands K-major only, so A goes through
// registers instead (a_frags_mn, mma_tile_rs): layouts tt, and nn run as C^T = B^T A^T (C_TRANS:
// the launcher swaps the operands, the kernel stores D transposed).
#define A_REGS (ELEM == 4 && !A_KMAJOR)
#ifndef C_TRANS
#define C_TRANS 0
#endif
#if C_TRANS && (TMA_STORE || !A_REGS)
#error "C_TRANS (D = C^T) is the register-A TF32 build's, stored from registers (TMA_STORE=0)"
#endif
#if A_REGS
#include "wgmma_ops.cuh"  // A from registers
#endif
#ifndef SPLITK
#define SPLITK 0
#endif
#if SPLITK && (SPLIT || A_REGS || SCALES_STRIDED || TMA_STORE || C_TRANS)
#error "SPLITK: bf16, fp16 and per-tensor fp8 (and TF32 with a K-major A), C from registers (TMA_STORE=0)"
#endif
#ifndef STREAMK
#define STREAMK 0
#endif
#if STREAMK && (SPLITK || SPLIT || A_REGS || SCALES_STRIDED || C_TRANS || CLUSTER != 1)
#error "STREAMK: bf16, fp16 and per-tensor fp8, one block per cluster"
#endif
// A thread's accumulator rows in its warp's 16: ROW_MUL * (lane / 4) and ROW_STEP below that;
// a register A with paired rows (a_frags_mn) makes them 2 (lane / 4) and the next row
constexpr int ROW_MUL = A_REGS ? 2 : 1, ROW_STEP = A_REGS ? 1 : 8;

// Output tile t of a grid_m x grid_n grid of tiles, in grouped order: GROUP tile-rows walked
// column by column, so the tiles in flight at one time share GROUP block-rows of A and a few
// block-columns of B in L2 (common.cuh's block_tile, for a tile index that is not blockIdx.x).
__device__ __forceinline__ void tile_of(int t, int grid_m, int grid_n, int& bm, int& bn) {
    const int width = GROUP * grid_n;
    const int first_m = (t / width) * GROUP;
    const int rows = min(grid_m - first_m, GROUP);
    const int in_group = t - (t / width) * width;
    bm = first_m + in_group % rows;
    bn = in_group / rows;
}

// load_tile for a block of a cluster of CLUSTER blocks that take CLUSTER neighbouring tiles down
// M with the same columns: A as before, and 1 / CLUSTER of the shared B tile, multicast into
// every block (K-major B: a box of BN / CLUSTER lines; N-major: BN / 64 / CLUSTER of its boxes).
// Each block's barrier still expects the whole slot: its own A and every block's part of B.
template <int CL>
__device__ __forceinline__ void load_tile_multicast(const TensorMap* ta, const TensorMap* tb,
                                                    u32 slot, u32 bar, int kt, int m0, int n0,
                                                    int rank) {
    static_assert(B_KMAJOR || (BN / 64) % CL == 0, "N-major B: BN / 64 boxes per block must split");
    mbar_expect_tx(bar, TMA_BYTES);
    const int k0 = kt * BK;
    const unsigned short mask = (1u << CL) - 1;
    load_a(ta, slot, bar, k0, m0);
#if B_KMAJOR
    constexpr int PART = BN / CL;
    tma_load_2d_multicast(slot + A_BYTES + rank * PART * 128, tb, k0, n0 + rank * PART, bar, mask);
#else
    constexpr int PART = BN / 64 / CL;
#pragma unroll
    for (int c = rank * PART; c < (rank + 1) * PART; ++c)
        tma_load_2d_multicast(slot + A_BYTES + c * MN_CHUNK, tb, n0 + 64 * c, k0, bar, mask);
#endif
}

// init_ring (tma_tiles.cuh) with C's tensor map prefetched too, where C goes out through TMA stores
__device__ __forceinline__ void init_ring_c(const TensorMap* ta, const TensorMap* tb, u32 full0,
                                            u32 empty0, int releases, const TensorMap* tc) {
    tma_prefetch(ta);
    tma_prefetch(tb);
    tma_prefetch(tc);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, releases);
    }
    mbar_fence_init();
}

#if A_REGS
// ------------------------------------------------------------------------------ TF32, A M-major
// A warp's 16 rows of an M-major A tile (TMA boxes of MN_ELEMS = 32 rows x BK k-lines, 128-byte
// swizzled) for all NSTEP k-steps, in wgmma's TF32 A register order, rounded to nearest TF32 (B
// is read by the tensor core as it lies: truncated). The warp's rows are paired (wgmma.cu's
// ROWPAIR): the fragment rows g and g + 8 hold rows 2g and 2g + 1, adjacent in memory, so each
// register pair is one 8-byte LDS (k = 8 s + t, then + 4; t = lane % 4) instead of two 4-byte
// ones; D's rows come out in the same order (store_acc_t). Bank conflicts: the 32 lanes' 8-byte
// loads cover 16 banks (the swizzle spreads 4 k-lines over 4 chunks), 4 wavefronts against 2.
__device__ __forceinline__ void a_frags_mn(u32 slot, int wg, int warp, int lane,
                                           u32 (&f)[NSTEP][4]) {
    const int m = 64 * wg + 16 * warp + 2 * (lane >> 2);  // the pair m, m + 1
    const u32 box = slot + (m / MN_ELEMS) * MN_CHUNK;
    const int mm = m % MN_ELEMS, chunk = mm / 4, t = lane & 3;
    const u32 in_chunk = (mm % 4) * ELEM;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int k = KSTEP * s + t + 4 * h;
            const u32 at = box + k * 128 + ((chunk ^ (k & 7)) << 4) + in_chunk;
            asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                         : "=r"(f[s][2 * h]), "=r"(f[s][2 * h + 1])
                         : "r"(at));
        }
#pragma unroll
    for (int s = 0; s < NSTEP; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) f[s][r] = tf32_rn(f[s][r]);
}

// A warpgroup's wgmma over the k-tile in `slot` with A from registers `f`, one commit group.
__device__ __forceinline__ void mma_tile_rs(float* acc, u32 slot, const u32 (&f)[NSTEP][4]) {
    wg_fence();
#pragma unroll
    for (int s = 0; s < NSTEP; ++s) {
        const u64 b = b_desc(slot, s);
        if constexpr (BN == 64) wgmma_tf32_n64(acc, f[s][0], f[s][1], f[s][2], f[s][3], b, 1);
        else if constexpr (BN == 128) wgmma_tf32_n128(acc, f[s][0], f[s][1], f[s][2], f[s][3], b, 1);
        else if constexpr (BN == 192) wgmma_tf32_n192(acc, f[s][0], f[s][1], f[s][2], f[s][3], b, 1);
        else wgmma_tf32_n256(acc, f[s][0], f[s][1], f[s][2], f[s][3], b, 1);
    }
    wg_commit();
}

// A warpgroup's 64 x BN accumulators of D = C^T (rows paired as a_frags_mn loaded them) into C
// (row-major, ldc): D(r, c) is C(c, r). D's rows are C's columns, so a thread's pair of rows r,
// r + 1 is one 8-byte store into C's line c (a warp's store: 4 lines x 64 bytes, whole sectors).
// Rows from m0 and columns from n0 of D, where they fall inside D's Md x Nd.
__device__ __forceinline__ void store_acc_t(const float* acc, float* __restrict__ C, int Md, int Nd,
                                            long long ldc, int m0, int n0, int warp, int lane) {
    const int r = m0 + 16 * warp + ROW_MUL * (lane >> 2);  // and r + ROW_STEP = r + 1
    const int cbase = n0 + 2 * (lane & 3);
    const bool pairs = (reinterpret_cast<u64>(C) % 8) == 0 && ldc % 2 == 0 && r + 1 < Md;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // D's columns c and c + 1: C's lines
            const int c = cbase + 8 * j + h;
            if (c >= Nd || r >= Md) continue;
            float* at = C + static_cast<long long>(c) * ldc + r;
            const float x = acc[4 * j + h], y = acc[4 * j + 2 + h];  // D(r, c), D(r + 1, c)
            if (pairs)
                *reinterpret_cast<float2*>(at) = make_float2(x, y);
            else {
                at[0] = x;
                if (r + 1 < Md) at[1] = y;
            }
        }
}
#endif


// ------------------------------------------------------------------------------ TMA store of C
// The epilogue through shared memory: a warpgroup writes its 64 x BN accumulators, rounded to C's
// type, into a 128-byte-swizzled staging chunk of 64 rows x 128 bytes (64 bf16/fp16 or 32 fp32
// columns; fp8's C is bf16: C_ELEM) with st.shared (the swizzle spreads a warp's eight rows over
// distinct banks), and one thread stores the chunk with a TMA store (cp.async.bulk.tensor), which
// clips rows and columns beyond M and N. Two 8 KiB staging buffers per warpgroup alternate: a
// buffer is written again only after the TMA store of two chunks before has read it (bulk
// wait_group.read 1, then the warpgroup's named barrier). The warpgroup's first warp issues the
// stores and waits (one lane of it, elected: hopper.cuh's tma_store_2d_warp). The stores then
// leave the SM while the warpgroup goes on to the next chunk and the next tile's wgmma, instead of
// 64 scattered 4-byte global stores per thread.
constexpr int C_COLS = 128 / C_ELEM;            // columns of C in one staging chunk
constexpr int C_CHUNKS = BN / C_COLS;           // chunks per warpgroup tile
constexpr int C_STAGE_BYTES = 2 * 64 * 128;     // a warpgroup's two staging buffers

__device__ __forceinline__ void store_acc_tma(const float* acc, const TensorMap* tc, u32 stage,
                                              int m0, int n0, int warp, int lane, int barrier_id) {
    const int r = 16 * warp + ROW_MUL * (lane >> 2);  // this thread's rows r and r + ROW_STEP
#pragma unroll
    for (int k = 0; k < C_CHUNKS; ++k) {
        const u32 buf = stage + (k & 1) * (64 * 128);
        // the store that last read this buffer, two commits ago (this tile's chunk k - 2 or the
        // previous tile's last two), must be done reading it
        if (warp == 0) bulk_wait_read_warp<1>();
        named_barrier(barrier_id, 128);
#pragma unroll
        for (int jj = 0; jj < C_COLS / 8; ++jj) {
            const int j = k * (C_COLS / 8) + jj;        // accumulator group: columns 8 j ..
            const int c = 8 * jj + 2 * (lane & 3);      // column within the chunk
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r + ROW_STEP * h;
                const u32 byte = c * C_ELEM;
                const u32 at = buf + row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15));
                const float x = acc[4 * j + 2 * h], y = acc[4 * j + 2 * h + 1];
#if C_ELEM == 4
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(x), "f"(y)
                             : "memory");
#elif defined(PREC_FP16)
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pack_f16(x, y))
                             : "memory");
#else  // bf16, and fp8's bf16 C
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pack_bf16(x, y))
                             : "memory");
#endif
            }
        }
        fence_async_smem();
        named_barrier(barrier_id, 128);
        if (warp == 0) tma_store_2d_warp(tc, n0 + k * C_COLS, m0, buf);
    }
}


#if SPLITK || STREAMK
// ------------------------------------------------------------------------------ split-K
// A warpgroup's 64 x BN fp32 partial sums into its unit's slab of the workspace (rows of ldw
// floats, ldw a multiple of 4, the slab's base 16-byte aligned), rows from m0 and columns from
// n0 where they fall inside M x N: each accumulator pair is one aligned 8-byte store.
__device__ __forceinline__ void store_ws(const float* acc, float* __restrict__ W, int M, int N,
                                         long long ldw, int m0, int n0, int warp, int lane) {
    const int r = m0 + 16 * warp + (lane >> 2);
    const int cbase = n0 + 2 * (lane & 3);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r + 8 * h;
        if (row >= M) continue;
        float* line = W + row * ldw;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int c = cbase + 8 * j;  // even; ldw a multiple of 4: c + 1 < ldw
            if (c < N)
                *reinterpret_cast<float2*>(line + c) =
                    make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}
#endif

constexpr int THREADS = 128 * (CONSUMERS + 1);

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_persistent(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
#if TMA_STORE
                      const __grid_constant__ TensorMap tma_c,
#else
                      c_elem_t* __restrict__ C,
#endif
                      int M, int N, int K, long long ldc
#if defined(PREC_FP8)
                      , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#endif
#if SCALES_STRIDED
                      , long long sa_s0, long long sa_s1, long long sb_s0, long long sb_s1
#endif
#if SPLITK || STREAMK  // the workspace: `splits` slabs of M rows of ldw floats
                      , float* __restrict__ W, long long ldw, int splits
#endif
                      ) {
    extern __shared__ unsigned char smem_raw[];
    // full[0..STAGES), empty[STAGES..2 STAGES), 3xTF32's ready[2 STAGES..3 STAGES)
    __shared__ alignas(8) u64 bars[(2 + SPLIT) * STAGES];
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
#if defined(SCALE_BLOCK) && SCALE_TMA  // A's scales, BM floats per slot, after C's staging
    const u32 scale_ring = ring + STAGES * SLOT + (TMA_STORE ? CONSUMERS * C_STAGE_BYTES : 0);
#endif
    const u32 full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[STAGES]);
    // the barrier the consumers wait on: the TMA bytes landed (full), or (3xTF32) B split as well
    const u32 ready0 = SPLIT ? smem_u32(&bars[2 * STAGES]) : full0;

    // CLUSTER blocks take CLUSTER neighbouring tiles down M with the same columns: a cluster
    // tile is (BM * CLUSTER) x BN, and the clusters walk those in grouped order. Each role works
    // out the grid itself after its setmaxnreg (WALK): ptxas keeps a value that lives across
    // setmaxnreg in local memory (3xTF32's build spilled grid_m and tiles so).
#if SPLITK  // a "tile" of the walk is a unit: tile t % cells, k-tiles of range t / cells
#define WALK                                                               \
    const int grid_m = CEIL_DIV(M, BM * CLUSTER), grid_n = CEIL_DIV(N, BN); \
    const int cells = grid_m * grid_n, tiles = cells * splits;              \
    const int KT = CEIL_DIV(K, BK)
    // unit t: its tile (bm, bn), split sp and k-tiles KT0 .. KT1 - 1 (ranges of KT / splits or
    // one more; the launcher keeps splits <= KT, so none is empty)
#define UNIT                                                               \
    const int sp = t / cells;                                               \
    tile_of(t - sp * cells, grid_m, grid_n, bm, bn);                        \
    const int KT0 = sp * KT / splits, KT1 = (sp + 1) * KT / splits
#elif STREAMK
    // the first DP = (T / G) G tiles whole, tile i, i + G, ... in block i (as without STREAMK);
    // the other T - DP tiles' k-iterations, W = (T - DP) KT, cut into one range per block for
    // the first GS = min(G, W) blocks: block i's are x0 .. x1 - 1, x0 = i W / GS (counted from
    // the first tile after DP). `first` and `tiles`: the block's first tile and one past its
    // last; NEXT_TILE: the one after t (the next whole tile, or the range's tiles in order)
#define WALK                                                                      \
    const int grid_m = CEIL_DIV(M, BM), grid_n = CEIL_DIV(N, BN);                 \
    const int KT = CEIL_DIV(K, BK), G = static_cast<int>(gridDim.x);              \
    const int dp = grid_m * grid_n / G * G;                                       \
    const long long work = static_cast<long long>(grid_m * grid_n - dp) * KT;     \
    const int gs = static_cast<int>(work < G ? work : G);                         \
    const int me = static_cast<int>(blockIdx.x);                                  \
    const long long x0 = me < gs ? me * work / gs : 0;                            \
    const long long x1 = me < gs ? (me + 1) * work / gs : 0;                      \
    const int sk0 = me < gs ? dp + static_cast<int>(x0 / KT) : grid_m * grid_n;   \
    const int tiles = me < gs ? dp + static_cast<int>((x1 - 1) / KT) + 1 : grid_m * grid_n; \
    const int first = me < dp ? me : sk0
#define NEXT_TILE(t) ((t) < dp ? ((t) + G < dp ? (t) + G : sk0) : (t) + 1)
    // tile t's k-tiles in this block: all of a whole tile, or its part of the range
#define UNIT                                                                      \
    tile_of(t, grid_m, grid_n, bm, bn);                                           \
    const long long tk = static_cast<long long>(t - dp) * KT;                     \
    const int KT0 = static_cast<int>(t < dp || x0 <= tk ? 0 : x0 - tk);           \
    const int KT1 = static_cast<int>(t < dp || x1 - tk >= KT ? KT : x1 - tk)
#else
#define WALK                                                               \
    const int grid_m = CEIL_DIV(M, BM * CLUSTER), grid_n = CEIL_DIV(N, BN); \
    const int tiles = grid_m * grid_n;                                      \
    const int KT = CEIL_DIV(K, BK)
#define UNIT tile_of(t, grid_m, grid_n, bm, bn)
#define KT0 0
#define KT1 KT
#endif
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    const int rank = CLUSTER > 1 ? static_cast<int>(cluster_rank()) : 0;
#if !STREAMK  // (STREAMK: WALK gives the first tile, NEXT_TILE the next)
    const int first = blockIdx.x / CLUSTER, stride = gridDim.x / CLUSTER;
#define NEXT_TILE(t) ((t) + stride)
#endif

#if SPLIT  // one arrival per splitting warp (the producer's warps 1-3)
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) mbar_init(ready0 + 8 * s, 3);
#endif
    // one arrival per consumer warp of every block whose loads land here (init_ring's fence
    // covers the ready barriers too)
#if TMA_STORE
    if (threadIdx.x == 0) init_ring_c(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS * CLUSTER, &tma_c);
#else
    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS * CLUSTER);
#endif
    if (CLUSTER > 1)
        cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {  // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        WALK;
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = first; t < tiles; t = NEXT_TILE(t)) {
                int bm, bn;
                UNIT;
                const int m0 = (bm * CLUSTER + rank) * BM, n0 = bn * BN;
                for (int kt = KT0; kt < KT1; ++kt, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(empty0 + 8 * s, ((it / STAGES) - 1) & 1);
#if defined(SCALE_BLOCK) && SCALE_TMA
                    if (m0 < M) {  // A's scales of rows m0 .. of this k-tile, before the tile
                        const int bytes = 4 * min(BM, M - m0);
                        mbar_expect_tx_only(full0 + 8 * s, bytes);
                        bulk_load(scale_ring + s * (4 * BM), scale_a + kt * sa_s1 + m0, bytes,
                                  full0 + 8 * s);
                    }
#endif
                    if (CLUSTER > 1)
                        load_tile_multicast<CLUSTER>(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s,
                                                     kt, m0, n0, rank);
                    else
                        load_tile(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s, kt, m0, n0);
                }
            }
        }
#if SPLIT
        else if (warp > 0) {  // the splitters: each landed B tile into heads and tails
            const int mine = first < tiles ? (tiles - first + stride - 1) / stride : 0;
            split_ring(ring, full0, empty0, ready0, mine * KT, threadIdx.x - 32);
        }
#endif
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        WALK;
        const int cw = wg - 1;  // this consumer's warpgroup: rows 64 cw .. of each tile
#if defined(PREC_FP8) && !SCALES_STRIDED
        const float scale = *scale_a * *scale_b;  // C = scale_a * scale_b * (A @ B)
#endif
        // a slot is free once the consumers of every block its loads land in have released it
        auto release = [&](int s) {
            if (lane != 0) return;
            if (CLUSTER > 1) {
#pragma unroll
                for (int c = 0; c < CLUSTER; ++c) mbar_arrive_cluster(empty0 + 8 * s, c);
            } else {
                mbar_arrive(empty0 + 8 * s);
            }
        };
        float acc[ACC];
#if defined(SCALE_BLOCK)
        // slot 0's descriptors of this warpgroup's A rows and of the B tile; slot s adds
        // s * SLOT / 16 (the shuffle tells ptxas the warpgroup is the same in every lane)
        const int cwu = __shfl_sync(0xffffffffu, cw, 0);
        const u32 da0 = static_cast<u32>(a_desc(ring, cwu, 0)), db0 = static_cast<u32>(b_desc(ring, 0));
        float part[ACC];  // fp8_block: a k-tile's product before its promotion
#pragma unroll
        for (int i = 0; i < ACC; ++i) part[i] = 0.f;
#endif
#if A_REGS
        u32 fa[2][NSTEP][4];
#endif
        int it = 0;
        for (int t = first; t < tiles; t = NEXT_TILE(t)) {
            int bm, bn;
            UNIT;
#if SPLIT  // 3xTF32: tma_tiles.cuh's split3x
            it = mma_tile_loop_3x(acc, ring, ready0, it, KT, cw, warp, lane, release);
#elif A_REGS
            // TF32, A M-major: A's fragments from each landed slot into registers, two sets by
            // k-tile parity (wgmma reads them asynchronously; a set is loaded again only after
            // wgmma.wait_group 1 said the k-tile that read it finished)
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
            auto step = [&](int kt, u32(&f)[NSTEP][4]) {
                const int s = it % STAGES;
                mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
                a_frags_mn(ring + s * SLOT, cw, warp, lane, f);
                mma_tile_rs(acc, ring + s * SLOT, f);
                wg_wait<1>();
                if (kt > 0) release((it - 1) % STAGES);
                ++it;
            };
            for (int kt = 0; kt < KT; kt += 2) {
                step(kt, fa[0]);
                if (kt + 1 < KT) step(kt + 1, fa[1]);
            }
            wg_wait<0>();
            release((it - 1) % STAGES);
#elif defined(SCALE_BLOCK)
            // fp8_block: each k-tile's product alone in `part`, waited for, then scaled by its
            // rows' 1 x 128 scales of A and the tile's 128 x 128 scale of B and added into acc in
            // fp32 (the promotion), as DeepGEMM does; while one consumer warpgroup promotes, the
            // others' wgmma can keep the tensor cores busy. (A second set of products, the next
            // k-tile's wgmma issued before this one's promotion, makes ptxas serialize every wgmma:
            // C7514, "non wgmma instructions reading accumulator registers" inside a pipeline
            // stage.) The wgmma wait exposes every instruction of the loop, so it is written for
            // few: the slot, its phase, the descriptors and the scale pointers step along instead
            // of being computed from the k-tile's index (Nsight Compute on the H200: the loop's
            // integer work, not the FFMAs alone, kept the tensor pipe idle).
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
            {
                // rows past M read row 0's scales: their products are 0 (TMA fills A's rows
                // past M with zeros), so no load or promotion branches on the row
                const int r = (bm * CLUSTER + rank) * BM + 64 * cw + 16 * warp + (lane >> 2);
                const float* pa = scale_a + (r < M ? r : 0) * sa_s0;
                const long long sa_8 = r + 8 < M ? 8 * sa_s0 : 0;
                const float* pb = scale_b + (bn * BN / 128) * sb_s1;
                // the scales of k-tiles kt .. kt + SCALE_AHEAD - 1, loaded SCALE_AHEAD k-tiles
                // before their use: a load of global memory takes longer than a k-tile's wgmma,
                // and Nsight Compute showed the promotion waiting on it with one k-tile ahead
                float qa0[SCALE_AHEAD], qa1[SCALE_AHEAD], qb[SCALE_AHEAD];
#pragma unroll
                for (int d = 0; d < SCALE_AHEAD; ++d) {
                    const int k = d < KT ? d : KT - 1;
                    qa0[d] = pa[k * sa_s1], qa1[d] = pa[sa_8 + k * sa_s1], qb[d] = pb[k * sb_s0];
                }
                // pa, pb: at the k-tile the loop loads next (the last k-tile once past it)
                const int ahead = SCALE_AHEAD < KT ? SCALE_AHEAD : KT - 1;
                pa += ahead * sa_s1, pb += ahead * sb_s0;
                int s = it % STAGES;
                u32 phase = (it / STAGES) & 1, off = s * (SLOT / 16);
#if SCALE_TMA  // A's scales of this thread's rows in slot 0's part of the scale ring
                const u32 srow0 = scale_ring + 4 * (64 * cw + 16 * warp + (lane >> 2));
#endif
                for (int kt = 0; kt < KT; ++kt) {
                    mbar_wait(full0 + 8 * s, phase);
                    mma_tile_fresh(part, da0 + off, db0 + off);  // the slot's descriptors
                    const float na0 = pa[0], na1 = pa[sa_8], nb = pb[0];
                    if (kt + ahead + 1 < KT) pa += sa_s1, pb += sb_s0;
#if SCALE_TMA  // A's scales from the slot's part of the scale ring (rows past M: 0)
                    const u32 srow = srow0 + s * (4 * BM);
                    const float a0 = r < M ? lds_f32(srow) : 0.f,
                                a1 = r + 8 < M ? lds_f32(srow + 32) : 0.f, b = qb[0];
#else
                    const float a0 = qa0[0], a1 = qa1[0], b = qb[0];
#endif
#pragma unroll
                    for (int d = 0; d + 1 < SCALE_AHEAD; ++d)
                        qa0[d] = qa0[d + 1], qa1[d] = qa1[d + 1], qb[d] = qb[d + 1];
                    qa0[SCALE_AHEAD - 1] = na0, qa1[SCALE_AHEAD - 1] = na1, qb[SCALE_AHEAD - 1] = nb;
                    wg_wait<0>();
                    const float f0 = a0 * b, f1 = a1 * b;
#pragma unroll
                    for (int j = 0; j < ACC; j += 4) {
                        reg_fence(part[j]), reg_fence(part[j + 1]), reg_fence(part[j + 2]),
                            reg_fence(part[j + 3]);
                        acc[j] = fmaf(part[j], f0, acc[j]);
                        acc[j + 1] = fmaf(part[j + 1], f0, acc[j + 1]);
                        acc[j + 2] = fmaf(part[j + 2], f1, acc[j + 2]);
                        acc[j + 3] = fmaf(part[j + 3], f1, acc[j + 3]);
                    }
                    release(s);
                    if (++s == STAGES) s = 0, phase ^= 1, off = 0;
                    else off += SLOT / 16;
                }
                it += KT;
            }
#else
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
            for (int kt = 0; kt < KT1 - KT0; ++kt, ++it) {
                const int s = it % STAGES;
                const u32 slot = ring + s * SLOT;
                mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
                mma_tile(acc, slot, cw);
                wg_wait<1>();  // iteration it-1's wgmma are done: release its slot
                if (kt > 0) release((it - 1) % STAGES);
            }
            wg_wait<0>();
            release((it - 1) % STAGES);  // the tile's last slot
#endif
#pragma unroll
            for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);
#if defined(SCALE_ROW)
            scale_rows_cols(acc, scale_a, scale_b, sa_s0, sb_s1, M, N,
                            (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane);
#elif defined(PREC_FP8) && !SCALES_STRIDED
            scale_acc(acc, scale);
#endif
#if SPLITK  // the unit's partial sums into slab sp (splitk_reduce.cu adds the slabs and rounds C)
            store_ws(acc, W + static_cast<long long>(sp) * M * ldw, M, N, ldw,
                     (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane);
#elif STREAMK
            if (KT0 == 0 && KT1 == KT) {  // the whole tile in this block: C itself
#if TMA_STORE
                store_acc_tma(acc, &tma_c, ring + STAGES * SLOT + cw * C_STAGE_BYTES,
                              bm * BM + 64 * cw, bn * BN, warp, lane, 1 + cw);
#else
                store_acc<A_REGS>(acc, C, M, N, ldc, bm * BM + 64 * cw, bn * BN, warp, lane);
#endif
            } else {  // a part: slab j, j = this block - the block whose range holds the tile's
                      // first k-tile (range i holds x where i = ((x + 1) GS - 1) / W)
                const int j = static_cast<int>(me - ((tk + 1) * gs - 1) / work);
                store_ws(acc, W + static_cast<long long>(j) * M * ldw, M, N, ldw,
                         bm * BM + 64 * cw, bn * BN, warp, lane);
            }
#elif C_TRANS
            store_acc_t(acc, C, M, N, ldc, (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane);
#elif TMA_STORE
            store_acc_tma(acc, &tma_c, ring + STAGES * SLOT + cw * C_STAGE_BYTES,
                          (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane, 1 + cw);
#else
            store_acc<A_REGS>(acc, C, M, N, ldc, (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp,
                            lane);
#endif
        }
#if TMA_STORE
        if (warp == 0) bulk_wait_all_warp();  // C's last stores done before the block exits
#endif
    }
    // no block may exit while a block of its cluster can still multicast into it or arrive on
    // its barriers
    if (CLUSTER > 1) cluster_sync();
#undef WALK
#undef UNIT
#undef NEXT_TILE
#if !SPLITK && !STREAMK
#undef KT0
#undef KT1
#endif
}
