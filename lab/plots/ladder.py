"""ladder.png: % of cuBLAS per stage, CUDA and Triton bars side by side in registry order, the
cuBLAS = 100% line and siboehm/SGEMM_CUDA's kernels as marks on the fp32 bars at 4096^3. One
precision: a panel per size (MAX_PANELS at most). Several precisions: every stage at one size,
fp32 across the top and a panel per tensor-core precision below, each bar with its value. A
panel whose cuBLAS call is not the plain one of its precision says which it is (the precision
record's plot_note). `marks` ({stage: words}): stages built for other shapes, whose square-shape
bars are left out and the words written in their place.
"""

from __future__ import annotations

import math

from lab.plots.common import (
    BACKEND_COLOR, BACKEND_LABEL, FONTSIZE, PREFERRED_SIZES, SGEMM_CUDA_PCT, Results,
    baseline_note, baseline_of, distinct, ladder_size, new_figure, passed_rows, precision_order,
    reference_marks, set_figure_title, size_label, stage_order, style_axes,
)

MAX_PANELS = 6


def _square_marks(marks, M, N, K) -> dict:
    """The marks that apply to a panel of this size: all of them at a square shape, none else.

    Why a mark in place of the bars rather than a label beside them: a stage built for other
    shapes (gemv: C with one column or a few) runs at 1% of cuBLAS at 4096^3 by design, and a bar
    that short in a ladder of % of cuBLAS reads as a broken kernel whatever is written next to it;
    its number there teaches nothing the stage's page does not say better (its own shapes, where
    it beats cuBLAS). The slot keeps the stage's name and says where to look; the tables of
    results/README.md keep the square-shape numbers."""
    return dict(marks or {}) if M == N == K else {}


def _own_shape_mark(ax, x: float, text: str) -> None:
    """The words in place of a stage's bars: upright in its slot, from the axis up (no band
    behind them: a shaded slot reads as one more bar, taller than the others)."""
    ax.annotate(text, (x, 0), xytext=(0, 4), textcoords="offset points", ha="center",
                va="bottom", rotation=90, fontsize=FONTSIZE - 2, color="dimgray",
                style="italic", gid="own-shape", linespacing=1.1)


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


def ladder_figure(results: Results, marks: dict | None = None):
    """% of cuBLAS per stage, CUDA and Triton bars, one panel per (precision, layout, size);
    (figure, None) or (None, reason). `marks` ({stage: words}): at square shapes, those stages'
    bars are left out and the words written in their slot."""
    df = passed_rows(results.df, "pct_cublas")
    df = df[df["backend"] != "cublas"]
    if df.empty:
        return None, "no passing GPU row with a % of cuBLAS"
    if len(distinct(df["precision"])) > 1:
        return _ladder_by_precision(df, results, marks)
    keys = distinct(zip(df["precision"], df["layout"], df["M"], df["N"], df["K"]))
    if len(keys) > MAX_PANELS:
        preferred = [k for k in keys if tuple(k[2:]) in PREFERRED_SIZES]
        rest = sorted((k for k in keys if k not in preferred), key=lambda k: -k[2] * k[3] * k[4])
        keys = (preferred + rest)[:MAX_PANELS]
    # squares by size, then the other shapes by M*N*K
    keys.sort(key=lambda k: (k[0], k[1] != "nn", k[1], not k[2] == k[3] == k[4],
                             k[2] * k[3] * k[4], k[2:]))
    stages = stage_order(df["stage"])
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
    fig = new_figure(figsize)
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
        own = _square_marks(marks, M, N, K)
        for s in own:
            if s in stages:
                _own_shape_mark(ax, stages.index(s), own[s])
        part = part[~part["stage"].isin(list(own))]
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
        reference_marks(ax, stages, backends, width, marked)
        name = size_label(M, N, K)
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
        style_axes(ax)
        if i % ncols == 0:
            ax.set_ylabel("% of cuBLAS (higher is faster)", fontsize=FONTSIZE)
    _bar_legend(fig, backends)
    what = "Speed of each stage as % of cuBLAS (same run, same shape)"
    if not several_prec:  # one precision: say its baseline where it is not its own plain call
        prec = keys[0][0]
        note = baseline_note(prec)
        if note or baseline_of(prec) != (prec or "fp32"):
            what += f"\n{prec}: " + (note or f"against cuBLAS {baseline_of(prec)}")
    set_figure_title(fig, what, results.sources, [k[0] for k in keys])
    return fig, None



def _value_labels(ax, bars, values, refs, color, top, vertical: bool = False) -> None:
    """Each bar's value above it (above its reference marker when that is higher); `vertical`:
    written upwards, for a panel whose bars are too narrow for the text side by side."""
    for bar, y, ref in zip(bars, values, refs):
        above = max(y, ref) if ref is not None else y
        near = ref is not None and ref > y - 0.04 * top
        ax.annotate(f"{y:.0f}" if y >= 9.95 else f"{y:.1f}",
                    (bar.get_x() + bar.get_width() / 2, above if near else y),
                    xytext=(0, 7 if near else 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=FONTSIZE - (2 if vertical else 1), color=color,
                    gid="value", rotation=90 if vertical else 0,
                    bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none"))


def _ladder_by_precision(df, results: Results, marks: dict | None = None):
    """Several precisions: every stage at one size (4096^3 when there), a panel per precision
    and layout: fp32 (the CUDA-core ladder) across the top, the tensor-core precisions in a row
    below, each bar with its value, siboehm/SGEMM_CUDA's kernels on the fp32 panel at 4096^3;
    each panel's title says what its bars are compared with."""
    size = ladder_size(df)
    M, N, K = size
    df = df[(df["M"] == M) & (df["N"] == N) & (df["K"] == K)]
    own = _square_marks(marks, M, N, K)
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    keys = [(p, lay) for lay in layouts for p in precision_order(df["precision"])
            if ((df["precision"] == p) & (df["layout"] == lay)).any()]
    backends = [b for b in ("cuda", "triton") if b in set(df["backend"])]
    backends += sorted(set(df["backend"]) - set(backends))
    width = 0.8 / len(backends)
    wide = [k for k in keys if k[0] in ("fp32", "")]  # the long ladder: a row of its own
    rest = [k for k in keys if k not in wide]
    # a panel of many stages needs room: two panels a row instead of four
    crowded = max([len(set(df.loc[(df["precision"] == p) & (df["layout"] == lay), "stage"]))
                   for p, lay in rest] or [0]) > 5
    ncols = max(1, min(2 if crowded else 4, len(rest)))
    rows_of_rest = math.ceil(len(rest) / ncols) if rest else 0
    fig = new_figure((11, 4.6 * len(wide) + 4.0 * rows_of_rest + 1.3))
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
        stages = stage_order(part["stage"])
        top = (max(110.0, float(part["pct_cublas"].max()) * 1.15) if (prec, layout) in wide
               else rest_top)
        marked = size == (4096, 4096, 4096) and prec in ("fp32", "") and layout == "nn"
        for s in stages:
            if s in own:
                _own_shape_mark(ax, stages.index(s), own[s])
        for j, backend in enumerate(backends):
            rows = part[part["backend"] == backend].set_index("stage")["pct_cublas"]
            rows = rows[~rows.index.isin(list(own))]
            here = [s for s in stages if s in rows.index]
            xs = [stages.index(s) + (j - (len(backends) - 1) / 2) * width for s in here]
            ys = [float(rows[s]) for s in here]
            color = BACKEND_COLOR.get(backend, f"C{j + 2}")
            bars = ax.bar(xs, ys, width, color=color, label=BACKEND_LABEL.get(backend, backend))
            for bar, s in zip(bars, here):
                bar.set_gid(f"{s}/{backend}")
            refs = [SGEMM_CUDA_PCT.get(s) if marked and backend == "cuda" else None
                    for s in here]
            _value_labels(ax, bars, ys, refs, "black", top,
                          vertical=(prec, layout) not in wide and crowded)
            missing = [s for s in stages if s not in rows.index and s not in own]
            for s in missing:  # this stage has no kernel of this backend in this precision
                ax.annotate(f"no {BACKEND_LABEL.get(backend, backend)}",
                            (stages.index(s) + (j - (len(backends) - 1) / 2) * width, 0),
                            xytext=(0, 3), textcoords="offset points", ha="center",
                            va="bottom", rotation=90, fontsize=FONTSIZE - 2, color="grey",
                            gid="missing")
        reference_marks(ax, stages, backends, width, marked)
        name = prec or "fp32"
        title = f"{name}: % of cuBLAS {baseline_of(prec)}"
        if name == "fp32":
            title = "fp32 on CUDA cores: % of cuBLAS fp32"
        if layout != "nn":
            title += f", layout {layout}"
        # the cuBLAS call it is compared with, where "cuBLAS <precision>" alone would mislead
        # (3xTF32 against fp32, fp8 against a scaled product): the precision record's words
        note = baseline_note(prec, 64 if (prec, layout) not in wide and ncols > 1 else 120)
        ax.set_title(title + (f"\n{note}" if note else ""), fontsize=FONTSIZE + 1)
        ax.set_xticks(range(len(stages)))
        ax.set_xticklabels(stages, rotation=30 if len(stages) > 4 else 0,
                           ha="right" if len(stages) > 4 else "center",
                           rotation_mode="anchor")
        ax.set_xlim(-0.6, len(stages) - 0.4)
        ax.set_ylim(0, top)
        style_axes(ax)
        if ax is placed[0][1] or ax.get_subplotspec().colspan.start == 0:
            ax.set_ylabel("% of cuBLAS", fontsize=FONTSIZE)
        else:
            ax.tick_params(axis="y", labelleft=False)
    _bar_legend(fig, backends)
    set_figure_title(fig, f"Every stage at {size_label(*size)}: % of cuBLAS at the same "
                     "precision (higher is faster)", results.sources)
    return fig, None
