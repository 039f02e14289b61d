// Stage: wgmma. Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): four warps multiply a 64 x BN
// tile with A from their registers and B read by the tensor cores straight from 128-byte-swizzled
// shared memory, fed by a cp.async ring.
//
// Lesson case: bf16 A, B and C (fp32 accumulation), row-major A and B (layout nn) whose lines
//   start on 16-byte boundaries, each tile's copy issued before its wgmma and A' loaded after the
//   next tile's copy (COPY_AT = 0, LOAD_FIRST = 0: bf16's configuration), at every tile size
//   (WGS, BN, STAGES, GROUP). The launcher (wgmma.py, plan()) brings other operands to this case
//   where it can, by a copy inside the timed call: a tn problem's A into a row-major buffer, an
//   operand with unaligned lines into 16-byte lines. Offsets are 64-bit in this file as in every
//   build of the stage (the copies' line offsets, csm and csn), so it serves operands past 2^31
//   elements too. Every other build (tf32, 3xtf32, fp16; the layouts nt and tt; COPY_AT = 2,
//   LOAD_FIRST = 1) is cuda_kernels/variants/wgmma.cu, the same kernel with those switches, which
//   the launcher compiles for them (wgmma.py: lesson(), build()); for the lesson case the two
//   files compile to the same SASS (tests/test_lessons_wgmma.py). docs/stages/wgmma.md has a
//   section per variant that says what it adds and where.
//
// What changed from stage mma (mma.cu): the multiply instruction. mma.sync is one warp's
// synchronous 16 x 8 product with both operands in registers, loaded there by ldmatrix; wgmma is
// one warpgroup's (4 warps') asynchronous 64 x BN product that reads B straight from shared
// memory through a matrix descriptor, while the warps go on preparing the next tile:
//   1. Which operand goes where. wgmma's shared-memory operand must be K-major here (the rule is
//      TF32's, and the stage keeps one plan for every precision), and a row-major A is: its rows
//      run along K. So the kernel computes the transpose, D = C^T = B^T A^T (M' = N rows, N' = M
//      columns): A' = B^T comes from registers (A'(m, k) = Ap[k * lda + m]: its lines are B's
//      rows, loaded with ldmatrix.trans as mma.cu loads its row-major B), B' = A^T is read from
//      shared memory (B'(n, k) = Bp[n * ldb + k]: A's row n), and D(i, j) is stored at
//      C[i * csm + j * csn] with csm = 1, csn = ldc.
//   2. The instruction. wgmma.mma_async m64nBNk16 (wgmma_ops.cuh) adds a 64 x 16 A' piece (four
//      registers a thread, mma.sync's A fragment layout) times a 16 x BN piece of B' (a 64-bit
//      descriptor: start address, 8-line stride, swizzle mode) to the warpgroup's 64 x BN fp32
//      accumulators, BN / 2 registers a thread. wgmma.commit_group closes a group of them,
//      wgmma.wait_group n waits until at most n groups run; the registers a wgmma reads or writes
//      must not be touched until then.
//   3. Swizzled B'. A B' tile is BN lines of 128 bytes (one k-tile: 64 bf16), 16-byte chunk c of
//      line r stored at chunk c ^ (r % 8): the layout the descriptor's 128-byte swizzle names, so
//      the tensor cores read it without bank conflicts. The hardware applies the XOR to address
//      bits 4-9, so every tile starts on 1024 bytes; a k-step of 16 starts 32 bytes further on.
//   4. The ring. STAGES slots; each tile's wgmma group stays in flight (wgmma.wait_group 1) while
//      the next tile is prepared, so the group before it is known to be finished and the copy
//      issued at tile kt goes into tile kt-2's slot (STAGES - 2 tiles in flight). For the same
//      reason A' alternates between two register sets by tile parity. fence.proxy.async before
//      the barrier: the tensor cores read through the async proxy what cp.async wrote through
//      the generic one.
// Bottleneck it attacks: mma.sync's own rate on the H100 (61% of the tensor cores' wgmma rate per
// clock, measured in docs/stages/mma.md) and the ldmatrix traffic that feeds it: B no longer
// passes through registers at all.
//
// Launch geometry (cuda_kernels/wgmma.py): a 1-D grid of ceil(M'/BM) * ceil(N'/BN) blocks in
// grouped order (GROUP block-rows walked together), 128 * WGS threads, no static shared memory,
// STAGES * SLOT + 1 KiB of dynamic shared memory (197 KiB at the defaults), one block per SM.
// Block: WGS warpgroups over BM = 64 * WGS rows of D and BN columns; each warpgroup owns 64 rows
// and all BN columns. Shared memory per ring slot: the B' tile, then the A' tile, BK lines (k) of
// BM elements (m) padded by 16 bytes so that ldmatrix's rows fall on distinct banks.

#ifndef PREC_BF16
#define PREC_BF16 1  // the lesson's precision: hopper.cuh's elem_t is then a bfloat16's bits
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

#include "hopper.cuh"  // u32, u64, elem_t, smem_u32, ldmatrix, the descriptor, fence / commit / wait
#include "wgmma_ops.cuh"

constexpr int BM = 64 * WGS;
constexpr int THREADS = 128 * WGS;
constexpr int BK = 64;                          // elements of K per tile (128 bytes of bf16)
constexpr int KSTEP = 16;                       // elements of K per wgmma
constexpr int NSTEP = BK / KSTEP;               // wgmma per tile and warpgroup (4)
constexpr int B_BYTES = BN * 128;               // one B' tile
constexpr int A_LINE = BM * 2 + 16;             // one A' line (k) of BM elements, padded
constexpr int A_BYTES = ((A_LINE * BK + 1023) / 1024) * 1024;
constexpr int SLOT = B_BYTES + A_BYTES;
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

// One k-step: D (64 x N) += A' (64 x 16, registers a) * B' (16 x N, descriptor b).
template <int N>
__device__ __forceinline__ void wgmma_n(float* d, const u32* a, u64 b, int scale_d) {
    if constexpr (N == 64) wgmma_bf16_n64(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 128) wgmma_bf16_n128(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 192) wgmma_bf16_n192(d, a[0], a[1], a[2], a[3], b, scale_d);
    if constexpr (N == 256) wgmma_bf16_n256(d, a[0], a[1], a[2], a[3], b, scale_d);
}

// ------------------------------------------------------------------------------ tile copies
// Each thread copies the same chunks of every tile: its lines, chunk positions, shared-memory
// offsets and which lines lie inside the matrix are worked out once (the copier), so a tile's copy
// is a pointer advance and one cp.async per chunk. Only the tiles that reach past K compute
// per-chunk sizes (zero-fill for what lies outside).
//
// B' (K-major): BN lines of 8 16-byte chunks; thread t copies chunk t % 8 of lines t / 8 + i *
// (THREADS / 8), to chunk c ^ (r % 8) of line r (a constant per thread, since THREADS / 8 is a
// multiple of 8). Where the threads do not divide the lines evenly (3 warpgroups), the last
// round's chunks past the tile are skipped (`mine`).
struct BCopier {
    static constexpr int PER = 8, LPP = THREADS / 8, FULL = BN / LPP;
    static constexpr int COUNT = (BN + LPP - 1) / LPP;
    static_assert(LPP % 8 == 0, "the swizzle needs a multiple of 8 lines per round");
    const elem_t* p[COUNT];  // each chunk's source at k = 0 (the operand's start if outside)
    u32 dst;                 // chunk 0's offset in the tile
    u32 inside;              // bit i: chunk i's line lies inside the matrix
    bool mine;               // the last round's chunk lies inside the tile (uneven rounds)
    int kc;                  // the chunks' first k in the tile
    __device__ __forceinline__ BCopier(const elem_t* base, int ld, int n0, int N) {
        const int r = threadIdx.x / 8, c = threadIdx.x % 8;
        kc = c * PER;
        dst = r * 128 + ((c ^ (r & 7)) << 4);
        mine = r + FULL * LPP < BN;
        inside = 0;
#pragma unroll
        for (int i = 0; i < COUNT; ++i) {
            const int x = n0 + r + i * LPP;
            inside |= (x < N ? 1u : 0u) << i;
            p[i] = x < N ? base + static_cast<long long>(x) * ld + kc : base;
        }
    }
    __device__ __forceinline__ void copy(u32 tile, int k0, int K) const {
        if (k0 + BK <= K) {
#pragma unroll
            for (int i = 0; i < COUNT; ++i)
                if (i < FULL || mine)
                    cp16(tile + dst + i * LPP * 128, p[i] + k0, (inside >> i) & 1 ? 16 : 0);
        } else {
            int bytes = (K - k0 - kc) * 2;
            bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
#pragma unroll
            for (int i = 0; i < COUNT; ++i) {
                const bool ok = ((inside >> i) & 1) && bytes > 0;
                if (i < FULL || mine)
                    cp16(tile + dst + i * LPP * 128, ok ? p[i] + k0 : p[i], ok ? bytes : 0);
            }
        }
    }
};

// A' (M-major: A'(m, k) = Ap[k * lda + m], B's row k): BK lines (k) of BM / 8 chunks (m); thread t
// copies chunk t % CPL of lines t / CPL + i * (THREADS / CPL). The chunk's m range is fixed per
// thread.
struct ACopier {
    static constexpr int PER = 8, CPL = BM / PER, LPP = THREADS / CPL, COUNT = BK / LPP;
    static_assert(THREADS % CPL == 0 && BK % LPP == 0, "A' tile chunks must split evenly");
    const elem_t* p[COUNT];  // each chunk's source in tile 0 (line r + i * LPP)
    long long ld;
    u32 dst;
    int r, bytes;  // first line; bytes of the chunk inside M
    __device__ __forceinline__ ACopier(const elem_t* base, int ld_, int m0, int M) {
        r = threadIdx.x / CPL;
        const int c = threadIdx.x % CPL;
        ld = ld_;
        bytes = (M - m0 - c * PER) * 2;
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

// A' fragments of one tile for this warp's 16 rows (row0 inside the A' tile), all NSTEP k-steps:
// f[s][0..3] in the register order of wgmma's A operand (as mma.sync's m16n8k16 A). Lines are k,
// m contiguous: ldmatrix.x4.trans, matrix j = (m half j % 2, k half j / 2); lane l names k line
// 8 * (l / 16) + l % 8 of matrix l / 8 at m offset 8 * ((l / 8) % 2).
__device__ __forceinline__ void load_frags(u32 a_tile, int row0, u32 (&f)[NSTEP][4]) {
    const int lane = threadIdx.x & 31;
    const int j = lane >> 3;
    const u32 base = a_tile + ((j >> 1) * 8 + (lane & 7)) * A_LINE + (row0 + (j & 1) * 8) * 2;
#pragma unroll
    for (int s = 0; s < NSTEP; ++s)
        ldsm_x4_t(base + s * KSTEP * A_LINE, f[s][0], f[s][1], f[s][2], f[s][3]);
}

// D(i, j) and D(i, j + 1), rounded to bf16 (one cvt for the pair), where they lie inside C.
__device__ __forceinline__ void store_pair(elem_t* C, long long o0, long long o1, float x, float y,
                                           bool ok0, bool ok1) {
    const u32 r = pack_bf16(x, y);
    if (ok0) C[o0] = static_cast<unsigned short>(r & 0xffffu);
    if (ok1) C[o1] = static_cast<unsigned short>(r >> 16);
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
    const BCopier cb(Bp, ldb, n0, N);
    const ACopier ca(Ap, lda, m0, M);
    constexpr u32 A_AT = B_BYTES;  // A' tile's offset in a slot

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    u32 frag[2][NSTEP][4];

    // Tiles in flight beyond the one being multiplied: the copy of tile kt + AHEAD goes into tile
    // kt-2's slot (tile kt-1's wgmma may still read its own), right after tile kt's barrier.
    constexpr int AHEAD = STAGES - 2;
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
    // Tile kt's operands ready in shared memory and registers: its copy landed and seen by every
    // thread (and by the async proxy), the next copy issued, A' fragments loaded.
    auto prep = [&](int kt, u32(&f)[NSTEP][4]) {
        const u32 slot = smem + (kt % STAGES) * SLOT;
        cp_wait<AHEAD - 1>();
        fence_async_smem();
        __syncthreads();
        refill(kt);
        load_frags(slot + A_AT, row0, f);
    };
    // Tile kt's NSTEP wgmma, one commit group.
    auto issue = [&](int kt, const u32(&f)[NSTEP][4]) {
        const u32 slot = smem + (kt % STAGES) * SLOT;
        wg_fence();
#pragma unroll
        for (int s = 0; s < NSTEP; ++s) wgmma_n<BN>(acc, f[s], desc_kmajor(slot + s * 32), 1);
        wg_commit();
    };
    // Tile kt's wgmma stay in flight (wgmma.wait_group 1) while tile kt+1 is prepared and issued.
    auto step = [&](int kt, int par) {
        prep(kt, frag[par]);
        issue(kt, frag[par]);
        wg_wait<1>();
    };
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
    // c = 8 j + 2 (lane % 4), r = this warp's row + lane / 4 and r2 = r + 8.
    const int lane = threadIdx.x & 31;
    const int r = m0 + row0 + (lane >> 2), r2 = r + 8;
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
