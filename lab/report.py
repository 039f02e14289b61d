"""Results are structured rows: the Row record and its computed columns.

GFLOPS (2*M*N*K / t) and % of cuBLAS (100 * cuBLAS time / this time, same precision, layout and
shape) are computed here from the measured rows, never by a stage; so are the noise bands and the
medians over repeats. One writer puts rows out: lab/csvfile.py (the CSV and its environment file)
and lab/table.py (the terminal table). Every column of the CSV and of the table is explained in
docs/COLUMNS.md (tests/test_table.py checks that each Row field is).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# Statuses: pass (checked, and timed on a GPU), fail (wrong values; not timed), error (could not
# build or run), invalid (timed faster than the GPU's peak for its precision at the measured clock:
# not a speed, see lab/peaks.py), compiled (CPU mode: CUDA source compiled, resources reported,
# not run), skipped (CPU mode: a Triton row larger than the interpreter's limit; `detail` says so).
OK_STATUSES = ("pass", "compiled", "skipped")


@dataclass
class Row:
    stage: str  # the variant label, e.g. "tiled" or "tiled:tile=16"; "cublas" for the baseline
    backend: str  # cublas | cuda | triton
    precision: str
    M: int
    N: int
    K: int
    layout: str = "nn"  # BLAS naming: first letter A, second B; t = stored transposed
    dtype: str = "float32"  # torch dtype of A, B and C (fp32 accumulation in every precision)
    status: str = "pass"
    detail: str = ""
    mode: str = "gpu"
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    reps: int | None = None
    gflops: float | None = None
    pct_cublas: float | None = None
    pct_cublas_lo: float | None = None  # the noise band of pct_cublas: from p20/p80 of the row and
    pct_cublas_hi: float | None = None  # of its adjacent cuBLAS timing (min/max over --repeat)
    cublas_ms: float | None = None  # median of the cuBLAS call timed beside this row (adjacent)
    cublas_timing: str = ""  # adjacent (interleaved with this row) | once (one row per shape)
    peak_gflops: float | None = None  # the GPU's peak for this precision at sm_mhz_max
    pct_peak: float | None = None  # 100 * gflops / peak_gflops
    sm_mhz_mean: float | None = None  # SM clock sampled by NVML while the row was timed
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    power_w: float | None = None  # mean board power over the same samples
    temp_c: float | None = None  # highest GPU temperature over the same samples
    throttle: str = ""  # clock-event reasons NVML reported in any sample ('+'-joined)
    clock_samples: int | None = None
    repeat: int | None = None  # --repeat: which repetition of the plan (0-based)
    vs_baseline_pct: float | None = None  # --baseline: 100 * (t / t_baseline - 1), + = slower
    rel_err: float | None = None
    max_err_k: float | None = None
    setup_ms: float | None = None  # one-time work in prepare() worth knowing (e.g. padding)
    e2e_ms: float | None = None  # --include-transfers: H2D copies + kernel + D2H copy
    transfer_ms: float | None = None  # e2e_ms - median_ms
    api_ms: float | None = None  # --api: median GPU-visible time of the lab.matmul call
    api_us: float | None = None  # --api: CPU time per lab.matmul call, its plan cached
    # (cuBLAS rows: per torch.matmul call)
    prepare_us: float | None = None  # --api: CPU time of one prepare() call of the stage
    api_ratio: float | None = None  # --api: api_ms / the prepared launch, timed interleaved
    registers: int | None = None
    smem_static: int | None = None
    smem_dynamic: int | None = None
    spill_bytes: int | None = None
    threads: int | None = None
    grid_blocks: int | None = None
    blocks_by_warps: int | None = None  # blocks/SM each limit allows (None: no such limit)
    blocks_by_regs: int | None = None
    blocks_by_smem: int | None = None
    blocks_per_sm: int | None = None  # theoretical: the smallest of the limits above and the
    # hardware's blocks-per-SM maximum
    occupancy: float | None = None  # theoretical: active warps / max warps per SM
    occupancy_limiter: str | None = None
    api_blocks_per_sm: int | None = None  # the CUDA occupancy API's answer (CUDA rows, GPU mode)
    params: str = ""
    seed: int | None = None

    def set_resources(self, res: dict | None) -> None:
        for key, value in (res or {}).items():
            if key in ROW_FIELDS:
                setattr(self, key, value)

    def set_conditions(self, cond) -> None:
        """Copy a lab.clocks.Conditions (what NVML sampled while the row was timed)."""
        self.sm_mhz_mean, self.sm_mhz_min, self.sm_mhz_max = (cond.sm_mhz_mean, cond.sm_mhz_min,
                                                              cond.sm_mhz_max)
        self.power_w, self.temp_c, self.throttle = cond.power_w, cond.temp_c, cond.throttle
        self.clock_samples = cond.samples or None


ROW_FIELDS = {f.name for f in fields(Row)}


def gflops(M: int, N: int, K: int, ms: float) -> float:
    """2*M*N*K floating-point operations in `ms` milliseconds, in GFLOP/s."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms}")
    return 2.0 * M * N * K / (ms * 1e-3) / 1e9


def pct_of(baseline_ms: float, ms: float) -> float:
    """Speed as a percentage of the baseline's: 100 * t_baseline / t."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms}")
    return 100.0 * baseline_ms / ms


def finalize(rows: list[Row]) -> list[Row]:
    """Fill the computed columns of every timed row: GFLOPS, % of cuBLAS at the same precision
    (against the cuBLAS call timed beside the row when there is one, else against the shape's
    cuBLAS row of the same repetition) with its noise band, and % of the GPU's peak. A row faster
    than the peak at its measured clock is marked invalid: its time is not a speed."""
    from lab.peaks import MARGIN

    baseline = {
        (r.precision, r.layout, r.M, r.N, r.K, r.repeat): r
        for r in rows
        if r.backend == "cublas" and r.median_ms is not None
    }
    for r in rows:
        if r.median_ms is None:
            continue
        r.gflops = gflops(r.M, r.N, r.K, r.median_ms)
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


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


# The key that says two rows of different repeats are the same measurement.
def repeat_key(r: Row) -> tuple:
    return (r.stage, r.backend, r.precision, r.layout, r.M, r.N, r.K, r.params)


def summarize_repeats(rows: list[Row]) -> list[Row]:
    """One row per measurement over the repeats of a `--repeat N` run, for the table: median of
    the repeats' medians (time, GFLOPS, % cuBLAS, % peak), and as the spread min..max of the
    medians (p20_ms/p80_ms hold the time's, pct_cublas_lo/hi the % of cuBLAS's). A measurement
    that failed in any repeat shows that repeat's row. The CSV keeps every repeat's row."""
    from dataclasses import replace

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
