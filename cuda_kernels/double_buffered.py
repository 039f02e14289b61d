"""Launcher for cuda_kernels/double_buffered.cu: a warp-tiled GEMM with double-buffered shared
memory (pipeline=regs) or a cp.async ring of 2..4 tiles (pipeline=cp_async). The lesson file is
the regs pipeline for nn, 16-byte-aligned lines and 32-bit offsets; the cp_async pipeline and
every other layout, alignment and size compile variants/double_buffered.cu (build()).

Geometry: block (BM/WM)*(BN/WN)*32 threads (1-D; 128 by default); 1-D grid of ceil(M/BM) *
ceil(N/BN) blocks ordered by block_tile() in common.cuh (group); no static shared memory, dynamic
shared memory smem_bytes() (2 buffers, or `stages` with cp_async, of one A and one B tile; 33 KiB
at the defaults); the launcher (_build.launcher) raises the kernel's dynamic shared-memory limit
when a configuration needs more than 48 KiB.

The variant is chosen per call from the shared description of the operands, as in vectorized.py:
the layout (-DTRANS_A / -DTRANS_B) and VEC_A / VEC_B / VEC_C (vectorized.aligned_operands: an operand
whose lines are not 16-byte aligned is read one float at a time, with 4-byte cp.async copies in
the cp_async pipeline). build() without those arguments compiles the nn vector variant (what CPU
mode reports and what 4096^3 runs).

Parameters and what validate() refuses (one sentence each, before anything is compiled):
  BM x BN x BK   block tile; BK a multiple of 8 (the k-loop body is 8 k-steps)
  WM x WN        warp tile; BM/WM * BN/WN warps, 32..1024 threads
  TM x TN        a thread's register tile (all of it); (WM/TM) * (WN/TN) must be 32 lanes, TM and
                 TN multiples of 4 (float4 groups)
  pipeline       regs | cp_async; stages (2, 3, 4) is the cp.async ring depth; the regs pipeline
                 has exactly two buffers and takes stages=2 only (no duplicate configurations)
  every tile copy splits into whole float4 chunks per thread; shared memory per block at most
  227 KiB (in every layout); the estimated registers (registers_needed) at most what a thread
  can have (255, or 65536 / threads for blocks of 512 and 1024 threads), since a configuration
  beyond that spills (checked on 34 sampled configurations, NVRTC 13.0).
The register cap (__launch_bounds__' second argument) is chosen as in blocktile_2d.py: as many
blocks per SM as threads, shared memory and the estimated registers allow, halved until ptxas
reports no spills (_build.spill_free_build).
"""

from cuda_kernels._build import (cdiv, cuda_offer, first_min_blocks, lesson_case,
                                 spill_free_build, stage_launcher, stage_source)
from cuda_kernels.vectorized import aligned_operands
from lab.base.errors import LabError
from lab.base.entry import entry

PIPELINES = {"regs": 0, "cp_async": 1}
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit
SMEM_PER_SM = 228 * 1024     # an H100 SM's shared memory; each resident block reserves 1 KiB more
REGS_OVERHEAD = 24           # registers for addresses, indices and loop state (estimate)
MAX_REGISTERS = 255          # per thread (sm_90)
DEFAULTS = dict(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=16, pipeline="regs", stages=2)


def threads(BM=128, BN=128, WM=64, WN=64, **_) -> int:
    return (BM // WM) * (BN // WN) * 32


def tile_floats(BM=128, BN=128, BK=16, pipeline="regs", layout="nn", **_) -> tuple[int, int]:
    """Floats of one shared A tile and one B tile (double_buffered.cu: A_TILE, B_TILE)."""
    trans_a, trans_b = layout[0] == "t", layout[1] == "t"
    cp = pipeline == "cp_async"
    a_kin, b_kin = cp and not trans_a, cp and trans_b  # cp.async keeps a k-contiguous layout
    a_ld = BK + 4 if a_kin else BM if trans_a else BM + 4
    b_ld = BK + 4 if b_kin else BN + 4 if trans_b else BN
    return (BM * a_ld if a_kin else BK * a_ld), (BN * b_ld if b_kin else BK * b_ld)


def smem_bytes(BM=128, BN=128, BK=16, pipeline="regs", stages=2, layout="nn", **_) -> int:
    """Dynamic shared memory of one block (double_buffered.cu: DYNAMIC_SMEM_BYTES)."""
    a, b = tile_floats(BM, BN, BK, pipeline, layout)
    return (stages if pipeline == "cp_async" else 2) * (a + b) * 4


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def validate(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=16, pipeline="regs", stages=2,
             **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    where = (f"double_buffered with BM={BM}, BN={BN}, BK={BK}, WM={WM}, WN={WN}, TM={TM}, "
             f"TN={TN}, pipeline={pipeline}, stages={stages}")
    if pipeline not in PIPELINES:
        raise LabError(f"{where}: pipeline must be one of {', '.join(PIPELINES)}")
    if pipeline == "regs" and stages != 2:
        raise LabError(f"{where}: the regs pipeline has exactly two buffers, so stages=2 (stages "
                       f"3 and 4 are for pipeline=cp_async)")
    if not 2 <= stages <= 8:
        raise LabError(f"{where}: stages must be 2 to 8")
    if not all(_pow2(x) for x in (BM, BN, BK, WM, WN, TM, TN)):
        raise LabError(f"{where}: the tile sizes must be powers of two")
    if TM % 4 or TN % 4:
        raise LabError(f"{where}: TM and TN must be multiples of 4 (a thread's rows and columns "
                       f"come in float4 groups)")
    if BK % 8:
        raise LabError(f"{where}: BK must be a multiple of 8 (the k-loop body is 8 k-steps)")
    if BM % WM or BN % WN:
        raise LabError(f"{where}: BM must be a multiple of WM and BN a multiple of WN (whole warp "
                       f"tiles)")
    if WM % TM or WN % TN or (WM // TM) * (WN // TN) != 32:
        raise LabError(f"{where}: a warp tile must hold 32 thread tiles, (WM/TM)*(WN/TN) = "
                       f"{(WM // TM) * (WN // TN) if WM >= TM and WN >= TN else 0}, not 32; "
                       f"change TM/TN or WM/WN")
    t = threads(BM, BN, WM, WN)
    if not 32 <= t <= 1024:
        raise LabError(f"{where} needs (BM/WM)*(BN/WN) = {t // 32} warps, {t} threads, but a block "
                       f"holds 32 to 1024 threads; change WM/WN")
    for name, lines, along in (("A", BM, BK), ("B", BN, BK)):
        chunks = lines * along // 4
        if chunks % t or chunks < t:
            raise LabError(f"{where}: the {name} tile ({chunks} float4 chunks) does not split "
                           f"evenly over {t} threads; raise BK, or use fewer threads (larger "
                           f"WM/WN)")
        if lines % 16:
            raise LabError(f"{where}: the {name} tile needs a multiple of 16 lines along k")
    smem = max(smem_bytes(BM, BN, BK, pipeline, stages, layout)
               for layout in ("nn", "nt", "tn", "tt"))
    if smem > SMEM_PER_BLOCK:
        raise LabError(f"{where} needs {smem} bytes of shared memory per block, more than the "
                       f"227 KiB an H100 block can have; lower stages, BK, BM or BN")
    need = registers_needed(BM, BN, BK, WM, WN, TM, TN, pipeline)
    cap = register_cap(t)
    if need > cap:
        raise LabError(f"{where} needs about {need} registers per thread ({TM * TN} accumulators, "
                       f"two fragment sets, {staging_floats(BM, BN, BK, WM, WN, pipeline)} "
                       f"staging floats), more than the {cap} a thread of a {t}-thread block can "
                       f"have, so it would spill; lower TM/TN, the thread count (larger WM/WN), "
                       f"or BK with pipeline=regs")


def staging_floats(BM=128, BN=128, BK=16, WM=64, WN=64, pipeline="regs", **_) -> int:
    """Floats a thread holds between the global loads and the shared stores of one tile (the
    regs pipeline's ra/rb; cp.async needs none)."""
    return (BM + BN) * BK // threads(BM, BN, WM, WN) if pipeline == "regs" else 0


def register_cap(threads_per_block: int) -> int:
    """Registers a thread may use: 255, or fewer when one block of this size must fit in an SM's
    65536 (512 threads: 128, 1024 threads: 64)."""
    return min(MAX_REGISTERS, 65536 // threads_per_block // 8 * 8)


def registers_needed(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=16, pipeline="regs",
                     **_) -> int:
    """Estimated registers per thread: TM*TN accumulators, the fragments, the staging floats and
    REGS_OVERHEAD for addresses and loop state. Fragments: two sets of TM + TN (regs); with
    cp_async a k-inner tile (row-major A, transposed B) holds pairs of k-steps, two sets of
    2*(TM + TN) in the worst layout. 232 (regs) and 248 (cp_async) at the defaults, where NVRTC
    13.0 gives 255 and 236-255 with the cap at 255 and no spills; 512-thread cp_async builds whose
    2*(TM+TN) estimate was exactly their cap of 128 spilled 16 to 536 bytes."""
    frags = (4 if pipeline == "cp_async" else 2) * (TM + TN)
    return TM * TN + frags + staging_floats(BM, BN, BK, WM, WN, pipeline) + REGS_OVERHEAD


def first_blocks(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=16, pipeline="regs", stages=2,
                 **_) -> int:
    """Blocks per SM to ask ptxas for first (MIN_BLOCKS): what threads, shared memory and the
    estimated registers allow; 2 at the defaults (a cap of 255 registers)."""
    t = threads(BM, BN, WM, WN)
    need = registers_needed(BM, BN, BK, WM, WN, TM, TN, pipeline)
    by_smem = SMEM_PER_SM // (smem_bytes(BM, BN, BK, pipeline, stages) + 1024)
    return max(1, min(first_min_blocks(t), 65536 // (t * need), by_smem))


def build(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=16, pipeline="regs", stages=2,
          group=16, fast_math=False, unroll=True, vec_a=True, vec_b=True, vec_c=True,
          layout="nn", offsets64=False, **_):
    validate(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, TM=TM, TN=TN, pipeline=pipeline, stages=stages)
    defines = {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "TM": TM, "TN": TN,
               "PIPELINE": PIPELINES[pipeline], "STAGES": stages, "GROUP": group,
               "VEC_A": bool(vec_a), "VEC_B": bool(vec_b), "VEC_C": bool(vec_c)}
    first = first_blocks(BM, BN, BK, WM, WN, TM, TN, pipeline, stages)
    # the lesson (double_buffered.cu: pipeline=regs) for nn, aligned lines, 32-bit offsets; the
    # cp.async ring and every other case: variants/double_buffered.cu
    lesson = lesson_case(layout, offsets64, vec_a, vec_b, vec_c) and pipeline == "regs"
    return spill_free_build(stage_source("double_buffered", lesson), "matmul_double_buffered",
                            defines, first, fast_math=fast_math, unroll=unroll, layout=layout,
                            offsets64=offsets64)


def geometry(M: int, N: int, K: int, BM=128, BN=128, BK=16, WM=64, WN=64, pipeline="regs",
             stages=2, layout="nn", **_):
    return ((cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, WM, WN), 1, 1),
            smem_bytes(BM, BN, BK, pipeline, stages, layout))


# GPUs: sm_75+; pipeline=cp_async needs cp.async, sm_80+ (variants/double_buffered.cu says so too)
OFFER = cuda_offer("double_buffered", ("matmul_double_buffered",), build, geometry,
                   validate=validate, requires={"pipeline=cp_async": (8, 0)})


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    params = {k: v for k, v in params.items() if k not in ("vec_a", "vec_b", "vec_c", "layout")}
    return stage_launcher(build(**params, **aligned_operands(p), layout=p.layout,
                                offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params, layout=p.layout), p)
