"""python -m lab.autotune: search a stage's parameter space on this GPU, for one shape, and cache
the winner so that `--stage <stage>:auto` rows of lab.compare run it.

The command line (lab/autotune.py runs main()): argparse, --stage with restrictions, and one
search (tuner.tune), dry run (dryrun.dry_run) or cache listing per request."""

from __future__ import annotations

import argparse
import os
import sys

from lab.cli import ArgumentParser, guarded, wrap
from lab.base.errors import LabError
from lab.tune.cache import CACHE_ENV, DEFAULT_CACHE, CacheError, bucket, cache_path, load_cache
from lab.tune.dryrun import DRY_RUN_COMPILE_S, DRY_RUN_SAMPLE, DryRunBudget, dry_run
from lab.tune.gpu import gpu_available, gpu_name
from lab.tune.pool import default_jobs
from lab.tune.report import report_lines, reporter, times_line
from lab.tune.search import DEFAULT_BUDGET_S, EXPLORE_FRACTION, TOP
from lab.tune.space import choices_text, numerics_refusal, params_text
from lab.tune.tuner import tune


def build_parser() -> argparse.ArgumentParser:
    from lab.stages import BACKENDS

    p = ArgumentParser(prog="lab.autotune", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="The search, the cache and the output: docs/AUTOTUNE.md.")
    p.add_argument("--stage", metavar="NAME[:P=V|V,...][,NAME]",
                   help="stage(s) to tune, a comma list of registry names or 'all'; after a "
                        "colon, name=value or name=v1|v2|... restricts a parameter to some of "
                        "its registry choices (one value pins it), e.g. "
                        "warptiling:splitk=16|32,BM=64|128")
    p.add_argument("--backend", default=",".join(BACKENDS),
                   help=f"comma list of backends (default {','.join(BACKENDS)})")
    p.add_argument("--sizes", action="append", metavar="SIZES",
                   help="comma list of N (square) or MxNxK, repeatable; each is tuned for its "
                        "own bucket (M, N, K rounded up to powers of two, plus an alignment flag); "
                        "a suite name (llm, deepseek, kernelbench; docs/SUITES.md) stands for its "
                        "shapes, tuned in the --layout given")
    p.add_argument("--layout", default="nn", help="comma list of operand layouts: nn (default), "
                                                  "nt, tn, tt")
    p.add_argument("--precision", default="fp32",
                   help="comma list of precisions (default fp32); each is its own search and "
                        "cache entry, for the stage x backend pairs that compute in it")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help=f"seconds per stage, backend, size and layout (default "
                        f"{DEFAULT_BUDGET_S:g}); {int(EXPLORE_FRACTION * 100)}%% searching, the "
                        f"rest refining the {TOP} fastest")
    p.add_argument("--max-configs", type=int, metavar="N",
                   help="launch at most N configurations (the defaults first)")
    p.add_argument("--jobs", type=int, default=default_jobs(), metavar="N",
                   help=f"CUDA: compile up to N upcoming candidates on N threads while one is "
                        f"timed (default min(8, CPUs) = {default_jobs()}; 1 compiles one at a "
                        f"time); with --gpus, N threads per GPU")
    p.add_argument("--retune", action="store_true",
                   help="search again even when the cache has an entry (the new one replaces it)")
    p.add_argument("--cache", metavar="PATH",
                   help=f"the cache file (default ${CACHE_ENV}, else {DEFAULT_CACHE})")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU needed, seconds: show the space (each parameter and its "
                        "values), how many configurations validate() keeps, an estimate of what "
                        "the resource prune keeps (CUDA: NVRTC builds of a sample) and a sample "
                        "of configurations; time nothing")
    p.add_argument("--sample", type=int, metavar="N",
                   help=f"with --dry-run: compile N valid configurations picked at random for the "
                        f"resource estimate, with no time limit (default {DRY_RUN_SAMPLE}, "
                        f"within {DRY_RUN_COMPILE_S:g} s of builds in all)")
    p.add_argument("--compile-all", action="store_true",
                   help="with --dry-run: compile every valid configuration, in search order "
                        "(minutes to hours; --max-configs N stops after N)")
    p.add_argument("--gpus", metavar="N",
                   help="search on N GPUs of this machine at once (a number or all): N ranks of "
                        "torch.distributed, each owning one GPU, evaluate the candidates as each "
                        "GPU comes free; the finalists and cuBLAS are timed on one GPU, and this "
                        "process writes the cache (torchrun starts the ranks instead, on one "
                        "machine or several: docs/MULTIGPU.md). With a time budget, N GPUs try "
                        "about N times the candidates; a search that tries its whole space or "
                        "--max-configs ends sooner")
    p.add_argument("--show", action="store_true",
                   help="print the cache's entries (those of --stage, if given) and exit")
    return p


_EARLY: list = []  # the --gpus launcher, started right after the command line is read (_main)


def main(argv: list[str] | None = None) -> int:
    try:
        return guarded(_main, argv)
    finally:
        while _EARLY:  # a request refused after its ranks started: they end with it
            _EARLY.pop().kill()


def _parse_stages(text: str | None, backends=None) -> list[tuple[object, dict]]:
    """--stage: [(Stage, restriction)], the restriction name -> allowed values (typed, as given;
    {} for none). Items are comma-separated; `stage:name=v1|v2` starts a stage's restriction and
    a following `name=v` item (no stage name) continues it. Each restricted name must be a
    parameter of the stage for at least one of `backends`."""
    from lab.stages import BACKENDS, STAGES, get_stage

    backends = tuple(backends or BACKENDS)
    if not text or not text.strip():
        raise LabError("no stage given; use --stage NAME (see python -m lab.compare --list)")
    items: list[tuple[str, list[str]]] = []
    for piece in (x.strip() for x in text.split(",")):
        if not piece:
            continue
        if ":" in piece:
            name, first = (x.strip() for x in piece.split(":", 1))
            if not name:
                raise LabError(f"--stage {piece!r}: a restriction follows a stage name, as in "
                               f"warptiling:splitk=16|32")
            items.append((name, [first]))
        elif "=" in piece:
            if not items:
                raise LabError(f"--stage {piece!r}: a restriction follows a stage name, as in "
                               f"warptiling:{piece}")
            items[-1][1].append(piece)
        else:
            items.append((piece, []))
    out: list[tuple[object, dict]] = []
    for name, assignments in items:
        if name.lower() == "all":
            if assignments:
                raise LabError("'all' takes no restrictions; name the stage whose parameters you "
                               "restrict, as in warptiling:splitk=16|32")
            chosen = [(s, {}) for s in STAGES]
        else:
            stage = get_stage(name)
            chosen = [(stage, _parse_restriction(stage, assignments, backends))]
        for stage, restrict in chosen:
            same = [r for s, r in out if s is stage]
            if not same:
                out.append((stage, restrict))
            elif same[0] != restrict:
                raise LabError(f"--stage lists {stage.name} twice with different restrictions; "
                               f"list it once (one search and cache entry per stage)")
    return out


def _parse_restriction(stage, assignments: list[str], backends: tuple) -> dict[str, tuple]:
    """name=v1|v2 items of one stage -> name -> values, parsed to the type of the Param's default
    and checked against its registry choices (one sentence for any problem)."""
    declared = {}
    for p in stage.params:
        if any(b in p.backends for b in backends) and p.name not in declared:
            declared[p.name] = p
    where = " or ".join(backends)
    out: dict[str, tuple] = {}
    for item in assignments:
        if item.strip().lower() == "auto":
            raise LabError(f"--stage {stage.name}:auto is for lab.compare rows; the tuner takes a "
                           f"stage name, or restrictions such as {stage.name}:name=v1|v2")
        name, sep, text = (x.strip() for x in item.partition("="))
        if not sep or not name or not text or any(not v.strip() for v in text.split("|")):
            raise LabError(f"--stage {stage.name}: {item!r} is not a restriction; write "
                           f"name=value or name=v1|v2|...")
        p = declared.get(name)
        if p is None:
            others = [q for q in stage.params if q.name == name]
            also = (f" ({name} is a {'/'.join(others[0].backends)} parameter)" if others
                    else "")
            raise LabError(f"stage {stage.name} has no {where} parameter {name!r}{also}; its "
                           f"{where} parameters are {', '.join(declared) or 'none'}")
        if name in out:
            raise LabError(f"--stage {stage.name}: {name} is restricted twice; give its values "
                           f"once, as {name}=v1|v2")
        values = []
        for raw in (v.strip() for v in text.split("|")):
            value = _parse_value(p, raw)
            if value is None or value not in p.choices:
                raise LabError(f"{name}={raw} is not a choice of stage {stage.name}; the "
                               f"registry's {name} choices are {choices_text(p)}, and the tuner "
                               f"searches only those")
            if value not in values:
                values.append(value)
        refused = numerics_refusal(p, values)
        if refused:
            raise LabError(f"{refused}; leave it out of --stage")
        out[name] = tuple(values)
    return out


def _parse_value(p, text: str):
    """`text` as the type of p.default (bool: 0/1/true/false/on/off), or None."""
    kind = type(p.default)
    if kind is bool:
        return {"1": True, "true": True, "on": True, "0": False, "false": False,
                "off": False}.get(text.lower())
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def _for_backend(stage, backend: str, restrict: dict) -> dict:
    """The part of a restriction that names parameters of this backend."""
    mine = {p.name for p in stage.params if backend in p.backends}
    return {k: v for k, v in restrict.items() if k in mine}


def _main(argv: list[str] | None) -> int:
    from lab import ranks

    args = build_parser().parse_args(argv)
    if args.gpus is not None and ranks.in_rank():
        raise LabError("--gpus starts the ranks itself; under torchrun leave it out (torchrun's "
                       "--nproc-per-node says how many)")
    if args.show or args.dry_run:  # no GPU: one process answers (rank 0 under torchrun)
        if ranks.worker_only():
            return 0
        if args.gpus is not None:
            print(f"{'--show' if args.show else '--dry-run'} uses no GPU; --gpus is left aside",
                  file=sys.stderr)
    elif ranks.worker_only():  # a rank that serves its GPU: the coordinator checked the request
        from lab.tune import workers as w

        w.serve(ranks.join(w.PREFIX))
        return 0
    if args.show:
        return _show(args)
    if args.gpus is not None and args.gpus != "all" and not args.dry_run:
        # a number of ranks: they start now, importing torch and setting up their GPUs while
        # this process checks the request (the number is checked against the GPUs later)
        from lab.tune import workers as w

        _EARLY.append(ranks.Launcher(ranks.count_gpus(args.gpus, "cpu"),
                                     sys.argv[1:] if argv is None else list(argv), "gpu",
                                     module="lab.autotune", prefix=w.PREFIX))
    if (args.sample is not None or args.compile_all) and not args.dry_run:
        raise LabError(f"{'--sample' if args.sample is not None else '--compile-all'} belongs "
                       f"to --dry-run (how many builds it compiles); add --dry-run or drop it")
    if args.sample is not None and args.sample < 0:
        raise LabError("--sample must be 0 or more (builds picked at random for the estimate)")
    if args.sample is not None and args.compile_all:
        raise LabError("--sample and --compile-all both say how much --dry-run compiles; give "
                       "one of them")
    if not args.dry_run and not gpu_available():
        example = (f"python -m lab.autotune --stage {args.stage or 'vectorized'} --sizes "
                   f"{','.join(args.sizes) if args.sizes else '4096'} --dry-run")
        raise LabError(f"tuning times kernels and needs a CUDA GPU, and torch sees none here "
                       f"({example} shows the search space and its pruning without one, in "
                       f"seconds)")
    from lab.axes import parse_backends, parse_layouts
    from lab.shapes import parse_sizes
    from lab.stages import PRECISIONS

    backends = parse_backends(args.backend)
    stages = _parse_stages(args.stage, backends)
    layouts = parse_layouts(args.layout)
    precisions = list(dict.fromkeys(x.strip().lower() for x in args.precision.split(",")
                                    if x.strip()))
    bad = [x for x in precisions if x not in PRECISIONS]
    if bad or not precisions:
        raise LabError(f"precision {', '.join(bad) or repr(args.precision)} is not supported; "
                       f"choose from {', '.join(PRECISIONS)}")
    if not args.sizes or any(not s.strip() for s in args.sizes):
        raise LabError("--sizes is missing or empty; give the shapes to tune, such as 4096 or "
                       "1025,7919x6007x3001")
    shapes = parse_sizes(",".join(args.sizes))
    if not args.budget_s > 0:
        raise LabError("--budget-s must be a positive number of seconds")
    if args.max_configs is not None and args.max_configs < 1:
        raise LabError("--max-configs must be 1 or more")
    if args.jobs < 1:
        raise LabError("--jobs must be 1 or more (1 compiles one candidate at a time)")
    # a stage named on its own must compute in every precision asked for; one that 'all' listed
    # is left out where it does not (one line says which), as lab.compare does
    named = {x.split(":", 1)[0].strip().lower() for x in args.stage.split(",")
             if x.strip() and "=" not in x.split(":", 1)[0]}
    left_out = []
    for s, _restrict in stages:
        for be in backends:
            for precision in precisions:
                if precision in s.precisions_for(be):
                    continue
                if s.name in named:
                    raise LabError(f"stage {s.name} ({be}) supports precision "
                                   f"{', '.join(s.precisions_for(be))}, not {precision}; name the "
                                   f"backends and precisions it has with --backend, --precision")
                left_out.append(f"{s.name} {be} {precision}")
    if left_out:
        print(wrap("not searched (the stage does not compute in that precision): "
                   + ", ".join(left_out), subsequent="  "), file=sys.stderr)
    # One search per bucket: a second size in a bucket already searched would overwrite it.
    jobs, seen = [], {}
    for shape in shapes:
        b = bucket(*shape)
        if b in seen:
            print(f"{shape} shares the bucket {b} with {seen[b]}; tuned once, for {seen[b]}",
                  file=sys.stderr)
            continue
        seen[b] = shape
        jobs += [(st, _for_backend(st, be, r), be, shape, lay, pr) for st, r in stages
                 for be in backends for lay in layouts for pr in precisions
                 if pr in st.precisions_for(be)]
    if args.dry_run:
        todo, seen_spaces = [], set()
        for st, r, be, shape, lay, pr in jobs:
            # the space is the same in every precision; what validate() and the builds prune is
            # not, where a launcher's rules depend on the element size
            if pr != "fp32" and pr not in st.precisions_for(be):
                continue
            if (st.name, be, shape, lay, pr) not in seen_spaces:
                seen_spaces.add((st.name, be, shape, lay, pr))
                todo.append((st, r, be, shape, lay, pr))
        budget = DryRunBudget(None if args.sample is not None else DRY_RUN_COMPILE_S,
                              sum(st.offer(be).compile is not None for st, _r, be, *_ in todo))
        for st, r, be, shape, lay, pr in todo:
            dry_run(st, be, shape, lay, args.max_configs, r, args.jobs, pr, sample=args.sample,
                    budget=budget, compile_all=args.compile_all)
        return 0
    path = cache_path(args.cache)
    if path.is_dir():
        raise LabError(f"the cache {path} is a folder; give a file name such as "
                       f"{path / 'autotune.json'}")
    try:
        load_cache(path)
    except CacheError as exc:
        print(f"warning: {exc.args[0].split(';')[0]}; it is kept aside under a .corrupt name "
              f"before the first new entry is written", file=sys.stderr)
    if args.gpus is not None or ranks.in_rank():
        return _over_gpus(args, argv, jobs, path)
    gpu = gpu_name()
    print(f"tuning on {gpu}; cache {path}")
    return _tune_all(jobs, args, path, gpu)


def _tune_all(jobs, args, path, gpu, workers=None) -> int:
    status = 0
    for st, r, be, shape, lay, precision in jobs:
        code, interrupted = _tune_one(st, be, shape, lay, precision, args, path, gpu, r,
                                      workers)
        status = max(status, code)
        if interrupted:  # Ctrl-C ends this search (its best so far is kept) and the command
            print("interrupted: the remaining searches were not started", file=sys.stderr)
            return 130
    return status


def _over_gpus(args, argv, jobs, path) -> int:
    """The searches on several GPUs (lab/tune/workers.py): this process coordinates (the --gpus
    launcher, or rank 0 under torchrun, whose GPU work runs in a thread); any other rank serves
    its GPU until the coordinator stops it."""
    from lab import ranks
    from lab.tune import workers as w

    def say(text: str) -> None:
        print(wrap(text, subsequent="  "), file=sys.stderr, flush=True)

    launcher = thread = None
    box: dict = {}
    if ranks.in_rank():
        world = ranks.join(w.PREFIX)  # rank 0 under torchrun (the others serve, above)
        thread, box = w.serve_in_thread(world)
        size, store, dead = world.size, world.store, (lambda rank: None)
    else:
        size = ranks.count_gpus(args.gpus, "gpu")  # refuses more ranks than GPUs
        launcher = _EARLY.pop() if _EARLY else ranks.Launcher(
            size, sys.argv[1:] if argv is None else list(argv), "gpu", module="lab.autotune",
            prefix=w.PREFIX)
        say(f"{size} ranks on this machine, one per GPU, started {launcher.started_after:.1f} s "
            f"after the command")
        store, dead = launcher.store, launcher.dead
    from lab.tune.gpu import gpu_sm_count

    workers = None
    try:
        workers = w.Workers(store, size, dead, say, gpu_name(), gpu_sm_count())
        print(f"tuning on {size} x {workers.gpu_name}; cache {path}")
        status = _tune_all(jobs, args, path, workers.gpu_name, workers)
    finally:
        if workers is not None:
            workers.stop()
        if launcher is not None:
            launcher.close()
        if thread is not None:
            thread.join(timeout=60)
    if "error" in box:
        raise box["error"]
    if workers.lost_trials or workers.lost:
        for job, params, why in workers.lost_trials:
            say(f"lost: {job['stage']} {job['backend']} {job['M']}x{job['N']}x{job['K']} "
                f"{params_text(params)}: {why}")
        say(f"{len(workers.lost)} of {size} GPUs stopped during the run; the searches went on "
            f"without them, and a candidate a stopped GPU was evaluating was not timed")
        return max(status, 1)
    return status



def _tune_one(stage, backend, shape, layout, precision, args, path, gpu,
              restrict: dict | None = None, workers=None) -> tuple[int, bool]:
    M, N, K = shape
    title = f"{stage.name} {backend} {layout} {M}x{N}x{K}" + (
        f" {precision}" if precision != "fp32" else "")
    on_progress, close = reporter(title)
    try:
        outcome = tune(stage, backend, M, N, K, layout=layout, precision=precision,
                       budget_s=args.budget_s, max_configs=args.max_configs, retune=args.retune,
                       cache=path, gpu=gpu, on_progress=on_progress, restrict=restrict,
                       jobs=args.jobs, workers=workers)
    finally:
        close()
    for line in report_lines(outcome, title):
        print(line)
    interrupted = outcome.result is not None and outcome.result.stopped == "interrupted"
    return (0 if outcome.entry is not None else 1), interrupted



def _show(args) -> int:
    path = cache_path(args.cache)
    if not path.is_file():
        if args.cache or os.environ.get(CACHE_ENV):  # a file the user named: it must be there
            raise LabError(f"there is no tuning cache at {path}; give the file python -m "
                           f"lab.autotune wrote (the H100's is results/autotune.json)")
        print(f"{path}: no tuning cache yet (python -m lab.autotune writes it; the H100's is "
              f"results/autotune.json, --cache results/autotune.json shows it)")
        return 0
    entries = load_cache(path)
    wanted = {s.name for s, _r in _parse_stages(args.stage)} if args.stage else None
    rows = [e for e in entries.values() if wanted is None or e.get("stage") in wanted]
    print(f"{path}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}"
          + ("" if wanted is None else f" for {', '.join(sorted(wanted))}"))
    for e in rows:
        print(f"  {e.get('key')}")
        print(f"    {params_text(e['params'])}")
        print(f"    {times_line(e) if e.get('median_ms') else '?'}; "
              f"{e.get('configs_tried', '?')} configs, {str(e.get('date', '?'))[:10]}")
    return 0
