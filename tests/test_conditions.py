"""Numbers you can trust, on the CPU: the interleaved baseline schedule (fake timer), the peak
table and the invalid-row rule, the noise band and its mark, the --repeat arithmetic, the NVML
summary, and CPU rows carrying no invented conditions. GPU checks are at the end (gpu marker)."""


import pytest
from rich.console import Console

from helpers import run_lab
from lab import clocks, peaks
from lab.computed import baseline_within_noise, finalize, within_noise
from lab.repeats import summarize_repeats
from lab.row import Row
from lab.table import columns, conditions_line, render
from lab.timing import bench_adjacent, quantiles



# ------------------------------------------------------------------ the interleaved schedule

class FakeGpu:
    """Stands in for the GPU: each function has a fixed time per launch that drifts with a
    'clock' moving over the run, and every measure() call is logged in order."""

    def __init__(self, ms: dict, drift_per_call: float = 0.0):
        self.ms, self.drift, self.calls, self.log = ms, drift_per_call, 0, []

    def estimate(self, fn):
        return self.ms[fn.__name__]

    def warm(self, fn, estimate, warmup_ms):
        self.log.append(("warm", fn.__name__))

    def measure(self, fn, n):
        self.log.append(("measure", fn.__name__, n))
        out = []
        for _ in range(n):
            out.append(self.ms[fn.__name__] * (1 + self.drift * self.calls))
            self.calls += 1
        return out


def stage():
    pass


def cublas():
    pass


def test_adjacent_timing_alternates_batches_and_takes_each_ones_median():
    gpu = FakeGpu({"stage": 2.0, "cublas": 1.0})
    t, base = bench_adjacent(stage, cublas, rep_ms=60, batches=4, estimate=gpu.estimate,
                             warm=gpu.warm, measure=gpu.measure)
    measured = [e for e in gpu.log if e[0] == "measure"]
    assert [e[1] for e in measured] == ["stage", "cublas", "cublas", "stage",
                                        "stage", "cublas", "cublas", "stage"]
    # rep budget 60 ms: stage 30 reps (2 ms), cuBLAS 60 reps (1 ms), each over 4 batches
    assert {e[1]: e[2] for e in measured} == {"stage": 8, "cublas": 15}
    assert t.reps == 32 and base.reps == 60
    assert t.median_ms == pytest.approx(2.0) and base.median_ms == pytest.approx(1.0)
    assert ("warm", "stage") in gpu.log and ("warm", "cublas") in gpu.log


def test_a_drifting_clock_weighs_on_both_alike_when_interleaved():
    """The clock slows 1 % per launch: timed back to back (stage first, then cuBLAS), the
    ratio is off; interleaved ABBA it stays near the true 50 %."""
    drift = 0.001
    gpu = FakeGpu({"stage": 2.0, "cublas": 1.0}, drift)
    t, base = bench_adjacent(stage, cublas, rep_ms=100, batches=6, estimate=gpu.estimate,
                             warm=gpu.warm, measure=gpu.measure)
    interleaved = 100 * base.median_ms / t.median_ms
    seq = FakeGpu({"stage": 2.0, "cublas": 1.0}, drift)
    s = quantiles(seq.measure(stage, 50))[1]
    c = quantiles(seq.measure(cublas, 100))[1]
    sequential = 100 * c / s
    assert abs(interleaved - 50) < abs(sequential - 50)
    assert abs(interleaved - 50) < 1.0


def test_at_least_one_repetition_per_batch_for_slow_kernels():
    gpu = FakeGpu({"stage": 500.0, "cublas": 1.0})
    t, base = bench_adjacent(stage, cublas, rep_ms=100, batches=6, estimate=gpu.estimate,
                             warm=gpu.warm, measure=gpu.measure)
    assert t.reps == 6  # min_reps 6 over 6 batches: one each
    assert all(e[2] >= 1 for e in gpu.log if e[0] == "measure")


# ---------------------------------------------------------------------------- peak table

def test_h100_peaks_match_the_datasheet_arithmetic():
    p = peaks.peak("fp32", (9, 0), 132, 1980)
    assert p.tflops == pytest.approx(66.9, abs=0.05)
    assert peaks.peak("bf16", (9, 0), 132, 1830).tflops == pytest.approx(989.4, rel=1e-3)
    assert peaks.peak("tf32", (9, 0), 132, 1830).tflops == pytest.approx(494.7, rel=1e-3)
    assert peaks.peak("3xtf32", (9, 0), 132, 1830).tflops == pytest.approx(494.7 / 3, rel=1e-3)
    assert peaks.peak("bf16", (8, 0), 108, 1410).tflops == pytest.approx(312, rel=1e-2)
    assert peaks.peak("fp32", (1, 0), 10, 1000) is None  # unknown GPU: no peak, no verdict
    assert peaks.peak("fp32", (9, 0), 132, None) is None


def _timed(stage_name, ms, peak_gflops=None, **kw):
    return Row(stage_name, "cuda", "fp32", 4096, 4096, 4096, median_ms=ms, peak_gflops=peak_gflops,
               **kw)


def test_a_row_faster_than_the_peak_is_invalid_and_one_below_is_not():
    peak = peaks.peak("fp32", (9, 0), 132, 1980).gflops
    flops = 2 * 4096**3
    too_fast = _timed("planted", flops / (1.10 * peak * 1e9) * 1e3, peak, sm_mhz_max=1980.0)
    honest = _timed("vectorized", flops / (0.70 * peak * 1e9) * 1e3, peak)
    within_margin = _timed("lucky", flops / (1.01 * peak * 1e9) * 1e3, peak)
    finalize([too_fast, honest, within_margin])
    assert too_fast.status == "invalid"
    assert "not a speed" in too_fast.detail and "1980 MHz" in too_fast.detail
    assert too_fast.pct_peak == pytest.approx(110, rel=1e-6)
    assert honest.status == "pass" and honest.pct_peak == pytest.approx(70, rel=1e-6)
    assert within_margin.status == "pass"


def test_a_row_with_no_known_peak_is_not_judged():
    r = _timed("x", 1e-6)  # absurdly fast, but no peak known
    finalize([r])
    assert r.status == "pass" and r.pct_peak is None


# ------------------------------------------------------------------------- noise and repeats

def test_adjacent_baseline_gives_pct_cublas_and_its_band():
    cub = Row("cublas", "cublas", "fp32", 64, 64, 64, median_ms=9.0)  # the shape's row: ignored
    r = Row("s", "cuda", "fp32", 64, 64, 64, median_ms=2.0, p20_ms=1.9, p80_ms=2.1, cublas_ms=1.0,
            pct_cublas_lo=45.0, pct_cublas_hi=55.0)
    finalize([cub, r])
    assert r.pct_cublas == pytest.approx(50.0)
    assert not within_noise(r)
    near = Row("s", "cuda", "fp32", 64, 64, 64, median_ms=1.0, cublas_ms=1.01, pct_cublas_lo=97.0,
               pct_cublas_hi=104.0)
    finalize([near])
    assert within_noise(near)


def test_once_protocol_band_comes_from_both_rows_quantiles():
    cub = Row("cublas", "cublas", "fp32", 64, 64, 64, median_ms=1.0, p20_ms=0.9, p80_ms=1.1)
    r = Row("s", "cuda", "fp32", 64, 64, 64, median_ms=1.0, p20_ms=0.95, p80_ms=1.05)
    finalize([cub, r])
    assert r.pct_cublas == pytest.approx(100.0)
    assert r.pct_cublas_lo == pytest.approx(100 * 0.9 / 1.05)
    assert r.pct_cublas_hi == pytest.approx(100 * 1.1 / 0.95)
    assert within_noise(r)


def test_repeats_are_summarized_as_median_and_min_max():
    rows = []
    for i, (ms, base) in enumerate([(2.0, 1.0), (2.2, 1.0), (1.9, 1.0), (2.1, 1.05), (2.0, 0.98)]):
        rows.append(Row("s", "cuda", "fp32", 64, 64, 64, median_ms=ms, cublas_ms=base, repeat=i,
                        reps=10))
    finalize(rows)
    (s,) = summarize_repeats(rows)
    pcts = sorted(100 * b / m for m, b in [(2.0, 1.0), (2.2, 1.0), (1.9, 1.0), (2.1, 1.05),
                                           (2.0, 0.98)])
    assert s.median_ms == pytest.approx(2.0)
    assert (s.p20_ms, s.p80_ms) == (1.9, 2.2)
    assert s.pct_cublas == pytest.approx(pcts[2])
    assert (s.pct_cublas_lo, s.pct_cublas_hi) == (pytest.approx(pcts[0]), pytest.approx(pcts[-1]))
    assert s.reps == 50 and "5 repeats" in s.detail
    assert len(rows) == 5  # the CSV keeps every repeat


def test_a_failed_repeat_is_what_the_table_shows():
    rows = [Row("s", "cuda", "fp32", 64, 64, 64, median_ms=1.0, repeat=0),
            Row("s", "cuda", "fp32", 64, 64, 64, status="fail", detail="NaN", repeat=1)]
    (s,) = summarize_repeats(rows)
    assert s.status == "fail"


def test_a_claim_smaller_than_the_noise_is_marked_in_the_table():
    rows = [Row("cublas", "cublas", "fp32", 4096, 4096, 4096, median_ms=2.65),
            Row("lucky", "cuda", "fp32", 4096, 4096, 4096, median_ms=2.6, cublas_ms=2.65,
                pct_cublas_lo=98.0, pct_cublas_hi=104.0),
            Row("slow", "cuda", "fp32", 4096, 4096, 4096, median_ms=3.5, cublas_ms=2.65,
                pct_cublas_lo=74.0, pct_cublas_hi=77.0, vs_baseline_pct=1.0, p20_ms=3.4,
                p80_ms=3.6)]
    finalize(rows)
    console = Console(width=160, record=True)
    render(rows, "gpu", console, spread=True)
    text = console.export_text()
    assert "101.9~" in text and "75.7~" not in text and "75.7" in text
    assert "within the row's noise" in text
    assert baseline_within_noise(rows[2])  # 1 % slower, but its times spread 5.7 %
    assert "% cuB range" in columns(rows, "gpu", spread=True)
    assert "% cuB range" not in columns(rows, "gpu")


# ------------------------------------------------------------------------------ conditions

def test_sampler_summarizes_clock_power_and_reasons():
    readings = iter([{"sm_mhz": 1980.0, "power_w": 300.0, "temp_c": 40.0, "mask": 0}]
                    + [{"sm_mhz": 1755.0, "power_w": 700.0, "temp_c": 60.0, "mask": 0x4}] * 1000)
    with clocks.Sampler(reader=lambda: next(readings), interval_s=0.001) as s:
        import time

        time.sleep(0.02)
    c = s.conditions
    assert c.samples >= 3
    assert c.sm_mhz_max == 1980.0 and c.sm_mhz_min == 1755.0
    assert 1755.0 < c.sm_mhz_mean < 1980.0
    assert c.temp_c == 60.0 and c.throttle == "power_cap"


def test_no_nvml_means_empty_conditions_not_invented_ones():
    with clocks.Sampler(reader=lambda: None) as s:
        pass
    assert s.conditions == clocks.Conditions()
    assert clocks.reasons(0x4 | 0x40) == ["power_cap", "hw_thermal"]
    assert clocks.reasons(0x1) == []  # GPU idle is not a slowdown


def test_conditions_line_counts_reasons():
    rows = [Row("a", "cuda", "fp32", 1, 1, 1, sm_mhz_mean=1900, sm_mhz_min=1800, sm_mhz_max=1980,
                power_w=500, temp_c=55, throttle="power_cap"),
            Row("b", "cuda", "fp32", 1, 1, 1, sm_mhz_mean=1950, sm_mhz_min=1900, sm_mhz_max=1980,
                power_w=400, temp_c=50)]
    line = conditions_line(rows)
    assert "1800-1980 MHz" in line and "power_cap in 1 row" in line and "500 W" in line
    assert conditions_line([Row("a", "cuda", "fp32", 1, 1, 1)]) is None


def test_cpu_mode_rows_have_empty_condition_columns(tmp_path):
    out = tmp_path / "cpu.csv"
    proc = run_lab("lab.compare", "--stage", "tiled", "--sizes", "32", "--repeat", "2", "--csv",
                   out, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from lab.csvfile import read_csv

    df = read_csv(out)
    assert len(df) == 4 and sorted(df["repeat"].tolist()) == [0, 0, 1, 1]
    assert sorted(df["seed"].tolist()) == [0, 0, 1, 1]  # fresh inputs in each repeat
    for col in ("sm_mhz_mean", "power_w", "peak_gflops", "pct_peak", "cublas_ms"):
        assert df[col].isna().all(), col
    assert (df["throttle"] == "").all()


@pytest.mark.parametrize("argv, words", [
    (["--repeat", "0"], "--repeat must be 1 or more"),
    (["--cublas-timing", "later"], "invalid choice"),
])
def test_bad_repeat_and_timing_options_are_one_sentence(argv, words):
    proc = run_lab("lab.compare", "--stage", "tiled", *argv, timeout=120)
    assert proc.returncode == 2
    assert words in proc.stderr and "Traceback" not in proc.stderr


# -------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_rows_carry_plausible_clock_power_and_peak():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from lab.run import RunSpec, execute
    from lab.shapes import Shape
    from lab.stages import parse_variants

    plan = RunSpec(parse_variants(["tiled"]), ["cuda", "triton"], [Shape(1024, 1024, 1024)],
                rep_ms=20)
    rows = finalize(execute(plan))
    maximum = clocks.max_sm_mhz()
    assert maximum, "NVML should answer on a GPU machine (nvidia-ml-py is a dependency)"
    for r in rows:
        assert r.status == "pass", r.detail
        assert 0 < r.sm_mhz_min <= r.sm_mhz_mean <= r.sm_mhz_max <= maximum
        assert r.power_w is None or 0 < r.power_w < 2000
        assert 0 < r.pct_peak < 100
        if r.backend != "cublas":
            assert r.cublas_timing == "adjacent" and r.cublas_ms > 0
            assert r.pct_cublas_lo <= r.pct_cublas <= r.pct_cublas_hi
