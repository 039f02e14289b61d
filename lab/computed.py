"""The computed columns of the rows: GFLOPS, % of cuBLAS, % of peak, and their noise; GB/s and
% of the measured HBM read bandwidth.

GFLOPS (2*M*N*K / t) and % of cuBLAS (100 * cuBLAS time / this time, same precision, layout and
shape) are computed here from the measured rows, never by a stage; so are the noise bands of
% of cuBLAS and the judgement whether a claim is within them (docs/COLUMNS.md, docs/TRUST.md).
So are GB/s (the least bytes the product must move, min_bytes, over t) and % HBM (GB/s over the
read bandwidth lab/bandwidth.py measured for the run): the figures of a decode-shaped product,
bound by reading its weights once.
"""

from __future__ import annotations

from lab.base.precisions import BY_NAME as PRECISIONS
from lab.row import Row

def gflops(M: int, N: int, K: int, ms: float) -> float:
    """2*M*N*K floating-point operations in `ms` milliseconds, in GFLOP/s."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms}")
    return 2.0 * M * N * K / (ms * 1e-3) / 1e9


def min_bytes(M: int, N: int, K: int, precision: str) -> int | None:
    """The least bytes a product must move: A (M x K) and B (K x N) read once in the operands'
    dtype, C (M x N) written once in C's (lab/base/precisions.py: fp8 reads 1-byte operands and
    writes bf16). None for a precision the lab does not know."""
    rec = PRECISIONS.get(precision)
    if rec is None:
        return None
    return (M * K + K * N) * rec.elem_bytes + M * N * rec.c_bytes


def gbps(M: int, N: int, K: int, precision: str, ms: float) -> float | None:
    """min_bytes in `ms` milliseconds, in GB/s (10^9 bytes per second)."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms}")
    nbytes = min_bytes(M, N, K, precision)
    return None if nbytes is None else nbytes / (ms * 1e-3) / 1e9


def pct_of(baseline_ms: float, ms: float) -> float:
    """Speed as a percentage of the baseline's: 100 * t_baseline / t."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms}")
    return 100.0 * baseline_ms / ms


def finalize(rows: list[Row], read_bw: float | None = None) -> list[Row]:
    """Fill the computed columns of every timed row: GFLOPS, % of cuBLAS at the same precision
    (against the cuBLAS call timed beside the row when there is one, else against the shape's
    cuBLAS row of the same repetition) with its noise band, and % of the GPU's peak. A row faster
    than the peak at its measured clock is marked invalid: its time is not a speed.

    Also GB/s, and % HBM against the run's measured read bandwidth: `read_bw` (bytes/s, from
    lab/bandwidth.py) is recorded on every row as hbm_read_gbps when given; without it a row's own
    hbm_read_gbps counts, and where there is none pct_hbm stays empty (CPU mode)."""
    from lab.peaks import MARGIN

    baseline = {
        (r.precision, r.layout, r.M, r.N, r.K, r.repeat): r
        for r in rows
        if r.backend == "cublas" and r.median_ms is not None
    }
    for r in rows:
        if read_bw is not None:
            r.hbm_read_gbps = read_bw / 1e9
        if r.median_ms is None:
            continue
        r.gflops = gflops(r.M, r.N, r.K, r.median_ms)
        fill_bandwidth(r)
        if r.peak_gflops:
            r.pct_peak = 100.0 * r.gflops / r.peak_gflops
            if r.gflops > MARGIN * r.peak_gflops and r.status == "pass":
                r.status = "invalid"
                clock = f" at {r.sm_mhz_max:.0f} MHz" if r.sm_mhz_max else ""
                r.detail = (f"{r.gflops / 1e3:.1f} TFLOPS is {r.pct_peak:.0f}% of the GPU's "
                            f"{r.precision} peak ({r.peak_gflops / 1e3:.1f} TFLOPS{clock}): not a "
                            f"speed; the kernel skipped work or the timer missed it")
        if r.backend == "cublas":
            r.pct_cublas = 100.0
            continue
        if r.cublas_ms is not None:
            base_ms = r.cublas_ms
            base_p20 = base_p80 = None
        else:
            base_row = baseline.get((r.precision, r.layout, r.M, r.N, r.K, r.repeat))
            if base_row is None:
                continue
            base_ms, base_p20, base_p80 = base_row.median_ms, base_row.p20_ms, base_row.p80_ms
        r.pct_cublas = pct_of(base_ms, r.median_ms)
        if r.pct_cublas_lo is None and None not in (base_p20, base_p80, r.p20_ms, r.p80_ms):
            r.pct_cublas_lo = pct_of(base_p20, r.p80_ms)
            r.pct_cublas_hi = pct_of(base_p80, r.p20_ms)
    return rows


def fill_bandwidth(r: Row) -> None:
    """A timed row's gbps, and its pct_hbm when the run's read bandwidth is known."""
    r.gbps = gbps(r.M, r.N, r.K, r.precision, r.median_ms) if r.median_ms else None
    r.pct_hbm = (100.0 * r.gbps / r.hbm_read_gbps
                 if r.gbps is not None and r.hbm_read_gbps else None)


def within_noise(r: Row) -> bool:
    """True when the row's claim against cuBLAS (faster or slower) is smaller than its noise:
    its % of cuBLAS band (p20/p80 of both timings, or min..max over repeats) contains 100."""
    return (r.backend != "cublas" and r.pct_cublas_lo is not None
            and r.pct_cublas_hi is not None and r.pct_cublas_lo <= 100.0 <= r.pct_cublas_hi)


def time_spread_pct(r: Row) -> float | None:
    """The row's time spread, p20..p80 (min..max over repeats), as a % of its median."""
    if r.p20_ms is None or r.p80_ms is None or not r.median_ms:
        return None
    return 100.0 * (r.p80_ms - r.p20_ms) / r.median_ms


def baseline_within_noise(r: Row) -> bool:
    """True when a --baseline difference is smaller than the row's own time spread."""
    spread = time_spread_pct(r)
    return r.vs_baseline_pct is not None and spread is not None and abs(r.vs_baseline_pct) < spread
