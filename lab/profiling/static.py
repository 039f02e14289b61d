"""The static view, shown when torch sees no GPU: each kernel compiled for sm_90 and never run,
one table column per kernel (resources, theoretical occupancy, SASS instruction mix); --csv then
writes the mix CSV."""

from __future__ import annotations

import sys

from lab.cli import note
from lab.base.errors import LabError
from lab.profiling.listings import Listing, compile_listing, write_mix_csv
from lab.profiling.triton_capture import TritonInterpreted


def _kib(n) -> str:
    return "n/a" if n is None else (f"{n / 1024:g} KiB" if n >= 1024 else f"{n} B")


def render_static(items: list[Listing], shape, cublas: bool, console=None) -> None:
    """One table, one column per kernel: what the compiler says, without running anything."""
    from rich.console import Console
    from rich.table import Table

    from lab.ncu import MIX_ROWS

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=240)
    caption = ("static counts: instructions in the SASS listing (an unrolled loop counts once "
               "per copy), not executed ones; occupancy is theoretical, on sm_90's limits")
    if cublas:
        caption += "; cuBLAS has no static view (it picks its kernel at run time)"
    precision = items[0].precision if items else "fp32"
    table = Table(title=f"Static view, {shape} {precision}: compiled, never run (no GPU here)",
                  caption=caption, header_style="bold")
    table.add_column("", justify="left")
    for it in items:
        table.add_column(f"{it.label}\n{it.backend}", justify="right")

    def res(it, key):
        return None if it.resources is None else it.resources.get(key)

    def occ(it):
        o = it.occupancy
        if o is None:
            return "n/a"
        return f"{100 * o.occupancy:.1f}% ({o.blocks_per_sm} blocks/SM, {o.limiter})"

    rows = [
        ("kernel", lambda it: it.kernel),
        ("compiled for", lambda it: it.compiled_for),
        ("threads / block", lambda it: str(res(it, "threads"))),
        ("blocks in the grid", lambda it: str(res(it, "grid_blocks"))),
        ("registers / thread", lambda it: str(res(it, "registers"))),
        ("shared memory / block",
         lambda it: _kib((res(it, "smem_static") or 0) + (res(it, "smem_dynamic") or 0))),
        ("local memory / thread (stack, spills)", lambda it: _kib(res(it, "local_bytes"))),
        ("theoretical occupancy", occ),
    ]
    mixes = [it.sass_mix or {} for it in items]
    for label, _, _ in MIX_ROWS:
        if any(m.get(label) for m in mixes) or label in ("FFMA", "LDG.E", "LDS", "STS", "STG",
                                                          "BAR"):
            rows.append((f"SASS {label}",
                         (lambda lb: lambda it: str((it.sass_mix or {}).get(lb, "n/a")))(label)))
    rows.append(("SASS instructions (NOPs excluded)",
                 lambda it: str((it.sass_mix or {}).get("total", "n/a"))))
    for title, cell in rows:
        table.add_row(title, *(cell(it) for it in items))
    console.print(table)


def static_view(pairs, shape, args) -> int:
    """No GPU: say that nothing is profiled, then show what the compilers say (exit 0)."""
    from lab import ncu as N

    ncu = "" if N.find_tool("ncu") else " (and ncu, not found here either)"
    note(f"note: profiling with Nsight Compute needs a CUDA GPU{ncu} and torch sees none; "
         "below is the static view instead: each kernel compiled for sm_90, never run",
         file=sys.stderr)
    items, failures, interpreted = [], [], []
    for v, backend in pairs:
        try:
            items.append(compile_listing(v, backend, shape, sass=True, ptx=False,
                                         resources=True, precision=args.precision))
        except TritonInterpreted:
            interpreted.append(v.label)
        except LabError as exc:
            failures.append((v.label, backend, str(exc)))
    if interpreted:
        note(f"note: Triton kernels ({', '.join(interpreted)}) are left out: TRITON_INTERPRET=1 "
             "is set, so they are interpreted and have no SASS; unset it to see them",
             file=sys.stderr)
    if items:
        render_static(items, shape, cublas=not args.no_cublas)
    if args.csv and items:
        print(f"wrote {write_mix_csv(items, shape, args.csv)} (the static view; ncu's counters "
              "need a GPU)")
    for label, backend, msg in failures:
        print(f"error: {label} {backend}: {msg}", file=sys.stderr)
    return 1 if failures else 0
