"""Stage gemv, Triton twin: thin products (matrix-vector), A streamed once, no tl.dot.

CUDA stage: cuda_kernels/gemv.cu (16-byte loads of A by hand, rows x lanes per block, warp
shuffles, split-K with a fixed-order sum).

The program: a BLOCK_M x BLOCK_N tile of C with a loop over K in steps of BLOCK_K. tl.dot needs
at least 16 columns (and would compute 15 of padding for N = 1), so the products are a broadcast
multiply on the CUDA cores in fp32:
- BLOCK_N = 1 (every N = 1 problem): acc[BLOCK_M, BLOCK_K] += a * b[None, :], elementwise, and
  one tl.sum over BLOCK_K after the loop. Each element of the accumulator sums the products of
  its k's K / BLOCK_K apart; the sum across them is a tree at the end: the CUDA twin's per-lane
  sums and its shuffle butterfly, written as two lines.
- BLOCK_N > 1: acc[BLOCK_M, BLOCK_N, BLOCK_K] += a[:, None, :] * b^T[None, :, :] (B's tile
  loaded as BLOCK_N x BLOCK_K), summed over the last axis after the loop. Correct for any N;
  every group of BLOCK_N columns reads A again, as in the CUDA twin: slow for a wide C.
What Triton does for you that the CUDA twin does by hand:
- The thread layout: which thread loads which 16-byte piece of the A tile (the CUDA twin's rows
  per thread, lanes per row and KU chunks in flight) is the blocked layout Triton gives the
  [BLOCK_M, BLOCK_K] tile, with 128-bit loads (ld.global.v4) along the contiguous dimension of A
  wherever its analysis proves them legal: pointers are specialized as 16-byte aligned, strides
  divisible by 16 as such, strides equal to 1 as the constant 1 (so a K x 1 B, strides (1, 1),
  is a contiguous vector along k without the CUDA twin's run-time ldb == 1 test). VEC_A adds the
  hint for a row stride that is a multiple of 4 (fp32) or 8 (bf16, fp16) without being one of 16.
- The reduction: tl.sum over BLOCK_K is the shuffle butterfly and the cross-warp exchange
  through shared memory (with its barrier) that the CUDA twin writes out.
- bf16 / fp16 to fp32 conversion of each loaded value, and the one rounding of C to its type
  at the store (the CUDA twin's cvt instructions).
- Software pipelining when num_stages > 1 (default 1: enough programs are resident per SM to
  keep the loads in flight, and none of the ring's shared memory is spent).
What it shares with the CUDA twin: no masks in the K loop (rows past M and columns past N are
wrapped onto real ones, rm % M, and never stored; the last, partial k-step is one masked step
after the loop, EVEN_K removes it), the column groups of a row block adjacent in the grid (their
rows of A meet in L2), and split-K: SPLITK = S > 1 gives program pid the split pid // tiles, a
contiguous range of k-steps (empty where there are fewer steps than splits: it stores zeros);
each split stores its fp32 partial tile into its slab of a workspace of S x M x N floats
(allocated in prepare: setup), and splitk_reduce_kernel (triton_kernels/variants/warptiling.py) adds the
slabs in the fixed order 0, 1, ..., S-1 into C, rounding once to C's type. The call runs both.
Automatic values (0 in the registry; config()): BLOCK_N: 1 for N = 1, else the power of two at or
above N, at most 8. A program's tile holds TILE_LOADS 16-byte loads per thread (4: 2048 fp32 or
4096 bf16 / fp16 elements at 4 warps): for a row-major A BLOCK_M = 4 and BLOCK_K the rest (512 fp32
/ 1024 16-bit at N = 1), for a column-major A BLOCK_M = 32 x VW (128 fp32, 256 16-bit) and
BLOCK_K the rest; each clamped to the power of two at or above M and K, the other edge then
growing back to fill the tile. splitk = 0: auto_split(), the CUDA twin's rule on this twin's
program count (2048 x 1 x 1048576 fp32: 512 programs of 4 rows, split 8; 4097 x 1 x 4096: 1,025
programs, no split). resolve() (no layout) gives the row-major A's configuration; prepare() uses
A's actual layout and puts what runs in the `params` column (launch.config).
Knobs: BLOCK_M, BLOCK_N, BLOCK_K (0 = automatic), num_warps (4), num_stages (1), splitk (shared
with the CUDA stage).
Launch: a 1-D grid of splitk * ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs (column blocks fastest
within a split); the sum a 1-D grid of ceil(M*N / 1024).
Changed from coalesced's twin (a side branch of the ladder, as the CUDA stage): the loop over K
takes BLOCK_K k's a step, a BLOCK_M x BLOCK_K tile of A multiplied elementwise by B's slice and
summed over k once after the loop, rows wrapped instead of masked, and split-K.
Bottleneck: DRAM bandwidth (the CUDA twin's header has the arithmetic: 2.56 ms at the H100's
3.35 TB/s for 2048 x 1 x 1048576 fp32, 20.0 us for 4097 x 1 x 4096).
"""

import triton
import triton.language as tl

from lab.base.contract import Offer, Prepared
from lab.base.errors import LabError
from lab.base.precisions import elem_bytes
from lab.base.entry import entry
from lab.base.timer import timer
from lab.base.device import DEFAULT_SMS, sm_count
from lab.base.splitk import AUTO, SPLITS, allowed_splits, nearest_split
from triton_kernels import _common as common
from triton_kernels._common import cdiv, launcher, offsets_meta, problem_args
from triton_kernels.variants.warptiling import REDUCE_BLOCK, splitk_reduce_kernel

PRECISIONS = ("fp32", "bf16", "fp16")
ELEM_BYTES = elem_bytes("fp32", "bf16", "fp16")  # sizes from lab/base/precisions.py
TILE_LOADS = 4  # 16-byte loads of A per thread per k-step in the automatic tile
MAX_NCOL = 8  # BLOCK_N = 0: at most 8 columns
ROWS_KMAJOR = 4  # BLOCK_M = 0 for a row-major A
MAX_ACC = 128  # accumulators per thread (BLOCK_M * BLOCK_N * BLOCK_K / threads) validate() allows
# the CUDA twin's split rule (cuda_kernels/gemv.py), on this twin's programs
TARGET_PER_SM = 32
MIN_SPLIT_BYTES = 64 * 1024

# the registry's Triton parameters of this stage, in its order: the `params` column's order
PARAM_ORDER = ("splitk", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


@triton.jit
def gemv_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, SPLITK: tl.constexpr, EVEN_K: tl.constexpr,
                VEC_A: tl.constexpr, VW: tl.constexpr, OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    split = 0
    if SPLITK > 1:  # the split, then the tile within it
        tiles = grid_m * grid_n
        split = pid // tiles
        pid = pid % tiles
    pid_m = pid // grid_n  # column blocks fastest: they share the row block's A in L2
    pid_n = pid % grid_n

    # This program's k-steps [kt0, kt1): all ceil(K / BLOCK_K) of them, or with split-K its
    # split's share (sizes differing by at most one). The full ones are [kt0, full), then at most
    # one partial (none with EVEN_K).
    ktiles = tl.cdiv(K, BLOCK_K)
    kt0 = 0
    kt1 = ktiles
    if SPLITK > 1:
        kt0 = split * ktiles // SPLITK
        kt1 = (split + 1) * ktiles // SPLITK
    full = kt1 if EVEN_K else tl.maximum(tl.minimum(kt1, K // BLOCK_K), kt0)

    # Rows wrapped at M (real rows of A, never stored): no mask in the loop.
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rk = tl.arange(0, BLOCK_K)
    # A's offsets along its two dimensions; VEC_A "n" ("t"): every row (column) of A starts on a
    # 16-byte boundary, so that line's offsets are multiples of VW (the elements in 16 bytes)
    a_m, a_k = rm * stride_am, rk * stride_ak
    a_m = tl.multiple_of(a_m, VW) if VEC_A == "n" else a_m
    a_k = tl.multiple_of(a_k, VW) if VEC_A == "t" else a_k
    a_ptrs = a_ptr + a_m[:, None] + (kt0 * BLOCK_K * stride_ak + a_k[None, :])
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # unwrapped: the store's mask drops the wrap
    if OFFSET64:
        cm = cm.to(tl.int64)
    if BLOCK_N == 1:
        # One column of C: B's column pid_n as a vector along k, a 2-D accumulator.
        b_ptrs = b_ptr + pid_n * stride_bn + (kt0 * BLOCK_K + rk) * stride_bk
        acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for _ in range(kt0, full):
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            acc += a.to(tl.float32) * b.to(tl.float32)[None, :]
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        if not EVEN_K:
            if full < kt1:  # the ragged end of K (only in the program that owns the last step)
                in_k = rk < K - full * BLOCK_K
                a = tl.load(a_ptrs, mask=in_k[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=in_k, other=0.0)
                acc += a.to(tl.float32) * b.to(tl.float32)[None, :]
        c = tl.sum(acc, axis=1)  # [BLOCK_M]: the tree across the tile's k's
        in_m = cm < M
        if SPLITK > 1:  # this split's slab of the workspace (row-major M x N)
            tl.store(c_ptr + split.to(tl.int64) * M * N + cm * N + pid_n, c, mask=in_m)
        else:
            tl.store(c_ptr + cm * stride_cm + pid_n * stride_cn,
                     c.to(c_ptr.dtype.element_ty), mask=in_m)
    else:
        # BLOCK_N columns: B's tile as BLOCK_N x BLOCK_K (columns wrapped at N), a 3-D
        # accumulator of the broadcast products.
        rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        b_ptrs = b_ptr + rn[:, None] * stride_bn + (kt0 * BLOCK_K + rk)[None, :] * stride_bk
        acc3 = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
        for _ in range(kt0, full):
            a = tl.load(a_ptrs)
            bt = tl.load(b_ptrs)
            acc3 += a.to(tl.float32)[:, None, :] * bt.to(tl.float32)[None, :, :]
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        if not EVEN_K:
            if full < kt1:
                in_k = rk < K - full * BLOCK_K
                a = tl.load(a_ptrs, mask=in_k[None, :], other=0.0)
                bt = tl.load(b_ptrs, mask=in_k[None, :], other=0.0)
                acc3 += a.to(tl.float32)[:, None, :] * bt.to(tl.float32)[None, :, :]
        c2 = tl.sum(acc3, axis=2)  # [BLOCK_M, BLOCK_N]
        cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (cm[:, None] < M) & (cn[None, :] < N)
        if SPLITK > 1:
            tl.store(c_ptr + split.to(tl.int64) * M * N + cm[:, None] * N + cn[None, :], c2,
                     mask=mask)
        else:
            tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn,
                     c2.to(c_ptr.dtype.element_ty), mask=mask)


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _clamp(x: int, hi: int) -> int:
    return max(1, min(x, hi))


def auto_split(blocks: int, K: int, bytes_per_k: int, sms: int | None = None) -> int:
    """splitk = 0: the CUDA twin's rule (cuda_kernels/gemv.py auto_split) on `blocks` programs
    that read `bytes_per_k` bytes of A per k each."""
    target = TARGET_PER_SM * int(sms or DEFAULT_SMS)
    if blocks >= target:
        return 1
    splits = allowed_splits(SPLITS, K, cdiv(MIN_SPLIT_BYTES, max(1, bytes_per_k)))
    return nearest_split(blocks, target, splits)


def config(params, M: int, N: int, K: int, precision: str = "fp32", sms: int = DEFAULT_SMS,
           a_kmajor: bool = True) -> dict:
    """The parameters as they are compiled and launched (the module docstring's automatic
    values); a_kmajor: A is row-major (runs along k), else column-major."""
    out = dict(params)
    vw = 16 // ELEM_BYTES[precision]
    tile = TILE_LOADS * vw * 32 * out.get("num_warps", 4)  # elements of A per k-step
    bn = out.get("BLOCK_N", 0) or (1 if N == 1 else min(MAX_NCOL, pow2_at_least(N)))
    bm, bk = out.get("BLOCK_M", 0), out.get("BLOCK_K", 0)
    mm, kk = pow2_at_least(M), pow2_at_least(K)
    if not bm and bk:
        bm = _clamp(tile // (bk * bn), mm)
    elif bm and not bk:
        bk = _clamp(tile // (bm * bn), kk)
    elif not bm and not bk:
        bm = min(ROWS_KMAJOR if a_kmajor else 32 * vw, mm)
        bk = _clamp(tile // (bm * bn), kk)
        bm = _clamp(tile // (bk * bn), mm)  # K short: more rows fill the tile
    out.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    if out.get("splitk", AUTO) == AUTO:
        blocks = cdiv(M, bm) * cdiv(N, bn)
        out["splitk"] = auto_split(blocks, K, bm * ELEM_BYTES[precision], sms)
    return out


def resolve(params, M: int, N: int, K: int, precision: str = "fp32",
            sms: int = DEFAULT_SMS) -> dict:
    """The contract's `resolve`: config() for a row-major A."""
    return config(params, M, N, K, precision, sms)


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order, as they run."""
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if k in resolved)


def validate(BLOCK_M: int = 0, BLOCK_N: int = 0, BLOCK_K: int = 0, num_warps: int = 4,
             splitk: int = AUTO, **_) -> None:
    """Raise LabError (one sentence) for a tile whose accumulators cannot sit in registers."""
    if BLOCK_M and BLOCK_K:  # with either automatic, the other edge is sized to fit
        acc = BLOCK_M * (BLOCK_N or MAX_NCOL) * BLOCK_K // (32 * num_warps)
        if acc > MAX_ACC:
            raise LabError(f"gemv (Triton) with BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, "
                           f"BLOCK_K={BLOCK_K}, num_warps={num_warps} gives each thread up to "
                           f"{acc} accumulators, more than the {MAX_ACC} that fit in registers; "
                           f"lower BLOCK_M or BLOCK_K, or leave one of them 0 (automatic)")
    if splitk < 0:
        raise LabError(f"gemv (Triton) with splitk={splitk}: splitk must be 0 (chosen from the "
                       f"shape) or 1 or more")


def kernels(params, precision: str) -> tuple[str, ...]:
    """The kernel, and the split-K sum after it when K is split (or may be: splitk=0)."""
    return ("gemv_kernel",) + (("splitk_reduce_kernel",) if params.get("splitk", 1) != 1 else ())


OFFER = Offer("gemv", "triton", precisions=PRECISIONS, kernels=kernels,
              validate=lambda params, precision: validate(**params), resolve=resolve, show=show)


def vec_a(p) -> str:
    """A's flag: "n" ("t") where every row (column) of A starts on a 16-byte boundary."""
    a = p.a
    if not a.blas or not a.aligned(16):
        return ""
    return a.letter


@entry(OFFER)
def prepare(p, splitk: int = AUTO, BLOCK_M: int = 0, BLOCK_N: int = 0, BLOCK_K: int = 0,
            num_warps: int = 4, num_stages: int = 1, **_):
    """p: the shared description of the operands (lab/base/problem.py); launch.config is the
    configuration that runs and its text the row's `params` column."""
    import torch

    cfg = config(dict(splitk=splitk, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                      num_warps=num_warps, num_stages=num_stages), p.M, p.N, p.K, p.precision,
                 sm_count(p.c.tensor.device), a_kmajor=not p.a.col_major)
    bm, bn, bk, s = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["splitk"]
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLITK=s, EVEN_K=p.K % bk == 0,
                VEC_A=vec_a(p), VW=16 // ELEM_BYTES[p.precision], **offsets_meta(p),
                num_warps=num_warps, num_stages=num_stages)
    tiles = cdiv(p.M, bm) * cdiv(p.N, bn)
    args = problem_args(p)
    if s == 1:
        out = launcher(gemv_kernel, (tiles,), args, **meta)
        out.resources = {**(out.resources or {}), "params": show(cfg)}
        out.config = cfg
        return out

    clock = timer(p.c.tensor.is_cuda)
    work = torch.empty(s * p.M * p.N, dtype=torch.float32, device=p.c.tensor.device)
    setup_ms = clock.stop()
    # The sum's launcher first: lab.profile captures the last launcher() call of a prepare, and
    # the kernel to profile is the product.
    total = launcher(splitk_reduce_kernel, (cdiv(p.M * p.N, REDUCE_BLOCK),),
                     (work, p.c.tensor, p.M, p.N, p.c.s0, p.c.s1), SPLITK=s, BLOCK=REDUCE_BLOCK,
                     num_warps=4)
    partials = launcher(gemv_kernel, (s * tiles,), (args[0], args[1], work, *args[3:]), **meta)
    # setup_reusable: the workspace is allocated once and every call rewrites all of it
    return Prepared.of_steps([partials, total],
                             resources={**(partials.resources or {}), "params": show(cfg)},
                             setup_ms=setup_ms, workspace=work, config=cfg, setup_reusable=True)
