"""The lesson of stage mma and its variant (docs/ARCHITECTURE.md, "Lessons and variants";
../shared/DESIGN.md rule 13).

cuda_kernels/mma.cu is the stage's idea written out for its lesson case: bf16 A, B and C, row-major
A and B (layout nn), lines on 16 bytes (ALIGN_A = ALIGN_B = 16, VEC_C = 1), 32-bit offsets, two
fragment sets (frags = 2). cuda_kernels/variants/mma.cu is the former file, unchanged but for a note
at its top: every precision (fp16, tf32, 3xtf32), layout, alignment, offsets64, frags = 1, and the
CPU twins of every PTX instruction, which the emulator runs (tests/test_mma.py, test_mma_nan.py).
(a) The lesson holds none of the moved machinery (layout and alignment switches, offset_t, the
    emulator's twins, the other precisions), takes from common.cuh only the cp.async wrappers
    and the ladder's basics, and writes its loads, ldmatrix, mma.sync and store out; the variant
    opens with the note that a reader can skip it, and defines the same kernel.
(b) The launcher compiles the lesson exactly for the lesson case (mma.lesson, Build.source), the
    variant for every other precision, layout, alignment, offsets64 and frags = 1.
(c) The lesson's build is the variant's build of the same case, instruction for instruction (SASS
    without addresses and encodings, registers, spills, stack, shared memory), over the
    registry's choices of every parameter (lab/stages.py) in bf16, the tuner's cached bf16
    winners, and the default on sm_80.
"""

from __future__ import annotations

import concurrent.futures
import re

import pytest

from helpers import ROOT, cpu_only, stage_params
from lesson_helpers import (assert_same_sass, fresh_lesson_and_variant,
                            lesson_and_variant_builds as both_builds, sass_listing)
from lab.base.errors import LabError
from lab.stages import get_stage

KERNELS = ROOT / "cuda_kernels"
KERNEL = "matmul_mma"
JOBS = 2  # NVRTC processes at a time (the CPU is shared with other test runs)


def _mma():
    return get_stage("mma").module("cuda")


def _code(text: str) -> str:
    """C++ source without its comments."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


# ------------------------------------------------------------------ (a) the files

# What the lesson leaves to its variant: the layout and alignment switches, 64-bit offsets, the
# other precisions and their instructions, TF32's runs and rounding, one fragment set, the
# emulator's twins (lab_*, host branches) and common.cuh's layout-generic tile copy.
MOVED = ("TRANS_A", "TRANS_B", "A_KMAJOR", "B_KMAJOR", "ALIGN_A", "ALIGN_B", "ALIGN", "VEC_C",
         "offset_t", "OFFSET64", "PREC", "PREC_BF16", "PREC_FP16", "PREC_TF32", "PREC_3XTF32",
         "HALF", "TF32_RN", "TF32_ROUND", "tf32_rn", "tf32_hi", "tf32_split", "tf32_finite",
         "f32_sub_bits", "mma_fresh", "RUN", "RUNS", "run_x", "lds_x4", "FRAGS", "FragBase",
         "cp_async4", "saddr_t", "lab_bits", "lab_float", "lab_half_to_float", "lab_mma_piece",
         "lab_round_to_zero", "copy_ktile", "A_TILE_AT", "B_TILE_AT", "a_step", "b_step")
ALLOWED_FROM_COMMON = {"CEIL_DIV", "MIN_BLOCKS", "block_tile", "cp_async16", "cp_async16_zfill",
                       "cp_async_commit", "cp_async_wait"}


def common_names() -> set[str]:
    """Every name common.cuh defines: macros, types, structs, functions."""
    text = _code((KERNELS / "common.cuh").read_text())
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    names |= set(re.findall(r"\bstruct\s+(\w+)", text))
    names |= set(re.findall(r"\btypedef\b[^;]*?(\w+)\s*;", text))
    for line in text.splitlines():  # free functions (a struct's static members are its own)
        m = re.search(r"__forceinline__\s+[\w:<>&*\s]*?\b(\w+)\s*\(", line)
        if m and not line.lstrip().startswith("static"):
            names.add(m.group(1))
    return names


def test_the_lesson_holds_none_of_the_moved_machinery():
    text = (KERNELS / "mma.cu").read_text()
    code = _code(text)
    found = [n for n in MOVED if re.search(rf"\b{n}\b", code)]
    assert not found, f"mma.cu names {found}"
    # no host branch (the emulator's twins) and no switch but the architecture's floor
    assert "#ifdef" not in code and "#ifndef" not in code and "#else" not in code
    assert re.findall(r"#\s*if\b.*", code) == ["#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800"]
    # one precision: bf16's instructions only
    assert not re.search(r"\.f16\b|(?<!b)f16x2|tf32", code)
    assert "Lesson case: bf16 A, B and C" in text  # the header says which case it is written for
    assert "cuda_kernels/variants/mma.cu" in text  # and where the rest lives


def test_the_lesson_takes_only_instruction_wrappers_and_the_ladder_s_basics_from_common_cuh():
    code = _code((KERNELS / "mma.cu").read_text())
    used = {n for n in common_names() if re.search(rf"\b{n}\b", code)}
    assert used - ALLOWED_FROM_COMMON == set(), f"mma.cu uses {sorted(used)}"
    assert {"cp_async16", "cp_async_wait", "block_tile"} <= used


def test_the_lesson_writes_out_its_loads_inner_product_and_store():
    code = _code((KERNELS / "mma.cu").read_text())
    for piece in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16",          # A, K-contiguous
                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",    # B, N-contiguous
                  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                  "cvt.rn.bf16x2.f32",                                 # C rounded on store
                  "cp_async16(", "cp_async16_zfill(", "cp_async_commit()",
                  "ldsm_x4<false>(f.a[i]", "ldsm_x4<true>(r",
                  "c ^ x",                                             # the swizzle
                  "mma(acc[i][j], f.a[i], f.b[j]);",
                  "*reinterpret_cast<u32*>(p) = v;"):
        assert piece in code, piece
    assert code.count("__syncthreads()") == 2  # the prologue's and one per k-tile
    assert code.count('extern "C" __global__') == 1


def test_the_variant_is_the_former_file_with_a_note():
    lesson = (KERNELS / "mma.cu").read_text()
    variant = (KERNELS / "variants" / "mma.cu").read_text()
    note, sep, former = variant.partition("\n// Stage: mma.")
    assert sep and variant.startswith("// Variant of ../mma.cu for every precision")
    assert "A reader can skip it" in note and all(line.startswith("//")
                                                  for line in note.splitlines())
    for name in ("TRANS_A", "ALIGN_A", "VEC_C", "offset_t", "PREC_FP16", "PREC_TF32",
                 "tf32_split", "FRAGS", "lab_mma_piece", "#ifndef __CUDA_ARCH__"):
        assert name in former, name
    kernel = f'extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)\n{KERNEL}('
    assert kernel in lesson and kernel in variant
    signature = ("(const elem_t* __restrict__ A, const elem_t* __restrict__ B, "
                 "elem_t* __restrict__ C,\n           int M, int N, int K, int lda, int ldb, "
                 "int ldc)")
    assert signature in lesson and signature in variant


# ------------------------------------------------------------------ (b) the launcher's choice

def test_the_lesson_case():
    lesson = _mma().lesson
    assert _mma().LESSON_PRECISION == "bf16"
    assert lesson("bf16", 2) and lesson("bf16", 2, "nn", False, 16, 16, True)
    for precision in ("fp16", "tf32", "3xtf32"):
        assert not lesson(precision, 2)
    for layout in ("nt", "tn", "tt"):
        assert not lesson("bf16", 2, layout)
    assert not lesson("bf16", 1)
    assert not lesson("bf16", 2, offsets64=True)
    assert not lesson("bf16", 2, align_a=4) and not lesson("bf16", 2, align_b=2)
    assert not lesson("bf16", 2, vec_c=False)


CHOICES = [  # (build arguments, the lesson?)
    (dict(precision="bf16"), True),
    (dict(precision="bf16", frags=2), True),
    (dict(precision="bf16", BM=128, BN=128, STAGES=4), True),
    (dict(precision="fp16"), False), (dict(precision="tf32"), False), (dict(), False),  # 3xtf32
    (dict(precision="bf16", layout="nt"), False), (dict(precision="bf16", layout="tt"), False),
    (dict(precision="bf16", align_a=4), False), (dict(precision="bf16", align_b=2), False),
    (dict(precision="bf16", vec_c=False), False), (dict(precision="bf16", offsets64=True), False),
    (dict(precision="bf16", frags=1), False),
]


@cpu_only
def test_the_launcher_compiles_the_lesson_only_for_the_lesson_case():
    params = stage_params("mma", "cuda")
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        builds = list(pool.map(lambda c: _mma().build(**{**params, **c[0]}), CHOICES))
    for (args, lesson), build in zip(CHOICES, builds):
        assert build.source == ("mma.cu" if lesson else "variants/mma.cu"), args
        assert build.kernel == KERNEL


@cpu_only
def test_the_contract_s_compile_picks_by_the_operands():
    """OFFER.compile (the CPU mode's resource report, the tuner's dry run) for contiguous
    operands: bf16 nn with 16-byte lines is the lesson; K = 1025 (A's lines on 2 bytes) and fp16
    are the variant."""
    offer = get_stage("mma").offer("cuda")
    params = stage_params("mma", "cuda")
    assert offer.compile(params, 4096, 4096, 4096, "nn", "bf16")[0].source == "mma.cu"
    assert offer.compile(params, 4096, 4096, 1025, "nn", "bf16")[0].source == "variants/mma.cu"
    assert offer.compile(params, 4096, 4096, 4096, "nn", "fp16")[0].source == "variants/mma.cu"


# ------------------------------------------------------------------ (c) the SASS

def _sass_sets() -> list[dict]:
    """The defaults; every choice of every CUDA parameter of the registry, one at a time, where
    bf16 accepts it and it builds the lesson (frags=1 is the variant's); the tuner's cached bf16
    winners (results/autotune.json, 4096^3 and 8192^3) and tiles of tests/test_mma.py's emulated
    cases. Parameter sets that resolve to the same defines are compiled once."""
    mma = _mma()
    candidates = [{}]
    for p in get_stage("mma").params:
        if "cuda" in p.backends:
            candidates += [{p.name: v} for v in p.choices if v != p.default]
    candidates += [
        dict(BM=128, BN=256, BK=64, WM=128, WN=32, STAGES=3),   # 4096^3 winner
        dict(BM=128, BN=256, BK=64, WM=64, WN=64, STAGES=3),    # 8192^3 winner
        dict(BK=16),
        dict(BM=64, BN=64, WM=32, WN=32, STAGES=3, group=4),
        dict(BM=256, BN=64, WM=64, WN=32, STAGES=2),
        dict(BM=64, BN=64, BK=64, WM=64, WN=64, STAGES=2),      # one warp: rolled copies
        dict(BM=128, BN=64, BK=32, WM=32, WN=64, STAGES=4),
    ]
    seen, sets = set(), []
    for changes in candidates:
        params = stage_params("mma", "cuda", **changes)
        try:
            d = mma.defines(**params, precision="bf16")
        except LabError:
            continue
        if d["FRAGS"] != 2:
            continue
        key = tuple(sorted(d.items()))
        if key not in seen:
            seen.add(key)
            sets.append(changes)
    return sets


SASS_SETS = _sass_sets()


def _lesson_build(i):
    """Case i's lesson build; the last case is the defaults built for sm_80 with the sm_90
    build's options."""
    from lab.toolchain import nvrtc

    if i == len(SASS_SETS):
        first = _mma().build(**stage_params("mma", "cuda"), precision="bf16")
        options = tuple("-arch=sm_80" if o.startswith("-arch=") else o for o in first.options)
        return nvrtc._compile("mma.cu", KERNEL, options, "sm_80")
    return _mma().build(**stage_params("mma", "cuda", **SASS_SETS[i]), precision="bf16")


@pytest.fixture(scope="module")
def lesson_and_variant_builds():
    """{case index: (the lesson's build, the variant compiled with the same options)}; the last
    case is the default on sm_80."""
    return both_builds(range(len(SASS_SETS) + 1), _lesson_build, jobs=JOBS)


@cpu_only
@pytest.mark.parametrize("i", range(len(SASS_SETS) + 1),
                         ids=[str(c) for c in SASS_SETS] + ["sm_80"])
def test_the_lesson_compiles_to_the_variant_s_sass(lesson_and_variant_builds, i):
    lesson, variant = lesson_and_variant_builds[i]
    assert lesson.source == "mma.cu" and variant.source == "variants/mma.cu"
    assert "-DPREC_BF16=1" in lesson.options and "-DFRAGS=2" in lesson.options
    assert_same_sass(lesson, variant, f"mma {SASS_SETS[i] if i < len(SASS_SETS) else 'sm_80'}",
                     rebuild=lambda: fresh_lesson_and_variant(_lesson_build, i))
    assert any(op.startswith("HMMA.16816.F32.BF16") for op in sass_listing(lesson))
