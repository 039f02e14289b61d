"""The lesson of stage gemv and its variant (docs/ARCHITECTURE.md, "Lessons and variants";
../shared/DESIGN.md rule 13).

cuda_kernels/gemv.cu is the stage's idea written out for its lesson case: fp32, row-major A and B
(layout nn), one column of C per block (ncol 1: what the launcher picks for N = 1), 16-byte-aligned
lines (vec_a, vec_b), 32-bit offsets, K not split, unroll on. It is the rows kernel only: 16-byte
loads of A into registers, KU chunks per row in flight, B reused across ROWS rows, the warp-shuffle
butterfly and the sum across warps. cuda_kernels/variants/gemv.cu is the former file, unchanged but
for a note at its top: bf16 / fp16, the columns kernel (a column-major A), a column-major B,
ncol > 1, unaligned lines, offsets64, split-K and its fixed-order sum (gemv_splitk_sum), unroll=0,
and the emulator's twin of the shuffle.
(a) The lesson holds none of the moved machinery and takes from common.cuh only CEIL_DIV and
    MIN_BLOCKS; the variant opens with the note and defines the same kernel.
(b) The launcher compiles the lesson exactly for the lesson case (gemv.lesson, Build.source), the
    variant for every other precision, layout, ncol, alignment, offsets64, split and unroll=0;
    the split-K sum is always the variant's.
(c) The lesson's build is the variant's build of the same case, instruction for instruction (SASS
    without addresses and encodings, registers, spills, stack, shared memory), over every choice
    of every CUDA parameter of the registry (lab/stages.py) that builds the lesson, combinations
    of lanes, rows, kunroll and warps that reach each sum regime, the builds prepare() makes for
    matrix-vector shapes, and the default on sm_80.
(d) The CPU emulator (tests/cuda_emulator.py) runs the lesson itself at edge sizes, through its
    host __shfl_xor_sync (the partner's value through a block-wide array between two barriers,
    valid because every thread of the block reaches the lesson's sums together: the variant's own
    CPU twin of segment_sum does the same), since the lesson keeps no emulator branch.
    tests/test_gemv.py emulates the variant in every case.
"""

from __future__ import annotations

import concurrent.futures
import re

import pytest

from helpers import ROOT, cpu_only, stage_params
from lab.base.errors import LabError
from lab.stages import get_stage
from lesson_helpers import (aligned_ld, assert_same_sass, common_names, fresh_lesson_and_variant,
                            lesson_and_variant_builds as both_builds, sass_listing,
                            without_comments)

KERNELS = ROOT / "cuda_kernels"
KERNEL = "matmul_gemv"
JOBS = 2  # NVRTC and g++ processes at a time (the CPU is shared with other test runs)


def _gemv():
    return get_stage("gemv").module("cuda")


# ------------------------------------------------------------------ (a) the files

# What the lesson leaves to its variant: the 16-bit precisions and their conversions, the columns
# kernel (a column-major A), the layout and alignment switches, several columns per block, 64-bit
# offsets, split-K and its sum, unroll=0's single chunk, the emulator's twin (host branches).
MOVED = ("TRANS_A", "TRANS_B", "A_OFF", "B_OFF", "VEC_A", "VEC_B", "offset_t", "OFFSET64",
         "SPLITK", "SUM_ONLY", "RTHREADS", "gemv_splitk_sum", "PREC", "PREC_BF16", "PREC_FP16",
         "elem_t", "out_t", "to_float", "put", "VW", "NCOL", "jc", "KUE", "UNROLL", "COL_ROWS",
         "cols_loop", "load_column", "load_vec", "Vec", "vec_t", "zero_acc", "__CUDA_ARCH__",
         "split")
ALLOWED_FROM_COMMON = {"CEIL_DIV", "MIN_BLOCKS"}


def test_the_lesson_holds_none_of_the_moved_machinery():
    text = (KERNELS / "gemv.cu").read_text()
    code = without_comments(text)
    found = [n for n in MOVED if re.search(rf"\b{n}\b", code)]
    assert not found, f"gemv.cu names {found}"
    # one precision (no 16-bit types or conversions) and one kernel: no host branch, and no
    # switch but the sum across warps, which exists only where a row group spans several warps
    assert "unsigned short" not in code and "cvt." not in code and "asm" not in code
    assert re.findall(r"#\s*(?:if|ifdef|elif)\b.*", code) == ["#if LANES <= 32"]
    assert code.count('extern "C" __global__') == 1
    assert "Lesson case: fp32, row-major A and B" in text  # the header says which case
    assert "cuda_kernels/variants/gemv.cu" in text         # and where the rest lives


def test_the_lesson_takes_only_the_ladder_s_basics_from_common_cuh():
    code = without_comments((KERNELS / "gemv.cu").read_text())
    used = {n for n in common_names() if re.search(rf"\b{n}\b", code)}
    assert used - ALLOWED_FROM_COMMON == set(), f"gemv.cu uses {sorted(used)}"


def test_the_lesson_writes_out_its_loads_inner_product_and_sums():
    code = without_comments((KERNELS / "gemv.cu").read_text())
    for piece in ("*reinterpret_cast<const Chunk*>(p)",                # 16-byte loads
                  "av[u][p] = load_chunk(a[p] + (c + u * LANES) * 4)",  # KU chunks per row
                  "load_b<BVEC>(B, ldb, k0 + (c + u * LANES) * 4, j, bv[u])",
                  "acc[p] = fmaf(av[u][p].v[e], bv[u][e], acc[p])",    # B reused over ROWS rows
                  "__shfl_xor_sync(0xffffffffu, v[i], m)",             # the butterfly
                  "if (ldb == 1)",                                     # B as a vector along k
                  "__shared__ float part[WARPS][ROWS]"):               # the sum across warps
        assert piece in code, piece
    assert code.count("__syncthreads()") == 1


def test_the_variant_is_the_former_file_with_a_note():
    lesson = (KERNELS / "gemv.cu").read_text()
    variant = (KERNELS / "variants" / "gemv.cu").read_text()
    note, sep, former = variant.partition("\n// Stage: gemv.")
    assert sep and variant.startswith("// Variant of ../gemv.cu for every other case")
    assert "A reader can skip it" in note and all(line.startswith("//")
                                                  for line in note.splitlines())
    for name in ("TRANS_A", "VEC_A", "VEC_B", "NCOL", "offset_t", "PREC_BF16", "SPLITK",
                 "gemv_splitk_sum", "SUM_ONLY", "cols_loop", "KUE", "#ifdef __CUDA_ARCH__"):
        assert name in former, name
    kernel = f'extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)\n{KERNEL}('
    assert kernel in lesson and kernel in variant


# ------------------------------------------------------------------ (b) the launcher's choice

def test_the_lesson_case():
    lesson = _gemv().lesson
    assert _gemv().LESSON_PRECISION == "fp32"
    assert lesson() and lesson("fp32", "nn", 1, 1, True, True, True, False)
    assert lesson(ncol=0) and lesson(splitk=0)  # the values build() makes of them: 1, unsplit
    for precision in ("bf16", "fp16"):
        assert not lesson(precision)
    for layout in ("nt", "tn", "tt"):
        assert not lesson(layout=layout)
    for ncol in (2, 4, 8):
        assert not lesson(ncol=ncol)
    assert not lesson(splitk=2) and not lesson(unroll=False)
    assert not lesson(vec_a=False) and not lesson(vec_b=False) and not lesson(offsets64=True)


CHOICES = [  # (build arguments, the lesson?)
    ({}, True), (dict(ncol=1), True), (dict(splitk=1), True),
    (dict(splitk=0), True),   # no shape to resolve it against: the unsplit kernel
    (dict(rows=1, lanes=16, kunroll=4, warps=4), True), (dict(fast_math=True), True),
    (dict(precision="bf16"), False), (dict(precision="fp16"), False),
    (dict(layout="nt"), False), (dict(layout="tn"), False), (dict(layout="tt"), False),
    (dict(ncol=2), False), (dict(ncol=8, rows=1), False),
    (dict(vec_a=False), False), (dict(vec_b=False), False), (dict(offsets64=True), False),
    (dict(splitk=2), False), (dict(splitk=8), False), (dict(unroll=False), False),
    (dict(splitk=3, layout="tt", precision="bf16"), False),
]


@cpu_only
def test_the_launcher_compiles_the_lesson_only_for_the_lesson_case():
    params = stage_params("gemv", "cuda")
    gemv = _gemv()
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        builds = list(pool.map(lambda c: gemv.build(**{**params, **c[0]}), CHOICES))
    for (args, lesson), build in zip(CHOICES, builds):
        assert build.source == ("gemv.cu" if lesson else "variants/gemv.cu"), args
        assert build.kernel == KERNEL


@cpu_only
def test_the_split_k_sum_is_the_variant_s():
    build = _gemv().build_sum(8, "fp32")
    assert build.source == "variants/gemv.cu" and build.kernel == "gemv_splitk_sum"


@cpu_only
def test_the_contract_s_compile_picks_by_the_shape():
    """OFFER.compile (CPU mode's resource report, the tuner's dry run) for contiguous operands:
    4097x1x4096 fp32 nn (unsplit, one column) is the lesson; 2048x1x1048576 (split 8), N = 3
    (ncol 4), bf16 and a column-major A are the variant."""
    offer = get_stage("gemv").offer("cuda")
    params = stage_params("gemv", "cuda")
    assert offer.compile(params, 4097, 1, 4096, "nn", "fp32")[0].source == "gemv.cu"
    assert offer.compile(params, 37, 1, 130, "nn", "fp32")[0].source == "gemv.cu"
    for shape, layout, precision in (((2048, 1, 1 << 20), "nn", "fp32"),
                                     ((4097, 3, 4096), "nn", "fp32"),
                                     ((4097, 1, 4096), "nn", "bf16"),
                                     ((4097, 1, 4096), "tn", "fp32")):
        build = offer.compile(params, *shape, layout, precision)[0]
        assert build.source == "variants/gemv.cu", (shape, layout, precision)


# ------------------------------------------------------------------ (c) the SASS

def _sass_sets() -> list[dict]:
    """The defaults; every choice of every CUDA parameter of the registry, one at a time, where
    it is valid and builds the lesson (ncol > 1, splitk > 1 and unroll=0 are the variant's);
    combinations that reach each sum regime (lanes of 1, 2 and 16: shuffles inside a warp; 64
    over 4 warps; 512 over 16) and the widest loads (rows 1 with kunroll 8); the builds prepare()
    makes at 4097x1x4096 and at short K's (37x1x130: 16 lanes). Parameter sets that build the
    same defines are compiled once."""
    gemv = _gemv()
    candidates = [{}]
    for p in get_stage("gemv").params:
        if "cuda" in p.backends:
            candidates += [{p.name: v} for v in p.choices if v != p.default]
    candidates += [dict(lanes=16, rows=2), dict(lanes=1, warps=2), dict(lanes=64, warps=4),
                   dict(lanes=512, warps=16), dict(rows=1, kunroll=8),
                   dict(lanes=2, rows=2, kunroll=1, warps=2), dict(lanes=32, rows=1, kunroll=4)]
    for M, N, K in ((4097, 1, 4096), (37, 1, 130), (5, 1, 9)):
        r = gemv.resolve(stage_params("gemv", "cuda"), M, N, K)
        candidates.append({k: r[k] for k in ("ncol", "rows", "lanes", "kunroll", "splitk")})
    seen, sets = set(), []
    for changes in candidates:
        params = stage_params("gemv", "cuda", **changes)
        try:
            gemv.validate(**params)
        except LabError:
            continue
        if not gemv.lesson(ncol=params["ncol"], splitk=params["splitk"],
                           unroll=params["unroll"]):
            continue
        ncol = params["ncol"] or 1
        rows = params["rows"] or gemv.ROWS_FOR_NCOL[ncol]
        key = (rows, params["lanes"] or 32 * params["warps"], params["warps"],
               gemv.effective_kunroll(params["kunroll"], rows, ncol, "fp32"),
               params["fast_math"])
        if key not in seen:
            seen.add(key)
            sets.append(changes)
    return sets


SASS_SETS = _sass_sets()


def _lesson_build(i: int):
    """Case i of SASS_SETS built by the launcher; the last case is the defaults on sm_80 (the
    sm_90 build's options with the architecture changed)."""
    from lab.toolchain import nvrtc

    if i == len(SASS_SETS):
        first = _gemv().build(**stage_params("gemv", "cuda"))
        options = tuple("-arch=sm_80" if o.startswith("-arch=") else o for o in first.options)
        return nvrtc._compile("gemv.cu", KERNEL, options, "sm_80")
    return _gemv().build(**stage_params("gemv", "cuda", **SASS_SETS[i]))


@pytest.fixture(scope="module")
def lesson_and_variant_builds():
    """{case index: (the lesson's build, the variant compiled with the same options)}."""
    return both_builds(range(len(SASS_SETS) + 1), _lesson_build, jobs=JOBS)


def test_the_sass_sets_reach_every_sum_regime():
    lanes = set()
    for changes in SASS_SETS:
        params = stage_params("gemv", "cuda", **changes)
        lanes.add(params["lanes"] or 32 * params["warps"])
    assert {1, 2, 16, 32, 64, 128, 256, 512} <= lanes
    assert {} in SASS_SETS and dict(fast_math=True) in SASS_SETS and len(SASS_SETS) >= 20


@cpu_only
@pytest.mark.parametrize("i", range(len(SASS_SETS) + 1),
                         ids=[str(c) for c in SASS_SETS] + ["sm_80"])
def test_the_lesson_compiles_to_the_variant_s_sass(lesson_and_variant_builds, i):
    lesson, variant = lesson_and_variant_builds[i]
    assert lesson.source == "gemv.cu" and variant.source == "variants/gemv.cu"
    assert "-DSPLITK=1" in lesson.options and "-DNCOL=1" in lesson.options
    assert_same_sass(lesson, variant, str(SASS_SETS[i]) if i < len(SASS_SETS) else "sm_80",
                     rebuild=lambda: fresh_lesson_and_variant(_lesson_build, i))
    assert any(op.startswith("LDG.E.128") for op in sass_listing(lesson))


# ------------------------------------------------------------------ (d) the lesson, emulated

EMU_KERNELS = [  # (the registry's parameters, explicit: one build serves every shape)
    dict(ncol=1, rows=4, lanes=256, kunroll=2, warps=8, splitk=1),   # the matrix-vector default
    dict(ncol=1, rows=2, lanes=16, kunroll=2, warps=8, splitk=1),    # shuffles inside a warp
    dict(ncol=1, rows=4, lanes=1, kunroll=2, warps=2, splitk=1),     # one lane a row: no shuffle
    dict(ncol=1, rows=1, lanes=64, kunroll=8, warps=4, splitk=1),    # two warps a row group
]
# (M, N, K, ldb = 1?): K a multiple of 4 (no tail) or not (the tail), shorter than one chunk,
# shorter than one batch of every lane, and long; M across block edges; N = 1 with B a vector
# (ldb = 1) or k-strided, and N = 3 (ncol 1: three column blocks)
EDGE_SHAPES = [(1, 1, 1, True), (5, 1, 3, True), (13, 1, 129, True), (129, 1, 1030, True),
               (7, 1, 4099, True), (33, 1, 256, True), (130, 1, 13, False), (4, 1, 8, False),
               (13, 3, 130, False), (5, 3, 1, False)]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """{index of EMU_KERNELS: (the lesson's build, its executable)}: the emulator's program."""
    from cuda_emulator import EMULATOR, compile_async, compiler, defines_of

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    root = tmp_path_factory.mktemp("lessons_gemv")
    head = EMULATOR.partition("#include KERNEL_FILE")[0]
    assert "__shfl_xor_sync" in head  # the emulator's warp shuffle, which the lesson's sums use
    (root / "lesson.cpp").write_text(EMULATOR)
    gemv = _gemv()
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        builds = list(pool.map(lambda p: gemv.build(**stage_params("gemv", "cuda", **p)),
                               EMU_KERNELS))
    futures = []
    for i, build in enumerate(builds):
        assert build.source == "gemv.cu" and build.spill_bytes == 0
        defines = {"KERNEL_FILE": f'"{KERNELS / build.source}"', "KERNEL_NAME": build.kernel,
                   **defines_of(build)}
        futures.append(compile_async(root / "lesson.cpp", root / f"lesson_{i}", defines))
    return {i: (build, f.result()) for i, (build, f) in enumerate(zip(builds, futures))}


@cpu_only
@pytest.mark.parametrize("i", range(len(EMU_KERNELS)), ids=[str(p) for p in EMU_KERNELS])
def test_the_lesson_is_correct_at_the_edges(emulated, i):
    import subprocess

    build, exe = emulated[i]
    params = stage_params("gemv", "cuda", **EMU_KERNELS[i])
    for M, N, K, unit_b in EDGE_SHAPES:
        lda, ldc = aligned_ld(K), aligned_ld(N)
        ldb = 1 if unit_b else aligned_ld(N)
        grid, block, smem = _gemv().geometry(M, N, K, **params)
        assert smem == 0 and grid[1] == 1
        args = [M, N, K, lda, ldb, ldc, grid[0], grid[1], block[0], block[1]]
        out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                             timeout=300)
        log = (out.stdout + out.stderr)[-3000:]
        assert out.returncode == 0, f"{EMU_KERNELS[i]} {M}x{N}x{K} lda={lda} ldb={ldb}:\n{log}"
        assert re.search(r"rel_err=\d", out.stdout), log
