"""Tests of the warptiling stage and its split-K variant (CPU; a few `gpu`-marked ones at the end).

(a) split-K in the CUDA emulator: the main kernel (grid y = splitk) and splitk_reduce run one after
    the other on the CPU (g++, ASan/UBSan, the thread model of tests/cuda_emulator.py) in every
    layout, VEC variant and for splitk larger than the number of k-tiles. The program checks
    each split's slab against the float64 partial product over that split's k-range (an empty
    range must give exact zeros), that nothing is written into the workspace's padding or
    C's gaps, and that C is bitwise the ordered sum slab 0 + slab 1 + ... (the determinism of
    the reduction) and within tolerance of the reference;
(b) the Triton twin under the interpreter: split-K on odd shapes, layouts and views, ragged and
    even K, other tiles; C bitwise equal to the ordered sum of the workspace slabs, and the same
    bits on a second launch;
(c) validate() refusals (one sentence naming the parameters) on both backends;
(d) NVRTC builds: zero spills for the default build in every layout, for each splitk choice
    and for the tile shapes worth timing; the reduction kernel for each splitk; the SASS of the
    default has the one-wavefront LDS.128 fragment reads and no local memory;
(e) `gpu`: split-K and determinism on the GPU (skipped without one);
(f) the automatic split (splitk=0, the default; lab/base/splitk.py): the split chosen for a table of
    shapes and SM counts, the same on both backends, explicit values passed through, the
    `params` column showing the split that runs, the Triton twin computing a split it chose
    under the interpreter, the tuner's build identity merging 0 with its split; `gpu`: the
    default at 320x192x786432 and 256x256x524288 correct on both backends, its error at
    256x256x524288 within 2x of cuBLAS fp32's.
"""

from __future__ import annotations

import math
import re
import subprocess

import pytest
import torch

from helpers import LAYOUTS, cpu_only, line_widths, padded_ld, stage_params
from lab import check as chk
from lab.base.errors import CompileError, LabError
from lab.stages import get_stage

STAGE = get_stage("warptiling")
SPLITS = next(p.choices for p in STAGE.params if p.name == "splitk")
EXPLICIT = tuple(s for s in SPLITS if s >= 1)  # 0 is the automatic split, section (f)
SMALL = dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=8, TN=4)  # 4 warps, 32 results each


def _params(backend: str, **changes):
    return stage_params("warptiling", backend, **changes)


# ------------------------------------------------------- (a) split-K in the CUDA emulator

# main(), after warptiling.cu, splitk_reduce.cu and the emulator's LabOperands
# (cuda_emulator.program): argv M N K lda ldb ldc(=ldw, the workspace row) ldc_c gx gy bx rgx rbx BK
SPLITK_MAIN = r"""
int main(int argc, char** argv) {
    if (argc != 14) { std::fprintf(stderr, "usage\n"); return 2; }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldw = atoi(argv[6]), ldc = atoi(argv[7]);
    const unsigned gx = atoi(argv[8]), gy = atoi(argv[9]), bx = atoi(argv[10]);
    const unsigned rgx = atoi(argv[11]), rbx = atoi(argv[12]);
    const int bk = atoi(argv[13]);
    LabOperands ops(M, N, K, lda, ldb);
    std::vector<float> C(size_t(M) * ldc, NAN), W(size_t(gy) * M * ldw, NAN);
    auto launch = [&](unsigned grid_x, unsigned grid_y, unsigned threads, auto body) {
        lab_run_grid(grid_x, grid_y, threads, 1, 0, body);  // no dynamic shared memory
    };
    launch(gx, gy, bx, [&] { matmul_warptiling(ops.A.data(), ops.B.data(), W.data(), M, N, K, lda, ldb, ldw); });
    // Each slab: the float64 product over its split's k-tiles; empty splits exact zeros.
    const int ktiles = (K + bk - 1) / bk;
    long slab_bad = 0, pad_writes = 0, empty = 0;
    double worst = 0;
    for (unsigned z = 0; z < gy; ++z) {
        const int k0 = int((long long)z * ktiles / gy) * bk;
        const int k1 = std::min(K, int((long long)(z + 1) * ktiles / gy) * bk);
        empty += k1 <= k0;
        LabCheck slab;
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < ldw; ++j) {
                const float w = W[(size_t(z) * M + i) * ldw + j];
                slab.add(w, j, N, [&] { return ops.ref(i, j, k0, k1); });
                slab_bad += j < N && k1 <= k0 && w != 0.0f;  // an empty split writes exact zeros
            }
        slab_bad += slab.bad;
        pad_writes += slab.gaps;
        worst = std::max(worst, slab.rel());
    }
    launch(rgx, 1, rbx, [&] { splitk_reduce(W.data(), C.data(), M, N, ldw, ldc); });
    LabCheck check;
    long unordered = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < ldc; ++j) {
            const float c = C[size_t(i) * ldc + j];
            if (j < N) {
                float sum = W[size_t(i) * ldw + j];  // slab 0 + slab 1 + ..., in fp32, in order
                for (unsigned z = 1; z < gy; ++z) sum += W[(size_t(z) * M + i) * ldw + j];
                unordered += std::memcmp(&sum, &c, sizeof c) != 0;
            }
            check.add(c, j, N, [&] { return ops.ref(i, j, 0, K); });
        }
    const double rel = check.rel();
    std::printf("%dx%dx%d splits=%u empty=%ld slab_err=%.2e slab_bad=%ld pad_writes=%ld "
                "rel_err=%.2e non-finite=%ld gap-writes=%ld not-ordered-sum=%ld\n", M, N, K, gy,
                empty, worst, slab_bad, pad_writes, rel, check.bad, check.gaps, unordered);
    return slab_bad == 0 && pad_writes == 0 && worst < 1e-5 && check.bad == 0 &&
           check.gaps == 0 && unordered == 0 && rel < 1e-5 ? 0 : 1;
}
"""

# (tile, layout, splitk, (vec_a, vec_b, vec_c)): every layout, every VEC flag on and off, the
# default tile and a small one, splitk up to 32 (more splits than k-tiles in most shapes below).
SPLIT_CASES = [
    ({}, "nn", 3, (1, 1, 1)),
    ({}, "tt", 16, (1, 1, 1)),
    (SMALL, "nt", 4, (1, 0, 1)),
    (SMALL, "tn", 32, (0, 1, 0)),
    (SMALL, "tt", 2, (0, 0, 0)),
    (SMALL, "nn", 6, (1, 1, 0)),
    ({**SMALL, "frags": 1, "BK": 16}, "nt", 8, (0, 1, 1)),
]
SPLIT_SHAPES = [(1, 1, 1), (37, 45, 29), (130, 67, 33), (65, 64, 200), (3, 130, 17)]


def _cuda_params(tile: dict, splitk: int, flags) -> dict:
    params = {**_params("cuda", **tile), "splitk": splitk}
    return {**params, "vec_a": flags[0], "vec_b": flags[1], "vec_c": flags[2]}


_ld = padded_ld


@pytest.fixture(scope="module")
def splitk_programs(tmp_path_factory):
    """One g++ executable per SPLIT_CASES entry (tests/cuda_emulator.py's pool): {index: path}."""
    from cuda_emulator import KERNELS, compile_async, compiler, defines_of, program

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    from cuda_kernels import warptiling

    root = tmp_path_factory.mktemp("splitk")
    (root / "splitk.cpp").write_text(program(SPLITK_MAIN, "KERNEL_FILE", "REDUCE_FILE"))

    def compile_case(i):
        tile, layout, splitk, flags = SPLIT_CASES[i]
        build = warptiling.build(**_cuda_params(tile, splitk, flags), layout=layout)
        assert build.spill_bytes == 0
        defines = {"KERNEL_FILE": f'"{KERNELS / build.source}"',
                   "REDUCE_FILE": f'"{KERNELS / "splitk_reduce.cu"}"',
                   **defines_of(build), "RTHREADS": warptiling.REDUCE_THREADS}
        return compile_async(root / "splitk.cpp", root / f"splitk_{i}", defines)

    futures = [compile_case(i) for i in range(len(SPLIT_CASES))]
    return {i: f.result() for i, f in enumerate(futures)}


@cpu_only
@pytest.mark.parametrize("case", range(len(SPLIT_CASES)),
                         ids=[f"{c[1]}-splitk{c[2]}-vec{''.join(map(str, c[3]))}-"
                              f"{'small' if c[0] else 'default'}" for c in SPLIT_CASES])
def test_splitk_emulated_on_the_cpu(splitk_programs, case):
    from cuda_kernels import warptiling

    tile, layout, splitk, flags = SPLIT_CASES[case]
    params = _cuda_params(tile, splitk, flags)
    for M, N, K in SPLIT_SHAPES:
        widths = line_widths(M, N, K, layout)
        lda, ldb, ldc = (_ld(w, f) for w, f in zip(widths, flags))
        ldw = warptiling.workspace_ld(N)
        grid, block, _ = warptiling.geometry(M, N, K, **params)
        assert grid[1] == splitk
        rgrid, rblock, _ = warptiling.reduce_geometry(M, N)
        args = [M, N, K, lda, ldb, ldw, ldc, grid[0], grid[1], block[0], rgrid[0], rblock[0],
                params["BK"]]
        out = subprocess.run([str(splitk_programs[case]), *map(str, args)], capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, f"{layout} splitk={splitk} {M}x{N}x{K}:\n" + \
            (out.stdout + out.stderr)[-3000:]
        if K <= 33 and splitk >= 8:  # more splits than k-tiles: some slabs must be empty
            assert not re.search(r"empty=0\b", out.stdout), out.stdout


# ------------------------------------------------------- (b) the Triton twin, interpreted


def _run_triton(a, b, c, K, **changes):
    module = STAGE.module("triton")
    launch = module.prepare(a, b, c, **_params("triton", **changes))
    return launch, chk.check(launch, c, chk.reference(a, b), K)


@cpu_only
@pytest.mark.parametrize("splitk", [2, 3, 32])
@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2),
                                   (40, 36, 160)], ids=lambda s: "x".join(map(str, s)))
def test_triton_splitk_is_correct(shape, splitk):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + N + K, device="cpu")
    _, result = _run_triton(a, b, torch.empty(M, N), K, splitk=splitk, BLOCK_M=32, BLOCK_N=32,
                            BLOCK_K=16, num_warps=4)
    assert result.passed, result.reason


@cpu_only
@pytest.mark.parametrize("kind", ["nt", "tn", "tt", "sliced"])
def test_triton_splitk_on_layouts_and_views(kind):
    M, N, K = 19, 35, 41
    a, b = chk.make_inputs(M, N, K, seed=7, device="cpu", layout=kind if kind != "sliced" else "nn")
    c = torch.empty(N, M).t() if kind == "tt" else torch.empty(M, N)
    if kind == "sliced":
        a = torch.empty(M, K + 5)[:, 2:K + 2].copy_(a)
        big = torch.full((M + 2, N + 3), -1.0)
        c = big[1:M + 1, 3:]
    _, result = _run_triton(a, b, c, K, splitk=4, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16,
                            num_warps=4)
    assert result.passed, f"{kind}: {result.reason}"
    if kind == "sliced":
        assert (big[0] == -1).all() and (big[:, :3] == -1).all() and (big[-1] == -1).all()


@cpu_only
@pytest.mark.parametrize("changes,shape", [
    (dict(), (130, 67, 64)),                                          # EVEN_K, edges in M and N
    (dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=64, GROUP_M=1), (65, 70, 100)),
    (dict(BLOCK_M=32, BLOCK_N=64, GROUP_M=4, num_warps=2), (100, 65, 48)),  # 4 tile-rows per group
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, splitk=6, num_warps=4), (33, 36, 40)),  # VEC flags
], ids=str)
def test_triton_twin_variants(changes, shape):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=11, device="cpu")
    _, result = _run_triton(a, b, torch.empty(M, N), K, **changes)
    assert result.passed, result.reason


@cpu_only
@pytest.mark.parametrize("splitk", [3, 8])
def test_triton_splitk_reduction_is_the_ordered_sum_and_reproducible(splitk):
    M, N, K = 37, 45, 300
    a, b = chk.make_inputs(M, N, K, seed=5, device="cpu")
    c = torch.empty(M, N)
    launch, result = _run_triton(a, b, c, K, splitk=splitk, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16,
                                 num_warps=4)
    assert result.passed, result.reason
    slabs = launch.workspace.view(splitk, M, N)
    ordered = slabs[0].clone()
    for s in range(1, splitk):
        ordered += slabs[s]  # fp32, in the order 0, 1, ..., like the kernel
    assert torch.equal(c, ordered)
    first = c.clone()
    c.fill_(float("nan"))
    launch()
    assert torch.equal(c, first)  # the same bits on a second launch


# ------------------------------------------------------- (c) validate()

CUDA_INVALID = [
    (dict(BM=64, WM=128), "multiple of WM"),
    (dict(BM=256, BN=256, WM=32, WN=32), "threads"),                 # 64 warps
    (dict(WNITER=8), "WNITER"),                                      # 64x64 warp: WMITER = 1/2
    (dict(TN=8), "thread tiles"),                                     # 8x8x4 per lane too much
    (dict(WM=128, WN=128, BM=128, BN=128, WNITER=4), "accumulators"),  # 512 per thread
    (dict(BM=64, BN=128, BK=8, WM=32, WN=32, WNITER=1), "A tile"),   # 128 float4, 256 threads
    (dict(BK=32, BM=256, BN=256), "shared memory"),                  # 65 KiB
]


@cpu_only
@pytest.mark.parametrize("changes,words", CUDA_INVALID, ids=str)
def test_cuda_validate_refuses_in_one_sentence(changes, words):
    from cuda_kernels import warptiling

    params = {**_params("cuda"), **changes}
    with pytest.raises(LabError) as info:
        warptiling.validate(**params)
    message = str(info.value)
    assert "\n" not in message and ". " not in message, message
    assert words in message, message
    for key, value in changes.items():
        assert f"{key}={value}" in message, message
    with pytest.raises(LabError) as info:  # build() refuses before NVRTC runs
        warptiling.build(**params)
    assert not isinstance(info.value, CompileError)


@cpu_only
def test_triton_validate_refuses_in_one_sentence():
    module = STAGE.module("triton")
    module.validate(**_params("triton"))
    for changes, words in [(dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_stages=5),
                            "shared memory"),
                           (dict(num_warps=2), "accumulators")]:
        with pytest.raises(LabError) as info:
            module.validate(**{**_params("triton"), **changes})
        message = str(info.value)
        assert "\n" not in message and words in message, message


@cpu_only
def test_every_declared_choice_is_valid_somewhere_and_the_space_is_pruned():
    """Every choice of every CUDA tile parameter appears in some valid combination, and
    validate() prunes the rest (the tuner's search space is the valid part of the product)."""
    import itertools

    from cuda_kernels import warptiling

    names = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN")
    choices = {p.name: p.choices for p in STAGE.params if p.name in names}
    valid, seen = 0, {n: set() for n in names}
    for combo in itertools.product(*(choices[n] for n in names)):
        params = dict(zip(names, combo))
        try:
            warptiling.validate(**params)
        except LabError:
            continue
        valid += 1
        for n in names:
            seen[n].add(params[n])
    assert valid >= 50
    for n in names:
        assert seen[n] == set(choices[n]), (n, seen[n])


# ------------------------------------------------------- (d) NVRTC builds


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
def test_default_build_is_spill_free_in_every_layout(layout):
    cuda = STAGE.module("cuda")
    build = cuda.build(**_params("cuda"), layout=layout)
    assert build.arch == "sm_90"
    assert build.spill_bytes == 0 and build.stack_frame == 0
    assert 0 < build.registers <= 255


@cpu_only
@pytest.mark.parametrize("splitk", EXPLICIT)
def test_each_splitk_builds_without_spills(splitk):
    from cuda_kernels import warptiling

    build = warptiling.build(**{**_params("cuda"), "splitk": splitk})
    assert build.spill_bytes == 0 and build.stack_frame == 0
    assert f"-DSPLITK={splitk}" in build.options
    if splitk > 1:
        for vec_c in (True, False):
            red = warptiling.build_reduce(splitk, vec_c)
            assert red.spill_bytes == 0 and red.stack_frame == 0, (splitk, vec_c)
    params = {**_params("cuda"), "splitk": splitk}
    grid, block, smem = warptiling.geometry(320, 192, 786432, **params)
    assert grid == (3 * 2, splitk, 1) and block == (128, 1, 1) and smem == 0


TIMED_TILES = [  # the tile shapes worth timing on the H100 (docs/stages/warptiling.md)
    dict(frags=1),
    dict(WN=32, WNITER=2, frags=1),                      # 128x128, 8 warps
    dict(BM=64, BN=128, WM=32, WN=64, WNITER=2),         # 64x128, 4 warps
    dict(BM=128, BN=64, WM=64, WN=32, WNITER=2),
    dict(BM=64, BN=128, WM=32, WN=32, WNITER=1, frags=1),  # 64x128, 8 warps
    dict(BM=64, BN=64, WM=32, WN=32, WNITER=1),          # 64x64, split-K shapes
    dict(BM=256, BN=128, WM=64, WN=64),                  # 8 warps of 64x64
    dict(BK=8), dict(BK=32),
]


@cpu_only
@pytest.mark.parametrize("changes", TIMED_TILES, ids=str)
def test_tiles_worth_timing_build_without_spills(changes):
    from cuda_kernels import warptiling

    params = _params("cuda", **changes)
    warptiling.validate(**params)
    build = warptiling.build(**params)
    assert build.spill_bytes == 0, f"{changes}: {build.spill_bytes} spill bytes"
    assert build.smem_static <= 48 * 1024


@cpu_only
def test_switches_and_unrolled_off_have_no_local_memory():
    from cuda_kernels import warptiling

    for changes in (dict(unroll=False), dict(unroll=False, frags=1), dict(fast_math=True)):
        build = warptiling.build(**{**_params("cuda"), **changes})
        assert build.spill_bytes == 0 and build.stack_frame == 0, changes


@pytest.fixture(scope="module")
def default_sass():
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    return _sass.sass(STAGE.module("cuda").build(**_params("cuda")))


@cpu_only
def test_default_sass_reads_fragments_with_lds128_only(default_sass):
    from lab.toolchain import sass as _sass

    mix = _sass.instruction_mix(default_sass)
    # the unrolled k loop body: 4 k's of 128 FFMA (NVVM unrolls up to 512 FFMA per body), and per
    # k 2 LDS.128 of A + 4 of B (the first k's also loaded before the loop: +6)
    assert mix.get("FFMA", 0) == 512
    assert mix.get("LDS.128", 0) == 4 * 6 + 6
    assert mix.get("LDS", 0) == 0 and mix.get("LDS.64", 0) == 0
    assert "LDG.E.128" in default_sass and "STG.E.128" in default_sass
    assert not re.search(r"\b(LDL|STL)\b", default_sass)


# ------------------------------------------------------- (e) on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("splitk", [2, 3, 8, 32])
def test_splitk_on_the_gpu_is_correct_and_reproducible(backend, splitk):
    M, N, K = 320, 192, 20000
    a, b = chk.make_inputs(M, N, K, seed=splitk, device="cuda")
    ref = chk.reference(a, b)
    c = torch.empty(M, N, device="cuda")
    launch = STAGE.module(backend).prepare(a, b, c, **_params(backend, splitk=splitk))
    result = chk.check(launch, c, ref, K)
    assert result.passed, result.reason
    first = c.clone()
    for _ in range(3):
        c.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert torch.equal(c, first)
    ld = launch.workspace.numel() // (splitk * M)
    slabs = launch.workspace.view(splitk, M, ld)[:, :, :N]
    ordered = slabs[0].clone()
    for s in range(1, splitk):
        ordered += slabs[s]
    assert torch.equal(c, ordered)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_splitk_on_every_layout_on_the_gpu(layout):
    M, N, K = 130, 67, 3001
    a, b = chk.make_inputs(M, N, K, seed=3, device="cuda", layout=layout)
    ref = chk.reference(a, b)
    for backend in ("cuda", "triton"):
        c = torch.empty(M, N, device="cuda")
        launch = STAGE.module(backend).prepare(a, b, c, **_params(backend, splitk=6))
        result = chk.check(launch, c, ref, K)
        assert result.passed, f"{backend} {layout}: {result.reason}"


# ------------------------------------------------------- (f) the automatic split (splitk=0)

H100_SMS = 132
# (M, N, K, SMs) -> (tile edge, split) that splitk=0 runs given the default 128 x 128 tiles (both
# backends; lab/base/splitk.py auto_tile_and_split)
AUTO_TABLE = [
    ((320, 192, 786432, H100_SMS), (64, 64)),   # 64 x 64 pads no edge (128: 62.5% of it is C);
                                                # 15 tiles x 64 = 960 blocks, nearest 8 x 132
    ((256, 256, 524288, H100_SMS), (128, 64)),  # whole 128 x 128 tiles; the largest choice
    ((4096, 4096, 4096, H100_SMS), (128, 1)),   # 1024 tiles >= 132 SMs
    ((1025, 1025, 1025, H100_SMS), (128, 1)),   # 81 tiles, but K = 1025 < 2 x 1024
    ((1024, 1024, 1024, H100_SMS), (128, 1)),   # 64 tiles, K too short
    ((128, 128, 128, H100_SMS), (128, 1)),      # 1 tile, K too short
    ((1536, 1408, 65536, H100_SMS), (128, 1)),  # 12 x 11 = 132 tiles = SMs: no split
    ((2048, 1152, 524288, H100_SMS), (128, 1)),  # 144 tiles > SMs: no split however long K is
    ((1024, 1024, 65536, H100_SMS), (128, 16)),  # 64 tiles: 16 x 64 = 1024 blocks
    ((1025, 1025, 8192, H100_SMS), (128, 8)),   # 81 tiles: K/S >= 1024 caps it at 8; 64 x 64
                                                # would be 289 tiles (no split), so 128 stays
    ((32, 32, 4096, H100_SMS), (64, 4)),        # 1 tile: K/S >= 1024 caps it at 4
    ((1280, 1280, 1 << 20, H100_SMS), (128, 64)),  # 100 tiles: 8 for the blocks, 64 for the chain
    ((320, 192, 786432, 16), (64, 48)),         # 16 SMs: 8 for the blocks, 48 for K/S <= 16384
    ((320, 192, 786432, 6), (128, 1)),          # 6 SMs: the 6 tiles fill them
]


@pytest.mark.parametrize("shape,want", AUTO_TABLE, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else str(v))
def test_the_automatic_split_of_each_shape(shape, want):
    from lab.base.splitk import auto_tile_and_split

    M, N, K, sms = shape
    tile, split = want
    assert auto_tile_and_split(M, N, K, 128, 128, sms) == (tile, tile, split)
    for backend in ("cuda", "triton"):  # both launchers resolve 0 to the same tile and split
        offer = STAGE.offer(backend)
        resolved = offer.resolve(_params(backend), M, N, K, "fp32", sms)
        assert resolved["splitk"] == split, backend
        edges = ("BM", "BN") if backend == "cuda" else ("BLOCK_M", "BLOCK_N")
        assert (resolved[edges[0]], resolved[edges[1]]) == (tile, tile), backend
        if tile == 64 and backend == "cuda":  # four 32 x 32 warp tiles
            assert (resolved["WM"], resolved["WN"], resolved["WNITER"]) == (32, 32, 1)
        if tile == 64 and backend == "triton":
            assert resolved["num_warps"] == 4
        text = offer.show(resolved)
        assert f"splitk={split}" in text and "splitk=0" not in text


def test_an_explicit_split_keeps_the_given_tile():
    for backend in ("cuda", "triton"):
        offer = STAGE.offer(backend)
        params = {**_params(backend), "splitk": 64}
        assert offer.resolve(params, 320, 192, 786432, "fp32", H100_SMS) == params


def test_the_automatic_split_keeps_its_rules_over_many_shapes():
    """Over a grid of shapes and SM counts: a registry choice; 1 whenever the tiles fill the SMs
    or K is shorter than two splits of MIN_SPLIT_K; otherwise every split at least MIN_SPLIT_K
    long, and tiles x S the nearest (in ratio) to TARGET x SMs unless the chain rule raised it
    to the smallest split that keeps K/S <= MAX_CHAIN."""
    from lab.base import splitk as sk

    for M in (1, 100, 320, 700, 1025, 1500, 4096):
        for N in (1, 192, 256, 1025, 2000):
            for K in (1, 1000, 2048, 5000, 65536, 786432, 3 << 20):
                for sms in (16, 78, 132):
                    s = sk.auto_split(M, N, K, 128, 128, sms)
                    tiles = sk.tile_count(M, N, 128, 128)
                    assert s in sk.SPLITS
                    if tiles >= sms or K < 2 * sk.MIN_SPLIT_K:
                        assert s == 1, (M, N, K, sms)
                        continue
                    assert s > 1 and K // s >= sk.MIN_SPLIT_K, (M, N, K, sms, s)
                    allowed = [c for c in sk.SPLITS if c == 1 or K // c >= sk.MIN_SPLIT_K]
                    near = min(allowed, key=lambda c: (abs(math.log(tiles * c / (sk.TARGET * sms))), c))
                    if K / near <= sk.MAX_CHAIN:
                        assert s == near, (M, N, K, sms, s, near)
                    else:
                        short = [c for c in allowed if K / c <= sk.MAX_CHAIN]
                        assert s == (min(short) if short else max(allowed)), (M, N, K, sms, s)


def test_the_default_is_the_automatic_split_and_explicit_values_pass_through():
    from lab.base.splitk import AUTO

    assert STAGE.defaults()["splitk"] == AUTO == 0
    for backend in ("cuda", "triton"):
        offer = STAGE.offer(backend)
        assert offer.check(_params(backend), "fp32") is None
        for s in EXPLICIT:
            params = _params(backend, splitk=s)
            for shape in ((320, 192, 786432), (4096, 4096, 4096), (32, 32, 4096)):
                assert offer.resolve(params, *shape, "fp32", H100_SMS)["splitk"] == s
        assert "splitk_reduce" in "".join(offer.kernel_names(_params(backend), "fp32"))
        assert offer.kernel_names(_params(backend, splitk=1), "fp32")[0].startswith(
            "matmul_warptiling")
        assert len(offer.kernel_names(_params(backend, splitk=1), "fp32")) == 1
        with pytest.raises(LabError, match="splitk=-1: splitk must be 0"):
            offer.validate({**_params(backend), "splitk": -1}, "fp32")


@cpu_only
def test_the_cuda_compile_builds_the_split_the_shape_gets():
    """OFFER.compile (CPU mode's build, the tuner's probe) resolves splitk=0 (tile and split) for
    the H100 first; build() alone, without a shape, reads 0 as the unsplit kernel."""
    from cuda_kernels import warptiling

    offer = STAGE.offer("cuda")
    build, (grid, _, _) = offer.compile(_params("cuda"), 320, 192, 786432, "nn", "fp32")
    assert "-DSPLITK=64" in build.options and grid == (15, 64, 1)  # 64 x 64 tiles
    assert "-DBM=64" in build.options and "-DWM=32" in build.options
    build, (grid, _, _) = offer.compile(_params("cuda"), 4096, 4096, 4096, "nn", "fp32")
    assert "-DSPLITK=1" in build.options and grid == (1024, 1, 1)
    assert "-DSPLITK=1" in warptiling.build(**_params("cuda")).options
    assert warptiling.geometry(320, 192, 786432, **_params("cuda"))[0] == (6, 1, 1)


def test_the_tuner_tries_the_automatic_split_and_its_value_once():
    from lab.tune.prune import build_identity

    for backend in ("cuda", "triton"):
        offer = STAGE.offer(backend)
        auto = _params(backend)
        ident = build_identity(offer, 320, 192, 786432, "fp32", H100_SMS)
        small = ({"BM": 64, "BN": 64, "WM": 32, "WN": 32, "WNITER": 1} if backend == "cuda"
                 else {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4})  # the tile it chose
        chosen = {**auto, **small, "splitk": 64}
        assert ident(auto) == ident(chosen) != ident({**chosen, "splitk": 32})
        assert ident(auto) != ident({**auto, "splitk": 64})  # the given tile, split by hand
        square = build_identity(offer, 4096, 4096, 4096, "fp32", H100_SMS)
        assert square(auto) == square({**auto, "splitk": 1})


@cpu_only
def test_the_triton_twin_computes_the_split_it_chose(capsys, monkeypatch, tmp_path):
    """32x32x4096 under the interpreter: one tile and K = 4 x 1024, so splitk=0 runs 4 splits and
    the sum; C is correct, the ordered sum of its 4 slabs, and the `params` column (the launch's
    resources, and lab.compare's CSV row for both backends) says splitk=4."""
    from lab.compare import main
    from lab.csvfile import read_csv

    M, N, K = 32, 32, 4096
    a, b = chk.make_inputs(M, N, K, seed=4, device="cpu")
    c = torch.empty(M, N)
    launch, result = _run_triton(a, b, c, K)  # the registry's defaults: splitk=0
    assert result.passed, result.reason
    assert launch.config["splitk"] == 4 and launch.workspace.numel() == 4 * M * N
    slabs = launch.workspace.view(4, M, N)
    assert torch.equal(c, slabs[0] + slabs[1] + slabs[2] + slabs[3])
    assert "splitk=4," in launch.resources["params"]
    # with fewer SMs than tiles (a GPU of 1 SM) the same call does not split
    monkeypatch.setattr(STAGE.module("triton"), "sm_count", lambda device: 1)
    launch, result = _run_triton(a, b, torch.empty(M, N), K)
    assert result.passed and launch.config["splitk"] == 1 and "workspace" not in launch.extra
    monkeypatch.undo()

    csv = tmp_path / "rows.csv"
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--mode", "cpu", "--stage", "warptiling", "--sizes", f"{M}x{N}x{K}",
                 "--csv", str(csv)]) == 0
    capsys.readouterr()
    rows = read_csv(csv)
    assert sorted(rows["backend"]) == ["cuda", "triton"]
    for params in rows["params"]:
        assert "splitk=4" in params.split(",") and "splitk=0" not in params.split(","), params


def _fp32_ieee_matmul(a, b):
    """torch.matmul in IEEE fp32 (TF32 off), the cuBLAS baseline of the fp32 rows."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        before, matmul.fp32_precision = matmul.fp32_precision, "ieee"
        try:
            return torch.matmul(a, b)
        finally:
            matmul.fp32_precision = before
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    try:
        return torch.matmul(a, b)
    finally:
        matmul.allow_tf32 = before


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("shape", [(320, 192, 786432), (256, 256, 524288)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_default_splits_long_k_on_the_gpu_correctly(backend, shape):
    from lab.base.device import sm_count
    from lab.base.splitk import auto_split

    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=1, device="cuda")
    ref = chk.reference(a, b)
    c = torch.empty(M, N, device="cuda")
    launch = STAGE.module(backend).prepare(a, b, c, **_params(backend))
    result = chk.check(launch, c, ref, K)
    assert result.passed, result.reason
    want = auto_split(M, N, K, 128, 128, sm_count(c.device))
    assert launch.config["splitk"] == want > 1
    assert f"splitk={want}" in launch.resources["params"].split(",")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_the_default_error_at_long_k_is_within_2x_of_cublas(backend):
    """256x256x524288: the unsplit kernel's fp32 chain of 524288 gave 1.3e-5 against cuBLAS's
    1.6e-6 on an H100; the automatic split (64 on 132 SMs: chains of 8192) must come within 2x of
    torch.matmul (fp32, TF32 off) on the same inputs, in the max error (against the RMS of the
    result) and the relative Frobenius error."""
    M, N, K = 256, 256, 524288
    a, b = chk.make_inputs(M, N, K, seed=2, device="cuda")
    ref = chk.reference(a, b)
    cublas = chk.compare(_fp32_ieee_matmul(a, b), ref, K)
    c = torch.empty(M, N, device="cuda")
    result = chk.check(STAGE.module(backend).prepare(a, b, c, **_params(backend)), c, ref, K)
    assert result.passed, result.reason
    assert result.max_rel <= 2 * cublas.max_rel, (result.max_rel, cublas.max_rel)
    assert result.rel_err <= 2 * cublas.rel_err, (result.rel_err, cublas.rel_err)
