"""The lessons and variants of the first CUDA stages: naive, coalesced, tiled, tiled_padded,
tiled_rect, blocktile_1d, blocktile_2d.

Each stage's cuda_kernels/<stage>.cu is its lesson, written out for row-major A and B (layout nn)
with 32-bit offsets; cuda_kernels/variants/<stage>.cu is the same kernel for every layout and for
operands past 2^31 elements (docs/ARCHITECTURE.md; cuda_kernels/_build.py: lesson_case,
stage_source). Here:
(a) the lesson holds none of the layout and offset machinery (TRANS_A, A_OFF, offset_t, ...), says
    what its lesson case is, and the variant opens with the note that a reader can skip it;
(b) each launcher compiles the lesson for nn with 32-bit offsets and the variant for every other
    layout and for offsets64 (Build.source);
(c) the lesson's build is the variant's nn build, instruction for instruction: the same SASS
    (addresses and encodings left out), registers, spills and shared memory, at the defaults and
    at other parameters of the registry (NVRTC, sm_90; no GPU needed).
The kernels' results are checked by the stages' own tests (test_cpu_stages, test_layouts,
test_regtile, test_rect_padded, test_offsets64), which run these builds in the emulator.
"""

from __future__ import annotations

import re

import pytest

from helpers import ROOT, cpu_only, fresh_build
from lesson_helpers import require_disassembler, sass_listing
from lab.stages import get_stage

KERNELS = ROOT / "cuda_kernels"
STAGES = ("naive", "coalesced", "tiled", "tiled_padded", "tiled_rect", "blocktile_1d",
          "blocktile_2d")
KERNEL = {s: f"matmul_{s}" for s in STAGES}

# What a lesson leaves to its variant (common.cuh's layout and offset machinery)
MACHINERY = ("TRANS_A", "TRANS_B", "A_OFF", "B_OFF", "offset_t", "OFFSET64", "ScalarWalk",
             "load_scalars", "a_step", "b_step")


def _module(stage: str):
    return get_stage(stage).module("cuda")


# ------------------------------------------------------------------ (a) the files

@pytest.mark.parametrize("stage", STAGES)
def test_the_lesson_holds_no_layout_or_offset_machinery(stage):
    text = (KERNELS / f"{stage}.cu").read_text()
    for word in MACHINERY:
        assert not re.search(rf"\b{word}\b", text), f"{stage}.cu names {word}"
    assert "Lesson case: row-major A and B, 32-bit offsets" in text
    assert f"cuda_kernels/variants/{stage}.cu" in text


@pytest.mark.parametrize("stage", STAGES)
def test_the_variant_is_the_same_kernel_for_every_layout(stage):
    lesson = (KERNELS / f"{stage}.cu").read_text()
    variant = (KERNELS / "variants" / f"{stage}.cu").read_text()
    assert variant.startswith(f"// Variant of ../{stage}.cu for every layout")
    assert "A reader can skip it" in variant.split("\n// Stage:")[0]
    assert '#include "common.cuh"' in variant  # found through -I cuda_kernels
    for text in (lesson, variant):
        assert 'extern "C" __global__' in text and f"\n{KERNEL[stage]}(" in text


# ------------------------------------------------------------------ (b) which file is compiled

CASES = [("nn", False), ("nt", False), ("tn", False), ("tt", False), ("nn", True), ("tt", True)]


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("layout,offsets64", CASES, ids=[f"{l}{'-64' * w}" for l, w in CASES])
def test_the_launcher_compiles_the_lesson_for_nn_only(stage, layout, offsets64):
    build = _module(stage).build(layout=layout, offsets64=offsets64)
    lesson = layout == "nn" and not offsets64
    assert build.source == (f"{stage}.cu" if lesson else f"variants/{stage}.cu")
    assert build.kernel == KERNEL[stage]
    assert ("-DOFFSET64=1" in build.options) == offsets64
    assert f"-DTRANS_A={int(layout[0] == 't')}" in build.options


# ------------------------------------------------------------------ (c) the same machine code

# Parameters beyond the defaults: the inner-loop switch, and tiles the registry offers that take
# other paths through the loaders (several elements per thread, fewer threads than B-tile columns)
PARAMS = {
    "naive": [{}, {"unroll": False}],
    "coalesced": [{}, {"unroll": False}, {"rows": 8, "kunroll": 4, "group": 1}],
    "tiled": [{}, {"unroll": False}, {"tile": 16, "ktile": 1, "group": 1}, {"tile": 8, "ktile": 4}],
    "tiled_padded": [{}, {"unroll": False}, {"tile": 16, "ktile": 1}, {"tile": 8, "ktile": 4}],
    "tiled_rect": [{}, {"unroll": False}, {"rows": 16, "cols": 16}, {"rows": 4, "cols": 64}],
    "blocktile_1d": [{}, {"unroll": False}, {"BM": 128, "BN": 32, "BK": 16, "TM": 16},
                     {"BM": 32, "BN": 32, "BK": 16}],
    "blocktile_2d": [{}, {"unroll": False}, {"BM": 32, "BN": 128, "BK": 16, "group": 1},
                     {"BM": 64, "BN": 64, "TM": 4, "TN": 4},
                     # TCOLS == BK: the shape whose prologue the lesson's row_of() / col_of() keep
                     {"BM": 128, "BN": 64, "TM": 4, "TN": 8}],
}
SASS_CASES = [(s, p) for s in STAGES for p in PARAMS[s]]


def _machine_code(build):
    require_disassembler()
    return (sass_listing(build), build.registers, build.spill_bytes, build.smem_static,
            build.stack_frame)


@cpu_only
@pytest.mark.parametrize("stage,params", SASS_CASES,
                         ids=[f"{s}-{'-'.join(f'{k}{v}' for k, v in p.items()) or 'defaults'}"
                              for s, p in SASS_CASES])
def test_the_lesson_compiles_to_the_variants_nn_build(monkeypatch, stage, params):
    """The launcher's build for nn is the lesson; the same build() with the lesson switched off
    compiles the variant file for nn, as every launcher did before the split (same defines, same
    register cap search): both must be the same machine code."""
    module = _module(stage)
    lesson = module.build(**params)
    monkeypatch.setattr(module, "lesson_case", lambda *a, **k: False)
    variant = module.build(**params)
    assert (lesson.source, variant.source) == (f"{stage}.cu", f"variants/{stage}.cu")
    assert lesson.options == variant.options  # the same defines (and MIN_BLOCKS)
    got, want = _machine_code(lesson), _machine_code(variant)
    if got != want:  # ptxas's output can differ on a busy machine: check fresh builds once more
        got, want = _machine_code(fresh_build(lesson)), _machine_code(fresh_build(variant))
    assert got[1:] == want[1:], "registers, spills, shared memory or stack differ"
    assert got[0] == want[0], "the SASS differs"
