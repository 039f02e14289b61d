// Variant of ../decode.cu for every other case: fp16 (PREC_FP16) and fp8 e4m3 with per-tensor
// scales and a bfloat16 C (PREC_FP8: mma.m16n8k32, 16 k's per 16-byte piece), the layouts nn, tn
// and tt (an operand whose k's are not contiguous is read one element at a time, 16 bytes' worth
// per piece: correct, and slower, since the weights no longer move in 16-byte loads), lines not
// on 16 bytes (VEC_A / VEC_B = 0: the same element loads), a column-major C (TRANS_C: the
// launcher's C^T = B^T A^T for a problem whose N is the small side), operands past 2^31 elements
// (OFFSET64) and one step in flight at a time (UNROLL = 0). decode.py compiles it for every build
// but the lesson's (bf16, nt, 16-byte lines, row-major C, 32-bit offsets, UNROLL = 1); for the
// lesson case the two compile to the same SASS (tests/test_lessons_decode.py). A reader can skip
// it: ../decode.cu is the lesson, and docs/stages/decode.md says what each switch adds.
#include "common.cuh"  // CEIL_DIV, MIN_BLOCKS, TRANS_A, TRANS_B, A_OFF, B_OFF, offset_t

typedef unsigned int u32;
#if defined(PREC_FP8) && PREC_FP8
#define FP8 1
typedef unsigned char elem_t;     // the bits of a float8 e4m3
typedef unsigned short c_elem_t;  // C: the bits of a bfloat16
#define ELEM_BYTES 1
#else
#define FP8 0
typedef unsigned short elem_t;  // the bits of a bfloat16 or a float16
typedef unsigned short c_elem_t;
#define ELEM_BYTES 2
#endif

#ifndef THREADS
#define THREADS 128
#endif
#ifndef TILES
#define TILES 1
#endif
#ifndef GROUPS
#define GROUPS 1
#endif
#ifndef KU
#define KU 4
#endif
#ifndef VEC_A  // A's rows are K-contiguous and start on 16 bytes: 16-byte loads
#define VEC_A 1
#endif
#ifndef VEC_B  // B's columns (rows of B^T) likewise
#define VEC_B 1
#endif
#ifndef TRANS_C  // C column-major, C(m, n) = C[n * ldc + m]
#define TRANS_C 0
#endif

#define WARPS (THREADS / 32)
#define WROWS (16 * TILES)
#define BLOCK_N (WARPS * WROWS)
#define MROWS (8 * GROUPS)
#define VW (16 / ELEM_BYTES)     // elements in a 16-byte piece
#define STEP_K (4 * VW)          // k's in a 64-byte step of one row
#define ACC (TILES * GROUPS * 4)
// 16-byte loads need k's contiguous: A row-major, B column-major (B^T row-major)
#define A_VEC (VEC_A && !TRANS_A)
#define B_VEC (VEC_B && TRANS_B)
#define A_SK (TRANS_A ? lda : 1)  // A's stride along k, in elements
#define B_SK (TRANS_B ? 1 : ldb)  // B's

struct alignas(16) Piece {
    u32 r[4];
};

__device__ __forceinline__ Piece load_stream(const elem_t* p) {
    Piece v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.r[0]), "=r"(v.r[1]), "=r"(v.r[2]), "=r"(v.r[3]) : "l"(p));
    return v;
}

__device__ __forceinline__ Piece load_cached(const elem_t* p) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    return {{v.x, v.y, v.z, v.w}};
}

// A piece of `valid` elements (VW or fewer; the rest zero) one element at a time, `sk` apart.
__device__ __forceinline__ Piece gather(const elem_t* p, offset_t sk, int valid) {
    Piece v = {{0u, 0u, 0u, 0u}};
#pragma unroll
    for (int e = 0; e < VW; ++e)
        if (e < valid)
            v.r[e / (4 / ELEM_BYTES)] |= (u32)p[e * sk] << (8 * ELEM_BYTES * (e % (4 / ELEM_BYTES)));
    return v;
}

// The weight piece at p and the activation piece at p: whole 16-byte loads where the operand
// allows them, else gathered.
template <bool VEC, bool STREAM>
__device__ __forceinline__ Piece load_piece(const elem_t* p, offset_t sk) {
    if (VEC) return STREAM ? load_stream(p) : load_cached(p);
    return gather(p, sk, VW);
}

template <bool VEC, bool STREAM>
__device__ __forceinline__ Piece load_tail(const elem_t* p, offset_t sk, int valid) {
    if (valid >= VW) return load_piece<VEC, STREAM>(p, sk);
    return gather(p, sk, valid);
}

__device__ __forceinline__ void mma(float (&c)[4], u32 w0, u32 w1, u32 w2, u32 w3, u32 x0,
                                    u32 x1) {
#if FP8
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
#elif defined(PREC_FP16) && PREC_FP16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
#endif
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(w0), "r"(w1), "r"(w2), "r"(w3), "r"(x0), "r"(x1));
}

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

struct Batch {
    Piece w[KU][TILES][2];
    Piece x[KU][GROUPS];
};

__device__ __forceinline__ void load_batch(Batch& b, const elem_t* (&w)[TILES][2],
                                           const elem_t* (&x)[GROUPS], int lda, int ldb) {
#pragma unroll
    for (int u = 0; u < KU; ++u)
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                b.w[u][t][h] = load_piece<B_VEC, true>(w[t][h] + (offset_t)(u * STEP_K) * B_SK,
                                                       B_SK);
#pragma unroll
    for (int u = 0; u < KU; ++u)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j)
            b.x[u][j] = load_piece<A_VEC, false>(x[j] + (offset_t)(u * STEP_K) * A_SK, A_SK);
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) w[t][h] += (offset_t)(KU * STEP_K) * B_SK;
#pragma unroll
    for (int j = 0; j < GROUPS; ++j) x[j] += (offset_t)(KU * STEP_K) * A_SK;
}

__device__ __forceinline__ void mma_batch(float (&acc)[TILES][GROUPS][4], const Batch& b) {
#pragma unroll
    for (int u = 0; u < KU; ++u) mma_step(acc, b.w[u], b.x[u]);
}

__device__ __forceinline__ c_elem_t to_c(float x) {
    unsigned short h;
#if defined(PREC_FP16) && PREC_FP16
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
#else
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
#endif
    return h;
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_decode(const elem_t* __restrict__ A, const elem_t* __restrict__ B, c_elem_t* __restrict__ C,
              int M, int N, int K, int lda, int ldb, int ldc, float* __restrict__ work,
              unsigned* __restrict__ arrivals
#if FP8
              , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#endif
              ) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;
    const int n0 = blockIdx.x * BLOCK_N + warp * WROWS;
    const int m0 = blockIdx.z * MROWS;

    const int steps = CEIL_DIV(K, STEP_K), splits = gridDim.y;
    const int per = steps / splits, extra = steps % splits, y = blockIdx.y;
    const int s0 = y * per + min(y, extra), s1 = s0 + per + (y < extra);
    const int full = min(s1, K / STEP_K);

    const elem_t* w[TILES][2];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            w[t][h] = B + B_OFF(s0 * STEP_K + VW * q, min(n0 + 16 * t + 8 * h + g, N - 1));
    const elem_t* x[GROUPS];
#pragma unroll
    for (int j = 0; j < GROUPS; ++j)
        x[j] = A + A_OFF(min(m0 + 8 * j + g, M - 1), s0 * STEP_K + VW * q);

    float acc[TILES][GROUPS][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][j][e] = 0.0f;

    int s = s0;
#if UNROLL
    if (s + KU <= full) {
        Batch cur;
        load_batch(cur, w, x, lda, ldb);
        s += KU;
#pragma unroll 1
        for (; s + KU <= full; s += KU) {
            Batch next;
            load_batch(next, w, x, lda, ldb);
            mma_batch(acc, cur);
            cur = next;
        }
        mma_batch(acc, cur);
    }
#endif
#pragma unroll 1
    for (; s < s1; ++s) {
        const int valid = K - (s * STEP_K + VW * q);
        Piece wv[TILES][2], xv[GROUPS];
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[t][h] = load_tail<B_VEC, true>(w[t][h], B_SK, valid);
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) xv[j] = load_tail<A_VEC, false>(x[j], A_SK, valid);
        mma_step(acc, wv, xv);
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) w[t][h] += (offset_t)STEP_K * B_SK;
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) x[j] += (offset_t)STEP_K * A_SK;
    }

    if (splits > 1) {
        const int tile = blockIdx.z * gridDim.x + blockIdx.x;
        float* part = work + ((size_t)tile * splits + blockIdx.y) * ACC * THREADS + threadIdx.x;
#pragma unroll
        for (int t = 0; t < TILES; ++t)
#pragma unroll
            for (int j = 0; j < GROUPS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) part[((t * GROUPS + j) * 4 + e) * THREADS] = acc[t][j][e];
        __threadfence();
        __syncthreads();
        __shared__ bool last;
        if (threadIdx.x == 0) last = atomicAdd(&arrivals[tile], 1u) == (unsigned)splits - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
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

#if FP8
    const float scale = *scale_a * *scale_b;  // C = scale_a * scale_b * (A @ B)
#endif
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int j = 0; j < GROUPS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int n = n0 + 16 * t + g + 8 * (e / 2), m = m0 + 8 * j + 2 * q + e % 2;
#if FP8
                const float v = scale * acc[t][j][e];
#else
                const float v = acc[t][j][e];
#endif
                if (m < M && n < N)
                    C[TRANS_C ? (offset_t)n * ldc + m : (offset_t)m * ldc + n] = to_c(v);
            }
}
