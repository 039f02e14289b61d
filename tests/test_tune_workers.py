"""lab.autotune over several GPUs (lab/tune/workers.py), on the CPU: the search with a pool of
evaluators, and the whole protocol through a real torch.distributed TCPStore with 2 and 3 ranks
served by threads whose 'GPU' is a fake (a cost per configuration), a rank that dies, a run of
mixed GPU models, and the command's refusals."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest

from lab import autotune as at
from lab import ranks
from lab.base.errors import LabError
from lab.stages import get_stage
from lab.tune import workers as w
from lab.tune.search import Trial, _evaluate
from test_autotune import Clock, cost, fake_launch_factory, fake_timer, passes

GPU = "Fake GPU 80GB"
pytestmark = pytest.mark.fast


# ------------------------------------------------------------- the search with a pool (no store)


class LocalPool:
    """search(pool=...) with `slots` evaluators that finish in the order they were given work,
    `lag` submissions late (a result arrives while later candidates are in flight)."""

    def __init__(self, slots: int, lag: int = 1):
        self.slots = slots
        self.lag = lag
        self.queue: list[Trial] = []
        self.refined_by = None
        self.submitted = 0

    @property
    def busy(self):
        return len(self.queue)

    def submit(self, trial):
        self.submitted += 1
        self.queue.append(trial)

    def collect(self, block):
        if not self.queue or (not block and len(self.queue) <= self.lag):
            return []
        t = self.queue.pop(0)
        _evaluate(t, lambda p: 0, fake_launch_factory(), passes, fake_timer(), None, None, 25.0,
                  {})
        return [t]

    def refine(self, finalists, rep_ms, rounds, on_progress):
        for t in finalists:
            t.refined_ms = cost(t.params)
        self.refined_by = [dict(t.params) for t in finalists]


def test_a_pool_search_tries_the_whole_space_and_finds_the_same_winner_as_one_gpu():
    restrict = {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16)}
    space = at.space_of("vectorized", "cuda", restrict)
    offer = get_stage("vectorized").offer("cuda")
    common = dict(validate=at.validator(offer), budget_s=1e9, shape=(4096, 4096, 4096),
                  clock=Clock())
    one = at.search(space, launch_factory=fake_launch_factory(), checker=passes,
                    timer=fake_timer(), **common)
    pool = LocalPool(slots=3, lag=2)
    many = at.search(space, launch_factory=None, checker=None, timer=None, pool=pool, **common)
    assert many.winner.params == one.winner.params
    tried = lambda r: sorted(json.dumps(t.params, sort_keys=True) for t in r.trials)
    assert tried(many) == tried(one)  # the whole (small) space, each candidate once
    assert all(t.status == "timed" for t in many.trials)
    assert pool.refined_by and pool.refined_by[0] == many.ranked[0].params


def test_a_pool_search_builds_on_threads_and_settles_what_does_not_build_without_a_gpu():
    from concurrent.futures import ThreadPoolExecutor

    restrict = {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16)}
    space = at.space_of("vectorized", "cuda", restrict)
    offer = get_stage("vectorized").offer("cuda")

    def build(params):  # BK=8 with BM=64 'fails to compile'; BM=128,BN=128,BK=8 spills
        time.sleep(0.001)
        if params["BK"] == 8 and params["BM"] == 64:
            raise RuntimeError("nvrtc: error")
        if params["BK"] == 8 and params["BN"] == 128:
            return {"spill_bytes": 64}
        return None

    ahead = at.CompileAhead(build, space.key, 2)
    pool = LocalPool(slots=2, lag=1)
    r = at.search(space, launch_factory=None, checker=None, timer=None, pool=pool,
                  validate=at.validator(offer), budget_s=1e9, shape=(4096, 4096, 4096),
                  clock=Clock(), build_async=ahead.future, prefetch=ahead.prefetch,
                  compile_ahead=ahead.lookahead)
    ahead.close()
    assert all(t.status == "error" and "nvrtc" in t.detail for t in r.trials
               if t.params["BM"] == 64 and t.params["BK"] == 8)
    assert all(t.status == "pruned" for t in r.trials
               if (t.params["BM"], t.params["BN"], t.params["BK"]) == (128, 128, 8))
    timed = [t for t in r.trials if t.status == "timed"]
    settled = [t for t in r.trials if t.status in ("error", "pruned")]
    assert settled and timed and len(timed) + len(settled) == len(r.trials) == r.valid
    assert pool.submitted == len(timed)  # the GPUs saw only what built and fitted
    assert r.winner.params["BK"] == 16


def test_a_pool_search_stops_at_max_configs_counting_the_candidates_in_flight():
    space = at.space_of("vectorized", "cuda")
    offer = get_stage("vectorized").offer("cuda")
    pool = LocalPool(slots=4, lag=3)
    r = at.search(space, launch_factory=None, checker=None, timer=None, pool=pool,
                  validate=at.validator(offer), budget_s=1e9, shape=(4096, 4096, 4096),
                  clock=Clock(), max_configs=10)
    assert pool.submitted == 10 and len(r.trials) == 10 and r.stopped == "max-configs"
    assert all(t.status == "timed" for t in r.trials)  # the ones in flight were waited for


# ------------------------------------------------------------------- the protocol, over a store


class FakeSide:
    """A rank's 'GPU': every configuration's time is cost(params); it notes what it ran."""

    def __init__(self, job, log, rank, die_at=None):
        self.job, self.log, self.rank, self.die_at = job, log, rank, die_at
        self.probe, self.limits = None, None

    def launch(self, params):
        return fake_launch_factory()(params)

    def check(self, launch):
        return passes(launch)

    def time(self, params, launch, rep_ms):
        self.log.append((self.rank, dict(params), rep_ms))
        if self.die_at is not None and sum(r == self.rank for r, *_ in self.log) >= self.die_at:
            raise Died()
        time.sleep(0.002)
        return cost(params) * (1.0 + 0.01 * self.rank)  # GPUs of one model differ a little

    def cublas_ms(self):
        return 1.5

    def release(self):
        pass


class Died(BaseException):
    """A rank's process ending mid-candidate (no answer, nothing more)."""


def start_run(n, tmp_path, names=None, die=None):
    """A store, n serving threads (rank r dies at its die[r]-th timing), the coordinator's
    Workers; returns (workers, threads, log)."""
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30),
                           wait_for_workers=False)
    log: list = []
    threads = []
    for rank in range(n):
        client = dist.TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=30))
        world = ranks.World(dist.PrefixStore(w.PREFIX, client), rank, n, rank, False)
        gpu = {"host": "h", "name": (names or [GPU] * n)[rank], "index": rank,
               "uuid": f"GPU-{rank}", "sms": 132}
        die_at = (die or {}).get(rank)

        def run(world=world, gpu=gpu, die_at=die_at, rank=rank):
            try:
                w.serve(world, side_of=lambda job: FakeSide(job, log, rank, die_at), gpu=gpu)
            except Died:
                pass
        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)
    store = dist.PrefixStore(w.PREFIX, server)

    def dead(rank):
        return None if threads[rank].is_alive() else "its process ended with exit status 9"

    return store, dead, threads, log


def test_a_cache_answer_starts_no_rank_and_the_ranks_go_home(tmp_path):
    store, dead, threads, log = start_run(2, tmp_path)
    workers = w.Workers(store, 2, dead, lambda s: None, GPU, 132)
    workers.stop()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()
    assert not workers.started and not log


@pytest.mark.parametrize("n", [2, 3])
def test_a_search_over_ranks_spreads_the_candidates_and_finds_the_one_gpu_winner(n, tmp_path):
    store, dead, threads, log = start_run(n, tmp_path)
    said = []
    workers = w.Workers(store, n, dead, said.append, GPU, 132)
    restrict = {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16), "group": (8,)}
    out = at.tune("vectorized", "cuda", 4096, 4096, 4096, cache=tmp_path / "c.json",
                  workers=workers, restrict=restrict, jobs=1, budget_s=1e9)
    workers.stop()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()
    one = at.tune("vectorized", "cuda", 4096, 4096, 4096, cache=tmp_path / "one.json", gpu=GPU,
                  restrict=restrict, jobs=1, budget_s=1e9, launch_factory=fake_launch_factory(),
                  checker=passes, timer=fake_timer())
    assert out.entry["params"] == one.entry["params"]
    assert out.entry["key"].startswith(GPU + "|")  # the model the ranks published
    short = [(rank, rep) for rank, _p, rep in log if rep == at.SHORT_REP_MS]
    assert {rank for rank, _ in short} == set(range(n))  # every GPU evaluated candidates
    assert len(short) == len(out.result.trials) == len(one.result.trials)
    long_ranks = {rank for rank, _p, rep in log if rep == at.LONG_REP_MS}
    assert len(long_ranks) == 1  # the finalists were timed on one GPU
    assert out.entry["cublas_ms"] == 1.5
    assert not said and not workers.lost


def test_a_rank_that_dies_loses_its_candidate_and_the_search_goes_on(tmp_path):
    store, dead, threads, log = start_run(2, tmp_path, die={1: 3})
    said = []
    workers = w.Workers(store, 2, dead, said.append, GPU, 132)
    restrict = {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16), "group": (8,)}
    out = at.tune("vectorized", "cuda", 4096, 4096, 4096, cache=tmp_path / "c.json",
                  workers=workers, restrict=restrict, jobs=1, budget_s=1e9)
    workers.stop()
    threads[0].join(timeout=10)
    assert 1 in workers.lost and "exit status 9" in workers.lost[1]
    assert len(workers.lost_trials) == 1
    lost = [t for t in out.result.trials if t.status == "error"]
    assert len(lost) == 1 and "rank 1" in lost[0].detail and "stopped" in lost[0].detail
    assert out.entry is not None  # the other GPU finished the search
    assert any("rank 1" in s and "goes on" in s for s in said)


def test_every_gpu_lost_ends_the_search_in_one_sentence(tmp_path):
    store, dead, threads, log = start_run(2, tmp_path, die={0: 1, 1: 1})
    workers = w.Workers(store, 2, dead, lambda s: None, GPU, 132)
    with pytest.raises(LabError, match="every GPU of the run has stopped"):
        at.tune("vectorized", "cuda", 4096, 4096, 4096, cache=tmp_path / "c.json",
                workers=workers, jobs=1, budget_s=1e9,
                restrict={"BM": (64, 128), "BN": (64, 128)})


def test_gpus_of_two_models_are_refused_before_any_work(tmp_path):
    store, dead, threads, log = start_run(2, tmp_path, names=[GPU, "Other GPU 40GB"])
    with pytest.raises(LabError, match="different models"):
        w.Workers(store, 2, dead, lambda s: None, GPU).start()
    for t in threads:  # the ranks were told: they end without work
        t.join(timeout=10)
        assert not t.is_alive()
    assert not log


# ------------------------------------------------------------------------------- the command


def test_a_dry_run_leaves_gpus_aside_and_torchrun_refuses_gpus(monkeypatch, capsys):
    args = ["--stage", "vectorized", "--backend", "triton", "--sizes", "64", "--dry-run"]
    assert at.main([*args, "--gpus", "2"]) == 0
    out = capsys.readouterr()
    assert "--dry-run uses no GPU; --gpus is left aside" in out.err and "vectorized" in out.out
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert at.main(args) == 0  # a rank other than 0 leaves the dry run to rank 0
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert at.main(["--stage", "vectorized", "--sizes", "64", "--gpus", "2"]) == 2
    assert "under torchrun leave it out" in capsys.readouterr().err
