"""Stage bank_conflicts, Triton twin: the vectorized twin, and what Triton does about shared banks.

CUDA stage: cuda_kernels/bank_conflicts.cu. There the change is the shared-memory layout of the
transposed A tile (As[k][m]): padding per group of 4 rows or an XOR swizzle, so that the 4 scalar
stores that scatter a float4 of A down 4 rows hit 32 distinct banks. That change has NO Triton
source-level counterpart: triton.language has no way to say where a tile lives in shared memory
(tl.dot's operands are staged by the compiler; only the experimental Gluon dialect exposes
shared layouts, and this lab does not use it). So the kernel is vectorized's twin unchanged,
written out again as matmul_bank_conflicts_kernel (its VEC_A / VEC_B / VEC_C hints and EVEN_K; fp32
only, input_precision="ieee"), and the stage's knobs are the real ones Triton has: num_stages,
num_warps and the tile.

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
Changed from vectorized's twin: nothing in the kernel but its name and its one precision (fp32);
this module adds shared_layouts(). Bottleneck
it attacks (as the CUDA stage): shared-memory bank conflicts, which on Triton's side exist only
where its unswizzled layout meets a column-major B.
"""

import re

import triton
import triton.language as tl

from lab.base.errors import LabError
from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import FakeDriver, block_tile_launch, launcher
from triton_kernels.vectorized import validate, vector_meta

__all__ = ["matmul_bank_conflicts_kernel", "prepare", "validate", "shared_layouts", "encodings"]


# vectorized's program, written out again: the CUDA stage's change (where the A tile lives in
# shared memory) has no counterpart in triton.language, so nothing in the kernel changes.
@triton.jit
def matmul_bank_conflicts_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                 stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC_A: tl.constexpr,
                                 VEC_B: tl.constexpr, VEC_C: tl.constexpr, EVEN_K: tl.constexpr,
                                 OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # column-blocks fastest
    rm = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    # rm, rn, rk: runs of BLOCK consecutive values starting at a multiple of BLOCK (Triton infers
    # this from pid * BLOCK + arange; said explicitly)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rk = tl.max_contiguous(rk, BLOCK_K)
    # Each operand's offsets along its two dimensions. The one whose stride is 1 is the contiguous
    # run (rk, rn or rm itself once the constant 1 is folded); the other starts each line.
    a_m, a_k = rm * stride_am, rk * stride_ak
    b_k, b_n = rk * stride_bk, rn * stride_bn
    c_m, c_n = rm * stride_cm, rn * stride_cn
    # A flag "n" says every row of its operand starts on a 16-byte boundary (4 floats), "t" every
    # column does (a transposed view): that line's offsets are multiples of 4.
    a_m = tl.multiple_of(a_m, 4) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, 4) if VEC_A == "t" else a_k
    b_k = tl.multiple_of(b_k, 4) if VEC_B == "n" else b_k
    b_n = tl.multiple_of(b_n, 4) if VEC_B == "t" else b_n
    c_m = tl.multiple_of(c_m, 4) if VEC_C == "n" else c_m
    c_n = tl.multiple_of(c_n, 4) if VEC_C == "t" else c_n
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    # Edge masks. A flag also promises that the size along its operand's contiguous dimension is
    # a multiple of 4, and the runs of rm, rn, rk start at multiples of 4: that dimension's mask
    # is then constant per float4 (M % 4 == 0 for a column-major A or C, N % 4 for a row-major B
    # or C; K % 4 for a row-major A or a column-major B, below).
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    in_m = tl.max_constancy(in_m, [4, 1]) if VEC_A == "t" or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, 4]) if VEC_B == "n" or VEC_C == "n" else in_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:
            in_k_a = k0 + rk[None, :] < K
            in_k_b = k0 + rk[:, None] < K
            in_k_a = tl.max_constancy(in_k_a, [1, 4]) if VEC_A == "n" else in_k_a
            in_k_b = tl.max_constancy(in_k_b, [4, 1]) if VEC_B == "t" else in_k_b
            a = tl.load(a_ptrs, mask=in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & in_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc, mask=in_m & in_n)



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

    from lab.base.describe import describe
    from lab.base.needs import TRITON
    from triton_kernels._common import interpreted

    if interpreted(matmul_bank_conflicts_kernel):
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
            compiled = block_tile_launch(_warmup, matmul_bank_conflicts_kernel, p, BM, BN, BK,
                                         num_warps, num_stages, **vector_meta(p, BK))
    finally:
        if not gpu:
            driver._active = previous
    return encodings(compiled.asm["ttgir"])


def _warmup(kernel, grid, args, **meta):
    """Compile `kernel` as launcher() would launch it, without launching: the compiled kernel."""
    return kernel.warmup(*args, grid=grid, **meta)


OFFER = Offer("bank_conflicts", "triton", kernels=("matmul_bank_conflicts_kernel",),
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8, num_stages: int = 1,
            **_):
    """p: the shared description of the operands (lab/base/problem.py). The vectorized twin's launch."""
    return block_tile_launch(launcher, matmul_bank_conflicts_kernel, p, BM, BN, BK, num_warps,
                             num_stages, **vector_meta(p, BK))
