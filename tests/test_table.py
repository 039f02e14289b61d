"""The results table and CSV (CPU only, fast): the default table fits 80 columns with its cells
whole, --wide adds the resource columns, CPU mode shows no time, the CSV keeps integers integers,
and docs/COLUMNS.md explains every column."""

import csv
import io
import math
import re
from dataclasses import fields

import pandas as pd
import pytest
from rich.console import Console

from helpers import ROOT
from lab import table
from lab import row as row_module
from lab.csvfile import INT_COLUMNS, read_csv, to_frame, write_csv
from lab.computed import finalize
from lab.row import Row
from lab.table import render

H100_CSV = ROOT / "results" / "2026-11-22-h100" / "08-final-all.csv"
LONG = "blocktile_2d:BM=64,BN=64,TM=4,TN=4"  # a real variant label, longer than its column


def _row(record: dict) -> Row:
    names = {f.name for f in fields(Row)}
    kw = {}
    for k, v in record.items():
        if k not in names:
            continue
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            v = None
        elif k in INT_COLUMNS:
            v = int(v)
        kw[k] = v
    return Row(**kw)


def gpu_rows() -> list[Row]:
    """A real H100 run (every stage, 1024..4096) plus a long variant label and a failed row."""
    rows = [_row(r) for r in read_csv(H100_CSV).to_dict("records")]
    rows.insert(3, Row(LONG, "cuda", "fp32", 4096, 4096, 4096, median_ms=3.9, p20_ms=3.89,
                       p80_ms=3.91, rel_err=1.1e-6, registers=90, threads=256,
                       occupancy=0.5, occupancy_limiter="registers", blocks_per_sm=4,
                       api_blocks_per_sm=4))
    rows.append(Row("tiled", "triton", "fp32", 17, 33, 129, status="fail", rel_err=float("nan"),
                    detail="17 of 561 elements are NaN (unwritten or invalid) (not timed)"))
    return finalize(rows)


def cpu_rows() -> list[Row]:
    rows = []
    for M, N, K in [(64, 64, 64), (17, 33, 129), (4096, 4096, 4096)]:
        small = M * N * K <= 256**3
        for stage in ("naive", "tiled_padded", LONG):
            rows.append(Row(stage, "cuda", "fp32", M, N, K, mode="cpu", status="compiled",
                            registers=32, smem_static=8192, smem_dynamic=0, spill_bytes=0,
                            threads=1024, blocks_per_sm=2, occupancy=1.0,
                            occupancy_limiter="warps+registers"))
            rows.append(Row(stage, "triton", "fp32", M, N, K, mode="cpu",
                            status="pass" if small else "skipped",
                            rel_err=5.2e-8 if small else None,
                            setup_ms=0.41 if small else None,  # CPU clock: never shown
                            detail="" if small else "too large for the interpreter"))
    return finalize(rows)


def rendered(rows, mode, width=80, wide=False) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    render(rows, mode, console, wide=wide)
    return console.export_text()


def headers(text: str) -> str:
    """The header line(s): everything above the rule under the headers."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.lstrip().startswith("─"))
    return "\n".join(lines[1:rule])


def cells_whole(text: str, row: Row, cols: list[str]) -> bool:
    """The row's cells from `backend` on appear whole and in order on one line."""
    tokens = [table._COLUMNS[c][0](row) for c in cols[cols.index("backend"):]]
    return re.search(r"\s+".join(re.escape(t) for t in tokens), text) is not None


def assert_fits(text: str, width: int) -> None:
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text


# ---------------------------------------------------------------------------------- the table
def test_narrow_gpu_table_fits_80_columns_with_every_required_cell_whole():
    rows = gpu_rows()
    text = rendered(rows, "gpu")
    assert_fits(text, 80)
    cols = table.columns(rows, "gpu")
    assert cols == ["stage", "backend", "size", "median ms", "TFLOPS", "% cuBLAS", "rel err",
                    "status"]
    for r in rows:
        assert cells_whole(text, r, cols), r
    for piece in ("blocktile_2d:", "BM=64,", "TN=4"):  # the long label wraps, uncut
        assert piece in text
    assert "4096x2048x1000" in text and "51.7" in text  # size as MxNxK; cuBLAS at 4096: TFLOPS
    assert "GFLOPS" not in text
    assert "17 of 561 elements are NaN" in text  # the failed row's reason, below the table


def test_cpu_table_fits_80_columns_and_shows_no_time():
    rows = cpu_rows()
    text = rendered(rows, "cpu")
    assert_fits(text, 80)
    cols = table.columns(rows, "cpu")
    assert not {"median ms", "TFLOPS", "% cuBLAS", "setup ms", "e2e ms"} & set(cols)
    assert cols[:5] == ["stage", "backend", "size", "rel err", "status"]
    for r in rows:
        assert cells_whole(text, r, cols), r
    head = headers(text)
    assert " ms" not in head and "FLOPS" not in head and "setup" not in head
    assert "0.41" not in text  # setup_ms measured on the CPU is not printed
    # wide CPU tables add resources and occupancy, still no time
    wide = table.columns(rows, "cpu", wide=True)
    assert {"occ %", "limited by", "blk/SM"} <= set(wide) and "setup ms" not in wide


@pytest.mark.parametrize("width", [60, 100, 140])
def test_tables_never_ellipsize_at_any_width(width):
    for rows, mode in ((gpu_rows(), "gpu"), (cpu_rows(), "cpu")):
        for wide in (False, True):
            assert_fits(rendered(rows, mode, width, wide), width)


def test_console_width_comes_from_COLUMNS(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    console = Console(record=True, file=io.StringIO())
    assert console.width == 80
    render(gpu_rows(), "gpu", console)
    assert_fits(console.export_text(), 80)


def allowed_tokens(rows, mode, wide) -> set[str]:
    """Every whitespace-separated word the table may print whole: header words, the pieces a cell
    may wrap into (after ':' ',' '+' ...), the title's and the captions' words."""
    cols = table.columns(rows, mode, wide)
    words = {w for c in cols for w in c.split()}
    for r in rows:
        for c in cols:
            pieces = table._pieces(table._COLUMNS[c][0](r), table._BREAKS.get(c, ""))
            for i in range(len(pieces)):  # a wrapped line holds one or more whole pieces
                for j in range(i + 1, len(pieces) + 1):
                    words.update("".join(pieces[i:j]).split())
    words.update(table._title(rows, mode).split())
    words.update(("~ = the difference is within the row's noise (docs/TRUST.md); --wide adds the "
                  "resource and clock columns; every column: docs/COLUMNS.md (continued)").split())
    return words


@pytest.mark.parametrize("mode", ["gpu", "cpu"], ids=["gpu-rows", "cpu-rows"])  # id 'gpu' = the marker
def test_wide_table_at_80_columns_cuts_no_number_header_or_name(mode):
    """--wide at 80 columns: more columns than fit, so a second table (same rows, the key columns
    again) takes the rest; no cell or header is folded mid-word ('9.8e-0' / '8', 'backen' / 'd',
    '10' / '0' for occupancy 100 were)."""
    rows = gpu_rows() if mode == "gpu" else cpu_rows()
    text = rendered(rows, mode, 80, wide=True)
    assert_fits(text, 80)
    body = [line for line in text.splitlines() if not line.lstrip().startswith("─")]
    allowed = allowed_tokens(rows, mode, wide=True)
    allowed |= {w for r in rows if r.status not in row_module.OK_STATUSES
                for w in f"{r.status} {r.stage} {r.backend} {r.layout} {table._size(r)}: "
                         f"{r.detail}".split()}
    cut = [w for line in body for w in line.split() if w not in allowed]
    assert not cut, cut
    assert text.count("(continued)") >= 1
    tables = text.split("(continued)")
    for part in tables:  # each table names its rows: stage, backend, size
        head = next(line for line in part.splitlines() if "backend" in line)
        assert "stage" in head and "size" in head
    for col in table.columns(rows, mode, wide=True):  # every column is in one of the tables
        assert all(w in text.split() for w in col.split()), col


def test_a_table_that_fits_is_not_split():
    rows = cpu_rows()
    assert "(continued)" not in rendered(rows, "cpu", 80)
    assert "(continued)" not in rendered(rows, "cpu", 250, wide=True)
    cols = table.columns(rows, "cpu", wide=True)
    cells = [[table._COLUMNS[c][0](r) for c in cols] for r in rows]
    groups = table.split_columns(cols, cells, 80)
    assert len(groups) == 2 and all(g[:3] == [0, 1, 2] for g in groups)  # stage, backend, size
    rest = [i for g in groups for i in g[3:]]
    assert rest == list(range(3, len(cols)))  # every other column once, in order


def test_wide_adds_resource_columns_and_narrow_has_none():
    rows = gpu_rows()
    narrow, wide = headers(rendered(rows, "gpu")), headers(rendered(rows, "gpu", 250, wide=True))
    for col in ("regs", "smem B", "spill B", "threads", "occ %", "limited by", "blk/SM", "p20-p80"):
        assert col in wide and col not in narrow
    assert "setup ms" in wide  # tiled_padded rows have it
    # occupancy and its limiter are separate cells: "56" then "registers", never "56 registers"
    cols = table.columns(rows, "gpu", wide=True)
    assert cols.index("limited by") == cols.index("occ %") + 1
    r = next(r for r in rows if r.occupancy_limiter == "registers")
    assert table._COLUMNS["occ %"][0](r) == f"{100 * r.occupancy:.0f}"


def test_precision_and_layout_columns_only_when_rows_differ():
    rows = gpu_rows()[:5]
    text = rendered(rows, "gpu")
    assert "prec" not in headers(text) and "layout" not in headers(text)
    assert "fp32" in text.splitlines()[0]  # the title says it instead
    rows[2].precision = "tf32"
    rows[3].layout = "tn"
    text = rendered(rows, "gpu")
    assert "prec" in headers(text) and "layout" in headers(text) and "tf32" in text
    assert_fits(text, 80)


# ------------------------------------------------------------------------------------ the CSV
def test_csv_writes_integers_as_integers(tmp_path):
    rows = gpu_rows() + cpu_rows()
    path, _ = write_csv(rows, tmp_path / "run.csv", {"seed": 0})
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    for rec in records:
        for col in INT_COLUMNS:
            assert rec[col] == "" or re.fullmatch(r"-?\d+", rec[col]), (col, rec[col])
    assert any(rec["registers"] == "29" for rec in records)

    plain = pd.read_csv(path)  # full columns come back as int64 from plain pandas
    for col in ("M", "N", "K"):
        assert pd.api.types.is_integer_dtype(plain[col])
    typed = read_csv(path)  # and every integer column, empty cells included, from read_csv
    for col in INT_COLUMNS:
        assert str(typed[col].dtype) == "Int64", col
    assert typed.registers.dropna().tolist() == [r.registers for r in rows
                                                 if r.registers is not None]
    assert list(typed.columns) == list(to_frame(rows).columns)
    occ = typed.occupancy.dropna()
    assert ((occ > 0) & (occ <= 1)).all()  # a fraction, not a percentage


def test_int_columns_are_the_integer_fields():
    expected = {"M", "N", "K", "reps", "registers", "smem_static", "smem_dynamic", "spill_bytes",
                "threads", "grid_blocks", "blocks_by_warps", "blocks_by_regs", "blocks_by_smem",
                "blocks_per_sm", "api_blocks_per_sm", "seed", "repeat",
                    "clock_samples", "rank", "gpu_index"}
    assert set(INT_COLUMNS) == expected


# ---------------------------------------------------------------------------------- the docs
def test_columns_md_explains_every_field_and_table_column():
    text = (ROOT / "docs" / "COLUMNS.md").read_text()
    missing = [f.name for f in fields(Row) if f"`{f.name}`" not in text]
    assert not missing, f"docs/COLUMNS.md does not explain {missing}"
    missing = [h for h in table._COLUMNS if f"`{h}`" not in text]
    assert not missing, f"docs/COLUMNS.md does not explain the table columns {missing}"
