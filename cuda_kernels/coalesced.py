"""Launcher for cuda_kernels/coalesced.cu: one thread per element of C, threadIdx.x walks columns.

Geometry: block (32, rows) threads; 1-D grid of ceil(M/rows) * ceil(N/32) blocks, ordered by
block_tile() in common.cuh (group = block-rows walked together, for L2 reuse).
Source: build() compiles the lesson, coalesced.cu, for row-major A and B with 32-bit offsets, and
variants/coalesced.cu (the same kernel for every layout and for operands past 2^31 elements) for
every other problem (cuda_kernels/_build.py: lesson_case, stage_source).
"""

from cuda_kernels._build import (cdiv, compile_kernel, cuda_offer, lesson_case, stage_launcher,
                                 stage_source)
from lab.base.entry import entry


def build(rows: int = 32, group: int = 16, kunroll: int = 16, fast_math: bool = False,
          unroll: bool = True, layout: str = "nn", offsets64: bool = False, **_):
    source = stage_source("coalesced", lesson_case(layout, offsets64))  # lesson or variant
    return compile_kernel(source, "matmul_coalesced",
                          {"ROWS": rows, "GROUP": group, "KUNROLL": kunroll},
                          fast_math=fast_math, unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, rows: int = 32, **_):
    return (cdiv(M, rows) * cdiv(N, 32), 1, 1), (32, rows, 1), 0


OFFER = cuda_offer("coalesced", ("matmul_coalesced",), build, geometry)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)
