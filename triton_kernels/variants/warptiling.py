"""warptiling's Triton twin for what its lesson (triton_kernels/warptiling.py) leaves out: split-K
and realign. Not a stage of its own: warptiling's prepare() resolves the parameters (resolve()
below: splitk=0, the registry's default, made the split lab/base/splitk.py's auto_tile_and_split()
chooses) and hands the launch to variant_launch() here when the split is more than 1 or realign
is on; every other problem runs the lesson kernel.

matmul_warptiling_kernel below is the twin's former kernel, unchanged: the lesson's kernel plus
- split-K (SPLITK = S > 1, the lines under `if SPLITK > 1`): the 1-D grid holds S copies of the
  tile grid; program pid works on tile pid % tiles and split pid // tiles, a contiguous range of
  k-tiles (sizes differing by at most one; empty when there are fewer k-tiles than splits, and
  then it stores zeros). Each split stores its partial tile into its slab of a workspace of
  S x M x N floats (allocated in prepare: setup), and splitk_reduce_kernel, a second small
  Triton kernel, sums the slabs in the fixed order 0, 1, ..., S-1 into C: bitwise reproducible.
  splitk_launch runs both. (gemv's twin reuses splitk_reduce_kernel.)
- realign (PAD_A / PAD_B; the machinery is triton_kernels/_realign.py, shared with the
  double_buffered twin's variant): each A or B without 16-byte lines is copied into a zeroed
  buffer allocated once in variant_launch() (setup, untimed) at the start of every (timed) call,
  before the GEMM kernel and, with split-K, its reduction (which reads only the workspace); the
  kernel reads the buffer with its hint on (VEC_A / VEC_B), and a column-major A or a row-major B
  wraps at M or N rounded up to a multiple of 4 (not at M or N), so that the wrapped offsets are
  aligned runs of 4 whatever the size (the rows and columns in between are the zero padding, and
  are not stored), and a row-major A or column-major B masks the ragged last k-tile up to K
  rounded up to 4. launch.realigned names the copied operands; launch.kernel_only is the kernel
  (with split-K: both kernels) without the copies.
With SPLITK = 1 and no PAD it compiles to the lesson kernel's PTX, instruction for instruction
(tests/test_lessons_triton_variants.py), and the launch is named the same (its kernel is
matmul_warptiling_kernel too), so rows, lab.profile and the tuner see one stage.
"""

import triton
import triton.language as tl

from lab.base.contract import Prepared, Tuning
from lab.base.errors import LabError
from lab.base.timer import timer
from lab.base.device import DEFAULT_SMS
from lab.base.splitk import AUTO, auto_tile_and_split
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args
from triton_kernels._realign import realign_flags, realign_setup, with_copies
from triton_kernels.vectorized import vec_hints

REDUCE_BLOCK = 1024


@triton.jit
def matmul_warptiling_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                             stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                             VEC_A: tl.constexpr, VEC_B: tl.constexpr, VEC_C: tl.constexpr,
                             EVEN_K: tl.constexpr, SPLITK: tl.constexpr = 1,
                             PAD_A: tl.constexpr = False, PAD_B: tl.constexpr = False,
                             OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    if SPLITK > 1:  # split-K (below): SPLITK copies of the tile grid, the split then the tile
        split = pid // (grid_m * grid_n)
        pid = pid % (grid_m * grid_n)
    # GROUP_M order: GROUP_M block-rows walked column by column, so that the programs resident at
    # one time share their rows of A and columns of B in L2 (common.cuh's block_tile; Triton's
    # tutorial order; GROUP_M = 1 is the plain order, pid_n = pid % grid_n)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows

    # The rows of A and columns of B this tile reads, wrapped at the edges of C: never out of
    # bounds, so no masks in the loop (the wrapped rows and columns of the result are not stored).
    # realign (PAD_A / PAD_B, the operand is prepare()'s buffer): one read along m or n (a
    # column-major A, a row-major B) wraps at M or N rounded up to 4 instead, reading its zero
    # padding in between.
    wrap_m = tl.cdiv(M, 4) * 4 if PAD_A and VEC_A == "t" else M
    wrap_n = tl.cdiv(N, 4) * 4 if PAD_B and VEC_B == "n" else N
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % wrap_m
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % wrap_n
    rk = tl.arange(0, BLOCK_K)
    # Where an operand runs along m or n (a transposed A, a row-major B) the wrap is at a multiple
    # of 4 (the flag promises M % 4 == 0 or N % 4 == 0; PAD rounds it up): rm and rn are aligned
    # runs of 4, and the loads can be 128-bit.
    rm = tl.max_contiguous(tl.multiple_of(rm, 4), 4) if VEC_A == "t" else rm
    rn = tl.max_contiguous(tl.multiple_of(rn, 4), 4) if VEC_B == "n" else rn
    # Each operand's offsets along its two dimensions; a flag "n" ("t") says every row (column)
    # of its operand starts on a 16-byte boundary: that line's offsets are multiples of 4.
    a_m, a_k = rm * stride_am, rk * stride_ak
    b_k, b_n = rk * stride_bk, rn * stride_bn
    a_m = tl.multiple_of(a_m, 4) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, 4) if VEC_A == "t" else a_k
    b_k = tl.multiple_of(b_k, 4) if VEC_B == "n" else b_k
    b_n = tl.multiple_of(b_n, 4) if VEC_B == "t" else b_n

    # The k-tiles [kt0, kt1): all of K's (split-K: this split's share, SPLITK equal shares);
    # the full ones are [kt0, full), then at most one partial (none with EVEN_K).
    kt0 = 0
    kt1 = tl.cdiv(K, BLOCK_K)
    if SPLITK > 1:
        kt0, kt1 = split * kt1 // SPLITK, (split + 1) * kt1 // SPLITK
    full = kt1 if EVEN_K else tl.maximum(tl.minimum(kt1, K // BLOCK_K), kt0)
    a_ptrs = a_ptr + a_m[:, None] + (kt0 * BLOCK_K * stride_ak + a_k[None, :])
    b_ptrs = b_ptr + (kt0 * BLOCK_K * stride_bk + b_k[:, None]) + b_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(kt0, full):  # no masks: pipelined with cp.async when num_stages > 1
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        if full < kt1:  # the ragged end of K (split-K: only in the split that owns it)
            k_left = K - full * BLOCK_K
            in_k_a = rk[None, :] < k_left
            in_k_b = rk[:, None] < k_left
            # realign: a buffer read along k (a row-major A, a column-major B) is masked up to K
            # rounded up to 4 (zeros past K), so that the mask is constant per float4
            if PAD_A and VEC_A == "n":
                in_k_a = tl.max_constancy(rk[None, :] < tl.cdiv(K, 4) * 4 - full * BLOCK_K,
                                          [1, 4])
            if PAD_B and VEC_B == "t":
                in_k_b = tl.max_constancy(rk[:, None] < tl.cdiv(K, 4) * 4 - full * BLOCK_K,
                                          [4, 1])
            a = tl.load(a_ptrs, mask=in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b, other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")

    # C's rows and columns, unwrapped: the store's masks drop the wrapped ones. VEC_C "t":
    # M % 4 == 0, the mask is constant over each float4 of a column of C; "n": N % 4 == 0.
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    in_m = tl.max_constancy(in_m, [4, 1]) if VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, 4]) if VEC_C == "n" else in_n
    mask = in_m & in_n
    if SPLITK > 1:  # split-K: this split's slab of the workspace (row-major M x N, below)
        w_m = rm.to(tl.int64) if OFFSET64 else rm  # a slab past 2^31 elements: 64-bit rows too
        tl.store(c_ptr + split.to(tl.int64) * M * N + w_m[:, None] * N + rn[None, :], acc,
                 mask=mask)
    else:
        c_m, c_n = rm * stride_cm, rn * stride_cn
        c_m = tl.multiple_of(c_m, 4) if VEC_C == "n" else c_m
        c_n = tl.multiple_of(c_n, 4) if VEC_C == "t" else c_n
        tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc, mask=mask)


def validate_split(splitk: int) -> None:
    """Raise LabError (one sentence) for a split the kernels cannot run."""
    if splitk < 0:
        raise LabError(f"warptiling (Triton) with splitk={splitk}: splitk must be 0 (chosen "
                       f"from the shape) or 1 or more")


def kernels(params, precision: str) -> tuple[str, ...]:
    """The GEMM kernel, the split-K sum after it when K is split (or may be: splitk=0), and the
    realign copy before it."""
    names = ("matmul_warptiling_kernel",)
    if params.get("splitk", 1) != 1:
        names += ("splitk_reduce_kernel",)
    if params.get("realign", False):
        names += ("realign_copy_kernel",)
    return names


# the registry's Triton parameters of this stage, in its order: the `params` column's order
PARAM_ORDER = ("splitk", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages",
               "realign")


def resolve(params, M: int, N: int, K: int, precision: str = "fp32",
            sms: int = DEFAULT_SMS) -> dict:
    """The parameters as they are compiled and launched (the contract's `resolve`): splitk=0
    made the tile and split lab.base.splitk.auto_tile_and_split() chooses for M x N x K on `sms` SMs
    (the CUDA stage's rule, from the same function)."""
    out = dict(params)
    if out.get("splitk", AUTO) != AUTO:
        return out
    BM, BN = out.get("BLOCK_M", 128), out.get("BLOCK_N", 128)
    tm, tn, out["splitk"] = auto_tile_and_split(M, N, K, BM, BN, sms)
    if (tm, tn) != (BM, BN):  # the 64 x 64 tile runs 4 warps (lab/base/splitk.py, step 5)
        out.update(BLOCK_M=tm, BLOCK_N=tn, num_warps=4)
    return out


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order, the split as it runs."""
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if k in resolved)


def configure(p, splitk: int, config: dict, sms: int) -> dict:
    """prepare()'s configuration on problem p: `config` with `splitk`, resolved (resolve()) for
    p's shape on a GPU of `sms` SMs."""
    return resolve({"splitk": splitk, **config}, p.M, p.N, p.K, p.precision, sms)


def labelled(launch, config: dict):
    """`launch` with the configuration that runs (launch.config) and its text, the row's `params`
    column."""
    launch.resources = {**(launch.resources or {}), "params": show(config)}
    launch.config = config
    return launch


# the Offer's declarations of the split (warptiling's OFFER takes them): the automatic split made
# concrete, the `params` column, and the parameters the tuner's split-K seeds set
SPLIT_K = dict(resolve=resolve, show=show,
               tuning=Tuning(split="splitk", tile=("BLOCK_M", "BLOCK_N")))


def variant_launch(p, config: dict):
    """The launch of `config` (resolve()'s, as warptiling's prepare() made it) on problem p: the
    split-K kernels when config["splitk"] > 1, the realign copies before them when
    config["realign"]; launch.config is the configuration that runs and its text the row's
    `params` column."""
    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, splitk, realign = (
        config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps",
                            "num_stages", "splitk", "realign"))
    p, copies, setup_ms = realign_setup(p, realign)  # setup: the buffers, allocated and zeroed once
    # a buffer's hint is on, and PAD_* for its zero padding (triton_kernels/_realign.py)
    flags = {**vec_hints(p), **realign_flags(p, copies)}
    grid = (cdiv(p.M, BLOCK_M) * cdiv(p.N, BLOCK_N),)
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, SPLITK=splitk,
                EVEN_K=p.K % BLOCK_K == 0, **flags, **offsets_meta(p), num_warps=num_warps,
                num_stages=num_stages)
    if splitk == 1:
        launch = launcher(matmul_warptiling_kernel, grid, (*problem_args(p),), **meta)
    else:  # split-K (below): the partial tiles into a workspace, then their sum into C
        launch = splitk_launch(p, grid, splitk, meta)
    launch = with_copies(launch, copies, setup_ms, p)  # timed, every call: the copies, the kernels
    return labelled(launch, config)


# ------------------------------------------------------------------ split-K (splitk = S > 1)
# The grid holds S copies of the tile grid: matmul_warptiling_kernel with SPLITK = S computes
# each split's share of the k-tiles and stores its partial tile into the split's slab of a
# workspace of S x M x N floats (allocated in prepare: setup); splitk_reduce_kernel then sums the
# slabs into C in a fixed order (bitwise reproducible). The launch runs both.


@triton.jit
def splitk_reduce_kernel(w_ptr, c_ptr, M, N, stride_cm, stride_cn, SPLITK: tl.constexpr,
                         BLOCK: tl.constexpr):
    """C = W[0] + W[1] + ... + W[SPLITK-1] (each W[s] M x N, row-major), summed in that order."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mn = tl.cast(M, tl.int64) * N  # (tl.cast: M == 1 arrives as a constant)
    mask = offs < mn
    acc = tl.load(w_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITK):  # a fixed order: the same bits every launch
        acc += tl.load(w_ptr + s * mn + offs, mask=mask, other=0.0)
    i = offs // N
    j = offs % N
    tl.store(c_ptr + i * stride_cm + j * stride_cn, acc, mask=mask)


def splitk_launch(p, grid, splitk, meta):
    """The split-K GEMM (`splitk` copies of `grid`, into the workspace) then the reduction, on p's
    operands (the realign buffers where there are any)."""
    clock = timer(p.c.tensor.is_cuda)
    work = p.c.tensor.new_empty(splitk * p.M * p.N)  # fp32, as C
    setup_ms = clock.stop()
    # The reduction's launcher first: lab.profile captures the last launcher() call of a
    # prepare, and the kernel to profile is the GEMM.
    reduce = launcher(splitk_reduce_kernel, (cdiv(p.M * p.N, REDUCE_BLOCK),),
                      (work, p.c.tensor, p.M, p.N, p.c.s0, p.c.s1), SPLITK=splitk,
                      BLOCK=REDUCE_BLOCK, num_warps=4)
    a, b, _, *args = problem_args(p)
    partials = launcher(matmul_warptiling_kernel, (splitk * grid[0],), (a, b, work, *args), **meta)
    # setup_reusable: the workspace is allocated once and every call rewrites all of it
    return Prepared.of_steps([partials, reduce], resources=partials.resources,
                             setup_ms=setup_ms, workspace=work, setup_reusable=True)
