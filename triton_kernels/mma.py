"""Stage mma, Triton twin: a pipelined tensor-core GEMM in tf32, 3xtf32, bf16 and fp16 whose tl.dot
is compiled to mma.sync, the instruction of the CUDA stage, on every GPU the lab runs on.

CUDA stage: cuda_kernels/mma.cu (mma.sync through inline PTX, ldmatrix, swizzled shared memory,
a cp.async ring). Each program computes a BLOCK_M x BLOCK_N tile of C (128 x 128 by default, 8
warps) with masked, zero-filled tile loads, an fp32 accumulator and
    tl.dot(a, b, acc, input_precision=...)   "tf32" for tf32, "tf32x3" for 3xtf32 (fp32
                                             operands); bf16 / fp16 operands go to the tensor
                                             cores as they are (triton_kernels/_common.py,
                                             DOT_PRECISION)
and C stored in its own dtype (the fp32 accumulator rounded to bf16 / fp16 on store, like
cuBLAS and the CUDA stage).

mma.sync on Hopper. Left alone, Triton 3.x lowers tl.dot on an sm_90 GPU to wgmma (its "MMA v3";
on sm_100, tcgen05, "MMA v5") wherever the tile allows it: at least 4 warps and BLOCK_M a multiple
of 64, as here. Its compiler reads two environment variables while it compiles, DISABLE_MMA_V3 and
DISABLE_MMA_V5 (lib/Dialect/TritonGPU/Transforms/AccelerateMatmul.cpp, supportMMA); set, they
make it choose "MMA v2", mma.sync m16n8k16 / m16n8k8 fed by ldmatrix, the instruction of
cuda_kernels/mma.cu. Both are in Triton's list of cache-invalidating variables, so a kernel
compiled with them is cached apart from one compiled without. This module's kernel is a
JITFunction (MmaSyncJITFunction) that sets both while it compiles, and only then, whatever path
compiles it (this launcher's warm-up, lab.profile's listings, a call of its own), and restores
them after: other kernels in the same process, the wgmma stage's twin among them, still get wgmma.
The kernel is its own @triton.jit function (not the wgmma twin's), because Triton keeps compiled
kernels per function in memory under a key that leaves the environment out. The PTX shows it:
mma.sync.aligned.m16n8k16 / m16n8k8 and no wgmma (tests/test_mma.py compiles it for sm_90 without
a GPU). Stage wgmma's twin (triton_kernels/wgmma.py) is the same tl.dot left to pick wgmma.

What Triton does for you that the CUDA stage does by hand:
- fragments, ldmatrix and swizzling: Triton picks a swizzled shared layout for each operand and
  the matching ldmatrix (.trans where an operand's lines run along M or N); the CUDA stage's
  Tile/FragBase code, its XOR patterns and its 3 ldmatrix variants are all generated.
- 3xTF32: input_precision="tf32x3" splits each fp32 operand into a TF32 head and tail and issues
  the three products, the CUDA stage's mma_step for PREC_3XTF32.
- the cp.async ring (num_stages), the barriers, the grouped block order (GROUP_M) and the edge
  masks (see triton_kernels/double_buffered.py).
Under the Triton interpreter (TRITON_INTERPRET=1, CPU mode) only the numbers are checked: the
interpreter multiplies in NumPy (TF32 and 3xTF32 are computed in fp32 there; bf16 tiles are
upcast to fp32 first, _common.dot_meta, because the interpreter multiplies bf16 as integers).

Knobs: BLOCK_M (128), BLOCK_N (128), BLOCK_K (0: 128 bytes of k, i.e. 64 bf16/fp16 or 32 TF32
elements), GROUP_M (8), num_warps (8), num_stages (3): the tile, k-step and depth the mma stage's
Triton twin had before its per-precision tuning (the plain `mma` rows of
results/2026-11-22-h100/32-mma-done.csv, which Triton compiled to wgmma: no row of results/ was
measured with this mma.sync build yet). validate() refuses, in one sentence, tiles that are not
powers of two of at least 16, more than 128 accumulators per thread and a ring over 227 KiB.
Changed from double_buffered's twin: the precision (operands in their own dtype, tl.dot's
input_precision, C in its dtype), 16-bit alignment hints (8 elements per 16 bytes) and mma.sync
forced. Bottleneck it attacks (as the CUDA stage): the FP32 SIMT ceiling, by moving the
multiply-adds to the tensor cores.
Layouts: all six strides (problem_args); nothing is copied (mma.sync's fragments are loaded by
the threads, so any operand layout will do).
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs in grouped order (GROUP_M).
"""

import contextlib
import os

import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from lab.base.contract import Offer
from lab.base.errors import LabError
from lab.base.precisions import elem_bytes
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import (SMEM_LIMIT, cdiv, dot_meta, launcher, offsets_meta,
                                    problem_args)

ELEM_BYTES = elem_bytes("tf32", "3xtf32", "bf16", "fp16")  # sizes from lab/base/precisions.py
PARAM_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
DEFAULTS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 0, "GROUP_M": 8, "num_warps": 8,
            "num_stages": 3}
# The variables that make Triton's compiler choose mma.sync ("MMA v2") over wgmma (v3, sm_90) and
# tcgen05 (v5, sm_100).
MMA_SYNC_ENV = ("DISABLE_MMA_V3", "DISABLE_MMA_V5")


@contextlib.contextmanager
def mma_sync_compiles():
    """Within this block Triton compiles tl.dot to mma.sync (MMA_SYNC_ENV set to 1); after it the
    variables are as they were."""
    saved = {k: os.environ.get(k) for k in MMA_SYNC_ENV}
    os.environ.update(dict.fromkeys(MMA_SYNC_ENV, "1"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class MmaSyncJITFunction(JITFunction):
    """A @triton.jit kernel whose every compile (a launch's or a warm-up's: both run through
    run()) happens inside mma_sync_compiles(). Once compiled, a launch finds the kernel in the
    function's own cache; setting the variables around it costs about a microsecond of host time."""

    def run(self, *args, **kwargs):
        with mma_sync_compiles():
            return super().run(*args, **kwargs)


def mma_sync_jit(fn):
    """triton.jit for a kernel whose tl.dot must be mma.sync; under the interpreter (nothing is
    compiled) the plain interpreted function."""
    kernel = triton.jit(fn)
    return MmaSyncJITFunction(fn) if type(kernel) is JITFunction else kernel


@mma_sync_jit
def matmul_mma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, VEC: tl.constexpr,
                      VEC_A: tl.constexpr, VEC_B: tl.constexpr, VEC_C: tl.constexpr,
                      EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      UPCAST: tl.constexpr, OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # GROUP_M order: GROUP_M block-rows walked column by column, so that the programs resident at
    # one time share their rows of A and columns of B in L2 (common.cuh's block_tile; Triton's
    # tutorial order; GROUP_M = 1 is the plain order, pid_n = pid % grid_n)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows

    # rm, rn, rk: runs of BLOCK consecutive values starting at a multiple of BLOCK (said
    # explicitly); rows and columns past C's edges are masked, in the loop too
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rk = tl.max_contiguous(rk, BLOCK_K)
    # Each operand's offsets along its two dimensions; a flag "n" ("t") says every row (column)
    # of its operand starts on a 16-byte boundary: that line's offsets are multiples of VEC, the
    # elements in 16 bytes (4 floats for TF32 and 3xTF32, 8 halves for bf16 and fp16).
    a_m, a_k = rm * stride_am, rk * stride_ak
    b_k, b_n = rk * stride_bk, rn * stride_bn
    c_m, c_n = rm * stride_cm, rn * stride_cn
    a_m = tl.multiple_of(a_m, VEC) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, VEC) if VEC_A == "t" else a_k
    b_k = tl.multiple_of(b_k, VEC) if VEC_B == "n" else b_k
    b_n = tl.multiple_of(b_n, VEC) if VEC_B == "t" else b_n
    c_m = tl.multiple_of(c_m, VEC) if VEC_C == "n" else c_m
    c_n = tl.multiple_of(c_n, VEC) if VEC_C == "t" else c_n
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    # Edge masks, constant per VEC elements where a flag promises M % VEC == 0 (N % VEC == 0)
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    in_m = tl.max_constancy(in_m, [VEC, 1]) if VEC_A == "t" or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, VEC]) if VEC_B == "n" or VEC_C == "n" else in_n

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Written as a plain loop: with num_stages > 1 the compiler pipelines it (double_buffered).
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:  # K % VEC == 0 where A is row-major or B column-major: constant per VEC along k
            in_k_a = k0 + rk[None, :] < K
            in_k_b = k0 + rk[:, None] < K
            in_k_a = tl.max_constancy(in_k_a, [1, VEC]) if VEC_A == "n" else in_k_a
            in_k_b = tl.max_constancy(in_k_b, [VEC, 1]) if VEC_B == "t" else in_k_b
            a = tl.load(a_ptrs, mask=in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & in_n, other=0.0)
        if UPCAST:  # the interpreter's bf16 dot is wrong (triton_kernels/_common.py)
            a, b = a.to(tl.float32), b.to(tl.float32)
        # the operands in their own dtype; fp32 ones as TF32 or 3xTF32 (INPUT_PRECISION)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # C in its own dtype: the fp32 accumulator rounded on store
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=in_m & in_n)


def block_k(BLOCK_K: int, precision: str) -> int:
    """BLOCK_K, with 0 meaning 128 bytes of k (64 bf16/fp16 or 32 TF32 elements)."""
    return BLOCK_K or 128 // ELEM_BYTES[precision]


def _pow2(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def validate(params, precision: str | None = None) -> None:
    """Raise LabError (one sentence) for parameters this launcher does not take or a tile that
    cannot compile: in `precision`, or in every precision when none is given."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        hint = ("; kmajor_b and regs_mn are wgmma's operand choices (stage wgmma)"
                if set(unknown) & {"kmajor_b", "regs_mn"} else "")
        raise LabError(f"stage mma (triton) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)}){hint}")
    c = {**DEFAULTS, **params}
    where = "mma (Triton) with " + ", ".join(f"{k}={c[k]}" for k in PARAM_ORDER)
    if precision is not None and precision not in ELEM_BYTES:
        raise LabError(f"{where}: the precision must be one of {', '.join(ELEM_BYTES)}, not "
                       f"{precision}")
    tiles = (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"] or 16)
    if not all(_pow2(t) and t >= 16 for t in tiles):
        raise LabError(f"{where}: BLOCK_M, BLOCK_N and BLOCK_K must be powers of two of at least "
                       f"16 (tl.dot's smallest tile; BLOCK_K may be 0: 128 bytes)")
    if not _pow2(c["num_warps"]) or not isinstance(c["GROUP_M"], int) or c["GROUP_M"] < 1:
        raise LabError(f"{where}: num_warps must be a power of two and GROUP_M at least 1")
    if not isinstance(c["num_stages"], int) or isinstance(c["num_stages"], bool) \
            or c["num_stages"] < 1:
        raise LabError(f"{where}: num_stages must be a pipeline depth of 1 or more")
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if per_thread > 128:
        raise LabError(f"{where}: it gives each thread {per_thread} accumulators, more than the "
                       f"128 that fit in its registers next to the fragments; raise num_warps or "
                       f"lower BLOCK_M/BLOCK_N")
    for prec in (precision,) if precision else tuple(ELEM_BYTES):
        smem = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * block_k(c["BLOCK_K"], prec) \
            * ELEM_BYTES[prec]
        if smem > SMEM_LIMIT:
            raise LabError(f"{where} in {prec}: it needs about {smem // 1024} KiB of shared memory, "
                           f"more than an H100's 227 KiB; lower num_stages, BLOCK_K or BLOCK_N")


def resolve(params, M: int, N: int, K: int, precision: str, sms: int) -> dict:
    """The parameters as they are compiled (the contract's `resolve`): BLOCK_K=0 made concrete."""
    c = {**DEFAULTS, **params}
    return {**c, "BLOCK_K": block_k(c["BLOCK_K"], precision)}


def config_text(config: dict) -> str:
    """The configuration as the `params` column writes it: name=value,... in registry order."""
    return ",".join(f"{k}={config[k]}" for k in PARAM_ORDER if k in config)


def _vec(op, vec: int) -> str:
    """An operand's hint: its contiguous direction ("n" rows, "t" columns) if `vec` elements
    along it are 16 aligned bytes under one mask value, else ""."""
    if not op.blas or not op.aligned(16):
        return ""
    along = op.cols if op.row_major else op.rows
    return op.letter if along % vec == 0 else ""


def vec_width_and_hints(p) -> dict:
    """VEC (elements per 16 bytes) and each operand's alignment hint for Problem `p`."""
    vec = 16 // p.a.tensor.element_size()
    return {"VEC": vec, "VEC_A": _vec(p.a, vec), "VEC_B": _vec(p.b, vec), "VEC_C": _vec(p.c, vec)}


OFFER = Offer("mma", "triton", precisions=tuple(ELEM_BYTES), kernels=("matmul_mma_kernel",),
              validate=validate, resolve=resolve, show=config_text,
              requires={"all": (8, 0)})  # tensor cores (mma.sync): _common.TL_DOT_REQUIRES


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The
    launch's `config` is the configuration that runs (resolve())."""
    c = resolve(params, p.M, p.N, p.K, p.precision, 0)
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    grid = (cdiv(p.M, bm) * cdiv(p.N, bn),)
    launch = launcher(matmul_mma_kernel, grid, (*problem_args(p),), BLOCK_M=bm, BLOCK_N=bn,
                      BLOCK_K=bk, GROUP_M=c["GROUP_M"], EVEN_K=p.K % bk == 0, **vec_width_and_hints(p),
                      **dot_meta(matmul_mma_kernel, p), **offsets_meta(p),
                      num_warps=c["num_warps"], num_stages=c["num_stages"])
    # the row's `params` column is the configuration that ran (Row.set_resources copies it)
    launch.resources = {**(launch.resources or {}), "params": config_text(c)}
    launch.extra["config"] = c
    return launch
