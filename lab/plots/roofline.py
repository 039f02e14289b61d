"""roofline.png, from lab.profile CSVs: each kernel at its arithmetic intensity and achieved
TFLOP/s under the DRAM roof and a compute roof per precision; where ROOF_ZOOM_MIN or more
kernels crowd below one roof, a second panel shows them closer.
"""

from __future__ import annotations

import math

from lab.plots.common import (
    BACKEND_LABEL, BACKEND_MARKER, FIGSIZE, FONTSIZE, PROFILE_COLUMNS, Source, distinct,
    new_figure, place_labels, set_figure_title, size_label, stage_colors, stage_order,
    style_axes,
)

ROOF_ZOOM_MIN = 6  # kernels crowding one roof that earn the roofline its second panel


def _marker_size(backend: str) -> float:
    """A point's marker size (points): cuBLAS's star larger than the kernels' marks."""
    return 12.0 if backend == "cublas" else 8.0


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
    fig = new_figure((13, 6.5) if crowd is not None else FIGSIZE)
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
    stages = stage_order(df["stage"])
    colors = stage_colors(stages)
    majority = max(distinct(df["precision"]), key=lambda p: int((df["precision"] == p).sum()))
    points, zoomed = [], []
    in_crowd = set(crowd.index) if crowd is not None else set()
    for i, r in df.iterrows():
        backend = str(r["backend"])
        size = _marker_size(backend)
        for a in (ax, zoom):
            if a is None or (a is zoom and i not in in_crowd):
                continue
            a.plot([r["intensity"]], [r["achieved_tflops"]], ls="none",
                   marker=BACKEND_MARKER.get(backend, "^"), ms=size,
                   color=colors.get(r["stage"], "grey"), mec="black", mew=0.6, zorder=5,
                   gid=f"{r['stage']}/{backend}" + ("" if a is ax else "/zoom"))
        label = "cuBLAS" if backend == "cublas" else f"{r['stage']}/{backend}"
        if several_prec and (backend == "cublas" or r["precision"] != majority):
            label += f" {r['precision']}"
        pt = (float(r["intensity"]), float(r["achieved_tflops"]), label, size)
        (zoomed if i in in_crowd else points).append(pt)
    fmt = mticker.FuncFormatter(lambda v, _: f"{v:g}")
    for a in (ax, zoom):
        if a is None:
            continue
        a.xaxis.set_major_formatter(fmt)
        a.yaxis.set_major_formatter(fmt)
        a.xaxis.set_minor_formatter(mticker.NullFormatter())
        a.set_xlabel("arithmetic intensity (FLOP per DRAM byte, log scale)", fontsize=FONTSIZE)
        style_axes(a)
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
        what += f", {size_label(m, n, k)}"
    set_figure_title(fig, what, sources, [p for s in sources
                                          for p in (s.df["precision"] if "precision" in s.df
                                                    else [])])
    def roofs(a):
        return [line for line in a.get_lines() if (line.get_gid() or "").startswith("roof-")]

    # each label clear of every marker (its own included, at the marker's drawn size), of the
    # other labels and of the roofs, a leader line to its point where it had to move further out
    place_labels(ax, points, avoid=[legend, *roof_artists[ax]],
                 obstacles=[(x, y, size) for x, y, _, size in zoomed],
                 radii=(7, 14, 24, 36, 50, 66), fallback=False, lines=roofs(ax))
    if zoom is not None:
        place_labels(zoom, zoomed, avoid=roof_artists[zoom],
                     radii=(7, 14, 24, 36, 50, 66, 84), fallback=False, lines=roofs(zoom))
    return fig, None
