"""The CLI: CPU mode end to end, and one-sentence errors with non-zero exits, never a traceback."""

from pathlib import Path

import pandas as pd
import pytest

from helpers import cpu_only, one_line_error, run_lab, stage_option_errors


def run(*args, timeout=300):
    return run_lab("lab.compare", *args, timeout=timeout)


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


@pytest.mark.parametrize("args,words", stage_option_errors("--sizes") + [
    (["--stage", "tiled", "--precision", "fp4"], "unknown precision fp4"),
    (["--stage", "tiled", "--precision", "fp8"], "stage tiled computes in none of the precisions "
                                                  "asked for (fp8)"),
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
    one_line_error(run(*args), words)


@cpu_only
def test_gpu_only_request_without_a_gpu():
    one_line_error(run("--stage", "tiled", "--mode", "gpu"), "no CUDA GPU")


@cpu_only
def test_include_transfers_needs_a_gpu():
    one_line_error(run("--stage", "tiled", "--include-transfers"), "needs a CUDA GPU")


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
    assert "is skipped:" not in r.stdout  # the size's reason is said once, above the table


@cpu_only
def test_cpu_mode_says_why_a_gpu_only_kernel_is_skipped():
    r = run("--stage", "warp_specialized", "--backend", "triton", "--precision", "bf16",
            "--sizes", "64")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "warp_specialized (triton) is skipped: a GPU-only kernel" in " ".join(r.stdout.split())


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
    line = one_line_error(run("--stage", "tiled", "--sizes", "8", "--csv", str(path)), words)
    assert "CPU mode" not in line  # refused before the run started


def test_a_missing_csv_folder_is_created(tmp_path):
    from lab.cli import check_writable

    csv, env = check_writable(str(tmp_path / "new" / "deeper" / "run.csv"))
    assert csv.parent.is_dir() and not csv.exists() and env.name == "run.env.json"


@cpu_only
def test_compile_error_shows_nvrtc_log_with_file_and_line(tmp_path, monkeypatch):
    """A broken kernel: the row errors with NVRTC's log; the other rows still run; exit 1."""
    import lab.toolchain.nvrtc as build
    from lab.run import RunSpec, execute
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
    from dataclasses import replace

    import cuda_kernels.naive as naive

    def missing(*_args, **_kw):  # the stage's OFFER.compile, pointed at a source that is not there
        return build.compile_kernel("missing.cu", "k"), None

    monkeypatch.setattr(naive, "OFFER", replace(naive.OFFER, compile=missing))
    rows = execute(RunSpec(parse_variants(["naive,tiled"]), ["cuda"], [Shape(8, 8, 8)], mode="cpu"))
    assert [r.status for r in rows] == ["error", "compiled"]
    assert "missing.cu" in rows[0].detail


@cpu_only
def test_a_wrong_row_fails_and_the_run_goes_on(monkeypatch):
    from lab.run import RunSpec, execute
    from lab.shapes import Shape
    from lab.stages import parse_variants
    import triton_kernels.naive as tnaive

    from lab.base.contract import Prepared

    def bad_prepare(a, b, c, **_):
        return Prepared(lambda: c.copy_((a @ b) * 1.01))

    monkeypatch.setattr(tnaive, "prepare", bad_prepare)
    rows = execute(RunSpec(parse_variants(["naive,coalesced"]), ["triton"], [Shape(9, 9, 9)], mode="cpu"))
    assert [r.status for r in rows] == ["fail", "pass"]
    assert "relative error" in rows[0].detail


def test_a_size_too_large_for_the_gpu_is_refused_before_allocating(monkeypatch):
    import torch

    from lab.base.errors import LabError
    from lab.run import check_memory
    from lab.shapes import Shape

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (8 * 2**30, 80 * 2**30))
    check_memory([Shape(4096, 4096, 4096)])  # ~0.8 GiB: fine
    with pytest.raises(LabError, match=r"needs about .* GiB of GPU memory but only 8.0 GiB is free"):
        check_memory([Shape(30000, 30000, 30000)])


# ------------------------------------------------- what the run says under its table, at 80 columns
def compare_in_process(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    """lab.compare in this process (CPU mode) at 80 columns: (exit status, stdout, stderr)."""
    from lab.compare import main

    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--mode", "cpu", *args])
    out, err = capsys.readouterr()
    return code, out, err


@cpu_only
def test_auto_rows_in_cpu_mode_say_what_happened_wrapped_at_spaces(capsys, monkeypatch):
    from lab.compare import auto_note
    from lab.row import Row

    code, out, _ = compare_in_process(capsys, monkeypatch, "--stage", "warptiling:auto",
                                      "--sizes", "8")
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("warptiling:auto cuda"))
    note = lines[start:next(i for i in range(start + 1, len(lines))
                            if not lines[i].startswith("  "))]
    text = " ".join(note)
    assert " ran " not in text and "not run (no GPU)" not in text  # no "ran" next to "not run"
    assert "the defaults were compiled for sm_90 by NVRTC, not run" in text
    assert all(len(line) <= 80 for line in note)
    assert "fast_math=False," in text.split() and "splitk=1" in text.split()  # never cut
    tri = next(line for line in lines if line.startswith("warptiling:auto triton"))
    assert "checked under the Triton interpreter, not timed" in " ".join(" ".join(
        lines[lines.index(tri):lines.index(tri) + 3]).split())
    # a row on a GPU did run: the note says so, with the configuration and why
    row = Row("warptiling:auto", "cuda", "fp32", 64, 64, 64, params="BM=64,BN=64",
              detail="auto: cached winner for 64x64x64:a4 nn on Fake GPU")
    assert auto_note(row) == ("warptiling:auto cuda nn 64x64x64 ran BM=64, BN=64 (auto: cached "
                              "winner for 64x64x64:a4 nn on Fake GPU)")


@cpu_only
def test_repeat_in_cpu_mode_says_why_the_table_shows_one_row(capsys, monkeypatch):
    code, out, _ = compare_in_process(capsys, monkeypatch, "--stage", "tiled", "--backend",
                                      "triton", "--sizes", "8", "--repeat", "3")
    assert code == 0
    note = [line for line in out.splitlines() if line.startswith("--repeat 3")]
    assert note == ["--repeat 3 is for timed GPU runs; CPU mode times nothing, so each row shows "
                    "once"]
    assert out.rstrip().splitlines()[-1] == "3 rows ok, 0 failed over 3 repeats (cpu mode)"


def test_the_summary_line_counts_in_the_singular_and_the_plural():
    from lab.cli import plural
    from lab.compare import summary_line

    assert summary_line(1, 0, 0, "cpu") == "1 row ok, 0 failed (cpu mode)"
    assert summary_line(0, 1, 1, "gpu") == "0 rows ok, 1 failed, 1 skipped (gpu mode)"
    assert summary_line(2, 0, 0, "gpu", repeat=2) == "2 rows ok, 0 failed over 2 repeats (gpu mode)"
    assert [plural(n, "plot") for n in (0, 1, 2)] == ["0 plots", "1 plot", "2 plots"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == \
        "3 entries"


@cpu_only
def test_one_row_ok_is_singular_and_the_plot_note_is_wrapped(tmp_path, capsys, monkeypatch):
    code, out, err = compare_in_process(capsys, monkeypatch, "--stage", "tiled", "--backend",
                                        "triton", "--sizes", "8", "--plot", str(tmp_path / "p"))
    assert code == 0
    assert out.rstrip().splitlines()[-1] == "1 row ok, 0 failed (cpu mode)"
    assert "wrote 0 plots to" in out
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("plots skipped: "))
    note = [lines[start]] + [line for line in lines[start + 1:] if line.startswith("  ")]
    assert len(note) > 1 and all(len(line) <= 80 for line in note)
    assert "ladder (no passing GPU row with a % of cuBLAS)" in " ".join(" ".join(note).split())


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs a folder nobody can create in")
@pytest.mark.parametrize("with_csv", [True, False])
def test_an_unwritable_plot_folder_is_named_not_the_csv(tmp_path, with_csv):
    csv = tmp_path / "run.csv"
    line = one_line_error(run("--stage", "tiled", "--sizes", "8", "--plot", "/proc/lab-plots",
                              *(["--csv", str(csv)] if with_csv else [])))
    assert line.startswith("error: --plot /proc/lab-plots: cannot create that folder")
    assert "run.csv" not in line and "CPU mode" not in line


def test_check_folder_refuses_a_file_and_creates_a_missing_folder(tmp_path):
    from lab.cli import check_folder
    from lab.base.errors import LabError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(LabError, match=r"--plot .*afile: it is a file, not a folder"):
        check_folder(str(tmp_path / "afile"), "--plot")
    with pytest.raises(LabError, match=r"afile is a file, not a folder"):
        check_folder(str(tmp_path / "afile" / "plots"), "--plot")
    made = check_folder(str(tmp_path / "new" / "plots"), "--plot")
    assert made.is_dir() and list(made.iterdir()) == []  # the write test leaves nothing


# ------------------------------------------------------------------------------- python -m lab
def test_python_m_lab_lists_the_commands_one_line_each():
    import importlib.util

    r = run_lab("lab", timeout=60, COLUMNS="80")
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for command in ("lab.compare", "lab.autotune", "lab.profile", "lab.doctor", "lab.plot",
                    "lab.results", "lab.occupancy"):
        listed = [line for line in lines if line.split()[:1] == [command]]
        assert len(listed) == 1 and len(listed[0].split()) > 2, command  # one line, with words
        assert importlib.util.find_spec(command) is not None  # a real command
        i = lines.index(listed[0])
        assert i + 1 == len(lines) or not lines[i + 1].startswith(" " * 10)  # not wrapped
    assert "README.md" in r.stdout
    r = run_lab("lab", "compare", timeout=60, COLUMNS="80")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert "python -m lab.compare" in r.stderr
