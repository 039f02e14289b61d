// Variant of ../wgmma.cu for every build but the lesson's: the precisions tf32, 3xtf32 (its split,
// fresh sums SUM_TILES and subnormal scaling TF32X3_SCALE) and fp16; the layouts nt (A' K-major,
// A_KMAJOR = 1) and tt (D = C, not C^T); TF32's M-major A' (LDS.64 row pairs, ROWPAIR); the
// schedule switches COPY_AT = 2 and LOAD_FIRST = 1. cuda_kernels/wgmma.py's lesson() chooses the
// file: wgmma.cu for bf16 in layout nn (as the kernel reads it, after the launcher's copies) at
// COPY_AT = 0 and LOAD_FIRST = 0, this file for everything else. For the lesson's case the two
// compile to the same SASS (tests/test_lessons_wgmma.py); docs/stages/wgmma.md has a section per
// variant that says what it adds and where. Apart from this note the file is the former
// cuda_kernels/wgmma.cu, unchanged. A reader can skip it.
// Stage: wgmma. Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) with A from registers
// and B from 128-byte-swizzled shared memory, fed by a cp.async ring.
//
// What changed from stage mma (mma.cu): the multiply instruction. mma.sync is one warp's
// synchronous 16 x 8 product with both operands in registers, loaded there by ldmatrix; wgmma is
// one warpgroup's (4 warps') asynchronous 64 x BN product that reads B straight from shared
// memory through a matrix descriptor, while the warps go on preparing the next tile. Bottleneck
// it attacks: mma.sync's own rate on the H100 (61% of the tensor cores' wgmma rate per clock,
// measured in docs/stages/mma.md) and the ldmatrix traffic that feeds it.
// Launch geometry (cuda_kernels/wgmma.py): a 1-D grid of ceil(M'/BM) * ceil(N'/BN) blocks in
// grouped order (GROUP block-rows walked together), 128 * WGS threads, no static shared memory,
// STAGES * SLOT + 1 KiB of dynamic shared memory (at the launcher's defaults 197 KiB, 201 KiB
// where A' is K-major, in every precision), one block per SM.
//
// The launcher (cuda_kernels/wgmma.py) hands this kernel a problem D = A' B' (M' x N', K deep) in
// which B' is K-major: B'(n, k) = Bp[n * ldb + k]. wgmma reads a 32-bit (TF32) shared operand
// only K-major, so the launcher picks A' and B' from the user's A and B so that this holds:
//   B K-major in memory (B column-major: layouts nt, tt)  ->  A' = A, B' = B, D = C;
//   A K-major in memory (A row-major: layouts nn)         ->  A' = B^T, B' = A^T, D = C^T.
// (The fourth layout, tn, has neither operand K-major: the launcher copies one of them K-major
// inside the timed call first. It copies an operand whose lines do not start on 16-byte
// boundaries the same way, since every copy below is a 16-byte cp.async.)
// D's element (i, j) is stored at C[i * csm + j * csn], which covers both C and C^T.
// Offsets: 64-bit in every build (the copiers' long long source offsets, csm and csn 64-bit
// arguments), so an operand past 2^31 elements needs no other build here; the other stages
// build with common.cuh's OFFSET64 for those (wgmma.py passes no such define).
// A' may lie either way (A_KMAJOR = 1: A'(m, k) = Ap[m * lda + k]; 0: Ap[k * lda + m]): it goes
// through registers, loaded with ldmatrix (16-bit elements, and K-major TF32) or 64-bit LDS.
//
// Block: WGS warpgroups (128 threads each) over BM = 64 * WGS rows of D and BN columns; each
// warpgroup owns 64 rows and all BN columns (BN / 2 accumulators per thread). k-tile: 128 bytes of
// K (BK = 32 TF32 or 64 16-bit elements), wgmma steps of 8 (TF32) or 16 elements.
//
// Shared memory per ring slot: B' tile, BN lines of 128 bytes, 128-byte swizzle (chunk c of line r
// at chunk c ^ (r % 8); slots 1024-byte aligned, as the swizzle's address bits require); 3xTF32
// also a tile of B' tails in the same layout; then A' tile, lines padded by 16 bytes (32 for
// M-major TF32) so that ldmatrix / LDS rows fall on distinct banks.
//
// The ring: STAGES slots, tiles kt+1 .. kt+STAGES-2 in flight while tile kt is multiplied and tile
// kt-1's wgmma may still run (wgmma.wait_group 1 after each tile), so the copy at tile kt goes to
// tile kt-2's slot. A' fragments alternate between two register sets by tile parity for the same
// reason: wgmma reads its register operand asynchronously. 3xTF32 with fresh sums (SUM_TILES 1 or
// 2) waits for all of a sum's wgmma before adding it, so it prepares tile kt+1 between issuing
// tile kt's wgmma and that wait. Preparing a tile is a chain of waits (copy landed, B' split,
// barrier, A' loads) that the tile's wgmma must cover, so each step issues all its shared-memory
// loads before using the first (prepare_b), and LOAD_FIRST=1 issues the A' loads before the next
// tile's copy (faster for 3xTF32, slower for the rest: results/2026-11-23-h100/45-*).
//
// Precision: PREC_TF32 (A' rounded to nearest TF32 in registers; B' read by the tensor core as it
// lies in shared memory, which ignores its low 13 bits: truncation), PREC_3XTF32 (both
// split into a TF32 head and tail, Inf and NaN into the head +-1 and the tail x (tf32_head);
// three wgmma per step into a fresh sum added to the accumulator
// in fp32 every SUM_TILES tiles, and every tile where B' is tiny, A' then scaled by 2^k per warp so
// that subnormal products do not lose the fresh sum's bits (hopper.cuh's tf32x3_scale; not with
// SUM_TILES=0); SUM_TILES=0 leaves the whole sum to the tensor core, whose
// accumulation loses accuracy over K: 2.9e-5 at 4096^3), PREC_BF16, PREC_FP16 (16-bit inputs and
// output, fp32 accumulation).

#if !defined(PREC_TF32) && !defined(PREC_3XTF32) && !defined(PREC_BF16) && !defined(PREC_FP16)
#define PREC_TF32 1
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
#ifndef A_KMAJOR
#define A_KMAJOR 0
#endif
#ifndef COPY_AT
#define COPY_AT 0
#endif
#ifndef SUM_TILES
#define SUM_TILES 1
#endif
#if SUM_TILES < 0 || SUM_TILES > 2
#error "SUM_TILES must be 0 (3xTF32 accumulates in the tensor core), 1 or 2 (a fresh sum per tile or pair)"
#endif
#if COPY_AT != 0 && COPY_AT != 2
#error "COPY_AT must be 0 (copy before the tile's wgmma) or 2 (after)"
#endif
#ifndef GROUP
#define GROUP 8
#endif
#ifndef LOAD_FIRST
#define LOAD_FIRST 0
#endif
#if LOAD_FIRST != 0 && LOAD_FIRST != 1
#error "LOAD_FIRST must be 0 (A' loads after the next tile's copy) or 1 (before it)"
#endif

#include "hopper.cuh"  // u32, u64, elem_t / ELEM, smem_u32, the wgmma fence / commit / wait
#include "wgmma_ops.cuh"

#define ROWPAIR (ELEM == 4 && !A_KMAJOR)  // see load_frags
#if defined(PREC_3XTF32)
#define SPLIT 1
#else
#define SPLIT 0
#endif
#define FRESH (SPLIT && SUM_TILES > 0)  // 3xTF32 sums each tile (or pair) afresh

constexpr int BM = 64 * WGS;
constexpr int THREADS = 128 * WGS;
constexpr int BK = 128 / ELEM;                  // elements of K per tile (128 bytes)
constexpr int KSTEP = ELEM == 4 ? 8 : 16;       // elements of K per wgmma
constexpr int NSTEP = BK / KSTEP;               // wgmma per tile and warpgroup (4)
constexpr int B_BYTES = BN * 128;               // one B' tile
constexpr int A_LINE = A_KMAJOR ? 128 + 16 : BM * ELEM + (ELEM == 4 ? 32 : 16);
constexpr int A_LINES = A_KMAJOR ? BM : BK;
constexpr int A_BYTES = ((A_LINE * A_LINES + 1023) / 1024) * 1024;
constexpr int SLOT = B_BYTES * (1 + SPLIT) + A_BYTES;
constexpr int ACC = BN / 2;                     // accumulators per thread
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN must be 64, 128, 192 or 256");
static_assert(WGS >= 1 && WGS <= 3, "WGS must be 1, 2 or 3");
static_assert(STAGES >= 3 && STAGES <= 6, "STAGES must be 3..6");
static_assert(SLOT % 1024 == 0, "ring slots must stay 1024-byte aligned");

// ------------------------------------------------------------------------------ PTX helpers
__device__ __forceinline__ void cp16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_n(float* d, const u32* a, u64 b, int scale_d) {
#if ELEM == 4
    if constexpr (N == 64) wgmma_tf32_n64(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 128) wgmma_tf32_n128(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 192) wgmma_tf32_n192(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 256) wgmma_tf32_n256(d, a[0], a[1], a[2], a[3], b, scale_d);
#elif defined(PREC_BF16)
    if constexpr (N == 64) wgmma_bf16_n64(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 128) wgmma_bf16_n128(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 192) wgmma_bf16_n192(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 256) wgmma_bf16_n256(d, a[0], a[1], a[2], a[3], b, scale_d);
#else
    if constexpr (N == 64) wgmma_f16_n64(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 128) wgmma_f16_n128(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 192) wgmma_f16_n192(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 256) wgmma_f16_n256(d, a[0], a[1], a[2], a[3], b, scale_d);
#endif
}

// ------------------------------------------------------------------------------ tile copies
// Each thread copies the same chunks of every tile: its lines, chunk positions, shared-memory
// offsets and which lines lie inside the matrix are worked out once (Copier), so a tile's copy is
// a pointer advance and one cp.async per chunk. Only the tiles that reach past K compute per-chunk
// sizes (zero-fill for what lies outside).
//
// K-major operand (B', and A' with A_KMAJOR): LINES lines of 8 16-byte chunks; thread t copies
// chunk t % 8 of lines t / 8 + i * (THREADS / 8). B' lines are swizzled (chunk c of line r at
// c ^ (r % 8): a constant per thread, since THREADS / 8 is a multiple of 8); A' lines are padded.
// Where the threads do not divide the lines evenly (3 warpgroups), the last round's chunks past
// the tile are skipped (`mine`).
template <int LINES, int PITCH, bool SWIZZLE>
struct KCopier {
    static constexpr int PER = 16 / ELEM, LPP = THREADS / 8, FULL = LINES / LPP;
    static constexpr int COUNT = (LINES + LPP - 1) / LPP;
    static_assert(LPP % 8 == 0, "the swizzle needs a multiple of 8 lines per round");
    const elem_t* p[COUNT];  // each chunk's source at k = 0 (the operand's start if outside)
    u32 dst;                 // chunk 0's offset in the tile
    u32 inside;              // bit i: chunk i's line lies inside the matrix
    bool mine;               // the last round's chunk lies inside the tile (uneven rounds)
    int kc;                  // the chunks' first k in the tile
    __device__ __forceinline__ KCopier(const elem_t* base, int ld, int x0, int xlim) {
        const int r = threadIdx.x / 8, c = threadIdx.x % 8;
        kc = c * PER;
        dst = r * PITCH + ((SWIZZLE ? (c ^ (r & 7)) : c) << 4);
        mine = r + FULL * LPP < LINES;
        inside = 0;
#pragma unroll
        for (int i = 0; i < COUNT; ++i) {
            const int x = x0 + r + i * LPP;
            inside |= (x < xlim ? 1u : 0u) << i;
            p[i] = x < xlim ? base + static_cast<long long>(x) * ld + kc : base;
        }
    }
    __device__ __forceinline__ void copy(u32 tile, int k0, int K) const {
        if (k0 + BK <= K) {
#pragma unroll
            for (int i = 0; i < COUNT; ++i)
                if (i < FULL || mine)
                    cp16(tile + dst + i * LPP * PITCH, p[i] + k0, (inside >> i) & 1 ? 16 : 0);
        } else {
            int bytes = (K - k0 - kc) * ELEM;
            bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
#pragma unroll
            for (int i = 0; i < COUNT; ++i) {
                const bool ok = ((inside >> i) & 1) && bytes > 0;
                if (i < FULL || mine)
                    cp16(tile + dst + i * LPP * PITCH, ok ? p[i] + k0 : p[i], ok ? bytes : 0);
            }
        }
    }
};

// M-major A' (A_KMAJOR = 0): BK lines (k) of BM * ELEM / 16 chunks (m); thread t copies chunk
// t % CPL of lines t / CPL + i * (THREADS / CPL). The chunk's m range is fixed per thread.
struct MCopier {
    static constexpr int PER = 16 / ELEM, CPL = BM / PER, LPP = THREADS / CPL, COUNT = BK / LPP;
    static_assert(THREADS % CPL == 0 && BK % LPP == 0, "A' tile chunks must split evenly");
    const elem_t* p[COUNT];  // each chunk's source in tile 0 (line r + i * LPP)
    long long ld;
    u32 dst;
    int r, bytes;  // first line; bytes of the chunk inside M
    __device__ __forceinline__ MCopier(const elem_t* base, int ld_, int m0, int M) {
        r = threadIdx.x / CPL;
        const int c = threadIdx.x % CPL;
        ld = ld_;
        bytes = (M - m0 - c * PER) * ELEM;
        bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
#pragma unroll
        for (int i = 0; i < COUNT; ++i)
            p[i] = bytes > 0 ? base + (r + i * LPP) * ld + m0 + c * PER : base;
        dst = r * A_LINE + c * 16;
    }
    __device__ __forceinline__ void copy(u32 tile, int k0, int K) const {
        const long long off = bytes > 0 ? k0 * ld : 0;
        if (k0 + BK <= K) {
#pragma unroll
            for (int i = 0; i < COUNT; ++i)
                cp16(tile + dst + i * LPP * A_LINE, p[i] + off, bytes);
        } else {
#pragma unroll
            for (int i = 0; i < COUNT; ++i) {
                const bool ok = bytes > 0 && k0 + r + i * LPP < K;
                cp16(tile + dst + i * LPP * A_LINE, ok ? p[i] + off : p[i], ok ? bytes : 0);
            }
        }
    }
};

// 3xTF32, in place over this thread's own chunks of a landed B' tile (its cp.async writes are
// visible to it after cp.async.wait_group): the TF32 head over each element, the tail to the tail
// tile. Returns whether every |b| of them is below 2^-24 (hopper.cuh's tiny_bits).
__device__ __forceinline__ bool prepare_b(u32 slot) {
#if SPLIT
    constexpr int CHUNKS = BN * 8, PER = (CHUNKS + THREADS - 1) / THREADS;
    // All of this thread's loads go out before the first split, so their latencies overlap.
    u32 x[PER][4], off[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int q = threadIdx.x + i * THREADS;
        const int r = q >> 3, c = q & 7;
        off[i] = r * 128 + ((c ^ (r & 7)) << 4);
        if (CHUNKS % THREADS == 0 || q < CHUNKS)
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(x[i][0]), "=r"(x[i][1]), "=r"(x[i][2]), "=r"(x[i][3])
                         : "r"(slot + off[i]));
    }
    u32 o = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        if (CHUNKS % THREADS != 0 && threadIdx.x + i * THREADS >= CHUNKS) break;
#if TF32X3_SCALE
        o = or3(or3(o, x[i][0], x[i][1]), x[i][2], x[i][3]);
#endif
        u32 h[4], t[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            h[j] = tf32_head(x[i][j]);
            t[j] = tf32_tail(x[i][j], h[j]);
        }
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot + off[i]), "r"(h[0]),
                     "r"(h[1]), "r"(h[2]), "r"(h[3]));
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot + B_BYTES + off[i]),
                     "r"(t[0]), "r"(t[1]), "r"(t[2]), "r"(t[3]));
    }
    return tiny_bits(o);
#else
    return false;
#endif
}

// A' fragments of one tile for this warp's 16 rows (row0 inside the A' tile), all NSTEP k-steps:
// f[s][0..3] in the register order of wgmma's A operand (as mma.sync's m16n8k16 / m16n8k8 A).
__device__ __forceinline__ void load_frags(u32 a_tile, int row0, u32 (&f)[NSTEP][4]) {
    const int lane = threadIdx.x & 31;
#if A_KMAJOR
    // 16 lines (m) x 32 bytes (one k-step): ldmatrix.x4, matrices (rows 0-7 | 8-15) x (bytes 0-15 |
    // 16-31); lane l names line l % 16 at byte 16 * (l / 16).
    const u32 base = a_tile + (row0 + (lane & 15)) * A_LINE + (lane >> 4) * 16;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s) ldsm_x4(base + s * 32, f[s][0], f[s][1], f[s][2], f[s][3]);
#elif ELEM == 2
    // Lines are k, m contiguous: ldmatrix.x4.trans, matrix j = (m half j % 2, k half j / 2); lane l
    // names k line 8 * (l / 16) + l % 8 of matrix l / 8 at m offset 8 * ((l / 8) % 2).
    const int j = lane >> 3;
    const u32 base = a_tile + ((j >> 1) * 8 + (lane & 7)) * A_LINE + (row0 + (j & 1) * 8) * ELEM;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s)
        ldsm_x4_t(base + s * KSTEP * A_LINE, f[s][0], f[s][1], f[s][2], f[s][3]);
#else
    // TF32, lines are k: element (fragment row g or g + 8, k = t or t + 4) of the 16 x 8 step,
    // g = lane / 4, t = lane % 4. Fragment rows g and g + 8 are tile rows 2g and 2g + 1 (ROWPAIR;
    // the epilogue stores them there), adjacent in a k line, so one LDS.64 loads both; a 32-byte
    // pad puts the four k lines 8 banks apart (each 16-lane phase of an LDS.64 is conflict-free).
    const int g = lane >> 2, t = lane & 3;
    const u32 base = a_tile + t * A_LINE + (row0 + 2 * g) * 4;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s) {
        const u32 p = base + s * 8 * A_LINE;
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(f[s][0]), "=r"(f[s][1]) : "r"(p));
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                     : "=r"(f[s][2]), "=r"(f[s][3])
                     : "r"(p + 4 * A_LINE));
    }
#endif
}

__device__ __forceinline__ void store_pair(elem_t* C, long long o0, long long o1, float x, float y,
                                           bool ok0, bool ok1) {
#if ELEM == 4
    if (ok0) C[o0] = x;
    if (ok1) C[o1] = y;
#else
    u32 r;  // cvt.rn.*x2.f32 d, a, b puts a in the upper half
#if defined(PREC_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
#endif
    if (ok0) C[o0] = static_cast<unsigned short>(r & 0xffffu);
    if (ok1) C[o1] = static_cast<unsigned short>(r >> 16);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_wgmma(const elem_t* __restrict__ Ap, const elem_t* __restrict__ Bp,
                 elem_t* __restrict__ C, int M, int N, int K, int lda, int ldb, long long csm,
                 long long csn) {
    extern __shared__ unsigned char smem_raw[];
    const u32 smem = (smem_u32(smem_raw) + 1023) & ~1023u;

    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    int bm, bn;
    {
        const int bid = blockIdx.x;
        const int width = GROUP * grid_n;
        const int first_m = (bid / width) * GROUP;
        const int rows = min(grid_m - first_m, GROUP);
        const int in_group = bid - (bid / width) * width;
        bm = first_m + in_group % rows;
        bn = in_group / rows;
    }
    const int m0 = bm * BM, n0 = bn * BN;
    const int wg = threadIdx.x >> 7;
    const int warp = (threadIdx.x >> 5) & 3;
    const int row0 = wg * 64 + warp * 16;  // this warp's first row in the A' tile
    const int KT = (K + BK - 1) / BK;
    const KCopier<BN, 128, true> cb(Bp, ldb, n0, N);
#if A_KMAJOR
    const KCopier<BM, A_LINE, false> ca(Ap, lda, m0, M);
#else
    const MCopier ca(Ap, lda, m0, M);
#endif
    constexpr u32 A_AT = B_BYTES * (1 + SPLIT);  // A' tile's offset in a slot

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
#if FRESH
    float part[ACC];  // 3xTF32's fresh sum
#endif
    u32 frag[2][NSTEP][4];

    // Tiles in flight beyond the one being multiplied: the copy of tile kt + AHEAD goes into tile
    // kt-2's slot (tile kt-1's wgmma may still read its own), right after tile kt's barrier
    // (COPY_AT = 0) or after tile kt's wgmma are issued (COPY_AT = 2), so that the copy's
    // instructions do not delay them. (Copying into tile kt-1's slot after a second barrier per
    // tile, one tile more in flight, measured no faster: results/2026-11-23-h100/29-wgmma-probe.log.)
    // 3xTF32 with fresh sums over two tiles leaves a tile's wgmma unwaited one tile longer, so one
    // tile fewer is in flight.
    constexpr int AHEAD = STAGES - 2 - (FRESH && SUM_TILES == 2 ? 1 : 0);
    static_assert(AHEAD >= 1, "SUM_TILES=2 needs STAGES >= 4");
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < KT) {
            const u32 slot = smem + s * SLOT;
            cb.copy(slot, s * BK, K);
            ca.copy(slot + A_AT, s * BK, K);
        }
        cp_commit();
    }

    auto refill = [&](int kt) {
        const int nk = kt + AHEAD;
        if (nk < KT) {
            const u32 ns = smem + (nk % STAGES) * SLOT;
            cb.copy(ns, nk * BK, K);
            ca.copy(ns + A_AT, nk * BK, K);
        }
        cp_commit();
    };
    // 3xTF32 with fresh sums, of the tile prepared last: whether its B' is tiny (every |b| below
    // 2^-24, the block's answer from the barrier after the split) and the warp's scale 2^k of its
    // A' (hopper.cuh's tf32x3_scale); its sum is added times 2^-k.
    int kl = 0;
    bool tl = false;
    // Tile kt's operands ready in shared memory and registers: its copy landed, B' split (3xTF32),
    // the barrier, A' fragments loaded (and rounded, or scaled and split).
    auto prep = [&](int kt, u32(&f)[NSTEP][4], u32(&lo)[NSTEP][4]) {
        const u32 slot = smem + (kt % STAGES) * SLOT;
        cp_wait<AHEAD - 1>();
        const bool small = prepare_b(slot);
        fence_async_smem();
#if FRESH && TF32X3_SCALE
        tl = __syncthreads_and(small);  // the same barrier, and every thread's answer
#else
        (void)small;
        __syncthreads();
#endif
        if (LOAD_FIRST) load_frags(slot + A_AT, row0, f);  // its latency overlaps the refill
        if (COPY_AT == 0) refill(kt);
        if (!LOAD_FIRST) load_frags(slot + A_AT, row0, f);
#if FRESH
        kl = tf32x3_scale(f, tl);
#endif
#pragma unroll
        for (int s = 0; s < NSTEP; ++s)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
#if SPLIT
                const u32 h = tf32_head(f[s][r]);
                lo[s][r] = tf32_tail(f[s][r], h);
                f[s][r] = h;
#elif ELEM == 4
                f[s][r] = tf32_rn(f[s][r]);
#endif
            }
    };
    // Tile kt's wgmma, one commit group; 3xTF32 puts its three products (smallest first) into
    // `dst`, starting it afresh when `fresh`.
    auto issue = [&](int kt, float* dst, bool fresh, const u32(&f)[NSTEP][4],
                     const u32(&lo)[NSTEP][4]) {
        const u32 slot = smem + (kt % STAGES) * SLOT;
        wg_fence();
#pragma unroll
        for (int s = 0; s < NSTEP; ++s) {
#if SPLIT
            const u64 bh = desc_kmajor(slot + s * 32), bl = desc_kmajor(slot + B_BYTES + s * 32);
            wgmma_n<BN>(dst, lo[s], bh, s > 0 || !fresh);
            wgmma_n<BN>(dst, f[s], bl, 1);
            wgmma_n<BN>(dst, f[s], bh, 1);
#else
            wgmma_n<BN>(dst, f[s], desc_kmajor(slot + s * 32), 1);
#endif
        }
        wg_commit();
    };

#if SPLIT
    u32 tails[2][NSTEP][4];  // 3xTF32's A' tails, one set per tile parity as the heads
#else
    u32(&tails)[2][NSTEP][4] = frag;  // unused
#endif
#if FRESH
    // 3xTF32 with fresh sums: tile kt+1 is prepared while tile kt's wgmma run, and only then does
    // the warpgroup wait for them (draining its wgmma) and add the fresh sum in fp32, times 2^-k.
    // The wgmma pipe idles for that wait and add, not for the next tile's copy wait, split and
    // loads. With SUM_TILES=2, a pair of which either tile's B' is tiny is summed tile by tile.
    int ks = 0;          // the warp's k of the tiles summed in `part`
    bool alone = false;  // the pair's first tile was summed alone: the second starts afresh
    auto add_part = [&]() {
        const float down = exp2_int(-ks);
#pragma unroll
        for (int i = 0; i < ACC; ++i) {
            reg_fence(part[i]);
            acc[i] = TF32X3_SCALE ? fmaf(part[i], down, acc[i]) : acc[i] + part[i];
        }
    };
    auto step = [&](int kt, int par) {
        const bool first = kt % SUM_TILES == 0;
        const bool last = kt % SUM_TILES == SUM_TILES - 1 || kt == KT - 1;
        const bool tiny = tl;  // tile kt's
        ks = kl;
        issue(kt, part, first || alone, frag[par], tails[par]);
        if (COPY_AT == 2) refill(kt);
        if (kt + 1 < KT) prep(kt + 1, frag[par ^ 1], tails[par ^ 1]);
        alone = false;
#if TF32X3_SCALE
        if (!last && (tiny || tl)) {  // block-uniform: tile kt's sum alone
            alone = true;
            wg_wait<0>();
            add_part();
        }
#else
        (void)tiny;
#endif
        if (last) {
            wg_wait<0>();
            add_part();
        }
    };
    if (KT > 0) prep(0, frag[0], tails[0]);
#else
    // Tile kt's wgmma stay in flight (wgmma.wait_group 1) while tile kt+1 is prepared and issued.
    auto step = [&](int kt, int par) {
        prep(kt, frag[par], tails[par]);
        issue(kt, acc, false, frag[par], tails[par]);
        if (COPY_AT == 2) refill(kt);
        wg_wait<1>();
    };
#endif
    int kt = 0;
    for (; kt + 1 < KT; kt += 2) {
        step(kt, 0);
        step(kt + 1, 1);
    }
    if (kt < KT) step(kt, 0);
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);

    // Accumulator j*4 + {0,1,2,3} of a thread: D(r, c), D(r, c+1), D(r2, c), D(r2, c+1) with
    // c = 8 j + 2 (lane % 4), r = this warp's row + lane / 4 and r2 = r + 8, or with ROWPAIR
    // r = this warp's row + 2 (lane / 4) and r2 = r + 1.
    const int lane = threadIdx.x & 31;
    const int r = m0 + row0 + (ROWPAIR ? 2 : 1) * (lane >> 2), r2 = r + (ROWPAIR ? 1 : 8);
    const int cbase = n0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int c = cbase + 8 * j;
        const bool c0 = c < N, c1 = c + 1 < N;
        if (r < M)
            store_pair(C, r * csm + c * csn, r * csm + (c + 1) * csn, acc[4 * j], acc[4 * j + 1],
                       c0, c1);
        if (r2 < M)
            store_pair(C, r2 * csm + c * csn, r2 * csm + (c + 1) * csn, acc[4 * j + 2],
                       acc[4 * j + 3], c0, c1);
    }
}
