"""The pieces every figure of lab.plot shares: sizes, fonts and colours, the backend labels
and markers, reading a lab.compare or lab.profile CSV (Source, read_source) and the rows a
figure draws (select_results, passed_rows), titles from the environment files, the stage
order and colours of the registry, the cuBLAS = 100% line and siboehm/SGEMM_CUDA's marks,
a new Agg figure, and point labels placed where they overlap nothing (place_labels).
Imports only lab modules below the plots (errors, report, stages).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from lab.base.errors import LabError
from lab.stages import PUBLISHED_LABEL, STAGES

FIGSIZE = (10, 6)
DPI = 120
FONTSIZE = 10
PREFERRED_SIZES = ((4096, 4096, 4096), (1025, 1025, 1025))
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

    from lab.csvfile import read_csv

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

def reference_marks(ax, stages, backends, width, marked: bool) -> None:
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




def title_suffix(sources: list[Source], precisions=()) -> str:
    """'GPU, precision, date, commit abc1234' from the environment files (missing parts left out;
    differing values joined with ' / ')."""
    gpus = distinct(s.env.get("gpu") for s in sources)
    dates = distinct(str(s.env["timestamp"])[:10] for s in sources if s.env.get("timestamp"))
    commits = distinct(s.env.get("commit") for s in sources)
    parts = [" / ".join(map(str, gpus)), " / ".join(map(str, distinct(precisions))),
             " / ".join(dates), ("commit " + " / ".join(map(str, commits))) if commits else ""]
    return ", ".join(p for p in parts if p)


def set_figure_title(fig, what: str, sources: list[Source], precisions=()) -> None:
    suffix = title_suffix(sources, precisions)
    fig.suptitle(what + (f"\n{suffix}" if suffix else ""), fontsize=FONTSIZE + 2)


# --------------------------------------------------------------------------- selecting rows


def stage_order(labels) -> list[str]:
    """Variant labels in registry order (lab.stages.STAGES), a stage's variants after it, then
    labels the registry does not know, in the order they came."""
    from lab.stages import STAGES

    rank = {s.name: i for i, s in enumerate(STAGES)}
    labels = distinct(labels)
    return sorted(labels, key=lambda lab: (rank.get(lab.split(":")[0], len(rank)),
                                           lab != lab.split(":")[0], labels.index(lab)))


def stage_colors(labels) -> dict:
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


def select_results(sources: list[Source]) -> Results:
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


def passed_rows(df, column: str):
    """Rows with status pass and a value in `column`."""
    if column not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "pass") & df[column].notna()]


def size_label(M: int, N: int, K: int) -> str:
    return f"{M}\u00b3" if M == N == K else f"{M}x{N}x{K}"


# ------------------------------------------------------------------------------ figure pieces


def new_figure(figsize=FIGSIZE, **kw):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained", **kw)
    FigureCanvasAgg(fig)  # the Agg canvas: no pyplot, no display, nothing global to close
    return fig


def style_axes(ax) -> None:
    ax.tick_params(labelsize=FONTSIZE)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)

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


def precision_order(precisions) -> list:
    from lab.stages import PRECISIONS

    rank = {p: i for i, p in enumerate(PRECISIONS)}
    return sorted(distinct(precisions), key=lambda p: (rank.get(p, len(rank)), str(p)))


def baseline_of(precision: str) -> str:
    """The cuBLAS precision a row of this precision is compared with (3xtf32: fp32)."""
    from lab.base.precisions import BY_NAME

    return BY_NAME[precision].baseline if precision in BY_NAME else precision or "fp32"


def place_labels(ax, points: list[tuple[float, float, str]], fontsize=FONTSIZE - 1,
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
