"""Shape suites (lab/suites.py, docs/SUITES.md): `--sizes llm`, `deepseek`, `kernelbench` and their
M filters parse into labelled shapes; a suite's shapes run in its layout unless --layout is given;
the rows carry model and layer into the CSV and the table. CPU only where lab.compare runs."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from helpers import cpu_only, one_line_error, run_lab
from lab.axes import LAYOUTS
from lab.base.errors import LabError
from lab.base.index_range import SIZE_LIMIT
from lab.row import Row
from lab.shapes import Shape, parse_labelled_sizes, parse_sizes
from lab.suites import SUITES, Entry, Suite, labels, tag


# ------------------------------------------------------------------------------- the data
@pytest.mark.fast
def test_the_suites_hold_the_published_lists():
    llm, ds, kb = SUITES["llm"], SUITES["deepseek"], SUITES["kernelbench"]
    assert len(llm.entries) == 84 and len(parse_sizes("llm")) == 84
    assert llm.ms == [1, 16, 64, 256, 1024, 4096, 16384]
    kn = {(e.K, e.N) for e in llm.entries}  # tritonbench's llama_shapes()
    assert kn == {(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096), (8192, 1280),
                  (1024, 8192), (8192, 7168), (3584, 8192), (16384, 2304), (2048, 16384),
                  (16384, 13312), (6656, 16384)}
    assert len(ds.entries) == 21 and len(parse_sizes("deepseek")) == 21
    assert ds.ms == [1, 128, 4096]
    assert {(e.N, e.K) for e in ds.entries} == {(2112, 7168), (576, 7168), (24576, 1536),
                                                 (32768, 512), (7168, 16384), (4096, 7168),
                                                 (7168, 2048)}
    # KernelBench level 1: 11 plain 2-D products over 7 shapes (1 and 13 are both 4096^3; 2, 16,
    # 17 and 18 one shape in four layouts)
    assert len(kb.entries) == 11 and len(parse_sizes("kernelbench")) == 7
    numbers = sorted(int(e.layer.split("_")[0]) for e in kb.entries)
    assert numbers == [1, 2, 4, 6, 7, 8, 9, 13, 16, 17, 18]
    assert {e.layer.split("_")[0]: e.layout for e in kb.entries if e.layout != "nn"} == {
        "16": "tn", "17": "nt", "18": "tt"}
    # the long-K spread of the split rule: 20 or more few-tile shapes, K from 2^17 to 2^20, M and
    # N from 1 to 512, odd sizes and both thin ends among them
    lk = SUITES["longk"].entries
    assert len(lk) >= 20 and len(parse_sizes("longk")) == len(lk)
    assert all(1 <= e.M <= 512 and 1 <= e.N <= 512 and 2**17 <= e.K <= 2**20 for e in lk)
    assert any(e.M == 1 for e in lk) and any(e.N == 1 for e in lk)
    assert sum(e.K % 2 == 1 for e in lk) >= 4
    for s in SUITES.values():
        for e in s.entries:
            assert e.layout in LAYOUTS and max(e.M, e.N, e.K) <= SIZE_LIMIT and min(e.M, e.N, e.K) >= 1
            assert e.model and e.layer and e.tag
        assert len({(e.M, e.N, e.K, e.layout, e.layer) for e in s.entries}) == len(s.entries)
    assert {e.layout for e in llm.entries} == {e.layout for e in ds.entries} == {"nt"}


@pytest.mark.fast
def test_layers_are_labelled_by_model_and_role():
    sizes = parse_labelled_sizes("llm,deepseek,kernelbench")
    assert sizes.label(Shape(1, 12288, 4096), "nt") == ("Llama-2-7B", "qkv")
    assert sizes.label(Shape(16, 4096, 11008), "nt") == ("Llama-2-7B", "down")
    assert sizes.label(Shape(64, 1280, 8192), "nt") == ("Llama-3-70B TP8", "qkv")
    assert sizes.label(Shape(4096, 16384, 6656), "nt") == ("Llama-3-405B TP8", "down")
    assert sizes.label(Shape(128, 32768, 512), "nt") == ("DeepSeek-V3", "kv_b")
    assert sizes.label(Shape(1, 2112, 7168), "nt") == ("DeepSeek-V3", "q_a+kv_a")
    # one shape, two problems in the same layout: one row, both names
    assert sizes.label(Shape(4096, 4096, 4096), "nn") == (
        "KernelBench L1", "1_Square_matrix_multiplication_ / 13_Matmul_for_symmetric_matrices")
    # one shape in four layouts: each layout its own problem
    kb2 = Shape(2048, 4096, 8192)
    assert sizes.layouts(kb2, ["nn"]) == ["nn", "tn", "nt", "tt"]
    assert sizes.label(kb2, "nt") == ("KernelBench L1", "17_Matmul_with_transposed_B")
    assert sizes.label(Shape(64, 64, 64), "nn") == ("", "")
    # the table's short labels
    assert tag("Llama-3-405B TP8", "gate_up") == "L3-405B gate_up"
    assert tag(*sizes.label(Shape(4096, 4096, 4096), "nn")) == "KB 1 square / KB 13 symmetric"
    assert tag("", "") == "" and tag("Some model", "proj") == "Some model proj"


@pytest.mark.fast
def test_labels_of_several_models_name_one_model_per_layer():
    a = Entry("A", "x", "A x", 1, 2, 3, "nn")
    b = Entry("B", "y", "B y", 1, 2, 3, "nn")
    c = Entry("A", "z", "A z", 1, 2, 3, "nn")
    assert labels([a, c]) == ("A", "x / z")
    assert labels([a, b, c]) == ("A / B / A", "x / y / z")
    assert labels([]) == ("", "")


# ------------------------------------------------------------------------------- parsing
@pytest.mark.fast
def test_suite_names_parse_among_sizes_and_count_once():
    shapes = parse_sizes("64,LLM@1,64,llm@1,Deepseek@1+4096")
    assert shapes[0] == Shape(64, 64, 64) and len(shapes) == 1 + 12 + 14
    assert all(isinstance(s, Shape) for s in shapes)
    assert parse_sizes("llm,llm") == parse_sizes("llm")
    sizes = parse_labelled_sizes("llm@1,1x12288x4096")  # a plain size equal to a suite's shape
    assert sizes.plain == {Shape(1, 12288, 4096)} and len(sizes.shapes) == 12
    assert sizes.layouts(Shape(1, 12288, 4096), ["nn"]) == ["nt", "nn"]
    assert sizes.label(Shape(1, 12288, 4096), "nn") == ("Llama-2-7B", "qkv")
    assert parse_sizes("sweep")[0] == Shape(256, 256, 256)  # the preset still works


@pytest.mark.fast
def test_the_m_filter_keeps_values_and_ranges():
    decode = parse_sizes("llm@1-64")
    assert len(decode) == 36 and {s.M for s in decode} == {1, 16, 64}
    assert {s.M for s in parse_sizes("llm@1+16384")} == {1, 16384}
    assert {s.M for s in parse_sizes("deepseek@100-5000")} == {128, 4096}
    assert len(parse_sizes("kernelbench@2048")) == 2  # 2048x4096x8192 and the matrix-vector one


@pytest.mark.fast
@pytest.mark.parametrize("text,words", [
    ("llm@x", "numbers or ranges joined by '+', e.g. llm@1-64"),
    ("llm@", "numbers or ranges"),
    ("llm@1-", "numbers or ranges"),
    ("llm@2", "selects none of llm's shapes; its M values are 1, 16, 64"),
    ("llm@2-8", "selects none"),
    ("lama@1", "names no suite before '@'; the suites are llm, deepseek, kernelbench, longk"),
    ("lama", "or a suite (llm, deepseek, kernelbench, longk)"),
])
def test_a_bad_suite_token_is_one_sentence(text, words):
    with pytest.raises(LabError) as info:
        parse_sizes(text)
    message = str(info.value)
    assert words in message and "\n" not in message


# ------------------------------------------------------------------ layouts and labels in a run
class _Spec(Exception):
    pass


def _spec_of(monkeypatch, *args):
    """The RunSpec lab.compare builds from `args` (CPU mode), caught where its rows would run."""
    import lab.run
    from lab.compare import main

    def catch(spec, on_row=None, only=None):
        raise _Spec(spec)

    monkeypatch.setattr(lab.run, "execute", catch)
    with pytest.raises(_Spec) as info:
        main(["--mode", "cpu", "--stage", "naive", *args])
    return info.value.args[0]


@pytest.mark.fast
def test_a_suite_runs_in_its_layout_unless_layout_is_given(monkeypatch):
    llm1, square = Shape(1, 12288, 4096), Shape(64, 64, 64)
    spec = _spec_of(monkeypatch, "--sizes", "llm@1,64,kernelbench@2048")
    assert spec.layouts_for(llm1) == ["nt"] and spec.layouts_for(square) == ["nn"]
    assert spec.layouts_for(Shape(2048, 4096, 8192)) == ["nn", "tn", "nt", "tt"]
    assert spec.labels[(llm1, "nt")] == ("Llama-2-7B", "qkv")
    assert (square, "nn") not in spec.labels
    assert spec.labels[(Shape(2048, 4096, 8192), "tt")] == ("KernelBench L1",
                                                            "18_Matmul_with_transposed_both")
    # rows: (12 llm shapes x 1 + 1 x 1 + 4 + 1 matvec) layouts x 2 backends
    assert spec.n_rows == (12 + 1 + 4 + 1) * 2
    explicit = _spec_of(monkeypatch, "--sizes", "llm@1,64", "--layout", "tn,nn")
    assert explicit.layouts_for(llm1) == explicit.layouts_for(square) == ["tn", "nn"]
    assert explicit.labels[(llm1, "tn")] == ("Llama-2-7B", "qkv")  # every label of its shape


# --------------------------------------------------------------------------- CSV and table
@pytest.mark.fast
def test_model_and_layer_round_trip_through_the_csv(tmp_path):
    from lab.baseline import load
    from lab.csvfile import read_csv, write_csv

    rows = [Row("tiled", "cuda", "bf16", 1, 12288, 4096, layout="nt", model="Llama-2-7B",
                layer="qkv", median_ms=0.1),
            Row("tiled", "cuda", "bf16", 64, 64, 64, median_ms=0.01)]
    path, _env = write_csv(rows, tmp_path / "run.csv", {})
    df = read_csv(path)
    assert list(df.model) == ["Llama-2-7B", ""] and list(df.layer) == ["qkv", ""]
    # an older CSV, written before these columns: still read, still a baseline
    old = tmp_path / "old.csv"
    df.drop(columns=["model", "layer"]).to_csv(old, index=False)
    assert "model" not in read_csv(old).columns
    assert len(load(old)) == 2


@pytest.mark.fast
def test_the_table_shows_a_layer_column_only_for_suite_rows():
    from rich.console import Console

    from lab import table

    plain = [Row("tiled", "triton", "fp32", 64, 64, 64, mode="cpu")]
    labelled = plain + [Row("tiled", "triton", "fp32", 1, 4096, 4096, mode="cpu", layout="nt",
                            model="Llama-2-7B", layer="o_proj", status="skipped")]
    assert "layer" not in table.columns(plain, "cpu")
    assert table.columns(labelled, "cpu").index("layer") == table.columns(
        labelled, "cpu").index("size") + 1
    buf = io.StringIO()
    table.render(labelled, "cpu", Console(file=buf, width=100))
    assert "L2-7B o_proj" in buf.getvalue()


# ---------------------------------------------------------------------- lab.compare, CPU mode
TINY = Suite("tiny", "two layers of a made-up model", "nt", "tests/test_suites.py", (
    Entry("Tiny-1M", "qkv", "T qkv", 4, 24, 16, "nt"),
    Entry("Tiny-1M", "up", "T up", 4, 24, 16, "nt"),  # the same shape: one row, both labels
    Entry("Tiny-1M", "down", "T down", 4, 16, 24, "nt"),
    Entry("Tiny-1M", "down", "T down", 32, 16, 24, "nt"),
))


@cpu_only
@pytest.mark.fast
def test_compare_writes_the_labels_of_a_suite_to_the_csv(tmp_path, monkeypatch, capsys):
    from lab import suites
    from lab.compare import main

    monkeypatch.setitem(suites.SUITES, "tiny", TINY)
    for e in TINY.entries:
        monkeypatch.setitem(suites._TAGS, (e.model, e.layer), e.tag)
    monkeypatch.setenv("COLUMNS", "120")
    out = tmp_path / "tiny.csv"
    rc = main(["--mode", "cpu", "--stage", "naive", "--backend", "triton", "--sizes",
               "tiny@4,8", "--csv", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    df = pd.read_csv(out, keep_default_na=False)
    got = [(r.layout, f"{r.M}x{r.N}x{r.K}", r.model, r.layer, r.status) for r in df.itertuples()]
    assert got == [("nt", "4x24x16", "Tiny-1M", "qkv / up", "pass"),
                   ("nt", "4x16x24", "Tiny-1M", "down", "pass"),
                   ("nn", "8x8x8", "", "", "pass")]
    assert "T qkv / T up" in text and "T down" in text  # the table's layer column


@cpu_only
def test_compare_runs_a_real_suite_selection_in_cpu_mode(tmp_path):
    out = tmp_path / "ds.csv"
    r = run_lab("lab.compare", "--stage", "naive", "--backend", "cuda", "--sizes", "deepseek@1",
                "--csv", str(out), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    df = pd.read_csv(out)
    assert len(df) == 7 and set(df.layout) == {"nt"} and set(df.model) == {"DeepSeek-V3"}
    assert list(df.layer) == ["q_a+kv_a", "kv_a", "q_b", "kv_b", "o_proj", "expert gate_up",
                              "expert down"]
    assert set(df.status) == {"compiled"} and "kv_b" in r.stdout


@cpu_only
def test_bad_suite_input_is_refused_by_the_command():
    r = run_lab("lab.compare", "--stage", "naive", "--sizes", "llm@0-0", timeout=120)
    one_line_error(r, "selects none of llm's shapes")


@pytest.mark.fast
def test_list_suites_names_every_suite_and_its_shapes(capsys):
    from lab.compare import build_parser, main

    assert main(["--list-suites"]) == 0
    text = capsys.readouterr().out
    for name, s in SUITES.items():
        assert f"{name}: " in text
        assert all(e.layer in text for e in s.entries)
    assert main(["--list-suites", "--sizes", "llm@1"]) == 0
    text = capsys.readouterr().out
    assert "12 GEMMs" in text and "deepseek" not in text and "16384" in text
    assert "llm, deepseek, kernelbench, longk" in " ".join(build_parser().format_help().split())
