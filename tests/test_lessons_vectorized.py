"""The lessons of stages vectorized and bank_conflicts and their variants (docs/ARCHITECTURE.md,
"Lessons and variants"; ../shared/DESIGN.md rule 13).

cuda_kernels/vectorized.cu and cuda_kernels/bank_conflicts.cu are each stage's idea written out for
the lesson case only: row-major A and B (layout nn), lines that start on 16-byte boundaries (the
float4 paths of A, B and C on) and 32-bit offsets. cuda_kernels/variants/<stage>.cu is the same
kernel for every layout, alignment and size, which the launcher compiles for every other problem.

(a) The lesson files hold no generality: none of the layout, alignment and 64-bit switches, and
    nothing of common.cuh but CEIL_DIV, INNER_UNROLL, MIN_BLOCKS and block_tile (the loaders, the
    scatter, the inner product and the stores are written in the file).
(b) The launcher picks the lesson for nn with every operand aligned and 32-bit offsets, and the
    variant for nt, tn, tt, any unaligned operand (vec_a / vec_b / vec_c False) and offsets64.
(c) The lesson's build is the variant's build of the lesson case, instruction for instruction: the
    same SASS (addresses and encodings left out), registers, spills and shared memory, for the
    launcher's defaults and the parameter sets the tests and the registry's choices exercise (for
    bank_conflicts every fix, BK = 8, 16 and 32).
(d) The CPU emulator (tests/cuda_emulator.py: g++, ASan + UBSan, a float64 reference, NaN in the
    gaps between lines) runs the lesson kernels at edge sizes, M, N, K in {1, 5, 13, 129, 130},
    with leading dimensions padded to multiples of 4 floats.
"""

from __future__ import annotations

import concurrent.futures
import os
import re

import pytest

from helpers import ROOT, cpu_only, new_emulator, stage_params
from lesson_helpers import (aligned_ld, assert_same_sass, common_names, cuda_module as _module,
                            fresh_lesson_and_variant, lesson_and_variant_builds as both_builds,
                            without_comments)

KERNELS = ROOT / "cuda_kernels"
STAGES = ("vectorized", "bank_conflicts")




# ------------------------------------------------------------------ (a) no generality in a lesson

# The brief's list: the generality the variants keep and the lessons write out for one case.
FORBIDDEN = ("TRANS_A", "TRANS_B", "VEC_A", "VEC_B", "VEC_C", "offset_t", "OFFSET64",
             "load_kmajor_ktile", "load_kmajor_tiles", "load_chunks", "load4", "store4",
             "scatter4", "store_tile4", "outer_product4", "a_chunk0", "b_chunk0", "LineWalk",
             "a_step", "b_step", "A_OFF", "B_OFF", "KMajor", "chunk_valid")
# What a lesson may take from common.cuh: the grid's arithmetic, the unroll switch, the register
# cap's default and the block order (GROUP, blocktile stages' block_tile).
ALLOWED_FROM_COMMON = {"CEIL_DIV", "INNER_UNROLL", "MIN_BLOCKS", "block_tile"}




def test_common_names_are_found():
    names = common_names()
    assert {"load_kmajor_ktile", "store_tile4", "offset_t", "LineWalk", "scatter4", "block_tile",
            "CEIL_DIV", "outer_product4", "zero_acc", "at", "a_chunk0", "b_chunk0"} <= names, \
        sorted(names)


@pytest.mark.parametrize("stage", STAGES)
def test_the_lesson_has_no_layout_alignment_or_offset_generality(stage):
    text = (KERNELS / f"{stage}.cu").read_text()
    found = [n for n in FORBIDDEN if re.search(rf"\b{n}\b", text)]
    assert not found, f"{stage}.cu names {found}"
    assert f"cuda_kernels/variants/{stage}.cu" in text  # the header says where the rest lives


@pytest.mark.parametrize("stage", STAGES)
def test_the_lesson_takes_only_the_ladder_s_basics_from_common_cuh(stage):
    code = without_comments((KERNELS / f"{stage}.cu").read_text())
    used = {n for n in common_names() if re.search(rf"\b{n}\b", code)}
    assert used - ALLOWED_FROM_COMMON == set(), f"{stage}.cu uses {sorted(used)}"
    # the stage's idea is in the file: float4 global loads and stores, the transposing scatter
    assert "reinterpret_cast<const float4*>" in code and "reinterpret_cast<float4*>" in code
    # As(k..k+3, m): 4 scalar stores, in the interior copy and in the edge copy
    assert len(re.findall(r"As\[[^\]]*a_c \+ [0-3]", code)) == 8


@pytest.mark.parametrize("stage", STAGES)
def test_the_variant_is_the_every_layout_file_with_the_same_kernel(stage):
    lesson = (KERNELS / f"{stage}.cu").read_text()
    variant = (KERNELS / "variants" / f"{stage}.cu").read_text()
    assert variant.startswith(f"// Variant of ../{stage}.cu")
    assert "TRANS_A" in variant and "VEC_A" in variant and "offset_t" not in lesson
    kernel = f'extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)\nmatmul_{stage}('
    assert kernel in lesson and kernel in variant


# ------------------------------------------------------------------ (b) the launcher's choice

CHOICES = [  # (build arguments, the lesson?)
    ({}, True),
    (dict(layout="nt"), False), (dict(layout="tn"), False), (dict(layout="tt"), False),
    (dict(vec_a=False), False), (dict(vec_b=False), False), (dict(vec_c=False), False),
    (dict(offsets64=True), False),
]


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_the_launcher_builds_the_lesson_only_for_the_lesson_case(stage):
    module = _module(stage)
    params = stage_params(stage, "cuda")
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        builds = list(pool.map(lambda c: module.build(**{**params, **c[0]}), CHOICES))
    for (args, lesson), build in zip(CHOICES, builds):
        assert build.source == (f"{stage}.cu" if lesson else f"variants/{stage}.cu"), args
        assert build.kernel == f"matmul_{stage}"


# ------------------------------------------------------------------ (c) the same SASS

SASS_SETS = [
    ("vectorized", {}),
    ("vectorized", dict(BM=64)),
    ("vectorized", dict(BK=16, TN=4)),                          # TCOLS = BN/4: B's chunk = tc
    ("vectorized", dict(BK=32)),
    ("vectorized", dict(unroll=False)),
    ("vectorized", dict(BM=32, BN=32, BK=16, TM=4, TN=4)),
    ("vectorized", dict(BM=64, BN=32)),
    ("vectorized", dict(fast_math=True)),
    *[("bank_conflicts", dict(fix=f)) for f in ("none", "pad", "swizzle", "raw")],
    ("bank_conflicts", dict(fix="pad", BK=16)),
    ("bank_conflicts", dict(fix="swizzle", BK=16)),
    ("bank_conflicts", dict(fix="none", BK=32)),
    ("bank_conflicts", dict(fix="swizzle", BK=32, BN=64, TM=4)),
    ("bank_conflicts", dict(fix="pad", BK=16, BM=64, TN=4)),
    ("bank_conflicts", dict(fix="swizzle", BM=64, BN=64, BK=16, TM=4, TN=4)),
    ("bank_conflicts", dict(fix="pad", unroll=False)),
]






@pytest.fixture(scope="module")
def lesson_and_variant_builds():
    """{case index: (the lesson's build, the variant compiled with the same options)}."""
    return both_builds(SASS_SETS, _build_of, jobs=os.cpu_count() or 1)


def _build_of(case):
    return _module(case[0]).build(**stage_params(case[0], "cuda", **case[1]))


@cpu_only
@pytest.mark.parametrize("i", range(len(SASS_SETS)),
                         ids=[f"{s}-{c}" for s, c in SASS_SETS])
def test_the_lesson_compiles_to_the_variant_s_sass(lesson_and_variant_builds, i):
    stage, changes = SASS_SETS[i]
    lesson, variant = lesson_and_variant_builds[i]
    assert lesson.source == f"{stage}.cu" and variant.source == f"variants/{stage}.cu"
    assert_same_sass(lesson, variant, f"{stage} {changes}",
                     rebuild=lambda: fresh_lesson_and_variant(_build_of, SASS_SETS[i]))


# ------------------------------------------------------------------ (d) the lessons, emulated

EDGE_SIZES = (1, 5, 13, 129, 130)
EDGE_SHAPES = sorted({(s, s, s) for s in EDGE_SIZES} | {
    (1, 130, 13), (130, 1, 5), (5, 13, 130), (13, 129, 1), (129, 5, 129), (130, 129, 13),
    (129, 130, 130), (1, 5, 129), (130, 13, 1)})
EMU_KERNELS = [
    ("vectorized", {}),
    ("vectorized", dict(BM=64, BK=16, TN=4, group=4)),   # 1 A and 2 B float4s per thread
    ("bank_conflicts", dict(fix="pad")),
    ("bank_conflicts", dict(fix="swizzle", BK=16, BM=64, TN=4)),
    ("bank_conflicts", dict(fix="none", BK=32, BN=64, TM=4, group=1)),
]




@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    from helpers import compile_for_emulator

    emulator = new_emulator(tmp_path_factory, "lessons_vectorized")

    def build_of(case):
        stage, changes = case
        return (stage, str(changes)), _module(stage).build(**stage_params(stage, "cuda",
                                                                          **changes))

    builds, _ = compile_for_emulator(emulator, EMU_KERNELS, build_of)
    return emulator, builds


@cpu_only
@pytest.mark.parametrize("stage,changes", EMU_KERNELS, ids=str)
def test_the_lesson_is_correct_at_the_edges(emulated, stage, changes):
    emulator, builds = emulated
    build = builds[stage, str(changes)]
    assert build.source == f"{stage}.cu" and build.spill_bytes == 0
    params = stage_params(stage, "cuda", **changes)
    for M, N, K in EDGE_SHAPES:
        lda, ldb, ldc = aligned_ld(K), aligned_ld(N), aligned_ld(N)
        grid, block, _ = _module(stage).geometry(M, N, K, **params)
        ok, out = emulator.run(build, grid, block, M, N, K, lda, ldb, ldc)
        assert ok, f"{stage} {changes} {M}x{N}x{K} lda={lda} ldb={ldb} ldc={ldc}:\n{out}"
