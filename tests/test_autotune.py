"""lab.autotune: the search, its pruning, budget, progress and refinement, the cache, stage:auto.

Everything but the last two tests runs on the CPU: the GPU pieces (launch factory, checker, timer,
resource probe, clock) are plain functions handed to `search` / `tune`, so fakes stand in for them.
"""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from helpers import cpu_only, run_lab
from lab import autotune as at
from lab.tune.seeds import seed_text
from lab.check import CheckResult
from lab.base.errors import CompileError, LabError
from lab.stages import STAGES, Variant, get_stage, parse_variants

GPU = "Fake GPU 80GB"


# ------------------------------------------------------------------------------------ fakes


class Clock:
    """A clock that only moves when the fake timer (or a test) moves it."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def fake_launch_factory(calls=None, resources=None):
    """params -> a launch that remembers its params (and optional resources(params))."""

    def factory(params):
        if calls is not None:
            calls.append(dict(params))

        def launch():
            return None

        launch.params = dict(params)
        launch.resources = resources(params) if resources else None
        return launch

    return factory


def cost(params):
    """A smooth fake landscape over vectorized's / blocktile_2d's CUDA space: best at BM=64, BN=128,
    BK=16, group=8, unroll on, TM=TN=8 (unique minimum 1.0 ms)."""
    return (1.0 + abs(params["BM"] - 64) / 64 + abs(params["BN"] - 128) / 128
            + abs(params["BK"] - 16) / 16 + 0.1 * (params["group"] != 8)
            + 0.3 * (not params["unroll"]) + 0.05 * (params["TM"] != 8)
            + 0.05 * (params["TN"] != 8))


def fake_timer(clock=None, ms=cost, seconds_per_call=0.5, calls=None):
    def timer(params, launch, rep_ms):
        assert launch.params == params  # the launch timed is the one built for these params
        if calls is not None:
            calls.append((dict(params), rep_ms))
        if clock is not None:
            clock.t += seconds_per_call
        return ms(params)

    return timer


def passes(launch):
    return CheckResult(True, 1e-7, 1e-9)


def run_search(stage="vectorized", backend="cuda", **kw):
    space = at.space_of(stage, backend)
    offer = get_stage(stage).offer(backend)
    clock = kw.pop("clock", Clock())
    opts = dict(launch_factory=fake_launch_factory(kw.pop("calls", None)), checker=passes,
                timer=fake_timer(clock), validate=at.validator(offer), clock=clock,
                budget_s=1e9, shape=(4096, 4096, 4096))
    opts.update(kw)
    return at.search(space, **opts)


# ------------------------------------------------------------------------------- the space


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_every_registered_space_pins_numerics_and_starts_at_valid_defaults(stage, backend):
    space = at.space_of(stage, backend)
    declared = [p.name for p in stage.params if backend in p.backends]
    assert list(space.default) == declared  # every parameter of this backend, registry order
    assert "fast_math" not in space.names
    if "fast_math" in declared:
        assert space.pinned["fast_math"] is False and space.default["fast_math"] is False
    assert all(len(p.choices) > 1 for p in space.searched)
    offer = stage.offer(backend)
    assert at.validator(offer, offer.precisions[0])(space.default) is None  # valid defaults
    configs, sampled = space.enumerate()
    assert configs[0] == space.default
    assert sampled == (space.size > at.ENUMERATE_LIMIT)
    assert len(configs) == min(space.size, at.ENUMERATE_LIMIT)


def test_the_triton_space_is_the_twins_own_parameters():
    space = at.space_of("vectorized", "triton")
    assert space.names == ("BM", "BN", "BK", "num_warps", "num_stages")
    assert space.size == 3 * 3 * 3 * 5 * 5 and not space.pinned
    assert "BM 3 x BN 3 x BK 3 x num_warps 5 x num_stages 5" in space.describe()


def test_a_large_space_is_sampled_deterministically_with_the_defaults_first():
    space = at.space_of("vectorized", "cuda")
    a, sampled = space.enumerate(limit=50)
    b, _ = space.enumerate(limit=50)
    assert sampled and a == b and len(a) == 50 and a[0] == space.default
    assert len({space.key(c) for c in a}) == 50
    assert all(c["fast_math"] is False for c in a)


def test_neighbours_change_one_parameter_nearest_choice_first():
    space = at.space_of("vectorized", "cuda")
    ns = list(space.neighbours(space.default))
    assert len(ns) == sum(len(p.choices) - 1 for p in space.searched)
    assert all(sum(n[k] != space.default[k] for k in space.names) == 1 for n in ns)
    bm = [n["BM"] for n in ns if n["BM"] != 128]
    assert bm == [64, 32]  # choices (32, 64, 128): the nearer 64 first
    group = [n["group"] for n in ns if n["group"] != 16]
    assert group == [8, 4, 1]


# ----------------------------------------------------------------------------------- search


def test_search_finds_the_minimum_and_refines_the_finalists():
    calls = []
    r = run_search(timer=fake_timer(None, calls=calls))
    assert r.winner.params["BM"] == 64 and r.winner.params["BK"] == 16
    assert r.winner.params["group"] == 8 and r.winner.params["unroll"] is True
    assert r.winner.best_ms == pytest.approx(1.0)
    assert r.trials[0].params == r.default and r.trials[0].how == "default"
    assert r.default_trial is r.trials[0] and r.default_trial.refined_ms is not None
    long = [p for p, rep in calls if rep == at.LONG_REP_MS]
    # TOP finalists + the defaults, REFINE_ROUNDS times each, in turn
    assert len(long) == (at.TOP + 1) * at.REFINE_ROUNDS
    assert long[:at.TOP + 1] == long[at.TOP + 1:]
    assert all(rep == at.SHORT_REP_MS for _, rep in calls[:len(r.trials)])
    assert r.stopped == "" and r.not_reached == 0 and r.count("timed") == r.valid


def test_validate_prunes_before_anything_is_built():
    calls = []
    r = run_search(calls=calls)
    offer = get_stage("vectorized").offer("cuda")
    assert r.valid == 656 and len(r.invalid) == 208  # vectorized's validate() on its 864 configs
    assert all("vectorized with" in why for _, why in r.invalid)
    why = at.validator(offer)
    assert calls and all(why(p) is None for p in calls)
    assert len(calls) == r.valid


def test_no_launched_configuration_changes_the_numerics():
    calls = []
    run_search(calls=calls, max_configs=200)
    assert calls and all(p["fast_math"] is False for p in calls)


def test_resource_probe_prunes_spills_and_blocks_that_do_not_fit():
    calls = []

    def probe(params):
        res = {"registers": 64, "smem_static": 8192, "smem_dynamic": 0, "spill_bytes": 0,
               "threads": 256, "grid_blocks": 1024}
        if params["BK"] == 32:
            res["spill_bytes"] = 48
        if params["BM"] == 32 and params["BK"] == 16:
            res["registers"], res["threads"] = 128, 1024  # 128K registers: more than 64K
        return res

    r = run_search(calls=calls, probe=probe)
    pruned = [t for t in r.trials if t.status == "pruned"]
    assert pruned and all(t.params not in calls for t in pruned)  # never launched
    assert any("spill" in t.detail for t in pruned)
    assert any("no block fits" in t.detail for t in pruned)
    assert all(p["BK"] != 32 for p in calls)
    assert r.winner.params["BK"] == 16 and r.winner.params["BM"] == 64


def test_resources_reported_by_the_launch_prune_too():
    """Triton: registers and spills are known only once the launcher has compiled."""
    timed = []
    res = lambda p: {"registers": 96, "smem_static": 0, "smem_dynamic": 32768,  # noqa: E731
                     "spill_bytes": 64 if p["num_warps"] == 1 else 0,
                     "threads": 32 * p["num_warps"], "grid_blocks": 1024}
    ms = lambda p: 1 + p["num_stages"] / 10 + abs(p["BM"] - 128) / 128  # noqa: E731
    r = run_search("vectorized", "triton", launch_factory=fake_launch_factory(resources=res),
                   timer=fake_timer(ms=lambda p: timed.append(p) or ms(p)), max_configs=60)
    assert any(t.status == "pruned" and t.params["num_warps"] == 1 for t in r.trials)
    assert all(p["num_warps"] != 1 for p in timed)
    assert r.winner.params["num_stages"] == 1 and r.winner.params["BM"] == 128
    assert r.count("timed") == 60  # max-configs counts launched candidates; pruned ones are free
    assert r.stopped == "max-configs"


def test_a_wrong_configuration_is_discarded_and_reported():
    def checker(launch):
        if launch.params["BM"] == 64 and launch.params["BK"] == 16:
            return CheckResult(False, 0.3, 1e-3, "relative error 3.00e-01 exceeds 1.0e-05")
        return CheckResult(True, 1e-7, 1e-9)

    timed = []
    r = run_search(checker=checker, timer=fake_timer(ms=lambda p: timed.append(p) or cost(p)))
    wrong = [t for t in r.trials if t.status == "wrong"]
    assert wrong and all(t.ms is None for t in wrong)
    assert not any(p["BM"] == 64 and p["BK"] == 16 for p in timed)  # checked before timed
    assert not (r.winner.params["BM"] == 64 and r.winner.params["BK"] == 16)
    entry = at.make_entry(r, GPU, budget_s=1e9, versions_={})
    lines = "\n".join(at.report_lines(at.Outcome(entry, r, False), "vectorized cuda"))
    assert "WRONG (discarded): BM=64" in lines and "exceeds 1.0e-05" in lines
    assert entry["configs_wrong"] == len(wrong)


def test_a_build_error_fails_one_trial_and_the_search_goes_on():
    def factory(params):
        if params["group"] == 1:
            raise CompileError("NVRTC could not compile vectorized.cu\nlog line")
        return fake_launch_factory()(params)

    r = run_search(launch_factory=factory)
    errors = [t for t in r.trials if t.status == "error"]
    assert errors and all(t.params["group"] == 1 for t in errors)
    assert errors[0].detail == "NVRTC could not compile vectorized.cu"  # the first line only
    assert r.winner is not None and r.winner.params["group"] == 8


def test_triton_out_of_resources_is_pruned_not_an_error():
    class OutOfResources(Exception):  # triton.runtime.errors.OutOfResources, by name
        pass

    def factory(params):
        if params["num_stages"] == 5:
            raise OutOfResources("out of resource: shared memory, Required: 262144\nmore")
        return fake_launch_factory()(params)

    r = run_search("vectorized", "triton", launch_factory=factory, max_configs=40,
                   timer=fake_timer(ms=lambda p: 1 + p["num_stages"] / 10))
    pruned = [t for t in r.trials if t.status == "pruned"]
    assert pruned and all(t.params["num_stages"] == 5 for t in pruned)
    assert pruned[0].detail == "out of resource: shared memory, Required: 262144"
    assert r.count("error") == 0


def test_ctrl_c_stops_the_search_and_keeps_the_best_so_far():
    def timer(params, launch, rep_ms):
        timer.n += 1
        if timer.n == 6:
            raise KeyboardInterrupt
        return cost(params)

    timer.n = 0
    r = run_search(timer=timer)
    assert r.stopped == "interrupted" and r.count("timed") == 5
    assert r.trials[5].status == "error" and r.trials[5].detail == "interrupted"
    assert r.winner is not None and r.winner.refined_ms is not None


def test_the_budget_stops_the_search_and_the_refinement_still_runs():
    clock = Clock()
    r = run_search(clock=clock, timer=fake_timer(clock, seconds_per_call=1.0), budget_s=20)
    # 80% of 20 s searching at 1 s per candidate: 16 candidates, then TOP + defaults refined
    assert len(r.trials) == 16 and r.stopped == "budget"
    assert r.not_reached == r.valid - 16
    assert r.winner is not None and r.winner.refined_ms is not None
    assert r.elapsed_s == pytest.approx(16 + (at.TOP + 1) * at.REFINE_ROUNDS)


def test_even_a_zero_budget_tries_the_defaults():
    r = run_search(budget_s=1e-9, clock=Clock())
    assert len(r.trials) == 1 and r.trials[0].params == r.default
    assert r.winner is r.trials[0]


def test_max_configs_counts_launches():
    r = run_search(max_configs=7)
    assert len(r.trials) == 7 and r.stopped == "max-configs"


def test_the_order_is_defaults_then_neighbours_of_the_best_and_a_shuffled_rest():
    r = run_search(max_configs=30)
    hows = [t.how for t in r.trials]
    assert hows[0] == "default"
    assert hows[1:4] == ["neighbour", "shuffled", "neighbour"]
    assert hows.count("shuffled") == 10  # every third pick
    # a neighbour differs from the best at the time in one parameter
    second = r.trials[1]
    space = at.space_of("vectorized", "cuda")
    assert sum(second.params[k] != r.default[k] for k in space.names) == 1


def test_the_search_is_deterministic_given_the_same_timings():
    a = run_search(max_configs=40)
    b = run_search(max_configs=40)
    assert [t.params for t in a.trials] == [t.params for t in b.trials]
    assert a.winner.params == b.winner.params


def test_refinement_decides_between_close_finalists():
    """A configuration that looked fastest in the short timing but is slower in the long one
    loses to the finalist that is faster when timed longer."""
    lucky = {"BM": 64, "BN": 128, "BK": 16, "group": 4, "TM": 8, "TN": 8}

    def ms(params, rep_ms):
        base = cost(params)
        if all(params[k] == v for k, v in lucky.items()) and params["unroll"]:
            return 0.9 if rep_ms == at.SHORT_REP_MS else 1.05
        return base

    r = run_search(timer=lambda p, launch, rep: ms(p, rep))
    assert r.ranked[0] is r.winner
    assert r.winner.params["group"] == 8 and r.winner.best_ms == pytest.approx(1.0)
    lucky_trial = next(t for t in r.trials if all(t.params[k] == v for k, v in lucky.items())
                       and t.params["unroll"])
    assert lucky_trial.ms == pytest.approx(0.9) and lucky_trial.refined_ms == pytest.approx(1.05)


def test_progress_reports_every_trial_and_every_refinement(capsys):
    events = []
    r = run_search(max_configs=5, on_progress=lambda *e: events.append(e))
    search = [e for e in events if e[0] == "search"]
    refine = [e for e in events if e[0] == "refine"]
    assert [e[1] for e in search] == [1, 2, 3, 4, 5]
    assert all(e[2] == r.valid for e in search)
    assert search[-1][4] is not None and search[-1][4].status == "timed"  # the best so far
    assert [e[1] for e in refine] == list(range(1, len(refine) + 1))
    assert len(refine) == len(r.finalists) * at.REFINE_ROUNDS
    printer = at.plain_progress("vectorized cuda nn 64x64x64", sys.stdout)
    for e in events:
        printer(*e)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(events)
    assert out[0].startswith("  vectorized cuda nn 64x64x64 search [1/656] BM=128,BN=128")
    assert out[-1].split(": ")[-1].startswith("refined ")


def test_only_the_finalists_and_the_defaults_launches_stay_alive():
    """Launches hold compiled kernels: the search keeps only those it may refine."""
    import weakref

    alive = []

    def factory(params):
        launch = fake_launch_factory()(params)
        refs.append(weakref.ref(launch))
        alive.append(sum(r() is not None for r in refs))
        return launch

    refs = []
    r = run_search(launch_factory=factory, max_configs=25)
    assert max(alive) <= at.TOP + 2  # the finalists so far, the defaults and the new one
    refined = [t for t in r.trials if t.refined_ms is not None]
    assert len(refined) == at.TOP + 1  # the finalists and the defaults


# -------------------------------------------------------------------------- bucket and cache


@pytest.mark.parametrize("shape,expected", [
    ((4096, 4096, 4096), "4096x4096x4096:a128"),
    ((1024, 1024, 1024), "1024x1024x1024:a128"),
    ((1025, 1025, 1025), "2048x2048x2048:a1"),
    ((7919, 6007, 3001), "8192x8192x4096:a1"),
    ((4100, 4100, 4100), "8192x8192x8192:a4"),
    ((4096, 2048, 1000), "4096x2048x1024:a4"),
    ((1, 1, 1), "1x1x1:a1"),
    ((3, 130, 2), "4x256x2:a1"),
])
def test_shape_buckets(shape, expected):
    assert at.bucket(*shape) == expected


def test_cache_key_names_gpu_stage_backend_bucket_precision_layout():
    key = at.cache_key(GPU, "vectorized", "triton", 1025, 1025, 1025, "fp32", "tn")
    assert key == f"{GPU}|vectorized|triton|2048x2048x2048:a1|fp32|tn"


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv(at.CACHE_ENV, raising=False)
    assert at.cache_path() == Path.home() / ".cache" / "matmul-lab" / "autotune.json"
    monkeypatch.setenv(at.CACHE_ENV, str(tmp_path / "env.json"))
    assert at.cache_path() == tmp_path / "env.json"
    assert at.cache_path(tmp_path / "flag.json") == tmp_path / "flag.json"  # --cache wins


def fake_tune(cache, clock=None, **kw):
    clock = clock or Clock()
    calls = kw.pop("calls", [])
    opts = dict(layout="nn", precision="fp32", budget_s=30, cache=cache, gpu=GPU,
                launch_factory=fake_launch_factory(), checker=passes,
                timer=fake_timer(clock, calls=calls), clock=clock)
    opts.update(kw)
    return at.tune("vectorized", "cuda", 4096, 4096, 4096, **opts)


def test_tune_stores_the_winner_and_the_cache_answers_next_time(tmp_path):
    cache = tmp_path / "sub" / "autotune.json"
    calls = []
    out = fake_tune(cache, calls=calls)
    assert not out.cached and out.entry is not None and calls
    data = json.loads(cache.read_text())
    assert data["format"] == at.CACHE_FORMAT and data["version"] == at.CACHE_VERSION
    e = data["entries"][f"{GPU}|vectorized|cuda|4096x4096x4096:a128|fp32|nn"]
    assert e["params"] == out.result.winner.params and e["params"]["fast_math"] is False
    assert e["median_ms"] == out.result.winner.best_ms
    assert e["default_ms"] == out.result.default_trial.best_ms
    assert e["default_params"] == at.space_of("vectorized", "cuda").default
    assert e["configs_tried"] == out.result.count("timed") > 1
    assert e["speedup"] == pytest.approx(e["default_ms"] / e["median_ms"])
    for k in ("date", "torch", "triton", "shape", "bucket", "budget_s", "stopped"):
        assert k in e
    assert e["shape"] == [4096, 4096, 4096] and e["torch"] == torch.__version__
    assert list(tmp_path.glob("sub/.*tmp")) == []  # the temporary file was renamed
    # the same bucket again: answered by the cache, nothing timed
    calls.clear()
    again = fake_tune(cache, calls=calls)
    assert again.cached and again.result is None and not calls and again.entry == e
    lines = at.report_lines(again, "vectorized cuda nn 4096x4096x4096")
    assert "cached" in lines[1] and "--retune" in lines[1]


def test_retune_ignores_the_cache_and_replaces_the_entry(tmp_path):
    cache = tmp_path / "autotune.json"
    first = fake_tune(cache, max_configs=3)
    calls = []
    again = fake_tune(cache, retune=True, calls=calls)
    assert not again.cached and calls
    entries = at.load_cache(cache)
    assert len(entries) == 1
    (entry,) = entries.values()
    assert entry["configs_tried"] == again.result.count("timed") != first.entry["configs_tried"]


def test_other_keys_survive_a_store(tmp_path):
    cache = tmp_path / "autotune.json"
    fake_tune(cache, max_configs=2)
    at.tune("vectorized", "cuda", 1025, 1025, 1025, cache=cache, gpu=GPU, max_configs=2,
            launch_factory=fake_launch_factory(), checker=passes, timer=fake_timer())
    assert sorted(e["bucket"] for e in at.load_cache(cache).values()) == [
        "2048x2048x2048:a1", "4096x4096x4096:a128"]


@pytest.mark.parametrize("text,words", [
    ("{not json", "is not valid JSON (line 1)"),
    ('{"entries": []}', "is not an autotune cache"),
    ('[1, 2]', "is not an autotune cache"),
    (json.dumps({"format": at.CACHE_FORMAT, "version": 99, "entries": {}}), "format version 99"),
])
def test_a_corrupted_cache_is_one_sentence(tmp_path, text, words):
    cache = tmp_path / "autotune.json"
    cache.write_text(text)
    with pytest.raises(at.CacheError) as info:
        at.load_cache(cache)
    msg = str(info.value)
    assert words in msg and str(cache) in msg and "\n" not in msg
    assert isinstance(info.value, LabError)
    assert cache.read_text() == text  # reading never touches it


def test_a_corrupted_cache_is_kept_aside_not_overwritten(tmp_path):
    cache = tmp_path / "autotune.json"
    cache.write_text("{half a file")
    out = fake_tune(cache, max_configs=2)
    backups = list(tmp_path.glob("autotune.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text() == "{half a file"
    assert "kept it as" in out.note and str(backups[0]) in out.note
    assert len(at.load_cache(cache)) == 1


def test_resolve_returns_the_cached_winner_for_auto_rows(tmp_path):
    cache = tmp_path / "autotune.json"
    out = fake_tune(cache)
    winner = out.entry["params"]
    for shape in ((4096, 4096, 4096), (3072, 2176, 4096)):  # the same bucket
        got = at.resolve("vectorized", "cuda", *shape, "nn", "fp32", cache=cache, gpu=GPU)
        assert got == winner
    assert at.resolve("vectorized", "cuda", 4096, 4096, 4096, "tn", cache=cache, gpu=GPU) is None
    assert at.resolve("vectorized", "triton", 4096, 4096, 4096, cache=cache, gpu=GPU) is None
    assert at.resolve("vectorized", "cuda", 4096, 4096, 4096, cache=cache, gpu="Other") is None
    assert at.resolve("vectorized", "cuda", 4095, 4096, 4096, cache=cache, gpu=GPU) is None  # a4
    params, note = at.lookup("vectorized", "cuda", 4096, 4096, 4096, cache=cache, gpu=GPU)
    assert params == winner and note.startswith("auto: cached winner for 4096x4096x4096:a128")
    params, note = at.lookup("vectorized", "cuda", 1025, 1025, 1025, cache=cache, gpu=GPU)
    assert params is None and "defaults run" in note and "--sizes 1025x1025x1025" in note
    assert "changed since" not in at.lookup("vectorized", "cuda", 4096, 4096, 4096, cache=cache,
                                            gpu=GPU)[1]
    assert out.entry["source"] == at.source_hash("vectorized", "cuda")


def test_an_entry_tuned_for_other_kernel_sources_still_resolves_and_says_so(tmp_path):
    cache = tmp_path / "autotune.json"
    out = fake_tune(cache)
    data = json.loads(cache.read_text())
    (entry,) = data["entries"].values()
    entry["source"] = "0123456789ab"
    cache.write_text(json.dumps(data))
    params, note = at.lookup("vectorized", "cuda", 4096, 4096, 4096, cache=cache, gpu=GPU)
    assert params == out.entry["params"] and "changed since it was tuned (--retune)" in note


def test_resolve_without_a_gpu_or_with_a_stale_entry_falls_back(tmp_path):
    cache = tmp_path / "autotune.json"
    fake_tune(cache)
    params, note = at.lookup("vectorized", "cuda", 4096, 4096, 4096, cache=cache, mode="cpu")
    assert params is None and "no GPU" in note
    data = json.loads(cache.read_text())
    (entry,) = data["entries"].values()
    entry["params"]["BM"] = 96  # not a choice of the registry (any more)
    cache.write_text(json.dumps(data))
    params, note = at.lookup("vectorized", "cuda", 4096, 4096, 4096, cache=cache, gpu=GPU)
    assert params is None and "no longer fits the registry" in note and "BM=96" in note


def test_resolve_on_a_corrupted_cache_is_one_sentence(tmp_path):
    cache = tmp_path / "autotune.json"
    cache.write_text("nope")
    with pytest.raises(LabError, match="not valid JSON"):
        at.resolve("vectorized", "cuda", 64, 64, 64, cache=cache, gpu=GPU)


def test_resolve_variant_turns_auto_into_the_winner(tmp_path):
    cache = tmp_path / "autotune.json"
    out = fake_tune(cache)
    (auto,) = parse_variants(["vectorized:auto"])
    v, note = at.resolve_variant(auto, "cuda", 4096, 4096, 4096, "nn", cache=cache, gpu=GPU)
    assert not v.auto and v.params_for("cuda") == out.entry["params"]
    tri = v.params_for("triton")  # the tuned tile, the Triton-only knobs at their defaults
    assert (tri["num_warps"], tri["num_stages"]) == (8, 1)
    assert note.startswith("auto: cached winner")
    v, note = at.resolve_variant(auto, "triton", 4096, 4096, 4096, "nn", cache=cache, gpu=GPU)
    assert v.params == get_stage("vectorized").defaults() and "defaults run" in note
    (plain,) = parse_variants(["vectorized:BM=64"])
    assert at.resolve_variant(plain, "cuda", 4096, 4096, 4096, cache=cache, gpu=GPU) == (plain, "")


# --------------------------------------------------------------------------- stage:auto parse


def test_stage_auto_is_a_variant_flagged_auto():
    vs = parse_variants(["vectorized:auto,blocktile_2d", "vectorized", "vectorized:AUTO"])
    assert [(v.label, v.auto) for v in vs] == [("vectorized:auto", True),
                                               ("blocktile_2d", False), ("vectorized", False)]
    assert vs[0].params == get_stage("vectorized").defaults()
    # normal variants are unchanged
    (v,) = parse_variants(["tiled:tile=16"])
    assert v.label == "tiled:tile=16" and v.auto is False
    assert Variant(get_stage("tiled"), get_stage("tiled").defaults()).label == "tiled"


@pytest.mark.parametrize("spec,words", [
    ("vectorized:auto,BM=64", "cannot be combined with explicit ones (BM=64)"),
    ("vectorized:BM=64,auto", "cannot be combined with explicit ones (BM=64)"),
    ("vectorized,auto", "'auto' follows a stage name"),
    ("auto", "'auto' follows a stage name"),
])
def test_stage_auto_takes_no_explicit_parameters(spec, words):
    with pytest.raises(LabError) as info:
        parse_variants([spec])
    assert words in str(info.value) and "\n" not in str(info.value)


# -------------------------------------------------------------------------- restricted spaces

SPLITK_SHAPE = (320, 192, 786432)  # 6 tiles of 128 x 128, K long: the split-K case
# splitk's choices when the slow 45 s search was observed (the registry may offer more): the
# seed tests that expect exact picks restrict to them, so they do not move with the registry
SPLITS = {"splitk": (1, 2, 3, 4, 6, 8, 16, 32)}


def registry_param(stage, name):
    return next(p for p in get_stage(stage).params if p.name == name)


def test_a_restriction_narrows_choices_and_moves_the_defaults_inside():
    space = at.space_of("warptiling", "cuda", {"splitk": (16, 32), "BM": (128, 64)})
    by_name = {p.name: p for p in space.searched}
    assert by_name["splitk"].choices == (16, 32) and by_name["BM"].choices == (64, 128)
    assert space.default["splitk"] == 16  # the registry default 1 is not allowed: the first given
    assert space.default["BM"] == 128  # the registry default is allowed: kept
    full = at.space_of("warptiling", "cuda").size
    n_split = len(registry_param("warptiling", "splitk").choices)
    assert space.size == full // n_split * 2 // 3 * 2
    assert space.restricted == {"BM": (64, 128), "splitk": (16, 32)}
    assert "; restricted: BM=64|128, splitk=16|32; pinned: fast_math=0" in space.describe()
    pinned = at.space_of("warptiling", "cuda", {"splitk": (32,)})
    assert "splitk" not in pinned.names and pinned.pinned["splitk"] == 32
    assert pinned.default["splitk"] == 32 and "restricted: splitk=32" in pinned.describe()
    # a Triton-only name is ignored by the CUDA space (restricted only where it exists)
    assert at.space_of("warptiling", "cuda", {"BLOCK_M": (64,)}).restricted == {}
    assert at.space_of("warptiling", "triton", {"BLOCK_M": (64,)}).pinned["BLOCK_M"] == 64


def test_a_restricted_default_that_validate_refuses_moves_to_the_nearest_valid_point():
    offer = get_stage("warptiling").offer("cuda")
    why = at.validator(offer)
    plain = at.space_of("warptiling", "cuda", {"WM": (128,)})
    assert why(plain.default) is not None  # WM=128 with WN=64: 256 accumulators a thread
    space = at.space_of("warptiling", "cuda", {"WM": (128,)}, validate=why)
    assert why(space.default) is None and space.default["WM"] == 128
    assert sum(space.default[k] != plain.default[k] for k in space.names) == 1
    configs, _ = space.enumerate(limit=100)
    assert configs[0] == space.default


@pytest.mark.parametrize("restrict,words", [
    ({"bogus": (1,)}, "stage warptiling has no parameter 'bogus'"),
    ({"splitk": (5,)}, "splitk=5 is not a choice of stage warptiling"),
    ({"unroll": (1,)}, "unroll=1 is not a choice"),  # an int where the registry has a bool
    ({"fast_math": (True,)}, "fast_math changes the numerics"),
])
def test_space_of_refuses_a_restriction_outside_the_registry(restrict, words):
    with pytest.raises(LabError) as info:
        at.space_of("warptiling", "cuda", restrict)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_stage_restrictions_parse_to_the_types_of_the_defaults():
    both = ("cuda", "triton")
    (wt, r), = at._parse_stages("warptiling:splitk=16|32|16,BM=64|128", ("cuda",))
    assert wt.name == "warptiling" and r == {"splitk": (16, 32), "BM": (64, 128)}
    (_, r), = at._parse_stages("vectorized:unroll=0|true,BK=16", both)
    assert r == {"unroll": (False, True), "BK": (16,)}
    assert type(r["BK"][0]) is int
    (_, r), = at._parse_stages("bank_conflicts:fix=pad|swizzle", both)
    assert r == {"fix": ("pad", "swizzle")}
    out = at._parse_stages("tiled,warptiling:splitk=8,BLOCK_M=64,vectorized", both)
    assert [(s.name, r) for s, r in out] == [
        ("tiled", {}), ("warptiling", {"splitk": (8,), "BLOCK_M": (64,)}), ("vectorized", {})]
    # several backends: each restricted where it exists
    assert at._for_backend(get_stage("warptiling"), "cuda", out[1][1]) == {"splitk": (8,)}
    assert at._for_backend(get_stage("warptiling"), "triton", out[1][1]) == out[1][1]
    # the same stage twice, the same way, is one stage
    assert len(at._parse_stages("warptiling:splitk=8,warptiling:splitk=8", both)) == 1


@pytest.mark.parametrize("text,backends,words", [
    ("warptiling:BLOCK_M=64", ("cuda",),
     "stage warptiling has no cuda parameter 'BLOCK_M' (BLOCK_M is a triton parameter); its cuda "
     "parameters are BM, BN"),
    ("warptiling:nope=1", ("cuda", "triton"), "has no cuda or triton parameter 'nope'"),
    ("warptiling:splitk=16|32|5", ("cuda",),
     "splitk=5 is not a choice of stage warptiling; the registry's splitk choices are "
     + ", ".join(map(str, registry_param("warptiling", "splitk").choices))
     + ", and the tuner searches only those"),
    ("warptiling:splitk=two", ("cuda",), "splitk=two is not a choice"),
    ("vectorized:unroll=maybe", ("cuda",), "unroll=maybe is not a choice"),
    ("warptiling:splitk", ("cuda",), "'splitk' is not a restriction; write name=value"),
    ("warptiling:splitk=", ("cuda",), "is not a restriction"),
    ("warptiling:splitk=16||32", ("cuda",), "is not a restriction"),
    ("warptiling:", ("cuda",), "'' is not a restriction"),
    ("warptiling:splitk=16,splitk=32", ("cuda",), "splitk is restricted twice"),
    ("warptiling:fast_math=1", ("cuda",), "fast_math changes the numerics"),
    ("all:BM=64", ("cuda",), "'all' takes no restrictions"),
    ("vectorized:auto", ("cuda",), "vectorized:auto is for lab.compare rows"),
    ("BM=64", ("cuda",), "a restriction follows a stage name"),
    (":BM=64", ("cuda",), "a restriction follows a stage name"),
    ("warptiling,warptiling:splitk=8", ("cuda",), "lists warptiling twice"),
    ("all,warptiling:splitk=8", ("cuda",), "lists warptiling twice"),
])
def test_bad_restrictions_are_one_sentence(text, backends, words):
    with pytest.raises(LabError) as info:
        at._parse_stages(text, backends)
    assert words in str(info.value) and "\n" not in str(info.value)


def warptiling_cost(params):
    """A fake landscape over warptiling's CUDA space at SPLITK_SHAPE: splitk=32 on 128 x 128 tiles
    is the unique minimum (1.0 ms); splitk=1 is slow; splitk=0 (the registry's default) costs
    what the split it resolves to at SPLITK_SHAPE on 132 SMs costs."""
    split = get_stage("warptiling").offer("cuda").resolve(params, *SPLITK_SHAPE, "fp32",
                                                          132)["splitk"]
    return (1.0 + 0.5 * abs(math.log2(split / 32)) + 0.2 * (params["BM"] != 128)
            + 0.2 * (params["BN"] != 128) + 0.1 * (params["BK"] != 16)
            + 0.05 * (params["group"] != 16) + 0.1 * (not params["unroll"])
            + 0.01 * (params["WNITER"] != 4) + 0.01 * (params["frags"] != 2))


def run_warptiling(restrict=None, **kw):
    space = at.space_of("warptiling", "cuda", restrict)
    offer = get_stage("warptiling").offer("cuda")
    opts = dict(launch_factory=fake_launch_factory(kw.pop("calls", None)), checker=passes,
                timer=fake_timer(ms=warptiling_cost), validate=at.validator(offer),
                budget_s=1e9, shape=SPLITK_SHAPE, max_configs=30)
    opts.update(kw)
    return at.search(space, **opts)


def test_a_restricted_search_tries_only_the_restricted_values():
    calls = []
    r = run_warptiling({"splitk": (16, 32), "BM": (64, 128)}, calls=calls, max_configs=40)
    assert calls and all(p["splitk"] in (16, 32) and p["BM"] in (64, 128) for p in calls)
    assert r.trials[0].how == "default" and r.trials[0].params["splitk"] == 16
    assert "restricted: BM=64|128, splitk=16|32" in r.space
    assert r.winner.params["splitk"] == 32 and r.winner.params["BM"] == 128


def test_a_restricted_tune_keeps_the_key_and_shows_the_restriction_in_the_entry(tmp_path):
    cache = tmp_path / "autotune.json"
    kw = dict(cache=cache, gpu=GPU, max_configs=6, launch_factory=fake_launch_factory(),
              checker=passes, timer=fake_timer(ms=warptiling_cost))
    out = at.tune("warptiling", "cuda", *SPLITK_SHAPE, restrict={"splitk": (16, 32)}, **kw)
    e = out.entry
    assert e["key"] == at.cache_key(GPU, "warptiling", "cuda", *SPLITK_SHAPE)  # no restriction
    assert e["restricted"] == {"splitk": [16, 32]} and "restricted: splitk=16|32" in e["space"]
    assert e["params"]["splitk"] in (16, 32) and e["default_params"]["splitk"] == 16
    # the cache answers the key, restricted or not, until --retune
    again = at.tune("warptiling", "cuda", *SPLITK_SHAPE, restrict={"splitk": (8,)}, **kw)
    assert again.cached and again.entry == e and "--retune" in again.note
    plain = at.tune("warptiling", "cuda", *SPLITK_SHAPE, retune=True, **kw)
    assert not plain.cached and plain.entry["restricted"] is None
    assert at.load_cache(cache)[e["key"]]["restricted"] is None  # replaced, as --retune does
    with pytest.raises(LabError, match="splitk=5 is not a choice"):
        at.tune("warptiling", "cuda", *SPLITK_SHAPE, restrict={"splitk": (5,)}, **kw)


def test_dry_run_shows_the_restricted_space():
    r = cli("--stage", "warptiling:splitk=16|32,BM=64|128", "--backend", "cuda", "--sizes",
            "320x192x786432", "--dry-run", "--max-configs", "1")
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())  # notes are wrapped to the terminal's width
    assert "restricted: BM=64|128, splitk=16|32; pinned: fast_math=0" in flat
    assert "1. BM=128,BN=128,BK=16," in r.stdout and "splitk=16: " in r.stdout
    assert "split-K seeds (tiles x splitk near 1x, 2x, 4x 132 SMs): BM=128,BN=128,splitk=32" \
        in flat


# ----------------------------------------------------------------------------- split-K seeds


def seed_tiles(seeds, backend="cuda"):
    bm, bn = get_stage("warptiling").offer(backend).tuning.tile
    return [(s[bm], s[bn], s["splitk"]) for s in seeds]


def test_splitk_seeds_aim_tiles_times_splitk_at_multiples_of_the_sm_count():
    space = at.space_of("warptiling", "cuda", SPLITS)
    # 128 x 128: 3 x 2 = 6 tiles; 64 x 64: 5 x 3 = 15 tiles; targets 132, 264, 528
    seeds = at.splitk_seeds(space, *SPLITK_SHAPE, sm_count=132)
    assert seed_tiles(seeds) == [(128, 128, 16), (128, 128, 32), (64, 64, 8), (64, 64, 16),
                                 (64, 64, 32)]
    assert all(s == space.full(s) for s in seeds)  # every parameter, the others at the defaults
    assert all(s[k] == space.default[k] for s in seeds for k in ("BK", "WM", "group", "unroll"))
    assert seed_tiles(at.splitk_seeds(space, *SPLITK_SHAPE, sm_count=16)) == [
        (128, 128, 3), (128, 128, 6), (128, 128, 8), (64, 64, 1), (64, 64, 2), (64, 64, 4)]
    tri = at.space_of("warptiling", "triton", SPLITS)
    assert seed_tiles(at.splitk_seeds(tri, *SPLITK_SHAPE), "triton")[:2] == [
        (128, 128, 16), (128, 128, 32)]


@pytest.mark.parametrize("shape,sms", [(SPLITK_SHAPE, 132), (SPLITK_SHAPE, 114),
                                       ((1025, 1025, 1025), 132), ((640, 512, 65536), 78)])
def test_each_seed_is_the_nearest_split_in_ratio_among_the_registry_choices(shape, sms):
    M, N, K = shape
    space = at.space_of("warptiling", "cuda")
    splits = [s for s in registry_param("warptiling", "splitk").choices  # 0: automatic, no seed
              if s == 1 or (s > 1 and K // s >= at.SEED_MIN_SPLIT_K)]
    edges = [sorted((c for c in registry_param("warptiling", e).choices
                     if c <= space.default[e]), reverse=True)[:at.SEED_TILES] for e in ("BM", "BN")]
    expected = []
    for bm, bn in zip(*edges):
        tiles = -(-M // bm) * -(-N // bn)
        for f in at.SEED_TARGETS:
            best = min(splits, key=lambda c: (abs(math.log(tiles * c / (f * sms))), c))
            if (bm, bn, best) not in expected:  # (the defaults' splitk is 0, not 1)
                expected.append((bm, bn, best))
    assert seed_tiles(at.splitk_seeds(space, M, N, K, sm_count=sms)) == expected


def test_splitk_seeds_keep_every_split_long_enough():
    space = at.space_of("warptiling", "cuda")
    # K = 1025: splits of at least SEED_MIN_SPLIT_K = 256 allow splitk up to 4
    seeds = at.splitk_seeds(space, 1025, 1025, 1025, sm_count=132)
    assert seeds and all(1025 // s["splitk"] >= at.SEED_MIN_SPLIT_K for s in seeds)


@pytest.mark.parametrize("stage,restrict,shape", [
    ("warptiling", None, (4096, 4096, 4096)),  # 1024 tiles: the grid fills the GPU
    ("warptiling", None, (320, 192, 500)),  # K too short for two splits of 256
    ("warptiling", {"splitk": (16,)}, SPLITK_SHAPE),  # splitk pinned: nothing to seed
    ("vectorized", None, SPLITK_SHAPE),  # no splitk parameter
])
def test_no_seeds_where_the_rule_does_not_apply(stage, restrict, shape):
    assert at.splitk_seeds(at.space_of(stage, "cuda", restrict), *shape) == []


def test_persistent_seeds_its_split_over_the_defaults_tile():
    """persistent's tile is 64 x CONSUMERS rows by BN columns (Tuning.tile_of): its seeds keep the
    defaults and set SPLITK so that tiles x SPLITK lands near 1x, 2x, 4x the SMs, or, where the
    tiles pass a round of the SMs unevenly, STREAMK (Tuning.streamk)."""
    space = at.space_of("persistent", "cuda")
    assert space.tuning.split == "SPLITK" and space.tuning.tile_of({}) == (128, 256)
    # 256 x 2304 with K = 16384: 2 x 9 = 18 tiles of 128 x 256; SPLITK choices 1 ... 16
    seeds = at.splitk_seeds(space, 256, 2304, 16384, sm_count=132)
    assert [s["SPLITK"] for s in seeds] == [8, 16]  # 144 units near 132; 288 near 264 and 528
    default = space.default
    for s in seeds:
        assert {k: v for k, v in s.items() if k != "SPLITK"} == \
            {k: v for k, v in default.items() if k != "SPLITK"}
    # 4096^3: 512 tiles, no split; three rounds of 132 and 116 more: stream-K
    assert [s["STREAMK"] for s in at.splitk_seeds(space, 4096, 4096, 4096, sm_count=132)] == [1]
    # 256 x 22016: 2 x 86 = 172 tiles, a round of 132 and 40 more: stream-K, the split left at 1
    (seed,) = at.splitk_seeds(space, 256, 22016, 4096, sm_count=132)
    assert seed["STREAMK"] == 1 and {k: v for k, v in seed.items() if k != "STREAMK"} == \
        {k: v for k, v in default.items() if k != "STREAMK"}
    assert seed_text(seed, space.tuning) == "STREAMK=1"
    assert seed_text(seeds[0], space.tuning) == "SPLITK=8"
    assert at.splitk_seeds(space, 128 * 132, 256, 4096, sm_count=132) == []  # whole rounds
    # a 64 x 128 tile (one consumer warpgroup, BN 128) counts 4 x 18 = 72 tiles: 2, 4 and 8 splits
    small = at.space_of("persistent", "cuda", {"CONSUMERS": (1,), "BN": (128,)})
    assert [s["SPLITK"] for s in at.splitk_seeds(small, 256, 2304, 16384, sm_count=132)] == \
        [2, 4, 8]


def test_seeds_follow_a_restriction_and_the_sm_count_of_the_limits():
    space = at.space_of("warptiling", "cuda", {"splitk": (1, 8, 16), "BM": (128,)})
    seeds = at.splitk_seeds(space, *SPLITK_SHAPE)
    assert {s["splitk"] for s in seeds} <= {8, 16} and {s["BM"] for s in seeds} == {128}
    assert {s["BN"] for s in seeds} == {128, 64}

    class Limits:  # lab.occupancy's limits do not carry an SM count yet; one that does is used
        sm_count = 16

    r = run_warptiling(SPLITS, limits=Limits(), max_configs=3)
    assert r.sm_count == 16 and seed_tiles(r.seeds)[0] == (128, 128, 3)
    assert run_warptiling(max_configs=3, sm_count=66).sm_count == 66


def test_seeds_come_right_after_the_defaults_and_find_the_split():
    r = run_warptiling(SPLITS, max_configs=8)
    hows = [t.how for t in r.trials]
    assert hows[:6] == ["default"] + ["seed"] * 5 and "seed" not in hows[6:]
    assert [t.params for t in r.trials[1:6]] == r.seeds
    assert r.winner.params["splitk"] == 32 and r.winner.params["BM"] == 128
    assert r.extra >= 1  # seeds outside the sample are counted like neighbours outside it
    lines = "\n".join(at.report_lines(at.Outcome(at.make_entry(r, GPU, budget_s=1, versions_={}),
                                                 r, False), "warptiling cuda"))
    assert "split-K seeds (tiles x splitk near 1x, 2x, 4x 132 SMs), tried after the defaults: " \
           "BM=128,BN=128,splitk=16; BM=128,BN=128,splitk=32" in lines
    # without the seeds (no shape), the same budget never reaches splitk=32
    assert run_warptiling(SPLITS, max_configs=8, shape=(0, 0, 0)).winner.params["splitk"] != 32
    # with the registry's own choices, the seeds still come first
    n = len(at.splitk_seeds(at.space_of("warptiling", "cuda"), *SPLITK_SHAPE))
    r = run_warptiling(max_configs=n + 2)
    assert [t.how for t in r.trials] == ["default"] + ["seed"] * n + ["neighbour"]


def test_seeds_are_pruned_checked_and_validated_like_every_candidate():
    def probe(params):
        return {"registers": 64, "smem_static": 8192, "smem_dynamic": 0, "threads": 128,
                "spill_bytes": 32 if params["splitk"] == 8 else 0, "grid_blocks": 64}

    def checker(launch):
        return launch.params["splitk"] != 16

    offer = get_stage("warptiling").offer("cuda")
    plain = at.validator(offer)

    def validate(params):  # refuses the smaller seeds' warp tile: they are repaired
        if params["BM"] == 64 and params["BN"] == 64 and params["WM"] == 64:
            return "no 64 x 64 warp tiles in a 64 x 64 block here"
        return plain(params)

    timed = []
    r = run_warptiling(SPLITS, probe=probe, checker=checker, validate=validate, max_configs=12,
                       timer=fake_timer(ms=lambda p: timed.append(p) or warptiling_cost(p)))
    seeds = [t for t in r.trials if t.how == "seed"]
    assert {t.status for t in seeds if t.params["splitk"] == 8} == {"pruned"}
    assert {t.status for t in seeds if t.params["splitk"] == 16} == {"wrong"}
    assert all(validate(t.params) is None for t in seeds)
    small = [t.params for t in seeds if t.params["BM"] == 64]
    assert small and all(p["BN"] == 64 and p["WM"] != 64 for p in small)  # repaired
    assert not any(p["splitk"] in (8, 16) for p in timed)


def test_plain_progress_marks_the_seeds(capsys):
    events = []
    run_warptiling(max_configs=3, on_progress=lambda *e: events.append(e))
    printer = at.plain_progress("warptiling cuda nn 320x192x786432", sys.stdout)
    for e in events:
        printer(*e)
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith(" ms (split-K seed)") and "splitk=16" in out[1]


# ----------------------------------------------------------------------------- compile ahead


def fake_build_probe(calls=None, delay=0.0):
    """A stand-in for cuda_probe: resources that depend on the params only (BK=32 spills), and a
    record of the configurations it built."""
    import time as _time

    def probe(params):
        if calls is not None:
            calls.append(dict(params))
        if delay:
            _time.sleep(delay)
        if params["group"] == 1:
            raise CompileError("NVRTC could not compile warptiling.cu\nlog")
        return {"registers": 128, "smem_static": 16384, "smem_dynamic": 0, "threads": 128,
                "spill_bytes": 16 if params["BK"] == 32 else 0, "grid_blocks": 64}

    return probe


def trial_record(r):
    return [(t.params, t.status, t.how, t.ms, t.detail) for t in r.trials]


def test_compile_ahead_changes_nothing_in_the_search():
    def run(**kw):  # the budget stops it: 40 timed candidates at 1 s each
        clock = Clock()
        return run_warptiling(max_configs=None, budget_s=50, clock=clock,
                              timer=fake_timer(clock, ms=warptiling_cost, seconds_per_call=1.0),
                              **kw)

    base = run(probe=fake_build_probe())
    upcoming = []
    recorded = run(probe=fake_build_probe(), compile_ahead=6,
                   prefetch=lambda configs: upcoming.append(list(configs)))
    space = at.space_of("warptiling", "cuda")
    built = []
    with at.CompileAhead(fake_build_probe(built, delay=0.001), space.key, workers=4) as ahead:
        pooled = run(probe=ahead.probe, prefetch=ahead.prefetch, compile_ahead=ahead.lookahead)
    for r in (recorded, pooled):
        assert trial_record(r) == trial_record(base)
        assert r.winner.params == base.winner.params
    assert base.stopped == "budget" and base.count("timed") == 40
    assert any(t.status == "error" for t in base.trials)  # a failed build fails its trial only
    assert any(t.status == "pruned" for t in base.trials)
    # one list per candidate, handed over before it is evaluated, then [] before the refinement
    assert len(upcoming) == len(base.trials) + 1 and upcoming[-1] == []
    assert all(len(u) == 6 for u in upcoming[:-1])
    why = at.validator(get_stage("warptiling").offer("cuda"))
    for lst in upcoming:
        assert all(why(p) is None and p == space.full(p) for p in lst)  # candidates the search
        assert len({space.key(p) for p in lst}) == len(lst)  # would take, each once
    # the first list, handed over while the defaults are timed, is the seeds in order
    assert upcoming[0][:len(base.seeds)] == base.seeds
    # when a candidate did not become the best, the next one was first in its list
    best = None
    for i, t in enumerate(base.trials[:-1]):
        if t.status == "timed" and (best is None or t.ms < best):
            best = t.ms
            continue
        assert upcoming[i] and upcoming[i][0] == base.trials[i + 1].params
    # every candidate the pool built was one it was asked for; each is built once
    keys = [space.key(p) for p in built]
    assert len(keys) == len(set(keys))
    asked = {space.key(p) for p in ahead.submitted}
    assert set(keys) <= asked | {space.key(t.params) for t in pooled.trials}


def test_compile_ahead_waits_for_a_build_in_flight_and_drops_the_stale_ones():
    import threading

    space = at.space_of("vectorized", "cuda")
    calls, gate = [], threading.Event()
    configs = [space.full({**space.default, "group": g}) for g in (1, 4, 8)]

    def probe(params):
        calls.append(params["group"])
        gate.wait(5)
        if params["group"] == 1:
            raise CompileError("NVRTC could not compile vectorized.cu\nlog")
        return {"group": params["group"], "spill_bytes": 0}

    with at.CompileAhead(probe, space.key, workers=1) as ahead:
        assert ahead.lookahead == at.COMPILE_AHEAD_PER_JOB
        ahead.prefetch(configs)  # group 1 starts, 4 and 8 queue behind it
        ahead.prefetch(configs[:2])  # 8 is no longer expected: dropped before it started
        assert ahead.dropped == 1
        gate.set()
        with pytest.raises(CompileError, match="could not compile"):
            ahead.probe(configs[0])  # the prefetched build's error, raised here
        assert ahead.probe(configs[1]) == {"group": 4, "spill_bytes": 0}
        assert ahead.probe(configs[1]) == {"group": 4, "spill_bytes": 0}  # no second build
        assert ahead.probe(configs[2]) == {"group": 8, "spill_bytes": 0}  # built here
    assert sorted(calls) == [1, 4, 8] and [p["group"] for p in ahead.submitted] == [1, 4, 8]


def test_compile_ahead_asks_for_no_more_than_max_configs_can_launch():
    upcoming = []
    r = run_warptiling(max_configs=5, compile_ahead=8,
                       prefetch=lambda configs: upcoming.append(len(configs)))
    assert len(r.trials) == 5 and upcoming == [4, 3, 2, 1, 0]  # the last candidate asks for none


def test_tune_compiles_ahead_with_jobs_and_finds_the_same_winner(tmp_path):
    kw = dict(cache=tmp_path / "autotune.json", gpu=GPU, max_configs=20, store_result=False,
              launch_factory=fake_launch_factory(), checker=passes,
              timer=fake_timer(ms=warptiling_cost))
    one = at.tune("warptiling", "cuda", *SPLITK_SHAPE, probe=fake_build_probe(), jobs=1, **kw)
    four = at.tune("warptiling", "cuda", *SPLITK_SHAPE, probe=fake_build_probe(), jobs=4, **kw)
    assert trial_record(one.result) == trial_record(four.result)
    assert one.entry["params"] == four.entry["params"]
    assert one.entry["seeds"] == len(one.result.seeds) > 0


def test_default_jobs_is_at_most_eight():
    assert 1 <= at.default_jobs() <= 8
    assert at.default_jobs() == min(8, os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------ CLI


def cli(*args, env=None, timeout=300):
    return run_lab("lab.autotune", *args, timeout=timeout, **(env or {}))


@cpu_only
@pytest.mark.parametrize("args", [(), ("--stage", "vectorized", "--sizes", "4096")])
def test_tuning_without_a_gpu_is_one_sentence_and_exit_2(args):
    r = cli(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "needs a CUDA GPU" in r.stderr


def test_help():
    r = cli("--help")
    assert r.returncode == 0 and "--budget-s" in r.stdout and "--retune" in r.stdout
    assert "--jobs" in r.stdout and "splitk=16|32" in r.stdout
    assert "docs/AUTOTUNE.md" in r.stdout


def test_dry_run_shows_both_prunings_without_a_gpu():
    r = cli("--stage", "vectorized", "--sizes", "4096", "--dry-run", "--max-configs", "2")
    assert r.returncode == 0, r.stderr
    assert "864 configurations" in r.stdout and "656 pass validate, 208 rejected" in r.stdout
    assert "1. BM=128,BN=128,BK=8,TM=8,TN=8,group=16,fast_math=0,unroll=1: " in r.stdout
    assert "regs" in r.stdout and "blocks/SM" in r.stdout  # the NVRTC build's resources
    assert "vectorized triton nn 4096x4096x4096" in r.stdout


@pytest.mark.parametrize("args,words", [
    (("--stage", "tiled:tile=12", "--sizes", "64", "--dry-run"), "not a choice of stage tiled"),
    (("--stage", "warptiling:BLOCK_M=64", "--backend", "cuda", "--sizes", "64", "--dry-run"),
     "has no cuda parameter 'BLOCK_M'"),
    (("--stage", "all:BM=64", "--sizes", "64", "--dry-run"), "'all' takes no restrictions"),
    (("--stage", "tiled", "--sizes", "64", "--jobs", "0", "--dry-run"), "--jobs must be 1"),
    (("--stage", "bogus", "--sizes", "64", "--dry-run"), "unknown stage 'bogus'"),
    (("--stage", "tiled", "--dry-run"), "--sizes is missing"),
    (("--stage", "tiled", "--sizes", "64", "--backend", "opencl", "--dry-run"), "unknown backend"),
])
def test_cli_errors_are_one_sentence(args, words):
    r = cli(*args)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_show_reads_the_cache_and_refuses_a_corrupted_one(tmp_path):
    cache = tmp_path / "autotune.json"
    fake_tune(cache)
    r = cli("--show", "--cache", str(cache))
    assert r.returncode == 0 and "1 entry" in r.stdout and "vectorized|cuda" in r.stdout
    r = cli("--show", env={at.CACHE_ENV: str(cache)})
    assert r.returncode == 0 and str(cache) in r.stdout
    cache.write_text("{")
    r = cli("--show", "--cache", str(cache))
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr
    assert cache.read_text() == "{"


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_tune_on_the_gpu_stores_a_checked_winner(tmp_path, backend):
    cache = tmp_path / "autotune.json"
    out = at.tune("vectorized", backend, 1025, 1025, 1025, cache=cache, budget_s=60,
                  max_configs=4)
    assert out.entry is not None and out.result.count("timed") >= 1
    assert out.result.count("wrong") == 0
    assert out.entry["median_ms"] > 0 and out.entry["default_ms"] > 0
    got = at.resolve("vectorized", backend, 1025, 1025, 1025, cache=cache)
    assert got == out.entry["params"]


@pytest.mark.gpu
def test_resolve_can_tune_when_missing(tmp_path):
    cache = tmp_path / "autotune.json"
    got = at.resolve("blocktile_2d", "cuda", 256, 256, 256, cache=cache, tune_if_missing=True,
                     budget_s=10)
    assert got is not None and at.load_cache(cache)


def test_validate_prune_and_dry_run_probe_use_the_searched_precision(capsys):
    """mma's shared-memory rule depends on the element size: 128x256 tiles of BK=64 in 3 stages
    are 144 KiB in bf16 and 288 KiB in tf32. The tuner's validate-prune (and the dry run's NVRTC
    probe) must judge a candidate in the precision being searched, not the launcher's default
    (3xtf32), which pruned bf16 candidates for a 3xtf32 build's spills."""
    from lab.autotune import validator
    from lab.stages import get_stage

    offer = get_stage("mma").offer("cuda")
    params = dict(BM=128, BN=256, BK=64, WM=64, WN=64, STAGES=3, frags=1, group=8)
    assert validator(offer, "bf16")(params) is None
    assert "227 KiB" in validator(offer, "tf32")(params)
    # a validate() whose rules do not depend on the precision answers the same in any
    assert validator(get_stage("vectorized").offer("cuda"), "bf16")({}) is None


# ------------------------------------------------------- one candidate per build (automatic values)


def test_configurations_with_one_identity_are_one_candidate_tried_once():
    # a fake identity: BK=8 builds what BK=16 builds; every pair becomes one candidate
    same = lambda p: tuple(sorted({**p, "BK": max(p["BK"], 16)}.items()))  # noqa: E731
    plain = run_search(max_configs=None)
    merged = run_search(max_configs=None, identity=same)
    assert merged.same_build > 0 and plain.same_build == 0
    assert merged.valid == plain.valid - merged.same_build
    seen = [same(t.params) for t in merged.trials]
    assert len(seen) == len(set(seen))  # no build twice
    assert len(merged.trials) < len(plain.trials)
    assert merged.not_reached == 0  # every distinct build was tried


def test_the_first_of_merged_configurations_is_kept_so_the_defaults_come_first():
    space = at.space_of("vectorized", "cuda")
    everything = lambda p: 0  # noqa: E731  (one build for all: only the defaults are a candidate)
    r = run_search(max_configs=None, identity=everything)
    assert r.valid == 1 and [t.params for t in r.trials] == [space.default]
    assert r.same_build > 0


WGMMA_TRITON = {"BLOCK_M": (128,), "BLOCK_N": (0,), "BLOCK_K": (0,), "GROUP_M": (8,),
                "num_warps": (8,), "num_stages": (0,), "regs_mn": (-1,)}


@pytest.mark.parametrize("stage, backend, restrict, precision, merged", [
    # CUDA mma: BK=0 in tf32 is the tuned 32 floats; BK=0 and BK=32 are one build
    ("mma", "cuda", {"BK": (0, 32), "BM": (0,), "BN": (0,), "WM": (0,), "WN": (0,),
                     "STAGES": (0,), "frags": (0,), "group": (8,)}, "tf32", 1),
    # Triton wgmma: kmajor_b=-1 in bf16 is off (0); -1 and 0 are one build, 1 is another
    ("wgmma", "triton", {"kmajor_b": (-1, 0, 1), **WGMMA_TRITON}, "bf16", 1),
    # in tf32 -1 is on (1): -1 and 1 are one build, 0 is another
    ("wgmma", "triton", {"kmajor_b": (-1, 0, 1), **WGMMA_TRITON}, "tf32", 1),
])
def test_tune_merges_automatic_values_with_the_values_they_stand_for(tmp_path, stage, backend,
                                                                     restrict, precision, merged):
    calls = []
    out = at.tune(stage, backend, 4096, 4096, 4096, precision=precision,
                  cache=tmp_path / "c.json", gpu=GPU, launch_factory=fake_launch_factory(calls),
                  checker=passes, timer=lambda params, launch, rep_ms: 1.0, clock=Clock(),
                  restrict=restrict, probe=lambda params: None, jobs=1)
    r = out.result
    assert r.same_build == merged
    assert r.valid == math.prod(len(v) for v in restrict.values()) - merged
    assert len({tuple(sorted(c.items())) for c in calls}) == r.valid  # each build launched once
    text = "\n".join(at.report_lines(out, stage))
    assert f"{merged} more are the same build" in text


def test_a_stage_without_automatic_values_is_one_build_per_value_tuple():
    plain = at.build_identity(get_stage("vectorized").offer("cuda"), 4096, 4096, 4096)
    default = at.space_of("vectorized", "cuda").default
    assert plain(default) == tuple(sorted(default.items()))  # the contract's resolve(): as given
    assert plain({**default, "BK": 16}) != plain(default)
    ident = at.build_identity(get_stage("mma").offer("cuda"), 4096, 4096, 4096, "bf16", 132)
    space = at.space_of("mma", "cuda")
    auto = space.default
    explicit = {**auto, "BM": 256, "BN": 128, "BK": 64, "WM": 128, "WN": 32, "STAGES": 3,
                "frags": 2}
    assert ident(auto) == ident(explicit)  # the bf16 automatic row at 4096^3
    # at 1025^3 the shape rule narrows the automatic tile: no longer the 256 x 128 build
    small = at.build_identity(get_stage("mma").offer("cuda"), 1025, 1025, 1025, "bf16", 132)
    assert small(auto) != small(explicit)


# ------------------------------------------------------------- what the tuner reads from the OFFER


NUMERICS_PARAMS = [(s, b, p) for s in STAGES for b in ("cuda", "triton") for p in s.params
                   if p.numerics and b in p.backends]


@pytest.mark.parametrize("stage, backend, param", NUMERICS_PARAMS,
                         ids=[f"{s.name}-{b}-{p.name}" for s, b, p in NUMERICS_PARAMS])
def test_a_numerics_param_is_pinned_at_its_registry_default_and_not_restricted(stage, backend,
                                                                              param):
    space = at.space_of(stage, backend)
    assert param.name not in space.names
    assert space.pinned[param.name] == param.default == space.default[param.name]
    assert at.space_of(stage, backend, {param.name: (param.default,)}).pinned[param.name] \
        == param.default
    other = next(c for c in param.choices if c != param.default)
    with pytest.raises(LabError, match=f"{param.name} changes the numerics, so the tuner keeps "
                                       f"it at {at._fmt(param.default)}; leave it out of the "
                                       f"restriction"):
        at.space_of(stage, backend, {param.name: (other,)})
    with pytest.raises(LabError, match="leave it out of --stage"):
        at._parse_stages(f"{stage.name}:{param.name}={at._fmt(other)}", (backend,))


def test_the_numerics_list_is_not_empty():
    assert any(p.name == "fast_math" for _s, _b, p in NUMERICS_PARAMS)


def test_the_split_k_seeds_follow_the_offers_tuning_not_a_parameter_name():
    from dataclasses import replace

    from lab.base.contract import Tuning

    space = at.space_of("warptiling", "cuda", SPLITS)
    assert space.tuning == get_stage("warptiling").offer("cuda").tuning
    assert at.splitk_seeds(space, *SPLITK_SHAPE, sm_count=132)
    assert at.splitk_seeds(replace(space, tuning=Tuning()), *SPLITK_SHAPE, sm_count=132) == []
    # other tile names: the tiles counted (here 20 x 2 = 40 of BK x BN) and the edges shrunk
    # are those, BM is left alone
    edges = Tuning(split=space.tuning.split, tile=("BK", "BN"))
    seeds = at.splitk_seeds(replace(space, tuning=edges), *SPLITK_SHAPE, sm_count=132)
    assert [(s["BM"], s["BK"], s["BN"], s["splitk"]) for s in seeds] == [
        (128, 16, 128, 3), (128, 16, 128, 6), (128, 16, 128, 16),
        (128, 8, 64, 1), (128, 8, 64, 2), (128, 8, 64, 4)]


def test_the_search_reads_the_resources_of_a_prepared_launch():
    from lab.base.contract import Prepared

    spills = {"registers": 64, "smem_static": 0, "smem_dynamic": 0, "spill_bytes": 8,
              "threads": 128}
    r = run_search("vectorized", "triton",
                   launch_factory=lambda params: Prepared(lambda: None, resources=spills),
                   max_configs=3)
    assert r.trials and all(t.status == "pruned" and "8 bytes of register spills" in t.detail
                            for t in r.trials)
