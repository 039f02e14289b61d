"""Launcher for cuda_kernels/gemv.cu: thin products (matrix-vector), A streamed once with 16-byte
loads, B reused from registers across rows, warp-shuffle sums, split-K where rows are few.

gemv.cu is the lesson, written for fp32, row-major A and B (layout nn), one column per block
(ncol 1), 16-byte-aligned lines, 32-bit offsets, no split and unroll on; every other build, and
the split-K sum, compiles cuda_kernels/variants/gemv.cu, the same kernels for every precision,
layout, ncol, alignment, offsets64 and split (build(), lesson(); docs/stages/gemv.md, "The lesson
and its variants").

Two kernels in one source (the variant), chosen by A's layout (the .cu headers have the details):
- A row-major (nn, nt): the rows kernel. Block of 32 * warps threads in row groups of `lanes`
  threads; a row group owns `rows` rows of C and splits their k range over its lanes (16-byte
  chunks r, r + lanes, ...). Block rows: (threads / lanes) * rows.
- A column-major (tn, tt): the columns kernel. One warp per k, its 32 lanes along M (a 16-byte
  chunk of 4 fp32 or 8 16-bit rows each). Block rows: 32 * VW.
Geometry: block 32 * warps threads (256 by default, 1-D); grid (row blocks * ceil(N/ncol), splitk):
x = row block * column groups + column group, y = the split; static shared memory only for the
sums across warps; no dynamic shared memory.

Automatic values (0 in the registry; resolve(), for a shape and a GPU's SM count):
- ncol = 0: the power of two at or above N, at most 8 (N = 1: 1; N = 3: 4; N = 17: 8, in 3
  column groups, the last with one column of C).
- rows = 0: 4 for ncol 1 or 2, 2 for ncol 4, 1 for ncol 8 (at most 8 accumulators per thread),
  and no more than the power of two at or above M.
- kunroll: the chunks per row in flight per thread, at most the given value and at most what
  leaves the loaded words of one iteration (4 per 16-byte chunk of A, one per value of B) within
  WORDS_IN_FLIGHT registers: kunroll=8 with rows=4 runs 6. The resolved value is what runs.
- lanes = 0: the largest power of two, at most the block's threads, that still gives every lane
  at least one batch of kunroll chunks of K (K = 2^20 or 4096: 256; K = 129 fp32: 16; K = 2: 1).
- splitk = 0 (auto_split()): 1 unless the blocks are fewer than TARGET_PER_SM x the SM count
  (4,224 on an H100's 132 SMs), else the split among lab.base.splitk.SPLITS whose blocks x split lies
  nearest that target (lab.base.splitk.nearest_split) and that leaves each block at least
  MIN_SPLIT_BYTES of A (lab.base.splitk.allowed_splits). 2048 x 1 x 1048576 fp32: 512 blocks of 4
  rows, split 8: 4,096 blocks of 2 MB each. 4097 x 1 x 4096: 1,025 blocks of 64 KB, no split (a
  split of 2 would leave 32 KB per block).
  Why a target of 32 blocks per SM: about 3-4 blocks of 256 threads are resident per SM, so 32
  per SM is 8 or more rounds; the last round is then a small part of the whole, and no block
  streams so much (2 MB at 2048 x 1 x 1048576, against 16 MB unsplit) that a late one holds
  the end of the kernel back.
resources["params"] shows the resolved values; launch.config is the dict.

Alignment flags (per call, from the operands; vec_a / vec_b in build()): VEC_A where A's base and
every line (row, or column of a transposed A) start on a 16-byte boundary; VEC_B where B's values
along k are contiguous (a column-major B, or a K x 1 B with unit stride) and 16-byte aligned. The
CPU mode's compile (no tensors) describes contiguous operands: both on.

Split-K (splitk = S > 1): prepare() allocates the workspace (S slabs of M x N floats; setup, in
launch.setup_ms) and the call runs matmul_gemv (grid y = S, each split writes its slab) then
gemv_splitk_sum (the slabs added in order, rounded once to C's type). Both are timed.
"""

from __future__ import annotations

from cuda_kernels._build import (cdiv, compile_kernel, first_min_blocks, launcher,
                                lesson_case, resources, stage_source)
from lab.base.contract import Offer, Prepared
from lab.base.errors import LabError
from lab.base.precisions import cuda_defines, elem_bytes
from lab.base.entry import entry
from lab.base.timer import timer
from lab.base.device import DEFAULT_SMS, sm_count
from lab.base.splitk import AUTO, SPLITS, allowed_splits, nearest_split

PRECISIONS = ("fp32", "bf16", "fp16")
LESSON_PRECISION = "fp32"  # the precision gemv.cu, the lesson, is written for
ELEM_BYTES = elem_bytes("fp32", "bf16", "fp16")  # sizes from lab/base/precisions.py
PREC_DEFINES = {p: {d: 1} if d else {} for p, d in cuda_defines("fp32", "bf16", "fp16").items()}
MAX_NCOL = 8
ROWS_FOR_NCOL = {1: 4, 2: 4, 4: 2, 8: 1}  # rows = 0: at most 8 accumulators per thread
MAX_ACC = 32  # rows * ncol accumulators per thread that validate() lets through
WORDS_IN_FLIGHT = 128  # registers of loaded values per iteration that kunroll may fill
TARGET_PER_SM = 32  # the automatic split aims blocks x split at this multiple of the SM count
MIN_SPLIT_BYTES = 64 * 1024  # ... and keeps every block's share of A at least this many bytes
REGS_OVERHEAD = 32  # registers besides the loaded values and accumulators (addresses, loop)
SUM_THREADS = 256  # gemv_splitk_sum's block

# the registry's CUDA parameters of this stage, in its order: the `params` column's order
PARAM_ORDER = ("ncol", "rows", "lanes", "kunroll", "warps", "fast_math", "unroll", "splitk")


def vector_width(precision: str) -> int:
    """Elements in one 16-byte chunk: 4 fp32, 8 bf16 or fp16."""
    return 16 // ELEM_BYTES[precision]


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def auto_ncol(N: int) -> int:
    return min(MAX_NCOL, pow2_at_least(max(N, 1)))


def auto_rows(ncol: int, M: int) -> int:
    return min(ROWS_FOR_NCOL[ncol], pow2_at_least(max(M, 1)))


def loaded_words(rows: int, ncol: int, precision: str, a_trans: bool = False) -> int:
    """Registers one chunk per row of an iteration loads: 4 per 16-byte chunk of A, and B's
    values as floats (rows kernel: VW per column; columns kernel: one per column)."""
    if a_trans:
        return 4 + ncol
    return 4 * rows + vector_width(precision) * ncol


def effective_kunroll(kunroll: int, rows: int, ncol: int, precision: str,
                      a_trans: bool = False) -> int:
    """kunroll, lowered so that one iteration's loads stay within WORDS_IN_FLIGHT registers."""
    return max(1, min(kunroll, WORDS_IN_FLIGHT // loaded_words(rows, ncol, precision, a_trans)))


def auto_lanes(K: int, threads: int, kunroll: int, precision: str) -> int:
    """Threads per row group: every lane gets at least one batch of kunroll chunks of K."""
    return min(threads, pow2_at_most(max(1, cdiv(K, vector_width(precision) * kunroll))))


def block_rows(precision: str, a_trans: bool, threads: int = 256, lanes: int = 256,
               rows: int = 4) -> int:
    """Rows of C one block computes."""
    if a_trans:
        return 32 * vector_width(precision)
    return (threads // lanes) * rows


def auto_split(blocks: int, K: int, bytes_per_k: int, sms: int | None = None) -> int:
    """splitk = 0: 1 unless `blocks` are fewer than TARGET_PER_SM x sms, else the split of
    lab.base.splitk.SPLITS nearest that target in blocks x split that leaves each block at least
    MIN_SPLIT_BYTES of A (bytes_per_k: the bytes of A one block reads per k)."""
    target = TARGET_PER_SM * int(sms or DEFAULT_SMS)
    if blocks >= target:
        return 1
    splits = allowed_splits(SPLITS, K, cdiv(MIN_SPLIT_BYTES, max(1, bytes_per_k)))
    return nearest_split(blocks, target, splits)


def resolve(params, M: int, N: int, K: int, precision: str = "fp32", sms: int = DEFAULT_SMS,
            a_trans: bool = False) -> dict:
    """The parameters as they are built and launched for an M x N x K problem on a GPU of `sms`
    SMs (the contract's `resolve`; a_trans: A is column-major, the columns kernel, where rows and
    lanes play no part). Also `kernel`: "rows" or "columns"."""
    out = dict(params)
    threads = 32 * out.get("warps", 8)
    ncol = out.get("ncol", 0) or auto_ncol(N)
    rows = out.get("rows", 0) or auto_rows(ncol, M)
    ku = effective_kunroll(out.get("kunroll", 2), rows, ncol, precision, a_trans)
    lanes = out.get("lanes", 0) or auto_lanes(K, threads, ku, precision)
    out.update(ncol=ncol, rows=rows, kunroll=ku, lanes=lanes,
               kernel="columns" if a_trans else "rows")
    if out.get("splitk", AUTO) == AUTO:
        br = block_rows(precision, a_trans, threads, lanes, rows)
        blocks = cdiv(M, br) * cdiv(N, ncol)
        out["splitk"] = auto_split(blocks, K, br * ELEM_BYTES[precision], sms)
    return out


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order as they run (the columns
    kernel has no rows or lanes)."""
    skip = ("rows", "lanes") if resolved.get("kernel") == "columns" else ()
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if k in resolved and k not in skip)


def validate(ncol: int = 0, rows: int = 0, lanes: int = 0, kunroll: int = 2, warps: int = 8,
             splitk: int = AUTO, **_) -> None:
    """Raise LabError (one sentence) for a combination that cannot be built or launched."""
    threads = 32 * warps
    if threads > 1024:
        raise LabError(f"gemv with warps={warps} asks for {threads} threads per block, more than "
                       f"1024; lower warps")
    if lanes > threads:
        raise LabError(f"gemv with lanes={lanes} and warps={warps}: a row's threads cannot "
                       f"outnumber the block's {threads}; lower lanes or raise warps")
    # rows = 0 keeps rows * ncol at 8 or fewer; ncol = 0 may stand for 8 columns
    most = rows * (ncol or MAX_NCOL) if rows else 8
    if most > MAX_ACC:
        raise LabError(f"gemv with rows={rows} and ncol={ncol} gives a thread up to {most} "
                       f"accumulators, more than the {MAX_ACC} that fit beside its loads; lower "
                       f"rows or give ncol (0 may mean 8 columns)")
    if splitk < 0:
        raise LabError(f"gemv with splitk={splitk}: splitk must be 0 (chosen from the shape) or "
                       f"1 or more")


def kernels(params, precision: str) -> tuple[str, ...]:
    """The main kernel, and the split-K sum after it when K is split (or may be: splitk=0)."""
    return ("matmul_gemv",) + (("gemv_splitk_sum",) if params.get("splitk", 1) != 1 else ())


def first_blocks(threads: int, rows: int, ncol: int, ku: int, precision: str,
                 a_trans: bool) -> int:
    """Blocks per SM to ask ptxas for first: what the thread count allows, but no more than
    leave the loaded values, the accumulators and REGS_OVERHEAD registers per thread."""
    acc = ncol * (vector_width(precision) if a_trans else rows)
    need = ku * loaded_words(rows, ncol, precision, a_trans) + acc + REGS_OVERHEAD
    return max(1, min(first_min_blocks(threads), 65536 // (threads * need)))


def build(ncol: int = 0, rows: int = 0, lanes: int = 0, kunroll: int = 2, warps: int = 8,
          splitk: int = 1, fast_math: bool = False, unroll: bool = True,
          precision: str = "fp32", layout: str = "nn", vec_a: bool = True, vec_b: bool = True,
          offsets64: bool = False, **_):
    """matmul_gemv (NVRTC, no GPU needed). Automatic values without a shape: ncol 0 builds 1
    column, rows 0 the rows for it, lanes 0 the whole block, splitk 0 the unsplit kernel
    (resolve() first). __launch_bounds__(threads, MIN_BLOCKS): the largest MIN_BLOCKS from
    first_blocks() down whose build does not spill. The lesson, cuda_kernels/gemv.cu, in the
    lesson case (lesson()); cuda_kernels/variants/gemv.cu for everything else."""
    validate(ncol=ncol, rows=rows, lanes=lanes, kunroll=kunroll, warps=warps, splitk=splitk)
    threads = 32 * warps
    a_trans = layout[0] == "t"
    ncol = ncol or 1
    rows = rows or ROWS_FOR_NCOL[ncol]
    ku = effective_kunroll(kunroll, rows, ncol, precision, a_trans)
    defines = {"THREADS": threads, "NCOL": ncol, "ROWS": rows, "LANES": lanes or threads,
               "KU": ku, "SPLITK": max(splitk, 1), "VEC_A": bool(vec_a), "VEC_B": bool(vec_b),
               **PREC_DEFINES[precision]}
    source = stage_source("gemv", lesson(precision, layout, ncol, splitk, unroll, vec_a, vec_b,
                                         offsets64))
    for blocks in range(first_blocks(threads, rows, ncol, ku, precision, a_trans), 0, -1):
        main = compile_kernel(source, "matmul_gemv", {**defines, "MIN_BLOCKS": blocks},
                              fast_math=fast_math, unroll=unroll, layout=layout,
                              offsets64=offsets64)
        if main.spill_bytes == 0:
            break
    return main


def lesson(precision: str = "fp32", layout: str = "nn", ncol: int = 1, splitk: int = 1,
           unroll: bool = True, vec_a: bool = True, vec_b: bool = True,
           offsets64: bool = False) -> bool:
    """True where build() compiles the lesson, cuda_kernels/gemv.cu: fp32 (LESSON_PRECISION), one
    column per block (ncol, resolved: 0 builds 1), no split (splitk 0 or 1: the unsplit kernel),
    unroll on (KU chunks in flight), and _build.lesson_case: layout nn, 32-bit offsets, vec_a and
    vec_b. Every other build compiles cuda_kernels/variants/gemv.cu, which for the lesson case
    compiles to the same SASS (tests/test_lessons_gemv.py)."""
    return (precision == LESSON_PRECISION and (ncol or 1) == 1 and splitk <= 1 and bool(unroll)
            and lesson_case(layout, offsets64, bool(vec_a), bool(vec_b)))


def build_sum(splitk: int = 2, precision: str = "fp32", offsets64: bool = False, **_):
    """gemv_splitk_sum for `splitk` slabs, writing C in `precision`'s type (the split-K variant's
    kernel: cuda_kernels/variants/gemv.cu)."""
    return compile_kernel("variants/gemv.cu", "gemv_splitk_sum",
                          {"SPLITK": splitk, "RTHREADS": SUM_THREADS, "SUM_ONLY": 1,
                           **PREC_DEFINES[precision]}, offsets64=offsets64)


def geometry(M: int, N: int, K: int, ncol: int = 0, rows: int = 0, lanes: int = 0,
             warps: int = 8, splitk: int = 1, precision: str = "fp32", layout: str = "nn", **_):
    """(grid, block, dynamic shared bytes) of matmul_gemv for concrete values (0 reads as in
    build())."""
    threads = 32 * warps
    ncol = ncol or 1
    br = block_rows(precision, layout[0] == "t", threads, lanes or threads,
                    rows or ROWS_FOR_NCOL[ncol])
    return (cdiv(M, br) * cdiv(N, ncol), max(splitk, 1), 1), (threads, 1, 1), 0


def sum_geometry(M: int, N: int):
    return (cdiv(M * N, SUM_THREADS), 1, 1), (SUM_THREADS, 1, 1), 0


def compile_for(params, M: int, N: int, K: int, layout: str = "nn", precision: str = "fp32"):
    """The main kernel's build and geometry as prepare() makes them for contiguous operands of
    M x N x K in `layout` on an H100 (DEFAULT_SMS: CPU mode and the tuner's probe have no GPU)."""
    r = resolve(params, M, N, K, precision, DEFAULT_SMS, a_trans=layout[0] == "t")
    return (build(**r, precision=precision, layout=layout),
            geometry(M, N, K, **r, precision=precision, layout=layout))


# GPUs: fp32 from sm_75; bf16 and fp16 from sm_80 (the variant rounds C with cvt.rn.bf16.f32)
OFFER = Offer("gemv", "cuda", precisions=PRECISIONS, kernels=kernels,
              validate=lambda params, precision: validate(**params), resolve=resolve, show=show,
              compile=compile_for, requires={"bf16": (8, 0), "fp16": (8, 0)})


def flags(p) -> dict:
    """vec_a / vec_b for the operands of Problem p (the module docstring)."""
    es = ELEM_BYTES[p.precision]

    def base(op) -> bool:
        return op.tensor.data_ptr() % 16 == 0

    lines_a = p.K if p.a.trans else p.M  # columns of a column-major A, rows of a row-major one
    vec_a = base(p.a) and (lines_a <= 1 or (p.a.ld * es) % 16 == 0)
    if p.b.trans:  # B's columns run along k
        vec_b = base(p.b) and (p.N <= 1 or (p.b.ld * es) % 16 == 0)
    else:  # a row-major B runs along k only as one column with unit stride
        vec_b = base(p.b) and p.N == 1 and p.b.ld == 1
    return {"vec_a": vec_a, "vec_b": vec_b}


@entry(OFFER)
def prepare(p, splitk: int = AUTO, **params):
    """p: the shared description of the operands (lab/base/problem.py). Automatic values resolved for
    this problem and this GPU (resolve()); launch.config is what runs and its text the row's
    `params` column."""
    import numpy as np
    import torch

    config = resolve({**params, "splitk": splitk}, p.M, p.N, p.K, p.precision,
                     sm_count(p.c.tensor.device), a_trans=p.a.trans)
    s = config["splitk"]
    main = build(**config, precision=p.precision, layout=p.layout, **flags(p),
                 offsets64=p.offsets64)
    grid, block, smem = geometry(p.M, p.N, p.K, **config, precision=p.precision,
                                 layout=p.layout)
    i32 = np.int32
    shape = (i32(p.M), i32(p.N), i32(p.K), i32(p.a.ld), i32(p.b.ld))
    info = {**resources(main, grid, block, smem), "params": show(config)}
    if s == 1:
        kernel = launcher(main, grid, block, (p.a.tensor, p.b.tensor, p.c.tensor, *shape,
                                              i32(p.c.ld)))
        return Prepared.of_steps([kernel.step], resources=info, build=main, config=config)

    clock = timer(p.c.tensor.is_cuda)
    work = torch.empty(s * p.M * p.N, dtype=torch.float32, device=p.c.tensor.device)
    setup_ms = clock.stop()
    partials = launcher(main, grid, block, (p.a.tensor, p.b.tensor, work, *shape, i32(p.N)))
    total = build_sum(s, p.precision, offsets64=p.offsets64)
    sgrid, sblock, _ = sum_geometry(p.M, p.N)
    add = launcher(total, sgrid, sblock, (work, p.c.tensor, i32(p.M), i32(p.N), i32(p.c.ld)))
    # setup_reusable: the workspace is allocated once and every call rewrites all of it
    return Prepared.of_steps([partials.step, add.step], resources=info, build=main,
                             setup_ms=setup_ms, sum_build=total, workspace=work, config=config,
                             setup_reusable=True)
