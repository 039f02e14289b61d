"""sweep.png: TFLOP/s against problem size (three or more sizes, evenly spaced in increasing
order of M*N*K), a line per stage and backend with cuBLAS as the thick black reference; a
panel per precision, fp32 in a row of its own when others are drawn too.
"""

from __future__ import annotations

import math

from lab.plots.common import (
    FONTSIZE, Results, baseline_of, distinct, new_figure, passed_rows, precision_order,
    set_figure_title, size_label, stage_colors, stage_order, style_axes,
)

MIN_SWEEP_SIZES = 3


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

    df = passed_rows(results.df, "gflops")
    sizes = distinct(zip(df["M"], df["N"], df["K"]))
    if len(sizes) < MIN_SWEEP_SIZES:
        return None, (f"{len(sizes)} size{'s' if len(sizes) != 1 else ''} with timed rows, "
                      f"needs {MIN_SWEEP_SIZES}")
    sizes = sorted(sizes, key=lambda k: (k[0] * k[1] * k[2], k))
    x_of = {k: float(i) for i, k in enumerate(sizes)}
    precisions = precision_order(df["precision"])
    layouts = sorted(distinct(df["layout"]), key=lambda lay: (lay != "nn", lay))
    panels = [(p, lay) for lay in layouts for p in precisions
              if ((df["precision"] == p) & (df["layout"] == lay)).any()]
    labels = [size_label(*k) for k in sizes]
    rotate = len(sizes) > 5 or max(len(t) for t in labels) > 6
    # fp32 (the long CUDA-core ladder, most lines) gets a row of its own when other precisions
    # are drawn too; the others share rows of up to five (the tensor-core precisions), and their
    # y axis
    wide = [k for k in panels if k[0] in ("fp32", "")] if len(panels) > 1 else []
    rest = [k for k in panels if k not in wide]
    ncols = max(1, min(5 if wide else 3, len(rest)))
    nrows = math.ceil(len(rest) / ncols)
    fig = new_figure((12, 5.0 * len(wide) + 4.2 * nrows + 1.4) if len(panels) > 1 else (10, 6))
    grid = fig.add_gridspec(len(wide) + nrows, ncols,
                            height_ratios=[1.25] * len(wide) + [1.0] * nrows)
    placed, shared = [], None
    for i, key in enumerate(wide):
        placed.append((key, fig.add_subplot(grid[i, :]), True))
    for i, key in enumerate(rest):
        ax = fig.add_subplot(grid[len(wide) + i // ncols, i % ncols], sharey=shared)
        shared = shared or ax
        placed.append((key, ax, i % ncols == 0))
    stages = stage_order(df.loc[df["backend"] != "cublas", "stage"])
    colors = stage_colors(stages)
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
        style_axes(ax)
        ax.grid(True, axis="x", alpha=0.3)
        # a precision compared with another's cuBLAS (the precision record's compared_with)
        # says which cuBLAS line it is drawn with
        extra = [p for p in ((f"{prec} (cuBLAS {baseline_of(prec)} for reference)"
                              if baseline_of(prec) != (prec or "fp32")
                              else prec if len(precisions) > 1 else ""),
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
    set_figure_title(fig, "TFLOP/s against problem size", results.sources, precisions)
    return fig, None
