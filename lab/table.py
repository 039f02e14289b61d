"""The terminal table of a run's rows (lab/row.py's Row): its columns (80 columns by default,
the resource and clock columns with --wide), the columns that do not fit with every word whole
moved to a second table of the same rows (split_columns), and the line on the conditions the rows
ran under."""

from __future__ import annotations

import math
import os

from lab.computed import baseline_within_noise, within_noise
from lab.row import OK_STATUSES, Row
from lab.suites import tag as _layer_tag

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
    "layer": (lambda r: _layer_tag(r.model, r.layer) or "-", "left"),  # a suite's (lab/suites.py)
    "median ms": (lambda r: _sig(r.median_ms, 4), "right"),
    "p20-p80 ms": (lambda r: "-" if r.p20_ms is None or r.p80_ms is None
                   else f"{_sig(r.p20_ms, 4)}-{_sig(r.p80_ms, 4)}", "right"),
    "TFLOPS": (lambda r: _sig(None if r.gflops is None else r.gflops / 1000, 3), "right"),
    "% cuBLAS": (lambda r: _num(r.pct_cublas, ".1f") + ("~" if within_noise(r) else ""), "right"),
    "% cuB range": (lambda r: "-" if r.pct_cublas_lo is None or r.pct_cublas_hi is None
                    else f"{r.pct_cublas_lo:.1f}-{r.pct_cublas_hi:.1f}", "right"),
    "% peak": (lambda r: _num(r.pct_peak, ".1f"), "right"),
    "GB/s": (lambda r: _num(r.gbps, ".0f"), "right"),
    "% HBM": (lambda r: _num(r.pct_hbm, ".1f"), "right"),
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
_WHEN_FILLED = ("vs base", "% peak", "GB/s", "% HBM", "% cuB range", "MHz", "min MHz", "W", "throttle", "setup ms", "e2e ms", "xfer %", "api ms", "api x", "api us", "occ %", "limited by", "blk/SM")
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


# A product this thin (M or N at most this) reads its operands once and does little arithmetic
# per byte: its table shows % HBM (and GB/s with --wide), the figures that matter for it.
THIN = 64


def thin(rows: list[Row]) -> bool:
    """Whether any row is a thin product (M or N <= THIN), such as a decode-shaped one."""
    return any(min(r.M, r.N) <= THIN for r in rows)


def columns(rows: list[Row], mode: str, wide: bool = False, spread: bool = False) -> list[str]:
    """The table's column headers for these rows, in order.

    Narrow (the default): stage, backend, size (and layer, for a suite's shapes), and on a GPU
    median ms, TFLOPS and % cuBLAS (and
    vs base when a row was compared with a --baseline run, % HBM when a row is thin and the run
    measured its read bandwidth; GB/s beside it with --wide); then rel err and status (CPU mode
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
    if any(r.model or r.layer for r in rows):  # shapes of a suite (--sizes llm)
        cols.append("layer")
    if gpu:
        cols += ["median ms", *(["p20-p80 ms"] if wide else []), "TFLOPS", "% cuBLAS",
                 *(["% cuB range"] if wide or spread else []), "% peak",
                 *(((["GB/s"] if wide else []) + ["% HBM"]) if thin(rows) else []), "vs base",
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
    arch = os.environ.get("LAB_CUDA_ARCH") or "sm_90"  # lab/toolchain/nvrtc.py's target off a GPU
    return (f"CPU mode{what}: Triton under the interpreter, CUDA compiled with NVRTC for {arch} "
            f"(no times)")


# Where a cell may wrap when its column must narrow: after these characters. Other cells wrap
# nowhere of their own (only rich's last-resort fold, when nothing else fits).
_BREAKS = {"stage": ":,", "limited by": "+ ", "blk/SM": " ", "p20-p80 ms": "-",
           "% cuB range": "-", "throttle": "+", "layer": " "}


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
