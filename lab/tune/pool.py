"""CUDA builds on a thread pool: the probe that compiles a candidate (cuda_probe), the pool that
compiles the next candidates while one is timed (CompileAhead, lab/tune/__init__.py step 4), and
the dry run's bounded sample of builds (compile_sample)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable

from lab.base.errors import LabError
from lab.tune.prune import resource_problem
from lab.tune.search import Trial

COMPILE_AHEAD_PER_JOB = 2  # configurations handed to the compile pool per worker


def cuda_probe(offer, M: int, N: int, K: int, layout: str = "nn",
               precision: str = "fp32") -> Callable[[dict], dict]:
    """params -> the resources of the CUDA build (NVRTC, no GPU needed) at this shape: the build
    and launch geometry that OFFER.compile(params, M, N, K, layout, precision) says prepare()
    would use, so that the launch finds the build the probe (or the compile pool, ahead) made in
    the per-process cache. compile() sees no operands: where prepare() picks a variant from the
    operands' alignment, an unaligned launch compiles its own variant once more."""
    from lab.toolchain.nvrtc import resources

    def probe(params: dict) -> dict:
        build, geometry = offer.compile(dict(params), M, N, K, layout, precision)
        return resources(build, *geometry)

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
    are cached per process (lab/toolchain/nvrtc.py), so the launch that follows reuses them."""

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
        self._held: set = set()  # builds asked for through future(): never dropped

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
                if k not in wanted and k not in self._held and fut.cancel():
                    del self._futures[k]
                    self.dropped += 1
            for k, params in wanted.items():
                if k not in self._futures:
                    self._futures[k] = self._pool.submit(self._probe, dict(params))
                    self.submitted.append(dict(params))

    def future(self, params: dict) -> Future:
        """The build of `params` as a Future (submitted now unless it is queued or done)."""
        k = self._key(params)
        with self._lock:
            self._held.add(k)
            fut = self._futures.get(k)
            if fut is None or fut.cancelled():
                fut = self._futures[k] = self._pool.submit(self._probe, dict(params))
                self.submitted.append(dict(params))
        return fut

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


def warm_build_caches() -> None:
    """Fill cuda_kernels._build's per-process lookups (the GPU's architecture, NVRTC's version)
    on this thread before the compile pool's threads read them."""
    try:
        from lab.toolchain.nvrtc import device_arch, nvrtc_version

        device_arch()
        nvrtc_version()
    except Exception:  # a missing cuda-bindings shows up, as one sentence, at the first build
        pass


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


