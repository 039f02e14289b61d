// Stage: decode. Few rows of activations times a large weight matrix (a language model's layer
// while it generates: M = 1 to 64 tokens), bound by reading the weights once from DRAM.
//
// Lesson case: bf16 operands and C (fp32 accumulation), A row-major (M x K activations) and B
//   column-major (layout nt: B^T, the N x K weight matrix, is row-major, as torch.nn.Linear stores
//   it), lines that start on 16 bytes, 32-bit offsets. Every other build (fp16, fp8 with its
//   scales, the layouts nn, tn, tt, unaligned lines, offsets past 2^31 elements, C^T = B^T A^T for
//   a problem whose N is the small side) is cuda_kernels/variants/decode.cu, the same kernel with
//   switches, which decode.py compiles for those cases; for the lesson case the two files compile
//   to the same SASS (tests/test_lessons_decode.py).
//
// Changed from mma (tiles staged in shared memory by cp.async, read by ldmatrix, each loaded
// element used by 128 or more mma rows or columns): with M = 1 there is no reuse to stage for.
// Each weight is multiplied by M activations and never again, so the time is the time to read
// N x K x 2 bytes once: 4096 x 4096 bf16 is 33.5 MB, 8.1 us at the 4.13 TB/s a torch reduction
// reads an NVIDIA H200's memory at. Everything here serves that read:
//   1. Swap the roles. mma.m16n8k16's 16-row side takes the weights (16 rows of B^T, i.e. 16
//      columns of C) and its 8-column side the activations (8 rows of A): an M = 1 product pads
//      7 of 8 columns of the instruction, not 15 of 16 rows, and M up to 64 is 8 pieces. Each
//      warp owns 16 x TILES rows of B^T; the activations' fragments serve all of them.
//   2. Weights straight from DRAM into fragments, no shared memory. A fragment wants, in lane
//      l = 4g + q, the row g (and g + 8) elements at k = 2q, 2q+1, 2q+8, 2q+9 of each 16 k's; a
//      16-byte load gives 8 consecutive k's of one row. The sum over k does not care which k
//      goes in which slot, so long as both operands use the same order: lane q takes the 16
//      bytes [16q, 16q + 16) of every 64-byte step of its rows, and the SAME bytes of the
//      activation rows; the first 8 bytes feed one mma, the last 8 the next. Every load is one
//      16-byte LDG, a warp's 32 loads cover 16 rows x 64 contiguous bytes, and nothing is
//      rearranged on the way.
//   3. Stream the weights past L1 (ld.global.nc.L1::no_allocate): they are read once; the
//      activations (M x K x 2 bytes, 8 KB at M = 1, K = 4096) stay in L1 for every warp.
//   4. Split K to fill the GPU. 4096 x 4096 in 64-row blocks is 64 blocks for 132 SMs; K is cut
//      into gridDim.y splits so that there are enough blocks, and enough loads in flight, to keep
//      the memory busy (decode.py's auto_split). Each split writes its partial tile to a
//      workspace and counts itself in on an arrival counter; the block that arrives last adds
//      the partial tiles in split order 0, 1, 2, ... and stores C. Whichever block arrives last,
//      the same additions happen in the same order: C is the same from run to run. One kernel:
//      no second launch for the sum.
// Launch geometry (decode.py): block THREADS = 32 x WARPS threads (128), each warp 16 x TILES
//   rows of B^T; grid (ceil(N / BLOCK_N), splits, ceil(M / MROWS)), MROWS = 8 x GROUPS
//   activation rows (8, 16, 32 or 64: the power of two at or above M, at most 64). No shared
//   memory beyond one flag. work: splits x THREADS x ACC floats per tile (ACC = TILES x GROUPS x
//   4 accumulators per thread); arrivals: one zeroed counter per tile, which the last block
//   resets.
// Bottleneck: DRAM bandwidth. Bytes in flight decide whether the roof is reached: about 4.1 TB/s
//   x ~1 us of loaded latency = 4 MB across 132 SMs, 31 KB per SM. A thread holds KU steps x
//   2 x TILES rows x 16 bytes of weights in flight (128 bytes at KU = 4, TILES = 1): 16 KB per
//   block of 128 threads, and several blocks are resident per SM.
#include "common.cuh"  // CEIL_DIV, MIN_BLOCKS

typedef unsigned short elem_t;  // the bits of a bfloat16
typedef unsigned int u32;

#ifndef THREADS
#define THREADS 128
#endif
#ifndef TILES  // 16-row tiles of B^T per warp
#define TILES 1
#endif
#ifndef GROUPS  // 8-row groups of activations per block (MROWS = 8 x GROUPS rows of A)
#define GROUPS 1
#endif
#ifndef KU  // 64-byte steps along K per row in flight per thread
#define KU 4
#endif

#define WARPS (THREADS / 32)
#define WROWS (16 * TILES)        // rows of B^T (columns of C) per warp
#define BLOCK_N (WARPS * WROWS)   // ... per block
#define MROWS (8 * GROUPS)        // rows of A (and of C) per block
#define STEP_K 32                 // k's in a 64-byte step of one row: 4 lanes x 8 bf16
#define ACC (TILES * GROUPS * 4)  // accumulators per thread

// 16 bytes: 8 bf16 along k. r[0], r[1] feed one mma, r[2], r[3] the next.
struct alignas(16) Piece {
    u32 r[4];
};

// A weight piece: read once, so kept out of L1 (the activations live there).
__device__ __forceinline__ Piece load_stream(const elem_t* p) {
    Piece v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.r[0]), "=r"(v.r[1]), "=r"(v.r[2]), "=r"(v.r[3]) : "l"(p));
    return v;
}

// An activation piece: read by every warp of the block, so cached.
__device__ __forceinline__ Piece load_cached(const elem_t* p) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    return {{v.x, v.y, v.z, v.w}};
}

// c += w * x for one 16 x 8 piece: w 16 x 16 (rows of B^T), x 16 x 8 (rows of A as columns),
// bf16 operands, fp32 accumulators (c[0], c[1]) = row g, columns 2q, 2q+1; (c[2], c[3]) = row
// g + 8, the same columns.
__device__ __forceinline__ void mma(float (&c)[4], u32 w0, u32 w1, u32 w2, u32 w3, u32 x0,
                                    u32 x1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(w0), "r"(w1), "r"(w2), "r"(w3), "r"(x0), "r"(x1));
}

// One 64-byte step: the two mmas of each (tile, group) pair. w[t][0] is row g, w[t][1] row g + 8
// of tile t; x[j] is row g of group j. Both operands' first 8 bytes go to the first mma.
__device__ __forceinline__ void mma_step(float (&acc)[TILES][GROUPS][4],
                                         const Piece (&w)[TILES][2], const Piece (&x)[GROUPS]) {
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) {
            mma(acc[t][j], w[t][0].r[0], w[t][1].r[0], w[t][0].r[1], w[t][1].r[1], x[j].r[0],
                x[j].r[1]);
            mma(acc[t][j], w[t][0].r[2], w[t][1].r[2], w[t][0].r[3], w[t][1].r[3], x[j].r[2],
                x[j].r[3]);
        }
}

// KU steps' pieces of a warp's rows: the weights (TILES x 2 rows) and the activations (GROUPS).
struct Batch {
    Piece w[KU][TILES][2];
    Piece x[KU][GROUPS];
};

// Issue the loads of the next KU steps (all in flight together) and move the pointers past them.
__device__ __forceinline__ void load_batch(Batch& b, const elem_t* (&w)[TILES][2],
                                           const elem_t* (&x)[GROUPS]) {
#pragma unroll
    for (int u = 0; u < KU; ++u)
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) b.w[u][t][h] = load_stream(w[t][h] + u * STEP_K);
#pragma unroll
    for (int u = 0; u < KU; ++u)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) b.x[u][j] = load_cached(x[j] + u * STEP_K);
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) w[t][h] += KU * STEP_K;
#pragma unroll
    for (int j = 0; j < GROUPS; ++j) x[j] += KU * STEP_K;
}

__device__ __forceinline__ void mma_batch(float (&acc)[TILES][GROUPS][4], const Batch& b) {
#pragma unroll
    for (int u = 0; u < KU; ++u) mma_step(acc, b.w[u], b.x[u]);
}

// A piece of the last steps: whole (one 16-byte load) where all 8 k's lie inside K, else its k's
// inside K one at a time and zeros past K (in both operands, so whatever lies past K in memory
// adds nothing, and nothing past the row's last element is read).
template <bool STREAM>
__device__ __forceinline__ Piece load_tail(const elem_t* p, int valid) {
    if (valid >= 8) return STREAM ? load_stream(p) : load_cached(p);
    Piece v = {{0u, 0u, 0u, 0u}};
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < valid) v.r[e / 2] |= (u32)p[e] << (16 * (e % 2));
    return v;
}

__device__ __forceinline__ unsigned short to_bf16(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
    return h;
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_decode(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C,
              int M, int N, int K, int lda, int ldb, int ldc, float* __restrict__ work,
              unsigned* __restrict__ arrivals) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;  // fragment row, and which 16 bytes of each step
    const int n0 = blockIdx.x * BLOCK_N + warp * WROWS;  // this warp's first row of B^T
    const int m0 = blockIdx.z * MROWS;                   // the block's first row of A

    // This split's steps [s0, s1) of the ceil(K / STEP_K) 64-byte steps (the first steps % splits
    // splits take one more); the steps below `full` lie wholly inside K.
    const int steps = CEIL_DIV(K, STEP_K), splits = gridDim.y;
    const int per = steps / splits, extra = steps % splits, y = blockIdx.y;
    const int s0 = y * per + min(y, extra), s1 = s0 + per + (y < extra);
    const int full = min(s1, K / STEP_K);

    // Rows past N or M read the last real row (never stored): no test in the loop.
    const elem_t* w[TILES][2];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            w[t][h] = B + (min(n0 + 16 * t + 8 * h + g, N - 1) * ldb + (s0 * STEP_K + 8 * q));
    const elem_t* x[GROUPS];
#pragma unroll
    for (int j = 0; j < GROUPS; ++j)
        x[j] = A + (min(m0 + 8 * j + g, M - 1) * lda + (s0 * STEP_K + 8 * q));

    float acc[TILES][GROUPS][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][j][e] = 0.0f;

    // The main loop, a batch of KU steps at a time: the next batch's loads are issued before this
    // batch's mmas, so a warp always has loads in flight.
    int s = s0;
    if (s + KU <= full) {
        Batch cur;
        load_batch(cur, w, x);
        s += KU;
#pragma unroll 1
        for (; s + KU <= full; s += KU) {
            Batch next;
            load_batch(next, w, x);
            mma_batch(acc, cur);
            cur = next;
        }
        mma_batch(acc, cur);
    }
    // The steps left, one at a time; the last step of K may end inside this lane's 16 bytes.
#pragma unroll 1
    for (; s < s1; ++s) {
        const int valid = K - (s * STEP_K + 8 * q);  // this lane's k's inside K (8 or more: all)
        Piece wv[TILES][2], xv[GROUPS];
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[t][h] = load_tail<true>(w[t][h], valid);
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) xv[j] = load_tail<false>(x[j], valid);
        mma_step(acc, wv, xv);
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) w[t][h] += STEP_K;
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) x[j] += STEP_K;
    }

    if (splits > 1) {
        // This split's partial tile, in the workspace slot of (tile, split): accumulator i of
        // thread tid at [i][tid], so that a warp's stores are contiguous.
        const int tile = blockIdx.z * gridDim.x + blockIdx.x;
        float* part = work + ((size_t)tile * splits + blockIdx.y) * ACC * THREADS + threadIdx.x;
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int j = 0; j < GROUPS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) part[((t * GROUPS + j) * 4 + e) * THREADS] = acc[t][j][e];
        __threadfence();  // the partial tile is visible to the GPU before the arrival counts
        __syncthreads();
        __shared__ bool last;
        if (threadIdx.x == 0) last = atomicAdd(&arrivals[tile], 1u) == (unsigned)splits - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        // The last block adds the splits in order 0, 1, ..., from L2 (__ldcg: not this SM's L1,
        // which never held the other blocks' partials), and resets the counter for the next call.
        const float* tiles = work + (size_t)tile * splits * ACC * THREADS + threadIdx.x;
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int j = 0; j < GROUPS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = (t * GROUPS + j) * 4 + e;
                    float sum = __ldcg(tiles + i * THREADS);
                    for (int p = 1; p < splits; ++p) sum += __ldcg(tiles + (p * ACC + i) * THREADS);
                    acc[t][j][e] = sum;
                }
        if (threadIdx.x == 0) arrivals[tile] = 0;
    }

    // C(m, n) for accumulator e of piece (t, j): n = row g (e < 2) or g + 8 of the tile, m =
    // column 2q + e % 2 of the group.
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int n = n0 + 16 * t + g + 8 * (e / 2), m = m0 + 8 * j + 2 * q + e % 2;
                if (m < M && n < N) C[m * ldc + n] = to_bf16(acc[t][j][e]);
            }
}
