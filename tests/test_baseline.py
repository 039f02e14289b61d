"""Comparing a run with an earlier one (--baseline, --fail-on-regression), the sweep size preset and
--plot (CPU only: CPU mode has no times, so the timed paths use rows and CSVs made by hand, and a
run that "was on a GPU" is the CLI with the run itself replaced by those rows)."""

import copy
import io
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from helpers import ROOT, cpu_only, lab_env, run_lab
from lab import baseline, table
from lab import computed, row
from lab.csvfile import read_csv, write_csv
from lab.base.errors import LabError
from lab.row import Row
from lab.shapes import PRESETS, Shape, parse_sizes
from lab.table import render

RESULTS = ROOT / "results" / "2026-11-22-h100"


def timed(stage="tiled", backend="cuda", M=1024, N=1024, K=1024, ms=1.0, **kw) -> Row:
    params = kw.pop("params", "" if backend == "cublas" else "tile=32")
    return Row(stage, backend, kw.pop("precision", "fp32"), M, N, K, median_ms=ms, rel_err=5e-7,
               params=params, **kw)


def old_rows() -> list[Row]:
    return [timed("cublas", "cublas", ms=0.06), timed("tiled", "cuda", ms=0.25),
            timed("tiled", "triton", ms=0.10), timed("naive", "cuda", ms=4.0)]


def save(rows, path) -> Path:
    write_csv(computed.finalize(rows), path, {"mode": "gpu"})
    return Path(path)


def run_cli(*args, timeout=300):
    return run_lab("lab.compare", *args, timeout=timeout)


# ------------------------------------------------------------------------------- the matching
def test_a_row_matches_only_the_row_with_every_key_equal(tmp_path):
    base = baseline.load(save([timed(ms=1.0)], tmp_path / "old.csv"))
    same = timed(ms=1.1)
    others = [timed(stage="tiled:tile=16", ms=1.1), timed(backend="triton", ms=1.1),
              timed(M=1025, ms=1.1), timed(N=512, ms=1.1), timed(K=1000, ms=1.1),
              timed(precision="tf32", ms=1.1), timed(layout="nt", ms=1.1),
              timed(params="tile=16", ms=1.1)]
    assert baseline.apply([same, *others], base) == 1
    assert same.vs_baseline_pct == pytest.approx(10.0)
    assert [r.vs_baseline_pct for r in others] == [None] * len(others)


def test_pct_is_positive_when_slower_and_none_without_a_time(tmp_path):
    base = baseline.load(save([timed(ms=2.0), timed(backend="triton", ms=None, status="fail"),
                               timed(M=8, ms=2.0)], tmp_path / "old.csv"))
    faster, untimed_old, untimed_new = timed(ms=1.0), timed(backend="triton", ms=1.0), \
        timed(M=8, ms=None, status="fail")
    assert baseline.apply([faster, untimed_old, untimed_new], base) == 1
    assert faster.vs_baseline_pct == pytest.approx(-50.0)  # twice as fast
    assert untimed_old.vs_baseline_pct is None and untimed_new.vs_baseline_pct is None


def test_a_csv_without_layout_is_nn_and_without_params_matches_any_params(tmp_path):
    path = save([timed(ms=1.0)], tmp_path / "old.csv")
    df = pd.read_csv(path).drop(columns=["layout", "params"])
    df.to_csv(path, index=False)
    base = baseline.load(path)
    nn, nt, other_params = timed(ms=1.2), timed(layout="nt", ms=1.2), timed(params="x=1", ms=1.2)
    assert baseline.apply([nn, nt, other_params], base) == 2
    assert nn.vs_baseline_pct == pytest.approx(20.0) and nt.vs_baseline_pct is None
    assert other_params.vs_baseline_pct == pytest.approx(20.0)


def test_committed_results_load_and_match_themselves():
    for name in ("08-final-all.csv", "13-layouts-4096-before.csv", "15-layouts-4096-all.csv"):
        path = RESULTS / name
        base = baseline.load(path)  # 13-before has no layout column: an nn run
        rows = [Row(**{k: (None if pd.isna(v) else v) for k, v in rec.items()
                       if k in row.ROW_FIELDS})
                for rec in read_csv(path).to_dict("records")]
        for r in rows:
            r.params = r.params or ""
        timed_rows = sum(r.median_ms is not None for r in rows)
        assert baseline.apply(rows, base) == timed_rows > 0, name
        assert all(r.vs_baseline_pct == 0.0 for r in rows if r.median_ms is not None)


# ------------------------------------------------------------------------ the table and the CSV
def test_vs_base_column_only_when_a_row_has_it_and_the_table_still_fits_80():
    rows = computed.finalize(old_rows() + [
        timed("blocktile_2d:BM=64,BN=64,TM=4,TN=4", "cuda", 4096, 4096, 4096, 3.9)])
    assert "vs base" not in table.columns(rows, "gpu")
    for r, pct in zip(rows, (3.1, -12.0, 150.0, None, -99.9)):
        r.vs_baseline_pct = pct
    assert "vs base" in table.columns(rows, "gpu")
    console = Console(width=80, record=True, file=io.StringIO())
    render(rows, "gpu", console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    assert "+3.1%" in text and "-12.0%" in text and "+150.0%" in text
    assert "vs base" not in table.columns(rows, "cpu")  # CPU mode shows no time column


# ------------------------------------------------------- the CLI on a "GPU run" made of rows
@pytest.fixture
def fake_gpu(monkeypatch):
    """lab.compare with the run replaced: it 'runs on a GPU' and returns the rows given."""
    import lab.compare as compare
    import lab.env
    import lab.run

    state = {"rows": [], "ran": 0}

    def execute(plan, err):
        state["ran"] += 1
        return copy.deepcopy(state["rows"])

    monkeypatch.setattr(lab.run, "detect_mode", lambda requested="auto": "gpu")
    monkeypatch.setattr(lab.run, "validate", lambda plan: None)
    monkeypatch.setattr(compare, "_execute_with_progress", execute)
    monkeypatch.setattr(compare, "_read_bandwidth", lambda mode, err: None)  # nothing to read
    monkeypatch.setattr(lab.env, "collect",
                        lambda mode, seed, read_bw=None: {"mode": mode, "seed": seed})
    return state


def regressed_run(tmp_path, fake_gpu):
    """The earlier run's CSV, and this run's rows: tiled/cuda planted 10 % slower."""
    old = save(old_rows(), tmp_path / "old.csv")
    new = old_rows()
    new[1].median_ms *= 1.10
    new[2].median_ms *= 0.98  # faster: never a regression
    fake_gpu["rows"] = new
    return old


def test_a_planted_10_pct_regression_fails_at_5_and_passes_at_20(tmp_path, fake_gpu, capsys):
    from lab.compare import main

    old = regressed_run(tmp_path, fake_gpu)
    out = tmp_path / "new.csv"
    assert main(["--stage", "tiled", "--sizes", "1024", "--csv", str(out), "--baseline", str(old),
                 "--fail-on-regression", "5"]) == 1
    text = capsys.readouterr().out
    assert "vs base" in text and "+10.0%" in text and "-2.0%" in text
    line = next(line for line in text.splitlines() if "regressed" in line)
    assert "more than 5%" in line and "tiled cuda nn 1024x1024x1024 +10.0%" in line
    assert "triton" not in line and "naive" not in line
    assert text.index("regressed") > text.index("rows ok")  # after the table and the summary

    df = pd.read_csv(out)
    assert "vs_baseline_pct" in df.columns
    pct = dict(zip(zip(df.stage, df.backend), df.vs_baseline_pct))
    assert pct[("tiled", "cuda")] == pytest.approx(10.0)
    assert pct[("tiled", "triton")] == pytest.approx(-2.0)
    assert pct[("cublas", "cublas")] == pytest.approx(0.0)

    assert main(["--stage", "tiled", "--sizes", "1024", "--baseline", str(old),
                 "--fail-on-regression", "20"]) == 0
    text = capsys.readouterr().out
    assert "regressed" not in text and "+10.0%" in text
    # without --fail-on-regression the comparison is shown and the exit status is as before
    assert main(["--stage", "tiled", "--sizes", "1024", "--baseline", str(old)]) == 0
    assert "compared with" in capsys.readouterr().out
    # and without --baseline there is no vs base column
    assert main(["--stage", "tiled", "--sizes", "1024"]) == 0
    assert "vs base" not in capsys.readouterr().out


def test_a_failed_row_still_exits_1_with_a_baseline(tmp_path, fake_gpu, capsys):
    from lab.compare import main

    old = save(old_rows(), tmp_path / "old.csv")
    fake_gpu["rows"] = old_rows()
    fake_gpu["rows"][3] = timed("naive", "cuda", ms=None, status="fail", detail="wrong")
    assert main(["--stage", "tiled", "--sizes", "1024", "--baseline", str(old),
                 "--fail-on-regression", "5"]) == 1
    assert "regressed" not in capsys.readouterr().out


# ------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("make,extra,words", [
    (None, ["--baseline", "{tmp}/missing.csv"], "does not exist"),
    (None, ["--baseline", "{tmp}"], "is not a file"),
    ("profile", ["--baseline", "{tmp}/bad.csv"], "is not a lab results CSV"),
    ("empty", ["--baseline", "{tmp}/bad.csv"], "is not a lab results CSV"),
    ("words", ["--baseline", "{tmp}/bad.csv"], "is not a lab results CSV"),
    ("good", ["--baseline", "{tmp}/good.csv", "--fail-on-regression", "-1"],
     "must be a percentage of 0 or more"),
    ("good", ["--baseline", "{tmp}/good.csv", "--fail-on-regression", "nan"],
     "must be a percentage of 0 or more"),
    (None, ["--fail-on-regression", "5"], "needs --baseline"),
    ("afile", ["--plot", "{tmp}/afile"], "is a file, not a folder"),
])
def test_bad_inputs_are_one_sentence_exit_2_before_any_work(tmp_path, make, extra, words):
    if make == "profile":  # an Nsight Compute CSV, not a lab.compare one
        (tmp_path / "bad.csv").write_text((RESULTS / "05-profile-ladder-ncu.csv").read_text())
    elif make == "empty":
        (tmp_path / "bad.csv").write_text("")
    elif make == "words":
        (tmp_path / "bad.csv").write_text("stage,backend,precision,M,N,K,median_ms\n"
                                          "tiled,cuda,fp32,big,big,big,fast\n")
    elif make == "good":
        save(old_rows(), tmp_path / "good.csv")
    elif make == "afile":
        (tmp_path / "afile").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    r = run_cli("--stage", "tiled", "--sizes", "8", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr and r.stderr.startswith("error: ")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "CPU mode" not in r.stderr and not r.stdout  # refused before the run started


def test_load_names_the_missing_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("stage,backend,M,N,K\ntiled,cuda,1,1,1\n")
    with pytest.raises(LabError, match="no precision or median_ms column"):
        baseline.load(path)


# ---------------------------------------------------------------------------- --sizes sweep
def test_sweep_is_powers_of_two_256_to_8192_and_odd_sizes():
    shapes = parse_sizes("sweep")
    sides = [s.M for s in shapes]
    assert all(s.M == s.N == s.K for s in shapes)
    assert [n for n in sides if n & (n - 1) == 0] == [256, 512, 1024, 2048, 4096, 8192]
    assert {257, 1025, 2049, 4097} <= set(sides) and len(sides) == 10
    assert sides == sorted(sides)
    # in a comma list with other sizes, in place, each shape once, any case
    assert parse_sizes("64,SWEEP,1024,17x33x129") == [Shape(64, 64, 64), *shapes,
                                                      Shape(17, 33, 129)]
    from lab.compare import build_parser

    assert PRESETS["sweep"] in build_parser().format_help().replace("\n", "").replace(" ", "")


@cpu_only
def test_sweep_in_cpu_mode_compiles_cuda_everywhere_and_skips_big_triton_rows(tmp_path):
    out = tmp_path / "sweep.csv"
    r = run_cli("--stage", "tiled", "--sizes", "sweep", "--csv", str(out), timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    df = pd.read_csv(out)
    assert sorted(set(df.M)) == sorted(s.M for s in parse_sizes("sweep"))
    assert (df[df.backend == "cuda"].status == "compiled").all()
    tri = dict(zip(df[df.backend == "triton"].M, df[df.backend == "triton"].status))
    assert tri.pop(256) == "pass" and set(tri.values()) == {"skipped"}


# -------------------------------------------------------------------------------------- --plot
@pytest.fixture
def fake_plot(monkeypatch):
    calls = []

    def draw(csv_paths, out_dir):
        calls.append(([Path(p) for p in csv_paths], Path(out_dir)))
        for p in csv_paths:
            assert Path(p).is_file()  # the CSV is written before the plots are drawn
        png = Path(out_dir) / "fake.png"
        png.write_text("png")
        return [png]

    monkeypatch.setitem(sys.modules, "lab.plot", types.SimpleNamespace(draw=draw))
    return calls


def test_plot_without_csv_writes_dir_run_csv_then_draws(tmp_path, fake_gpu, fake_plot, capsys):
    from lab.compare import main

    fake_gpu["rows"] = old_rows()
    plots = tmp_path / "plots" / "deeper"  # created before the run
    assert main(["--stage", "tiled", "--sizes", "1024", "--plot", str(plots)]) == 0
    assert fake_plot == [([plots / "run.csv"], plots)]
    assert len(pd.read_csv(plots / "run.csv")) == len(old_rows())
    assert "fake.png" in capsys.readouterr().out


def test_plot_with_csv_draws_that_csv(tmp_path, fake_gpu, fake_plot):
    from lab.compare import main

    fake_gpu["rows"] = old_rows()
    out = tmp_path / "new.csv"
    assert main(["--stage", "tiled", "--sizes", "1024", "--csv", str(out),
                 "--plot", str(tmp_path / "plots")]) == 0
    assert fake_plot == [([out], tmp_path / "plots")]
    assert not (tmp_path / "plots" / "run.csv").exists()


def test_plot_into_a_file_is_refused_before_the_run(tmp_path, fake_gpu, fake_plot, capsys):
    from lab.compare import main

    (tmp_path / "afile").write_text("x")
    assert main(["--stage", "tiled", "--sizes", "8", "--plot", str(tmp_path / "afile")]) == 2
    assert fake_gpu["ran"] == 0 and fake_plot == []
    assert "is a file, not a folder" in capsys.readouterr().err


def test_plot_with_a_real_cpu_run(tmp_path, fake_plot):
    from lab.compare import main

    assert main(["--mode", "cpu", "--stage", "tiled", "--sizes", "8",
                 "--plot", str(tmp_path)]) == 0
    assert fake_plot == [([tmp_path / "run.csv"], tmp_path)]
    assert set(pd.read_csv(tmp_path / "run.csv").status) == {"pass", "compiled"}


def test_a_plain_run_imports_neither_lab_plot_nor_matplotlib(tmp_path):
    code = ("import sys; from lab.compare import main; "
            f"rc = main(['--mode', 'cpu', '--stage', 'tiled', '--sizes', '8', '--csv', "
            f"{str(tmp_path / 'a.csv')!r}, '--baseline', {str(tmp_path / 'a.csv')!r}]) "
            "if len(sys.argv) > 1 else main(['--mode', 'cpu', '--stage', 'tiled', '--sizes', "
            f"'8', '--csv', {str(tmp_path / 'a.csv')!r}]); "
            "print('LOADED', sorted(m for m in sys.modules if m.startswith(('matplotlib', "
            "'lab.plot')))); sys.exit(rc)")
    env = lab_env()
    for extra in ([], ["again"]):  # a first run, then one compared with it
        r = subprocess.run([sys.executable, "-c", code, *extra], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "LOADED []" in r.stdout
