"""Runs over several GPUs (lab/ranks.py, docs/MULTIGPU.md), checked without one: CPU-mode ranks
of torch.distributed on this machine (the Triton interpreter runs their rows), started by
--gpus N and by torchrun. The merged rows equal a run of one process; a killed rank loses only
the unit it was running, named, with exit status 1, and --resume adds it; the merger refuses
GPUs of different models; the hand-out is largest first; the spread between GPUs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from lab import ranks
from lab.base.errors import LabError
from lab.csvfile import read_csv
from lab.row import Row
from lab.run import RunSpec, Unit, units, work_items
from lab.shapes import Shape
from lab.stages import parse_variants

from helpers import ROOT

ARGS = ["--stage", "tiled,naive", "--backend", "triton", "--mode", "cpu",
        "--sizes", "16,17,24x8x40,9x20x33"]
KEY = ["stage", "backend", "M", "N", "K", "layout", "precision", "status", "rel_err"]


def _compare(args, env=None, launcher=None):
    cmd = [sys.executable, "-m", "lab.compare", *args] if launcher is None else [*launcher, *args]
    full = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env or {}))
    full.pop("RANK", None)
    full.pop("WORLD_SIZE", None)
    return subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=ROOT, timeout=600)


def _rows(path):
    df = read_csv(path)
    return df[KEY].sort_values(["M", "N", "K", "stage"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    path = tmp_path_factory.mktemp("one") / "one.csv"
    done = _compare([*ARGS, "--csv", str(path)])
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_ranks_give_the_rows_of_one_process(n, one_rank, tmp_path):
    path = tmp_path / f"ranks{n}.csv"
    done = _compare([*ARGS, "--gpus", str(n), "--csv", str(path)])
    assert done.returncode == 0, done.stderr
    assert f"{n} ranks on this machine (CPU mode), started " in done.stderr
    assert _rows(path).equals(_rows(one_rank))
    df = read_csv(path)
    assert set(df["rank"].dropna().astype(int)) <= set(range(n))
    env = json.loads(path.with_suffix(".env.json").read_text())
    assert env["world_size"] == n and [g["rank"] for g in env["gpus"]] == list(range(n))
    # one process's order: the plan's, whichever rank finished which unit first
    assert list(df["M"]) == list(read_csv(one_rank)["M"])
    assert not ranks.journal_path(path).exists()  # its rows are in the CSV


def test_torchrun_ranks_give_the_rows_of_one_process(one_rank, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) \
        or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    path = tmp_path / "torchrun.csv"
    done = _compare([*ARGS, "--csv", str(path)],
                    launcher=[torchrun, "--standalone", "--nproc-per-node=2", "-m", "lab.compare"])
    assert done.returncode == 0, done.stderr
    assert _rows(path).equals(_rows(one_rank))


def test_a_killed_rank_loses_only_its_unit_and_a_resume_adds_it(one_rank, tmp_path):
    path = tmp_path / "killed.csv"
    done = _compare([*ARGS, "--gpus", "2", "--csv", str(path)], env={ranks.FAULT_ENV: "die:1:1"})
    assert done.returncode == 1, done.stderr
    assert "rank 1 (" in done.stderr and "exit status 9" in done.stderr
    lost = [line for line in done.stdout.splitlines() if line.startswith("lost: ")]
    assert len(lost) == 1 and "was running it when it stopped" in " ".join(done.stdout.split())
    assert "1 unit lost" in done.stdout and "--resume" in done.stdout
    full = _rows(one_rank)
    part = _rows(path)
    assert len(part) == len(full) - 1  # one unit: one stage at one shape
    resumed = _compare([*ARGS, "--gpus", "2", "--csv", str(path), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _rows(path).equals(full)
    env = json.loads(path.with_suffix(".env.json").read_text())
    assert env["resumed"].startswith(f"{len(full) - 1} rows")


def test_resume_of_one_process_runs_only_what_the_csv_lacks(one_rank, tmp_path):
    path = tmp_path / "partial.csv"
    df = read_csv(one_rank)
    df[df["M"] != 17].to_csv(path, index=False)
    shutil.copy(one_rank.with_suffix(".env.json"), path.with_suffix(".env.json"))
    done = _compare([*ARGS, "--csv", str(path), "--resume"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("17x17x17") >= 2  # the missing unit ran
    assert _rows(path).equals(_rows(one_rank))


@pytest.mark.fast
def test_usage_errors_are_one_sentence():
    from lab.compare import main

    assert main([*ARGS, "--resume"]) == 2
    with pytest.raises(LabError, match="--gpus all counts this machine's GPUs"):
        ranks.count_gpus("all", "cpu")
    with pytest.raises(LabError, match="1 or more"):
        ranks.count_gpus("0", "cpu")
    with pytest.raises(LabError, match="a number of GPUs or all"):
        ranks.count_gpus("two", "cpu")
    assert ranks.count_gpus("3", "cpu") == 3
    assert ranks.strip_gpus(["--gpus", "2", "--stage", "x", "--gpus=all"]) == ["--stage", "x"]


def _spec(shapes, repeat=1):
    return RunSpec(parse_variants(["tiled"]), ["triton"], [Shape(*s) for s in shapes],
                   mode="cpu", repeat=repeat)


@pytest.mark.fast
def test_units_are_handed_out_largest_first():
    plan = work_items(_spec([(16, 16, 16), (64, 64, 64), (8, 8, 8), (64, 64, 64)], repeat=2))
    order = ranks.hand_out_order(plan)
    sizes = [plan[i][0].shape[0] for i in order]
    assert sizes == sorted(sizes, reverse=True)
    assert order[:4] == [1, 3, 5, 7]  # equal sizes keep the plan's order
    assert str(plan[1][0]) == "tiled fp32 nn 64x64x64, repeat 0"


@pytest.mark.fast
def test_a_unit_is_one_stage_or_the_cublas_row_and_one_gpu_runs_a_shapes_units_together():
    spec = RunSpec(parse_variants(["tiled", "naive"]), ["cuda", "triton"],
                   [Shape(64, 64, 64), Shape(32, 32, 32)], mode="gpu", repeat=1)
    plan = units(spec)
    assert [u.stage for u in plan] == ["cublas", "tiled", "naive"] * 2
    assert [len(item) for item in work_items(spec)] == [1] * 6  # adjacent baselines
    spec.cublas_timing = "once"  # every row against the shape's one cuBLAS row: kept together
    assert [[u.stage for u in item] for item in work_items(spec)] == [
        ["cublas", "tiled", "naive"]] * 2


def _store():
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, None, True, ranks.JOIN_TIMEOUT,
                           wait_for_workers=False)
    return server, dist.PrefixStore(ranks.PREFIX, server)


def _told(name, rank=0):
    return json.dumps({"gpu": {"host": "h", "name": name, "index": rank, "uuid": f"GPU-{rank}"},
                       "env": {"gpu": name}})


@pytest.mark.fast
def test_the_merger_refuses_gpus_of_two_models_in_one_sentence():
    server, store = _store()
    store.set("env/0", _told("NVIDIA H200"))
    store.set("env/1", _told("NVIDIA A100-SXM4-80GB", 1))
    with pytest.raises(LabError) as info:
        ranks.merge(store, 2, _spec([(16, 16, 16)]), set(), None)
    text = str(info.value)
    assert "different models" in text and "CUDA_VISIBLE_DEVICES" in text and "\n" not in text
    assert store.get("go") == b"refused"  # the ranks are told to stop


@pytest.mark.fast
def test_the_merger_names_the_unit_a_stopped_rank_held_and_journals_the_others(tmp_path):
    server, store = _store()
    spec = _spec([(16, 16, 16), (32, 32, 32)])
    plan = work_items(spec)
    for r in (0, 1):
        store.set(f"env/{r}", _told("NVIDIA H200", r))
    row = Row("tiled", "triton", "fp32", 32, 32, 32, rank=0, gpu_index=0)
    store.set("unit/1", json.dumps([row.__dict__]))  # rank 0 finished 32^3 and stopped
    store.set("taken/1", "0")
    store.set("done/0", "ok")
    store.set("taken/0", "1")  # rank 1 took 16^3 and its GPU failed
    store.set("done/1", "its GPU failed: RuntimeError: CUDA error: an illegal memory access")
    journal = tmp_path / "run.csv.partial"
    said = []
    merged = ranks.merge(store, 2, spec, set(), journal, say=said.append)
    assert [(r.M, r.rank) for r in merged.rows] == [(32, 0)]
    (unit, why), = merged.lost
    assert unit == plan[0][0] and "rank 1 (GPU 1 of h) was running it" in why
    assert "illegal memory access" in why and any("rank 1" in s for s in said)
    assert json.loads(store.get("plan")) == [1, 0]  # largest first
    (line,) = journal.read_text().splitlines()
    assert json.loads(line)["unit"] == [0, 32, 32, 32, "nn", "fp32", "tiled"]
    assert merged.env["world_size"] == 2 and merged.env["gpus"][1]["uuid"] == "GPU-1"


@pytest.mark.fast
def test_resume_reads_the_csv_and_the_journal_a_stopped_run_left(tmp_path):
    from lab.csvfile import write_csv

    path = tmp_path / "run.csv"
    write_csv([Row("tiled", "triton", "fp32", 16, 16, 16)], path, {"mode": "cpu"})
    with open(ranks.journal_path(path), "w") as f:
        f.write(json.dumps({"unit": [0, 32, 32, 32, "nn", "fp32", "tiled"],
                            "rows": [Row("tiled", "triton", "fp32", 32, 32, 32).__dict__]}) + "\n")
        f.write('{"unit": [0, 8, 8')  # cut short by the stop: that unit runs again
    rows = ranks.earlier_rows(path)
    assert [r.M for r in rows] == [16, 32]
    assert ranks.done_keys(rows) == {Unit(0, Shape(16, 16, 16), "nn", "fp32", "tiled").key,
                                     Unit(0, Shape(32, 32, 32), "nn", "fp32", "tiled").key}


@pytest.mark.fast
def test_the_spread_between_gpus_counts_configurations_measured_on_several():
    def row(gpu, pct, M=64, stage="tiled"):
        return Row(stage, "cuda", "fp32", M, M, M, pct_cublas=pct, gpu_index=gpu,
                   gpu_uuid=f"GPU-{gpu}")

    rows = [row(0, 90.0), row(1, 94.0), row(0, 92.0), row(1, 96.0),
            row(0, 50.0, M=128),  # measured on GPU 0 only: not in the spread
            row(0, 80.0, M=256), row(0, 82.0, M=256), row(1, 84.0, M=256)]  # means 81 and 84
    assert ranks.spread(rows) == [("GPU-0", 86.0, 2), ("GPU-1", 89.5, 2)]
    assert ranks.spread([row(0, 90.0), row(0, 91.0)]) == []


def test_a_run_refused_after_its_ranks_started_ends_them_and_says_one_sentence():
    done = _compare(["--stage", "mma", "--backend", "triton", "--mode", "cpu", "--sizes", "16",
                     "--gpus", "2"])
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not compute in fp32" in errors[0]
    assert "Traceback" not in done.stderr
