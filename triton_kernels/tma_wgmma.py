"""Stage tma_wgmma, Triton twin: TMA loads into swizzled shared memory, an mbarrier pipeline, and
wgmma with both operands in shared memory, in tf32, 3xtf32, bf16, fp16 and fp8.

CUDA stage: cuda_kernels/tma_wgmma.cu (tensor maps encoded on the host, one thread issuing every
TMA copy, a full/empty mbarrier pair per ring slot, wgmma reading A and B from shared memory).
Each program computes a BLOCK_M x BLOCK_N tile of C (128 x 256 by default in bf16/fp16, 8 warps:
two warpgroups of 64 rows): it builds a TMA descriptor for A and for B on the device
(tl.make_tensor_descriptor), loads each k-step's tiles with one descriptor load each (no pointer
arithmetic, no masks: the TMA unit fills what lies past an edge with zeros, K's tail included),
multiplies with tl.dot into an fp32 accumulator (input_precision as
triton_kernels/_common.py DOT_PRECISION), and writes C in its own dtype through a third
descriptor (a TMA store), or with a masked store where no descriptor can describe C.

Changed from stage wgmma's twin (triton_kernels/wgmma.py, pointer loads that Triton turns into
cp.async with masks): the loads are TMA descriptor loads, so the tiles arrive swizzled by the
copy engine and both operands stay in shared memory for wgmma (no A from registers, no regs_mn).
Bottleneck it attacks, as the CUDA stage: the issue slots and registers that address arithmetic,
bounds and cp.async cost the warps that should be issuing wgmma.

Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs in grouped order (GROUP_M
block-rows walked together, _common.grouped_block), num_warps warps, and about num_stages *
(BLOCK_M + BLOCK_N) * BLOCK_K * (element bytes) of shared memory for the ring (196,608 bytes at
the bf16 defaults: one program per SM); C's staging tile for the TMA store reuses the ring once
the loop is done, except a whole tf32 tile, which Triton 3.6 allocates before the ring is freed
(subtile, below; smem_bytes). Each launch also takes 128 bytes of global scratch per descriptor
per program for the device-side descriptors (_common.with_tma_scratch: the allocator set for
it).

What Triton does for you that the CUDA stage does by hand:
- TMA descriptors. tl.make_tensor_descriptor fills a 128-byte tensormap in every program
  (tensormap.replace on a shared-memory template: address, sizes, strides, box, swizzle), copies
  it to the global scratch (tensormap.cp_fenceproxy) and fences it for the TMA unit
  (fence.proxy.tensormap::generic.acquire). The CUDA stage encodes its maps once on the host
  (cuTensorMapEncodeTiled) and passes them as kernel parameters; it also prefetches them
  (prefetch.tensormap), which Triton 3.6 does not emit.
- mbarriers and the pipeline. num_stages makes Triton allocate a ring of num_stages tiles of A
  and B and one mbarrier per slot, issue the first num_stages - 1 k-steps' loads before the loop
  (mbarrier.arrive.expect_tx with the tiles' bytes, cp.async.bulk.tensor), and in the loop wait on
  the slot's phase (mbarrier.try_wait.parity) before its wgmma and reload the slot whose wgmma
  have retired. The CUDA stage writes both barriers of each slot, the phase bits and the
  producer thread's loop by hand.
- the swizzle. Triton picks each tile's shared layout (an NVMMA layout: a 128-byte swizzle for
  128-byte lines), writes it into the descriptor for the TMA unit and into wgmma's matrix
  descriptors; the CUDA stage fixes SWIZZLE_128B in both places itself.
- wgmma. tl.dot on two shared-memory tiles becomes wgmma.mma_async m64nNk16 (k8 for TF32, k32 for
  fp8) with both operands from shared memory, wgmma.fence / commit_group / wait_group around it,
  one group left in flight across the loop's back edge; a column-major operand (a transposed
  descriptor, the loaded tile's .T) is read with wgmma's transpose bit in 16-bit types.
- the epilogue: the accumulator goes to shared memory and out with one TMA store
  (cp.async.bulk.tensor global.shared, bulk_group commit/wait), clipped at C's edges; subtile=1
  splits it into two stores of BLOCK_M x BLOCK_N/2 (tl.split of the accumulator, a renaming of
  its registers), each with half the staging tile: with it a tf32 tile of 128 x 256 compiles to
  196,640 bytes of shared memory, without it to 327,712, more than an H100 block has.
What it cannot express: warp specialization (a producer warp that only issues TMA and consumer
warpgroups with setmaxnreg): tl.range(..., warp_specialize=True) is accepted by Triton 3.6 on
sm_90 and compiles to the same PTX as without it (checked for the persistent twin's loop; Triton
3.6 documents it for Blackwell only). Nor the wait depth of wgmma, which warps issue the TMA
copies (Triton elects one thread), the tensormap prefetch, or keeping the host's descriptors
(a descriptor built on the host, triton.tools.tensor_descriptor, holds its tensor inside an
object that lab.matmul's plans cannot replace; lab/plan.py). Nor a 3xTF32 product straight from
the ring: tl.dot's "tf32x3" splits each operand into a TF32 head and tail in registers, so both
tiles are read out of the ring (ttg.local_load), A's parts go to wgmma from registers, B's are
written back to shared memory, the ring is one slot shallower than num_stages (two at the
default 3), and each of the three wgmma is waited for before the next (Triton 3.6, compiled for
sm_90).

TF32 and the layout of the operands (kmajor). wgmma reads 32-bit shared operands K-major only (its
transpose bits exist for 16-bit types). Given an N-major B (row-major, layouts nn and tn) or an
M-major A (column-major, tn and tt) in tf32, Triton 3.6 still loads the tile by TMA in the
operand's own layout, then before each wgmma reads it into registers (ttg.local_load) and writes
it back K-major to a second shared buffer (ttg.local_alloc), and that operand's ring is one slot
shallower (the TTGIR, compiled for sm_90 without a GPU: tests/test_hopper_triton.py). kmajor=1
copies every operand that is not K-major into a K-major buffer (a row-major A, a column-major B)
at the start of every call, inside the timed call (realign_copy_kernel,
triton_kernels/_realign.py), so that both reach wgmma straight from the TMA ring; -1 (automatic)
is on for tf32 and 3xtf32 and off for bf16 and fp16, whose transposes wgmma reads for free. In
3xtf32 both tiles go through registers anyway (above): compiled with or without the copy, the
kernel has the same shared memory, registers and round trips, only the way each tile is read out
of shared memory differs; the copy stays on there because it made the difference in stage wgmma's twin, whose 3xTF32 path
also splits in registers: 68% of cuBLAS fp32's speed with an N-major B, 162% with its copy, at
4096^3 (for TF32: 20% of cuBLAS TF32 and 71%; triton_kernels/wgmma.py). This stage's own figures,
with kmajor=0 beside them, come from the GPU run (scripts/experiments/hopper_triton_sweep.py).

fp8 (float8 e4m3 A and B with per-tensor scales, a bfloat16 C: C = scale_a * scale_b * (A @ B)).
The tiles are loaded as they are, 1-byte elements (128 bytes of k: BLOCK_K = 128), and tl.dot
of two float8e4nv tiles is wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 with both
operands in shared memory (Triton 3.9 compiled for sm_90 without a GPU; a k-step of at least 32,
wgmma's k for 8-bit types, so BLOCK_K 16 is refused in fp8). Triton leaves tl.dot's
max_num_imprecise_acc at its sm_90 default (2^30: maxNumImpreciseAcc in the TTGIR), so the whole
sum over K stays in wgmma's own fp32 accumulator; Triton adds no partial sums into a second fp32
register set (a smaller value would make it do so every that many k). The two scales, one-element
fp32 tensors, are the kernel's scale_a_ptr and scale_b_ptr arguments (None in the other
precisions, which then compile to the PTX they had before fp8): loaded before the loop, their
product multiplies the fp32 accumulator, which is then rounded once to bf16 (C's staging tile is
bf16, 2 bytes an element: smem_bytes). Layout: wgmma reads 8-bit operands K-major only, like
32-bit ones, and given an M-major A or an N-major B in fp8 (kmajor=0) Triton does what it does in
tf32 (the tile read into registers and written back K-major before each wgmma, that operand's ring
one slot shallower: the TTGIR), so kmajor's automatic value is on in fp8 and such an operand is
copied K-major in every call, timed (realign_copy_kernel). Which costs less on the H100, the
copy or the round trip, has not been measured.

Operands a descriptor cannot read. A descriptor needs a unit last stride, a base address and a
line stride that are multiples of 16 bytes. A row-major operand is read as it is, a column-major
one through a descriptor of its transpose (block BLOCK_K x BLOCK_M for A, BLOCK_N x BLOCK_K for
B, then .T on the tile). Any other A or B -- a leading dimension that is not a multiple of 16
bytes (a contiguous bf16 7919 x 3001 A), an unaligned base, no unit stride -- is copied in every
call, timed, into a zeroed buffer whose lines are (triton_kernels/_realign.py tma_operands; the
same copy kernel as double_buffered's realign): the copy is what a caller holding such an operand
pays, as cuBLAS's slower kernel is what it pays there. launch.realigned names the operands copied.
64-bit offsets: TMA's addresses are 64-bit and its coordinates per dimension, so A and B past 2^31
elements need nothing else; the masked store of a C no descriptor describes takes OFFSET64
(its two strides made 64-bit).

Lesson and variant. The kernel below is written for the lesson's case: C row-major (its lines on
16 bytes), written whole by one TMA store, compiled (not under the interpreter). Any A and B
layout is in it (a descriptor of the transpose: one line each). A column-major C, a C no
descriptor describes (the masked store, OFFSET64), subtile (tf32's automatic value) and the
interpreter's bf16 upcast run the twin's former kernel, unchanged, in
triton_kernels/variants/tma_wgmma.py, under the same kernel name; TWIN.launch picks
(_common.lesson_or_variant, LESSON_CASE). Where the lesson runs it compiles to the variant's PTX,
instruction for instruction (tests/test_hopper_triton.py compares bf16, fp16, tf32, 3xtf32 and
fp8, every layout, two tiles and 4 warps), so nothing that ran before computes differently.

GPUs: sm_90 only (H100, H200): prepare() refuses another GPU in one sentence. Under the Triton
interpreter (CPU tensors, TRITON_INTERPRET=1) the descriptors are emulated, with the same 16-byte
rules checked, to check the numbers (TF32 and 3xTF32 computed in fp32 there, bf16 upcast:
_common.dot_meta; fp8 tiles decoded to fp16 by the interpreter's tl.dot and multiplied in fp32,
exactly, with the scales applied as on the GPU).

Knobs: BLOCK_M (128), BLOCK_N (0), BLOCK_K (0), GROUP_M (8), num_warps (8), num_stages (0),
kmajor (-1), subtile (-1). The automatic values (AUTO, per precision; resolve()):
    precision   BLOCK_N   BLOCK_K               num_stages   kmajor   subtile
    bf16, fp16  256       64 (128 bytes)        4            0        0
    tf32        256       32 (128 bytes)        4            1        1
    3xtf32      128       64 (256 bytes)        3            1        0
    fp8         256       128 (128 bytes)       4            1        0
the tile, k-step and depth are the tuned rows of stage wgmma's twin, which loads the same tiles
another way (its search on the H100, triton_kernels/wgmma.py), until this stage's own sweep
replaces them (fp8, which that twin does not offer: bf16's tile and bytes of k, a ring of 196,608
bytes, 196,640 compiled for sm_90; not yet measured); subtile is on where a whole C tile would not
fit (tf32). An automatic BLOCK_N is 128 where 256 would give fewer tiles than the GPU has SMs
(1025^3: 45 tiles for 132 SMs), and where the automatic values do not fit beside explicit ones
(num_warps=4: 256 accumulators per thread) they take FALLBACKS' (BLOCK_N 128, 3 stages).
"""

import triton
import triton.language as tl

from lab.base.entry import entry
from lab.base.device import sm_count
from triton_kernels import _common as common
from triton_kernels._common import TMA_C_BYTES, TMA_ELEM_BYTES, TmaTwin, dot_meta
from triton_kernels.variants import tma_wgmma as variant

STAGE = "tma_wgmma"
PARAM_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "kmajor",
               "subtile")
SWITCHES = ("kmajor", "subtile")
DEFAULTS = {"BLOCK_M": 128, "BLOCK_N": 0, "BLOCK_K": 0, "GROUP_M": 8, "num_warps": 8,
            "num_stages": 0, "kmajor": -1, "subtile": -1}
AUTO = {
    "bf16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor": 0, "subtile": 0},
    "fp16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor": 0, "subtile": 0},
    "tf32": {"BLOCK_N": 256, "BLOCK_K": 32, "num_stages": 4, "kmajor": 1, "subtile": 1},
    "3xtf32": {"BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3, "kmajor": 1, "subtile": 0},
    "fp8": {"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 4, "kmajor": 1, "subtile": 0},
}
FALLBACKS = ({"BLOCK_N": 128, "num_stages": 3},)


@triton.jit
def matmul_tma_wgmma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm, stride_cn,
                            scale_a_ptr, scale_b_ptr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                            INPUT_PRECISION: tl.constexpr):
    # The lesson's case: C row-major, written by one TMA store (stride_cm and stride_cn are the
    # variant's, whose masked store reads them; triton_kernels/variants/tma_wgmma.py)
    # grouped order (warptiling's, _common.grouped_block)
    pid_m, pid_n = common.grouped_block(tl.program_id(0), tl.cdiv(M, BLOCK_M),
                                        tl.cdiv(N, BLOCK_N), GROUP_M)
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    # A is M x K and B is K x N; a column-major one (A_T, B_T) is described as its transpose
    a_desc = common.tma_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = common.tma_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    if scale_a_ptr is not None:  # fp8: scale_a * scale_b, loaded before the loop
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # A plain loop over k-steps; num_stages makes Triton pipeline its TMA loads (the header)
    for k0 in range(0, K, BLOCK_K):
        # one TMA load per tile: no pointers, no masks (zeros past the edges); a column-major
        # operand's tile is loaded from its transpose and transposed back (.T: a view, which
        # wgmma reads with its transpose bit in 16-bit types)
        a = a_desc.load([k0, m0]).T if A_T else a_desc.load([m0, k0])
        b = b_desc.load([n0, k0]).T if B_T else b_desc.load([k0, n0])
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    if scale_a_ptr is not None:  # fp8: C = scale_a * scale_b * (A @ B), scaled in fp32
        acc = acc * scale
    c = acc.to(c_ptr.dtype.element_ty)  # C in its own dtype: the fp32 accumulator rounded
    # through shared memory and one TMA store (clipped at C's edges)
    c_desc = common.tma_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, False)
    c_desc.store([m0, n0], c)

def smem_bytes(c: dict, precision: str) -> int:
    """Shared memory of a concrete configuration: the ring (num_stages tiles of A and B) and C's
    staging tile for the TMA store (half of it with subtile). Triton 3.6 puts the staging tile
    in the ring's memory once the loop is done, except for a whole tf32 C, whose tile it
    allocates before the ring is freed: tf32's accumulator goes to the store with no operation
    between them (compiled for sm_90, 128 x 256 x 32, 4 stages: 327,712 bytes, and 196,640 with
    subtile, which is why subtile is on for tf32; 3xtf32 at 128 x 128 x 64, 3 stages: 196,640
    bytes with or without it)."""
    es = TMA_ELEM_BYTES[precision]
    ring = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * es
    # C's staging tile in C's dtype (fp8's is bf16)
    staging = c["BLOCK_M"] * c["BLOCK_N"] * TMA_C_BYTES[precision] // (2 if c["subtile"] else 1)
    return ring + staging if precision == "tf32" and not c["subtile"] else max(ring, staging)


# validate, resolve, show and the setup around the kernel, from the tables above (_common.TmaTwin)
TWIN = TmaTwin(STAGE, PARAM_ORDER, DEFAULTS, AUTO, FALLBACKS, SWITCHES, smem_bytes,
               kernels=("matmul_tma_wgmma_kernel", "realign_copy_kernel"))
resolve_config = TWIN.config  # (precision, params, M=None, N=None, sms=...): what runs
config_text = TWIN.show  # the configuration as the `params` column writes it
OFFER = TWIN.offer()


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The
    launch's `config` is the configuration that runs; `realigned` names the operands copied in
    each call (unaligned, or not K-major under kmajor). The lesson kernel above runs where C is
    row-major, whole and read through a descriptor, its variant elsewhere (_common.LESSON_CASE)."""
    s = TWIN.setup(p, params, sm_count)
    config = s.config
    return TWIN.launch(s, matmul_tma_wgmma_kernel, variant.matmul_tma_wgmma_kernel, (s.tiles,),
                       **s.meta, SUBTILE=bool(config["subtile"]),
                       **dot_meta(matmul_tma_wgmma_kernel, s.q), num_stages=config["num_stages"])
