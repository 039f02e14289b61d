// common.cuh: what every CUDA stage shares.
//
// Every stage computes C = A @ B for fp32 A (M x K), B (K x N), C (M x N), any M, N, K >= 1, with
// the BLAS argument list (A, B, C, M, N, K, lda, ldb, ldc) and a layout per operand:
//   TRANS_A = 0: A is row-major,    A(i, k) = A[i * lda + k]   (BLAS 'n', lda >= K)
//   TRANS_A = 1: A is column-major, A(i, k) = A[k * lda + i]   (BLAS 't': a transposed view)
//   TRANS_B likewise for B(k, j); C is always row-major, C(i, j) = C[i * ldc + j].
// The layouts are compile-time defines, so the nn kernel is the kernel it always was and each
// layout is its own cached build; the leading dimensions are run-time arguments (views with a
// row stride larger than their width need no copy). The shared operand check (lab/operands.py)
// turns a column-major C into the transposed problem (C^T = B^T A^T).
//
// Offsets: every element offset in global memory (a row times a leading dimension, a tile's
// base, a pointer's step along k) has the type offset_t, a 32-bit int unless the build defines
// OFFSET64=1, which makes it 64-bit. The launchers build with OFFSET64=1 only for a problem
// whose Problem.offsets64 is set (lab/operands.py): an operand whose furthest element, plus a
// 256-row and -column margin (what an edge tile may address past it), is 2^31 elements or more
// from its first, such as the A of a 2048 x 1 x 1048576 matrix-vector product or the C of a
// 47000 x 47000 product. Every other problem runs the 32-bit build: there offset_t is int, each
// (offset_t)x below is a cast of an int to int, and the SASS is the one measured in results/,
// instruction for instruction (tests/test_offsets64.py checks the counts). The 64-bit build
// costs a 64-bit multiply-add (IMAD.WIDE) and a register pair per address and pointer step
// (docs/LAYOUTS.md, "Operands past 2^31 elements"). Sizes and leading dimensions stay 32-bit
// ints in both builds: lab/operands.py refuses a size above 2^31 - 257 or a stride of 2^31.
#pragma once

#ifndef OFFSET64
#define OFFSET64 0
#endif
#if OFFSET64
typedef long long offset_t;
#else
typedef int offset_t;
#endif

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
// Offsets of element (i, k) of A and (k, j) of B in their layouts.
#define A_OFF(i, k) (TRANS_A ? (offset_t)(k) * lda + (i) : (offset_t)(i) * lda + (k))
#define B_OFF(k, j) (TRANS_B ? (offset_t)(j) * ldb + (k) : (offset_t)(k) * ldb + (j))

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// UNROLL=1 (the default) lets the compiler unroll the inner product loop; UNROLL=0 forbids it,
// so a learner can see what unrolling buys.
#ifndef UNROLL
#define UNROLL 1
#endif
#define LAB_STR(x) #x
#define LAB_PRAGMA(x) _Pragma(LAB_STR(x))
#if UNROLL
#define INNER_UNROLL LAB_PRAGMA(unroll)
#else
#define INNER_UNROLL LAB_PRAGMA(unroll 1)
#endif

// __launch_bounds__(THREADS, MIN_BLOCKS) in the register-tiling stages (blocktile_1d onwards): the
// blocks per SM the register allocator must leave room for, i.e. a cap of 65536 / (THREADS *
// MIN_BLOCKS) registers per thread. The launchers pick it (cuda_kernels/_build.py:
// spill_free_build, the largest cap that does not spill); 1, no cap but the 255 of the ISA, when a
// file is compiled alone.
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

// Block rasterization. The launch is a 1-D grid of grid_m * grid_n blocks; block `bid` is mapped
// to the tile (bm, bn) of C. GROUP = 1 is plain row-major order: consecutive blocks walk the tiles
// of one block-row of C, so the blocks resident at one time share a few rows of A but stream
// all of B, which (64 MiB at 4096^2) does not fit the 50 MB L2. GROUP = g walks g block-rows
// column by column, so resident blocks share g block-rows of A and a few block-columns of B:
// the same work with far fewer trips to DRAM (Triton's GROUP_M ordering).
#ifndef GROUP
#define GROUP 1
#endif
__device__ __forceinline__ void block_tile(int grid_m, int grid_n, int& bm, int& bn) {
    const int bid = blockIdx.x;
    if (GROUP == 1) {
        bm = bid / grid_n;
        bn = bid - bm * grid_n;
        return;
    }
    const int width = GROUP * grid_n;       // blocks in one group of GROUP block-rows
    const int first_m = (bid / width) * GROUP;
    const int rows = min(grid_m - first_m, GROUP);
    const int in_group = bid - (bid / width) * width;
    bm = first_m + in_group % rows;
    bn = in_group / rows;
}

// ------------------------------------------------------------------------------ register tiles
// A thread's Rows x Cols accumulators (blocktile_2d onwards) set to 0 before the K loop.
template <int Rows, int Cols>
__device__ __forceinline__ void zero_acc(float (&acc)[Rows][Cols]) {
#pragma unroll
    for (int i = 0; i < Rows; ++i)
#pragma unroll
        for (int j = 0; j < Cols; ++j) acc[i][j] = 0.0f;
}

// ------------------------------------------------------------------------------ k-steps
// How far an operand's pointer moves from one k-step of Bk to the next: Bk lines of a transposed
// A (columns, lda apart) or Bk floats along a row-major A's row; likewise for B (rows of a
// row-major B, Bk * ldb). Every register-tiling stage's loader advances by these.
template <int Bk>
__device__ __forceinline__ offset_t a_step(int lda) {
    return TRANS_A ? (offset_t)Bk * lda : Bk;
}
template <int Bk>
__device__ __forceinline__ offset_t b_step(int ldb) {
    return TRANS_B ? Bk : (offset_t)Bk * ldb;
}

// ------------------------------------------------------------------------------ scalar tile loads
// The loaders of blocktile_1d and blocktile_2d: per k-step each thread copies a few single floats
// of an operand's tile into shared memory, element e = tid + p * THREADS, placed by a walk:
// (Walk::row(e), Walk::col(e)) in the tile. Consecutive threads take consecutive elements
// along the operand's contiguous dimension, so a warp's global reads are coalesced in every layout.

// The plain walk of a Rows x Cols tile: along its rows (e at row e / Cols, column e % Cols) where
// the operand is row-major, down its columns (row e % Rows, column e / Rows) where it is
// transposed (Trans). Sizes are powers of two, so element p's place is the thread's (the walk of
// tid) plus the walk of p * THREADS, a compile-time constant: all index math leaves the K loop,
// which only advances a pointer.
template <int Rows, int Cols, bool Trans>
struct ScalarWalk {
    static __device__ __forceinline__ int row(int e) { return Trans ? e % Rows : e / Cols; }
    static __device__ __forceinline__ int col(int e) { return Trans ? e / Rows : e % Cols; }
};

// Copy this thread's Loads elements of a tile into the shared tile t: element (r + dr, c + dc),
// (r, c) the thread's first element (the Walk of tid), (dr, dc) the Walk of p * Threads. ptr
// points at element (r, c) in the operand, whose element (r + dr, c + dc) lies dr * ld + dc floats
// further (dc * ld + dr in a transposed operand, Trans). Bounds: (r0 + r + dr, c0 + c + dc) is the
// element's place in the operand, tested against rlim where TestR and against clim where TestC;
// an element outside is stored as 0, so the FMA loop needs no branch. With neither test (an
// interior block on a whole k-step) no bounds code is compiled in. (Template parameters are not
// named like the stages' -D defines: tiled.cu's TILE would replace a parameter called TILE.)
template <int Loads, int Threads, class Walk, bool Trans, bool TestR, bool TestC, class Dst>
__device__ __forceinline__ void load_scalars(Dst& t, const float* ptr, int ld, int r, int c,
                                             int r0, int rlim, int c0, int clim) {
#pragma unroll
    for (int p = 0; p < Loads; ++p) {
        const int dr = Walk::row(p * Threads), dc = Walk::col(p * Threads);
        const bool ok = (!TestR || r0 + r + dr < rlim) && (!TestC || c0 + c + dc < clim);
        t[r + dr][c + dc] = ok ? ptr[Trans ? (offset_t)dc * ld + dr : (offset_t)dr * ld + dc]
                              : 0.0f;
    }
}

// ------------------------------------------------------------------------------ float4 helpers
// Shared by the float4 stages (vectorized, bank_conflicts, warptiling, double_buffered).

// Their alignment switches, set per call by the launchers (vectorized.py: vector_flags) from the
// operands: an operand whose lines are not 16-byte aligned gets its switch 0, and its 4-float
// chunks are then read or written one float at a time (load4 / store4 below).
#ifndef VEC_A  // 1: A's lines (rows; columns with TRANS_A) are 16-byte aligned: float4 loads of A
#define VEC_A 1
#endif
#ifndef VEC_B  // 1: B's lines (rows; columns with TRANS_B) are 16-byte aligned: float4 loads of B
#define VEC_B 1
#endif
#ifndef VEC_C  // 1: C's rows are 16-byte aligned: float4 stores of C (mma.cu: 2-element stores)
#define VEC_C 1
#endif

// std::conditional without <type_traits> (NVRTC compiles without the C++ standard library)
template <bool C, typename X, typename Y> struct Pick { using type = X; };
template <typename X, typename Y> struct Pick<false, X, Y> { using type = Y; };

// Component i of a float4 (float2); i is a compile-time constant after unrolling, so this is a
// register name, never an indexed (local-memory) access.
__device__ __forceinline__ float at(const float4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ float at(const float2& v, int i) { return i == 0 ? v.x : v.y; }

// 4 consecutive floats p[0..3], of which only the first `valid` (0..4) exist; the rest are 0.
// WIDE: one 128-bit load when all 4 exist (p is then 16-byte aligned: see vectorized.cu).
template <bool WIDE>
__device__ __forceinline__ float4 load4(const float* p, int valid) {
    if (WIDE && valid >= 4) return *reinterpret_cast<const float4*>(p);
    float4 v;
    v.x = valid > 0 ? p[0] : 0.0f;
    v.y = valid > 1 ? p[1] : 0.0f;
    v.z = valid > 2 ? p[2] : 0.0f;
    v.w = valid > 3 ? p[3] : 0.0f;
    return v;
}

// Store the first `valid` (0..4; fewer than 1: none) of 4 consecutive floats.
template <bool WIDE>
__device__ __forceinline__ void store4(float* p, float4 v, int valid) {
    if (WIDE && valid >= 4) {
        *reinterpret_cast<float4*>(p) = v;
        return;
    }
    if (valid > 0) p[0] = v.x;
    if (valid > 1) p[1] = v.y;
    if (valid > 2) p[2] = v.z;
    if (valid > 3) p[3] = v.w;
}

// The transposing store: a float4 of 4 consecutive k's (read along a line that runs along k) goes
// down column x of a k-major shared tile t[k][x], rows k..k+3, one scalar store each.
template <int R, int W>
__device__ __forceinline__ void scatter4(float (&t)[R][W], int k, int x, float4 v) {
    t[k + 0][x] = v.x;
    t[k + 1][x] = v.y;
    t[k + 2][x] = v.z;
    t[k + 3][x] = v.w;
}

// ------------------------------------------------------------------------------ float4 tile loads
// A tile loader walks its operand along the operand's contiguous dimension ("lines": rows of a
// row-major operand, columns of a transposed one) in float4 chunks (vectorized.cu, Layouts).

// How many of a chunk's 4 floats lie in the operand: the chunk is on line x (of xlim) and starts
// y floats along it (of ylim): 4 inside, 1..3 across the line's end (a width that is not a
// multiple of 4), 0 past the last line or the line's end. FULL (compile time): the caller knows
// the whole tile is inside, and no test is compiled in.
template <bool FULL>
__device__ __forceinline__ int chunk_valid(int x, int xlim, int y, int ylim) {
    return FULL ? 4 : (x < xlim ? min(4, max(0, ylim - y)) : 0);
}

// Tile walk, line by line: chunk q (= tid + p * THREADS) of a tile whose lines are CW chunks long
// is on line q / CW, 4 * (q % CW) floats along it; consecutive threads take consecutive chunks of
// a line, so a warp reads contiguous 16-byte pieces.
template <int CW>
struct LineWalk {
    static __device__ __forceinline__ int line(int q) { return q / CW; }
    static __device__ __forceinline__ int pos(int q) { return 4 * (q % CW); }
};

// One operand's part of a tile copy into shared memory: this thread's CHUNKS float4 chunks,
// q = tid + p * NT (NT: threads per block, p < CHUNKS), placed by WALK (line(q), pos(q); sizes
// are powers of two, so chunk p's offsets from chunk 0, WALK::line(p * NT) and WALK::pos(p * NT),
// are compile-time constants). ptr: chunk 0 in global memory, ld: the distance between lines;
// (line0, pos0): chunk 0 in the tile; (x0, xlim) and (y0, ylim): the tile's origin and the
// operand's size across and along its lines (chunk_valid). Each chunk is loaded with zero fill
// (load4<WIDE>) and handed to put(line, pos, dline, dpos, v), which stores it into shared memory
// (one STS.128, or scattered down 4 rows of a k-major tile).
template <bool FULL, bool WIDE, int CHUNKS, int NT, class WALK, class PUT>
__device__ __forceinline__ void load_chunks(const float* __restrict__ ptr, int ld, int line0,
                                            int pos0, int x0, int xlim, int y0, int ylim,
                                            PUT put) {
#pragma unroll
    for (int p = 0; p < CHUNKS; ++p) {
        const int dl = WALK::line(p * NT), dp = WALK::pos(p * NT);
        const int l = line0 + dl, e = pos0 + dp;
        const int valid = chunk_valid<FULL>(x0 + l, xlim, y0 + e, ylim);
        put(l, e, dl, dp, load4<WIDE>(ptr + (offset_t)dl * ld + dp, valid));
    }
}

// ------------------------------------------------------------------------------ cp.async
// PTX on the GPU (sm_80+: LDGSTS in SASS); on the CPU (g++, tests/cuda_emulator.py) the
// emulator's deferred copies, so the same index math, sizes and group accounting are checked
// there. Opt-in: a stage defines LAB_CP_ASYNC before including this file (double_buffered.cu,
// mma.cu). They are templates on the element type (float, or mma's 16-bit elem_t): typed
// pointers, not void*, because with void* double_buffered's builds with 4-byte copies (VEC_A or
// VEC_B = 0) compiled to a different instruction schedule.
#ifdef LAB_CP_ASYNC
// 16 bytes, all of them from src (L2 only: .cg; the tile is reused from shared memory, not L1).
template <typename T>
__device__ __forceinline__ void cp_async16(T* dst, const T* src) {
#ifdef __CUDA_ARCH__
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
    lab_cp_async(dst, src, 16, 16);
#endif
}

// 16 bytes of which the first src_bytes (0..16) come from src and the rest are zero-filled.
template <typename T>
__device__ __forceinline__ void cp_async16_zfill(T* dst, const T* src, int src_bytes) {
#ifdef __CUDA_ARCH__
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(src_bytes) : "memory");
#else
    lab_cp_async(dst, src, 16, src_bytes);
#endif
}

// 4 bytes (.ca: the only cache mode below 16 bytes); src_bytes 0..4, the rest zero-filled.
template <typename T>
__device__ __forceinline__ void cp_async4(T* dst, const T* src, int src_bytes) {
#ifdef __CUDA_ARCH__
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src),
                 "r"(src_bytes) : "memory");
#else
    lab_cp_async(dst, src, 4, src_bytes);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    lab_cp_async_commit();
#endif
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
    lab_cp_async_wait(N);
#endif
}
#endif  // LAB_CP_ASYNC

// ------------------------------------------------------------------------------ k-tile copies
// The tile loaders of double_buffered.cu (TileCopy) and mma.cu (Loader) see an operand's tile as
// lines along the operand's contiguous dimension and take where the tile lies as (x0, xlim,
// y0, ylim): its first line and the operand's line count, its first element along a line and the
// line length. A's lines are its rows (m) where it is row-major, its columns (k) where transposed;
// B's are its rows (k) where row-major, its columns (n) where transposed. A_TILE_AT(k0) and
// B_TILE_AT(k0) are those four arguments for the tiles of k-tile k0, in every layout; they read
// m0, n0, M, N, K where they are used. Macros, because they stand for four arguments of a call,
//   copy<FULL>(dst, ld, A_TILE_AT(k0))
// which no function can return (copy_ktile below, and double_buffered.cu's regs pipeline).
#define A_TILE_AT(k0) TRANS_A ? (k0) : m0, TRANS_A ? K : M, TRANS_A ? m0 : (k0), TRANS_A ? M : K
#define B_TILE_AT(k0) TRANS_B ? n0 : (k0), TRANS_B ? N : K, TRANS_B ? (k0) : n0, TRANS_B ? K : N

// Copy k-tile k0 of A and B into the tiles at `tiles` (the A tile, then the B tile AElems elements
// on) with the loaders la, lb, then move both loaders on one k-tile: the refill of one slot of a
// shared-memory ring (double_buffered.cu's pipeline=cp_async, mma.cu). FULL copies (no bounds
// code) where the block is inside C and the k-tile inside K, or where the caller knows it is
// (Known; mma.cu's steady-state loop). `inside` is the same for the whole block: the branch does
// not diverge, and each side is its own inlined copy of the loaders. (The B tile's address is
// taken here, in each branch: passed in as a second pointer, computed before the branch, it
// changed the SASS of double_buffered.cu's cp_async builds. The regs pipeline, whose two
// destinations are register arrays, writes the same calls out.)
template <int Bk, int AElems, bool Known = false, class LA, class LB, class T>
__device__ __forceinline__ void copy_ktile(LA& la, LB& lb, T* tiles, bool inside, int m0, int n0,
                                           int k0, int M, int N, int K, int lda, int ldb) {
    if (Known || (inside && k0 + Bk <= K)) {
        la.template copy<true>(tiles, lda, A_TILE_AT(k0));
        lb.template copy<true>(tiles + AElems, ldb, B_TILE_AT(k0));
    } else {
        la.template copy<false>(tiles, lda, A_TILE_AT(k0));
        lb.template copy<false>(tiles + AElems, ldb, B_TILE_AT(k0));
    }
    la.advance(a_step<Bk>(lda));
    lb.advance(b_step<Bk>(ldb));
}

// -------------------------------------------------------------------------- float4 register tiles
// The pieces of the float4 register-tiling stages that do not change from stage to stage
// (vectorized.cu introduces them; bank_conflicts.cu and warptiling.cu reuse them).

// acc += a b^T for one k: a holds R values of A as R/4 float4, b holds S values of B as S/4
// float4 (the fragments, one LDS.128 each); R * S FFMA on register names only.
template <int Rows, int Cols, int Fa, int Fb>
__device__ __forceinline__ void outer_product4(float (&acc)[Rows][Cols], const float4 (&a)[Fa],
                                               const float4 (&b)[Fb]) {
#pragma unroll
    for (int i = 0; i < Rows; ++i)
#pragma unroll
        for (int j = 0; j < Cols; ++j) acc[i][j] += at(a[i / 4], i % 4) * at(b[j / 4], j % 4);
}

// The loaders' start: this thread's chunk 0 (chunk q = tid, placed by the walk) in the A tile at
// (m0, k0) and the B tile at (k0, n0), as (m, k) and (k, n) in the tile, and its address. A
// transposed operand is walked along its columns, the direction that is contiguous in memory.
// The k loop then only advances the pointer by a_step() / b_step() (see k-steps, above).
template <class Walk>
__device__ __forceinline__ const float* a_chunk0(const float* A, int lda, int m0, int k0, int tid,
                                                 int& m, int& k) {
#if TRANS_A
    m = Walk::pos(tid), k = Walk::line(tid);
    return A + (offset_t)(k0 + k) * lda + m0 + m;
#else
    m = Walk::line(tid), k = Walk::pos(tid);
    return A + (offset_t)(m0 + m) * lda + k0 + k;
#endif
}
template <class Walk>
__device__ __forceinline__ const float* b_chunk0(const float* B, int ldb, int k0, int n0, int tid,
                                                 int& k, int& n) {
#if TRANS_B
    n = Walk::line(tid), k = Walk::pos(tid);
    return B + (offset_t)(n0 + n) * ldb + k0 + k;
#else
    n = Walk::pos(tid), k = Walk::line(tid);
    return B + (offset_t)(k0 + k) * ldb + n0 + n;
#endif
}

// The stores of a k-major shared tile (As(k, m): A transposed; Bs(k, n)) that load_kmajor_tiles
// hands each float4 chunk to. The chunk's m (n) is given as this thread's chunk-0 coordinate x0
// plus the chunk's compile-time offset dx (bank_conflicts.cu's swizzle needs the two apart):
//   along(t, k, x0, dx, v)   4 consecutive m's (n's) into row k: one STS.128 (a line along m, n);
//   across(t, k, x0, dx, v)  4 consecutive k's down column x0 + dx, rows k..k+3 (a line along k:
//                            the transposing scatter, scatter4).
// KMajor: the plain 2-D array t[k][x] of vectorized.cu and warptiling.cu (rows padded by the
// stage); bank_conflicts.cu's Tile places elements its own way.
struct KMajor {
    template <int R, int W>
    static __device__ __forceinline__ void along(float (&t)[R][W], int k, int x0, int dx,
                                                 float4 v) {
        *reinterpret_cast<float4*>(&t[k][x0 + dx]) = v;
    }
    template <int R, int W>
    static __device__ __forceinline__ void across(float (&t)[R][W], int k, int x0, int dx,
                                                  float4 v) {
        scatter4(t, k, x0 + dx, v);
    }
};

// Copy one k-step's tiles into k-major shared tiles As(k, m) (A transposed) and Bs(k, n) with
// load_chunks, in every layout: each operand is walked along its contiguous dimension, and a line
// that runs along k (a row-major A, a transposed B) is stored across 4 rows (AStore::across; the
// stage's row padding or swizzle keeps it conflict-free), a line that runs along m or n along one
// row (AStore::along, one STS.128). FULL (compile time): the block is inside C and the k-step
// inside K, so no bounds test is compiled in. (a_m, a_k), (b_k, b_n): this thread's chunk 0 in
// the tiles (a_chunk0, b_chunk0); a_ptr, b_ptr point at it in A and B. AWide, BWide: float4
// loads of A, B (the stage's VEC_A, VEC_B). Template parameters are not named like the stages'
// -D defines.
template <bool FULL, bool AWide, bool BWide, int AChunks, int BChunks, int Threads, class AWalk,
          class BWalk, class AStore = KMajor, class BStore = KMajor, class TA, class TB>
__device__ __forceinline__ void load_kmajor_tiles(TA& As, TB& Bs, const float* __restrict__ a_ptr,
                                                  const float* __restrict__ b_ptr, int a_m,
                                                  int a_k, int b_k, int b_n, int m0, int n0,
                                                  int k0, int M, int N, int K, int lda, int ldb) {
#if TRANS_A
    // 4 consecutive m's of column k of A: along row k of As.
    load_chunks<FULL, AWide, AChunks, Threads, AWalk>(
        a_ptr, lda, a_k, a_m, k0, K, m0, M, [&](int k, int, int, int dm, float4 v) {
            AStore::along(As, k, a_m, dm, v);
        });
#else
    // 4 consecutive k's of row m of A, across 4 rows of As.
    load_chunks<FULL, AWide, AChunks, Threads, AWalk>(
        a_ptr, lda, a_m, a_k, m0, M, k0, K, [&](int, int k, int dm, int, float4 v) {
            AStore::across(As, k, a_m, dm, v);
        });
#endif
#if TRANS_B
    // 4 consecutive k's of column n of B, across 4 rows of Bs.
    load_chunks<FULL, BWide, BChunks, Threads, BWalk>(
        b_ptr, ldb, b_n, b_k, n0, N, k0, K, [&](int, int k, int dn, int, float4 v) {
            BStore::across(Bs, k, b_n, dn, v);
        });
#else
    // 4 consecutive n's of row k of B: along row k of Bs.
    load_chunks<FULL, BWide, BChunks, Threads, BWalk>(
        b_ptr, ldb, b_k, b_n, k0, K, n0, N, [&](int k, int, int, int dn, float4 v) {
            BStore::along(Bs, k, b_n, dn, v);
        });
#endif
}

// One k-step of the float4 register-tiling stages: load_kmajor_tiles with FULL where the block is
// inside C (`inside`: the same for the whole block, so the branch does not diverge) and the
// k-step inside K; each side is its own inlined copy of the loaders, the interior one without a
// bounds test.
template <int Bk, bool AWide, bool BWide, int AChunks, int BChunks, int Threads, class AWalk,
          class BWalk, class AStore = KMajor, class BStore = KMajor, class TA, class TB>
__device__ __forceinline__ void load_kmajor_ktile(TA& As, TB& Bs, bool inside,
                                                  const float* __restrict__ a_ptr,
                                                  const float* __restrict__ b_ptr, int a_m,
                                                  int a_k, int b_k, int b_n, int m0, int n0,
                                                  int k0, int M, int N, int K, int lda, int ldb) {
    if (inside && k0 + Bk <= K)
        load_kmajor_tiles<true, AWide, BWide, AChunks, BChunks, Threads, AWalk, BWalk, AStore,
                          BStore>(As, Bs, a_ptr, b_ptr, a_m, a_k, b_k, b_n, m0, n0, k0, M, N, K,
                                  lda, ldb);
    else
        load_kmajor_tiles<false, AWide, BWide, AChunks, BChunks, Threads, AWalk, BWalk, AStore,
                          BStore>(As, Bs, a_ptr, b_ptr, a_m, a_k, b_k, b_n, m0, n0, k0, M, N, K,
                                  lda, ldb);
}

// The epilogue of vectorized.cu's thread tile: row i of the TM x TN tile is row
// (i/4)*4*TROWS + 4*tr + i%4 of the block tile, float4 group g is columns g*4*TCOLS + 4*tc + 0..3:
// float4 stores straight from registers (store4<Wide>, Wide = VEC_C: single floats at C's right
// edge), so for each row and group a warp row writes Tcols consecutive float4.
template <int Tm, int Tn, int Trows, int Tcols, bool Wide>
__device__ __forceinline__ void store_tile4(float* __restrict__ C, int ldc, int M, int N, int m0,
                                            int n0, int tr, int tc,
                                            const float (&acc)[Tm][Tn]) {
#pragma unroll
    for (int i = 0; i < Tm; ++i) {
        const int row = m0 + (i / 4) * 4 * Trows + 4 * tr + i % 4;
        if (row >= M) continue;
        float* c_row = C + (offset_t)row * ldc;
#pragma unroll
        for (int g = 0; g < Tn / 4; ++g) {
            const int col = n0 + g * 4 * Tcols + 4 * tc;
            const float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2],
                                         acc[i][4 * g + 3]);
            store4<Wide>(c_row + col, v, min(4, N - col));
        }
    }
}
