"""--dry-run (no GPU, seconds) and --dry-run --compile-all: the space, the validate prune, and
the resource prune estimated from NVRTC builds of a bounded sample, or built for the whole space
(lab/tune/__init__.py, steps 1 to 4)."""

from __future__ import annotations

import math
import time

from lab.cli import plural, wrap
from lab.base.contract import Prepared
from lab.tune.cache import bucket
from lab.tune.pool import CompileAhead, compile_sample, cuda_probe, warm_build_caches
from lab.tune.prune import build_identity, validator
from lab.tune.report import Ticker, duration, same_text, thousands, trial_line
from lab.tune.search import Candidates, candidates, search
from lab.tune.seeds import SEED_SMS, seed_text
from lab.tune.space import ENUMERATE_LIMIT, fmt, space_of

# NVRTC builds of a sample instead of the whole space, so that a dry run answers in seconds
DRY_RUN_SAMPLE = 12  # valid configurations picked at random for the resource estimate (CUDA)
DRY_RUN_COMPILE_S = 12.0  # seconds of builds one dry run starts, over all its CUDA searches
DRY_RUN_SHOWN = 10  # Triton: candidates listed in search order (nothing to compile)


def stand_in(params: dict) -> Prepared:
    """The dry run's launch factory: a Prepared that launches nothing."""
    return Prepared(lambda: None)


class DryRunBudget:
    """The seconds of NVRTC builds a dry run may spend (DRY_RUN_COMPILE_S), shared out over its
    CUDA searches: each takes what is left divided by the searches still to come, so that
    `--stage all` answers in seconds too. None: no time limit (an explicit --sample N)."""

    def __init__(self, seconds: float | None, searches: int):
        self.left = seconds
        self.searches = max(1, searches)

    def share(self) -> float | None:
        return None if self.left is None else max(0.0, self.left) / self.searches

    def spent(self, seconds: float) -> None:
        if self.left is not None:
            self.left -= seconds
        self.searches = max(1, self.searches - 1)


def dry_run(stage, backend: str, shape, layout: str, max_configs: int | None = None,
             restrict: dict | None = None, jobs: int = 1, precision: str = "fp32", *,
             sample: int | None = None, budget: DryRunBudget | None = None,
             compile_all: bool = False) -> None:
    """The space and its pruning without a GPU, in seconds: every searched parameter and its
    values; how many configurations the space declares, how many the search considers (a sample
    above ENUMERATE_LIMIT) and how many pass validate(); for CUDA an estimate of the resource
    prune from NVRTC builds for sm_90 of a sample (the defaults, the split-K seeds, then `sample`
    valid configurations picked at random: at most DRY_RUN_SAMPLE by default, within the
    budget's seconds); and a sample of configurations with their resources. `compile_all`
    compiles every valid configuration instead (dry_run_all)."""
    if compile_all:
        return dry_run_all(stage, backend, shape, layout, max_configs, restrict, jobs, precision)
    M, N, K = shape
    offer = stage.offer(backend)
    validate = validator(offer, precision)
    print(f"{stage.name} {backend} {layout} {M}x{N}x{K} {precision} "
          f"(bucket {bucket(M, N, K)}):", flush=True)
    space = space_of(stage, backend, restrict, validate)
    c = candidates(space, validate=validate, shape=(M, N, K), sm_count=SEED_SMS,
                   identity=build_identity(offer, M, N, K, precision, SEED_SMS))

    def say(text: str, indent: str = "  ") -> None:  # a note, wrapped to the terminal at spaces
        print(wrap(text, indent=indent, subsequent=indent + "  "), flush=True)

    say(f"space {space.describe(dims=False)}")
    if space.searched:
        width = max(len(p.name) for p in space.searched)
        for p in space.searched:
            print(f"    {p.name:<{width}}  {'|'.join(fmt(v) for v in p.choices)} "
                  f"(default {fmt(space.default[p.name])})")
    valid, considered = len(c.valid) + c.same_build, len(c.configs)
    print("  pruning:")
    say(f"{thousands(space.size)} configurations in the declared space", "    ")
    if c.sampled:
        say(f"{thousands(considered)} of them considered: the search samples a space above "
            f"{thousands(ENUMERATE_LIMIT)} configurations (a fixed random sample, the defaults in it)",
            "    ")
    rate = valid / considered if considered else 0.0
    say(f"{thousands(valid)} pass validate, {thousands(len(c.invalid))} rejected"
        + (f" ({100 * rate:.0f}% pass; at that rate about "
           f"{thousands(int(round(rate * space.size, -2)))} of the declared space)" if c.sampled
           else ""), "    ")
    if c.invalid:
        say(f"rejected, for example: {c.invalid[0][1]}", "      ")
    if c.same_build:
        say(f"{thousands(len(c.valid))} distinct builds: {thousands(c.same_build)} more are the same build as "
            f"one of those once the automatic values are resolved for this shape", "    ")
    if c.seeds:
        say(f"split-K seeds (tiles x {space.tuning.split} near 1x, 2x, 4x {c.sms} SMs): "
            + "; ".join(seed_text(sd, space.tuning) for sd in c.seeds))
    if offer.compile is not None:
        _dry_run_builds(stage, offer, space, c, shape, layout, precision, max_configs, jobs,
                        sample, budget, say)
    else:
        _dry_run_order(space, c, validate, shape, layout, max_configs, offer, precision, say)


def _dry_run_builds(stage, offer, space, c: Candidates, shape, layout, precision, max_configs,
                    jobs, sample, budget, say) -> None:
    """The CUDA part of a dry run: a sample compiled with NVRTC for sm_90, the resource prune
    estimated from its random part, and the sample listed."""
    M, N, K = shape
    picked: list[tuple[dict, str]] = []  # (configuration, why: default | seed | random)
    seen = set()

    def add(config: dict, why: str) -> None:
        k = c.ident(config)
        if k not in seen:
            seen.add(k)
            picked.append((config, why))

    if c.valid:
        add(c.valid[0], "default")
    wanted = DRY_RUN_SAMPLE if sample is None else sample
    # the seeds and the random picks in turn, so that a build budget cut short still leaves
    # random builds for the estimate
    seed_queue, random_queue = list(c.seeds), list(c.shuffled[:wanted])
    while seed_queue or random_queue:
        if random_queue:
            add(random_queue.pop(0), "random")
        if seed_queue:
            add(seed_queue.pop(0), "seed")
    if max_configs is not None:
        picked = picked[:max_configs]
    probe = cuda_probe(offer, M, N, K, layout, precision)
    if jobs > 1:
        warm_build_caches()
    seconds = budget.share() if budget is not None and sample is None else None
    ticker = Ticker(f"{stage.name} {offer.backend}: NVRTC builds of the sample", len(picked))
    began = time.monotonic()
    try:
        trials = compile_sample(probe, [cfg for cfg, _ in picked], jobs, seconds, ticker.advance)
    finally:
        ticker.close()
        if budget is not None:
            budget.spent(time.monotonic() - began)
    built = [(t, why) for t, (_, why) in zip(trials, picked) if t is not None]
    randoms = [t for t, why in built if why == "random"]
    fit = [t for t in randoms if t.status == "fit"]
    pruned = [t for t in randoms if t.status == "pruned"]
    errors = [t for t in randoms if t.status == "error"]
    valid = len(c.valid)
    valid_builds = ("distinct valid builds" if c.same_build else "valid builds")
    compiled_keys = {c.ident(t.params) for t, _ in built}
    everything = bool(valid) and all(c.ident(v) in compiled_keys for v in c.valid)
    if everything:  # every valid build compiled: the counts are exact
        kept = sum(t.status == "fit" for t, _ in built)
        say(f"resource pruning, exact: {kept} of the {valid} {valid_builds} fit one sm_90 SM "
            f"without spills (NVRTC; every one compiled)"
            + (f"; {sum(t.status == 'pruned' for t, _ in built)} pruned, "
               f"{plural(sum(t.status == 'error' for t, _ in built), 'error')}"
               if kept < len(built) else ""), "    ")
    elif randoms:
        share = len(fit) / len(randoms)
        say(f"resource pruning, an estimate: {len(fit)} of {plural(len(randoms), 'build')} "
            f"picked at random "
            f"fit one sm_90 SM without spills (NVRTC), so about {thousands(round(share * valid))} of "
            f"the {thousands(valid)} {valid_builds} would be kept"
            + (f" ({len(pruned)} pruned: {pruned[0].detail}" + (", ..." if len(pruned) > 1 else "")
               + ")" if pruned else "")
            + (f" ({len(errors)} failed to build)" if errors else ""), "    ")
    elif not any(why == "random" for _, why in picked):
        say("resource pruning: not estimated, the sample holds no configuration picked at random"
            + (" (--max-configs)" if max_configs is not None else " (--sample 0)"), "    ")
    else:
        say("resource pruning: not estimated, no configuration picked at random was compiled in "
            "the time the dry run allows itself; --sample N compiles N of them", "    ")
    what = {"default": "the defaults", "seed": "the split-K seeds",
            "random": plural(len(randoms), "valid configuration") + " picked at random"}
    parts = [what[w] for w in ("default", "seed", "random") if any(why == w for _, why in built)]
    if parts:
        listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
        say(f"sample, built by NVRTC for sm_90 ({listed}):")
    for i, (t, why) in enumerate(built, 1):
        print(trial_line(i, t, why == "seed"))
    left = len(picked) - len(built)
    spent = sum(t.ms for t, _ in built) / 1000
    per_build = spent / len(built) if built else 0.0
    if left:
        say(f"{left} more of the sample not compiled: a dry run starts no new build after "
            f"{DRY_RUN_COMPILE_S:.0f} s of builds, shared by its CUDA searches (--sample N "
            f"compiles N of them, however long it takes)")
    if not everything and valid:
        jobs_text = f"{jobs} thread{'s' if jobs != 1 else ''}"
        say(f"--compile-all compiles all {thousands(valid)} valid builds in search order"
            + (f" (about {duration(per_build * valid / max(1, jobs))} on {jobs_text} at this "
               f"sample's {per_build:.1f} s a build)" if per_build >= 0.05 else ""))


def _dry_run_order(space, c: Candidates, validate, shape, layout, max_configs, offer, precision,
                   say) -> None:
    """The Triton part of a dry run: its builds need a GPU, so the first candidates in the order
    the search takes them while the defaults stay the fastest."""
    M, N, K = shape
    say("resource pruning: not estimated here, a Triton kernel's registers and spills are known "
        "only after it compiles on a GPU (those that spill are pruned there)", "    ")
    default_key = space.key(space.default)
    shown = DRY_RUN_SHOWN if max_configs is None else max_configs
    r = search(space, launch_factory=stand_in, checker=lambda launch: True,
               timer=lambda params, launch, rep_ms: 1.0 if space.key(params) == default_key
               else 2.0,
               validate=validate, budget_s=math.inf, max_configs=shown, shape=(M, N, K),
               layout=layout, refine_rounds=0, sm_count=SEED_SMS,
               identity=build_identity(offer, M, N, K, precision, SEED_SMS))
    print("  sample, the first candidates in search order (while the defaults stay the "
          "fastest):")
    for i, t in enumerate(r.trials, 1):
        print(trial_line(i, t, t.how == "seed"))
    if r.not_reached:
        print(f"  ... and {thousands(r.not_reached)} more")


def dry_run_all(stage, backend: str, shape, layout: str, max_configs: int | None,
                 restrict: dict | None = None, jobs: int = 1, precision: str = "fp32") -> None:
    """--dry-run --compile-all: every valid configuration, and for CUDA its NVRTC build for
    sm_90 (spills, fit; `jobs` threads compile ahead), in the order the search takes them while
    the defaults stay the fastest (the real order follows the timings), with progress. `search`
    itself runs, with a stand-in for the GPU, and the split-K seeds aim at SEED_SMS SMs. This
    takes minutes to hours (each build 0.1 to 2 s): the plain dry run estimates instead."""
    from lab.occupancy import SM90

    M, N, K = shape
    offer = stage.offer(backend)
    space = space_of(stage, backend, restrict, validator(offer, precision))
    default_key = space.key(space.default)
    if max_configs is None and offer.compile is None:
        max_configs = DRY_RUN_SHOWN  # nothing is compiled: the first few show the order
    title = f"{stage.name} {backend} {layout} {M}x{N}x{K} {precision}"
    print(f"{title} (bucket {bucket(M, N, K)}):", flush=True)

    def timer(params, launch, rep_ms):  # the defaults stay the fastest
        return 1.0 if space.key(params) == default_key else 2.0

    probe = cuda_probe(offer, M, N, K, layout, precision) if offer.compile is not None else None
    ahead = None
    if probe is not None and jobs > 1:
        warm_build_caches()
        ahead = CompileAhead(probe, space.key, jobs)
    ticker = None
    on_progress = None
    if probe is not None:
        ticker = Ticker(f"{stage.name} {backend}: NVRTC builds, in search order", 0)

        def on_progress(phase, done, total, trial, best):
            ticker.set_total(min(total, max_configs) if max_configs is not None else total)
            ticker.advance(done - ticker.done)
    try:
        r = search(space, launch_factory=stand_in, checker=lambda launch: True, timer=timer,
                   validate=validator(offer, precision), probe=ahead.probe if ahead else probe,
                   limits=SM90, budget_s=math.inf, max_configs=max_configs,
                   shape=(M, N, K), layout=layout, refine_rounds=0, sm_count=SEED_SMS,
                   prefetch=ahead.prefetch if ahead else None,
                   compile_ahead=ahead.lookahead if ahead else 0, on_progress=on_progress,
                   identity=build_identity(offer, M, N, K, precision, SEED_SMS))
    finally:
        if ticker is not None:
            ticker.close()
        if ahead is not None:
            ahead.close()
    print(f"  space {r.space}" + (f"; sampled {r.considered}" if r.sampled else ""))
    print(f"  {r.valid} pass validate, {len(r.invalid)} rejected{same_text(r)}")
    if r.seeds:
        print(f"  split-K seeds (tiles x {r.tuning.split} near 1x, 2x, 4x {r.sm_count} SMs): "
              + "; ".join(seed_text(s, r.tuning) for s in r.seeds))
    if probe is not None:
        print("  resources (NVRTC, sm_90), in search order:")
    else:
        print("  resources: a Triton kernel's registers and spills are known only after it "
              "compiles on the GPU (those that spill are pruned there); the search order:")
    for i, t in enumerate(r.trials, 1):
        print(trial_line(i, t, t.how == "seed"))
    if probe is not None:
        print(f"  {r.count('timed')} fit, {r.count('pruned')} pruned by resources, "
              f"{plural(r.count('error'), 'error')}"
              + (f"; {r.not_reached} not compiled (--max-configs)" if r.not_reached else ""))
    elif r.not_reached:
        print(f"  ... and {r.not_reached} more")
