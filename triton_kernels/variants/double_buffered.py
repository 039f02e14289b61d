"""double_buffered's Triton twin for what its lesson (triton_kernels/double_buffered.py) leaves
out: realign. Not a stage of its own: double_buffered's prepare() hands the launch to
variant_launch() here when realign is on; every other problem runs the lesson kernel.

matmul_double_buffered_kernel below is the twin's former kernel, unchanged: the lesson's kernel
plus PAD_A / PAD_B. realign=True copies each A or B whose leading dimension is not a multiple of
16 elements, whose base is not 16-byte aligned, or that has no unit stride, into a zeroed buffer
(triton_kernels/_realign.py, shared with warptiling's variant; the reasoning and the cost are in
the lesson's docstring): setup, once in variant_launch(), outside the timing (launch.setup_ms);
timed, at the start of every call, the copies, then the kernel on the buffers. The kernel reads a
buffer with its hint on (VEC_A / VEC_B) and PAD_A / PAD_B: along the buffer's contiguous
dimension its mask runs to the size rounded up to a multiple of 4, so that the mask is constant
per float4 whatever the size; what it reads past the size is the zero padding, the value the mask
would have filled in, and the C mask (M, N) is unchanged. launch.realigned names the copied
operands; launch.kernel_only is the kernel alone, for a profiler.
Without PAD it compiles to the lesson kernel's PTX, instruction for instruction
(tests/test_lessons_triton_variants.py), and its name is the lesson's, so rows, lab.profile and
the tuner see one stage.
"""

import triton
import triton.language as tl

from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args
from triton_kernels._realign import realign_flags, realign_setup, with_copies
from triton_kernels.vectorized import vec_hints


@triton.jit
def matmul_double_buffered_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                  stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                  GROUP_M: tl.constexpr, VEC_A: tl.constexpr, VEC_B: tl.constexpr,
                                  VEC_C: tl.constexpr, EVEN_K: tl.constexpr,
                                  PAD_A: tl.constexpr = False, PAD_B: tl.constexpr = False,
                                  OFFSET64: tl.constexpr = False):
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
    # of its operand starts on a 16-byte boundary: that line's offsets are multiples of 4.
    a_m, a_k = rm * stride_am, rk * stride_ak
    b_k, b_n = rk * stride_bk, rn * stride_bn
    c_m, c_n = rm * stride_cm, rn * stride_cn
    a_m = tl.multiple_of(a_m, 4) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, 4) if VEC_A == "t" else a_k
    b_k = tl.multiple_of(b_k, 4) if VEC_B == "n" else b_k
    b_n = tl.multiple_of(b_n, 4) if VEC_B == "t" else b_n
    c_m = tl.multiple_of(c_m, 4) if VEC_C == "n" else c_m
    c_n = tl.multiple_of(c_n, 4) if VEC_C == "t" else c_n
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    # Edge masks, constant per float4 where a flag promises M % 4 == 0 (N % 4 == 0)
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    in_m = tl.max_constancy(in_m, [4, 1]) if VEC_A == "t" and not PAD_A or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, 4]) if VEC_B == "n" and not PAD_B or VEC_C == "n" else in_n
    # realign (PAD_A / PAD_B, the operand is prepare()'s buffer): along the buffer's contiguous
    # dimension its mask runs to the size rounded up to 4 (its padding is zero), constant per
    # float4; without PAD each operand's bounds are C's masks and K
    a_in_m, b_in_n, k_a, k_b = in_m, in_n, K, K
    if PAD_A and VEC_A == "t":  # a column-major A: rows up to M rounded up to 4
        a_in_m = tl.max_constancy(rm[:, None] < tl.cdiv(M, 4) * 4, [4, 1])
    if PAD_A and VEC_A == "n":  # a row-major A: k up to K rounded up to 4
        k_a = tl.cdiv(K, 4) * 4
    if PAD_B and VEC_B == "n":  # a row-major B: columns up to N rounded up to 4
        b_in_n = tl.max_constancy(rn[None, :] < tl.cdiv(N, 4) * 4, [1, 4])
    if PAD_B and VEC_B == "t":  # a column-major B: k up to K rounded up to 4
        k_b = tl.cdiv(K, 4) * 4

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Written as a plain loop: with num_stages > 1 the compiler pipelines it (module docstring).
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=a_in_m, other=0.0)
            b = tl.load(b_ptrs, mask=b_in_n, other=0.0)
        else:  # K % 4 == 0 (or k_a, k_b rounded up): constant per float4 along k
            in_k_a = k0 + rk[None, :] < k_a
            in_k_b = k0 + rk[:, None] < k_b
            in_k_a = tl.max_constancy(in_k_a, [1, 4]) if VEC_A == "n" else in_k_a
            in_k_b = tl.max_constancy(in_k_b, [4, 1]) if VEC_B == "t" else in_k_b
            a = tl.load(a_ptrs, mask=a_in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & b_in_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc, mask=in_m & in_n)


def kernels(params, precision: str) -> tuple[str, ...]:
    """The GEMM kernel, and the realign copy before it when realign is on."""
    names = ("matmul_double_buffered_kernel",)
    if params.get("realign", False):
        names += ("realign_copy_kernel",)
    return names


def variant_launch(p, config: dict):
    """The launch of `config` (the parameters double_buffered's prepare() was given) on problem p,
    the realign copies before the kernel when config["realign"]."""
    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, realign = (
        config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps",
                            "num_stages", "realign"))
    p, copies, setup_ms = realign_setup(p, realign)  # setup: the buffers, allocated and zeroed once
    # a buffer's hint is on, and PAD_* for its zero padding (triton_kernels/_realign.py)
    flags = {**vec_hints(p), **realign_flags(p, copies)}
    grid = (cdiv(p.M, BLOCK_M) * cdiv(p.N, BLOCK_N),)
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                EVEN_K=p.K % BLOCK_K == 0, **flags, **offsets_meta(p), num_warps=num_warps,
                num_stages=num_stages)
    launch = launcher(matmul_double_buffered_kernel, grid, (*problem_args(p),), **meta)
    return with_copies(launch, copies, setup_ms, p)  # timed, every call: the copies, the kernel
