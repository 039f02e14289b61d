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

// fp8's operands (e4m3, one byte; wgmma reads them K-major only): a byte a thread would make a
// warp read 32 bytes of a line per instruction (about 1 TB/s on an H100), so bytes move four at a
// time. A block of 16 x 16 threads takes a 64 x 64-byte tile: each thread loads a 32-bit word of
// four rows (a half-warp reads 64 consecutive bytes of a line), the tile goes to shared memory,
// each thread reads back the words of four consecutive rows at one word column, transposes that
// 4 x 4-byte block in registers (__byte_perm) and stores four words, one into each of four dst
// lines (again 64 consecutive bytes per half-warp). Rows of the tile are padded by one word. A
// tile at the edge, or lines not 4-byte aligned, is moved a byte at a time.
#define TB 64  // the byte tile's edge

extern "C" __global__ void __launch_bounds__(256)
    transpose_u8(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, int R,
                 int C, long long lds, long long ldd) {
    __shared__ unsigned int tile[TB][TB / 4 + 1];
    const int c0 = blockIdx.x * TB, r0 = blockIdx.y * TB;
    const int tx = threadIdx.x, ty = threadIdx.y;  // 16 x 16
    const bool words = r0 + TB <= R && c0 + TB <= C && lds % 4 == 0 && ldd % 4 == 0 &&
                       reinterpret_cast<unsigned long long>(src) % 4 == 0 &&
                       reinterpret_cast<unsigned long long>(dst) % 4 == 0;
    if (words) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // rows ty, ty + 16, ...; word column tx
            const int r = ty + 16 * i;
            tile[r][tx] = *reinterpret_cast<const unsigned int*>(src + (r0 + r) * lds + c0 + 4 * tx);
        }
        __syncthreads();
        // rows 4 tx .. 4 tx + 3 at word column ty: bytes (4 tx + i, 4 ty + j)
        unsigned int w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = tile[4 * tx + i][ty];
        // out[j] = bytes j of w[0..3]: dst line c0 + 4 ty + j, bytes r0 + 4 tx ..
        const unsigned int lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
        const unsigned int lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
        const unsigned int out[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                                     __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            *reinterpret_cast<unsigned int*>(dst + (c0 + 4 * ty + j) * ldd + r0 + 4 * tx) = out[j];
        return;
    }
    // the edge: a byte at a time, through the same tile seen as bytes
    unsigned char* bytes = reinterpret_cast<unsigned char*>(&tile[0][0]);
    constexpr int LINE = 4 * (TB / 4 + 1);
    const int t = ty * 16 + tx;
    for (int k = t; k < TB * TB; k += 256) {
        const int r = k / TB, c = k % TB;
        if (r0 + r < R && c0 + c < C) bytes[r * LINE + c] = src[(r0 + r) * lds + c0 + c];
    }
    __syncthreads();
    for (int k = t; k < TB * TB; k += 256) {
        const int c = k / TB, r = k % TB;
        if (r0 + r < R && c0 + c < C) dst[(c0 + c) * ldd + r0 + r] = bytes[r * LINE + c];
    }
}
