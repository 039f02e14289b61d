"""Launcher for cuda_kernels/blocktile_1d.cu: each thread computes TM results down one column of C.

Geometry: block BM*BN/TM threads (1-D; 512 by default); 1-D grid of ceil(M/BM) * ceil(N/BN) blocks
ordered by block_tile() in common.cuh (group); static shared memory (BM*BK + BK*BN) * 4 bytes
(4 KiB by default; a transposed A or B pads its tile rows by 4 floats: variants/blocktile_1d.cu,
Layouts), no dynamic shared memory. Each operand layout (Problem.layout: nn, nt, tn, tt) is its own
build: the lesson, blocktile_1d.cu, for row-major A and B with 32-bit offsets, and
variants/blocktile_1d.cu (the same kernel for every layout and for operands past 2^31 elements)
for every other problem (cuda_kernels/_build.py: lesson_case, stage_source).

validate() rejects a parameter combination the kernel cannot run (too many or too few threads,
tiles that do not split evenly over the threads) with one sentence, before anything is compiled.
"""

from cuda_kernels._build import (cdiv, cuda_offer, first_min_blocks, lesson_case,
                                 require_even_split, require_static_smem, spill_free_build,
                                 stage_launcher, stage_source)
from lab.base.errors import LabError
from lab.base.entry import entry

def threads(BM: int = 64, BN: int = 64, TM: int = 8, **_) -> int:
    return BM * BN // TM


def smem_bytes(BM: int = 64, BN: int = 64, BK: int = 8, **_) -> int:
    return (BM * BK + BK * BN) * 4


def validate(BM: int = 64, BN: int = 64, BK: int = 8, TM: int = 8, **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    where = f"blocktile_1d with BM={BM}, BN={BN}, BK={BK}, TM={TM}"
    if BM % TM:
        raise LabError(f"{where}: BM must be a multiple of TM (each thread owns TM rows of the "
                       f"tile)")
    t = threads(BM, BN, TM)
    if not 32 <= t <= 1024:
        hint = "raise TM or lower BM/BN" if t > 1024 else "lower TM or raise BM/BN"
        raise LabError(f"{where} needs BM*BN/TM = {t} threads per block, but a block holds 32 to "
                       f"1024; {hint}")
    require_even_split(where, t, BM * BK, BK * BN, "values",
                       "raise BK or TM, or lower BM/BN, so that BK*TM is a multiple of BM and BN")
    require_static_smem(where, smem_bytes(BM, BN, BK))


def build(BM: int = 64, BN: int = 64, BK: int = 8, TM: int = 8, group: int = 16,
          fast_math: bool = False, unroll: bool = True, layout: str = "nn",
          offsets64: bool = False, **_):
    validate(BM=BM, BN=BN, BK=BK, TM=TM)
    defines = {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "GROUP": group}
    source = stage_source("blocktile_1d", lesson_case(layout, offsets64))  # lesson or variant
    return spill_free_build(source, "matmul_blocktile_1d", defines,
                            first_min_blocks(threads(BM, BN, TM)), fast_math=fast_math,
                            unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, BM: int = 64, BN: int = 64, TM: int = 8, **_):
    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, TM), 1, 1), 0


OFFER = cuda_offer("blocktile_1d", ("matmul_blocktile_1d",), build, geometry, validate=validate)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)
