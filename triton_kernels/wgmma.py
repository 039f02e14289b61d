"""Stage wgmma, Triton twin: a pipelined tensor-core GEMM in tf32, 3xtf32, bf16 and fp16 whose
tl.dot Triton lowers to wgmma on the H100, with the choices wgmma's operand rules call for
(kmajor_b, regs_mn).

CUDA stage: cuda_kernels/wgmma.cu (wgmma.mma_async through inline PTX, A' from registers, B'
K-major in 128-byte-swizzled shared memory, a cp.async ring). This is the kernel and launcher
that were stage mma's Triton twin until the two instructions became two stages: the same
@triton.jit code, the same automatic values, the same rows of results/ (docs/stages/wgmma.md says
which). Each program computes a BLOCK_M x BLOCK_N tile of C (by default 128 x 256 or 128 x 128,
per precision and shape: Knobs below; 8 warps) with masked, zero-filled tile loads, an fp32
accumulator, tl.dot with the precision's input_precision (as in stage mma's twin:
triton_kernels/_common.py DOT_PRECISION), and C stored in its own dtype, the fp32 accumulator
rounded to bf16 / fp16 on store, like cuBLAS and the CUDA stage.
GPUs: sm_90 only (H100, H200), where Triton lowers tl.dot to wgmma; prepare() refuses another GPU
in one sentence (there Triton would emit another instruction: stage mma's twin is the mma.sync
one). Under the Triton interpreter (CPU tensors) it runs anywhere, to check the numbers.

What Triton does for you that the CUDA stage does by hand:
- the instruction. On the H100 (sm_90) Triton lowers tl.dot to wgmma, Hopper's asynchronous
  warpgroup MMA (4 warps issue one m64nNk16 operation that reads its operands from shared
  memory, or its A from registers), with the wgmma.fence / commit_group / wait_group around it;
  the CUDA stage writes each of these by hand (cuda_kernels/wgmma_ops.cuh).
- the shared layouts and the matrix descriptors: Triton picks a swizzled layout for each operand
  and builds the descriptors; the CUDA stage's 128-byte swizzle, its descriptor arithmetic and
  its A' fragment loads (ldmatrix, or 64-bit LDS for TF32 lines of M) are all generated.
- 3xTF32: input_precision="tf32x3" splits each fp32 operand into a TF32 head and tail and issues
  the three products, the CUDA stage's split for PREC_3XTF32.
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
regs_mn=1 (the TF32 default) needs no copy. wgmma takes its first operand either from shared
memory or from registers, and from registers any layout will do. So for an N-major B and a
K-major A (layout nn) the launcher computes C^T = B^T A^T (plan(), _swapped(): views, nothing
copied): B^T is the kernel's A, and A^T, K-major, its shared-memory B. The kernel rounds its A
tile to TF32 between the load and tl.dot (round_tf32: cvt.rn.tf32.f32, one SASS instruction,
F2FP.TF32.F32.PACK_B, on sm_90). An operation there makes Triton hand A to wgmma from registers
(RS wgmma). The rounding also makes that operand round to nearest instead of being truncated by
the tensor core. For an M-major A (tt, tn after kmajor_b's copy) no swap is needed: A goes
through registers as it is. On the H100, layout nn, with the tuned 128 x 256 tile:
84.6% / 82.1% of cuBLAS TF32 at 4096^3 / 8192^3, against 75.7% / 73.6% for the copy
(results/2026-11-23-h100/24-compare-triton-tf32-regs.csv). One wait is the cost of a race,
below (95.4% at 4096^3 without it, 23-*-no-wait.csv).
The race: Triton 3.6's pipeline lets up to three wgmma of a k-tile stay in flight across the
loop's back edge, and ptxas gives the next k-tile's A fragments the same registers. In the SASS,
the LDS of the next fragments writes registers that an HGMMA still in flight reads. One
configuration of the first search gave wrong elements of C. A script (since removed; see
scripts/experiments/README.md) ran it 40 times at 4096^3: 40 of 40 results differed from each
other and were refused (24-tf32-regs-race.log). So on sm_90 the kernel waits for every wgmma of
the previous k-tile (RS_WAIT: wgmma.wait_group 0) before it loads the fragments; with the wait, 0 of 40 differed.
Under the Triton interpreter (TRITON_INTERPRET=1, CPU mode) only the numbers are checked: the
interpreter multiplies in NumPy (TF32 and 3xTF32 are computed in fp32 there; bf16 tiles are
upcast to fp32 first, _common.dot_meta, because the interpreter multiplies bf16 as integers).

Knobs: BLOCK_M (128), BLOCK_N, BLOCK_K, GROUP_M (8), num_warps (8), num_stages, kmajor_b,
regs_mn. BLOCK_M x BLOCK_N is the tile of the product the kernel computes: of C^T when regs_mn
swaps (BLOCK_M then runs along C's columns). The
defaults of BLOCK_N (0), BLOCK_K (0), num_stages (0), kmajor_b (-1) and regs_mn (-1) mean "chosen
per precision"
(resolve(), the table AUTO), as the Triton searches on the H100 found them (the winners cached in
results/autotune.json under "NVIDIA H100 80GB HBM3|mma|triton|4096x4096x4096:a128|<precision>|nn"
and "...|8192x8192x8192:a128|...", 2026-11-22/23, searched while this kernel was stage mma's
Triton twin):
    precision   BLOCK_N   BLOCK_K                 num_stages   kmajor_b   regs_mn
    tf32        256       32 (128 bytes)          4            1          1
    3xtf32      128       64 (256 bytes)          3            1          0
    bf16, fp16  256       64 (128 bytes)          4            0          0
Every one of the eight winners (4 precisions x 4096^3, 8192^3) is this row of the table with
BLOCK_M=128, GROUP_M=8 and num_warps=8, except fp16 at 8192^3, which won with BLOCK_K=32 (the
tf32 winners were searched again with regs_mn=1, 2026-11-23: the same tile won, and kmajor_b
does nothing there, as nn with regs_mn copies nothing). kmajor_b stays on in tf32 for layout tn,
where neither operand is K-major: B is copied and A goes through registers. regs_mn does nothing
outside tf32 (16-bit operands may be M- or N-major in shared memory for wgmma; 3xTF32's split
runs on registers already). At
4096^3, results/2026-11-22-h100/32-mma-done.csv has the previous fixed defaults (128 x 128,
BLOCK_K 128 bytes, 3 stages, kmajor_b off: the plain `mma` rows) at 79.3 / 81.2 / 19.9 / 67.5%
of cuBLAS (bf16 / fp16 / tf32 / 3xtf32, the last of cuBLAS fp32) and exactly the configuration of
this table (the `mma:auto` rows) at 95.4 / 96.8 / 70.9 / 161.9%.
Two rules, both deterministic (resolve()):
- shape: a 128 x 256 tile leaves a small problem's GPU half empty (1025^3: 9 x 5 = 45 programs
  for 132 SMs), so when BLOCK_N is automatic and ceil(M/BLOCK_M) * ceil(N/256) is smaller than
  the SM count, BLOCK_N is 128 (1025^3: 81 programs, the tile the previous defaults ran at
  1025^3 in 32-mma-done.csv). The SM count is that of the GPU the operands are on; for CPU
  tensors (the interpreter) and lab.profile's meta tensors it is DEFAULT_SMS = 132, an H100
  SXM's (lab.base.device.sm_count).
- fit: where the tuned values would be refused next to the explicit values given (more than 128
  accumulators per thread, or a ring over 227 KiB: wgmma:num_warps=4, wgmma:num_stages=5, or
  wgmma:num_stages=4 in 3xtf32 with its 64-float BLOCK_K), every automatic value takes its previous
  fixed default instead (BLOCK_N 128, BLOCK_K 128 bytes, 3 stages), so a variant that ran before
  these defaults still runs, with the tile, k-step and depth it had then.
kmajor_b=1 copies an N-major B only (a K-major B is left alone, above). Explicit values always
win. validate() checks the automatic values as the values they stand for, in the precision given
or else in every precision, and its sentence names them ("BLOCK_N=0 (automatic: 256)"). The launch
carries the configuration that runs, resolved (launch.config; its text goes to the row's `params`
column through launch.resources), never the 0s.
Changed from stage mma's twin (triton_kernels/mma.py, the same tl.dot compiled to mma.sync): the
instruction Triton picks (wgmma, its default on sm_90), and the choices that instruction's operand
rules call for: kmajor_b (a K-major copy of B) and regs_mn (the operand that is not K-major from
registers), with per-precision automatic values tuned on the H100; in the kernel, the bounds of a
zero-padded copy (PAD_A / PAD_B, as double_buffered's realign) and regs_mn's rounding and wait. Bottleneck it attacks (as the
CUDA stage): mma.sync's rate and its fragment loads.
Layouts: all six strides (problem_args). Two copies may run in the call, before the kernel, both
timed: kmajor_b's K-major copy of an N-major B (by default in 3xtf32, and in tf32 for layout tn),
and the copy of an A or B whose lines 16-byte loads cannot read (_realign below: a row stride or a
length along the lines that is not a whole number of 16 bytes, such as a bf16 matrix of 3001
columns, or no unit stride) into a zero-padded buffer of 16-byte lines in its own layout
(triton_kernels/_realign.py realign_buffer, made once in prepare(); kmajor_b's buffer has such
lines too). The kernel reads such a buffer with 16-byte hints and, along its lines, up to the
length rounded up to 16 bytes (PAD_A / PAD_B, in the kernel's masks): its loads become 16-byte
cp.async into the pipeline's ring. Without the copy Triton 3.6 loads an operand with no 16-byte
hint one 2-byte element at a time (ld.global.b16 in the PTX for bf16) and does not pipeline it:
on an NVIDIA H200 the twin ran bf16 7919 x 6007 x 3001 at 15.9-68.7% of cuBLAS's own fallback
(docs/stages/wgmma.md).
Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs in grouped order (GROUP_M).
"""

from dataclasses import replace

import triton
import triton.language as tl

from lab.base.contract import Offer, Prepared
from lab.base.errors import LabError
from lab.base.precisions import elem_bytes
from lab.base.entry import entry
from lab.base.timer import timer
from lab.base.device import DEFAULT_SMS, sm_count
from triton_kernels import _common as common
from triton_kernels._common import (SMEM_LIMIT, cdiv, dot_meta, launcher, offsets_meta,
                                    problem_args)
from triton_kernels._realign import realign_buffer, realign_flags, with_copies
from triton_kernels.mma import vec_width_and_hints  # the alignment hints, as stage mma's twin

ELEM_BYTES = elem_bytes("tf32", "3xtf32", "bf16", "fp16")  # sizes from lab/base/precisions.py

# How round_tf32 rounds (the kernel's REGS_A): 0 not at all (A goes to the tensor cores from shared
# memory); 1 bit arithmetic (the Triton interpreter, which has no inline PTX); 2 cvt.rna.tf32.f32
# (sm_80-sm_89: ties away from zero); 3 cvt.rn.tf32.f32 (sm_90 and later: ties to even, one SASS
# instruction, F2FP.TF32.F32.PACK_B). All round to nearest and keep NaN and Inf as they are.
ROUND_NONE, ROUND_BITS, ROUND_RNA, ROUND_RN = 0, 1, 2, 3


@triton.jit
def round_tf32(x, HOW: tl.constexpr):
    """x (float32) rounded to the nearest TF32 value (10 mantissa bits), NaN and Inf kept."""
    bits = x.to(tl.int32, bitcast=True)
    if HOW == 1:
        # ties to even: add 0xfff plus the lowest kept bit, then clear the 13 dropped bits; an
        # exponent of all ones (Inf, NaN) is left alone (the add would carry a NaN into the sign)
        up = (bits + 0xFFF + ((bits >> 13) & 1)) & -8192
        bits = tl.where((bits & 0x7F800000) == 0x7F800000, bits, up)
    elif HOW == 2:
        bits = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [bits],
                                         dtype=tl.int32, is_pure=True, pack=1)
    else:
        bits = tl.inline_asm_elementwise("cvt.rn.tf32.f32 $0, $1;", "=r,r", [bits],
                                         dtype=tl.int32, is_pure=True, pack=1)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def matmul_wgmma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                        stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                        VEC: tl.constexpr, VEC_A: tl.constexpr, VEC_B: tl.constexpr,
                        VEC_C: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                        UPCAST: tl.constexpr, REGS_A: tl.constexpr = 0,
                        RS_WAIT: tl.constexpr = False, OFFSET64: tl.constexpr = False,
                        PAD_A: tl.constexpr = False, PAD_B: tl.constexpr = False):
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
    in_m = tl.max_constancy(in_m, [VEC, 1]) if VEC_A == "t" and not PAD_A or VEC_C == "t" else in_m
    in_n = tl.max_constancy(in_n, [1, VEC]) if VEC_B == "n" and not PAD_B or VEC_C == "n" else in_n
    # PAD_A / PAD_B: the operand is prepare()'s zero-padded copy of an operand whose lines 16-byte
    # loads cannot read (_realign below); along the copy's lines its mask runs to the size rounded
    # up to VEC (what it reads there is zero), constant per VEC elements. Without PAD each
    # operand's bounds are C's masks and K.
    a_in_m, b_in_n, k_a, k_b = in_m, in_n, K, K
    if PAD_A and VEC_A == "t":  # a column-major A: rows up to M rounded up to VEC
        a_in_m = tl.max_constancy(rm[:, None] < tl.cdiv(M, VEC) * VEC, [VEC, 1])
    if PAD_A and VEC_A == "n":  # a row-major A: k up to K rounded up to VEC
        k_a = tl.cdiv(K, VEC) * VEC
    if PAD_B and VEC_B == "n":  # a row-major B: columns up to N rounded up to VEC
        b_in_n = tl.max_constancy(rn[None, :] < tl.cdiv(N, VEC) * VEC, [1, VEC])
    if PAD_B and VEC_B == "t":  # a column-major B: k up to K rounded up to VEC
        k_b = tl.cdiv(K, VEC) * VEC

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Written as a plain loop: with num_stages > 1 the compiler pipelines it (double_buffered).
    for k0 in range(0, K, BLOCK_K):
        if RS_WAIT:
            # sm_90, A from registers: wait for every wgmma of the previous k-tile before this
            # k-tile's A fragments are written. Triton 3.6's pipeline leaves up to three of them
            # in flight across the loop's back edge, and ptxas gives the next k-tile's fragments
            # the same registers (LDS into registers an HGMMA in flight still reads: a race that
            # gave one wrong element of C in 4096^3 on the H100). Nothing uses the result.
            tl.inline_asm_elementwise("wgmma.wait_group.sync.aligned 0;\n\tmov.b32 $0, $1;",
                                      "=r,r", [rk], dtype=tl.int32, is_pure=False, pack=1)
        if EVEN_K:  # every k-step is full: only the M and N edges are masked
            a = tl.load(a_ptrs, mask=a_in_m, other=0.0)
            b = tl.load(b_ptrs, mask=b_in_n, other=0.0)
        else:  # K % VEC == 0 (or k_a, k_b rounded up) where A is row-major or B column-major
            in_k_a = k0 + rk[None, :] < k_a
            in_k_b = k0 + rk[:, None] < k_b
            in_k_a = tl.max_constancy(in_k_a, [1, VEC]) if VEC_A == "n" else in_k_a
            in_k_b = tl.max_constancy(in_k_b, [VEC, 1]) if VEC_B == "t" else in_k_b
            a = tl.load(a_ptrs, mask=a_in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=in_k_b & b_in_n, other=0.0)
        if UPCAST:  # the interpreter's bf16 dot is wrong (triton_kernels/_common.py)
            a, b = a.to(tl.float32), b.to(tl.float32)
        if REGS_A != 0:
            # TF32, A not K-major: an operation on A's tile between its load and tl.dot makes the
            # compiler hand A to wgmma from registers (wgmma's register operand may have any
            # layout; its shared-memory operands must be K-major in TF32). The operation is the
            # rounding to TF32 that the tensor core would otherwise do by truncation.
            a = round_tf32(a, REGS_A)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # C in its own dtype: the fp32 accumulator rounded on store
    tl.store(c_ptr + c_m[:, None] + c_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=in_m & in_n)


@triton.jit
def transpose_kernel(src_ptr, dst_ptr, R, C, stride_sr, stride_sc, stride_dr, stride_dc,
                     TILE: tl.constexpr, OFFSET64: tl.constexpr = False):
    """dst (C x R) = src (R x C)^T, one TILE x TILE tile per program: read along src's columns
    and written along dst's, both coalesced when those are the contiguous dimensions (the
    compiler moves the tile through shared memory to turn it; torch's copy_ of a transposed view
    reads one element per 32-byte sector instead). OFFSET64: 64-bit offsets, for a B past 2^31
    elements (_common.offsets_meta of the stage's problem)."""
    if OFFSET64:
        stride_sr, stride_sc, stride_dr, stride_dc = (
            tl.cast(stride_sr, tl.int64), tl.cast(stride_sc, tl.int64),
            tl.cast(stride_dr, tl.int64), tl.cast(stride_dc, tl.int64))
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, TILE)
    r = (pid // tiles_c) * TILE + tl.arange(0, TILE)
    c = (pid % tiles_c) * TILE + tl.arange(0, TILE)
    mask = (r[:, None] < R) & (c[None, :] < C)
    x = tl.load(src_ptr + r[:, None] * stride_sr + c[None, :] * stride_sc, mask=mask)
    tl.store(dst_ptr + c[:, None] * stride_dr + r[None, :] * stride_dc, tl.trans(x),
             mask=tl.trans(mask))


TRANSPOSE_TILE = 64

# The automatic values (BLOCK_N=0, BLOCK_K=0, num_stages=0, kmajor_b=-1) per precision: the Triton
# winners in results/autotune.json (see the module docstring).
AUTO = {
    "tf32": {"BLOCK_N": 256, "BLOCK_K": 32, "num_stages": 4, "kmajor_b": 1, "regs_mn": 1},
    "3xtf32": {"BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3, "kmajor_b": 1, "regs_mn": 0},
    "bf16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor_b": 0, "regs_mn": 0},
    "fp16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor_b": 0, "regs_mn": 0},
}
# regs_mn acts in TF32 only (REGS_PRECISIONS): 16-bit operands may be M- or N-major in shared
# memory for wgmma, and 3xTF32's split (tl.dot's "tf32x3") already runs on registers.
REGS_PRECISIONS = ("tf32",)
# ... and what they fall back to where the tuned ones would be refused next to the explicit values
# given: the previous fixed defaults (BLOCK_K: 128 bytes of k per row).
PREVIOUS = {"BLOCK_N": 128, "num_stages": 3}
AUTO_KMAJOR = -1  # kmajor_b's and regs_mn's automatic value (0 and 1 are explicit)
SMALL_GRID_BLOCK_N = 128  # BLOCK_N=0 when the tuned tile's grid has fewer programs than SMs
PARAM_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "kmajor_b",
               "regs_mn")


def _refusal(precision, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) -> str | None:
    """Why a concrete configuration (no automatic values left) cannot run in `precision`: the
    rest of validate()'s sentence, or None."""
    per_thread = BLOCK_M * BLOCK_N // (32 * num_warps)
    if per_thread > 128:
        return (f"gives each thread {per_thread} accumulators, more than the 128 that fit in its "
                f"registers next to the operands; raise num_warps or lower BLOCK_M/BLOCK_N")
    smem = num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * ELEM_BYTES[precision]
    if smem > SMEM_LIMIT:
        return (f"needs about {smem // 1024} KiB of shared memory in {precision}, more than an "
                f"H100's 227 KiB; lower num_stages, BLOCK_K or BLOCK_N")
    return None


def resolve(precision: str, BLOCK_M: int = 128, BLOCK_N: int = 0, BLOCK_K: int = 0,
            num_warps: int = 8, num_stages: int = 0, kmajor_b: int = AUTO_KMAJOR,
            M: int | None = None, N: int | None = None, sms: int = DEFAULT_SMS,
            regs_mn: int = AUTO_KMAJOR, **_) -> dict:
    """BLOCK_N, BLOCK_K, num_stages and kmajor_b with the automatic values made concrete for
    `precision`; explicit values stay as given. The automatic ones are the precision's tuned
    values (AUTO), with two rules:
    - shape: given the problem's M and N, BLOCK_N=0 is 128 instead of 256 when
      ceil(M/BLOCK_M) * ceil(N/256) < sms;
    - fit: if those values would be refused next to the explicit ones (more than 128 accumulators
      per thread, or more than 227 KiB of shared memory), every automatic value takes its
      previous fixed default instead (BLOCK_N 128, BLOCK_K 128 bytes, 3 stages), so a variant
      that ran before these defaults still runs (wgmma:num_warps=4, wgmma:num_stages=5).
    Without M and N, BLOCK_N=0 is the tuned value: the shape rule only narrows the tile, so what
    is valid without it is valid with it."""
    auto = AUTO[precision]
    bn = BLOCK_N or auto["BLOCK_N"]
    if (not BLOCK_N and M is not None and N is not None and bn > SMALL_GRID_BLOCK_N
            and cdiv(M, BLOCK_M) * cdiv(N, bn) < sms):
        bn = SMALL_GRID_BLOCK_N
    r = {"BLOCK_N": bn, "BLOCK_K": BLOCK_K or auto["BLOCK_K"],
         "num_stages": num_stages or auto["num_stages"]}
    if (not (BLOCK_N and BLOCK_K and num_stages)
            and _refusal(precision, BLOCK_M, num_warps=num_warps, **r)):
        r = {"BLOCK_N": BLOCK_N or PREVIOUS["BLOCK_N"],
             "BLOCK_K": BLOCK_K or 128 // ELEM_BYTES[precision],
             "num_stages": num_stages or PREVIOUS["num_stages"]}
    r["kmajor_b"] = int(bool(auto["kmajor_b"] if kmajor_b == AUTO_KMAJOR else kmajor_b))
    # outside TF32 regs_mn changes nothing: 0 there, so the tuner counts one build
    r["regs_mn"] = int(precision in REGS_PRECISIONS
                       and bool(auto["regs_mn"] if regs_mn == AUTO_KMAJOR else regs_mn))
    return r


def resolved_params(params: dict, M: int, N: int, K: int, precision: str = "bf16",
                    sms: int = DEFAULT_SMS) -> dict:
    """The tuner's identity of a configuration (lab.autotune.build_identity): `params` with the
    automatic values made concrete as prepare() would for an M x N problem on `sms` SMs, so that
    BLOCK_N=0 and the BLOCK_N it stands for are one candidate. (The layout is not known here: a
    TF32 problem that regs_mn swaps counts its grid as N x M in prepare(); the two counts differ
    only for a problem that is not square and small enough for the shape rule.)"""
    return {**params, **resolve(precision, **params, M=M, N=N, sms=sms)}


def block_k(BLOCK_K: int, precision: str) -> int:
    """BLOCK_K, with 0 meaning the precision's tuned k-step (AUTO: 64 bf16/fp16 elements or 32
    TF32, i.e. 128 bytes; 64 floats for 3xtf32), before resolve()'s fit rule."""
    return BLOCK_K or AUTO[precision]["BLOCK_K"]


def smem_bytes(BLOCK_M=128, BLOCK_N=0, BLOCK_K=0, num_stages=0, precision="bf16", num_warps=8,
               **_) -> int:
    """The pipeline's shared-memory ring: num_stages tiles of A and B (automatic values resolved
    without a shape)."""
    r = resolve(precision, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    return r["num_stages"] * (BLOCK_M + r["BLOCK_N"]) * r["BLOCK_K"] * ELEM_BYTES[precision]


def _pow2(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def _shown(name: str, value, resolved) -> str:
    return f"{name}={value}" + (f" (automatic: {resolved})" if value != resolved else "")


def validate(BLOCK_M=128, BLOCK_N=0, BLOCK_K=0, GROUP_M=8, num_warps=8, num_stages=0,
             kmajor_b=AUTO_KMAJOR, precision=None, regs_mn=AUTO_KMAJOR, **_) -> None:
    """Raise LabError (one sentence) for a configuration that cannot compile or would spill, in
    `precision` when given, else in every precision (the shared prepare() wrapper and lab.compare
    call it before the precision is known). The automatic values are checked as what they stand
    for there (resolve(): the tuned values, or the previous defaults where those do not fit; the
    shape rule only narrows BLOCK_N), and the sentence names them."""
    where = (f"wgmma (Triton) with BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, BLOCK_K={BLOCK_K}, "
             f"GROUP_M={GROUP_M}, num_warps={num_warps}, num_stages={num_stages}, "
             f"kmajor_b={kmajor_b}, regs_mn={regs_mn}")
    if precision is not None and precision not in ELEM_BYTES:
        raise LabError(f"{where}: the precision must be one of {', '.join(ELEM_BYTES)}, not "
                       f"{precision}")
    if not isinstance(kmajor_b, int) or kmajor_b not in (AUTO_KMAJOR, 0, 1):
        raise LabError(f"{where}: kmajor_b must be -1 (automatic: on for tf32 and 3xtf32), 0 or 1")
    if not isinstance(regs_mn, int) or regs_mn not in (AUTO_KMAJOR, 0, 1):
        raise LabError(f"{where}: regs_mn must be -1 (automatic: on for tf32), 0 or 1")
    tiles = (BLOCK_M, BLOCK_N or 16, BLOCK_K or 16)  # 0: automatic
    if not all(_pow2(t) and t >= 16 for t in tiles):
        raise LabError(f"{where}: BLOCK_M, BLOCK_N and BLOCK_K must be powers of two of at least "
                       f"16 (tl.dot's smallest tile; BLOCK_N and BLOCK_K may be 0: automatic)")
    if not _pow2(num_warps) or not isinstance(GROUP_M, int) or GROUP_M < 1:
        raise LabError(f"{where}: num_warps must be a power of two and GROUP_M at least 1")
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 0:
        raise LabError(f"{where}: num_stages must be 0 (automatic) or a pipeline depth of 1 or "
                       f"more")
    for prec in (precision,) if precision else ELEM_BYTES:
        r = resolve(prec, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
        why = _refusal(prec, BLOCK_M, r["BLOCK_N"], r["BLOCK_K"], num_warps, r["num_stages"])
        if why:
            raise LabError(f"wgmma (Triton) in {prec} with BLOCK_M={BLOCK_M}, "
                           f"{_shown('BLOCK_N', BLOCK_N, r['BLOCK_N'])}, "
                           f"{_shown('BLOCK_K', BLOCK_K, r['BLOCK_K'])}, num_warps={num_warps}, "
                           f"{_shown('num_stages', num_stages, r['num_stages'])} {why}")


def config_text(config: dict) -> str:
    """The configuration as the `params` column writes it: name=value,... in registry order."""
    return ",".join(f"{k}={config[k]}" for k in PARAM_ORDER if k in config)


def _kmajor(p):
    """If B is N-major: (the Problem with B pointed at a K-major buffer (B^T contiguous, its lines
    rounded up to 16 elements and zero-padded: _realign.realign_buffer, allocated here), the
    copy that fills it from B, for the timed call to run before the kernel); else (p, None)."""
    if not (p.b.row_major and p.b.cols > 1):
        return p, None
    b = p.b.tensor
    buf = realign_buffer(p.b, col_major=True)  # K x N, K-major
    bt = buf.tensor.t()  # N x K, row-major: what the transpose writes
    K, N = b.shape
    grid = (cdiv(K, TRANSPOSE_TILE) * cdiv(N, TRANSPOSE_TILE),)
    copy = launcher(transpose_kernel, grid, (b, bt, K, N, b.stride(0), b.stride(1), bt.stride(0),
                                             bt.stride(1)), TILE=TRANSPOSE_TILE,
                    **offsets_meta(p), num_warps=4)
    return replace(p, b=buf), copy


def _realign(p, padded: frozenset):
    """(the Problem with each A or B that 16-byte loads cannot read (vec_width_and_hints gives it no
    hint: lines off 16 bytes, a length along them that is not a whole number of 16 bytes, or no
    unit stride) pointed at a zeroed buffer of 16-byte lines in its own layout (realign_buffer,
    allocated here), {name: (buffer view, user tensor)}: the copies every call makes before the
    kernel (with_copies)). `padded` names the operands that are such buffers already (kmajor_b's
    copy). A line shorter than 16 bytes (B of a matrix-vector product) is left as it is: a
    16-byte load could not help it."""
    vec = 16 // p.a.tensor.element_size()
    hints = vec_width_and_hints(p)
    copies, buffers = {}, {}
    for attr in ("a", "b"):
        op = getattr(p, attr)
        along = op.rows if op.col_major else op.cols  # realign_buffer's lines run along this
        if op.name in padded or hints[f"VEC_{op.name}"] or along < vec:
            continue
        buf = realign_buffer(op)
        copies[op.name] = (buf.tensor, op.tensor)
        buffers[attr] = buf
    return replace(p, **buffers), copies


def _round_how(device) -> int:
    """round_tf32's HOW for tensors on `device`: bit arithmetic under the interpreter (CPU
    tensors), cvt.rn.tf32 from sm_90 on, cvt.rna.tf32 before."""
    import torch

    if device.type != "cuda":
        return ROUND_BITS
    return ROUND_RN if torch.cuda.get_device_capability(device)[0] >= 9 else ROUND_RNA


def _rs_wait(device) -> bool:
    """Whether the kernel must wait for the previous k-tile's wgmma before writing A's fragments
    (the RS_WAIT comment in matmul_wgmma_kernel): on sm_90, where tl.dot is wgmma."""
    import torch

    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9


def _swapped(p):
    """The same product as C^T = B^T A^T: a Problem whose A is B^T, whose B is A^T and whose C
    is C^T (views of the same memory, nothing copied)."""
    return replace(p, M=p.N, N=p.M, a=replace(p.b.transposed(), name="A"),
                   b=replace(p.a.transposed(), name="B"), c=replace(p.c.transposed(), name="C"),
                   swapped=True)


def plan(p, config: dict) -> tuple[bool, bool, bool]:
    """(copy_b, swap, regs_a) for problem p under a resolved configuration: whether to copy an
    N-major B K-major first (kmajor_b), whether to compute C^T = B^T A^T instead, and whether the
    kernel's A tile goes to the tensor cores from registers (regs_mn). In TF32 wgmma takes an
    operand that is not K-major only from registers, and only as its A; so with regs_mn:
    - B not K-major, A K-major (layout nn): swap, B^T is the kernel's A, fed from registers, and
      A^T its K-major B; nothing is copied;
    - A not K-major (tt; tn after kmajor_b's copy of B): A from registers;
    - both not K-major and kmajor_b off: swap, and the kernel's B (A^T) is left to the compiler.
    K-major here: A's rows (stride 1 along k) and B's columns (stride 1 along k)."""
    a_k, b_k = p.a.s1 == 1, p.b.s0 == 1
    if not config["regs_mn"]:
        return bool(config["kmajor_b"]) and not b_k, False, False
    if not b_k and (a_k or not config["kmajor_b"]):
        return False, True, True
    return not b_k, False, not a_k


def device_arch_of(device) -> str | None:
    """sm_XY of a CUDA device, or None for CPU tensors (the interpreter)."""
    import torch

    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _validate(params, precision: str | None = None) -> None:
    """The contract's `validate`: validate() with one sentence for a parameter this launcher does
    not take."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        raise LabError(f"stage wgmma (triton) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)})")
    validate(**params, precision=precision)


def kernels(params, precision: str) -> tuple[str, ...]:
    """The kernels one launch may run: the GEMM, the K-major copy of B where kmajor_b is on (for
    an N-major B), and the copy of an operand whose lines 16-byte loads cannot read."""
    r = resolve(precision, **params)
    return (("matmul_wgmma_kernel",) + (("transpose_kernel",) if r["kmajor_b"] else ())
            + ("realign_copy_kernel",))


OFFER = Offer("wgmma", "triton", precisions=tuple(ELEM_BYTES), kernels=kernels,
              validate=_validate, resolve=resolved_params, show=config_text,
              arch="sm_90a")  # tl.dot lowered to wgmma: sm_90 only (prepare() refuses others)


@entry(OFFER)
def prepare(p, BLOCK_M: int = 128, BLOCK_N: int = 0, BLOCK_K: int = 0, GROUP_M: int = 8,
            num_warps: int = 8, num_stages: int = 0, kmajor_b: int = AUTO_KMAJOR,
            regs_mn: int = AUTO_KMAJOR):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The
    launch's `config` is the configuration that runs, the automatic values resolved for this
    precision and shape."""
    precision = p.precision
    arch = device_arch_of(p.c.tensor.device)
    if arch is not None and arch != "sm_90":
        raise LabError(f"stage wgmma (triton) needs an sm_90 GPU (H100, H200), where Triton lowers "
                       f"tl.dot to wgmma, and this GPU is {arch}; use stage mma here")
    r = resolve(precision, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, kmajor_b, M=p.M,
                N=p.N, sms=sm_count(p.c.tensor.device), regs_mn=regs_mn)
    config = {"BLOCK_M": BLOCK_M, "BLOCK_N": r["BLOCK_N"], "BLOCK_K": r["BLOCK_K"],
              "GROUP_M": GROUP_M, "num_warps": num_warps, "num_stages": r["num_stages"],
              "kmajor_b": r["kmajor_b"], "regs_mn": r["regs_mn"]}
    copy_b, swap, regs_a = plan(p, config)
    clock = timer(p.c.tensor.is_cuda)  # setup: the buffers, allocated and zeroed once
    q, transpose_b = _kmajor(p) if copy_b else (p, None)
    q = _swapped(q) if swap else q
    padded = frozenset(("B",) if transpose_b is not None else ())
    q, copies = _realign(q, padded)
    setup_ms = clock.stop() if (copies or padded) else None
    if swap and q.M != p.M:  # the shape rule counts the swapped kernel's programs
        r = resolve(precision, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, kmajor_b,
                    M=q.M, N=q.N, sms=sm_count(p.c.tensor.device), regs_mn=regs_mn)
        config.update({k: r[k] for k in ("BLOCK_N", "BLOCK_K", "num_stages")})
    # the tile is the kernel's: swapped, its rows are C's columns (BLOCK_M runs along N)
    bk, bm, bn = config["BLOCK_K"], BLOCK_M, config["BLOCK_N"]
    grid = (cdiv(q.M, bm) * cdiv(q.N, bn),)
    launch = launcher(matmul_wgmma_kernel, grid, (*problem_args(q),), BLOCK_M=bm,
                      BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, EVEN_K=q.K % bk == 0,
                      # a buffer's hint is on, and PAD_* for its zero padding (_realign.py)
                      **{**vec_width_and_hints(q), **realign_flags(q, {*copies, *padded})},
                      **dot_meta(matmul_wgmma_kernel, q),
                      REGS_A=_round_how(q.a.tensor.device) if regs_a else ROUND_NONE,
                      RS_WAIT=regs_a and _rs_wait(q.a.tensor.device), **offsets_meta(q),
                      num_warps=num_warps, num_stages=config["num_stages"])
    # the row's `params` column is the configuration that ran (Row.set_resources copies it)
    resources = {**(launch.resources or {}), "params": config_text(config)}
    launch = with_copies(Prepared.of_steps([launch], resources=resources, config=config),
                         copies, setup_ms if transpose_b is None else None, q)
    if transpose_b is None:
        return launch
    # the copies are part of the timed call (cuBLAS gets no such help); kernel_only: the kernel
    # alone, for a profiler; the buffers are zeroed once and refilled by every call
    return Prepared.of_steps([transpose_b, launch], resources=resources,
                             kernel_only=launch.kernel_only or launch, config=config,
                             kernel_problem=q, setup_ms=setup_ms, setup_reusable=True,
                             realigned=launch.realigned)
