"""Stage decode, Triton twin: decode-shaped products, a few rows of activations times a large
weight matrix, computed as C^T = B^T A^T ("swap AB") so that the weights fill tl.dot's large
side, the weights read once, K split over enough programs to keep the GPU's memory busy.

CUDA stage: cuda_kernels/decode.cu (16-byte pieces of the weights loaded straight from DRAM into
mma.sync fragments, with a permutation of K that both operands share; the split of K reduced in
the same kernel by the last block of a tile to arrive).

The problem. C (M x N) = A (M x K: the activations, M of 1 to 64 rows, the tokens of a decode
step) @ B (K x N: the layer's weights). 2*M*N*K FLOP against N*K*elem bytes of weights, 2*M/elem
FLOP per byte (16 at M = 16 in bf16): the tensor cores wait on DRAM, and the time is the time to
read B once. M=16 N=4096 K=4096 bf16 reads 33.5 MB of weights: about 8.1 us at the 4.13 TB/s an
H200's memory is read at (a torch reduction; docs/stages/decode.md), against 0.5 us of its bf16
tensor-core peak for the FLOP.

The program: a BLOCK_N x BLOCK_M tile of C^T, with a loop over its split's share of K in steps of
BLOCK_K:
    w   = B^T's tile, BLOCK_N weight rows x BLOCK_K   (element (k, n) of B, read with B's strides)
    a_t = A^T's tile, BLOCK_K x BLOCK_M               (element (m, k) of A)
    acc[BLOCK_N, BLOCK_M] = tl.dot(w, a_t, acc)       (fp32)
and the tile stored transposed into C (or, split, into its slab of a workspace). tl.dot's smallest
edge is 16 and Hopper's wgmma computes 64 rows per warpgroup: with C's M rows on the MMA's row
side an M = 1 product would compute 16 or 64 rows for one. Swapped, the weights supply the MMA's
rows (BLOCK_N of them, all real) and the activations its columns: BLOCK_M = the power of two at
or above min(M, 64), at least 16, the only padding. Rows past N and columns past M are wrapped onto
real ones (rn % N, rm % M: the Triton tutorial's idiom, so the loop has no masks) and never
stored; K's ragged end is one masked step after the loop (none where EVEN_K).
- M > 64: groups of BLOCK_M = 64 activation rows, one per program along the grid's fastest axis
  (the programs of one weight tile adjacent in launch order, so that their re-reads may meet it
  in L2): correct for any M, but every group reads the weight tiles again, so the product is no
  longer decode-shaped and runs slowly; a large M belongs to the GEMM stages (mma, wgmma,
  tma_wgmma). (The lab's Triton grids are 1-D: the groups are folded into it, not a third axis.)
- N <= 64 < M (few output features, many tokens): the launcher computes C^T = B^T A^T instead
  (_swapped(): the operands' roles and all six strides exchanged, C's too; views of the same
  memory, nothing copied), so the small dimension is always the activation side. resolve()
  reports it (`swapped`), the params column shows swapped=1.

Split-K (splitk = S). Program pid takes split pid // (grid_n * grid_m), a contiguous range of
k-steps (sizes differing by at most one; empty where there are fewer steps than splits: it stores
zeros). S = 1: the program stores C itself, fp8's scales applied, rounded once to C's dtype.
S > 1: each split stores its fp32 tile into its slab of a workspace of S x M x N floats (the
kernel's M x N: C^T's when swapped; allocated once in prepare, setup), and decode_reduce_kernel
adds the slabs in the fixed order 0, 1, ..., S-1 (the same bits every run), multiplies by
scale_a * scale_b (fp8) and rounds once to C's dtype. The call runs both.
The automatic split (splitk = 0; auto_split()): on P = ceil(N/BLOCK_N) * ceil(M/BLOCK_M)
programs (the kernel's N and M), the S among the registry's SPLITS whose P x S lies nearest
TARGET_PER_SM x SMs = 4 x 132 = 528 programs (in ratio, a tie to the smaller; lab/base/splitk.py
nearest_split), among those that keep every split at least MIN_SPLIT_STEPS = 4 k-steps long and
the workspace's S*M*N*4 bytes at most a quarter of the weights' N*K*elem (16*S*M <= K*elem: its
write and read add at most half the weights' traffic). 1 where P already reaches the target.
    M=1, N=4096, K=4096, bf16: 16 x 64 x 128 tiles, P = 64; 32 k-steps allow S <= 8, the
      workspace S <= 512; 528 / 64 = 8.25: S = 8, 512 programs of 4 k-steps (64 KB of weights
      each), a workspace of 128 KiB beside 33.5 MB of weights (0.4%).
    M=64, N=12288, K=4096, bf16: 64 x 64 x 128 tiles, P = 192; 32 k-steps allow S <= 8, the
      workspace S <= 8; 528 / 192 = 2.75: S = 3, 576 programs of 10 or 11 k-steps, a
      workspace of 9.4 MB beside 100.7 MB of weights (9.4%: its write and read add 19% to the
      bytes moved, the price of a third split wave; splitk=1 and 2 are the rows to compare).
Automatic values (0 in the registry; config()): BLOCK_N = 64, BLOCK_K = 256 bytes of a weight row
(128 bf16 / fp16, 256 fp8); every tile edge (given or automatic) clamped to the power of two at or
above the kernel's N and K where those are smaller, and never below tl.dot's 16 (32 along K in
fp8, the k of an 8-bit MMA). num_warps (4) as given; num_stages (3) as given where its ring of
num_stages x (BLOCK_N + BLOCK_M) x BLOCK_K elements fits in 227 KiB, else the deepest that fits
(BLOCK_N=256 in bf16 runs 3 stages at M <= 16, 2 at M = 64); no effect under the interpreter.

fp8 (e4m3 A and B with per-tensor scales, a bfloat16 C = scale_a * scale_b * (A @ B)): tl.dot of
two float8e4nv tiles, the scales (one-element fp32 tensors, the kernels' scale_a_ptr and
scale_b_ptr; None in the other precisions, which then compile without them) loaded once and
multiplied into the fp32 result before its one rounding. Hopper's 8-bit MMAs read both operands
K-major: in this formulation w is K-major when B is column-major (layout nt, torch's Linear
weight, W stored N x K) and a_t when A is row-major. Every layout is correct and compiles for
sm_90; compiled without a GPU (Triton 3.9, FakeDriver; the GPU image has 3.6), nt puts both
tiles through the cp.async ring (61,440 bytes at 64 x 16 x 256, 3 stages), while in nn, tn and
tt a tile that is not K-major is loaded into registers (ld.global.v4), turned there and written
to shared memory for each wgmma, outside the ring (nn: 28,672 bytes of ring, A's tiles only):
its loads are not pipelined, at a cost the GPU rows measure. bf16 and fp16 read every layout through the ring (wgmma's transpose bits).

What Triton does for you that the CUDA twin does by hand:
- The loads and the MMA's operands. The CUDA twin loads each thread's 16-byte pieces of the
  weights from DRAM straight into mma.sync fragments (no shared memory), with a permutation of K
  that both operands share so that a thread's 16 contiguous bytes are the k's its fragment needs.
  Here tl.load of the tiles (16-byte cp.async pieces along the contiguous dimension, which
  Triton proves from the specialized strides) and tl.dot: Triton picks the MMA and the layouts,
  the way into the fragments (shared memory, swizzles). Compiled for sm_90 (Triton 3.9): BLOCK_N
  64 or more at 4 warps is wgmma, m64n16k16.f32.bf16.bf16 at M <= 16 (m64n16k32 ...e4m3.e4m3 in
  fp8, m64n64k16 at M = 64), both operands from shared memory; BLOCK_N = 32 is mma.sync.
- The pipeline: num_stages tiles in flight (cp.async into shared memory, Triton's software
  pipelining); the CUDA twin keeps its loads in flight in registers (kunroll).
- The split's sum: the CUDA twin reduces in one kernel (a counter per tile, the last block to
  arrive adds the partial tiles in split order); here a second, small kernel does it.
- The conversions: bf16 / fp16 / e4m3 into the MMA, fp32 to C's dtype with one rounding.
Changed from mma's twin (the stage this one builds on): the product is computed transposed (the
weights on the MMA's large side), the tile is the weight rows' alone (BLOCK_M follows M),
rows wrapped instead of masked, split-K with a fixed-order sum, and fp8 with its scales.
Knobs: BLOCK_N, BLOCK_K (0 = automatic), num_warps (4), num_stages (3), splitk (0 = automatic,
shared with the CUDA stage).
Launch: a 1-D grid of S * ceil(N/BLOCK_N) * ceil(M/BLOCK_M) programs (the kernel's N and M;
activation-row groups fastest, then weight-row blocks, then splits); the sum, where S > 1, a 1-D
grid of ceil(M*N / 1024) programs.
Bottleneck: DRAM bandwidth, reading the weights (above).
"""

import triton
import triton.language as tl
from dataclasses import replace

from lab.base.contract import Offer, Prepared
from lab.base.device import DEFAULT_SMS, sm_count
from lab.base.entry import entry
from lab.base.errors import LabError
from lab.base.precisions import elem_bytes
from lab.base.splitk import AUTO, SPLITS, allowed_splits, nearest_split
from lab.base.timer import timer
from triton_kernels import _common as common
from triton_kernels._common import (SMEM_LIMIT, cdiv, dot_meta, launcher, offsets_meta,
                                    problem_args, scale_args)

PRECISIONS = ("bf16", "fp16", "fp8")
ELEM_BYTES = elem_bytes(*PRECISIONS)  # sizes from lab/base/precisions.py
# the registry's Triton parameters of this stage, then what resolve() adds: the `params` column
PARAM_ORDER = ("splitk", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
DEFAULTS = {"splitk": AUTO, "BLOCK_N": 0, "BLOCK_K": 0, "num_warps": 4, "num_stages": 3}
AUTO_BLOCK_N = 64  # BLOCK_N = 0: weight rows per program
AUTO_K_BYTES = 256  # BLOCK_K = 0: 256 bytes of a weight row per k-step
MAX_BLOCK_M = 64  # activation rows per program; more rows: groups of 64 along the grid
MIN_DOT = 16  # tl.dot's smallest tile edge
MIN_DOT_K = {"bf16": 16, "fp16": 16, "fp8": 32}  # ... along K (an 8-bit MMA's k is 32)
SWAP_AT = 64  # N <= SWAP_AT < M: compute C^T = B^T A^T
# the automatic split (module docstring)
TARGET_PER_SM = 4  # programs x splits aimed at this many per SM
MIN_SPLIT_STEPS = 4  # k-steps a split keeps at least
WORKSPACE_SHARE = 4  # the workspace is at most 1/WORKSPACE_SHARE of the weights' bytes
MAX_ACC = 128  # fp32 accumulators per thread (BLOCK_N x BLOCK_M / threads) validate() allows
REDUCE_BLOCK = 1024  # elements of C per program of the split's sum


@triton.jit
def decode_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, scale_a_ptr, scale_b_ptr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLITK: tl.constexpr,
                  EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                  OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # activation-row groups fastest (the programs of one weight tile side by side: L2 serves
    # their re-reads), then weight-row blocks, then the split
    pid_m = pid % grid_m
    pid_n = (pid // grid_m) % grid_n
    split = pid // (grid_m * grid_n)

    # This program's k-steps [kt0, kt1): its split's share (sizes differing by at most one). The
    # full ones are [kt0, full), then at most one partial step (none with EVEN_K).
    ktiles = tl.cdiv(K, BLOCK_K)
    kt0 = split * ktiles // SPLITK
    kt1 = (split + 1) * ktiles // SPLITK
    full = kt1 if EVEN_K else tl.maximum(tl.minimum(kt1, K // BLOCK_K), kt0)

    # Weight rows (columns of C) and activation rows wrapped onto real ones (never stored): no
    # mask in the loop.
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rk = kt0 * BLOCK_K + tl.arange(0, BLOCK_K)
    # w: B^T's tile, BLOCK_N x BLOCK_K (element (k, n) of B); a_t: A^T's, BLOCK_K x BLOCK_M
    w_ptrs = b_ptr + rn[:, None] * stride_bn + rk[None, :] * stride_bk
    a_ptrs = a_ptr + rk[:, None] * stride_ak + rm[None, :] * stride_am
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # C^T's tile
    for _ in range(kt0, full):
        w = tl.load(w_ptrs)
        a_t = tl.load(a_ptrs)
        if UPCAST:  # the interpreter's bf16 dot is wrong (triton_kernels/_common.py dot_meta)
            w, a_t = w.to(tl.float32), a_t.to(tl.float32)
        # the weights on the MMA's large side, the few activation rows on its small one
        acc = tl.dot(w, a_t, acc, input_precision=INPUT_PRECISION)
        w_ptrs += BLOCK_K * stride_bk
        a_ptrs += BLOCK_K * stride_ak
    if not EVEN_K:
        if full < kt1:  # K's ragged end (only in the program that owns the last step)
            in_k = tl.arange(0, BLOCK_K) < K - full * BLOCK_K
            w = tl.load(w_ptrs, mask=in_k[None, :], other=0.0)
            a_t = tl.load(a_ptrs, mask=in_k[:, None], other=0.0)
            if UPCAST:
                w, a_t = w.to(tl.float32), a_t.to(tl.float32)
            acc = tl.dot(w, a_t, acc, input_precision=INPUT_PRECISION)

    # The tile stored transposed: acc[n, m] is C[m, n]; rows and columns unwrapped, masked.
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if OFFSET64:
        cn, cm = cn.to(tl.int64), cm.to(tl.int64)
    if SPLITK > 1:  # this split's fp32 slab of the workspace (the launcher's strides: N, 1)
        c_ptr += split.to(tl.int64) * M * N
    elif scale_a_ptr is not None:  # fp8, unsplit: C = scale_a * scale_b * (A @ B), in fp32
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    tl.store(c_ptr + cn[:, None] * stride_cn + cm[None, :] * stride_cm,
             acc.to(c_ptr.dtype.element_ty), mask=(cn[:, None] < N) & (cm[None, :] < M))


@triton.jit
def decode_reduce_kernel(w_ptr, c_ptr, M, N, stride_cm, stride_cn, scale_a_ptr, scale_b_ptr,
                         SPLITK: tl.constexpr, BLOCK: tl.constexpr):
    """C = (W[0] + W[1] + ... + W[SPLITK-1]) (times scale_a * scale_b for fp8), each W[s] M x N
    row-major, summed in that order in fp32 and rounded once to C's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mn = tl.cast(M, tl.int64) * N  # (tl.cast: M == 1 arrives as a constant)
    mask = offs < mn
    acc = tl.load(w_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITK):  # a fixed order: the same bits every launch
        acc += tl.load(w_ptr + s * mn + offs, mask=mask, other=0.0)
    if scale_a_ptr is not None:  # fp8: the scales once, on the sum
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    i = offs // N
    j = offs % N
    tl.store(c_ptr + i * stride_cm + j * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def smem_bytes(bn: int, bm: int, bk: int, stages: int, precision: str) -> int:
    """Shared memory of the pipeline: num_stages tiles of w and a_t (Triton 3.9 compiled for
    sm_90: 61,440 bytes at 64 x 16 x 128 in bf16, 3 stages)."""
    return stages * (bn + bm) * bk * ELEM_BYTES[precision]


def swaps(M: int, N: int) -> bool:
    """Whether the launcher computes C^T = B^T A^T: few columns of C (N <= 64) and many rows."""
    return N <= SWAP_AT < M


def block_m(M: int) -> int:
    """Activation rows per program: the power of two at or above min(M, 64), at least 16."""
    return max(MIN_DOT, pow2_at_least(min(M, MAX_BLOCK_M)))


def auto_split(programs: int, K: int, BLOCK_K: int, M: int, precision: str,
               sms: int | None = None) -> int:
    """splitk = 0 (the module docstring's rule): the S among SPLITS that brings `programs` x S
    nearest TARGET_PER_SM x sms, every split at least MIN_SPLIT_STEPS k-steps of BLOCK_K, the
    workspace (S*M*N*4 bytes) at most 1/WORKSPACE_SHARE of the weights (N*K*elem bytes)."""
    target = TARGET_PER_SM * int(sms or DEFAULT_SMS)
    steps = cdiv(K, BLOCK_K)
    weight_bytes_per_n = K * ELEM_BYTES[precision]
    splits = [s for s in allowed_splits(SPLITS, steps, MIN_SPLIT_STEPS)
              if s == 1 or WORKSPACE_SHARE * s * M * 4 <= weight_bytes_per_n]
    return nearest_split(programs, target, splits)


def config(params, M: int, N: int, K: int, precision: str, sms: int = DEFAULT_SMS) -> dict:
    """The parameters as they are compiled and launched for C (M x N) = A (M x K) @ B (K x N):
    the registry's (automatic values made concrete) and BLOCK_M and `swapped`. With `swapped`
    the kernel's M and N are N and M (BLOCK_M runs along C's columns)."""
    out = {**DEFAULTS, **params}
    swapped = swaps(M, N)
    km, kn = (N, M) if swapped else (M, N)  # the kernel's rows of activations, rows of weights
    kmin = MIN_DOT_K[precision]
    bn = out["BLOCK_N"] or AUTO_BLOCK_N
    bk = out["BLOCK_K"] or AUTO_K_BYTES // ELEM_BYTES[precision]
    bn = min(bn, max(MIN_DOT, pow2_at_least(kn)))
    bk = min(bk, max(kmin, pow2_at_least(K)))
    bm = block_m(km)
    stages = out["num_stages"]
    while stages > 1 and smem_bytes(bn, bm, bk, stages, precision) > SMEM_LIMIT:
        stages -= 1  # a deep ring of a wide tile does not fit beside 64 activation rows
    out.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, swapped=swapped, num_stages=stages)
    if out["splitk"] == AUTO:
        programs = cdiv(km, bm) * cdiv(kn, bn)
        out["splitk"] = auto_split(programs, K, bk, km, precision, sms)
    return out


def resolve(params, M: int, N: int, K: int, precision: str, sms: int = DEFAULT_SMS) -> dict:
    """The contract's `resolve`: config()."""
    return config(params, M, N, K, precision, sms)


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order as they run, BLOCK_M, and
    swapped=1 where C^T = B^T A^T is computed."""
    keys = ("splitk", "BLOCK_M") + PARAM_ORDER[1:]
    text = ",".join(f"{k}={resolved[k]}" for k in keys if k in resolved)
    return text + (",swapped=1" if resolved.get("swapped") else "")


def _pow2(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def validate(params, precision: str | None = None) -> None:
    """Raise LabError (one sentence) for parameters this launcher does not take or a tile that
    cannot run: in `precision`, or in every precision when none is given. The accumulators are
    counted at 64 activation rows (the most BLOCK_M can be); the shared memory of one stage at
    16 (a deeper ring than fits is made shallower by config(), shown in the params column)."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        raise LabError(f"stage decode (triton) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)})")
    c = {**DEFAULTS, **params}
    where = "decode (Triton) with " + ", ".join(f"{k}={c[k]}" for k in PARAM_ORDER)
    if precision is not None and precision not in ELEM_BYTES:
        raise LabError(f"{where}: the precision must be one of {', '.join(ELEM_BYTES)}, not "
                       f"{precision}")
    splitk = c["splitk"]
    if not isinstance(splitk, int) or isinstance(splitk, bool) or splitk < 0:
        raise LabError(f"{where}: splitk must be 0 (chosen from the shape) or 1 or more")
    for name in ("BLOCK_N", "BLOCK_K"):
        if c[name] != 0 and not (_pow2(c[name]) and c[name] >= MIN_DOT):
            raise LabError(f"{where}: {name} must be 0 (automatic) or a power of two of at least "
                           f"16 (tl.dot's smallest tile)")
    if precision == "fp8" and c["BLOCK_K"] and c["BLOCK_K"] < MIN_DOT_K["fp8"]:
        raise LabError(f"{where} in fp8: BLOCK_K must be at least 32, the k of an 8-bit MMA")
    if not _pow2(c["num_warps"]):
        raise LabError(f"{where}: num_warps must be a power of two")
    if not isinstance(c["num_stages"], int) or isinstance(c["num_stages"], bool) \
            or c["num_stages"] < 1:
        raise LabError(f"{where}: num_stages must be a pipeline depth of 1 or more")
    bn = c["BLOCK_N"] or AUTO_BLOCK_N
    per_thread = bn * MAX_BLOCK_M // (32 * c["num_warps"])
    if per_thread > MAX_ACC:
        raise LabError(f"{where}: with 64 activation rows it gives each thread {per_thread} "
                       f"accumulators, more than the {MAX_ACC} that fit in its registers; raise "
                       f"num_warps or lower BLOCK_N")
    for prec in (precision,) if precision else PRECISIONS:
        bk = c["BLOCK_K"] or AUTO_K_BYTES // ELEM_BYTES[prec]
        smem = smem_bytes(bn, MIN_DOT, bk, 1, prec)
        if smem > SMEM_LIMIT:
            raise LabError(f"{where} in {prec}: one stage of its tile needs {smem // 1024} KiB "
                           f"of shared memory, more than an H100's 227 KiB; lower BLOCK_K or "
                           f"BLOCK_N")


def kernels(params, precision: str) -> tuple[str, ...]:
    """The kernel, and the split-K sum after it when K is split (or may be: splitk=0)."""
    split = {**DEFAULTS, **params}["splitk"]
    return ("decode_kernel",) + (("decode_reduce_kernel",) if split != 1 else ())


# tl.dot on the tensor cores: sm_80+ (_common.TL_DOT_REQUIRES), fp8 sm_89+ (its record)
OFFER = Offer("decode", "triton", precisions=PRECISIONS, kernels=kernels, validate=validate,
              resolve=resolve, show=show, requires={"all": (8, 0)})


def _swapped(p):
    """The same product as C^T = B^T A^T: a Problem whose A is B^T, whose B is A^T and whose C
    is C^T (views of the same memory, nothing copied; every stride exchanged)."""
    return replace(p, M=p.N, N=p.M, a=replace(p.b.transposed(), name="A"),
                   b=replace(p.a.transposed(), name="B"), c=replace(p.c.transposed(), name="C"),
                   swapped=True)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision and
    fp8's scales. launch.config is the configuration that runs and its text the row's `params`
    column; launch.workspace the split's slabs (S x M x N floats of the kernel's M x N)."""
    import torch

    cfg = config(params, p.M, p.N, p.K, p.precision, sm_count(p.c.tensor.device))
    q = _swapped(p) if cfg["swapped"] else p  # from here on, the kernel's problem
    bm, bn, bk, s = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["splitk"]
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLITK=s, EVEN_K=q.K % bk == 0,
                **dot_meta(decode_kernel, q), **offsets_meta(q), num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"])
    programs = cdiv(q.M, bm) * cdiv(q.N, bn)
    args = problem_args(q)
    scales = scale_args(q)
    text = show(cfg)
    if s == 1:
        out = launcher(decode_kernel, (programs,), (*args, *scales), **meta)
        out.resources = {**(out.resources or {}), "params": text}
        out.config = cfg
        return out

    clock = timer(p.c.tensor.is_cuda)
    work = torch.empty(s * q.M * q.N, dtype=torch.float32, device=q.c.tensor.device)
    setup_ms = clock.stop()
    # The sum's launcher first: lab.profile captures the last launcher() call of a prepare, and
    # the kernel to profile is the product.
    total = launcher(decode_reduce_kernel, (cdiv(q.M * q.N, REDUCE_BLOCK),),
                     (work, q.c.tensor, q.M, q.N, q.c.s0, q.c.s1, *scales), SPLITK=s,
                     BLOCK=REDUCE_BLOCK, num_warps=4)
    # the slabs row-major, q.M x q.N each: strides N and 1 in place of C's
    partials = launcher(decode_kernel, (s * programs,),
                        (args[0], args[1], work, *args[3:10], q.N, 1, *scales), **meta)
    # setup_reusable: the workspace is allocated once and every call rewrites all of it
    return Prepared.of_steps([partials, total],
                             resources={**(partials.resources or {}), "params": text},
                             setup_ms=setup_ms, workspace=work, config=cfg, setup_reusable=True)
