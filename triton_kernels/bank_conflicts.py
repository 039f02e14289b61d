"""Stage bank_conflicts, Triton twin: the vectorized twin, and what Triton does about shared banks.

CUDA stage: cuda_kernels/bank_conflicts.cu. There the change is the shared-memory layout of the
transposed A tile (As[k][m]): padding per group of 4 rows or an XOR swizzle, so that the 4 scalar
stores that scatter a float4 of A down 4 rows hit 32 distinct banks. That change has NO Triton
source-level counterpart: triton.language has no way to say where a tile lives in shared memory
(tl.dot's operands are staged by the compiler; only the experimental Gluon dialect exposes
shared layouts, and this lab does not use it). So the kernel is vectorized's twin unchanged
(matmul_vectorized_kernel, imported, with its VEC_A / VEC_B / VEC_C hints and EVEN_K), and the
stage's knobs are the real ones Triton has: num_stages, num_warps and the tile.

What Triton does for you instead (read off the compiled TTGIR for sm_90, Triton 3.9 on the CPU,
shared_layouts() below; scripts/experiments/bank_conflicts_counters.sh records the same on the
GPU machine's Triton 3.6):
- it never transposes: each operand tile is stored in shared memory in its global order (A
  k-contiguous for a row-major A, m-contiguous for a transposed one), as
  #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1}>: maxPhase = 1 means NO swizzle and
  there is no padding either, so there is no scatter to fix (every store is an STS.128 along the
  tile's contiguous dimension);
- it picks a dot layout instead (#blocked sizePerThread [4, 4], threadsPerWarp [1, 32],
  warpsPerCTA [8, 1] at 8 warps): the 32 lanes of a warp lie along N, so every lane of a warp
  needs the same A values (an LDS of A is a broadcast: conflict-free in any layout) and lane l
  reads B(k, 4l..4l+3), one contiguous row of a row-major B tile (conflict-free);
- that choice has a blind spot: with a column-major B (layouts nt and tt) the B tile is
  k-contiguous (16 floats per column at BLOCK_K = 16), lane l's float4 along k starts 64 words
  after lane l-1's, and all 32 lanes land on the same 4 banks: 32 wavefronts per LDS.128 instead
  of 4 (docs/stages/bank_conflicts.md; the vectorized twin takes 7.39 ms at 4096^3 nt and 7.90 tt
  against 4.50 nn and 3.16 tn, results/2026-11-22-h100/15-layouts-4096-all.csv);
- swizzled layouts (#ttg.nvmma_shared, 128-byte swizzle) are what Triton uses for tensor-core
  operands (TF32, bf16), not for this IEEE fp32 FMA path;
- num_stages > 1: the tiles are filled with cp.async (LDGSTS) into num_stages - 1 ring buffers
  (same layouts), overlapping the next k-step's loads with this one's FMAs: the prefetch the
  CUDA kernel does not do (default 1, like for like with the CUDA stage).
BLOCK_K = max(BK, 16) (tl.dot needs at least 16). Knobs: BM, BN, BK, num_warps (default 8 = the
CUDA block's 256 threads), num_stages. Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N)
programs, column-blocks fastest (pid % grid_n), as vectorized's twin.
Changed from vectorized's twin: nothing in the kernel; this module adds shared_layouts(). Bottleneck
it attacks (as the CUDA stage): shared-memory bank conflicts, which on Triton's side exist only
where its unswizzled layout meets a column-major B.
"""

from __future__ import annotations

import re

from lab.errors import LabError
from lab.contract import Offer
from lab.operands import entry
from triton_kernels._common import FakeDriver, block_tile_launch, launcher
from triton_kernels.vectorized import matmul_vectorized_kernel, validate, vector_meta

__all__ = ["matmul_vectorized_kernel", "prepare", "validate", "shared_layouts", "encodings"]

_ENCODING = re.compile(r"^(#\w+) = (#ttg\.(?:\w*shared|blocked)<\{[^}]*\}>)", re.M)
_ALLOC = re.compile(r"memdesc<([0-9x]+)xf32, (#\w+)")
_DOT = re.compile(r"#ttg\.dot_op<\{opIdx = (\d), parent = (#\w+)")


def encodings(ttgir: str) -> dict[str, object]:
    """The layouts of a compiled kernel's TTGIR: {"shared": {alias: encoding}, "tiles": [(shape,
    encoding)], "dot_parent": the blocked layout tl.dot's operands are read into}."""
    aliases = dict(_ENCODING.findall(ttgir))
    shared = {a: e for a, e in aliases.items() if "shared<" in e}
    tiles = sorted({(shape, aliases.get(alias, alias)) for shape, alias in _ALLOC.findall(ttgir)})
    parents = sorted({aliases.get(p, p) for _, p in _DOT.findall(ttgir)})
    return {"shared": shared, "tiles": tiles, "dot_parent": parents}


def shared_layouts(layout: str = "nn", M: int = 4096, N: int = 4096, K: int = 4096,
                   BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8,
                   num_stages: int = 1) -> dict[str, object]:
    """Compile this twin for operands in `layout` (nn, nt, tn, tt) exactly as prepare() would and
    return encodings() of its TTGIR. On a GPU it compiles for that GPU; without one for sm_90
    (never launched: 'meta' tensors). Needs a compiling Triton (not TRITON_INTERPRET=1)."""
    import warnings

    import torch
    from triton.runtime import driver

    from lab.operands import TRITON, describe
    from triton_kernels._common import interpreted

    if interpreted(matmul_vectorized_kernel):
        raise LabError("TRITON_INTERPRET=1 is set, so Triton kernels are interpreted and have no "
                       "shared layouts; unset it")
    validate(BM=BM, BN=BN, BK=BK, num_stages=num_stages)
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "meta"

    def operand(rows, cols, trans):
        return torch.empty((cols, rows), device=dev).t() if trans else torch.empty((rows, cols),
                                                                                    device=dev)

    p = describe(operand(M, K, layout[0] == "t"), operand(K, N, layout[1] == "t"),
                 torch.empty((M, N), device=dev), TRITON)
    previous = None
    if not gpu:
        from triton.backends.compiler import GPUTarget

        previous = driver._active
        driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = block_tile_launch(_warmup, matmul_vectorized_kernel, p, BM, BN, BK,
                                         num_warps, num_stages, **vector_meta(p, BK))
    finally:
        if not gpu:
            driver._active = previous
    return encodings(compiled.asm["ttgir"])


def _warmup(kernel, grid, args, **meta):
    """Compile `kernel` as launcher() would launch it, without launching: the compiled kernel."""
    return kernel.warmup(*args, grid=grid, **meta)


OFFER = Offer("bank_conflicts", "triton", kernels=("matmul_vectorized_kernel",),
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8, num_stages: int = 1,
            **_):
    """p: the shared description of the operands (lab/operands.py). The vectorized twin's launch."""
    return block_tile_launch(launcher, matmul_vectorized_kernel, p, BM, BN, BK, num_warps,
                             num_stages, **vector_meta(p, BK))
