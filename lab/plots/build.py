"""The figures a set of CSVs supports, built by the four figure modules (ladder, sweep,
roofline, occupancy), and draw(), which writes them as PNGs; the top of lab/plots/.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.base.errors import LabError
from lab.plots.common import DPI, Source, read_source, select_results
from lab.plots.ladder import ladder_figure
from lab.plots.occupancy import occupancy_figure
from lab.plots.roofline import roofline_figure
from lab.plots.sweep import sweep_figure

PLOTS = ("ladder", "sweep", "roofline", "occupancy")


def _read_all(csv_paths) -> list[Source]:
    if isinstance(csv_paths, (str, Path)):
        csv_paths = [csv_paths]
    if not csv_paths:
        raise LabError("give at least one CSV to plot")
    return [read_source(p) for p in csv_paths]


def _build(sources: list[Source]) -> tuple[dict, dict, list[str]]:
    """(figures by name, reasons by skipped name, notes)."""
    res_sources = [s for s in sources if s.kind == "results"]
    prof_sources = [s for s in sources if s.kind == "profile"]
    figs, skipped, notes = {}, {}, []
    results = select_results(res_sources)
    if results.left_out_layouts:
        notes.append(f"rows of layout {', '.join(results.left_out_layouts)} left out (nn drawn)")
    builders = {
        "ladder": lambda: ladder_figure(results) if res_sources
        else (None, "no lab.compare CSV given"),
        "sweep": lambda: sweep_figure(results) if res_sources
        else (None, "no lab.compare CSV given"),
        "roofline": lambda: roofline_figure(prof_sources) if prof_sources
        else (None, "no lab.profile CSV (a CSV with an intensity column) given"),
        "occupancy": lambda: occupancy_figure(results) if res_sources
        else (None, "no lab.compare CSV given"),
    }
    for name in PLOTS:
        fig, reason = builders[name]()
        if fig is None:
            skipped[name] = reason
        else:
            figs[name] = fig
    return figs, skipped, notes


def figures(csv_paths) -> dict:
    """The figures these CSVs support, by name (ladder, sweep, roofline, occupancy): matplotlib
    Figures on the Agg canvas, not written anywhere. LabError for a CSV that is missing or not a
    lab results file."""
    return _build(_read_all(csv_paths))[0]


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


def draw(csv_paths, out_dir, file=None, metadata: dict | None = None) -> list[Path]:
    """Write <out_dir>/ladder.png, sweep.png, roofline.png, occupancy.png for what the CSVs
    support; return the paths written. One line (on `file`, default stderr) says which plots
    were skipped and why. `metadata` goes into every PNG's text chunks (lab.results records the
    files a plot was drawn from as "Source"). LabError (one sentence) for a missing CSV, a CSV
    that is not a lab results file, or an output folder that cannot be written."""
    sources = _read_all(csv_paths)  # every CSV checked before the folder is created
    out = check_out_dir(out_dir)
    figs, skipped, notes = _build(sources)
    written = []
    for name, fig in figs.items():
        path = out / f"{name}.png"
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
