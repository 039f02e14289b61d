"""The search (lab/tune/__init__.py, steps 1 to 7): the candidates and their fixed order, one
trial's resource check, correctness check and short timing, and the refinement of the fastest.
Every piece that touches the GPU is a function handed in, so the tests drive it on the CPU."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from lab.base.contract import Tuning
from lab.base.errors import LabError
from lab.tune.prune import resource_problem
from lab.tune.seeds import SEED_SMS, splitk_seeds
from lab.tune.space import ENUMERATE_LIMIT, ORDER_RNG, Space, unique

DEFAULT_BUDGET_S = 120.0
SHORT_REP_MS = 25.0  # timing budget of one candidate during the search (at least 5 repetitions)
LONG_REP_MS = 200.0  # ... and of a finalist during the refinement
TOP = 3  # finalists refined (plus the defaults)
REFINE_ROUNDS = 2  # the finalists are timed this many times in turn; the lowest median counts
EXPLORE_FRACTION = 0.8  # of the budget spent searching; the rest is left for the refinement
NEIGHBOUR_PICKS = 2  # of every NEIGHBOUR_PICKS + 1 picks, this many are neighbours of the best


@dataclass
class Trial:
    params: dict
    order: int  # position in the search (0 = the defaults when they are valid)
    status: str = "new"  # timed | wrong | error | pruned
    ms: float | None = None  # median of the short timing
    refined_ms: float | None = None  # lowest median of the long timings (finalists only)
    detail: str = ""
    resources: dict | None = None
    how: str = ""  # default | seed | neighbour | shuffled

    @property
    def best_ms(self) -> float | None:
        return self.refined_ms if self.refined_ms is not None else self.ms


@dataclass
class Result:
    stage: str
    backend: str
    M: int
    N: int
    K: int
    layout: str
    precision: str
    space: str  # Space.describe()
    space_size: int
    sampled: bool
    considered: int  # configurations enumerated (all, or the sample)
    valid: int  # ... that validate() accepted
    invalid: list[tuple[dict, str]]
    trials: list[Trial]
    stopped: str  # "" (all tried), "budget", "max-configs", "interrupted"
    default: dict
    elapsed_s: float
    extra: int = 0  # trials outside a sampled space (seeds, neighbours of the best)
    restricted: dict = field(default_factory=dict)  # Space.restricted
    seeds: list[dict] = field(default_factory=list)  # the split-K seeds (splitk_seeds)
    tuning: Tuning = field(default_factory=Tuning)  # Space.tuning: the seeds' parameter names
    sm_count: int = SEED_SMS  # the SM count the seeds aimed at
    same_build: int = 0  # valid configurations left out: the same build as an earlier one
    winner: Trial | None = None
    default_trial: Trial | None = None
    finalists: list[Trial] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.trials)

    @property
    def not_reached(self) -> int:
        return max(0, self.valid - (len(self.trials) - self.extra))

    @property
    def ranked(self) -> list[Trial]:
        """Timed trials, fastest first (refined time where there is one, then search order)."""
        timed = [t for t in self.trials if t.status == "timed"]
        return sorted(timed, key=lambda t: (t.refined_ms is None, t.best_ms, t.order))


Progress = Callable[[str, int, int, "Trial | None", "Trial | None"], None]


class Pool(Protocol):
    """GPUs that evaluate candidates at the same time, for search(pool=...).

    slots: how many candidates can be in flight (the GPUs still working); busy: how many are.
    submit(trial): start evaluating trial.params (resource check, correctness, short timing) on
    a free GPU. collect(block): the trials finished since the last call, their status, ms,
    detail and resources filled in (block: wait for at least one while any is in flight).
    refine(finalists, rep_ms, rounds, on_progress): time every finalist on one GPU, `rounds`
    times in turn, setting refined_ms (the lowest median) or detail."""

    slots: int
    busy: int

    def submit(self, trial: Trial) -> None: ...

    def collect(self, block: bool) -> list[Trial]: ...

    def refine(self, finalists: list[Trial], rep_ms: float, rounds: int,
               on_progress: "Progress | None") -> None: ...


@dataclass
class Candidates:
    """What search() draws its candidates from (and what the dry run describes): the enumerated
    configurations, those validate() accepts (one per build), the fixed shuffled order of the
    valid ones after the defaults, and the split-K seeds."""

    configs: list[dict]  # enumerated: the whole space, or a sample of ENUMERATE_LIMIT
    sampled: bool
    valid: list[dict]  # accepted by validate(), one per identity (the first spelling)
    invalid: list[tuple[dict, str]]  # (configuration, validate()'s sentence)
    same_build: int  # valid configurations merged into an earlier one with the same identity
    shuffled: list[dict]  # the valid ones after the defaults, in the fixed random order
    seeds: list[dict]  # the split-K seeds that validate() accepts
    sms: int  # the SM count the seeds aim at
    why_invalid: Callable[[dict], str | None]  # validate(), remembered per configuration
    ident: Callable[[dict], object]  # the identity (or Space.key)


def candidates(space: Space, *, validate: Callable[[dict], str | None] | None = None,
               identity: Callable[[dict], object] | None = None,
               shape: tuple[int, int, int] = (0, 0, 0), sm_count: int | None = None, limits=None,
               enumerate_limit: int = ENUMERATE_LIMIT) -> Candidates:
    """Enumerate `space`, validate-prune it, merge configurations of one build (`identity`),
    shuffle the rest in the fixed order and list the split-K seeds: steps 1 to 3 of the search
    (lab/tune/__init__.py), without building or launching anything."""
    validate = validate or (lambda params: None)
    configs, sampled = space.enumerate(enumerate_limit)
    verdicts: dict[tuple, str | None] = {}

    def why_invalid(params: dict) -> str | None:
        k = space.key(params)
        if k not in verdicts:
            verdicts[k] = validate(params)
        return verdicts[k]

    ident = identity or space.key
    valid = [c for c in configs if why_invalid(c) is None]
    invalid = [(c, why_invalid(c)) for c in configs if why_invalid(c) is not None]
    all_valid = len(valid)
    valid = unique(valid, ident)  # one candidate per build
    rng = random.Random(ORDER_RNG)
    shuffled = valid[1:] if valid and space.key(valid[0]) == space.key(space.default) else valid[:]
    rng.shuffle(shuffled)
    sms = int(sm_count or getattr(limits, "sm_count", None) or SEED_SMS)
    seeds = unique([c for c in splitk_seeds(space, *shape, sm_count=sms, validate=why_invalid)
                     if why_invalid(c) is None], ident)
    return Candidates(configs, sampled, valid, invalid, all_valid - len(valid), shuffled, seeds,
                      sms, why_invalid, ident)


def search(space: Space, *, launch_factory: Callable[[dict], object],
           checker: Callable[[Callable], object], timer: Callable[[dict, Callable, float], float],
           validate: Callable[[dict], str | None] | None = None,
           probe: Callable[[dict], dict | None] | None = None, limits=None,
           budget_s: float = DEFAULT_BUDGET_S, max_configs: int | None = None,
           clock: Callable[[], float] = time.monotonic, on_progress: Progress | None = None,
           shape: tuple[int, int, int] = (0, 0, 0), layout: str = "nn", precision: str = "fp32",
           short_rep_ms: float = SHORT_REP_MS, long_rep_ms: float = LONG_REP_MS, top: int = TOP,
           refine_rounds: int = REFINE_ROUNDS, enumerate_limit: int = ENUMERATE_LIMIT,
           sm_count: int | None = None, prefetch: Callable[[list[dict]], None] | None = None,
           compile_ahead: int = 0, identity: Callable[[dict], object] | None = None,
           pool: "Pool | None" = None,
           build_async: Callable[[dict], object] | None = None) -> Result:
    """Search `space` (lab/tune/__init__.py has the steps) and return every trial and the winner.

    launch_factory(params) -> launch: a lab.base.contract.Prepared (prepare()'s), whose `resources`
    (None where nothing was compiled) the resource prune reads.
    checker(launch) -> an object with `passed` and `reason` (lab.check.CheckResult) or a bool.
    timer(params, launch, rep_ms) -> median milliseconds.
    validate(params) -> None, or the sentence why the launcher refuses them.
    probe(params) -> the resources before launching (CUDA: the NVRTC build), or None.
    on_progress(phase, done, total, trial, best): phase "search" after each trial, "refine" after
    each long timing.
    sm_count: the GPU's SMs for the split-K seeds (else `limits.sm_count` if it has one, else
    SEED_SMS).
    prefetch(upcoming): called before each candidate is evaluated with the next `compile_ahead`
    configurations the search would pick if the best stayed the best (CompileAhead.prefetch;
    fewer when --max-configs leaves fewer launches), and once with [] when the search stops
    taking candidates; it must not change what `probe` returns, so the search is the same with or
    without it.
    identity(params) -> what a valid configuration builds and launches (build_identity: its
    automatic values made concrete for the shape by OFFER.resolve); configurations with the same
    identity are one candidate, tried once (the first in enumeration order: the defaults first).
    Without it every distinct value tuple is its own candidate.
    pool: GPUs that evaluate candidates at the same time (Pool; lab/tune/workers.py spreads them
    over the ranks of a run on several GPUs). The search then keeps every GPU busy: it picks a
    candidate whenever one is free, from the best of the trials finished so far, and the
    refinement times every finalist on one GPU (pool.refine). launch_factory, checker and timer
    are not used; the pool's GPUs run their own. build_async(params) -> a Future of the
    candidate's resources (CompileAhead.future): with a pool, candidates are built on the compile
    threads while the GPUs time others, and handed to a GPU once built and fitting; up to
    `compile_ahead` candidates are picked ahead of the GPUs.
    """
    start = clock()
    cands = candidates(space, validate=validate, identity=identity, shape=shape,
                       sm_count=sm_count, limits=limits, enumerate_limit=enumerate_limit)
    configs, sampled, valid, invalid = cands.configs, cands.sampled, cands.valid, cands.invalid
    same_build, shuffled, seeds, sms = cands.same_build, cands.shuffled, cands.seeds, cands.sms
    why_invalid, ident = cands.why_invalid, cands.ident
    default_key = space.key(space.default)
    # where the next pick comes from: the defaults, the seeds, the shuffled order (positions)
    cursor = {"default": 1 if valid and space.key(valid[0]) == default_key else 0, "seed": 0,
              "shuffled": 0}

    tried: dict[tuple, Trial] = {}
    trials: list[Trial] = []
    launches: dict[tuple, Callable] = {}  # kept only for the current finalists and the defaults
    launched = 0
    stopped = ""
    total = len(valid)
    valid_keys = {ident(c) for c in valid}
    extra = 0  # trials outside a sampled space (seeds, neighbours of the best)

    def best() -> Trial | None:
        timed = [t for t in trials if t.status == "timed"]
        return min(timed, key=lambda t: (t.ms, t.order)) if timed else None

    def keep_launches() -> None:
        timed = sorted((t for t in trials if t.status == "timed"), key=lambda t: (t.ms, t.order))
        keep = {space.key(t.params) for t in timed[:top]} | {default_key}
        for k in list(launches):
            if k not in keep:
                del launches[k]

    def choose(at: dict, taken, count: int, b: Trial | None) -> tuple[dict, str] | None:
        """The next pick after `count` trials, with the keys in `taken` tried and `b` the best;
        advances the positions in `at`."""
        if at["default"]:
            at["default"] = 0
            return valid[0], "default"
        while at["seed"] < len(seeds):
            c = seeds[at["seed"]]
            at["seed"] += 1
            if ident(c) not in taken:
                return c, "seed"
        want_neighbour = count % (NEIGHBOUR_PICKS + 1) != NEIGHBOUR_PICKS
        if want_neighbour and b is not None:
            for n in space.neighbours(b.params):
                if why_invalid(n) is None and ident(n) not in taken:
                    return space.full(n), "neighbour"
        while at["shuffled"] < len(shuffled):
            c = shuffled[at["shuffled"]]
            at["shuffled"] += 1
            if ident(c) not in taken:
                return c, "shuffled"
        if b is not None:  # the shuffled list is used up: neighbours of the best that remain
            for n in space.neighbours(b.params):
                if why_invalid(n) is None and ident(n) not in taken:
                    return space.full(n), "neighbour"
        return None

    def pick() -> tuple[dict, str] | None:
        return choose(cursor, tried, len(trials), best())

    def upcoming(n: int) -> list[dict]:
        """The next `n` picks if the best stayed the best (what to compile ahead)."""
        at, taken, b, out = dict(cursor), set(tried), best(), []
        while len(out) < n:
            picked = choose(at, taken, len(trials) + len(out), b)
            if picked is None:
                break
            taken.add(ident(picked[0]))
            out.append(picked[0])
        return out

    def finish(trial: Trial) -> None:
        """A candidate the pool evaluated: its launch no longer counts if it was pruned."""
        nonlocal launched
        if trial.status == "pruned":
            launched -= 1
        if on_progress:
            on_progress("search", sum(t.status != "new" for t in trials), total + extra, trial,
                        best())

    building: list[tuple[Trial, object]] = []  # pool: candidates whose build is under way
    ready: list[Trial] = []  # pool: built and fitting, waiting for a free GPU
    window = max(1, compile_ahead)  # pool: candidates built or building beyond the GPUs'

    def settle(trial: Trial) -> None:
        """A pool candidate that did not build or fit: settled here, no GPU launch."""
        nonlocal launched
        launched -= 1
        if on_progress:
            on_progress("search", sum(t.status != "new" for t in trials), total + extra, trial,
                        best())

    def advance() -> bool:
        """Pool: move finished builds on, hand built candidates to free GPUs, take finished
        results; whether anything moved."""
        moved = False
        for item in list(building):
            trial, fut = item
            if not fut.done():
                continue
            building.remove(item)
            moved = True
            if _built(trial, fut, limits):
                ready.append(trial)
            else:
                settle(trial)
        while ready and pool.busy < pool.slots:
            pool.submit(ready.pop(0))
            moved = True
        for t in pool.collect(block=False):
            finish(t)
            moved = True
        return moved

    def wait() -> None:
        if advance():
            return
        if pool.busy and not building:  # nothing to hand out until a GPU answers
            for t in pool.collect(block=True):
                finish(t)
        else:
            time.sleep(0.005)

    try:
        while True:
            if pool is not None:
                advance()
                if pool.busy >= pool.slots and len(building) + len(ready) >= window:
                    wait()  # every GPU busy and enough candidates built ahead
                    continue
            if max_configs is not None and launched >= max_configs:
                stopped = "max-configs"
                break
            if trials and clock() - start >= EXPLORE_FRACTION * budget_s:
                stopped = "budget"
                break
            picked = pick()
            if picked is None:
                if pool is not None and (pool.busy or building or ready):
                    wait()  # a result to come may name new neighbours
                    continue
                break
            params, how = picked
            trial = Trial(dict(params), len(trials), how=how)
            tried[ident(params)] = trial
            trials.append(trial)
            if ident(params) not in valid_keys:  # a seed or neighbour outside the sample
                extra += 1
            if prefetch is not None and compile_ahead > 0:
                ahead = compile_ahead
                if max_configs is not None:  # no more than the launches left can use
                    ahead = min(ahead, max_configs - launched - 1)
                if ahead > 0:
                    prefetch(upcoming(ahead))
            if pool is not None:
                # built here first, on the compile threads (build_async), while the GPUs time
                # others; a candidate that does not build, or does not fit, never reaches a GPU
                launched += 1  # given back if it is settled here or pruned on a GPU
                if build_async is not None:
                    building.append((trial, build_async(params)))
                elif probe is not None and not _builds(trial, probe, limits):
                    settle(trial)
                else:
                    ready.append(trial)
                continue
            _evaluate(trial, space.key, launch_factory, checker, timer, probe, limits,
                      short_rep_ms, launches)
            if trial.status != "pruned":
                launched += 1
            keep_launches()
            if on_progress:
                on_progress("search", len(trials), total + extra, trial, best())
        if pool is not None:
            while pool.busy or building or ready:  # what is built or on a GPU finishes
                wait()
    except KeyboardInterrupt:
        stopped = "interrupted"
        for t in trials:
            if t.status == "new":
                t.status, t.detail = "error", "interrupted"
    if prefetch is not None and compile_ahead > 0:
        prefetch([])  # nothing more is wanted: queued builds go before the refinement's timings

    result = Result(
        stage=space.stage.name, backend=space.backend, M=shape[0], N=shape[1], K=shape[2],
        layout=layout, precision=precision, space=space.describe(), space_size=space.size,
        sampled=sampled, considered=len(configs), valid=len(valid), invalid=invalid, trials=trials,
        stopped=stopped, default=space.default, elapsed_s=0.0, extra=extra,
        restricted=dict(space.restricted), seeds=seeds, tuning=space.tuning, sm_count=sms,
        same_build=same_build,
    )
    if result.not_reached == 0 and stopped != "interrupted":
        result.stopped = ""  # the limit came when nothing was left anyway
    _refine(result, space, timer, launches, long_rep_ms, top, refine_rounds, on_progress, pool)
    result.elapsed_s = clock() - start
    return result


def _built(trial: Trial, fut, limits) -> bool:
    """Whether a candidate's finished build (a Future of its resources) fits; if not, the trial
    is pruned or an error, as _evaluate would leave it."""
    return _builds(trial, lambda params: fut.result(), limits)


def _builds(trial: Trial, probe, limits) -> bool:
    """Whether a candidate builds and fits (its resources before any launch); if not, the trial
    is pruned or an error, as _evaluate would leave it."""
    try:
        res = probe(trial.params)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a compile error: this trial fails, the rest go on
        _failed(trial, exc)
        return False
    problem = resource_problem(res, limits)
    if problem:
        trial.status, trial.detail, trial.resources = "pruned", problem, res
        return False
    return True


def _failed(trial: Trial, exc: Exception) -> None:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if type(exc).__name__ == "OutOfResources":  # Triton: shared memory or registers
        trial.status, trial.detail = "pruned", first
        return
    trial.status = "error"
    trial.detail = first if isinstance(exc, LabError) else f"{type(exc).__name__}: {first}"


def _evaluate(trial: Trial, key: Callable[[dict], object], launch_factory, checker, timer, probe,
              limits, rep_ms: float, launches: dict) -> None:
    """One candidate: resource check, build and launch, correctness check, short timing; the
    trial's status, detail, resources and ms are set, and a timed launch is kept in
    `launches[key(params)]`."""
    params = trial.params
    try:
        res = probe(params) if probe else None
        problem = resource_problem(res, limits)
        if problem:
            trial.status, trial.detail, trial.resources = "pruned", problem, res
            return
        launch = launch_factory(params)
        launched_res = launch.resources
        problem = resource_problem(launched_res, limits)
        trial.resources = launched_res or res
        if problem:
            trial.status, trial.detail = "pruned", problem
            return
        verdict = checker(launch)
        passed = verdict if isinstance(verdict, bool) else bool(verdict.passed)
        if not passed:
            reason = "" if isinstance(verdict, bool) else verdict.reason
            trial.status, trial.detail = "wrong", reason or "wrong result"
            return
        trial.ms = float(timer(params, launch, rep_ms))
        trial.status = "timed"
        launches[key(params)] = launch
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a compile error or a launcher bug: this trial fails, the rest go on
        _failed(trial, exc)


def _refine(result: Result, space: Space, timer, launches: dict, rep_ms: float, top: int,
            rounds: int, on_progress, pool=None) -> None:
    timed = sorted((t for t in result.trials if t.status == "timed"), key=lambda t: (t.ms, t.order))
    finalists = timed[:top]
    default_key = space.key(space.default)
    result.default_trial = next((t for t in result.trials if space.key(t.params) == default_key),
                                None)
    d = result.default_trial
    if d is not None and d.status == "timed" and d not in finalists:
        finalists.append(d)
    if pool is not None:  # every finalist timed on one of the pool's GPUs, in turn
        result.finalists = finalists
        try:
            pool.refine(finalists, rep_ms, rounds, on_progress)
        except KeyboardInterrupt:
            result.stopped = "interrupted"
        ranked = [t for t in finalists if t.refined_ms is not None] or timed[:1]
        if ranked:
            result.winner = min(ranked, key=lambda t: (t.best_ms, t.order))
        return
    finalists = [t for t in finalists if space.key(t.params) in launches]
    result.finalists = finalists
    total = len(finalists) * rounds
    done = 0
    try:
        for _ in range(rounds):
            for t in finalists:
                try:
                    ms = float(timer(t.params, launches[space.key(t.params)], rep_ms))
                    t.refined_ms = ms if t.refined_ms is None else min(t.refined_ms, ms)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # keep the other finalists' times
                    t.detail = f"refinement failed: {type(exc).__name__}: {exc}".splitlines()[0]
                done += 1
                if on_progress:
                    on_progress("refine", done, total, t, None)
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    ranked = [t for t in finalists if t.refined_ms is not None] or timed[:1]
    if ranked:
        result.winner = min(ranked, key=lambda t: (t.best_ms, t.order))


