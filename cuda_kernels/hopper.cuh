// hopper.cuh: the Hopper (sm_90a) pieces wgmma.cu and the TMA stages share (tma_wgmma.cu and the
// stages built on it): tensor maps and TMA loads, mbarriers, wgmma's shared-memory matrix descriptors and its
// fence / commit / wait, ldmatrix, 3xTF32's split of an fp32 value into a TF32 head and tail. Each is one PTX instruction or a loop around one; the stage files say
// how they are put together.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "this kernel needs sm_90a (Hopper's wgmma and TMA): compile with -arch=sm_90a"
#endif

// The element of A and B in the precision the including file defines: the bits of a
// bfloat16 / float16 (PREC_BF16, PREC_FP16) or of a float8 e4m3 (PREC_FP8), else fp32 (TF32 and
// 3xTF32 read fp32 operands). C's element (c_elem_t, C_ELEM bytes) is the operands' except in fp8,
// whose C is bfloat16.
#if defined(PREC_BF16) || defined(PREC_FP16)
typedef unsigned short elem_t;  // the bits of a bfloat16 / float16
#define ELEM 2
#elif defined(PREC_FP8)
typedef unsigned char elem_t;  // the bits of a float8 e4m3
#define ELEM 1
#else
typedef float elem_t;
#define ELEM 4
#endif
#if defined(PREC_FP8)
typedef unsigned short c_elem_t;  // the bits of a bfloat16
#define C_ELEM 2
#else
typedef elem_t c_elem_t;
#define C_ELEM ELEM
#endif

// A TMA tensor map (CUtensorMap): 128 opaque bytes the host encodes with the driver's
// cuTensorMapEncodeTiled (lab/toolchain/tma.py) and passes by value as a __grid_constant__
// kernel parameter, so the TMA unit reads it from the kernel's parameter space.
struct alignas(64) TensorMap {
    u64 raw[16];
};

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ------------------------------------------------------------------------------ mbarriers
// An mbarrier (a 64-bit word in shared memory) completes a phase when `count` threads have
// arrived and every byte announced with expect_tx has landed; waiters name the phase's parity.
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Make the initialised barriers visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// ------------------------------------------------------------------------------ TMA
__device__ __forceinline__ void tma_prefetch(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}
// One box of a 2-D tensor map into shared memory at dst; x is the coordinate along the map's
// first (contiguous) dimension, y along the second. Out-of-range elements are filled with
// zeros, and the box's full size counts towards the barrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TensorMap* map, int x, int y, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(bar)
        : "memory");
}

// A box of shared memory at src into the 2-D tensor map's box at (x, y), clipped to the tensor:
// elements outside it are not written; then the store's bulk async-group is committed. A whole
// warp runs it and elect.sync picks the one lane that issues (the lowest), as CUTLASS issues its
// TMA operations: the warp stays converged, so ptxas moves the operands into the uniform
// registers UTMASTG reads with a plain R2UR (under `if (lane == 0)` it wrapped the instruction in
// a loop over the operands' values instead; both forms are correct).
__device__ __forceinline__ void tma_store_2d_warp(const TensorMap* map, int x, int y, u32 src) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "elect.sync _|p, 0xffffffff;\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
        "@p cp.async.bulk.commit_group;\n}\n" ::"l"(reinterpret_cast<u64>(map)),
        "r"(x), "r"(y), "r"(src)
        : "memory");
}
// The lane of a warp that tma_store_2d_warp elects waits until at most N of its bulk groups still
// read shared memory (their buffers may be reused); wait_all: until none is outstanding at all.
template <int N>
__device__ __forceinline__ void bulk_wait_read_warp() {
    asm volatile(
        "{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n@p cp.async.bulk.wait_group.read %0;\n}\n" ::"n"(N)
        : "memory");
}
__device__ __forceinline__ void bulk_wait_all_warp() {
    asm volatile(
        "{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n@p cp.async.bulk.wait_group 0;\n}\n" ::
            : "memory");
}
// Generic-proxy writes to shared memory (st.shared) made visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// A barrier of `threads` threads (a warpgroup: 128) with its own id (1-15; 0 is __syncthreads).
// barrier.sync, not bar.sync (= barrier.sync.aligned): the threads of a warp may reach it
// diverged, after a branch only one of them took (the leader's TMA store).
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ------------------------------------------------------------------------------ clusters
// A cluster's blocks run at once on neighbouring SMs and can reach each other's shared memory:
// a TMA load can be multicast into every block of the cluster (one L2 read, CTA mask bits), and a
// thread can arrive on an mbarrier of another block (its address mapped with mapa).
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster: the barriers' initialisation is seen cluster-wide
// before any block multicasts into another or arrives on its barriers, and no block exits while
// another may still do so.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at shared address `bar` of block `cta` of this cluster. The arrival
// orders only this thread's own earlier accesses (release at CTA scope, the default): what it
// announces, that its warpgroup's wgmma finished reading a slot, wgmma.wait_group already
// guarantees. A release at cluster scope (.release.cluster) waits for a cluster-wide fence on
// every arrival, and made the clustered kernel 2.2x slower (docs/stages/persistent.md).
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cta) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}
// tma_load_2d into the same shared address of every block in `mask`, each block's mbarrier at
// `bar` receiving the bytes that land there.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TensorMap* map, int x, int y,
                                                      u32 bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(bar), "h"(mask)
        : "memory");
}

// ------------------------------------------------------------------------------ wgmma
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Warp specialization's register split: every thread of the warpgroup runs it; .dec gives
// registers back to the SM's pool, .inc takes them (waiting until the pool has them).
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
// Keep the compiler from moving accumulator reads/writes across a wgmma boundary.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptors of 128-byte-swizzled tiles (TMA's CU_TENSOR_MAP_SWIZZLE_128B
// writes exactly this layout: 16-byte chunk c of 128-byte line r at chunk c ^ (r % 8), atoms of 8
// lines = 1024 bytes, 1024-byte aligned). Fields: start address >> 4 (bits 0-13), leading byte
// offset >> 4 (16-29), stride byte offset >> 4 (32-45), layout 1 = 128-byte swizzle (62-63).
__device__ __forceinline__ u64 gmma_desc(u32 addr, u32 lbo, u32 sbo) {
    return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>(lbo >> 4) << 16) |
           (static_cast<u64>(sbo >> 4) << 32) | (static_cast<u64>(1) << 62);
}
// K-major: lines of 128 bytes of K, one per row (M or N); 8-line groups 1024 bytes apart (SBO);
// the leading offset is unused by this layout (1 by convention). A k-step starts 32 bytes on.
__device__ __forceinline__ u64 desc_kmajor(u32 addr) { return gmma_desc(addr, 16, 1024); }
// M- or N-major (16-bit types only): lines of 128 bytes (64 elements) of M or N, one per k;
// 8-k groups 1024 bytes apart (SBO), 64-element chunks of M or N `chunk` bytes apart (LBO).
// A k-step of 16 starts 2048 bytes on.
__device__ __forceinline__ u64 desc_mnmajor(u32 addr, u32 chunk) {
#ifdef MN_DESC_SWAP  // probe: the two offsets the other way round
    return gmma_desc(addr, 1024, chunk);
#else
    return gmma_desc(addr, chunk, 1024);
#endif
}

// ------------------------------------------------------------------------------ registers
// ldmatrix: four 8 x 8 matrices of 16-bit elements (or 8 x 4 of 32-bit ones) from shared memory
// into a warp's registers, lane l naming a line of matrix l / 8; .trans transposes each.
__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ u32 tf32_rn(u32 x) {
    u32 r;
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
    return r;
}
// 3xTF32's split of x into a head h and a tail tf32_rn(x - h): h = tf32_rn(x) where x is finite,
// +-1 (x's sign: x & 0xbf800000) where x is Inf or NaN, whose tail is then x itself. So an Inf
// reaches C as fp32's +-Inf (NaN only where it meets 0 or an Inf of the other sign), not as the
// NaN of the tail Inf - Inf; why the head must not stay Inf: mma.cu's tf32_split. Cost in
// wgmma.cu: a finite test and a predicated LOP3 per split element (A' 16, B' 16 per thread and
// tile at its default 3xTF32 row): 895 -> 1024 instructions per loop of two tiles (24 HGMMA),
// registers 230 -> 236, no spills (sm_90a, nn and tt).
__device__ __forceinline__ u32 tf32_head(u32 x) {
    return fabsf(__uint_as_float(x)) < __uint_as_float(0x7f800000u) ? tf32_rn(x) : x & 0xbf800000u;
}
__device__ __forceinline__ u32 tf32_tail(u32 x, u32 h) {
    return tf32_rn(__float_as_uint(__uint_as_float(x) - __uint_as_float(h)));
}

// 3xTF32 of tiny operands (TF32X3_SCALE; 0 builds the split as it was before, for before/after
// runs). The kernels sum each pair of k-tiles (wgmma.cu: SUM_TILES of them) afresh in the tensor
// core and add that sum to the accumulators in fp32, and each wgmma writes its sum back rounded
// toward zero onto fp32's grid. Where the products are subnormal (operands near 1e-20: products
// near 1e-40, below 2^-126), that grid is the fixed 2^-149, not 2^-23 of the sum: the fresh sums
// keep a few bits and lose the rest toward zero, 24 times per pair of k-tiles (on an H200 at
// 2048^3, U[0, 1) operands times 2^-66: 7.1e-6 relative error, cuBLAS fp32 6.0e-7). The operands
// and their tails are normal there and nothing is flushed (no -ftz in the Hopper builds): only the
// fresh sums sit below 2^-126.
// The cure (wgmma.cu), where a k-tile's B is tiny (every |b| below 2^-24, tiny_bits, known to the
// whole block: wgmma.cu's barrier after its split tells it): that k-tile is summed
// afresh alone, and each warp multiplies its 16 rows of A by 2^k before the split (tf32x3_scale),
// k lifting the largest |a| of those rows to about 2^-17 (exponent field SCALE_TO), so that the
// fresh sum (times 2^k) is normal; the sum is added times 2^-k (one FFMA, as exact as the FADD it
// replaces: part * 2^-k is exact before its one rounding). x * 2^k is exact (a scale up: no
// underflow, subnormal x too; no overflow: a scaled |a| is below 2^-16 and |b| below 2^-24). Every
// other k-tile takes the old path, bit for bit (k = 0, pairs). What stays: products below 2^-126
// where |b| >= 2^-24 (|a| below about 2^-100), or where |a| is already above 2^-17 (|b| subnormal),
// as in cuBLAS's own subnormal partial sums. Measured on an H200 (2048^3): those operands 7.1e-6 ->
// 2.4e-7, randn times 2^-66 6.5e-6 -> 4.6e-7 (cuBLAS 2.2e-6: its C is subnormal); ordinary operands
// give the same bits as before. Cost at 4096^3 (randn, old and new builds interleaved): wgmma
// +4.5%; k-tiles of tiny B run 9-12% slower (summed alone). Per k-tile of ordinary operands
// wgmma.cu issues about 27 more instructions (its OR of B' and the BAR.RED.AND that replaces its
// BAR.SYNC). warp_specialized and persistent take the same cure (tma_tiles.cuh: the producer's
// splitters OR B's bits and pass the answer through a word of shared memory per warp and slot;
// split_ring, mma_tile_loop_3x). Not yet cured: mma's 3xTF32 (cuda_kernels/variants/mma.cu, a
// fresh sum per k-step), which loses the same way (4.6e-6 on those operands).
#ifndef TF32X3_SCALE
#define TF32X3_SCALE 1
#endif
constexpr int SCALE_TO = 110;
// "Every |b| below 2^-24", tested as the OR of the elements' bits: its exponent field bounds every
// element's from above (a test that may miss a tiny tile spread over many binades, never passes
// one that is not tiny; Inf and NaN have every field bit). One LOP3 per 2 elements.
constexpr u32 TINY_B_BITS = 0x33800000u;  // 2^-24
__device__ __forceinline__ bool tiny_bits(u32 ored) { return (ored & 0x7f800000u) < TINY_B_BITS; }
// a | b | c in one LOP3 (ptxas made a chain of two-input ORs of `o |= x | y | z | w`)
__device__ __forceinline__ u32 or3(u32 a, u32 b, u32 c) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xfe;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
// 2^k for -126 <= k <= 127, as its bits.
__device__ __forceinline__ float exp2_int(int k) { return __uint_as_float(static_cast<u32>(127 + k) << 23); }
// A warp's A fragments of one k-tile (raw fp32): where the k-tile's B is `tiny` (block-uniform),
// k from the largest |a| of the warp's rows (15 FMNMX and one REDUX) and each fragment multiplied
// by 2^k; else k = 0 and nothing else.
template <int S>
__device__ __forceinline__ int tf32x3_scale(u32 (&f)[S][4], bool tiny) {
#if TF32X3_SCALE
    if (!tiny) return 0;
    float m[S];
#pragma unroll
    for (int s = 0; s < S; ++s)
        m[s] = fmaxf(fmaxf(fabsf(__uint_as_float(f[s][0])), fabsf(__uint_as_float(f[s][1]))),
                     fmaxf(fabsf(__uint_as_float(f[s][2])), fabsf(__uint_as_float(f[s][3]))));
#pragma unroll
    for (int w = 1; w < S; w *= 2)
#pragma unroll
        for (int s = 0; s + w < S; s += 2 * w) m[s] = fmaxf(m[s], m[s + w]);
    u32 mb;  // NaN is no maximum (fmaxf); all NaN, or Inf: field 255, k = 0; all zero: k = 0
    asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;\n" : "=r"(mb) : "r"(__float_as_uint(m[0])));
    const int k = mb == 0 ? 0 : max(SCALE_TO - max(static_cast<int>(mb >> 23), 1), 0);
    if (k != 0) {
        const float x = exp2_int(k);
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
            for (int r = 0; r < 4; ++r) f[s][r] = __float_as_uint(__uint_as_float(f[s][r]) * x);
    }
    return k;
#else
    return 0;
#endif
}
// Two fp32 values to a pair of bf16 / fp16 bits (x in the low half), rounded to nearest.
__device__ __forceinline__ u32 pack_bf16(float x, float y) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
    return r;
}
__device__ __forceinline__ u32 pack_f16(float x, float y) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
    return r;
}
