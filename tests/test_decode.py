"""Stage decode (cuda_kernels/decode.cu, its variant and launcher; the Triton twin's CPU tests are
tests/test_decode_triton.py): the automatic values, the swap to C^T = B^T A^T, the split rule,
validation, NVRTC builds, and on a GPU every precision, layout, view and split against float64,
bitwise-repeatable results and the plan cache's replay."""

from __future__ import annotations

import pytest
import torch

from helpers import DTYPE, HAS_GPU
from lab import check as chk
from lab.base.errors import LabError
from lab.base.splitk import SPLITS
from lab.stages import get_stage

PRECISIONS = ("bf16", "fp16", "fp8")
LAYOUTS = ("nn", "nt", "tn", "tt")


def _cuda():
    return get_stage("decode").module("cuda")


def _params(**changes) -> dict:
    spec = get_stage("decode")
    params = {p.name: p.default for p in spec.params if "cuda" in p.backends}
    params.update(changes)
    return params


# ------------------------------------------------------------------ CPU: the rules

def test_small_side_and_groups():
    d = _cuda()
    assert [d.groups_for(m) for m in (1, 7, 8, 9, 16, 17, 33, 64, 65, 4096)] == \
        [1, 1, 1, 2, 2, 4, 8, 8, 8, 8]
    assert not d.swapped(1, 4096) and d.swapped(4096, 1) and not d.swapped(64, 64)
    r = d.resolve(_params(), 4096, 16, 4096, "bf16", 132)
    assert r["swap"] == 1 and r["groups"] == 2  # N = 16 is the activation side


def test_automatic_split_on_real_layers():
    """The docstring's worked numbers (132 SMs): the split whose blocks fill the GPU's capacity
    in the fewest waves, each split deep enough."""
    d = _cuda()
    assert d.resident_blocks(121, 128) == 4 and d.resident_blocks(161, 128) == 3
    r = d.resolve(_params(), 1, 4096, 4096, "bf16", 132, registers=121)
    assert (r["tiles"], r["kunroll"], r["groups"], r["splitk"]) == (1, 4, 1, 8)
    r = d.resolve(_params(), 1, 13312, 16384, "bf16", 132, registers=121)
    assert r["splitk"] == 2  # 416 blocks in one wave of 528 beats 624 in two
    r = d.resolve(_params(), 64, 12288, 4096, "bf16", 132, registers=161)
    assert (r["tiles"], r["kunroll"], r["groups"], r["splitk"]) == (1, 1, 8, 2)
    # a layer with blocks enough for several waves is not split
    assert d.resolve(_params(), 64, 262144, 4096, "bf16", 132, registers=161)["splitk"] == 1
    # an explicit split is kept
    assert d.resolve(_params(splitk=3), 1, 4096, 4096, "bf16", 132)["splitk"] == 3
    # without the registers, resolve compiles the build to read them (CPU mode, the tuner)
    assert d.resolve(_params(), 1, 4096, 4096, "bf16", 132)["splitk"] in SPLITS


def test_the_wave_model_prefers_one_full_wave():
    d = _cuda()
    # 100 blocks, capacity 400: S = 4 fills one wave exactly
    assert d.auto_split(100, 65536, 256, 400) == 4
    # a short K allows no split deeper than its depth
    assert d.auto_split(10, 512, 256, 400) == 2


@pytest.mark.parametrize("M,N,K,precision", [(1, 1280, 8192, "bf16"), (16, 2304, 16384, "fp8"),
                                             (64, 8192, 1024, "fp16"), (1, 64, 100, "bf16")])
def test_automatic_split_keeps_each_split_deep_enough(M, N, K, precision):
    d = _cuda()
    r = d.resolve(_params(), M, N, K, precision, 132)
    assert r["splitk"] in SPLITS
    if r["splitk"] > 1:
        assert K // r["splitk"] >= d.min_depth(r["kunroll"], r["groups"], precision)


@pytest.mark.parametrize("changes,words", [
    (dict(splitk=-1), "splitk must be 0"),
    (dict(tiles=4, kunroll=8), "lower tiles or kunroll"),
])
def test_validate_refuses_in_one_sentence(changes, words):
    with pytest.raises(LabError, match=words) as e:
        _cuda().validate(**_params(**changes))
    assert "\n" not in str(e.value)


def test_params_column_shows_the_split_and_the_swap():
    d = _cuda()
    text = d.show(d.resolve(_params(), 4096, 1, 4096, "bf16", 132))
    assert text.startswith("tiles=1,warps=4,kunroll=4,") and text.endswith(",swap=1")
    assert "splitk=" in text


def test_the_lesson_is_built_only_for_its_case():
    d = _cuda()
    assert d.lesson("bf16", "nt")
    for case in (dict(precision="fp16"), dict(precision="fp8"), dict(layout="nn"),
                 dict(vec_a=False), dict(vec_b=False), dict(trans_c=True),
                 dict(offsets64=True), dict(unroll=False)):
        assert not d.lesson(**{"precision": "bf16", "layout": "nt", **case}), case


@pytest.mark.parametrize("precision,layout,flags", [
    ("bf16", "nt", {}), ("fp16", "nt", {}), ("fp8", "nt", {}), ("bf16", "nn", {}),
    ("fp8", "tn", dict(vec_a=False)), ("fp16", "tt", dict(trans_c=True)),
    ("bf16", "nt", dict(offsets64=True)),
])
def test_builds_compile_without_spills(precision, layout, flags, monkeypatch):
    monkeypatch.delenv("LAB_CUDA_ARCH", raising=False)
    d = _cuda()
    # a layout whose k's are not contiguous in an operand, or an unaligned one, is gathered
    gathered = (layout[0] == "t" or layout[1] == "n" or not flags.get("vec_a", True)
                or not flags.get("vec_b", True))
    r = d.resolve(_params(), 16, 4096, 4096, precision, 132, gathered=gathered)
    b = d.build(**r, precision=precision, layout=layout, **flags)
    assert b.kernel == "matmul_decode" and b.spill_bytes == 0
    assert b.source == ("decode.cu" if d.lesson(precision, layout, **flags) else
                        "variants/decode.cu")


def test_cpu_mode_compile_swaps_the_layout():
    """compile_for (CPU mode's resource report) builds what prepare() would: for N < M the
    problem's operands trade places and each flips its letter, nt staying nt."""
    d = _cuda()
    build, (grid, block, smem) = d.compile_for(_params(), 4096, 8, 4096, "nt", "bf16")
    assert build.source == "variants/decode.cu"  # C^T is column-major: the variant
    assert "-DTRANS_A=0" in build.options and "-DTRANS_B=1" in build.options
    assert grid[2] == 1 and grid[0] == 4096 // 64 and block == (128, 1, 1) and smem == 0


# ------------------------------------------------------------------ GPU

GPU_SHAPES = [(1, 1, 1), (1, 4096, 4096), (3, 1000, 333), (16, 2048, 1024), (17, 130, 4104),
              (64, 512, 8192), (65, 300, 257), (130, 64, 1000), (4096, 5, 512), (200, 100, 64),
              (1, 512, 131073)]  # a very long K (odd): the split and the tail step together


def _operands(M, N, K, precision, layout, seed):
    a, b, scales = chk.inputs_for(precision, M, N, K, seed, "cuda", layout)
    return a, b, scales


def _out(M, N, precision):
    dt = torch.bfloat16 if precision == "fp8" else DTYPE[precision]
    return torch.empty((M, N), dtype=dt, device="cuda")


def _run(module, a, b, c, scales, precision, **params):
    extra = {"scale_a": scales[0], "scale_b": scales[1]} if scales else {}
    return module.prepare(a, b, c, precision=precision, **extra, **params)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ("cuda", "triton"))
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_decode_on_the_gpu(backend, precision, layout):
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    module = get_stage("decode").module(backend)
    for M, N, K in GPU_SHAPES:
        a, b, scales = _operands(M, N, K, precision, layout, M + N + K)
        ref = chk.reference(a, b, scales)
        c = _out(M, N, precision)
        launch = _run(module, a, b, c, scales, precision)
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (backend, precision, layout, M, N, K, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ("cuda", "triton"))
@pytest.mark.parametrize("precision", PRECISIONS)
def test_decode_splits_views_and_repeatability_on_the_gpu(backend, precision):
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    module = get_stage("decode").module(backend)
    M, N, K = 5, 1000, 5000
    a0, b0, scales = _operands(M, N, K, precision, "nt", 11)
    ref = chk.reference(a0, b0, scales)
    for s in (1, 2, 3, 64):
        c = _out(M, N, precision)
        launch = _run(module, a0, b0, c, scales, precision, splitk=s)
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (s, result.reason)
        first = c.clone()
        for _ in range(3):  # a fixed order of sums: the same bits every call
            launch()
        torch.cuda.synchronize()
        assert torch.equal(first.view(torch.int16), c.view(torch.int16)), s
    dt = a0.dtype
    # a weight matrix at an odd offset and with a row stride: no 16-byte pieces
    bt = torch.empty(N, K + 3, dtype=dt, device="cuda")[:, 1:K + 1]
    bt.copy_(b0.t())
    at = torch.empty(M, K + 8, dtype=dt, device="cuda")[:, :K]
    at.copy_(a0)
    c = _out(M, N + 1, precision)[:, 1:]
    result = chk.check(_run(module, at, bt.t(), c, scales, precision), c, ref, K, precision)
    assert result.passed, result.reason
    if backend == "cuda":
        for changes in (dict(tiles=2), dict(tiles=4, kunroll=2), dict(warps=8, kunroll=1),
                        dict(warps=2, kunroll=8), dict(unroll=False)):
            c = _out(M, N, precision)
            launch = _run(module, a0, b0, c, scales, precision, **changes)
            result = chk.check(launch, c, ref, K, precision)
            assert result.passed, (changes, result.reason)
            assert int(launch.arrivals.abs().sum()) == 0  # the last block reset every counter


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ("cuda", "triton"))
def test_lab_matmul_replays_the_decode_plan(backend):
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    import lab

    w = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)  # a Linear's weight
    for _ in range(3):
        x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
        c = lab.matmul(x, w.t(), stage="decode", backend=backend)
        ref = chk.reference(x, w.t())
        assert chk.compare(c, ref, 2048, "bf16").passed
