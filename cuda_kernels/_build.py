"""What the CUDA launchers share beyond the toolchain: the BLAS argument list, the common
prepare() (stage_launcher), the Offer of a stage with build() and geometry() (cuda_offer), the
register-cap search (spill_free_build) and the tile rules every register-tiling stage checks.

Compiling and launching live in lab/toolchain/nvrtc.py (re-exported here for the launchers)."""

from __future__ import annotations

from lab.base.contract import Offer, Prepared
from lab.base.errors import LabError
from lab.toolchain.nvrtc import (  # noqa: F401 (re-exported for the launchers and tests)
    KERNEL_DIR, Build, compile_kernel, launcher, layout_defines, resources)

STATIC_SMEM_LIMIT = 48 * 1024  # static __shared__ arrays may not exceed 48 KiB


def require_even_split(where: str, threads: int, a_items: int, b_items: int, unit: str,
                       hint: str) -> None:
    """LabError unless the A and B tiles (a_items, b_items of `unit`: values or float4 chunks)
    each split into the same whole number of items per thread: the tile loaders' rule."""
    for tile, items in (("A", a_items), ("B", b_items)):
        if items % threads or items < threads:
            raise LabError(f"{where}: the {tile} tile ({items} {unit}) does not split evenly over "
                           f"{threads} threads; {hint}")


def require_static_smem(where: str, smem: int) -> None:
    """LabError when static __shared__ arrays of `smem` bytes exceed the 48 KiB a block may hold."""
    if smem > STATIC_SMEM_LIMIT:
        raise LabError(f"{where} needs {smem} bytes of static shared memory, more than the 48 KiB "
                       f"limit; lower BK, BM or BN")
MAX_THREADS_PER_SM = 2048  # H100 (sm_90); also 65536 registers per SM = 32 per thread at full load


def first_min_blocks(threads_per_block: int) -> int:
    """The most blocks of this size an H100 SM can hold by thread count (2048 threads per SM)."""
    return max(1, MAX_THREADS_PER_SM // threads_per_block)


def spill_free_build(source: str, kernel: str, defines: dict, first: int, **switches):
    """Compile with __launch_bounds__(threads, MIN_BLOCKS), MIN_BLOCKS = first, first/2, ..., 1:
    the first build without spills wins (or the MIN_BLOCKS=1 build, whatever it reports).

    MIN_BLOCKS tells ptxas how many blocks must fit in one SM's 65536 registers, i.e. caps the
    registers per thread at 65536 / (threads * MIN_BLOCKS). Left alone, ptxas spends registers on
    scheduling freedom (96 registers for blocktile_1d's defaults: one 512-thread block per SM);
    capped at 32 it emits the same instruction mix (64 FFMA, 16 LDS.128, 8 LDS per k-step) and
    four blocks fit per SM, 64 warps, which is what hides the global-load latency of a kernel that
    does not prefetch. Halving MIN_BLOCKS doubles the cap, so at most a few compiles are needed,
    and every variant ends up spill-free. Each build is cached per process.
    """
    blocks = first
    while True:
        build = compile_kernel(source, kernel, {**defines, "MIN_BLOCKS": blocks}, **switches)
        if build.spill_bytes == 0 or blocks == 1:
            return build
        blocks = max(1, blocks // 2)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def matmul_args(p):
    """The argument list every stage's kernel takes: (A, B, C, M, N, K, lda, ldb, ldc), from the
    shared description of the operands (lab/base/problem.py: A and B row- or column-major, C
    row-major)."""
    import numpy as np

    return (p.a.tensor, p.b.tensor, p.c.tensor, np.int32(p.M), np.int32(p.N), np.int32(p.K),
            np.int32(p.a.ld), np.int32(p.b.ld), np.int32(p.c.ld))


def stage_launcher(build: Build, geometry, p):
    """prepare() for the common case: the BLAS arguments of Problem `p` (matmul_args).

    `geometry` is the stage's (grid, block, dynamic shared bytes) for these sizes; `build` must be
    compiled for p.layout (layout_defines).
    """
    grid, block, smem = geometry
    kernel = launcher(build, grid, block, matmul_args(p), smem)
    return Prepared.of_steps([kernel.step], resources=resources(build, grid, block, smem),
                             build=build)


def cuda_offer(stage: str, kernels, build, geometry, validate=None, **fields) -> Offer:
    """The Offer (lab/base/contract.py) of a CUDA stage whose module has build(**params, layout=...)
    and geometry(M, N, K, **params, layout=...), and optionally validate(**params): its
    `compile` is that build and geometry, its `validate` that function (fp32 stages: one build
    per parameter set, whatever the precision)."""
    def compile_for(params, M: int, N: int, K: int, layout: str = "nn", precision: str = "fp32"):
        return build(**params, layout=layout), geometry(M, N, K, **params, layout=layout)

    if validate is not None:
        fields["validate"] = lambda params, precision: validate(**params)
    return Offer(stage, "cuda", kernels=kernels, compile=compile_for, **fields)


# ------------------------------------------------------------------------------ Hopper stages
LINE_ALIGN = 16  # bytes: cp.async's 16-byte chunks and TMA's address and stride rule


def lines_aligned(op) -> bool:
    """Every line of operand `op` starts on a 16-byte boundary (a single line: its start)."""
    lines = op.cols if op.trans else op.rows
    return op.aligned(LINE_ALIGN) or (lines <= 1 and op.tensor.data_ptr() % LINE_ALIGN == 0)


def aligned_buffer(rows: int, cols: int, col_major: bool, like):
    """An empty rows x cols matrix with `like`'s dtype and device, column-major or row-major, whose
    lines start on 16-byte boundaries (the leading dimension rounded up to 16 bytes; the
    allocation's base is aligned far beyond that)."""
    import torch

    line = rows if col_major else cols
    per = LINE_ALIGN // like.element_size()
    ld = max(1, cdiv(line, per) * per)
    if col_major:
        return torch.empty((cols, ld), dtype=like.dtype, device=like.device)[:, :rows].t()
    return torch.empty((rows, ld), dtype=like.dtype, device=like.device)[:, :cols]


def device_arch_of(p) -> str | None:
    """sm_XY of the GPU Problem `p`'s C lies on, or None for CPU tensors (tests only: the public
    prepare() takes CUDA tensors)."""
    import torch

    t = p.c.tensor
    if not getattr(t, "is_cuda", False):
        return None
    major, minor = torch.cuda.get_device_capability(t.device)
    return f"sm_{major}{minor}"




# ------------------------------------------------------------------------------ lesson and variant
# A stage's cuda_kernels/<stage>.cu is its lesson: the stage's idea written out for one case, row-
# major A and B (layout nn), lines that start on 16-byte boundaries and offsets that fit 32 bits
# (docs/ARCHITECTURE.md, "Lessons and variants"). Every other problem runs the same kernel written
# for every layout, alignment and size, cuda_kernels/variants/<stage>.cu, which a reader can skip.
def lesson_case(layout: str = "nn", offsets64: bool = False, *aligned: bool) -> bool:
    """True where the lesson kernel computes the problem: layout nn, 32-bit offsets, and every
    operand named by `aligned` (the float4 stages' vec_a / vec_b / vec_c) 16-byte aligned."""
    return layout == "nn" and not offsets64 and all(aligned)


def stage_source(stage: str, lesson: bool) -> str:
    """The file (relative to cuda_kernels/) a stage's build compiles: its lesson or its variant."""
    return f"{stage}.cu" if lesson else f"variants/{stage}.cu"
