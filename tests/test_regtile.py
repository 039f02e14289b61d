"""CPU tests of the register-tiling stages: blocktile_1d, blocktile_2d, vectorized.

(a) the Triton twins are correct under the interpreter on odd shapes and shapes that straddle
    their tiles; (b) the CUDA stages compile for sm_90 without spills (defaults and other valid
    parameter sets) and keep the register budgets their occupancy relies on; (c) invalid parameter
    combinations are refused with one LabError sentence naming the parameter, before compiling;
(d) the SASS has the instructions each stage is about (LDG.E.128 / LDS.128 in vectorized, none of
    the 128-bit global loads in blocktile_2d), fully unrolled FMA loops and no local memory;
(e) the CUDA kernels themselves compute the right C: compiled by g++ against a small emulation of
    CUDA's thread model, with AddressSanitizer and UBSan (out-of-bounds loads, misaligned float4).
"""

import re

import pytest
import torch

from lab import check as chk
from lab.errors import CompileError, LabError
from lab.stages import get_stage, parse_variants

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-mode tests (GPU present)")

STAGE_NAMES = ("blocktile_1d", "blocktile_2d", "vectorized")

# Odd shapes, plus shapes that straddle the default tiles (64 for blocktile_1d, 128 for the 2-D
# stages) and the k-steps (8 in CUDA, 16 in the Triton twins) by one.
ODD_SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2), (130, 67, 33)]
STRADDLE_SHAPES = [(65, 65, 17), (129, 127, 9), (128, 129, 16), (63, 130, 15)]


def _params(stage_name: str, backend: str, **changes):
    """The registry's parameters for a variant, as the harness hands them to a launcher."""
    spec = stage_name + (":" + ",".join(f"{k}={v}" for k, v in changes.items()) if changes else "")
    return parse_variants([spec])[0].params_for(backend)


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
    from triton_kernels import vectorized

    a, b, c = torch.empty(8, 12), torch.empty(12, 20), torch.empty(8, 20)
    assert vectorized.vector_flags(a, b, c) == {"VEC_A": True, "VEC_B": True}
    a, b, c = torch.empty(8, 13), torch.empty(13, 22), torch.empty(8, 22)
    assert vectorized.vector_flags(a, b, c) == {"VEC_A": False, "VEC_B": False}


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


@pytest.mark.parametrize("vec_a,vec_b", [(False, False), (True, False), (False, True)])
def test_vectorized_scalar_variants_compile_without_spills(vec_a, vec_b):
    from cuda_kernels import vectorized

    build = vectorized.build(vec_a=vec_a, vec_b=vec_b)
    assert build.spill_bytes == 0
    assert f"-DVEC_A={int(vec_a)}" in build.options and f"-DVEC_B={int(vec_b)}" in build.options


def test_vectorized_picks_the_scalar_variant_for_unaligned_rows():
    from cuda_kernels.vectorized import vector_flags

    a, b, c = torch.empty(8, 12), torch.empty(12, 20), torch.empty(8, 20)
    assert vector_flags(a, b, c) == {"vec_a": True, "vec_b": True}
    a, b, c = torch.empty(8, 13), torch.empty(13, 20), torch.empty(8, 20)   # K % 4 != 0
    assert vector_flags(a, b, c) == {"vec_a": False, "vec_b": True}
    a, b, c = torch.empty(8, 12), torch.empty(12, 22), torch.empty(8, 22)   # N % 4 != 0
    assert vector_flags(a, b, c) == {"vec_a": True, "vec_b": False}
    base = torch.empty(8 * 12 + 1)
    a = base[1:].view(8, 12)  # a contiguous view 4 bytes past a 16-byte boundary
    assert a.is_contiguous() and a.data_ptr() % 16 == 4
    assert vector_flags(a, torch.empty(12, 20), torch.empty(8, 20))["vec_a"] is False


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
    from cuda_kernels import _sass

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
    from cuda_kernels import _sass

    mix1 = _sass.instruction_mix(sass_of("blocktile_1d"))
    assert mix1.get("LDS", 0) == 8 and mix1.get("LDS.128", 0) == 16   # 8 B values, A as vectors
    mixv = _sass.instruction_mix(sass_of("vectorized"))
    assert mixv.get("LDS.128", 0) == 8 * 4 and mixv.get("LDS", 0) == 0  # 2 A + 2 B float4 per k


# ------------------------------------------------------- (e) the CUDA kernels, run on the CPU
#
# No GPU here, but the .cu files are plain C++ apart from a few CUDA keywords. EMULATOR below
# defines those keywords and runs one std::thread per CUDA thread (std::barrier for __syncthreads,
# static locals for __shared__, one block after another), so g++ can compile each kernel and check
# C against a float64 reference: the index math, the bounds tests and zero fill, the GROUP block
# order and the VEC_A / VEC_B variants. AddressSanitizer catches a load outside A or B, UBSan a
# float4 access that is not 16-byte aligned (the emulated float4 is alignas(16) like CUDA's), and
# the runner fails on any element of C left NaN and on any write past C. Skipped without g++.

EMULATOR = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
using std::max;
using std::min;
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local Dim3 threadIdx, blockIdx;
std::barrier<>* g_barrier = nullptr;
inline void __syncthreads() { g_barrier->arrive_and_wait(); }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#include KERNEL_FILE

int main(int argc, char** argv) {
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    std::mt19937 gen(M * 131 + N * 7 + K);
    std::normal_distribution<float> normal;
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N), Cbuf(size_t(M) * N + 8, NAN);
    for (float& x : A) x = normal(gen);
    for (float& x : B) x = normal(gen);
    float* C = Cbuf.data();
    const unsigned blocks = unsigned(((M + BM - 1) / BM) * ((N + BN - 1) / BN));
    for (unsigned bid = 0; bid < blocks; ++bid) {
        std::barrier<> bar(THREADS);
        g_barrier = &bar;
        std::vector<std::thread> team;
        for (int t = 0; t < THREADS; ++t)
            team.emplace_back([&, t] {
                threadIdx = {unsigned(t), 0, 0};
                blockIdx = {bid, 0, 0};
                KERNEL_NAME(A.data(), B.data(), C, M, N, K);
            });
        for (auto& th : team) th.join();
    }
    double num = 0, den = 0;
    long bad = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double ref = 0;
            for (int k = 0; k < K; ++k) ref += double(A[size_t(i) * K + k]) * B[size_t(k) * N + j];
            const double c = C[size_t(i) * N + j];
            if (!std::isfinite(c)) { ++bad; continue; }
            num += (c - ref) * (c - ref);
            den += ref * ref;
        }
    for (size_t i = size_t(M) * N; i < Cbuf.size(); ++i) bad += !std::isnan(Cbuf[i]);
    const double rel = std::sqrt(num / (den > 0 ? den : 1));
    std::printf("%dx%dx%d rel_err=%.2e bad=%ld\n", M, N, K, rel, bad);
    return bad == 0 && rel < 1e-5 ? 0 : 1;
}
"""


EMU_SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2), (130, 67, 33), (129, 257, 17)]
EMU_KERNELS = [
    ("blocktile_1d", dict(GROUP=16)),
    ("blocktile_1d", dict(GROUP=4, BM=128, BN=32, BK=16, TM=16)),
    ("blocktile_2d", dict(GROUP=16)),
    ("blocktile_2d", dict(GROUP=1, BM=32, BN=128, BK=16)),   # fewer threads than B-tile columns
    ("blocktile_2d", dict(GROUP=4, BM=64, BN=64, BK=32, TM=4)),
]
# vectorized: each (VEC_A, VEC_B) build, on the shapes the launcher would give it (K % 4, N % 4)
VEC_SHAPES = [(1, 4, 8), (17, 33, 129), (65, 64, 63), (40, 66, 32), (132, 260, 36), (129, 131, 12),
              (70, 36, 21)]
VEC_PARAMS = [dict(), dict(BM=64, BK=16, TN=4)]
VEC_KERNELS = [("vectorized", {"GROUP": 16, **d, "VEC_A": va, "VEC_B": vb})
               for d in VEC_PARAMS for va in (True, False) for vb in (True, False)]


def _vec_shapes(defines):
    return [s for s in VEC_SHAPES
            if (s[2] % 4 == 0) == defines["VEC_A"] and (s[1] % 4 == 0) == defines["VEC_B"]]


@pytest.fixture(scope="module")
def emulate(tmp_path_factory):
    """Compile every emulated kernel once (in parallel); return run(stage, defines, shapes)."""
    import shutil
    import subprocess
    from pathlib import Path

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    root = tmp_path_factory.mktemp("emulator")
    (root / "emulator.cpp").write_text(EMULATOR)
    kernels = Path(__file__).resolve().parent.parent / "cuda_kernels"
    jobs = {}
    for i, (stage_name, defines) in enumerate(EMU_KERNELS + VEC_KERNELS):
        exe = root / f"{stage_name}_{i}"
        cmd = [cxx, "-std=c++20", "-O1", "-g", "-pthread", "-Wno-unknown-pragmas",
               "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{kernels}",
               f'-DKERNEL_FILE="{kernels / (stage_name + ".cu")}"',
               f"-DKERNEL_NAME=matmul_{stage_name}",
               *(f"-D{k}={int(v)}" for k, v in defines.items()),
               str(root / "emulator.cpp"), "-o", str(exe)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        jobs[(stage_name, tuple(sorted(defines.items())))] = (exe, proc)
    built, errors = {}, []
    for key, (exe, proc) in jobs.items():
        _, err = proc.communicate()
        if proc.returncode == 0:
            built[key] = exe
        else:
            errors.append((key, err))
    if errors and "barrier" in errors[0][1] and not built:
        pytest.skip(f"{cxx} lacks C++20 <barrier>")

    def run(stage_name: str, defines: dict, shapes):
        key = (stage_name, tuple(sorted(defines.items())))
        for k, err in errors:
            if k == key:
                pytest.fail(f"{cxx} could not compile {stage_name}.cu for the emulator:\n"
                            + err[-3000:])
        for M, N, K in shapes:
            out = subprocess.run([str(built[key]), str(M), str(N), str(K)], capture_output=True,
                                 text=True, timeout=120)
            assert out.returncode == 0, (f"{stage_name} {defines} {M}x{N}x{K}:\n"
                                         + (out.stdout + out.stderr)[-3000:])

    return run


@pytest.mark.parametrize("stage_name,defines", EMU_KERNELS, ids=str)
def test_cuda_kernel_emulated_on_the_cpu(emulate, stage_name, defines):
    emulate(stage_name, defines, EMU_SHAPES)


@pytest.mark.parametrize("stage_name,defines", VEC_KERNELS, ids=str)
def test_vectorized_kernel_emulated_in_each_variant(emulate, stage_name, defines):
    from cuda_kernels.vectorized import validate

    validate(**{k: v for k, v in defines.items() if k in ("BM", "BN", "BK", "TM", "TN")})
    emulate(stage_name, defines, _vec_shapes(defines))
