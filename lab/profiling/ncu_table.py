"""The ncu counters shown and written: the table (one column per kernel, the rows a learner
compares between stages, TABLE_ROWS) and the CSV (the table's columns, the roofline peaks, every
raw metric as ncu:<name>)."""

from __future__ import annotations

from pathlib import Path

from lab.base.errors import LabError
from lab.profiling.roof import roof_label


def _f(value, fmt: str = ".3g") -> str:
    from lab.ncu import fmt_number

    if value is None:
        return "n/a"
    if fmt == "si":
        return fmt_number(value)
    return format(value, fmt)


TABLE_ROWS = (
    ("kernel", lambda r: r["kernel"]),
    ("grid / block", lambda r: f"{r['grid']} / {r['block']}"),
    ("duration (ms)", lambda r: _f(r["duration_ms"], ".4g")),
    ("SM clock during the run (GHz)", lambda r: _f(r["sm_clock_ghz"], ".3g")),
    ("occupancy achieved / theoretical (%)",
     lambda r: f"{_f(r['occupancy_achieved_pct'], '.1f')} / {_f(r['occupancy_theoretical_pct'], '.1f')}"),
    ("SM throughput (% of peak)", lambda r: _f(r["sm_throughput_pct"], ".1f")),
    ("DRAM throughput (% of peak)", lambda r: _f(r["dram_throughput_pct"], ".1f")),
    ("L1 hit rate (%)", lambda r: _f(r["l1_hit_pct"], ".1f")),
    ("L2 hit rate (%)", lambda r: _f(r["l2_hit_pct"], ".1f")),
    ("global load sectors / request", lambda r: _f(r["gld_sectors_per_request"], ".2f")),
    ("global store sectors / request", lambda r: _f(r["gst_sectors_per_request"], ".2f")),
    ("shared wavefronts load / store",
     lambda r: f"{_f(r['smem_ld_wavefronts'], 'si')} / {_f(r['smem_st_wavefronts'], 'si')}"),
    ("shared bank conflicts load / store",
     lambda r: f"{_f(r['smem_ld_bank_conflicts'], 'si')} / {_f(r['smem_st_bank_conflicts'], 'si')}"),
    *((f"stall #{i} (% of active warp cycles)",
       (lambda i: lambda r: "n/a" if r[f"stall_{i}"] is None else
        f"{r[f'stall_{i}']} {r[f'stall_{i}_pct']:.1f}")(i)) for i in (1, 2, 3)),
    ("achieved TFLOP/s (2MNK / duration)", lambda r: _f(r["achieved_tflops"], ".3g")),
    ("DRAM bytes (read + write)",
     lambda r: "n/a" if r["dram_bytes"] is None else _f(r["dram_bytes"], "si") + "B"),
    ("arithmetic intensity (FLOP / DRAM byte)", lambda r: _f(r["intensity"], ".3g")),
    ("roofline: bound, % of roof", lambda r: "n/a" if r["bound"] is None else
     f"{r['bound']}, {r['pct_of_roof']:.1f}%"),
    ("roof at this intensity (TFLOP/s)", lambda r: _f(r["attainable_tflops"], ".3g")),
)


def render(rows: list[dict], shape, peaks, console=None) -> None:
    """One table, one column per kernel: the counters a learner compares between stages."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=240)
    precision = rows[0].get("precision", "fp32") if rows else "fp32"
    table = Table(title=f"Nsight Compute, one launch each, {shape} {precision} (clocks not "
                        "locked)",
                  caption=f"roofline ({roof_label(precision)} compute roof): {peaks.source}; "
                          f"ridge point {peaks.ridge:.1f} FLOP/byte",
                  header_style="bold")
    table.add_column("metric", justify="left")
    for r in rows:
        table.add_column(f"{r['stage']}\n{r['backend']}", justify="right")
    for title, cell in TABLE_ROWS:
        table.add_row(title, *(cell(r) for r in rows))
    console.print(table)


def write_csv(rows: list[dict], path: str, peaks) -> Path:
    import pandas as pd

    flat = []
    for r in rows:
        rec = {k: v for k, v in r.items() if k != "_values"}
        rec.update(peak_tflops=peaks.flops / 1e12, peak_bw_tbs=peaks.bw / 1e12,
                   ridge_flop_per_byte=peaks.ridge, peaks_source=peaks.source)
        rec.update({f"ncu:{m}": v for m, v in r["_values"].items()})
        flat.append(rec)
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(flat).to_csv(out, index=False)
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror}") from None
    return out
