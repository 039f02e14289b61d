"""python -m lab.results: the headline table and plots come from the committed CSVs, and running
it twice changes nothing."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab import results

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def copy(tmp_path):
    dst = tmp_path / "results"
    shutil.copytree(ROOT / "results", dst)
    return dst


def test_headline_rows_come_from_the_newest_committed_file():
    rows = {(r["stage"], r["backend"]): r for r in results.headline()}
    from lab.stages import STAGES

    for s in STAGES:  # every registered stage has both backends at both headline sizes
        for backend in ("cuda", "triton"):
            r = rows[(s.name, backend)]
            for size in ("1025", "4096"):
                pct, ms, src = r[size]
                assert 0 < pct < 1000 and ms > 0 and (ROOT / "results" / src).is_file()


def test_the_section_is_generated_between_markers_and_regenerating_is_idempotent(copy):
    readme = copy / "README.md"
    results.regenerate(copy)
    first = readme.read_text()
    assert first.count(results.BEGIN) == 1 and first.count(results.END) == 1
    pngs = {p.name: p.read_bytes() for p in (copy / "plots").glob("*.png")}
    assert results.regenerate(copy) is False  # nothing left to change
    assert readme.read_text() == first
    assert {p.name: p.read_bytes() for p in (copy / "plots").glob("*.png")} == pngs
    # a hand edit inside the section is undone, the text outside it is kept
    edited = first.replace("| naive | cuda |", "| naive | cuda (edited) |")
    readme.write_text(edited + "\nkept\n")
    assert results.regenerate(copy) is True
    assert "(edited)" not in readme.read_text() and readme.read_text().endswith("kept\n")


def test_check_mode_reports_a_stale_section_without_writing(copy):
    results.regenerate(copy)
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace("| naive | cuda |", "| naive | CUDA |"))
    before = readme.read_text()
    r = subprocess.run([sys.executable, "-m", "lab.results", "--check", "--root", str(copy)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "out of date" in r.stdout
    assert readme.read_text() == before


def test_the_committed_section_is_up_to_date():
    """results/README.md's generated part matches what lab.results makes from the CSVs."""
    r = subprocess.run([sys.executable, "-m", "lab.results", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
