// Stage: persistent. warp_specialized's producer and consumers in a block that stays resident:
// one block per SM walks output tiles (tile = blockIdx.x, blockIdx.x + gridDim.x, ...) in
// grouped order, and its ring runs on across tile boundaries.
//
// What changed from stage warp_specialized (warp_specialized.cu): the grid.
//   - warp_specialized launches one block per output tile. At 4096^3 in 128 x 256 tiles that is
//     512 blocks on an H100's 132 SMs: 3.88 waves, so the last wave leaves 16 SMs idle, and every
//     block pays its prologue (barrier setup, tensor-map prefetch, the ring's first loads with
//     nothing to multiply) and its epilogue (C's stores with the tensor cores idle).
//   - Here the grid is min(tiles, SMs) blocks. The producer's ring counter `it` keeps counting
//     over tiles, so while the consumers store tile t's C the producer is already loading tile
//     t + gridDim.x's first k-tiles into the slots they released: the epilogue overlaps the next
//     tile's loads, and no block starts cold after the first.
// Bottleneck it attacks: the tail of the last wave, and the per-tile prologue and epilogue.
//   - Clusters (CLUSTER = 2): two blocks on neighbouring SMs take two tiles down M with the same
//     columns; each loads half of the shared B tile and multicasts it into both (TMA
//     .multicast::cluster), so a block reads 16 + 16 KiB from L2 per k-tile instead of 16 + 32.
//     A consumer releases a slot in both blocks (a remote mbarrier arrive), since the peer's
//     multicast writes it too.
//   - The epilogue through shared memory and TMA stores (TMA_STORE = 1, where C's lines are
//     16-byte aligned): tma_tiles.cuh's store_acc_tma.
// What it does not do: a second accumulator set so that one tile's epilogue overlaps the next
// tile's wgmma as well as its loads (the registers are not there: 128 accumulators per thread).
//
// Launch geometry (cuda_kernels/persistent.py): a 1-D grid of CLUSTER * min(cluster tiles, the
// clusters the GPU holds at once) blocks in clusters of CLUSTER, BM = 64 * CONSUMERS,
// 128 * (CONSUMERS + 1) threads, STAGES ring slots plus (TMA_STORE) 16 KiB of staging per
// consumer warpgroup of dynamic shared memory, plus 1 KiB, one block per SM.
//
// The ring: iteration `it` (counted over all of the block's tiles and their k-tiles) uses slot
// it % STAGES; the producer waits for that slot's empty barrier to complete phase
// it / STAGES - 1, the consumers for its full barrier's phase it / STAGES. A consumer releases the
// slot of iteration it-1 once wgmma.wait_group 1 says its wgmma finished, and the last slot of a
// tile after wgmma.wait_group 0, before the tile's stores.
//
// Precision: as tma_wgmma.cu. bf16, fp16: any layout. tf32: B K-major, A either way (M-major
// through registers: A_REGS). fp8: float8 e4m3 operands K-major only (layout nt; the launcher
// copies the others) and a bfloat16 C (bf16's 64-column TMA-store chunks); the accumulators are
// multiplied by scale_a * scale_b (one-element float32 tensors passed after ldc, read once by
// each consumer thread after its setmaxnreg) before the bf16 rounding.

#ifndef CONSUMERS
#define CONSUMERS 2
#endif
#ifndef CLUSTER
#define CLUSTER 2
#endif
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
#ifndef TMA_STORE
#define TMA_STORE 1
#endif

#define A_REGS_LOOP 1  // this kernel takes TF32 with an M-major A through registers (A_REGS)
#include "tma_tiles.cuh"
#if C_TRANS && (TMA_STORE || !A_REGS)
#error "C_TRANS (D = C^T) is the register-A TF32 build's, stored from registers (TMA_STORE=0)"
#endif

constexpr int THREADS = 128 * (CONSUMERS + 1);

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_persistent(const __grid_constant__ TensorMap tma_a, const __grid_constant__ TensorMap tma_b,
#if TMA_STORE
                      const __grid_constant__ TensorMap tma_c,
#else
                      c_elem_t* __restrict__ C,
#endif
                      int M, int N, int K, long long ldc
#if defined(PREC_FP8)
                      , const float* __restrict__ scale_a, const float* __restrict__ scale_b
#endif
                      ) {
    extern __shared__ unsigned char smem_raw[];
    // full[0..STAGES), empty[STAGES..2 STAGES), 3xTF32's ready[2 STAGES..3 STAGES)
    __shared__ alignas(8) u64 bars[(2 + SPLIT) * STAGES];
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[STAGES]);
    // the barrier the consumers wait on: the TMA bytes landed (full), or (3xTF32) B split as well
    const u32 ready0 = SPLIT ? smem_u32(&bars[2 * STAGES]) : full0;

    // CLUSTER blocks take CLUSTER neighbouring tiles down M with the same columns: a cluster
    // tile is (BM * CLUSTER) x BN, and the clusters walk those in grouped order. Each role works
    // out the grid itself after its setmaxnreg (WALK): ptxas keeps a value that lives across
    // setmaxnreg in local memory (3xTF32's build spilled grid_m and tiles so).
#define WALK                                                               \
    const int grid_m = CEIL_DIV(M, BM * CLUSTER), grid_n = CEIL_DIV(N, BN); \
    const int tiles = grid_m * grid_n;                                      \
    const int KT = CEIL_DIV(K, BK)
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    const int rank = CLUSTER > 1 ? static_cast<int>(cluster_rank()) : 0;
    const int first = blockIdx.x / CLUSTER, stride = gridDim.x / CLUSTER;

#if SPLIT  // one arrival per splitting warp (the producer's warps 1-3)
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) mbar_init(ready0 + 8 * s, 3);
#endif
    // one arrival per consumer warp of every block whose loads land here (init_ring's fence
    // covers the ready barriers too)
#if TMA_STORE
    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS * CLUSTER, &tma_c);
#else
    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS * CLUSTER);
#endif
    if (CLUSTER > 1)
        cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {  // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        WALK;
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = first; t < tiles; t += stride) {
                int bm, bn;
                tile_of(t, grid_m, grid_n, bm, bn);
                const int m0 = (bm * CLUSTER + rank) * BM, n0 = bn * BN;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(empty0 + 8 * s, ((it / STAGES) - 1) & 1);
                    if (CLUSTER > 1)
                        load_tile_multicast<CLUSTER>(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s,
                                                     kt, m0, n0, rank);
                    else
                        load_tile(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s, kt, m0, n0);
                }
            }
        }
#if SPLIT
        else if (warp > 0) {  // the splitters: each landed B tile into heads and tails
            const int mine = first < tiles ? (tiles - first + stride - 1) / stride : 0;
            split_ring(ring, full0, ready0, mine * KT, threadIdx.x - 32);
        }
#endif
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        WALK;
        const int cw = wg - 1;  // this consumer's warpgroup: rows 64 cw .. of each tile
#if defined(PREC_FP8)
        const float scale = *scale_a * *scale_b;  // C = scale_a * scale_b * (A @ B)
#endif
        // a slot is free once the consumers of every block its loads land in have released it
        auto release = [&](int s) {
            if (lane != 0) return;
            if (CLUSTER > 1) {
#pragma unroll
                for (int c = 0; c < CLUSTER; ++c) mbar_arrive_cluster(empty0 + 8 * s, c);
            } else {
                mbar_arrive(empty0 + 8 * s);
            }
        };
        float acc[ACC];
#if A_REGS
        u32 fa[2][NSTEP][4];
#endif
        int it = 0;
        for (int t = first; t < tiles; t += stride) {
            int bm, bn;
            tile_of(t, grid_m, grid_n, bm, bn);
#if SPLIT  // 3xTF32: tma_tiles.cuh's split3x
            it = mma_tile_loop_3x(acc, ring, ready0, it, KT, cw, warp, lane, release);
#elif A_REGS
            // TF32, A M-major: A's fragments from each landed slot into registers, two sets by
            // k-tile parity (wgmma reads them asynchronously; a set is loaded again only after
            // wgmma.wait_group 1 said the k-tile that read it finished)
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
            auto step = [&](int kt, u32(&f)[NSTEP][4]) {
                const int s = it % STAGES;
                mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
                a_frags_mn(ring + s * SLOT, cw, warp, lane, f);
                mma_tile_rs(acc, ring + s * SLOT, f);
                wg_wait<1>();
                if (kt > 0) release((it - 1) % STAGES);
                ++it;
            };
            for (int kt = 0; kt < KT; kt += 2) {
                step(kt, fa[0]);
                if (kt + 1 < KT) step(kt + 1, fa[1]);
            }
            wg_wait<0>();
            release((it - 1) % STAGES);
#else
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int s = it % STAGES;
                const u32 slot = ring + s * SLOT;
                mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
                mma_tile(acc, slot, cw);
                wg_wait<1>();  // iteration it-1's wgmma are done: release its slot
                if (kt > 0) release((it - 1) % STAGES);
            }
            wg_wait<0>();
            release((it - 1) % STAGES);  // the tile's last slot
#endif
#pragma unroll
            for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);
#if defined(PREC_FP8)
            scale_acc(acc, scale);
#endif
#if C_TRANS
            store_acc_t(acc, C, M, N, ldc, (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane);
#elif TMA_STORE
            store_acc_tma(acc, &tma_c, ring + STAGES * SLOT + cw * C_STAGE_BYTES,
                          (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane, 1 + cw);
#else
            store_acc(acc, C, M, N, ldc, (bm * CLUSTER + rank) * BM + 64 * cw, bn * BN, warp, lane);
#endif
        }
#if TMA_STORE
        if (warp == 0) bulk_wait_all_warp();  // C's last stores done before the block exits
#endif
    }
    // no block may exit while a block of its cluster can still multicast into it or arrive on
    // its barriers
    if (CLUSTER > 1) cluster_sync();
#undef WALK
}
