// Stage: mma. The first tensor-core stage: every warp multiplies its WM x WN tile with the
// warp-wide matrix instruction mma.sync (inline PTX), fed from XOR-swizzled shared memory by
// ldmatrix, with a cp.async ring of STAGES tiles in flight.
//
// Lesson case: bf16 A, B and C (fp32 accumulation), row-major A and B, lines that start on 16
//   bytes, 32-bit offsets, two fragment sets (frags = 2). Every other build (fp16, tf32, 3xtf32,
//   the layouts nt, tn, tt, unaligned lines, operands past 2^31 elements, frags = 1) and the CPU
//   emulator's twins of every PTX instruction are cuda_kernels/variants/mma.cu, the same kernel
//   for every case, which the launcher compiles for them (mma.py: build); for the lesson case the
//   two files compile to the same SASS (tests/test_lessons_mma.py). docs/stages/mma.md has a
//   section per precision that says what it adds and where.
//
// Changed from double_buffered (a warp-tiled SIMT GEMM, cp.async ring, fragments one k-step
// ahead): the FFMA outer products are gone. A warp's tile is cut into 16 x 8 pieces of C, and
// each piece is ONE instruction per k-step of 16: mma.m16n8k16, 2048 multiply-adds, where a warp
// FFMA does 32. Everything else exists to feed it:
//   1. Fragments. mma.sync takes its operands in registers spread over the 32 lanes in a fixed
//      pattern (the "fragment layout", docs/stages/mma.md draws it): lane l = 4g + t holds, of a
//      16 x 16 A piece, rows g and g+8 at columns 2t, 2t+1, 2t+8, 2t+9; of a 16 x 8 B piece,
//      column g at rows 2t, 2t+1, 2t+8, 2t+9. ldmatrix.x4 reads four 8 x 8 b16 matrices from
//      shared memory straight into that pattern: lanes 8j..8j+7 give the addresses of the 8 rows
//      (16 bytes each) of matrix j, and every lane receives 2 elements of each. A row-major A is
//      K-contiguous, as the A fragment wants it: plain ldmatrix. A row-major B is N-contiguous:
//      ldmatrix.trans delivers each 8 x 8 matrix transposed, so B needs no transposing copy.
//   2. Swizzled shared memory. A tile keeps its operand's global layout (cp.async copies bytes,
//      it cannot transpose) as lines of 16-byte chunks; chunk c of line r is stored at chunk
//      position c ^ f(r). ldmatrix reads one 16-byte chunk from each of 8 consecutive lines;
//      unswizzled, lines of 64 or 128 or 256 bytes put those 8 chunks on 2, 1 or 1 distinct
//      group of 4 banks (a 4- or 8-way conflict); with the XOR they fall on 8 different
//      groups: one wavefront per 8x8 matrix, the minimum. See Tile below.
//   3. The cp.async ring (as double_buffered's pipeline=cp_async): STAGES tiles, STAGES-1 in
//      flight while one is read, one cp.async group per tile (empty past the last tile), one
//      barrier per tile. Fragments are double-buffered in registers: the next k-step's ldmatrix
//      is issued before this k-step's mma, and at the last k-step of a tile the first fragments
//      of the next tile are read right after the barrier.
//   4. C is rounded to bfloat16 on store (cvt.rn.bf16x2: two elements per instruction), as
//      cuBLAS does.
//
// The barrier, and why one per tile is enough. Ring slot (t-1) % STAGES is refilled at the top
// of tile t; tile t-1 was last read by fragment loads issued before the barrier that ends tile
// t-1 (its last k-step's fragments are loaded one k-step early, and with one k-step per tile
// they are loaded right after the barrier ending tile t-2), so every warp is done with it.
// Read after write: at the end of tile t a thread has committed groups 0 .. t+STAGES-1;
// wait_group STAGES-2 completes group t+1, and the barrier publishes every thread's copies of
// tile t+1 before anyone reads it.
//
// Launch geometry (mma.py): block (BM/WM)*(BN/WN) warps (256 threads at bf16's defaults), 1-D
// grid of ceil(M/BM)*ceil(N/BN) blocks ordered by common.cuh's block_tile() (GROUP), dynamic
// shared memory DYNAMIC_SMEM_BYTES = STAGES * (BM + BN) * BK * 2 bytes (144 KiB at bf16's
// defaults; the launcher raises the kernel's limit past 48 KiB), no static shared memory.
// Edges: interior blocks on full k-steps copy with no bounds test; other tiles zero-fill what
// lies outside A or B (cp.async with a source size below the copy size); C's stores test the
// row and the column.
// Bottleneck it attacks: the FP32 SIMT ceiling. double_buffered issues one FFMA (2 flops per
// lane) per instruction and can at best reach the 67 TFLOPS FP32 peak; an mma.m16n8k16 does
// 2048 multiply-adds per warp instruction. The new limits are how fast shared memory can feed
// the tensor cores (hence ldmatrix and swizzling) and, on the H100, mma.sync itself, which runs
// well below the wgmma rate of Hopper's asynchronous warpgroup MMA (docs/stages/mma.md).
#define LAB_CP_ASYNC 1  // common.cuh's cp.async wrappers
#include "common.cuh"

// ------------------------------------------------------------------------------ parameters

// BM, BN, BK, WM, WN, STAGES: -D defines that cuda_kernels/mma.py always passes (the registry's
// values, lab/stages.py, where 0 is resolved per precision and shape: mma.py's AUTO table).
// MIN_BLOCKS and GROUP: common.cuh.
typedef unsigned short elem_t;  // the bits of a bfloat16 (no cuda_bf16.h needed)
typedef unsigned int u32;
#define ELEM_BYTES 2
#define KSTEP 16                // mma.m16n8k16
#define CE (16 / ELEM_BYTES)    // elements per 16-byte chunk

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MI (WM / 16)            // 16-row mma pieces of a warp tile
#define NJ (WN / 8)             // 8-column mma pieces
#define KS (BK / KSTEP)         // k-steps per tile

#define A_TILE (BM * BK)        // elements: BM lines (rows of A) of BK
#define B_TILE (BK * BN)        // BK lines (rows of B) of BN
#define DYNAMIC_SMEM_BYTES (STAGES * (A_TILE + B_TILE) * ELEM_BYTES)

static_assert(BM % WM == 0 && BN % WN == 0, "whole warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of 16 x 16 (two 16 x 8) pieces");
static_assert(BK % KSTEP == 0, "whole k-steps per tile");
static_assert(THREADS >= 32 && THREADS <= 1024, "a block holds 32..1024 threads");
static_assert(STAGES >= 2 && STAGES <= 8, "ring depth");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "mma.m16n8k16 bf16, cp.async and cvt.rn.bf16x2 need compute capability 8.0 or newer"
#endif

// ------------------------------------------------------------------------------ swizzle
// A tile is lines of LEN elements, CPL = LEN / CE chunks of 16 bytes per line. Chunk c of line r
// is stored at chunk position c ^ X(r) of the same line (so cp.async still writes whole, aligned
// 16-byte chunks, and a warp's 32 consecutive chunks still cover whole 128-byte rows).
// ldmatrix reads one chunk from each of 8 consecutive lines: X(r) = (r / RPL) % min(8, CPL),
// RPL = max(1, 8 / CPL) lines per 128-byte row of banks:
//   CPL >= 8 (lines of 128 bytes or more): X = r % 8, the 8 lines hit 8 bank groups;
//   CPL = 4 (64-byte lines, 2 per row): X = (r / 2) % 4, the 4 rows of the 8 lines use 4
//     different chunk positions, and the 2 lines of a row differ in their half;
//   CPL = 2 (32-byte lines, BK = 16): X = (r / 4) % 2, likewise.
// X repeats every 8 lines and never exceeds 7, so moving 8 lines or 8 chunks away moves the
// stored position by the same amount: fragment addresses are a few per-lane bases plus
// compile-time offsets (FragA, FragB below).
template <int LEN>
struct Tile {
    static constexpr int CPL = LEN / CE;
    static constexpr int RPL = CPL >= 8 ? 1 : 8 / CPL;
    static constexpr int MASK = (CPL >= 8 ? 8 : CPL) - 1;
    static_assert(CPL >= 2 && (CPL & (CPL - 1)) == 0, "lines of a power-of-two count of chunks");

    static __device__ __forceinline__ int chunk(int line, int c) {
        const int x = (line / RPL) & MASK;
        return line * CPL + (c ^ x);
    }
    // Element offset of (line, element along the line) in the tile.
    static __device__ __forceinline__ int offset(int line, int e) {
        return chunk(line, e / CE) * CE + e % CE;
    }
};
using TileA = Tile<BK>;  // BM lines (rows of A, m) of BK elements (k)
using TileB = Tile<BN>;  // BK lines (rows of B, k) of BN elements (n)

// ------------------------------------------------------------------------------ tile copies
// One operand's tile: NL lines of LEN elements (rows of the row-major operand), cut into 16-byte
// chunks. Chunk q = tid + p * THREADS (p < CHUNKS) is line q / CPL, chunk q % CPL; THREADS and
// CPL are powers of two, so chunk p's line and chunk differ from chunk 0's by compile-time
// constants (dl, dc): a warp copies 32 consecutive chunks, whole lines of global memory.
// cp_async16, cp_async16_zfill: common.cuh's wrappers of cp.async.cg (LAB_CP_ASYNC above).
template <int NL, int LEN, typename TILE>
struct Loader {
    static constexpr int CPL = LEN / CE;
    static constexpr int CHUNKS = NL * CPL / THREADS;
    static_assert(CHUNKS >= 1 && CHUNKS * THREADS == NL * CPL, "whole chunks per thread");

    const elem_t* base;  // the operand's first element: a harmless address for empty copies
    const elem_t* g;     // this thread's chunk 0 in the next tile to copy
    int line, c0;        // chunk 0's line and chunk in the tile

    __device__ __forceinline__ Loader(const elem_t* operand, const elem_t* origin, int ld,
                                      int tid)
        : base(operand), line(tid / CPL), c0(tid % CPL) {
        g = origin + line * ld + c0 * CE;
    }

    // Copy the tile whose (line 0, element 0) is at x0 (line coordinate, limit xlim) and y0
    // (along the line, limit ylim) into `tile`. FULL: the whole tile lies inside the operand.
    template <bool FULL>
    __device__ __forceinline__ void copy(elem_t* tile, int ld, int x0, int xlim, int y0,
                                         int ylim) const {
        // A whole tile whose thread chunks lie STEP lines apart, STEP a multiple of the swizzle's
        // 8-line period: one source pointer, advanced by STEP lines per chunk (the empty asm
        // keeps ptxas from turning it back into CHUNKS live pointers, 3 registers each), and
        // destinations a compile-time distance apart. 3 instructions a chunk, where the rolled
        // loop took 13 (128 x 256 tiles, BK = 64: 104 of the k-tile loop's 438 instructions).
        constexpr int STEP = THREADS / CPL;
        if (FULL && CHUNKS > 1 && THREADS % CPL == 0 && STEP % 8 == 0) {
            const elem_t* s = g;
            elem_t* d = tile + TILE::chunk(line, c0) * CE;
#pragma unroll
            for (int p = 0; p < CHUNKS; ++p) {
                cp_async16(d + p * STEP * LEN, s);
                s += STEP * ld;
                asm volatile("" : "+l"(s));
            }
        } else if (CHUNKS <= 4) {
#pragma unroll
            for (int p = 0; p < CHUNKS; ++p) chunk_copy<FULL>(p, tile, ld, x0, xlim, y0, ylim);
        } else {  // rolled: unrolled, ptxas kept a 64-bit pointer per chunk live and spilled
#pragma unroll 1
            for (int p = 0; p < CHUNKS; ++p) chunk_copy<FULL>(p, tile, ld, x0, xlim, y0, ylim);
        }
    }

    template <bool FULL>
    __device__ __forceinline__ void chunk_copy(int p, elem_t* tile, int ld, int x0, int xlim,
                                               int y0, int ylim) const {
        const int dl = (p * THREADS) / CPL, dc = (p * THREADS) % CPL;
        const int l = line + dl, c = c0 + dc;
        elem_t* d = tile + TILE::chunk(l, c) * CE;
        const elem_t* s = g + dl * ld + dc * CE;
        // elements of this chunk inside the operand (0..CE)
        const int v = FULL ? CE : (x0 + l < xlim ? min(CE, max(0, ylim - (y0 + c * CE))) : 0);
        if (FULL) cp_async16(d, s);
        else cp_async16_zfill(d, v > 0 ? s : base, v * ELEM_BYTES);
    }

    __device__ __forceinline__ void advance(int step) { g += step; }
};
using LoadA = Loader<BM, BK, TileA>;
using LoadB = Loader<BK, BN, TileB>;

// Copy k-tile k0 of A (rows m0.., elements k0..) and B (rows k0.., elements n0..) into the ring
// slot at `tiles` (the A tile, then the B tile), then move both loaders on one k-tile (BK
// elements along A's rows, BK rows of B). FULL copies (no bounds code) where the block is inside
// C and the k-tile inside K, or where the caller knows it is (KNOWN: the steady-state loop).
template <bool KNOWN>
__device__ __forceinline__ void copy_tiles(LoadA& la, LoadB& lb, elem_t* tiles, bool inside,
                                           int m0, int n0, int k0, int M, int N, int K, int lda,
                                           int ldb) {
    if (KNOWN || (inside && k0 + BK <= K)) {
        la.copy<true>(tiles, lda, m0, M, k0, K);
        lb.copy<true>(tiles + A_TILE, ldb, k0, K, n0, N);
    } else {
        la.copy<false>(tiles, lda, m0, M, k0, K);
        lb.copy<false>(tiles + A_TILE, ldb, k0, K, n0, N);
    }
    la.advance(BK);
    lb.advance(BK * ldb);
}

// ------------------------------------------------------------------------------ ldmatrix
// Four 8 x 8 matrices of 16-bit elements; this lane gives the address of row (lane % 8) of
// matrix lane / 8 (16 contiguous bytes) and receives r[j] = elements 2t, 2t+1 of row g of
// matrix j (g = lane / 4, t = lane % 4, the lower column in the low half); TRANS: elements
// (2t, g) and (2t+1, g) of matrix j, i.e. of its transpose.
// Addresses are 32-bit shared-window byte addresses (what ldmatrix takes), each the sum of a
// per-ring-slot base, a per-lane base and a compile-time byte offset, so that ptxas adds the
// first two once per k-tile and folds the constant into ldmatrix's immediate offset: summed in
// elements and scaled afterwards, every ldmatrix paid 2 integer instructions for its address.
__device__ __forceinline__ u32 shared_address(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 s) {
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// ------------------------------------------------------------------------------ mma
// c += a * b for one 16 x 8 piece: a 16 x 16, b 16 x 8, bf16 operands, fp32 accumulators
// (c[0], c[1]) = row g, columns 2t, 2t+1; (c[2], c[3]) = row g + 8, same columns.
__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ------------------------------------------------------------------------------ fragments
// A warp's registers for one k-step: MI pieces of A (4 registers each), NJ pieces of B (2).
struct Frags {
    u32 a[MI][4];
    u32 b[NJ][2];
};

// Where each lane points ldmatrix (lane = 8 j4 + r8: this lane addresses row r8 of matrix j4),
// for piece i of A / pair of pieces jj of B at k-step ks (w: the warp tile's first row or column):
//   A (lines along k, plain ldmatrix):  line    = w + 16 i + r8 + 8 (j4 % 2)
//     matrices: (rows lo, k lo), (hi, lo), (lo, hi), (hi, hi)   chunk = 2 ks + j4 / 2
//   B (lines along n, ldmatrix.trans):  line    = 16 ks + r8 + 8 (j4 % 2)
//     matrices: (piece 2jj, k lo), (2jj, hi), (2jj+1, lo), (2jj+1, hi)
//                                       element = w + 16 jj + 8 (j4 / 2)
// Whatever is a multiple of 8 lines or 8 chunks is a compile-time offset; the rest is one of at
// most 4 per-lane bases (bytes), kept in registers: A one per ks % 4, B one per jj % 4.
struct FragA {
    static constexpr int NB = KS < 4 ? KS : 4;
    int base[NB];

    __device__ __forceinline__ FragA(int w, int lane) {
        const int r8 = lane % 8, j4 = lane / 8;
        const int hi_m = j4 % 2, hi_k = j4 / 2;  // matrix j4: rows 8..15 of the piece, k 8..15
#pragma unroll
        for (int c = 0; c < NB; ++c)
            base[c] = TileA::offset(w + r8 + 8 * hi_m, c * KSTEP + CE * hi_k) * ELEM_BYTES;
    }
    // the byte offset of piece p's matrices at k-step ks (a base + a constant)
    __device__ __forceinline__ int ldsm(int p, int ks) const {
        return base[ks % 4] + (16 * p * BK + (ks / 4) * 8 * CE) * ELEM_BYTES;
    }
};
struct FragB {
    static constexpr int PAIRS = NJ / 2;  // ldmatrix.x4 each
    static constexpr int NB = PAIRS < 4 ? PAIRS : 4;
    int base[NB];

    __device__ __forceinline__ FragB(int w, int lane) {
        const int r8 = lane % 8, j4 = lane / 8;
        const int hi_n = j4 / 2, hi_k = j4 % 2;  // matrix j4: piece 2jj + 1, k 8..15
#pragma unroll
        for (int c = 0; c < NB; ++c)
            base[c] = TileB::offset(r8 + 8 * hi_k, w + 16 * c + 8 * hi_n) * ELEM_BYTES;
    }
    __device__ __forceinline__ int ldsm(int p, int ks) const {
        return base[p % 4] + ((p / 4) * 8 * CE + 16 * ks * BN) * ELEM_BYTES;
    }
};

// Load the fragments of k-step ks of the tiles As, Bs.
__device__ __forceinline__ void load_frags(Frags& f, const elem_t* As, const elem_t* Bs, int ks,
                                           const FragA& fa, const FragB& fb) {
#pragma unroll
    for (int i = 0; i < MI; ++i) ldsm_x4<false>(f.a[i], shared_address(As) + fa.ldsm(i, ks));
#pragma unroll
    for (int jj = 0; jj < NJ / 2; ++jj) {
        u32 r[4];
        ldsm_x4<true>(r, shared_address(Bs) + fb.ldsm(jj, ks));
        f.b[2 * jj][0] = r[0];
        f.b[2 * jj][1] = r[1];
        f.b[2 * jj + 1][0] = r[2];
        f.b[2 * jj + 1][1] = r[3];
    }
}

// The warp's mma for one k-step: MI x NJ pieces, one instruction each.
__device__ __forceinline__ void mma_step(float (&acc)[MI][NJ][4], Frags& f) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int i = 0; i < MI; ++i) mma(acc[i][j], f.a[i], f.b[j]);
}

// ------------------------------------------------------------------------------ C

// Two adjacent C elements (lo at column col, hi at col + 1) as bfloat16, rounded to nearest even.
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;  // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Both elements in one 4-byte store; the last column of an odd N alone.
__device__ __forceinline__ void store_pair(elem_t* p, float lo, float hi, bool both) {
    const u32 v = pack2(lo, hi);
    if (both) *reinterpret_cast<u32*>(p) = v;
    else p[0] = elem_t(v & 0xffffu);
}

// ------------------------------------------------------------------------------ the kernel

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_mma(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C,
           int M, int N, int K, int lda, int ldb, int ldc) {
    extern __shared__ __align__(128) elem_t smem[];  // STAGES x (A tile, B tile)

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    int bm, bn;  // this block's tile of C, in block order GROUP (common.cuh): L2 reuse
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM, n0 = bn * BN;
    const bool inside = m0 + BM <= M && n0 + BN <= N;
    const int tiles = CEIL_DIV(K, BK);

    LoadA load_a(A, A + m0 * lda, lda, tid);  // rows m0.. of A
    LoadB load_b(B, B + n0, ldb, tid);        // columns n0.. of B's rows

    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Copy tile `next` into ring slot `slot` and commit its group (an empty group past the last
    // tile, so that "all but the newest STAGES-2 groups" always means "tile t+1").
    // full: the caller knows tile `next` is a whole tile inside A and B (a constant at each call
    // site: the lambda is inlined, and each call site gets its own code).
    int next = 0;
    auto copy_next = [&](int slot, bool full) {
        elem_t* As = smem + slot * (A_TILE + B_TILE);
        const int k0 = next * BK;
        if (full)
            copy_tiles<true>(load_a, load_b, As, inside, m0, n0, k0, M, N, K, lda, ldb);
        else if (next < tiles)
            copy_tiles<false>(load_a, load_b, As, inside, m0, n0, k0, M, N, K, lda, ldb);
        ++next;
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) copy_next(s, false);
    cp_async_wait<STAGES - 2>();  // tile 0 is in (our copies); the barrier publishes everyone's
    __syncthreads();

    const FragA fa(wm, lane);
    const FragB fb(wn, lane);
    Frags frag[2];  // k-step ks reads frag[ks % 2] while frag[(ks + 1) % 2] loads
    load_frags(frag[0], smem, smem + A_TILE, 0, fa, fb);

    int rd = 0, fill = STAGES - 1;  // ring slots: tile t is read from rd, the next copy goes to fill
    // One k-tile: copy tile t + STAGES - 1, compute tile t. full: that copy is a whole interior
    // tile (and so tile t + 1 exists): no bounds code at all. Two loops, each with its own copy
    // of the body: with one loop and a run-time choice of copy, ptxas predicated the edge copy's
    // ~90 instructions into every k-tile (measured on the TF32 builds: 4.6 instructions per
    // HMMA, where the steady state needs about 2.5).
    auto tile_step = [&](int t, bool full) {
        copy_next(fill, full);  // tile t + STAGES - 1 -> the slot of tile t - 1 (free: see the header)
        fill = fill + 1 == STAGES ? 0 : fill + 1;
        const int nx = rd + 1 == STAGES ? 0 : rd + 1;
        const elem_t* As = smem + rd * (A_TILE + B_TILE);
        const elem_t* An = smem + nx * (A_TILE + B_TILE);
        const bool more = full || t + 1 < tiles;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            if (ks + 1 < KS) {
                load_frags(frag[(ks + 1) % 2], As, As + A_TILE, ks + 1, fa, fb);
            } else if (more) {  // last k-step: hand over to tile t + 1 first
                cp_async_wait<STAGES - 2>();  // our copies of tile t + 1 have landed
                __syncthreads();              // everyone's have
                load_frags(frag[(ks + 1) % 2], An, An + A_TILE, 0, fa, fb);
            }
            mma_step(acc, frag[ks % 2]);
        }
        if (KS % 2) frag[0] = frag[1];  // odd k-steps: the next tile starts at frag[0]
        rd = nx;
    };
    const int full_tiles = inside ? K / BK : 0;  // tiles inside A and B, whole along k
    int t = 0;
#pragma unroll 1
    for (; t + STAGES - 1 < full_tiles; ++t) tile_step(t, true);
#pragma unroll 1
    for (; t < tiles; ++t) tile_step(t, false);
    cp_async_wait<0>();  // no copy may still be writing when the block exits (empty groups)

    // C: piece (i, j) of this lane is rows g, g + 8 and columns 2t, 2t + 1 of the warp tile:
    // one 4-byte store per row and piece.
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm + 16 * i + g + 8 * h;
            if (row >= M) continue;
            elem_t* c_row = C + row * ldc;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int col = n0 + wn + 8 * j + 2 * t4;
                if (col < N) store_pair(c_row + col, acc[i][j][2 * h], acc[i][j][2 * h + 1],
                                        col + 1 < N);
            }
        }
}
