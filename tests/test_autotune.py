"""lab.autotune: the search, its pruning, budget, progress and refinement, the cache, stage:auto.

Everything but the last two tests runs on the CPU: the GPU pieces (launch factory, checker, timer,
resource probe, clock) are plain functions handed to `search` / `tune`, so fakes stand in for them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab import autotune as at
from lab.check import CheckResult
from lab.errors import CompileError, LabError
from lab.stages import STAGES, Variant, get_stage, parse_variants

ROOT = Path(__file__).resolve().parent.parent
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="exercises the no-GPU path")
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
    module = get_stage(stage).module(backend)
    clock = kw.pop("clock", Clock())
    opts = dict(launch_factory=fake_launch_factory(kw.pop("calls", None)), checker=passes,
                timer=fake_timer(clock), validate=at.validator(module), clock=clock,
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
    assert at.validator(stage.module(backend))(space.default) is None  # the defaults are valid
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
    module = get_stage("vectorized").module("cuda")
    assert r.valid == 656 and len(r.invalid) == 208  # vectorized's validate() on its 864 configs
    assert all("vectorized with" in why for _, why in r.invalid)
    why = at.validator(module)
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


# ------------------------------------------------------------------------------------------ CLI


def cli(*args, env=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lab.autotune", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@cpu_only
@pytest.mark.parametrize("args", [(), ("--stage", "vectorized", "--sizes", "4096")])
def test_tuning_without_a_gpu_is_one_sentence_and_exit_2(args):
    r = cli(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "needs a CUDA GPU" in r.stderr


def test_help():
    r = cli("--help")
    assert r.returncode == 0 and "--budget-s" in r.stdout and "--retune" in r.stdout
    assert "docs/AUTOTUNE.md" in r.stdout


def test_dry_run_shows_both_prunings_without_a_gpu():
    r = cli("--stage", "vectorized", "--sizes", "4096", "--dry-run", "--max-configs", "2")
    assert r.returncode == 0, r.stderr
    assert "864 configurations" in r.stdout and "656 pass validate, 208 rejected" in r.stdout
    assert "1. BM=128,BN=128,BK=8,TM=8,TN=8,group=16,fast_math=0,unroll=1: " in r.stdout
    assert "regs" in r.stdout and "blocks/SM" in r.stdout  # the NVRTC build's resources
    assert "vectorized triton nn 4096x4096x4096" in r.stdout


@pytest.mark.parametrize("args,words", [
    (("--stage", "tiled:tile=16", "--sizes", "64", "--dry-run"), "stage names only"),
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
