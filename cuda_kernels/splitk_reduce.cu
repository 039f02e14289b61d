// Split-K reduction (not a stage of its own: the second kernel of a split-K launch, see
// warptiling.cu and the split-K builds of cuda_kernels/variants/persistent.cu). C = W[0] + W[1] + ... + W[SPLITK-1], where W[s] is the M x N partial product of
// split s, stored as slab s of the workspace (rows of ldw floats, ldw a multiple of 4; slab s
// starts at s*M*ldw). C is row-major with leading dimension ldc.
//
// Deterministic: every element is summed by one thread, always in the order s = 0, 1, ..., so two
// launches on the same inputs give the same bits (an atomicAdd reduction would not: the order
// in which the splits arrive changes from launch to launch, and fp32 addition is not associative).
// Launch geometry (warptiling.py: reduce_geometry): one thread per 4 consecutive elements of a row
// of C (a float4 of every slab: SPLITK independent LDG.E.128 in flight per thread), RTHREADS
// threads per block, a 1-D grid of ceil(M * ceil(N/4) / RTHREADS) blocks. Memory-bound: it reads
// SPLITK*M*N floats (mostly from L2: the main kernel has just written them) and writes M*N.
// VEC_C = 0 (common.cuh's switch, 1 by default): C's rows are not 16-byte aligned, so C is
// written one float at a time.
// Offsets (common.cuh's offset_t): the element index e, the row i and i * ldc are 64-bit in the
// OFFSET64 build (a C of more than 2^31 elements: M * ceil(N/4) chunks may pass 2^31 too); the
// workspace is addressed in size_t in both builds.
// OUT_BF16 / OUT_F16 (persistent's split-K in bf16, fp8 and fp16): C holds 16-bit elements, each
// the fp32 sum rounded to nearest even (as the kernels' own epilogues round it); a row's four
// elements are one 8-byte store where C's base and ldc allow it (VEC_C), else single elements.
// STREAMK (persistent's stream-K builds): the main kernel's first (T / G) G tiles in walk order
// are whole, and so is a later tile that lies inside one block's range of k-tiles; the others
// have as many parts as the ranges their k-tiles meet (part j in slab j), up to SPLITK. The
// thread finds its tile, the tile's place in the walk (the main kernel's tile_of, GROUP
// tile-rows at a time, inverted) and the ranges that hold its first and last k-tile; a whole
// tile was stored into C by the main kernel and is left alone, the others' parts are added in the
// order j = 0, 1, ... (the arguments after ldc: grid_m, grid_n, KT and the main kernel's blocks G).
// A tile cut over more than RBATCH blocks (one tile, a long K: up to one part per block) has its
// parts loaded RBATCH at a time, in the same order.
#include "common.cuh"

#if defined(OUT_BF16) || defined(OUT_F16)
typedef unsigned short out_t;  // the bits of a bfloat16 or a half
#ifndef __CUDA_ARCH__  // the CPU emulator (tests/cuda_emulator.py): cvt.rn's rounding in C++
inline unsigned round16(float f) {  // to nearest, ties to even (finite inputs)
#if defined(OUT_BF16)
    unsigned u;
    std::memcpy(&u, &f, sizeof u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
#else
    const _Float16 h = static_cast<_Float16>(f);
    unsigned short u;
    std::memcpy(&u, &h, sizeof u);
    return u;
#endif
}
#endif
__device__ __forceinline__ unsigned pack2(float x, float y) {  // x in the low half
    unsigned v;
#ifndef __CUDA_ARCH__
    v = round16(x) | round16(y) << 16;
#elif defined(OUT_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(v) : "f"(y), "f"(x));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(v) : "f"(y), "f"(x));
#endif
    return v;
}
#else
typedef float out_t;
#endif

#ifndef SPLITK
#define SPLITK 2
#endif
#ifndef RTHREADS
#define RTHREADS 256
#endif

#ifndef STREAMK
#define STREAMK 0
#endif
#ifndef RBATCH
#define RBATCH 16  // a stream-K build of more parts than this sums them this many at a time
#endif

extern "C" __global__ void __launch_bounds__(RTHREADS)
splitk_reduce(const float* __restrict__ W, out_t* __restrict__ C, int M, int N, int ldw, int ldc
#if STREAMK
              , int grid_m, int grid_n, int KT, int G
#endif
              ) {
    const int chunks = (N + 3) / 4;  // float4 chunks per row
    const offset_t e = (offset_t)blockIdx.x * RTHREADS + (offset_t)threadIdx.x;
    if (e >= (offset_t)M * chunks) return;
    const offset_t i = e / chunks;
    const int j = 4 * (int)(e - i * chunks);
#if STREAMK  // this element's tile, its place t in the walk, and its parts
    const int bm = (int)(i / TBM), bn = j / TBN, first_m = bm / GROUP * GROUP;
    const int rows = min(grid_m - first_m, GROUP);
    const long long t = (long long)first_m * grid_n + (long long)bn * rows + (bm - first_m);
    // the main kernel's walk: DP whole tiles first, then W k-iterations cut into GS ranges
    const int dp = grid_m * grid_n / G * G;
    if (t < dp) return;  // a whole tile: stored by the main kernel
    const long long work = (long long)(grid_m * grid_n - dp) * KT, x = (t - dp) * KT;
    const long long gs = work < G ? work : G;
    const int parts = (int)(((x + KT) * gs - 1) / work - ((x + 1) * gs - 1) / work) + 1;
    if (parts == 1) return;  // the tile inside one range: stored by the main kernel
#else
    constexpr int parts = SPLITK;
#endif
    const size_t slab = (size_t)M * ldw;
    const float* w = W + (size_t)i * ldw + j;
#if STREAMK && SPLITK > RBATCH
    // A tile cut over many blocks (up to one part per block): the parts RBATCH at a time, so that
    // the loads in flight stay in registers (all SPLITK at once spilled from 64 parts on), added
    // in the same order 0, 1, 2, ... as below
    float4 sum = *reinterpret_cast<const float4*>(w);
#pragma unroll 1
    for (int s0 = 1; s0 < parts; s0 += RBATCH) {
        float4 v[RBATCH];
#pragma unroll
        for (int b = 0; b < RBATCH; ++b)  // RBATCH requests in flight
            if (s0 + b < parts) v[b] = *reinterpret_cast<const float4*>(w + (s0 + b) * slab);
#pragma unroll
        for (int b = 0; b < RBATCH; ++b) {
            if (s0 + b >= parts) break;
            sum.x += v[b].x;
            sum.y += v[b].y;
            sum.z += v[b].z;
            sum.w += v[b].w;
        }
    }
#else
    float4 v[SPLITK];
#pragma unroll
    for (int s = 0; s < SPLITK; ++s)  // all loads first: SPLITK requests in flight
        if (s < parts) v[s] = *reinterpret_cast<const float4*>(w + s * slab);
    float4 sum = v[0];
#pragma unroll
    for (int s = 1; s < SPLITK; ++s) {  // fixed order: bitwise reproducible
        if (s >= parts) break;
        sum.x += v[s].x;
        sum.y += v[s].y;
        sum.z += v[s].z;
        sum.w += v[s].w;
    }
#endif
    out_t* c = C + i * ldc + j;
    const int valid = N - j < 4 ? N - j : 4;
#if defined(OUT_BF16) || defined(OUT_F16)
    const unsigned lo = pack2(sum.x, sum.y), hi = pack2(sum.z, sum.w);
    if (VEC_C && valid == 4) {
        *reinterpret_cast<uint2*>(c) = make_uint2(lo, hi);
        return;
    }
    c[0] = static_cast<out_t>(lo & 0xffffu);
    if (valid > 1) c[1] = static_cast<out_t>(lo >> 16);
    if (valid > 2) c[2] = static_cast<out_t>(hi & 0xffffu);
    if (valid > 3) c[3] = static_cast<out_t>(hi >> 16);
    return;
#endif
    if (VEC_C && valid == 4) {
        *reinterpret_cast<float4*>(c) = sum;
        return;
    }
    c[0] = sum.x;
    if (valid > 1) c[1] = sum.y;
    if (valid > 2) c[2] = sum.z;
    if (valid > 3) c[3] = sum.w;
}
