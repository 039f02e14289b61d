"""Launcher for cuda_kernels/tiled_padded.cu: tiled with zero padding instead of bounds checks.

Geometry: block (TILE, TILE); 1-D grid of (Mp/TILE) * (Np/TILE) blocks ordered by block_tile()
(group), where Mp, Np are M, N rounded up to multiples of TILE and Kp is K rounded up to a multiple
of KTILE = TILE * ktile; static shared 2*TILE*KTILE*4 bytes in the nn build. Parameters tile, ktile
and group are tiled's (same defaults), so the only difference from tiled is the edge handling. The
kernel takes the standard arguments (A, B, C, M, N, K, lda, ldb, ldc) but with the PADDED operands
and sizes (Mp, Np, Kp).
Source: build() compiles the lesson, tiled_padded.cu, for row-major A and B with 32-bit offsets,
and variants/tiled_padded.cu (the same kernel for every layout and for operands past 2^31
elements) for every other padded problem (cuda_kernels/_build.py: lesson_case, stage_source).

prepare() pads once, outside the timed callable (`Padded`):
- A is copied into a zero, row-major Mp x Kp tensor only if M or K is not a multiple already (else
  it is used as it is, in its own layout and leading dimension);
- B likewise (Kp x Np);
- C: if M and N are multiples the kernel writes the caller's C directly and the timed callable is
  the bare launch; otherwise the kernel writes a padded Mp x Np buffer and the timed callable is
  launch + c.copy_(cpad[:M, :N]), so the crop is paid for in the row's time.
The kernel is built for the layout of the padded problem (a padded operand is row-major, 'n').
The one-time padding cost is attached as `launch.setup_ms` (float, milliseconds): CUDA events
around the allocation and copies on a GPU, time.perf_counter on the CPU; 0.0 when nothing needed
padding. Because A and B are snapshotted by prepare(), the callable multiplies the values A and B
had at prepare() time wherever they were padded (the harness never changes them in between).
"""

from __future__ import annotations

from cuda_kernels._build import (cdiv, compile_kernel, cuda_offer, launcher, lesson_case,
                                 matmul_args, resources, stage_source)

from lab.base.entry import entry
from lab.base.padding import Padded


def build(tile: int = 32, ktile: int = 2, group: int = 16, fast_math: bool = False,
          unroll: bool = True, layout: str = "nn", offsets64: bool = False, **_):
    """ktile is the K depth of a stage in units of TILE (1: square tiles), as in tiled."""
    source = stage_source("tiled_padded", lesson_case(layout, offsets64))  # lesson or variant
    return compile_kernel(source, "matmul_tiled_padded",
                          {"TILE": tile, "KTILE": tile * ktile, "GROUP": group},
                          fast_math=fast_math, unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, tile: int = 32, **_):
    """For the padded sizes this is exactly (Mp/TILE * Np/TILE) blocks."""
    return (cdiv(M, tile) * cdiv(N, tile), 1, 1), (tile, tile, 1), 0


OFFER = cuda_offer("tiled_padded", ("matmul_tiled_padded",), build, geometry)


@entry(OFFER)
def prepare(p, tile: int = 32, ktile: int = 2, **params):
    """p: the shared description of the operands (lab/base/problem.py); the kernel runs on the
    padded problem."""
    padded = Padded(p, tile, tile * ktile)
    q = padded.problem
    # q: the padded problem, marked for 64-bit offsets if the padded operands need them
    bld = build(tile=tile, ktile=ktile, **params, layout=q.layout, offsets64=q.offsets64)
    grid, block, smem = geometry(q.M, q.N, q.K, tile=tile)
    kernel = launcher(bld, grid, block, matmul_args(q), smem)
    return padded.with_crop(kernel.step, resources=resources(bld, grid, block, smem), build=bld,
                            padded_shape=(padded.Mp, padded.Np, padded.Kp))
