"""When a lab.matmul call is slower than its prepared launch: `api x` (api_ratio) against the
margin between the kernel's GPU time and the call's CPU time, over lab.compare CSVs run with
--api. Reads CSVs only (no GPU); run from the repository root:

    PYTHONPATH=. python scripts/experiments/api_cpu_margin.py [CSV ...] [--over 1.03]

Default CSVs: the six stage-auto runs of results/2026-11-29-h200 and results/2026-11-30-h200.
Each row's margin is median_ms (the kernel, GPU-visible) minus api_us (CPU time per call with
its plan cached, measured back to back); the table gives, per band of margin, how many rows
there are and how many have api_ratio over --over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.csvfile import read_csv

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = sorted(str(p.relative_to(ROOT)) for day in ("2026-11-29-h200", "2026-11-30-h200")
                 for p in (ROOT / "results" / day).glob("auto-suites*.csv"))
BANDS = [(-1e9, -40), (-40, -30), (-30, -20), (-20, -10), (-10, 0), (0, 20), (20, 1e9)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="*", default=DEFAULT)
    ap.add_argument("--over", type=float, default=1.03, help="api_ratio counted as slower")
    args = ap.parse_args(argv)
    import pandas as pd

    frames = []
    for path in args.csv:
        try:
            df = read_csv(ROOT / path if not Path(path).is_absolute() else path)
        except OSError as exc:
            print(f"cannot read {path}: {exc.strerror}", file=sys.stderr)
            return 1
        if "api_ratio" not in df or df["api_ratio"].isna().all():
            print(f"{path} has no api_ratio column (run lab.compare with --api)", file=sys.stderr)
            return 1
        df = df.dropna(subset=["api_ratio", "api_us"])
        frames.append(df.assign(csv=path))
    d = pd.concat(frames)
    margin = d["median_ms"] * 1000 - d["api_us"]
    print(f"{len(d)} rows with --api timing in {len(frames)} CSVs; api_ratio over {args.over}:")
    print("| kernel GPU us - call CPU us | rows | over | share | median api_ratio |")
    print("|---|---:|---:|---:|---:|")
    for lo, hi in BANDS:
        band = d[(margin >= lo) & (margin < hi)]
        if not len(band):
            continue
        over = int((band["api_ratio"] > args.over).sum())
        name = (f"< {hi:g}" if lo < -1e8 else f">= {lo:g}" if hi > 1e8 else f"{lo:g} to {hi:g}")
        print(f"| {name} | {len(band)} | {over} | {100 * over / len(band):.1f}% | "
              f"{band['api_ratio'].median():.3f} |")
    print("\nper CSV: median CPU us per call, rows over")
    for path, df in d.groupby("csv"):
        print(f"  {path}: {df['api_us'].median():.1f} us, {(df['api_ratio'] > args.over).sum()} "
              f"of {len(df)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
