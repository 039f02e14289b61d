"""The harness itself: checking, computed columns, timing statistics, shapes."""

import math

import pytest
import torch

from lab import check as chk
from lab.csvfile import to_frame, write_csv
from lab.base.errors import LabError
from lab.computed import finalize, gflops, pct_of
from lab.row import Row
from lab.shapes import Shape, parse_sizes
from lab.timing import quantiles


# ----------------------------------------------------------------------------------- checking
def _inputs(M=33, N=17, K=65):
    a, b = chk.make_inputs(M, N, K, seed=3, device="cpu")
    return a, b, chk.reference(a, b), torch.empty((M, N))


def test_checker_accepts_a_correct_kernel():
    a, b, ref, c = _inputs()
    result = chk.check(lambda: torch.matmul(a, b, out=c), c, ref, a.shape[1])
    assert result.passed and result.rel_err < 1e-6 and result.max_err_k < 1e-6


def test_checker_rejects_a_wrong_kernel():
    a, b, ref, c = _inputs()
    wrong = lambda: c.copy_(a @ b + 1e-3 * (a @ b).abs().mean())  # noqa: E731
    result = chk.check(wrong, c, ref, a.shape[1])
    assert not result.passed and "relative error" in result.reason


def test_checker_rejects_a_slightly_transposed_kernel():
    a, b, ref, c = _inputs(M=16, N=16, K=16)
    result = chk.check(lambda: c.copy_((b.T @ a.T)), c, ref, 16)  # = (AB)^T, wrong
    assert not result.passed


def test_checker_rejects_a_kernel_that_leaves_elements_unwritten():
    a, b, ref, c = _inputs()
    def half():
        c[: c.shape[0] // 2] = (a @ b)[: c.shape[0] // 2]  # bottom half never written
    result = chk.check(half, c, ref, a.shape[1])
    assert not result.passed and "NaN" in result.reason


def test_checker_poisons_before_every_run():
    """A stale correct result from an earlier run must not hide a kernel that writes nothing."""
    a, b, ref, c = _inputs()
    torch.matmul(a, b, out=c)
    result = chk.check(lambda: None, c, ref, a.shape[1])
    assert not result.passed


def test_checker_rejects_inf():
    a, b, ref, c = _inputs()
    def inf():
        torch.matmul(a, b, out=c)
        c[0, 0] = float("inf")
    assert "Inf" in chk.check(inf, c, ref, a.shape[1]).reason


def test_inputs_are_seeded_random_never_zero():
    a1, b1 = chk.make_inputs(8, 9, 10, seed=1, device="cpu")
    a2, _ = chk.make_inputs(8, 9, 10, seed=1, device="cpu")
    a3, _ = chk.make_inputs(8, 9, 10, seed=2, device="cpu")
    assert torch.equal(a1, a2) and not torch.equal(a1, a3)
    assert (a1 != 0).all() and (b1 != 0).all()


def test_reference_is_float64():
    a, b = chk.make_inputs(4, 5, 6, seed=0, device="cpu")
    assert chk.reference(a, b).dtype == torch.float64


# ---------------------------------------------------------------------------- computed columns
def test_gflops_arithmetic():
    # 2 * 4096^3 flops in 2.642 ms = 52.02 TFLOP/s (the cuBLAS fp32 anchor)
    assert gflops(4096, 4096, 4096, 2.642) == pytest.approx(2 * 4096**3 / 2.642e-3 / 1e9)
    assert gflops(4096, 4096, 4096, 2.642) == pytest.approx(52_020, rel=1e-3)
    assert gflops(1, 1, 1, 1.0) == pytest.approx(2e-6)
    with pytest.raises(ValueError):
        gflops(1, 1, 1, 0.0)


def test_pct_of_cublas_arithmetic():
    assert pct_of(2.0, 4.0) == pytest.approx(50.0)
    assert pct_of(2.0, 1.0) == pytest.approx(200.0)
    with pytest.raises(ValueError):
        pct_of(1.0, -1.0)


def test_finalize_pairs_rows_with_cublas_of_the_same_shape_and_precision():
    rows = [
        Row("cublas", "cublas", "fp32", 64, 64, 64, median_ms=1.0),
        Row("tiled", "cuda", "fp32", 64, 64, 64, median_ms=4.0),
        Row("tiled", "cuda", "fp32", 65, 65, 65, median_ms=4.0),  # no baseline for this shape
        Row("tiled", "triton", "fp32", 64, 64, 64, status="fail"),  # not timed
    ]
    finalize(rows)
    assert rows[0].pct_cublas == pytest.approx(100.0)
    assert rows[1].pct_cublas == pytest.approx(25.0)
    assert rows[1].gflops == pytest.approx(2 * 64**3 / 4e-3 / 1e9)
    assert rows[2].pct_cublas is None and rows[2].gflops is not None
    assert rows[3].gflops is None and rows[3].pct_cublas is None


def test_csv_has_one_row_per_measurement_and_the_environment_beside_it(tmp_path):
    import json

    import pandas as pd

    rows = finalize([Row("cublas", "cublas", "fp32", 8, 8, 8, median_ms=0.5),
                     Row("naive", "cuda", "fp32", 8, 8, 8, median_ms=1.0, registers=29)])
    csv, env = write_csv(rows, tmp_path / "sub" / "out.csv", {"gpu": "test", "seed": 7})
    df = pd.read_csv(csv)
    assert len(df) == 2 and list(df.columns) == list(to_frame(rows).columns)
    assert df.loc[1, "pct_cublas"] == pytest.approx(50.0) and df.loc[1, "registers"] == 29
    assert json.loads(env.read_text()) == {"gpu": "test", "seed": 7}


# ------------------------------------------------------------------------------------- timing
def test_quantiles_interpolate_like_torch():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    p20, med, p80 = quantiles(xs)
    t = torch.tensor(xs)
    assert med == pytest.approx(torch.quantile(t, 0.5).item())
    assert p20 == pytest.approx(torch.quantile(t, 0.2).item())
    assert p80 == pytest.approx(torch.quantile(t, 0.8).item())
    assert quantiles([7.0]) == (7.0, 7.0, 7.0)


# ------------------------------------------------------------------------------------- shapes
def test_parse_sizes():
    assert parse_sizes("1024, 1025,512x768x333") == [Shape(1024, 1024, 1024), Shape(1025, 1025, 1025),
                                                     Shape(512, 768, 333)]
    assert parse_sizes("4,4") == [Shape(4, 4, 4)]
    assert Shape(2, 3, 4).flops == 48 and str(Shape(2, 3, 4)) == "2x3x4"


@pytest.mark.parametrize("text,words", [
    ("0", "positive"), ("-5", "positive"), ("12x3", "MxNxK"), ("abc", "whole numbers"),
    ("1.5", "whole numbers"), ("", "empty"), ("3000000000x1x1", "32-bit"),
])
def test_parse_sizes_errors(text, words):
    with pytest.raises(LabError, match=words.replace("^", r"\^")):
        parse_sizes(text)


def test_no_nan_in_gflops_for_failed_rows():
    rows = finalize([Row("x", "cuda", "fp32", 1, 1, 1, status="error")])
    assert rows[0].gflops is None and not (isinstance(rows[0].rel_err, float) and math.isnan(rows[0].rel_err))
