"""The pieces every figure of lab.plot shares: sizes, fonts and colours, the backend labels
and markers, reading a lab.compare or lab.profile CSV (Source, read_source) and the rows a
figure draws (select_results, passed_rows), titles from the environment files, the stage
order and colours of the registry, the cuBLAS = 100% line and siboehm/SGEMM_CUDA's marks,
a new Agg figure, and point labels placed where they overlap nothing (place_labels). The stage
palette (STAGE_PALETTE) and the colour difference it was chosen by (color_distance, CIEDE2000).
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
    commits = distinct(str(s.env["commit"])[:7] for s in sources if s.env.get("commit"))
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


# A colour per registry stage, in ladder order (stage i takes STAGE_PALETTE[i]): 18 stages on one
# panel need colours a reader can match to the legend, and matplotlib's qualitative maps hold 10
# (tab10) or pairs of near shades (tab20): those gave 5 of the 153 pairs of stages a CIEDE2000
# difference under 15 (blocktile_1d and wgmma: 8.1, bank_conflicts and persistent: 10.2). These
# were chosen greedily from an sRGB grid (steps of 1/20) with lightness L* 30-72 and chroma 30-80
# (visible as thin lines on white, no greys): each colour the one farthest, by CIEDE2000, from
# black (cuBLAS), white, grey and every colour before it. So any two stages are at least 19 apart
# among the first 18 (15.7 among all 24), and two neighbours in the ladder at least 23.9.
# tests/test_plot.py holds the registry to MIN_STAGE_COLOR_DISTANCE.
STAGE_PALETTE = (
    "#4033b2", "#990000", "#8cbf1a", "#f29900", "#005900", "#f280ff", "#ff594c", "#00bfb2",
    "#bf0d73", "#598cff", "#805900", "#007366", "#006699", "#806699", "#0d994c", "#998c4c",
    "#cc8099", "#00b2e6", "#bf590d", "#a65959", "#a699d9", "#d99980", "#732673", "#4c4c1a",
)
MIN_STAGE_COLOR_DISTANCE = 15.0  # CIEDE2000, between any two stages of the registry


def lab_of(color) -> tuple[float, float, float]:
    """CIELAB (D65) of a matplotlib colour."""
    from matplotlib.colors import to_rgb

    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in to_rgb(color))
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883

    def f(t):
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def color_distance(c1, c2) -> float:
    """CIEDE2000 colour difference of two matplotlib colours (about 1: just noticeable side by
    side; 10 and more: different colours at a glance)."""
    return delta_e(lab_of(c1), lab_of(c2))


def delta_e(lab1, lab2) -> float:
    """CIEDE2000 difference of two CIELAB colours (Sharma, Wu and Dalal's formulation)."""
    (L1, a1, b1), (L2, a2, b2) = lab1, lab2
    rad, deg = math.radians, math.degrees
    cbar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cbar**7 / (cbar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = deg(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = deg(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dh = 0.0
    if c1p * c2p:
        dh = h2p - h1p
        dh = dh - 360 if dh > 180 else dh + 360 if dh < -180 else dh
    d_l, d_c = L2 - L1, c2p - c1p
    d_h = 2 * math.sqrt(c1p * c2p) * math.sin(rad(dh / 2))
    lbar, cbarp = (L1 + L2) / 2, (c1p + c2p) / 2
    if not c1p * c2p:
        hbar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hbar = (h1p + h2p) / 2
    else:
        hbar = (h1p + h2p + (360 if h1p + h2p < 360 else -360)) / 2
    t = (1 - 0.17 * math.cos(rad(hbar - 30)) + 0.24 * math.cos(rad(2 * hbar))
         + 0.32 * math.cos(rad(3 * hbar + 6)) - 0.20 * math.cos(rad(4 * hbar - 63)))
    rot = -math.sin(rad(60 * math.exp(-(((hbar - 275) / 25) ** 2)))) * 2 * math.sqrt(
        cbarp**7 / (cbarp**7 + 25**7))
    s_l = 1 + 0.015 * (lbar - 50) ** 2 / math.sqrt(20 + (lbar - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cbarp, 1 + 0.015 * cbarp * t
    return math.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2
                     + rot * (d_c / s_c) * (d_h / s_h))


def _lighter(color, amount: float = 0.5):
    """The colour mixed with white."""
    from matplotlib.colors import to_rgb

    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def stage_colors(labels) -> dict:
    """A colour per variant label, the same in every figure: a registry stage keeps its own
    (STAGE_PALETTE, in ladder order), its first variant a light shade of it, any other label the
    next colour of tab20b."""
    from matplotlib import colormaps

    from lab.stages import STAGES

    index = {s.name: i for i, s in enumerate(STAGES) if i < len(STAGE_PALETTE)}
    spare = (colormaps["tab20b"](i) for i in [*range(0, 20, 4), *range(2, 20, 4),
                                              *range(1, 20, 2)] * 100)
    colors, light_used = {}, set()
    for lab in labels:
        base = lab.split(":")[0]
        if lab == "cublas":
            colors[lab] = "black"
        elif lab in index:
            colors[lab] = STAGE_PALETTE[index[lab]]
        elif base in index and base not in light_used:
            light_used.add(base)
            colors[lab] = _lighter(STAGE_PALETTE[index[base]])
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


def baseline_note(precision: str, width: int | None = None) -> str:
    """What a picture writes beside this precision's % of cuBLAS (the precision record's
    plot_note: the cuBLAS call it is compared with, where "cuBLAS <baseline>" alone would
    mislead); "" for the others. `width`: wrapped into lines of at most that many characters."""
    import textwrap

    from lab.base.precisions import BY_NAME

    note = BY_NAME[precision].plot_note if precision in BY_NAME else ""
    return textwrap.fill(note, width) if note and width else note


def marker_box(ax, x: float, y: float, size_pt: float, pad: float = 2.0) -> tuple:
    """The display-space box (x0, y0, x1, y1) a marker of `size_pt` points (matplotlib's
    markersize: the marker's width) covers at data (x, y), `pad` pixels added around it."""
    half = size_pt * ax.figure.dpi / 72 / 2 + pad
    px, py = ax.transData.transform((x, y))
    return (px - half, py - half, px + half, py + half)


def place_labels(ax, points: list[tuple], fontsize=FONTSIZE - 1, avoid=(), obstacles=(),
                 radii=(7, 14, 24, 36, 50), fallback=True, marker_size: float = 8,
                 lines=()) -> list:
    """Annotate each (x, y, text) near its point so that labels overlap neither each other, nor
    any marker (`points` and `obstacles`, (x, y) in data units, each covering `marker_size`
    points, or its own size given as a fourth (points) or third (obstacles) entry), nor the
    artists in `avoid`, nor the Line2Ds in `lines` (followed along their path, not their
    bounding box: a roof drawn across the plot). Greedy, in display space, the most crowded
    points first, each at the nearest free spot: one nearer its own marker than any other; a
    label set further out gets a thin leader line to its point, which crosses no other label or
    marker where a spot allows (and no later label crosses it). Points drawn on one another
    (centres closer than a marker's half width) share one label, a line each. A label with no
    free spot goes on a white box at the nearest one (fallback=True) or is left out
    (fallback=False: the legend names the point)."""
    from matplotlib.text import Text

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # final axes positions (constrained layout) before measuring
    marks = [(p[0], p[1], p[3] if len(p) > 3 else marker_size) for p in points]
    marks += [(o[0], o[1], o[2] if len(o) > 2 else marker_size) for o in obstacles]
    taken = [marker_box(ax, x, y, size) for x, y, size in marks]  # every marker, as drawn
    merged: list = []  # [x, y, [texts], size, box over its markers]
    for p, (_, _, size), box in zip(points, marks, taken):
        px, py = ax.transData.transform((p[0], p[1]))
        for m in merged:
            qx, qy = ax.transData.transform((m[0], m[1]))
            if math.hypot(px - qx, py - qy) <= min(size, m[3]) * fig.dpi / 72 / 2:
                m[2].append(p[2])
                m[3] = max(m[3], size)
                m[4] = (min(m[4][0], box[0]), min(m[4][1], box[1]), max(m[4][2], box[2]),
                        max(m[4][3], box[3]))
                break
        else:
            merged.append([p[0], p[1], [p[2]], size, box])
    points = [(m[0], m[1], "\n".join(m[2]), m[3]) for m in merged]
    owns = [m[4] for m in merged]
    marker_boxes = list(taken)
    for artist in avoid:
        bb = artist.get_window_extent(renderer)
        taken.append((bb.x0, bb.y0, bb.x1, bb.y1))
    for line in lines:  # a small box every 3 pixels along each segment
        xy = line.get_transform().transform(line.get_xydata())
        for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:]):
            n = max(1, int(math.hypot(x1 - x0, y1 - y0) / 3))
            taken.extend((x0 + (x1 - x0) * k / n - 2, y0 + (y1 - y0) * k / n - 2,
                          x0 + (x1 - x0) * k / n + 2, y0 + (y1 - y0) * k / n + 2)
                         for k in range(n + 1))
    axbb = ax.get_window_extent(renderer)

    def candidates(size: float):
        """(dx, dy, ha, va, leader) in points, nearest first: each radius counted from the edge
        of a marker of `size` points (the radii are those of an 8-point marker)."""
        extra = max(0.0, size / 2 - 4)
        for r in radii:
            for deg in (0, 180, 25, -25, 155, -155, 55, -55, 125, -125, 90, -90):
                c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
                ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
                va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
                yield (r + extra) * c, (r + extra) * s, ha, va, r > 10

    def overlaps(bb):
        return any(bb.x0 < t[2] and bb.x1 > t[0] and bb.y0 < t[3] and bb.y1 > t[1]
                   for t in taken)

    def leader(bb, own) -> list:
        """Points every 4 pixels along a leader line from the label's centre to its marker,
        outside both (display units)."""
        cx, cy = (bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2
        px, py = (own[0] + own[2]) / 2, (own[1] + own[3]) / 2
        n = max(2, int(math.hypot(px - cx, py - cy) / 4))
        out = []
        for k in range(1, n):
            sx, sy = cx + (px - cx) * k / n, cy + (py - cy) * k / n
            if not (bb.x0 <= sx <= bb.x1 and bb.y0 <= sy <= bb.y1) and not (
                    own[0] <= sx <= own[2] and own[1] <= sy <= own[3]):
                out.append((sx, sy))
        return out

    def gap(bb, t) -> float:
        """Pixels between a label's box and a marker's box (0 where they touch)."""
        dx = max(t[0] - bb.x1, bb.x0 - t[2], 0.0)
        dy = max(t[1] - bb.y1, bb.y0 - t[3], 0.0)
        return math.hypot(dx, dy)

    def within(t, own) -> bool:
        """Box t lies in box own (one of the label's own markers)."""
        return own[0] <= t[0] and t[2] <= own[2] and own[1] <= t[1] and t[3] <= own[3]

    def nearer_another(bb, own) -> bool:
        """A label (without a leader line) nearer another marker than its own: it would seem
        to name the wrong point."""
        mine = gap(bb, own)
        return any(gap(bb, t) < mine for t in marker_boxes if not within(t, own))

    def crosses(samples, own) -> bool:
        """A leader line through another label or marker (its own markers do not count)."""
        return any(not within(t, own) and t[0] < sx < t[2] and t[1] < sy < t[3]
                   for sx, sy in samples for t in taken)

    texts = []
    # the most crowded points first (most markers within 40 pixels), while the spots near them
    # are free; then left to right
    centres = [((t[0] + t[2]) / 2, (t[1] + t[3]) / 2) for t in taken[:len(marks)]]
    crowd = [sum(1 for q in centres if math.hypot(q[0] - c[0], q[1] - c[1]) < 40)
             for c in (((t[0] + t[2]) / 2, (t[1] + t[3]) / 2) for t in owns)]
    order = sorted(range(len(points)), key=lambda i: (-crowd[i], points[i][0], points[i][1]))
    for i in order:
        x, y, text = points[i][:3]
        size = points[i][3]
        own = owns[i]  # the box over its own markers
        best, line = None, []
        # strict: a spot nearer its own marker than any other, whose leader line crosses
        # nothing; else (rather than no label) any free spot, its line over another's
        tries = [(c, strict) for strict in (True, False) for c in candidates(size)]
        for (dx, dy, ha, va, leads), strict in tries:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha,
                            va=va, fontsize=fontsize, zorder=6, gid="label",
                            arrowprops=dict(arrowstyle="-", color="grey", lw=0.7, shrinkA=0,
                                            shrinkB=size / 2 + 1) if leads else None)
            t.update_positions(renderer)  # the offset applied before measuring the text alone
            bb = Text.get_window_extent(t, renderer)
            inside = (bb.x0 >= axbb.x0 and bb.x1 <= axbb.x1 and bb.y0 >= axbb.y0
                      and bb.y1 <= axbb.y1)
            line = leader(bb, own) if leads else []
            loose = crosses(line, own) if leads else nearer_another(bb, own)
            if inside and not overlaps(bb) and not (strict and loose):
                best = t
                break
            t.remove()
        if best is None and not fallback:
            continue
        if best is None:  # no free spot: the nearest one, on a white box
            best = ax.annotate(text, (x, y), xytext=(size / 2 + 3, 2), textcoords="offset points",
                               ha="left", va="bottom", fontsize=fontsize, zorder=6, gid="label",
                               bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none",
                                         alpha=0.8))
        # out of the constrained layout: a label near an edge must not resize the axes after
        # the free spots were measured (that would move the points under the labels)
        best.set_in_layout(False)
        best.update_positions(renderer)
        bb = Text.get_window_extent(best, renderer)
        taken.append((bb.x0 - 2, bb.y0 - 2, bb.x1 + 2, bb.y1 + 2))
        taken.extend((sx - 1.5, sy - 1.5, sx + 1.5, sy + 1.5) for sx, sy in line)
        texts.append(best)
    return texts
