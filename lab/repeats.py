"""Medians over the repeats of a `--repeat N` run: one row per measurement for the table.

The CSV keeps every repeat's row; the table shows the median of the repeats' medians and their
min..max as the spread (docs/TRUST.md).
"""

from __future__ import annotations

from dataclasses import replace

from lab.computed import fill_bandwidth, gflops
from lab.row import OK_STATUSES, Row

def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


# The key that says two rows of different repeats are the same measurement.
def repeat_key(r: Row) -> tuple:
    return (r.stage, r.backend, r.precision, r.layout, r.M, r.N, r.K, r.params)


def summarize_repeats(rows: list[Row]) -> list[Row]:
    """One row per measurement over the repeats of a `--repeat N` run, for the table: median of
    the repeats' medians (time, GFLOPS, GB/s, % HBM, % cuBLAS, % peak), and as the spread min..max of the
    medians (p20_ms/p80_ms hold the time's, pct_cublas_lo/hi the % of cuBLAS's). A measurement
    that failed in any repeat shows that repeat's row. The CSV keeps every repeat's row."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault(repeat_key(r), []).append(r)
    out = []
    for group in groups.values():
        bad = [r for r in group if r.status not in OK_STATUSES]
        timed = [r for r in group if r.median_ms is not None]
        if bad or len(group) == 1 or not timed:
            out.append(bad[0] if bad else group[0])
            continue
        first = group[0]
        ms = [r.median_ms for r in timed]
        s = replace(first, median_ms=_median(ms), p20_ms=min(ms), p80_ms=max(ms), reps=sum(
            r.reps or 0 for r in timed), repeat=None)
        s.gflops = gflops(s.M, s.N, s.K, s.median_ms)
        fill_bandwidth(s)  # GB/s and % HBM of the median time
        pct = [r.pct_cublas for r in timed if r.pct_cublas is not None]
        if pct and first.backend != "cublas":
            s.pct_cublas, s.pct_cublas_lo, s.pct_cublas_hi = _median(pct), min(pct), max(pct)
        elif pct:
            s.pct_cublas = 100.0
        peak = [r.pct_peak for r in timed if r.pct_peak is not None]
        s.pct_peak = _median(peak) if peak else None
        clocks = [r.sm_mhz_mean for r in timed if r.sm_mhz_mean is not None]
        s.sm_mhz_mean = sum(clocks) / len(clocks) if clocks else None
        mins = [r.sm_mhz_min for r in timed if r.sm_mhz_min is not None]
        s.sm_mhz_min = min(mins) if mins else None
        s.throttle = "+".join(dict.fromkeys(x for r in timed for x in r.throttle.split("+") if x))
        base = [r.vs_baseline_pct for r in timed if r.vs_baseline_pct is not None]
        s.vs_baseline_pct = _median(base) if base else None
        s.detail = f"median of {len(timed)} repeats"
        out.append(s)
    return out
