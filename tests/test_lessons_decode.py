"""The lesson of stage decode and its variant (docs/ARCHITECTURE.md, "Lessons and variants";
../shared/DESIGN.md rule 13).

cuda_kernels/decode.cu is the stage's idea for its lesson case: bf16, layout nt (B^T, the weight
matrix, row-major as torch.nn.Linear stores it), 16-byte-aligned lines, a row-major C, 32-bit
offsets, unroll on. cuda_kernels/variants/decode.cu adds fp16, fp8 and its scales, the other
layouts and unaligned lines (gathered pieces), a column-major C (the swapped problem) and 64-bit
offsets.
(a) The lesson holds none of that machinery and takes from common.cuh only CEIL_DIV and
    MIN_BLOCKS.
(b) The launcher compiles the lesson exactly for the lesson case (tests/test_decode.py checks the
    predicate; here, the builds prepare() would make).
(c) The lesson's build is the variant's build of the same case, instruction for instruction,
    over the parameters that reach each part of the kernel (tiles, warps, kunroll, activation
    groups, unroll).
"""

from __future__ import annotations

import re

import pytest

from helpers import ROOT
from lab.stages import get_stage
from lesson_helpers import (assert_same_sass, common_names, fresh_lesson_and_variant,
                            lesson_and_variant_builds, without_comments)

KERNELS = ROOT / "cuda_kernels"

# What the lesson leaves to its variant.
MOVED = ("TRANS_A", "TRANS_B", "TRANS_C", "A_OFF", "B_OFF", "VEC_A", "VEC_B", "A_VEC", "B_VEC",
         "A_SK", "B_SK", "offset_t", "OFFSET64", "PREC_FP8", "PREC_FP16", "FP8", "c_elem_t",
         "scale_a", "scale_b", "gather", "e4m3", "f16.f16", "VW", "UNROLL")


def _decode():
    return get_stage("decode").module("cuda")


def test_the_lesson_holds_only_its_case():
    lesson = without_comments((KERNELS / "decode.cu").read_text())
    for name in MOVED:
        assert not re.search(rf"\b{re.escape(name)}\b", lesson), name
    used = {n for n in common_names() if re.search(rf"\b{n}\b", lesson)}
    assert used <= {"CEIL_DIV", "MIN_BLOCKS"}, used
    variant = (KERNELS / "variants" / "decode.cu").read_text()
    assert variant.startswith("// Variant of ../decode.cu")
    assert "matmul_decode(" in variant


@pytest.mark.parametrize("precision,layout,lesson", [
    ("bf16", "nt", True), ("fp16", "nt", False), ("fp8", "nt", False), ("bf16", "nn", False),
    ("bf16", "tt", False)])
def test_the_launcher_compiles_the_lesson_for_its_case_only(precision, layout, lesson):
    d = _decode()
    build, _ = d.compile_for({}, 16, 4096, 4096, layout, precision)
    assert (build.source == "decode.cu") is lesson


CASES = [dict(tiles=1, warps=4, kunroll=4, groups=1), dict(tiles=2, warps=4, kunroll=2, groups=8),
         dict(tiles=4, warps=2, kunroll=4, groups=1), dict(tiles=1, warps=8, kunroll=1, groups=2),
         dict(tiles=2, warps=4, kunroll=8, groups=4), dict(tiles=1, warps=4, kunroll=4,
                                                          groups=2, fast_math=True)]


def test_lesson_and_variant_compile_to_the_same_sass():
    d = _decode()
    def build_of(case):
        return d.build(**case, precision="bf16", layout="nt")

    builds = lesson_and_variant_builds(CASES, build_of)
    for i, (lesson, variant) in builds.items():
        assert lesson.source == "decode.cu"
        assert_same_sass(lesson, variant, CASES[i],
                         rebuild=lambda: fresh_lesson_and_variant(build_of, CASES[i]))
