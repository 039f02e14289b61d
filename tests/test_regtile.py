"""CPU tests of the register-tiling stages: blocktile_1d, blocktile_2d, vectorized.

(a) the Triton twins are correct under the interpreter on odd shapes and shapes that straddle
    their tiles; (b) the CUDA stages compile for sm_90 without spills (defaults and other valid
    parameter sets) and keep the register budgets their occupancy relies on; (c) invalid parameter
    combinations are refused with one LabError sentence naming the parameter, before compiling;
(d) the SASS has the instructions each stage is about (LDG.E.128 / LDS.128 in vectorized, none of
    the 128-bit global loads in blocktile_2d), fully unrolled FMA loops and no local memory;
(e) the CUDA kernels themselves compute the right C in every operand layout (nn, nt, tn, tt, with
    leading dimensions larger than the widths): compiled by g++ against a small emulation of CUDA's
    thread model (tests/cuda_emulator.py), with AddressSanitizer and UBSan (out-of-bounds loads,
    misaligned float4).
"""

import re

import pytest
import torch

from helpers import (LAYOUTS, compile_for_emulator, cpu_only, line_widths, new_emulator, padded_ld,
                     stage_params, strided_operands)
from lab import check as chk
from lab.base.errors import CompileError, LabError
from lab.stages import get_stage

pytestmark = cpu_only

STAGE_NAMES = ("blocktile_1d", "blocktile_2d", "vectorized")

# Odd shapes, plus shapes that straddle the default tiles (64 for blocktile_1d, 128 for the 2-D
# stages) and the k-steps (8 in CUDA, 16 in the Triton twins) by one.
ODD_SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2), (130, 67, 33)]
STRADDLE_SHAPES = [(65, 65, 17), (129, 127, 9), (128, 129, 16), (63, 130, 15)]


def _params(stage_name: str, backend: str, **changes):
    """The registry's parameters for a variant, as the harness hands them to a launcher."""
    return stage_params(stage_name, backend, **changes)


def _run_triton(stage_name: str, shape, **changes):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=3 * M + 5 * N + 7 * K, device="cpu")
    ref = chk.reference(a, b)
    c = torch.empty((M, N))
    module = get_stage(stage_name).module("triton")
    launch = module.prepare(a, b, c, **_params(stage_name, "triton", **changes))
    return chk.check(launch, c, ref, K)


# ------------------------------------------------------- (a) Triton under the interpreter


@pytest.mark.parametrize("shape", ODD_SHAPES + STRADDLE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("stage_name", STAGE_NAMES)
def test_triton_twin_is_correct_on_odd_shapes(stage_name, shape):
    result = _run_triton(stage_name, shape)
    assert result.passed, f"{stage_name} {shape}: {result.reason}"
    assert result.rel_err < 1e-6


@pytest.mark.parametrize("stage_name,changes,shape", [
    ("blocktile_1d", dict(BM=32, BN=32, BK=16, num_warps=4), (33, 31, 47)),
    ("blocktile_1d", dict(BK=32), (65, 63, 65)),
    ("blocktile_2d", dict(BM=32, BN=64, BK=16, num_warps=4), (65, 63, 33)),
    ("blocktile_2d", dict(num_stages=2), (129, 17, 40)),
    ("vectorized", dict(BM=32, BN=32, BK=16, num_warps=4), (33, 36, 40)),  # VEC_A+B, ragged K
    ("vectorized", dict(BM=64, BN=32), (70, 36, 21)),       # VEC_B only, ragged K
    ("vectorized", dict(BM=32, BN=64), (40, 66, 32)),       # VEC_A only, EVEN_K
], ids=str)
def test_triton_twin_variants(stage_name, changes, shape):
    result = _run_triton(stage_name, shape, **changes)
    assert result.passed, f"{stage_name} {changes} {shape}: {result.reason}"


def test_triton_vectorized_twin_flags_follow_the_cuda_rule():
    """Hints along the contiguous dimension ('n' rows, 't' columns) only where 4 consecutive
    elements are contiguous, 16-byte aligned and inside the view."""
    from lab.base.describe import describe
    from lab.base.needs import TRITON
    from triton_kernels import vectorized

    def flags(a, b, c):
        return vectorized.vec_hints(describe(a, b, c, TRITON))

    a, b, c = torch.empty(8, 12), torch.empty(12, 20), torch.empty(8, 20)
    assert flags(a, b, c) == {"VEC_A": "n", "VEC_B": "n", "VEC_C": "n"}
    assert flags(torch.empty(8, 13), torch.empty(13, 22), torch.empty(8, 22)) == \
        {"VEC_A": "", "VEC_B": "", "VEC_C": ""}
    assert flags(torch.empty(12, 8).t(), torch.empty(20, 12).t(), torch.empty(20, 8).t()) == \
        {"VEC_A": "t", "VEC_B": "t", "VEC_C": "t"}
    assert flags(torch.empty(8, 16)[:, :12], b, c)["VEC_A"] == "n"  # row stride 16, width 12
    assert flags(torch.empty(8, 16)[:, :13], torch.empty(13, 20), c)["VEC_A"] == ""  # width 13
    assert flags(torch.empty(8, 14)[:, :12], b, c)["VEC_A"] == ""  # row stride 14
    assert flags(torch.empty(97)[1:].view(8, 12), b, c)["VEC_A"] == ""  # offset of 1 float
    assert flags(torch.empty(16, 24)[::2, ::2], b, c)["VEC_A"] == ""  # no unit stride


# ------------------------------------------------------- (b) CUDA builds

DEFAULT_BUDGET = {  # registers the default build may use: the occupancy the design relies on
    "blocktile_1d": 32,   # 4 blocks of 512 threads per SM (64 warps, the maximum)
    "blocktile_2d": 128,  # 2 blocks of 256 threads per SM
    "vectorized": 128,
}


@pytest.mark.parametrize("stage_name", STAGE_NAMES)
def test_cuda_defaults_compile_for_sm90_without_spills(stage_name):
    cuda = get_stage(stage_name).module("cuda")
    build = cuda.build(**_params(stage_name, "cuda"))
    assert build.arch == "sm_90"
    assert build.spill_bytes == 0 and build.stack_frame == 0
    assert 0 < build.registers <= DEFAULT_BUDGET[stage_name]


VALID_VARIANTS = [
    ("blocktile_1d", dict(TM=4, BK=16)),
    ("blocktile_1d", dict(BM=128, BN=32, BK=16)),
    ("blocktile_1d", dict(TM=16)),
    ("blocktile_1d", dict(unroll=0)),
    ("blocktile_1d", dict(group=1, fast_math=1)),
    ("blocktile_2d", dict(BM=64)),
    ("blocktile_2d", dict(BK=16, TM=4)),
    ("blocktile_2d", dict(BM=64, BN=64, TM=4, TN=4)),
    ("blocktile_2d", dict(unroll=0)),
    ("vectorized", dict(BM=64)),
    ("vectorized", dict(BK=16, TN=4)),
    ("vectorized", dict(BK=32)),
    ("vectorized", dict(unroll=0)),
]


@pytest.mark.parametrize("stage_name,changes", VALID_VARIANTS, ids=str)
def test_cuda_variants_compile_without_spills(stage_name, changes):
    cuda = get_stage(stage_name).module("cuda")
    params = _params(stage_name, "cuda", **changes)
    cuda.validate(**params)
    build = cuda.build(**params)
    assert build.spill_bytes == 0, f"{stage_name} {changes}: {build.spill_bytes} spill bytes"
    grid, block, smem = cuda.geometry(100, 200, 50, **params)
    assert 32 <= block[0] * block[1] * block[2] <= 1024 and smem == 0
    assert grid == (-(-100 // params["BM"]) * -(-200 // params["BN"]), 1, 1)


@pytest.mark.parametrize("layout", ["nn", "tt"])
@pytest.mark.parametrize("vec_a,vec_b,vec_c", [(False, False, False), (True, False, True),
                                               (False, True, False), (True, True, False)])
def test_vectorized_scalar_variants_compile_without_spills(vec_a, vec_b, vec_c, layout):
    from cuda_kernels import vectorized

    build = vectorized.build(vec_a=vec_a, vec_b=vec_b, vec_c=vec_c, layout=layout)
    assert build.spill_bytes == 0
    for name, value in (("VEC_A", vec_a), ("VEC_B", vec_b), ("VEC_C", vec_c)):
        assert f"-D{name}={int(value)}" in build.options


def test_vectorized_picks_the_scalar_variant_for_unaligned_lines():
    from cuda_kernels.vectorized import aligned_operands
    from lab.base.describe import describe

    def flags(a, b, c):  # (vec_a, vec_b, vec_c) as the launcher picks them
        f = aligned_operands(describe(a, b, c))
        return f["vec_a"], f["vec_b"], f["vec_c"]

    # row-major: the lines are rows, so K (A) and N (B, C) must be multiples of 4
    assert flags(torch.empty(8, 12), torch.empty(12, 20), torch.empty(8, 20)) == (1, 1, 1)
    assert flags(torch.empty(8, 13), torch.empty(13, 20), torch.empty(8, 20)) == (0, 1, 1)
    assert flags(torch.empty(8, 12), torch.empty(12, 22), torch.empty(8, 22)) == (1, 0, 0)
    # views: the leading dimension decides, not the width (rows of 13 floats, 16 apart)
    assert flags(torch.empty(8, 16)[:, :13], torch.empty(13, 24)[:, :22],
                 torch.empty(8, 24)[:, :22]) == (1, 1, 1)
    assert flags(torch.empty(8, 14)[:, :12], torch.empty(12, 20),
                 torch.empty(8, 21)[:, :20]) == (0, 1, 0)
    # transposed (column-major) A and B: the lines are columns, so M (A) and K (B) count
    a_t, b_t = torch.empty(12, 8).t(), torch.empty(20, 12).t()   # A 8 x 12, B 12 x 20
    assert a_t.stride() == (1, 8) and flags(a_t, b_t, torch.empty(8, 20)) == (1, 1, 1)
    a_t, b_t = torch.empty(12, 9).t(), torch.empty(20, 13).t()   # A 9 x 12, B 13 x 20
    assert flags(a_t, b_t, torch.empty(9, 20)) == (0, 0, 1)
    a_t = torch.empty(12, 12)[:, :9].t()   # 9 x 12, columns 12 floats apart: aligned
    assert flags(a_t, torch.empty(12, 20), torch.empty(9, 20)) == (1, 1, 1)
    # base pointers
    base = torch.empty(8 * 12 + 1)
    a = base[1:].view(8, 12)  # a contiguous view 4 bytes past a 16-byte boundary
    assert a.is_contiguous() and a.data_ptr() % 16 == 4
    assert flags(a, torch.empty(12, 20), torch.empty(8, 20)) == (0, 1, 1)
    c = base[1:81].view(4, 20)
    assert flags(torch.empty(4, 12), torch.empty(12, 20), c) == (1, 1, 0)


@pytest.mark.parametrize("stage_name", STAGE_NAMES)
def test_launchers_ignore_unknown_keywords(stage_name):
    cuda = get_stage(stage_name).module("cuda")
    params = {**_params(stage_name, "cuda"), "num_warps": 4, "tile": 32, "whatever": 1}
    cuda.validate(**params)
    assert cuda.build(**params).spill_bytes == 0
    grid, block, smem = cuda.geometry(64, 64, 64, **params)
    assert block[0] == {"blocktile_1d": 512}.get(stage_name, 256)
    get_stage(stage_name).module("triton").validate(**{**_params(stage_name, "triton"), "TM": 8})


# ------------------------------------------------------- (c) validation

INVALID = [
    ("blocktile_1d", dict(BM=128, BN=128, TM=8), "threads"),      # 2048 threads
    ("blocktile_1d", dict(BM=64, BN=128, BK=8, TM=8), "A tile"),  # 512 values over 1024 threads
    ("blocktile_1d", dict(BM=128, BN=32, BK=8, TM=8), "B tile"),  # 256 values over 512 threads
    ("blocktile_2d", dict(BM=32, BN=32, TM=8, TN=8), "threads"),  # 16 threads
    ("vectorized", dict(BM=32, BN=32, TM=8, TN=8), "threads"),
    ("vectorized", dict(BM=64, BN=64, TM=4, TN=4), "A tile"),     # 128 float4 over 256 threads
    ("vectorized", dict(BM=64, BN=32, TM=4, TN=4), "B tile"),     # 64 float4 over 128 threads
]


@pytest.mark.parametrize("stage_name,changes,words", INVALID, ids=str)
def test_invalid_combinations_raise_one_sentence(stage_name, changes, words):
    params = {**_params(stage_name, "cuda"), **changes}
    cuda = get_stage(stage_name).module("cuda")
    with pytest.raises(LabError) as info:
        cuda.validate(**params)
    message = str(info.value)
    assert "\n" not in message and ". " not in message, message  # one sentence
    assert words in message, message
    for key, value in changes.items():  # it names the parameters, with their values
        assert f"{key}={value}" in message, message
    # build() refuses before NVRTC runs (a LabError of its own, not a CompileError)
    with pytest.raises(LabError) as info:
        cuda.build(**params)
    assert not isinstance(info.value, CompileError)


@pytest.mark.parametrize("stage_name", STAGE_NAMES)
def test_triton_validate_refuses_too_much_shared_memory(stage_name):
    triton_module = get_stage(stage_name).module("triton")
    triton_module.validate(**_params(stage_name, "triton"))
    with pytest.raises(LabError, match="num_stages"):
        triton_module.validate(BM=128, BN=128, BK=32, num_stages=8)


def test_invalid_variant_is_a_usage_error_on_the_command_line(capsys):
    from lab.compare import main

    code = main(["--stage", "vectorized:BM=64,BN=32,TM=4,TN=4", "--backend", "cuda",
                 "--sizes", "64"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: vectorized") and "\n" not in err and "B tile" in err


# ------------------------------------------------------- (d) SASS


@pytest.fixture(scope="module")
def sass_of():
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    cache = {}

    def get(stage_name, **kw):
        key = (stage_name, tuple(sorted(kw.items())))
        if key not in cache:
            cuda = get_stage(stage_name).module("cuda")
            cache[key] = _sass.sass(cuda.build(**{**_params(stage_name, "cuda"), **kw}))
        return cache[key]

    return get


def _count(text: str, opcode: str) -> int:
    return len(re.findall(rf"\b{re.escape(opcode)}\b", text))


def test_vectorized_sass_has_128_bit_global_and_shared_loads(sass_of):
    text = sass_of("vectorized")
    assert "LDG.E.128" in text, "no 128-bit global loads"
    assert "LDS.128" in text, "no 128-bit shared loads"
    assert "STG.E.128" in text, "no 128-bit global stores"


def test_blocktile_2d_and_scalar_vectorized_have_no_128_bit_global_loads(sass_of):
    assert "LDG.E.128" not in sass_of("blocktile_2d")
    assert "LDG.E.128" not in sass_of("vectorized", vec_a=False, vec_b=False)


@pytest.mark.parametrize("stage_name,ffma", [("blocktile_1d", 8 * 8), ("blocktile_2d", 8 * 64),
                                             ("vectorized", 8 * 64)])
def test_fma_loop_is_fully_unrolled_and_in_registers(sass_of, stage_name, ffma):
    text = sass_of(stage_name)
    assert _count(text, "FFMA") == ffma  # BK * (TM or TM*TN): one k-step, fully unrolled
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory (an indexed register array?)"


def test_inner_loops_read_shared_memory_as_designed(sass_of):
    from lab.toolchain import sass as _sass

    mix1 = _sass.instruction_mix(sass_of("blocktile_1d"))
    assert mix1.get("LDS", 0) == 8 and mix1.get("LDS.128", 0) == 16   # 8 B values, A as vectors
    mixv = _sass.instruction_mix(sass_of("vectorized"))
    assert mixv.get("LDS.128", 0) == 8 * 4 and mixv.get("LDS", 0) == 0  # 2 A + 2 B float4 per k


# ------------------------------------------------------- (e) the CUDA kernels, run on the CPU
#
# No GPU here: tests/cuda_emulator.py compiles each kernel with g++ against a small emulation of
# CUDA's thread model, with exactly the -D defines of its NVRTC build, under AddressSanitizer and
# UBSan, and checks C against a float64 reference: the index math, the bounds tests and zero fill,
# the GROUP block order, the operand layouts (nn, nt, tn, tt: every kernel runs in each) and the
# VEC_A / VEC_B / VEC_C variants. A, B and C have leading dimensions larger than their widths, and
# the emulator fills the gaps with NaN: a kernel that reads a gap gets NaN into C, one that writes a
# gap or past C is counted. ASan catches a load outside an operand, UBSan a float4 access that is
# not 16-byte aligned. The NVRTC builds and the g++ compiles overlap (a module fixture starts them
# all at once, at most one g++ per core); skipped without g++.

EMU_SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2), (130, 67, 33), (129, 257, 17)]
EMU_KERNELS = [
    ("blocktile_1d", dict(group=16)),
    ("blocktile_1d", dict(group=4, BM=128, BN=32, BK=16, TM=16)),   # several loads per thread
    ("blocktile_2d", dict(group=16)),
    ("blocktile_2d", dict(group=1, BM=32, BN=128, BK=16)),   # fewer threads than B-tile columns
    ("blocktile_2d", dict(group=4, BM=64, BN=64, BK=32, TM=4)),
]
# vectorized: each flag of VEC_A / VEC_B / VEC_C on and off in every layout, under two parameter
# sets (all on / all off with the defaults, mixed with the smaller tile), each on operands for
# which the launcher picks exactly that variant (leading dimensions a multiple of 4 floats or not).
VEC_SHAPES = [(1, 4, 8), (17, 33, 129), (65, 64, 63), (40, 66, 32), (132, 260, 36), (129, 131, 12),
              (70, 36, 21)]
VEC_KERNELS = [("vectorized", {**params, "vec_a": va, "vec_b": vb, "vec_c": vc})
               for params, flags in ((dict(group=16), ((1, 1, 1), (0, 0, 0))),
                                     (dict(group=4, BM=64, BK=16, TN=4), ((1, 0, 1), (0, 1, 0))))
               for va, vb, vc in flags]
EMU_CASES = [(s, p, layout) for s, p in EMU_KERNELS + VEC_KERNELS for layout in LAYOUTS]


def _emu_build(stage_name: str, params: dict, layout: str):
    return get_stage(stage_name).module("cuda").build(**params, layout=layout)


_ld = padded_ld


def _leading_dims(M: int, N: int, K: int, layout: str, aligned) -> tuple[int, int, int]:
    """lda, ldb, ldc for A, B, C in `layout`; aligned = (A, B, C) whose lines are 16-byte aligned."""
    widths = line_widths(M, N, K, layout)
    return tuple(_ld(w, al) for w, al in zip(widths, aligned))


_operands = strided_operands


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """Every build of EMU_CASES compiled for the emulator: (Emulator, {case: build})."""
    emulator = new_emulator(tmp_path_factory, "emulator")
    # a build g++ refused fails its own tests (emulator.run), not the fixture
    builds, _ = compile_for_emulator(
        emulator, EMU_CASES, lambda case: ((case[0], str(case[1]), case[2]), _emu_build(*case)))
    return emulator, builds


def _emulate(emulated, stage_name, params, layout, cases):
    """Run the build of (stage_name, params, layout) on cases [(M, N, K, lda, ldb, ldc)]."""
    emulator, builds = emulated
    build = builds[stage_name, str(params), layout]
    assert build.spill_bytes == 0, f"{stage_name} {params} {layout}: {build.spill_bytes} spill bytes"
    cuda = get_stage(stage_name).module("cuda")
    for M, N, K, lda, ldb, ldc in cases:
        grid, block, _ = cuda.geometry(M, N, K, **params)
        ok, out = emulator.run(build, grid, block, M, N, K, lda, ldb, ldc)
        assert ok, f"{stage_name} {params} {layout} {M}x{N}x{K} lda={lda} ldb={ldb} ldc={ldc}:\n{out}"


@pytest.mark.parametrize("stage_name,params,layout", EMU_CASES[:len(EMU_KERNELS) * len(LAYOUTS)],
                         ids=str)
def test_cuda_kernel_emulated_on_the_cpu(emulated, stage_name, params, layout):
    # leading dimensions alternately a multiple of 4 floats or not (no float4 here: either works)
    cases = [(M, N, K, *_leading_dims(M, N, K, layout, (i % 2 == 0,) * 3))
             for i, (M, N, K) in enumerate(EMU_SHAPES)]
    _emulate(emulated, stage_name, params, layout, cases)


@pytest.mark.parametrize("stage_name,params,layout", EMU_CASES[len(EMU_KERNELS) * len(LAYOUTS):],
                         ids=str)
def test_vectorized_kernel_emulated_in_each_variant(emulated, stage_name, params, layout):
    from cuda_kernels.vectorized import validate, aligned_operands
    from lab.base.describe import describe

    validate(**params)
    flags = {name: bool(params[name]) for name in ("vec_a", "vec_b", "vec_c")}
    cases = []
    for M, N, K in VEC_SHAPES:
        lds = _leading_dims(M, N, K, layout, tuple(flags.values()))
        p = describe(*_operands(M, N, K, layout, *lds))
        assert p.layout == layout and not p.swapped
        # Only where the launcher picks exactly this variant (not, e.g., an unaligned A of one row:
        # a single line has no leading dimension, so it is aligned whenever its pointer is).
        if aligned_operands(p) == flags:
            cases.append((M, N, K, *lds))
    assert len(cases) >= len(VEC_SHAPES) - 2, f"{layout} {flags}: only {len(cases)} shapes"
    _emulate(emulated, stage_name, params, layout, cases)
