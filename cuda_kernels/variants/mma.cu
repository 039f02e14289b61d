// Variant of ../mma.cu for every precision (tf32, 3xtf32, bf16, fp16), every layout (TRANS_A /
// TRANS_B: ldmatrix.trans, and TF32's LDS.128 runs for M/N-contiguous tiles), unaligned lines
// (ALIGN_A / ALIGN_B = 4 or 2, VEC_C = 0), operands past 2^31 elements (OFFSET64), one fragment
// set (FRAGS = 1) and the CPU emulator's twins of every PTX instruction: the launcher compiles it
// for every build but the lesson's (bf16, nn, 16-byte-aligned lines, 32-bit offsets, FRAGS = 2),
// and tests/test_mma.py's emulator runs it. A reader can skip it: ../mma.cu is the lesson, and
// docs/stages/mma.md names the part of this file each precision adds.
// Stage: mma. The first tensor-core stage: every warp multiplies its WM x WN tile with the
// warp-wide matrix instruction mma.sync (inline PTX), fed from XOR-swizzled shared memory by
// ldmatrix, with a cp.async ring of STAGES tiles in flight.
//
// Changed from double_buffered (a warp-tiled SIMT GEMM, cp.async ring, fragments one k-step
// ahead): the FFMA outer products are gone. A warp's tile is cut into 16 x 8 pieces of C, and
// each piece is ONE instruction per k-step of 16 (bf16 / fp16: mma.m16n8k16, 2048 multiply-adds)
// or 8 (tf32: mma.m16n8k8, 1024): the tensor core does in one instruction what 64 warp FFMAs
// would. Everything else exists to feed it:
//   1. Operands are 16-bit (bf16, fp16) or TF32. Precision is a compile-time define:
//        PREC_BF16 / PREC_FP16  A, B, C bfloat16 / float16, fp32 accumulation; C rounded to the
//                               output type on store (cvt.rn.bf16x2 / f16x2), as cuBLAS does;
//        PREC_TF32              A, B, C float; each operand rounded to nearest TF32 (10-bit
//                               mantissa) as it leaves shared memory (tf32_rn below);
//        PREC_3XTF32            A, B, C float; each operand split into a TF32 head and a TF32
//                               tail, a = a_hi + a_lo, and acc += a_lo*b_hi + a_hi*b_lo +
//                               a_hi*b_hi (three mma per piece, small terms first): near-fp32
//                               accuracy from TF32 tensor cores (CUTLASS's "fast accurate fp32";
//                               the a_lo*b_lo term is below fp32's rounding and is dropped).
//                               Inf and NaN split into the head +-1 and the tail x, so that C's
//                               NaN and +-Inf are fp32's (tf32_split).
//   2. Fragments. mma.sync takes its operands in registers spread over the 32 lanes in a fixed
//      pattern (the "fragment layout", docs/stages/mma.md draws it): lane l = 4g + t holds, of a
//      16 x 16 bf16 A piece, rows g and g+8 at columns 2t, 2t+1, 2t+8, 2t+9. ldmatrix.x4 reads
//      four 8 x 8 b16 matrices from shared memory straight into that pattern: lanes 8j..8j+7
//      give the addresses of the 8 rows (16 bytes each) of matrix j, and every lane receives 2
//      elements of each. The .trans form delivers the transposed matrix, so an operand stored
//      M- or N-contiguous (a column-major A, a row-major B) needs no transposing copy.
//      TF32 (32-bit elements): a K-contiguous tile is read with ldmatrix too (an 8 x 8 b16
//      matrix is an 8 x 4 float matrix, and lane 4g + t receives float t of row g: exactly the
//      m16n8k8 fragment); an M/N-contiguous tile cannot be (.trans swaps 16-bit halves, not
//      floats); there the warp tile's rows (A) or columns (B) are permuted so that each lane's
//      fragment elements for one k row are consecutive floats, read with LDS.128 ("runs",
//      FragBase), and C is stored back in the true order.
//   3. Swizzled shared memory. A tile keeps its operand's global layout (cp.async copies bytes,
//      it cannot transpose) as lines of 16-byte chunks; chunk c of line r is stored at chunk
//      position c ^ f(r). ldmatrix reads one 16-byte chunk from each of 8 consecutive lines;
//      unswizzled, lines of 64 or 128 or 256 bytes put those 8 chunks on 2, 1 or 1 distinct
//      group of 4 banks (a 4- or 8-way conflict); with the XOR they fall on 8 different
//      groups: one wavefront per 8x8 matrix, the minimum. See SWIZZLE below.
//   4. The cp.async ring (as double_buffered's pipeline=cp_async): STAGES tiles, STAGES-1 in
//      flight while one is read, one cp.async group per tile (empty past the last tile), one
//      barrier per tile. FRAGS = 2: fragments are double-buffered in registers, the next
//      k-step's ldmatrix is issued before this k-step's mma, and at the last k-step of a tile
//      the first fragments of the next tile are read right after the barrier. FRAGS = 1 (the
//      launcher's choice for 3xTF32, whose split operands need the registers): load, then mma.
//
// The barrier, and why one per tile is enough. Ring slot (t-1) % STAGES is refilled at the top
// of tile t; tile t-1 was last read by fragment loads issued before the barrier that ends tile
// t-1 (its last k-step's fragments are loaded one k-step early, and with one k-step per tile
// they are loaded right after the barrier ending tile t-2), so every warp is done with it.
// Read after write: at the end of tile t a thread has committed groups 0 .. t+STAGES-1;
// wait_group STAGES-2 completes group t+1, and the barrier publishes every thread's copies of
// tile t+1 before anyone reads it.
//
// Launch geometry (mma.py): block (BM/WM)*(BN/WN) warps (128 threads at the defaults), 1-D grid
// of ceil(M/BM)*ceil(N/BN) blocks ordered by common.cuh's block_tile() (GROUP), dynamic shared
// memory DYNAMIC_SMEM_BYTES = STAGES * (BM + BN) * BK * element size (64 KiB at the defaults in
// every precision: BK is 64 bytes of k; the launcher raises the kernel's limit past 48 KiB), no
// static shared memory.
// Layouts: TRANS_A / TRANS_B (common.cuh); C row-major. Alignment (mma.py): ALIGN_A / ALIGN_B =
// 16 (lines start on 16-byte boundaries: 16-byte cp.async.cg), 4 (4-byte cp.async.ca) or 2
// (16-bit elements at odd addresses: plain loads and stores, synchronous); VEC_C = 1 when C's
// rows allow the 2-element (4- or 8-byte) stores of a fragment row.
// Edges: interior blocks on full k-steps copy with no bounds test; other tiles zero-fill
// what lies outside A or B (cp.async with a source size below the copy size).
// Bottleneck it attacks: the FP32 SIMT ceiling. double_buffered issues one FFMA (2 flops per
// lane) per instruction and can at best reach the 67 TFLOPS FP32 peak; an mma.m16n8k16 does
// 2048 multiply-adds per warp instruction. The new limits are how fast shared memory can feed
// the tensor cores (hence ldmatrix and swizzling) and, on the H100, mma.sync itself, which runs
// well below the wgmma rate of Hopper's asynchronous warpgroup MMA (docs/stages/mma.md).
//
// CPU emulation (tests/test_mma.py, via tests/cuda_emulator.py's prelude): everything that is
// PTX has a plain C++ twin under #ifndef __CUDA_ARCH__ that keeps its semantics, including the
// lanes: ldmatrix and the k-step's mma exchange registers between the lanes of a warp through
// block-wide scratch arrays and two __syncthreads (every thread calls them in the same order),
// so the fragment layouts, swizzle, pipeline and edges are all checked on the CPU.
#define LAB_CP_ASYNC 1  // common.cuh's cp.async helpers
#include "common.cuh"

// ------------------------------------------------------------------------------ parameters

// BM, BN, BK, WM, WN: -D defines that cuda_kernels/mma.py always passes: the registry's values
// (lab/stages.py), where 0 is resolved per precision and shape (mma.py's AUTO table).
#ifndef STAGES
#define STAGES 4
#endif
#ifndef ALIGN_A  // bytes every line of A starts on: 16, 4 or 2 (mma.py: alignment)
#define ALIGN_A 16
#endif
#ifndef ALIGN_B
#define ALIGN_B 16
#endif
#ifndef FRAGS  // fragment register sets: 2 = the next k-step's are loaded during this one's mma
#define FRAGS 2
#endif
// VEC_C (common.cuh, default 1): 1 where C's rows allow 2-element stores (pointer and ldc
// aligned to 2 elements). MIN_BLOCKS: common.cuh.
#ifndef TF32_RN  // TF32: 1 rounds each operand to nearest with cvt (as cuBLAS), 2 with a guarded
#define TF32_RN 1  // integer add, 0 leaves the tensor core to truncate (as tl.dot); see tf32_rn
#endif

// Precision: 0 tf32, 1 3xtf32, 2 bf16, 3 fp16 (exactly one PREC_* define set to 1).
#if defined(PREC_BF16) && PREC_BF16
#define PREC 2
#elif defined(PREC_FP16) && PREC_FP16
#define PREC 3
#elif defined(PREC_3XTF32) && PREC_3XTF32
#define PREC 1
#elif defined(PREC_TF32) && PREC_TF32
#define PREC 0
#else
#error "define one of PREC_TF32, PREC_3XTF32, PREC_BF16, PREC_FP16 (to 1)"
#endif
#define HALF (PREC >= 2)  // 16-bit operands

#if HALF
typedef unsigned short elem_t;  // the bits of a bfloat16 / float16 (no cuda_bf16.h needed)
#define ELEM_BYTES 2
#define KSTEP 16                // mma.m16n8k16
#else
typedef float elem_t;
#define ELEM_BYTES 4
#define KSTEP 8                 // mma.m16n8k8 (tf32)
#endif
#define CE (16 / ELEM_BYTES)    // elements per 16-byte chunk

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MI (WM / 16)            // 16-row mma pieces of a warp tile
#define NJ (WN / 8)             // 8-column mma pieces
#define KS (BK / KSTEP)         // k-steps per tile

// Tiles in shared memory keep the global layout (see the header): "k-major" lines run along k.
#define A_KMAJOR (!TRANS_A)     // A row-major: lines are rows of A (m), BK elements each
#define B_KMAJOR (TRANS_B)      // B column-major: lines are columns of B (n), BK elements each
#define A_TILE (BM * BK)        // elements
#define B_TILE (BK * BN)
#define DYNAMIC_SMEM_BYTES (STAGES * (A_TILE + B_TILE) * ELEM_BYTES)

static_assert(BM % WM == 0 && BN % WN == 0, "whole warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of 16 x 16 (two 16 x 8) pieces");
static_assert(BK % KSTEP == 0, "whole k-steps per tile");
static_assert(THREADS >= 32 && THREADS <= 1024, "a block holds 32..1024 threads");
static_assert(STAGES >= 2 && STAGES <= 8, "ring depth");
static_assert(ALIGN_A == 16 || ALIGN_A == 4 || (HALF && ALIGN_A == 2), "ALIGN_A");
static_assert(ALIGN_B == 16 || ALIGN_B == 4 || (HALF && ALIGN_B == 2), "ALIGN_B");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "mma.m16n8k16 bf16, TF32, cp.async and cvt.rn.bf16x2 need compute capability 8.0 or newer"
#endif

typedef unsigned int u32;

// ------------------------------------------------------------------------------ swizzle
// A tile is NL lines of LEN elements, CPL = LEN / CE chunks of 16 bytes per line. Chunk c of
// line r is stored at chunk position c ^ X(r) of the same line (so cp.async still writes whole,
// aligned 16-byte chunks, and a warp's 32 consecutive chunks still cover whole 128-byte rows):
//   Reads of one chunk from each of 8 consecutive lines (ldmatrix, and TF32 k-major fragments
//   through ldmatrix): X(r) = (r / RPL) % min(8, CPL), RPL = max(1, 8 / CPL) lines per 128-byte
//   row of banks:
//     CPL >= 8 (lines of 128 bytes or more): X = r % 8, the 8 lines hit 8 bank groups;
//     CPL = 4 (64-byte lines, 2 per row): X = (r / 2) % 4, the 4 rows of the 8 lines use 4
//       different chunk positions, and the 2 lines of a row differ in their half;
//     CPL = 2 (32-byte lines, bf16 BK = 16): X = (r / 4) % 2, likewise.
//   TF32 M/N-contiguous tiles ("runs", RUN > 0; see load_frags): lane 4g + t reads RUN
//   consecutive floats of line t (LDS.128s), starting at element RUN * g of its warp's columns.
//   A 128-bit load is served 8 lanes at a time: lanes 8p .. 8p+7 are 4 lines (t) x 2 runs (g),
//   whose chunks lie D = RUN / 4 apart. X(r) spreads the 2 bits of r % 4 over the two chunk-index
//   bits that D does not use (D = 1: X = 2t; D = 2: X = t0 + 4 t1; D = 4: X = t), so the 8 lanes
//   fall on 8 different groups of 4 banks (needs CPL >= 8: BM, BN >= 32 floats).
// X repeats every 8 lines (4 for runs) and never exceeds 7, so moving 8 lines or 8 chunks away
// moves the stored position by the same amount: fragment addresses are a few per-lane bases plus
// compile-time offsets (FragBase below).
template <int NL, int LEN, bool KMAJOR, int RUN>
struct Tile {
    static constexpr int CPL = LEN / CE;
    static constexpr bool RUNS = !HALF && !KMAJOR;  // the TF32 LDS.128 pattern
    static constexpr int RPL = CPL >= 8 ? 1 : 8 / CPL;
    static constexpr int MASK = (CPL >= 8 ? 8 : CPL) - 1;
    static constexpr int D = RUN / 4;  // chunks between the runs of lanes 4g + t and 4(g+1) + t
    static_assert(CPL >= 2 && (CPL & (CPL - 1)) == 0, "lines of a power-of-two count of chunks");
    static_assert(!RUNS || CPL >= 8, "TF32 M/N-contiguous tiles need lines of 32+ floats");
    static_assert(!RUNS || D == 1 || D == 2 || D == 4, "TF32 runs of 4, 8 or 16 floats");

    static __device__ __forceinline__ int run_x(int line) {
        const int t = line & 3;
        return D == 1 ? t << 1 : D == 2 ? (t & 1) | ((t & 2) << 1) : t;
    }
    static __device__ __forceinline__ int chunk(int line, int c) {
        const int x = RUNS ? run_x(line) : (line / RPL) & MASK;
        return line * CPL + (c ^ x);
    }
    // Element offset of (line, element along the line) in the tile.
    static __device__ __forceinline__ int at(int line, int e) {
        return chunk(line, e / CE) * CE + e % CE;
    }
};

// A: row-major -> BM lines (m) of BK; column-major -> BK lines (k) of BM.
using TileA = Tile<A_KMAJOR ? BM : BK, A_KMAJOR ? BK : BM, A_KMAJOR, 2 * MI>;
// B: column-major -> BN lines (n) of BK; row-major -> BK lines (k) of BN.
using TileB = Tile<B_KMAJOR ? BN : BK, B_KMAJOR ? BK : BN, B_KMAJOR, NJ>;

// ------------------------------------------------------------------------------ cp.async
// common.cuh's set (LAB_CP_ASYNC, defined before the include above): cp_async16 (16 bytes, all
// from src), cp_async16_zfill (the rest zero-filled), cp_async4, commit and wait; PTX on the GPU,
// the emulator's deferred copies on the CPU (tests/cuda_emulator.py).

// ------------------------------------------------------------------------------ tile copies
// One operand's tile as its loader sees it: NL lines of LEN elements along the operand's
// contiguous dimension, cut into 16-byte chunks. Chunk q = tid + p * THREADS (p < CHUNKS) is
// line q / CPL, chunk q % CPL; THREADS and CPL are powers of two, so chunk p's line and chunk
// differ from chunk 0's by compile-time constants (dl, dc): a warp copies 32 consecutive chunks,
// whole lines of global memory.
template <int NL, int LEN, int ALIGN, typename TILE>
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
        g = origin + (offset_t)line * ld + c0 * CE;
    }

    // Copy chunk p of the tile whose (line 0, element 0) is at x0 (line coordinate, limit xlim)
    // and y0 (along the line, limit ylim) into `tile`.
    template <bool FULL>
    __device__ __forceinline__ void copy(elem_t* tile, int ld, int x0, int xlim, int y0,
                                         int ylim) const {
        // Unrolled, ptxas keeps a 64-bit source pointer per chunk (plus its shared offset) live
        // through the whole K loop: 3 registers a chunk, 48 for TF32's 8 + 8 chunks of a
        // 128 x 32 tile pair, which made the TF32 builds spill. Past 4 chunks per operand, and
        // on the 4- and 2-byte paths (4 or 8 copies per chunk), the loop stays rolled and
        // recomputes them (a few integer instructions per 16-byte chunk).
        // A whole tile whose thread chunks lie STEP lines apart, STEP a multiple of the swizzle's
        // 8-line period: one source pointer, advanced by STEP lines per chunk (the empty asm
        // keeps ptxas from turning it back into CHUNKS live pointers), and destinations a
        // compile-time distance apart. 3 instructions a chunk, where the rolled loop took 13
        // (128 x 256 bf16 tiles, BK = 64: 104 of the k-tile loop's 438 instructions).
        constexpr int STEP = THREADS / CPL;
        if (FULL && ALIGN == 16 && CHUNKS > 1 && THREADS % CPL == 0 && STEP % 8 == 0) {
            const elem_t* s = g;
            elem_t* d = tile + TILE::chunk(line, c0) * CE;
#pragma unroll
            for (int p = 0; p < CHUNKS; ++p) {
                cp_async16(d + p * STEP * LEN, s);
                s += (offset_t)STEP * ld;
#ifdef __CUDA_ARCH__
                asm volatile("" : "+l"(s));
#endif
            }
        } else if (CHUNKS <= 4 && ALIGN == 16) {
#pragma unroll
            for (int p = 0; p < CHUNKS; ++p) chunk_copy<FULL>(p, tile, ld, x0, xlim, y0, ylim);
        } else {
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
        const elem_t* s = g + (offset_t)dl * ld + dc * CE;
        // elements of this chunk inside the operand (0..CE)
        const int v = FULL ? CE : (x0 + l < xlim ? min(CE, max(0, ylim - (y0 + c * CE))) : 0);
        if (ALIGN == 16) {
            if (FULL) cp_async16(d, s);
            else cp_async16_zfill(d, v > 0 ? s : base, v * ELEM_BYTES);
        } else if (ALIGN == 4) {  // 4 units of 4 bytes: 1 float or 2 halves each
            constexpr int UE = 4 / ELEM_BYTES;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int ve = min(UE, max(0, v - u * UE));
                cp_async4(d + u * UE, ve > 0 ? s + u * UE : base, ve * ELEM_BYTES);
            }
        } else {  // 16-bit elements on 2-byte boundaries: no cp.async fits; plain copies
#pragma unroll
            for (int e = 0; e < CE; ++e) d[e] = e < v ? s[e] : elem_t(0);
        }
    }

    __device__ __forceinline__ void advance(offset_t step) { g += step; }
};

// A: row-major lines are rows (BM lines of BK); column-major lines are columns (BK of BM).
using LoadA = Loader<A_KMAJOR ? BM : BK, A_KMAJOR ? BK : BM, ALIGN_A, TileA>;
// B: row-major lines are rows (BK lines of BN); column-major lines are columns (BN of BK).
using LoadB = Loader<B_KMAJOR ? BN : BK, B_KMAJOR ? BK : BN, ALIGN_B, TileB>;

// ------------------------------------------------------------------------------ lane exchange
// The CPU twins of ldmatrix and mma need other lanes' registers: each thread publishes its
// values in a block-wide scratch array, a barrier, each reads its warp's, a barrier (so the
// scratch may be reused). Every thread of the block calls them in the same order.
#ifndef __CUDA_ARCH__
inline u32 lab_bits(float x) {
    u32 u;
    __builtin_memcpy(&u, &x, 4);
    return u;
}
inline float lab_float(u32 u) {
    float x;
    __builtin_memcpy(&x, &u, 4);
    return x;
}
inline float lab_half_to_float(unsigned short h) {
#if PREC == 2
    return lab_float(u32(h) << 16);  // bfloat16: the top half of a float
#else
    _Float16 f;
    __builtin_memcpy(&f, &h, 2);
    return float(f);
#endif
}
#endif

// ------------------------------------------------------------------------------ ldmatrix
// Four 8 x 8 matrices of 16-bit elements; this lane gives the address of row (lane % 8) of
// matrix lane / 8 (16 contiguous bytes) and receives r[j] = elements 2t, 2t+1 of row g of
// matrix j (g = lane / 4, t = lane % 4, the lower column in the low half); TRANS: elements
// (2t, g) and (2t+1, g) of matrix j, i.e. of its transpose.
// A shared-memory byte address: the 32-bit shared window address on the GPU (what ldmatrix
// takes), the host address in the emulator. Fragment addresses are sums of a per-ring-slot base,
// a per-lane base and a compile-time byte offset, so that ptxas adds the first two once per
// k-tile and folds the constant into ldmatrix's immediate offset: summed in elements and scaled
// afterwards, every ldmatrix paid 2 integer instructions (and their latency) for its address.
#ifdef __CUDA_ARCH__
typedef u32 saddr_t;
__device__ __forceinline__ saddr_t shared_address(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}
#else
typedef unsigned long saddr_t;
inline saddr_t shared_address(const void* p) { return reinterpret_cast<saddr_t>(p); }
#endif

template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], saddr_t s) {
#ifdef __CUDA_ARCH__
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#else
    static const unsigned char* rows[THREADS];
    const elem_t* row = reinterpret_cast<const elem_t*>(s);
    const int tid = threadIdx.x, w = tid & ~31, lane = tid & 31, g = lane / 4, t = lane % 4;
    if (reinterpret_cast<unsigned long>(row) % 16) {
        std::fprintf(stderr, "ldmatrix row address %p is not 16-byte aligned\n", (void*)row);
        std::abort();
    }
    rows[tid] = reinterpret_cast<const unsigned char*>(row);
    __syncthreads();
    for (int j = 0; j < 4; ++j) {
        unsigned short lo, hi;
        if (TRANS) {
            __builtin_memcpy(&lo, rows[w + 8 * j + 2 * t] + 2 * g, 2);
            __builtin_memcpy(&hi, rows[w + 8 * j + 2 * t + 1] + 2 * g, 2);
        } else {
            __builtin_memcpy(&lo, rows[w + 8 * j + g] + 4 * t, 2);
            __builtin_memcpy(&hi, rows[w + 8 * j + g] + 4 * t + 2, 2);
        }
        r[j] = u32(lo) | (u32(hi) << 16);
    }
    __syncthreads();
#endif
}

// ------------------------------------------------------------------------------ TF32 rounding

// The tensor core reads the top 19 bits of a TF32 operand register and ignores the low 13: it
// truncates. To round to nearest instead, each register is rounded before its mma, in one of two
// ways (TF32_RN; 0 leaves the truncation alone, though 3xTF32 still splits with mode 2's rounding):
//   1  the conversion instruction. sm_90 has cvt.rn.tf32.f32: nearest, ties to even, as cuBLAS
//      rounds; ONE instruction (F2FP.TF32.F32.PACK_B), low 13 bits cleared, Inf kept, and every
//      NaN made 0x7fffe000 (read on an H100). sm_80..sm_89 have only cvt.rna.tf32.f32 (ties away
//      from zero), which ptxas expands into mode 2's guarded add plus a mask (dropped before an
//      mma); it keeps a NaN's top 19 bits.
//   2  half a TF32 unit (0x1000) added to the bit pattern: the truncation that follows then
//      rounds to nearest, ties away from zero (CUTLASS's round_half_ulp_truncate), and a carry
//      out of the mantissa moves the value up a binade as it should (FLT_MAX rounds up to Inf).
//      But only where the exponent field is not all ones. The add knows nothing of Inf and NaN,
//      and the GPU's fp32 arithmetic (0/0, Inf - Inf, log(-1), anything on a NaN) returns the
//      NaN 0x7fffffff: plus 0x1000 it is 0x80000fff, -0 to the tensor core (0xffffffff wraps to
//      +0), and the NaN vanishes from C. So a finite test guards the add: FSETP.GEU |x|, +INF
//      and a predicated IADD, 2 instructions; Inf and NaN pass unchanged (Inf's low 13 bits are
//      zero, and the NaNs arithmetic makes keep NaN bits above them).
// Either way a NaN in A or B reaches C as NaN, as with cuBLAS. The corner that cvt.rna, mode 2
// and plain truncation share: a NaN whose payload lies only in the low 13 bits (a signalling NaN
// such as 0x7f800001, which arithmetic never makes) is read as Inf; sm_90's cvt.rn keeps it NaN.
// Cost, in the default TF32 build's interior k-tile loop (sm_90, 128 HMMA): the old unguarded
// add took 354-356 instructions in every layout; mode 1 takes 355 in nt (both operands through
// ldmatrix) but 446 / 733 / 838 in nn / tt / tn, mode 2 483 to 993. Not the rounding itself: the
// add wrote each register of a TF32 run (LDS.128) straight into the quad or pair its HMMA reads,
// while ptxas rounds runs in place and then copies them there (94 to 516 MOVs a k-tile in the
// layouts with runs; the same MOVs, with nothing to hide them, appear with TF32_RN=0).
// The CPU twins compute exactly the bits of the sm_90 build (mode 1: cvt.rn, not sm_80's cvt.rna).
#if TF32_RN < 0 || TF32_RN > 2
#error "TF32_RN must be 0 (truncate), 1 (cvt: nearest even on sm_90) or 2 (guarded add)"
#endif
#define TF32_ROUND (TF32_RN == 1 ? 1 : 2)  // the rounding tf32_rn() does (0: 3xTF32's split)

// Mode 2's guard: the exponent field is not all ones. On the GPU a float compare, |x| < Inf
// (false for NaN), which is one FSETP with the absolute value for free.
__device__ __forceinline__ bool tf32_finite(u32 x) {
#ifdef __CUDA_ARCH__
    return fabsf(__uint_as_float(x)) < __uint_as_float(0x7f800000u);
#else
    return (x & 0x7f800000u) != 0x7f800000u;
#endif
}

__device__ __forceinline__ u32 tf32_rn(u32 x) {
#if TF32_ROUND == 1 && defined(__CUDA_ARCH__)
    u32 r;
#if __CUDA_ARCH__ >= 900
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
#else
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
#endif
    return r;
#elif TF32_ROUND == 1  // CPU: sm_90's cvt.rn.tf32.f32, bit for bit
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffe000u;   // NaN: the canonical TF32 NaN
    if ((x & 0x7f800000u) == 0x7f800000u) return x;             // Inf
    return (x + 0xfffu + ((x >> 13) & 1u)) & 0xffffe000u;      // nearest, ties to even
#else
    return tf32_finite(x) ? x + 0x1000u : x;
#endif
}
// The head of 3xTF32 must be an exact TF32 value (the tail is computed from it): the low 13 bits
// cleared. sm_90's cvt.rn.tf32.f32 clears them itself, so there the mask is left out (it was one
// LOP3 per split register, 48 per k-tile loop of the default 3xTF32 tile); the add needs it.
__device__ __forceinline__ u32 tf32_hi(u32 x) {
#if TF32_ROUND == 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return tf32_rn(x);
#else
    return tf32_rn(x) & 0xffffe000u;
#endif
}

__device__ __forceinline__ u32 f32_sub_bits(u32 a, u32 b) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(__uint_as_float(a) - __uint_as_float(b));
#else
    return lab_bits(lab_float(a) - lab_float(b));
#endif
}

// 3xTF32's split of x into a head hi and a tail lo = tf32_rn(x - hi). A finite x: hi = tf32_hi(x)
// (x - hi is then exact in fp32). Inf and NaN: hi = +-1, x's sign (x & 0xbf800000 is +-1 for
// any x whose exponent field is all ones), and lo = tf32_rn(x - hi) = x (Inf - 1 = Inf, NaN - 1
// a NaN). Why: the k-step sums lo_a hi_b + hi_a lo_b + hi_a hi_b (mma_step). Split as tf32(x) and
// tf32(x - tf32(x)), an Inf had the tail Inf - Inf = NaN, and every row (column) of C that an Inf
// of A (B) entered came out NaN, where fp32 (cuBLAS, torch.matmul) gives +-Inf. Zeroing only the
// tail of an Inf is not enough: hi_a lo_b is then Inf times b's tail, which is 0 wherever b is
// exact in TF32 (Inf * 0 = NaN) and has the sign of b - tf32(b), not of b, elsewhere (Inf + -Inf
// = NaN). With the Inf in the tail and a head of +-1, each product that meets an Inf has a factor
// of the IEEE product's sign that is 0 only where IEEE's product is NaN: a = +-Inf, b finite:
// lo_a hi_b = Inf * tf32(b) (NaN for b = 0, as IEEE), hi_a lo_b and hi_a hi_b are finite; a and
// b both infinite: lo_a hi_b = lo_a * +-1 and hi_a lo_b = +-1 * lo_b, Infs of the product's sign.
// The order of the three products and their fresh sum (mma_step) stay as they were, and so does
// the accuracy of finite operands. A NaN's tail is NaN, and its row or column of C is NaN.
// Corners: Inf times a nonzero b that TF32 rounds to 0 (|b| <= 2^-137) gives NaN where IEEE
// gives Inf, as in tf32; a finite x that rounds up to Inf (|x| >= 0x7f7ff000, within half a TF32
// unit of FLT_MAX) gets the head Inf and the tail -Inf, NaN in C, as before.
// Cost, sm_90, default 3xTF32 tile: the finite test (FSETP) and a predicated LOP3 per split
// register, less the mask cvt.rn makes needless (tf32_hi): the interior k-tile loop went from
// 484 to 526 instructions per 96 HMMA (nn; tt 486 to 530), registers 242 -> 235 (nn), 255 -> 254
// (tt), no spills. Mode 2 (and sm_80, whose cvt.rna is mode 2's guarded add and mask: the same
// bits, so its builds take this form) tests x once for head and tail: x - hi is finite where x
// is, except where x rounds up to Inf, and there lo = -+Inf + 0x1000 still reads as -+Inf.
// Testing hi and lo apart, the default 3xTF32 tile spilled 8 bytes at 255 registers (sm_90,
// layout tt), and took 48 more instructions per k-tile loop; the Inf head costs mode 2 nothing
// (581 instructions, nn, before and after).
__device__ __forceinline__ void tf32_split(u32 x, u32& hi, u32& lo) {
    const bool finite = tf32_finite(x);
#if TF32_ROUND == 2 || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
    hi = finite ? (x + 0x1000u) & 0xffffe000u : x & 0xbf800000u;
    const u32 d = f32_sub_bits(x, hi);
    lo = finite ? d + 0x1000u : d;
#else
    hi = finite ? tf32_hi(x) : x & 0xbf800000u;
    lo = tf32_rn(f32_sub_bits(x, hi));
#endif
}

// ------------------------------------------------------------------------------ mma
// d += a * b for one 16 x 8 piece: a 16 x KSTEP, b KSTEP x 8, fp32 accumulators
// (c[0], c[1]) = row g, columns 2t, 2t+1; (c[2], c[3]) = row g + 8, same columns.
#ifdef __CUDA_ARCH__
__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
#if PREC == 2
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif PREC == 3
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
#if PREC == 1
// d = a * b (TF32), the accumulator input a zero register: 3xTF32's fresh per-k-step sum starts
// with this instead of 4 MOVs of 0.0 per piece (ptxas did not fold them).
__device__ __forceinline__ void mma_fresh(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    const float z = 0.0f;
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(z));
}
#endif
#else
// The CPU twin: lane `tid` computes its 4 elements of the piece from the registers its warp
// published (xa[lane][set][piece i][r], xb[lane][set][piece j][r]; see mma_step), as the PTX
// ISA's fragment tables ("Matrix fragments for mma.m16n8k16 / m16n8k8") place them:
//   16-bit A: a[r] holds (row g + 8 (r % 2), k 2t + 8 (r / 2) + {0, 1}) (low half first);
//          B: b[r] holds (k 2t + 8 r + {0, 1}, column g);
//   TF32   A: a[r] holds (row g + 8 (r % 2), k t + 4 (r / 2));  B: b[r] holds (k t + 4 r, g).
// The tensor core adds its products to the accumulator and rounds toward zero (truncates), not
// to nearest (Ootomo and Yokota, "Recovering single precision accuracy from Tensor Cores while
// surpassing the FP32 theoretical peak performance", IJHPCA 2022): the products are exact here,
// the one rounding per mma is toward zero. Its error is biased: an accumulator carried through
// K/8 mma loses about K/16 half-units of its last place, 1.5e-5 relative at K = 4096 (why 3xTF32
// sums its three products in a fresh accumulator per k-step and adds that in fp32, mma_step).
inline float lab_round_to_zero(double x) {
    float f = float(x);
    if (std::fabs(double(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    return f;
}

template <typename XA, typename XB>
inline void lab_mma_piece(float (&c)[4], const XA& xa, const XB& xb, int tid, int i, int j,
                          int sa, int sb) {
    const int w = tid & ~31, lane = tid & 31, g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        double sum = 0;
        for (int k = 0; k < KSTEP; ++k) {
            double av, bv;
#if HALF
            const u32 ar = xa[w + 4 * (row % 8) + (k % 8) / 2][sa][i][row / 8 + 2 * (k / 8)];
            const u32 br = xb[w + 4 * col + (k % 8) / 2][sb][j][k / 8];
            av = lab_half_to_float((unsigned short)(k % 2 ? ar >> 16 : ar & 0xffff));
            bv = lab_half_to_float((unsigned short)(k % 2 ? br >> 16 : br & 0xffff));
#else
            // the tensor core reads the 19 TF32 bits of each operand register
            av = lab_float(xa[w + 4 * (row % 8) + k % 4][sa][i][row / 8 + 2 * (k / 4)] & 0xffffe000u);
            bv = lab_float(xb[w + 4 * col + k % 4][sb][j][k / 4] & 0xffffe000u);
#endif
            sum += av * bv;
        }
        c[e] = lab_round_to_zero(double(c[e]) + sum);
    }
}
#endif

// ------------------------------------------------------------------------------ fragments
// A warp's registers for one k-step: MI pieces of A (4 registers each), NJ pieces of B (2).
struct Frags {
    u32 a[MI][4];
    u32 b[NJ][2];
};

// The access patterns (lane = 4g + t = 8 j4 + r8; ldmatrix: this lane addresses row r8 of
// matrix j4), per tile layout, for piece i (A) / pair of pieces jj (B) at k-step ks:
//   k-major, ldmatrix:           line = w + 16 i + r8 + 8 (j4 % 2)  [B: 16 jj, 8 (j4 / 2)]
//                                chunk = 2 ks + j4 / 2               [B: j4 % 2]
//   16-bit M/N-major, .trans:    line = 16 ks + r8 + 8 (j4 / 2)      [B: j4 % 2]
//                                element = w + 16 i + 8 (j4 % 2)     [B: 16 jj, j4 / 2]
//   TF32 M/N-major, runs:        line = 8 ks + t + 4 kh (kh: the k-half, registers r / 2 of A,
//                                r of B), elements w + RUN g .. w + RUN g + RUN - 1, RUN / 4 LDS.128
// (w: the warp tile's first row or column). Whatever is a multiple of 8 lines (4 for runs) or
// 8 chunks is a compile-time offset; the rest is one of a few per-lane bases, kept in registers.
//
// TF32 runs, and why the rows and columns of a warp tile are permuted. An M- or N-contiguous TF32
// operand cannot go through ldmatrix (.trans moves 16-bit halves, not floats), and an m16n8k8
// fragment wants of lane 4g + t the elements (k t, column g) and (k t + 4, column g) of each 8-wide
// piece of B (rows g and g + 8 of each 16-row piece of A): read as they are, one LDS.32 each.
// But which physical column of the warp tile plays logical column g of piece j does not matter to
// the sum over k, as long as C is stored where its column really is. So let physical column
// RUN g + j (RUN = NJ, the pieces of B) play column g of piece j: lane 4g + t then finds the
// b registers of all NJ pieces for one k row in NJ consecutive floats of line t, NJ / 4 LDS.128
// (4 per k-step at NJ = 8, where LDS.32 took 16: the same shared-memory wavefronts, a quarter of
// the load instructions). A likewise: physical row RUN g + 2 i + h (RUN = 2 MI) plays row g + 8 h
// of piece i. The store of C (the kernel's end) undoes both permutations.
template <typename TILE, bool IS_A>
struct FragBase {
    static constexpr bool KM = IS_A ? A_KMAJOR : B_KMAJOR;
    static constexpr int PIECES = IS_A ? MI : NJ / 2;  // ldmatrix.x4 each
    static constexpr int LEN = KM ? BK : (IS_A ? BM : BN);  // elements per line
    static constexpr int RUN = IS_A ? 2 * MI : NJ;          // TF32 runs: floats per lane and line
    // bases: k-major: one per ks % 4; 16-bit M/N-major: one per piece % 4; TF32 runs: one per
    // 16-byte chunk of the run (the swizzle's XOR does not commute with adding the chunk index)
    static constexpr int NB = KM ? (KS < 4 ? KS : 4)
                                 : HALF ? (PIECES < 4 ? PIECES : 4) : RUN / 4;
    int base[NB];  // bytes

    __device__ __forceinline__ FragBase(int w, int lane) {
        const int g = lane / 4, t = lane % 4, r8 = lane % 8, j4 = lane / 8;
        const int sl = IS_A ? j4 % 2 : j4 / 2, sk = IS_A ? j4 / 2 : j4 % 2;  // line / k selectors
#pragma unroll
        for (int c = 0; c < NB; ++c) {
            if (KM)
                base[c] = TILE::at(w + r8 + 8 * sl, c * KSTEP + CE * sk);
            else if (HALF)
                base[c] = TILE::at(r8 + 8 * sk, w + 16 * c + 8 * sl);
            else
                base[c] = TILE::at(t, w + RUN * g + CE * c);
            base[c] *= ELEM_BYTES;
        }
    }

    // ldmatrix paths: the byte offset of piece p's row at k-step ks (a base + a constant)
    __device__ __forceinline__ int ldsm(int p, int ks) const {
        if (KM) return base[ks % 4] + (16 * p * LEN + (ks / 4) * 8 * CE) * ELEM_BYTES;
        return base[p % 4] + ((p / 4) * 8 * CE + 16 * ks * LEN) * ELEM_BYTES;
    }
    // TF32 runs: the byte offset of chunk q of the run in k-half kh of k-step ks
    __device__ __forceinline__ int run(int q, int kh, int ks) const {
        return base[q] + (8 * ks + 4 * kh) * LEN * ELEM_BYTES;
    }
};
using FragA = FragBase<TileA, true>;
using FragB = FragBase<TileB, false>;

// 16 bytes of shared memory into 4 registers (LDS.128).
__device__ __forceinline__ void lds_x4(u32 (&r)[4], saddr_t s) {
#ifdef __CUDA_ARCH__
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#else
    if (s % 16) {
        std::fprintf(stderr, "LDS.128 address %p is not 16-byte aligned\n", (void*)s);
        std::abort();
    }
    __builtin_memcpy(r, reinterpret_cast<const void*>(s), 16);
#endif
}

// Load the fragments of k-step ks of the tiles As, Bs.
__device__ __forceinline__ void load_frags(Frags& f, const elem_t* As, const elem_t* Bs, int ks,
                                           const FragA& fa, const FragB& fb) {
    if (A_KMAJOR || HALF) {
#pragma unroll
        for (int i = 0; i < MI; ++i) ldsm_x4<!A_KMAJOR>(f.a[i], shared_address(As) + fa.ldsm(i, ks));
    } else {  // TF32 runs: float o = 2 i + h of the run is a[i][h + 2 kh] (rows g + 8 h)
#pragma unroll
        for (int kh = 0; kh < 2; ++kh)
#pragma unroll
            for (int q = 0; q < 2 * MI / 4; ++q) {
                u32 v[4];
                lds_x4(v, shared_address(As) + fa.run(q, kh, ks));
#pragma unroll
                for (int e = 0; e < 4; ++e) f.a[(4 * q + e) / 2][(4 * q + e) % 2 + 2 * kh] = v[e];
            }
    }
    if (B_KMAJOR || HALF) {
#pragma unroll
        for (int jj = 0; jj < NJ / 2; ++jj) {
            // matrices: (piece 2jj, k lo), (2jj, k hi), (2jj+1, lo), (2jj+1, hi)
            u32 r[4];
            ldsm_x4<!B_KMAJOR>(r, shared_address(Bs) + fb.ldsm(jj, ks));
            f.b[2 * jj][0] = r[0];
            f.b[2 * jj][1] = r[1];
            f.b[2 * jj + 1][0] = r[2];
            f.b[2 * jj + 1][1] = r[3];
        }
    } else {  // TF32 runs: float j of the run is b[j][kh]
#pragma unroll
        for (int kh = 0; kh < 2; ++kh)
#pragma unroll
            for (int q = 0; q < NJ / 4; ++q) {
                u32 v[4];
                lds_x4(v, shared_address(Bs) + fb.run(q, kh, ks));
#pragma unroll
                for (int e = 0; e < 4; ++e) f.b[4 * q + e][kh] = v[e];
            }
    }
}

// The warp's mma for one k-step.
__device__ __forceinline__ void mma_step(float (&acc)[MI][NJ][4], Frags& f) {
#if PREC == 0 && TF32_RN
    // TF32: round each operand to nearest rather than let the tensor core truncate it. Here, at
    // the point of use, not in load_frags: there the roundings waited on the loads they follow
    // (the warp stalls in order), here the loads issued one k-step earlier have long landed.
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) f.a[i][r] = tf32_rn(f.a[i][r]);
#endif
#ifndef __CUDA_ARCH__
    // CPU: one register exchange per k-step, not per mma (far fewer barriers to emulate): each
    // lane publishes its fragments (3xTF32: the split parts, set 0 hi, set 1 lo), then computes
    // every piece in the order the GPU path issues them.
    constexpr int SETS = PREC == 1 ? 2 : 1;
    static u32 xa[THREADS][SETS][MI][4], xb[THREADS][SETS][NJ][2];
    const int tid = threadIdx.x;
    for (int i = 0; i < MI; ++i)
        for (int r = 0; r < 4; ++r) {
            if (PREC == 1) tf32_split(f.a[i][r], xa[tid][0][i][r], xa[tid][SETS - 1][i][r]);
            else xa[tid][0][i][r] = f.a[i][r];
        }
    for (int j = 0; j < NJ; ++j)
        for (int r = 0; r < 2; ++r) {
            // (TF32: the GPU path rounds B piece by piece, right before its mma)
            if (PREC == 1) tf32_split(f.b[j][r], xb[tid][0][j][r], xb[tid][SETS - 1][j][r]);
            else xb[tid][0][j][r] = PREC == 0 && TF32_RN ? tf32_rn(f.b[j][r]) : f.b[j][r];
        }
    __syncthreads();
    for (int j = 0; j < NJ; ++j)
        for (int i = 0; i < MI; ++i) {
            if (SETS == 2) {  // lo * hi, hi * lo, hi * hi into a fresh t, then acc += t in fp32
                float t[4] = {0.f, 0.f, 0.f, 0.f};
                lab_mma_piece(t, xa, xb, tid, i, j, SETS - 1, 0);
                lab_mma_piece(t, xa, xb, tid, i, j, 0, SETS - 1);
                lab_mma_piece(t, xa, xb, tid, i, j, 0, 0);
                for (int e = 0; e < 4; ++e) acc[i][j][e] += t[e];
            } else {
                lab_mma_piece(acc[i][j], xa, xb, tid, i, j, 0, 0);
            }
        }
    __syncthreads();
#elif PREC != 1
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#if PREC == 0 && TF32_RN
#pragma unroll
        for (int r = 0; r < 2; ++r) f.b[j][r] = tf32_rn(f.b[j][r]);
#endif
#pragma unroll
        for (int i = 0; i < MI; ++i) mma(acc[i][j], f.a[i], f.b[j]);
    }
#else
    // 3xTF32: x = hi + lo, hi = tf32(x), lo = tf32(x - hi) (tf32_split: x - hi is exact in fp32;
    // lo is rounded by tf32_rn + the tensor core's truncation, hi explicitly). A is split
    // once per k-step (MI x 8 registers); B one piece at a time, right before its 3 x MI mma, so
    // that only 4 of its split registers are live: the accumulators leave little room.
    // The three products go into a fresh accumulator t (zero), which is then added to acc with
    // fp32 adds (round to nearest): the tensor core rounds its sums toward zero, and carried
    // through all K / 8 k-steps that bias alone was 2.9e-5 relative at K = 4096 on the H100, three
    // times the fp32 threshold (lab_round_to_zero above). Per k-step it is one truncation of t.
    u32 ah[MI][4], al[MI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) tf32_split(f.a[i][r], ah[i][r], al[i][r]);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        u32 bh[2], bl[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) tf32_split(f.b[j][r], bh[r], bl[r]);
        // small terms first, into a fresh t per piece (4 registers: the accumulators leave
        // no room for MI of them); the pieces' chains are independent, so they overlap
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            float t[4];
            mma_fresh(t, al[i], bh);
            mma(t, ah[i], bl);
            mma(t, ah[i], bh);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += t[e];
        }
    }
#endif
}

// ------------------------------------------------------------------------------ C

// Two adjacent C elements (lo at column col, hi at col + 1) as the output type.
#if HALF
__device__ __forceinline__ u32 pack2(float lo, float hi) {
#ifdef __CUDA_ARCH__
    u32 r;  // cvt.rn.*x2.f32 d, a, b puts a in the upper half
#if PREC == 2
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
#else
    auto one = [](float x) -> u32 {
#if PREC == 2
        const u32 u = lab_bits(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;   // NaN
        return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;         // round to nearest even
#else
        const _Float16 h = static_cast<_Float16>(x);           // round to nearest even
        unsigned short s;
        __builtin_memcpy(&s, &h, 2);
        return s;
#endif
    };
    return one(lo) | (one(hi) << 16);
#endif
}
#endif

__device__ __forceinline__ void store_pair(elem_t* p, float lo, float hi, bool both) {
#if HALF
    const u32 v = pack2(lo, hi);
    if (VEC_C && both) {
        *reinterpret_cast<u32*>(p) = v;
    } else {
        p[0] = elem_t(v & 0xffffu);
        if (both) p[1] = elem_t(v >> 16);
    }
#else
    if (VEC_C && both) {
        *reinterpret_cast<float2*>(p) = make_float2(lo, hi);
    } else {
        p[0] = lo;
        if (both) p[1] = hi;
    }
#endif
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

    LoadA load_a(A, A_KMAJOR ? A + (offset_t)m0 * lda : A + m0, lda, tid);
    LoadB load_b(B, B_KMAJOR ? B + (offset_t)n0 * ldb : B + n0, ldb, tid);

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
        if (full)  // common.cuh's copy_ktile: with Known = true, no test at all
            copy_ktile<BK, A_TILE, true>(load_a, load_b, As, inside, m0, n0, k0, M, N, K, lda, ldb);
        else if (next < tiles)
            copy_ktile<BK, A_TILE>(load_a, load_b, As, inside, m0, n0, k0, M, N, K, lda, ldb);
        ++next;
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) copy_next(s, false);
    cp_async_wait<STAGES - 2>();  // tile 0 is in (our copies); the barrier publishes everyone's
    __syncthreads();

    const FragA fa(wm, lane);
    const FragB fb(wn, lane);
    Frags frag[FRAGS];  // FRAGS 2: k-step ks reads frag[ks % 2] while frag[(ks + 1) % 2] loads
    if (FRAGS == 2) load_frags(frag[0], smem, smem + A_TILE, 0, fa, fb);

    int rd = 0, fill = STAGES - 1;  // ring slots: tile t is read from rd, the next copy goes to fill
    // One k-tile: copy tile t + STAGES - 1, compute tile t. full: that copy is a whole interior
    // tile (and so tile t + 1 exists): no bounds code at all. Two loops, each with its own copy
    // of the body: with one loop and a run-time choice of copy, ptxas predicated the edge copy's
    // ~90 instructions into every k-tile of the TF32 builds (4.6 instructions per HMMA, where the
    // steady state needs about 2.5).
    auto tile_step = [&](int t, bool full) {
        copy_next(fill, full);  // tile t + STAGES - 1 -> the slot of tile t - 1 (free: see the header)
        fill = fill + 1 == STAGES ? 0 : fill + 1;
        const int nx = rd + 1 == STAGES ? 0 : rd + 1;
        const elem_t* As = smem + rd * (A_TILE + B_TILE);
        const elem_t* An = smem + nx * (A_TILE + B_TILE);
        const bool more = full || t + 1 < tiles;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            if (FRAGS == 1) {
                load_frags(frag[0], As, As + A_TILE, ks, fa, fb);
                mma_step(acc, frag[0]);
                if (ks + 1 == KS && more) {
                    cp_async_wait<STAGES - 2>();  // our copies of tile t + 1 have landed
                    __syncthreads();              // everyone's have, and tile t is read
                }
                continue;
            }
            if (ks + 1 < KS) {
                load_frags(frag[(ks + 1) % FRAGS], As, As + A_TILE, ks + 1, fa, fb);
            } else if (more) {  // last k-step: hand over to tile t + 1 first
                cp_async_wait<STAGES - 2>();  // our copies of tile t + 1 have landed
                __syncthreads();              // everyone's have
                load_frags(frag[(ks + 1) % FRAGS], An, An + A_TILE, 0, fa, fb);
            }
            mma_step(acc, frag[ks % FRAGS]);
        }
        if (FRAGS == 2 && KS % 2) frag[0] = frag[FRAGS - 1];  // odd k-steps: next tile starts at 0
        rd = nx;
    };
    const int full_tiles = inside ? K / BK : 0;  // tiles inside A and B, whole along k
    int t = 0;
#pragma unroll 1
    for (; t + STAGES - 1 < full_tiles; ++t) tile_step(t, true);
#pragma unroll 1
    for (; t < tiles; ++t) tile_step(t, false);
    cp_async_wait<0>();  // no copy may still be writing when the block exits (empty groups)

    // C: piece (i, j) of this lane is rows g, g + 8 and columns 2t, 2t + 1, in the warp tile's
    // logical order; TF32 runs permute them (FragBase): logical row g + 8 h of piece i is physical
    // row 2 MI g + 2 i + h, logical column c of piece j physical column NJ c + j, so this lane's
    // columns 2t and 2t + 1 of pieces j and j + 1 are physical neighbours: one pair store each.
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm + (TileA::RUNS ? 2 * MI * g + 2 * i + h : 16 * i + g + 8 * h);
            if (row >= M) continue;
            elem_t* c_row = C + (offset_t)row * ldc;
            if (TileB::RUNS) {
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int j = 0; j < NJ; j += 2) {
                        const int col = n0 + wn + NJ * (2 * t4 + e) + j;
                        if (col < N) store_pair(c_row + col, acc[i][j][2 * h + e],
                                                acc[i][j + 1][2 * h + e], col + 1 < N);
                    }
            } else {
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    const int col = n0 + wn + 8 * j + 2 * t4;
                    if (col < N) store_pair(c_row + col, acc[i][j][2 * h], acc[i][j][2 * h + 1],
                                            col + 1 < N);
                }
            }
        }
}
