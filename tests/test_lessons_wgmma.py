"""The lesson of stage wgmma and its variant (docs/ARCHITECTURE.md, "Lessons and variants";
../shared/DESIGN.md rule 13).

cuda_kernels/wgmma.cu is Hopper's warpgroup MMA for the lesson case only: bf16 in layout nn as
the kernel reads it (A' = B^T from registers through ldmatrix.trans, B' = A^T K-major in
128-byte-swizzled shared memory, D = C^T), each tile's copy before its wgmma and A' loaded after
the next tile's copy (COPY_AT=0, LOAD_FIRST=0), at every tile size. cuda_kernels/variants/wgmma.cu
is the former wgmma.cu, unchanged but for a note at its top: the kernel the launcher compiles for
everything else (tf32, 3xtf32, fp16, the layouts nt and tt, COPY_AT=2, LOAD_FIRST=1).

(a) The lesson holds none of the variant's machinery: no other precision, no layout or 64-bit
    offset switches (TRANS_A / TRANS_B / offset_t / OFFSET64, A_KMAJOR), no 3xTF32 split, fresh
    sums or subnormal scaling, no schedule switches; its only conditionals give its knobs their
    defaults; it includes hopper.cuh and wgmma_ops.cuh (instruction wrappers) and uses of them
    only wrappers of one instruction or PTX idiom.
(b) The launcher compiles the lesson exactly for the lesson case, through build(), through the
    Offer's compile (CPU mode, the profiler), and through prepare() (plan()'s copies first: tn
    where A is copied, unaligned lines), and the variant for everything else (the compiler is
    recorded, not run).
(c) The lesson's build is the variant's build with the same options, instruction for instruction
    (SASS without addresses and encodings, registers, spills, stack, shared memory), for bf16's
    defaults and the registry's knobs (WGS, BN, STAGES, group) over the choices that fit, including
    the settings the stage page, tests/test_wgmma.py and scripts/experiments/wgmma_probe.py name.
    results/autotune.json holds no CUDA wgmma entry (the tuner has not searched this stage), so
    there is no cached configuration to add. NVRTC, sm_90a; no GPU needed.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from helpers import DTYPE, cpu_only, stage_params
from lesson_helpers import (KERNELS, assert_same_sass, cuda_module, lesson_and_variant_builds,
                            without_comments)

STAGE = "wgmma"
LESSON = KERNELS / "wgmma.cu"
VARIANT = KERNELS / "variants" / "wgmma.cu"
JOBS = 2  # NVRTC processes at a time (the CPU is shared with other test runs)


def _wg():
    return cuda_module(STAGE)


# ------------------------------------------------------------------ (a) the files

MACHINERY = (
    # the layouts and sizes (common.cuh's switches, the K-major A' of nt)
    "TRANS_A", "TRANS_B", "offset_t", "OFFSET64", "A_KMAJOR", "KCopier", "MCopier", "ldsm_x4",
    # the other precisions and their pieces
    "PREC_TF32", "PREC_3XTF32", "PREC_FP16", "PREC_FP8", "SPLIT", "FRESH", "ROWPAIR",
    "wgmma_tf32_n64", "wgmma_tf32_n128", "wgmma_tf32_n192", "wgmma_tf32_n256", "wgmma_f16_n64",
    "wgmma_f16_n128", "wgmma_f16_n192", "wgmma_f16_n256", "pack_f16", "tf32_rn", "tf32_head",
    "tf32_tail", "prepare_b", "tails", "part", "add_part",
    # 3xTF32's fresh sums and subnormal scaling
    "SUM_TILES", "TF32X3_SCALE", "tf32x3_scale", "tiny_bits", "or3", "exp2_int",
    "__syncthreads_and",
    # the schedule switches
    "COPY_AT", "LOAD_FIRST")
# What the lesson may take from the shared headers: types, and wrappers of one instruction or PTX
# idiom (hopper.cuh: the shared-state-space address, the async-proxy fence, wgmma's fence /
# commit / wait and descriptor, ldmatrix.trans, cvt.rn.bf16x2, a register fence)
ALLOWED_FROM_HOPPER = {"u32", "u64", "elem_t", "smem_u32", "fence_async_smem", "wg_fence",
                       "wg_commit", "wg_wait", "desc_kmajor", "ldsm_x4_t", "pack_bf16",
                       "reg_fence"}
DEFAULTED = {"PREC_BF16", "WGS", "BN", "STAGES", "GROUP"}


def _hopper_names() -> set[str]:
    """The names hopper.cuh defines: macros, types, structs, functions, constants."""
    text = without_comments((KERNELS / "hopper.cuh").read_text())
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    names |= set(re.findall(r"\bstruct\s+(?:alignas\(\d+\)\s+)?(\w+)", text))
    names |= set(re.findall(r"\btypedef\b[^;]*?(\w+)\s*;", text))
    names |= set(re.findall(r"__forceinline__\s+[\w:<>&*\s]*?\b(\w+)\s*\(", text))
    names |= set(re.findall(r"\bconstexpr\s+\w+\s+(\w+)\s*=", text))
    return names


def test_the_lesson_holds_none_of_the_variant_s_machinery():
    code = without_comments(LESSON.read_text())
    found = [w for w in MACHINERY if re.search(rf"\b{w}\b", code)]
    assert not found, f"wgmma.cu names {found}"
    # its only conditionals give its knobs (and its precision) their defaults
    conditionals = re.findall(r"^\s*#\s*(if|ifdef|ifndef|elif)\b\s*(\w*)", code, re.M)
    assert {kind for kind, _ in conditionals} == {"ifndef"}, conditionals
    assert {name for _, name in conditionals} == DEFAULTED, conditionals
    assert re.findall(r'#\s*include\s+"([^"]+)"', code) == ["hopper.cuh", "wgmma_ops.cuh"]
    text = LESSON.read_text()
    assert "cuda_kernels/variants/wgmma.cu" in text and "Lesson case: bf16" in text


def test_the_lesson_takes_only_instruction_wrappers_from_the_shared_headers():
    code = without_comments(LESSON.read_text())
    hopper = _hopper_names()
    assert {"tf32_head", "tma_load_2d", "desc_kmajor", "ldsm_x4_t", "elem_t"} <= hopper
    used = {n for n in hopper if re.search(rf"\b{n}\b", code)}
    assert used - ALLOWED_FROM_HOPPER == set(), sorted(used - ALLOWED_FROM_HOPPER)
    ops = set(re.findall(r"\b(wgmma_\w+_n\d+)\b", code))
    assert ops == {f"wgmma_bf16_n{n}" for n in (64, 128, 192, 256)}, ops
    # the stage's idea is in the file: the cp.async ring and its swizzled B' copy, ldmatrix.trans
    # fragments of A', wgmma through a K-major descriptor kept in flight one tile, the epilogue
    for piece in ("cp.async.cg.shared.global", "cp.async.wait_group", "(c ^ (r & 7)) << 4",
                  "ldsm_x4_t(", "desc_kmajor(slot + s * 32)", "wg_wait<1>()", "wg_commit()",
                  "fence_async_smem()", "__syncthreads()", "pack_bf16(x, y)",
                  "constexpr int AHEAD = STAGES - 2;", "r * csm + c * csn"):
        assert piece in code, piece


def test_the_variant_is_the_former_file_with_a_note_at_its_top():
    text = VARIANT.read_text()
    assert text.startswith("// Variant of ../wgmma.cu")
    code = without_comments(text)
    for switch in ("PREC_TF32", "PREC_3XTF32", "A_KMAJOR", "COPY_AT", "LOAD_FIRST", "SUM_TILES",
                   "TF32X3_SCALE", "ROWPAIR"):
        assert switch in code, switch
    # the note is comments only: the code is the stage's kernel as it was
    assert "// Stage: wgmma." in text
    kernel = ('extern "C" __global__ void __launch_bounds__(THREADS, 1)\n    matmul_wgmma('
              'const elem_t* __restrict__ Ap, const elem_t* __restrict__ Bp,\n')
    assert kernel in LESSON.read_text() and kernel in text


def test_the_lesson_is_shorter_by_the_machinery():
    from lab.lesson import code_lines

    lesson, variant = len(code_lines(LESSON)), len(code_lines(VARIANT))
    assert lesson < 0.6 * variant, (lesson, variant)


# ------------------------------------------------------------------ (b) the launcher's choice

def _recording(monkeypatch):
    """Replace the launcher's compiler with one that records (source, defines, layout) and
    returns a stand-in Build; returns the record."""
    wg = _wg()
    calls = []

    def fake(source, kernel, defines, *, layout="nn", arch=None, **_):
        calls.append(SimpleNamespace(source=source, kernel=kernel, defines=dict(defines),
                                     layout=layout, arch=arch))
        return SimpleNamespace(source=source, kernel=kernel, registers=1, smem_static=0,
                               spill_bytes=0, options=())

    monkeypatch.setattr(wg, "compile_kernel", fake)
    return calls


# (precision, layout, M, N, parameter changes, the lesson?): the Offer's compile, as CPU mode and
# the profiler call it; tn is the layout the plan makes of it (nn where N > M: A copied row-major)
COMPILE_CHOICES = [
    ("bf16", "nn", 4096, 4096, {}, True),
    ("bf16", "nt", 4096, 4096, {}, False), ("bf16", "tt", 4096, 4096, {}, False),
    ("bf16", "tn", 4096, 2048, {}, False),    # B copied K-major: tt
    ("bf16", "tn", 2048, 4096, {}, True),     # A copied row-major: nn
    ("fp16", "nn", 4096, 4096, {}, False), ("tf32", "nn", 4096, 4096, {}, False),
    ("3xtf32", "nn", 4096, 4096, {}, False), ("3xtf32", "nt", 4096, 4096, {}, False),
    ("bf16", "nn", 4096, 4096, dict(COPY_AT=2), False),
    ("bf16", "nn", 4096, 4096, dict(LOAD_FIRST=1), False),
    ("bf16", "nn", 4096, 4096, dict(LOAD_FIRST=0, COPY_AT=0), True),  # bf16's row, explicit
    ("bf16", "nn", 4096, 4096, dict(SUM_TILES=1), True),              # no effect outside 3xtf32
    ("bf16", "nn", 1000, 999, dict(WGS=3, BN=192, STAGES=3, group=1), True),
    ("bf16", "nn", 1, 1, dict(WGS=1, BN=64, STAGES=6, group=16), True),
    ("bf16", "tt", 1000, 999, dict(WGS=3, BN=192, STAGES=3), False),
    ("fp16", "nn", 4096, 4096, dict(WGS=1, BN=64), False),
]


@pytest.mark.parametrize("precision,layout,M,N,changes,lesson", COMPILE_CHOICES,
                         ids=[f"{p}-{lay}-{m}x{n}-{c}" for p, lay, m, n, c, _ in COMPILE_CHOICES])
def test_the_offer_compiles_the_lesson_only_for_the_lesson_case(monkeypatch, precision, layout,
                                                                 M, N, changes, lesson):
    wg = _wg()
    calls = _recording(monkeypatch)
    wg.OFFER.compile(stage_params(STAGE, "cuda", **changes), M, N, 512, layout, precision)
    (call,) = calls
    assert call.source == ("wgmma.cu" if lesson else "variants/wgmma.cu")
    assert call.kernel == "matmul_wgmma" and call.arch == "sm_90a"
    assert wg.lesson(precision, call.defines["A_KMAJOR"], call.layout, call.defines) == lesson


# build()'s own arguments, as scripts/experiments/wgmma_probe.py and the tests pass them
BUILD_CHOICES = [  # (precision, a_kmajor, layout, config, the lesson?)
    ("bf16", False, "nn", None, True),
    ("bf16", False, "nn", dict(WGS=3, BN=128, STAGES=4, COPY_AT=0), True),  # test_wgmma VARIANTS
    ("bf16", False, "nn", dict(WGS=2, BN=256, STAGES=4, COPY_AT=2, LOAD_FIRST=0), False),
    ("bf16", True, "nt", None, False), ("bf16", False, "tt", None, False),
    ("bf16", True, "nn", None, False),  # never planned (nn's A' is M-major): not the lesson's
    ("fp16", False, "nn", dict(WGS=3, BN=192, STAGES=3, COPY_AT=0), False),
    ("tf32", False, "nn", None, False), ("3xtf32", True, "nt", None, False),
]


@pytest.mark.parametrize("precision,a_kmajor,layout,config,lesson", BUILD_CHOICES)
def test_build_compiles_the_lesson_only_for_the_lesson_case(monkeypatch, precision, a_kmajor,
                                                            layout, config, lesson):
    calls = _recording(monkeypatch)
    _wg().build(precision, a_kmajor, 8, layout, config)
    assert calls[0].source == ("wgmma.cu" if lesson else "variants/wgmma.cu")


def _operands(case: str, dtype):
    """(A, B) of 40 x 56 and 56 x 24 in the named form."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(40, 56, generator=g).to(dtype)
    b = torch.randn(56, 24, generator=g).to(dtype)
    if case == "nn":
        return a, b
    if case == "nn, A's lines unaligned":  # 57 bf16 elements apart: 114 bytes
        return torch.empty(40, 57, dtype=dtype)[:, :56].copy_(a), b
    if case == "tn, A copied row-major":   # N > M: the plan copies A and reads nn
        return a[:20].t().contiguous().t(), b
    if case == "tn, B copied K-major":     # N <= M: the plan copies B and reads tt
        return a.t().contiguous().t(), b[:, :20]
    if case == "nt":
        return a, b.t().contiguous().t()
    raise KeyError(case)


PREPARE_CHOICES = [  # (precision, the operands, the lesson?)
    ("bf16", "nn", True), ("bf16", "nn, A's lines unaligned", True),
    ("bf16", "tn, A copied row-major", True), ("bf16", "tn, B copied K-major", False),
    ("bf16", "nt", False), ("fp16", "nn", False), ("tf32", "nn", False), ("3xtf32", "nn", False),
]


@pytest.mark.parametrize("precision,case,lesson", PREPARE_CHOICES)
def test_prepare_runs_the_lesson_only_for_the_lesson_case(monkeypatch, precision, case, lesson):
    """prepare()'s body on CPU tensors: plan()'s copies first, then the build of the layout the
    kernel reads."""
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    wg = _wg()
    calls = _recording(monkeypatch)
    monkeypatch.setattr(wg, "launcher", lambda *a, **k: SimpleNamespace(step=(print, ())))
    a, b = _operands(case, DTYPE[precision])
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    wg.prepare.inner(describe(a, b, c, CUDA, precision), **stage_params(STAGE, "cuda"))
    (call,) = calls
    assert call.source == ("wgmma.cu" if lesson else "variants/wgmma.cu"), case


# ------------------------------------------------------------------ (c) the SASS

# bf16 in layout nn: the defaults (WGS=2, BN=256, STAGES=4, group=8: the WGMMA row), each knob's
# other choices that fit in 227 KiB (validate()), the stage page's examples (wgmma:STAGES=3,
# wgmma:BN=192,WGS=3, wgmma:BN=192,WGS=3,STAGES=3), tests/test_wgmma.py's bf16 build option
# (WGS=3, BN=128: copy rounds that do not divide the B' tile), three warpgroups on the widest and
# narrowest tiles (uneven rounds again; the widest spills, in both files), one warpgroup, the
# deepest rings, and group.
SASS_SETS = [
    {}, dict(STAGES=3), dict(BN=192, WGS=3), dict(BN=192, WGS=3, STAGES=3),
    dict(WGS=3, BN=128), dict(WGS=3, BN=256, STAGES=3), dict(WGS=3, BN=64),
    dict(WGS=1, BN=64, STAGES=6), dict(WGS=1, BN=256, STAGES=5), dict(BN=128, STAGES=6),
    dict(BN=64), dict(group=1), dict(group=16),
]


def _build_of(changes):
    params = stage_params(STAGE, "cuda", **changes)
    _wg().validate(params, "bf16")
    return _wg().OFFER.compile(params, 4096, 4096, 4096, "nn", "bf16")[0]


@pytest.fixture(scope="module")
def builds():
    """{set index: (the lesson's build, the variant compiled with the same options)}."""
    return lesson_and_variant_builds(SASS_SETS, _build_of, jobs=JOBS)


@cpu_only
@pytest.mark.parametrize("i", range(len(SASS_SETS)), ids=[str(c) for c in SASS_SETS])
def test_the_lesson_compiles_to_the_variant_s_sass(builds, i):
    lesson, variant = builds[i]
    assert lesson.source == "wgmma.cu" and variant.source == "variants/wgmma.cu"
    assert lesson.arch == "sm_90a" and "-DPREC_BF16=1" in lesson.options
    assert_same_sass(lesson, variant, f"wgmma bf16 nn {SASS_SETS[i]}")
    # every set builds without spills but WGS=3 with BN=256: 128 accumulators a thread under the
    # 168 registers 384 threads leave, 228 bytes of spills in both files (as before the split)
    assert (lesson.spill_bytes == 0) == (SASS_SETS[i] != dict(WGS=3, BN=256, STAGES=3))
