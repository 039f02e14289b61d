"""Stage double_buffered, Triton twin: a software-pipelined fp32 GEMM (num_stages = 3).

CUDA stage: cuda_kernels/double_buffered.cu. Each program computes a BLOCK_M x BLOCK_N tile of C
(128 x 128 by default, 8 warps) with masked, zero-filled tile loads and
tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32, like cuBLAS fp32 (TF32 off).

What Triton does for you that the CUDA stage does by hand:
- double (multi-) buffering. The CUDA kernel allocates 2 or STAGES shared buffers, issues the
  copies of tile t+1 (or t+STAGES-1) before the FMAs of tile t, counts cp.async groups, waits and
  places one barrier per k-step, and every buffer reuse had to be argued race-free. Here the
  K loop is written as if it were synchronous (load, dot, advance), and `num_stages` asks Triton's
  software pipeliner to rewrite it: the loads that feed tl.dot become asynchronous copies into a
  ring of num_stages shared-memory buffers (cp.async on sm_80+, with masks turned into
  zero-fill; on sm_90 the pipeliner can also use TMA bulk copies where it proves the access
  pattern suits them), a prologue issues the first num_stages-1 tiles, each iteration waits for
  the oldest tile, computes on it and issues the copy num_stages-1 tiles ahead, and the
  barriers and the ring index arithmetic are generated. The CUDA stage's pipeline=cp_async with
  stages=S is the hand-written version of num_stages=S; its pipeline=regs (registers as the
  staging area) is what num_stages=1 plus manual prefetching would be, which Triton does not do.
  The shared memory this costs is num_stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 4 bytes (96 KiB
  at the defaults: the smem column of the resources reports what the compiled kernel uses).
- fragment double buffering: tl.dot's lowering reads the A and B fragments of the next k-slice
  from shared memory while the FMAs of the current one run (the compiler schedules the loads).
- the warp tiling and thread tiles, the shared layouts, vector loads where alignment is proven
  (hints as in triton_kernels/vectorized.py: VEC_A / VEC_B / VEC_C), and the grouped block order
  (GROUP_M, the CUDA stage's `group`: block_tile() in common.cuh).
Under the Triton interpreter (TRITON_INTERPRET=1, CPU mode) num_stages changes nothing: the
interpreter runs the K loop one step at a time in NumPy, with no shared memory and no copies to
overlap; only the numbers (and the launch parameters' validity) are checked there.

realign (default off; the variant file's). A 16-byte cp.async (or a 128-bit load) needs 4 floats
that are contiguous, start on a 16-byte boundary and lie under one mask value. With a row stride
that is not a multiple of 4 floats (K = 3001, N = 6007, 1025), a base pointer off a 16-byte
boundary (a view starting at element 1), or an operand size along its contiguous dimension that is
not a multiple of 4 (the edge mask then changes inside a float4), the hints cannot be given and
every copy is 4 bytes.
realign=True copies each A or B whose leading dimension is not a multiple of 16 elements, whose
base is not 16-byte aligned, or that has no unit stride, into a buffer (needs_realign,
realign_buffer: triton_kernels/_realign.py, shared with the warptiling twin):
  setup, once in prepare() (the variant's), outside the timing (launch.setup_ms): the buffer is
    allocated in the operand's own layout (a column-major operand stays column-major; one with no
    unit stride becomes row-major), its leading dimension rounded up to a multiple of 16 elements,
    its storage 16-byte aligned, and zeroed;
  timed, at the start of every call: buffer_view.copy_(operand) for each such operand, then the
    kernel on the buffers (the copies never write the padding, so it stays zero).
Operands that are already aligned are read where they are (launch.realigned names the copied
ones: (), ("A",), ("B",) or ("A", "B"); launch.kernel_only is the kernel alone, for a profiler).
The variant's kernel reads a buffer with its hint on (VEC_A / VEC_B) and PAD_A / PAD_B: along the
buffer's contiguous dimension its mask runs to the size rounded up to a multiple of 4, so that the
mask is constant per float4 whatever the size; what it reads past the size is the zero padding, the
value the mask would have filled in, and the C mask (M, N) is unchanged. Compiled for sm_90 without
a GPU (Triton 3.9, the default tile, 7919x6007x3001 and 1025^3, each of nn, nt, tn, tt; never
run): the K loop's copies go from 96 4-byte LDGSTS to 24 LDGSTS.E.BYPASS.128 (16-byte
cp.async.cg). The buffers without the rounded masks still gave 96 4-byte LDGSTS (nn,
7919x6007x3001): 3001 and 6007 are not multiples of 4.
The cost: each copy reads and writes its operand, 2 x 4 x M x K bytes of memory traffic for A and
2 x 4 x K x N for B (334 MB for both at 7919x6007x3001, 16.8 MB at 1025^3), against the GEMM's
2 x M x N x K flops. With both copied, the share of the call it adds is about
(4 x flop rate / copy bandwidth) x (1/M + 1/N): independent of K, and small when M and N are large
(the kernel reads A N/BLOCK_N times and B M/BLOCK_M times; the copy reads each once). So it pays on
large M and N, where the 16-byte copies save more in the kernel than that share; at 1025^3 the
share is about 7 times what it is at 7919x6007x3001. Its speed on the H100 is not measured yet.

Knobs: BLOCK_M, BLOCK_N, BLOCK_K (the tile; BLOCK_K up to 64), GROUP_M, num_warps (8: 256 threads,
64 accumulators per thread at 128 x 128), num_stages (2..5, default 3), realign (False / True).
Changed from warptiling's twin: the loads in the K loop are masked again (zero fill, as in the
vectorized twin), so that the loop is the plain load-dot-advance loop that Triton's pipeliner
rewrites into the ring of num_stages cp.async buffers above (the CUDA stage's double buffering,
by the compiler); warptiling's twin pipelines its unmasked loop the same way at num_stages = 3.
Bottleneck it attacks (as the CUDA stage): global-memory latency, hidden by copies in flight
during the FMAs.
The variant file (triton_kernels/variants/double_buffered.py) holds the former kernel unchanged
and under the same name, with PAD_A / PAD_B for realign's buffers; prepare() runs it when realign
is on, and this file's kernel otherwise, which compiles to the former kernel's PTX
(tests/test_lessons_triton_variants.py).
Layouts: all six strides (A, B and C may be row-major, transposed, offset or sliced views;
nothing is copied unless realign asks for it, and C never is); Triton specializes a stride equal
to 1 as a constant and one divisible by 16 as such, so each layout compiles its own kernel.
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs. With GROUP_M = 1 the order is
the other stages' (pid % grid_n is the column-block, pid // grid_n the row-block); with GROUP_M = g
the programs walk g block-rows column by column, so that the programs resident at one time share
g block-rows of A and a few block-columns of B in L2.
"""

import triton
import triton.language as tl

from lab.base.errors import LabError
from lab.base.contract import Offer
from lab.base.entry import entry
from triton_kernels import _common as common
from triton_kernels._common import SMEM_LIMIT, cdiv, launcher, offsets_meta, problem_args
from triton_kernels.variants import double_buffered as variant
from triton_kernels.vectorized import vec_hints

MAX_ACC = 128  # accumulators per thread (BLOCK_M*BLOCK_N / threads) that fit in registers


@triton.jit
def matmul_double_buffered_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                  stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                  GROUP_M: tl.constexpr,
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
    in_m = tl.max_constancy(in_m, [4, 1]) if VEC_A == "t" or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, 4]) if VEC_B == "n" or VEC_C == "n" else in_n

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Written as a plain loop: with num_stages > 1 the compiler pipelines it (module docstring).
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:  # K % 4 == 0: constant per float4 along k
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


def smem_bytes(BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, num_stages: int = 3,
               **_) -> int:
    """The pipeline's shared-memory ring: num_stages tiles of A and B (one at num_stages 0, 1)."""
    return max(1, num_stages) * (BLOCK_M + BLOCK_N) * BLOCK_K * 4


def validate(BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, num_warps: int = 8,
             num_stages: int = 3, **_) -> None:
    """Raise LabError (one sentence) for a configuration that cannot compile or would spill."""
    where = (f"double_buffered (Triton) with BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, "
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


# realign is the variant's (triton_kernels/variants/double_buffered.py)
OFFER = Offer("double_buffered", "triton", kernels=variant.kernels,
              validate=lambda params, precision: validate(**params))


@entry(OFFER)
def prepare(p, BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32, GROUP_M: int = 8,
            num_warps: int = 8, num_stages: int = 3, realign: bool = False,
            **_):
    """p: the shared description of the operands (lab/base/problem.py). realign launches the
    variant."""
    config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                  num_warps=num_warps, num_stages=num_stages, realign=realign)
    if realign:
        return variant.variant_launch(p, config)
    grid = (cdiv(p.M, BLOCK_M) * cdiv(p.N, BLOCK_N),)
    launch = launcher(matmul_double_buffered_kernel, grid, (*problem_args(p),), BLOCK_M=BLOCK_M,
                      BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                      EVEN_K=p.K % BLOCK_K == 0, **vec_hints(p), **offsets_meta(p),
                      num_warps=num_warps, num_stages=num_stages)
    launch.extra.update(realigned=(), kernel_problem=p)  # nothing copied (realign: the variant)
    return launch
