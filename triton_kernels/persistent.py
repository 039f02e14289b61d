"""Stage persistent, Triton twin: one program per SM walks the output tiles, loading through TMA
descriptors, with one tile's C store overlapped with the next tile's loads, in tf32, 3xtf32, bf16,
fp16 and fp8.

The tile's work is stage tma_wgmma's (triton_kernels/tma_wgmma.py: descriptor loads into a
swizzled shared-memory ring, tl.dot on two shared-memory tiles as wgmma, C through a TMA store, or
a masked store where no descriptor can describe C). What changes is who does which tile: instead
of a program per tile, min(SMs, tiles) programs are launched and program p computes tiles p,
p + NUM_SMS, p + 2 NUM_SMS, ... (tl.range over tile ids with stride NUM_SMS, the SM count of the
GPU; in grouped order, GROUP_M block-rows walked together, _common.grouped_block, so that the
programs working at one time share rows of A and columns of B in L2). The descriptors are built
once per program, not once per tile, and with flatten=True Triton fuses the tile loop and the
k-loop into one software-pipelined loop: the TMA loads of the next tile's first k-steps are issued
before this tile's epilogue (acc to shared memory, TMA store), so that when the warps come back
from the store the next tile's data is already arriving, where a program per tile starts its
loads cold. (Triton 3.6's TTGIR for sm_90 shows it: one loop over every k-step of every tile,
the next tile's coordinates and loads computed ahead, and the epilogue under a condition at each
tile's last k-step.)
Reference design: Triton's tutorial 09-persistent-matmul (matmul_kernel_descriptor_persistent).
CUDA stage: cuda_kernels/persistent.cu, which follows stage warp_specialized there (a producer
warpgroup issuing TMA, consumer warpgroups issuing wgmma, blocks that stay resident, a ring
running across tiles). This twin follows tma_wgmma's twin instead: Triton 3.6 cannot split the
warps on sm_90 (below), so the same warps issue the loads, the wgmma and the stores, and what
it changes from tma_wgmma's twin is the grid and the loop; unlike the CUDA stage it writes C with
a TMA store.

Bottleneck it attacks: the per-tile prologue and epilogue. A program per tile builds its
descriptors, fills its ring (num_stages - 1 k-steps of loads before its first wgmma), drains it
and writes C, and only then does the SM start the next program, whose loads begin cold; at
4096^3 with 128 x 256 tiles that is 512 such starts on 132 SMs. What it does not change: the
tiles still divide unevenly among the SMs (512 tiles over 132 programs: 116 compute 4 tiles and
16 compute 3, as the last of 3.9 waves is 88% full).

Launch: a 1-D grid of min(NUM_SMS, ceil(M/BLOCK_M) * ceil(N/BLOCK_N)) programs, num_warps warps,
one program per SM: shared memory holds the ring (num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K *
element bytes) and, beside it, C's staging tile for the TMA store (BLOCK_M * BLOCK_N * bytes, half
with subtile), which the next tile's loads overlap instead of reusing the ring (212,992 bytes at
the bf16 defaults). Each launch takes 128 bytes of global scratch per descriptor per program
(_common.with_tma_scratch).

What Triton does for you that the CUDA stage does by hand:
- the tile scheduler: tl.range(start, tiles, NUM_SMS) is the loop, the grouped order a few
  integer operations per tile (_common.grouped_block); the CUDA stage writes the same loop over
  blockIdx.x, blockIdx.x + gridDim.x, ...
- the cross-tile pipeline (flatten=True): one ring and one set of mbarrier phases across all of a
  program's k-steps, whatever tile they belong to, with the epilogue of tile i placed inside the
  fused loop so that the loads of tile i+1 are already in flight; the CUDA stage gets this by
  counting its ring's iterations over all of a block's tiles (its producer's `it`) and releasing
  a tile's last slot before its stores.
- TMA descriptors, mbarriers, the swizzle, wgmma and the TMA store as in stage tma_wgmma's twin
  (its header), the descriptors here built once per program.
What it cannot express on the H100 with Triton 3.6: warp specialization. tl.range(...,
warp_specialize=True) is accepted on sm_90 and compiles to exactly the PTX it compiles to without
(a kernel of the tutorial's form, BLOCK 128 x 256 x 64, 3 stages, bf16, compiled for sm_90 without
a GPU; Triton 3.6's tl.range documents the option for Blackwell), so the producer/consumer split
with setmaxnreg that a CUDA persistent kernel uses (the public fast.cu series) is out of reach,
and this stage does not offer it. tl.range(..., disallow_acc_multi_buffer=True) likewise compiles
to the same PTX on sm_90 (it concerns a multi-buffered accumulator in Blackwell's tensor memory;
on sm_90 the accumulator is in registers), so it is not a knob either. Nor can the twin let the
next tile's wgmma run during this tile's store: the same warps do both, and each TMA store is
waited for (until its shared-memory tile has been read) before the loop goes on.

TF32, operand layouts and operands a descriptor cannot read (kmajor; the copies in every call,
timed): exactly as stage tma_wgmma's twin (its header; triton_kernels/_realign.py tma_operands).
fp8 (e4m3 A and B, per-tensor scales, a bf16 C) as well: wgmma ...m64n256k32.f32.e4m3.e4m3 from
the ring, the whole K in wgmma's fp32 accumulator (Triton's default max_num_imprecise_acc on
sm_90), kmajor on (an M-major A or N-major B would go through registers before each wgmma, as in
tf32); here scale_a * scale_b is loaded once per program, before the tile loop, and multiplies
each tile's accumulator before its one rounding to bf16.
64-bit offsets: descriptors need none; the masked store of a C no descriptor describes takes
OFFSET64.
Lesson and variant, as in tma_wgmma's twin: the kernel below is the lesson's case (C row-major,
written whole by one TMA store per tile, compiled); a column-major C, a masked C, subtile (tf32's
automatic value and the FALLBACKS) and the interpreter's bf16 upcast run the former kernel,
unchanged, in triton_kernels/variants/persistent.py under the same name (_common.LESSON_CASE),
and the lesson compiles to its PTX where it runs (tests/test_hopper_triton.py).
Why this twin is plain Triton after warp_specialized's Gluon: it is the kernel the lab has
measured (the ladder's Triton persistent row). A Gluon persistent kernel (warp_specialized's
partitions around a tile loop, as the CUDA stage) would make the step from warp_specialized a
short one, but it has not been timed, so it is not what runs; it is still to be written, as an
opt-in variant, and timed on a GPU before it could become the lesson.
GPUs: sm_90 only (H100, H200); prepare() refuses another GPU in one sentence. Under the
Triton interpreter (CPU tensors) the loop runs as written, to check the numbers (fp8 included:
the interpreter's tl.dot decodes float8 tiles to fp16 and multiplies them in fp32, exactly).

Knobs: BLOCK_M (128), BLOCK_N (0), BLOCK_K (0), GROUP_M (8), num_warps (8), num_stages (0), kmajor
(-1), subtile (-1), flatten (-1: True; False in fp8_block). The automatic values (AUTO,
per precision; resolve()), chosen so that the ring and C's staging tile fit in 227 KiB together:
    precision   BLOCK_N   BLOCK_K            num_stages   kmajor   subtile   shared memory
    bf16, fp16  256       64 (128 bytes)     3            0        0         212,992 bytes
    tf32        256       32 (128 bytes)     3            1        1         212,992 bytes
    3xtf32      128       32 (128 bytes)     4            1        0         196,608 bytes
    fp8         256       128 (128 bytes)    3            1        0         212,992 bytes
(the tutorial's tile and depth for 16-bit types; a fourth stage fits only with subtile, 229,376
bytes; fp8 has 16-bit's ring in bytes and a bf16 C, so the same figures: 213,016 bytes compiled for
sm_90, not yet measured). An automatic BLOCK_N is 128 where 256 would give fewer tiles than the GPU
has SMs, and where the automatic values do not fit beside explicit ones (num_stages=4 in bf16) they
take the first of FALLBACKS that does (subtile on; then BLOCK_N 128; then 3 stages).
"""

import triton
import triton.language as tl

from lab.base.entry import entry
from lab.base.device import sm_count
from triton_kernels import _common as common
from triton_kernels._common import TMA_C_BYTES, TMA_ELEM_BYTES, TmaTwin, dot_meta
from triton_kernels.variants import persistent as variant

STAGE = "persistent"
PARAM_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "kmajor",
               "subtile", "flatten")
SWITCHES = ("kmajor", "subtile", "flatten")
DEFAULTS = {"BLOCK_M": 128, "BLOCK_N": 0, "BLOCK_K": 0, "GROUP_M": 8, "num_warps": 8,
            "num_stages": 0, "kmajor": -1, "subtile": -1, "flatten": -1}
AUTO = {
    "bf16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 3, "kmajor": 0, "subtile": 0,
             "flatten": True},
    "fp16": {"BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 3, "kmajor": 0, "subtile": 0,
             "flatten": True},
    "tf32": {"BLOCK_N": 256, "BLOCK_K": 32, "num_stages": 3, "kmajor": 1, "subtile": 1,
             "flatten": True},
    "3xtf32": {"BLOCK_N": 128, "BLOCK_K": 32, "num_stages": 4, "kmajor": 1, "subtile": 0,
               "flatten": True},
    "fp8": {"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 3, "kmajor": 1, "subtile": 0,
            "flatten": True},
    # the variant's scaled fp8 (variants/persistent.py): row scales in the epilogue, fp8's tile;
    # block scales promote each k-step into a second fp32 accumulator, so a 128-column tile
    "fp8_row": {"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 3, "kmajor": 1, "subtile": 0,
                "flatten": True},
    # and the k-loop on its own (flatten off): 53.7% of the stand-in against 47.4% flattened on
    # the H200 (geometric means, results/2026-11-30-h200/fp8-scaled.csv)
    "fp8_block": {"BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 4, "kmajor": 1, "subtile": 0,
                  "flatten": False},
}
FALLBACKS = ({"subtile": 1}, {"subtile": 1, "BLOCK_N": 128},
             {"subtile": 1, "BLOCK_N": 128, "num_stages": 3})


@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm, stride_cn,
                             scale_a_ptr, scale_b_ptr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, A_T: tl.constexpr,
                             B_T: tl.constexpr, FLATTEN: tl.constexpr,
                             INPUT_PRECISION: tl.constexpr):
    # The lesson's case: C row-major, written whole by one TMA store per tile (stride_cm and
    # stride_cn are the variant's, whose masked store reads them; variants/persistent.py)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    tiles = grid_m * grid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    # the descriptors, once per program (a column-major operand: its transpose, A_T / B_T)
    a_desc = common.tma_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = common.tma_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    c_desc = common.tma_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, False)
    if scale_a_ptr is not None:  # fp8: scale_a * scale_b, loaded once per program
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    # The epilogue counts its tiles on a counter of its own, as Triton's tutorial 09 does, so
    # that the flattened loop's pipeline never needs one value both in the loads it issues
    # ahead (the next tile's) and in the store it finishes (this tile's).
    tile_c = tl.program_id(0) - NUM_SMS
    # Program p computes tiles p, p + NUM_SMS, p + 2 NUM_SMS, ... (grouped order: warptiling's,
    # _common.grouped_block); FLATTEN fuses this loop and the k-loop into one pipelined loop
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = common.grouped_block(tile, grid_m, grid_n, GROUP_M)
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):  # tma_wgmma's k-loop
            k0 = ks * BLOCK_K
            a = a_desc.load([k0, m0]).T if A_T else a_desc.load([m0, k0])
            b = b_desc.load([n0, k0]).T if B_T else b_desc.load([k0, n0])
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        tile_c += NUM_SMS
        pid_m, pid_n = common.grouped_block(tile_c, grid_m, grid_n, GROUP_M)
        if scale_a_ptr is not None:  # fp8: C = scale_a * scale_b * (A @ B), scaled in fp32
            acc = acc * scale
        c = acc.to(c_ptr.dtype.element_ty)  # C in its own dtype: the fp32 accumulator rounded
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        # through shared memory and one TMA store (clipped at C's edges)
        c_desc.store([m0, n0], c)

def smem_bytes(c: dict, precision: str) -> int:
    """Shared memory of a concrete configuration: the ring (num_stages tiles of A and B) plus
    C's staging tile (half of it with subtile), live together because the next tile's loads
    overlap this tile's store (compiled for sm_90 with Triton 3.6, bf16 128 x 256 x 64: 3 stages
    213,016 bytes; 4 stages with subtile 229,408)."""
    es = TMA_ELEM_BYTES[precision]
    ring = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * es
    staging = c["BLOCK_M"] * c["BLOCK_N"] * TMA_C_BYTES[precision]  # fp8's C is bf16
    return ring + staging // (2 if c["subtile"] else 1)


# validate, resolve, show and the setup around the kernel, from the tables above (_common.TmaTwin)
TWIN = TmaTwin(STAGE, PARAM_ORDER, DEFAULTS, AUTO, FALLBACKS, SWITCHES, smem_bytes,
               kernels=("matmul_persistent_kernel", "realign_copy_kernel"))
resolve_config = TWIN.config  # (precision, params, M=None, N=None, sms=...): what runs
config_text = TWIN.show  # the configuration as the `params` column writes it
OFFER = TWIN.offer()


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The
    launch's `config` is the configuration that runs, `programs` the grid's size; `realigned`
    names the operands copied in each call (unaligned, or not K-major under kmajor). The lesson
    kernel above runs where C is row-major, whole and read through a descriptor, its variant
    elsewhere (_common.LESSON_CASE)."""
    s = TWIN.setup(p, params, sm_count)
    config = s.config
    programs = min(s.sms, s.tiles)
    return TWIN.launch(s, matmul_persistent_kernel, variant.matmul_persistent_kernel, (programs,),
                       extra={"programs": programs}, **s.meta, NUM_SMS=s.sms,
                       SUBTILE=bool(config["subtile"]), FLATTEN=bool(config["flatten"]),
                       **dot_meta(matmul_persistent_kernel, s.q), **common.scale_meta(s.q),
                       num_stages=config["num_stages"])
