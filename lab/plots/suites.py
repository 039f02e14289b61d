"""suites.png: % of cuBLAS per model layer and M, from the rows of a lab.compare run on a shape
suite (`--sizes llm`, `deepseek`, ...: rows labelled with a model and a layer, docs/SUITES.md).

A panel per precision (and layout): each layer of each model is a group along x, its M values
side by side inside it (the M under each slot, the layer under the group, the model over its
shaded band), a marker per stage and backend at the median of the repeats with a line from the
lowest to the highest, and the cuBLAS = 100% line. Under it, where rows are thin (M or N <= 64:
they carry `pct_hbm`), a panel of % of the HBM read bandwidth measured in the run, cuBLAS
included: how far each is from reading the weights at the memory's speed.
"""

from __future__ import annotations


from lab.plots.common import (
    BACKEND_COLOR, BACKEND_LABEL, BACKEND_MARKER, FONTSIZE, baseline_note, baseline_of,
    distinct, new_figure, precision_order, set_figure_title, stage_colors, stage_order,
    style_axes,
)

THIN = 64  # M or N at most this: a decode-shaped row, whose % HBM panel is drawn
GROUP_GAP = 0.8  # the space between two layers' groups, in M slots
MARKER_SIZE = 6.5
CROWDED = 60  # more M slots than this: their labels stand upright


def m_label(m: int) -> str:
    """An M under its slot, short enough for seven M values of a layer side by side: 16384 is
    16k, 1000 stays 1000."""
    m = int(m)
    return f"{m // 1024}k" if m >= 1024 and m % 1024 == 0 else str(m)


def _labelled(df):
    """Passing rows that carry a model or a layer label, with precision and layout filled in."""
    if df is None or "model" not in df.columns or "layer" not in df.columns:
        return None
    df = df.copy()
    for col, default in (("precision", "fp32"), ("layout", "nn")):
        if col not in df.columns:
            df[col] = default
        df[col] = df[col].fillna(default).replace("", default)
    for col in ("model", "layer"):
        df[col] = df[col].fillna("").astype(str)
    for col in ("pct_cublas", "pct_hbm", "hbm_read_gbps"):
        if col not in df.columns:
            df[col] = float("nan")
    return df[(df["status"] == "pass") & ((df["model"] != "") | (df["layer"] != ""))]


def _slots(df) -> tuple[dict, list, list]:
    """x of each (model, layer, M); the groups [(model, layer, centre)] in the order the rows
    came (a suite's order); the models' bands [(model, x0, x1)]."""
    x_of, groups, bands = {}, [], []
    x = 0.0
    for model, layer in distinct(zip(df["model"], df["layer"])):
        ms = sorted(distinct(df.loc[(df["model"] == model) & (df["layer"] == layer), "M"]))
        first = x
        for m in ms:
            x_of[(model, layer, int(m))] = x
            x += 1.0
        groups.append((model, layer, (first + x - 1.0) / 2))
        if bands and bands[-1][0] == model:
            bands[-1] = (model, bands[-1][1], x - 1.0)
        else:
            bands.append((model, first, x - 1.0))
        x += GROUP_GAP
    return x_of, groups, bands


def _series(df, column: str):
    """{(stage, backend): rows of (model, layer, M, median, lowest, highest)} of a column, over
    the repeats of each shape."""
    out = {}
    keys = ["stage", "backend", "model", "layer", "M"]
    part = df[df[column].notna()]
    if part.empty:
        return out
    agg = part.groupby(keys, sort=False)[column].agg(["median", "min", "max"]).reset_index()
    for (stage, backend), rows in agg.groupby(["stage", "backend"], sort=False):
        out[(stage, backend)] = rows
    return out


def _draw_points(ax, series: dict, x_of: dict, style: dict) -> None:
    """A marker per stage and backend at each slot, at the median, with a line over the spread
    of the repeats; the series of one slot side by side."""
    n = len(series)
    step = min(0.22, 0.66 / (n - 1)) if n > 1 else 0.0
    for j, (key, rows) in enumerate(series.items()):
        color, marker, label, size = style[key]
        dx = (j - (n - 1) / 2) * step
        xs = [x_of[(m, lay, int(M))] + dx for m, lay, M in
              zip(rows["model"], rows["layer"], rows["M"])]
        med = rows["median"].astype(float).to_numpy()
        lo = med - rows["min"].astype(float).to_numpy()
        hi = rows["max"].astype(float).to_numpy() - med
        bars = ax.errorbar(xs, med, yerr=[lo, hi], fmt=marker, ms=size, color=color,
                           mec="black", mew=0.5, elinewidth=1.0, capsize=0, label=label,
                           zorder=5)
        bars.lines[0].set_gid(f"{key[0]}/{key[1]}")


def _x_axis(ax, x_of: dict, groups: list, bands: list, names: bool) -> None:
    """The M of each slot under it; where `names`, the layer under its group; the models as
    shaded bands (every other one) named at the top."""
    import matplotlib.transforms as mtransforms

    crowded = len(x_of) > CROWDED
    ax.set_xticks(list(x_of.values()), [m_label(k[2]) for k in x_of], fontsize=FONTSIZE - 3,
                  rotation=90 if crowded else 0)
    ax.tick_params(axis="x", which="major", length=2, pad=1)
    if names:
        from lab.suites import tag

        ax.xaxis.remove_overlapping_locs = False  # a group's centre is often one of its M's
        ax.set_xticks([c for _, _, c in groups], [tag(m, lay) for m, lay, _ in groups],
                      minor=True)
        ax.tick_params(axis="x", which="minor", length=0, pad=20 if crowded else 12,
                       labelsize=FONTSIZE - 2,
                       labelrotation=35)
        for t in ax.get_xticklabels(minor=True):
            t.set_ha("right")
            t.set_rotation_mode("anchor")
    top = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    for i, (model, x0, x1) in enumerate(bands):
        if i % 2 == 0:
            ax.axvspan(x0 - 0.5 - GROUP_GAP / 2, x1 + 0.5 + GROUP_GAP / 2, color="#f0f0f0",
                       lw=0, zorder=0, gid="model-band")
        ax.text((x0 + x1) / 2, 0.985, model, transform=top, ha="center", va="top",
                fontsize=FONTSIZE - 2, color="dimgray", gid="model")
    lo = min(x_of.values()) - 0.5 - GROUP_GAP / 2
    hi = max(x_of.values()) + 0.5 + GROUP_GAP / 2
    ax.set_xlim(lo, hi)


def suites_figure(df, sources=(), hbm_panel: bool = True):
    """% of cuBLAS per layer and M of the rows labelled with a model and a layer (a suite's
    rows): (figure, None), or (None, reason) when there are none. `sources` (lab.plots.common
    Source) give the title's GPU, date and commit; `hbm_panel`: the % HBM panel under each
    precision where rows have a pct_hbm."""
    import pandas as pd

    if isinstance(df, (list, tuple)):  # Sources: their rows, one frame
        sources = list(df)
        df = pd.concat([s.df for s in sources], ignore_index=True) if sources else None
    df = _labelled(df)
    if df is None or df.empty:
        return None, "no passing row labelled with a model and a layer (a shape suite's rows)"
    stage_rows = df[(df["backend"] != "cublas") & df["pct_cublas"].notna()]
    if stage_rows.empty:
        return None, "no suite row with a % of cuBLAS"
    df = pd.concat([stage_rows, df[df["backend"] == "cublas"]], ignore_index=True)
    x_of, groups, bands = _slots(stage_rows)
    df = df[[(m, lay, int(M)) in x_of for m, lay, M in zip(df["model"], df["layer"], df["M"])]]
    layouts = sorted(distinct(stage_rows["layout"]), key=lambda lay: (lay != "nn", lay))
    keys = [(p, lay) for lay in layouts for p in precision_order(stage_rows["precision"])
            if ((stage_rows["precision"] == p) & (stage_rows["layout"] == lay)).any()]
    stages = stage_order(stage_rows["stage"])
    colors = stage_colors(stages)
    one_stage = len(stages) == 1

    def style_of(stage, backend):
        if backend == "cublas":
            return "black", "*", "cuBLAS", MARKER_SIZE + 3
        color = BACKEND_COLOR.get(backend, "grey") if one_stage else colors[stage]
        label = (BACKEND_LABEL.get(backend, backend) if one_stage
                 else f"{stage}/{BACKEND_LABEL.get(backend, backend)}")
        return color, BACKEND_MARKER.get(backend, "^"), label, MARKER_SIZE

    panels = []  # (precision, layout, what, rows)
    for prec, layout in keys:
        rows = df[(df["precision"] == prec) & (df["layout"] == layout)]
        panels.append((prec, layout, "pct_cublas", rows[rows["backend"] != "cublas"]))
        # the read-bandwidth panel: thin rows only, where reading the weights bounds the time
        thin = rows[rows["pct_hbm"].notna() & (rows[["M", "N"]].min(axis=1) <= THIN)]
        if hbm_panel and not thin.empty:
            panels.append((prec, layout, "pct_hbm", thin))
    width = min(18.0, max(9.0, 2.0 + 0.24 * (max(x_of.values()) + 1)))
    heights = [3.6 if what == "pct_cublas" else 3.0 for *_, what, _ in panels]
    last_of_key = {(p, lay): i for i, (p, lay, _, _) in enumerate(panels)}
    names_under = set(last_of_key.values())
    fig = new_figure((width, sum(heights) + 1.1 * len(names_under) + 1.4))
    axes = fig.subplots(len(panels), 1, squeeze=False,
                        height_ratios=[h + (1.1 if i in names_under else 0)
                                       for i, h in enumerate(heights)])[:, 0]
    for i, (ax, (prec, layout, what, rows)) in enumerate(zip(axes, panels)):
        order = sorted(distinct(zip(rows["stage"], rows["backend"])),
                       key=lambda k: (k[1] != "cublas", stages.index(k[0]) if k[0] in stages
                                      else -1, k[1] != "cuda", k[1]))
        series = _series(rows, what)
        series = {k: series[k] for k in order if k in series}
        _draw_points(ax, series, x_of, {k: style_of(*k) for k in series})
        # room over the 100% line for the models' names
        top = max([118.0] + [float(s["max"].max()) * 1.12 for s in series.values()])
        ax.set_ylim(0, top)
        where = f", layout {layout}" if len(layouts) > 1 or layout != "nn" else ""
        if what == "pct_cublas":
            ax.axhline(100, color="black", lw=1.3, ls="--", label="cuBLAS = 100%",
                       gid="cublas-100", zorder=4)
            title = f"{prec}: % of cuBLAS {baseline_of(prec)}{where} (higher is faster)"
            note = baseline_note(prec, 140)
            ax.set_title(title + (f"\n{note}" if note else ""), fontsize=FONTSIZE + 1)
            ax.set_ylabel("% of cuBLAS", fontsize=FONTSIZE)
        else:
            bw = rows["hbm_read_gbps"].dropna()
            read = f" ({float(bw.median()) / 1000:.2f} TB/s)" if not bw.empty else ""
            ax.axhline(100, color="dimgray", lw=1.3, ls=":", gid="hbm-100",
                       label="the read bandwidth measured in the run = 100%")
            ax.set_title(f"{prec}{where}, M or N <= 64: the least bytes (A, B and C once) over "
                         f"the time, as % of the HBM read bandwidth measured in the run{read}",
                         fontsize=FONTSIZE)
            ax.set_ylabel("% of HBM read", fontsize=FONTSIZE)
        style_axes(ax)
        _x_axis(ax, x_of, groups, bands, names=i in names_under)
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center",
               ncols=min(len(labels), 6), fontsize=FONTSIZE, frameon=False)
    stage_words = ", ".join(stages)
    set_figure_title(fig, f"% of cuBLAS per layer and M on model shapes: {stage_words}\n"
                     "each layer's M values side by side (the number under each mark), the "
                     "layers of one model on a band; a mark: the median of the repeats, its line "
                     "the lowest to the highest", list(sources), [p for p, _ in keys])
    return fig, None
