"""The read-bandwidth columns (CPU only, fast): the least bytes a product moves per precision, GB/s
and % HBM from a row's time and the run's measured read bandwidth (empty without one), the
measurement's arithmetic with a stand-in timer, the doctor's finding (skipped without a GPU), the
table's % HBM column for thin products only, and the CSV round trip (older CSVs still load)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from lab import computed, doctor, table
from lab.bandwidth import measure_read_bandwidth
from lab.base.errors import LabError
from lab.csvfile import read_csv, write_csv
from lab.repeats import summarize_repeats
from lab.roofline import datasheet_bw
from lab.row import Row

H200_READ = 4.38e12  # bytes/s: lab/bandwidth.py on an H200 (2026-11-29)


def one_sentence(message: str) -> None:
    assert message and "\n" not in message and ". " not in message.rstrip("."), message


# ------------------------------------------------------------------------- the bytes and GB/s


@pytest.mark.parametrize("precision,operand,c", [
    ("fp32", 4, 4), ("tf32", 4, 4), ("3xtf32", 4, 4), ("bf16", 2, 2), ("fp16", 2, 2),
    ("fp8", 1, 2),  # e4m3 operands, a bf16 C
])
def test_least_bytes_per_precision(precision, operand, c):
    M, N, K = 16, 4096, 8192
    assert computed.min_bytes(M, N, K, precision) == (M * K + K * N) * operand + M * N * c


def test_least_bytes_of_a_decode_layer():
    # 16 rows of bf16 activations times an 8192 x 8192 bf16 weight: the weight is nearly all of it
    assert computed.min_bytes(16, 8192, 8192, "bf16") == 134_742_016
    assert computed.min_bytes(1, 1, 1, "fp8") == 4
    assert computed.min_bytes(8, 8, 8, "no-such-precision") is None


def test_gbps_and_pct_hbm_of_a_row():
    # cuBLAS bf16 at 16x8192x8192 on an H200: 44 us, about 3.05 TB/s
    cub = Row("cublas", "cublas", "bf16", 16, 8192, 8192, median_ms=0.044)
    stage = Row("gemv", "triton", "bf16", 16, 8192, 8192, median_ms=0.040, cublas_ms=0.044)
    computed.finalize([cub, stage], read_bw=H200_READ)
    assert cub.gbps == pytest.approx(134_742_016 / 0.044e-3 / 1e9)
    assert cub.gbps == pytest.approx(3062.3, abs=0.1)
    assert cub.hbm_read_gbps == stage.hbm_read_gbps == pytest.approx(4380.0)
    assert cub.pct_hbm == pytest.approx(100 * cub.gbps / 4380.0)
    assert stage.pct_hbm == pytest.approx(100 * 134_742_016 / 0.040e-3 / 4.38e12)
    assert stage.pct_cublas == pytest.approx(110.0)  # the other columns are unchanged


def test_without_a_measured_bandwidth_pct_hbm_stays_empty():
    rows = [Row("cublas", "cublas", "fp32", 64, 64, 64, median_ms=0.01),
            Row("tiled", "cuda", "fp32", 64, 64, 64, status="fail"),  # not timed
            Row("tiled", "triton", "fp32", 64, 64, 64, mode="cpu", rel_err=1e-7)]  # CPU mode
    computed.finalize(rows)
    assert rows[0].gbps == pytest.approx(3 * 64 * 64 * 4 / 0.01e-3 / 1e9)
    assert rows[0].pct_hbm is None and rows[0].hbm_read_gbps is None
    for r in rows[1:]:
        assert r.gbps is None and r.pct_hbm is None


def test_a_rows_own_bandwidth_counts_when_read_back():
    r = Row("cublas", "cublas", "bf16", 1, 4096, 4096, median_ms=0.02, hbm_read_gbps=4000.0)
    computed.finalize([r])  # a CSV's rows: the bandwidth travels on the row
    assert r.pct_hbm == pytest.approx(100 * r.gbps / 4000.0)


def test_repeats_recompute_gbps_and_pct_hbm_from_the_median():
    rows = [Row("cublas", "cublas", "bf16", 8, 8192, 8192, median_ms=ms, repeat=i)
            for i, ms in enumerate((0.05, 0.04, 0.06))]
    computed.finalize(rows, read_bw=4e12)
    (s,) = summarize_repeats(rows)
    assert s.median_ms == 0.05
    assert s.gbps == pytest.approx(rows[0].gbps) and s.pct_hbm == pytest.approx(rows[0].pct_hbm)


# ------------------------------------------------------------------------- the measurement


def test_measure_read_bandwidth_with_a_stand_in_timer():
    calls = []

    def timer(fn, reps):
        calls.append(float(fn()))  # the read runs: a sum of ones
        return [2.0, 1.0, 3.0][:reps]

    bw = measure_read_bandwidth("cpu", nbytes=4096 * 4 + 3, reps=3, timer=timer)
    assert calls == [4096.0]  # whole float32 elements: the 3 extra bytes are not read
    assert bw == pytest.approx(4096 * 4 / 2.0e-3)  # the bytes over the median, 2 ms


def test_measure_read_bandwidth_needs_a_gpu_without_a_timer(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LabError) as exc:
        measure_read_bandwidth("cpu", nbytes=1024)
    one_sentence(str(exc.value))
    with pytest.raises(ValueError):
        measure_read_bandwidth("cpu", nbytes=1024, reps=0, timer=lambda fn, reps: [1.0])
    with pytest.raises(LabError):
        measure_read_bandwidth("cpu", nbytes=2, timer=lambda fn, reps: [1.0])


@pytest.mark.gpu
def test_the_read_bandwidth_of_this_gpu_is_below_its_datasheet():
    import time

    start = time.perf_counter()
    bw = measure_read_bandwidth("cuda")
    assert time.perf_counter() - start < 5.0  # cheap enough to measure in every run
    sheet = datasheet_bw(torch.cuda.get_device_properties(0).name)
    assert bw > 0.5e12  # any HBM GPU of the last years
    if sheet is not None:
        assert 0.6 * sheet < bw < 1.02 * sheet


def test_datasheet_bandwidth_by_gpu_name():
    assert datasheet_bw("NVIDIA H200") == 4.8e12
    assert datasheet_bw("NVIDIA H100 80GB HBM3") == 3.35e12
    assert datasheet_bw("NVIDIA GeForce RTX 4090") is None


# ------------------------------------------------------------------------- the doctor


def test_the_doctors_finding_is_skipped_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def never(device):
        raise AssertionError("measured without a GPU")

    f = doctor.probe_read_bandwidth(measure=never)
    assert f.key == "hbm_read_bw" and f.ok is None and not f.advice
    one_sentence(f.value)
    assert "skipped" in f.value and "CPU mode" in f.value
    data = doctor.to_json("cpu", [f])
    assert data["read_bandwidth"] is None and data["findings"]["hbm_read_bw"]["value"] == f.value


def test_the_doctors_finding_beside_the_datasheet():
    f = doctor.bandwidth_finding(H200_READ, "NVIDIA H200")
    assert f.ok is True and f.value.startswith("4.38 TB/s = 91% of the datasheet's 4.80")
    assert f.data["pct_of_datasheet"] == pytest.approx(91.25, abs=0.01)
    assert doctor.to_json("gpu", [f])["read_bandwidth"]["tbps"] == pytest.approx(4.38)
    slow = doctor.bandwidth_finding(2.5e12, "NVIDIA H200")
    assert slow.ok is False and slow.data["flagged"] and "52%" in slow.advice
    one_sentence(slow.advice)
    unknown = doctor.bandwidth_finding(0.9e12, "NVIDIA GeForce RTX 4090")
    assert unknown.ok is None and "no datasheet figure" in unknown.value


def test_a_failed_measurement_is_one_sentence(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def oom(device):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    f = doctor.probe_read_bandwidth(measure=oom)
    assert f.ok is False and "out of memory" in f.advice
    one_sentence(f.advice)


# ------------------------------------------------------------------------- table and CSV


def _timed(M, N, K, read_bw=H200_READ):
    return computed.finalize([Row("cublas", "cublas", "bf16", M, N, K, median_ms=0.05)],
                             read_bw=read_bw)


def test_the_table_shows_pct_hbm_for_thin_products_only():
    assert "% HBM" in table.columns(_timed(16, 8192, 8192), "gpu")
    assert "% HBM" in table.columns(_timed(4096, 1, 4096), "gpu")  # N thin: a matrix-vector
    assert "GB/s" not in table.columns(_timed(16, 8192, 8192), "gpu")
    assert "GB/s" in table.columns(_timed(16, 8192, 8192), "gpu", wide=True)
    mixed = _timed(4096, 4096, 4096) + _timed(64, 4096, 4096)
    assert "% HBM" in table.columns(mixed, "gpu")
    assert "% HBM" not in table.columns(_timed(4096, 4096, 4096), "gpu")  # square: as before
    assert "GB/s" not in table.columns(_timed(4096, 4096, 4096), "gpu", wide=True)
    assert "% HBM" not in table.columns(_timed(16, 8192, 8192, None), "gpu")  # none measured
    cpu = [Row("tiled", "triton", "fp32", 16, 16, 16, mode="cpu", rel_err=1e-7)]
    assert "% HBM" not in table.columns(computed.finalize(cpu), "cpu")


def test_csv_round_trip_of_the_bandwidth_columns(tmp_path):
    rows = _timed(16, 8192, 8192) + computed.finalize(
        [Row("tiled", "cuda", "bf16", 16, 8192, 8192, status="fail")], read_bw=H200_READ)
    path, _env = write_csv(rows, tmp_path / "run.csv", {"mode": "gpu", "hbm_read_gbps": 4380.0})
    df = read_csv(path)
    assert df["gbps"].iloc[0] == pytest.approx(rows[0].gbps)
    assert df["pct_hbm"].iloc[0] == pytest.approx(rows[0].pct_hbm)
    assert df["hbm_read_gbps"].tolist() == pytest.approx([4380.0, 4380.0])
    assert pd.isna(df["gbps"].iloc[1]) and pd.isna(df["pct_hbm"].iloc[1])


def test_an_older_csv_without_the_columns_still_loads(tmp_path):
    from lab import baseline

    rows = _timed(16, 8192, 8192)
    path, _env = write_csv(rows, tmp_path / "new.csv", {"mode": "gpu"})
    old = tmp_path / "old.csv"
    pd.read_csv(path).drop(columns=["gbps", "pct_hbm", "hbm_read_gbps"]).to_csv(old, index=False)
    df = read_csv(old)
    assert "pct_hbm" not in df.columns and df["median_ms"].iloc[0] == 0.05
    times = baseline.load(old)
    assert list(times.values()) == [0.05]
