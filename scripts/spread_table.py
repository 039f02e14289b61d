"""The spread of each row's % of cuBLAS over the repeats of a --repeat run, for two CSVs side by
side (the older 'once' protocol and the 'adjacent' one): a markdown table on stdout.

    python scripts/spread_table.py spread-once.csv spread-adjacent.csv
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.csvfile import read_csv  # noqa: E402


def spreads(path):
    df = read_csv(path)
    df = df[(df["backend"] != "cublas") & df["pct_cublas"].notna()]
    out = {}
    for key, g in df.groupby(["stage", "backend", "M", "N", "K"]):
        p = g["pct_cublas"]
        clocks = g["sm_mhz_mean"].dropna() if "sm_mhz_mean" in g else []
        out[key] = (len(p), p.median(), p.min(), p.max(),
                    (clocks.min(), clocks.max()) if len(clocks) else None)
    return out


def main(argv):
    names = [Path(p).stem.replace("spread-", "") for p in argv]
    tables = [spreads(p) for p in argv]
    head = "| stage | backend | size | " + " | ".join(
        f"{n}: median % cuBLAS | {n}: min..max (spread)" for n in names) + " |"
    print(head)
    print("|" + "---|" * (3 + 2 * len(names)))
    for key in sorted(set().union(*tables)):
        stage, backend, M, N, K = key
        cells = []
        for t in tables:
            if key not in t:
                cells += ["-", "-"]
                continue
            n, med, lo, hi, _ = t[key]
            cells += [f"{med:.1f}", f"{lo:.1f}..{hi:.1f} ({hi - lo:.1f})"]
        print(f"| {stage} | {backend} | {M}x{N}x{K} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
