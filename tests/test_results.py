"""python -m lab.results: results/README.md, the folder indexes, README.md's summary and the plots
come from the one committed full run and results/files.txt; running it twice changes nothing;
--check finds every kind of staleness; every committed file under results/ can be reached from
results/README.md or a stage page. CPU only; the plots are drawn once (a few seconds)."""

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from helpers import ROOT, run_lab
from lab import results
from lab.base.errors import LabError
from lab.csvfile import read_csv
from lab.stages import STAGES

RESULTS = ROOT / "results"
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture()
def copy(tmp_path):
    """results/ and README.md copied, the generated pages current (no plots drawn)."""
    dst = tmp_path / "results"
    shutil.copytree(RESULTS, dst)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return dst


def run_check(root: Path, readme: Path):
    return run_lab("lab.results", "--check", "--root", root, "--readme", readme, timeout=600)


# ---------------------------------------------------------------------- the canonical run


def test_the_canonical_run_has_every_stage_in_every_precision_it_offers():
    path = RESULTS / results.CANONICAL_RUN
    assert path.is_file() and path.with_suffix(".env.json").is_file()
    assert (RESULTS / results.CANONICAL_PROFILE).is_file()
    df = read_csv(path)
    at = df[(df.M == 4096) & (df.N == 4096) & (df.K == 4096)]
    assert (df.status == "pass").all()
    for stage in STAGES:
        if stage.name in results.OWN_SHAPES:  # measured on its own shapes, not at 4096^3
            assert not (df.stage == stage.name).any()
            continue
        for backend in ("cuda", "triton"):
            for prec in stage.precisions_for(backend):
                if prec in results.AFTER_CANONICAL:  # measured on its own page, named there
                    assert not (df.precision == prec).any()
                    continue
                rows = at[(at.stage == stage.name) & (at.backend == backend)
                          & (at.precision == prec)]
                assert len(rows) == 1, (stage.name, backend, prec)


def test_the_canonical_run_is_named_in_one_place():
    """The run's file name appears in lab/results.py once (the constant) and nowhere else in
    lab/: the picture and the tables cannot come from a 'newest CSV'."""
    name = results.CANONICAL_RUN
    assert (ROOT / "lab" / "results.py").read_text().count(f'"{name}"') == 1
    for py in (ROOT / "lab").glob("*.py"):
        if py.name != "results.py":
            assert name not in py.read_text(), py


def test_the_plots_were_drawn_from_the_canonical_files():
    source = results.plot_source()
    assert f"results/{results.CANONICAL_RUN} sha256:" in source
    for name in results.PLOTS:
        assert results.png_source(RESULTS / "plots" / f"{name}.png") == source, name


# ------------------------------------------------------------------------ generated pages


def test_the_committed_pages_and_plots_are_current():
    r = run_lab("lab.results", "--check", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("up to date")


def test_regenerating_changes_nothing_and_undoes_hand_edits(copy):
    readme = copy.parent / "README.md"
    assert results.regenerate(copy, readme=readme, draw=False) == []
    page = copy / "README.md"
    first = page.read_text()
    assert first.count(results.GENERATED) == 1
    page.write_text(first.replace("| [naive]", "| [naive (edited)]"))
    text = readme.read_text()
    readme.write_text(text.replace("CUDA against Triton:", "CUDA against Triton (edited):")
                      + "\nkept\n")
    folder = copy / "2026-11-25-h100" / "README.md"
    folder.write_text(folder.read_text() + "\nhand-written\n")
    changed = results.regenerate(copy, readme=readme, draw=False)
    assert len(changed) == 3
    assert page.read_text() == first
    assert "(edited)" not in readme.read_text() and readme.read_text().endswith("kept\n")
    assert "hand-written" not in folder.read_text()
    assert results.regenerate(copy, readme=readme, draw=False) == []


def test_check_names_each_problem_and_writes_nothing(copy):
    readme = copy.parent / "README.md"
    (copy / "2026-11-25-h100" / "stray.log").write_text("x")
    with open(copy / results.FILES, "a") as f:
        f.write("[2026-11-25-h100] again\nnothing-*.csv: a line that matches no file\n")
    readme.write_text(readme.read_text().replace("Fastest at", "Slowest at"))
    (copy / "plots" / "sweep.png").unlink()
    shutil.copy(copy / "plots" / "ladder.png", copy / "plots" / "roofline.png")
    png = (copy / "plots" / "occupancy.png").read_bytes()
    from PIL import Image

    with Image.open(copy / "plots" / "occupancy.png") as im:  # drawn from other files
        from PIL.PngImagePlugin import PngInfo

        info = PngInfo()
        info.add_text("Source", "results/elsewhere.csv sha256:0")
        im.save(copy / "plots" / "occupancy.png", pnginfo=info)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    readme_before = readme.read_text()
    r = run_check(copy, readme)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "results/2026-11-25-h100/stray.log has no line in results/files.txt" in out
    assert "'nothing-*.csv' matches no file" in out
    assert "README.md is out of date" in out
    assert "results/plots/sweep.png is missing" in out
    assert "results/plots/occupancy.png was not drawn from" in out
    assert "results/plots/roofline.png" not in out  # same Source as the others: fine
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before
    assert readme.read_text() == readme_before and png != b""


def test_a_malformed_line_of_files_txt_is_one_sentence(copy):
    with open(copy / results.FILES, "a") as f:
        f.write("this line has no colon\n")
    with pytest.raises(LabError, match=r"files.txt:\d+ is not"):
        results.read_descriptions(copy)
    r = run_check(copy, copy.parent / "README.md")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1


def test_writing_refuses_a_results_folder_with_an_undescribed_file(copy):
    (copy / "2026-11-22-h100" / "99-new.csv").write_text("stage\n")
    with pytest.raises(LabError, match="99-new.csv has no line"):
        results.regenerate(copy, readme=copy.parent / "README.md", draw=False)


# ------------------------------------------------------------------ what the pages say


def _fastest(df, precision):
    part = df[(df.precision == precision) & (df.backend != "cublas") & (df.M == 4096)
              & (df.N == 4096) & (df.K == 4096) & (df.status == "pass")]
    return part.sort_values("pct_cublas").iloc[-1]


def test_the_readme_summary_names_the_fastest_stage_of_each_precision():
    df = read_csv(RESULTS / results.CANONICAL_RUN)
    text = (ROOT / "README.md").read_text()
    block = text[text.index(results.BEGIN):text.index(results.END)]
    for prec in ("fp32", "tf32", "3xtf32", "bf16", "fp16"):
        best = _fastest(df, prec)
        backend = {"cuda": "CUDA", "triton": "Triton"}[best.backend]
        assert f"`{best.stage}` ({backend}), {best.pct_cublas:.1f}% of cuBLAS" in block, prec
    # how CUDA and Triton compare: counted from the same rows
    at = df[(df.M == 4096) & (df.N == 4096) & (df.K == 4096) & (df.backend != "cublas")]
    pairs = at.pivot_table(index=["stage", "precision"], columns="backend", values="median_ms")
    pairs = pairs.dropna()
    triton = int((pairs.triton < pairs.cuda).sum())
    assert (f"of the {len(pairs)} stage and precision pairs that have both kernels, Triton is "
            f"faster in {triton} and CUDA in {len(pairs) - triton}") in block
    # the picture and the caption name the run they come from
    assert "results/plots/ladder.png" in block and f"results/{results.CANONICAL_RUN}" in block


def test_results_readme_tables_every_stage_of_the_canonical_run():
    page = (RESULTS / "README.md").read_text()
    df = read_csv(RESULTS / results.CANONICAL_RUN)
    rows = df[(df.backend != "cublas") & (df.M == 4096)]
    for (stage, prec), part in rows.groupby(["stage", "precision"]):
        line = next(ln for ln in page.splitlines()
                    if ln.startswith(f"| [{stage}](") and f"| {prec} |" in ln)
        for pct in part.pct_cublas:
            assert f"{pct:.1f}%" in line


# --------------------------------------------------------------- reachable, links resolve


def _links(page: Path) -> list[Path]:
    out = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("#"):
            continue
        out.append((page.parent / unquote(target.split("#")[0])).resolve())
    return out


def test_every_file_under_results_is_reachable_from_its_readme_or_a_stage_page():
    start = [RESULTS / "README.md", *sorted((ROOT / "docs" / "stages").glob("*.md"))]
    seen, todo = set(), [p.resolve() for p in start]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in _links(page):
            if target.is_dir() and (target / "README.md").is_file():
                target = target / "README.md"
            if target.suffix == ".md" and target.is_file() and RESULTS in target.parents:
                todo.append(target)
            elif target.is_file():
                seen.add(target)
    committed = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True,
                               text=True).stdout.split()
    files = {(ROOT / f).resolve() for f in committed} | {
        p.resolve() for p in RESULTS.rglob("*") if p.is_file()}
    unreached = sorted(str(f.relative_to(ROOT)) for f in files if f not in seen and f.exists())
    assert unreached == []


def test_every_link_of_the_generated_pages_resolves():
    pages = [RESULTS / "README.md", ROOT / "README.md",
             *sorted(RESULTS.glob("*/README.md"))]
    for page in pages:
        for target in _links(page):
            assert target.exists(), f"{page.relative_to(ROOT)} links {target}"


def test_every_results_folder_has_an_index_with_every_file():
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir() and p.name != "plots"):
        index = (folder / "README.md").read_text()
        for f in folder.iterdir():
            if f.name != "README.md":
                assert f"]({f.name})" in index, f


@pytest.mark.parametrize("dirty,expected", [(None, None), ("0", False), ("1", True), ("?", None)])
def test_a_labelled_commit_takes_its_dirty_flag_from_lab_dirty(monkeypatch, dirty, expected):
    """On a GPU machine the tree is a copy: LAB_COMMIT names the code, and whether it had
    uncommitted changes is LAB_DIRTY's word (unknown, None, where it says nothing), never the
    copy's own git status."""
    import lab.env

    monkeypatch.setenv("LAB_COMMIT", "abc1234")
    if dirty is None:
        monkeypatch.delenv("LAB_DIRTY", raising=False)
    else:
        monkeypatch.setenv("LAB_DIRTY", dirty)
    monkeypatch.setattr(lab.env, "_git", lambda *args: " M lab/env.py")  # a copy that looks dirty
    env = lab.env.collect("cpu", 0)
    assert env["commit"] == "abc1234" and env["dirty"] is expected
