"""tune(): one search of one stage x backend x shape x layout x precision on this GPU (or with
fakes for the GPU side), or the cache's answer; the winner is stored."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from lab.base.errors import LabError
from lab.tune.cache import CacheError, cache_key, load_cache, make_entry, store
from lab.tune.gpu import GpuBench, gpu_available, gpu_name, gpu_sm_count
from lab.tune.pool import CompileAhead, cuda_probe, default_jobs, warm_build_caches
from lab.tune.prune import build_identity, validator
from lab.tune.search import DEFAULT_BUDGET_S, SHORT_REP_MS, Progress, Result, search
from lab.tune.space import check_restriction, space_of


@dataclass
class Outcome:
    entry: dict | None  # the cache record (new or cached); None when nothing passed
    result: Result | None  # None when the cache answered
    cached: bool
    note: str = ""  # a sentence about the cache file (e.g. a corrupted one kept aside)


def check_request(stage, backend: str, precision: str, layout: str):
    """The registered Stage, after checking the backend, the precision (one the stage's launcher
    offers) and the layout; one sentence for any problem."""
    from lab.axes import LAYOUTS
    from lab.stages import BACKENDS, get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    supported = stage.precisions_for(backend)
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
         jobs: int | None = None, sm_count: int | None = None, workers=None) -> Outcome:
    """The cached entry for this key, or (with `retune`, or when there is none) a new search whose
    winner is stored. Without injected launch_factory/checker/timer it needs a CUDA GPU.

    restrict: name -> allowed values (space_of); the key, and so the cache entry it replaces, is
    the same as an unrestricted search's. jobs: compile-ahead threads for a probe (the CUDA
    builds; default min(8, CPUs); 1 = none). sm_count: for the split-K seeds (default: the GPU's,
    else SEED_SMS). workers: the GPUs of a run over several (lab/tune/workers.py Workers); the
    candidates are evaluated on all of them at once, the finalists and cuBLAS on one, and this
    process (which needs no GPU of its own) compiles ahead into the build cache they share."""
    stage = check_request(stage, backend, precision, layout)
    check_restriction(stage, restrict or {})
    fakes = launch_factory is not None and checker is not None and timer is not None
    if workers is not None:
        fakes = False
    elif not fakes and not gpu_available():
        raise LabError("tuning times kernels and needs a CUDA GPU, and torch sees none here "
                       "(python -m lab.autotune --dry-run shows the search space without one)")
    if workers is not None:
        gpu = gpu or workers.gpu_name
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
    offer = stage.offer(backend)
    space = space_of(stage, backend, restrict, validator(offer, precision))
    bench = None
    cublas_ms = None
    ahead = None
    pool = None
    if workers is not None:
        pool = workers.pool(dict(stage=stage.name, backend=backend, M=M, N=N, K=K, layout=layout,
                                 precision=precision), rep_ms=SHORT_REP_MS, cublas=cublas)
        sm_count = sm_count or workers.sm_count
        if probe is None and offer.compile is not None:  # builds land in the shared disk cache
            probe = cuda_probe(offer, M, N, K, layout, precision)
            warm_build_caches()
        if limits is None and gpu_available():
            from lab.occupancy import from_device

            limits = from_device()  # the ranks' GPUs are of this process's GPU's model
    elif not fakes:
        from lab.occupancy import from_device

        bench = GpuBench(stage, backend, M, N, K, layout, precision)
        launch_factory, checker, timer = bench.launch, bench.check, bench.time
        limits = limits or from_device()
        sm_count = sm_count or gpu_sm_count()
        if probe is None and offer.compile is not None:
            probe = cuda_probe(offer, M, N, K, layout, precision)
            warm_build_caches()
    jobs = default_jobs() if jobs is None else int(jobs)
    if workers is not None and jobs > 1:  # --jobs is per GPU: every GPU brings its CPUs
        jobs = min(jobs * workers.size, max(jobs, os.cpu_count() or 1))
    if probe is not None and jobs > 1:
        ahead = CompileAhead(probe, space.key, jobs)
    try:
        result = search(space, launch_factory=launch_factory, checker=checker, timer=timer,
                        validate=validator(offer, precision),
                        probe=ahead.probe if ahead else probe, limits=limits, budget_s=budget_s,
                        max_configs=max_configs, clock=clock,
                        on_progress=on_progress, shape=(M, N, K), layout=layout,
                        precision=precision, sm_count=sm_count,
                        prefetch=ahead.prefetch if ahead else None,
                        compile_ahead=ahead.lookahead if ahead else 0,
                        identity=build_identity(offer, M, N, K, precision, sm_count),
                        pool=pool, build_async=ahead.future if ahead and pool else None)
        if ahead is not None:
            ahead.close()
        if bench is not None and cublas and result.winner is not None:
            cublas_ms = bench.cublas_ms()
        if pool is not None:
            cublas_ms = pool.cublas_ms
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
