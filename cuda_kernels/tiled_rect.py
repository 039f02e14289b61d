"""Launcher for cuda_kernels/tiled_rect.cu: rectangular TILE_ROWS x TILE_COLS tiles.

Geometry: block (cols, rows) threads (x walks columns); 1-D grid of ceil(M/rows) * ceil(N/cols)
blocks ordered by block_tile() in common.cuh (group, tiled's default 16); static shared
(rows*cols + cols*cols) * 4 bytes in the nn build (the transposed layouts pad the shared rows a
little: variants/tiled_rect.cu, Layouts). Parameters: rows in 4, 8, 16, 32 and cols in 16, 32,
64 (defaults 8 x 32), with cols a multiple of rows (each thread loads cols/rows rows of the B tile)
and 32 <= rows*cols <= 1024 threads; `validate` says so in one sentence before anything compiles.
Source: build() compiles the lesson, tiled_rect.cu, for row-major A and B with 32-bit offsets, and
variants/tiled_rect.cu (the same kernel for every layout and for operands past 2^31 elements) for
every other problem (cuda_kernels/_build.py: lesson_case, stage_source).
"""

from __future__ import annotations

from cuda_kernels._build import (cdiv, compile_kernel, cuda_offer, lesson_case, stage_launcher,
                                 stage_source)
from lab.base.errors import LabError
from lab.base.entry import entry

ROWS = (4, 8, 16, 32)
COLS = (16, 32, 64)


def validate(rows: int = 8, cols: int = 32, **_) -> None:
    """Raise LabError (one sentence) unless rows x cols is a tile this kernel can run."""
    if rows not in ROWS:
        raise LabError(f"tiled_rect takes rows in {', '.join(map(str, ROWS))}, not {rows}")
    if cols not in COLS:
        raise LabError(f"tiled_rect takes cols in {', '.join(map(str, COLS))}, not {cols}")
    if cols % rows:
        raise LabError(
            f"tiled_rect needs cols to be a multiple of rows (each thread loads cols/rows rows of "
            f"the B tile), but rows={rows}, cols={cols}; choose rows <= cols"
        )
    if not 32 <= rows * cols <= 1024:
        raise LabError(
            f"tiled_rect with rows={rows}, cols={cols} would launch {rows * cols} threads per "
            f"block, but a block must hold 32 to 1024 threads; choose a smaller rows or cols"
        )


def build(rows: int = 8, cols: int = 32, group: int = 16, fast_math: bool = False,
          unroll: bool = True, layout: str = "nn", offsets64: bool = False, **_):
    validate(rows, cols)
    source = stage_source("tiled_rect", lesson_case(layout, offsets64))  # lesson or variant
    return compile_kernel(source, "matmul_tiled_rect",
                          {"TILE_ROWS": rows, "TILE_COLS": cols, "GROUP": group},
                          fast_math=fast_math, unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, rows: int = 8, cols: int = 32, **_):
    validate(rows, cols)
    return (cdiv(M, rows) * cdiv(N, cols), 1, 1), (cols, rows, 1), 0


OFFER = cuda_offer("tiled_rect", ("matmul_tiled_rect",), build, geometry, validate=validate)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return stage_launcher(build(**params, layout=p.layout, offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)
