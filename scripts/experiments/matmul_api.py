"""What a user's lab.matmul call costs beside the launch lab.compare times: every stage x backend x
precision at 4096^3 and 8192^3, one table:

    PYTHONPATH=. python scripts/experiments/matmul_api.py [--csv out/matmul-api.csv] [ARGS...]

It runs, and prints before it does, exactly

    python -m lab.compare --stage all --precision fp32,tf32,3xtf32,bf16,fp16 --sizes 4096,8192 \
        --api --rep-ms 30 --csv CSV

(further arguments go to lab.compare), then reads CSV back and prints per row: the prepared
launch's median ms (`median_ms`), the same computation as `lab.matmul(a, b, out=c, ...)` (`api_ms`,
its plan cached: lab/plan.py), torch.matmul at the same precision timed beside it (`cublas_ms`),
the lab.matmul call over the launch timed interleaved with it (`api_ratio`), and CPU microseconds per call of lab.matmul (`api_us`), of the
stage's prepare() (`prepare_us`, what each call cost before plans were cached) and of torch.matmul
(the cuBLAS row's `api_us`). docs/COLUMNS.md defines each column. Needs an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab.csvfile import read_csv  # noqa: E402


def compare_command(csv: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "lab.compare", "--stage", "all", "--precision",
            "fp32,tf32,3xtf32,bf16,fp16", "--sizes", "4096,8192", "--api", "--rep-ms", "30",
            "--csv", str(csv), *extra]


def _f(x, fmt: str) -> str:
    import pandas as pd

    return "-" if x is None or pd.isna(x) else format(float(x), fmt)


def table(df) -> list[str]:
    """The table's lines from lab.compare's CSV (lab.csvfile.read_csv's DataFrame)."""
    def col(r, name):
        return getattr(r, name, None)

    rows = list(df.itertuples(index=False))
    torch_us = {(r.precision, r.M, r.N, r.K): col(r, "api_us") for r in rows
                if r.stage == "cublas"}
    lines = [f"{'stage':16} {'backend':7} {'prec':6} {'size':16} {'prepared ms':>11} "
             f"{'matmul ms':>10} {'torch ms':>9} {'ratio':>6} {'matmul us':>9} {'prepare us':>10} "
             f"{'torch us':>8}"]
    for r in rows:
        if r.stage == "cublas" or r.status != "pass":
            continue
        api, med = col(r, "api_ms"), r.median_ms
        ratio = col(r, "api_ratio")  # both timed interleaved (docs/COLUMNS.md)
        lines.append(
            f"{r.stage:16} {r.backend:7} {r.precision:6} {f'{r.M}x{r.N}x{r.K}':16} "
            f"{_f(med, '.4g'):>11} {_f(api, '.4g'):>10} {_f(r.cublas_ms, '.4g'):>9} "
            f"{_f(ratio, '.3f'):>6} {_f(col(r, 'api_us'), '.0f'):>9} "
            f"{_f(col(r, 'prepare_us'), '.0f'):>10} "
            f"{_f(torch_us.get((r.precision, r.M, r.N, r.K)), '.0f'):>8}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default="out/matmul-api.csv")
    args, extra = ap.parse_known_args(argv)
    csv = Path(args.csv)
    cmd = compare_command(csv, extra)
    print("$", " ".join(cmd[1:]), flush=True)
    code = subprocess.call(cmd, cwd=REPO)
    if not csv.exists():
        return code or 1
    print("\n".join(table(read_csv(csv))))
    return code


if __name__ == "__main__":
    sys.exit(main())
