"""`python -m lab.plot RUN.csv [RUN2.csv ...] -o DIR`: PNG figures of lab results (no GPU needed).
`python -m lab.plot --suites RUN.csv -o FILE.png`: the model-shapes figure alone, into one file.

From `lab.compare` CSVs (GPU rows):

- ladder.png: % of cuBLAS per stage, CUDA and Triton bars side by side (stages in registry order),
  the cuBLAS = 100% line, and siboehm/SGEMM_CUDA's kernels measured on the same H100 as markers
  on the fp32 bars at 4096^3. One precision: a panel per size (six at most, 4096^3 and 1025^3
  first, then the largest sizes). Several precisions: every stage at one size (4096^3 when
  there), fp32 across the top, a panel per tensor-core precision below, each bar with its value
  and "no CUDA" where a stage has no kernel of a backend in that precision. A panel whose cuBLAS
  call is not its precision's plain one says which it is (3xTF32: cuBLAS fp32; fp8:
  torch._scaled_mm), in the precision record's words (lab/base/precisions.py plot_note).
  draw(..., marks={stage: words}) leaves those stages' bars out at square shapes and writes the
  words in their slot (lab.results: gemv, a matrix-vector stage).
- sweep.png: TFLOP/s against size (three or more sizes, evenly spaced in increasing order of
  M*N*K), a line per stage and backend, cuBLAS as the reference; a panel per precision (fp32 in
  a row of its own when others are drawn too), one axis caption for the figure. Each registry
  stage has a colour of its own, the same in every figure (common.py STAGE_PALETTE).
- occupancy.png: TFLOP/s (log) against theoretical occupancy at one size (4096^3 when there), one
  point per kernel, the points of one occupancy side by side, fp32 and the tensor-core
  precisions in a panel each: occupancy alone does not decide speed. The occupancies are
  categories, each a shaded column of its own, not places on a scale.
- suites.png, from the rows of a shape suite (`--sizes llm`, `deepseek`, ...: rows labelled with
  a model and a layer): % of cuBLAS per layer and M, a panel per precision, each layer a group of
  its M values, a mark per stage and backend (the median of the repeats, a line from the lowest to
  the highest), the cuBLAS = 100% line; under it, for thin rows (M or N <= 64), % of the HBM read
  bandwidth measured in the run, cuBLAS included. Drawn only for a CSV with such rows.

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

This file is the command (argparse, main) and re-exports the names other code imports; the
figures are drawn in lab/plots/, one module per concern, each importing only those above it:

    common.py     shared pieces: sizes, colours, labels, CSV reading and row selection, titles,
                  the cuBLAS line and SGEMM_CUDA marks, point labels
    ladder.py     ladder.png
    sweep.py      sweep.png
    roofline.py   roofline.png
    occupancy.py  occupancy.png
    suites.py     suites.png
    build.py      figures() and draw(): every figure the CSVs support, written as PNGs
"""

from __future__ import annotations

import argparse
import sys

from lab.cli import ArgumentParser, guarded
from lab.plots.build import PLOTS, check_out_dir, draw, figures
from lab.plots.common import (
    BACKEND_COLOR, BACKEND_LABEL, BACKEND_MARKER, DPI, FIGSIZE, FONTSIZE, PREFERRED_SIZES,
    PROFILE_COLUMNS, RESULT_COLUMNS, SGEMM_CUDA_LABEL, SGEMM_CUDA_PCT, Results, Source,
    baseline_of, distinct, ladder_size, read_source, title_suffix,
)
from lab.plots.ladder import MAX_PANELS, ladder_figure
from lab.plots.occupancy import MAX_LABELS, occupancy_figure
from lab.plots.roofline import ROOF_ZOOM_MIN, roofline_figure
from lab.plots.suites import suites_figure
from lab.plots.sweep import MIN_SWEEP_SIZES, sweep_figure

__all__ = [  # what lab.compare, lab.results and the tests read from lab.plot
    "BACKEND_COLOR", "BACKEND_LABEL", "BACKEND_MARKER", "DPI", "FIGSIZE", "FONTSIZE",
    "MAX_LABELS", "MAX_PANELS", "MIN_SWEEP_SIZES", "PLOTS", "PREFERRED_SIZES", "PROFILE_COLUMNS",
    "RESULT_COLUMNS", "ROOF_ZOOM_MIN", "SGEMM_CUDA_LABEL", "SGEMM_CUDA_PCT", "Results", "Source",
    "baseline_of", "build_parser", "check_out_dir", "distinct", "draw", "figures",
    "ladder_figure", "ladder_size", "main", "occupancy_figure", "read_source",
    "roofline_figure", "suites_figure", "sweep_figure", "title_suffix",
]


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.plot", description="PNG figures of lab.compare and lab.profile "
                       "CSVs (matplotlib, no GPU needed).",
                       epilog="Figures: ladder.png, sweep.png (3+ sizes), occupancy.png, "
                              "suites.png (a shape suite's rows; from lab.compare CSVs) and "
                              "roofline.png (from a lab.profile CSV).")
    p.add_argument("csv", nargs="+", metavar="RUN.csv",
                   help="lab.compare or lab.profile CSVs (their .env.json beside them names the "
                        "GPU, date and commit in the titles)")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="folder for the PNGs (created if missing); with --suites, a file name "
                        "ending in .png may be given instead")
    p.add_argument("--suites", action="store_true",
                   help="draw only the model-shapes figure (%% of cuBLAS per layer and M of a "
                        "shape suite's rows): into -o's .png file, or suites.png in -o's folder")
    return p


def _main(argv: list[str] | None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    args = build_parser().parse_args(argv)
    if args.suites:
        to_file = args.out if str(args.out).lower().endswith(".png") else None
        drawn = draw(args.csv, args.out, only=("suites",), out_file=to_file)
    else:
        drawn = draw(args.csv, args.out)
    for path in drawn:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
