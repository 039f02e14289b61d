"""The warptiling stage's defaults (splitk=0: the split chosen from the shape, lab/base/splitk.py) on
both backends at the long-K shapes the automatic split is for and the square shapes it must
leave alone, measured by lab.compare beside cuBLAS fp32 (TF32 off), then one table:

    PYTHONPATH=. python scripts/experiments/splitk_default.py [--csv out/splitk-default.csv]

It runs, and prints before it does, exactly

    python -m lab.compare --stage warptiling --backend cuda,triton --precision fp32 \
        --sizes 320x192x786432,256x256x524288,4096,1025 --csv CSV

(any further arguments go to lab.compare, e.g. --repeat 3), then reads CSV back and prints, per
shape and backend: the split that ran (the `params` column), median ms, GFLOPS, % of cuBLAS
fp32 (timed beside the row), and the row's error against cuBLAS's on the same inputs: rel_err
(||C - ref|| / ||ref||, ref = float64) and max_err_k (max |C - ref| / K), each with the ratio to
cuBLAS's. Needs an NVIDIA GPU (lab.compare in CPU mode times nothing and skips the large rows).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab.csvfile import read_csv  # noqa: E402

SIZES = "320x192x786432,256x256x524288,4096,1025"


def compare_command(csv: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "lab.compare", "--stage", "warptiling", "--backend",
            "cuda,triton", "--precision", "fp32", "--sizes", SIZES, "--csv", str(csv), *extra]


def split_of(params: str) -> str:
    """splitk=N from a row's `params` column ('-' where it has none)."""
    for item in str(params).split(","):
        if item.startswith("splitk="):
            return item.split("=", 1)[1]
    return "-"


def num(value, fmt: str) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(value) else format(value, fmt)


def ratio(a, b) -> str:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}x"


def table(csv: Path) -> list[str]:
    rows = read_csv(csv)
    head = (f"{'shape':<16} {'backend':<7} {'splitk':>6} {'median ms':>10} {'GFLOPS':>9} "
            f"{'% cuBLAS':>8} {'rel err':>8} {'cuBLAS':>8} {'ratio':>6} {'max err/K':>9} "
            f"{'cuBLAS':>9} {'ratio':>6} status")
    out = [head, "-" * len(head)]
    for (M, N, K), shape_rows in rows.groupby(["M", "N", "K"], sort=False):
        cublas = shape_rows[shape_rows["backend"] == "cublas"]
        base = cublas.iloc[0] if len(cublas) else None
        for _, r in shape_rows.iterrows():
            is_base = r["backend"] == "cublas"
            b_rel = base["rel_err"] if base is not None else float("nan")
            b_max = base["max_err_k"] if base is not None else float("nan")
            out.append(
                f"{f'{M}x{N}x{K}':<16} {r['backend']:<7} "
                f"{'-' if is_base else split_of(r['params']):>6} {num(r['median_ms'], '.4f'):>10} "
                f"{num(r['gflops'], '.0f'):>9} {num(r['pct_cublas'], '.1f'):>8} "
                f"{num(r['rel_err'], '.2e'):>8} {num(b_rel, '.2e'):>8} "
                f"{'' if is_base else ratio(r['rel_err'], b_rel):>6} "
                f"{num(r['max_err_k'], '.2e'):>9} {num(b_max, '.2e'):>9} "
                f"{'' if is_base else ratio(r['max_err_k'], b_max):>6} {r['status']}")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=Path("splitk-default.csv"),
                        help="where lab.compare writes its rows (default ./splitk-default.csv)")
    parser.add_argument("--table-only", action="store_true",
                        help="print the table of an existing --csv without running lab.compare")
    args, extra = parser.parse_known_args(argv)
    args.csv = args.csv.resolve()
    if not args.table_only:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        cmd = compare_command(args.csv, extra)
        print("$ python " + " ".join(cmd[1:]), flush=True)
        code = subprocess.run(cmd, cwd=REPO).returncode
        if code not in (0, 1):  # 1: some row failed its check; the table still says which
            return code
    print()
    print("\n".join(table(args.csv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
