"""Launcher for cuda_kernels/naive.cu: one thread per element of C, threadIdx.x walks rows of C
(uncoalesced).

Geometry: BLOCK x BLOCK threads per block, a 1-D grid of cdiv(M, BLOCK) * cdiv(N, BLOCK) blocks
(block-rows fastest).
Source: build() compiles the lesson, naive.cu, for row-major A and B with 32-bit offsets, and
variants/naive.cu (the same kernel for every layout and for operands past 2^31 elements) for
every other problem (cuda_kernels/_build.py: lesson_case, stage_source).
"""

from cuda_kernels._build import (cdiv, compile_kernel, cuda_offer, lesson_case, stage_launcher,
                                 stage_source)
from lab.base.entry import entry

STAGE, KERNEL = "naive", "matmul_naive"
BLOCK = 32


def build(fast_math: bool = False, unroll: bool = True, layout: str = "nn",
          offsets64: bool = False, **_):
    """offsets64: the 64-bit build (common.cuh's OFFSET64) for a Problem.offsets64 problem."""
    source = stage_source(STAGE, lesson_case(layout, offsets64))  # lesson or variant
    return compile_kernel(source, KERNEL, {"BLOCK": BLOCK}, fast_math=fast_math, unroll=unroll,
                          layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, **_):
    return (cdiv(M, BLOCK) * cdiv(N, BLOCK), 1, 1), (BLOCK, BLOCK, 1), 0


OFFER = cuda_offer("naive", ("matmul_naive",), build, geometry)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K), p)
