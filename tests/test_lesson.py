"""lab.lesson: the ladder read as diffs (fast tier: no kernel is compiled).

(a) Which stage a stage builds on: the registry's Stage.builds_on, else the entry before it;
    every step points down the ladder (to an earlier registry entry).
(b) The count: changed code lines, comments and blank lines left out, indentation ignored.
(c) The command: a stage's diff for each backend, --stat, errors as one sentence.
(d) The stage pages' generated diff sections are current (python -m lab.lesson --pages).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT
from lab import lesson
from lab.stages import STAGES


# ------------------------------------------------------------------------ (a) builds on
def test_the_ladder_starts_at_naive_and_side_branches_are_declared():
    assert lesson.previous(STAGES[0].name) is None
    assert lesson.previous("coalesced") == "naive"
    assert lesson.previous("gemv") == "coalesced"         # a side branch
    assert lesson.previous("mma") == "double_buffered"    # not gemv, the entry before it


@pytest.mark.parametrize("stage", [s.name for s in STAGES[1:]])
def test_every_step_points_down_the_ladder(stage):
    names = [s.name for s in STAGES]
    prev = lesson.previous(stage)
    assert prev is not None and names.index(prev) < names.index(stage)


# ------------------------------------------------------------------------ (b) the count
def test_comments_and_blank_lines_are_not_code(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text("// header\n/* block\n comment */\nint a = 1;  // why\n\n   int b;\n")
    assert lesson.code_lines(cu) == ["int a = 1;", "   int b;"]
    py = tmp_path / "k.py"
    py.write_text('"""doc\nstring"""\nx = "#not a comment"  # a comment\n\n# only\ny = 2\n')
    assert lesson.code_lines(py) == ['x = "#not a comment"', "y = 2"]


def test_changed_counts_the_longer_side_and_ignores_indentation():
    a = ["a", "b", "c", "d"]
    assert lesson.changed(a, a) == 0
    assert lesson.changed(a, ["  a", "b", "c", "d"]) == 0          # indentation only
    assert lesson.changed(a, ["a", "x", "y", "z", "d"]) == 3       # b, c -> x, y, z
    assert lesson.changed(a, ["a", "d"]) == 2                      # two removed


# ------------------------------------------------------------------------ (c) the command
def run(*args):
    return subprocess.run([sys.executable, "-m", "lab.lesson", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_stage_prints_its_diff_for_each_backend():
    r = run("tiled")
    assert r.returncode == 0, r.stderr
    prev = lesson.previous("tiled")
    for backend, path in lesson.FILES.items():
        if (ROOT / path.format("tiled")).is_file():
            assert f"== {path.format('tiled')} against {prev}:" in r.stdout
    assert "\n+" in r.stdout and "\n-" in r.stdout


def test_the_stat_table_has_a_row_per_step():
    r = run("--stat", "--backend", "triton")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == sum((ROOT / lesson.FILES["triton"].format(s.name)).is_file()
                            for s in STAGES)


@pytest.mark.parametrize("args,words", [
    (("nope",), "unknown stage 'nope'"),
    (("tiled", "--backend", "cobol"), "unknown backend 'cobol'"),
    ((), "name a stage"),
    (("--check",), "--check goes with --pages"),
])
def test_mistakes_get_one_sentence_and_exit_2(args, words):
    r = run(*args)
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------ (d) the pages
def test_every_stage_page_shows_its_current_diff():
    stale = [s.name for s in STAGES if lesson.update_page(s.name, check=True)]
    assert not stale, f"run python -m lab.lesson --pages (out of date: {', '.join(stale)})"


def test_a_page_section_names_the_stage_it_builds_on():
    text = lesson.page_section("coalesced")
    assert text.startswith(lesson.BEGIN) and text.endswith(lesson.END)
    assert "[naive](naive.md)" in text and "```diff" in text


# ------------------------------------------------------------------------ (e) numbers' sources
def test_cited_results_expands_patterns_and_skips_what_is_no_file():
    text = ("see results/2026-11-23-h100/01-bank_conflicts-*, results/2026-11-22-h100/ and "
            "`results/no/such.csv`, then results/2026-11-26-h100/hopper-stages.csv.")
    got = lesson.cited_results(text)
    assert "results/2026-11-26-h100/hopper-stages.csv" == got[-1]
    assert all(p.startswith("results/2026-11-23-h100/01-bank_conflicts-") for p in got[:-1])
    assert len(got) > 2 and len(got) == len(set(got))
    assert "results/no/such.csv" not in got and "results/2026-11-22-h100/" not in got


def test_a_result_names_the_commit_of_its_code():
    # the .env.json beside the file records the commit that ran
    assert lesson.source_of("results/2026-11-26-h100/hopper-stages.csv") == \
        "code at commit f03f585 (its .env.json)"
    # no .env.json: the commit its results/files.txt line names
    assert lesson.source_of("results/2026-11-26-h100/probe-persistent-tf32.csv") == \
        "code at commit 67cfc2f (results/files.txt)"


def test_every_page_that_cites_a_result_lists_it_with_its_source():
    for s in STAGES:
        page = (lesson.PAGES / f"{s.name}.md")
        if not page.is_file():
            continue
        text = page.read_text()
        head, rest = text.split(lesson.BEGIN, 1)
        generated, tail = rest.split(lesson.END, 1)
        for rel in lesson.cited_results(head + tail):
            assert f"[`{rel}`](../../{rel}): " in generated, (s.name, rel)
