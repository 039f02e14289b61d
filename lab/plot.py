"""`python -m lab.plot RUN.csv [RUN2.csv ...] -o DIR`: PNG figures of lab results (no GPU needed).

From `lab.compare` CSVs (GPU rows):

- ladder.png: % of cuBLAS per stage, CUDA and Triton bars side by side (stages in registry order),
  one panel per (precision, size), the cuBLAS = 100% line, and siboehm/SGEMM_CUDA's kernels
  measured on the same H100 as markers at 4096^3.
- sweep.png: TFLOP/s against size (three or more sizes), a line per stage and backend, cuBLAS as
  the reference.
- occupancy.png: theoretical occupancy against TFLOP/s, one point per kernel row: occupancy alone
  does not decide speed.

From `lab.profile` CSVs (a column `intensity`):

- roofline.png: each kernel at its arithmetic intensity and achieved TFLOP/s under the DRAM and
  compute roofs.

Rows drawn: status pass (the ladder also needs a pct_cublas, the others a gflops). A CSV that has
nn rows gives only those (its other layouts are left out, and the line below says so); a CSV with
no nn row gives every layout, a panel each. The same row (stage, backend, precision, layout, size)
in two CSVs: the later CSV's. The ladder shows six panels at most (4096^3 and 1025^3 first, then
the largest sizes).

Each figure's title names the GPU, precision, date and commit from the CSV's environment file
(`<name>.env.json` beside it; for a lab.profile CSV without one, the GPU its peaks were read off).
A plot the data cannot support is skipped, and one line (stderr) says which and why. Python: `lab.plot.draw(csv_paths, out_dir)` writes the PNGs and returns their paths;
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

PLOTS = ("ladder", "sweep", "roofline", "occupancy")
FIGSIZE = (10, 6)
DPI = 120
FONTSIZE = 10
MAX_PANELS = 6
PREFERRED_SIZES = ((4096, 4096, 4096), (1025, 1025, 1025))
MIN_SWEEP_SIZES = 3
MAX_LABELS = 20  # text labels on the occupancy plot, at most (else the legend alone names them)
BACKEND_LABEL = {"cuda": "CUDA", "triton": "Triton", "cublas": "cuBLAS"}
BACKEND_COLOR = {"cuda": "#3b6fb6", "triton": "#e08a1e"}
BACKEND_MARKER = {"cuda": "o", "triton": "s", "cublas": "*"}
# Published SGEMM_CUDA (https://github.com/siboehm/SGEMM_CUDA) kernels, measured on the same H100
# on 2026-11-22 at 4096^3, fp32, as % of cuBLAS; keyed by the lab stage they correspond to
# ("tiled" is its shared-memory kernel).
SGEMM_CUDA_LABEL = "siboehm/SGEMM_CUDA (H100, 2026-11-22)"
SGEMM_CUDA_PCT = {"naive": 1.0, "coalesced": 12.4, "tiled": 17.9, "blocktile_1d": 33.4,
                  "blocktile_2d": 50.3, "vectorized": 61.5}
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


def _distinct(values) -> list:
    out = []
    for v in values:
        if v not in (None, "") and v not in out:
            out.append(v)
    return out


def title_suffix(sources: list[Source], precisions=()) -> str:
    """'GPU, precision, date, commit abc1234' from the environment files (missing parts left out;
    differing values joined with ' / ')."""
    gpus = _distinct(s.env.get("gpu") for s in sources)
    dates = _distinct(str(s.env["timestamp"])[:10] for s in sources if s.env.get("timestamp"))
    commits = _distinct(s.env.get("commit") for s in sources)
    parts = [" / ".join(map(str, gpus)), " / ".join(map(str, _distinct(precisions))),
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
    labels = _distinct(labels)
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
    return Results(df.reset_index(drop=True), sources, _distinct(left_out))


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
    keys = _distinct(zip(df["precision"], df["layout"], df["M"], df["N"], df["K"]))
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
        ax.axhline(100, color="black", lw=1.5, ls="--", label="cuBLAS = 100%", gid="cublas-100")
        if marked:
            cuda_j = backends.index("cuda") if "cuda" in backends else 0
            pts = [(x + (cuda_j - (len(backends) - 1) / 2) * width, SGEMM_CUDA_PCT[s])
                   for x, s in enumerate(stages) if s in SGEMM_CUDA_PCT]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="none", marker="D", ms=6,
                        color="black", mec="white", mew=0.8, label=SGEMM_CUDA_LABEL,
                        gid="sgemm_cuda", zorder=5)
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
    _set_title(fig, "Speed of each stage as % of cuBLAS (same run, same shape)", results.sources,
               [k[0] for k in keys])
    return fig, None


def _log2_ticks(ax, positions: list[tuple[float, str]]) -> None:
    """Ticks at the sizes; sizes closer than ~5% share one tick label ('1024 / 1025', or
    'first ... last (n sizes)' for more than two)."""
    positions = sorted(positions)
    groups: list[list[tuple[float, str]]] = []
    for x, lab in positions:
        if groups and math.log2(x) - math.log2(groups[-1][-1][0]) < 0.08:
            groups[-1].append((x, lab))
        else:
            groups.append([(x, lab)])
    from matplotlib.ticker import NullFormatter

    ticks = [2 ** (sum(math.log2(x) for x, _ in g) / len(g)) for g in groups]
    labels = [" / ".join(lab for _, lab in g) if len(g) <= 2
              else f"{g[0][1]} \u2026 {g[-1][1]} ({len(g)} sizes)" for g in groups]
    ax.set_xticks(ticks, labels)
    # every size still gets a small tick of its own
    ax.set_xticks([x for x, _ in positions], minor=True)
    ax.tick_params(axis="x", which="minor", length=3)
    ax.xaxis.set_minor_formatter(NullFormatter())


def _hollow(ax, rows, **style) -> None:
    """White-filled markers over the points of shapes that are not squares (M, N, K differ)."""
    odd = rows[~((rows["M"] == rows["N"]) & (rows["N"] == rows["K"]))]
    if not odd.empty:
        ax.plot(odd["x"], odd["gflops"] / 1000, ls="none", mfc="white", mew=1.5,
                **{"zorder": 3, **style}, gid="not-square")


def sweep_figure(results: Results):
    """TFLOP/s against size: a line per stage x backend, cuBLAS thick black."""
    import matplotlib.ticker as mticker

    df = _passed(results.df, "gflops")
    sizes = _distinct(zip(df["M"], df["N"], df["K"]))
    if len(sizes) < MIN_SWEEP_SIZES:
        return None, (f"{len(sizes)} size{'s' if len(sizes) != 1 else ''} with timed rows, "
                      f"needs {MIN_SWEEP_SIZES}")
    precisions = _distinct(df["precision"])
    layouts = _distinct(df["layout"])
    panels = [(p, lay) for p in precisions for lay in layouts
              if ((df["precision"] == p) & (df["layout"] == lay)).any()]
    fig = _new_figure((10, 6) if len(panels) == 1 else (12, 6))
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    stages = _stage_order(df.loc[df["backend"] != "cublas", "stage"])
    colors = _stage_colors(stages)
    x_of = {}
    for M, N, K in sizes:
        x_of[(M, N, K)] = float(M) if M == N == K else (float(M) * N * K) ** (1 / 3)
    for ax, (prec, layout) in zip(axes, panels):
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
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(mticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        _log2_ticks(ax, [(x_of[k], _size_label(*k)) for k in
                         _distinct(zip(part["M"], part["N"], part["K"]))])
        if len(ax.get_xticks()) > 4 or len(panels) > 1:  # crowded: rotated labels
            ax.tick_params(axis="x", labelrotation=30)
            for lab in ax.get_xticklabels():
                lab.set_ha("right")
                lab.set_rotation_mode("anchor")
        ax.set_xlabel("size: M (squares), cube root of M\u00b7N\u00b7K otherwise (log\u2082 axis)",
                      fontsize=FONTSIZE)
        _style(ax)
        ax.grid(True, axis="x", alpha=0.3)
        extra = [p for p in ((prec if len(precisions) > 1 else ""),
                             (f"layout {layout}" if layout != "nn" else "")) if p]
        if extra:
            ax.set_title(", ".join(extra), fontsize=FONTSIZE + 1)
    axes[0].set_ylabel("TFLOP/s (log scale)", fontsize=FONTSIZE)
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
                  avoid=(), obstacles=()) -> list:
    """Annotate each (x, y, text) near its point so that labels overlap neither each other, nor
    any point (`points` and `obstacles`, (x, y) in data units), nor the artists in `avoid`:
    greedy, in display space, nearest free spot first; a label set further out gets a thin
    leader line to its point."""
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
    for r in (7, 14, 24, 36, 50):
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
                            va=va, fontsize=fontsize, zorder=6,
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
        if best is None:  # no free spot: the nearest one, on a white box
            best = ax.annotate(text, (x, y), xytext=(7, 2), textcoords="offset points",
                               ha="left", va="bottom", fontsize=fontsize, zorder=6,
                               bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none",
                                         alpha=0.8))
        best.update_positions(renderer)
        bb = Text.get_window_extent(best, renderer)
        taken.append((bb.x0 - 2, bb.y0 - 2, bb.x1 + 2, bb.y1 + 2))
        texts.append(best)
    return texts


def roofline_figure(sources: list[Source]):
    """Each profiled kernel at (intensity, achieved TFLOP/s) under the DRAM and compute roofs."""
    import matplotlib.ticker as mticker
    import pandas as pd

    frames = [s.df for s in sources]
    df = pd.concat(frames, ignore_index=True) if frames else None
    if df is None or df.empty:
        return None, "no lab.profile CSV (a CSV with an intensity column) given"
    df = df[(df["intensity"] > 0) & (df["achieved_tflops"] > 0)]
    if df.empty:
        return None, "the profile CSV has no kernel with a measured intensity and TFLOP/s"
    peaks = _distinct(zip(df["peak_tflops"], df["peak_bw_tbs"]))
    peaks = [(f, b) for f, b in peaks if f > 0 and b > 0]
    if not peaks:
        return None, "the profile CSV has no peak_tflops / peak_bw_tbs"
    fig = _new_figure()
    ax = fig.subplots()
    ridges = [f / b for f, b in peaks]
    lo = min(float(df["intensity"].min()), *ridges) / 4
    hi = max(float(df["intensity"].max()), *ridges) * 4
    ymin = min(float(df["achieved_tflops"].min()), lo * min(b for _, b in peaks)) / 2
    ymax = max(f for f, _ in peaks) * 2.5
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, ymax)
    fig.draw_without_rendering()  # final axes box: the DRAM label's angle depends on it
    roof_artists = []
    for n, (flops, bw) in enumerate(peaks):
        ridge = flops / bw
        tag = f" ({n + 1})" if len(peaks) > 1 else ""
        # the roofs in black (the points carry the stage colours), each named along itself
        ax.plot([lo, ridge], [lo * bw, flops], color="black", lw=2.2, gid="roof-dram",
                label=f"_DRAM roof: {bw:.2f} TB/s \u00d7 intensity{tag}")
        ax.plot([ridge, hi], [flops, flops], color="black", lw=2.2, gid="roof-compute",
                label=f"_FP32 compute roof: {flops:.1f} TFLOP/s{tag}")
        ax.plot([ridge, ridge], [1e-9, flops], color="grey", lw=1, ls=":")
        t = ax.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, flops), xytext=(6, -6),
                        textcoords="offset points", ha="left", va="top", fontsize=FONTSIZE - 1,
                        color="dimgray")
        roof_artists.append(t)
        t = ax.annotate(f"FP32 compute roof: {flops:.1f} TFLOP/s{tag}", (hi, flops),
                        xytext=(-6, 4), textcoords="offset points", ha="right", va="bottom",
                        fontsize=FONTSIZE - 1)
        roof_artists.append(t)
        # the DRAM roof's label, parallel to it, a third of the way up
        x_mid = lo * (ridge / lo) ** 0.35
        p0 = ax.transData.transform((lo, lo * bw))
        p1 = ax.transData.transform((ridge, flops))
        angle = math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
        t = ax.annotate(f"DRAM roof: {bw:.2f} TB/s \u00d7 intensity{tag}", (x_mid, x_mid * bw),
                        xytext=(-4, 6), textcoords="offset points", ha="center", va="bottom",
                        rotation=angle, rotation_mode="anchor", fontsize=FONTSIZE - 1)
        roof_artists += [t]
    stages = _stage_order(df["stage"])
    colors = _stage_colors(stages)
    points = []
    for _, r in df.iterrows():
        backend = str(r["backend"])
        ax.plot([r["intensity"]], [r["achieved_tflops"]], ls="none",
                marker=BACKEND_MARKER.get(backend, "^"), ms=12 if backend == "cublas" else 8,
                color=colors.get(r["stage"], "grey"), mec="black", mew=0.6, zorder=5,
                gid=f"{r['stage']}/{backend}")
        label = "cuBLAS" if backend == "cublas" else f"{r['stage']}/{backend}"
        points.append((float(r["intensity"]), float(r["achieved_tflops"]), label))
    fmt = mticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(fmt)
    ax.yaxis.set_major_formatter(fmt)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte, log scale)", fontsize=FONTSIZE)
    ax.set_ylabel("achieved TFLOP/s (log scale)", fontsize=FONTSIZE)
    _style(ax)
    ax.grid(True, which="major", axis="both", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [h for h in ax.get_legend_handles_labels()[0]]
    present = _distinct(df["backend"])
    handles += [Line2D([], [], ls="none", marker=BACKEND_MARKER.get(b, "^"), color="white",
                       mec="black", ms=9, label=BACKEND_LABEL.get(b, b)) for b in present]
    legend = ax.legend(handles=handles, loc="lower right", fontsize=FONTSIZE - 1, framealpha=0.95)
    _place_labels(ax, points, avoid=[legend, *roof_artists])
    shape = _distinct(f"{m}x{n}x{k}" for m, n, k in zip(df.get("M", []), df.get("N", []),
                                                          df.get("K", [])))
    what = "Roofline: achieved TFLOP/s against arithmetic intensity (Nsight Compute)"
    if len(shape) == 1:
        m, n, k = map(int, shape[0].split("x"))
        what += f", {_size_label(m, n, k)}"
    _set_title(fig, what, sources, [p for s in sources
                                    for p in (s.df["precision"] if "precision" in s.df else [])])
    return fig, None


def occupancy_figure(results: Results):
    """Theoretical occupancy (%) against TFLOP/s, a point per GPU row with both."""
    if "occupancy" not in results.df.columns:
        return None, "the CSVs have no occupancy column"
    df = _passed(results.df, "gflops")
    df = df[df["occupancy"].notna() & (df["backend"] != "cublas")]
    if len(df) < 2:
        return None, "fewer than 2 timed rows with an occupancy"
    stages = _stage_order(df["stage"])
    fig = _new_figure((12, 7) if len(stages) > 10 else FIGSIZE)
    ax = fig.subplots()
    colors = _stage_colors(stages)
    points = []
    for backend in _distinct(df["backend"]):
        part = df[df["backend"] == backend]
        ax.scatter(100 * part["occupancy"].astype(float), part["gflops"] / 1000,
                   c=[colors[s] for s in part["stage"]], marker=BACKEND_MARKER.get(backend, "^"),
                   s=60, edgecolors="black", linewidths=0.6, alpha=0.9, zorder=5,
                   label=BACKEND_LABEL.get(backend, backend), gid=f"occupancy/{backend}")
        points += [(100 * float(o), g / 1000, s, backend, ((m, n, k), lay))
                   for o, g, s, m, n, k, lay in zip(part["occupancy"], part["gflops"],
                                                    part["stage"], part["M"], part["N"],
                                                    part["K"], part["layout"])]
    ax.set_xlim(0, 108)
    ax.set_ylim(0, max(p[1] for p in points) * 1.15)
    ax.set_xlabel("theoretical occupancy (% of the SM's warp slots)", fontsize=FONTSIZE)
    ax.set_ylabel("TFLOP/s", fontsize=FONTSIZE)
    _style(ax)
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="none", marker=BACKEND_MARKER.get(b, "^"), color="white",
                      mec="black", ms=9, label=BACKEND_LABEL.get(b, b))
               for b in _distinct(df["backend"])]
    handles += [Line2D([], [], ls="none", marker="o", color=colors[s], ms=9, label=s)
                for s in stages]
    fig.legend(handles=handles, loc="outside right center", fontsize=FONTSIZE, frameon=False)
    sizes = _distinct(zip(df["M"], df["N"], df["K"]))
    layouts = sorted(_distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    # Text labels for one size and layout only (the preferred size, else the largest): several
    # sizes or layouts put a kernel's points in a column, and one label per kernel is enough.
    size = next((k for k in PREFERRED_SIZES if k in sizes),
                max(sizes, key=lambda k: k[0] * k[1] * k[2]))
    shown = (size, layouts[0])
    labelled = [(x, y, f"{s}/{b}") for (x, y, s, b, g) in points if g == shown]
    if len(labelled) <= MAX_LABELS:  # more would only pile up: the legend names them
        _place_labels(ax, labelled,
                      obstacles=[(x, y) for (x, y, s, b, g) in points if g != shown])
    what = "Occupancy alone does not decide speed: theoretical occupancy against TFLOP/s"
    several = [f"{len(sizes)} sizes"] if len(sizes) > 1 else []
    several += [f"{len(layouts)} layouts ({', '.join(layouts)})"] if len(layouts) > 1 else []
    at = _size_label(*size) + (f" layout {layouts[0]}" if layouts[0] != "nn" else "")
    if len(labelled) > MAX_LABELS:
        what += "\n" + ", ".join([*several, "kernels by colour and marker (legend)"])
    elif several:
        what += (f"\n{' and '.join(several)}: a point each; labels at {at}")
    else:
        what += f", {at}"
    _set_title(fig, what, results.sources,
               df["precision"])
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


def draw(csv_paths, out_dir, file=None) -> list[Path]:
    """Write <out_dir>/ladder.png, sweep.png, roofline.png, occupancy.png for what the CSVs
    support; return the paths written. One line (on `file`, default stderr) says which plots
    were skipped and why. LabError (one sentence) for a missing CSV, a CSV that is not a lab
    results file, or an output folder that cannot be written."""
    sources = _read_all(csv_paths)  # every CSV checked before the folder is created
    out = check_out_dir(out_dir)
    figs, skipped, notes = _build(sources)
    written = []
    for name, fig in figs.items():
        path = out / f"{name}.png"
        try:
            fig.savefig(path, dpi=DPI)
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
        print("; ".join(parts), file=file or sys.stderr)
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
