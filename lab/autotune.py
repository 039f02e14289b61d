"""python -m lab.autotune: search a stage's parameter space on this GPU, for one shape, and cache
the winner so that `--stage <stage>:auto` rows of lab.compare run it.

    python -m lab.autotune --stage vectorized --sizes 4096
    python -m lab.autotune --stage vectorized,blocktile_2d --backend cuda --sizes 1025,4096 \
        --budget-s 300 --max-configs 200
    python -m lab.autotune --stage vectorized --sizes 4096 --dry-run   # no GPU, seconds
    python -m lab.autotune --stage warptiling:splitk=16|32,BM=64|128 --backend cuda \
        --sizes 320x192x786432                                         # a restricted space
    python -m lab.autotune --show                                      # the cache

The search (docs/AUTOTUNE.md has the whole story):

1. The space is the Cartesian product of the `choices` of every Param the registry (lab/stages.py)
   declares for the backend, minus the switches that change the numerics (NUMERICS: fast_math is
   pinned to False, so a tuned row is checked and compared like any other fp32 row; mma's wgmma
   to 0, since its TF32 rounds B differently, so the CUDA mma search is the mma.sync kernel's). A product
   larger than ENUMERATE_LIMIT is sampled (a fixed random generator, the defaults always in).
   `--stage stage:name=v1|v2,name=v` restricts parameters to some of their registry choices (one
   value pins it); the defaults become the registry's with each restricted parameter at its
   default if allowed, else at its first given value (then the nearest configuration validate()
   accepts, changing as few parameters as possible).
2. Validate-prune: the launcher module's `validate(**params)` rejects what cannot compile or launch
   (a LabError = pruned, never tried).
3. The candidates are tried in this order: the defaults first; then the split-K seeds (below);
   then, two picks out of three, the untried one-parameter neighbours of the best configuration so
   far (nearest choices first), and every third pick (or when the best has no untried neighbour
   left) the next configuration of a fixed shuffled order of the rest. The order depends on
   nothing but the timings, so the same timings give the same search.
   Split-K seeds (splitk_seeds), only for a space with a searched `splitk`: when the defaults'
   block tile (BM x BN, Triton BLOCK_M x BLOCK_N) gives fewer output tiles than the GPU has SMs
   (the device's count, else SEED_SMS) and K >= 2 * SEED_MIN_SPLIT_K, then for the defaults' tile
   and up to SEED_TILES - 1 smaller ones (both edges one choice down each time), the splitk
   choices whose tiles x splitk lie nearest (in ratio) to 1x, 2x and 4x the SM count, among those
   that leave every split at least SEED_MIN_SPLIT_K of K; the other parameters are the defaults'.
   A seed validate() refuses is replaced by the nearest configuration it accepts with the same
   tile and splitk (fewest parameters changed), if any. A long-K shape with few tiles is where
   the sampled order rarely reaches a good splitk.
4. Resource-prune, per candidate: a CUDA candidate is compiled (NVRTC, cheap) and dropped if ptxas
   reports spills or its block does not fit an SM (threads, registers, shared memory: lab.occupancy
   with this GPU's limits); a Triton candidate is dropped after its compile if it spills.
   Compile ahead (CUDA, --jobs N > 1): while a candidate is checked and timed, a pool of N threads
   compiles the next 2N candidates the search would pick if the best stayed the best (NVRTC is
   thread-safe for distinct programs); when the best changes, the queued builds no longer in that
   plan are dropped. The probe of a candidate waits for its build in flight instead of compiling
   it twice. Compiling ahead changes what is compiled when, never the order or the result.
5. Correct before timed: the output is poisoned with NaN, the kernel runs once and is compared with
   the float64 reference (lab.check); a wrong configuration is discarded and listed.
6. Short timing (lab.timing.bench with SHORT_REP_MS of repetitions). The search stops taking new
   candidates when EXPLORE_FRACTION of --budget-s is spent, when --max-configs candidates have been
   launched, or on Ctrl-C.
7. Refinement: the TOP fastest and the defaults are timed again with LONG_REP_MS, REFINE_ROUNDS
   times in turn; the lowest of a configuration's medians is its time, and the fastest wins (a tie
   goes to the one found first).

The dry run (--dry-run, no GPU) describes steps 1 to 4 in seconds: the space, the validate prune
(candidates()), and the resource prune estimated from NVRTC builds of a bounded sample
(compile_sample(): the defaults, the split-K seeds and DRY_RUN_SAMPLE configurations picked at
random, no new build after DRY_RUN_COMPILE_S); --compile-all builds the whole valid space.

Nothing here imports torch or a kernel until it is needed; every piece that touches the GPU is a
plain function handed to `search` (launch factory, checker, timer, resource probe), so the tests
drive the whole search on the CPU with fakes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from lab.cli import ArgumentParser, guarded, plural, wrap
from lab.errors import LabError
from lab.roofline import DEFAULT_SMS

# Switches that change the numerics are never searched: they stay at these values.
NUMERICS = {"fast_math": False, "wgmma": 0}
DEFAULT_BUDGET_S = 120.0
SHORT_REP_MS = 25.0  # timing budget of one candidate during the search (at least 5 repetitions)
LONG_REP_MS = 200.0  # ... and of a finalist during the refinement
TOP = 3  # finalists refined (plus the defaults)
REFINE_ROUNDS = 2  # the finalists are timed this many times in turn; the lowest median counts
EXPLORE_FRACTION = 0.8  # of the budget spent searching; the rest is left for the refinement
ENUMERATE_LIMIT = 50_000  # a larger product is sampled down to this many configurations
NEIGHBOUR_PICKS = 2  # of every NEIGHBOUR_PICKS + 1 picks, this many are neighbours of the best
ORDER_RNG = 0  # the fixed state of the random generator that shuffles (and samples) the space
SEED_SMS = DEFAULT_SMS  # SMs the split-K seeds assume when the GPU's count is not known (132)
SEED_TILES = 2  # block tiles seeded: the defaults' and one smaller (at most 3 seeds each)
SEED_TARGETS = (1, 2, 4)  # tiles x splitk is aimed at these multiples of the SM count
SEED_MIN_SPLIT_K = 256  # a seed's splitk leaves every split at least this much of K
TILE_EDGES = {"cuda": ("BM", "BN"), "triton": ("BLOCK_M", "BLOCK_N")}
NEAREST_VALID_LIMIT = 20_000  # configurations validate() may be asked for a restricted default
SEED_REPAIR_LIMIT = 2_000  # ... and for a seed it refuses
COMPILE_AHEAD_PER_JOB = 2  # configurations handed to the compile pool per worker
# --dry-run: NVRTC builds of a sample instead of the whole space, so that it answers in seconds
DRY_RUN_SAMPLE = 12  # valid configurations picked at random for the resource estimate (CUDA)
DRY_RUN_COMPILE_S = 12.0  # seconds of builds one dry run starts, over all its CUDA searches
DRY_RUN_SHOWN = 10  # Triton: candidates listed in search order (nothing to compile)
PROGRESS_EVERY_S = 2.0  # a progress line at most this often (logs and pipes)
CACHE_ENV = "LAB_TUNE_CACHE"
DEFAULT_CACHE = "~/.cache/matmul-lab/autotune.json"
CACHE_FORMAT = "matmul-lab autotune cache"
CACHE_VERSION = 1


# ------------------------------------------------------------------------------------ the space


@dataclass(frozen=True)
class Space:
    """The parameters of one stage x backend the tuner searches, and those it pins."""

    stage: object  # lab.stages.Stage
    backend: str
    searched: tuple  # Params with more than one choice, in registry order
    pinned: dict  # name -> value: NUMERICS, and Params with a single choice
    # name -> the values a restriction allows (registry order); its Params in `searched` carry
    # those choices and the restricted space's default, a single value is in `pinned`
    restricted: dict = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.searched)

    @property
    def size(self) -> int:
        return math.prod(len(p.choices) for p in self.searched)

    @property
    def default(self) -> dict:
        return self.full({p.name: p.default for p in self.searched})

    def full(self, values: dict) -> dict:
        """Every parameter of this backend, in registry order: `values`, else pinned, else the
        default."""
        out = {}
        for p in self.stage.params:
            if self.backend in p.backends:
                out[p.name] = values.get(p.name, self.pinned.get(p.name, p.default))
        return out

    def key(self, params: dict) -> tuple:
        return tuple(params[n] for n in self.names)

    def describe(self, dims: bool = True) -> str:
        """'864 configurations (BM 3 x ... x unroll 2); pinned: fast_math=0', with any
        restriction; without `dims` the product is left out (the dry run lists each parameter)."""
        dims_text = " x ".join(f"{p.name} {len(p.choices)}" for p in self.searched) or "nothing"
        pins = ", ".join(f"{k}={_fmt(v)}" for k, v in self.pinned.items()
                         if k not in self.restricted)
        return (f"{self.size} configurations" + (f" ({dims_text})" if dims else
                                                 f", {plural(len(self.searched), 'parameter')} "
                                                 f"searched")
                + (f"; restricted: {restriction_text(self.restricted)}" if self.restricted
                   else "")
                + (f"; pinned: {pins}" if pins else ""))

    def enumerate(self, limit: int = ENUMERATE_LIMIT) -> tuple[list[dict], bool]:
        """The configurations to consider (the defaults first) and whether they are a sample."""
        default = self.default
        if self.size <= limit:
            out = [default] + [self.full(dict(zip(self.names, values)))
                               for values in itertools.product(*(p.choices for p in self.searched))]
            return _unique(out, self.key), False
        rng = random.Random(ORDER_RNG)
        seen = {self.key(default)}
        out = [default]
        tries = 0
        while len(out) < limit and tries < 20 * limit:
            tries += 1
            values = {p.name: rng.choice(p.choices) for p in self.searched}
            k = self.key(values)
            if k not in seen:
                seen.add(k)
                out.append(self.full(values))
        return out, True

    def neighbours(self, params: dict) -> Iterable[dict]:
        """Configurations that differ from `params` in one parameter: parameters in registry order,
        nearest choices first (index distance, the lower one first on a tie)."""
        for p in self.searched:
            i = p.choices.index(params[p.name]) if params[p.name] in p.choices else 0
            others = sorted((j for j in range(len(p.choices)) if j != i),
                            key=lambda j: (abs(j - i), j))
            for j in others:
                yield {**params, p.name: p.choices[j]}


def space_of(stage, backend: str, restrict: dict | None = None,
             validate: Callable[[dict], str | None] | None = None) -> Space:
    """The search space of a registered stage (or stage name) for a backend.

    `restrict` (name -> allowed values, each one of the registry's choices) narrows parameters of
    this backend; names the stage declares only for other backends are ignored. A restricted
    parameter whose registry default is not allowed starts at its first given value, and with
    `validate`, a default it refuses moves to the nearest configuration it accepts."""
    from lab.stages import BACKENDS, get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    allowed = _check_restriction(stage, restrict or {})
    searched, pinned, restricted = [], {}, {}
    for p in stage.params:
        if backend not in p.backends:
            continue
        if p.name in allowed:
            values = tuple(c for c in p.choices if c in allowed[p.name])
            restricted[p.name] = values
            start = p.default if p.default in values else allowed[p.name][0]
            if p.name in NUMERICS or len(values) == 1:
                pinned[p.name] = start
            else:
                searched.append(replace(p, choices=values, default=start))
        elif p.name in NUMERICS:
            pinned[p.name] = NUMERICS[p.name]
        elif len(p.choices) <= 1:
            pinned[p.name] = p.default
        else:
            searched.append(p)
    space = Space(stage, backend, tuple(searched), pinned, restricted)
    if validate is not None and space.searched and validate(space.default) is not None:
        nearest = _nearest_valid(space, validate)
        if nearest is not None:
            space = replace(space, searched=tuple(replace(p, default=nearest[p.name])
                                                  for p in space.searched))
    return space


def _check_restriction(stage, restrict: dict) -> dict[str, tuple]:
    """name -> the allowed values (deduplicated, as given), after checking that each name is a
    parameter of the stage and each value one of its registry choices (one sentence if not)."""
    declared = {p.name: p for p in stage.params}
    out = {}
    for name, values in restrict.items():
        p = declared.get(name)
        if p is None:
            raise LabError(f"stage {stage.name} has no parameter {name!r}; its parameters are "
                           f"{', '.join(declared) or 'none'}")
        values = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
        kept = []
        for v in values:
            if v not in p.choices or isinstance(v, bool) is not isinstance(p.default, bool):
                raise LabError(f"{name}={_fmt(v)} is not a choice of stage {stage.name}; the "
                               f"registry's {name} choices are {_choices_text(p)}, and the tuner "
                               f"searches only those")
            if v not in kept:
                kept.append(v)
        if not kept:
            raise LabError(f"the restriction of {name} of stage {stage.name} allows no value; "
                           f"give at least one of {_choices_text(p)}")
        if name in NUMERICS and kept != [NUMERICS[name]]:
            raise LabError(f"{name} changes the numerics, so the tuner keeps it at "
                           f"{_fmt(NUMERICS[name])}; leave it out of the restriction")
        out[name] = tuple(kept)
    return out


def _nearest_valid(space: Space, validate: Callable[[dict], str | None], start: dict | None = None,
                   keep: tuple = (), limit: int = NEAREST_VALID_LIMIT) -> dict | None:
    """The configuration validate() accepts that differs from `start` (the defaults) in the
    fewest parameters, leaving those in `keep` alone (breadth first over Space.neighbours, so
    nearer choices and earlier parameters first), or None when none is found within `limit`
    checks."""
    start = space.full(start) if start is not None else space.default
    seen = {space.key(start)}
    frontier = [start]
    checks = 0
    while frontier:
        following = []
        for config in frontier:
            for n in space.neighbours(config):
                k = space.key(n)
                if k in seen or any(n[name] != start[name] for name in keep if name in start):
                    continue
                seen.add(k)
                n = space.full(n)
                if validate(n) is None:
                    return n
                checks += 1
                if checks >= limit:
                    return None
                following.append(n)
        frontier = following
    return None


def restriction_text(restricted: dict) -> str:
    """splitk=16|32, BM=64|128: a restriction as the command line writes it."""
    return ", ".join(f"{k}={'|'.join(_fmt(v) for v in vs)}" for k, vs in restricted.items())


def _choices_text(p) -> str:
    return ", ".join(_fmt(c) for c in p.choices)


def _unique(items: list[dict], key: Callable) -> list[dict]:
    seen, out = set(), []
    for it in items:
        k = key(it)
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def _fmt(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def params_text(params: dict) -> str:
    return ",".join(f"{k}={_fmt(v)}" for k, v in params.items())


# -------------------------------------------------------------------------------- split-K seeds


def splitk_seeds(space: Space, M: int, N: int, K: int, sm_count: int | None = None,
                 validate: Callable[[dict], str | None] | None = None) -> list[dict]:
    """The split-K seeds of `space` at M x N x K (the module's doc, step 3), in the order they are
    tried: the defaults' tile first, then the smaller tiles; per tile the splitk nearest 1x, 2x,
    4x the SM count. [] when the space searches no splitk, has no block tile, or the shape has
    enough tiles or too short a K. Seeds equal to the defaults are left out."""
    sms = int(sm_count or SEED_SMS)
    split = next((p for p in space.searched if p.name == "splitk"), None)
    edges = TILE_EDGES.get(space.backend, ())
    default = space.default
    if split is None or len(edges) != 2 or any(e not in default for e in edges) or K < 1:
        return []
    searched = {p.name: p for p in space.searched}

    def sizes(edge: str) -> list:  # the defaults' edge, then the smaller choices, largest first
        p = searched.get(edge)
        if p is None:
            return [default[edge]]
        return sorted((c for c in p.choices if c <= default[edge]), reverse=True)

    rows, cols = sizes(edges[0]), sizes(edges[1])
    tiles_tried: list[tuple] = []
    for step in range(SEED_TILES):
        t = (rows[min(step, len(rows) - 1)], cols[min(step, len(cols) - 1)])
        if t not in tiles_tried:
            tiles_tried.append(t)
    splits = [s for s in split.choices if s == 1 or K // s >= SEED_MIN_SPLIT_K]
    first = _cdiv(M, tiles_tried[0][0]) * _cdiv(N, tiles_tried[0][1])
    if first >= sms or not any(s > 1 for s in splits):
        return []
    seeds, keys = [], {space.key(default)}
    for bm, bn in tiles_tried:
        tiles = _cdiv(M, bm) * _cdiv(N, bn)
        for factor in SEED_TARGETS:
            target = factor * sms
            s = min(splits, key=lambda s: (abs(math.log(tiles * s / target)), s))
            seed = space.full({**{n: default[n] for n in space.names}, edges[0]: bm,
                               edges[1]: bn, "splitk": s})
            if validate is not None and validate(seed) is not None:
                seed = _nearest_valid(space, validate, seed, (*edges, "splitk"), SEED_REPAIR_LIMIT)
            if seed is not None and space.key(seed) not in keys:
                keys.add(space.key(seed))
                seeds.append(seed)
    return seeds


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


# ------------------------------------------------------------------------------------- pruning


def validator(module, precision: str = "fp32") -> Callable[[dict], str | None]:
    """params -> None if the launcher module's validate() accepts them, else its sentence. A
    precision other than fp32 is passed on to a validate() that takes one (mma's shared-memory
    and chunk rules depend on the element size)."""
    import inspect

    check = getattr(module, "validate", None)
    extra = {}
    if check is not None and precision != "fp32" and \
            "precision" in inspect.signature(check).parameters:
        extra = {"precision": precision}

    def why_not(params: dict) -> str | None:
        if check is None:
            return None
        try:
            check(**params, **extra)
        except LabError as exc:
            return str(exc)
        return None

    return why_not


def build_identity(module, M: int, N: int, precision: str = "fp32",
                   sms: int | None = None) -> Callable[[dict], tuple] | None:
    """identity(params) for search(): the configuration as the launcher will build and launch it
    for an M x N problem on a GPU of `sms` SMs, from the module's resolved_params(params, M, N,
    precision, sms) (a stage with automatic values, such as mma's 0 and -1), as a sorted tuple of
    items; None for a module without that hook (every value tuple is then its own build)."""
    hook = getattr(module, "resolved_params", None)
    if hook is None:
        return None
    sms = int(sms or SEED_SMS)
    known: dict[tuple, tuple] = {}  # the search asks again for the same configurations

    def identity(params: dict) -> tuple:
        k = tuple(sorted(params.items()))
        if k not in known:
            known[k] = tuple(sorted(hook(dict(params), M, N, precision, sms).items()))
        return known[k]

    return identity


def resource_problem(res: dict | None, limits=None) -> str | None:
    """Why a launch with these resources (the `resources` dict launchers attach: registers,
    smem_static, smem_dynamic, spill_bytes, threads) is not worth timing, or None: spills, or a
    block that does not fit one SM of `limits` (lab.occupancy; sm_90 by default)."""
    from lab.occupancy import SM90, from_resources

    if not res:
        return None
    spills = int(res.get("spill_bytes") or 0)
    if spills:
        return f"{spills} bytes of register spills"
    if res.get("threads") is None or res.get("registers") is None:
        return None
    limits = limits or SM90
    try:
        occ = from_resources(res, limits)
    except ValueError as exc:
        return str(exc)
    if occ.blocks_per_sm < 1:
        return f"no block fits on one {limits.name} SM (limited by {occ.limiter})"
    return None


def cuda_probe(module, M: int, N: int, K: int, layout: str = "nn",
               extra: dict | None = None) -> Callable[[dict], dict]:
    """params -> the resources of the CUDA build (NVRTC, no GPU needed) at this shape. `extra`:
    what prepare() adds to the build's parameters for the operands at hand (GpuBench.build_extra:
    the VEC_* / ALIGN_* variants, the precision), so that the probe compiles, and the compile
    pool compiles ahead, the very build the launch then finds in the per-process cache."""
    from cuda_kernels._build import resources

    extra = dict(extra or {})

    def probe(params: dict) -> dict:
        build = module.build(**params, **extra, layout=layout)
        return resources(build, *module.geometry(M, N, K, **params, **extra))

    return probe


def default_jobs() -> int:
    """--jobs' default: min(8, the CPU count)."""
    return max(1, min(8, os.cpu_count() or 1))


class CompileAhead:
    """Runs `probe` (a CUDA candidate's NVRTC build) for upcoming candidates on a thread pool, so
    that they compile while the current one is checked and timed.

    `prefetch(upcoming)` takes the configurations the search expects to pick next, most likely
    first: each one not yet submitted is submitted, and queued ones no longer listed are dropped
    (a build already running finishes; its result is kept). `probe(params)` is the search's probe:
    it waits for the build in flight for the same configuration (one compile per configuration,
    not two), else compiles here. An error raised by a prefetched build is raised by `probe`, as
    the build would have raised it. NVRTC compiles distinct programs in parallel, and the builds
    are cached per process (cuda_kernels/_build.py), so the launch that follows reuses them."""

    def __init__(self, probe: Callable[[dict], dict | None], key: Callable[[dict], object],
                 workers: int | None = None):
        self._probe = probe
        self._key = key
        self.workers = max(1, workers or default_jobs())
        self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                        thread_name_prefix="lab-autotune-compile")
        self._futures: dict[object, Future] = {}
        self._lock = threading.Lock()
        self.submitted: list[dict] = []  # every configuration handed to the pool, in order
        self.dropped = 0  # ... and how many of them were dropped before they started

    @property
    def lookahead(self) -> int:
        """How many upcoming configurations the search hands over at a time."""
        return COMPILE_AHEAD_PER_JOB * self.workers

    def prefetch(self, upcoming: list[dict]) -> None:
        wanted = {}
        for params in upcoming:
            wanted.setdefault(self._key(params), params)
        with self._lock:
            for k, fut in list(self._futures.items()):
                if k not in wanted and fut.cancel():
                    del self._futures[k]
                    self.dropped += 1
            for k, params in wanted.items():
                if k not in self._futures:
                    self._futures[k] = self._pool.submit(self._probe, dict(params))
                    self.submitted.append(dict(params))

    def probe(self, params: dict) -> dict | None:
        with self._lock:
            fut = self._futures.get(self._key(params))
        if fut is None or fut.cancelled():
            return self._probe(params)
        return fut.result()

    def close(self) -> None:
        """Drop the queued builds; those running finish in the background."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "CompileAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _warm_build_caches() -> None:
    """Fill cuda_kernels._build's per-process lookups (the GPU's architecture, NVRTC's version)
    on this thread before the compile pool's threads read them."""
    try:
        from cuda_kernels._build import device_arch, nvrtc_version

        device_arch()
        nvrtc_version()
    except Exception:  # a missing cuda-bindings shows up, as one sentence, at the first build
        pass


# -------------------------------------------------------------------------------------- search


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
    shuffle the rest in the fixed order and list the split-K seeds: steps 1 to 3 of the module's
    doc, without building or launching anything."""
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
    valid = _unique(valid, ident)  # one candidate per build
    rng = random.Random(ORDER_RNG)
    shuffled = valid[1:] if valid and space.key(valid[0]) == space.key(space.default) else valid[:]
    rng.shuffle(shuffled)
    sms = int(sm_count or getattr(limits, "sm_count", None) or SEED_SMS)
    seeds = _unique([c for c in splitk_seeds(space, *shape, sm_count=sms, validate=why_invalid)
                     if why_invalid(c) is None], ident)
    return Candidates(configs, sampled, valid, invalid, all_valid - len(valid), shuffled, seeds,
                      sms, why_invalid, ident)


def search(space: Space, *, launch_factory: Callable[[dict], Callable],
           checker: Callable[[Callable], object], timer: Callable[[dict, Callable, float], float],
           validate: Callable[[dict], str | None] | None = None,
           probe: Callable[[dict], dict | None] | None = None, limits=None,
           budget_s: float = DEFAULT_BUDGET_S, max_configs: int | None = None,
           clock: Callable[[], float] = time.monotonic, on_progress: Progress | None = None,
           shape: tuple[int, int, int] = (0, 0, 0), layout: str = "nn", precision: str = "fp32",
           short_rep_ms: float = SHORT_REP_MS, long_rep_ms: float = LONG_REP_MS, top: int = TOP,
           refine_rounds: int = REFINE_ROUNDS, enumerate_limit: int = ENUMERATE_LIMIT,
           sm_count: int | None = None, prefetch: Callable[[list[dict]], None] | None = None,
           compile_ahead: int = 0, identity: Callable[[dict], object] | None = None) -> Result:
    """Search `space` (see the module's doc for the steps) and return every trial and the winner.

    launch_factory(params) -> launch: a no-argument callable (prepare()); it may carry `resources`.
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
    automatic values made concrete for the shape); configurations with the same identity are one
    candidate, tried once (the first in enumeration order: the defaults first). Without it every
    distinct value tuple is its own candidate.
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

    try:
        while True:
            if max_configs is not None and launched >= max_configs:
                stopped = "max-configs"
                break
            if trials and clock() - start >= EXPLORE_FRACTION * budget_s:
                stopped = "budget"
                break
            picked = pick()
            if picked is None:
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
            _evaluate(trial, space, launch_factory, checker, timer, probe, limits, short_rep_ms,
                      launches)
            if trial.status != "pruned":
                launched += 1
            keep_launches()
            if on_progress:
                on_progress("search", len(trials), total + extra, trial, best())
    except KeyboardInterrupt:
        stopped = "interrupted"
        if trials and trials[-1].status == "new":
            trials[-1].status, trials[-1].detail = "error", "interrupted"
    if prefetch is not None and compile_ahead > 0:
        prefetch([])  # nothing more is wanted: queued builds go before the refinement's timings

    result = Result(
        stage=space.stage.name, backend=space.backend, M=shape[0], N=shape[1], K=shape[2],
        layout=layout, precision=precision, space=space.describe(), space_size=space.size,
        sampled=sampled, considered=len(configs), valid=len(valid), invalid=invalid, trials=trials,
        stopped=stopped, default=space.default, elapsed_s=0.0, extra=extra,
        restricted=dict(space.restricted), seeds=seeds, sm_count=sms, same_build=same_build,
    )
    if result.not_reached == 0 and stopped != "interrupted":
        result.stopped = ""  # the limit came when nothing was left anyway
    _refine(result, space, timer, launches, long_rep_ms, top, refine_rounds, on_progress)
    result.elapsed_s = clock() - start
    return result


def _evaluate(trial: Trial, space: Space, launch_factory, checker, timer, probe, limits,
              rep_ms: float, launches: dict) -> None:
    params = trial.params
    try:
        res = probe(params) if probe else None
        problem = resource_problem(res, limits)
        if problem:
            trial.status, trial.detail, trial.resources = "pruned", problem, res
            return
        launch = launch_factory(params)
        launched_res = getattr(launch, "resources", None)
        problem = resource_problem(launched_res, limits)
        trial.resources = launched_res or res
        if problem:
            trial.status, trial.detail = "pruned", problem
            return
        verdict = checker(launch)
        passed = verdict if isinstance(verdict, bool) else bool(verdict.passed)
        if not passed:
            reason = "" if isinstance(verdict, bool) else getattr(verdict, "reason", "")
            trial.status, trial.detail = "wrong", reason or "wrong result"
            return
        trial.ms = float(timer(params, launch, rep_ms))
        trial.status = "timed"
        launches[space.key(params)] = launch
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a compile error or a launcher bug: this trial fails, the rest go on
        text = str(exc).strip().splitlines()
        first = text[0] if text else ""
        if type(exc).__name__ == "OutOfResources":  # Triton: shared memory or registers
            trial.status, trial.detail = "pruned", first
            return
        trial.status = "error"
        trial.detail = first if isinstance(exc, LabError) else f"{type(exc).__name__}: {first}"


def _refine(result: Result, space: Space, timer, launches: dict, rep_ms: float, top: int,
            rounds: int, on_progress) -> None:
    timed = sorted((t for t in result.trials if t.status == "timed"), key=lambda t: (t.ms, t.order))
    finalists = timed[:top]
    default_key = space.key(space.default)
    result.default_trial = next((t for t in result.trials if space.key(t.params) == default_key),
                                None)
    d = result.default_trial
    if d is not None and d.status == "timed" and d not in finalists:
        finalists.append(d)
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


# --------------------------------------------------------------------------------------- cache


def cache_path(path: str | os.PathLike | None = None) -> Path:
    """--cache PATH, else $LAB_TUNE_CACHE, else ~/.cache/matmul-lab/autotune.json."""
    chosen = path or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(os.path.expanduser(str(chosen)))


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def alignment(M: int, N: int, K: int) -> str:
    """a128: M, N and K are all multiples of 128 (no partial tiles for tiles up to 128);
    a4: all multiples of 4 (every row of A, B and C starts on a 16-byte boundary in every layout,
    so float4 paths apply); a1: anything else."""
    if all(x % 128 == 0 for x in (M, N, K)):
        return "a128"
    if all(x % 4 == 0 for x in (M, N, K)):
        return "a4"
    return "a1"


def bucket(M: int, N: int, K: int) -> str:
    """The shape bucket of the cache key: M, N and K each rounded up to a power of two, and the
    alignment flag, e.g. 4096x4096x4096:a128 (4096^3), 2048x2048x2048:a1 (1025^3)."""
    return f"{next_pow2(M)}x{next_pow2(N)}x{next_pow2(K)}:{alignment(M, N, K)}"


def cache_key(gpu: str, stage: str, backend: str, M: int, N: int, K: int, precision: str = "fp32",
              layout: str = "nn") -> str:
    """GPU name | stage | backend | bucket | precision | layout."""
    return "|".join((gpu, stage, backend, bucket(M, N, K), precision, layout))


class CacheError(LabError):
    """The cache file exists but is not a readable autotune cache."""


def load_cache(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """The cache's entries by key; {} when the file does not exist. A file that cannot be read or
    is not an autotune cache raises CacheError (one sentence); it is never overwritten here."""
    p = cache_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CacheError(f"cannot read the autotune cache {p}: {exc.strerror or exc}") from None
    return _parse_cache(text, p)


def _parse_cache(text: str, p: Path) -> dict[str, dict]:
    hint = (f"move it aside or delete it (python -m lab.autotune backs it up before writing), or "
            f"point {CACHE_ENV} elsewhere")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise CacheError(f"the autotune cache {p} is not valid JSON{where}; {hint}") from None
    if (not isinstance(data, dict) or data.get("format") != CACHE_FORMAT
            or not isinstance(data.get("entries"), dict)
            or not all(isinstance(e, dict) and isinstance(e.get("params"), dict)
                       for e in data["entries"].values())):
        raise CacheError(f"{p} is not an autotune cache (no '{CACHE_FORMAT}' format with entries "
                         f"that hold params); {hint}")
    if data.get("version") != CACHE_VERSION:
        raise CacheError(f"the autotune cache {p} has format version {data.get('version')!r} and "
                         f"this lab reads version {CACHE_VERSION}; {hint}")
    return data["entries"]


def backup_name(p: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = p.with_name(f"{p.name}.corrupt-{stamp}")
    n = 1
    while candidate.exists():
        candidate = p.with_name(f"{p.name}.corrupt-{stamp}-{n}")
        n += 1
    return candidate


def store(entry: dict, path: str | os.PathLike | None = None) -> str:
    """Add (or replace) `entry` under entry["key"] and write the cache atomically (a temporary file
    in the same folder, then a rename). A corrupted cache is first renamed to
    <name>.corrupt-<time> and a new one started; the returned sentence says so ("" otherwise)."""
    p = cache_path(path)
    note = ""
    try:
        entries = load_cache(p)
    except CacheError as exc:
        if not p.is_file():
            raise
        kept = backup_name(p)
        os.replace(p, kept)
        entries = {}
        note = f"{exc.args[0].split(';')[0]}; kept it as {kept} and started a new cache"
    entries[entry["key"]] = entry
    write_cache(entries, p)
    return note


def write_cache(entries: dict[str, dict], path: str | os.PathLike | None = None) -> Path:
    p = cache_path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise LabError(f"cannot write the autotune cache {p}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION,
                       "entries": dict(sorted(entries.items()))}, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def source_hash(stage, backend: str) -> str | None:
    """A short hash of the stage's kernel files for this backend (the launcher module, and the .cu
    for CUDA): an entry tuned for other sources still resolves, and the row's note says so."""
    import hashlib

    from lab.stages import get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    package = {"cuda": "cuda_kernels", "triton": "triton_kernels"}[backend]
    root = Path(__file__).resolve().parent.parent / package
    files = [root / f"{stage.name}.py"] + ([root / f"{stage.name}.cu"] if backend == "cuda" else [])
    digest = hashlib.sha256()
    try:
        for f in files:
            digest.update(f.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()[:12]


def versions() -> dict[str, str | None]:
    out = {}
    for name in ("torch", "triton", "cupy"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # not installed, or broken: recorded as unknown
            out[name] = None
    return out


def make_entry(result: Result, gpu: str, *, budget_s: float, cublas_ms: float | None = None,
               now: _dt.datetime | None = None, versions_: dict | None = None) -> dict:
    """The cache record of a finished search (its winner must exist)."""
    w, d = result.winner, result.default_trial
    default_ms = d.best_ms if d is not None and d.status == "timed" else None
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return {
        "key": cache_key(gpu, result.stage, result.backend, result.M, result.N, result.K,
                         result.precision, result.layout),
        "gpu": gpu, "stage": result.stage, "backend": result.backend,
        "bucket": bucket(result.M, result.N, result.K), "precision": result.precision,
        "layout": result.layout, "shape": [result.M, result.N, result.K],
        "params": dict(w.params), "median_ms": w.best_ms,
        "default_params": dict(result.default), "default_ms": default_ms,
        "speedup": (default_ms / w.best_ms) if default_ms and w.best_ms else None,
        "cublas_ms": cublas_ms,
        "configs_tried": result.count("timed"), "configs_wrong": result.count("wrong"),
        "configs_error": result.count("error"), "configs_pruned": result.count("pruned"),
        "configs_valid": result.valid, "space_size": result.space_size, "space": result.space,
        "restricted": ({k: list(v) for k, v in result.restricted.items()}
                       if result.restricted else None),
        "seeds": len(result.seeds),
        "stopped": result.stopped or None, "budget_s": budget_s,
        "elapsed_s": round(result.elapsed_s, 3),
        "source": source_hash(result.stage, result.backend),
        "date": now.isoformat(timespec="seconds"),
        **(versions_ if versions_ is not None else versions()),
    }


# ---------------------------------------------------------------------------------- the GPU side


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver or no torch: no GPU
        return False


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def gpu_sm_count() -> int | None:
    """The current GPU's multiprocessor count, or None (no GPU, or torch cannot say)."""
    try:
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device())
                   .multi_processor_count)
    except Exception:  # a broken driver or no GPU: the seeds assume SEED_SMS
        return None


class GpuBench:
    """Inputs, reference and output of one shape on the GPU, and the real launch factory, checker
    and timer for `search`."""

    def __init__(self, stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
                 precision: str = "fp32", seed: int = 0):
        import torch

        from lab import check as chk
        from lab.operands import DTYPE_NAMES

        self.module = stage.module(backend)
        self.K, self.precision = K, precision
        dtype = getattr(torch, DTYPE_NAMES.get(precision, "float32"))
        self.a, self.b = chk.make_inputs(M, N, K, seed, "cuda", dtype=dtype, layout=layout)
        self.ref = chk.reference(self.a, self.b)
        self.c = torch.empty((M, N), device="cuda", dtype=dtype)

    def build_extra(self) -> dict:
        """What the CUDA launcher's prepare() adds to the parameters of its build for these
        operands (vector_flags / variant_flags, and a precision other than fp32), for cuda_probe;
        {} where it cannot be told (the probe then compiles the default variant, as before)."""
        from lab.operands import describe

        out = {}
        flags = getattr(self.module, "variant_flags", None) or getattr(self.module,
                                                                        "vector_flags", None)
        try:
            if flags is not None:
                problem = describe(self.a, self.b, self.c)
                problem.precision = self.precision
                out.update(flags(problem))
        except Exception:  # a convenience for the compile pool, never a reason to fail
            out = {}
        if self.precision != "fp32":
            out["precision"] = self.precision
        return out

    def launch(self, params: dict):
        # fp32 is what float32 operands mean; other precisions are named (tf32, 3xtf32 take
        # float32 operands too)
        named = {} if self.precision == "fp32" else {"precision": self.precision}
        return self.module.prepare(self.a, self.b, self.c, **named, **params)

    def check(self, launch):
        from lab.check import check

        return check(launch, self.c, self.ref, self.K, self.precision)

    @staticmethod
    def time(params: dict, launch, rep_ms: float) -> float:
        from lab.timing import bench

        return bench(launch, warmup_ms=min(25.0, rep_ms), rep_ms=rep_ms).median_ms

    def cublas_ms(self, rep_ms: float = LONG_REP_MS) -> float | None:
        """cuBLAS (torch.matmul, TF32 off) on the same operands, for the % of cuBLAS line."""
        import torch

        from lab.timing import bench

        matmul = torch.backends.cuda.matmul
        tf32 = self.precision == "tf32"  # 3xtf32 stands in for fp32, and is compared with it
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "tf32" if tf32 else "ieee"
        else:  # pragma: no cover - older torch
            matmul.allow_tf32 = tf32
        c = torch.empty_like(self.c)
        try:
            return bench(lambda: torch.matmul(self.a, self.b, out=c), rep_ms=rep_ms).median_ms
        except Exception:  # the baseline is a convenience here, not a result
            return None

    def release(self) -> None:
        import torch

        del self.a, self.b, self.ref, self.c
        torch.cuda.empty_cache()


@dataclass
class Outcome:
    entry: dict | None  # the cache record (new or cached); None when nothing passed
    result: Result | None  # None when the cache answered
    cached: bool
    note: str = ""  # a sentence about the cache file (e.g. a corrupted one kept aside)


def precisions_of(stage, backend: str) -> tuple[str, ...]:
    """The precisions the registry lists for this stage x backend."""
    if hasattr(stage, "precisions_for"):
        return tuple(stage.precisions_for(backend))
    return tuple(stage.precisions)


def _check_request(stage, backend: str, precision: str, layout: str):
    from lab.axes import LAYOUTS
    from lab.stages import BACKENDS, get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    supported = precisions_of(stage, backend)
    if precision not in supported:
        raise LabError(f"stage {stage.name} ({backend}) supports precision "
                       f"{', '.join(supported)}, not {precision}")
    if layout not in LAYOUTS:
        raise LabError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    return stage


def tune(stage, backend: str, M: int, N: int, K: int, *, layout: str = "nn",
         precision: str = "fp32", budget_s: float = DEFAULT_BUDGET_S,
         max_configs: int | None = None, retune: bool = False, cache=None, gpu: str | None = None,
         launch_factory=None, checker=None, timer=None, probe=None, limits=None,
         clock: Callable[[], float] = time.monotonic, on_progress: Progress | None = None,
         cublas: bool = True, store_result: bool = True, restrict: dict | None = None,
         jobs: int | None = None, sm_count: int | None = None) -> Outcome:
    """The cached entry for this key, or (with `retune`, or when there is none) a new search whose
    winner is stored. Without injected launch_factory/checker/timer it needs a CUDA GPU.

    restrict: name -> allowed values (space_of); the key, and so the cache entry it replaces, is
    the same as an unrestricted search's. jobs: compile-ahead threads for a probe (the CUDA
    builds; default min(8, CPUs); 1 = none). sm_count: for the split-K seeds (default: the GPU's,
    else SEED_SMS)."""
    stage = _check_request(stage, backend, precision, layout)
    _check_restriction(stage, restrict or {})
    fakes = launch_factory is not None and checker is not None and timer is not None
    if not fakes and not gpu_available():
        raise LabError("tuning times kernels and needs a CUDA GPU, and torch sees none here "
                       "(python -m lab.autotune --dry-run shows the search space without one)")
    gpu = gpu or (gpu_name() if gpu_available() else "no GPU")
    key = cache_key(gpu, stage.name, backend, M, N, K, precision, layout)
    note = ""
    if not retune:
        try:
            hit = load_cache(cache).get(key)
        except CacheError as exc:
            hit, note = None, str(exc)
        if hit is not None:
            if restrict:
                note = ("the cache already holds this key, so the restricted space was not "
                        "searched; --retune searches it and replaces the entry")
            return Outcome(hit, None, True, note)
    module = stage.module(backend)
    space = space_of(stage, backend, restrict, validator(module, precision))
    bench = None
    cublas_ms = None
    ahead = None
    if not fakes:
        from lab.occupancy import from_device

        bench = GpuBench(stage, backend, M, N, K, layout, precision)
        launch_factory, checker, timer = bench.launch, bench.check, bench.time
        limits = limits or from_device()
        sm_count = sm_count or gpu_sm_count()
        if probe is None and backend == "cuda":
            probe = cuda_probe(module, M, N, K, layout, bench.build_extra())
            _warm_build_caches()
    jobs = default_jobs() if jobs is None else int(jobs)
    if probe is not None and jobs > 1:
        ahead = CompileAhead(probe, space.key, jobs)
    try:
        result = search(space, launch_factory=launch_factory, checker=checker, timer=timer,
                        validate=validator(module, precision),
                        probe=ahead.probe if ahead else probe, limits=limits, budget_s=budget_s, max_configs=max_configs, clock=clock,
                        on_progress=on_progress, shape=(M, N, K), layout=layout,
                        precision=precision, sm_count=sm_count,
                        prefetch=ahead.prefetch if ahead else None,
                        compile_ahead=ahead.lookahead if ahead else 0,
                        identity=build_identity(module, M, N, precision, sm_count))
        if ahead is not None:
            ahead.close()
        if bench is not None and cublas and result.winner is not None:
            cublas_ms = bench.cublas_ms()
    finally:
        if ahead is not None:
            ahead.close()
        if bench is not None:
            bench.release()
    if result.winner is None:
        return Outcome(None, result, False, note)
    entry = make_entry(result, gpu, budget_s=budget_s, cublas_ms=cublas_ms)
    if store_result:
        note = store(entry, cache) or note
    return Outcome(entry, result, False, note)


# ------------------------------------------------------------------------- stage:auto resolution


def lookup(stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
           precision: str = "fp32", *, tune_if_missing: bool = False, mode: str = "gpu",
           cache=None, gpu: str | None = None,
           budget_s: float = DEFAULT_BUDGET_S) -> tuple[dict | None, str]:
    """(the cached winner's parameters for this backend, every one of them, or None; and one
    sentence for the row's detail saying which configuration runs and why)."""
    from lab.stages import get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if gpu is None:
        if mode != "gpu" or not gpu_available():
            return None, ("auto: no GPU to look up a tuned configuration for, so the defaults "
                          "run")
        gpu = gpu_name()
    where = f"{bucket(M, N, K)} {layout} on {gpu}"
    entry = load_cache(cache).get(cache_key(gpu, stage.name, backend, M, N, K, precision, layout))
    how = "cached"
    if entry is None and tune_if_missing and mode == "gpu":
        outcome = tune(stage, backend, M, N, K, layout=layout, precision=precision, cache=cache,
                       gpu=gpu, budget_s=budget_s)
        entry, how = outcome.entry, "tuned now"
    if entry is None:
        return None, (f"auto: no tuned configuration for {where}, so the defaults run (python -m "
                      f"lab.autotune --stage {stage.name} --backend {backend} --sizes {M}x{N}x{K} "
                      f"--layout {layout})")
    problem = _stale(stage, backend, entry["params"])
    if problem:
        return None, (f"auto: the cached configuration for {where} no longer fits the registry "
                      f"({problem}), so the defaults run; tune again with --retune")
    params = space_of(stage, backend).full({})
    declared = {p.name: p for p in stage.params if backend in p.backends}
    params.update({k: declared[k].coerce(v) for k, v in entry["params"].items() if k in params})
    speed = entry.get("speedup")
    changed = entry.get("source") not in (None, source_hash(stage, backend))
    return params, (f"auto: {how} winner for {where} ({entry.get('configs_tried', '?')} configs"
                    + (f", {speed:.2f}x the defaults" if speed else "")
                    + f", {str(entry.get('date', ''))[:10]})"
                    + ("; the kernel's files changed since it was tuned (--retune)" if changed
                       else ""))


def _stale(stage, backend: str, params: dict) -> str:
    declared = {p.name: p for p in stage.params if backend in p.backends}
    for name, value in params.items():
        p = declared.get(name)
        if p is None:
            return f"{stage.name} has no {backend} parameter {name}"
        value = p.coerce(value)
        if value not in p.choices or isinstance(value, bool) is not isinstance(p.default, bool):
            return f"{name}={_fmt(value)} is not a choice of {stage.name}"
    why = validator(stage.module(backend))({**space_of(stage, backend).full({}), **params})
    return why or ""


def resolve(stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
            precision: str = "fp32", *, tune_if_missing: bool = False, mode: str = "gpu",
            cache=None, gpu: str | None = None, budget_s: float = DEFAULT_BUDGET_S) -> dict | None:
    """The cached winner's parameters for a `stage:auto` row (all of this backend's parameters),
    or None: then the caller runs the defaults and says so (lookup() gives the sentence)."""
    return lookup(stage, backend, M, N, K, layout, precision, tune_if_missing=tune_if_missing,
                  mode=mode, cache=cache, gpu=gpu, budget_s=budget_s)[0]


def resolve_variant(variant, backend: str, M: int, N: int, K: int, layout: str = "nn",
                    precision: str = "fp32", *, mode: str = "gpu", tune_if_missing: bool = False,
                    cache=None, gpu: str | None = None, budget_s: float = DEFAULT_BUDGET_S):
    """(the Variant a row runs, a sentence for its detail). A normal variant comes back unchanged
    with ""; a `stage:auto` one as a plain Variant holding the cached winner's parameters for this
    backend (or the defaults), and the sentence saying which."""
    from lab.stages import Variant

    if not getattr(variant, "auto", False):
        return variant, ""
    params, note = lookup(variant.stage, backend, M, N, K, layout, precision,
                          tune_if_missing=tune_if_missing, mode=mode, cache=cache, gpu=gpu,
                          budget_s=budget_s)
    return Variant(variant.stage, {**variant.stage.defaults(), **(params or {})}), note


# ------------------------------------------------------------------------------------------ CLI


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
                        "own bucket (M, N, K rounded up to powers of two, plus an alignment flag)")
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
                        f"time)")
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
    p.add_argument("--show", action="store_true",
                   help="print the cache's entries (those of --stage, if given) and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


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
                               f"registry's {name} choices are {_choices_text(p)}, and the tuner "
                               f"searches only those")
            if value not in values:
                values.append(value)
        if name in NUMERICS and values != [NUMERICS[name]]:
            raise LabError(f"{name} changes the numerics, so the tuner keeps it at "
                           f"{_fmt(NUMERICS[name])}; leave it out of --stage")
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
    args = build_parser().parse_args(argv)
    if args.show:
        return _show(args)
    if (args.sample is not None or args.compile_all) and not args.dry_run:
        raise LabError(f"{'--sample' if args.sample is not None else '--compile-all'} belongs "
                       f"to --dry-run (how many builds it compiles); add --dry-run or drop it")
    if args.sample is not None and args.sample < 0:
        raise LabError("--sample must be 0 or more (builds picked at random for the estimate)")
    if args.sample is not None and args.compile_all:
        raise LabError("--sample and --compile-all both say how much --dry-run compiles; give "
                       "one of them")
    if not args.dry_run and not gpu_available():
        example = (f"python -m lab.autotune --stage {args.stage} --sizes "
                   f"{','.join(args.sizes)} --dry-run" if args.stage and args.sizes
                   else "python -m lab.autotune --stage vectorized --sizes 4096 --dry-run")
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
                if precision in precisions_of(s, be):
                    continue
                if s.name in named:
                    raise LabError(f"stage {s.name} ({be}) supports precision "
                                   f"{', '.join(precisions_of(s, be))}, not {precision}; name the "
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
                 if pr in precisions_of(st, be)]
    if args.dry_run:
        todo, seen_spaces = [], set()
        for st, r, be, shape, lay, pr in jobs:
            # the space is the same in every precision; what validate() and the builds prune is
            # not where the element size matters (mma)
            if pr != "fp32" and pr not in st.precisions_for(be):
                continue
            if (st.name, be, shape, lay, pr) not in seen_spaces:
                seen_spaces.add((st.name, be, shape, lay, pr))
                todo.append((st, r, be, shape, lay, pr))
        budget = DryRunBudget(None if args.sample is not None else DRY_RUN_COMPILE_S,
                              sum(be == "cuda" for _st, _r, be, *_ in todo))
        for st, r, be, shape, lay, pr in todo:
            _dry_run(st, be, shape, lay, args.max_configs, r, args.jobs, pr, sample=args.sample,
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
    status = 0
    gpu = gpu_name()
    print(f"tuning on {gpu}; cache {path}")
    for st, r, be, shape, lay, precision in jobs:
        code, interrupted = _tune_one(st, be, shape, lay, precision, args, path, gpu, r)
        status = max(status, code)
        if interrupted:  # Ctrl-C ends this search (its best so far is kept) and the command
            print("interrupted: the remaining searches were not started", file=sys.stderr)
            return 130
    return status


def _reporter(title: str):
    """A progress callback and a closer: a rich bar on a terminal, plain lines otherwise."""
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        console = Console(stderr=True)
        terminal = console.is_terminal
    except ImportError:  # rich is a dependency, but plain text works without it
        terminal = False
    if not terminal:
        return plain_progress(title, sys.stderr), lambda: None
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    bar.start()
    task = bar.add_task(title, total=None)

    def on_progress(phase, done, total, trial, best):
        text = f"{title} {phase}" + (f", best {best.ms:.3f} ms" if best and best.ms else "")
        bar.update(task, completed=done, total=total, description=text)

    return on_progress, bar.stop


def plain_progress(title: str, stream) -> Progress:
    """One line per trial (logs and pipes)."""

    def on_progress(phase, done, total, trial, best):
        if trial is None:
            return
        what = {"timed": f"{trial.ms:.3f} ms" if trial.ms is not None else "",
                "wrong": "WRONG: " + trial.detail, "error": "error: " + trial.detail,
                "pruned": "pruned: " + trial.detail}.get(trial.status, trial.status)
        if phase == "refine":
            what = f"refined {trial.refined_ms:.3f} ms"
        elif trial.how == "seed":
            what += " (split-K seed)"
        print(f"  {title} {phase} [{done}/{total}] {params_text(trial.params)}: {what}",
              file=stream, flush=True)

    return on_progress


def _tune_one(stage, backend, shape, layout, precision, args, path, gpu,
              restrict: dict | None = None) -> tuple[int, bool]:
    M, N, K = shape
    title = f"{stage.name} {backend} {layout} {M}x{N}x{K}" + (
        f" {precision}" if precision != "fp32" else "")
    on_progress, close = _reporter(title)
    try:
        outcome = tune(stage, backend, M, N, K, layout=layout, precision=precision,
                       budget_s=args.budget_s, max_configs=args.max_configs, retune=args.retune,
                       cache=path, gpu=gpu, on_progress=on_progress, restrict=restrict,
                       jobs=args.jobs)
    finally:
        close()
    for line in report_lines(outcome, title):
        print(line)
    interrupted = outcome.result is not None and outcome.result.stopped == "interrupted"
    return (0 if outcome.entry is not None else 1), interrupted


def _same_text(r: Result) -> str:
    """The report's note on configurations merged by search()'s identity, or ""."""
    if not r.same_build:
        return ""
    return (f"; {r.same_build} more are the same build as one of those once the automatic "
            f"values are resolved for this shape, and are not tried again")


def report_lines(outcome: Outcome, title: str) -> list[str]:
    """What the CLI prints for one search (or cache hit); docs/AUTOTUNE.md explains each line."""
    lines = [f"{title}:"]
    if outcome.note:
        lines.append(f"  note: {outcome.note}")
    e, r = outcome.entry, outcome.result
    if outcome.cached:
        lines.append(f"  cached ({e.get('date', '?')[:10]}, {e.get('configs_tried', '?')} configs; "
                     f"--retune searches again): {params_text(e['params'])}")
        lines.append("  " + _times_line(e))
        return lines
    invalid = len(r.invalid)
    lines.append(f"  space {r.space}" + (f"; sampled {r.considered}" if r.sampled else ""))
    lines.append(f"  {r.valid} pass validate ({invalid} rejected{_same_text(r)}); "
                 f"tried {len(r.trials)}: "
                 f"{r.count('timed')} timed, {r.count('pruned')} pruned by resources, "
                 f"{r.count('wrong')} wrong, {plural(r.count('error'), 'error')}; "
                 f"{r.not_reached} not reached"
                 + (f" (stopped: {r.stopped})" if r.stopped else "") + f"; {r.elapsed_s:.0f} s")
    if r.seeds:
        lines.append(f"  split-K seeds (tiles x splitk near 1x, 2x, 4x {r.sm_count} SMs), tried "
                     f"after the defaults: "
                     + "; ".join(_seed_text(s, r.backend) for s in r.seeds))
    ranked = r.ranked[:TOP + 2]
    if ranked:
        d_ms = r.default_trial.best_ms if r.default_trial and r.default_trial.status == "timed" \
            else None
        lines.append(f"  {'rank':>4} {'search ms':>10} {'refined ms':>10} {'vs default':>10}  "
                     f"params")
        for i, t in enumerate(ranked, 1):
            refined = f"{t.refined_ms:.3f}" if t.refined_ms is not None else "-"
            vs = f"{d_ms / t.best_ms:.2f}x" if d_ms and t.best_ms else "-"
            mark = " (defaults)" if r.default_trial is t else ""
            lines.append(f"  {i:>4} {t.ms:>10.3f} {refined:>10} {vs:>10}  "
                         f"{params_text(t.params)}{mark}")
    for t in r.trials:
        if t.status == "wrong":
            lines.append(f"  WRONG (discarded): {params_text(t.params)}: {t.detail}")
    errors = [t for t in r.trials if t.status == "error"]
    for t in errors[:3]:
        lines.append(f"  error: {params_text(t.params)}: {t.detail}")
    if len(errors) > 3:
        lines.append(f"  ... and {plural(len(errors) - 3, 'more error')}")
    if e is None:
        lines.append("  no configuration passed its check; nothing cached")
        return lines
    lines.append(f"  winner: {params_text(e['params'])}")
    lines.append("  " + _times_line(e))
    lines.append(f"  cached as {e['key']}")
    return lines


def _seed_text(seed: dict, backend: str) -> str:
    """BM=128,BN=128,splitk=16: what makes a split-K seed."""
    names = (*TILE_EDGES.get(backend, ()), "splitk")
    return ",".join(f"{k}={_fmt(seed[k])}" for k in names if k in seed)


def _times_line(e: dict) -> str:
    text = f"{e['median_ms']:.3f} ms"
    if e.get("default_ms"):
        text += f", defaults {e['default_ms']:.3f} ms ({e['default_ms'] / e['median_ms']:.2f}x)"
    if e.get("cublas_ms"):
        text += f", cuBLAS {e['cublas_ms']:.3f} ms ({100 * e['cublas_ms'] / e['median_ms']:.1f}% " \
                f"of cuBLAS)"
    return text


def _show(args) -> int:
    path = cache_path(args.cache)
    entries = load_cache(path)
    wanted = {s.name for s, _r in _parse_stages(args.stage)} if args.stage else None
    rows = [e for e in entries.values() if wanted is None or e.get("stage") in wanted]
    print(f"{path}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}"
          + ("" if wanted is None else f" for {', '.join(sorted(wanted))}"))
    for e in rows:
        print(f"  {e.get('key')}")
        print(f"    {params_text(e['params'])}")
        print(f"    {_times_line(e) if e.get('median_ms') else '?'}; "
              f"{e.get('configs_tried', '?')} configs, {str(e.get('date', '?'))[:10]}")
    return 0


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


class _Ticker:
    """Progress of a dry-run phase that may take more than a moment: a transient rich bar on a
    terminal, else a line on stderr at most every PROGRESS_EVERY_S seconds (and a last one when a
    phase that printed any ends)."""

    def __init__(self, title: str, total: int, stream=None):
        self.title, self.total, self.done = title, total, 0
        self.stream = stream or sys.stderr
        self.start = self.last = time.monotonic()
        self.printed = 0  # the count the last line showed
        self.bar = None
        sys.stdout.flush()  # what was said so far comes before the progress
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            console = Console(file=self.stream)
            if console.is_terminal:
                self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                    MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                    transient=True)
                self.bar.start()
                self.task = self.bar.add_task(title, total=total)
        except ImportError:  # rich is a dependency, but plain lines work without it
            self.bar = None

    def set_total(self, total: int) -> None:
        if total != self.total:
            self.total = total
            if self.bar is not None:
                self.bar.update(self.task, total=total)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            return
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.printed = self.done
            print(f"  {self.title}: {self.done}/{self.total} ({now - self.start:.0f} s)",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif self.printed and self.printed != self.done:
            print(f"  {self.title}: {self.done}/{self.total} "
                  f"({time.monotonic() - self.start:.0f} s)", file=self.stream, flush=True)


def compile_sample(probe: Callable[[dict], dict | None], configs: list[dict], jobs: int = 1,
                   seconds: float | None = None, on_done: Callable[[], None] | None = None,
                   clock: Callable[[], float] = time.monotonic) -> list[Trial | None]:
    """Run `probe` (a CUDA build) on `configs` in order, on up to `jobs` threads, starting no new
    build that would not end within `seconds` at the mean time of the builds so far (the first
    always starts; those running finish). One Trial per configuration, in order: status "fit"
    (resources in `resources`), "pruned" (spills, or no block fits an SM: `detail`), "error" (the
    build failed), its build time in `ms`; None for one never started."""
    start = clock()
    out: list[Trial | None] = [None] * len(configs)
    took: list[float] = []  # seconds of each finished build

    def build(i: int) -> Trial:
        t = Trial(dict(configs[i]), i)
        began = clock()
        try:
            res = probe(configs[i])
            problem = resource_problem(res)
            t.resources = res
            t.status, t.detail = ("pruned", problem) if problem else ("fit", "")
        except Exception as exc:  # a build error is reported, the other builds go on
            text = str(exc).strip().splitlines()
            first = text[0] if text else ""
            t.status = "error"
            t.detail = first if isinstance(exc, LabError) else f"{type(exc).__name__}: {first}"
        t.ms = 1000 * (clock() - began)  # the build's wall time
        return t

    def room() -> bool:  # would one more build end in time, at the mean time of those so far?
        expected = sum(took) / len(took) if took else 0.0
        return seconds is None or clock() - start + expected < seconds

    pending: dict[Future, int] = {}
    nxt = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs),
                            thread_name_prefix="lab-autotune-dry-run") as pool:
        while nxt < len(configs) or pending:
            while nxt < len(configs) and len(pending) < max(1, jobs) and (nxt == 0 or room()):
                pending[pool.submit(build, nxt)] = nxt
                nxt += 1
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                out[pending.pop(fut)] = trial = fut.result()
                took.append(trial.ms / 1000)
                if on_done:
                    on_done()
    return out


def _n(x: int) -> str:
    """12,803: a count with thousands separators."""
    return f"{x:,}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _resources_text(res: dict) -> str:
    from lab.occupancy import SM90, from_resources

    occ = from_resources(res, SM90)
    return (f"{res['registers']} regs, "
            f"{(res['smem_static'] or 0) + (res['smem_dynamic'] or 0)} B smem, "
            f"{res['threads']} threads, {occ.blocks_per_sm} blocks/SM "
            f"({100 * occ.occupancy:.0f}%)")


def _trial_line(i: int, t: Trial, seed: bool = False) -> str:
    head = f"  {i:>4}. {params_text(t.params)}" + (" (split-K seed)" if seed else "")
    if t.status == "pruned":
        return f"{head}: pruned: {t.detail}"
    if t.status == "error":
        return f"{head}: error: {t.detail}"
    if t.resources:
        return f"{head}: {_resources_text(t.resources)}"
    return head


def _dry_run(stage, backend: str, shape, layout: str, max_configs: int | None = None,
             restrict: dict | None = None, jobs: int = 1, precision: str = "fp32", *,
             sample: int | None = None, budget: DryRunBudget | None = None,
             compile_all: bool = False) -> None:
    """The space and its pruning without a GPU, in seconds: every searched parameter and its
    values; how many configurations the space declares, how many the search considers (a sample
    above ENUMERATE_LIMIT) and how many pass validate(); for CUDA an estimate of the resource
    prune from NVRTC builds for sm_90 of a sample (the defaults, the split-K seeds, then `sample`
    valid configurations picked at random: at most DRY_RUN_SAMPLE by default, within the
    budget's seconds); and a sample of configurations with their resources. `compile_all`
    compiles every valid configuration instead (_dry_run_all)."""
    if compile_all:
        return _dry_run_all(stage, backend, shape, layout, max_configs, restrict, jobs, precision)
    M, N, K = shape
    module = stage.module(backend)
    validate = validator(module, precision)
    print(f"{stage.name} {backend} {layout} {M}x{N}x{K} {precision} "
          f"(bucket {bucket(M, N, K)}):", flush=True)
    space = space_of(stage, backend, restrict, validate)
    c = candidates(space, validate=validate, shape=(M, N, K), sm_count=SEED_SMS,
                   identity=build_identity(module, M, N, precision, SEED_SMS))

    def say(text: str, indent: str = "  ") -> None:  # a note, wrapped to the terminal at spaces
        print(wrap(text, indent=indent, subsequent=indent + "  "), flush=True)

    say(f"space {space.describe(dims=False)}")
    if space.searched:
        width = max(len(p.name) for p in space.searched)
        for p in space.searched:
            print(f"    {p.name:<{width}}  {'|'.join(_fmt(v) for v in p.choices)} "
                  f"(default {_fmt(space.default[p.name])})")
    valid, considered = len(c.valid) + c.same_build, len(c.configs)
    print("  pruning:")
    say(f"{_n(space.size)} configurations in the declared space", "    ")
    if c.sampled:
        say(f"{_n(considered)} of them considered: the search samples a space above "
            f"{_n(ENUMERATE_LIMIT)} configurations (a fixed random sample, the defaults in it)",
            "    ")
    rate = valid / considered if considered else 0.0
    say(f"{_n(valid)} pass validate, {_n(len(c.invalid))} rejected"
        + (f" ({100 * rate:.0f}% pass; at that rate about "
           f"{_n(int(round(rate * space.size, -2)))} of the declared space)" if c.sampled
           else ""), "    ")
    if c.invalid:
        say(f"rejected, for example: {c.invalid[0][1]}", "      ")
    if c.same_build:
        say(f"{_n(len(c.valid))} distinct builds: {_n(c.same_build)} more are the same build as "
            f"one of those once the automatic values are resolved for this shape", "    ")
    if c.seeds:
        say(f"split-K seeds (tiles x splitk near 1x, 2x, 4x {c.sms} SMs): "
            + "; ".join(_seed_text(sd, backend) for sd in c.seeds))
    if backend == "cuda":
        _dry_run_builds(stage, module, space, c, shape, layout, precision, max_configs, jobs,
                        sample, budget, say)
    else:
        _dry_run_order(space, c, validate, shape, layout, max_configs, module, precision, say)


def _dry_run_builds(stage, module, space, c: Candidates, shape, layout, precision, max_configs,
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
    extra = {} if precision == "fp32" else {"precision": precision}
    probe = cuda_probe(module, M, N, K, layout, extra)
    if jobs > 1:
        _warm_build_caches()
    seconds = budget.share() if budget is not None and sample is None else None
    ticker = _Ticker(f"{stage.name} cuda: NVRTC builds of the sample", len(picked))
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
            f"fit one sm_90 SM without spills (NVRTC), so about {_n(round(share * valid))} of "
            f"the {_n(valid)} {valid_builds} would be kept"
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
        print(_trial_line(i, t, why == "seed"))
    left = len(picked) - len(built)
    spent = sum(t.ms for t, _ in built) / 1000
    per_build = spent / len(built) if built else 0.0
    if left:
        say(f"{left} more of the sample not compiled: a dry run starts no new build after "
            f"{DRY_RUN_COMPILE_S:.0f} s of builds, shared by its CUDA searches (--sample N "
            f"compiles N of them, however long it takes)")
    if not everything and valid:
        jobs_text = f"{jobs} thread{'s' if jobs != 1 else ''}"
        say(f"--compile-all compiles all {_n(valid)} valid builds in search order"
            + (f" (about {_duration(per_build * valid / max(1, jobs))} on {jobs_text} at this "
               f"sample's {per_build:.1f} s a build)" if per_build >= 0.05 else ""))


def _dry_run_order(space, c: Candidates, validate, shape, layout, max_configs, module, precision,
                   say) -> None:
    """The Triton part of a dry run: its builds need a GPU, so the first candidates in the order
    the search takes them while the defaults stay the fastest."""
    M, N, K = shape
    say("resource pruning: not estimated here, a Triton kernel's registers and spills are known "
        "only after it compiles on a GPU (those that spill are pruned there)", "    ")
    default_key = space.key(space.default)
    shown = DRY_RUN_SHOWN if max_configs is None else max_configs
    r = search(space, launch_factory=lambda params: (lambda: None),
               checker=lambda launch: True,
               timer=lambda params, launch, rep_ms: 1.0 if space.key(params) == default_key
               else 2.0,
               validate=validate, budget_s=math.inf, max_configs=shown, shape=(M, N, K),
               layout=layout, refine_rounds=0, sm_count=SEED_SMS,
               identity=build_identity(module, M, N, precision, SEED_SMS))
    print("  sample, the first candidates in search order (while the defaults stay the "
          "fastest):")
    for i, t in enumerate(r.trials, 1):
        print(_trial_line(i, t, t.how == "seed"))
    if r.not_reached:
        print(f"  ... and {_n(r.not_reached)} more")


def _dry_run_all(stage, backend: str, shape, layout: str, max_configs: int | None,
                 restrict: dict | None = None, jobs: int = 1, precision: str = "fp32") -> None:
    """--dry-run --compile-all: every valid configuration, and for CUDA its NVRTC build for
    sm_90 (spills, fit; `jobs` threads compile ahead), in the order the search takes them while
    the defaults stay the fastest (the real order follows the timings), with progress. `search`
    itself runs, with a stand-in for the GPU, and the split-K seeds aim at SEED_SMS SMs. This
    takes minutes to hours (each build 0.1 to 2 s): the plain dry run estimates instead."""
    from lab.occupancy import SM90

    M, N, K = shape
    module = stage.module(backend)
    space = space_of(stage, backend, restrict, validator(module, precision))
    default_key = space.key(space.default)
    if max_configs is None and backend != "cuda":
        max_configs = DRY_RUN_SHOWN  # nothing is compiled: the first few show the order
    title = f"{stage.name} {backend} {layout} {M}x{N}x{K} {precision}"
    print(f"{title} (bucket {bucket(M, N, K)}):", flush=True)

    def stand_in(params):  # launches nothing
        return lambda: None

    def timer(params, launch, rep_ms):  # the defaults stay the fastest
        return 1.0 if space.key(params) == default_key else 2.0

    extra = {} if precision == "fp32" else {"precision": precision}
    probe = cuda_probe(module, M, N, K, layout, extra) if backend == "cuda" else None
    ahead = None
    if probe is not None and jobs > 1:
        _warm_build_caches()
        ahead = CompileAhead(probe, space.key, jobs)
    ticker = None
    on_progress = None
    if probe is not None:
        ticker = _Ticker(f"{stage.name} cuda: NVRTC builds, in search order", 0)

        def on_progress(phase, done, total, trial, best):
            ticker.set_total(min(total, max_configs) if max_configs is not None else total)
            ticker.advance(done - ticker.done)
    try:
        r = search(space, launch_factory=stand_in, checker=lambda launch: True, timer=timer,
                   validate=validator(module, precision), probe=ahead.probe if ahead else probe,
                   limits=SM90, budget_s=math.inf, max_configs=max_configs,
                   shape=(M, N, K), layout=layout, refine_rounds=0, sm_count=SEED_SMS,
                   prefetch=ahead.prefetch if ahead else None,
                   compile_ahead=ahead.lookahead if ahead else 0, on_progress=on_progress,
                   identity=build_identity(module, M, N, precision, SEED_SMS))
    finally:
        if ticker is not None:
            ticker.close()
        if ahead is not None:
            ahead.close()
    print(f"  space {r.space}" + (f"; sampled {r.considered}" if r.sampled else ""))
    print(f"  {r.valid} pass validate, {len(r.invalid)} rejected{_same_text(r)}")
    if r.seeds:
        print(f"  split-K seeds (tiles x splitk near 1x, 2x, 4x {r.sm_count} SMs): "
              + "; ".join(_seed_text(s, backend) for s in r.seeds))
    if backend == "cuda":
        print("  resources (NVRTC, sm_90), in search order:")
    else:
        print("  resources: a Triton kernel's registers and spills are known only after it "
              "compiles on the GPU (those that spill are pruned there); the search order:")
    for i, t in enumerate(r.trials, 1):
        print(_trial_line(i, t, t.how == "seed"))
    if backend == "cuda":
        print(f"  {r.count('timed')} fit, {r.count('pruned')} pruned by resources, "
              f"{plural(r.count('error'), 'error')}"
              + (f"; {r.not_reached} not compiled (--max-configs)" if r.not_reached else ""))
    elif r.not_reached:
        print(f"  ... and {r.not_reached} more")


if __name__ == "__main__":
    sys.exit(main())
