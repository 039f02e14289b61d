"""The figures a set of CSVs supports, built by the figure modules (ladder, sweep, roofline,
occupancy, and suites where rows carry a model and a layer), and draw(), which writes them as
PNGs; the top of lab/plots/.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.base.errors import LabError
from lab.plots.common import DPI, Source, read_source, select_results
from lab.plots.ladder import ladder_figure
from lab.plots.occupancy import occupancy_figure
from lab.plots.roofline import roofline_figure
from lab.plots.suites import suites_figure
from lab.plots.sweep import sweep_figure

PLOTS = ("ladder", "sweep", "roofline", "occupancy", "suites")


def _read_all(csv_paths) -> list[Source]:
    if isinstance(csv_paths, (str, Path)):
        csv_paths = [csv_paths]
    if not csv_paths:
        raise LabError("give at least one CSV to plot")
    return [read_source(p) for p in csv_paths]


def _labelled(sources: list[Source]) -> bool:
    """Some results CSV has rows labelled with a model or a layer (a shape suite's rows)."""
    for s in sources:
        for col in ("model", "layer"):
            if col in s.df.columns and (s.df[col].fillna("").astype(str) != "").any():
                return True
    return False


def _build(sources: list[Source], marks: dict | None = None,
           only: tuple = ()) -> tuple[dict, dict, list[str]]:
    """(figures by name, reasons by skipped name, notes). `only`: those figures alone."""
    res_sources = [s for s in sources if s.kind == "results"]
    prof_sources = [s for s in sources if s.kind == "profile"]
    figs, skipped, notes = {}, {}, []
    results = select_results(res_sources)
    if results.left_out_layouts and (not only or set(only) - {"suites", "roofline"}):
        notes.append(f"rows of layout {', '.join(results.left_out_layouts)} left out (nn drawn)")
    builders = {
        "ladder": lambda: ladder_figure(results, marks) if res_sources
        else (None, "no lab.compare CSV given"),
        "sweep": lambda: sweep_figure(results) if res_sources
        else (None, "no lab.compare CSV given"),
        "roofline": lambda: roofline_figure(prof_sources) if prof_sources
        else (None, "no lab.profile CSV (a CSV with an intensity column) given"),
        "occupancy": lambda: occupancy_figure(results) if res_sources
        else (None, "no lab.compare CSV given"),
        # every layout of a suite's rows (they run in their suite's, nt for the LLM suites)
        "suites": lambda: suites_figure(res_sources) if res_sources
        else (None, "no lab.compare CSV given"),
    }
    for name in only or PLOTS:
        if name == "suites" and not only and not _labelled(res_sources):
            continue  # not a suite's run: nothing to say
        fig, reason = builders[name]()
        if fig is None:
            skipped[name] = reason
        else:
            figs[name] = fig
    return figs, skipped, notes


def figures(csv_paths, marks: dict | None = None) -> dict:
    """The figures these CSVs support, by name (ladder, sweep, roofline, occupancy, and suites
    for a shape suite's rows): matplotlib Figures on the Agg canvas, not written anywhere.
    `marks` ({stage: words}): stages whose square-shape bars the ladder leaves out, the words in
    their place. LabError for a CSV that is missing or not a lab results file."""
    return _build(_read_all(csv_paths), marks)[0]


def check_out_dir(out_dir) -> Path:
    """Refuse (one LabError sentence) an output folder that cannot be written; create it."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise LabError(f"cannot write plots into {out}: it is a file, not a folder")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise LabError(f"cannot write plots into {out}: {parent} is a file, not a folder")
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create the folder {out}: {exc.strerror or exc}") from None
    probe = out / ".lab_plot_write_test"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise LabError(f"cannot write plots into {out}: {exc.strerror or exc}") from None
    return out


def draw(csv_paths, out_dir, file=None, metadata: dict | None = None,
         marks: dict | None = None, only: tuple = (), out_file=None) -> list[Path]:
    """Write <out_dir>/ladder.png, sweep.png, roofline.png, occupancy.png (and suites.png for a
    shape suite's rows) for what the CSVs support; return the paths written. One line (on
    `file`, default stderr) says which plots were skipped and why. `metadata` goes into every
    PNG's text chunks (lab.results records the files a plot was drawn from as "Source");
    `marks` as for figures(); `only`: those figures alone; `out_file`: the one figure of `only`
    written to that file instead of <out_dir>/<name>.png. LabError (one sentence) for a missing
    CSV, a CSV that is not a lab results file, or an output folder that cannot be written."""
    sources = _read_all(csv_paths)  # every CSV checked before the folder is created
    if out_file is not None:
        out_file = Path(out_file)
        out_dir = out_file.parent
    out = check_out_dir(out_dir)
    figs, skipped, notes = _build(sources, marks, only)
    written = []
    for name, fig in figs.items():
        path = out_file if out_file is not None else out / f"{name}.png"
        try:
            fig.savefig(path, dpi=DPI, metadata=metadata)
        except OSError as exc:
            raise LabError(f"cannot write {path}: {exc.strerror or exc}") from None
        finally:
            fig.clear()
        written.append(path)
    parts = []
    if skipped:
        parts.append("plots skipped: " + "; ".join(f"{n} ({why})" for n, why in skipped.items()))
    parts += notes
    if parts:
        from lab.cli import note

        note("; ".join(parts), file=file or sys.stderr)
    return written
