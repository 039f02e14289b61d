"""`python -m lab.plot RUN.csv [RUN2.csv ...] -o DIR`: PNG figures of lab results (no GPU needed).

From `lab.compare` CSVs (GPU rows):

- ladder.png: % of cuBLAS per stage, CUDA and Triton bars side by side (stages in registry order),
  the cuBLAS = 100% line, and siboehm/SGEMM_CUDA's kernels measured on the same H100 as markers
  on the fp32 bars at 4096^3. One precision: a panel per size (six at most, 4096^3 and 1025^3
  first, then the largest sizes). Several precisions: every stage at one size (4096^3 when
  there), fp32 across the top, a panel per tensor-core precision below, each bar with its value
  and "no CUDA" where a stage has no kernel of a backend in that precision.
- sweep.png: TFLOP/s against size (three or more sizes, evenly spaced in increasing order of
  M*N*K), a line per stage and backend, cuBLAS as the reference; a panel per precision (fp32 in
  a row of its own when others are drawn too), one axis caption for the figure.
- occupancy.png: TFLOP/s (log) against theoretical occupancy at one size (4096^3 when there), one
  point per kernel, the points of one occupancy side by side, fp32 and the tensor-core
  precisions in a panel each: occupancy alone does not decide speed.

From `lab.profile` CSVs (a column `intensity`):

- roofline.png: each kernel at its arithmetic intensity and achieved TFLOP/s under the DRAM roof
  and a compute roof per precision; where six or more kernels crowd below one roof, a second
  panel shows them closer.

Rows drawn: status pass (the ladder also needs a pct_cublas, the others a gflops). A CSV that has
nn rows gives only those (its other layouts are left out, and the line below says so); a CSV with
no nn row gives every layout, a panel each. The same row (stage, backend, precision, layout, size)
in two CSVs: the later CSV's. Point labels are placed where they overlap no other text or point
(a label with no room is left out of the occupancy and roofline plots; the legend names it).

Each figure's title names the GPU, precision, date and commit from the CSV's environment file
(`<name>.env.json` beside it; for a lab.profile CSV without one, the GPU its peaks were read off).
A plot the data cannot support is skipped, and one line (stderr) says which and why.
Python: `lab.plot.draw(csv_paths, out_dir)` writes the PNGs and returns their paths;
`lab.plot.figures(csv_paths)` returns the matplotlib Figures without writing anything.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lab.cli import ArgumentParser, guarded
from lab.errors import LabError
from lab.stages import PUBLISHED_LABEL, STAGES

PLOTS = ("ladder", "sweep", "roofline", "occupancy")
FIGSIZE = (10, 6)
DPI = 120
FONTSIZE = 10
MAX_PANELS = 6
PREFERRED_SIZES = ((4096, 4096, 4096), (1025, 1025, 1025))
MIN_SWEEP_SIZES = 3
ROOF_ZOOM_MIN = 6  # kernels crowding one roof that earn the roofline its second panel
MAX_LABELS = 20  # text labels on the occupancy plot, at most (else the legend alone names them)
BACKEND_LABEL = {"cuda": "CUDA", "triton": "Triton", "cublas": "cuBLAS"}
BACKEND_COLOR = {"cuda": "#3b6fb6", "triton": "#e08a1e"}
BACKEND_MARKER = {"cuda": "o", "triton": "s", "cublas": "*"}
# The published SGEMM ladder's % of cuBLAS for the stage each of its kernels corresponds to, as
# the registry records it (lab/stages.py: Stage.published, PUBLISHED_LABEL).
SGEMM_CUDA_LABEL = PUBLISHED_LABEL
SGEMM_CUDA_PCT = {s.name: s.published for s in STAGES if s.published is not None}
RESULT_COLUMNS = ("stage", "backend", "M", "N", "K", "status")
PROFILE_COLUMNS = ("stage", "backend", "intensity", "achieved_tflops", "peak_tflops",
                   "peak_bw_tbs")


# ----------------------------------------------------------------------------------- reading


@dataclass
class Source:
    path: Path
    df: object  # pandas DataFrame
    env: dict
    kind: str  # "results" | "profile"


def _env_of(path: Path) -> dict:
    """The environment file beside a CSV (`run.env.json`, or `run.csv.env.json`); {} if none."""
    for env_path in (path.with_suffix(".env.json"), path.with_name(path.name + ".env.json")):
        if env_path.is_file():
            try:
                env = json.loads(env_path.read_text())
            except (OSError, ValueError):
                return {}
            return env if isinstance(env, dict) else {}
    return {}


def read_source(path) -> Source:
    """One CSV: a lab.compare results file or a lab.profile file; LabError for anything else."""
    import pandas as pd

    from lab.report import read_csv

    path = Path(path)
    if not path.exists():
        raise LabError(f"cannot read {path}: no such file")
    if not path.is_file():
        raise LabError(f"cannot read {path}: it is not a file")
    try:
        df = read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError,
            TypeError) as exc:
        reason = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
        raise LabError(f"{path} is not a lab results file (it cannot be read as a CSV: "
                       f"{reason})") from None
    except OSError as exc:
        raise LabError(f"cannot read {path}: {exc.strerror or exc}") from None
    cols = set(df.columns)
    if set(PROFILE_COLUMNS) <= cols:
        kind = "profile"
    elif set(RESULT_COLUMNS) <= cols:
        kind = "results"
    else:
        raise LabError(f"{path} is not a lab results file: it has neither the columns of a "
                       f"lab.compare CSV ({', '.join(RESULT_COLUMNS)}) nor those of a lab.profile "
                       f"CSV ({', '.join(PROFILE_COLUMNS)})")
    env = _env_of(path)
    if kind == "profile" and not env.get("gpu") and "peaks_source" in cols:
        # lab.profile records the GPU it read the peaks off: "<name>: 132 SMs x 128 x 2 x ..."
        for text in df["peaks_source"].dropna().astype(str):
            m = re.match(r"(.+?): \d+ SMs x ", text)
            if m:
                env = {**env, "gpu": m.group(1)}
                break
    return Source(path, df, env, kind)


def distinct(values) -> list:
    """The values in first-seen order, once each, without None and empty strings."""
    out = []
    for v in values:
        if v not in (None, "") and v not in out:
            out.append(v)
    return out

def _reference_marks(ax, stages, backends, width, marked: bool) -> None:
    """The cuBLAS = 100% line, and (when `marked`) siboehm/SGEMM_CUDA's kernels as diamonds on
    the CUDA bars of the stages they correspond to."""
    ax.axhline(100, color="black", lw=1.5, ls="--", label="cuBLAS = 100%", gid="cublas-100")
    if not marked:
        return
    cuda_j = backends.index("cuda") if "cuda" in backends else 0
    pts = [(x + (cuda_j - (len(backends) - 1) / 2) * width, SGEMM_CUDA_PCT[s])
           for x, s in enumerate(stages) if s in SGEMM_CUDA_PCT]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="none", marker="D", ms=6,
                color="black", mec="white", mew=0.8, label=SGEMM_CUDA_LABEL, gid="sgemm_cuda",
                zorder=5)


def _bar_legend(fig, backends) -> None:
    """One legend under the figure for every panel's bars and marks: backends first, then the
    cuBLAS line, then the rest (each label once)."""
    handles, labels = {}, []
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    first = [BACKEND_LABEL.get(b, b) for b in backends] + ["cuBLAS = 100%"]
    labels.sort(key=lambda lab: first.index(lab) if lab in first else len(first))
    fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center",
               ncols=len(labels), fontsize=FONTSIZE, frameon=False)



def title_suffix(sources: list[Source], precisions=()) -> str:
    """'GPU, precision, date, commit abc1234' from the environment files (missing parts left out;
    differing values joined with ' / ')."""
    gpus = distinct(s.env.get("gpu") for s in sources)
    dates = distinct(str(s.env["timestamp"])[:10] for s in sources if s.env.get("timestamp"))
    commits = distinct(s.env.get("commit") for s in sources)
    parts = [" / ".join(map(str, gpus)), " / ".join(map(str, distinct(precisions))),
             " / ".join(dates), ("commit " + " / ".join(map(str, commits))) if commits else ""]
    return ", ".join(p for p in parts if p)


def _set_title(fig, what: str, sources: list[Source], precisions=()) -> None:
    suffix = title_suffix(sources, precisions)
    fig.suptitle(what + (f"\n{suffix}" if suffix else ""), fontsize=FONTSIZE + 2)


# --------------------------------------------------------------------------- selecting rows


def _stage_order(labels) -> list[str]:
    """Variant labels in registry order (lab.stages.STAGES), a stage's variants after it, then
    labels the registry does not know, in the order they came."""
    from lab.stages import STAGES

    rank = {s.name: i for i, s in enumerate(STAGES)}
    labels = distinct(labels)
    return sorted(labels, key=lambda lab: (rank.get(lab.split(":")[0], len(rank)),
                                           lab != lab.split(":")[0], labels.index(lab)))


def _stage_colors(labels) -> dict:
    """A colour per variant label, the same in every figure: a registry stage keeps its own
    (C0 naive, C1 coalesced, ...), its first variant the light shade of it (tab20), any other
    label the next colour of tab20b."""
    from matplotlib import colormaps

    from lab.stages import STAGES

    index = {s.name: i for i, s in enumerate(STAGES) if i < 10}
    spare = (colormaps["tab20b"](i) for i in [*range(0, 20, 4), *range(2, 20, 4),
                                              *range(1, 20, 2)] * 100)
    colors, light_used = {}, set()
    for lab in labels:
        base = lab.split(":")[0]
        if lab == "cublas":
            colors[lab] = "black"
        elif lab in index:
            colors[lab] = f"C{index[lab]}"
        elif base in index and base not in light_used:
            light_used.add(base)
            colors[lab] = colormaps["tab20"](2 * index[base] + 1)
        else:
            colors[lab] = next(spare)
    return colors


@dataclass
class Results:
    df: object  # GPU rows of every results CSV, layout rule applied, duplicates: last CSV wins
    sources: list
    left_out_layouts: list = field(default_factory=list)


def _results(sources: list[Source]) -> Results:
    """The results CSVs' rows to draw: only nn rows of a CSV that has any (the other layouts are
    left out), every layout of a CSV that has none. A row given twice (same stage, backend,
    precision, layout and size): the later CSV's."""
    import pandas as pd

    frames, left_out = [], []
    for s in sources:
        df = s.df.copy()
        if "layout" not in df.columns:
            df["layout"] = "nn"
        df["layout"] = df["layout"].replace("", "nn")
        if "precision" not in df.columns:
            df["precision"] = ""
        if (df["layout"] == "nn").any():
            left_out += [x for x in df["layout"].unique() if x != "nn"]
            df = df[df["layout"] == "nn"]
        frames.append(df)
    if not frames:
        return Results(pd.DataFrame(columns=[*RESULT_COLUMNS, "layout", "precision"]), sources)
    df = pd.concat(frames, ignore_index=True)
    df = df.drop_duplicates(["stage", "backend", "precision", "layout", "M", "N", "K"], keep="last")
    return Results(df.reset_index(drop=True), sources, distinct(left_out))


def _passed(df, column: str):
    """Rows with status pass and a value in `column`."""
    if column not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "pass") & df[column].notna()]


def _size_label(M: int, N: int, K: int) -> str:
    return f"{M}\u00b3" if M == N == K else f"{M}x{N}x{K}"


# ------------------------------------------------------------------------------------ figures


def _new_figure(figsize=FIGSIZE, **kw):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained", **kw)
    FigureCanvasAgg(fig)  # the Agg canvas: no pyplot, no display, nothing global to close
    return fig


def _style(ax) -> None:
    ax.tick_params(labelsize=FONTSIZE)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def ladder_figure(results: Results):
    """% of cuBLAS per stage, CUDA and Triton bars, one panel per (precision, layout, size);
    (figure, None) or (None, reason)."""
    df = _passed(results.df, "pct_cublas")
    df = df[df["backend"] != "cublas"]
    if df.empty:
        return None, "no passing GPU row with a % of cuBLAS"
    if len(distinct(df["precision"])) > 1:
        return _ladder_by_precision(df, results)
    keys = distinct(zip(df["precision"], df["layout"], df["M"], df["N"], df["K"]))
    if len(keys) > MAX_PANELS:
        preferred = [k for k in keys if tuple(k[2:]) in PREFERRED_SIZES]
        rest = sorted((k for k in keys if k not in preferred), key=lambda k: -k[2] * k[3] * k[4])
        keys = (preferred + rest)[:MAX_PANELS]
    # squares by size, then the other shapes by M*N*K
    keys.sort(key=lambda k: (k[0], k[1] != "nn", k[1], not k[2] == k[3] == k[4],
                             k[2] * k[3] * k[4], k[2:]))
    stages = _stage_order(df["stage"])
    backends = [b for b in ("cuda", "triton") if b in set(df["backend"])]
    backends += sorted(set(df["backend"]) - set(backends))
    several_prec = len({k[0] for k in keys}) > 1
    n = len(keys)
    many = len(stages) > 10  # variants: wider panels, two across at most
    ncols = (min(n, 2) if many else n if n <= 3 else (2 if n == 4 else 3))
    nrows = math.ceil(n / ncols)
    if nrows == 1:
        figsize = (12, 6.5) if many else (10, 6)
    else:
        figsize = (12 if many else 11, (4.2 if many else 4.0) * nrows + 1.2)
    fig = _new_figure(figsize)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    width = 0.8 / len(backends)
    top = max(110.0, float(df["pct_cublas"].max()) * 1.08)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.remove()
            continue
        prec, layout, M, N, K = keys[i]
        part = df[(df["precision"] == prec) & (df["layout"] == layout) & (df["M"] == M)
                  & (df["N"] == N) & (df["K"] == K)]
        marked = ((M, N, K) == (4096, 4096, 4096) and prec in ("fp32", "") and layout == "nn")
        for j, backend in enumerate(backends):
            rows = part[part["backend"] == backend].set_index("stage")["pct_cublas"]
            xs = [x + (j - (len(backends) - 1) / 2) * width for x, s in enumerate(stages)
                  if s in rows.index]
            ys = [float(rows[s]) for s in stages if s in rows.index]
            bars = ax.bar(xs, ys, width, color=BACKEND_COLOR.get(backend, f"C{j + 2}"),
                          label=BACKEND_LABEL.get(backend, backend))
            for bar, s, y in zip(bars, [s for s in stages if s in rows.index], ys):
                bar.set_gid(f"{s}/{backend}")
                if y < 0.06 * top:  # a bar too short to read: its value above it (and above
                    # the SGEMM_CUDA marker of the same stage, if that is drawn there)
                    ref = SGEMM_CUDA_PCT.get(s, 0.0) if marked and backend == "cuda" else 0.0
                    ax.annotate(f"{y:.1f}", (bar.get_x() + bar.get_width() / 2, max(y, ref)),
                                xytext=(0, 8 if ref else 3), textcoords="offset points",
                                ha="center", va="bottom", rotation=90, fontsize=FONTSIZE - 1,
                                color=BACKEND_COLOR.get(backend, "black"))
        _reference_marks(ax, stages, backends, width, marked)
        name = _size_label(M, N, K)
        extra = [p for p in ((prec if several_prec else ""),
                             (f"layout {layout}" if layout != "nn" else "")) if p]
        ax.set_title(name + (f" ({', '.join(extra)})" if extra else ""), fontsize=FONTSIZE + 1)
        ax.set_xticks(range(len(stages)))
        below = i + ncols < n  # a panel under this one shows the stage names
        # many (long) variant labels: upright text, which never runs into its neighbours
        ax.set_xticklabels([] if below else stages, rotation=90 if many else 40, ha="right",
                           va="center" if many else "top", rotation_mode="anchor")
        pad = 0.6 + max(0, 4 - len(stages)) / 2  # a few stages: bars no wider than with four
        ax.set_xlim(-pad, len(stages) - 1 + pad)
        ax.set_ylim(0, top)
        _style(ax)
        if i % ncols == 0:
            ax.set_ylabel("% of cuBLAS (higher is faster)", fontsize=FONTSIZE)
    _bar_legend(fig, backends)
    _set_title(fig, "Speed of each stage as % of cuBLAS (same run, same shape)", results.sources,
               [k[0] for k in keys])
    return fig, None


def ladder_size(df):
    """The one size a ladder of several precisions is drawn at: 4096^3 (then 1025^3) when rows
    have it, else the size with the most rows (the largest on a tie)."""
    sizes = distinct(zip(df["M"], df["N"], df["K"]))
    for preferred in PREFERRED_SIZES:
        if preferred in sizes:
            return preferred
    count = {k: int(((df["M"] == k[0]) & (df["N"] == k[1]) & (df["K"] == k[2])).sum())
             for k in sizes}
    return max(sizes, key=lambda k: (count[k], k[0] * k[1] * k[2]))


def _precision_order(precisions) -> list:
    from lab.stages import PRECISIONS

    rank = {p: i for i, p in enumerate(PRECISIONS)}
    return sorted(distinct(precisions), key=lambda p: (rank.get(p, len(rank)), str(p)))


def baseline_of(precision: str) -> str:
    """The cuBLAS precision a row of this precision is compared with (3xtf32: fp32)."""
    return "fp32" if precision in ("3xtf32", "fp32", "") else precision


def _value_labels(ax, bars, values, refs, color, top) -> None:
    """Each bar's value above it (above its reference marker when that is higher)."""
    for bar, y, ref in zip(bars, values, refs):
        above = max(y, ref) if ref is not None else y
        near = ref is not None and ref > y - 0.04 * top
        ax.annotate(f"{y:.0f}" if y >= 9.95 else f"{y:.1f}",
                    (bar.get_x() + bar.get_width() / 2, above if near else y),
                    xytext=(0, 7 if near else 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=FONTSIZE - 1, color=color, gid="value",
                    bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none"))


def _ladder_by_precision(df, results: Results):
    """Several precisions: every stage at one size (4096^3 when there), a panel per precision
    and layout: fp32 (the CUDA-core ladder) across the top, the tensor-core precisions in a row
    below, each bar with its value, siboehm/SGEMM_CUDA's kernels on the fp32 panel at 4096^3."""
    size = ladder_size(df)
    M, N, K = size
    df = df[(df["M"] == M) & (df["N"] == N) & (df["K"] == K)]
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    keys = [(p, lay) for lay in layouts for p in _precision_order(df["precision"])
            if ((df["precision"] == p) & (df["layout"] == lay)).any()]
    backends = [b for b in ("cuda", "triton") if b in set(df["backend"])]
    backends += sorted(set(df["backend"]) - set(backends))
    width = 0.8 / len(backends)
    wide = [k for k in keys if k[0] in ("fp32", "")]  # the long ladder: a row of its own
    rest = [k for k in keys if k not in wide]
    ncols = max(1, min(4, len(rest)))
    rows_of_rest = math.ceil(len(rest) / ncols) if rest else 0
    fig = _new_figure((11, 4.6 * len(wide) + 4.0 * rows_of_rest + 1.3))
    grid = fig.add_gridspec(len(wide) + rows_of_rest, ncols,
                            height_ratios=[1.2] * len(wide) + [1.0] * rows_of_rest)
    placed = [(k, fig.add_subplot(grid[i, :])) for i, k in enumerate(wide)]
    shared = None
    for i, k in enumerate(rest):
        ax = fig.add_subplot(grid[len(wide) + i // ncols, i % ncols], sharey=shared)
        shared = shared or ax
        placed.append((k, ax))
    rest_top = max([110.0] + [float(df.loc[(df["precision"] == p) & (df["layout"] == lay),
                                           "pct_cublas"].max()) * 1.15 for p, lay in rest])
    for (prec, layout), ax in placed:
        part = df[(df["precision"] == prec) & (df["layout"] == layout)]
        stages = _stage_order(part["stage"])
        top = (max(110.0, float(part["pct_cublas"].max()) * 1.15) if (prec, layout) in wide
               else rest_top)
        marked = size == (4096, 4096, 4096) and prec in ("fp32", "") and layout == "nn"
        for j, backend in enumerate(backends):
            rows = part[part["backend"] == backend].set_index("stage")["pct_cublas"]
            here = [s for s in stages if s in rows.index]
            xs = [stages.index(s) + (j - (len(backends) - 1) / 2) * width for s in here]
            ys = [float(rows[s]) for s in here]
            color = BACKEND_COLOR.get(backend, f"C{j + 2}")
            bars = ax.bar(xs, ys, width, color=color, label=BACKEND_LABEL.get(backend, backend))
            for bar, s in zip(bars, here):
                bar.set_gid(f"{s}/{backend}")
            refs = [SGEMM_CUDA_PCT.get(s) if marked and backend == "cuda" else None
                    for s in here]
            _value_labels(ax, bars, ys, refs, "black", top)
            missing = [s for s in stages if s not in rows.index]
            for s in missing:  # this stage has no kernel of this backend in this precision
                ax.annotate(f"no {BACKEND_LABEL.get(backend, backend)}",
                            (stages.index(s) + (j - (len(backends) - 1) / 2) * width, 0),
                            xytext=(0, 3), textcoords="offset points", ha="center",
                            va="bottom", rotation=90, fontsize=FONTSIZE - 2, color="grey",
                            gid="missing")
        _reference_marks(ax, stages, backends, width, marked)
        name = prec or "fp32"
        title = f"{name}: % of cuBLAS {baseline_of(prec)}"
        if name == "fp32":
            title = "fp32 on CUDA cores: % of cuBLAS fp32"
        if layout != "nn":
            title += f", layout {layout}"
        ax.set_title(title, fontsize=FONTSIZE + 1)
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels(stages, rotation=30 if len(stages) > 4 else 0,
                           ha="right" if len(stages) > 4 else "center",
                           rotation_mode="anchor")
        ax.set_xlim(-0.6, len(stages) - 0.4)
        ax.set_ylim(0, top)
        _style(ax)
        if ax is placed[0][1] or ax.get_subplotspec().colspan.start == 0:
            ax.set_ylabel("% of cuBLAS", fontsize=FONTSIZE)
        else:
            ax.tick_params(axis="y", labelleft=False)
    _bar_legend(fig, backends)
    _set_title(fig, f"Every stage at {_size_label(*size)}: % of cuBLAS at the same precision "
               "(higher is faster)", results.sources)
    return fig, None


def _hollow(ax, rows, **style) -> None:
    """White-filled markers over the points of shapes that are not squares (M, N, K differ)."""
    odd = rows[~((rows["M"] == rows["N"]) & (rows["N"] == rows["K"]))]
    if not odd.empty:
        ax.plot(odd["x"], odd["gflops"] / 1000, ls="none", mfc="white", mew=1.5,
                **{"zorder": 3, **style}, gid="not-square")


def sweep_figure(results: Results):
    """TFLOP/s against size: a line per stage x backend, cuBLAS thick black; a panel per
    precision (and layout), three across at most. The sizes sit evenly spaced in increasing
    order of M*N*K (a log axis would draw 1024 and 1025 on top of each other)."""
    import matplotlib.ticker as mticker

    df = _passed(results.df, "gflops")
    sizes = distinct(zip(df["M"], df["N"], df["K"]))
    if len(sizes) < MIN_SWEEP_SIZES:
        return None, (f"{len(sizes)} size{'s' if len(sizes) != 1 else ''} with timed rows, "
                      f"needs {MIN_SWEEP_SIZES}")
    sizes = sorted(sizes, key=lambda k: (k[0] * k[1] * k[2], k))
    x_of = {k: float(i) for i, k in enumerate(sizes)}
    precisions = _precision_order(df["precision"])
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    panels = [(p, lay) for lay in layouts for p in precisions
              if ((df["precision"] == p) & (df["layout"] == lay)).any()]
    labels = [_size_label(*k) for k in sizes]
    rotate = len(sizes) > 5 or max(len(t) for t in labels) > 6
    # fp32 (the long CUDA-core ladder, most lines) gets a row of its own when other precisions
    # are drawn too; the others share rows of up to four, and their y axis
    wide = [k for k in panels if k[0] in ("fp32", "")] if len(panels) > 1 else []
    rest = [k for k in panels if k not in wide]
    ncols = max(1, min(4 if wide else 3, len(rest)))
    nrows = math.ceil(len(rest) / ncols)
    fig = _new_figure((12, 5.0 * len(wide) + 4.2 * nrows + 1.4) if len(panels) > 1 else (10, 6))
    grid = fig.add_gridspec(len(wide) + nrows, ncols,
                            height_ratios=[1.25] * len(wide) + [1.0] * nrows)
    placed, shared = [], None
    for i, key in enumerate(wide):
        placed.append((key, fig.add_subplot(grid[i, :]), True))
    for i, key in enumerate(rest):
        ax = fig.add_subplot(grid[len(wide) + i // ncols, i % ncols], sharey=shared)
        shared = shared or ax
        placed.append((key, ax, i % ncols == 0))
    stages = _stage_order(df.loc[df["backend"] != "cublas", "stage"])
    colors = _stage_colors(stages)
    for (prec, layout), ax, first_column in placed:
        part = df[(df["precision"] == prec) & (df["layout"] == layout)]
        base = part[part["backend"] == "cublas"]
        if not base.empty:
            base = base.assign(x=[x_of[(m, n, k)] for m, n, k in zip(base.M, base.N, base.K)])
            base = base.sort_values("x")
            ax.plot(base["x"], base["gflops"] / 1000, color="black", lw=3.5, marker="o", ms=6,
                    label="cuBLAS", gid="cublas", zorder=4)
            _hollow(ax, base, color="black", marker="o", ms=8, zorder=4)
        for s in stages:
            for backend, ls in (("cuda", "-"), ("triton", "--")):
                rows = part[(part["stage"] == s) & (part["backend"] == backend)]
                if rows.empty:
                    continue
                rows = rows.assign(x=[x_of[(m, n, k)] for m, n, k in zip(rows.M, rows.N, rows.K)])
                rows = rows.sort_values("x")
                ax.plot(rows["x"], rows["gflops"] / 1000, color=colors[s], ls=ls, lw=1.8,
                        marker="o" if backend == "cuda" else "s", ms=4.5,
                        label=f"{s}/{backend}", gid=f"{s}/{backend}")
                _hollow(ax, rows, color=colors[s], marker="o" if backend == "cuda" else "s",
                        ms=6)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(mticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xticks(range(len(sizes)), labels, rotation=30 if rotate else 0,
                      ha="right" if rotate else "center", rotation_mode="anchor")
        ax.set_xlim(-0.4, len(sizes) - 0.6)
        _style(ax)
        ax.grid(True, axis="x", alpha=0.3)
        extra = [p for p in ((f"{prec} (cuBLAS {baseline_of(prec)} for reference)"
                              if prec == "3xtf32" else prec if len(precisions) > 1 else ""),
                             (f"layout {layout}" if layout != "nn" else "")) if p]
        if extra:
            ax.set_title(", ".join(extra), fontsize=FONTSIZE + 1)
        if first_column:
            ax.set_ylabel("TFLOP/s (log scale)", fontsize=FONTSIZE)
        else:
            ax.tick_params(axis="y", labelleft=False)
    fig.supxlabel("problem size M x N x K (squares as N\u00b3), in increasing order of "
                  "M\u00b7N\u00b7K", fontsize=FONTSIZE)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="black", lw=3.5, label="cuBLAS")]
    handles += [Line2D([], [], color=colors[s], lw=2.5, label=s) for s in stages]
    present = set(df["backend"])
    handles += [Line2D([], [], color="grey", ls=ls, marker=m, label=lab)
                for b, ls, m, lab in (("cuda", "-", "o", "CUDA (solid)"),
                                      ("triton", "--", "s", "Triton (dashed)")) if b in present]
    if any(not m == n == k for m, n, k in sizes):
        handles.append(Line2D([], [], color="grey", ls="none", marker="o", mfc="white", ms=7,
                              label="hollow: not a square"))
    fig.legend(handles=handles, loc="outside right center", fontsize=FONTSIZE, frameon=False)
    _set_title(fig, "TFLOP/s against problem size", results.sources, precisions)
    return fig, None


def _place_labels(ax, points: list[tuple[float, float, str]], fontsize=FONTSIZE - 1,
                  avoid=(), obstacles=(), radii=(7, 14, 24, 36, 50), fallback=True) -> list:
    """Annotate each (x, y, text) near its point so that labels overlap neither each other, nor
    any point (`points` and `obstacles`, (x, y) in data units), nor the artists in `avoid`:
    greedy, in display space, nearest free spot first; a label set further out gets a thin
    leader line to its point. A label with no free spot goes on a white box at the nearest one
    (fallback=True) or is left out (fallback=False: the legend names the point)."""
    from matplotlib.text import Text

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # final axes positions (constrained layout) before measuring
    taken = []
    for x, y in [(p[0], p[1]) for p in points] + list(obstacles):
        px, py = ax.transData.transform((x, y))
        taken.append((px - 6, py - 6, px + 6, py + 6))
    for artist in avoid:
        bb = artist.get_window_extent(renderer)
        taken.append((bb.x0, bb.y0, bb.x1, bb.y1))
    axbb = ax.get_window_extent(renderer)
    candidates = []
    for r in radii:
        for deg in (0, 180, 25, -25, 155, -155, 55, -55, 125, -125, 90, -90):
            c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
            ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
            va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
            candidates.append((r * c, r * s, ha, va, r > 10))

    def overlaps(bb):
        return any(bb.x0 < t[2] and bb.x1 > t[0] and bb.y0 < t[3] and bb.y1 > t[1]
                   for t in taken)

    texts = []
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    for i in order:
        x, y, text = points[i][:3]
        best = None
        for dx, dy, ha, va, leader in candidates:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha,
                            va=va, fontsize=fontsize, zorder=6, gid="label",
                            arrowprops=dict(arrowstyle="-", color="grey", lw=0.7, shrinkA=0,
                                            shrinkB=5) if leader else None)
            t.update_positions(renderer)  # the offset applied before measuring the text alone
            bb = Text.get_window_extent(t, renderer)
            inside = (bb.x0 >= axbb.x0 and bb.x1 <= axbb.x1 and bb.y0 >= axbb.y0
                      and bb.y1 <= axbb.y1)
            if inside and not overlaps(bb):
                best = t
                break
            t.remove()
        if best is None and not fallback:
            continue
        if best is None:  # no free spot: the nearest one, on a white box
            best = ax.annotate(text, (x, y), xytext=(7, 2), textcoords="offset points",
                               ha="left", va="bottom", fontsize=fontsize, zorder=6, gid="label",
                               bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none",
                                         alpha=0.8))
        # out of the constrained layout: a label near an edge must not resize the axes after
        # the free spots were measured (that would move the points under the labels)
        best.set_in_layout(False)
        best.update_positions(renderer)
        bb = Text.get_window_extent(best, renderer)
        taken.append((bb.x0 - 2, bb.y0 - 2, bb.x1 + 2, bb.y1 + 2))
        texts.append(best)
    return texts


def _roof_name(precision) -> str:
    """'fp32 CUDA-core' or '<precision> tensor-core': the unit whose peak a compute roof is."""
    p = str(precision) if precision == precision and precision not in (None, "") else "fp32"
    return "FP32" if p == "fp32" else f"{p} tensor-core"


def _crowded(df) -> "object | None":
    """The rows of the roof with the most kernels near it (above its ridge, at 25% of its peak or
    more) when there are at least ROOF_ZOOM_MIN of them: they crowd one corner of a log-log
    roofline, and a second panel shows them closer."""
    best = None
    for peak, part in df.groupby("peak_tflops"):
        near = part[(part["intensity"] >= part["ridge"]) & (part["achieved_tflops"] >= 0.25 * peak)]
        if len(near) >= ROOF_ZOOM_MIN and (best is None or len(near) > len(best)):
            best = near
    return best


def roofline_figure(sources: list[Source]):
    """Each profiled kernel at (intensity, achieved TFLOP/s) under the DRAM roof and one compute
    roof per precision profiled; where many kernels crowd below one roof, a second panel shows
    that corner closer (its box drawn on the first)."""
    import matplotlib.ticker as mticker
    import pandas as pd
    from matplotlib.patches import Rectangle

    wanted = ("stage", "backend", "precision", "M", "N", "K", *PROFILE_COLUMNS[2:])
    frames = [s.df[[c for c in distinct(wanted) if c in s.df.columns]] for s in sources]
    df = pd.concat(frames, ignore_index=True) if frames else None
    if df is None or df.empty:
        return None, "no lab.profile CSV (a CSV with an intensity column) given"
    df = df[(df["intensity"] > 0) & (df["achieved_tflops"] > 0)]
    if df.empty:
        return None, "the profile CSV has no kernel with a measured intensity and TFLOP/s"
    df = df[(df["peak_tflops"] > 0) & (df["peak_bw_tbs"] > 0)]
    if df.empty:
        return None, "the profile CSV has no peak_tflops / peak_bw_tbs"
    if "precision" not in df.columns:
        df = df.assign(precision="fp32")
    df = df.assign(ridge=df["peak_tflops"] / df["peak_bw_tbs"])
    roofs = distinct(zip(df["peak_tflops"], df["precision"].fillna("fp32")))
    roofs = distinct((f, p) for f, p in roofs)
    roofs = [r for i, r in enumerate(roofs) if r[0] not in [q[0] for q in roofs[:i]]]
    bws = distinct(df["peak_bw_tbs"])
    several_prec = len(distinct(df["precision"])) > 1
    crowd = _crowded(df)
    fig = _new_figure((13, 6.5) if crowd is not None else FIGSIZE)
    if crowd is not None:
        ax, zoom = fig.subplots(1, 2, width_ratios=[1.35, 1.0])
    else:
        ax, zoom = fig.subplots(), None
    ridges = [f / b for f, _ in roofs for b in bws]
    lo = min(float(df["intensity"].min()), *ridges) / 4
    hi = max(float(df["intensity"].max()), *ridges) * 4
    ymin = min(float(df["achieved_tflops"].min()), lo * min(bws)) / 2
    ymax = max(f for f, _ in roofs) * 2.5
    for a in (ax, zoom):
        if a is not None:
            a.set_xscale("log")
            a.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, ymax)
    if zoom is not None:
        zx0, zx1 = float(crowd["intensity"].min()) / 1.25, float(crowd["intensity"].max()) * 1.25
        zy0 = float(crowd["achieved_tflops"].min()) / 1.25
        box_top = float(crowd["achieved_tflops"].max()) * 1.2  # under the roof's label
        zy1 = float(crowd["peak_tflops"].max()) * 1.15  # the zoom shows the roof too
        zoom.set_xlim(zx0, zx1)
        zoom.set_ylim(zy0, zy1)
    fig.draw_without_rendering()  # final axes boxes: the DRAM label's angle depends on them
    roof_artists: dict = {ax: [], zoom: []}
    top_ridge = max(ridges)
    for bw in bws:  # one DRAM roof per bandwidth, up to the highest compute roof
        tag = f" ({bws.index(bw) + 1})" if len(bws) > 1 else ""
        for a in (ax, zoom):
            if a is None:
                continue
            a.plot([lo, top_ridge], [lo * bw, top_ridge * bw], color="black", lw=2.2,
                   gid="roof-dram", label=f"_DRAM roof{tag}")
        x_mid = lo * (min(f for f, _ in roofs) / bw / lo) ** 0.35
        p0 = ax.transData.transform((lo, lo * bw))
        p1 = ax.transData.transform((top_ridge, top_ridge * bw))
        angle = math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
        roof_artists[ax].append(ax.annotate(
            f"DRAM roof: {bw:.2f} TB/s \u00d7 intensity{tag}", (x_mid, x_mid * bw),
            xytext=(-4, 6), textcoords="offset points", ha="center", va="bottom",
            rotation=angle, rotation_mode="anchor", fontsize=FONTSIZE - 1))
    for flops, prec in roofs:
        ridge = flops / min(bws)
        name = _roof_name(prec)
        for a in (ax, zoom):
            if a is None:
                continue
            a.plot([ridge, hi], [flops, flops], color="black", lw=2.2, gid="roof-compute",
                   label=f"_{name} compute roof: {flops:.1f} TFLOP/s")
        ax.plot([ridge, ridge], [1e-9, flops], color="grey", lw=1, ls=":")
        roof_artists[ax].append(ax.annotate(  # at the foot of its dotted line, out of the way
            f"ridge {ridge:.1f} FLOP/B", (ridge, ymin), xytext=(3, 4),
            textcoords="offset points", ha="left", va="bottom", rotation=90,
            fontsize=FONTSIZE - 1, color="dimgray", gid="ridge"))
        roof_artists[ax].append(ax.annotate(
            f"{name} compute roof: {flops:.1f} TFLOP/s", (hi, flops), xytext=(-6, 4),
            textcoords="offset points", ha="right", va="bottom", fontsize=FONTSIZE - 1))
        if zoom is not None and zy0 < flops < zy1:
            roof_artists[zoom].append(zoom.annotate(
                f"{name} compute roof: {flops:.1f} TFLOP/s", (zx1, flops), xytext=(-6, 4),
                textcoords="offset points", ha="right", va="bottom", fontsize=FONTSIZE - 1))
    stages = _stage_order(df["stage"])
    colors = _stage_colors(stages)
    majority = max(distinct(df["precision"]), key=lambda p: int((df["precision"] == p).sum()))
    points, zoomed = [], []
    in_crowd = set(crowd.index) if crowd is not None else set()
    for i, r in df.iterrows():
        backend = str(r["backend"])
        for a in (ax, zoom):
            if a is None or (a is zoom and i not in in_crowd):
                continue
            a.plot([r["intensity"]], [r["achieved_tflops"]], ls="none",
                   marker=BACKEND_MARKER.get(backend, "^"), ms=12 if backend == "cublas" else 8,
                   color=colors.get(r["stage"], "grey"), mec="black", mew=0.6, zorder=5,
                   gid=f"{r['stage']}/{backend}" + ("" if a is ax else "/zoom"))
        label = "cuBLAS" if backend == "cublas" else f"{r['stage']}/{backend}"
        if several_prec and (backend == "cublas" or r["precision"] != majority):
            label += f" {r['precision']}"
        pt = (float(r["intensity"]), float(r["achieved_tflops"]), label)
        (zoomed if i in in_crowd else points).append(pt)
    fmt = mticker.FuncFormatter(lambda v, _: f"{v:g}")
    for a in (ax, zoom):
        if a is None:
            continue
        a.xaxis.set_major_formatter(fmt)
        a.yaxis.set_major_formatter(fmt)
        a.xaxis.set_minor_formatter(mticker.NullFormatter())
        a.set_xlabel("arithmetic intensity (FLOP per DRAM byte, log scale)", fontsize=FONTSIZE)
        _style(a)
        a.grid(True, which="major", axis="both", alpha=0.3)
    ax.set_ylabel("achieved TFLOP/s (log scale)", fontsize=FONTSIZE)
    if zoom is not None:
        ax.add_patch(Rectangle((zx0, zy0), zx1 - zx0, box_top - zy0, fill=False, ec="grey",
                               lw=1, ls="--", zorder=3, gid="zoom-box"))
        zoom.set_title("closer: the kernels in the dashed box", fontsize=FONTSIZE + 1)
        for axis in (zoom.xaxis, zoom.yaxis):  # a few labelled ticks inside one decade
            axis.set_major_locator(mticker.LogLocator(base=10, subs=(1, 1.5, 2, 3, 4, 5, 6, 8)))
            axis.set_major_formatter(fmt)
            axis.set_minor_formatter(mticker.NullFormatter())
    from matplotlib.lines import Line2D

    present = distinct(df["backend"])
    handles = [Line2D([], [], ls="none", marker=BACKEND_MARKER.get(b, "^"), color="white",
                      mec="black", ms=9, label=BACKEND_LABEL.get(b, b)) for b in present]
    legend = ax.legend(handles=handles, loc="lower right", fontsize=FONTSIZE - 1, framealpha=0.95)
    shape = distinct(f"{m}x{n}x{k}" for m, n, k in zip(df.get("M", []), df.get("N", []),
                                                          df.get("K", [])))
    what = "Roofline: achieved TFLOP/s against arithmetic intensity (Nsight Compute)"
    if len(shape) == 1:
        m, n, k = map(int, shape[0].split("x"))
        what += f", {_size_label(m, n, k)}"
    _set_title(fig, what, sources, [p for s in sources
                                    for p in (s.df["precision"] if "precision" in s.df else [])])
    _place_labels(ax, points, avoid=[legend, *roof_artists[ax]],
                  obstacles=[(x, y) for x, y, _ in zoomed], radii=(7, 14, 24, 36, 50, 66),
                  fallback=False)
    if zoom is not None:
        _place_labels(zoom, zoomed, avoid=roof_artists[zoom],
                      radii=(7, 14, 24, 36, 50, 66, 84), fallback=False)
    return fig, None


def _dodge(values, keys, step: float, band: float) -> list[float]:
    """Spread points that share an x value side by side around it, `step` apart (closer when
    they would take more than `band`), in `keys` order."""
    out = [0.0] * len(values)
    groups: dict = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    for v, idx in groups.items():
        idx.sort(key=lambda i: keys[i])
        n = len(idx)
        gap = min(step, band / (n - 1)) if n > 1 else 0.0
        for j, i in enumerate(idx):
            out[i] = v + gap * (j - (n - 1) / 2)
    return out


def occupancy_figure(results: Results):
    """TFLOP/s (log) against theoretical occupancy, a point per kernel row with both, at one size
    (4096^3 when there). The occupancies a kernel can have are few (12.5%, 25%, ...): they sit
    evenly spaced as categories, and the points of one category are spread side by side in
    ladder order so that none hides another. fp32 rows and the tensor-core precisions get a
    panel each."""
    if "occupancy" not in results.df.columns:
        return None, "the CSVs have no occupancy column"
    df = _passed(results.df, "gflops")
    df = df[df["occupancy"].notna() & (df["backend"] != "cublas")]
    if len(df) < 2:
        return None, "fewer than 2 timed rows with an occupancy"
    sizes = distinct(zip(df["M"], df["N"], df["K"]))
    size = ladder_size(df)
    df = df[(df["M"] == size[0]) & (df["N"] == size[1]) & (df["K"] == size[2])]
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    df = df[df["layout"] == layouts[0]]
    df = df.assign(occ=(100 * df["occupancy"].astype(float)).round(2))
    precisions = _precision_order(df["precision"])
    groups = [("fp32", [p for p in precisions if p in ("fp32", "")]),
              ("tensor", [p for p in precisions if p not in ("fp32", "")])]
    groups = [(g, ps) for g, ps in groups if ps]
    stages = _stage_order(df["stage"])
    colors = _stage_colors(stages)
    rank = {s: i for i, s in enumerate(stages)}
    fig = _new_figure((13, 7.5) if len(groups) > 1 else (11, 7))
    axes = fig.subplots(1, len(groups), squeeze=False,
                        width_ratios=[1.3, 1.0][:len(groups)])[0]
    to_label = []
    for ax, (group, precs) in zip(axes, groups):
        part = df[df["precision"].isin(precs)]
        ymin = float(part["gflops"].min()) / 1000 / 1.8
        ymax = float(part["gflops"].max()) / 1000 * 1.8
        cats = sorted(distinct(part["occ"]))
        cat_x = {c: float(i) for i, c in enumerate(cats)}
        keys = [(rank[s], b != "cuda", str(p)) for s, b, p in
                zip(part["stage"], part["backend"], part["precision"])]
        xs = _dodge([cat_x[c] for c in part["occ"]], keys, 0.12, 0.7)
        part = part.assign(x=xs)
        points = []
        for backend in distinct(part["backend"]):
            rows = part[part["backend"] == backend]
            ax.scatter(rows["x"], rows["gflops"] / 1000, c=[colors[s] for s in rows["stage"]],
                       marker=BACKEND_MARKER.get(backend, "^"), s=70, edgecolors="black",
                       linewidths=0.6, zorder=5, label=BACKEND_LABEL.get(backend, backend),
                       gid=f"occupancy/{backend}")
            for x, g, s, p in zip(rows["x"], rows["gflops"], rows["stage"], rows["precision"]):
                text = f"{s}/{backend}" + (f" {p}" if group == "tensor" else "")
                points.append((float(x), float(g) / 1000, text))
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        ax.set_xlim(-0.6, len(cats) - 0.4)
        ax.set_xticks(range(len(cats)), [f"{c:g}%" for c in cats])
        for i in range(1, len(cats)):  # a thin line between two occupancies
            ax.axvline(i - 0.5, color="grey", lw=0.6, alpha=0.4)
        import matplotlib.ticker as mticker

        ax.yaxis.set_major_locator(mticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        _style(ax)
        ax.set_title("fp32 (CUDA cores)" if group == "fp32"
                     else "tensor-core precisions: " + ", ".join(precs), fontsize=FONTSIZE + 1)
        ax.set_xlabel("theoretical occupancy (% of the SM's warp slots)", fontsize=FONTSIZE)
        if ax is axes[0]:
            ax.set_ylabel("TFLOP/s (log scale)", fontsize=FONTSIZE)
        to_label.append((ax, points))
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="none", marker=BACKEND_MARKER.get(b, "^"), color="white",
                      mec="black", ms=9, label=BACKEND_LABEL.get(b, b))
               for b in distinct(df["backend"])]
    handles += [Line2D([], [], ls="none", marker="o", color=colors[s], ms=9, label=s)
                for s in stages]
    fig.legend(handles=handles, loc="outside right center", fontsize=FONTSIZE, frameon=False)
    at = _size_label(*size) + (f", layout {layouts[0]}" if layouts[0] != "nn" else "")
    what = f"Occupancy alone does not decide speed: TFLOP/s against theoretical occupancy, {at}"
    if len(sizes) > 1:
        what += f" (of {len(sizes)} sizes)"
    _set_title(fig, what, results.sources, df["precision"])
    for ax, points in to_label:  # last: the legend and the title have settled the layout
        if len(points) <= 2 * MAX_LABELS:
            _place_labels(ax, points, fontsize=FONTSIZE - 2,
                          radii=(7, 14, 24, 36, 50, 66, 84), fallback=False)
    return fig, None


# --------------------------------------------------------------------------------------- API


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
    results = _results(res_sources)
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


# --------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.plot", description="PNG figures of lab.compare and lab.profile "
                       "CSVs (matplotlib, no GPU needed).",
                       epilog="Figures: ladder.png, sweep.png (3+ sizes), occupancy.png (from "
                              "lab.compare CSVs) and roofline.png (from a lab.profile CSV).")
    p.add_argument("csv", nargs="+", metavar="RUN.csv",
                   help="lab.compare or lab.profile CSVs (their .env.json beside them names the "
                        "GPU, date and commit in the titles)")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="folder for the PNGs (created if missing)")
    return p


def _main(argv: list[str] | None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    args = build_parser().parse_args(argv)
    for path in draw(args.csv, args.out):
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
