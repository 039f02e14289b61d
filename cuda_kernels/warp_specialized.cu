// Stage: warp_specialized. tma_wgmma's tiles and ring, with the work split by role: one producer
// warpgroup only issues TMA loads, CONSUMERS warpgroups only issue wgmma and store C.
//
// What changed from stage tma_wgmma (tma_wgmma.cu): who waits for what.
//   - In tma_wgmma.cu thread 0 is both a consumer and the loader: after its own wgmma it waits
//     on the empty barrier of tile kt-1's slot, for every warp of the block, before it can issue
//     the next load; warp 0 stalls there, and so does the whole warpgroup 0 at its next
//     .sync.aligned wgmma. Here the producer warpgroup (warpgroup 0; one thread of it issues)
//     runs ahead on its own: it waits on `empty` slots and fills them, the consumers wait only on
//     `full` slots. Neither role's waits sit in the other's instruction stream.
//   - Registers (setmaxnreg): the producer needs a handful, the consumers hold BN / 2 fp32
//     accumulators each. The block starts with the same cap for every thread (65536 / THREADS,
//     168 at 384 threads); the producer gives registers back (setmaxnreg.dec to PRODUCER_REGS)
//     and the consumers take them (setmaxnreg.inc to CONSUMER_REGS), so a consumer could hold up
//     to 232 registers: 128 x 40 + 256 x 232 = 64,512 of an SM's 65,536.
// Bottleneck it attacks: the loads' issue and their waits inside the consumers' critical path.
//
// Launch geometry (cuda_kernels/warp_specialized.py): a 1-D grid of ceil(M/BM) * ceil(N/BN)
// blocks in grouped order, BM = 64 * CONSUMERS (the consumers are tma_tiles.cuh's WGS
// warpgroups), 128 * (CONSUMERS + 1) threads, STAGES ring slots of dynamic shared memory plus
// 1 KiB, one block per SM.
//
// The ring: the producer loads tile kt into slot kt % STAGES as soon as that slot's empty
// barrier has completed phase kt / STAGES - 1 (every consumer warp arrived after its wgmma of
// tile kt - STAGES finished), so up to STAGES tiles are loaded ahead. A consumer waits on
// full[kt % STAGES], issues its wgmma, lets one group stay in flight (wgmma.wait_group 1) and
// releases tile kt-1's slot; after the loop it releases the last one.
//
// Precision: as tma_wgmma.cu (bf16, fp16: any layout; tf32 and fp8: both operands K-major; fp8's
// bfloat16 C scaled by scale_a * scale_b, read by each consumer thread after its setmaxnreg), and
// 3xTF32 (both operands K-major): the producer's three idle warps split each B tile into TF32
// heads and tails, the consumers split A in registers (tma_tiles.cuh's split3x).

#ifndef CONSUMERS
#define CONSUMERS 2
#endif

#include "tma_tiles.cuh"

constexpr int THREADS = 128 * (CONSUMERS + 1);

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_warp_specialized(const __grid_constant__ TensorMap tma_a,
                            const __grid_constant__ TensorMap tma_b, c_elem_t* __restrict__ C, int M,
                            int N, int K, long long ldc
#if defined(PREC_FP8)
                            , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#endif
                            ) {
    extern __shared__ unsigned char smem_raw[];
    // full[0..STAGES), empty[STAGES..2 STAGES), 3xTF32's ready[2 STAGES..3 STAGES)
    __shared__ alignas(8) u64 bars[(2 + SPLIT) * STAGES];
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[STAGES]);
    const u32 ready0 = SPLIT ? smem_u32(&bars[2 * STAGES]) : full0;

    int bm, bn;
    block_tile(CEIL_DIV(M, BM), CEIL_DIV(N, BN), bm, bn);
    const int m0 = bm * BM, n0 = bn * BN;
    const int KT = CEIL_DIV(K, BK);
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;

#if SPLIT  // one arrival per splitting warp (the producer's warps 1-3)
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) mbar_init(ready0 + 8 * s, 3);
#endif
    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS);
    __syncthreads();

    if (wg == 0) {  // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < KT; ++kt) {
                const int s = kt % STAGES;
                if (kt >= STAGES) mbar_wait(empty0 + 8 * s, ((kt / STAGES) - 1) & 1);
                load_tile(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s, kt, m0, n0);
            }
        }
#if SPLIT
        else if (warp > 0) {  // the splitters: each landed B tile into heads and tails
            split_ring(ring, full0, empty0, ready0, KT, threadIdx.x - 32);
        }
#endif
        return;
    }

    setmaxnreg_inc<CONSUMER_REGS>();
    const int cw = wg - 1;  // this consumer's warpgroup: rows m0 + 64 cw ..
#if defined(PREC_FP8)
    const float scale = *scale_a * *scale_b;
#endif
    float acc[ACC];
#if SPLIT  // 3xTF32: tma_tiles.cuh's split3x
    mma_tile_loop_3x(acc, ring, ready0, 0, KT, cw, warp, lane, [&](int s) {
        if (lane == 0) mbar_arrive(empty0 + 8 * s);
    });
#else
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    for (int kt = 0; kt < KT; ++kt) {
        const int s = kt % STAGES;
        const u32 slot = ring + s * SLOT;
        mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);
        mma_tile(acc, slot, cw);
        wg_wait<1>();  // tile kt-1's wgmma are done: release its slot
        if (kt > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
    }
    wg_wait<0>();
#endif
#pragma unroll
    for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);
#if defined(PREC_FP8)
    scale_acc(acc, scale);
#endif
    store_acc(acc, C, M, N, ldc, m0 + 64 * cw, n0, warp, lane);
}
