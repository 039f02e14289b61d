"""Results are structured rows, written by one writer: the table, the CSV and its environment file.

GFLOPS (2*M*N*K / t) and % of cuBLAS (100 * cuBLAS time / this time, same precision, layout and
shape) are computed here from the measured rows, never by a stage. Every column of the CSV and of
the table is explained in docs/COLUMNS.md (tests/test_table.py checks that each Row field is).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lab.errors import LabError

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


# Integer columns: pandas' nullable Int64 in the frame, so that a column with empty cells (None)
# is still written as 29, not 29.0. Every Row field annotated `int` or `int | None`.
INT_COLUMNS = tuple(f.name for f in fields(Row) if f.type in ("int", "int | None"))


def to_frame(rows: list[Row]):
    """The rows as a DataFrame, one column per Row field; integer fields are nullable Int64."""
    import pandas as pd

    df = pd.DataFrame([asdict(r) for r in rows], columns=[f.name for f in fields(Row)])
    for col in INT_COLUMNS:
        try:
            df[col] = pd.to_numeric(df[col]).astype("Int64")
        except (TypeError, ValueError):  # a non-integral value: write it as it is, never lose it
            pass
    return df


def write_csv(rows: list[Row], path: str | Path, env: dict) -> tuple[Path, Path]:
    """One CSV row per measurement, and the environment beside it as <name>.env.json."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        to_frame(rows).to_csv(path, index=False)
        env_path = path.with_suffix(".env.json")
        env_path.write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise LabError(f"cannot write {path}: {exc.strerror}") from None
    return path, env_path


def read_csv(path: str | Path):
    """A CSV written by write_csv, with Row's types: integer columns as nullable Int64 (an empty
    cell is <NA>; plain pandas.read_csv reads a column with empty cells as float), text columns
    with "" for an empty cell. Also reads older CSVs (29.0 becomes 29; missing columns stay
    missing)."""
    import pandas as pd

    df = pd.read_csv(path)
    text = [f.name for f in fields(Row) if f.type.startswith("str")]
    for col in df.columns:
        if col in INT_COLUMNS:
            df[col] = pd.to_numeric(df[col]).astype("Int64")
        elif col in text:
            df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
    return df


# ------------------------------------------------------------------------------------- the table

def _num(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def _sig(value, digits: int) -> str:
    """`digits` significant digits, trailing zeros kept (31.0, 14.20), '-' for no value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = format(value, f"#.{digits}g")
    return text[:-1] if text.endswith(".") else text


def _size(r: Row) -> str:
    return f"{r.M}x{r.N}x{r.K}"


def _smem(r: Row) -> int | None:
    if r.smem_static is None and r.smem_dynamic is None:
        return None
    return (r.smem_static or 0) + (r.smem_dynamic or 0)


def _blocks(r: Row) -> str:
    if r.blocks_per_sm is None:
        return "-"
    api = f" (api {r.api_blocks_per_sm})" if r.api_blocks_per_sm is not None else ""
    return f"{r.blocks_per_sm}{api}"


# Table columns: header -> (cell of a row, justification). Headers and units: docs/COLUMNS.md.
_COLUMNS = {
    "stage": (lambda r: r.stage, "left"),
    "backend": (lambda r: r.backend, "left"),
    "prec": (lambda r: r.precision, "left"),
    "layout": (lambda r: r.layout, "left"),
    "size": (_size, "left"),
    "median ms": (lambda r: _sig(r.median_ms, 4), "right"),
    "p20-p80 ms": (lambda r: "-" if r.p20_ms is None or r.p80_ms is None
                   else f"{_sig(r.p20_ms, 4)}-{_sig(r.p80_ms, 4)}", "right"),
    "TFLOPS": (lambda r: _sig(None if r.gflops is None else r.gflops / 1000, 3), "right"),
    "% cuBLAS": (lambda r: _num(r.pct_cublas, ".1f") + ("~" if within_noise(r) else ""), "right"),
    "% cuB range": (lambda r: "-" if r.pct_cublas_lo is None or r.pct_cublas_hi is None
                    else f"{r.pct_cublas_lo:.1f}-{r.pct_cublas_hi:.1f}", "right"),
    "% peak": (lambda r: _num(r.pct_peak, ".1f"), "right"),
    "vs base": (lambda r: "-" if r.vs_baseline_pct is None else f"{r.vs_baseline_pct:+.1f}%"
                + ("~" if baseline_within_noise(r) else ""), "right"),
    "MHz": (lambda r: _num(r.sm_mhz_mean, ".0f"), "right"),
    "min MHz": (lambda r: _num(r.sm_mhz_min, ".0f"), "right"),
    "W": (lambda r: _num(r.power_w, ".0f"), "right"),
    "throttle": (lambda r: r.throttle or "-", "left"),
    "rel err": (lambda r: _num(r.rel_err, ".1e"), "right"),
    "status": (lambda r: r.status, "left"),
    "regs": (lambda r: _num(r.registers, "d"), "right"),
    "smem B": (lambda r: _num(_smem(r), "d"), "right"),
    "spill B": (lambda r: _num(r.spill_bytes, "d"), "right"),
    "threads": (lambda r: _num(r.threads, "d"), "right"),
    "setup ms": (lambda r: _sig(r.setup_ms, 3), "right"),
    "e2e ms": (lambda r: _sig(r.e2e_ms, 4), "right"),
    "xfer %": (lambda r: _num(100 * r.transfer_ms / r.e2e_ms, ".0f")
               if r.e2e_ms and r.transfer_ms is not None else "-", "right"),
    "api ms": (lambda r: _sig(r.api_ms, 4), "right"),
    "api us": (lambda r: _num(r.api_us, ".0f"), "right"),
    "api x": (lambda r: _num(r.api_ratio, ".3f"), "right"),
    "occ %": (lambda r: _num(None if r.occupancy is None else 100 * r.occupancy, ".0f"), "right"),
    "limited by": (lambda r: r.occupancy_limiter or "-", "left"),
    "blk/SM": (_blocks, "right"),
}
# Shown only when some row has a value (in the tables that offer them).
_WHEN_FILLED = ("vs base", "% peak", "% cuB range", "MHz", "min MHz", "W", "throttle", "setup ms", "e2e ms", "xfer %", "api ms", "api x", "api us", "occ %", "limited by", "blk/SM")
# CPU mode has no times, so its narrow table has room for what NVRTC reports of the CUDA rows.
CPU_RESOURCES = ("regs", "smem B", "spill B")
# No vertical lines and a rule under each header (not across the gaps), so that neighbouring
# headers read as separate words even one space apart.
_BOX = (
    "    \n"  # top
    "    \n"  # header row
    " ─  \n"  # under the header
    "    \n"  # between rows (not drawn)
    "    \n"  # row
    "    \n"  # above a footer (none)
    "    \n"  # footer
    "    \n"  # bottom
)
_STYLES = {"pass": "green", "compiled": "cyan", "skipped": "yellow", "fail": "red", "error": "red",
           "invalid": "red"}


def columns(rows: list[Row], mode: str, wide: bool = False, spread: bool = False) -> list[str]:
    """The table's column headers for these rows, in order.

    Narrow (the default): stage, backend, size, and on a GPU median ms, TFLOPS and % cuBLAS (and
    vs base when a row was compared with a --baseline run); then rel err and status (CPU mode
    adds regs, smem B and spill B, which fit where the times would be). Precision and layout get
    a column only when the rows differ in them (otherwise the title says which). wide=True adds
    the resource columns, the noise band of % cuBLAS and the clock, power and throttle columns;
    spread=True (a --repeat run) shows the band in the narrow table too. CPU mode never shows a
    time column.
    """
    gpu = mode == "gpu"
    cols = ["stage", "backend"]
    if len({r.precision for r in rows}) > 1:
        cols.append("prec")
    if len({r.layout for r in rows}) > 1:
        cols.append("layout")
    cols.append("size")
    if gpu:
        cols += ["median ms", *(["p20-p80 ms"] if wide else []), "TFLOPS", "% cuBLAS",
                 *(["% cuB range"] if wide or spread else []), "% peak", "vs base",
                 "api ms", "api x", "api us"]
    cols += ["rel err", "status"]
    if wide:
        cols += ["regs", "smem B", "spill B", "threads"]
        if gpu:
            cols += ["setup ms", "e2e ms", "xfer %", "MHz", "min MHz", "W", "throttle"]
        cols += ["occ %", "limited by", "blk/SM"]
    elif not gpu:
        cols += list(CPU_RESOURCES)
    return [c for c in cols
            if c not in _WHEN_FILLED or any(_COLUMNS[c][0](r) != "-" for r in rows)]


def conditions_line(rows: list[Row]) -> str | None:
    """One line on the GPU's conditions over the timed rows: SM clock range, power, temperature
    and the throttle reasons seen (None when nothing was sampled, e.g. CPU mode or no NVML)."""
    timed = [r for r in rows if r.sm_mhz_mean is not None]
    if not timed:
        return None
    lo = min(r.sm_mhz_min for r in timed if r.sm_mhz_min is not None)
    hi = max((r.sm_mhz_max or r.sm_mhz_mean) for r in timed)
    power = [r.power_w for r in timed if r.power_w is not None]
    temps = [r.temp_c for r in timed if r.temp_c is not None]
    reasons: dict[str, int] = {}
    for r in timed:
        for x in filter(None, r.throttle.split("+")):
            reasons[x] = reasons.get(x, 0) + 1
    text = f"SM clock {lo:.0f}-{hi:.0f} MHz over {len(timed)} timed rows (NVML samples)"
    if power:
        text += f", board power up to {max(power):.0f} W"
    if temps:
        text += f", up to {max(temps):.0f} C"
    if reasons:
        text += "; clock held down by " + ", ".join(f"{k} in {v} row{'s' * (v != 1)}"
                                                   for k, v in reasons.items())
    else:
        text += "; no throttle reason reported"
    return text


def _title(rows: list[Row], mode: str) -> str:
    same = []
    precisions, layouts = {r.precision for r in rows}, {r.layout for r in rows}
    if len(precisions) == 1:
        same.append(next(iter(precisions)))
    if len(layouts) == 1 and layouts != {"nn"}:
        same.append(f"layout {next(iter(layouts))}")
    what = "".join(f", {s}" for s in same)
    if mode == "gpu":
        return f"GPU run{what}: median of L2-flushed repetitions"
    return (f"CPU mode{what}: Triton under the interpreter, CUDA compiled with NVRTC for sm_90 "
            f"(no times)")


# Where a cell may wrap when its column must narrow: after these characters. Other cells wrap
# nowhere of their own (only rich's last-resort fold, when nothing else fits).
_BREAKS = {"stage": ":,", "limited by": "+ ", "blk/SM": " ", "p20-p80 ms": "-",
           "% cuB range": "-", "throttle": "+"}


def _pieces(text: str, breaks: str) -> list[str]:
    """`text` cut after each character in `breaks`: 'tiled_rect:rows=16,cols=64' with ':,' gives
    'tiled_rect:', 'rows=16,', 'cols=64'."""
    pieces, start = [], 0
    for i, ch in enumerate(text):
        if ch in breaks:
            pieces.append(text[start:i + 1])
            start = i + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces or [text]


def wrap_cell(text: str, width: int, breaks: str = ":,") -> str:
    """Wrap `text` onto lines of at most `width` characters, breaking only after a character in
    `breaks` (a single piece longer than `width` stays whole here; the table folds it)."""
    lines: list[str] = []
    for piece in _pieces(text, breaks):
        if lines and len(lines[-1].rstrip()) + len(piece.rstrip()) <= width:
            lines[-1] += piece
        else:
            lines.append(piece)
    return "\n".join(line.rstrip() for line in lines)


def _least(cols: list[str], cells: list[list[str]]) -> list[int]:
    """The narrowest each column can be with every token whole: its header's longest word, and
    the longest piece of any cell (cells break only after the characters in _BREAKS)."""
    return [max([*(len(w) for w in c.split()),
                 *(len(p.rstrip()) for row in cells for p in _pieces(row[i], _BREAKS.get(c, "")))])
            for i, c in enumerate(cols)]


# The columns that say which row a cell belongs to: repeated in every table of a split one.
_KEY_COLUMNS = ("stage", "backend", "prec", "layout", "size")


def split_columns(cols: list[str], cells: list[list[str]], max_width: int) -> list[list[int]]:
    """The column indices of each table to print: one table when every column fits `max_width`
    with its tokens whole (one space between columns), else several, each repeating the key
    columns (stage, backend, precision, layout, size) and taking the next columns in order while
    they fit. A column never narrows below its longest word, so no number, header or name is cut
    in two (a --wide table at 80 columns prints as two tables)."""
    least = _least(cols, cells)
    n = len(cols)
    if sum(least) + n - 1 <= max_width:
        return [list(range(n))]
    key = [i for i, c in enumerate(cols) if c in _KEY_COLUMNS]
    rest = [i for i in range(n) if i not in key]
    room = max_width - (sum(least[i] for i in key) + len(key))  # what a table has left

    def width(part: list[int]) -> int:  # the rest-columns of one table, a space before each
        return sum(least[i] + 1 for i in part)

    # the fewest tables (each column in order, at least one per table), then the split of the
    # columns over them whose widest table is narrowest, so that the tables look alike
    best: list[list[int]] | None = None
    for count in range(1, len(rest) + 1):
        best = _balanced(rest, count, width, room)
        if best is not None:
            break
    return [key + part for part in (best or [rest])]


def _balanced(items: list[int], count: int, width, room: int) -> list[list[int]] | None:
    """`items` cut into `count` runs, each no wider than `room` (a single item may be), whose
    widest run is as narrow as possible; None when `count` runs cannot hold them."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def cut(start: int, left: int) -> tuple[float, tuple]:
        if left == 1:
            w = width(items[start:])
            return (w, (len(items),)) if w <= room or len(items) - start == 1 else \
                (math.inf, ())
        best = (math.inf, ())
        for end in range(start + 1, len(items) - left + 2):
            w = width(items[start:end])
            if w > room and end - start > 1:
                break
            rest_w, ends = cut(end, left - 1)
            if max(w, rest_w) < best[0]:
                best = (max(w, rest_w), (end, *ends))
        return best

    w, ends = cut(0, count)
    if w == math.inf:
        return None
    out, start = [], 0
    for end in ends:
        out.append(items[start:end])
        start = end
    return out


def _fit(cols: list[str], cells: list[list[str]], max_width: int) -> tuple[list[int], int]:
    """Column widths and the gap between columns that fit `max_width`.

    The natural widths (the widest cell or header) with two spaces between columns if they fit,
    else with one; else the stage column narrows first (its labels wrap after ':' and ','), then
    the widest of the others, each no narrower than its widest unbreakable piece (a header may
    wrap between words), then the stage column again, folding inside a name. When even that is
    too wide, rich folds the other cells too (Column overflow='fold'), never an ellipsis.
    """
    n = len(cols)
    natural = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    for gap in (2, 1):
        if sum(natural) + gap * (n - 1) <= max_width:
            return natural, gap
    least = _least(cols, cells)
    widths = list(natural)
    excess = sum(widths) + (n - 1) - max_width
    s = cols.index("stage")
    cut = min(excess, widths[s] - least[s])
    widths[s] -= cut
    excess -= cut
    while excess > 0:
        slack = [i for i in range(n) if widths[i] > least[i]]
        if not slack:
            break
        widest = max(slack, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    if excess > 0:  # the stage column folds inside a name before any other cell is cut
        widths[s] -= min(excess, widths[s] - len("stage"))
    return widths, 1


def render(rows: list[Row], mode: str, console=None, wide: bool = False,
           spread: bool = False) -> None:
    """Print the rows as a table (rich), fitted to the console's width (rich reads COLUMNS).

    The stage column is the one that gives way: a long variant label wraps after a ':' or ','.
    In the narrow table every other cell keeps its natural width; if the table still cannot fit,
    cells wrap onto more lines, never an ellipsis. Every column is explained in docs/COLUMNS.md.
    """
    from rich.box import Box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    all_cols = columns(rows, mode, wide, spread)
    all_cells = [[_COLUMNS[c][0](r) for c in all_cols] for r in rows]
    groups = split_columns(all_cols, all_cells, console.width)
    caption = ("every column: docs/COLUMNS.md" if wide else
               "--wide adds the resource and clock columns; every column: docs/COLUMNS.md")
    if any(within_noise(r) or baseline_within_noise(r) for r in rows):
        caption = "~ = the difference is within the row's noise (docs/TRUST.md); " + caption
    for n, group in enumerate(groups):
        cols = [all_cols[i] for i in group]
        cells = [[row[i] for i in group] for row in all_cells]
        widths, gap = _fit(cols, cells, console.width)
        title = _title(rows, mode) if n == 0 else "(continued)"
        table = Table(title=title, caption=caption if n == len(groups) - 1 else None,
                      header_style="bold", box=Box(_BOX), show_edge=False, pad_edge=False,
                      padding=(0, gap - 1, 0, 0))
        for c, w in zip(cols, widths):
            table.add_column(c, justify=_COLUMNS[c][1], width=w, overflow="fold")
        for r, row in zip(rows, cells):
            texts = []
            for c, cell, w in zip(cols, row, widths):
                if len(cell) > w and c in _BREAKS:
                    cell = wrap_cell(cell, w, _BREAKS[c])
                texts.append(Text(cell, style=_STYLES.get(r.status, "") if c == "status" else ""))
            table.add_row(*texts)
        if n:
            console.print()
        console.print(table)
    for r in rows:  # why a row failed, in full, below the table
        if r.status not in OK_STATUSES:
            console.print(f"[red]{r.status}[/red] {escape(r.stage)} {r.backend} {r.layout} "
                          f"{_size(r)}: {escape(r.detail)}", highlight=False)
