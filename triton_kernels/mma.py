"""Stage mma, Triton twin: a pipelined tensor-core GEMM in tf32, 3xtf32, bf16 and fp16.

CUDA stage: cuda_kernels/mma.cu (mma.sync through inline PTX, ldmatrix, swizzled shared memory,
a cp.async ring). Each program computes a BLOCK_M x BLOCK_N tile of C (128 x 128 by default,
8 warps) with masked, zero-filled tile loads, an fp32 accumulator and
    tl.dot(a, b, acc, input_precision=...)   "tf32" for tf32, "tf32x3" for 3xtf32 (fp32
                                             operands); bf16 / fp16 operands go to the tensor
                                             cores as they are (triton_kernels/_common.py,
                                             DOT_PRECISION)
and C stored in its own dtype (the fp32 accumulator rounded to bf16 / fp16 on store, like
cuBLAS and the CUDA stage).

What Triton does for you that the CUDA stage does by hand:
- the instruction. On the H100 (sm_90) Triton lowers tl.dot to wgmma, Hopper's asynchronous
  warpgroup MMA (4 warps issue one m64nNk16 operation that reads its operands straight from
  shared memory), not to mma.sync: the CUDA stage cannot reach that rate with mma.sync
  (docs/stages/mma.md). On sm_80 it emits mma.sync m16n8k16 / m16n8k8, as the CUDA stage does.
- fragments, ldmatrix and swizzling: Triton picks a swizzled shared layout for each operand and
  the matching ldmatrix (or, for wgmma, the shared-memory descriptors); the CUDA stage's
  Tile/FragBase code, its XOR patterns and its 3 ldmatrix variants are all generated.
- 3xTF32: input_precision="tf32x3" splits each fp32 operand into a TF32 head and tail and issues
  the three products, the CUDA stage's mma_step for PREC_3XTF32.
- the cp.async ring (num_stages), the barriers, the grouped block order (GROUP_M) and the edge
  masks (see triton_kernels/double_buffered.py).
TF32 and the layout of B (measured on the H100 at 4096^3, results/2026-11-22-h100/32-mma-done.csv
and 32-tf32-layouts.csv): tl.dot with input_precision="tf32" ran at 20% of cuBLAS TF32 with a
row-major B (N-contiguous), 71% with kmajor_b=1 (the copy timed) and 78% with B handed over
K-major (layout nt); "tf32x3" at 68% and 162% of cuBLAS fp32's speed without and with kmajor_b. wgmma reads
32-bit operands from shared memory only K-major (its transpose bits exist for 16-bit types
only), so an N-major B must be transposed on the way (Triton then falls back to a slower path).
kmajor_b=1 copies an N-major B into a K-major buffer (B^T contiguous, allocated in prepare()) at
the start of every call, inside the timed call, with a tiled transpose kernel (transpose_kernel:
both sides coalesced), and the GEMM kernel reads the buffer: the row's time
is the copy plus the kernel, as cuBLAS's is one call on the same operands. (A caller who holds B
K-major already, layout nt, pays no copy: kmajor_b leaves such a B alone.)
Under the Triton interpreter (TRITON_INTERPRET=1, CPU mode) only the numbers are checked: the
interpreter multiplies in NumPy (TF32 and 3xTF32 are computed in fp32 there; bf16 tiles are
upcast to fp32 first, _common.dot_meta, because the interpreter multiplies bf16 as integers).

Knobs: BLOCK_M, BLOCK_N, BLOCK_K (0 = automatic: 128 bytes of k per row, 64 bf16/fp16 elements
or 32 floats), GROUP_M, num_warps (8), num_stages (3), kmajor_b.
Changed from double_buffered's twin: the precision (operands in their own dtype, tl.dot's
input_precision, C in its dtype), 16-bit alignment hints (8 elements per 16 bytes), the automatic
BLOCK_K and kmajor_b. Bottleneck it attacks (as the CUDA stage): the FP32 SIMT ceiling, by moving
the multiply-adds to the tensor cores.
Layouts: all six strides (problem_args); nothing is copied unless kmajor_b asks for it.
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs in grouped order (GROUP_M).
"""

import triton
import triton.language as tl

from lab.errors import LabError
from lab.operands import entry, timer
from triton_kernels._common import SMEM_LIMIT, cdiv, dot_meta, launcher, problem_args

ELEM_BYTES = {"tf32": 4, "3xtf32": 4, "bf16": 2, "fp16": 2}


@triton.jit
def matmul_mma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, VEC: tl.constexpr,
                      VEC_A: tl.constexpr, VEC_B: tl.constexpr, VEC_C: tl.constexpr,
                      EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      UPCAST: tl.constexpr):
    # Grouped program order (common.cuh's block_tile): GROUP_M block-rows walked column by column.
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows

    rm = tl.max_contiguous(tl.multiple_of(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), BLOCK_M),
                           BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), BLOCK_N),
                           BLOCK_N)
    rk = tl.max_contiguous(tl.arange(0, BLOCK_K), BLOCK_K)
    # Alignment hints (vectorized.py's rule with VEC elements per 16 bytes: 4 floats or 8
    # halves): the flag names the operand's contiguous dimension, whose lines start on 16-byte
    # boundaries and whose size is a multiple of VEC.
    a_m = rm * stride_am
    a_k = rk * stride_ak
    b_k = rk * stride_bk
    b_n = rn * stride_bn
    c_m = rm * stride_cm
    c_n = rn * stride_cn
    if VEC_A == "n":
        a_m = tl.multiple_of(a_m, VEC)
    if VEC_A == "t":
        a_k = tl.multiple_of(a_k, VEC)
    if VEC_B == "n":
        b_k = tl.multiple_of(b_k, VEC)
    if VEC_B == "t":
        b_n = tl.multiple_of(b_n, VEC)
    if VEC_C == "n":
        c_m = tl.multiple_of(c_m, VEC)
    if VEC_C == "t":
        c_n = tl.multiple_of(c_n, VEC)
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    if VEC_A == "t" or VEC_C == "t":  # M % VEC == 0: the M mask is constant per 16 bytes
        in_m = tl.max_constancy(in_m, [VEC, 1])
    if VEC_B == "n" or VEC_C == "n":  # N % VEC == 0
        in_n = tl.max_constancy(in_n, [1, VEC])

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # A plain loop; num_stages > 1 makes the compiler pipeline it (double_buffered's twin).
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:
            in_k_a = k0 + rk[None, :] < K
            in_k_b = k0 + rk[:, None] < K
            if VEC_A == "n":  # K % VEC == 0
                in_k_a = tl.max_constancy(in_k_a, [1, VEC])
            if VEC_B == "t":
                in_k_b = tl.max_constancy(in_k_b, [VEC, 1])
            a = tl.load(a_ptrs, mask=in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & in_n, other=0.0)
        if UPCAST:  # the interpreter's bf16 dot is wrong (triton_kernels/_common.py)
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # C in its own dtype: the fp32 accumulator rounded on store
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=in_m & in_n)


@triton.jit
def transpose_kernel(src_ptr, dst_ptr, R, C, stride_sr, stride_sc, stride_dr, stride_dc,
                     TILE: tl.constexpr):
    """dst (C x R) = src (R x C)^T, one TILE x TILE tile per program: read along src's columns
    and written along dst's, both coalesced when those are the contiguous dimensions (the
    compiler moves the tile through shared memory to turn it; torch's copy_ of a transposed view
    reads one element per 32-byte sector instead)."""
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, TILE)
    r = (pid // tiles_c) * TILE + tl.arange(0, TILE)
    c = (pid % tiles_c) * TILE + tl.arange(0, TILE)
    mask = (r[:, None] < R) & (c[None, :] < C)
    x = tl.load(src_ptr + r[:, None] * stride_sr + c[None, :] * stride_sc, mask=mask)
    tl.store(dst_ptr + c[:, None] * stride_dr + r[None, :] * stride_dc, tl.trans(x),
             mask=tl.trans(mask))


TRANSPOSE_TILE = 64


def block_k(BLOCK_K: int, precision: str) -> int:
    """BLOCK_K, with 0 meaning 128 bytes of k: 64 bf16/fp16 elements or 32 floats."""
    return BLOCK_K or 128 // ELEM_BYTES[precision]


def smem_bytes(BLOCK_M=128, BLOCK_N=128, BLOCK_K=0, num_stages=3, precision="bf16", **_) -> int:
    """The pipeline's shared-memory ring: num_stages tiles of A and B."""
    return num_stages * (BLOCK_M + BLOCK_N) * block_k(BLOCK_K, precision) * ELEM_BYTES[precision]


def validate(BLOCK_M=128, BLOCK_N=128, BLOCK_K=0, num_warps=8, num_stages=3, precision=None,
             **_) -> None:
    """Raise LabError (one sentence) for a configuration that cannot compile or would spill (in
    `precision` when given; else in the precision that needs the most shared memory, tf32)."""
    where = (f"mma (Triton) with BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, BLOCK_K={BLOCK_K}, "
             f"num_warps={num_warps}, num_stages={num_stages}")
    for prec in (precision,) if precision else ("tf32", "bf16"):
        smem = smem_bytes(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, prec)
        if smem > SMEM_LIMIT:
            raise LabError(f"{where} needs about {smem // 1024} KiB of shared memory in {prec}, "
                           f"more than an H100's 227 KiB; lower num_stages or BLOCK_K")
    per_thread = BLOCK_M * BLOCK_N // (32 * num_warps)
    if per_thread > 128:
        raise LabError(f"{where} gives each thread {per_thread} accumulators, more than the 128 "
                       f"that fit in its registers next to the operands; raise num_warps or lower "
                       f"BLOCK_M/BLOCK_N")


def _vec(op, vec: int) -> str:
    """An operand's hint: its contiguous direction ("n" rows, "t" columns) if `vec` elements
    along it are 16 aligned bytes under one mask value, else ""."""
    if not op.blas or not op.aligned(16):
        return ""
    along = op.cols if op.row_major else op.rows
    return op.letter if along % vec == 0 else ""


def vector_flags(p) -> dict:
    vec = 16 // p.a.tensor.element_size()
    return {"VEC": vec, "VEC_A": _vec(p.a, vec), "VEC_B": _vec(p.b, vec), "VEC_C": _vec(p.c, vec)}


def _kmajor(p):
    """If B is N-major, point the Problem at a K-major buffer (B^T contiguous, allocated here) and
    return the copy that fills it from B, for the timed call to run before the kernel; else
    None."""
    import torch

    from lab.operands import Operand

    if not (p.b.row_major and p.b.cols > 1):
        return None
    b = p.b.tensor
    bt = torch.empty((b.shape[1], b.shape[0]), dtype=b.dtype, device=b.device)  # N x K
    p.b = Operand.of("B", bt.t())
    K, N = b.shape
    grid = (cdiv(K, TRANSPOSE_TILE) * cdiv(N, TRANSPOSE_TILE),)
    return launcher(transpose_kernel, grid, (b, bt, K, N, b.stride(0), b.stride(1), bt.stride(0),
                                             bt.stride(1)), TILE=TRANSPOSE_TILE, num_warps=4)


@entry("mma", "triton")
def prepare(p, BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 0, GROUP_M: int = 8,
            num_warps: int = 8, num_stages: int = 3, kmajor_b: bool = False, **_):
    """p: the shared description of the operands (lab/operands.py), with p.precision."""
    import torch

    # the shared code sets p.precision; before it did, the operands' dtype said it
    precision = getattr(p, "precision", None) or {
        torch.float32: "tf32", torch.bfloat16: "bf16", torch.float16: "fp16"}[p.a.tensor.dtype]
    if precision not in ELEM_BYTES:
        raise LabError(f"stage mma (triton) computes on the tensor cores in "
                       f"{', '.join(ELEM_BYTES)}, not {precision}")
    validate(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=num_warps,
             num_stages=num_stages, precision=precision)
    transpose_b = _kmajor(p) if kmajor_b else None
    bk = block_k(BLOCK_K, precision)
    grid = (cdiv(p.M, BLOCK_M) * cdiv(p.N, BLOCK_N),)
    launch = launcher(matmul_mma_kernel, grid, (*problem_args(p),), BLOCK_M=BLOCK_M,
                      BLOCK_N=BLOCK_N, BLOCK_K=bk, GROUP_M=GROUP_M, EVEN_K=p.K % bk == 0,
                      **vector_flags(p), **dot_meta(matmul_mma_kernel, p), num_warps=num_warps,
                      num_stages=num_stages)
    if transpose_b is None:
        return launch

    def launch_with_copy():  # the copy is part of the timed call: cuBLAS gets no such help
        transpose_b()
        launch()

    launch_with_copy.resources = launch.resources
    launch_with_copy.kernel_only = launch  # the kernel alone, for a profiler
    return launch_with_copy
