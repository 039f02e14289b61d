"""The lessons of stages warptiling and double_buffered and their variants (docs/ARCHITECTURE.md,
"Lessons and variants"; ../shared/DESIGN.md rule 13).

cuda_kernels/warptiling.cu is the warp tile (with its fragments double-buffered in registers,
frags=2) for the lesson case only: row-major A and B (layout nn), 16-byte-aligned lines and
32-bit offsets, K not split. cuda_kernels/double_buffered.cu is that kernel plus its one change,
the regs pipeline (two shared buffers, the next k-tile's loads in registers during this one's
FMAs, one barrier per k-step). cuda_kernels/variants/<stage>.cu is the kernel the launcher
compiles for everything else: every layout, unaligned lines, offsets64, and for warptiling
split-K and frags=1, for double_buffered pipeline=cp_async.

(a) The lesson files hold no generality: none of the layout, alignment and 64-bit switches, no
    split-K, FRAG_BUFFERS or cp.async, and nothing of common.cuh but CEIL_DIV, INNER_UNROLL,
    MIN_BLOCKS and block_tile (the loaders, the transposing scatter, the fragments, the inner
    product and the stores are written in the file).
(b) The launcher picks the lesson for the lesson case and the variant for nt, tn, tt, any
    unaligned operand, offsets64, splitk > 1 and frags=1 (warptiling), pipeline=cp_async
    (double_buffered).
(c) warptiling's lesson build is the variant's build of the lesson case, instruction for
    instruction (SASS without addresses and encodings, registers, spills, stack, shared memory),
    for the defaults and the parameter sets the registry, the tests and the tuner use.
    double_buffered's lesson is written as warptiling's plus the pipeline (the ladder's diff), not
    as the variant's loader and fragment objects, so its build differs from the variant's in
    address arithmetic and scheduling only: the same FFMA, LDS, STS, LDG, STG and BAR
    instructions (each kind counted), no spills, no local memory, no more registers than the
    variant (equal in all but one set below, 162 against 166 there) and an instruction count
    within 2% (measured: within 1%).
(d) The CPU emulator (tests/cuda_emulator.py: g++, ASan + UBSan, a float64 reference, NaN in the
    gaps between lines and in unwritten shared memory) runs both lessons at edge sizes with
    leading dimensions padded to multiples of 4 floats.
"""

from __future__ import annotations

import concurrent.futures
import re

import pytest

from helpers import ROOT, cpu_only, new_emulator, stage_params
from lesson_helpers import (aligned_ld, assert_same_sass, common_names, cuda_module as _module,
                            fresh_lesson_and_variant,
                            lesson_and_variant_builds as both_builds, sass_listing,
                            without_comments)

KERNELS = ROOT / "cuda_kernels"
STAGES = ("warptiling", "double_buffered")
JOBS = 2  # NVRTC and g++ processes at a time (the CPU is shared with other test runs)




# ------------------------------------------------------------------ (a) no generality in a lesson

FORBIDDEN = ("TRANS_A", "TRANS_B", "VEC_A", "VEC_B", "VEC_C", "VEC_OUT", "offset_t", "OFFSET64",
             "SPLITK", "FRAG_BUFFERS", "PIPELINE", "STAGES", "LAB_CP_ASYNC",
             "load_kmajor_ktile", "load_kmajor_tiles", "load_chunks", "load4", "store4",
             "scatter4", "store_tile4", "outer_product4", "zero_acc", "a_chunk0", "b_chunk0",
             "LineWalk", "SlabWalk", "a_step", "b_step", "A_OFF", "B_OFF", "KMajor",
             "chunk_valid", "copy_ktile", "A_TILE_AT", "B_TILE_AT", "TileCopy", "Frag", "Pick")
ALLOWED_FROM_COMMON = {"CEIL_DIV", "INNER_UNROLL", "MIN_BLOCKS", "block_tile"}




def test_common_names_are_found():
    assert {"load_kmajor_ktile", "copy_ktile", "offset_t", "LineWalk", "scatter4", "block_tile",
            "CEIL_DIV", "outer_product4", "zero_acc", "at", "cp_async16"} <= common_names()


@pytest.mark.parametrize("stage", STAGES)
def test_the_lesson_has_no_layout_alignment_or_offset_generality(stage):
    text = (KERNELS / f"{stage}.cu").read_text()
    code = without_comments(text)
    found = [n for n in FORBIDDEN if re.search(rf"\b{n}\b", code)]
    assert not found, f"{stage}.cu names {found}"
    assert "#if" not in code.replace("#ifndef WNITER", "")  # one kernel, no switches
    assert f"cuda_kernels/variants/{stage}.cu" in text  # the header says where the rest lives


@pytest.mark.parametrize("stage", STAGES)
def test_the_lesson_takes_only_the_ladder_s_basics_from_common_cuh(stage):
    code = without_comments((KERNELS / f"{stage}.cu").read_text())
    used = {n for n in common_names() if re.search(rf"\b{n}\b", code)}
    assert used - ALLOWED_FROM_COMMON == set(), f"{stage}.cu uses {sorted(used)}"
    # the stage's idea is in the file: float4 global loads and stores, the transposing scatter
    # (4 scalar stores down As), the warp tile's fragments, the k loop and its barriers
    assert "reinterpret_cast<const float4*>" in code and "reinterpret_cast<float4*>" in code
    assert len(re.findall(r"As\[k \+ [0-3]\]\[r\]", code)) == 4
    assert "load_fragments(" in code and "WSUBM" in code and "__syncthreads()" in code


def test_double_buffered_is_warptiling_plus_its_pipeline():
    """The same names and structure: double_buffered.cu shares warptiling.cu's fragment loads,
    loaders and epilogue, and adds the second buffer, the registers ra/rb and one barrier in the
    k loop (plus the prologue's)."""
    w = without_comments((KERNELS / "warptiling.cu").read_text())
    d = without_comments((KERNELS / "double_buffered.cu").read_text())
    for piece in ("__device__ __forceinline__ void load_fragments(", "auto load_tiles = [&](",
                  "auto fma_k = [&](", "auto load4_or_fill = [](",
                  "const int r = b_r + j * THREADS / (BN / 4);"):
        assert piece in w and piece in d, piece
    assert w.count("__syncthreads()") == 2 and d.count("__syncthreads()") == 2
    assert "extern __shared__" in d and "float4 ra[A_LOADS], rb[B_LOADS];" in d


@pytest.mark.parametrize("stage", STAGES)
def test_the_variant_is_the_every_layout_file_with_the_same_kernel(stage):
    lesson = (KERNELS / f"{stage}.cu").read_text()
    variant = (KERNELS / "variants" / f"{stage}.cu").read_text()
    assert variant.startswith(f"// Variant of ../{stage}.cu")
    assert "TRANS_A" in variant and "VEC_A" in variant and "offset_t" in variant
    assert ("SPLITK" if stage == "warptiling" else "PIPELINE") in variant
    kernel = f'extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)\nmatmul_{stage}('
    assert kernel in lesson and kernel in variant


# ------------------------------------------------------------------ (b) the launcher's choice

COMMON_CHOICES = [  # (build arguments, the lesson?)
    ({}, True),
    (dict(layout="nt"), False), (dict(layout="tn"), False), (dict(layout="tt"), False),
    (dict(vec_a=False), False), (dict(vec_b=False), False), (dict(vec_c=False), False),
    (dict(offsets64=True), False),
]
CHOICES = {
    "warptiling": COMMON_CHOICES + [
        (dict(splitk=0), True),   # no shape to resolve it against: the unsplit kernel
        (dict(splitk=1), True), (dict(splitk=2), False), (dict(splitk=64), False),
        (dict(frags=1), False), (dict(splitk=3, layout="tt"), False)],
    "double_buffered": COMMON_CHOICES + [
        (dict(pipeline="cp_async"), False), (dict(pipeline="cp_async", stages=3), False),
        (dict(pipeline="cp_async", layout="tt", vec_a=False), False)],
}


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_the_launcher_builds_the_lesson_only_for_the_lesson_case(stage):
    module = _module(stage)
    params = stage_params(stage, "cuda")
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        builds = list(pool.map(lambda c: module.build(**{**params, **c[0]}), CHOICES[stage]))
    for (args, lesson), build in zip(CHOICES[stage], builds):
        assert build.source == (f"{stage}.cu" if lesson else f"variants/{stage}.cu"), args
        assert build.kernel == f"matmul_{stage}"


# ------------------------------------------------------------------ (c) the SASS

# warptiling: the defaults, BK 8/16/32, the tile splitk=0 picks (without a split), the tiles worth
# timing (tests/test_warptiling.py, docs/stages/warptiling.md: its :auto rows), the tuner's cached
# unsplit winners (results/autotune.json: 4096^3, 8192x8192x4096) and the switches.
WARPTILING_SETS = [
    {}, dict(BK=8), dict(BK=32),
    dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=8, TN=4),         # test_warptiling SMALL
    dict(BM=64, BN=64, WM=32, WN=32, WNITER=1),                           # splitk=0's small tile
    dict(BM=64, BN=128, WM=32, WN=64, WNITER=2),
    dict(BM=128, BN=64, WM=64, WN=32, WNITER=2),
    dict(BM=256, BN=128, WM=64, WN=64),
    dict(BK=32, WNITER=2, TM=4, group=1), dict(BK=32, WNITER=2), dict(TN=8, WNITER=2),
    dict(BK=32, WM=32, WN=128, WNITER=1, TM=8, TN=8, group=8, unroll=False),
    dict(unroll=False), dict(fast_math=True), dict(group=1),
]
# double_buffered (regs): the defaults, BK=8, the stage page's 64 x 64 variant, the tuner's cached
# 4096^3 winner, the emulator's small and wide tiles (tests/test_double_buffered.py), BK=32 on the
# wide one, unroll=0
DOUBLE_BUFFERED_SETS = [
    {}, dict(BK=8), dict(BM=64, BN=64, WM=32, WN=32, TN=4),
    dict(BN=256, BK=8, WM=128, WN=32, TM=8, TN=16),
    dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=8, TN=4, group=4),
    dict(WN=32, TN=8, group=1), dict(WN=32, TN=8, group=1, BK=32), dict(unroll=False),
]
SASS_SETS = ([("warptiling", c) for c in WARPTILING_SETS]
             + [("double_buffered", c) for c in DOUBLE_BUFFERED_SETS])






@pytest.fixture(scope="module")
def lesson_and_variant_builds():
    """{case index: (the lesson's build, the variant compiled with the same options)}."""
    return both_builds(SASS_SETS, _build_of, jobs=JOBS)


def _build_of(case):
    return _module(case[0]).build(**stage_params(case[0], "cuda", **case[1]))


def _ids(sets):
    return [f"{s}-{c}" for s, c in sets]


@cpu_only
@pytest.mark.parametrize("i", [i for i, (s, _) in enumerate(SASS_SETS) if s == "warptiling"],
                         ids=_ids([c for c in SASS_SETS if c[0] == "warptiling"]))
def test_the_warptiling_lesson_compiles_to_the_variant_s_sass(lesson_and_variant_builds, i):
    stage, changes = SASS_SETS[i]
    lesson, variant = lesson_and_variant_builds[i]
    assert lesson.source == f"{stage}.cu" and variant.source == f"variants/{stage}.cu"
    assert_same_sass(lesson, variant, f"{stage} {changes}",
                     rebuild=lambda: fresh_lesson_and_variant(_build_of, SASS_SETS[i]))


MEMORY_AND_FMA = ("FFMA", "LDS", "STS", "LDG", "STG", "BAR", "LDL", "STL", "LDGSTS")


def _counts(build) -> dict[str, int]:
    """Opcode (with modifiers) -> count, for the FMAs, memory instructions and barriers."""
    from lab.toolchain import sass

    mix = sass.instruction_mix(sass.sass(build))
    return {k: v for k, v in mix.items() if k.split(".")[0] in MEMORY_AND_FMA}


@cpu_only
@pytest.mark.parametrize("i", [i for i, (s, _) in enumerate(SASS_SETS) if s == "double_buffered"],
                         ids=_ids([c for c in SASS_SETS if c[0] == "double_buffered"]))
def test_the_double_buffered_lesson_has_the_variant_s_instruction_mix(
        lesson_and_variant_builds, i):
    stage, changes = SASS_SETS[i]
    lesson, variant = lesson_and_variant_builds[i]
    assert lesson.source == f"{stage}.cu" and variant.source == f"variants/{stage}.cu"
    # ptxas can allocate registers differently on a busy machine (tests/helpers.py fresh_build),
    # and the build tries register caps until one does not spill: a mismatch is built again from
    # the start, both files, up to twice, before the verdict
    for _ in range(2):
        if _counts(lesson) == _counts(variant) and lesson.spill_bytes == variant.spill_bytes:
            break
        lesson, variant = fresh_lesson_and_variant(_build_of, SASS_SETS[i])
    assert _counts(lesson) == _counts(variant), changes
    assert lesson.spill_bytes == variant.spill_bytes == 0 and lesson.stack_frame == 0
    assert lesson.smem_static == variant.smem_static == 0  # dynamic shared memory only
    assert 0 < lesson.registers <= variant.registers, (lesson.registers, variant.registers)
    a, b = sass_listing(lesson), sass_listing(variant)
    assert abs(len(a) - len(b)) <= 0.02 * len(b), (len(a), len(b))


# ------------------------------------------------------------------ (d) the lessons, emulated

EDGE_SIZES = (1, 5, 13, 129, 130)
EDGE_SHAPES = sorted({(s, s, s) for s in EDGE_SIZES} | {
    (1, 130, 13), (130, 1, 5), (5, 13, 130), (13, 129, 1), (129, 5, 129), (130, 129, 13),
    (129, 130, 130), (1, 5, 129), (130, 13, 1), (256, 128, 64), (131, 257, 48)})
EMU_KERNELS = [
    ("warptiling", {}),
    ("warptiling", dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=8, TN=4, group=4)),
    ("warptiling", dict(BK=32, WNITER=2, TM=4, group=1)),
    ("double_buffered", {}),
    ("double_buffered", dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=8, TN=4, group=4)),
    ("double_buffered", dict(WN=32, TN=8, group=1, BK=32)),   # three 8-step bodies, then the last
]




@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    from helpers import compile_for_emulator

    emulator = new_emulator(tmp_path_factory, "lessons_warp")

    def build_of(case):
        stage, changes = case
        return (stage, str(changes)), _module(stage).build(**stage_params(stage, "cuda",
                                                                          **changes))

    builds, errors = compile_for_emulator(emulator, EMU_KERNELS, build_of, jobs=JOBS)
    assert not errors, errors[0]
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
        grid, block, smem = _module(stage).geometry(M, N, K, **params)
        ok, out = emulator.run(build, grid, block, M, N, K, lda, ldb, ldc,
                               smem_dynamic=smem if smem else None)
        assert ok, f"{stage} {changes} {M}x{N}x{K} lda={lda} ldb={ldb} ldc={ldc}:\n{out}"
        if stage == "double_buffered":  # the launcher passes what the kernel declares
            assert f"dynamic_smem={smem} kernel_smem={smem}" in out, out
