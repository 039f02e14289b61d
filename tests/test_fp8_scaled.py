"""fp8 with row-wise and block-wise scales (fp8_row, fp8_block; lab/base/precisions.py).

(a) The records, the scale shapes (torch._scaled_mm's), the inputs and the float64 reference:
    the reference equals the sum of scaled 128-long partial sums it stands for; quantized
    operands map each block's largest magnitude to e4m3's largest value.
(b) The checks of a call's scales: one sentence for a missing scale, a per-tensor scale given to
    a row- or block-scaled precision, a wrong shape, dtype or device.
(c) persistent's Triton twin (variants/persistent.py, SCALE) under the interpreter: every layout,
    sizes off every tile and off 128, a column-major C, and a planted defect (the scales of B
    read in the wrong order) caught by the check; a plan replays a second call with new scales.
(d) On an sm_90 GPU: the compiled kernels (CUDA: cuda_kernels/variants/persistent.cu's
    SCALE_ROW and SCALE_BLOCK builds, every switch), and the cuBLAS baselines (torch._scaled_mm
    row-wise; block-wise where this torch's recipe computes the product, lab/run.py
    block_recipe).
"""

from __future__ import annotations

import pytest
import torch

from helpers import HAS_GPU
from lab import check as chk
from lab import matmul
from lab import plan as plans
from lab.base import precisions
from lab.base.checks import SCALE_BLOCK, scale_shapes, scales_for
from lab.base.errors import LabError

gpu = pytest.mark.gpu
KINDS = {"fp8_row": "row", "fp8_block": "block"}
LAYOUTS = ("nn", "nt", "tn", "tt")
SMALL = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4}  # interpreter-sized


# ------------------------------------------------------------------------ (a) records and data
def test_the_records_name_their_scale_kind_and_run_at_fp8s_rate():
    for name, kind in KINDS.items():
        r = precisions.get(name)
        assert r.scale == kind and r.scaled and r.peak_units == "fp8"
        assert r.dtype == "float8_e4m3fn" and r.c_dtype == "bfloat16"
    assert precisions.get("fp8").scale == "tensor" and not precisions.get("bf16").scaled


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (130, 200, 384), (64, 257, 129)])
def test_scale_shapes_are_torchs(M, N, K):
    kb, nb = -(-K // 128), -(-N // 128)
    assert scale_shapes("row", M, N, K) == ((M, 1), (1, N))
    assert scale_shapes("block", M, N, K) == ((M, kb), (kb, nb))
    assert scale_shapes("tensor", M, N, K) == ((1,), (1,))


@pytest.mark.parametrize("precision", KINDS)
def test_quantized_operands_fill_e4m3_per_block(precision):
    M, N, K = 70, 300, 260
    a, b = chk.make_inputs(M, N, K, 3, "cpu")
    qa, qb, sa, sb = chk.quantize_scaled(a, b, KINDS[precision])
    assert (tuple(sa.shape), tuple(sb.shape)) == scale_shapes(KINDS[precision], M, N, K)
    S = SCALE_BLOCK
    ra, ca, rb, cb = (1, K, K, 1) if precision == "fp8_row" else (1, S, S, S)
    xa = qa.double() * chk.expand_scale(sa.double(), ra, ca, M, K)
    xb = qb.double() * chk.expand_scale(sb.double(), rb, cb, K, N)
    # e4m3 keeps 3 bits: each element within 2^-4 relative (normal range) of the original
    assert ((xa - a.double()).abs() <= a.double().abs() * 2**-4 + 1e-3 * sa.max()).all()
    assert ((xb - b.double()).abs() <= b.double().abs() * 2**-4 + 1e-3 * sb.max()).all()
    # every block's largest magnitude becomes 448
    assert qa.float().abs().amax().item() == chk.E4M3_MAX
    amax = chk._block_amax(qa.float(), ra, ca)
    assert torch.all(amax == chk.E4M3_MAX)


@pytest.mark.parametrize("precision", KINDS)
def test_the_reference_is_the_sum_of_scaled_partial_sums(precision):
    M, N, K = 9, 200, 300
    a, b, (sa, sb) = chk.inputs_for(precision, M, N, K, 5, "cpu")
    got = chk.reference(a, b, (sa, sb))
    want = torch.zeros(M, N, dtype=torch.float64)
    for k0 in range(0, K, SCALE_BLOCK):
        k1 = min(K, k0 + SCALE_BLOCK)
        part = a[:, k0:k1].double() @ b[k0:k1].double()
        if precision == "fp8_row":
            want += part * sa.double() * sb.double()
        else:
            kb = k0 // SCALE_BLOCK
            colscale = sb[kb].double().repeat_interleave(SCALE_BLOCK)[:N]
            want += part * sa[:, kb:kb + 1].double() * colscale[None, :]
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------ (b) the scale checks
@pytest.mark.parametrize("precision", KINDS)
def test_scales_are_checked_in_one_sentence(precision):
    a, b, (sa, sb) = chk.inputs_for(precision, 64, 96, 256, 0, "cpu")
    where = "stage persistent (triton)"
    assert scales_for(a, b, precision, sa, sb, where) == (sa, sb)
    bad = [((None, sb), "must be a float32 tensor of shape"),
           ((1.0, sb), "not float"),
           ((sa.double(), sb), "but it is float64"),
           ((sa, sb.reshape(-1)), "must be float32 of shape"),
           ((sa.t(), sb), "must be float32 of shape")]
    if precision == "fp8_block":
        bad.append(((sa, sb.t()), "must be float32 of shape"))
    for (x, y), words in bad:
        with pytest.raises(LabError, match=words) as exc:
            scales_for(a, b, precision, x, y, where)
        assert "\n" not in str(exc.value) and str(exc.value).startswith(where)


def test_scales_given_to_a_precision_without_them_are_refused():
    x, y = chk.make_inputs(8, 8, 8, 0, "cpu", dtype=torch.bfloat16)
    with pytest.raises(LabError, match="the fp8 precisions' scales, and this call computes in"):
        scales_for(x, y, "bf16", torch.ones(8, 1), None, "here")


# ------------------------------------------------------------------------ (c) the interpreter
@pytest.fixture
def interpreter(monkeypatch):
    if HAS_GPU:
        pytest.skip("interpreter test (CPU tensors under TRITON_INTERPRET=1)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _run(a, b, scales, precision, out=None, **params):
    return matmul(a, b, stage="persistent", backend="triton", precision=precision, out=out,
                  scale_a=scales[0], scale_b=scales[1], **{**SMALL, **params})


@pytest.mark.parametrize("precision", KINDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_persistent_triton_computes_the_scaled_product(interpreter, precision, layout):
    for M, N, K in ((130, 200, 384), (64, 96, 200)):  # sizes off the tiles and off 128
        a, b, scales = chk.inputs_for(precision, M, N, K, 2, "cpu", layout)
        c = _run(a, b, scales, precision)
        r = chk.compare(c, chk.reference(a, b, scales), K, precision)
        assert r.passed, (M, N, K, r.reason)


@pytest.mark.parametrize("precision", KINDS)
def test_dimensions_of_one_odd_sizes_and_sliced_operands(interpreter, precision):
    for M, N, K in ((1, 64, 256), (64, 1, 256), (64, 64, 1), (1, 1, 1), (3, 5, 7)):
        a, b, scales = chk.inputs_for(precision, M, N, K, 0, "cpu", "nt")
        c = _run(a, b, scales, precision)
        assert chk.compare(c, chk.reference(a, b, scales), K, precision).passed, (M, N, K)
    M, N, K = 70, 96, 256  # views into larger tensors, at offsets
    big_a, big_b, _ = chk.inputs_for(precision, M + 5, N + 3, K + 32, 1, "cpu", "nn")
    a, b = big_a[5:, 32:], big_b[32:, 3:]
    gen = torch.Generator().manual_seed(2)
    scales = tuple(torch.rand(shape, generator=gen) + 0.5
                   for shape in scale_shapes(KINDS[precision], M, N, K))
    c = _run(a, b, scales, precision)
    assert chk.compare(c, chk.reference(a, b, scales), K, precision).passed


@pytest.mark.parametrize("precision", KINDS)
def test_a_column_major_c_and_a_wide_tile(interpreter, precision):
    M, N, K = 70, 150, 256
    a, b, scales = chk.inputs_for(precision, M, N, K, 4, "cpu", "nt")
    out = torch.empty((N, M), dtype=torch.bfloat16).t()
    _run(a, b, scales, precision, out=out)
    assert chk.compare(out, chk.reference(a, b, scales), K, precision).passed
    c = _run(a, b, scales, precision, BLOCK_N=128, BLOCK_K=128)  # a whole scale block per tile
    assert chk.compare(c, chk.reference(a, b, scales), K, precision).passed


def test_b_scales_read_in_the_wrong_order_fail_the_check(interpreter):
    M, N, K = 64, 256, 384
    a, b, (sa, sb) = chk.inputs_for("fp8_block", M, N, K, 6, "cpu", "nt")
    c = _run(a, b, (sa, sb), "fp8_block")
    assert chk.compare(c, chk.reference(a, b, (sa, sb)), K, "fp8_block").passed
    for wrong in (sb.flip(0), sb.flip(1), sa.flip(1)):
        scales = (wrong, sb) if wrong.shape == sa.shape else (sa, wrong)
        assert not chk.compare(c, chk.reference(a, b, scales), K, "fp8_block").passed


@pytest.mark.parametrize("precision", KINDS)
def test_a_plan_replays_a_second_call_with_its_own_scales(interpreter, precision):
    plans.clear()
    M, N, K = 64, 64, 256
    a, b, s1 = chk.inputs_for(precision, M, N, K, 0, "cpu", "nt")
    gen = torch.Generator().manual_seed(1)
    s2 = tuple(s * (0.5 + 3 * torch.rand(s.shape, generator=gen)) for s in s1)
    c1 = _run(a, b, s1, precision)
    c2 = _run(a, b, s2, precision)
    assert len(plans._PLANS) == 1  # the second call replayed the first one's plan
    assert chk.compare(c1, chk.reference(a, b, s1), K, precision).passed
    assert chk.compare(c2, chk.reference(a, b, s2), K, precision).passed
    assert not chk.compare(c2, chk.reference(a, b, s1), K, precision).passed


def test_cuda_builds_compile_and_refuse_a_block_tile_across_scale_blocks():
    from cuda_kernels import persistent

    for precision in KINDS:
        c = persistent.STAGE.resolve({}, 4096, 7168, 16384, precision, 132)
        knobs = {k: c[k] for k in persistent.STAGE.knobs}
        build = persistent.STAGE.build(precision, "nt", 8, knobs)
        assert build.spill_bytes == 0, precision
    d = persistent.STAGE.defaults_for("fp8_block")
    assert (d["BN"], d["CONSUMERS"]) == (128, 3)  # a 192 x 128 tile: three consumer warpgroups
    assert persistent.STAGE.defaults_for("fp8")["CONSUMERS"] == 2
    # two consumers (the tile of the per-tensor builds) and 64-column tiles build spill-free too
    for extra in ({"CONSUMERS": 2}, {"BN": 64}):
        knobs = {k: c[k] for k in persistent.STAGE.knobs}
        assert persistent.STAGE.build("fp8_block", "nt", 8, {**knobs, **extra}).spill_bytes == 0
    # three consumers share the registers differently: never the lesson's build
    assert not persistent.lesson_case({"CLUSTER": 1, "TMA_STORE": 0, "CONSUMERS": 3}, "nn")
    assert persistent.lesson_case({"CLUSTER": 1, "TMA_STORE": 0, "CONSUMERS": 2}, "nn")
    with pytest.raises(LabError, match="three consumer warpgroups hold 160 registers"):
        persistent.OFFER.validate({"CONSUMERS": 3, "BN": 256}, "bf16")
    # the command line and lab.matmul take it too (the registry's choices)
    from lab.stages import parse_variants

    (v,) = parse_variants(["persistent:CONSUMERS=3,BN=128"])
    persistent.OFFER.validate(v.params_for("cuda"), "fp8")
    # the SCALE_TMA switch: A's scales by bulk copy into a ring of BM floats per slot
    c = {k: v for k, v in persistent.STAGE.resolve({}, 4096, 7168, 16384, "fp8_block", 132).items()
         if k in persistent.STAGE.knobs}
    tma = {**c, "SCALE_TMA": 1}
    assert persistent.STAGE.build("fp8_block", "nt", 8, tma).spill_bytes == 0
    assert (persistent.STAGE.smem_bytes(tma, precision="fp8_block")
            - persistent.STAGE.smem_bytes(c, precision="fp8_block")) == c["STAGES"] * 192 * 4
    with pytest.raises(LabError, match="BN must be 64 or 128"):
        persistent.OFFER.validate({"BN": 256}, "fp8_block")
    persistent.OFFER.validate({"BN": 256}, "fp8_row")


def test_scale_tma_needs_m_major_aligned_scales():
    from cuda_kernels._tma import _scale_tma_fits
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    a, b, (sa, sb) = chk.inputs_for("fp8_block", 64, 96, 256, 0, "cpu", "nt")
    c = torch.empty((64, 96), dtype=torch.bfloat16)
    assert sa.stride(0) == 1  # lab.check makes A's block scales M-major, as torch takes them
    assert _scale_tma_fits(describe(a, b, c, CUDA, "fp8_block", (sa, sb)))
    row_major = sa.contiguous()
    assert not _scale_tma_fits(describe(a, b, c, CUDA, "fp8_block", (row_major, sb)))
    a2, b2, (sa2, sb2) = chk.inputs_for("fp8_block", 66, 96, 256, 0, "cpu", "nt")  # M % 4 != 0
    c2 = torch.empty((66, 96), dtype=torch.bfloat16)
    assert not _scale_tma_fits(describe(a2, b2, c2, CUDA, "fp8_block", (sa2, sb2)))


def test_the_triton_twin_runs_fp8_block_unflattened_unless_told():
    from triton_kernels import persistent

    assert persistent.resolve_config("fp8_block", {})["flatten"] is False
    assert persistent.resolve_config("fp8_block", {"flatten": True})["flatten"] is True
    assert persistent.resolve_config("fp8_row", {})["flatten"] is True
    assert persistent.resolve_config("bf16", {})["flatten"] is True
    # lab.matmul and lab.compare pass every registry parameter, the defaults included
    # (Variant.params_for): the registry's automatic -1 must leave the choice to the precision
    from lab.stages import Variant, get_stage

    every = Variant(get_stage("persistent"), get_stage("persistent").defaults()).params_for("triton")
    assert "flatten" in every
    assert persistent.resolve_config("fp8_block", every)["flatten"] is False
    assert persistent.resolve_config("fp8", every)["flatten"] is True
    with pytest.raises(LabError, match="flatten must be -1"):
        persistent.OFFER.validate({"flatten": 2}, "fp8")


def test_block_tiles_lie_in_one_scale_block_and_hold_two_accumulators():
    from triton_kernels import persistent

    with pytest.raises(LabError, match="spans more than one of B's 128 x 128 scale blocks"):
        persistent.OFFER.validate({"BLOCK_N": 256, "num_warps": 8}, "fp8_block")
    persistent.OFFER.validate({"BLOCK_N": 256, "num_warps": 8}, "fp8_row")
    tile = {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8}  # 128 accumulators a thread
    with pytest.raises(LabError, match="fp32 accumulators"):
        persistent.OFFER.validate(tile, "fp8_block")  # twice that: the k-step's own sum
    persistent.OFFER.validate(tile, "fp8_row")


# ------------------------------------------------------------------------ (d) the GPU
def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("persistent's Triton twin needs an sm_90 GPU")


@gpu
@pytest.mark.parametrize("backend", ("cuda", "triton"))
@pytest.mark.parametrize("precision", KINDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_compiled_kernels_on_the_gpu(backend, precision, layout):
    _need_sm90()
    for M, N, K in ((512, 512, 512), (1000, 777, 1000), (256, 7168, 2048), (130, 70, 1000)):
        a, b, scales = chk.inputs_for(precision, M, N, K, 3, "cuda", layout)
        c = matmul(a, b, stage="persistent", backend=backend, precision=precision,
                   scale_a=scales[0], scale_b=scales[1])
        r = chk.compare(c, chk.reference(a, b, scales), K, precision)
        assert r.passed, (M, N, K, r.reason)
        # a column-major C (fp8_row: the operands and their scales swap roles)
        out = torch.empty((N, M), dtype=torch.bfloat16, device="cuda").t()
        matmul(a, b, stage="persistent", backend=backend, precision=precision, out=out,
               scale_a=scales[0], scale_b=scales[1])
        assert chk.compare(out, chk.reference(a, b, scales), K, precision).passed, (M, N, K)


@gpu
@pytest.mark.parametrize("precision", KINDS)
@pytest.mark.parametrize("params", ({"CLUSTER": 2}, {"STORE": 2}, {"BN": 64}, {"CONSUMERS": 1}))
def test_cuda_builds_of_every_switch(precision, params):
    _need_sm90()
    M, N, K = 1000, 768, 1200
    a, b, scales = chk.inputs_for(precision, M, N, K, 5, "cuda", "nt")
    c = matmul(a, b, stage="persistent", backend="cuda", precision=precision,
               scale_a=scales[0], scale_b=scales[1], **params)
    r = chk.compare(c, chk.reference(a, b, scales), K, precision)
    assert r.passed, r.reason


@gpu
def test_cublas_row_wise_baseline_computes_the_product():
    from lab.run import _cublas_launch

    _need_sm90()
    for M, N, K in ((512, 512, 512), (1000, 777, 1000)):
        a, b, scales = chk.inputs_for("fp8_row", M, N, K, 3, "cuda", "nt")
        launch, c, stand_in = _cublas_launch(a, b, "fp8_row", scales, with_out=True)
        launch()
        assert not stand_in
        assert chk.compare(c, chk.reference(a, b, scales), K, "fp8_row").passed


@gpu
def test_cublas_block_baseline_is_the_product_or_says_why_not():
    from lab.run import _cublas_launch, block_recipe

    _need_sm90()
    layout, why = block_recipe(torch.device("cuda"))
    a, b, scales = chk.inputs_for("fp8_block", 512, 384, 640, 3, "cuda", "nt")
    launch, c, stand_in = _cublas_launch(a, b, "fp8_block", scales, with_out=True)
    launch()
    if layout is not None:
        assert not stand_in
        assert chk.compare(c, chk.reference(a, b, scales), 640, "fp8_block").passed
    else:
        assert why and why in stand_in and "per-tensor" in stand_in
        assert chk.compare(c, chk.reference(a, b), 640, "fp8").passed
