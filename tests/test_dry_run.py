"""lab.autotune --dry-run answers in seconds for every stage: it shows the space, the validate
prune and an estimate of the resource prune from a bounded sample of NVRTC builds, never the whole
space (that is --compile-all). The bound is checked structurally, by counting the builds through
the probe the dry run compiles with (a fake that compiles nothing here), not by timing.

Fast and CPU only: the fake probe stands in for NVRTC; one test compiles two real builds.
"""

import re

import pytest

from lab import autotune as at
from lab.stages import STAGES
from lab.tune import cli, dryrun, report

# The most builds a plain dry run starts for one CUDA search: the defaults, the split-K seeds (at
# most SEED_TILES x len(SEED_TARGETS)) and the configurations picked at random.
MOST_BUILDS = 1 + at.SEED_TILES * len(at.SEED_TARGETS) + at.DRY_RUN_SAMPLE
FAKE_RESOURCES = {"registers": 64, "smem_static": 4096, "smem_dynamic": 0, "spill_bytes": 0,
                  "threads": 128, "grid_blocks": 1}


@pytest.fixture
def builds(monkeypatch):
    """Every build the dry run asks for, counted (the probe compiles nothing)."""
    made = []

    def fake_cuda_probe(module, M, N, K, layout="nn", extra=None):
        def probe(params):
            made.append(dict(params))
            # one configuration in seven spills, so the estimate has something to estimate
            spills = 128 if len(made) % 7 == 0 else 0
            return {**FAKE_RESOURCES, "spill_bytes": spills}

        return probe

    monkeypatch.setattr(dryrun, "cuda_probe", fake_cuda_probe)
    return made


def dry_run(capsys, *args) -> tuple[int, str, str]:
    code = at.main([*args, "--dry-run"])
    out, err = capsys.readouterr()
    return code, out, err


def first_precision(stage, backend):
    return stage.precisions_for(backend)[0]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_the_dry_run_of_every_stage_builds_a_bounded_sample(stage, builds, capsys):
    code, out, err = dry_run(capsys, "--stage", stage.name, "--backend", "cuda", "--sizes",
                             "4096", "--precision", first_precision(stage, "cuda"))
    assert code == 0, err
    assert 1 <= len(builds) <= MOST_BUILDS, len(builds)
    flat = " ".join(out.split())
    assert "configurations in the declared space" in flat and "pass validate" in flat
    assert re.search(r"resource pruning, (an estimate|exact)", flat), flat
    assert re.search(r"\n\s+1\. \S+: 64 regs, 4096 B smem, 128 threads", out), out
    space = at.space_of(stage, "cuda")
    for p in space.searched:  # every searched parameter with its values
        assert re.search(rf"\n\s+{re.escape(p.name)}\s+"
                         rf"{re.escape('|'.join(at._fmt(v) for v in p.choices))} \(default ", out)


def test_a_large_space_is_estimated_and_says_so(builds, capsys):
    code, out, _ = dry_run(capsys, "--stage", "warptiling", "--backend", "cuda", "--sizes",
                           "4096")
    assert code == 0
    flat = " ".join(out.split())
    assert len(builds) == 1 + at.DRY_RUN_SAMPLE  # 4096^3 has tiles enough: no split-K seeds
    size = at.space_of("warptiling", "cuda").size  # 684,288 with splitk's 11 choices
    assert f"{size} configurations" in flat and f"{size:,} configurations in the declared space" \
        in flat
    assert "50,000 of them considered" in flat  # the search's own sample of a large space
    assert re.search(r"[\d,]+ pass validate, [\d,]+ rejected \(\d+% pass; at that rate about "
                     r"[\d,]+ of the declared space\)", flat), flat
    m = re.search(r"resource pruning, an estimate: (\d+) of (\d+) builds picked at random", flat)
    assert m and int(m.group(2)) == at.DRY_RUN_SAMPLE and int(m.group(1)) < int(m.group(2))
    assert "--compile-all compiles all" in flat


def test_the_split_k_shape_builds_its_seeds_within_the_bound(builds, capsys):
    code, out, _ = dry_run(capsys, "--stage", "warptiling", "--backend", "cuda", "--sizes",
                           "320x192x786432")
    assert code == 0
    seeds = [b for b in builds if b["splitk"] > 1][:6]
    assert len(builds) <= MOST_BUILDS and len(seeds) == 6
    # the defaults' splitk=0 resolves to a 64 x 64 tile split 64 ways here (lab/base/splitk.py), none
    # of the seeds (which keep the WM x WN warp tiles of their block tiles): all 6 are tried
    assert out.count("(split-K seed)") == 6
    assert "split-K seeds (tiles x splitk near 1x, 2x, 4x 132 SMs)" in " ".join(out.split())


def test_a_small_space_is_compiled_whole_and_exact(builds, capsys):
    code, out, _ = dry_run(capsys, "--stage", "naive", "--backend", "cuda", "--sizes", "64")
    assert code == 0 and len(builds) == 2
    assert "resource pruning, exact: 2 of the 2 valid builds" in " ".join(out.split())
    assert "--compile-all" not in out  # nothing left to compile


def test_triton_builds_nothing_and_lists_the_search_order(builds, capsys):
    code, out, _ = dry_run(capsys, "--stage", "warptiling", "--backend", "triton", "--sizes",
                           "4096")
    assert code == 0 and builds == []
    assert "not estimated here" in out
    listed = re.findall(r"\n\s+(\d+)\. ", out)
    assert listed == [str(i) for i in range(1, at.DRY_RUN_SHOWN + 1)]
    assert re.search(r"\.\.\. and [\d,]+ more", out)


def test_sample_and_max_configs_set_the_number_of_builds(builds, capsys):
    assert dry_run(capsys, "--stage", "vectorized", "--backend", "cuda", "--sizes", "4096",
                   "--sample", "3")[0] == 0
    assert len(builds) == 1 + 3
    builds.clear()
    code, out, _ = dry_run(capsys, "--stage", "vectorized", "--backend", "cuda", "--sizes",
                           "4096", "--max-configs", "1")
    assert code == 0 and len(builds) == 1
    assert "not estimated, the sample holds no configuration picked at random (--max-configs)" \
        in " ".join(out.split())


def test_compile_all_builds_every_valid_configuration(builds, capsys):
    code, out, _ = dry_run(capsys, "--stage", "tiled", "--backend", "cuda", "--sizes", "64",
                           "--compile-all")
    valid = at.candidates(at.space_of("tiled", "cuda")).valid
    assert code == 0 and len(builds) == len(valid) == 72
    assert "resources (NVRTC, sm_90), in search order:" in out and "72 pass validate" in out


def test_the_compile_budget_stops_starting_builds():
    """compile_sample starts no build that would end after its seconds at the mean build time so
    far (the first always starts), and keeps the order."""
    t = {"now": 0.0}
    done = []

    def probe(params):
        t["now"] += 4.0  # each build takes 4 s of the fake clock
        return dict(FAKE_RESOURCES)

    configs = [{"i": i} for i in range(10)]
    trials = at.compile_sample(probe, configs, jobs=1, seconds=10.0, clock=lambda: t["now"],
                               on_done=lambda: done.append(1))
    started = [x for x in trials if x is not None]
    # at 0 and 4 s; at 8 s a 4 s build would end at 12 s, after the 10 s
    assert len(started) == 2 and trials[2:] == [None] * 8
    assert [x.params["i"] for x in started] == [0, 1] and len(done) == 2
    assert all(x.status == "fit" and x.ms == 4000 for x in started)
    t["now"] = 0.0
    assert len([x for x in at.compile_sample(probe, configs, seconds=13.0,
                                             clock=lambda: t["now"]) if x]) == 3
    assert len([x for x in at.compile_sample(probe, configs, seconds=0.0) if x]) == 1
    assert all(at.compile_sample(probe, configs, jobs=2, seconds=None))


def test_build_errors_and_spills_are_reported_per_configuration():
    def probe(params):
        if params["i"] == 1:
            raise RuntimeError("NVRTC could not compile\nline 2 of the log")
        return {**FAKE_RESOURCES, "spill_bytes": 64 * (params["i"] == 2)}

    trials = at.compile_sample(probe, [{"i": i} for i in range(3)])
    assert [t.status for t in trials] == ["fit", "error", "pruned"]
    assert trials[1].detail == "RuntimeError: NVRTC could not compile"
    assert trials[2].detail == "64 bytes of register spills"


def test_the_budget_is_shared_over_the_cuda_searches():
    b = at.DryRunBudget(12.0, 3)
    assert b.share() == 4.0
    b.spent(1.0)  # what one search leaves goes to the others
    assert b.share() == 5.5
    assert at.DryRunBudget(None, 3).share() is None


def test_progress_lines_on_a_pipe(builds, capsys, monkeypatch):
    monkeypatch.setattr(report, "PROGRESS_EVERY_S", 0.0)
    code, _, err = dry_run(capsys, "--stage", "vectorized", "--backend", "cuda", "--sizes", "4096")
    assert code == 0
    lines = [line for line in err.splitlines() if "NVRTC builds of the sample" in line]
    total = 1 + at.DRY_RUN_SAMPLE
    assert lines and lines[-1].strip().startswith(f"vectorized cuda: NVRTC builds of the sample: "
                                                  f"{total}/{total}")


def test_all_stages_leave_out_the_precisions_a_stage_lacks(builds, capsys):
    """--stage all in fp32: mma computes in tf32, 3xtf32, bf16 and fp16 only, so it is left out
    with one line; every other stage and backend is dry-run. Named on its own, mma is refused."""
    code, out, err = dry_run(capsys, "--stage", "all", "--sizes", "4096")
    assert code == 0, err
    assert " ".join(err.split()).startswith("not searched (the stage does not compute in that "
                                            "precision): mma cuda fp32, mma triton fp32")
    for stage in STAGES:
        for backend in ("cuda", "triton"):
            head = f"{stage.name} {backend} nn 4096x4096x4096 fp32"
            assert (head in out) == ("fp32" in stage.precisions_for(backend)), head
    code, _, err = dry_run(capsys, "--stage", "all,mma", "--sizes", "4096")
    assert code == 2 and "stage mma (cuda) supports precision" in err


@pytest.mark.parametrize("args,words", [
    (("--sample", "3"), "--sample belongs to --dry-run"),
    (("--compile-all",), "--compile-all belongs to --dry-run"),
    (("--dry-run", "--sample", "-1"), "--sample must be 0 or more"),
    (("--dry-run", "--sample", "3", "--compile-all"), "give one of them"),
])
def test_dry_run_options_are_refused_in_one_sentence(args, words, capsys):
    assert at.main(["--stage", "tiled", "--sizes", "64", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_the_no_gpu_sentence_names_the_dry_run_of_the_command(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_available", lambda: False)
    assert at.main(["--stage", "warptiling", "--sizes", "4096"]) == 2
    err = capsys.readouterr().err
    assert "python -m lab.autotune --stage warptiling --sizes 4096 --dry-run shows" in err


def test_a_real_dry_run_compiles_with_nvrtc(capsys):
    """Two real builds (the defaults and one picked at random): resources from ptxas."""
    code, out, _ = dry_run(capsys, "--stage", "tiled", "--backend", "cuda", "--sizes", "64",
                           "--sample", "1", "--jobs", "1")
    assert code == 0
    first = re.search(r"\n\s+1\. tile=32,ktile=2,group=16,fast_math=0,unroll=1: (\d+) regs, "
                      r"16384 B smem, 1024 threads, (\d+) blocks/SM", out)
    assert first and int(first.group(1)) > 0, out
    assert "resource pruning, an estimate: 1 of 1 build picked at random" in " ".join(out.split())


def test_wrap_never_breaks_a_word():
    from lab.cli import wrap

    text = "a " * 30 + "x" * 100 + " BM=128,BN=128,BK=16,WM=64 end"
    lines = wrap(text, 40, "  ", "    ").splitlines()
    assert "    " + "x" * 100 in lines  # longer than a line: whole, on its own line
    assert all(len(line) <= 40 for line in lines if "xxx" not in line)
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())
