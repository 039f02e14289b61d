"""Stage warptiling, Triton twin: the best fp32 (IEEE) Triton GEMM of the ladder.

CUDA stage: cuda_kernels/warptiling.cu (block tile -> warp tile -> thread tile, by hand).
Changed from bank_conflicts' twin: the K loop loads without masks (rows and columns wrapped at
C's edges, the ragged last k-tile one masked step after the loop); the tile (128 x 128 x 32),
GROUP_M order and num_stages = 3 beside it are its tuning configuration.

What "warp tiling" means in Triton, i.e. what Triton does for you that the CUDA stage does by hand:
- The warp and thread tiles. A Triton program is one block tile (BLOCK_M x BLOCK_N of C); how the
  tile is split over num_warps warps and their 32 lanes is the layout the compiler gives the
  tl.dot accumulator. For fp32 with input_precision="ieee" (no tensor cores: IEEE FMAs, like
  for like with cuBLAS fp32) it lowers tl.dot to FFMAs on a blocked layout in which every thread
  owns BLOCK_M*BLOCK_N / (32*num_warps) accumulators (64 at the defaults, 128 x 128 over 8
  warps), and it loads each k's A and B fragments from shared memory into registers itself. The
  knobs a user has are num_warps and the tile shape. (num_warps=4 would give the CUDA stage's 128
  per thread, but compiled here for sm_90 (Triton 3.9) it takes 255 registers and 120 bytes of
  stack: spills; the default takes 190 and none.)
- Shared-memory staging, the transposed/swizzled layouts and the barriers, as in the earlier
  twins, and the 128-bit global loads wherever its alignment analysis (plus the VEC hints below)
  proves them legal.
- Software pipelining: with num_stages = s > 1 the compiler keeps s-1 k-tiles of A and B in
  flight (cp.async into a ring of s shared-memory buffers) while tl.dot works on the current one:
  the global-load latency that the CUDA stage leaves exposed at every k-tile. Default 3. (Under
  the interpreter num_stages does nothing.)
What this file adds over the vectorized twin (the "masks only on edges" GEMM):
- No masks in the K loop. Rows and columns past the edge of C are wrapped (rm % M, rn % N: they
  load real elements of A and B, whose products land in rows and columns of C that are never
  stored), and the loop runs over the full k-tiles only; the last, partial k-tile (K % BLOCK_K
  != 0) is one masked step after the loop (EVEN_K removes it at compile time). Only the store is
  masked. A masked load in the loop costs comparisons and selects every k-tile and, worse, keeps
  the pipeliner from using its unmasked cp.async path.
- GROUP_M rasterization: programs walk GROUP_M tile-rows column by column (common.cuh's
  block_tile(), Triton's tutorial order), so resident programs share A and B tiles in L2.
The variant file (triton_kernels/variants/warptiling.py) holds what this lesson leaves out, with
the former kernel unchanged and under the same name: split-K (splitk = S > 1: S copies of the tile
grid, each split's partial tile into a workspace, splitk_reduce_kernel's sum in a fixed order)
and realign (each A or B without 16-byte lines copied, in every call, into a zeroed buffer it
reads through PAD_A / PAD_B; the machinery is triton_kernels/_realign.py, shared with the
double_buffered twin, whose docstring gives the reasoning and the cost). splitk = 0 (the
registry's default) is the split lab/base/splitk.py's auto_tile_and_split() chooses from M, N, K, the
BLOCK_M x BLOCK_N tile and the GPU's SM count, the CUDA stage's rule (the variant's resolve();
S = 1 unless the tiles are fewer than the SMs and K is long; where it splits, a 64 x 64 tile of 4
warps if that pads less of C's edge). prepare() resolves it and runs the variant when the split is
more than 1 or realign is on, this file's kernel otherwise; for that case the two kernels compile
to the same PTX (tests/test_lessons_triton_variants.py). launch.config is the configuration that
runs and its text the row's `params` column, either way.
Knobs: BLOCK_M, BLOCK_N, BLOCK_K (default 128 x 128 x 32), GROUP_M (8), num_warps (8),
num_stages (3), splitk (shared with the CUDA stage; the other knobs are the Triton twin's own, so
a tuner can pick its tile apart from the CUDA one), realign (False / True).
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs (GROUP_M order; GROUP_M = 1 is
pid_n = pid % grid_n); split-K: splitk times that, and the reduction a 1-D grid of
ceil(M*N / 1024).
Bottleneck it attacks: latency (pipelining), instruction overhead in the loop (no masks), L2
reuse (GROUP_M); split-K: idle SMs when M x N has few tiles (320x192x786432).
"""

import triton
import triton.language as tl

from lab.base.errors import LabError
from lab.base.contract import Offer
from lab.base.entry import entry
from lab.base.device import sm_count
from lab.base.splitk import AUTO
from triton_kernels import _common as common
from triton_kernels._common import SMEM_LIMIT, cdiv, launcher, offsets_meta, problem_args
from triton_kernels.variants import warptiling as variant
from triton_kernels.vectorized import vec_hints

MAX_ACC = 128  # accumulators per thread (BLOCK_M*BLOCK_N / threads) that fit in registers


@triton.jit
def matmul_warptiling_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                             stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                             VEC_A: tl.constexpr, VEC_B: tl.constexpr, VEC_C: tl.constexpr,
                             EVEN_K: tl.constexpr, OFFSET64: tl.constexpr = False):
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

    # The rows of A and columns of B this tile reads, wrapped at the edges of C: never out of
    # bounds, so no masks in the loop (the wrapped rows and columns of the result are not stored).
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    # Where an operand runs along m or n (a transposed A, a row-major B) the wrap is at a multiple
    # of 4 (the flag promises M % 4 == 0 or N % 4 == 0): rm and rn are aligned runs of 4, and the
    # loads can be 128-bit.
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

    # The k-tiles [0, kt1): the full ones [0, full), then at most one partial (none with EVEN_K).
    # (full is K // BLOCK_K, written as the variant's split-K kernel computes it for split 0 of 1,
    # so that the two compile to the same PTX.)
    kt1 = tl.cdiv(K, BLOCK_K)
    full = kt1 if EVEN_K else tl.maximum(tl.minimum(kt1, K // BLOCK_K), 0)
    a_ptrs = a_ptr + a_m[:, None] + a_k[None, :]
    b_ptrs = b_ptr + b_k[:, None] + b_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, full):  # no masks: pipelined with cp.async when num_stages > 1
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        if full < kt1:  # the ragged end of K
            k_left = K - full * BLOCK_K
            in_k_a = rk[None, :] < k_left
            in_k_b = rk[:, None] < k_left
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
    c_m, c_n = rm * stride_cm, rn * stride_cn
    c_m = tl.multiple_of(c_m, 4) if VEC_C == "n" else c_m
    c_n = tl.multiple_of(c_n, 4) if VEC_C == "t" else c_n
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc, mask=mask)


def smem_bytes(BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, num_stages: int = 3,
               **_) -> int:
    """The pipeline's shared-memory ring: num_stages tiles of A and B (one at num_stages 0, 1)."""
    return max(1, num_stages) * (BLOCK_M + BLOCK_N) * BLOCK_K * 4


def validate(BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, num_warps: int = 8,
             num_stages: int = 3, splitk: int = 1, **_) -> None:
    """Raise LabError (one sentence) for a combination Triton cannot compile well on an H100."""
    where = (f"warptiling (Triton) with BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, "
             f"BLOCK_K={BLOCK_K}, num_warps={num_warps}, num_stages={num_stages}")
    smem = smem_bytes(BLOCK_M, BLOCK_N, BLOCK_K, num_stages)
    if smem > SMEM_LIMIT:
        raise LabError(f"{where} needs about {smem // 1024} KiB of shared memory, more than an "
                       f"H100's 227 KiB; lower num_stages or BLOCK_K")
    per_thread = BLOCK_M * BLOCK_N // (32 * num_warps)
    if per_thread > MAX_ACC:
        raise LabError(f"{where} gives each thread {per_thread} accumulators, more than the "
                       f"{MAX_ACC} that fit in registers; raise num_warps or lower BLOCK_M or "
                       f"BLOCK_N")
    variant.validate_split(splitk)  # split-K is the variant's


# split-K, realign and the automatic split are the variant's (triton_kernels/variants/warptiling.py)
OFFER = Offer("warptiling", "triton", kernels=variant.kernels, **variant.SPLIT_K,
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, GROUP_M: int = 8,
            num_warps: int = 8, num_stages: int = 3, splitk: int = AUTO, realign: bool = False,
            **_):
    """p: the shared description of the operands (lab/base/problem.py). splitk=0: the split for this
    problem and this GPU (the variant's configure()); a split of more than 1, or realign, runs the
    variant. launch.config is the configuration that runs and its text the row's `params`
    column."""
    config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                  num_warps=num_warps, num_stages=num_stages, realign=realign)
    config = variant.configure(p, splitk, config, sm_count(p.c.tensor.device))
    if config["splitk"] != 1 or realign:  # split-K or realign: the variant
        return variant.variant_launch(p, config)
    grid = (cdiv(p.M, BLOCK_M) * cdiv(p.N, BLOCK_N),)
    launch = launcher(matmul_warptiling_kernel, grid, (*problem_args(p),), BLOCK_M=BLOCK_M,
                      BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                      EVEN_K=p.K % BLOCK_K == 0, **vec_hints(p), **offsets_meta(p),
                      num_warps=num_warps, num_stages=num_stages)
    launch.extra.update(realigned=(), kernel_problem=p)  # nothing copied (realign: the variant)
    return variant.labelled(launch, config)
