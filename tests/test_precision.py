"""The precision axis: fp32, tf32, 3xtf32, bf16, fp16 as data (registry, operands, thresholds,
plan expansion, CLI), and the Triton twins whose tl.dot takes the precision as one argument."""


import pytest
import torch

from helpers import run_lab
from lab import LabError, matmul
from lab import check as chk
from lab.run import RunSpec
from lab.shapes import Shape
from lab.stages import PRECISIONS, STAGES, get_stage, parse_variants

DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "3xtf32": torch.float32,
         "bf16": torch.bfloat16, "fp16": torch.float16}
# the Triton twins whose tl.dot takes every precision (gemv, without tl.dot, offers fp32, bf16 and
# fp16 only)
TWINS = [s.name for s in STAGES
         if {"tf32", "3xtf32", "bf16", "fp16"} <= set(s.precisions_for("triton"))]


def test_every_registered_precision_has_a_threshold_a_dtype_and_a_peak_rate():
    from lab.base.dtypes import DTYPE_NAMES
    from lab.peaks import rate

    for p in PRECISIONS:
        assert chk.tolerance(p, 4096) > 0
        assert p in DTYPE_NAMES
        assert rate(p, (9, 0)) is not None
    for s in STAGES:
        for backend in ("cuda", "triton"):
            assert set(s.precisions_for(backend)) <= set(PRECISIONS), s.name


def test_thresholds_order_the_precisions_and_keep_fp32_accumulation_growth():
    t = {p: chk.tolerance(p, 4096) for p in PRECISIONS}
    assert t["fp32"] == t["3xtf32"] < t["tf32"] < t["fp16"] < t["bf16"]
    # every precision accumulates in fp32: the threshold grows like sqrt(K) only beyond the floor
    assert chk.tolerance("tf32", 2**40) > chk.tolerance("tf32", 4096)
    assert chk.tolerance("bf16", 1_000_000) == chk.tolerance("bf16", 64)


def test_a_tf32_result_fails_the_fp32_check_and_passes_the_tf32_one():
    """TF32 compared with fp32 is the classic mislabel: the fp32 check must see it."""
    a, b = chk.make_inputs(128, 96, 512, 0, "cpu")
    ref = chk.reference(a, b)

    def tf32(x):  # round to 10 mantissa bits, nearest
        bits = x.view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)

    c = (tf32(a).double() @ tf32(b).double()).float()
    assert not chk.compare(c, ref, 512, "fp32").passed
    assert chk.compare(c, ref, 512, "tf32").passed


def test_a_bf16_rounded_output_passes_bf16_but_a_dropped_k_tile_fails():
    a, b = chk.make_inputs(64, 80, 256, 1, "cpu", dtype=torch.bfloat16)
    ref = chk.reference(a, b)
    good = ref.to(torch.bfloat16)
    assert chk.compare(good, ref, 256, "bf16").passed
    dropped = (a[:, 16:].double() @ b[16:].double()).to(torch.bfloat16)  # one 16-wide k tile lost
    assert not chk.compare(dropped, ref, 256, "bf16").passed


def test_plan_runs_only_the_supported_combinations_and_says_which_are_not():
    plan = RunSpec(parse_variants(["naive,tiled"]), ["cuda", "triton"], [Shape(32, 32, 32)],
                ["fp32", "bf16"], mode="cpu")
    assert plan.unsupported() == ["naive cuda bf16", "naive triton bf16", "tiled cuda bf16"]
    assert plan.n_rows == 4 + 1  # fp32: 2 stages x 2 backends; bf16: tiled triton


def test_a_stage_with_none_of_the_precisions_is_one_sentence():
    from lab.run import validate

    plan = RunSpec(parse_variants(["naive"]), ["cuda", "triton"], [Shape(32, 32, 32)], ["bf16"],
                mode="cpu")
    with pytest.raises(LabError, match="naive computes in none of the precisions asked for"):
        validate(plan)


def test_cli_unknown_precision_and_unsupported_stage_exit_2_with_one_sentence():
    for argv, words in ((["--stage", "tiled", "--precision", "fp64"], "unknown precision fp64"),
                        (["--stage", "naive", "--precision", "tf32"], "computes in none")):
        proc = run_lab("lab.compare", *argv, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr


def test_cli_lists_each_stage_backend_precisions():
    proc = run_lab("lab.compare", "--list", "--stage", "tiled", timeout=120)
    assert "precisions: cuda fp32; triton fp32, tf32, 3xtf32, bf16, fp16" in proc.stdout


def test_the_api_takes_the_precision_from_the_dtype_or_by_name():
    a, b = chk.make_inputs(33, 17, 40, 2, "cpu", dtype=torch.bfloat16)
    c = matmul(a, b, stage="tiled", backend="triton")
    assert c.dtype == torch.bfloat16
    assert chk.compare(c, chk.reference(a, b), 40, "bf16").passed
    with pytest.raises(LabError, match=r"stage tiled \(cuda\) takes float32 tensors, but A is "
                                       r"bfloat16"):
        matmul(a, b, stage="tiled", backend="cuda")
    with pytest.raises(LabError, match=r"computes in fp32, not tf32"):
        matmul(a.float(), b.float(), stage="naive", backend="triton", precision="tf32")
    with pytest.raises(LabError, match="unknown precision"):
        matmul(a.float(), b.float(), stage="tiled", backend="triton", precision="fp4")
    with pytest.raises(LabError, match=r"computes in .*, not fp8"):
        matmul(a.float(), b.float(), stage="tiled", backend="triton", precision="fp8")
    with pytest.raises(LabError, match="takes bfloat16 tensors, but A is float32"):
        matmul(a.float(), b.float(), stage="tiled", backend="triton", precision="bf16")
    with pytest.raises(LabError, match="A is float32 and B is bfloat16, but they must have one dtype"):
        matmul(a.float(), b, stage="tiled", backend="triton", precision="bf16")
    with pytest.raises(LabError, match="tile=8 multiplies without tl.dot"):
        matmul(a, b, stage="tiled", backend="triton", tile=8)
    c32 = matmul(a.float(), b.float(), stage="tiled", backend="triton", precision="3xtf32")
    assert c32.dtype == torch.float32


@pytest.mark.parametrize("precision", ["tf32", "3xtf32", "bf16", "fp16"])
@pytest.mark.parametrize("stage", TWINS)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_triton_twins_compute_every_precision_in_every_layout(stage, precision, layout):
    a, b = chk.make_inputs(33, 17, 40, 3, "cpu", dtype=DTYPE[precision], layout=layout)
    module = get_stage(stage).module("triton")
    c = torch.empty((33, 17), dtype=DTYPE[precision])
    launch = module.prepare(a, b, c, precision=precision)
    assert launch.problem.precision == precision
    result = chk.check(launch, c, chk.reference(a, b), 40, precision)
    assert result.passed, result.reason


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32", "bf16", "fp16"])
@pytest.mark.parametrize("stage", TWINS)
def test_triton_twins_on_the_gpu_in_every_precision(stage, precision):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for layout in ("nn", "tt"):
        a, b = chk.make_inputs(257, 129, 1000, 4, "cuda", dtype=DTYPE[precision], layout=layout)
        c = torch.empty((257, 129), dtype=DTYPE[precision], device="cuda")
        launch = get_stage(stage).module("triton").prepare(a, b, c, precision=precision)
        result = chk.check(launch, c, chk.reference(a, b), 1000, precision)
        assert result.passed, (layout, result.reason)
        if precision == "3xtf32":  # near fp32's accuracy, far below TF32's
            assert result.rel_err < 1e-5
        if precision == "tf32":  # TF32 really is in use on the GPU (not IEEE fp32)
            assert result.rel_err > 1e-5


def test_all_runs_the_stages_that_offer_a_precision_and_skips_the_rest():
    from lab.run import validate

    plan = RunSpec(parse_variants(["all"]), ["cuda", "triton"], [Shape(32, 32, 32)], ["bf16"],
                mode="cpu")
    validate(plan)  # no error: 'all' means every stage that can
    assert "naive cuda bf16" in plan.unsupported()
    assert plan.n_rows == sum(1 for s in STAGES for b in ("cuda", "triton")
                              if "bf16" in s.precisions_for(b))


# ------------------------------------------------------------------------------ fp8


def test_fp8_inputs_are_e4m3_with_per_tensor_scales_and_the_reference_applies_them():
    a, b, (sa, sb) = chk.inputs_for("fp8", 48, 40, 64, 5, "cpu", "tt")
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.stride() == (1, 48) and b.stride() == (1, 64)  # both stored transposed
    assert sa.dtype == sb.dtype == torch.float32 and sa.numel() == sb.numel() == 1
    # the scale maps the largest magnitude to e4m3's largest value
    assert a.float().abs().max().item() == chk.E4M3_MAX
    ref = chk.reference(a, b, (sa, sb))
    plain = a.double() @ b.double()
    assert torch.allclose(ref, plain * sa.item() * sb.item())
    # the scaled product is the float32 inputs' product to within e4m3's rounding
    a32, b32 = chk.make_inputs(48, 40, 64, 5, "cpu")
    rel = ((ref - a32.double() @ b32.double()).norm() / ref.norm()).item()
    assert 1e-3 < rel < 0.1


def test_cublas_fp8_launch_in_every_layout_passes_the_fp8_check():
    """lab.compare's cuBLAS fp8 row (torch._scaled_mm, which runs on the CPU too): the K-major
    copies it makes for the layouts _scaled_mm does not take give the same C."""
    from lab.run import scaled_mm_launch

    for layout in ("nn", "nt", "tn", "tt"):
        a, b, scales = chk.inputs_for("fp8", 40, 48, 96, 6, "cpu", layout)
        c = torch.empty((40, 48), dtype=torch.bfloat16)
        launch = scaled_mm_launch(a, b, c, scales)
        result = chk.check(launch, c, chk.reference(a, b, scales), 96, "fp8")
        assert result.passed, (layout, result.reason)
        # K and N that are not multiples of 16 (which _scaled_mm refuses on a GPU): padded copies
        a2, b2, s2 = chk.inputs_for("fp8", 33, 17, 45, 7, "cpu", layout)
        c2 = torch.empty((33, 17), dtype=torch.bfloat16)
        result = chk.check(scaled_mm_launch(a2, b2, c2, s2), c2, chk.reference(a2, b2, s2), 45,
                           "fp8")
        assert result.passed, (layout, result.reason)
        # a scale left out is a wrong answer the check sees
        wrong = scaled_mm_launch(a, b, c, (scales[0], torch.ones(1)))
        assert not chk.check(wrong, c, chk.reference(a, b, scales), 96, "fp8").passed


def test_fp8_scales_are_checked_in_one_sentence():
    from lab.base.checks import scales_for

    a = torch.zeros((4, 4), dtype=torch.float8_e4m3fn)
    where = "stage persistent (cuda)"
    one = scales_for(a, a, "fp8", None, 0.5, where)
    assert one[0].item() == 1.0 and one[1].item() == 0.5 and one[1].dtype == torch.float32
    bad = [(torch.ones(2), "one float32 value"), (torch.ones(1, dtype=torch.float64),
                                                  "one float32 value"),
           ("2", "a number or a one-element float32 tensor"), (float("inf"), "finite")]
    for value, words in bad:
        with pytest.raises(LabError, match=words) as exc:
            scales_for(a, a, "fp8", value, None, where)
        assert "\n" not in str(exc.value)
    with pytest.raises(LabError, match="the fp8 precisions' scales, and this call computes in bf16"):
        x, y = chk.make_inputs(8, 8, 8, 0, "cpu", dtype=torch.bfloat16)
        matmul(x, y, stage="tiled", backend="triton", scale_a=2.0)


def test_fp8_operands_with_a_c_that_is_not_bfloat16_are_refused():
    from lab.base.checks import check_operands
    from lab.base.needs import TRITON

    a = torch.zeros((4, 8), dtype=torch.float8_e4m3fn)
    b = torch.zeros((8, 4), dtype=torch.float8_e4m3fn)
    needs = TRITON.__class__(blas=False, dtypes=("float8_e4m3fn",), out="bfloat16")
    check_operands(a, b, torch.empty((4, 4), dtype=torch.bfloat16), "x", needs, "any")
    with pytest.raises(LabError, match="writes a bfloat16 C from float8_e4m3fn operands, but C "
                                       r"\(out\) is float8_e4m3fn"):
        check_operands(a, b, torch.empty((4, 4), dtype=torch.float8_e4m3fn), "x", needs, "any")
    with pytest.raises(LabError, match="A is float8_e4m3fn and B is bfloat16"):
        check_operands(a, b.to(torch.bfloat16), torch.empty((4, 4), dtype=torch.bfloat16), "x",
                       needs, "any")


def test_a_plan_replays_the_callers_scale_tensors_and_keys_scale_numbers():
    """lab/plan.py: scale tensors a launch passes are swapped for the next call's; a scale given
    as a number is part of the signature (its tensor is the plan's own)."""
    from lab import plan as plans
    from lab.base.contract import Prepared

    seen = []
    a, b, c = torch.zeros(2, 3), torch.zeros(3, 4), torch.zeros(2, 4)
    sa, sb = torch.ones(1), torch.full((1,), 2.0)
    launch = Prepared.of_steps([(lambda *args: seen.append(args), (a, b, c, sa, sb))])
    plan = plans.make_plan(launch, None, {}, a, b, c, "x", (sa, sb))
    a2, b2, c2, sa2, sb2 = (t.clone() for t in (a, b, c, sa, sb))
    plan(a2, b2, c2, (sa2, sb2))
    assert all(x is y for x, y in zip(seen[-1], (a2, b2, c2, sa2, sb2)))
    key1 = plans.signature(a, b, c, "s", "triton", "fp8", {}, (0.5, None))
    key2 = plans.signature(a, b, c, "s", "triton", "fp8", {}, (0.25, None))
    key3 = plans.signature(a, b, c, "s", "triton", "fp8", {}, (sa, None))
    assert len({key1, key2, key3}) == 3
    assert plans.signature(a, b, c, "s", "triton", "fp8", {}, ("x", None)) is None
