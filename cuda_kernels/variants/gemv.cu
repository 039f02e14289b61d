// Variant of ../gemv.cu for every other case: bf16 and fp16 (PREC_BF16 / PREC_FP16), a
// column-major A (TRANS_A: the columns kernel), a column-major B (TRANS_B), several columns per
// block (NCOL > 1), unaligned lines (VEC_A / VEC_B = 0), operands past 2^31 elements (OFFSET64),
// split-K (SPLITK > 1, and gemv_splitk_sum: the SUM_ONLY build), one chunk in flight (UNROLL = 0)
// and the CPU emulator's twin of the warp shuffle. gemv.py compiles it for every build but the
// lesson's (fp32, nn, NCOL = 1, 16-byte lines, 32-bit offsets, no split, UNROLL = 1), and
// tests/test_gemv.py's emulator runs it. A reader can skip it: ../gemv.cu is the lesson, and
// docs/stages/gemv.md ("The lesson and its variants") names the part of this file each case adds.
// Stage: gemv. Thin products (N = 1 to a few columns): no tiles of B at all, A streamed once.
//
// Changed from double_buffered (and every stage before it): those kernels compute C in tiles of
//   at least 64 x 64 and stage both operands in shared memory, so that each loaded element of A
//   and B feeds 64 or more FMAs. With N = 1 there is nothing to reuse an element of A for: each
//   is multiplied once, by the one value of B at its k. A 64-column tile then computes 63
//   columns that are not in C (B's padding), spends its shared memory and registers on them, and
//   its FMA rate no longer matters: the time is the time to read A. This stage is built for that:
//   1. No shared-memory staging. Each thread loads A straight into registers with 16-byte loads
//      (4 fp32, or 8 bf16 / fp16 values) along A's contiguous dimension, several per row in
//      flight (KU), and multiplies them by B's values at the same k's in fp32.
//   2. Few columns per block. A block computes NCOL columns of C (1, 2, 4 or 8; the launcher
//      picks the power of two at or above N, at most 8); a wider C is a grid of column groups,
//      each reading A again (from L2 when the groups of one row run together: they are adjacent
//      in the grid), so a wide N is correct but slow: this is a matrix-vector kernel.
//   3. B reused across rows from registers. A thread computes ROWS rows of C at the same k's, so
//      each value of B it loads serves ROWS rows: B (4 MB at K = 2^20) is read M / ROWS times
//      from L2 rather than M times, which at 2048 x 1 x 1048576 would be 8.6 GB of L2 traffic
//      beside the 8.6 GB of A coming from DRAM.
//   4. Sums across threads by warp shuffles. The threads of a row split its K; their partial sums
//      meet in a butterfly of __shfl_xor_sync (5 steps per warp, no shared memory, no barrier),
//      then across the warps of a row through shared memory, always in the same order.
//   5. Split-K across blocks where the rows alone cannot fill the GPU (2048 rows in blocks of 4
//      are 512 blocks: under one wave of blocks that each stream 16 MB): SPLITK = S > 1 gives
//      each block a contiguous 1/S of K (blockIdx.y), its partial sums go to a workspace of S
//      slabs of M x N floats, and gemv_splitk_sum adds the slabs in the fixed order 0, 1, ...,
//      S-1 and rounds once to C's type: bitwise reproducible (cuda_kernels/splitk_reduce.cu does
//      the same for warptiling, but writes fp32 only and reads rows padded to 4 floats, which for
//      N = 1 is 4x the workspace; this sum writes bf16 and fp16 too).
// Two kernels in one, by A's layout (TRANS_A, common.cuh):
//   A row-major (nn, nt): rows kernel. Block = THREADS threads in THREADS / LANES row groups of
//     LANES threads (LANES a power of two, 1..THREADS; the launcher picks it from K: THREADS for
//     a long K, fewer for a short one so that no lane idles). A row group owns ROWS rows; lane r
//     of it takes 16-byte chunks r, r + LANES, r + 2 LANES, ... of its k range, KU chunks per row
//     in flight per iteration. Block rows: (THREADS / LANES) * ROWS.
//   A column-major (tn, tt): columns kernel. Block = THREADS threads, one warp per k (warp w takes
//     k = k0 + w, k0 + w + WARPS, ...), its 32 lanes along M, each a 16-byte chunk of VW
//     consecutive rows of column k (a warp reads 512 contiguous bytes); B's value at k is one
//     broadcast load per column. The warps' sums meet in shared memory. Block rows: 32 * VW.
// Launch geometry (gemv.py): block THREADS (256 by default) threads; grid (row blocks * column
//   groups, SPLITK): x = row block * ceil(N / NCOL) + column group (the column groups of a row
//   block are adjacent, so they share its rows of A in L2), y = the split. No dynamic shared
//   memory; static shared memory only for the sums across warps (rows kernel with LANES > 32:
//   THREADS/32 * ROWS*NCOL floats; columns kernel: THREADS * VW floats).
// Bottleneck: DRAM bandwidth. Bytes moved = ES*M*K (A, ES = 4 fp32, 2 bf16/fp16) + ES*K*N (B)
//   + ES*M*N (C) (+ 8*S*M*N for a split's workspace, written and read back). On an H100 80GB
//   HBM3 (3.35 TB/s):
//     2048 x 1 x 1048576 fp32: A = 8.59 GB, B = 4 MB: the roof is 2.56 ms (cuBLAS: 2.88 ms,
//       2.98 TB/s); 80% of cuBLAS is 3.60 ms, 2.39 TB/s.
//     4097 x 1 x 4096 fp32: A = 67.1 MB (more than the 50 MB L2, which the harness flushes
//       before each repetition anyway): 20.0 us at the roof (cuBLAS: 39.9 us, 1.68 TB/s, where
//       the launch and the ramp up and down are a large part); 80% of cuBLAS is 49.9 us.
//   Bytes in flight decide whether the roof is reached: about 3.35 TB/s x ~1 us of loaded DRAM
//   latency = 3.4 MB across the GPU, 25 KB per SM. At the defaults (ROWS 4, KU 2) a thread
//   holds 8 chunks of A (128 bytes) in flight, 256 threads per block, 3 or more blocks per SM:
//   96 KB per SM.
// Precisions: fp32, and bf16 / fp16 (PREC_BF16 / PREC_FP16 = 1) with fp32 products and sums and
//   one rounding to C's type at the end (cvt.rn), as cuBLAS does. A 16-byte load holds VW = 4
//   fp32 or 8 16-bit values.
// Alignment: VEC_A = 1 (common.cuh's switch, set per call by the launcher) where A's lines
//   (rows, or columns in tn / tt) start on 16-byte boundaries; 0 reads the same chunks one element
//   at a time. VEC_B = 1 where B's values along k are contiguous and 16-byte aligned (a
//   column-major B, or the one column of a K x 1 B with unit stride: a row-major B whose ldb is
//   1, checked at run time); other B's are read one value at a time (a row-major B of several
//   columns: k-strided).
// Offsets (common.cuh): every element offset is offset_t, 64-bit in the OFFSET64 build the
//   launcher picks for operands past 2^31 elements (2048 x 1 x 1048576's A); the split-K
//   workspace is addressed in size_t in both builds.
#include "common.cuh"

#ifndef THREADS
#define THREADS 256
#endif
#ifndef NCOL  // columns of C per block
#define NCOL 1
#endif
#ifndef ROWS  // rows kernel: rows of A per thread (one load of B serves all of them)
#define ROWS 4
#endif
#ifndef LANES  // rows kernel: threads sharing one row's k range (a power of two, <= THREADS)
#define LANES THREADS
#endif
#ifndef KU  // 16-byte chunks per row (rows kernel) or k's (columns kernel) in flight per thread
#define KU 2
#endif
#ifndef SPLITK  // > 1: blockIdx.y is the split, C the workspace of SPLITK slabs of M x ldc floats
#define SPLITK 1
#endif
#ifndef RTHREADS  // gemv_splitk_sum's block
#define RTHREADS 256
#endif

// Precision: fp32 unless PREC_BF16 or PREC_FP16 is 1 (mma.cu's numbering: 2 bf16, 3 fp16).
#if defined(PREC_BF16) && PREC_BF16
#define PREC 2
#elif defined(PREC_FP16) && PREC_FP16
#define PREC 3
#else
#define PREC 0
#endif
#if PREC
typedef unsigned short elem_t;  // the bits of a bfloat16 / float16 (no cuda_bf16.h needed)
#else
typedef float elem_t;
#endif
#define VW (16 / (int)sizeof(elem_t))  // elements per 16-byte chunk
#if SPLITK > 1
typedef float out_t;  // partial sums, rounded once by gemv_splitk_sum
#else
typedef elem_t out_t;
#endif
// UNROLL = 0 (the `unroll` switch): one chunk per row in flight, no batching of the loads
#define KUE (UNROLL ? KU : 1)
#define WARPS (THREADS / 32)
#define GROUPS (THREADS / LANES)          // rows kernel: row groups per block
#define BLOCK_ROWS (GROUPS * ROWS)        // rows kernel: rows of C per block
#define SEG (LANES < 32 ? LANES : 32)     // rows kernel: lanes of a row group within one warp
#define WPR (LANES > 32 ? LANES / 32 : 1) // rows kernel: warps per row group
#define COL_ROWS (32 * VW)                // columns kernel: rows of C per block

static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "whole warps, 32..1024");
static_assert(LANES >= 1 && LANES <= THREADS && (LANES & (LANES - 1)) == 0 && THREADS % LANES == 0,
              "LANES: a power of two dividing THREADS");
static_assert(NCOL >= 1 && NCOL <= 8 && ROWS >= 1 && ROWS <= 8 && KU >= 1 && KU <= 8,
              "NCOL, ROWS and KU are 1..8");
#if PREC && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "cvt.rn.bf16.f32 needs compute capability 8.0 or newer"
#endif

// 16 bytes of VW elements: one 128-bit load (LDG.E.128) where the address is 16-byte aligned.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};
typedef Vec<elem_t, VW> vec_t;

// VW consecutive elements at p: one 16-byte load (WIDE: p is 16-byte aligned) or VW loads.
template <bool WIDE>
__device__ __forceinline__ vec_t load_vec(const elem_t* p) {
    if (WIDE) return *reinterpret_cast<const vec_t*>(p);
    vec_t r;
#pragma unroll
    for (int e = 0; e < VW; ++e) r.v[e] = p[e];
    return r;
}

// ------------------------------------------------------------------------------ conversions
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
#if PREC
__device__ __forceinline__ float to_float(unsigned short h) {
#if PREC == 2  // bfloat16: the top half of a float
#ifdef __CUDA_ARCH__
    return __uint_as_float(static_cast<unsigned>(h) << 16);
#else
    const unsigned u = static_cast<unsigned>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
#endif
#else  // float16
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    _Float16 x;
    __builtin_memcpy(&x, &h, 2);
    return static_cast<float>(x);
#endif
#endif
}
// C's element: v rounded to nearest even, once.
__device__ __forceinline__ void put(unsigned short* p, float v) {
    unsigned short h;
#ifdef __CUDA_ARCH__
#if PREC == 2
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
#else
#if PREC == 2
    unsigned u;
    __builtin_memcpy(&u, &v, 4);
    h = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u  // NaN
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#else
    const _Float16 x = static_cast<_Float16>(v);  // round to nearest even
    __builtin_memcpy(&h, &x, 2);
#endif
#endif
    *p = h;
}
#endif

// ------------------------------------------------------------------------------ sums
// v[i] summed over the SEG lanes of this thread's segment of its warp (lanes l with the same
// l / SEG), left in every one of them: a butterfly of log2(SEG) shuffles per value, each lane
// adding its partner's value to its own (the same additions in every lane, so the same bits).
// On the CPU (tests/cuda_emulator.py) the partner's value comes through a block-wide array
// between two barriers; every thread of the block calls this, so every thread reaches them.
template <int S, int CNT>
__device__ __forceinline__ void segment_sum(float (&v)[CNT]) {
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int m = S / 2; m >= 1; m /= 2)
#pragma unroll
        for (int i = 0; i < CNT; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], m);
#else
    __shared__ float x[THREADS][CNT];
    const int t = threadIdx.x;
    for (int m = S / 2; m >= 1; m /= 2) {
        for (int i = 0; i < CNT; ++i) x[t][i] = v[i];
        __syncthreads();
        for (int i = 0; i < CNT; ++i) v[i] += x[t ^ m][i];
        __syncthreads();
    }
#endif
}

// ------------------------------------------------------------------------------ B
// B's values at k, k+1, ..., k+VW-1 of the NCOL columns jc[c], as floats. BVEC: they are
// contiguous and 16-byte aligned (one 16-byte load per column); else one load per value.
template <bool BVEC>
__device__ __forceinline__ void load_b(const elem_t* __restrict__ B, int ldb, int k,
                                       const int (&jc)[NCOL], float (&bv)[NCOL][VW]) {
#pragma unroll
    for (int c = 0; c < NCOL; ++c) {
        if (BVEC) {
            const vec_t v = load_vec<true>(B + B_OFF(k, jc[c]));
#pragma unroll
            for (int e = 0; e < VW; ++e) bv[c][e] = to_float(v.v[e]);
        } else {
#pragma unroll
            for (int e = 0; e < VW; ++e) bv[c][e] = to_float(B[B_OFF(k + e, jc[c])]);
        }
    }
}

// ------------------------------------------------------------------------------ rows kernel
// The main loop of one row group: lane r takes the chunks c = r, r + LANES, ... below nvec of
// the ROWS rows at a[p] (each pointing at the split's first k, k0), KUE chunks per row at a time:
// all their loads first, then the FMAs (in a fixed order: chunk by chunk, element by element).
template <bool BVEC>
__device__ __forceinline__ void rows_loop(const elem_t* const (&a)[ROWS],
                                          const elem_t* __restrict__ B, int ldb, int k0, int nvec,
                                          int r, const int (&jc)[NCOL],
                                          float (&acc)[ROWS][NCOL]) {
    int c = r;
#pragma unroll 1
    for (; c + (KUE - 1) * LANES < nvec; c += KUE * LANES) {
        vec_t av[KUE][ROWS];
        float bv[KUE][NCOL][VW];
#pragma unroll
        for (int u = 0; u < KUE; ++u)
#pragma unroll
            for (int p = 0; p < ROWS; ++p) av[u][p] = load_vec<VEC_A>(a[p] + (c + u * LANES) * VW);
#pragma unroll
        for (int u = 0; u < KUE; ++u) load_b<BVEC>(B, ldb, k0 + (c + u * LANES) * VW, jc, bv[u]);
#pragma unroll
        for (int u = 0; u < KUE; ++u)
#pragma unroll
            for (int p = 0; p < ROWS; ++p)
#pragma unroll
                for (int e = 0; e < VW; ++e)
#pragma unroll
                    for (int j = 0; j < NCOL; ++j)
                        acc[p][j] = fmaf(to_float(av[u][p].v[e]), bv[u][j][e], acc[p][j]);
    }
#pragma unroll 1
    for (; c < nvec; c += LANES) {  // the last chunks, fewer than KUE per lane
        vec_t av[ROWS];
        float bv[NCOL][VW];
#pragma unroll
        for (int p = 0; p < ROWS; ++p) av[p] = load_vec<VEC_A>(a[p] + c * VW);
        load_b<BVEC>(B, ldb, k0 + c * VW, jc, bv);
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
#pragma unroll
            for (int e = 0; e < VW; ++e)
#pragma unroll
                for (int j = 0; j < NCOL; ++j)
                    acc[p][j] = fmaf(to_float(av[p].v[e]), bv[j][e], acc[p][j]);
    }
}

// ------------------------------------------------------------------------------ columns kernel
// A column-major: VW consecutive rows i0.. of column k, one 16-byte load where they are all
// inside A (FULL, block-uniform) and A's columns are aligned; else one load each, rows past the
// edge clamped to M - 1 (read, multiplied, never stored).
template <bool FULL>
__device__ __forceinline__ vec_t load_column(const elem_t* __restrict__ A, int lda, int k, int i0,
                                             int M) {
    const elem_t* col = A + (offset_t)k * lda;
    if (FULL) return load_vec<VEC_A>(col + i0);
    vec_t r;
#pragma unroll
    for (int e = 0; e < VW; ++e) r.v[e] = col[min(i0 + e, M - 1)];
    return r;
}

template <bool FULL>
__device__ __forceinline__ void cols_loop(const elem_t* __restrict__ A,
                                          const elem_t* __restrict__ B, int lda, int ldb,
                                          int k, int k1, int i0, int M, const int (&jc)[NCOL],
                                          float (&acc)[VW][NCOL]) {
#pragma unroll 1
    for (; k + (KUE - 1) * WARPS < k1; k += KUE * WARPS) {
        vec_t av[KUE];
        float bv[KUE][NCOL];
#pragma unroll
        for (int u = 0; u < KUE; ++u) av[u] = load_column<FULL>(A, lda, k + u * WARPS, i0, M);
#pragma unroll
        for (int u = 0; u < KUE; ++u)
#pragma unroll
            for (int j = 0; j < NCOL; ++j) bv[u][j] = to_float(B[B_OFF(k + u * WARPS, jc[j])]);
#pragma unroll
        for (int u = 0; u < KUE; ++u)
#pragma unroll
            for (int e = 0; e < VW; ++e)
#pragma unroll
                for (int j = 0; j < NCOL; ++j)
                    acc[e][j] = fmaf(to_float(av[u].v[e]), bv[u][j], acc[e][j]);
    }
#pragma unroll 1
    for (; k < k1; k += WARPS) {
        const vec_t av = load_column<FULL>(A, lda, k, i0, M);
        float bv[NCOL];
#pragma unroll
        for (int j = 0; j < NCOL; ++j) bv[j] = to_float(B[B_OFF(k, jc[j])]);
#pragma unroll
        for (int e = 0; e < VW; ++e)
#pragma unroll
            for (int j = 0; j < NCOL; ++j) acc[e][j] = fmaf(to_float(av.v[e]), bv[j], acc[e][j]);
    }
}

// One file, two builds: matmul_gemv's, and gemv_splitk_sum's alone (SUM_ONLY=1, gemv.py's
// build_sum), so that each cubin holds one kernel. On the CPU (tests/cuda_emulator.py, no
// __CUDA_ARCH__) both are compiled, for a test that runs one after the other.
#ifndef SUM_ONLY
#define SUM_ONLY 0
#endif

#if !SUM_ONLY
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_gemv(const elem_t* __restrict__ A, const elem_t* __restrict__ B, out_t* __restrict__ C,
            int M, int N, int K, int lda, int ldb, int ldc) {
    const int tid = threadIdx.x;
    const int col_groups = CEIL_DIV(N, NCOL);
    const int rb = blockIdx.x / col_groups;          // row block
    const int j0 = (blockIdx.x - rb * col_groups) * NCOL;  // first column of C
    // columns past N read column N - 1 (never stored): no test in the loop
    int jc[NCOL];
#pragma unroll
    for (int j = 0; j < NCOL; ++j) jc[j] = min(j0 + j, N - 1);
#if SPLITK > 1
    const int split = blockIdx.y;
    C += (size_t)split * M * ldc;  // this split's slab of the workspace (ldc = N)
#else
    const int split = 0;
#endif

#if !TRANS_A
    // ---- rows kernel. This split's k range [k0, k1): a whole number of chunks (ks), so that a
    // chunk of a 16-byte aligned row is 16-byte aligned; the last split may end in a partial
    // chunk (K % VW values: the tail below), a split past K is empty (its slab gets zeros).
    const long long ks = (long long)CEIL_DIV(CEIL_DIV(K, SPLITK), VW) * VW;
    const int k0 = (int)min((long long)K, split * ks);
    const int k1 = (int)min((long long)K, k0 + ks);
    const int nvec = (k1 - k0) / VW;
    const int gi = tid / LANES, r = tid % LANES;  // row group, lane within it
    // (rows past M + 7 are never needed: the first row is clamped to M, which keeps every row
    // index an int for any M below 2^31)
    const int row0 = (int)min((long long)rb * BLOCK_ROWS + gi * ROWS, (long long)M);
    const elem_t* a[ROWS];  // rows past M read row M - 1 (never stored)
#pragma unroll
    for (int p = 0; p < ROWS; ++p) a[p] = A + (offset_t)min(row0 + p, M - 1) * lda + k0;

    float acc[ROWS][NCOL];
    zero_acc(acc);
    // B's values along k are contiguous in a column-major B, and in a row-major B whose rows are
    // one element apart (ldb = 1: a K x 1 B, the matrix-vector product's)
    if (VEC_B && (TRANS_B || ldb == 1))
        rows_loop<true>(a, B, ldb, k0, nvec, r, jc, acc);
    else
        rows_loop<false>(a, B, ldb, k0, nvec, r, jc, acc);
    // the tail: the last K % VW values of K (only in the split that holds K's end)
    const int kt = k0 + nvec * VW;
    for (int t = r; t < k1 - kt; t += LANES)
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
#pragma unroll
            for (int j = 0; j < NCOL; ++j)
                acc[p][j] = fmaf(to_float(a[p][nvec * VW + t]), to_float(B[B_OFF(kt + t, jc[j])]),
                                 acc[p][j]);

    // Sum over the row group's lanes: shuffles within a warp, then across its warps.
    float v[ROWS * NCOL];
#pragma unroll
    for (int p = 0; p < ROWS; ++p)
#pragma unroll
        for (int j = 0; j < NCOL; ++j) v[p * NCOL + j] = acc[p][j];
    segment_sum<SEG>(v);
#if LANES <= 32
    if (r == 0) {  // every lane of the segment holds the sums; one stores them
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
#pragma unroll
            for (int j = 0; j < NCOL; ++j)
                if (row0 + p < M && j0 + j < N)
                    put(C + (offset_t)(row0 + p) * ldc + j0 + j, v[p * NCOL + j]);
    }
#else
    __shared__ float part[WARPS][ROWS * NCOL];  // each warp's sums
    if (tid % 32 == 0) {
#pragma unroll
        for (int i = 0; i < ROWS * NCOL; ++i) part[tid / 32][i] = v[i];
    }
    __syncthreads();
    for (int t = tid; t < GROUPS * ROWS * NCOL; t += THREADS) {  // one result per thread
        const int g = t / (ROWS * NCOL), i = t % (ROWS * NCOL);
        float sum = part[g * WPR][i];
#pragma unroll
        for (int w = 1; w < WPR; ++w) sum += part[g * WPR + w][i];  // in warp order
        const long long row = (long long)rb * BLOCK_ROWS + g * ROWS + i / NCOL;
        const int col = j0 + i % NCOL;
        if (row < M && col < N) put(C + (offset_t)row * ldc + col, sum);
    }
#endif

#else
    // ---- columns kernel. This split's k range [k0, k1); warp w takes k0 + w, k0 + w + WARPS, ...
    const long long ks = CEIL_DIV(K, SPLITK);
    const int k0 = (int)min((long long)K, split * ks);
    const int k1 = (int)min((long long)K, k0 + ks);
    const int warp = tid / 32, lane = tid % 32;
    const int i0 = rb * COL_ROWS + lane * VW;  // this lane's first row
    float acc[VW][NCOL];
    zero_acc(acc);
    if (rb * COL_ROWS + COL_ROWS <= M)  // the whole block inside A: no clamps
        cols_loop<true>(A, B, lda, ldb, k0 + warp, k1, i0, M, jc, acc);
    else
        cols_loop<false>(A, B, lda, ldb, k0 + warp, k1, i0, M, jc, acc);

#if WARPS > 1
    // Sum over the warps, one column at a time, in warp order.
    __shared__ __align__(16) float part[WARPS][32][VW];
#pragma unroll
    for (int j = 0; j < NCOL; ++j) {
#pragma unroll
        for (int e = 0; e < VW; ++e) part[warp][lane][e] = acc[e][j];
        __syncthreads();
        if (warp == j % WARPS) {  // the columns' sums spread over the warps
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                float sum = part[0][lane][e];
#pragma unroll
                for (int w = 1; w < WARPS; ++w) sum += part[w][lane][e];
                if (i0 + e < M && j0 + j < N) put(C + (offset_t)(i0 + e) * ldc + j0 + j, sum);
            }
        }
        __syncthreads();
    }
#else
#pragma unroll
    for (int j = 0; j < NCOL; ++j)
#pragma unroll
        for (int e = 0; e < VW; ++e)
            if (i0 + e < M && j0 + j < N) put(C + (offset_t)(i0 + e) * ldc + j0 + j, acc[e][j]);
#endif
#endif
}
#endif  // !SUM_ONLY

#if SUM_ONLY || !defined(__CUDA_ARCH__)
// The split-K sum: C = W[0] + W[1] + ... + W[SPLITK-1], W[s] the M x N slab s of the workspace
// (row-major, rows of N floats), always in that order, rounded once to C's type. One thread per
// element of C, SPLITK loads in flight; a 1-D grid of ceil(M*N / RTHREADS) blocks of RTHREADS.
extern "C" __global__ void __launch_bounds__(RTHREADS)
gemv_splitk_sum(const float* __restrict__ W, elem_t* __restrict__ C, int M, int N, int ldc) {
    const offset_t e = (offset_t)blockIdx.x * RTHREADS + (offset_t)threadIdx.x;
    const offset_t mn = (offset_t)M * N;
    if (e >= mn) return;
    float v[SPLITK];
#pragma unroll
    for (int s = 0; s < SPLITK; ++s) v[s] = W[(size_t)s * (size_t)mn + (size_t)e];
    float sum = v[0];
#pragma unroll
    for (int s = 1; s < SPLITK; ++s) sum += v[s];  // fixed order: bitwise reproducible
    const offset_t i = e / N;
    put(C + i * ldc + (e - i * N), sum);
}
#endif
