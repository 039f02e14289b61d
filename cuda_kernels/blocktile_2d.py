"""Launcher for cuda_kernels/blocktile_2d.cu: each thread computes a TM x TN register tile of C.

Geometry: block (BM/TM)*(BN/TN) threads (1-D; 256 by default); 1-D grid of ceil(M/BM) * ceil(N/BN)
blocks ordered by block_tile() in common.cuh (group); static shared memory (BM*(BK+2) + BK*BN) * 4
bytes (9 KiB by default; a transposed B pads the rows of Bs by 4 floats: variants/blocktile_2d.cu,
Layouts), no dynamic shared memory. Each operand layout (Problem.layout: nn, nt, tn, tt) is its own
build: the lesson, blocktile_2d.cu, for row-major A and B with 32-bit offsets, and
variants/blocktile_2d.cu (the same kernel for every layout and for operands past 2^31 elements)
for every other problem (cuda_kernels/_build.py: lesson_case, stage_source).

validate() rejects a parameter combination the kernel cannot run with one sentence, before
anything is compiled; vectorized.py reuses it (same thread mapping, plus float4 constraints).
The register cap (__launch_bounds__' second argument) is chosen as in blocktile_1d.py.
"""

from cuda_kernels._build import (cdiv, cuda_offer, first_min_blocks, lesson_case,
                                 require_even_split, require_static_smem, spill_free_build,
                                 stage_launcher, stage_source)
from lab.base.errors import LabError
from lab.base.entry import entry

# Registers a thread needs: the TM*TN accumulators, the TM + TN fragments and about 24 for
# addresses and loop state. The first MIN_BLOCKS tried leaves at least that many.
REGS_OVERHEAD = 24


def threads(BM: int = 128, BN: int = 128, TM: int = 8, TN: int = 8, **_) -> int:
    return (BM // TM) * (BN // TN)


def smem_bytes(BM: int = 128, BN: int = 128, BK: int = 8, **_) -> int:
    return (BM * (BK + 2) + BK * BN) * 4  # As rows padded by 2 floats (see the .cu)


def first_blocks(BM=128, BN=128, TM=8, TN=8) -> int:
    """Blocks per SM to ask ptxas for first: as many as the thread count allows, but no more than
    leave TM*TN + TM + TN + REGS_OVERHEAD registers per thread (at the defaults 2 blocks, so
    128 registers)."""
    t = threads(BM, BN, TM, TN)
    need = TM * TN + TM + TN + REGS_OVERHEAD
    return max(1, min(first_min_blocks(t), 65536 // (t * need)))


def validate(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8,
             stage: str = "blocktile_2d", **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    where = f"{stage} with BM={BM}, BN={BN}, BK={BK}, TM={TM}, TN={TN}"
    if TM % 4 or TN % 4:
        raise LabError(f"{where}: TM and TN must be multiples of 4 (a thread's rows and columns "
                       f"come in groups of 4)")
    if BM % TM or BN % TN:
        raise LabError(f"{where}: BM must be a multiple of TM and BN a multiple of TN")
    t = threads(BM, BN, TM, TN)
    if not 32 <= t <= 1024:
        hint = "raise TM/TN or lower BM/BN" if t > 1024 else "lower TM/TN or raise BM/BN"
        raise LabError(f"{where} needs (BM/TM)*(BN/TN) = {t} threads per block, but a block holds "
                       f"32 to 1024; {hint}")
    require_even_split(where, t, BM * BK, BK * BN, "values", "raise BK or TM/TN")
    require_static_smem(where, smem_bytes(BM, BN, BK))


def build(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8, group: int = 16,
          fast_math: bool = False, unroll: bool = True, layout: str = "nn",
          offsets64: bool = False, **_):
    validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
    source = stage_source("blocktile_2d", lesson_case(layout, offsets64))  # lesson or variant
    return spill_free_build(source, "matmul_blocktile_2d",
                            {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "TN": TN, "GROUP": group},
                            first_blocks(BM, BN, TM, TN), fast_math=fast_math, unroll=unroll,
                            layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, BM: int = 128, BN: int = 128, TM: int = 8, TN: int = 8, **_):
    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, TM, TN), 1, 1), 0


OFFER = cuda_offer("blocktile_2d", ("matmul_blocktile_2d",), build, geometry, validate=validate)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)
