"""Tests of the decode stage's Triton twin (triton_kernels/decode.py), on the CPU under the Triton
interpreter (the CUDA twin has its own tests).

(a) Correctness against the float64 reference (lab.check, the lab's thresholds) in bf16, fp16 and
    fp8 (e4m3 operands, per-tensor scales that are not 1, a bf16 C), every layout: M in 1, 3, 16,
    17, 64, 65, 130 x N in 1, 5, 64, 100, K cycling through 33, 64, 200 and splitk through
    automatic, 1, 2, 3 (so the swap, N <= 64 < M, and the groups of 64 activation rows, M > 64,
    meet every layout, precision and split); views with row strides, storage offsets and no unit
    stride; scales as numbers; 64-bit offsets.
(b) The split: C is bitwise the same on every run, and the fp32 sum of the slabs in split order
    rounded once; each slab is the partial product over its split's k-steps (an empty one zeros).
(c) resolve(): the two shapes of the module docstring, fp8's k-step, the swap, the clamps to small
    shapes, explicit values, and the automatic split's rules over a grid of shapes; show(); the
    kernels a launch runs; validate()'s refusals in one sentence.
(d) lab.matmul on CPU tensors (the interpreter): correct, and its plan replays on new values (the
    swapped launch's transposed views and fp8's scale tensors included).
(e) The kernel compiled for sm_90 without a GPU (FakeDriver): tl.dot is wgmma at BLOCK_N = 64
    and mma.sync at 32, in fp8 in every layout too (skipped where this Triton cannot compile
    without a GPU).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import lab
from helpers import LAYOUTS, cpu_only, run_python
from lab import check as chk
from lab import plan as plans
from lab.base.describe import describe
from lab.base.device import DEFAULT_SMS
from lab.base.errors import LabError
from lab.base.needs import TRITON
from lab.base.splitk import SPLITS
from lab.stages import Variant, get_stage

STAGE = get_stage("decode")
PRECISIONS = ("bf16", "fp16", "fp8")
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
MS = (1, 3, 16, 17, 64, 65, 130)
NS = (1, 5, 64, 100)
KS = (33, 64, 200)
SPLIT_CYCLE = (0, 1, 2, 3)


def _triton():
    return STAGE.module("triton")


def _params(**changes) -> dict:
    return {**Variant(STAGE, STAGE.defaults()).params_for("triton"), **changes}


def _scale_kwargs(scales) -> dict:
    return {} if scales is None else {"scale_a": scales[0], "scale_b": scales[1]}


def _run(a, b, c, precision, scales=None, **changes):
    """prepare() and one checked launch: (launch, CheckResult)."""
    launch = _triton().prepare(a, b, c, precision=precision, **_scale_kwargs(scales),
                               **_params(**changes))
    result = chk.check(launch, c, chk.reference(a, b, scales), a.shape[1], precision)
    return launch, result


# ------------------------------------------------------------------ (a) correctness


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_shape_split_and_layout(precision, layout):
    """Every M x N of the module docstring's set, K and the split cycling, in one precision and
    layout: the swap (N <= 64 < M) and the row groups (M > 64) in every combination."""
    i = 0
    for M in MS:
        for N in NS:
            K, splitk = KS[i % len(KS)], SPLIT_CYCLE[i % len(SPLIT_CYCLE)]
            i += 1
            a, b, scales = chk.inputs_for(precision, M, N, K, seed=M + 7 * N + K, device="cpu",
                                          layout=layout)
            if scales is not None:
                assert all(float(s) != 1.0 for s in scales)
            c = torch.empty(M, N, dtype=OUT[precision])
            launch, result = _run(a, b, c, precision, scales, splitk=splitk)
            cfg = launch.config
            assert cfg["swapped"] == (N <= 64 < M), (M, N)
            if splitk:
                assert cfg["splitk"] == splitk
            assert result.passed, (M, N, K, splitk, launch.resources["params"], result.reason)


@cpu_only
@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_views_with_row_strides_offsets_and_no_unit_stride(precision, split):
    for M, N, K in [(3, 100, 70), (130, 5, 40)]:  # plain and swapped
        a0, b0, scales = chk.inputs_for(precision, M, N, K, seed=M + N, device="cpu")
        dt = a0.dtype
        views = {
            # row strides larger than the widths; C inside a larger matrix
            "sliced": (torch.zeros(M, K + 5, dtype=dt)[:, 2:K + 2],
                       torch.zeros(K + 1, N + 7, dtype=dt)[1:, :N],
                       torch.empty(M + 2, N + 3, dtype=OUT[precision])[1:M + 1, 3:]),
            # storage offsets that break 16-byte alignment
            "offset": (torch.zeros(M * K + 1, dtype=dt)[1:].view(M, K),
                       torch.zeros(K * N + 3, dtype=dt)[3:].view(K, N),
                       torch.empty(M * N + 1, dtype=OUT[precision])[1:].view(M, N)),
            # no unit stride anywhere
            "strided": (torch.zeros(2 * M, 2 * K, dtype=dt)[::2, ::2],
                        torch.zeros(3 * K, 2 * N, dtype=dt)[::3, ::2],
                        torch.empty(M, 3 * N, dtype=OUT[precision])[:, ::3]),
        }
        for kind, (a, b, c) in views.items():
            a.copy_(a0)
            b.copy_(b0)
            _, result = _run(a, b, c, precision, scales, splitk=split)
            assert result.passed, (kind, M, N, K, result.reason)


@cpu_only
def test_fp8_scales_as_numbers_and_left_out():
    M, N, K = 17, 100, 96
    a, b, _ = chk.inputs_for("fp8", M, N, K, seed=5, device="cpu", layout="nt")
    for sa, sb in ((0.25, 3.0), (None, None)):
        for split in (1, 2):
            c = torch.empty(M, N, dtype=torch.bfloat16)
            launch = _triton().prepare(a, b, c, precision="fp8", scale_a=sa, scale_b=sb,
                                       **_params(splitk=split))
            s = (1.0 if sa is None else sa) * (1.0 if sb is None else sb)
            ref = chk.reference(a, b) * s
            assert chk.check(launch, c, ref, K, "fp8").passed, (sa, sb, split)


@cpu_only
def test_64_bit_offsets():
    from lab.toolchain.triton import recording

    for M, N, K, split in [(3, 100, 70, 1), (130, 5, 40, 2)]:
        a, b = chk.make_inputs(M, N, K, seed=64, device="cpu", dtype=torch.float16)
        c = torch.empty(M, N, dtype=torch.float16)
        p = replace(describe(a, b, c, TRITON, "fp16"), offsets64=True)
        params = _params(splitk=split)
        with recording() as calls:
            _triton().prepare.inner(p, **params)
        metas = [meta for kernel, _, _, meta in calls if kernel.fn.__name__ == "decode_kernel"]
        assert metas and all(meta["OFFSET64"] is True for meta in metas)
        result = chk.check(_triton().prepare.inner(p, **params), c, chk.reference(a, b), K,
                           "fp16")
        assert result.passed, result.reason


# ------------------------------------------------------------------ (b) the split


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
def test_two_runs_are_bitwise_identical(precision):
    for M, N, K, split in [(5, 100, 200, 3), (130, 5, 200, 4), (64, 64, 200, 2)]:
        a, b, scales = chk.inputs_for(precision, M, N, K, seed=K + M, device="cpu")
        c = torch.empty(M, N, dtype=OUT[precision])
        launch, result = _run(a, b, c, precision, scales, splitk=split, BLOCK_K=64)
        assert result.passed and launch.config["splitk"] > 1, (M, N, result.reason)
        first = c.clone()
        c.fill_(float("nan"))
        launch()
        assert torch.equal(first, c), (precision, M, N)


@cpu_only
@pytest.mark.parametrize("splitk", [2, 3, 6])
def test_the_split_is_the_ordered_sum_of_its_slabs_rounded_once(splitk):
    """fp16: C is the fp32 sum slab 0 + slab 1 + ... in that order, rounded once; each slab is
    the partial product over its split's k-steps, an empty split zeros. (bf16 and fp8's bf16 C
    alike on the GPU; Triton 3.9's interpreter truncates fp32 to bf16 instead of rounding.)"""
    BK = 64
    for M, N, K, layout in [(9, 100, 300, "nn"), (130, 17, 200, "tn"), (3, 5, 70, "nt")]:
        a, b = chk.make_inputs(M, N, K, seed=splitk + K, device="cpu", dtype=torch.float16,
                               layout=layout)
        c = torch.empty(M, N, dtype=torch.float16)
        launch, result = _run(a, b, c, "fp16", splitk=splitk, BLOCK_K=BK)
        assert result.passed, (M, N, K, result.reason)
        swapped = launch.config["swapped"]
        km, kn = (N, M) if swapped else (M, N)
        slabs = launch.workspace.view(splitk, km, kn)
        total = slabs[0].clone()
        for s in range(1, splitk):
            total += slabs[s]
        want = (total.t() if swapped else total).to(torch.float16)
        assert torch.equal(want, c), (M, N, K, layout)
        steps = math.ceil(K / BK)
        for s in range(splitk):
            k0, k1 = min(K, s * steps // splitk * BK), min(K, (s + 1) * steps // splitk * BK)
            part = a[:, k0:k1].double() @ b[k0:k1].double()
            got = slabs[s].double().t() if swapped else slabs[s].double()
            if k0 == k1:
                assert torch.equal(got, torch.zeros_like(got))
            else:
                assert torch.allclose(got, part, rtol=1e-5, atol=1e-4), (M, N, K, s)


# ------------------------------------------------------------------ (c) automatic values


def test_the_docstrings_two_shapes():
    tri = _triton()
    r = tri.resolve(_params(), 1, 4096, 4096, "bf16", DEFAULT_SMS)
    assert (r["BLOCK_M"], r["BLOCK_N"], r["BLOCK_K"], r["splitk"], r["swapped"]) == \
        (16, 64, 128, 8, False)
    assert tri.show(r) == "splitk=8,BLOCK_M=16,BLOCK_N=64,BLOCK_K=128,num_warps=4,num_stages=3"
    assert 8 * 1 * 4096 * 4 == 128 * 1024  # its workspace: 128 KiB
    r = tri.resolve(_params(), 64, 12288, 4096, "bf16", DEFAULT_SMS)
    assert (r["BLOCK_M"], r["BLOCK_N"], r["BLOCK_K"], r["splitk"], r["swapped"]) == \
        (64, 64, 128, 3, False)
    assert 4 * 3 * 64 * 12288 * 4 <= 12288 * 4096 * 2  # workspace within a quarter of weights
    # fp8: 256 bytes of k is 256 elements; 16 k-steps allow S <= 4
    r = tri.resolve(_params(), 1, 4096, 4096, "fp8", DEFAULT_SMS)
    assert (r["BLOCK_K"], r["splitk"]) == (256, 4)
    # fp16 as bf16
    assert tri.resolve(_params(), 1, 4096, 4096, "fp16", DEFAULT_SMS)["splitk"] == 8


def test_the_swap():
    tri = _triton()
    # N <= 64 < M: the kernel's activation side is C's 16 columns, its weight side C's rows
    r = tri.resolve(_params(), 4096, 16, 4096, "bf16", DEFAULT_SMS)
    assert (r["swapped"], r["BLOCK_M"], r["BLOCK_N"], r["splitk"]) == (True, 16, 64, 8)
    assert tri.show(r).endswith(",swapped=1")
    r = tri.resolve(_params(), 130, 5, 200, "bf16", DEFAULT_SMS)
    assert (r["swapped"], r["BLOCK_M"], r["BLOCK_N"], r["BLOCK_K"]) == (True, 16, 64, 128)
    for M, N, swapped in [(65, 64, True), (65, 65, False), (64, 1, False), (1, 1, False),
                          (100000, 1, True), (130, 100, False)]:
        assert tri.resolve(_params(), M, N, 512, "bf16", DEFAULT_SMS)["swapped"] is swapped
    assert "swapped" not in tri.show(tri.resolve(_params(), 130, 100, 64, "bf16", 132))


@pytest.mark.parametrize("M,bm", [(1, 16), (3, 16), (16, 16), (17, 32), (33, 64), (64, 64),
                                  (65, 64), (4096, 64)])
def test_block_m_follows_the_activation_rows(M, bm):
    assert _triton().resolve(_params(), M, 4096, 4096, "bf16", DEFAULT_SMS)["BLOCK_M"] == bm


def test_tiles_are_clamped_to_small_shapes_and_explicit_values_pass_through():
    tri = _triton()
    r = tri.resolve(_params(), 3, 5, 33, "bf16", DEFAULT_SMS)
    assert (r["BLOCK_N"], r["BLOCK_K"]) == (16, 64)  # N 5 -> 16 (tl.dot's least), K 33 -> 64
    r = tri.resolve(_params(), 3, 5, 9, "fp8", DEFAULT_SMS)
    assert r["BLOCK_K"] == 32  # an 8-bit MMA's k
    r = tri.resolve(_params(BLOCK_N=256, BLOCK_K=512), 3, 100, 200, "fp16", DEFAULT_SMS)
    assert (r["BLOCK_N"], r["BLOCK_K"]) == (128, 256)
    r = tri.resolve(_params(splitk=6, BLOCK_N=128, BLOCK_K=64, num_stages=2), 16, 8192, 8192,
                    "bf16", DEFAULT_SMS)
    assert (r["splitk"], r["BLOCK_N"], r["BLOCK_K"], r["num_stages"]) == (6, 128, 64, 2)


def test_the_automatic_split_keeps_its_rules_over_many_shapes():
    """No split where the programs reach the target; else the split nearest the target among
    those that keep every split MIN_SPLIT_STEPS k-steps long and the workspace within a quarter
    of the weights (never further than another allowed split would be)."""
    tri = _triton()
    for precision in PRECISIONS:
        es = tri.ELEM_BYTES[precision]
        for sms in (16, 132):
            target = tri.TARGET_PER_SM * sms
            for M in (1, 7, 16, 64, 65, 300):
                for N in (1, 64, 100, 4096, 12288, 131072):
                    for K in (16, 300, 4096, 16384, 1 << 20):
                        r = tri.resolve(_params(), M, N, K, precision, sms)
                        km, kn = (N, M) if r["swapped"] else (M, N)
                        programs = math.ceil(km / r["BLOCK_M"]) * math.ceil(kn / r["BLOCK_N"])
                        steps = math.ceil(K / r["BLOCK_K"])
                        s = r["splitk"]
                        allowed = [c for c in SPLITS if c == 1 or (
                            steps // c >= tri.MIN_SPLIT_STEPS and 16 * c * km <= K * es)]
                        assert s in allowed, (precision, M, N, K, s)
                        if s > 1:
                            assert 4 * s * km * kn * 4 <= kn * K * es
                        if programs >= target:
                            assert s == 1, (M, N, K, sms)
                        best = min(abs(math.log(programs * c / target)) for c in allowed)
                        assert abs(math.log(programs * s / target)) == best, (M, N, K, s)


def test_the_kernels_follow_the_split():
    offer = _triton().OFFER
    assert offer.kernel_names(_params(), "bf16") == ("decode_kernel", "decode_reduce_kernel")
    assert offer.kernel_names(_params(splitk=4), "fp8") == ("decode_kernel",
                                                            "decode_reduce_kernel")
    assert offer.kernel_names(_params(splitk=1), "fp16") == ("decode_kernel",)


@cpu_only
def test_the_params_column_shows_what_ran():
    M, N, K = 130, 5, 200
    a, b = chk.make_inputs(M, N, K, seed=1, device="cpu", dtype=torch.bfloat16)
    launch = _triton().prepare(a, b, torch.empty(M, N, dtype=torch.bfloat16), **_params())
    text = launch.resources["params"]
    assert text == _triton().show(launch.config) == _triton().show(
        _triton().resolve(_params(), M, N, K, "bf16", DEFAULT_SMS))
    assert "=0," not in text and text.endswith("swapped=1")


@pytest.mark.parametrize("changes,precision,words", [
    (dict(tiles=2), "bf16", "has no parameter tiles"),
    (dict(splitk=-1), "bf16", "splitk must be 0"),
    (dict(BLOCK_N=48), "bf16", "BLOCK_N must be 0 (automatic) or a power of two"),
    (dict(BLOCK_K=8), "fp16", "BLOCK_K must be 0 (automatic) or a power of two"),
    (dict(BLOCK_K=16), "fp8", "at least 32, the k of an 8-bit MMA"),
    (dict(num_warps=1, BLOCK_N=256), "bf16", "512 accumulators"),
    (dict(num_warps=3), "bf16", "num_warps must be a power of two"),
    (dict(num_stages=0), "bf16", "num_stages must be"),
    (dict(BLOCK_N=256, BLOCK_K=512), "bf16", "one stage of its tile needs 272 KiB"),
    (dict(BLOCK_N=256, BLOCK_K=512), None, "in bf16: one stage"),
])
def test_validate_refuses_in_one_sentence(changes, precision, words):
    with pytest.raises(LabError) as info:
        _triton().OFFER.validate(_params(**changes), precision)
    message = str(info.value)
    assert words in message and "\n" not in message, message


def test_validate_accepts_the_defaults_and_every_registry_choice_one_at_a_time():
    offer = _triton().OFFER
    for precision in PRECISIONS:
        offer.validate(_params(), precision)
    offer.validate(_params(), None)
    refused = []
    for param in (p for p in STAGE.params if "triton" in p.backends):
        for choice in param.choices:
            for precision in PRECISIONS:
                message = offer.check(_params(**{param.name: choice}), precision)
                if message is not None:
                    refused.append((param.name, choice, precision))
    # one at a time off the defaults every choice runs (num_warps=1: 64 x 64 accumulators over
    # 32 threads, 128 each, the limit; BLOCK_K=512 in 16 bits: a shallower ring, below)
    assert refused == [], refused


def test_a_ring_that_does_not_fit_is_made_shallower():
    tri = _triton()
    for M, BN, BK, precision, stages in [(1, 256, 0, "bf16", 3), (64, 256, 0, "bf16", 2),
                                         (1, 64, 512, "fp16", 2), (64, 64, 512, "fp8", 3),
                                         (64, 256, 512, "fp8", 1), (64, 64, 0, "bf16", 3)]:
        r = tri.resolve(_params(BLOCK_N=BN, BLOCK_K=BK),
                        M, 8192, 8192, precision, DEFAULT_SMS)
        assert r["num_stages"] == stages, (M, BN, BK, precision, r)
        assert tri.smem_bytes(r["BLOCK_N"], r["BLOCK_M"], r["BLOCK_K"], stages,
                              precision) <= 227 * 1024
    r = tri.resolve(_params(num_stages=5), 64, 8192, 8192, "bf16", DEFAULT_SMS)
    assert r["num_stages"] == 5  # 5 x 128 x 128 x 2 bytes fit: as given


@cpu_only
def test_prepare_refuses_before_anything_runs():
    a = torch.randn(4, 64).to(torch.float8_e4m3fn)
    b = torch.randn(64, 32).to(torch.float8_e4m3fn)
    c = torch.empty(4, 32, dtype=torch.bfloat16)
    with pytest.raises(LabError) as info:
        _triton().prepare(a, b, c, precision="fp8", **_params(BLOCK_N=256, num_warps=1))
    assert "accumulators" in str(info.value)
    with pytest.raises(LabError) as info:  # fp32 is not offered
        _triton().prepare(a.float(), b.float(), c.float())
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ (d) lab.matmul


@pytest.fixture
def fresh_plans():
    plans.clear()
    yield
    plans.clear()


def _no_prepare(plan):
    """Make a plan's prepare fail the test if it is called (a replay must not prepare)."""
    def fail(*args, **kwargs):
        raise AssertionError("the plan prepared again instead of replaying")

    plan.prepare = fail


@cpu_only
@pytest.mark.parametrize("M,N,K,split", [(3, 100, 70, 0), (130, 5, 40, 1), (130, 5, 40, 2)],
                         ids=["split", "swapped", "swapped-split"])
def test_lab_matmul_runs_and_replays_its_plan(fresh_plans, M, N, K, split):
    for seed in (1, 2, 3):
        a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu", dtype=torch.bfloat16)
        c = lab.matmul(a, b, stage="decode", backend="triton", splitk=split)
        assert c.dtype == torch.bfloat16 and c.shape == (M, N)
        assert chk.compare(c, chk.reference(a, b), K, "bf16").passed, seed
        plan = plans.lookup(plans.signature(a, b, None, "decode", "triton", None,
                                            {"splitk": split}))
        assert plan is not None and plan.replay is not None
        _no_prepare(plan)  # the next calls replay
    # a given C, column-major: a new signature, then replayed too
    out = torch.empty(N, M, dtype=torch.bfloat16).t()
    for seed in (4, 5):
        a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu", dtype=torch.bfloat16)
        lab.matmul(a, b, stage="decode", backend="triton", out=out, splitk=split)
        assert chk.compare(out, chk.reference(a, b), K, "bf16").passed, seed
        plan = plans.lookup(plans.signature(a, b, out, "decode", "triton", None,
                                            {"splitk": split}))
        assert plan.replay is not None
        _no_prepare(plan)


@cpu_only
def test_lab_matmul_in_fp8_replays_with_new_scales(fresh_plans):
    M, N, K = 5, 100, 96
    for seed in (1, 2, 3):
        a, b, (sa, sb) = chk.inputs_for("fp8", M, N, K, seed=seed, device="cpu", layout="nt")
        sa = sa * (seed + 1)  # new scale tensors each call, not 1
        c = lab.matmul(a, b, stage="decode", backend="triton", scale_a=sa, scale_b=sb)
        assert c.dtype == torch.bfloat16
        assert chk.compare(c, chk.reference(a, b, (sa, sb)), K, "fp8").passed, seed
        plan = plans.lookup(plans.signature(a, b, None, "decode", "triton", None, {},
                                            (sa, sb)))
        assert plan is not None and plan.replay is not None
        _no_prepare(plan)


# ------------------------------------------------------------------ (e) compiled for sm_90

SM90_PROBE = r"""
import json, sys, torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab import check as chk
from lab.base.describe import describe
from lab.base.needs import TRITON
from lab.toolchain.triton import recording
from triton_kernels._common import FakeDriver
from triton_kernels import decode
out = {}
for spec in sys.argv[1:]:
    precision, layout, bn = spec.split(":")
    M, N, K = 16, 256, 1024
    a, b, scales = chk.inputs_for(precision, M, N, K, seed=1, device="cpu", layout=layout)
    c = torch.empty(M, N, dtype=torch.bfloat16 if precision == "fp8" else a.dtype)
    # the launcher's own code (prepare.inner), past the shared check that refuses CPU tensors
    # outside the interpreter
    p = describe(a, b, c, TRITON, precision, scales)
    with recording() as calls:
        decode.prepare.inner(p, BLOCK_N=int(bn), splitk=2)
    previous = driver._active
    driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        res = {}
        for kernel, grid, args, meta in calls:
            ptx = kernel.warmup(*args, grid=grid, **meta).asm["ptx"]
            res[kernel.fn.__name__] = {"wgmma": ptx.count("wgmma.mma_async"),
                                       "mma.sync": ptx.count("mma.sync.aligned")}
    finally:
        driver._active = previous
    out[spec] = res
print(json.dumps(out))
"""


@cpu_only
def test_compiled_for_sm90_the_dot_is_wgmma_or_mma_sync_in_every_fp8_layout():
    import json

    specs = [f"fp8:{layout}:64" for layout in LAYOUTS] + ["bf16:nt:64", "bf16:nt:32",
                                                          "fp8:nt:32"]
    r = run_python(SM90_PROBE, *specs, timeout=600, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: " +
                        r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    ptx = json.loads(r.stdout.strip().splitlines()[-1])
    for spec, kernels in ptx.items():
        assert set(kernels) == {"decode_kernel", "decode_reduce_kernel"}, spec
        main = kernels["decode_kernel"]
        if spec.endswith(":64"):  # 64 weight rows at 4 warps: one warpgroup's wgmma
            assert main["wgmma"] > 0 and main["mma.sync"] == 0, (spec, main)
        else:  # 32 rows: below wgmma's 64, mma.sync
            assert main["mma.sync"] > 0 and main["wgmma"] == 0, (spec, main)
