"""Print the matrix a stage page shows from a `python -m lab.compare --repeat N` CSV: one row per
size and precision, one column per layout, each cell the median over the repeats of % of cuBLAS
at the same precision and layout (3xtf32: of cuBLAS fp32), CUDA / Triton.

    python scripts/stage_matrix.py results/2026-11-26-h100/hopper-stages.csv persistent

A cell is `-` where that backend's kernel does not offer the precision, and `fail` where its rows
did not pass. Sizes and precisions come out in the order the CSV first names them.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import pandas as pd


def cell(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "-"
    if (rows["status"] != "pass").any():
        return "fail"
    return f"{statistics.median(rows['pct_cublas'].astype(float)):.1f}"


def size_text(m: int, n: int, k: int) -> str:
    return f"{m}^3" if m == n == k else f"{m} x {n} x {k}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("stage")
    ap.add_argument("--layouts", default="nn,nt,tn,tt")
    args = ap.parse_args(argv)
    df = pd.read_csv(args.csv)
    df = df[df["stage"] == args.stage]
    if df.empty:
        print(f"no rows of stage {args.stage} in {args.csv}", file=sys.stderr)
        return 1
    layouts = args.layouts.split(",")
    print("| size | precision | " + " | ".join(layouts) + " |")
    print("|---|---|" + "---:|" * len(layouts))
    sizes = list(dict.fromkeys(zip(df["M"], df["N"], df["K"])))
    for m, n, k in sizes:
        at = df[(df["M"] == m) & (df["N"] == n) & (df["K"] == k)]
        for precision in dict.fromkeys(at["precision"]):
            p = at[at["precision"] == precision]
            cells = []
            for layout in layouts:
                lay = p[p["layout"] == layout]
                cells.append(" / ".join(cell(lay[lay["backend"] == b]) for b in ("cuda", "triton")))
            print(f"| {size_text(m, n, k)} | {precision} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
