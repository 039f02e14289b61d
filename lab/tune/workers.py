"""A search over several GPUs: lab.autotune's candidates evaluated by ranks of torch.distributed,
one per GPU, at the same time.

    python -m lab.autotune --stage warptiling --backend cuda --sizes 4096 --gpus 2
    torchrun --nproc-per-node=8 -m lab.autotune --stage warptiling --sizes 4096

The ranks are started as lab.compare's are (lab/ranks.py: by torchrun, or by `--gpus N`, the
launching process hosting torch.distributed's key-value store) and coordinate through that store
alone. One process coordinates: the launcher under `--gpus`, rank 0 under torchrun (its own GPU
work then runs in a thread beside it). It runs the search (lab/tune/search.py) unchanged but for
where a candidate is evaluated:

- **Hand-out.** The coordinator posts each candidate as a task under task/<n>; a rank with
  nothing to do takes the next task number from a shared counter (`store.add`), waits for that
  task, evaluates it on its GPU (resource check, correctness, short timing: the same steps as on
  one GPU) and stores the trial under result/<n>. So a candidate starts as soon as a GPU is free,
  and the next pick is made from the best of the trials finished so far (search(pool=...)).
- **Builds.** A CUDA candidate is built first by the coordinator's compile threads (--jobs per
  GPU; search(build_async=...)), into the build cache every rank reads, while the GPUs time
  others; one that does not build or does not fit an SM is settled there and never reaches a
  GPU. A Triton candidate is built by the rank that evaluates it.
- **The refinement** times every finalist, and cuBLAS, on one GPU, in turn, as one task: GPUs of
  one model differ by a few percent, so the finalists are compared on the same one.
- **Same model.** Every rank publishes its GPU first; a run whose GPUs are of different models is
  refused in one sentence (lab/ranks.py gather), and the cache entry names that model.
- **Faults.** A rank that dies (the launcher sees its process end) or whose GPU fails loses the
  candidate it was evaluating (an error trial, named) and nothing else; the search goes on with
  the other GPUs, and the command exits 1 at the end. If no GPU is left, the search stops.
- **The cache** is written by the coordinator alone.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable

from lab.base.errors import LabError
from lab.tune.search import Trial

PREFIX = "lab-autotune/"  # the run's keys in the store
POLL_S = 0.05  # the coordinator's look at the store while candidates are in flight
TASK_WAIT_S = 300.0  # a rank's wait for its next task before it looks again (c10d logs a warning
# for every wait that times out, so a short one filled the output while one GPU refined the finalists)


def job_of(stage: str, backend: str, M: int, N: int, K: int, layout: str, precision: str) -> dict:
    """One search's identity, as the tasks carry it."""
    return {"stage": stage, "backend": backend, "M": M, "N": N, "K": K, "layout": layout,
            "precision": precision}


def _key(job: dict) -> tuple:
    return tuple(job[k] for k in ("stage", "backend", "M", "N", "K", "layout", "precision"))


# ---------------------------------------------------------------- a rank: evaluate what it is given


class GpuSide:
    """What a rank evaluates one job's candidates with: GpuBench (lab/tune/gpu.py) on this GPU,
    the CUDA build probe and this GPU's resource limits, kept while the job lasts."""

    def __init__(self, job: dict):
        from lab.occupancy import from_device
        from lab.stages import get_stage
        from lab.tune.gpu import GpuBench
        from lab.tune.pool import cuda_probe

        stage = get_stage(job["stage"])
        offer = stage.offer(job["backend"])
        args = (job["M"], job["N"], job["K"], job["layout"], job["precision"])
        self.bench = GpuBench(stage, job["backend"], *args)
        self.probe = cuda_probe(offer, *args) if offer.compile is not None else None
        self.limits = from_device()

    def launch(self, params: dict):
        return self.bench.launch(params)

    def check(self, launch):
        return self.bench.check(launch)

    def time(self, params: dict, launch, rep_ms: float) -> float:
        return self.bench.time(params, launch, rep_ms)

    def cublas_ms(self) -> float | None:
        return self.bench.cublas_ms()

    def release(self) -> None:
        self.bench.release()


def run_task(task: dict, side) -> dict:
    """A task's answer: a trial's outcome, or the refinement's times (lab/tune/search.py does
    the same steps on one GPU)."""
    from lab.tune.search import _evaluate

    if task["kind"] == "trial":
        trial = Trial(dict(task["params"]), 0)
        _evaluate(trial, lambda p: 0, side.launch, side.check, side.time, side.probe,
                  side.limits, task["rep_ms"], {})
        return {"status": trial.status, "ms": trial.ms, "detail": trial.detail,
                "resources": trial.resources}
    refined, details = [], []
    launches = []
    for params in task["finalists"]:
        try:
            launches.append(side.launch(dict(params)))
            details.append("")
        except Exception as exc:  # the finalist built and ran before; say so if it now fails
            launches.append(None)
            details.append(f"refinement failed: {type(exc).__name__}: {exc}".splitlines()[0])
    best: list[float | None] = [None] * len(launches)
    for _ in range(task["rounds"]):
        for i, (params, launch) in enumerate(zip(task["finalists"], launches)):
            if launch is None:
                continue
            try:
                ms = float(side.time(params, launch, task["rep_ms"]))
                best[i] = ms if best[i] is None else min(best[i], ms)
            except Exception as exc:  # keep the other finalists' times
                details[i] = f"refinement failed: {type(exc).__name__}: {exc}".splitlines()[0]
    refined = best
    cublas = side.cublas_ms() if task.get("cublas") else None
    return {"refined": refined, "details": details, "cublas_ms": cublas}


def serve(world, side_of: Callable[[dict], object] = GpuSide, gpu: dict | None = None,
          gpu_broken: Callable[[], str | None] | None = None) -> None:
    """A rank's life: publish its GPU, wait for the coordinator's go, then take tasks until a
    stop task. `side_of(job)`: what evaluates a job's candidates (GpuSide on a GPU; the tests
    give a fake); `gpu`: what the rank runs on (default: this rank's GPU, lab/ranks.py)."""
    from lab import ranks

    store = world.store
    if gpu is None:
        import torch

        torch.cuda.set_device(world.local_rank)
        gpu = ranks._gpu_of("gpu")
        gpu["sms"] = torch.cuda.get_device_properties(world.local_rank).multi_processor_count
        gpu_broken = gpu_broken or (lambda: ranks._gpu_broken("gpu"))
    store.set(f"env/{world.rank}", json.dumps({"gpu": gpu}, default=str))
    store.wait(["go"], ranks.JOIN_TIMEOUT)
    if store.get("go").decode() != "ok":
        return
    side, side_key = None, None
    try:
        while True:
            n = store.add("next", 1) - 1
            store.set(f"grab/{world.rank}", str(n))
            while not store.check([f"task/{n}"]):
                try:
                    store.wait([f"task/{n}"], _seconds(TASK_WAIT_S))
                except Exception:  # the wait timed out: look again
                    pass
            task = json.loads(store.get(f"task/{n}").decode())
            if task["kind"] == "stop":
                break
            if side_key != _key(task["job"]):
                if side is not None:
                    side.release()
                side, side_key = None, None
                side = side_of(task["job"])
                side_key = _key(task["job"])
            answer = run_task(task, side)
            store.set(f"result/{n}", json.dumps(answer, default=str))
            broken = gpu_broken() if gpu_broken else None
            if broken:
                store.set(f"done/{world.rank}", f"its GPU failed: {broken}")
                return
    finally:
        if side is not None:
            side.release()
    store.set(f"done/{world.rank}", "ok")


def _seconds(s: float):
    from datetime import timedelta

    return timedelta(seconds=s)


# ---------------------------------------------------------------- the coordinator


class Workers:
    """The coordinator's side of the run: the ranks, their GPUs, the task counter, the ranks
    lost. `pool(job, ...)` is what one search evaluates its candidates with."""

    def __init__(self, store, size: int, dead: Callable[[int], str | None] = lambda rank: None,
                 say: Callable[[str], None] = print, gpu_name: str = "",
                 sm_count: int | None = None):
        """`gpu_name`, `sm_count`: this process's GPU (the launcher's first, or rank 0's own),
        which names the cache entries and aims the split-K seeds while the ranks start; the
        ranks' GPUs are checked against it when the first candidate is handed out (start())."""
        self.store = store
        self.size = size
        self.dead = dead
        self.say = say
        self.gpu_name = gpu_name
        self.sm_count = sm_count
        self.gpus: dict[int, dict] = {}
        self.started = False
        self.posted = 0
        self.lost: dict[int, str] = {}  # rank -> why it stopped
        self.lost_trials: list[tuple[dict, dict, str]] = []  # (job, params, why)

    def start(self) -> None:
        """Wait for every rank's GPU (lab/ranks.py gather refuses mixed models) and let them
        take work. The first builds of a search go on meanwhile."""
        if self.started:
            return
        from lab import ranks

        told = ranks.gather(self.store, self.size, self.dead)
        self.gpus = {r: t["gpu"] for r, t in told.items()}
        theirs = next(iter(self.gpus.values()))["name"]
        if self.gpu_name and theirs != self.gpu_name:
            self.store.set("go", "refused")
            raise LabError(f"the ranks run on {theirs} and this process's GPU is "
                           f"{self.gpu_name}; a tuning cache entry is one GPU model's, so give "
                           f"the run GPUs of one model (CUDA_VISIBLE_DEVICES)")
        self.gpu_name = theirs
        self.sm_count = self.sm_count or next(iter(self.gpus.values())).get("sms")
        self.store.set("go", "ok")
        self.started = True

    def live(self) -> int:
        if not self.started:
            return self.size
        self._look()
        return self.size - len(self.lost)

    def post(self, task: dict) -> int:
        self.start()
        n = self.posted
        self.store.set(f"task/{n}", json.dumps(task, default=str))
        self.posted += 1
        return n

    def answer(self, n: int) -> dict | None:
        if self.store.check([f"result/{n}"]):
            return json.loads(self.store.get(f"result/{n}").decode())
        return None

    def _look(self) -> None:
        """Note the ranks that stopped (their process ended, or their GPU failed)."""
        for rank in range(self.size):
            if rank in self.lost:
                continue
            why = None
            if self.store.check([f"done/{rank}"]):
                told = self.store.get(f"done/{rank}").decode()
                why = None if told == "ok" else told
            else:
                why = self.dead(rank)
            if why:
                self.lost[rank] = why
                self.say(f"rank {rank} ({_where(self.gpus[rank])}) stopped: {why}; the search "
                         f"goes on with the other GPUs")

    def holder(self, n: int) -> int | None:
        """The lost rank that took task n, if one did."""
        for rank in self.lost:
            key = f"grab/{rank}"
            if self.store.check([key]) and int(self.store.get(key).decode()) == n:
                return rank
        return None

    def pool(self, job: dict, rep_ms: float, cublas: bool = True) -> "RemotePool":
        return RemotePool(self, job, rep_ms, cublas)

    def stop(self) -> None:
        """One stop task per rank (those waiting take one each); ranks never started (every
        search answered by the cache) are told to go home."""
        if not self.started:
            if not self.store.check(["go"]):
                self.store.set("go", "done")
            return
        for _ in range(self.size):
            self.post({"kind": "stop"})


def _where(gpu: dict) -> str:
    from lab import ranks

    return ranks._where(gpu)


class RemotePool:
    """search(pool=...) over the run's GPUs (lab/tune/search.py Pool), for one job."""

    def __init__(self, workers: Workers, job: dict, rep_ms: float, cublas: bool):
        self.w = workers
        self.job = job
        self.rep_ms = rep_ms
        self.cublas = cublas
        self.cublas_ms: float | None = None
        self.in_flight: dict[int, Trial] = {}
        self.refined_on: dict | None = None  # the GPU the finalists were timed on

    @property
    def slots(self) -> int:
        live = self.w.live()
        if live == 0:
            raise LabError("every GPU of the run has stopped (" + "; ".join(
                f"rank {r}: {why}" for r, why in sorted(self.w.lost.items())) + ")")
        return live

    @property
    def busy(self) -> int:
        return len(self.in_flight)

    def submit(self, trial: Trial) -> None:
        n = self.w.post({"kind": "trial", "job": self.job, "params": trial.params,
                         "rep_ms": self.rep_ms})
        self.in_flight[n] = trial

    def collect(self, block: bool) -> list[Trial]:
        while True:
            done = []
            for n, trial in list(self.in_flight.items()):
                got = self.w.answer(n)
                if got is not None:
                    trial.status, trial.ms = got["status"], got["ms"]
                    trial.detail, trial.resources = got["detail"], got["resources"]
                    done.append(trial)
                    del self.in_flight[n]
            if self.w.live() < self.w.size:
                for n, trial in list(self.in_flight.items()):
                    rank = self.w.holder(n)
                    if rank is not None and self.w.answer(n) is None:
                        why = (f"the GPU evaluating it stopped (rank {rank}, "
                               f"{_where(self.w.gpus[rank])}: {self.w.lost[rank]})")
                        trial.status, trial.detail = "error", why
                        self.w.lost_trials.append((self.job, dict(trial.params), why))
                        done.append(trial)
                        del self.in_flight[n]
            if done or not block or not self.in_flight:
                return done
            self.slots  # raises when no GPU is left
            time.sleep(POLL_S)

    def refine(self, finalists: list[Trial], rep_ms: float, rounds: int, on_progress) -> None:
        if not finalists:
            return
        n = self.w.post({"kind": "refine", "job": self.job, "rep_ms": rep_ms, "rounds": rounds,
                         "finalists": [t.params for t in finalists], "cublas": self.cublas})
        while True:
            got = self.w.answer(n)
            if got is not None:
                break
            self.slots  # raises when no GPU is left
            rank = self.w.holder(n)
            if rank is not None:
                for t in finalists:
                    t.detail = (f"refinement lost: the GPU timing it stopped (rank {rank}: "
                                f"{self.w.lost[rank]})")
                return
            time.sleep(POLL_S)
        for i, (t, ms, detail) in enumerate(zip(finalists, got["refined"], got["details"])):
            if ms is not None:
                t.refined_ms = float(ms)
            if detail:
                t.detail = detail
            if on_progress and ms is not None:
                on_progress("refine", (i + 1) * rounds, len(finalists) * rounds, t, None)
        self.cublas_ms = got.get("cublas_ms")


def serve_in_thread(world, **kw) -> tuple[threading.Thread, dict]:
    """Rank 0 under torchrun: its GPU work (serve) in a thread beside the coordinator, through a
    store client of its own (one client's socket cannot serve a blocking wait and the
    coordinator's polls at once); the box gets `error` if serving failed."""
    import torch.distributed as dist

    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None,
                           False, _seconds(300))
    mine = type(world)(dist.PrefixStore(PREFIX, client), world.rank, world.size,
                       world.local_rank, False)
    box: dict = {}

    def run():
        try:
            serve(mine, **kw)
        except BaseException as exc:  # said by the coordinator when the search is over
            box["error"] = exc
    t = threading.Thread(target=run, name="lab-autotune-gpu", daemon=True)
    t.start()
    return t, box
