"""Launcher for cuda_kernels/tma_wgmma.cu: TMA loads, an mbarrier ring, and wgmma with both
operands in shared memory (sm_90a), in bf16, fp16, tf32 and fp8.

The operand plan (which layouts run as they are, which are copied in the call), the tensor maps
and the launch are cuda_kernels/_tma.py's, shared with warp_specialized and persistent.

Geometry: a 1-D grid of ceil(M/BM) * ceil(N/BN) blocks (BM = 64 * WGS) in grouped order,
128 * WGS threads, STAGES * (BM + BN) * 128 + 1024 bytes of dynamic shared memory, one block per
SM.

Parameters (lab/stages.py, stage tma_wgmma), each 0 meaning the automatic row: WGS (warpgroups,
1-2: 2), BN (64-256: 256), STAGES (ring slots, 2-8: 4), and group (block-rows walked together).
The automatic row was the fastest of a sweep on an H200 at 4096^3 and 8192^3 bf16 (128 x 128
tiles 25% slower, a 3-slot ring 3-4% slower; results/2026-11-26-h200/probe-tma_wgmma-sweep.csv).
"""

from __future__ import annotations

from cuda_kernels._tma import HopperStage

STAGE = HopperStage(
    "tma_wgmma", "tma_wgmma.cu", "matmul_tma_wgmma", warpgroups="WGS",
    defaults={"WGS": 2, "BN": 256, "STAGES": 4},
    choices={"WGS": (0, 1, 2, 3), "BN": (0, 64, 128, 192, 256), "STAGES": (0, 2, 3, 4, 5, 6, 7, 8)},
)
OFFER = STAGE.offer()
prepare = STAGE.prepare_for(OFFER)
DEFAULTS = STAGE.defaults
launch = STAGE.launch
build, geometry = STAGE.build, STAGE.geometry  # the CUDA launcher's pair (tests/test_registry.py)
