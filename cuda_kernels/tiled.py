"""Launcher for cuda_kernels/tiled.cu: shared-memory tiling, TILE x TILE threads per block.

Geometry: block (TILE, TILE); 1-D grid of ceil(M/TILE) * ceil(N/TILE) blocks ordered by
block_tile() in common.cuh (group); static shared 2*TILE*KTILE*4 bytes in the nn build (the
transposed layouts pad their shared rows a little: variants/tiled.cu, Layouts).
Source: build() compiles the lesson, tiled.cu, for row-major A and B with 32-bit offsets, and
variants/tiled.cu (the same kernel for every layout and for operands past 2^31 elements) for every
other problem (cuda_kernels/_build.py: lesson_case, stage_source).
"""

from cuda_kernels._build import (cdiv, compile_kernel, cuda_offer, lesson_case, stage_launcher,
                                 stage_source)
from lab.base.entry import entry


def build(tile: int = 32, ktile: int = 2, group: int = 16, fast_math: bool = False,
          unroll: bool = True, layout: str = "nn", offsets64: bool = False, **_):
    """ktile is the K depth of a stage in units of TILE (1: square tiles)."""
    source = stage_source("tiled", lesson_case(layout, offsets64))  # lesson or variant
    return compile_kernel(source, "matmul_tiled",
                          {"TILE": tile, "KTILE": tile * ktile, "GROUP": group},
                          fast_math=fast_math, unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, tile: int = 32, **_):
    return (cdiv(M, tile) * cdiv(N, tile), 1, 1), (tile, tile, 1), 0


OFFER = cuda_offer("tiled", ("matmul_tiled",), build, geometry)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)
