// Stage: tma_wgmma. Hopper's tensor memory accelerator (TMA) loads both operand tiles into
// 128-byte-swizzled shared memory, an mbarrier ring tracks them, and wgmma.mma_async reads both
// operands straight from shared memory.
//
// What changed from stage wgmma (wgmma.cu): who moves the data, and where A lives.
//   - Copies. wgmma.cu's 128 * WGS threads each issue 16-byte cp.async copies, computing an
//     address and a bound per chunk, and then wait for their own groups and a __syncthreads. Here
//     one thread issues one TMA instruction per tile (cp.async.bulk.tensor): the TMA unit walks
//     the box in the tensor map, fills out-of-range elements with zeros (no bounds code anywhere
//     in the kernel), writes the 128-byte swizzle itself, and signals an mbarrier with the bytes
//     it delivered. The other threads issue no copy instruction at all.
//   - Operand A. wgmma.cu feeds A to wgmma from registers (ldmatrix or LDS per k-step, TF32
//     rounding in registers); here A is a shared-memory descriptor as B is, so the warps only
//     issue wgmma and wait. For 16-bit types either operand may lie K-major or M/N-major
//     (wgmma's transpose bits, imm-trans-a / -b): every layout runs with no copy. TF32 wgmma
//     reads shared operands K-major only (it has no transpose bits), so the launcher copies an
//     M-major A or N-major B K-major inside the timed call (cuda_kernels/tma_wgmma.py).
//   - Synchronisation. No __syncthreads in the loop: a `full` mbarrier per ring slot says the
//     TMA bytes landed (transaction count), an `empty` mbarrier per slot says every warp's wgmma
//     that read it have finished (one arrival per warp).
// Bottleneck it attacks: the issue slots and registers wgmma.cu spends on copies, addresses and A
// fragments, which its warps must fit between wgmma.
//
// Launch geometry (cuda_kernels/tma_wgmma.py): a 1-D grid of ceil(M/BM) * ceil(N/BN) blocks in
// grouped order (GROUP block-rows walked together, common.cuh's block_tile), BM = 64 * WGS rows,
// 128 * WGS threads (WGS warpgroups; each computes 64 rows x BN columns, BN / 2 fp32
// accumulators per thread), STAGES ring slots of dynamic shared memory plus 1 KiB to align the
// ring to 1024 bytes (the swizzle's atom), one block per SM.
//
// Tiles (ELEM bytes per element; BK = 128 / ELEM elements of K per tile: one 128-byte line):
//   A K-major (A row-major, layouts nn, nt): one box {BK, BM} of the map over A (dims {K, M});
//     BM lines of 128 bytes; warpgroup w's 64 rows start at line 64 w.
//   A M-major (A column-major, tn, tt; 16-bit only): BM / 64 boxes {64, BK} of the map over A
//     (dims {M, K}), each BK lines of 64 elements of M; warpgroup w reads box w.
//   B K-major (B column-major, nt, tt): one box {BK, BN} (dims {K, N}), BN lines.
//   B N-major (B row-major, nn, tn; 16-bit only): BN / 64 boxes {64, BK} (dims {N, K}).
//
// The ring: STAGES slots. Before the loop thread 0 loads tiles 0 .. STAGES-2. At tile kt every
// warpgroup waits on full[kt % STAGES], issues its wgmma (BK / KSTEP of them, one commit group),
// and waits until at most one group is in flight (wgmma.wait_group 1): tile kt-1's wgmma are done,
// so lane 0 of every warp arrives on empty[(kt-1) % STAGES]. Thread 0 then loads tile
// kt + STAGES - 1 into that slot, once its empty barrier shows all warps have arrived. So
// STAGES - 1 tiles are loading or loaded while tile kt multiplies.
//
// Precision: PREC_BF16, PREC_FP16 (16-bit inputs and output, fp32 accumulation), PREC_TF32 (fp32
// inputs and output; the tensor core reads the operands as TF32, ignoring the low 13 bits of
// each: truncation, as in wgmma.cu's B operand), PREC_FP8 (float8 e4m3 inputs, K-major only as
// TF32: layout nt, the launcher copies the others; k-steps of 32, BK = 128; C is bfloat16,
// C = scale_a * scale_b * (A @ B): the two per-tensor scales, one-element float32 tensors passed
// after ldc, read once and multiplied into the fp32 accumulators before the bf16 rounding).
// Build defines (0 in the launcher: these defaults, in tma_tiles.cuh): WGS 2, BN 256, STAGES 4,
// GROUP 8.

#include "tma_tiles.cuh"

constexpr int THREADS = 128 * WGS;

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_tma_wgmma(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
                     c_elem_t* __restrict__ C, int M, int N, int K, long long ldc
#if defined(PREC_FP8)
                     , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#endif
                     ) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ alignas(8) u64 bars[2 * STAGES];  // full[0..STAGES), empty[STAGES..2 STAGES)
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[STAGES]);

    int bm, bn;
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM, n0 = bn * BN;
    const int KT = CEIL_DIV(K, BK);
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, THREADS / 32);
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES - 1 && s < KT; ++s)
            load_tile(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s, s, m0, n0);
    }

#if defined(PREC_FP8)
    const float scale = *scale_a * *scale_b;
#endif
    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;

    for (int kt = 0; kt < KT; ++kt) {
        const int slot_i = kt % STAGES;
        const u32 slot = ring + slot_i * SLOT;
        mbar_wait(full0 + 8 * slot_i, (kt / STAGES) & 1);
        mma_tile(acc, slot, wg);
        wg_wait<1>();  // tile kt-1's wgmma are done: its slot may be refilled
        if (kt > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
        const int next = kt + STAGES - 1;
        if (threadIdx.x == 0 && next < KT) {
            const int ns = next % STAGES;
            if (next >= STAGES) mbar_wait(empty0 + 8 * ns, ((next / STAGES) - 1) & 1);
            load_tile(&tma_a, &tma_b, ring + ns * SLOT, full0 + 8 * ns, next, m0, n0);
        }
        __syncwarp();
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);
#if defined(PREC_FP8)
    scale_acc(acc, scale);
#endif

    store_acc(acc, C, M, N, ldc, m0 + 64 * wg, n0, warp & 3, lane);
}
