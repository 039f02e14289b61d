"""lab.plot: the figures drawn from committed results (CPU only, no GPU, a few seconds).

Each figure is checked through its matplotlib objects (panels, bars, lines, points, titles), and the
written files are checked to be PNGs. The CLI's mistakes are one `error:` sentence and exit 2.
"""

import ast
import json
import os
import shutil

import pytest

from helpers import ROOT, run_lab
from lab import plot
from lab.csvfile import read_csv
from lab.stages import STAGES

RUN = ROOT / "results" / "2026-11-22-h100"
FINAL = RUN / "08-final-all.csv"  # 1024^3, 1025^3, 2048^3, 4096^3, 4096x2048x1000
LAYOUTS = RUN / "15-layouts-4096-all.csv"  # 4096^3, layouts nn, nt, tn, tt
PROFILE = RUN / "05-profile-ladder-ncu.csv"  # lab.profile, no .env.json beside it
FULL = ROOT / "results" / "2026-11-26-h100" / "ladder.csv"  # every stage, 5 precisions, 4 sizes
FULL_PROFILE = ROOT / "results" / "2026-11-25-h100" / "profile-4096.csv"  # fp32 + bf16 rows
SUITES = ROOT / "results" / "2026-11-29-h200" / "decode-suites.csv"  # llm@1+16+64, deepseek@1
AUTO_SUITES = ROOT / "results" / "2026-11-29-h200" / "auto-suites-bf16.csv"  # llm, deepseek
GPU = "NVIDIA H100 80GB HBM3"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


_DRAWN: dict = {}  # the figures of a list of CSVs, drawn once for the tests that only read them


@pytest.fixture(scope="module", autouse=True)
def _clear_drawn():
    yield
    for out in _DRAWN.values():
        for f in out.values():
            f.clear()
    _DRAWN.clear()


@pytest.fixture
def figs():
    """figures(...) of some CSVs, drawn once per module: the tests look at them and change
    nothing (a test that changes a figure draws its own with plot.figures)."""

    def make(paths):
        key = tuple(str(p) for p in paths)
        if key not in _DRAWN:
            _DRAWN[key] = plot.figures(list(key))
        return _DRAWN[key]

    return make


def bars(ax) -> dict:
    """{"stage/backend": height} of a ladder panel."""
    return {p.get_gid(): p.get_height() for p in ax.patches if p.get_gid()}


def by_gid(ax, gid):
    return [line for line in ax.get_lines() if line.get_gid() == gid]


def title(fig) -> str:
    return fig.get_suptitle()


# ------------------------------------------------------------------------------------ files


@pytest.mark.fast
def test_draw_writes_a_png_per_supported_plot(tmp_path, capsys):
    written = plot.draw([FINAL, PROFILE], tmp_path / "plots")
    names = sorted(p.name for p in written)
    assert names == ["ladder.png", "occupancy.png", "roofline.png", "sweep.png"]
    for p in written:
        assert p.parent == tmp_path / "plots"
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    assert capsys.readouterr().err == ""  # nothing skipped, nothing left out


def test_draw_skips_what_the_data_cannot_support_in_one_line(tmp_path, capsys):
    written = plot.draw([LAYOUTS], tmp_path)
    assert sorted(p.name for p in written) == ["ladder.png", "occupancy.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ladder.png", "occupancy.png"]
    err = _one_note(capsys.readouterr().err)
    assert "sweep (1 size" in err and "roofline (no lab.profile CSV" in err
    assert "layout nt, tn, tt left out" in err


def test_profile_csv_alone_draws_only_the_roofline(tmp_path, capsys):
    written = plot.draw([PROFILE], tmp_path)
    assert [p.name for p in written] == ["roofline.png"]
    err = capsys.readouterr().err
    assert "ladder (no lab.compare CSV given)" in err


# ----------------------------------------------------------------------------------- ladder


def test_ladder_has_a_panel_per_size_and_a_bar_per_stage_and_backend(figs):
    fig = figs([FINAL])["ladder"]
    df = read_csv(FINAL)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["1024³", "1025³", "2048³", "4096³",
                                               "4096x2048x1000"]
    ran = df[(df.backend != "cublas") & (df.status == "pass")]
    expected = {f"{s}/{b}" for s, b in zip(ran.stage, ran.backend)}
    assert len(expected) == 16  # 8 stages x CUDA and Triton
    for ax in axes:
        M, N, K = ((4096, 2048, 1000) if "x" in ax.get_title()
                   else (int(ax.get_title()[:-1]),) * 3)
        heights = bars(ax)
        assert set(heights) == expected
        rows = ran[(ran.M == M) & (ran.N == N) & (ran.K == K)]
        for s, b, pct in zip(rows.stage, rows.backend, rows.pct_cublas):
            assert heights[f"{s}/{b}"] == pytest.approx(pct)
        (line,) = by_gid(ax, "cublas-100")
        assert list(line.get_ydata()) == [100, 100]
        assert ax.get_ylim()[1] > 100
    assert "%" in axes[0].get_ylabel()
    for piece in (GPU, "fp32", "2026-11-22", "commit 4140691"):
        assert piece in title(fig)


def test_ladder_stages_follow_the_registry(figs):
    ax = figs([FINAL])["ladder"].axes[-1]  # a bottom panel: it shows the stage names
    names = [t.get_text() for t in ax.get_xticklabels()]
    registry = [s.name for s in STAGES]
    assert names == [n for n in registry if n in names]
    assert set(names) == set(read_csv(FINAL).stage) - {"cublas"}


def test_ladder_marks_sgemm_cuda_at_4096_only(figs):
    fig = figs([FINAL])["ladder"]
    for ax in fig.axes:
        markers = by_gid(ax, "sgemm_cuda")
        if ax.get_title() != "4096³":
            assert markers == []
            continue
        (m,) = markers
        assert m.get_label() == "siboehm/SGEMM_CUDA (H100, 2026-11-22)"
        assert list(m.get_ydata()) == [1.0, 12.4, 17.9, 33.4, 50.3, 61.5]
        # each marker sits on its stage's CUDA bar
        cuda_x = {p.get_gid(): p.get_x() + p.get_width() / 2 for p in ax.patches if p.get_gid()}
        stages = ["naive", "coalesced", "tiled", "blocktile_1d", "blocktile_2d", "vectorized"]
        assert list(m.get_xdata()) == pytest.approx([cuda_x[f"{s}/cuda"] for s in stages])
    legend = fig.legends[0]
    assert "siboehm/SGEMM_CUDA (H100, 2026-11-22)" in [t.get_text() for t in legend.texts]


def test_ladder_keeps_nn_rows_when_a_csv_has_them(figs):
    fig = figs([LAYOUTS])["ladder"]
    (ax,) = fig.axes
    assert ax.get_title() == "4096³"
    df = read_csv(LAYOUTS)
    nn = df[(df.layout == "nn") & (df.backend == "cuda") & (df.stage == "vectorized")]
    assert bars(ax)["vectorized/cuda"] == pytest.approx(nn.pct_cublas.iloc[0])
    assert len(by_gid(ax, "sgemm_cuda")) == 1
    assert "commit dceb35d" in title(fig)


def test_ladder_of_a_csv_without_nn_has_a_panel_per_layout(tmp_path, figs):
    df = read_csv(LAYOUTS)
    path = tmp_path / "other-layouts.csv"
    df[df.layout != "nn"].to_csv(path, index=False)
    fig = figs([path])["ladder"]
    assert [ax.get_title() for ax in fig.axes] == ["4096³ (layout nt)", "4096³ (layout tn)",
                                                   "4096³ (layout tt)"]
    for ax in fig.axes:
        assert len(bars(ax)) == 16 and by_gid(ax, "sgemm_cuda") == []
    # no environment file beside it: no GPU, date or commit in the title, the precision stays
    assert GPU not in title(fig) and "commit" not in title(fig) and "fp32" in title(fig)


def test_ladder_picks_at_most_six_panels_preferring_4096_and_1025(tmp_path, figs):
    df = read_csv(FINAL)
    cube = df[(df.M == df.N) & (df.N == df.K)]
    frames = [cube]
    for n in (64, 128, 256, 512):  # four more (small) sizes: nine in all
        small = cube[cube.M == 1024].copy()
        small[["M", "N", "K"]] = n
        frames.append(small)
    import pandas as pd

    path = tmp_path / "many.csv"
    pd.concat(frames).to_csv(path, index=False)
    fig = figs([path])["ladder"]
    assert len(fig.axes) == plot.MAX_PANELS
    titles = [ax.get_title() for ax in fig.axes]
    assert "4096³" in titles and "1025³" in titles and "64³" not in titles
    assert titles == ["256³", "512³", "1024³", "1025³", "2048³", "4096³"]


# ------------------------------------------------------------------------------------ sweep


def test_sweep_has_a_line_per_stage_and_backend_and_cublas(figs):
    fig = figs([FINAL])["sweep"]
    (ax,) = fig.axes
    lines = {line.get_gid(): line for line in ax.get_lines()
             if line.get_gid() and "/" in line.get_gid()}
    df = read_csv(FINAL)
    ran = df[df.backend != "cublas"]
    assert set(lines) == {f"{s}/{b}" for s, b in zip(ran.stage, ran.backend)}
    for gid, line in lines.items():
        stage, backend = gid.split("/")
        assert line.get_linestyle() == ("-" if backend == "cuda" else "--")
        assert len(line.get_xdata()) == 5  # every size
        twin = lines[f"{stage}/{'triton' if backend == 'cuda' else 'cuda'}"]
        assert line.get_color() == twin.get_color()
    (cublas,) = by_gid(ax, "cublas")
    assert cublas.get_color() == "black" and cublas.get_linewidth() >= 3
    assert sorted(cublas.get_ydata()) == pytest.approx(
        sorted(df[df.backend == "cublas"].gflops / 1000))
    assert ax.get_yscale() == "log"
    # the sizes evenly spaced in increasing order of M*N*K: 1024^3 and 1025^3 a slot apart
    order = ["1024³", "1025³", "4096x2048x1000", "2048³", "4096³"]
    assert [t.get_text() for t in ax.get_xticklabels()] == order
    assert list(cublas.get_xdata()) == [0, 1, 2, 3, 4]
    assert "TFLOP/s" in ax.get_ylabel() and ax.get_xlabel() == ""
    assert "size" in fig.get_supxlabel()  # one axis caption for the figure, not one per panel
    assert GPU in title(fig) and "fp32" in title(fig)


def test_sweep_of_several_precisions_has_fp32_across_the_top_and_one_axis_caption(figs):
    fig = figs([FULL])["sweep"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "fp32" and set(titles[1:]) == {
        "tf32", "3xtf32 (cuBLAS fp32 for reference)", "bf16", "fp16", "fp8"}
    top, rest = fig.axes[0], fig.axes[1:]
    assert top.get_position().width > 2 * rest[0].get_position().width
    ys = {round(ax.get_position().y0, 3) for ax in rest}
    assert len(ys) == 1 and top.get_position().y0 > ys.pop()  # one row below the fp32 panel
    assert all(ax.get_xlabel() == "" for ax in fig.axes) and "size" in fig.get_supxlabel()
    df = read_csv(FULL)
    fp32 = df[(df.precision == "fp32") & (df.backend != "cublas")]
    drawn = {line.get_gid() for line in top.get_lines() if line.get_gid()
             and "/" in line.get_gid()}
    assert drawn == {f"{s}/{b}" for s, b in zip(fp32.stage, fp32.backend)}


def test_sweep_needs_three_sizes(figs):
    assert "sweep" not in figs([LAYOUTS])


# --------------------------------------------------------------------------------- roofline


def test_roofline_has_both_roofs_and_a_point_per_kernel(figs):
    fig = figs([PROFILE])["roofline"]
    (ax,) = fig.axes
    df = read_csv(PROFILE)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    (dram,) = by_gid(ax, "roof-dram")
    (compute,) = by_gid(ax, "roof-compute")
    peak, bw = df.peak_tflops.iloc[0], df.peak_bw_tbs.iloc[0]
    assert list(compute.get_ydata()) == pytest.approx([peak, peak])
    x0, x1 = dram.get_xdata()
    assert dram.get_ydata()[0] == pytest.approx(x0 * bw)
    assert x1 == pytest.approx(peak / bw) == pytest.approx(compute.get_xdata()[0])  # the ridge
    points = {}
    for s, b in zip(df.stage, df.backend):
        (pt,) = by_gid(ax, f"{s}/{b}")
        points[f"{s}/{b}"] = (pt.get_xdata()[0], pt.get_ydata()[0])
    assert len(points) == len(df) == 9
    row = df[(df.stage == "tiled") & (df.backend == "triton")].iloc[0]
    assert points["tiled/triton"] == pytest.approx((row.intensity, row.achieved_tflops))
    labels = {t.get_text() for t in ax.texts}
    assert {"tiled/triton", "naive/cuda", "cuBLAS"} <= labels
    assert {"FP32 compute roof: 66.9 TFLOP/s", "DRAM roof: 3.00 TB/s \u00d7 intensity",
            "ridge 22.3 FLOP/B"} <= labels
    assert "FLOP" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
    # no .env.json: the GPU comes from the peaks lab.profile read off the device
    assert GPU in title(fig) and "commit" not in title(fig)


# -------------------------------------------------------------------------------- occupancy


def _occupancy_points(fig) -> dict:
    got = {}
    for ax in fig.axes:
        for coll in ax.collections:
            got.setdefault(coll.get_gid(), []).extend(map(tuple, coll.get_offsets()))
    return got


def test_occupancy_has_a_point_per_kernel_at_one_size(figs):
    fig = figs([FINAL])["occupancy"]
    (ax,) = fig.axes
    df = read_csv(FINAL)
    rows = df[df.occupancy.notna() & df.gflops.notna() & (df.backend != "cublas")
              & (df.M == 4096) & (df.N == 4096) & (df.K == 4096)]
    got = _occupancy_points(fig)
    assert set(got) == {"occupancy/cuda", "occupancy/triton"}
    assert sum(len(v) for v in got.values()) == len(rows) == 16
    # y: the row's TFLOP/s; x: its occupancy's slot (occupancies in increasing order), the
    # points of one slot side by side within it
    slots = sorted({round(100 * float(o), 2) for o in rows.occupancy})
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{o:g}%" for o in slots]
    cuda = rows[rows.backend == "cuda"]
    want = sorted(gf / 1000 for gf in cuda.gflops)
    assert sorted(y for _, y in got["occupancy/cuda"]) == pytest.approx(want)
    for (x, y), (o, gf) in zip(sorted(got["occupancy/cuda"], key=lambda p: p[1]),
                               sorted(zip(cuda.occupancy, cuda.gflops), key=lambda p: p[1])):
        assert abs(x - slots.index(round(100 * float(o), 2))) < 0.4
    assert ax.get_yscale() == "log" and "%" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
    labels = {n for t in ax.texts if t.get_gid() == "label" for n in t.get_text().split("\n")}
    assert len(labels) == 16 and "vectorized/cuda" in labels and "naive/triton" in labels
    assert "occupancy" in title(fig).lower() and GPU in title(fig) and "4096³" in title(fig)


def test_occupancy_of_several_precisions_puts_the_tensor_cores_in_a_panel_of_their_own(figs):
    fig = figs([FULL])["occupancy"]
    fp32_ax, tensor_ax = fig.axes
    assert "fp32" in fp32_ax.get_title() and "tensor-core" in tensor_ax.get_title()
    df = read_csv(FULL)
    rows = df[(df.backend != "cublas") & (df.M == 4096) & df.occupancy.notna()]
    n_fp32 = int((rows.precision == "fp32").sum())
    assert sum(len(c.get_offsets()) for c in fp32_ax.collections) == n_fp32
    assert sum(len(c.get_offsets()) for c in tensor_ax.collections) == len(rows) - n_fp32
    from lab.plot import MAX_LABELS

    for ax in fig.axes:  # every point named next to it, or (too many) by the legend alone
        n = sum(len(c.get_offsets()) for c in ax.collections)
        labels = len([line for t in ax.texts if t.get_gid() == "label"
                      for line in t.get_text().split("\n")])
        assert labels == (n if n <= 2 * MAX_LABELS else 0), (ax.get_title(), n, labels)
    legend = {t.get_text() for lg in fig.legends for t in lg.get_texts()}
    assert set(rows.stage) <= legend  # the legend names every stage on the plot


# ------------------------------------------------------------------ several precisions (ladder)


def test_ladder_of_several_precisions_is_every_stage_at_4096_a_panel_per_precision(figs):
    fig = figs([FULL])["ladder"]
    df = read_csv(FULL)
    rows = df[(df.backend != "cublas") & (df.M == 4096) & (df.N == 4096) & (df.K == 4096)]
    titles = [ax.get_title().split("\n")[0] for ax in fig.axes]
    assert titles == ["fp32 on CUDA cores: % of cuBLAS fp32", "tf32: % of cuBLAS tf32",
                      "3xtf32: % of cuBLAS fp32", "bf16: % of cuBLAS bf16",
                      "fp16: % of cuBLAS fp16", "fp8: % of cuBLAS fp8"]
    assert "4096³" in title(fig) and GPU in title(fig) and "2026-11-26" in title(fig)
    for ax, prec in zip(fig.axes, ["fp32", "tf32", "3xtf32", "bf16", "fp16", "fp8"]):
        part = rows[rows.precision == prec]
        heights = bars(ax)
        assert heights == pytest.approx({f"{s}/{b}": p for s, b, p in
                                         zip(part.stage, part.backend, part.pct_cublas)})
        values = [t for t in ax.texts if t.get_gid() == "value"]
        assert len(values) == len(heights)  # every bar says its value
        stages = [t.get_text() for t in ax.get_xticklabels()]
        assert stages == [s.name for s in STAGES if s.name in set(part.stage)]
        missing = [t for t in ax.texts if t.get_gid() == "missing"]
        assert len(missing) == 2 * len(stages) - len(heights)  # "no CUDA" where none
        assert (by_gid(ax, "sgemm_cuda") != []) == (prec == "fp32")
    # every stage of the registry is on the picture, but those measured on their own shapes
    from lab.results import OWN_SHAPES

    shown = {t.get_text() for ax in fig.axes for t in ax.get_xticklabels()}
    assert shown == {s.name for s in STAGES if s.name not in OWN_SHAPES}


def test_roofline_of_several_precisions_has_a_roof_each_and_a_closer_panel(figs):
    fig = figs([FULL_PROFILE])["roofline"]
    main, zoom = fig.axes
    df = read_csv(FULL_PROFILE)
    for s, b in zip(df.stage, df.backend):
        assert len(by_gid(main, f"{s}/{b}")) == len(df[(df.stage == s) & (df.backend == b)])
    assert len(by_gid(main, "roof-compute")) == 2 and len(by_gid(main, "roof-dram")) == 1
    texts = {t.get_text() for t in main.texts}
    assert "FP32 compute roof: 66.9 TFLOP/s" in texts
    assert any(t.startswith("bf16 tensor-core compute roof") for t in texts)
    assert {"cuBLAS fp32", "cuBLAS bf16"} <= {t.get_text() for a in fig.axes for t in a.texts}
    (box,) = [p for p in main.patches if p.get_gid() == "zoom-box"]
    zoomed = [line for line in zoom.get_lines() if (line.get_gid() or "").endswith("/zoom")]
    assert len(zoomed) >= plot.ROOF_ZOOM_MIN
    # every kernel named once, in one of the two panels (points drawn on one another share a
    # label, a line each)
    names = [n for a in fig.axes for t in a.texts if t.get_gid() == "label"
             for n in t.get_text().split("\n")]
    assert len(names) == len(df) and len(set(names)) == len(df)


# ------------------------------------------------------------------------- legible: no text
# over text, in any figure the committed files give


def _text_corners(t, renderer):
    """The corners (display units) of a text's own rectangle, rotated as drawn."""
    import math

    from matplotlib.text import Text

    bb = Text.get_window_extent(t, renderer)
    theta = math.radians(t.get_rotation() % 180)
    if abs(math.sin(theta)) < 1e-6:
        return [(bb.x0, bb.y0), (bb.x1, bb.y0), (bb.x1, bb.y1), (bb.x0, bb.y1)]
    rotation = t.get_rotation()
    t.set_rotation(0)
    flat = Text.get_window_extent(t, renderer)
    t.set_rotation(rotation)
    w, h = flat.width, flat.height
    c, s = math.cos(theta), math.sin(theta)
    p = (bb.x0 + h * s, bb.y0) if s * c >= 0 else (bb.x1, bb.y0 + w * s)
    u, v = (w * c, w * s), (-h * s, h * c)
    return [p, (p[0] + u[0], p[1] + u[1]), (p[0] + u[0] + v[0], p[1] + u[1] + v[1]),
            (p[0] + v[0], p[1] + v[1])]


def _apart(a, b, pad=0.5) -> bool:
    """Two convex quadrilaterals do not overlap (separating axis)."""
    import math

    for poly in (a, b):
        for i in range(4):
            (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % 4]
            nx, ny = y0 - y1, x1 - x0
            n = math.hypot(nx, ny) or 1.0
            pa = [(x * nx + y * ny) / n for x, y in a]
            pb = [(x * nx + y * ny) / n for x, y in b]
            if max(pa) <= min(pb) + pad or max(pb) <= min(pa) + pad:
                return True
    return False


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Every pair of drawn texts (titles, axis labels, tick labels in view, annotations, legend
    entries) whose rectangles overlap."""
    from matplotlib.text import Text

    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    seen, texts = set(), []

    def add(t):
        if t is None or id(t) in seen or not t.get_visible() or not t.get_text().strip():
            return
        seen.add(id(t))
        if Text.get_window_extent(t, renderer).width > 0:
            texts.append((t.get_text(), _text_corners(t, renderer)))

    for t in fig.texts:
        add(t)
    for legend in fig.legends:
        for t in legend.get_texts():
            add(t)
    for ax in fig.axes:
        for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts):
            add(t)
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if lo - 1e-9 * abs(hi) <= tick.get_loc() <= hi + 1e-9 * abs(hi):
                    add(tick.label1)
        if ax.get_legend():
            for t in ax.get_legend().get_texts():
                add(t)
    return [(a, b) for i, (a, pa) in enumerate(texts) for b, pb in texts[i + 1:]
            if not _apart(pa, pb)]


@pytest.mark.parametrize("csvs", [[FULL, FULL_PROFILE], [FINAL, PROFILE], [LAYOUTS]],
                         ids=["full-run", "first-day", "layouts"])
def test_no_text_is_drawn_over_another(csvs, figs):
    for name, fig in figs(csvs).items():
        assert overlapping_texts(fig) == [], name


def test_no_text_of_the_committed_suites_figure_is_drawn_over_another():
    from lab.plot import read_source, suites_figure

    fig, why = suites_figure([read_source(SUITES)])
    assert why is None and overlapping_texts(fig) == []
    fig.clear()


def test_the_suites_figure_of_every_m_keeps_its_labels_apart_and_its_hbm_panel_thin():
    """stage auto on llm and deepseek: seven M values per layer, 1 to 16384. The M labels are
    short (16k) and upright, nothing is drawn over anything else, and the read-bandwidth panel
    holds the thin rows only (M <= 64), where reading the weights bounds the time."""
    from lab.plot import read_source, suites_figure
    from lab.plots.suites import m_label

    assert [m_label(m) for m in (1, 64, 1000, 1024, 16384)] == ["1", "64", "1000", "1k", "16k"]
    fig, why = suites_figure([read_source(AUTO_SUITES)])
    assert why is None and overlapping_texts(fig) == []
    cub, hbm = fig.axes[:2]
    assert "16k" in [t.get_text() for t in cub.get_xticklabels()]
    assert "HBM" in hbm.get_title()
    drawn = [y for line in hbm.lines if line.get_gid() for y in line.get_xdata()]
    ticks = dict(zip(cub.get_xticks(), (t.get_text() for t in cub.get_xticklabels())))
    nearest = [min(ticks, key=lambda t: abs(t - x)) for x in drawn]
    assert drawn and {ticks[t] for t in nearest} <= {"1", "16", "64"}
    fig.clear()


def test_the_overlap_check_sees_colliding_labels():
    fig = plot.figures([str(FINAL)])["ladder"]  # its own: this test changes it
    ax = fig.axes[-1]
    ax.set_xticks(range(len(ax.get_xticks())), [t.get_text() for t in ax.get_xticklabels()],
                  rotation=0)  # long stage names side by side, upright: they collide
    ax.annotate("over the title", (0.5, 1.0), xycoords="axes fraction", ha="center",
                va="bottom", fontsize=14)
    assert len(overlapping_texts(fig)) >= 2


# ------------------------------------------------------ what a reader could misread, and its fix


def test_a_stage_built_for_other_shapes_is_a_mark_not_a_bar_at_square_shapes(figs):
    """gemv (matrix-vector) runs at 1% of cuBLAS at 4096^3 by design: in the picture lab.results
    draws, its slot holds words pointing to its page instead of bars that read as broken."""
    from lab.results import SQUARE_MARKS

    assert SQUARE_MARKS and set(SQUARE_MARKS) <= {s.name for s in STAGES}
    plain = figs([FULL])["ladder"]  # without marks: the canonical run's gemv rows are bars
    assert any(g.split("/")[0] in SQUARE_MARKS for ax in plain.axes for g in bars(ax))
    fig = plot.figures([FULL], marks=SQUARE_MARKS)["ladder"]
    seen = 0
    for ax in fig.axes:
        stages = [t.get_text() for t in ax.get_xticklabels()]
        marks = [t for t in ax.texts if t.get_gid() == "own-shape"]
        here = [s for s in stages if s in SQUARE_MARKS]
        assert sorted(t.get_text() for t in marks) == sorted(SQUARE_MARKS[s] for s in here)
        assert [stages[round(t.xy[0])] for t in marks] == here  # in the stage's own slot
        assert not any(g.split("/")[0] in SQUARE_MARKS for g in bars(ax))
        missing = [t for t in ax.texts if t.get_gid() in ("missing", "value")]
        assert all(stages[round(t.xy[0])] not in SQUARE_MARKS for t in missing)
        seen += len(marks)
    assert seen >= 1
    assert overlapping_texts(fig) == []
    fig.clear()


def test_marks_apply_at_square_shapes_only():
    fig = plot.figures([FINAL], marks={"naive": "built for other shapes"})["ladder"]
    for ax in fig.axes:
        square = "x" not in ax.get_title()
        assert any(g.startswith("naive/") for g in bars(ax)) == (not square), ax.get_title()
        marked = [t.get_text() for t in ax.texts if t.get_gid() == "own-shape"]
        assert marked == (["built for other shapes"] if square else []), ax.get_title()
    fig.clear()


def test_lab_results_draws_its_ladder_with_the_marks(monkeypatch):
    from lab import results

    seen = {}

    def fake_draw(paths, out, **kw):
        seen.update(kw, paths=paths)
        return []

    monkeypatch.setattr(plot, "draw", fake_draw)
    assert results._draw(results.RESULTS, check=False) == []
    assert seen["marks"] == results.SQUARE_MARKS


def test_each_panel_says_its_baseline_in_the_words_of_the_precision_record(figs):
    """3xTF32 is compared with cuBLAS fp32 and fp8 with torch._scaled_mm: a panel of either says
    so under its title, in the record's words; the plot code holds none of them."""
    from lab.base import precisions

    noted = [r for r in precisions.RECORDS if r.plot_note]
    assert {"3xtf32", "fp8"} <= {r.name for r in noted}
    assert "torch._scaled_mm" in precisions.get("fp8").plot_note
    assert "copy of B" in precisions.get("fp8").plot_note
    assert "cuBLAS fp32" in precisions.get("3xtf32").plot_note
    fig = figs([FULL])["ladder"]
    for ax in fig.axes:
        head, *rest = ax.get_title().split("\n")
        rec = precisions.get(head.split(":")[0].split()[0])
        assert f"% of cuBLAS {rec.baseline}" in head
        assert " ".join(rest) == rec.plot_note, head
    for path in [ROOT / "lab" / "plot.py", *(ROOT / "lab" / "plots").glob("*.py")]:
        code = ast.unparse(ast.parse(path.read_text(encoding="utf-8")))  # comments dropped
        for r in noted:
            assert r.plot_note[:30] not in code, path


def test_a_ladder_of_one_precision_says_its_baseline_in_its_title(tmp_path, figs):
    from lab.base import precisions

    df = read_csv(FULL)
    for prec in ("fp8", "3xtf32"):
        path = tmp_path / f"{prec}.csv"
        df[df.precision == prec].to_csv(path, index=False)
        assert precisions.get(prec).plot_note in title(figs([path])["ladder"])


def test_every_stage_of_the_registry_has_a_colour_unlike_every_other():
    """18 stages on one panel: any two stages' colours (and any stage's and cuBLAS's black) are
    at least MIN_STAGE_COLOR_DISTANCE apart in CIEDE2000 (matplotlib's C0..C9 and tab20b gave
    blocktile_1d and wgmma 8.1)."""
    from itertools import combinations

    from lab.plots.common import MIN_STAGE_COLOR_DISTANCE, color_distance, stage_colors

    names = [s.name for s in STAGES]
    colors = stage_colors(names)
    worst = min((color_distance(colors[a], colors[b]), a, b)
                for a, b in combinations(names, 2))
    assert worst[0] >= MIN_STAGE_COLOR_DISTANCE, worst
    assert min(color_distance(colors[n], "black") for n in names) >= MIN_STAGE_COLOR_DISTANCE
    assert stage_colors(list(reversed(names))) == colors  # a stage's colour, in every figure
    for a, b in zip(names, names[1:]):  # neighbours in the ladder further apart still
        assert color_distance(colors[a], colors[b]) >= 1.5 * MIN_STAGE_COLOR_DISTANCE, (a, b)


def test_the_colour_difference_is_ciede2000():
    from lab.plots.common import color_distance, delta_e, lab_of

    # Sharma, Wu and Dalal (2005), the CIEDE2000 test data: pairs 1, 7, 13, 20 and 34
    for lab1, lab2, want in (((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
                             ((50, 0, 0), (50, -1, 2), 2.3669),
                             ((50, 2.4900, -0.0010), (50, -2.4900, 0.0009), 7.1792),
                             ((50, 2.5, 0), (61, -5, 29), 22.8977),
                             ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644)):
        assert delta_e(lab1, lab2) == pytest.approx(want, abs=1e-4)
    assert lab_of("white") == pytest.approx((100, 0, 0), abs=0.01)
    assert lab_of("#ff0000") == pytest.approx((53.24, 80.09, 67.20), abs=0.05)
    assert color_distance("tab:blue", "tab:blue") == 0


def _marker_boxes(ax) -> list:
    """(gid, display box) of every marker drawn, at its drawn size with its edge."""
    dpi = ax.figure.dpi
    out = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " ") or line.get_linestyle() not in (
                "None", "none", ""):
            continue
        half = (line.get_markersize() + line.get_markeredgewidth()) * dpi / 72 / 2
        for x, y in zip(line.get_xdata(), line.get_ydata()):
            px, py = ax.transData.transform((x, y))
            out.append((line.get_gid(), (px - half, py - half, px + half, py + half)))
    for coll in ax.collections:
        sizes, widths = coll.get_sizes(), coll.get_linewidths()
        for k, (x, y) in enumerate(coll.get_offsets()):
            half = (sizes[k % len(sizes)] ** 0.5 + widths[k % len(widths)]) * dpi / 72 / 2
            px, py = ax.transData.transform((x, y))
            out.append((coll.get_gid(), (px - half, py - half, px + half, py + half)))
    return out


@pytest.mark.parametrize("csvs,name", [([FULL_PROFILE], "roofline"), ([PROFILE], "roofline"),
                                       ([FULL], "occupancy"), ([FINAL], "occupancy")],
                         ids=["roofline-full", "roofline-first-day", "occupancy-full",
                              "occupancy-first-day"])
def test_no_point_label_touches_a_marker(csvs, name, figs):
    """Every label at least a pixel clear of every marker as drawn: its own and the others."""
    from matplotlib.text import Text

    fig = figs(csvs)[name]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = 0
    for ax in fig.axes:
        boxes = _marker_boxes(ax)
        for t in ax.texts:
            if t.get_gid() != "label":
                continue
            labels += 1
            bb = Text.get_window_extent(t, renderer)
            for gid, (x0, y0, x1, y1) in boxes:
                apart = max(x0 - bb.x1, bb.x0 - x1, y0 - bb.y1, bb.y0 - y1)
                assert apart >= 1, (t.get_text(), gid, apart)
    assert labels > 5


def test_the_label_check_sees_a_label_on_a_marker():
    from matplotlib.text import Text

    fig = plot.figures([str(PROFILE)])["roofline"]  # its own: this test changes it
    ax = fig.axes[0]
    (pt,) = by_gid(ax, "naive/cuda")
    t = ax.annotate("on it", (pt.get_xdata()[0], pt.get_ydata()[0]), ha="center", va="center",
                    gid="label")
    fig.canvas.draw()
    bb = Text.get_window_extent(t, fig.canvas.get_renderer())
    hits = [gid for gid, (x0, y0, x1, y1) in _marker_boxes(ax)
            if max(x0 - bb.x1, bb.x0 - x1, y0 - bb.y1, bb.y0 - y1) < 1]
    assert "naive/cuda" in hits
    fig.clear()


def test_occupancy_columns_read_as_categories_not_a_scale(figs):
    """Each occupancy a kernel has is a shaded column of its own, white gaps between, its value
    under it and no tick marks; every point inside the column of its occupancy; the figure
    says the axis is not a scale."""
    fig = figs([FULL])["occupancy"]
    assert "categories, not a scale" in fig.get_supxlabel()
    for ax in fig.axes:
        fig.canvas.draw()
        cols = sorted((p.get_window_extent() for p in ax.patches if p.get_gid() == "category"),
                      key=lambda b: b.x0)
        ticks = ax.get_xticklabels()
        assert len(cols) == len(ticks) >= 2 and all(t.get_text().endswith("%") for t in ticks)
        for a, b in zip(cols, cols[1:]):
            assert b.x0 - a.x1 >= 8  # a white gap between two columns
        for col, tick in zip(cols, ticks):
            centre = ax.transData.transform((tick.get_position()[0], 0))[0]
            assert col.x0 < centre < col.x1
        assert all(t.tick1line.get_markersize() == 0 for t in ax.xaxis.get_major_ticks())
        for coll in ax.collections:
            for x, y in coll.get_offsets():
                px = ax.transData.transform((x, y))[0]
                assert any(c.x0 <= px <= c.x1 for c in cols)
        assert not any(line.get_xdata()[0] == line.get_xdata()[-1] for line in ax.get_lines()
                       if len(line.get_xdata()))  # no vertical rules that read as a scale


# ---------------------------------------------------------------- model shapes (suites.png)


def _suite_frame(hbm: bool = True):
    """Two Llama-2-7B layers at M = 1 and 16 and a DeepSeek-V3 layer at M = 1, in bf16 and fp8,
    three repeats: decode's CUDA kernel at 90, 91, 92% of cuBLAS, its Triton twin at 80, 79, 78."""
    import pandas as pd

    rows = []
    for prec in ("bf16", "fp8"):
        for model, layer, ms in (("Llama-2-7B", "qkv", (1, 16)), ("Llama-2-7B", "down", (1, 16)),
                                 ("DeepSeek-V3", "kv_b", (1,))):
            for M in ms:
                for rep in range(3):
                    for backend, stage, pct, share in (("cublas", "cublas", 100.0, 50.0),
                                                      ("cuda", "decode", 90.0 + rep, 45.0),
                                                      ("triton", "decode", 80.0 - rep, 40.0)):
                        rows.append(dict(stage=stage, backend=backend, precision=prec, M=M,
                                         N=4096, K=4096, layout="nt", model=model, layer=layer,
                                         status="pass", pct_cublas=pct,
                                         pct_hbm=share + M / 16 if hbm else None,
                                         hbm_read_gbps=4464.0, repeat=rep))
    return pd.DataFrame(rows)


def test_suites_figure_has_a_panel_per_precision_a_group_per_layer_and_a_slot_per_m():
    from lab.base import precisions
    from lab.plot import suites_figure

    fig, why = suites_figure(_suite_frame())
    assert why is None
    cub_bf16, hbm_bf16, cub_fp8, hbm_fp8 = fig.axes
    assert cub_bf16.get_title().startswith("bf16: % of cuBLAS bf16")
    assert " ".join(cub_fp8.get_title().split("\n")[1:]) == precisions.get("fp8").plot_note
    assert "HBM" in hbm_bf16.get_title() and "4.46 TB/s" in hbm_bf16.get_title()
    for ax in (cub_bf16, cub_fp8):
        (line,) = by_gid(ax, "cublas-100")
        assert list(line.get_ydata()) == [100, 100]
        cuda, triton = by_gid(ax, "decode/cuda")[0], by_gid(ax, "decode/triton")[0]
        assert list(cuda.get_ydata()) == [91.0] * 5  # the median of the three repeats
        assert list(triton.get_ydata()) == [79.0] * 5
        xs = list(cuda.get_xdata())
        steps = [round(b - a, 3) for a, b in zip(xs, xs[1:])]
        assert steps[0] == steps[2] == 1.0 and steps[1] > 1.0 and steps[3] > 1.0  # groups
        assert all(c < t for t, c in zip(triton.get_xdata(), xs))  # side by side in a slot
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "16", "1", "16", "1"]
        assert by_gid(ax, "cublas/cublas") == []  # cuBLAS is the 100% line here
    for ax in (hbm_bf16, hbm_fp8):
        assert by_gid(ax, "cublas/cublas") and by_gid(ax, "decode/cuda")
        assert [t.get_text() for t in ax.get_xticklabels(minor=True)] == [
            "L2-7B qkv", "L2-7B down", "DSv3 kv_b"]  # the layers under the lower panel
    assert [t.get_text() for t in cub_bf16.get_xticklabels(minor=True)] == []
    models = [t.get_text() for t in cub_bf16.texts if t.get_gid() == "model"]
    assert models == ["Llama-2-7B", "DeepSeek-V3"]
    legend = {t.get_text() for lg in fig.legends for t in lg.get_texts()}
    assert {"CUDA", "Triton", "cuBLAS = 100%", "cuBLAS"} <= legend
    assert overlapping_texts(fig) == []
    fig.clear()


def test_suites_figure_spreads_the_repeats_and_leaves_out_the_hbm_panel_without_its_column():
    from lab.plot import suites_figure

    fig, why = suites_figure(_suite_frame(hbm=False))
    assert why is None and len(fig.axes) == 2
    ax = fig.axes[0]
    (cuda,) = by_gid(ax, "decode/cuda")
    segments = [c for c in ax.collections if len(c.get_segments()) == 5]
    spans = sorted(round(seg[1][1] - seg[0][1], 6) for c in segments for seg in c.get_segments())
    assert spans.count(2.0) == 10  # 90..92 and 78..80 at each of the 5 slots
    fig.clear()


def test_suites_figure_of_rows_without_labels_says_why():
    from lab.plot import suites_figure

    df = _suite_frame()
    fig, why = suites_figure(df.drop(columns=["model", "layer"]))
    assert fig is None and "model" in why
    df["model"], df["layer"] = "", ""
    assert suites_figure(df)[0] is None


def test_draw_adds_suites_png_for_a_suite_run_only(tmp_path, capsys):
    path = tmp_path / "suite.csv"
    _suite_frame().to_csv(path, index=False)
    written = plot.draw([path], tmp_path / "out")
    assert "suites.png" in [p.name for p in written]
    assert "suites" not in plot.figures([FINAL])  # no labelled rows: no figure, nothing said


def test_cli_draws_the_suites_figure_into_one_file(tmp_path):
    path = tmp_path / "suite.csv"
    _suite_frame().to_csv(path, index=False)
    out = tmp_path / "pictures" / "decode-suites.png"
    r = cli("--suites", path, "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"wrote {out}"]
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    assert sorted(p.name for p in out.parent.iterdir()) == ["decode-suites.png"]
    r = cli("--suites", FINAL, "--out", tmp_path / "none.png")  # no suite rows: said, no file
    assert r.returncode == 0 and "suites (no passing row labelled" in " ".join(r.stderr.split())
    assert not (tmp_path / "none.png").exists()


# --------------------------------------------------------------------------------- the CLI


def cli(*args):
    return run_lab("lab.plot", *args, timeout=120)


def test_cli_writes_the_pngs_and_says_what_it_skipped(tmp_path):
    r = cli(LAYOUTS, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"wrote {tmp_path / 'out' / 'ladder.png'}",
                                     f"wrote {tmp_path / 'out' / 'occupancy.png'}"]
    assert _one_note(r.stderr).startswith("plots skipped: sweep")


def _one_note(err: str) -> str:
    """The skipped-plots note is one note wrapped to 80 columns at spaces: its lines joined back."""
    lines = err.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), err
    assert all(line.startswith("  ") for line in lines[1:]), err  # continuation lines indented
    return " ".join(line.strip() for line in lines)


def one_sentence_error(capsys, argv) -> str:
    assert plot.main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    err = out.err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_cli_missing_csv(tmp_path, capsys):
    err = one_sentence_error(capsys, [str(FINAL), str(tmp_path / "nope.csv"), "-o",
                                      str(tmp_path / "out")])
    assert "nope.csv" in err and "no such file" in err
    assert not (tmp_path / "out").exists()  # nothing created


def test_cli_csv_that_is_not_a_lab_results_file(tmp_path, capsys):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    err = one_sentence_error(capsys, [str(other), "-o", str(tmp_path / "o")])
    assert "is not a lab results file" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "is not a lab results file" in one_sentence_error(
        capsys, [str(empty), "-o", str(tmp_path / "o")])
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "is not a lab results file" in one_sentence_error(
        capsys, [str(binary), "-o", str(tmp_path / "o")])
    assert not (tmp_path / "o" / "ladder.png").exists()


def test_cli_unwritable_output_folder(tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    err = one_sentence_error(capsys, [str(FINAL), "-o", str(a_file)])
    assert "it is a file, not a folder" in err
    err = one_sentence_error(capsys, [str(FINAL), "-o", str(a_file / "sub")])
    assert "is a file, not a folder" in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        try:
            assert "cannot write plots into" in one_sentence_error(
                capsys, [str(FINAL), "-o", str(locked)])
        finally:
            locked.chmod(0o700)


def test_cli_usage_errors(tmp_path, capsys):
    assert "--help" in one_sentence_error(capsys, [str(FINAL)])  # no -o
    assert "--help" in one_sentence_error(capsys, ["-o", str(tmp_path)])  # no CSV


def test_env_file_is_read_beside_the_csv(tmp_path, figs):
    csv = tmp_path / "run.csv"
    shutil.copy(LAYOUTS, csv)
    (tmp_path / "run.env.json").write_text(json.dumps(
        {"gpu": "Some GPU", "timestamp": "2027-01-02T03:04:05+00:00", "commit": None}))
    t = title(figs([csv])["ladder"])
    assert "Some GPU" in t and "2027-01-02" in t and "commit" not in t


def test_nothing_to_draw_writes_nothing(tmp_path, capsys):
    """A CPU-mode CSV (no times): no figure, one line saying why, and no error."""
    df = read_csv(FINAL)
    df["status"] = df["status"].where(df.backend == "triton", "compiled")
    for col in ("median_ms", "gflops", "pct_cublas"):
        df[col] = None
    path = tmp_path / "cpu.csv"
    df.to_csv(path, index=False)
    assert plot.draw([str(path)], str(tmp_path / "out")) == []
    assert list((tmp_path / "out").iterdir()) == []
    err = _one_note(capsys.readouterr().err)
    assert err.startswith("plots skipped: ladder (no passing GPU row with a % of cuBLAS)")


# lab/plots/ in the order lab/plots/__init__.py lists it: each module imports only those before it.
PLOT_LAYERS = ("common", "ladder", "sweep", "roofline", "occupancy", "suites", "build")


def _lab_imports(path) -> set[str]:
    """The lab modules a file imports anywhere in it (`from a import b`: a.b where that is a
    module of lab/plots/, else a)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                known = node.module == "lab.plots" and a.name in PLOT_LAYERS
                out.add(sub if known else node.module)
    return {m for m in out if m == "lab" or m.startswith("lab.")}


def test_the_plot_modules_import_only_the_ones_listed_before_them():
    """One module per figure over one shared module, the command on top: no module of lab/plots/
    imports lab.plot or a module listed after it, and each opens with a docstring."""
    folder = ROOT / "lab" / "plots"
    assert sorted(p.stem for p in folder.glob("*.py")) == sorted([*PLOT_LAYERS, "__init__"])
    for i, name in enumerate(PLOT_LAYERS):
        path = folder / f"{name}.py"
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), name
        plots = {m for m in _lab_imports(path) if m == "lab.plot" or m.startswith("lab.plots")}
        allowed = {f"lab.plots.{m}" for m in PLOT_LAYERS[:i]}
        assert plots <= allowed, (name, sorted(plots - allowed))
    assert "lab.plots.build" in _lab_imports(ROOT / "lab" / "plot.py")
    assert "lab.plots.common" in _lab_imports(folder / "ladder.py")
