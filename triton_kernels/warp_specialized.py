"""Stage warp_specialized, Triton twin, written in Gluon (triton.experimental.gluon, Triton 3.6):
a producer partition that only issues TMA loads into an mbarrier ring, a consumer partition of
two warpgroups that only issues wgmma, registers moved from the first to the second
(setmaxnreg), in tf32, bf16, fp16 and fp8.

CUDA stage: cuda_kernels/warp_specialized.cu (warpgroup 0 the producer, one thread of it issuing
every TMA copy into a 4-slot ring with a full/empty mbarrier pair per slot; CONSUMERS = 2
warpgroups issuing wgmma; setmaxnreg.dec to 40 / .inc to 232).

Why Gluon. Plain Triton cannot say this: tl.range(..., warp_specialize=True) is accepted by
Triton 3.6 on sm_90 and compiles to the same PTX as without it (documented for Blackwell only;
triton_kernels/tma_wgmma.py). Gluon, Triton's lower-level language that ships with Triton 3.6,
takes the partitions, the shared memory, the barriers and wgmma as explicit operations and lowers
gl.warp_specialize on Hopper (its tutorial 08-warp-specialization: "supported on Hopper and
newer GPUs"). Compiled for sm_90 (tests/test_warp_specialized_triton.py, without a GPU): 12 warps
(384 threads, as the CUDA stage), setmaxnreg.dec to 24 in the producer's warpgroup and .inc to
240 in the consumers', the TMA loads (cp.async.bulk.tensor) only in the producer's code and
wgmma only in the consumers' (the same with Triton 3.9).

Changed from stage tma_wgmma's twin (triton_kernels/tma_wgmma.py, one tl.dot loop that Triton
pipelines itself): who waits for what, as in the CUDA stage. The producer waits only on `empty`
slots and fills them, the consumers only on `full` slots; neither role's waits sit in the other's
instruction stream. Bottleneck it attacks: the loads' issue and their waits in the warps that
should be issuing wgmma.

Launch: a 1-D grid of ceil(M/BLOCK_M) * ceil(N/BLOCK_N) programs in grouped order (GROUP_M
block-rows walked together, _common.grouped_block), num_warps consumer warps (8: two
warpgroups of 64 rows at BLOCK_M = 128) plus one producer warp, which Triton rounds to a
warpgroup (12 warps in all), num_stages ring slots of (BLOCK_M + BLOCK_N) * BLOCK_K elements
(196,608 bytes at the bf16 defaults: one program per SM) and 2 * num_stages mbarriers; C's
staging tile for the TMA store shares the ring's memory (Gluon allocates it after the ring's
last use: 196,788 bytes in all, compiled, in bf16 and in tf32), so no tile needs tma_wgmma's
subtile. 128 bytes of global scratch per descriptor per program, as tma_wgmma
(_common.with_tma_scratch).

What Triton does for you here, and what it does not: Gluon is the part of Triton in which the
pipeline is yours to write. What Gluon made us write by hand (what tl.dot and num_stages did in
tma_wgmma's twin):
- the ring: gl.allocate_shared_memory of num_stages tiles of A and of B in the descriptor's
  layout (NVMMASharedLayout.get_default_for: a 128-byte swizzle for 128-byte lines), and two
  mbarriers per slot, initialized with a count of 1;
- the producer (_producer): per k-step, wait for the slot's empty barrier at the phase before
  (mbarrier.wait, parity ((i // num_stages) & 1) ^ 1, which a fresh barrier passes), arm the full
  barrier with the tiles' bytes (mbarrier.expect), and issue the two TMA copies into the slot
  (tma.async_copy_global_to_shared, which Triton 3.9 names async_load);
- the consumers (_consumers): per k-step, wait for the slot's full barrier, wgmma on the two
  shared tiles (warpgroup_mma, is_async; a column-major operand as a permuted view of its
  tile, read with wgmma's transpose bit), keep one group in flight (warpgroup_mma_wait(1)) and
  release the previous k-step's slot (mbarrier.arrive on its empty barrier);
- the accumulator's register layout (NVMMADistributedLayout version 3: which warp holds which
  rows, the wgmma instruction's N), and C's store: the accumulator into a staging tile in
  shared memory, fence_async_shared, one TMA store, store_wait; or a masked store;
- the partitions: gl.warp_specialize([(consumers, ...), (producer, ...)], [1], [24]): the
  producer gets 1 warp and 24 registers a thread (the fewest setmaxnreg takes).
What Gluon still did for us:
- TMA descriptors built on the device (tma.make_tensor_descriptor: tensormap.replace, the copy
  to global scratch and its fence, as tl.make_tensor_descriptor in tma_wgmma's twin);
- the election of the one thread that issues each TMA copy (elect.sync) and arms each barrier;
- the consumers' release: before the one thread's mbarrier.arrive (and before each wait on a
  full barrier) Triton puts a barrier of the 256 consumer threads (bar.sync 0, 256 in the
  compiled PTX, twice per k-step), so both warpgroups have retired the slot's wgmma before it is
  released; the CUDA stage has each consumer warp arrive on its own (a count of 8) instead of
  waiting for the other warpgroup;
- the register split: from the requested 24, Triton computes the consumers' share (240) and
  emits setmaxnreg in each partition, and runs the code after the partitions (C's store) in the
  consumers' warps;
- the swizzle, written into the descriptors and into wgmma's matrix descriptors alike;
- wgmma's instruction sequence (wgmma.fence, m64nNk16, k8 for TF32 or k32 for fp8, commit_group,
  wait_group).
What it does not do here: a 3xTF32 product (warpgroup_mma takes tf32, the 16-bit types or fp8; the
split into a head and a tail is tl.dot's, so 3xtf32 is not offered), a tensormap prefetch, or
keeping descriptors made on the host (as tma_wgmma's twin: lab.matmul's plans replay plain
tensors). Gluon kernels do not run under the Triton interpreter: prepare() on CPU tensors is
refused in one sentence, and the numbers are checked on the GPU only.

TF32, fp8 and the layout of the operands (kmajor): wgmma reads 32-bit and 8-bit shared operands
K-major only, and this kernel has no round trip through registers to transpose a tile (Triton
writes one for tl.dot); so in tf32 and fp8 every operand that is not K-major (a column-major A, a
row-major B) is copied K-major in every call, timed (kmajor, on for tf32 and fp8: 0 is refused
there), as tma_wgmma's twin does by default. In bf16 and fp16 any layout is read as it lies
(kmajor 0), or copied (kmajor 1).

fp8 (e4m3 A and B with per-tensor scales, a bf16 C = scale_a * scale_b * (A @ B)): warpgroup_mma
on two float8e4nv tiles is wgmma ...m64n256k32.f32.e4m3.e4m3 (an instruction k of 32:
instr_shape's 256 // 8), and its max_num_imprecise_acc, left at the sm_90 default (2^30, as
tl.dot's), keeps the whole K in wgmma's fp32 accumulator. The scales (scale_a_ptr, scale_b_ptr:
one-element fp32 tensors; None in the other precisions, which compile as before) are loaded by
the consumers after the partitions, and their product multiplies the accumulator before its one
rounding to bf16; C's staging tile is bf16 (smem_bytes).

Operands a descriptor cannot read (lines or base off 16 bytes, no unit stride) are copied in every
call, timed, into aligned buffers, and a C no descriptor describes is written by a masked store
(with OFFSET64 past 2^31 elements): triton_kernels/_realign.py tma_operands / tma_layout, as in
tma_wgmma's twin.

Lesson and variant. The kernel below is written for the lesson's case, C row-major through one
TMA store (any A and B layout: the descriptor of a transpose and wgmma's transpose bit, one line
each); a column-major C and a C no descriptor describes (the masked store, OFFSET64) run the
twin's former kernel, unchanged, in triton_kernels/variants/warp_specialized.py under the same
name (_common.LESSON_CASE). The scaffolding that is one idiom each is _common's (its Gluon
section): the descriptor and its swizzled layout (gl_descriptor), the TMA copies' names
(gl_tma_load), a ring's full/empty mbarrier pairs (ring_barriers, as tma_tiles.cuh's init_ring
in the CUDA stage), the store of a register tile through a staging tile, a fence and one TMA
store (gl_tma_store_tile: what a tl descriptor's .store is) and wgmma's accumulator layout
(wgmma_layout). Where the lesson runs it compiles to the former kernel's PTX, instruction for
instruction (tests/test_warp_specialized_triton.py: bf16, fp16, tf32 and fp8, every layout, a
64 x 128 tile, 4 consumer warps).
The step from tma_wgmma's twin is about 90 changed code lines (python -m lab.lesson --stat), the
CUDA step 49: the CUDA stages are one language, the twins two. What no sharing can remove is
what Gluon makes a kernel write that tl.dot and num_stages did: the producer partition (12 lines:
the empty-barrier wait, expect, two TMA copies), the consumer partition (15: the full-barrier
wait, wgmma, its wait, the release), the ring's allocation and gl.warp_specialize (10), and the
kernel's signature and program id in gl. (about 9 lines, each one Gluon's spelling of a tl line),
against tma_wgmma's 9-line k-loop and store; plus the launcher's real differences (no subtile and
no 3xtf32, the producer's warps and registers, LIMITS).

GPUs: sm_90 only (H100, H200): prepare() refuses another GPU in one sentence.

Knobs: BLOCK_M (128), BLOCK_N (0), BLOCK_K (0), GROUP_M (8), num_warps (8: the consumers; the
producer's warp is added), num_stages (0), kmajor (-1). The automatic values (AUTO, per
precision; resolve()):
    precision   BLOCK_N   BLOCK_K          num_stages   kmajor
    bf16, fp16  256       64 (128 bytes)   4            0
    tf32        256       32 (128 bytes)   4            1
    fp8         256       128 (128 bytes)  4            1
the CUDA stage's tile and ring (BM 128 = 2 consumer warpgroups, BN 256, 4 slots of 128-byte
k-steps; fp8's ring 196,608 bytes, 196,788 compiled for sm_90 with the barriers), until this
stage's own sweep (scripts/experiments/hopper_triton_sweep.py) replaces them. An automatic BLOCK_N
is 128 where 256 would give fewer tiles than the GPU has SMs, and where the automatic values do not
fit beside explicit ones they take FALLBACKS' (BLOCK_N 128, 3 stages).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)

from lab.base.entry import entry
from lab.base.device import sm_count
from triton_kernels import _common as common
from triton_kernels._common import KMAJOR_ONLY, TMA_C_BYTES, TMA_ELEM_BYTES, TmaTwin
from triton_kernels.variants import warp_specialized as variant

STAGE = "warp_specialized"
PARAM_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "kmajor")
SWITCHES = ("kmajor",)
DEFAULTS = {"BLOCK_M": 128, "BLOCK_N": 0, "BLOCK_K": 0, "GROUP_M": 8, "num_warps": 8,
            "num_stages": 0, "kmajor": -1}
AUTO = {
    "bf16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor": 0},
    "fp16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "kmajor": 0},
    "tf32": {"BLOCK_N": 256, "BLOCK_K": 32, "num_stages": 4, "kmajor": 1},
    "fp8": {"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 4, "kmajor": 1},
}
FALLBACKS = ({"BLOCK_N": 128, "num_stages": 3},)
PRODUCER_WARPS = 1  # one warp issues the TMA copies (Triton rounds the kernel to warpgroups)
PRODUCER_REGS = 24  # registers per producer thread: the fewest setmaxnreg takes
BARRIER_BYTES = 1024  # the mbarriers and the 1024-byte alignment of the swizzled ring, at most
# this kernel's own limits beside the TMA twins' (_common.limit_refusal), each with its reason
# (num_stages: the consumers release a slot one k-step late, so one slot would never be refilled)
LIMITS = {"num_warps": ((4, 8), "the consumer warpgroups; the producer's warp is added"),
          "min_stages": (2, "a ring of one slot would never be refilled"),
          "rows_per_warp": (32, "rows per consumer warp (2 wgmma row-blocks)"),
          "kmajor_only": (KMAJOR_ONLY, "this kernel has no transposing round trip")}

@gluon.jit
def _producer(a_desc, b_desc, a_ring, b_ring, full, empty, m0, n0, K, BLOCK_K: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, STAGES: gl.constexpr):
    """The producer partition (one warp): fill slot i % STAGES with k-step i once the consumers
    have released it."""
    tile_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for i in range(gl.cdiv(K, BLOCK_K)):
        s = i % STAGES
        # a fresh barrier counts as having completed the phase before phase 0: the first pass
        # over the ring does not wait
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        bar = full.index(s)
        mbarrier.expect(bar, tile_bytes)  # the full barrier completes when these bytes land
        k0 = i * BLOCK_K
        # a column-major operand (A_T, B_T) is loaded from its transpose's descriptor
        common.gl_tma_load(a_desc, [k0, m0] if A_T else [m0, k0], bar, a_ring.index(s))
        common.gl_tma_load(b_desc, [n0, k0] if B_T else [k0, n0], bar, b_ring.index(s))


@gluon.jit
def _consumers(a_ring, b_ring, full, empty, K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               BLOCK_K: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
               STAGES: gl.constexpr, num_warps: gl.constexpr):
    """The default partition (num_warps warps, the consumer warpgroups): wgmma on each slot as it
    fills, one wgmma group left in flight, the previous slot released. Returns the fp32
    accumulator in wgmma's register layout."""
    layout: gl.constexpr = common.wgmma_layout(BLOCK_M, BLOCK_N, num_warps, a_ring.dtype)
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=layout)
    for i in range(gl.cdiv(K, BLOCK_K)):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        # the tile of A^T (B^T), read as A (B) through wgmma's transpose bit
        a = a_ring.index(s).permute((1, 0)) if A_T else a_ring.index(s)
        b = b_ring.index(s).permute((1, 0)) if B_T else b_ring.index(s)
        # fp32 operands go in as TF32 (the compile option default_dot_input_precision)
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc, a, b = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
        # k-step i-1's wgmma have retired: its slot goes back to the producer
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    return (acc,)


@gluon.jit
def matmul_warp_specialized_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm,
                                   stride_cn, scale_a_ptr, scale_b_ptr, BLOCK_M: gl.constexpr,
                                   BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                                   GROUP_M: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
                                   STAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                                   PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    # The lesson's case: C row-major, written by one TMA store (stride_cm and stride_cn are the
    # variant's, whose masked store reads them; triton_kernels/variants/warp_specialized.py)
    # a @triton.jit function of scalars, inlined into the Gluon kernel as into a Triton one
    pid_m, pid_n = common.grouped_block(gl.program_id(0), gl.cdiv(M, BLOCK_M),
                                        gl.cdiv(N, BLOCK_N), GROUP_M)
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    # A is M x K and B is K x N; a column-major one (A_T, B_T) is described as its transpose
    a_desc = common.gl_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = common.gl_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    # the ring: STAGES tiles of A and of B in their descriptors' swizzled layouts, and a full
    # and an empty barrier per slot
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape,
                                       a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape,
                                       b_desc.layout)
    full, empty = common.ring_barriers(STAGES)
    acc, = gl.warp_specialize([
        (_consumers, (a_ring, b_ring, full, empty, K, BLOCK_M, BLOCK_N, BLOCK_K, A_T, B_T, STAGES,
                      num_warps)),
        (_producer, (a_desc, b_desc, a_ring, b_ring, full, empty, m0, n0, K, BLOCK_K, A_T, B_T,
                     STAGES)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])
    # C, by the consumers' warps, in its own dtype (fp8: scaled by scale_a * scale_b in fp32
    # first; None in the other precisions, where this is decided at compile time)
    if scale_a_ptr is not None:
        acc = acc * (gl.load(scale_a_ptr) * gl.load(scale_b_ptr))
    c = acc.to(c_ptr.dtype.element_ty)
    # through a staging tile (in the ring's memory, now free) and one TMA store
    c_desc = common.gl_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, False)
    common.gl_tma_store_tile(c_desc, m0, n0, c)

def smem_bytes(c: dict, precision: str) -> int:
    """Shared memory of a concrete configuration: the ring, or C's staging tile where that is
    larger (it shares the ring's memory), and the barriers."""
    es = TMA_ELEM_BYTES[precision]
    ring = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * es
    staging = c["BLOCK_M"] * c["BLOCK_N"] * TMA_C_BYTES[precision]  # fp8's C is bf16
    return max(ring, staging) + BARRIER_BYTES


# validate, resolve, show and the setup around the kernel, from the tables above (_common.TmaTwin);
# interpreted=False: Gluon, which no interpreter runs, so prepare() refuses CPU tensors
TWIN = TmaTwin(STAGE, PARAM_ORDER, DEFAULTS, AUTO, FALLBACKS, SWITCHES, smem_bytes,
               kernels=("matmul_warp_specialized_kernel", "realign_copy_kernel"), limits=LIMITS,
               interpreted=False)
resolve_config = TWIN.config  # (precision, params, M=None, N=None, sms=...): what runs
config_text = TWIN.show  # the configuration as the `params` column writes it
OFFER = TWIN.offer()


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision, on an
    sm_90 GPU (CPU tensors get one sentence: TWIN.setup). The launch's `config` is the
    configuration that runs; `realigned` names the operands copied in each call (unaligned, or
    not K-major: always in tf32 and fp8, under kmajor in bf16 and fp16). The lesson kernel above
    runs where C is row-major and read through a descriptor, its variant elsewhere
    (_common.LESSON_CASE)."""
    s = TWIN.setup(p, params, sm_count)
    config = s.config
    return TWIN.launch(s, matmul_warp_specialized_kernel, variant.matmul_warp_specialized_kernel,
                       (s.tiles,), **s.meta, STAGES=config["num_stages"],
                       PRODUCER_WARPS=PRODUCER_WARPS, PRODUCER_REGS=PRODUCER_REGS)
