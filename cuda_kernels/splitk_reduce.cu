// Split-K reduction (not a stage of its own: the second kernel of a split-K launch, see
// warptiling.cu). C = W[0] + W[1] + ... + W[SPLITK-1], where W[s] is the M x N partial product of
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
#include "common.cuh"

#ifndef SPLITK
#define SPLITK 2
#endif
#ifndef RTHREADS
#define RTHREADS 256
#endif

extern "C" __global__ void __launch_bounds__(RTHREADS)
splitk_reduce(const float* __restrict__ W, float* __restrict__ C, int M, int N, int ldw, int ldc) {
    const int chunks = (N + 3) / 4;  // float4 chunks per row
    const offset_t e = (offset_t)blockIdx.x * RTHREADS + (offset_t)threadIdx.x;
    if (e >= (offset_t)M * chunks) return;
    const offset_t i = e / chunks;
    const int j = 4 * (int)(e - i * chunks);
    const size_t slab = (size_t)M * ldw;
    const float* w = W + (size_t)i * ldw + j;
    float4 v[SPLITK];
#pragma unroll
    for (int s = 0; s < SPLITK; ++s)  // all loads first: SPLITK requests in flight
        v[s] = *reinterpret_cast<const float4*>(w + s * slab);
    float4 sum = v[0];
#pragma unroll
    for (int s = 1; s < SPLITK; ++s) {  // fixed order: bitwise reproducible
        sum.x += v[s].x;
        sum.y += v[s].y;
        sum.z += v[s].z;
        sum.w += v[s].w;
    }
    float* c = C + i * ldc + j;
    const int valid = N - j < 4 ? N - j : 4;
    if (VEC_C && valid == 4) {
        *reinterpret_cast<float4*>(c) = sum;
        return;
    }
    c[0] = sum.x;
    if (valid > 1) c[1] = sum.y;
    if (valid > 2) c[2] = sum.z;
    if (valid > 3) c[3] = sum.w;
}
