"""python -m lab.compare: check and time stages (CUDA and Triton) next to cuBLAS.

    python -m lab.compare --stage tiled
    python -m lab.compare --stage naive,coalesced,tiled --sizes 1024,1025,4096 --csv out.csv
    python -m lab.compare --stage tiled:tile=16 --backend cuda
    python -m lab.compare --stage vectorized --layout nn,nt,tn,tt
    python -m lab.compare --list                         # the stages; --list --stage NAME: all of one
    python -m lab.compare --stage persistent --precision bf16 --sizes llm@1-64   # a model's shapes
    python -m lab.compare --list-suites                  # the suites --sizes takes by name
    python -m lab.compare --stage tiled --wide           # + resource columns (docs/COLUMNS.md)
    python -m lab.compare --stage auto --precision bf16  # the stage the lab picks for each row
    python -m lab.compare --stage all --sizes sweep --csv new.csv --baseline old.csv \
        --fail-on-regression 5 --plot plots/         # vs an earlier run; exit 1 if 5 % slower
    python -m lab.compare --stage tiled,vectorized --sizes 1025,4096 --repeat 5   # noise bars

On a GPU every stage row is timed beside its own cuBLAS call (interleaved batches, lab/timing.py),
with the SM clock, power and throttle reasons sampled through NVML while it runs, and its % of the
GPU's peak at that clock (a row above the peak is marked invalid). docs/TRUST.md says why. The
run first measures the GPU's DRAM read bandwidth once (lab/bandwidth.py, well under a second):
every row records it, and a thin product's row (M or N <= 64, such as a decode step) shows its
% HBM, how close its least byte traffic comes to that bandwidth (docs/COLUMNS.md).

Exit status: 0 when every row passed, 1 when a row failed its check or could not be built or run
(the other rows are still reported) or, with --fail-on-regression, was slower than its baseline
by more than the given percentage, 2 for a usage error (one sentence on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from lab.axes import parse_backends, parse_choices, parse_layouts
from lab.cli import ArgumentParser, guarded, plural, wrap
from lab.base.errors import LabError
from lab.shapes import PRESETS
from lab.suites import SUITES
from lab.stages import BACKENDS, PRECISIONS, STAGES
from lab import ranks as ranks_mod


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.compare", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", action="append", metavar="NAME[:k=v,...]",
                   help="stage(s) to run: a name, a comma list, 'all', a variant such as "
                        "tiled:tile=16, NAME:auto for the configuration python -m lab.autotune "
                        "cached for this GPU and shape, or auto on its own for the stage, backend "
                        "and parameters the lab picks for each row, as lab.matmul does with no "
                        "stage (docs/DISPATCH.md; with one --backend, among its stages) "
                        "(repeatable; see --list)")
    p.add_argument("--backend", default=",".join(BACKENDS),
                   help=f"comma list of backends (default {','.join(BACKENDS)}); cuBLAS always runs "
                        "on a GPU as the baseline")
    p.add_argument("--sizes", action="append", metavar="SIZES",
                   help="comma list of N (square) or MxNxK, repeatable; 'sweep' in the list "
                        f"stands for {PRESETS['sweep']}; a suite name ({', '.join(SUITES)}) "
                        "for the GEMMs of real models, each row labelled with its model and "
                        "layer, optionally only some M: llm@1-64, deepseek@1+128 (--list-suites; "
                        "docs/SUITES.md) (default on a GPU: "
                        "1024,1025,2048,4096,4096x2048x1000; in CPU mode: 64,65,17x33x129; CPU mode "
                        "runs Triton rows up to M*N*K = 256^3 and compiles CUDA rows at any size)")
    p.add_argument("--precision", default=None,
                   help=f"comma list of precisions ({', '.join(PRECISIONS)}; default fp32): each "
                        "is its own set of rows, compared with cuBLAS at the same precision "
                        "(3xtf32 with cuBLAS fp32); a stage x backend runs only the precisions "
                        "it supports (--list says which)")
    p.add_argument("--layout",
                   help="comma list of operand layouts, BLAS naming (first letter A, second B; "
                        "t = stored transposed, i.e. a column-major view): nn (default), nt, tn, "
                        "tt; each layout is its own row and cuBLAS runs on the same layout; "
                        "without it a suite's shapes run in the suite's layout (llm: nt)")
    p.add_argument("--csv", metavar="PATH", help="write one row per measurement to PATH and the "
                                                 "environment to PATH's .env.json")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--mode", choices=("auto", "gpu", "cpu"), default="auto",
                   help="auto (default): gpu if CUDA is visible, else cpu")
    p.add_argument("--rep-ms", type=float, default=100.0,
                   help="timing budget per row in ms (at least 5 repetitions; default 100)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the whole plan N times with fresh inputs (seed, seed+1, ...); the "
                        "table shows each row's median over the repeats and the spread of its %% "
                        "of cuBLAS, the CSV keeps every repeat (default 1)")
    p.add_argument("--cublas-timing", choices=("adjacent", "once"), default="adjacent",
                   help="adjacent (default): time cuBLAS beside each row, interleaved, for its %% "
                        "of cuBLAS; once: one cuBLAS row per shape, timed before the stages (the "
                        "older protocol, kept to measure the difference)")
    p.add_argument("--include-transfers", action="store_true",
                   help="GPU only: also time the host-to-host path (copy A and B to the GPU, "
                        "run, copy C back) next to the kernel alone")
    p.add_argument("--api", action="store_true",
                   help="also time each stage row as a user's lab.matmul call: columns api ms "
                        "(GPU-visible median, L2 flushed), api x (over the launch, timed "
                        "interleaved) and api us (CPU time per call with its plan cached); "
                        "docs/COLUMNS.md")
    p.add_argument("--list", action="store_true",
                   help="list the stages, a few lines each: title, precisions, parameter "
                        "names; with --stage, only those, each parameter with its values, "
                        "default and backend")
    p.add_argument("--list-suites", action="store_true",
                   help="list the shape suites --sizes takes by name, one line per shape (model, "
                        "layer, M, N, K, layout); with --sizes, only the suite shapes it selects")
    p.add_argument("--wide", action="store_true",
                   help="also show the resource columns (p20-p80, registers, shared memory, "
                        "spills, threads, occupancy, blocks/SM, setup ms); every column is "
                        "explained in docs/COLUMNS.md")
    p.add_argument("--baseline", metavar="OLD.csv",
                   help="compare each row's time with the matching row (same stage label, "
                        "backend, size, precision, layout and params) of an earlier run's CSV: "
                        "the vs base column, positive = slower (vs_baseline_pct in the CSV)")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="with --baseline: exit 1 when a matched row is more than PCT percent "
                        "slower than its baseline (the rows are named below the table)")
    p.add_argument("--gpus", metavar="N",
                   help="run over N GPUs of this machine (a number or all): N ranks of "
                        "torch.distributed, each owning one GPU, take the work shape by shape "
                        "as each finishes its last; the rows are merged into one table and CSV, "
                        "each naming the GPU it ran on (torchrun starts the ranks on several "
                        "machines instead: docs/MULTIGPU.md). In CPU mode N ranks run on the CPU")
    p.add_argument("--resume", action="store_true",
                   help="with --csv: run only what that CSV (and the journal a stopped run left "
                        "beside it, CSV.partial) does not hold yet, and write the old rows and "
                        "the new ones into it")
    p.add_argument("--plot", metavar="DIR",
                   help="after the run, draw the plots of its CSV into DIR (without --csv the "
                        "CSV is written to DIR/run.csv)")
    return p


def gpu_here() -> tuple[tuple[int, int], str] | None:
    """(compute capability, name) of the current CUDA GPU, or None where torch sees none."""
    import torch

    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability()), torch.cuda.get_device_name()


def _by_gpu(precisions, requirement, runs=None) -> str:
    """Precisions grouped by the GPUs they run on: "fp32 (sm_75+), tf32, bf16 (sm_80+)"; with
    `runs` (precision -> whether it runs on this GPU): "fp32, bf16 (run here), fp8 (needs
    sm_89+)"."""
    groups: dict[str, list[str]] = {}
    for p in precisions:
        key = (f"{requirement(p)}" if runs is None else "here" if runs(p)
               else f"needs {requirement(p)}")
        groups.setdefault(key, []).append(p)
    return ", ".join(f"{', '.join(ps)} ({'runs' if len(ps) == 1 else 'run'} here)"
                     if key == "here" else f"{', '.join(ps)} ({key})"
                     for key, ps in groups.items())


def list_stages(names: list[str] | None = None, gpu="here") -> str:
    """The stages (those named, or all) and their parameters, wrapped to the terminal's width;
    then `auto`, the lab's choice of stage (when all are listed or it is named). Each precision
    says which GPUs run it ("sm_80+", "sm_90a": Offer.requirement) and, on a GPU (`gpu`: "here"
    for gpu_here(), or (capability, name), or None), whether it runs on this one."""
    import shutil
    import textwrap

    from lab.base.contract import ARCHS, sm
    from lab.stages import AUTO_STAGE

    gpu = gpu_here() if gpu == "here" else gpu
    width_total = max(60, shutil.get_terminal_size((100, 24)).columns)
    lines = []
    stages = [s for s in STAGES if not names or s.name in names]
    width = max([len(s.name) for s in stages] + [len(AUTO_STAGE.name)])
    brief = not names  # every stage: a few lines each; --list --stage NAME: everything
    for s in stages:
        lines += textwrap.wrap(s.title, width_total, initial_indent=f"{s.name:<{width}}  ",
                               subsequent_indent=" " * (width + 2))
        if brief:
            precisions = [p for p in PRECISIONS if any(p in s.precisions_for(b) for b in BACKENDS)]
            params = ", ".join(p.name for p in s.params) or "none"
            runs = (lambda p, s=s: s.runs_on(gpu[0], p)) if gpu else None
            lines += textwrap.wrap(f"precisions {_by_gpu(precisions, s.requirement, runs)}; "
                                   f"parameters {params}",
                                   width_total, initial_indent=" " * (width + 4),
                                   subsequent_indent=" " * (width + 8))
            continue
        lines += textwrap.wrap("precisions: " + "; ".join(
            f"{b} {', '.join(s.precisions_for(b)) or 'none'}" for b in BACKENDS), width_total,
            initial_indent=" " * (width + 4), subsequent_indent=" " * (width + 8))
        defaults = s.defaults()
        on_gpus = []
        for b in BACKENDS:
            o = s.offer(b)
            runs = ((lambda p, o=o: o.runs_on(gpu[0], p, defaults) is None) if gpu else None)
            text = _by_gpu(o.precisions, lambda p, o=o: o.requirement(p, defaults), runs)
            conditions = [f", {k} {sm(cc)}+" for k, cc in o.requires.items() if "=" in k]
            on_gpus.append(f"{b} {text}{''.join(conditions)}")
        lines += textwrap.wrap("GPUs: " + "; ".join(on_gpus), width_total,
                               initial_indent=" " * (width + 4),
                               subsequent_indent=" " * (width + 8))
        for prm in s.params:
            only = "" if len(prm.backends) > 1 else f" [{prm.backends[0]} only]"
            choices = "|".join(str(int(c)) if isinstance(c, bool) else str(c) for c in prm.choices)
            default = int(prm.default) if isinstance(prm.default, bool) else prm.default
            lines += textwrap.wrap(f"{prm.name}={choices} (default {default}){only}: {prm.help}",
                                   width_total, initial_indent=" " * (width + 4),
                                   subsequent_indent=" " * (width + 8))
    if not names or AUTO_STAGE.name in names:
        lines += textwrap.wrap(AUTO_STAGE.title, width_total,
                               initial_indent=f"{AUTO_STAGE.name:<{width}}  ",
                               subsequent_indent=" " * (width + 2))
        lines += textwrap.wrap("NAME:auto is another thing: one stage's configuration from "
                               "python -m lab.autotune's cache (docs/AUTOTUNE.md); python -m "
                               "lab.dispatch which --size MxNxK says what auto picks",
                               width_total, initial_indent=" " * (width + 4),
                               subsequent_indent=" " * (width + 8))
    here = (f"this GPU, {gpu[1]}, is {gpu[0][0]}.{gpu[0][1]} ({sm(gpu[0])})" if gpu
            else "no GPU here")
    gpus = f"sm_80+: compute capability 8.0 and newer; sm_90a: 9.0 (Hopper) only; {here}"
    if brief:
        lines += ["", wrap(gpus), wrap("python -m lab.compare --list --stage NAME shows a "
                                       "stage's parameters with their values and defaults, and "
                                       "which backend takes each")]
    else:  # indented: every line at the margin is a stage's name
        lines += textwrap.wrap(f"{gpus}; the tests build every CUDA stage for each of "
                               f"{', '.join(ARCHS)} it runs on", width_total,
                               initial_indent=" " * 4, subsequent_indent=" " * 4)
    return "\n".join(lines)


def list_suites(sizes: str | None = None) -> str:
    """The shape suites (lab/suites.py), one line per shape; with `sizes` (a --sizes text), only
    the suite shapes it selects (llm@1-64: llm's shapes at M <= 64)."""
    from lab.shapes import parse_labelled_sizes
    from lab.suites import listing

    def wrapped(text: str) -> str:  # title and note lines wrapped at spaces, shape lines kept
        return "\n".join(line if line.startswith("  ") else wrap(line, subsequent="  ")
                         for line in text.splitlines())

    if sizes is None:
        return wrapped(listing() + "\n--sizes llm@1-64 takes a suite's shapes at M = 1..64 only "
                       "(llm@1+16: M = 1 and 16); docs/SUITES.md says where each list comes from.")
    picked = parse_labelled_sizes(sizes)
    rows: dict[str, list] = {}
    for shape in picked.shapes:
        for e in picked.entries.get(shape, []):
            name = next(s.name for s in SUITES.values() if e in s.entries)
            rows.setdefault(name, []).append(e)
    if not rows:
        return wrapped(f"--sizes {sizes} names no suite; the suites are {', '.join(SUITES)}")
    return wrapped(listing([SUITES[n] for n in rows], rows))


_EARLY: list = []  # the --gpus launcher, started as soon as the GPUs are counted (_main)


RANK_ERROR_WAIT_S = 5.0  # a --gpus rank's wait before it says an error of the request (below)


def main(argv: list[str] | None = None) -> int:
    try:
        if ranks_mod.in_rank() and os.environ.get(ranks_mod.MERGER_ENV) == "launcher":
            return guarded(_rank_main, argv)
        return guarded(_main, argv)
    finally:
        while _EARLY:  # a run refused after its ranks started: they end with it
            _EARLY.pop().kill()


def _rank_main(argv: list[str] | None) -> int:
    """A rank started by --gpus: the launcher checks the same request with the same code and ends
    the ranks when it refuses it, so a rank that finds the request wrong waits a moment before it
    says so (the launcher's one sentence comes first and this rank ends unheard); it speaks only
    when its own trouble is not the launcher's."""
    try:
        return _main(argv)
    except LabError as exc:
        time.sleep(RANK_ERROR_WAIT_S)
        raise LabError(f"rank {os.environ.get('RANK')}: {exc}") from None


def _main(argv: list[str] | None) -> int:
    from pathlib import Path

    args = build_parser().parse_args(argv)
    from lab.shapes import CPU_SIZES, GPU_SIZES, parse_labelled_sizes
    from lab.stages import parse_variants

    if args.list:
        names = ([v.stage.name for v in parse_variants(args.stage, dispatch=True)]
                 if args.stage else None)
        print(list_stages(names))
        return 0
    if args.list_suites:
        print(list_suites(",".join(args.sizes) if args.sizes else None))
        return 0
    variants = parse_variants(args.stage or [], dispatch=True)
    if any(v.auto for v in variants):  # an unreadable tuning cache is said before any work
        from lab.tune.cache import load_cache

        load_cache()
    if any(v.dispatch for v in variants):  # so is an unreadable dispatch table
        from lab.dispatch import load_table

        load_table()
    backends = parse_backends(args.backend)
    precision = parse_choices(args.precision or "fp32", PRECISIONS, "precision", "comma list")
    if not args.rep_ms > 0:
        raise LabError("--rep-ms must be a positive number of milliseconds")
    if args.repeat < 1:
        raise LabError(f"--repeat must be 1 or more, not {args.repeat}")
    if args.sizes is not None and any(not s.strip() for s in args.sizes):
        raise LabError("--sizes is empty; give sizes such as 1024,1025,512x768x333")
    if args.fail_on_regression is not None:
        if not args.baseline:
            raise LabError("--fail-on-regression compares with an earlier run and needs "
                           "--baseline OLD.csv")
        if not args.fail_on_regression >= 0:
            raise LabError(f"--fail-on-regression must be a percentage of 0 or more, not "
                           f"{args.fail_on_regression:g}")
    from lab.cli import check_folder, check_writable

    if args.resume and not args.csv:
        raise LabError("--resume adds to the CSV of an earlier run: give it with --csv PATH")
    if args.gpus is not None and ranks_mod.in_rank():
        raise LabError("--gpus starts the ranks itself; under torchrun leave it out (torchrun's "
                       "--nproc-per-node says how many)")
    csv_paths = None
    if args.csv and ranks_mod.worker_only():  # a rank that only works writes no file
        csv_paths = (Path(args.csv), Path(args.csv).with_suffix(".env.json"))
    elif args.csv:  # before any work: a long GPU run must not end in an unwritable path
        csv_paths = check_writable(args.csv)
    plotter = None
    if args.plot:  # the folder, and that plotting can be imported, before any work
        check_folder(args.plot, "--plot")  # the error names the folder, not a CSV path
        if csv_paths is None:  # without --csv the run's CSV goes into the plot folder
            csv_paths = check_writable(str(Path(args.plot) / "run.csv"))
        plotter = _plotter()
    baseline = None
    if args.baseline:
        from lab import baseline as base_mod

        baseline = base_mod.load(args.baseline)

    launch_argv = sys.argv[1:] if argv is None else list(argv)
    if args.gpus is not None and not ranks_mod.in_rank() and args.gpus != "all":
        # a number of ranks: they start now, importing torch and setting up their GPUs while this
        # process does the same and plans (the number is checked against the GPUs below)
        _EARLY.append(ranks_mod.Launcher(ranks_mod.count_gpus(args.gpus, "cpu"), launch_argv,
                                         "unknown"))

    from lab.run import RunSpec, detect_mode, validate

    mode = detect_mode(args.mode)  # CPU mode: the Triton interpreter on before any kernel import
    if args.gpus is not None and not ranks_mod.in_rank():
        n = ranks_mod.count_gpus(args.gpus, mode)  # refuses more ranks than GPUs (main() ends them)
        if not _EARLY:  # --gpus all: counted first
            _EARLY.append(ranks_mod.Launcher(n, launch_argv, mode))
        _EARLY[-1].store  # open the store now (torch is imported): the ranks join while we plan
    if args.precision is None:  # the default: say so where a named stage has no fp32 (its Offer,
        for v in variants:      # read here, imports its kernels: after detect_mode)
            if v.implicit or v.dispatch:
                continue
            offered = {p for b in backends for p in v.stage.precisions_for(b)}
            if offered and "fp32" not in offered:
                first = next(p for p in PRECISIONS if p in offered)
                raise LabError(f"stage {v.stage.name} does not compute in fp32, the precision "
                               f"lab.compare runs when --precision is not given; it computes in "
                               f"{', '.join(p for p in PRECISIONS if p in offered)}: add "
                               f"--precision {first} (or a comma list of them)")
    sizes = parse_labelled_sizes(",".join(args.sizes) if args.sizes else
                                 (GPU_SIZES if mode == "gpu" else CPU_SIZES))
    layouts = parse_layouts("nn" if args.layout is None else args.layout)
    # a suite's shapes run in its layout unless --layout says otherwise (lab/suites.py)
    shape_layouts = sizes.shape_layouts(layouts) if args.layout is None else {}
    spec = RunSpec(variants, backends, sizes.shapes, precision, args.seed, mode, args.rep_ms,
                transfers=args.include_transfers, api=args.api,
                layouts=layouts, shape_layouts=shape_layouts,
                labels=sizes.labels(lambda s: shape_layouts.get(s, layouts)),
                repeat=args.repeat, cublas_timing=args.cublas_timing)
    validate(spec)  # say what is wrong before printing anything else (execute() checks again)
    from lab.run import SIZE_SKIP, cpu_skips

    from rich.console import Console
    from rich.markup import escape

    from lab import csvfile, table
    from lab import computed
    from lab import repeats
    from lab import row

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=220)  # a log file or pipe: room for --wide, unless COLUMNS says
    err = Console(stderr=True)
    if ranks_mod.worker_only():  # a rank that only works: the merger says the run's notes
        err = Console(stderr=True, quiet=True)
    if mode == "cpu":
        err.print("[yellow]No CUDA GPU: CPU mode.[/yellow] Triton stages run under the Triton "
                  "interpreter and are checked against torch.matmul; CUDA stages are compiled "
                  f"with NVRTC for {os.environ.get('LAB_CUDA_ARCH') or 'sm_90'} and report "
                  f"their resources. Nothing is timed.")
        skipped = cpu_skips(spec)
        if skipped:
            err.print(f"Triton rows at {', '.join(map(str, skipped))} are skipped: the interpreter "
                      f"runs up to M*N*K = 256^3 (CUDA rows are compiled at every size).")
    not_run = spec.unsupported()
    if not_run:
        err.print(escape(f"Not run (the stage does not compute in that precision): "
                         f"{', '.join(not_run)}."), highlight=False)
    earlier = []  # --resume: the rows the CSV (and its journal) already hold
    if args.resume and not ranks_mod.worker_only():
        earlier = ranks_mod.earlier_rows(csv_paths[0])
    lost = []
    env_info = None  # a run over several GPUs: rank 0's environment and the run's GPUs
    if ranks_mod.in_rank() or args.gpus is not None:
        got = _run_over_gpus(args, argv, spec, mode, err, csv_paths, earlier)
        if got is None:  # a rank that only works: its rows went to the merger
            return 0
        rows, lost, env_info = got
        read_bw = env_info.get("hbm_read_gbps")
        read_bw = read_bw * 1e9 if read_bw else None
        computed.finalize(rows)  # each row carries its own GPU's read bandwidth
    else:
        read_bw = _read_bandwidth(mode, err)  # once per run, before the rows: pct_hbm's denominator
        skip = ranks_mod.done_keys(earlier)
        rows = (_execute_with_progress(spec, err, skip=skip) if skip else
                _execute_with_progress(spec, err))
        computed.finalize(rows, read_bw=read_bw)
    if earlier:
        rows = _in_plan_order(spec, earlier + rows)
    matched = base_mod.apply(rows, baseline) if baseline is not None else 0
    shown = repeats.summarize_repeats(rows) if args.repeat > 1 else rows
    table.render(shown, mode, console, wide=args.wide, spread=args.repeat > 1)

    def say(text: str) -> None:  # a note under the table, wrapped at spaces to the terminal
        console.print(escape(wrap(text, subsequent="  ")), highlight=False, soft_wrap=True)

    for r in shown:  # which configuration each stage:auto row ran (or, in CPU mode, compiled)
        if r.stage.endswith(":auto") and r.status in row.OK_STATUSES:
            say(auto_note(r))
    for r in shown:  # which stage each auto row ran, and why (the lab's choice, not the tuner's)
        if r.stage == "auto" and r.status in row.OK_STATUSES:
            say(dispatch_note(r))
    # why a row was skipped, once per reason (rows too large for the interpreter: said above)
    reasons = dict.fromkeys(f"{r.stage} ({r.backend}) is skipped: {r.detail}" for r in shown
                            if r.status == "skipped" and r.detail and r.stage != "auto"
                            and not r.detail.startswith(SIZE_SKIP))  # auto: said above
    for reason in reasons:
        say(reason)
    if args.repeat > 1 and mode == "cpu":
        say(f"--repeat {args.repeat} is for timed GPU runs; CPU mode times nothing, so each "
            f"row shows once")
    conditions = table.conditions_line(rows)
    if conditions:
        say(conditions)
    if read_bw is not None and table.thin(shown):
        say(f"% HBM: GB/s (A and B read once, C written once, over the median time) as a % of "
            f"the {read_bw / 1e12:.2f} TB/s this GPU's memory was read at, measured for this run")
    if env_info:
        spread = ranks_mod.spread(rows)
        if spread:
            say(f"across GPUs, the {plural(spread[0][2], 'configuration')} measured on every "
                f"GPU: median % of cuBLAS " + "; ".join(f"{g} {m:.1f}" for g, m, _ in spread)
                + f" ({max(m for _, m, _ in spread) - min(m for _, m, _ in spread):.1f} points "
                f"apart)")
    for unit, why in lost:
        say(f"lost: {unit} ({why})")
    if lost:
        say(f"{plural(len(lost), 'unit')} of work lost (one stage's rows, or the cuBLAS row, of "
            f"a shape in one layout and precision); "
            + ("run the same command with --resume to add them" if csv_paths else
               "give --csv next time, so that --resume can add what a run lost"))
    if csv_paths:
        from lab import env

        env_data = env_info if env_info else env.collect(mode, args.seed, read_bw=read_bw)
        if earlier:
            env_data = {**env_data, "resumed": f"{plural(len(earlier), 'row')} from an earlier "
                                               f"run of this CSV"}
        csv_path, env_path = csvfile.write_csv(rows, csv_paths[0], env_data)
        ranks_mod.journal_path(csv_path).unlink(missing_ok=True)  # its rows are in the CSV now
        console.print(f"wrote {csv_path} and {env_path}")
    if plotter is not None:
        import contextlib
        import io

        notes = io.StringIO()  # lab.plot's line on the plots it skipped, wrapped here
        try:
            with contextlib.redirect_stderr(notes):
                drawn = plotter.draw([csv_path], args.plot)
        finally:
            for line in notes.getvalue().splitlines():
                print(wrap(line, subsequent="  "), file=sys.stderr, flush=True)
        say(f"wrote {plural(len(drawn), 'plot')} to {args.plot}"
            + (": " + ", ".join(Path(p).name for p in drawn) if drawn else ""))
    if baseline is not None:
        say(f"compared with {args.baseline}: {matched} of {plural(len(rows), 'row')} matched a "
            f"timed row" + ("" if mode == "gpu" else " (CPU mode times nothing)"))
    failed = [r for r in rows if r.status not in row.OK_STATUSES]
    skipped = sum(r.status == "skipped" for r in rows)
    console.print(summary_line(len(rows) - len(failed) - skipped, len(failed), skipped, mode,
                               args.repeat, lost=len(lost)))
    slower = []
    if args.fail_on_regression is not None:
        slower = base_mod.regressed(rows, args.fail_on_regression)
        if slower:
            console.print(f"[red]regressed[/red] by more than {args.fail_on_regression:g}% "
                          f"against {escape(args.baseline)}: "
                          + escape(", ".join(base_mod.regression_label(r) for r in slower)),
                          highlight=False)
    return 1 if failed or slower or lost else 0


def _run_over_gpus(args, argv, spec, mode, err, csv_paths, earlier):
    """The rows of a run over several GPUs (lab/ranks.py): (rows, lost units, environment) where
    this process merges (the --gpus launcher, or rank 0 under torchrun); None on a rank that only
    works."""
    from rich.markup import escape

    from lab import env

    def say(text):
        err.print(escape(text), highlight=False)

    journal = ranks_mod.journal_path(csv_paths[0]) if csv_paths else None
    done = ranks_mod.done_keys(earlier)
    if journal is not None and not args.resume:
        journal.unlink(missing_ok=True)  # a new run: an old journal is not this run's
    if ranks_mod.in_rank():
        world = ranks_mod.join()

        started = float(os.environ.get(ranks_mod.STARTED_ENV) or time.time())

        def on_row(r):  # seconds since the run started (the launcher's start under --gpus)
            print(f"  [rank {world.rank} {time.time() - started:6.1f} s] {r.stage:<24} "
                  f"{r.backend:<7} {r.layout} {r.M}x{r.N}x{r.K}: {r.status}", file=sys.stderr,
                  flush=True)

        def env_of(bw):
            return env.collect(mode, args.seed, read_bw=bw)

        def measure():
            return _read_bandwidth(mode, err)

        if not world.merges:
            ranks_mod.work(world, spec, env_of, on_row, measure)
            return None
        thread, box = ranks_mod.merge_in_thread(world.size, spec, done, journal, say)
        ranks_mod.work(world, spec, env_of, on_row, measure)
        thread.join()
        if "error" in box:
            raise box["error"]
        merged = box["merged"]
    else:
        launcher = _EARLY.pop()
        n = launcher.n
        say(f"{n} ranks on this machine" + (", one per GPU" if mode == "gpu" else
                                            " (CPU mode)")
            + f", started {launcher.started_after:.1f} s after the command")
        try:
            merged = ranks_mod.merge(launcher.store, n, spec, done, journal, dead=launcher.dead,
                                     say=say)
        finally:
            launcher.close()
    return merged.rows, merged.lost, merged.env


def _in_plan_order(spec, rows):
    """Rows of several runs (a resumed CSV's and this run's) in the order one GPU runs the plan;
    rows of units outside the plan after them, as they came."""
    from lab.run import unit_key, units

    pos = {u.key: i for i, u in enumerate(units(spec))}
    return sorted(rows, key=lambda r: pos.get(unit_key(r), len(pos)))


def summary_line(ok: int, failed: int, skipped: int, mode: str, repeat: int = 1,
                 lost: int = 0) -> str:
    """The last line of a run: '1 row ok, 0 failed (cpu mode)', '2 rows ok, 1 failed, 1 skipped
    over 3 repeats (gpu mode)', '4 rows ok, 0 failed, 1 unit lost (cpu mode)'. The counts are
    rows of the CSV (every repeat); lost units (a run over several GPUs) have no rows."""
    return (f"{plural(ok, 'row')} ok, {failed} failed" + (f", {skipped} skipped" if skipped else "")
            + (f", {plural(lost, 'unit')} lost" if lost else "")
            + (f" over {repeat} repeats" if repeat > 1 else "") + f" ({mode} mode)")


def auto_note(r) -> str:
    """What a stage:auto row ran: on a GPU the configuration and why (the cached winner or the
    defaults); in CPU mode what happened to the defaults instead (compiled, checked under the
    interpreter, or skipped), since there is no GPU to look a tuned configuration up for."""
    where = f"{r.stage} {r.backend} {r.layout} {r.M}x{r.N}x{r.K}"
    params = r.params.replace(",", ", ") if r.params else "the defaults"
    if r.mode != "cpu":
        return f"{where} ran {params} ({r.detail})"
    done = {"compiled": "compiled for sm_90 by NVRTC, not run",
            "pass": "checked under the Triton interpreter, not timed",
            "skipped": "not run (larger than the Triton interpreter takes)"}.get(r.status, r.status)
    return (f"{where}: CPU mode has no GPU to look up a tuned configuration for, so the defaults "
            f"were {done}: {params}")


def dispatch_note(r) -> str:
    """What an `auto` row ran (the lab's choice of stage, lab/dispatch.py) and why: its params
    column (`stage/backend: parameters`) and its detail; in CPU mode what happened to it."""
    where = f"auto {r.precision} {r.layout} {r.M}x{r.N}x{r.K}"
    params = r.params.replace(",", ", ")
    detail = r.detail.removeprefix("auto: ")
    if r.mode != "cpu":
        return f"{where} ran {params} ({detail})"
    done = {"compiled": "compiled for sm_90 by NVRTC, not run",
            "pass": "checked under the Triton interpreter, not timed",
            "skipped": "not run (larger than the Triton interpreter takes)"}.get(r.status, r.status)
    return f"{where}: {params} was {done} ({detail})"


def _read_bandwidth(mode: str, err) -> float | None:
    """GPU mode: the DRAM read bandwidth in bytes/s, measured once for the run (lab/bandwidth.py);
    None in CPU mode, or, with one line saying why, when it could not be measured."""
    if mode != "gpu":
        return None
    from rich.markup import escape

    from lab.bandwidth import measure_read_bandwidth

    try:
        return measure_read_bandwidth("cuda")
    except Exception as exc:  # the rows still run; only pct_hbm stays empty
        err.print(escape(f"The GPU's read bandwidth could not be measured ({type(exc).__name__}: "
                         f"{exc}), so pct_hbm stays empty."), highlight=False)
        return None


def _plotter():
    """lab.plot, imported only when --plot asks for it (it brings in matplotlib)."""
    import importlib

    try:
        return importlib.import_module("lab.plot")
    except ImportError as exc:
        hint = ("; install it with python -m pip install -e \".[dev]\""
                if (exc.name or "").startswith("matplotlib") else "")
        raise LabError(f"--plot cannot import lab.plot ({exc}){hint}") from None


def _execute_with_progress(spec, err, skip=frozenset()):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lab.run import execute, units

    only = [u for u in units(spec) if u.key not in skip] if skip else None
    if not err.is_terminal:  # logs and CI: one line per finished row instead of a bar
        def on_row(r):
            print(f"  {r.stage:<24} {r.backend:<7} {r.layout} {r.M}x{r.N}x{r.K}: {r.status}",
                  file=sys.stderr, flush=True)
        return execute(spec, on_row, only=only)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        task = progress.add_task("running", total=spec.n_rows)

        def on_row(r):
            progress.update(task, advance=1,
                            description=f"{r.stage} {r.backend} {r.layout} {r.M}x{r.N}x{r.K}")
        return execute(spec, on_row, only=only)


if __name__ == "__main__":
    sys.exit(main())
