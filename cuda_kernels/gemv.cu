// Stage: gemv. Thin products (N = 1 to a few columns): no tiles of B at all, A streamed once.
//
// Changed from double_buffered (and every stage before it): those kernels compute C in tiles of
//   at least 64 x 64 and stage both operands in shared memory, so that each loaded element of A
//   and B feeds 64 or more FMAs. With N = 1 there is nothing to reuse an element of A for: each
//   is multiplied once, by the one value of B at its k. A 64-column tile then computes 63
//   columns that are not in C (B's padding), spends its shared memory and registers on them, and
//   its FMA rate no longer matters: the time is the time to read A. This stage is built for that:
//   1. No shared-memory staging. Each thread loads A straight into registers with 16-byte loads
//      (4 floats) along A's rows, KU chunks per row in flight, and multiplies them by B's values
//      at the same k's.
//   2. One column per block. The grid is (row blocks) x N: a matrix-vector product (N = 1) is
//      one block per row block; a wider C is correct but reads A once per column.
//   3. B reused across rows from registers. A thread computes ROWS rows of C at the same k's, so
//      each value of B it loads serves ROWS rows: B (4 MB at K = 2^20) is read M / ROWS times
//      from L2 rather than M times.
//   4. Sums across threads by warp shuffles. The LANES threads of a row group split its K; their
//      partial sums meet in a butterfly of __shfl_xor_sync (5 steps per warp, no shared memory,
//      no barrier), then across the warps of a row group through shared memory, in warp order.
// Lesson case: fp32, row-major A and B (layout nn), one column per block (NCOL = 1: the launcher's
//   ncol for N = 1), 16-byte-aligned lines of A and a 16-byte-aligned B (VEC_A = VEC_B = 1),
//   32-bit offsets, K not split, KU chunks in flight (UNROLL = 1). Every other case runs
//   cuda_kernels/variants/gemv.cu, the same kernel with its switches: bf16 / fp16, a column-major
//   A (the columns kernel), a column-major B, NCOL > 1, unaligned lines, offsets past 2^31
//   elements, split-K with its fixed-order sum (the 2048 x 1 x 1048576 product runs it) and
//   unroll=0 (docs/stages/gemv.md, "The lesson and its variants").
// Launch geometry (gemv.py): block THREADS (256 by default) threads in THREADS / LANES row groups
//   of LANES threads (a power of two; the launcher picks it from K: the whole block for a long K,
//   fewer for a short one so that no lane idles). A row group owns ROWS rows; lane r of it takes
//   16-byte chunks r, r + LANES, r + 2 LANES, ... of the rows. Block rows: (THREADS / LANES) *
//   ROWS. Grid: ceil(M / block rows) * N blocks, x = row block * N + column. No dynamic shared
//   memory; static shared memory only for the sums across warps (LANES > 32: WARPS * ROWS floats).
// Bottleneck: DRAM bandwidth. Bytes moved = 4*M*K (A) + 4*K*N (B) + 4*M*N (C). 4097 x 1 x 4096 on
//   an H100 80GB HBM3 (3.35 TB/s): A = 67.1 MB (more than the 50 MB L2), 20.0 us at the roof
//   (cuBLAS: 39.9 us); measured 34.0 us. Bytes in flight decide whether the roof is reached:
//   about 3.35 TB/s x ~1 us of loaded DRAM latency = 3.4 MB across the GPU, 25 KB per SM. At the
//   defaults (ROWS 4, KU 2) a thread holds 8 chunks of A (128 bytes) in flight, 256 threads per
//   block, 3 or more blocks per SM: 96 KB per SM.
#include "common.cuh"  // CEIL_DIV, MIN_BLOCKS

#ifndef THREADS
#define THREADS 256
#endif
#ifndef ROWS  // rows of A per thread (one load of B serves all of them)
#define ROWS 4
#endif
#ifndef LANES  // threads sharing one row's k range (a power of two, <= THREADS)
#define LANES THREADS
#endif
#ifndef KU  // 16-byte chunks per row in flight per thread
#define KU 2
#endif

#define WARPS (THREADS / 32)
#define GROUPS (THREADS / LANES)          // row groups per block
#define BLOCK_ROWS (GROUPS * ROWS)        // rows of C per block
#define SEG (LANES < 32 ? LANES : 32)     // lanes of a row group within one warp
#define WPR (LANES > 32 ? LANES / 32 : 1) // warps per row group

static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "whole warps, 32..1024");
static_assert(LANES >= 1 && LANES <= THREADS && (LANES & (LANES - 1)) == 0 && THREADS % LANES == 0,
              "LANES: a power of two dividing THREADS");
static_assert(ROWS >= 1 && ROWS <= 8 && KU >= 1 && KU <= 8, "ROWS and KU are 1..8");

// 16 bytes: 4 consecutive floats, one 128-bit load (LDG.E.128) from a 16-byte aligned address.
struct alignas(16) Chunk {
    float v[4];
};

__device__ __forceinline__ Chunk load_chunk(const float* p) {
    return *reinterpret_cast<const Chunk*>(p);
}

// v[i] summed over the SEG lanes of this thread's segment of its warp (lanes l with the same
// l / SEG), left in every one of them: a butterfly of log2(SEG) shuffles per value, each lane
// adding its partner's value to its own (the same additions in every lane, so the same bits).
template <int S, int CNT>
__device__ __forceinline__ void segment_sum(float (&v)[CNT]) {
#pragma unroll
    for (int m = S / 2; m >= 1; m /= 2)
#pragma unroll
        for (int i = 0; i < CNT; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], m);
}

// B's 4 values at k, k+1, k+2, k+3 of column j. BVEC (ldb = 1: B's column is a vector along k,
// and B is 16-byte aligned): one 16-byte load; else 4 loads, ldb apart.
template <bool BVEC>
__device__ __forceinline__ void load_b(const float* __restrict__ B, int ldb, int k, int j,
                                       float (&bv)[4]) {
    if (BVEC) {
        const Chunk v = load_chunk(B + (k * ldb + j));
#pragma unroll
        for (int e = 0; e < 4; ++e) bv[e] = v.v[e];
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) bv[e] = B[(k + e) * ldb + j];
    }
}

// The main loop of one row group: lane r takes the chunks c = r, r + LANES, ... below nvec of
// the ROWS rows at a[p], KU chunks per row at a time: all their loads first, then the FMAs (in a
// fixed order: chunk by chunk, element by element).
template <bool BVEC>
__device__ __forceinline__ void rows_loop(const float* const (&a)[ROWS],
                                          const float* __restrict__ B, int ldb, int k0, int nvec,
                                          int r, int j, float (&acc)[ROWS]) {
    int c = r;
#pragma unroll 1
    for (; c + (KU - 1) * LANES < nvec; c += KU * LANES) {
        Chunk av[KU][ROWS];
        float bv[KU][4];
#pragma unroll
        for (int u = 0; u < KU; ++u)
#pragma unroll
            for (int p = 0; p < ROWS; ++p) av[u][p] = load_chunk(a[p] + (c + u * LANES) * 4);
#pragma unroll
        for (int u = 0; u < KU; ++u) load_b<BVEC>(B, ldb, k0 + (c + u * LANES) * 4, j, bv[u]);
#pragma unroll
        for (int u = 0; u < KU; ++u)
#pragma unroll
            for (int p = 0; p < ROWS; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[p] = fmaf(av[u][p].v[e], bv[u][e], acc[p]);
    }
#pragma unroll 1
    for (; c < nvec; c += LANES) {  // the last chunks, fewer than KU per lane
        Chunk av[ROWS];
        float bv[4];
#pragma unroll
        for (int p = 0; p < ROWS; ++p) av[p] = load_chunk(a[p] + c * 4);
        load_b<BVEC>(B, ldb, k0 + c * 4, j, bv);
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[p] = fmaf(av[p].v[e], bv[e], acc[p]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_gemv(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K, int lda, int ldb, int ldc) {
    const int tid = threadIdx.x;
    const int rb = blockIdx.x / N;      // row block
    const int j0 = blockIdx.x - rb * N;  // this block's column of C
    const int j = min(j0, N - 1);        // (j0 < N in the launcher's grid: the variant's guard)

    // The k range [k0, k1): all of K, computed as the variant computes the first of its splits
    // (k0 = min(K, 0), k1 = min(K, K rounded up to whole chunks)): [0, K) for every K >= 0, and
    // the same instructions as the variant's. nvec whole chunks of 4, then the K % 4 values left.
    const long long ks = (long long)CEIL_DIV(K, 4) * 4;
    const int k0 = (int)min((long long)K, 0LL);
    const int k1 = (int)min((long long)K, k0 + ks);
    const int nvec = (k1 - k0) / 4;
    const int gi = tid / LANES, r = tid % LANES;  // row group, lane within it
    // (the first row is clamped to M, which keeps every row index an int for any M below 2^31)
    const int row0 = (int)min((long long)rb * BLOCK_ROWS + gi * ROWS, (long long)M);
    const float* a[ROWS];  // rows past M read row M - 1 (never stored)
#pragma unroll
    for (int p = 0; p < ROWS; ++p) a[p] = A + min(row0 + p, M - 1) * lda + k0;

    float acc[ROWS];
#pragma unroll
    for (int p = 0; p < ROWS; ++p) acc[p] = 0.0f;
    // B's values along k are contiguous where its rows are one element apart (ldb = 1: a K x 1
    // B of unit stride, the matrix-vector product's; the launcher's vec_b says B starts on 16
    // bytes); a column of a wider B is read one value at a time, ldb apart
    if (ldb == 1)
        rows_loop<true>(a, B, ldb, k0, nvec, r, j, acc);
    else
        rows_loop<false>(a, B, ldb, k0, nvec, r, j, acc);
    // the tail: the last K % 4 values of K
    const int kt = k0 + nvec * 4;
    for (int t = r; t < k1 - kt; t += LANES)
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
            acc[p] = fmaf(a[p][nvec * 4 + t], B[(kt + t) * ldb + j], acc[p]);

    // Sum over the row group's lanes: shuffles within a warp, then across its warps.
    segment_sum<SEG>(acc);
#if LANES <= 32
    if (r == 0) {  // every lane of the segment holds the sums; one stores them
#pragma unroll
        for (int p = 0; p < ROWS; ++p)
            if (row0 + p < M && j0 < N) *(C + (row0 + p) * ldc + j0) = acc[p];
    }
#else
    __shared__ float part[WARPS][ROWS];  // each warp's sums
    if (tid % 32 == 0) {
#pragma unroll
        for (int p = 0; p < ROWS; ++p) part[tid / 32][p] = acc[p];
    }
    __syncthreads();
    for (int t = tid; t < GROUPS * ROWS; t += THREADS) {  // one result per thread
        const int g = t / ROWS, p = t % ROWS;
        float sum = part[g * WPR][p];
#pragma unroll
        for (int w = 1; w < WPR; ++w) sum += part[g * WPR + w][p];  // in warp order
        const long long row = (long long)rb * BLOCK_ROWS + g * ROWS + p;
        if (row < M && j0 < N) *(C + (int)row * ldc + j0) = sum;
    }
#endif
}
