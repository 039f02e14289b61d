"""occupancy.png: TFLOP/s (log) against theoretical occupancy at one size (4096^3 when there),
a point per kernel, fp32 and the tensor-core precisions in a panel each: occupancy alone does not
decide speed. The occupancies the kernels have are few and uneven (12.5%, 25%, 56.25%, ...): each
is a column of its own (a shaded box, white gaps between, its value under it), not a place on a
scale, and the points of one column sit side by side in ladder order.
"""

from __future__ import annotations

from lab.plots.common import (
    BACKEND_LABEL, BACKEND_MARKER, FONTSIZE, Results, distinct, ladder_size, new_figure,
    passed_rows, place_labels, precision_order, set_figure_title, size_label, stage_colors,
    stage_order, style_axes,
)

MAX_LABELS = 20  # text labels on the occupancy plot, at most (else the legend alone names them)
POINT_AREA = 70  # a point's marker area (points^2, matplotlib's scatter size)
COLUMN = 0.84  # a category's column width, in slots (the gap between two columns: the rest)


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
    (4096^3 when there). The occupancies a kernel can have are few (12.5%, 25%, ...): each is a
    shaded column of its own (categories, not a scale), and the points of one column are spread
    side by side in ladder order so that none hides another. fp32 rows and the tensor-core
    precisions get a panel each."""
    if "occupancy" not in results.df.columns:
        return None, "the CSVs have no occupancy column"
    df = passed_rows(results.df, "gflops")
    df = df[df["occupancy"].notna() & (df["backend"] != "cublas")]
    if len(df) < 2:
        return None, "fewer than 2 timed rows with an occupancy"
    sizes = distinct(zip(df["M"], df["N"], df["K"]))
    size = ladder_size(df)
    df = df[(df["M"] == size[0]) & (df["N"] == size[1]) & (df["K"] == size[2])]
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    df = df[df["layout"] == layouts[0]]
    df = df.assign(occ=(100 * df["occupancy"].astype(float)).round(2))
    precisions = precision_order(df["precision"])
    groups = [("fp32", [p for p in precisions if p in ("fp32", "")]),
              ("tensor", [p for p in precisions if p not in ("fp32", "")])]
    groups = [(g, ps) for g, ps in groups if ps]
    stages = stage_order(df["stage"])
    colors = stage_colors(stages)
    rank = {s: i for i, s in enumerate(stages)}
    fig = new_figure((13, 7.5) if len(groups) > 1 else (11, 7))
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
                       marker=BACKEND_MARKER.get(backend, "^"), s=POINT_AREA, edgecolors="black",
                       linewidths=0.6, zorder=5, label=BACKEND_LABEL.get(backend, backend),
                       gid=f"occupancy/{backend}")
            for x, g, s, p in zip(rows["x"], rows["gflops"], rows["stage"], rows["precision"]):
                text = f"{s}/{backend}" + (f" {p}" if group == "tensor" else "")
                points.append((float(x), float(g) / 1000, text))
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        ax.set_xlim(-0.6, len(cats) - 0.4)
        # categories, not a scale: evenly spaced values such as 25%, 50%, 56.25% on one line with
        # grid lines read as a linear axis; a shaded column per value, white gaps between, and no
        # tick marks read as boxes to sort the kernels into
        ax.set_xticks(range(len(cats)), [f"{c:g}%" for c in cats])
        ax.tick_params(axis="x", length=0, pad=6)
        for i in range(len(cats)):
            ax.axvspan(i - COLUMN / 2, i + COLUMN / 2, color="#ececec", lw=0, zorder=0,
                       gid="category")
        import matplotlib.ticker as mticker

        ax.yaxis.set_major_locator(mticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        style_axes(ax)
        ax.set_title("fp32 (CUDA cores)" if group == "fp32"
                     else "tensor-core precisions: " + ", ".join(precs), fontsize=FONTSIZE + 1)
        ax.set_xlabel("theoretical occupancy (% of warp slots), one column per value",
                      fontsize=FONTSIZE)
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
    fig.supxlabel("the occupancies are categories, not a scale: each value a kernel has is a "
                  "column of its own, in increasing order, evenly spaced whatever the step "
                  "between them", fontsize=FONTSIZE - 1, color="dimgray")
    at = size_label(*size) + (f", layout {layouts[0]}" if layouts[0] != "nn" else "")
    what = f"Occupancy alone does not decide speed: TFLOP/s against theoretical occupancy, {at}"
    if len(sizes) > 1:
        what += f" (of {len(sizes)} sizes)"
    set_figure_title(fig, what, results.sources, df["precision"])
    for ax, points in to_label:  # last: the legend and the title have settled the layout
        if len(points) <= 2 * MAX_LABELS:
            place_labels(ax, points, fontsize=FONTSIZE - 2, marker_size=POINT_AREA ** 0.5,
                         radii=(7, 14, 24, 36, 50, 66, 84), fallback=False)
    return fig, None
