// Stage: persistent. warp_specialized's producer and consumers in a block that stays resident:
// one block per SM walks output tiles (tile = blockIdx.x, blockIdx.x + gridDim.x, ...) in
// grouped order, and its ring runs on across tile boundaries.
//
// What changed from stage warp_specialized (warp_specialized.cu): the grid.
//   - warp_specialized launches one block per output tile. At 4096^3 in 128 x 256 tiles that is
//     512 blocks on an H100's 132 SMs: 3.88 waves, so the last wave leaves 16 SMs idle, and every
//     block pays its prologue (barrier setup, tensor-map prefetch, the ring's first loads with
//     nothing to multiply) and its epilogue (C's stores with the tensor cores idle).
//   - Here the grid is min(tiles, SMs) blocks (cuda_kernels/_tma.py's PERSISTENT schedule), and
//     each block walks its tiles with TileWalk below. The producer's ring counter `it` keeps
//     counting over tiles, so while the consumers store tile t's C the producer is already
//     loading tile t + gridDim.x's first k-tiles into the slots they released: the epilogue
//     overlaps the next tile's loads, and no block starts cold after the first.
// Bottleneck it attacks: the tail of the last wave, and the per-tile prologue and epilogue.
// What it does not do: a second accumulator set so that one tile's epilogue overlaps the next
// tile's wgmma as well as its loads (the registers are not there: 128 accumulators per thread).
//
// This file is the lesson case: one block per cluster, C stored from registers (tma_tiles.cuh's
// store_acc, as warp_specialized), A and B read from shared memory as TMA lands them. The
// launcher builds cuda_kernels/variants/persistent.cu, the same kernel with three switches, for
// everything else: clusters of two blocks sharing each B tile through TMA multicast (CLUSTER),
// C through shared memory and TMA stores (TMA_STORE, the automatic row's epilogue), and TF32 with
// an M-major A through registers (A_REGS, C_TRANS); docs/stages/persistent.md has a section each.
//
// Launch geometry (cuda_kernels/persistent.py): a 1-D grid of min(tiles, SMs) blocks,
// BM = 64 * CONSUMERS, 128 * (CONSUMERS + 1) threads, STAGES ring slots of dynamic shared memory
// plus 1 KiB, one block per SM.
//
// The ring: iteration `it` (counted over all of the block's tiles and their k-tiles) uses slot
// it % STAGES; the producer waits for that slot's empty barrier to complete phase
// it / STAGES - 1, the consumers for its full barrier's phase it / STAGES. A consumer releases the
// slot of iteration it-1 once wgmma.wait_group 1 says its wgmma finished, and the last slot of a
// tile after wgmma.wait_group 0, before the tile's stores.
//
// Precision: as warp_specialized.cu (bf16, fp16: any layout; tf32 and fp8: both operands
// K-major; fp8's bfloat16 C scaled by scale_a * scale_b; 3xTF32 with B split by the producer's
// three idle warps, tma_tiles.cuh's split3x).

#ifndef CONSUMERS
#define CONSUMERS 2
#endif

#include "tma_tiles.cuh"

constexpr int THREADS = 128 * (CONSUMERS + 1);

// The tile schedule's kernel half: the grid of ceil(M/BM) x ceil(N/BN) output tiles, and tile t's
// first row and column in grouped order (GROUP tile-rows walked column by column, so the tiles in
// flight at one time share GROUP block-rows of A and a few block-columns of B in L2: common.cuh's
// block_tile, for a tile index that is not blockIdx.x). A block walks t = blockIdx.x,
// blockIdx.x + gridDim.x, ...; each role builds its TileWalk after its setmaxnreg (ptxas keeps a
// value computed before setmaxnreg and used after it in local memory: 3xTF32's build spilled
// grid_m and tiles so).
struct TileWalk {
    int grid_m, grid_n, tiles;
    __device__ __forceinline__ TileWalk(int M, int N)
        : grid_m(CEIL_DIV(M, BM)), grid_n(CEIL_DIV(N, BN)), tiles(grid_m * grid_n) {}
    __device__ __forceinline__ void tile(int t, int& m0, int& n0) const {
        const int width = GROUP * grid_n;
        const int first_m = (t / width) * GROUP;
        const int rows = min(grid_m - first_m, GROUP);
        const int in_group = t - (t / width) * width;
        m0 = (first_m + in_group % rows) * BM;
        n0 = (in_group / rows) * BN;
    }
};

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    matmul_persistent(const __grid_constant__ TensorMap tma_a,
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

    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    const int first = blockIdx.x, stride = gridDim.x;  // this block's tiles: first + i stride

#if SPLIT  // one arrival per splitting warp (the producer's warps 1-3)
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) mbar_init(ready0 + 8 * s, 3);
#endif
    if (threadIdx.x == 0) init_ring(&tma_a, &tma_b, full0, empty0, 4 * CONSUMERS);
    __syncthreads();

    if (wg == 0) {  // the producer
        setmaxnreg_dec<PRODUCER_REGS>();
        const TileWalk walk(M, N);
        const int KT = CEIL_DIV(K, BK);
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = first; t < walk.tiles; t += stride) {
                int m0, n0;
                walk.tile(t, m0, n0);
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(empty0 + 8 * s, ((it / STAGES) - 1) & 1);
                    load_tile(&tma_a, &tma_b, ring + s * SLOT, full0 + 8 * s, kt, m0, n0);
                }
            }
        }
#if SPLIT
        else if (warp > 0) {  // the splitters: the B tiles of all of the block's k-tiles
            const int mine = first < walk.tiles ? (walk.tiles - first + stride - 1) / stride : 0;
            split_ring(ring, full0, empty0, ready0, mine * KT, threadIdx.x - 32);
        }
#endif
        return;
    }

    setmaxnreg_inc<CONSUMER_REGS>();
    const TileWalk walk(M, N);
    const int KT = CEIL_DIV(K, BK);
    const int cw = wg - 1;  // this consumer's warpgroup: rows m0 + 64 cw .. of each tile
#if defined(PREC_FP8)
    const float scale = *scale_a * *scale_b;
#endif
    float acc[ACC];
    int it = 0;
    for (int t = first; t < walk.tiles; t += stride) {
        int m0, n0;
        walk.tile(t, m0, n0);
#if SPLIT  // 3xTF32: tma_tiles.cuh's split3x
        it = mma_tile_loop_3x(acc, ring, ready0, it, KT, cw, warp, lane, [&](int s) {
            if (lane == 0) mbar_arrive(empty0 + 8 * s);
        });
#else
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % STAGES;
            const u32 slot = ring + s * SLOT;
            mbar_wait(full0 + 8 * s, (it / STAGES) & 1);
            mma_tile(acc, slot, cw);
            wg_wait<1>();  // iteration it-1's wgmma are done: release its slot
            if (kt > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % STAGES));
        }
        wg_wait<0>();
        if (lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % STAGES));  // the tile's last slot
#endif
#pragma unroll
        for (int i = 0; i < ACC; ++i) reg_fence(acc[i]);
#if defined(PREC_FP8)
        scale_acc(acc, scale);
#endif
        store_acc(acc, C, M, N, ldc, m0 + 64 * cw, n0, warp, lane);
    }
}
