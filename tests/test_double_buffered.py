"""Tests of the double_buffered stage (cuda_kernels/double_buffered.cu and its Triton twin).

CPU (skipped when a GPU is present, like the other CPU-mode tests):
(a) the CUDA kernel itself, run on the CPU by tests/cuda_emulator.py (g++, ASan/UBSan, NaN in the
    gaps between rows and in unwritten shared memory, cp.async copies that land only when waited
    for): both pipelines and every cp.async depth, all four layouts, each VEC_A / VEC_B / VEC_C
    variant on operands for which the launcher picks it (leading dimensions a multiple of 4 floats
    or not: lda = 4k+1 etc.), odd shapes, K < BK, K not a multiple of BK, whole interior tiles, a
    second tile shape, BK = 32 and the unroll=0 switch; the dynamic shared memory the launcher
    passes equals what the kernel declares (DYNAMIC_SMEM_BYTES);
(b) the emulator catches the pipeline bugs this stage is about: a cp.async wait one group too
    shallow, and a refill of the ring slot that is being read (mutated copies of the kernel);
(c) validate() refuses impossible combinations with one sentence naming the parameters, before
    NVRTC runs;
(d) each pipeline's default build (and each cp.async depth) compiles for sm_90 in every layout
    without spills, two 128-thread blocks per SM;
(e) the SASS: LDGSTS (cp.async) in the cp_async build, none in the regs build (LDG.E.128 + STS
    there), exactly two barriers (the prologue's and one per k-step), the whole k-tile of FFMA
    unrolled, no local memory;
(f) the Triton twin under the interpreter on odd shapes, grouped program orders and every
    num_stages, and its validate().
GPU (marked `gpu`): every pipeline x depth x layout against torch.matmul on odd and aligned
shapes, and compute-sanitizer memcheck / racecheck / synccheck on each pipeline (the registry's
test_sanitizer.py runs only the default variant, and no synccheck).
"""

from __future__ import annotations

import re
import types

import pytest
import torch

from helpers import (LAYOUTS, ROOT, check_in_layout, compile_for_emulator, cpu_only, line_widths,
                     new_emulator, run_sanitized, stage_module, stage_params, strided_operands)
from lab import check as chk
from lab.base.errors import CompileError, LabError
from lab.stages import get_stage

STAGE = "double_buffered"


def _params(backend: str = "cuda", **changes) -> dict:
    """The registry's parameters for a variant, as the harness hands them to a launcher."""
    return stage_params(STAGE, backend, **changes)


def _cuda():
    return stage_module(STAGE, "cuda")


# ------------------------------------------------------- (a) the CUDA kernel, emulated on the CPU

# (M, N, K): 1x1x1; K < 8 (a single, partial k-step); edges in M and N with K not a multiple of
# BK; K a multiple of BK over 3 tiles; a partial first tile (K < BK = 16); whole interior blocks
# on full k-steps for the 128 x 128 tile (the no-bounds-test path, 4 k-tiles).
EMU_SHAPES = [(1, 1, 1), (37, 45, 5), (130, 67, 33), (129, 257, 48), (65, 128, 13),
              (256, 128, 64)]
ON, OFF = (1, 1, 1), (0, 0, 0)
SMALL = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=8, TN=4, group=4)   # 4 warps of 32 x 32
WIDE = dict(WN=32, TN=8, group=1)                                    # 8 warps, 8 x 8 per thread
# (parameter changes, layout, (VEC_A, VEC_B, VEC_C)). Each pipeline in every layout with every
# operand aligned, and in nn and tt (each operand read along rows, then along columns) with none
# aligned; the deeper rings, the second tile shape and BK = 32 with mixed flags (a scalar A or B
# next to vector ones). (Each NVRTC build of the 8 x 16 tile takes ptxas 15-20 s here, so the list is
# kept to what adds coverage; the builds are shared with the tests below through _build's cache.)
EMU_CASES = (
    [(dict(), lay, ON) for lay in LAYOUTS] + [(dict(), lay, OFF) for lay in ("nn", "tt")]
    + [(dict(pipeline="cp_async"), lay, ON) for lay in LAYOUTS]
    + [(dict(pipeline="cp_async"), lay, OFF) for lay in ("nn", "tt")]
    + [(dict(pipeline="cp_async", stages=3), lay, ON) for lay in ("nn", "tt")]
    + [(dict(pipeline="cp_async", stages=4), "nt", (1, 0, 1)),
       (dict(pipeline="cp_async", stages=4), "tn", (0, 1, 0))]
    + [(SMALL, "nt", (1, 0, 1)), ({**SMALL, "pipeline": "cp_async", "stages": 3}, "tt", (0, 1, 0))]
    # BK = 32: three 8-step bodies before the peeled one, not unrolled with unroll=0
    + [(dict(BK=32, pipeline="cp_async", unroll=0), "nn", ON), ({**WIDE, "BK": 32}, "tt", OFF)]
)


def _case_id(case) -> str:
    changes, layout, vec = case
    body = ",".join(f"{k}={v}" for k, v in changes.items()) or "defaults"
    return f"{body}-{layout}-vec{''.join(map(str, vec))}"


def _case_params(case) -> dict:
    changes, layout, (va, vb, vc) = case
    return {**_params(**changes), "vec_a": bool(va), "vec_b": bool(vb), "vec_c": bool(vc),
            "layout": layout}


def _ld(width: int, aligned: bool) -> int:
    """A leading dimension larger than `width` (the gap holds NaN in the emulator): a multiple of
    4 floats (16-byte lines) or, for an unaligned variant, one more than a multiple of 4."""
    ld = width + 1
    while (ld % 4 == 0) != aligned or (not aligned and ld % 4 != 1):
        ld += 1
    return ld


def _leading_dims(M, N, K, layout, vec) -> tuple[int, int, int]:
    widths = line_widths(M, N, K, layout)
    return tuple(_ld(w, bool(v)) for w, v in zip(widths, vec))


_operands = strided_operands


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """Every build of EMU_CASES compiled for the emulator: (Emulator, {case id: build})."""
    emulator = new_emulator(tmp_path_factory, "double_buffered")
    builds, errors = compile_for_emulator(
        emulator, EMU_CASES, lambda case: (_case_id(case), _cuda().build(**_case_params(case))))
    assert not errors, errors[0]
    return emulator, builds


def _run(emulator, build, params, M, N, K, lds):
    grid, block, smem = _cuda().geometry(M, N, K, **params)
    ok, out = emulator.run(build, grid, block, M, N, K, *lds, smem_dynamic=smem)
    return ok, out, smem


@cpu_only
@pytest.mark.parametrize("case", EMU_CASES, ids=_case_id)
def test_cuda_kernel_emulated_on_the_cpu(emulated, case):
    from cuda_kernels.double_buffered import aligned_operands
    from lab.base.describe import describe

    emulator, builds = emulated
    build = builds[_case_id(case)]
    params = _case_params(case)
    _, layout, vec = case
    assert build.spill_bytes == 0, f"{_case_id(case)}: {build.spill_bytes} spill bytes"
    checked = 0
    for M, N, K in EMU_SHAPES:
        lds = _leading_dims(M, N, K, layout, vec)
        p = describe(*_operands(M, N, K, layout, *lds))
        flags = aligned_operands(p)
        # Only where the launcher picks exactly this variant and layout (a single row or column
        # has no leading dimension: it counts as aligned whenever its pointer is, and as
        # row-major whatever its strides).
        if (flags["vec_a"], flags["vec_b"], flags["vec_c"]) != tuple(map(bool, vec)) or \
                p.layout != layout:
            continue
        assert not p.swapped
        ok, out, smem = _run(emulator, build, params, M, N, K, lds)
        assert ok, f"{_case_id(case)} {M}x{N}x{K} lds={lds}:\n{out}"
        # the launcher passes exactly the dynamic shared memory the kernel declares
        assert f"dynamic_smem={smem} kernel_smem={smem}" in out, out
        checked += 1
    assert checked >= len(EMU_SHAPES) - 2, f"{_case_id(case)}: only {checked} shapes"


# ------------------------------------------------------- (b) the emulator catches pipeline bugs

MUTANTS = [
    # waiting for all but the newest STAGES-1 groups leaves tile t+1's group in flight
    ("cp_async_wait<STAGES - 2>();  // our copies of tile t+1 have landed",
     "cp_async_wait<STAGES - 1>();", "wait one group too shallow"),
    # refilling the slot that tile t is read from, instead of the one freed by the last barrier
    ("copy_next(fill);", "copy_next(rd);", "refill the slot being read"),
]


@cpu_only
@pytest.mark.parametrize("old,new,what", MUTANTS, ids=[m[2] for m in MUTANTS])
def test_the_emulator_catches_cp_async_pipeline_bugs(emulated, tmp_path, old, new, what):
    emulator, _ = emulated
    source = (ROOT / "cuda_kernels" / "variants" / "double_buffered.cu").read_text()
    assert source.count(old) == 1, f"the kernel no longer contains {old!r}"
    mutant = tmp_path / "double_buffered_mutant.cu"
    mutant.write_text(source.replace(old, new))
    params = {**_params(pipeline="cp_async", stages=3), "layout": "nn"}
    build = _cuda().build(**params)
    fake = types.SimpleNamespace(source=str(mutant), kernel=build.kernel, options=build.options)
    M, N, K = 130, 67, 48   # 3 k-tiles
    ok, out, _ = _run(emulator, fake, params, M, N, K, _leading_dims(M, N, K, "nn", ON))
    assert not ok, f"{what}: the emulator did not notice:\n{out}"
    assert re.search(r"non-finite=[1-9]", out), out  # NaN from a copy that had not landed


# ------------------------------------------------------- (c) validation

INVALID = [
    (dict(pipeline="regs", stages=3), "stages=2"),
    (dict(WM=64, WN=64, TM=8, TN=8), "32 thread tiles"),
    (dict(WM=32, WN=64, TM=16, TN=16), "32 thread tiles"),
    (dict(BM=64, WM=128), "multiple of WM"),
    (dict(BM=256, BN=256, WM=32, WN=32, TM=4, TN=8), "threads"),            # 64 warps
    (dict(BM=128, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8), "B tile"),       # 128 chunks, 256 thr
    (dict(BM=256, BN=256, BK=32, WM=128, WN=64, TM=16, TN=16, pipeline="cp_async", stages=4),
     "227 KiB"),
    (dict(BK=32), "registers"),   # 128 accumulators + 64 staging floats: spills
    (dict(BM=256, BN=256, pipeline="cp_async"), "512-thread block"),   # 128 registers at most
]


@cpu_only
@pytest.mark.parametrize("changes,words", INVALID, ids=str)
def test_invalid_combinations_raise_one_sentence(changes, words):
    params = {**_params(), **changes}
    with pytest.raises(LabError) as info:
        _cuda().validate(**params)
    message = str(info.value)
    assert "\n" not in message and ". " not in message, message  # one sentence
    assert words in message, message
    for key, value in changes.items():  # it names the parameters, with their values
        assert f"{key}={value}" in message, message
    with pytest.raises(LabError) as info:  # build() refuses before NVRTC runs
        _cuda().build(**params)
    assert not isinstance(info.value, CompileError)


@cpu_only
def test_validate_refuses_what_the_registry_cannot_express():
    cuda = _cuda()
    for kwargs, words in ((dict(BM=96), "powers of two"), (dict(pipeline="tma"), "pipeline"),
                          (dict(BK=4), "multiple of 8")):
        with pytest.raises(LabError, match=words):
            cuda.validate(**{**_params(), **kwargs})


@cpu_only
def test_an_invalid_variant_is_a_usage_error_on_the_command_line(capsys):
    from lab.compare import main

    code = main(["--stage", "double_buffered:stages=3", "--backend", "cuda", "--sizes", "64"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: double_buffered") and "\n" not in err


# ------------------------------------------------------- (d) builds: no spills, 2 blocks per SM

# every layout for the two pipelines; the deeper rings in nn and tt (the other layouts of stages
# 3 and 4 only change which buffer a copy goes to, compiled and emulated above)
DEFAULT_BUILDS = ([(dict(), lay) for lay in LAYOUTS]
                  + [(dict(pipeline="cp_async"), lay) for lay in LAYOUTS]
                  + [(dict(pipeline="cp_async", stages=s), lay) for s in (3, 4)
                     for lay in ("nn", "tt")])


@cpu_only
@pytest.mark.parametrize("changes,layout", DEFAULT_BUILDS, ids=str)
def test_each_pipeline_compiles_without_spills(changes, layout):
    params = _params(**changes)
    build = _cuda().build(**params, layout=layout)
    assert build.arch == "sm_90"
    assert build.spill_bytes == 0 and build.stack_frame == 0, (changes, layout)
    # 128 threads; __launch_bounds__(128, 2): two blocks per SM fit 65536 registers
    assert "-DMIN_BLOCKS=2" in build.options and 0 < build.registers <= 255
    grid, block, smem = _cuda().geometry(1000, 300, 77, **params, layout=layout)
    assert block == (128, 1, 1) and grid == (8 * 3, 1, 1)
    assert smem == _cuda().smem_bytes(**params, layout=layout) and 2 * (smem + 1024) <= 228 * 1024


@cpu_only
def test_shared_memory_per_pipeline_and_layout():
    sb = _cuda().smem_bytes
    # regs: 2 x (As[16][128+4] + Bs[16][128]) floats; a transposed B pads Bs, a transposed A not
    assert sb() == 2 * (16 * 132 + 16 * 128) * 4 == 33280
    assert sb(layout="tn") == 2 * (16 * 128 + 16 * 128) * 4
    assert sb(layout="nt") == 2 * (16 * 132 + 16 * 132) * 4
    # cp_async keeps the layouts as stored: As[128][16+4] for a row-major A, Bs[128][20] for a
    # transposed B; one buffer per stage
    assert sb(pipeline="cp_async", stages=3) == 3 * (128 * 20 + 16 * 128) * 4
    assert sb(pipeline="cp_async", stages=4, layout="tt") == 4 * (16 * 128 + 128 * 20) * 4


# ------------------------------------------------------- (e) SASS


@pytest.fixture(scope="module")
def sass_of():
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    cache = {}

    def get(**kw):
        key = tuple(sorted(kw.items()))
        if key not in cache:
            cache[key] = _sass.instruction_mix(_sass.sass(_cuda().build(**{**_params(), **kw})))
        return cache[key]

    return get


def _n(mix: dict, prefix: str) -> int:
    return sum(v for k, v in mix.items() if k == prefix or k.startswith(prefix + "."))


@cpu_only
@pytest.mark.parametrize("stages", (2, 3, 4))
def test_cp_async_build_copies_with_ldgsts(sass_of, stages):
    mix = sass_of(pipeline="cp_async", stages=stages)
    assert _n(mix, "LDGSTS") > 0, "no cp.async (LDGSTS) in the cp_async build"
    assert any(k.startswith("LDGSTS") and ".128" in k for k in mix), mix  # 16-byte copies
    assert _n(mix, "DEPBAR") > 0 and _n(mix, "LDGDEPBAR") > 0  # wait_group, commit_group
    assert _n(mix, "LDG") == 0, "global data goes through registers in the cp_async build"
    scalar = sass_of(pipeline="cp_async", vec_a=False, vec_b=False, vec_c=False)
    assert _n(scalar, "LDGSTS") > 0 and not any(".128" in k for k in scalar if "LDGSTS" in k)


@cpu_only
def test_regs_build_loads_through_registers(sass_of):
    mix = sass_of()
    assert _n(mix, "LDGSTS") == 0
    assert "LDG.E.128.CONSTANT" in mix and _n(mix, "STS") > 0


@cpu_only
@pytest.mark.parametrize("changes", [dict(), dict(pipeline="cp_async", stages=3),
                                     dict(pipeline="cp_async", layout="tt")], ids=str)
def test_one_barrier_per_k_step_and_unrolled_fmas(sass_of, changes):
    mix = sass_of(**changes)
    # the prologue's barrier and the one barrier of each k-step (its handoff to the next tile)
    assert _n(mix, "BAR") == 2, mix
    assert mix.get("FFMA") == 16 * 8 * 16  # BK * TM * TN: the whole k-tile, unrolled
    assert _n(mix, "LDL") == 0 and _n(mix, "STL") == 0, "local memory"


# ------------------------------------------------------- (f) the Triton twin (interpreter)


def _run_triton(shape, layout="nn", **changes):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 7 * K, device="cpu", layout=layout)
    ref = chk.reference(a, b)
    c = torch.empty((M, N))
    launch = get_stage(STAGE).module("triton").prepare(a, b, c, **_params("triton", **changes))
    return chk.check(launch, c, ref, K)


@cpu_only
@pytest.mark.parametrize("shape,layout,changes", [
    ((33, 70, 40), "nn", dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=16, GROUP_M=1, num_warps=4,
                              num_stages=2)),
    ((100, 70, 45), "tn", dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=4, num_warps=2)),
    ((130, 40, 64), "nt", dict(BLOCK_M=32, BLOCK_N=32, GROUP_M=16, num_warps=4, num_stages=5)),
    ((36, 132, 20), "tt", dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=4)),
    ((65, 63, 17), "nn", dict()),
], ids=str)
def test_triton_twin_variants(shape, layout, changes):
    result = _run_triton(shape, layout, **changes)
    assert result.passed, f"{shape} {layout} {changes}: {result.reason}"


@cpu_only
def test_triton_twin_grouped_order_visits_every_tile_once():
    """GROUP_M's mapping (pid -> pid_m, pid_n) is a permutation of the tiles, including a last
    group with fewer block-rows (5 block-rows, GROUP_M 4 and 16)."""
    for group_m in (1, 4, 16):
        result = _run_triton((5 * 32 - 3, 3 * 32 + 1, 24), "nn", BLOCK_M=32, BLOCK_N=32,
                             BLOCK_K=16, GROUP_M=group_m, num_warps=4)
        assert result.passed, f"GROUP_M={group_m}: {result.reason}"


@cpu_only
def test_triton_validate():
    tri = get_stage(STAGE).module("triton")
    tri.validate(**_params("triton"))
    for kwargs, words in ((dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=16,
                                num_stages=5), "num_stages"),
                          (dict(BLOCK_M=256, BLOCK_N=256, num_warps=4), "accumulators")):
        with pytest.raises(LabError, match=words) as info:
            tri.validate(**{**_params("triton"), **kwargs})
        assert "\n" not in str(info.value)
    assert tri.smem_bytes() == 3 * 256 * 32 * 4  # 96 KiB at the defaults


# ------------------------------------------------------- GPU


GPU_SHAPES = [(1, 1, 1), (129, 67, 95), (1000, 1500, 257), (256, 384, 1024), (1, 1025, 17),
              (300, 260, 4)]
PIPELINES = [dict(), dict(pipeline="cp_async"), dict(pipeline="cp_async", stages=3),
             dict(pipeline="cp_async", stages=4), dict(SMALL, pipeline="cp_async", stages=3),
             dict(WIDE, BK=32, pipeline="cp_async", stages=4)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("changes", PIPELINES, ids=str)
def test_every_pipeline_matches_torch_on_the_gpu(changes, layout):
    check_in_layout(_cuda(), _params(**changes), GPU_SHAPES, layout, label=f"{changes} ")


def _sanitizer():
    from lab.ncu import find_tool

    return find_tool("compute-sanitizer")


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ("memcheck", "racecheck", "synccheck"))
@pytest.mark.parametrize("spec", ["double_buffered", "double_buffered:pipeline=cp_async",
                                  "double_buffered:pipeline=cp_async,stages=3",
                                  "double_buffered:pipeline=cp_async,stages=4"])
@pytest.mark.parametrize("size", ["129x67x95", "256x256x64"])  # edges + 4-byte copies; interior
def test_each_pipeline_is_clean_under_compute_sanitizer(spec, tool, size):
    sanitizer = _sanitizer()
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found on PATH, in the venv or in /usr/local/cuda/bin")
    r, out, tail = run_sanitized(sanitizer, tool, spec, "--size", size)
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), f"{tool} found errors in {spec}:\n{tail}"
    assert r.returncode == 0, f"{tool} run of {spec} exited {r.returncode}:\n{tail}"
    assert "checked" in out, f"the target did not finish its check:\n{tail}"
