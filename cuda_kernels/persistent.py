"""Launcher for cuda_kernels/persistent.cu: warp_specialized's producer and consumers in one
resident block per SM that walks the output tiles (sm_90a), in bf16, fp16, tf32, 3xtf32 and fp8,
and fp8 with row-wise and block-wise scales (fp8_row, fp8_block: the variant file's SCALE_ROW and
SCALE_BLOCK builds).

The operand plan, the tensor maps and the launch are cuda_kernels/_tma.py's; the grid is its
PERSISTENT schedule. persistent.cu is the lesson: the tile walk over warp_specialized's kernel, one
block per cluster, C stored from registers, A and B read from shared memory as TMA lands them
(lesson_case below). Every other build (clusters of two, C through TMA stores, which the automatic
row uses, TF32 with an M-major A) compiles cuda_kernels/variants/persistent.cu, the same kernel
with those switches, whose builds of the lesson case are the lesson's instruction for instruction
(tests/test_lessons_hopper.py).

Geometry: a 1-D grid of CLUSTER * min(ceil(M/(BM * CLUSTER)) * ceil(N/BN), SMs / CLUSTER)
blocks in clusters of CLUSTER (BM = 64 * CONSUMERS; the SMs of the GPU the operands are on, 132
without one), 128 * (CONSUMERS + 1) threads,
STAGES * (BM + BN) * 128 + 1024 bytes of dynamic shared memory (3xtf32: BM + 2 BN lines per
slot, B's tails beside B) plus 16 KiB per consumer
warpgroup to stage C for its TMA stores (where C's lines are 16-byte aligned; direct stores
otherwise), one block per SM.

Parameters (lab/stages.py, stage persistent), each 0 meaning the automatic row: CONSUMERS (1-2:
2), BN (64-256: 256; 128 for 3xtf32), STAGES (ring slots, 2-8: 4), CLUSTER (blocks per cluster sharing one
multicast load of each B tile, 1-2; 0: 1 where C goes out through TMA stores, 2 where it is stored
from registers: cuda_kernels/_tma.py HopperStage.with_cluster), STORE (how C leaves the block: 1,
the automatic row, through shared memory and TMA stores where C's lines are 16-byte aligned (a C
whose lines are not is computed into an aligned buffer and copied); 2 from registers, the lesson's
epilogue), SPLITK (bf16, fp16, fp8: K cut into that many ranges, each a work unit of its own,
for shapes with few output tiles and a long K; the fp32 partial sums go to a workspace and
cuda_kernels/splitk_reduce.cu adds them in a fixed order; 0: 1, no split), STREAMK (bf16, fp16,
fp8: 1 cuts the tiles' k-tiles into one range per block, so every SM gets the same work where the
tiles do not divide evenly among the SMs; a whole tile's C is stored directly and the parts of the
others added by the same second kernel; 0: off) and group (tile-rows walked together). `persistent:STORE=2,CLUSTER=1` runs the lesson.
"""

from __future__ import annotations

from cuda_kernels._tma import PERSISTENT, HopperStage


def lesson_case(defines: dict, layout: str) -> bool:
    """Whether persistent.cu (the lesson) is the build for these defines and the layout the kernel
    reads: one block per cluster (CLUSTER=1), C stored from registers (TMA_STORE=0, not
    C_TRANS), not TF32 with an M-major A (A through registers), not fp8 with row-wise or
    block-wise scales (SCALE_ROW, SCALE_BLOCK), at most two consumer warpgroups (three
    share the registers differently: the variant file's CONSUMERS == 3), and K not split (the
    variant file's SPLITK) nor cut into ranges (STREAMK)."""
    return (defines.get("CLUSTER") == 1 and defines.get("TMA_STORE") == 0
            and not defines.get("C_TRANS") and not ("PREC_TF32" in defines and layout[0] == "t")
            and not defines.get("SCALE_ROW") and not defines.get("SCALE_BLOCK")
            and defines.get("CONSUMERS", 2) < 3 and not defines.get("SPLITK")
            and not defines.get("STREAMK"))


STAGE = HopperStage(
    "persistent", "persistent.cu", "matmul_persistent", warpgroups="CONSUMERS",
    defaults={"CONSUMERS": 2, "BN": 256, "STAGES": 4, "CLUSTER": 0, "STORE": 1, "SPLITK": 1,
              "STREAMK": 0},
    choices={"CONSUMERS": (0, 1, 2, 3), "BN": (0, 64, 128, 192, 256),
             "STAGES": (0, 2, 3, 4, 5, 6, 7, 8), "CLUSTER": (0, 1, 2), "STORE": (0, 1, 2),
             "SPLITK": (0, 1, 2, 3, 4, 5, 6, 8, 12, 16), "STREAMK": (0, 1)},
    producer=True, schedule=PERSISTENT, tma_store=True, lesson_case=lesson_case,
    # 3xtf32: a 128 x 128 tile, the most a consumer's registers hold with a fresh sum beside the
    # accumulators (2 x 64) and two sets of A's heads and tails (64); four slots of A, B and B's
    # tails (48 KiB) and C's staging fill 225 of the 227 KiB
    split=True, split_defaults={"BN": 128},
    # tf32: an M-major A through registers, and nn as C^T = B^T A^T, so no layout but tn copies
    # an operand (cuda_kernels/_tma.py kernel_layout)
    tf32_regs=True,
    # fp8 with row-wise and block-wise scales (the variant file's SCALE_ROW and SCALE_BLOCK)
    scaled=True,
)
OFFER = STAGE.offer()
prepare = STAGE.prepare_for(OFFER)
DEFAULTS = STAGE.defaults
launch = STAGE.launch
build, geometry = STAGE.build, STAGE.geometry  # the CUDA launcher's pair (tests/test_registry.py)
