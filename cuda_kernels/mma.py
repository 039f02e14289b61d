"""Launcher for cuda_kernels/mma.cu: a tensor-core GEMM through mma.sync, ldmatrix and a cp.async
ring, in four precisions. mma.cu is the lesson, written for bf16, row-major A and B, 16-byte lines,
32-bit offsets and frags=2; every other build compiles cuda_kernels/variants/mma.cu, the same kernel
for every precision, layout and alignment (build(), lesson(); docs/stages/mma.md, "The lesson and
its variants"). (Hopper's warpgroup MMA is the next stage, wgmma: cuda_kernels/wgmma.py;
this launcher runs the mma.sync kernel on every GPU.)

Geometry: block (BM/WM)*(BN/WN) warps (1-D; 256 threads at the automatic defaults of tf32, bf16
and fp16, 128 in 3xtf32 and on the 128 x 128 tiles of small problems); 1-D grid of
ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() in common.cuh (group); no static shared
memory, dynamic shared memory smem_bytes() = STAGES * (BM + BN) * BK * element size (192 KiB for
tf32, 144 KiB for bf16/fp16, 36 KiB for 3xtf32 at the automatic defaults); _build.launcher raises
the kernel's limit past 48 KiB.

Precision (Problem.precision, which the shared code checks against OFFER.precisions): tf32 and
3xtf32 take float32 A, B and C; bf16 takes bfloat16 A, B and C; fp16 float16 A, B and C. The
accumulation is fp32 in all four; C is rounded to its dtype on store. Each precision is its own
build (-DPREC_TF32 / -DPREC_3XTF32 / -DPREC_BF16 / -DPREC_FP16). build() and geometry() without
a precision mean 3xtf32: float32 in and out at near-fp32 accuracy, the drop-in for the fp32 stages
before this one (what the registry-wide CPU tests build and emulate).

The variant is also chosen per call from the shared description of the operands, as in
vectorized.py: the layout (-DTRANS_A / -DTRANS_B) and the alignment of each operand's lines
(alignment(): data pointer and leading dimension in bytes): ALIGN_A / ALIGN_B = 16 (16-byte
cp.async), 4 (4-byte cp.async: every float32 operand, a 16-bit one with an even leading dimension)
or 2 (a 16-bit operand with an odd leading dimension or offset: plain loads, no cp.async);
VEC_C = 1 when C's rows hold the 2-element stores of a fragment row (Operand.aligned(2 * element
size)). Operand.aligned counts bytes with the tensor's own element size, so it is right for 2-byte
elements too.

Parameters and what validate() refuses (one sentence each, before anything is compiled):
  BM x BN x BK   block tile (powers of two, at least 32; BK at least 16)
  frags          fragment register sets: 2 (the next k-step's fragments load during this one's
                 mma) or 1
  WM x WN        warp tile; multiples of 16, at least 32; (BM/WM) * (BN/WN) warps, 1..16; at most
                 64 x 64 fp32 accumulators per warp (128 registers per lane)
  STAGES         cp.async ring depth, 2..4
  each tile copy splits into whole 16-byte chunks per thread (depends on the element size:
  checked per precision) and STAGES tiles fit the 227 KiB an H100 block can have.
Rules that depend on the precision are checked where it is known (prepare, build); validate()
without one checks the others. The register cap (__launch_bounds__' second argument) is chosen
as in double_buffered.py: as many blocks per SM as threads, shared memory and the estimated
registers allow, halved until ptxas reports no spills (_build.spill_free_build).

Automatic defaults (config(), the table AUTO). Every parameter but group defaults to 0, "chosen per
precision": the CUDA searches on the H100 of 2026-11-23 (results/autotune.json, keys
"NVIDIA H100 80GB HBM3|mma|cuda|4096x4096x4096:a128|<precision>|nn" and "...|8192x8192x8192:...";
the searches with their top-5 tables in results/2026-11-23-h100/06-tune-cuda-tf32-4096.log,
-tf32-8192, -3x-4096, -3x-8192, -half-4096 and -half-8192). Where 4096^3 and 8192^3 crowned
different winners, the row is one configuration that ran within a few percent of the winner at
both:
    precision   BM   BN   BK            WM   WN  STAGES frags  where it comes from (ms, H100)
    tf32        256  128  32 (128 B)    64   64    4      2    the 8192 winner (5.630 refined);
                                                               4096: 0.706 in the search (the 4096
                                                               winner, 3 stages: 0.691; +2.2%)
    3xtf32      128   64  16 (64 B)     32   64    3      1    the winner at both (2.254 / 17.758)
    bf16, fp16  256  128  64 (128 B)   128   32    3      2    fp16 4096 winner (0.332); fp16 8192
                                                               0.2% behind its winner (2.609 vs
                                                               2.604); bf16 3.1% behind both
                                                               winners (0.329 vs 0.319, 2.542 vs
                                                               2.466; the 128 x 256 winners)
(frags=0 in a cached winner is the automatic 2, or 1 for 3xtf32: the same build; "search" times
are the searches' single timings, "refined" those of the top-5 tables.) The searches' default row
(128 x 128, 64 x 32 warps, 4 stages, 64 bytes of k) took 1.10-1.26x the winners' time. Every
automatic build (both rows of every precision) compiles without spills for sm_80 and sm_90 in all
four layouts, at 240-255 registers (tests/test_mma_cuda_defaults.py).
Two rules, both deterministic (config()):
- shape: where ceil(M/BM) * ceil(N/BN) of the automatic tile is smaller than the GPU's SM count
  (lab.base.device.sm_count(): 132 off a GPU, as for the Triton twin), the automatic values
  become the precision's row of SMALL_GRID, a 128 x 128 tile: tf32 the previous defaults
  (128 x 128, BK 16, 64 x 64 warps, 4 stages: 1.3% behind the winners at both sizes, 0.700 ms in
  the 4096 search against the winner's 0.691, 5.705 ms refined at 8192 against 5.630; the tuned
  row merely narrowed to 128 x 128, BK 32, ran 0.976 ms at 4096), bf16 and fp16 the tuned row at
  128 x 128 (128 x 32 warps; 3rd at 4096 in both, 0.329 / 0.343 ms refined); 3xtf32 keeps its
  128 x 64 tile. 2048^3 (8 x 16 = 128 blocks of 256 x 128) already takes it. Explicit
  values stay; where the row would not narrow the tile (explicit BM and BN) or would be refused,
  the tuned row stays.
- fit: where the tuned values would be refused next to the explicit values given (mma:BM=64 or
  mma:WN=64 in bf16/fp16, under or beside a 128-row warp tile; mma:BM=256,BN=256,STAGES=4 in
  bf16, 256 KiB with the 128-byte k-step; mma:BN=256 in tf32), every automatic value takes its
  previous fixed default instead (PREVIOUS), so a variant that ran before these defaults still
  runs, with the tile, k-step and depth it had then.
Explicit values always win. BK=0 next to an explicit tile is the precision's tuned k-step (128
bytes; 64 for 3xtf32), frags=0 its tuned count, WN=0 its tuned warp width (64; 32 for bf16/fp16),
unless the fit rule applies. validate() checks the automatic values as what they stand for, in
the precision given or else in every precision, and its sentence names them ("BM=0 (automatic:
256)"). build() and geometry() resolve automatic values without a shape (so they always agree);
prepare() resolves them for the problem, builds and launches those concrete values, and carries
them as launch.config and, as text, in launch.resources["params"] (the row's `params` column).
"""

from cuda_kernels._build import (cdiv, first_min_blocks, lesson_case, spill_free_build,
                                 stage_launcher, stage_source)
from lab.base.contract import Offer
from lab.base.errors import LabError
from lab.base.precisions import cuda_defines, elem_bytes
from lab.base.entry import entry
from lab.base.device import DEFAULT_SMS, sm_count

PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16")
DEFINES = cuda_defines("tf32", "3xtf32", "bf16", "fp16")  # lab/base/precisions.py
ELEM_BYTES = elem_bytes("tf32", "3xtf32", "bf16", "fp16")  # sizes from lab/base/precisions.py
KSTEP = {"tf32": 8, "3xtf32": 8, "bf16": 16, "fp16": 16}
DEFAULT_PRECISION = "3xtf32"
LESSON_PRECISION = "bf16"  # the precision cuda_kernels/mma.cu is written for (lesson())
PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "frags")  # the ones 0 makes automatic
PARAM_ORDER = PARAMS + ("group",)  # registry order, as the `params` column writes them
DEFAULTS = dict(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0)  # all automatic (the registry's)
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit
SMEM_PER_SM = 228 * 1024     # an H100 SM's; each resident block reserves 1 KiB more
REGS_OVERHEAD = 40           # addresses, indices, loop state (estimate)


def _row(BM, BN, BK, WM, WN, STAGES, frags) -> dict:
    return dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, STAGES=STAGES, frags=frags)


# What the automatic values (0) stand for, per precision: the tuned rows (module docstring) ...
AUTO = {
    "tf32": _row(256, 128, 32, 64, 64, 4, 2),
    "3xtf32": _row(128, 64, 16, 32, 64, 3, 1),
    "bf16": _row(256, 128, 64, 128, 32, 3, 2),
    "fp16": _row(256, 128, 64, 128, 32, 3, 2),
}
# ... on a problem whose automatic tile gives fewer blocks than the GPU has SMs (the shape rule) ...
SMALL_GRID = {
    "tf32": _row(128, 128, 16, 64, 64, 4, 2),
    "3xtf32": AUTO["3xtf32"],
    "bf16": _row(128, 128, 64, 128, 32, 3, 2),
    "fp16": _row(128, 128, 64, 128, 32, 3, 2),
}
# ... and where the tuned values would be refused next to explicit ones (the fit rule): the previous
# fixed defaults (BK: 64 bytes of k per line; 3xTF32's split operands need the registers of a
# 64 x 32 warp tile and one fragment set: ptxas spilled 280 bytes with 64 x 64 at 255 registers).
PREVIOUS = {p: _row(128, 128, 64 // ELEM_BYTES[p], 64, 32 if p == "3xtf32" else 64, 4,
                    1 if p == "3xtf32" else 2) for p in PRECISIONS}


def _given(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0) -> dict:
    return _row(BM, BN, BK, WM, WN, STAGES, frags)


def config(precision: str, BM: int = 0, BN: int = 0, BK: int = 0, WM: int = 0, WN: int = 0,
           STAGES: int = 0, frags: int = 0, M: int | None = None, N: int | None = None,
           sms: int = DEFAULT_SMS, **_) -> dict:
    """BM, BN, BK, WM, WN, STAGES and frags with the automatic values (0) made concrete for
    `precision`; explicit values stay as given. The automatic ones are the precision's tuned row
    (AUTO), with two rules:
    - fit: if those values would be refused next to the explicit ones, every automatic value takes
      its previous fixed default instead (PREVIOUS);
    - shape: given the problem's M and N, when the tuned tile gives fewer than `sms` blocks, the
      automatic values take the precision's SMALL_GRID row (a 128 x 128 tile), where that narrows
      the tile (an explicit BM and BN leave it alone) and is accepted next to the explicit values.
    Without M and N (build(), geometry(), validate()) the shape rule does not apply."""
    given = _given(BM, BN, BK, WM, WN, STAGES, frags)
    explicit = {k: v for k, v in given.items() if v}
    c = {**AUTO[precision], **explicit}
    if len(explicit) == len(PARAMS):
        return c
    if _refusal(c, precision):
        return {**PREVIOUS[precision], **explicit}
    if M is not None and N is not None and cdiv(M, c["BM"]) * cdiv(N, c["BN"]) < sms:
        small = {**SMALL_GRID[precision], **explicit}
        if (small["BM"], small["BN"]) != (c["BM"], c["BN"]) and not _refusal(small, precision):
            return small
    return c


def resolve(precision: str, BK: int = 0, frags: int = 0, **params) -> tuple[int, int]:
    """(BK, frags) as config() makes them concrete next to the other parameters given (automatic
    where not given): BK the precision's tuned k-step (32 TF32 / 64 bf16/fp16 elements, 128 bytes;
    16 floats for 3xtf32), frags 2 (the next k-step's fragments load during this one's mma) except
    3xtf32 (1: its split operands leave no registers for a second set)."""
    c = config(precision, BK=BK, frags=frags, **params)
    return c["BK"], c["frags"]


def warp_n(WN: int, precision: str = DEFAULT_PRECISION, **params) -> int:
    """WN, with 0 meaning automatic (config()): 64 for tf32 and 3xtf32 (whose tuned warp tile is
    32 x 64), 32 for bf16/fp16 (128 x 32 warp tiles); the previous 64 (32 in 3xtf32) where the fit
    rule applies."""
    return config(precision, WN=WN, **params)["WN"]


def _threads(c: dict) -> int:
    return (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32


def _smem(c: dict, precision: str) -> int:
    return c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * ELEM_BYTES[precision]


def threads(BM=0, BN=0, WM=0, WN=0, precision=DEFAULT_PRECISION, **params) -> int:
    return _threads(config(precision, BM=BM, BN=BN, WM=WM, WN=WN, **params))


def smem_bytes(BM=0, BN=0, BK=0, STAGES=0, precision=DEFAULT_PRECISION, **params) -> int:
    """Dynamic shared memory of one block (mma.cu: DYNAMIC_SMEM_BYTES)."""
    return _smem(config(precision, BM=BM, BN=BN, BK=BK, STAGES=STAGES, **params), precision)


def config_text(config: dict) -> str:
    """The configuration as the `params` column writes it: name=value,... in registry order."""
    return ",".join(f"{k}={config[k]}" for k in PARAM_ORDER if k in config)


def launch_config(M: int, N: int, precision: str = DEFAULT_PRECISION, sms: int = DEFAULT_SMS,
                  group: int = 8, **params) -> dict:
    """The configuration prepare() builds and launches for an M x N problem on a GPU of `sms`
    SMs: config() with the shape rule, and group."""
    return {**config(precision, **params, M=M, N=N, sms=sms), "group": group}


def resolved_params(params: dict, M: int, N: int, K: int,
                    precision: str = DEFAULT_PRECISION, sms: int = DEFAULT_SMS) -> dict:
    """The tuner's identity of a configuration (the contract's `resolve`): `params` with the
    automatic values made concrete as prepare() would for an M x N problem on `sms` SMs, so that
    BK=0 and the BK it stands for are one candidate (K changes none of them)."""
    return {**params, **launch_config(M, N, precision, sms, **params)}


def alignment(op) -> int:
    """Bytes every line of operand `op` starts on, as the loader can use them: 16, 4 or 2."""
    if op.aligned(16):
        return 16
    return 4 if op.aligned(4) else 2


def _pow2(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def _general_refusal(c: dict) -> str | None:
    """Why a concrete configuration (no automatic values left) cannot compile or launch in any
    precision: the rest of validate()'s sentence, or None."""
    BM, BN, BK, WM, WN, STAGES = (c[k] for k in ("BM", "BN", "BK", "WM", "WN", "STAGES"))
    if not all(_pow2(c[k]) for k in ("BM", "BN", "BK", "WM", "WN")):
        return "the tile sizes must be powers of two (or 0: automatic)"
    if min(BM, BN, WM, WN) < 32:
        return "BM, BN, WM and WN must be at least 32"
    if not 2 <= STAGES <= 4:
        return "STAGES (the cp.async ring depth) must be 2, 3 or 4 (or 0: automatic)"
    if WM % 16 or WN % 16:
        return "WM and WN must be multiples of 16 (16 x 16 mma pieces)"
    if BM % WM or BN % WN:
        return "BM must be a multiple of WM and BN a multiple of WN (whole warp tiles)"
    if WM * WN > 64 * 64:
        return (f"a {WM} x {WN} warp tile needs {WM * WN // 32} fp32 accumulators per lane, more "
                f"than the 128 that leave registers for the fragments; lower WM or WN")
    warps = (BM // WM) * (BN // WN)
    if warps > 16:
        return (f"it needs {warps} warps, more than the 16 (512 threads) this kernel allows; "
                f"raise WM or WN")
    if BK < 16:
        return "BK must be at least 16 (one bf16/fp16 k-step), or 0 (automatic)"
    return None


def _precision_refusal(c: dict, precision: str) -> str | None:
    """The rules that depend on the element size, for a concrete configuration that passed
    _general_refusal()."""
    es = ELEM_BYTES[precision]
    per_chunk = 16 // es
    t = _threads(c)
    if c["BK"] % KSTEP[precision]:
        return f"BK must be a multiple of {KSTEP[precision]}, the k-step"
    for name, lines in (("A", c["BM"]), ("B", c["BN"])):
        chunks = lines * c["BK"] // per_chunk
        if chunks % t or chunks < t:
            return (f"the {name} tile ({chunks} chunks of 16 bytes) does not split evenly over "
                    f"{t} threads; raise BK, or use fewer warps (larger WM/WN)")
    smem = _smem(c, precision)
    if smem > SMEM_PER_BLOCK:
        return (f"it needs {smem} bytes of shared memory per block, more than the 227 KiB an "
                f"H100 block can have; lower STAGES, BK, BM or BN")
    return None


def _refusal(c: dict, precision: str | None) -> str | None:
    return _general_refusal(c) or (_precision_refusal(c, precision) if precision else None)


def _shown(given: dict, c: dict) -> str:
    """name=value for each parameter, the automatic ones as "BM=0 (automatic: 256)"."""
    return ", ".join(f"{k}={given[k]}" + (f" (automatic: {c[k]})" if given[k] != c[k] else "")
                     for k in PARAMS)


def validate(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0, precision=None, **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched: in
    `precision` when it is given, with every rule; without one (lab.compare, the tuner's cache
    check), the rules that do not depend on the element size, for what the automatic values stand
    for in every precision. The automatic values are checked as the concrete values config() makes
    of them (the tuned row, or the previous defaults where that is refused; the shape rule only
    ever picks a row that passes here too), and the sentence names them."""
    given = _given(BM, BN, BK, WM, WN, STAGES, frags)
    where = "mma with " + ", ".join(f"{k}={v}" for k, v in given.items())
    if precision is not None and precision not in PRECISIONS:
        raise LabError(f"{where}: the precision must be one of {', '.join(PRECISIONS)}, not "
                       f"{precision}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in given.values()):
        raise LabError(f"{where}: every parameter must be an integer (0: automatic)")
    if frags not in (0, 1, 2):
        raise LabError(f"{where}: frags must be 0 (automatic), 1 or 2")
    if STAGES and not 2 <= STAGES <= 4:
        raise LabError(f"{where}: STAGES (the cp.async ring depth) must be 0 (automatic), 2, 3 "
                       f"or 4")
    if not all(v == 0 or _pow2(v) for v in (BM, BN, BK, WM, WN)):
        raise LabError(f"{where}: the tile sizes must be powers of two (or 0: automatic)")
    for prec in (precision,) if precision else PRECISIONS:
        c = config(prec, **given)
        why = _refusal(c, precision)
        if why:
            auto = any(given[k] != c[k] for k in PARAMS)
            raise LabError(f"mma with {_shown(given, c)}"
                           + (f" in {prec}" if precision or auto else "") + f": {why}")


def _first_blocks(c: dict, precision: str) -> int:
    t = _threads(c)
    mi, nj = c["WM"] // 16, c["WN"] // 8
    per_set = mi * 4 + nj * 2
    need = c["WM"] * c["WN"] // 32 + c["frags"] * per_set \
        + (mi * 8 if precision == "3xtf32" else 0) + REGS_OVERHEAD
    by_smem = SMEM_PER_SM // (_smem(c, precision) + 1024)
    return max(1, min(first_min_blocks(t), 65536 // (t * min(need, 255)), by_smem))


def first_blocks(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0, precision=DEFAULT_PRECISION,
                 **_) -> int:
    """Blocks per SM to ask ptxas for first (MIN_BLOCKS): what threads, shared memory and the
    estimated registers allow (accumulators, the fragment sets, 3xTF32's split A)."""
    return _first_blocks(config(precision, BM, BN, BK, WM, WN, STAGES, frags), precision)


def defines(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0, group=8,
            precision=DEFAULT_PRECISION, align_a=16, align_b=16, vec_c=True, **_) -> dict:
    """The -D defines of a build (all but the layout's and MIN_BLOCKS), after validate(); the
    automatic values resolved without a shape (config())."""
    validate(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, STAGES=STAGES, frags=frags, precision=precision)
    if ELEM_BYTES[precision] == 4 and 2 in (align_a, align_b):
        raise LabError(f"mma in {precision}: float32 lines are always 4-byte aligned, so "
                       f"ALIGN 2 does not exist")
    c = config(precision, BM, BN, BK, WM, WN, STAGES, frags)
    return {"BM": c["BM"], "BN": c["BN"], "BK": c["BK"], "WM": c["WM"], "WN": c["WN"],
            "STAGES": c["STAGES"], "FRAGS": c["frags"], "GROUP": group, DEFINES[precision]: 1,
            "ALIGN_A": int(align_a), "ALIGN_B": int(align_b), "VEC_C": bool(vec_c)}


def build(BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0, group=8,
          precision=DEFAULT_PRECISION, align_a=16, align_b=16, vec_c=True, layout="nn",
          offsets64=False, **_):
    """offsets64: the 64-bit build (common.cuh's OFFSET64) for a Problem.offsets64 problem.
    The lesson, cuda_kernels/mma.cu, for LESSON_PRECISION in the lesson case with two fragment
    sets; cuda_kernels/variants/mma.cu for everything else (lesson())."""
    d = defines(BM, BN, BK, WM, WN, STAGES, frags, group, precision, align_a, align_b, vec_c)
    c = config(precision, BM, BN, BK, WM, WN, STAGES, frags)
    source = stage_source("mma", lesson(precision, c["frags"], layout, offsets64, align_a,
                                        align_b, vec_c))
    return spill_free_build(source, "matmul_mma", d, _first_blocks(c, precision), layout=layout,
                            offsets64=offsets64)


def lesson(precision: str, frags: int, layout: str = "nn", offsets64: bool = False,
           align_a: int = 16, align_b: int = 16, vec_c: bool = True) -> bool:
    """True where build() compiles the lesson, cuda_kernels/mma.cu: bf16 (LESSON_PRECISION),
    two fragment sets (frags, resolved), and _build.lesson_case: layout nn, 32-bit offsets, both
    operands' lines on 16 bytes and C's rows holding the 4-byte pair stores (vec_c). Every other
    build compiles cuda_kernels/variants/mma.cu (the other precisions, layouts, alignments,
    offsets64, frags=1), which for the lesson case compiles to the same SASS
    (tests/test_lessons_mma.py)."""
    return (precision == LESSON_PRECISION and frags == 2
            and lesson_case(layout, offsets64, align_a == 16, align_b == 16, bool(vec_c)))


def geometry(M: int, N: int, K: int, BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0, frags=0,
             precision=DEFAULT_PRECISION, **_):
    """(grid, block, dynamic shared bytes) of the build() of the same parameters: the automatic
    values resolved without a shape, as build() does (prepare() passes concrete ones)."""
    c = config(precision, BM, BN, BK, WM, WN, STAGES, frags)
    return ((cdiv(M, c["BM"]) * cdiv(N, c["BN"]), 1, 1), (_threads(c), 1, 1), _smem(c, precision))


def variant_flags(p) -> dict:
    """ALIGN_A, ALIGN_B and VEC_C for Problem `p` (see the module docstring)."""
    es = p.c.tensor.element_size()
    return {"align_a": alignment(p.a), "align_b": alignment(p.b), "vec_c": p.c.aligned(2 * es)}


def contiguous_flags(M: int, N: int, K: int, layout: str, precision: str) -> dict:
    """ALIGN_A, ALIGN_B and VEC_C of contiguous operands of these sizes in `layout` (what
    variant_flags() finds for the harness's freshly allocated tensors): a line of A holds K
    elements in a row-major A, M in a column-major one; of B, N or K; of C, N."""
    es = ELEM_BYTES[precision]

    def align(line: int) -> int:
        return 16 if line * es % 16 == 0 else 4 if line * es % 4 == 0 else 2

    return {"align_a": align(M if layout[0] == "t" else K),
            "align_b": align(K if layout[1] == "t" else N), "vec_c": N % 2 == 0}


def compile_for(params, M: int, N: int, K: int, layout: str, precision: str):
    """The build and geometry prepare() uses for contiguous operands of M x N x K in `layout`, on
    an H100 (lab.base.device.DEFAULT_SMS), without a GPU (the contract's `compile`)."""
    cfg = launch_config(M, N, precision, DEFAULT_SMS, **params)
    return (build(**cfg, **contiguous_flags(M, N, K, layout, precision), precision=precision,
                  layout=layout),
            geometry(M, N, K, **cfg, precision=precision))


def _validate(params, precision: str | None = None) -> None:
    """The contract's `validate`: validate() with one sentence for a parameter this launcher does
    not take (the wgmma kernel is stage wgmma now)."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        hint = "; Hopper's wgmma kernel is stage wgmma" if "wgmma" in unknown else ""
        raise LabError(f"stage mma (cuda) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)}){hint}")
    validate(**params, precision=precision)


# GPUs: sm_80+ (mma.sync with bf16 and TF32, cp.async, cvt.rn.bf16x2: mma.cu's #error says so)
OFFER = Offer("mma", "cuda", precisions=PRECISIONS, kernels=("matmul_mma",), validate=_validate,
              resolve=resolved_params, show=config_text, compile=compile_for,
              requires={"all": (8, 0)})


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The launch's
    `config` is the configuration that runs, the automatic values resolved for this precision and
    shape (launch_config()); its text is launch.resources["params"], the row's `params` column."""
    precision = p.precision
    cfg = launch_config(p.M, p.N, precision, sm_count(p.c.tensor.device), **params)
    launch = stage_launcher(build(**cfg, **variant_flags(p), precision=precision,
                                  layout=p.layout, offsets64=p.offsets64),
                            geometry(p.M, p.N, p.K, **cfg, precision=precision), p)
    launch.resources = {**(launch.resources or {}), "params": config_text(cfg)}
    launch.extra["config"] = cfg
    return launch
