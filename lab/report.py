"""Results are structured rows, written by one writer: the table, the CSV and its environment file.

GFLOPS (2*M*N*K / t) and % of cuBLAS (cuBLAS time / this time, same precision and shape) are
computed here from the measured rows, never by a stage.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lab.errors import LabError

# Statuses: pass (checked, and timed on a GPU), fail (wrong values; not timed), error (could not
# build or run), compiled (CPU mode: CUDA source compiled, resources reported, not run).
OK_STATUSES = ("pass", "compiled")


@dataclass
class Row:
    stage: str  # the variant label, e.g. "tiled" or "tiled:tile=16"; "cublas" for the baseline
    backend: str  # cublas | cuda | triton
    precision: str
    M: int
    N: int
    K: int
    layout: str = "nn"  # BLAS naming: first letter A, second B; t = stored transposed
    status: str = "pass"
    detail: str = ""
    mode: str = "gpu"
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    reps: int | None = None
    gflops: float | None = None
    pct_cublas: float | None = None
    rel_err: float | None = None
    max_err_k: float | None = None
    setup_ms: float | None = None  # one-time work in prepare() worth knowing (e.g. padding)
    e2e_ms: float | None = None  # --include-transfers: H2D copies + kernel + D2H copy
    transfer_ms: float | None = None  # e2e_ms - median_ms
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
    """Fill the computed columns: GFLOPS for every timed row, % of cuBLAS at the same precision."""
    baseline = {
        (r.precision, r.layout, r.M, r.N, r.K): r.median_ms
        for r in rows
        if r.backend == "cublas" and r.median_ms is not None
    }
    for r in rows:
        if r.median_ms is None:
            continue
        r.gflops = gflops(r.M, r.N, r.K, r.median_ms)
        base = baseline.get((r.precision, r.layout, r.M, r.N, r.K))
        if base is not None:
            r.pct_cublas = pct_of(base, r.median_ms)
    return rows


def to_frame(rows: list[Row]):
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in rows], columns=[f.name for f in fields(Row)])


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


def _num(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def render(rows: list[Row], mode: str, console=None) -> None:
    """Print the rows as a table (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    gpu = mode == "gpu"
    title = ("GPU run: median of L2-flushed repetitions" if gpu else
             "CPU mode: Triton under the interpreter, CUDA compiled with NVRTC for sm_90 "
             "(no timings)")
    table = Table(title=title, header_style="bold")
    optional = {  # shown only when some row has a value
        "setup ms": lambda r: _num(r.setup_ms, ".3g"),
        "e2e ms": lambda r: _num(r.e2e_ms, ".4g"),
        "xfer %": lambda r: (_num(100 * r.transfer_ms / r.e2e_ms, ".0f")
                             if r.e2e_ms and r.transfer_ms is not None else "-"),
        "occ %": lambda r: (_num(100 * r.occupancy, ".0f") + (f" {r.occupancy_limiter}"
                            if r.occupancy_limiter else "") if r.occupancy is not None else "-"),
        "blk/SM": lambda r: (_num(r.blocks_per_sm, "d") + (f" (api {r.api_blocks_per_sm})"
                             if r.api_blocks_per_sm is not None else "")
                             if r.blocks_per_sm is not None else "-"),
    }
    shown = {k: f for k, f in optional.items() if any(f(r) != "-" for r in rows)}
    layouts = any(r.layout != "nn" for r in rows)  # the layout column, when there is a choice
    cols = ["stage", "backend", "prec", *(["layout"] if layouts else []), "M", "N", "K"]
    if gpu:
        cols += ["median ms", "p20-p80 ms", "GFLOPS", "% cuBLAS"]
    cols += ["rel err", "status", "regs", "smem B", "spill B", "threads", *shown]
    for c in cols:
        table.add_column(c, justify="left" if c in ("stage", "backend", "prec", "layout", "status")
                         else "right")
    for r in rows:
        status = r.status
        style = {"pass": "green", "compiled": "cyan", "fail": "red", "error": "red"}.get(status, "")
        cells = [r.stage, r.backend, r.precision, *([r.layout] if layouts else []), str(r.M),
                 str(r.N), str(r.K)]
        if gpu:
            spread = ("-" if r.p20_ms is None else f"{r.p20_ms:.4g}-{r.p80_ms:.4g}")
            cells += [_num(r.median_ms, ".4g"), spread, _num(r.gflops, ",.0f"),
                      _num(r.pct_cublas, ".1f")]
        smem = None
        if r.smem_static is not None or r.smem_dynamic is not None:
            smem = (r.smem_static or 0) + (r.smem_dynamic or 0)
        cells += [_num(r.rel_err, ".1e"), f"[{style}]{status}[/{style}]" if style else status,
                  _num(r.registers, "d"), _num(smem, "d"), _num(r.spill_bytes, "d"),
                  _num(r.threads, "d")]
        cells += [f(r) for f in shown.values()]
        table.add_row(*cells)
    console.print(table)
    problems = [r for r in rows if r.status not in OK_STATUSES]
    from rich.markup import escape

    for r in problems:
        console.print(f"[red]{r.status}[/red] {escape(r.stage)} {r.backend} {r.layout} "
                      f"{r.M}x{r.N}x{r.K}: "
                      f"{escape(r.detail)}", highlight=False)
