"""Launcher for cuda_kernels/warp_specialized.cu: tma_wgmma's tiles with one producer warpgroup
issuing the TMA loads and CONSUMERS warpgroups issuing wgmma (sm_90a), in bf16, fp16, tf32,
3xtf32 (whose B tiles the producer's other three warps split into TF32 heads and tails) and fp8.

The operand plan, the tensor maps and the launch are cuda_kernels/_tma.py's.

Geometry: a 1-D grid of ceil(M/BM) * ceil(N/BN) blocks (BM = 64 * CONSUMERS) in grouped order,
128 * (CONSUMERS + 1) threads, STAGES * (BM + BN) * 128 + 1024 bytes of dynamic shared memory
(3xtf32: STAGES * (BM + 2 BN) * 128 + 1024, B's tails in each slot), one block per SM.

Parameters (lab/stages.py, stage warp_specialized), each 0 meaning the automatic row: CONSUMERS
(1-2: 2), BN (64-256: 256; 128 for 3xtf32), STAGES (ring slots, 2-8: 4), and group.
"""

from __future__ import annotations

from cuda_kernels._tma import HopperStage

STAGE = HopperStage(
    "warp_specialized", "warp_specialized.cu", "matmul_warp_specialized", warpgroups="CONSUMERS",
    defaults={"CONSUMERS": 2, "BN": 256, "STAGES": 4},
    choices={"CONSUMERS": (0, 1, 2), "BN": (0, 64, 128, 192, 256),
             "STAGES": (0, 2, 3, 4, 5, 6, 7, 8)},
    producer=True,
    # 3xtf32 (tma_tiles.cuh's split3x): 128 x 128 tiles, as persistent's
    split=True, split_defaults={"BN": 128},
)
OFFER = STAGE.offer()
prepare = STAGE.prepare_for(OFFER)
DEFAULTS = STAGE.defaults
launch = STAGE.launch
build, geometry = STAGE.build, STAGE.geometry  # the CUDA launcher's pair (tests/test_registry.py)
