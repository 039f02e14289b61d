"""Launcher for cuda_kernels/mma.cu: a tensor-core GEMM through mma.sync, ldmatrix and a cp.async
ring, in four precisions.

Geometry: block (BM/WM)*(BN/WN) warps (1-D; 128 threads at the defaults, 256 in 3xtf32); 1-D
grid of ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() in common.cuh (group); no static shared memory, dynamic
shared memory smem_bytes() = STAGES * (BM + BN) * BK * element size (64 KiB for bf16/fp16 at the
defaults, and for tf32/3xtf32, whose automatic BK is half as many elements); _build.launcher
raises the kernel's limit past 48 KiB.

Precision (Problem.precision, set by the shared code from the registry, lab/stages.py): tf32 and
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
  BM x BN x BK   block tile (powers of two, at least 32; BK at least 16); BK = 0 (the default)
                 means 64 bytes of k per line: 32 bf16/fp16 elements, 16 floats (resolve())
  frags          fragment register sets: 2 (the next k-step's fragments load during this one's
                 mma), 1, or 0 (the default: 2, except 1 for 3xtf32; resolve())
  WM x WN        warp tile; multiples of 16, at least 32 (WN = 0, the default: 64, except 32 for
                 3xtf32, warp_n()); (BM/WM) * (BN/WN) warps, 1..16; at most 64 x 64
                 fp32 accumulators per warp (128 registers per lane)
  STAGES         cp.async ring depth, 2..4
  each tile copy splits into whole 16-byte chunks per thread (depends on the element size:
  checked per precision) and STAGES tiles fit the 227 KiB an H100 block can have.
Rules that depend on the precision are checked where it is known (prepare, build); validate()
without one checks the others. The register cap (__launch_bounds__' second argument) is chosen
as in double_buffered.py: as many blocks per SM as threads, shared memory and the estimated
registers allow, halved until ptxas reports no spills (_build.spill_free_build).
"""

from cuda_kernels._build import cdiv, first_min_blocks, spill_free_build, stage_launcher
from lab.errors import LabError
from lab.operands import entry

PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16")
DEFINES = {"tf32": "PREC_TF32", "3xtf32": "PREC_3XTF32", "bf16": "PREC_BF16", "fp16": "PREC_FP16"}
ELEM_BYTES = {"tf32": 4, "3xtf32": 4, "bf16": 2, "fp16": 2}
KSTEP = {"tf32": 8, "3xtf32": 8, "bf16": 16, "fp16": 16}
DEFAULT_PRECISION = "3xtf32"
DEFAULTS = dict(BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4, frags=0)
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit
SMEM_PER_SM = 228 * 1024     # an H100 SM's; each resident block reserves 1 KiB more
REGS_OVERHEAD = 40           # addresses, indices, loop state (estimate)


def resolve(precision: str, BK: int = 0, frags: int = 0) -> tuple[int, int]:
    """The automatic choices (0) made concrete for `precision`: BK = 64 bytes of k per line (32
    bf16/fp16 elements, 16 floats); frags = 2 (the next k-step's fragments load during this one's
    mma) except 3xtf32 (1: its split operands leave no registers for a second set next to the 128
    accumulators of a 64 x 64 warp tile; ptxas spilled up to 220 bytes with 2 at BK = 16 or 32)."""
    if not BK:
        BK = 64 // ELEM_BYTES[precision]
    if not frags:
        frags = 1 if precision == "3xtf32" else 2
    return BK, frags


def warp_n(WN: int, precision: str = DEFAULT_PRECISION) -> int:
    """WN, with 0 meaning automatic: 64, except 32 for 3xtf32 (a 64 x 64 warp tile's 128
    accumulators, A's split head and tail and the fresh per-k-step sums leave 3xTF32 short of
    registers: ptxas spilled 280 bytes at 255)."""
    return WN or (32 if precision == "3xtf32" else 64)


def threads(BM=128, BN=128, WM=64, WN=0, precision=DEFAULT_PRECISION, **_) -> int:
    return (BM // WM) * (BN // warp_n(WN, precision)) * 32


def smem_bytes(BM=128, BN=128, BK=0, STAGES=4, precision=DEFAULT_PRECISION, **_) -> int:
    """Dynamic shared memory of one block (mma.cu: DYNAMIC_SMEM_BYTES)."""
    BK, _ = resolve(precision, BK)
    return STAGES * (BM + BN) * BK * ELEM_BYTES[precision]


def precision_of(p) -> str:
    """The precision of Problem `p`: p.precision, or (before the shared code sets it) the one
    the operands' dtype implies (float32 -> tf32, bfloat16 -> bf16, float16 -> fp16)."""
    import torch

    precision = getattr(p, "precision", None) or {
        torch.float32: "tf32", torch.bfloat16: "bf16", torch.float16: "fp16"}[p.a.tensor.dtype]
    if precision not in PRECISIONS:
        raise LabError(f"stage mma (cuda) computes on the tensor cores in "
                       f"{', '.join(PRECISIONS)}, not {precision}")
    return precision


def alignment(op) -> int:
    """Bytes every line of operand `op` starts on, as the loader can use them: 16, 4 or 2."""
    if op.aligned(16):
        return 16
    return 4 if op.aligned(4) else 2


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def validate(BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4, frags=0, precision=None,
             **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched (in
    `precision`, when it is given; without one, WN = 0 is checked as every value it can stand
    for)."""
    if not WN:
        for prec in (precision,) if precision else ("tf32", "3xtf32"):
            _validate(BM, BN, BK, WM, warp_n(0, prec), STAGES, frags, precision, auto_wn=True)
        return
    _validate(BM, BN, BK, WM, WN, STAGES, frags, precision)


def _validate(BM, BN, BK, WM, WN, STAGES, frags, precision, auto_wn=False) -> None:
    where = (f"mma with BM={BM}, BN={BN}, BK={BK}, WM={WM}, "
             + (f"WN=0 (automatic: {WN})" if auto_wn else f"WN={WN}")
             + f", STAGES={STAGES}, frags={frags}" + (f" in {precision}" if precision else ""))
    if precision is not None and precision not in PRECISIONS:
        raise LabError(f"{where}: the precision must be one of {', '.join(PRECISIONS)}")
    if frags not in (0, 1, 2):
        raise LabError(f"{where}: frags must be 0 (automatic), 1 or 2")
    if not all(_pow2(x) for x in (BM, BN, WM, WN)) or (BK and not _pow2(BK)):
        raise LabError(f"{where}: the tile sizes must be powers of two (BK may be 0: automatic)")
    if min(BM, BN, WM, WN) < 32:
        raise LabError(f"{where}: BM, BN, WM and WN must be at least 32")
    if not 2 <= STAGES <= 4:
        raise LabError(f"{where}: STAGES (the cp.async ring depth) must be 2, 3 or 4")
    if WM % 16 or WN % 16:
        raise LabError(f"{where}: WM and WN must be multiples of 16 (16 x 16 mma pieces)")
    if BM % WM or BN % WN:
        raise LabError(f"{where}: BM must be a multiple of WM and BN a multiple of WN (whole warp "
                       f"tiles)")
    if WM * WN > 64 * 64:
        raise LabError(f"{where}: a {WM} x {WN} warp tile needs {WM * WN // 32} fp32 accumulators "
                       f"per lane, more than the 128 that leave registers for the fragments; "
                       f"lower WM or WN")
    warps = (BM // WM) * (BN // WN)
    if warps > 16:
        raise LabError(f"{where} needs {warps} warps, more than the 16 (512 threads) this kernel "
                       f"allows; raise WM or WN")
    if BK and BK < 16:
        raise LabError(f"{where}: BK must be at least 16 (one bf16/fp16 k-step), or 0 (automatic)")
    for prec in (precision,) if precision else ():
        _validate_precision(where, BM, BN, resolve(prec, BK)[0], WM, WN, STAGES, prec)


def _validate_precision(where, BM, BN, BK, WM, WN, STAGES, precision) -> None:
    es = ELEM_BYTES[precision]
    per_chunk = 16 // es
    t = threads(BM, BN, WM, WN, precision)
    if BK % KSTEP[precision]:
        raise LabError(f"{where}: BK must be a multiple of {KSTEP[precision]}, the k-step")
    for name, lines, along in (("A", BM, BK), ("B", BN, BK)):
        chunks = lines * along // per_chunk
        if chunks % t or chunks < t:
            raise LabError(f"{where}: the {name} tile ({chunks} chunks of 16 bytes) does not split "
                           f"evenly over {t} threads; raise BK, or use fewer warps (larger WM/WN)")
    smem = smem_bytes(BM, BN, BK, STAGES, precision)
    if smem > SMEM_PER_BLOCK:
        raise LabError(f"{where} needs {smem} bytes of shared memory per block, more than the "
                       f"227 KiB an H100 block can have; lower STAGES, BK, BM or BN")


def first_blocks(BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4, frags=0,
                 precision=DEFAULT_PRECISION, **_) -> int:
    """Blocks per SM to ask ptxas for first (MIN_BLOCKS): what threads, shared memory and the
    estimated registers allow (accumulators, the fragment sets, 3xTF32's split A)."""
    WN = warp_n(WN, precision)
    t = threads(BM, BN, WM, WN, precision)
    _, frags = resolve(precision, BK, frags)
    mi, nj = WM // 16, WN // 8
    per_set = mi * 4 + nj * 2
    need = WM * WN // 32 + frags * per_set + (mi * 8 if precision == "3xtf32" else 0) \
        + REGS_OVERHEAD
    by_smem = SMEM_PER_SM // (smem_bytes(BM, BN, BK, STAGES, precision) + 1024)
    return max(1, min(first_min_blocks(t), 65536 // (t * min(need, 255)), by_smem))


def defines(BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4, frags=0, group=8,
            precision=DEFAULT_PRECISION, align_a=16, align_b=16, vec_c=True, **_) -> dict:
    """The -D defines of a build (all but the layout's and MIN_BLOCKS), after validate()."""
    validate(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, STAGES=STAGES, frags=frags, precision=precision)
    if ELEM_BYTES[precision] == 4 and 2 in (align_a, align_b):
        raise LabError(f"mma in {precision}: float32 lines are always 4-byte aligned, so "
                       f"ALIGN 2 does not exist")
    BK, frags = resolve(precision, BK, frags)
    WN = warp_n(WN, precision)
    return {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "STAGES": STAGES, "FRAGS": frags,
            "GROUP": group, DEFINES[precision]: 1, "ALIGN_A": int(align_a),
            "ALIGN_B": int(align_b), "VEC_C": bool(vec_c)}


def build(BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4, frags=0, group=8,
          precision=DEFAULT_PRECISION, align_a=16, align_b=16, vec_c=True, layout="nn", **_):
    d = defines(BM, BN, BK, WM, WN, STAGES, frags, group, precision, align_a, align_b, vec_c)
    first = first_blocks(BM, BN, BK, WM, WN, STAGES, frags, precision)
    return spill_free_build("mma.cu", "matmul_mma", d, first, layout=layout)


def geometry(M: int, N: int, K: int, BM=128, BN=128, BK=0, WM=64, WN=0, STAGES=4,
             precision=DEFAULT_PRECISION, **_):
    return ((cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, WM, WN, precision), 1, 1),
            smem_bytes(BM, BN, BK, STAGES, precision))


def variant_flags(p) -> dict:
    """ALIGN_A, ALIGN_B and VEC_C for Problem `p` (see the module docstring)."""
    es = p.c.tensor.element_size()
    return {"align_a": alignment(p.a), "align_b": alignment(p.b), "vec_c": p.c.aligned(2 * es)}


@entry("mma", "cuda")
def prepare(p, **params):
    """p: the shared description of the operands (lab/operands.py), with p.precision."""
    precision = precision_of(p)
    params = {k: v for k, v in params.items()
              if k not in ("align_a", "align_b", "vec_c", "layout", "precision")}
    validate(**params, precision=precision)
    return stage_launcher(build(**params, **variant_flags(p), precision=precision,
                                layout=p.layout),
                          geometry(p.M, p.N, p.K, **params, precision=precision), p)
