// Transposing copy (not a stage of its own: a copy the TMA stages make inside the timed call, see
// cuda_kernels/_tma.py). TF32 and fp8 wgmma read their shared-memory operands K-major only, so an
// fp32 or e4m3 A that is column-major or B that is row-major is turned K-major first, in every
// call (transpose_f32, transpose_u8):
//     dst[c * ldd + r] = src[r * lds + c]    for r < R, c < C,
// src an R x C row-major storage (unit stride along c), dst its C x R row-major transpose.
// Launch geometry (_tma.py: transpose_copy): a 2-D grid of ceil(C / 32) x ceil(R / 32) blocks of
// 32 x 8 threads; each block moves one 32 x 32 tile through shared memory, so a warp reads 32
// consecutive floats of a src row (128 bytes) and writes 32 consecutive floats of a dst row: both
// sides coalesced. The tile's rows are padded by one float, so the column reads of the second
// half fall on 32 distinct banks. Memory-bound: 8 bytes moved per element (torch's copy_ of a
// transposed view, what this replaces, ran at about a third of the H100's bandwidth on 4096^2).
// Offsets are 64-bit (lds, ldd and the products), so one build serves every size.

#define TT 32  // tile edge
#define TR 8   // thread rows per block

template <typename T>
__device__ __forceinline__ void transpose_tile(const T* __restrict__ src, T* __restrict__ dst,
                                               int R, int C, long long lds, long long ldd) {
    __shared__ T tile[TT][TT + 1];
    const int c0 = blockIdx.x * TT, r0 = blockIdx.y * TT;
    const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
    for (int j = ty; j < TT; j += TR) {
        const int r = r0 + j, c = c0 + tx;
        if (r < R && c < C) tile[j][tx] = src[r * lds + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = ty; j < TT; j += TR) {
        const int c = c0 + j, r = r0 + tx;
        if (c < C && r < R) dst[c * ldd + r] = tile[tx][j];
    }
}

extern "C" __global__ void __launch_bounds__(TT * TR)
    transpose_f32(const float* __restrict__ src, float* __restrict__ dst, int R, int C,
                  long long lds, long long ldd) {
    transpose_tile(src, dst, R, C, lds, ldd);
}

// fp8's operands (e4m3, one byte; wgmma reads them K-major only): the same tile of bytes, a warp
// reading and writing 32 consecutive bytes of a line (one 32-byte sector each)
extern "C" __global__ void __launch_bounds__(TT * TR)
    transpose_u8(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, int R,
                 int C, long long lds, long long ldd) {
    transpose_tile(src, dst, R, C, lds, ldd);
}
