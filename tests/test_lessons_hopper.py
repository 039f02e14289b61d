"""The lesson of stage persistent and its variant (docs/ARCHITECTURE.md, "Lessons and variants";
../shared/DESIGN.md rules 11 and 13).

cuda_kernels/persistent.cu is the stage's one idea, the persistent tile walk (TileWalk, and the
ring's counter running on across tiles) over warp_specialized.cu's producer and consumers, for the
lesson case: one block per cluster (CLUSTER=1), C stored from registers (TMA_STORE=0, as
warp_specialized), A read from shared memory (not TF32 with an M-major A), in every precision
warp_specialized offers. cuda_kernels/variants/persistent.cu is the same kernel with the switches
the launcher sets for everything else: clusters of two with B multicast, C through TMA stores (the
automatic row's epilogue), TF32 with an M-major A through registers and D = C^T (A_REGS,
C_TRANS). The grid is cuda_kernels/_tma.py's PERSISTENT schedule (a TileSchedule, not a flag).

(a) The lesson holds none of the variant's machinery (its preprocessor switches are
    warp_specialized.cu's, no more), tma_tiles.cuh holds nothing that only persistent uses, and
    the step from warp_specialized.cu is within the Hopper ladder's 80 changed code lines.
(b) HopperStage.build compiles the lesson exactly for the lesson case, over every precision,
    kernel layout, CLUSTER, TMA store and C_TRANS it can be asked for (the compiler is recorded,
    not run), and the grid comes from the stage's schedule.
(c) The lesson's build is the variant's build with the same options, instruction for instruction
    (SASS without addresses and encodings, registers, spills, stack, shared memory), for every
    precision, the layouts the TMA reads as they lie, and the knobs CONSUMERS, BN, STAGES and
    group (NVRTC, sm_90a; no GPU needed).
"""

from __future__ import annotations

import itertools
import re

import pytest

from helpers import cpu_only
from lesson_helpers import (KERNELS, assert_same_sass, cuda_module,
                            lesson_and_variant_builds, without_comments)

STAGE = "persistent"
LESSON = KERNELS / "persistent.cu"
VARIANT = KERNELS / "variants" / "persistent.cu"

# What the lesson leaves to its variant: the switches and everything they switch on
MACHINERY = ("CLUSTER", "TMA_STORE", "A_REGS", "A_REGS_LOOP", "C_TRANS", "ROW_MUL", "ROW_STEP",
             "tma_c", "cluster_sync", "cluster_rank", "mbar_arrive_cluster", "load_tile_multicast",
             "tma_load_2d_multicast", "store_acc_tma", "store_acc_t", "init_ring_c",
             "bulk_wait_all_warp", "C_STAGE_BYTES", "a_frags_mn", "mma_tile_rs", "tile_of",
             "WALK", "rank")


# ------------------------------------------------------------------ (a) the files

def _conditionals(path) -> list[str]:
    return re.findall(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b.*$", without_comments(path.read_text()),
                      re.M)


def test_the_lesson_holds_none_of_the_variant_s_machinery():
    code = without_comments(LESSON.read_text())
    found = [w for w in MACHINERY if re.search(rf"\b{w}\b", code)]
    assert not found, f"persistent.cu names {found}"
    # its preprocessor switches are warp_specialized's (CONSUMERS' default, fp8's scales, 3xTF32)
    mine = sorted(set(c.strip() for c in _conditionals(LESSON)))
    before = set(c.strip() for c in _conditionals(KERNELS / "warp_specialized.cu"))
    assert set(mine) <= before, mine
    # the stage's idea is in the file: the walk, the ring counter across tiles, one block's tiles
    assert "struct TileWalk" in code and "walk.tile(t, m0, n0)" in code
    assert code.count("for (int t = first; t < walk.tiles; t += stride)") == 2
    assert "mbar_arrive(empty0 + 8 * ((it - 1) % STAGES))" in code
    text = LESSON.read_text()
    assert "cuda_kernels/variants/persistent.cu" in text and "PERSISTENT" in text


def test_the_variant_is_the_same_kernel_with_the_switches():
    variant = VARIANT.read_text()
    assert variant.startswith("// Variant of ../persistent.cu")
    code = without_comments(variant)
    for switch in ("CLUSTER", "TMA_STORE", "A_REGS", "C_TRANS"):
        assert re.search(rf"#\s*if[^\n]*\b{switch}\b", code), switch
    for piece in ("load_tile_multicast", "store_acc_tma", "a_frags_mn", "mma_tile_rs",
                  "store_acc_t(", "tile_of("):
        assert piece in code, piece
    kernel = 'extern "C" __global__ void __launch_bounds__(THREADS, 1)\n    matmul_persistent('
    assert kernel in variant and kernel in LESSON.read_text()


def _functions(text: str) -> set[str]:
    return set(re.findall(r"__device__ __forceinline__ [\w:<>&*\s]*?\b(\w+)\s*\(", text))


def test_tma_tiles_holds_nothing_only_persistent_uses():
    """Every function and constant of the shared header is used by two stages or more (persistent
    counts once, lesson and variant together), or by the header itself."""
    header = without_comments((KERNELS / "tma_tiles.cuh").read_text())
    stages = {
        "tma_wgmma": without_comments((KERNELS / "tma_wgmma.cu").read_text()),
        "warp_specialized": without_comments((KERNELS / "warp_specialized.cu").read_text()),
        "persistent": without_comments(LESSON.read_text() + VARIANT.read_text()),
    }
    names = _functions(header) | set(re.findall(r"constexpr int (\w+)", header))
    for name in sorted(names):
        users = [s for s, code in stages.items() if re.search(rf"\b{name}\b", code)]
        inside = len(re.findall(rf"\b{name}\b", header)) > 1  # used beyond its definition
        assert inside or len(users) >= 2, f"tma_tiles.cuh's {name} is used only by {users}"
    for gone in ("A_REGS", "C_TRANS", "a_frags_mn", "store_acc_tma", "tile_of",
                 "load_tile_multicast", "C_STAGE_BYTES"):
        assert not re.search(rf"\b{gone}\b", header), gone


def test_the_step_from_warp_specialized_is_a_ladder_step():
    from lab import lesson

    before = lesson.code_lines(KERNELS / "warp_specialized.cu")
    now = lesson.code_lines(LESSON)
    assert lesson.changed(before, now) <= 80  # the Hopper steps' target (../shared/tools)


# ------------------------------------------------------------------ (b) the launcher's choice

def _every_build():
    """(precision, layout, CLUSTER, TMA store, C_TRANS) over everything build() can be asked
    for."""
    for precision, layout, cluster, store in itertools.product(
            ("bf16", "fp16", "tf32", "3xtf32", "fp8"), ("nn", "nt", "tn", "tt"), (1, 2),
            (True, False)):
        yield precision, layout, cluster, store, False
    for cluster in (1, 2):
        yield "tf32", "nn", cluster, False, None  # nn's C^T = B^T A^T (swapped)


def _lesson(precision: str, layout: str, cluster: int, store: bool, c_trans) -> bool:
    from cuda_kernels._tma import kernel_layout, swapped

    regs_a = precision == "tf32" and kernel_layout(layout, precision, True)[0] == "t"
    c_trans = swapped(layout, precision, True) if c_trans is None else c_trans
    return cluster == 1 and not store and not c_trans and not regs_a


def test_build_compiles_the_lesson_exactly_for_the_lesson_case(monkeypatch):
    import cuda_kernels._tma as tma

    seen = []
    monkeypatch.setattr(tma, "compile_kernel",
                        lambda source, kernel, d, layout, arch: seen.append((source, d)))
    stage = cuda_module(STAGE).STAGE
    cases = list(_every_build())
    for precision, layout, cluster, store, c_trans in cases:
        c = {**stage.config(precision), "CLUSTER": cluster}
        stage.build(precision, layout, 8, c, store, c_trans=c_trans)
    lessons = 0
    for case, (source, d) in zip(cases, seen):
        lesson = _lesson(*case)
        lessons += lesson
        assert source == ("persistent.cu" if lesson else "variants/persistent.cu"), (case, d)
    # bf16 and fp16: 4 layouts each; tf32: nt; 3xtf32 and fp8: every layout (each builds nt)
    assert lessons == 2 * 4 + 1 + 4 + 4


def test_the_automatic_row_and_the_offer_build_the_variant(monkeypatch):
    """The automatic row stores C through TMA stores (the variant); the lesson is what a build
    with those switches off compiles."""
    import cuda_kernels._tma as tma

    seen = []
    monkeypatch.setattr(tma, "compile_kernel",
                        lambda source, kernel, d, layout, arch: seen.append(source) or None)
    module = cuda_module(STAGE)
    module.OFFER.compile({}, 4096, 4096, 4096, "nn", "bf16")
    module.OFFER.compile({"CLUSTER": 2}, 4096, 4096, 4096, "nn", "bf16")
    module.OFFER.compile({}, 4096, 4096, 4096, "nn", "tf32")  # C^T, through registers
    c = {**module.STAGE.config("bf16"), "CLUSTER": 1}
    module.STAGE.build("bf16", "nn", 8, c, tma_store=False)
    assert seen == ["variants/persistent.cu"] * 3 + ["persistent.cu"]


def test_the_grid_is_the_schedule_s():
    from cuda_kernels._tma import ONE_TILE_PER_BLOCK, PERSISTENT, TileSchedule

    persistent, ws = cuda_module(STAGE).STAGE, cuda_module("warp_specialized").STAGE
    assert persistent.schedule is PERSISTENT and ws.schedule is ONE_TILE_PER_BLOCK
    assert isinstance(PERSISTENT, TileSchedule) and PERSISTENT.resident
    assert not hasattr(persistent, "persistent")  # no flag beside the schedule
    c = {**persistent.config("bf16"), "CLUSTER": 1}
    assert persistent.geometry(4096, 4096, c, sms=132)[0] == (132, 1, 1)     # 512 tiles
    assert persistent.geometry(512, 512, c, sms=132)[0] == (8, 1, 1)         # 8 tiles
    assert persistent.geometry(4096, 4096, {**c, "CLUSTER": 2}, sms=132,
                               clusters=60)[0] == (120, 1, 1)                # 60 clusters of 2
    assert ws.geometry(4096, 4096, ws.config("bf16"), sms=132)[0] == (512, 1, 1)


# ------------------------------------------------------------------ (c) the SASS

# (precision, layout, changes over the automatic row's knobs): every precision, the layouts the
# TMA reads as they lie (bf16 all four), and the knobs
SASS_CASES = [
    ("bf16", "nn", {}), ("bf16", "nt", {}), ("bf16", "tn", {}), ("bf16", "tt", {}),
    ("fp16", "tn", {}), ("tf32", "nt", {}), ("3xtf32", "nt", {}), ("fp8", "nt", {}),
    ("bf16", "nn", dict(CONSUMERS=1)), ("bf16", "nn", dict(BN=64)), ("bf16", "tt", dict(BN=192)),
    ("bf16", "nn", dict(STAGES=2)), ("fp8", "nt", dict(STAGES=8, BN=128)),
    ("3xtf32", "nt", dict(CONSUMERS=1, BN=64, STAGES=6)), ("tf32", "nt", dict(BN=128)),
    ("bf16", "nn", dict(group=1)),
]


def _lesson_build(case):
    precision, layout, changes = case
    stage = cuda_module(STAGE).STAGE
    changes = dict(changes)
    group = changes.pop("group", 8)
    c = {**stage.config(precision, **changes), "CLUSTER": 1}
    return stage.build(precision, layout, group, c, tma_store=False)


@pytest.fixture(scope="module")
def builds():
    return lesson_and_variant_builds(SASS_CASES, _lesson_build)


@cpu_only
@pytest.mark.parametrize("i", range(len(SASS_CASES)), ids=[str(c) for c in SASS_CASES])
def test_the_lesson_compiles_to_the_variant_s_sass(builds, i):
    lesson, variant = builds[i]
    assert lesson.source == "persistent.cu" and variant.source == "variants/persistent.cu"
    assert lesson.spill_bytes == 0
    assert_same_sass(lesson, variant, SASS_CASES[i])
