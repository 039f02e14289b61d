"""The CLI: CPU mode end to end, and one-sentence errors with non-zero exits, never a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="exercises CPU mode")


def run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "lab.compare", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@cpu_only
def test_cpu_mode_runs_checks_triton_and_compiles_cuda(tmp_path):
    out = tmp_path / "cpu.csv"
    r = run("--stage", "naive,tiled", "--sizes", "17x33x129,8", "--csv", str(out))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "CPU mode" in r.stderr and "GFLOPS" not in r.stdout
    df = pd.read_csv(out)
    assert len(df) == 8  # 2 stages x 2 backends x 2 sizes; no cuBLAS row without a GPU
    assert set(df.status) == {"pass", "compiled"}
    tri = df[df.backend == "triton"]
    assert (tri.status == "pass").all() and (tri.rel_err < 1e-5).all()
    cu = df[df.backend == "cuda"]
    assert (cu.status == "compiled").all() and (cu.spill_bytes == 0).all() and (cu.registers > 0).all()
    assert df.median_ms.isna().all() and df.gflops.isna().all()
    # the occupancy analysis for sm_90: tiled's 1024-thread block fits twice (64 warps)
    tiled_cu = cu[cu.stage == "tiled"].iloc[0]
    assert tiled_cu.blocks_by_warps == 2 and tiled_cu.blocks_per_sm == 2
    assert tiled_cu.occupancy == 1.0 and "warps" in tiled_cu.occupancy_limiter
    assert out.with_suffix(".env.json").is_file()


@cpu_only
def test_layouts_are_rows_with_a_layout_column(tmp_path):
    out = tmp_path / "layouts.csv"
    r = run("--stage", "tiled", "--sizes", "17x33x65", "--layout", "nn,tt,tn", "--csv", str(out))
    assert r.returncode == 0, r.stderr + r.stdout
    df = pd.read_csv(out)
    assert list(df.layout) == ["nn", "nn", "tt", "tt", "tn", "tn"]
    assert set(df.status) == {"pass", "compiled"}
    cu = df[df.backend == "cuda"]
    assert (cu.spill_bytes == 0).all()
    assert "layout" in r.stdout


def test_list_shows_every_stage():
    from lab.stages import STAGES

    r = run("--list")
    assert r.returncode == 0
    for s in STAGES:
        assert s.name in r.stdout


@pytest.mark.parametrize("args,words", [
    (["--stage", "bogus"], "unknown stage 'bogus'"),
    (["--stage", "tiled", "--sizes", "0"], "positive"),
    (["--stage", "tiled", "--sizes", "12x"], "MxNxK"),
    (["--stage", "tiled", "--precision", "fp8"], "unknown precision fp8"),
    (["--stage", "tiled", "--backend", "opencl"], "unknown backend opencl"),
    (["--stage", "tiled", "--layout", "nx"], "unknown layout nx"),
    (["--stage", "tiled", "--layout", ","], "unknown layout"),
    (["--stage", "tiled", "--sizes", ""], "--sizes is empty"),
    (["--stage", "tiled", "--sizes", " "], "--sizes is empty"),
    (["--stage", "tiled", "--rep-ms", "nan"], "--rep-ms must be a positive"),
    (["--stage", "tiled:tile=7"], "takes one of"),
    (["--stage", "tiled", "--bogus-flag"], "unrecognized arguments"),
    (["--stage", "tiled", "--seed", "x"], "invalid int value"),
])
def test_user_errors_are_one_sentence_and_exit_2(args, words):
    r = run(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1


@cpu_only
def test_gpu_only_request_without_a_gpu():
    r = run("--stage", "tiled", "--mode", "gpu")
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and "Traceback" not in r.stderr


@cpu_only
def test_include_transfers_needs_a_gpu():
    r = run("--stage", "tiled", "--include-transfers")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@cpu_only
def test_cpu_mode_compiles_cuda_at_any_size_and_skips_large_triton_rows(tmp_path):
    out = tmp_path / "big.csv"
    r = run("--stage", "tiled", "--sizes", "4096,17x33x65", "--csv", str(out))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Triton rows at 4096x4096x4096 are skipped" in r.stderr and "256^3" in r.stderr
    df = pd.read_csv(out)
    status = {(row.backend, row.M): row.status for row in df.itertuples()}
    assert status == {("cuda", 4096): "compiled", ("triton", 4096): "skipped",
                      ("cuda", 17): "compiled", ("triton", 17): "pass"}
    assert "skipped" in r.stdout
    # progress when stderr is not a terminal: one line per finished row
    assert "tiled                    triton  nn 17x33x65: pass" in r.stderr


@cpu_only
def test_names_are_case_insensitive_sizes_accumulate_and_list_filters(tmp_path):
    out = tmp_path / "case.csv"
    r = run("--stage", "Tiled", "--precision", "FP32", "--backend", "CUDA", "--sizes", "8",
            "--sizes", "9x10x11", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    assert list(zip(df.M, df.N, df.K)) == [(8, 8, 8), (9, 10, 11)] and set(df.stage) == {"tiled"}
    r = run("--list", "--stage", "tiled,naive")
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert names == ["naive", "tiled"]


@pytest.mark.parametrize("path_kind,words", [
    ("under_a_file", "is a file, not a folder"),
    ("a_folder", "it is a folder"),
])
def test_a_bad_csv_path_is_refused_before_any_work(tmp_path, path_kind, words):
    afile = tmp_path / "afile"
    afile.write_text("x")
    path = {"under_a_file": afile / "run.csv", "a_folder": tmp_path}[path_kind]
    r = run("--stage", "tiled", "--sizes", "8", "--csv", str(path))
    assert r.returncode == 2 and words in r.stderr
    assert "CPU mode" not in r.stderr  # refused before the run started
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_missing_csv_folder_is_created(tmp_path):
    from lab.cli import check_writable

    csv, env = check_writable(str(tmp_path / "new" / "deeper" / "run.csv"))
    assert csv.parent.is_dir() and not csv.exists() and env.name == "run.env.json"


@cpu_only
def test_compile_error_shows_nvrtc_log_with_file_and_line(tmp_path, monkeypatch):
    """A broken kernel: the row errors with NVRTC's log; the other rows still run; exit 1."""
    import cuda_kernels._build as build
    from lab.run import Plan, execute
    from lab.shapes import Shape
    from lab.stages import parse_variants

    broken = build.KERNEL_DIR / "zz_broken_test.cu"
    broken.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    try:
        with pytest.raises(build.CompileError) as info:
            build.compile_kernel("zz_broken_test.cu", "k")
    finally:
        broken.unlink()
    msg = str(info.value)
    assert "zz_broken_test.cu(1)" in msg and "undefined_name" in msg and "error" in msg
    # the harness turns that exception into an error row and carries on
    import cuda_kernels.naive as naive

    monkeypatch.setattr(naive, "build", lambda **_: build.compile_kernel("missing.cu", "k"))
    rows = execute(Plan(parse_variants(["naive,tiled"]), ["cuda"], [Shape(8, 8, 8)], mode="cpu"))
    assert [r.status for r in rows] == ["error", "compiled"]
    assert "missing.cu" in rows[0].detail


@cpu_only
def test_a_wrong_row_fails_and_the_run_goes_on(monkeypatch):
    from lab.run import Plan, execute
    from lab.shapes import Shape
    from lab.stages import parse_variants
    import triton_kernels.naive as tnaive

    def bad_prepare(a, b, c, **_):
        return lambda: c.copy_((a @ b) * 1.01)

    monkeypatch.setattr(tnaive, "prepare", bad_prepare)
    rows = execute(Plan(parse_variants(["naive,coalesced"]), ["triton"], [Shape(9, 9, 9)], mode="cpu"))
    assert [r.status for r in rows] == ["fail", "pass"]
    assert "relative error" in rows[0].detail


def test_a_size_too_large_for_the_gpu_is_refused_before_allocating(monkeypatch):
    import torch

    from lab.errors import LabError
    from lab.run import check_memory
    from lab.shapes import Shape

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (8 * 2**30, 80 * 2**30))
    check_memory([Shape(4096, 4096, 4096)])  # ~0.8 GiB: fine
    with pytest.raises(LabError, match=r"needs about .* GiB of GPU memory but only 8.0 GiB is free"):
        check_memory([Shape(30000, 30000, 30000)])
