"""Stage `auto` (lab/dispatch.py, docs/DISPATCH.md): the lab picks the stage for a call.

CPU: the shape bucket and the distance between buckets; the table's reader (a malformed table is
one sentence naming the file) and the shipped table; the choice from the call's bucket, from the
nearest bucket and by the rule (an unknown GPU, another architecture, CPU tensors); never a
stage that cannot run the call (a precision its launcher does not offer, parameters its
validate() refuses, an sm_90a stage on an sm_80 GPU, a GPU-only kernel for CPU tensors, a
backend not asked for); the builder on small synthetic CSVs (failed and cuBLAS rows ignored, the
median over repeats, the newest file standing, the parameters a row set); lab.matmul(a, b) with
CPU bfloat16 tensors under the interpreter (a Triton stage, the right answer, the second call
replayed from its plan); lab.which's text; `lab.compare --stage auto` in CPU mode; the
one-sentence refusals. GPU (marked `gpu`): lab.matmul(a, b) with no stage on the GPU's own
shapes gives the right answer, and every entry the shipped table holds for this GPU can run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import lab
from lab import dispatch
from lab import plan as plans
from lab.base.errors import LabError
from lab.csvfile import write_csv
from lab.row import Row
from lab.stages import parse_variants

from helpers import ROOT, cpu_only

H200 = dispatch.Target("NVIDIA H200", (9, 0))
FAKE = dispatch.Target("Fake GPU", (9, 0))


def one_sentence(text: str) -> str:
    assert text and "\n" not in text and ". " not in text.rstrip("."), text
    return text


def refusal(info) -> str:
    return one_sentence(str(info.value))


def entry(bucket: str, stage: str, backend: str = "cuda", precision: str = "bf16",
          layout: str = "nn", params=None, gpu: str = "Fake GPU", nxt=(), shape: str = "") -> dict:
    shape = shape or bucket.split(":")[0]
    return {"gpu": gpu, "bucket": bucket, "precision": precision, "layout": layout,
            "stage": stage, "backend": backend, "params": params or {},
            "measured": [{"shape": shape, "median_ms": 0.5, "pct_cublas": 101.0, "repeats": 1,
                          "ran": {}, "csv": "results/fake.csv"}],
            "next": [{"stage": s, "backend": b, "params": p or {},
                      "measured": [{"shape": shape, "median_ms": 0.6, "pct_cublas": 90.0,
                                    "repeats": 1, "ran": {}, "csv": "results/fake.csv"}]}
                     for s, b, p in nxt]}


def table_of(*entries) -> dispatch.Table:
    data = {"format": dispatch.FORMAT, "version": dispatch.VERSION, "built": {},
            "gpus": {"Fake GPU": {"capability": "9.0", "sm_count": 132}}, "sources": [],
            "entries": list(entries)}
    return dispatch.Table(Path("fake.json"), dispatch.parse_table(json.dumps(data)))


# ------------------------------------------------------------------------ buckets, distance


@pytest.mark.fast
def test_the_bucket_is_the_tuners_and_the_distance_counts_log2_steps_and_flags():
    from lab.tune.cache import bucket

    assert dispatch.bucket is bucket
    assert bucket(1, 12288, 4096) == "1x16384x4096:a1"
    assert bucket(16, 4096, 4096) == "16x4096x4096:a4"
    assert bucket(4096, 4096, 4096) == "4096x4096x4096:a128"
    assert bucket(7919, 6007, 3001) == "8192x8192x4096:a1"
    assert dispatch.parse_bucket("16x4096x8192:a4") == (16, 4096, 8192, "a4")
    d = dispatch.bucket_distance
    assert d("32x8192x4096:a4", "16x8192x4096:a4") == 1
    assert d("32x8192x4096:a4", "64x8192x4096:a4") == 1
    assert d("4096x4096x4096:a4", "4096x4096x4096:a128") == 2  # one flag step weighs 2
    assert d("2048x2048x2048:a1", "4096x4096x4096:a128") == 3 + 4
    assert d("1x4096x4096:a1", "1x4096x4096:a1") == 0
    assert dispatch.thin(64, 4096) and dispatch.thin(4096, 1) and not dispatch.thin(65, 65)


@pytest.mark.fast
def test_the_layout_of_a_call_reads_the_operands_strides():
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    assert dispatch.layout_of(a, b) == "nn"
    assert dispatch.layout_of(a, torch.randn(4, 6).t()) == "nt"
    assert dispatch.layout_of(torch.randn(6, 8).t(), b) == "tn"
    assert dispatch.layout_of(torch.randn(8, 12)[:, ::2], b) == "nn"  # no unit stride: as n


# ------------------------------------------------------------------------------ the table


@pytest.mark.fast
@pytest.mark.parametrize("text,words", [
    ("{not json", "not JSON"),
    ("[]", "its format is not"),
    (json.dumps({"format": "something else"}), "its format is not"),
    (json.dumps({"format": dispatch.FORMAT, "version": 99, "entries": []}), "version 99"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1}), "no list of entries"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1, "entries": [{"gpu": "G"}]}),
     "entry 1 has no bucket"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1,
                 "entries": [{**entry("4096x4096:a128", "persistent")}]}), "is not MxNxK"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1,
                 "entries": [entry("64x64x64:a4", "persistent", backend="gpu")]}),
     "has a backend 'gpu'"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1,
                 "entries": [{**entry("64x64x64:a4", "tiled"), "stage": 3}]}),
     "has a choice without a stage"),
    (json.dumps({"format": dispatch.FORMAT, "version": 1,
                 "entries": [entry("64x64x64:a4", "tiled", precision="fp4")]}),
     "unknown precision 'fp4'"),
])
def test_a_malformed_table_is_one_sentence_naming_the_file(tmp_path, monkeypatch, text, words):
    path = tmp_path / "table.json"
    path.write_text(text)
    monkeypatch.setenv(dispatch.TABLE_ENV, str(path))
    with pytest.raises(LabError) as info:
        dispatch.load_table()
    message = refusal(info)
    assert words in message and str(path) in message and "python -m lab.dispatch build" in message


@pytest.mark.fast
def test_a_missing_table_is_one_sentence(tmp_path):
    with pytest.raises(LabError) as info:
        dispatch.load_table(tmp_path / "none.json")
    assert "cannot read the dispatch table" in refusal(info)


@pytest.mark.fast
def test_the_shipped_table_loads_and_names_only_what_can_run_on_its_gpus():
    table = dispatch.load_table(dispatch.TABLE)
    assert dispatch.TABLE == ROOT / "lab" / "data" / "dispatch.json"
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(table.gpus)
    assert len(table.entries) > 200
    for e in table.entries:
        cc = tuple(int(x) for x in table.gpus[e["gpu"]]["capability"].split("."))
        target = dispatch.Target(e["gpu"], cc)
        for item in [e, *e["next"]]:
            assert dispatch.why_not(item["stage"], item["backend"], item["params"],
                                    e["precision"], target) is None, (e["bucket"], item)
            assert all(m["csv"].startswith("results/") and (ROOT / m["csv"]).is_file()
                       for m in item["measured"])
    # the decode shapes of the H200 run decode, its square shapes a TMA stage
    assert dispatch.choose(1, 12288, 4096, "bf16", "nt", H200, table=table).stage == "decode"
    assert dispatch.choose(4096, 4096, 4096, "bf16", "nn", H200, table=table).stage \
        == "persistent"


@pytest.mark.fast
def test_the_shipped_table_is_package_data():
    import fnmatch
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "lab.data" in conf["packages"]  # listed, so setuptools installs it without a warning
    globs = conf["package-data"]["lab.data"]
    assert any(fnmatch.fnmatch("dispatch.json", g) for g in globs)
    assert (ROOT / "lab" / "data" / "dispatch.json").is_file()


# ------------------------------------------------------------------------------ the choice


@pytest.mark.fast
def test_the_calls_own_bucket_answers_with_its_measurement():
    table = table_of(entry("4096x4096x4096:a128", "tma_wgmma", "triton",
                           nxt=[("persistent", "cuda", None)]))
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", FAKE, table=table)
    assert (c.stage, c.backend, c.params, c.source) == ("tma_wgmma", "triton", {}, "table")
    assert "measured fastest for 4096x4096x4096:a128 bf16 nn on Fake GPU" in c.reason
    assert "101.0% of cuBLAS" in c.reason and "results/fake.csv" in c.reason
    assert c.measured[0]["shape"] == "4096x4096x4096"
    assert c.label == "tma_wgmma/triton"
    # another shape of the same bucket takes the same entry
    assert dispatch.choose(3968, 4096, 2944, "bf16", "nn", FAKE, table=table).source == "table"


@pytest.mark.fast
def test_the_nearest_measured_bucket_of_the_same_class_answers_next():
    table = table_of(entry("16x8192x4096:a4", "decode", "triton", layout="nt"),
                     entry("4096x8192x4096:a128", "persistent", layout="nt"))
    c = dispatch.choose(32, 5000, 3000, "bf16", "nt", FAKE, table=table)
    assert (c.stage, c.backend, c.source) == ("decode", "triton", "nearest")
    assert "no measurement for 32x8192x4096:a4" in c.reason
    assert "nearest measured bucket 16x8192x4096:a4 (distance 1)" in c.reason
    # a wide call never takes a thin entry: 128 rows is past the small side of 64
    c = dispatch.choose(2048, 8192, 4096, "bf16", "nt", FAKE, table=table)
    assert (c.stage, c.source) == ("persistent", "nearest")
    # too far from anything measured (distance above 6): the rule
    c = dispatch.choose(256, 256, 256, "bf16", "nt", FAKE, table=table)
    assert c.source == "rule" and "within distance 6" in c.reason
    # another layout or precision has no entry: the rule
    assert dispatch.choose(16, 8192, 4096, "bf16", "nn", FAKE, table=table).source == "rule"
    assert dispatch.choose(16, 8192, 4096, "fp16", "nt", FAKE, table=table).source == "rule"


@pytest.mark.fast
def test_every_stage_of_the_rule_exists_and_offers_its_precisions_on_both_backends():
    from lab.stages import get_stage

    for arch, shape, precisions, stage in dispatch.RULE:
        spec = get_stage(stage)
        assert arch in ("sm_90a", "other") and shape in ("thin", "any")
        for backend in ("cuda", "triton"):
            assert set(precisions) <= set(spec.precisions_for(backend)), (stage, backend)
            needs = spec.offer(backend).arch
            assert needs is None or arch == "sm_90a", (stage, backend)  # no sm_90a stage off it
            assert spec.offer(backend).interpreted or arch == "other"


@pytest.mark.fast
@pytest.mark.parametrize("cc,shape,precision,stage", [
    ((9, 0), (1, 4096, 4096), "bf16", "decode"),
    ((9, 0), (4096, 16, 4096), "fp8", "decode"),      # N is the small side
    ((9, 0), (64, 4096, 4096), "fp16", "decode"),
    ((9, 0), (65, 4096, 4096), "bf16", "persistent"),
    ((9, 0), (16, 4096, 4096), "tf32", "persistent"),  # decode computes no tf32
    ((9, 0), (4096, 4096, 4096), "3xtf32", "persistent"),
    ((9, 0), (4096, 4096, 4096), "fp8", "persistent"),
    ((9, 0), (1, 4096, 4096), "fp32", "warptiling"),
    ((8, 0), (4096, 4096, 4096), "bf16", "mma"),
    ((8, 0), (1, 4096, 4096), "fp16", "mma"),
    ((8, 0), (4096, 4096, 4096), "tf32", "mma"),
    ((12, 0), (4096, 4096, 4096), "3xtf32", "mma"),    # a newer GPU has no sm_90a either
    ((8, 0), (4096, 4096, 4096), "fp32", "warptiling"),
])
def test_a_gpu_the_table_does_not_hold_gets_the_rule(cc, shape, precision, stage):
    target = dispatch.Target("NVIDIA Unknown", cc)
    c = dispatch.choose(*shape, precision, "nn", target, table=table_of())
    assert (c.stage, c.backend, c.source, c.params) == (stage, "cuda", "rule", {})
    assert "the dispatch table has no entry for NVIDIA Unknown" in c.reason
    assert ("the rule for sm_90 GPUs" if cc == (9, 0) else "the rule for GPUs without sm_90a") \
        in c.reason


@pytest.mark.fast
def test_fp8_off_hopper_takes_a_stage_that_runs_it_or_is_refused_in_one_sentence():
    ada = dispatch.Target("NVIDIA L40S", (8, 9))
    c = dispatch.choose(1, 4096, 4096, "fp8", "nt", ada, table=table_of())
    assert c.stage == "decode" and "the last stage of the ladder that runs it" in c.reason
    ampere = dispatch.Target("NVIDIA A100-SXM4-80GB", (8, 0))
    with pytest.raises(LabError) as info:
        dispatch.choose(4096, 4096, 4096, "fp8", "nn", ampere, table=table_of())
    assert refusal(info) == ("the automatic choice has no stage for fp8 on NVIDIA "
                             "A100-SXM4-80GB: fp8 needs compute capability 8.9 or newer and "
                             "this GPU is 8.0; use bf16 or fp16 tensors")


@pytest.mark.fast
def test_an_sm90a_stage_is_never_chosen_for_an_sm80_gpu(monkeypatch):
    """The table names Hopper stages; on a GPU of compute capability 8.0 (the capability the
    module reads from torch, replaced here) they are passed over, and the reason says why."""
    monkeypatch.setattr(dispatch, "device_gpu", lambda device: ("Fake GPU", (8, 0)))
    target = dispatch.target_of(torch.device("cuda", 0))
    assert target == dispatch.Target("Fake GPU", (8, 0))
    table = table_of(entry("4096x4096x4096:a128", "persistent",
                           nxt=[("tma_wgmma", "triton", None), ("mma", "triton", None)]))
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", target, table=table)
    assert (c.stage, c.backend, c.source) == ("mma", "triton", "table")
    assert ("passed over persistent (cuda): it needs sm_90a (compute capability 9.0); "
            "tma_wgmma (triton): it needs sm_90a") in c.reason
    # none of the entries runs: the rule for GPUs without sm_90a
    table = table_of(entry("4096x4096x4096:a128", "wgmma", nxt=[("warp_specialized", "cuda",
                                                                  None)]))
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", target, table=table)
    assert (c.stage, c.backend, c.source) == ("mma", "cuda", "rule")
    assert "the dispatch table's entries for Fake GPU cannot run it" in c.reason
    for stage in ("wgmma", "tma_wgmma", "warp_specialized", "persistent"):
        for backend in ("cuda", "triton"):
            assert "needs sm_90a" in dispatch.why_not(stage, backend, {}, "bf16", target)
            assert dispatch.why_not(stage, backend, {}, "bf16", H200) is None


@pytest.mark.fast
def test_a_precision_not_offered_or_parameters_refused_are_passed_over():
    table = table_of(entry("4096x4096x4096:a128", "warptiling",
                           nxt=[("persistent", "cuda", {"BN": 7}),
                                ("tma_wgmma", "cuda", {"WGS": 3, "BN": 256, "STAGES": 8}),
                                ("tma_wgmma", "triton", {"BLOCK_N": 128})]))
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", FAKE, table=table)
    assert (c.stage, c.backend, c.params, c.source) == ("tma_wgmma", "triton", {"BLOCK_N": 128},
                                                        "table")
    assert "warptiling (cuda): it does not compute in bf16" in c.reason
    assert "persistent (cuda): BN=7 is not one of its choices" in c.reason
    assert "tma_wgmma (cuda): it refuses WGS=3,BN=256,STAGES=8 (tma_wgmma with" in c.reason
    assert "measured next fastest" in c.reason
    assert dispatch.why_not("nosuch", "cuda", {}, "bf16", FAKE) == "this lab has no stage nosuch"
    assert dispatch.why_not("persistent", "cuda", {"tile": 16}, "bf16", FAKE) == (
        "it has no cuda parameter tile")


@pytest.mark.fast
def test_cpu_tensors_get_a_triton_kernel_the_interpreter_runs():
    cpu = dispatch.CPU_TENSORS
    assert dispatch.target_of("cpu") == cpu
    for shape, precision, stage in (((16, 48, 40), "bf16", "decode"),
                                    ((96, 80, 48), "bf16", "persistent"),
                                    ((96, 80, 48), "3xtf32", "persistent"),
                                    ((96, 80, 48), "fp32", "warptiling")):
        c = dispatch.choose(*shape, precision, "nn", cpu)
        assert (c.stage, c.backend, c.source) == (stage, "triton", "rule")
        assert dispatch.get_stage(stage).offer("triton").interpreted
        assert "CPU tensors have no GPU to look up" in c.reason
    assert dispatch.why_not("warp_specialized", "triton", {}, "bf16", cpu) == (
        "the Triton interpreter cannot run it (a GPU-only kernel)")
    assert dispatch.why_not("persistent", "cuda", {}, "bf16", cpu) == (
        "CPU tensors run only Triton kernels, under the interpreter")
    with pytest.raises(LabError) as info:
        dispatch.choose(16, 48, 40, "bf16", "nn", cpu, backend="cuda")
    assert "found no stage on backend cuda that runs bf16 nn 16x48x40 on CPU tensors" in \
        refusal(info)


@pytest.mark.fast
def test_a_backend_given_restricts_the_choice():
    table = table_of(entry("4096x4096x4096:a128", "persistent", "cuda",
                           nxt=[("persistent", "triton", None)]))
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", FAKE, backend="triton", table=table)
    assert (c.stage, c.backend, c.source) == ("persistent", "triton", "table")
    assert "persistent (cuda): backend='triton' was asked for" in c.reason
    c = dispatch.choose(4096, 4096, 4096, "fp32", "nn", FAKE, backend="triton", table=table)
    assert (c.stage, c.backend) == ("warptiling", "triton")


@pytest.mark.fast
@pytest.mark.parametrize("args,words", [
    ((64, 64, 64, "fp4", "nn"), "unknown precision 'fp4'"),
    ((64, 64, 64, "bf16", "nx"), "unknown layout 'nx'"),
])
def test_choose_refuses_unknown_axes_in_one_sentence(args, words):
    with pytest.raises(LabError) as info:
        dispatch.choose(*args, FAKE, table=table_of())
    assert words in refusal(info)
    with pytest.raises(LabError) as info:
        dispatch.choose(64, 64, 64, "bf16", "nn", FAKE, backend="gpu", table=table_of())
    assert "unknown backend 'gpu'" in refusal(info)


# ------------------------------------------------------------------------------ the builder


def _row(stage, backend, ms, pct, *, M=4096, N=4096, K=4096, precision="bf16", layout="nn",
         status="pass", params="", repeat=None):
    return Row(stage=stage, backend=backend, precision=precision, M=M, N=N, K=K, layout=layout,
               status=status, median_ms=ms, pct_cublas=pct, params=params, repeat=repeat)


def _csv(path: Path, rows, gpu="Fake GPU", when="2026-11-29T10:00:00+00:00") -> str:
    write_csv(rows, path, {"gpu": gpu, "compute_capability": "9.0", "sm_count": 132,
                           "timestamp": when, "mode": "gpu", "commit": "abc1234"})
    return str(path)


@pytest.mark.fast
def test_the_builder_takes_the_fastest_passing_stage_row_by_the_median_over_repeats(tmp_path):
    rows = [_row("cublas", "cublas", 0.20, 100.0)]
    # persistent cuda: repeats 0.30, 0.18, 0.19 ms -> median 0.19 ms; pct 95, 110, 105 -> 105
    rows += [_row("persistent", "cuda", ms, pct, repeat=i, params="CONSUMERS=2,BN=256,STAGES=4,"
                  "CLUSTER=1,STORE=1,group=8,swap=1")
             for i, (ms, pct) in enumerate([(0.30, 95.0), (0.18, 110.0), (0.19, 105.0)])]
    # tma_wgmma triton: 0.21 ms, 100 % every time
    rows += [_row("tma_wgmma", "triton", 0.21, 100.0, repeat=i) for i in range(3)]
    # wgmma cuda: faster, but failed its check (not timed): never chosen
    rows += [_row("wgmma", "cuda", 0.05, 400.0, status="fail")]
    rows += [_row("tiled", "triton", None, None, status="error")]
    rows += [_row("mma[TF32_RN=0]", "cuda", 0.01, 900.0)]   # a build define: left out
    rows += [_row("nosuch", "cuda", 0.01, 900.0)]           # no such stage: left out
    data = dispatch.build_table([_csv(tmp_path / "a.csv", rows)])
    assert data["format"] == dispatch.FORMAT and data["gpus"] == {
        "Fake GPU": {"capability": "9.0", "sm_count": 132}}
    (e,) = data["entries"]
    assert (e["gpu"], e["bucket"], e["precision"], e["layout"]) == (
        "Fake GPU", "4096x4096x4096:a128", "bf16", "nn")
    assert (e["stage"], e["backend"], e["params"]) == ("persistent", "cuda", {})
    (m,) = e["measured"]
    assert (m["shape"], m["median_ms"], m["pct_cublas"], m["repeats"]) == (
        "4096x4096x4096", 0.19, 105.0, 3)
    assert m["ran"] == {"CONSUMERS": 2, "BN": 256, "STAGES": 4, "CLUSTER": 1, "STORE": 1,
                        "group": 8}  # swap=1 is no registry parameter
    assert [(n["stage"], n["backend"]) for n in e["next"]] == [("tma_wgmma", "triton")]
    left = data["built"]["left_out"]
    assert left["rows that did not pass"] == 2
    assert left["rows of a build define the registry does not have"] == 1
    assert left["rows of stages this lab no longer has"] == 1
    # by median ms instead: the same here; a table the reader accepts
    assert dispatch.build_table([str(tmp_path / "a.csv")], by="ms")["entries"][0]["stage"] \
        == "persistent"
    dispatch.parse_table(dispatch.dump_table(data))


@pytest.mark.fast
def test_the_builder_ranks_by_pct_of_cublas_and_across_the_shapes_of_a_bucket(tmp_path):
    # two shapes in one bucket: decode triton wins one by a little, decode cuda the other by a lot
    rows = [_row("decode", "cuda", 0.020, 110.0, M=1, N=12288, K=4096, layout="nt"),
            _row("decode", "triton", 0.021, 105.0, M=1, N=12288, K=4096, layout="nt"),
            _row("decode", "cuda", 0.030, 120.0, M=1, N=16384, K=4096, layout="nt"),
            _row("decode", "triton", 0.050, 60.0, M=1, N=16384, K=4096, layout="nt"),
            # measured at one of the bucket's shapes only: ranked after the others
            _row("gemv", "cuda", 0.010, 300.0, M=1, N=16384, K=4096, layout="nt")]
    data = dispatch.build_table([_csv(tmp_path / "d.csv", rows)])
    (e,) = data["entries"]
    assert e["bucket"] == "1x16384x4096:a1"
    assert [(x["stage"], x["backend"]) for x in [e, *e["next"]]] == [
        ("decode", "cuda"), ("decode", "triton"), ("gemv", "cuda")]
    assert [m["shape"] for m in e["measured"]] == ["1x12288x4096", "1x16384x4096"]


@pytest.mark.fast
def test_a_measured_shape_whose_own_fastest_beats_the_buckets_choice_keeps_it(tmp_path):
    """Two layers in one bucket: three consumer warpgroups win the bucket (far ahead at the
    narrow layer), the defaults win the other layer by 12 points: a call of exactly that layer
    takes the defaults (source "shape"), the narrow layer and an unmeasured shape of the bucket
    the bucket's choice. A win inside SHAPE_MARGIN keeps no shape of its own."""
    c3 = "CONSUMERS=3,BN=128,STAGES=4,CLUSTER=1,STORE=1,group=8"
    rows = [_row("persistent", "cuda", 0.600, 100.0, M=4096, N=4096, K=11008, layout="nt"),
            _row("persistent:CONSUMERS=3,BN=128", "cuda", 0.680, 88.0, M=4096, N=4096, K=11008,
                 layout="nt", params=c3),
            _row("persistent", "cuda", 0.620, 75.0, M=4096, N=2304, K=16384, layout="nt"),
            _row("persistent:CONSUMERS=3,BN=128", "cuda", 0.470, 99.0, M=4096, N=2304, K=16384,
                 layout="nt", params=c3),
            # another bucket: tma_wgmma 2% ahead of the choice at one of its two shapes
            _row("persistent", "cuda", 0.100, 100.0, M=256, N=4096, K=4096, layout="nt"),
            _row("tma_wgmma", "cuda", 0.098, 102.0, M=256, N=4096, K=4096, layout="nt"),
            _row("persistent", "cuda", 0.100, 100.0, M=256, N=3000, K=4096, layout="nt"),
            _row("tma_wgmma", "cuda", 0.150, 70.0, M=256, N=3000, K=4096, layout="nt")]
    data = dispatch.build_table([_csv(tmp_path / "s.csv", rows)])
    by = {e["bucket"]: e for e in data["entries"]}
    e = by["4096x4096x16384:a128"]
    assert (e["stage"], e["params"]) == ("persistent", {"CONSUMERS": 3, "BN": 128})
    (x,) = e["shapes"]
    assert (x["stage"], x["backend"], x["params"]) == ("persistent", "cuda", {})
    assert x["measured"][0]["shape"] == "4096x4096x11008" and x["measured"][0]["pct_cublas"] == 100
    assert "shapes" not in by["256x4096x4096:a128"]  # 102 against 100: inside the margin
    table = dispatch.Table(Path("t.json"), dispatch.parse_table(dispatch.dump_table(data)))
    c = dispatch.choose(4096, 4096, 11008, "bf16", "nt", FAKE, table=table)
    assert (c.stage, c.params, c.source) == ("persistent", {}, "shape")
    assert "measured fastest at 4096x4096x11008 itself" in c.reason and "100.0%" in c.reason
    for M, N, K in ((4096, 2304, 16384), (4096, 3072, 16384)):
        c = dispatch.choose(M, N, K, "bf16", "nt", FAKE, table=table)
        assert (c.params, c.source) == ({"CONSUMERS": 3, "BN": 128}, "table")
    assert dispatch.SOURCE_WORDS["shape"]
    # a table whose shapes are not choices measured at one shape each is refused
    bad = dict(e, shapes=[dict(x, measured=x["measured"] * 2)])
    with pytest.raises(LabError) as info:
        table_of(bad)
    assert "shapes that are not a list of choices measured at one shape each" in refusal(info)


@pytest.mark.fast
def test_the_builder_keeps_the_newest_files_rows_and_the_parameters_a_row_set(tmp_path):
    old = _csv(tmp_path / "old.csv", [_row("persistent", "cuda", 0.10, 200.0),
                                      _row("tma_wgmma", "cuda", 0.20, 100.0)],
               when="2026-11-26T00:00:00+00:00")
    new = _csv(tmp_path / "new.csv", [_row("persistent", "cuda", 0.40, 50.0),
                                      _row("tiled:tile=16", "triton", 0.30, 70.0,
                                           precision="fp32",
                                           params="tile=16,num_warps=4,num_stages=1"),
                                      _row("warptiling:auto", "triton", 0.30, 60.0,
                                           precision="fp32",
                                           params="splitk=1,BLOCK_M=64,BLOCK_N=128,"
                                                  "BLOCK_K=32,GROUP_M=8,num_warps=4,"
                                                  "num_stages=3,realign=False")],
               when="2026-11-29T00:00:00+00:00")
    data = dispatch.build_table([new, old])  # the order given does not matter, the time does
    fp32, bf16 = data["entries"]
    # persistent's older, faster rows are measured again by the newer file: the newer stand
    assert [(x["stage"], x["measured"][0]["median_ms"]) for x in [bf16, *bf16["next"]]] == [
        ("tma_wgmma", 0.2), ("persistent", 0.4)]
    assert data["built"]["left_out"]["rows measured again in a newer file"] == 1
    assert [(x["stage"], x["params"]) for x in [fp32, *fp32["next"]]] == [
        ("tiled", {"tile": 16}),  # the label's parameters
        ("warptiling", {"splitk": 1, "BLOCK_M": 64, "num_warps": 4})]  # the tuned ones
    assert [s["csv"] for s in data["sources"]] == [new, old]


@pytest.mark.fast
def test_a_newer_file_of_other_parameters_leaves_the_older_configuration_standing(tmp_path):
    """A sweep of a stage's variants, run after its defaults were measured, adds configurations:
    the defaults' older rows still count (they once were dropped, and a bucket whose newest file
    held only smaller tiles chose them at 62% of cuBLAS over the defaults at 99%)."""
    old = _csv(tmp_path / "old.csv", [_row("persistent", "cuda", 0.10, 99.0)],
               when="2026-11-26T00:00:00+00:00")
    new = _csv(tmp_path / "new.csv", [_row("persistent:CONSUMERS=1,BN=128", "cuda", 0.16, 62.0,
                                           params="CONSUMERS=1,BN=128,STAGES=4,CLUSTER=1")],
               when="2026-11-29T00:00:00+00:00")
    (e,) = dispatch.build_table([old, new])["entries"]
    assert (e["stage"], e["params"]) == ("persistent", {})
    assert e["measured"][0]["median_ms"] == 0.1


@pytest.mark.fast
def test_the_builder_leaves_out_a_csv_without_a_gpu_and_refuses_a_missing_file(tmp_path):
    path = tmp_path / "cpu.csv"
    write_csv([_row("tiled", "triton", None, None, status="pass")], path, {"mode": "cpu"})
    said = []
    data = dispatch.build_table([str(path)], say=said.append)
    assert data["entries"] == [] and any("names no GPU" in s for s in said)
    with pytest.raises(LabError) as info:
        dispatch.build_table([str(tmp_path / "none.csv")])
    assert "no CSV file" in refusal(info)
    with pytest.raises(LabError) as info:
        dispatch.build_table([str(path)], exclude=("nosuch",))
    assert "unknown stage 'nosuch'" in refusal(info)


@pytest.mark.fast
def test_the_command_builds_shows_and_answers(tmp_path, capsys, monkeypatch):
    csv = _csv(tmp_path / "a.csv", [_row("persistent", "cuda", 0.19, 105.0),
                                    _row("tiled_padded", "triton", 0.01, 500.0),
                                    _row("decode", "triton", 0.02, 90.0, M=16, layout="nt")])
    out = tmp_path / "t" / "table.json"
    monkeypatch.setenv("COLUMNS", "100")
    assert dispatch.main(["build", csv, "--out", str(out), "--exclude", "tiled_padded"]) == 0
    data = json.loads(out.read_text())
    assert data["built"]["command"].endswith("--exclude tiled_padded")
    assert [e["stage"] for e in data["entries"]] == ["persistent", "decode"]
    assert out.read_text().count('\n  {"gpu": ') == 2  # one line per entry
    assert dispatch.main(["show", "--table", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "Fake GPU (compute capability 9.0, 132 SMs)" in shown
    assert "4096x4096x4096:a128" in shown and "persistent/cuda" in shown and "105.0" in shown
    assert dispatch.main(["which", "--table", str(out), "--size", "4096", "--precision", "bf16",
                          "--gpu", "Fake GPU"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("Fake GPU (compute capability 9.0), bf16 nn 4096x4096x4096: "
                           "persistent (cuda) with the defaults")
    assert "from the dispatch table: measured fastest" in said
    assert dispatch.main(["which", "--table", str(out), "--size", "4096", "--precision", "bf16",
                          "--gpu", "NVIDIA A100-SXM4-80GB", "--cc", "8.0"]) == 0
    assert "mma (cuda)" in capsys.readouterr().out
    for argv, words in ((["which", "--table", str(out), "--size", "4096", "--gpu", "Other"],
                         "does not know Other's compute capability"),
                        (["which", "--table", str(out), "--size", "4096", "--gpu", "Other",
                          "--cc", "nine"], "--cc takes a compute capability"),
                        (["which", "--table", str(out), "--size", "64,65"], "one shape"),
                        ([], "name a command"),
                        (["build", csv], "--out")):
        assert dispatch.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err


# ------------------------------------------------------------------ lab.matmul and lab.which


@pytest.fixture
def fresh_plans():
    plans.clear()
    yield
    plans.clear()


@cpu_only
def test_matmul_with_no_stage_runs_a_triton_stage_on_cpu_bfloat16_and_replays(fresh_plans,
                                                                              monkeypatch):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(24, 40, generator=g).bfloat16()
    b = torch.randn(40, 56, generator=g).bfloat16()
    c = lab.matmul(a, b)
    assert c.dtype == torch.bfloat16 and c.shape == (24, 56)
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2
    plan = plans.lookup(plans.signature(a, b, None, "auto", None, None, {}))
    assert plan is not None and plan.where == "stage decode (triton)" and plan.replay is not None
    calls = []
    monkeypatch.setattr(dispatch, "choose", lambda *x, **k: calls.append(1))
    a2 = torch.randn(24, 40, generator=g).bfloat16()
    c2 = lab.matmul(a2, b, stage="auto")  # "auto" is the same as no stage: the same plan
    assert calls == []  # replayed: no second choice
    ref2 = a2.double() @ b.double()
    assert float((c2.double() - ref2).norm() / ref2.norm()) < 1e-2


@cpu_only
def test_matmul_with_no_stage_takes_fp32_and_a_backend(fresh_plans):
    a, b = torch.randn(20, 24), torch.randn(30, 24).t()
    torch.testing.assert_close(lab.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    out = torch.empty(20, 30)
    lab.matmul(a, b, out=out, backend="triton")
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)


@cpu_only
def test_which_says_what_runs_and_why_in_two_lines():
    a, b = torch.randn(16, 40).bfloat16(), torch.randn(56, 40).bfloat16().t()
    choice = lab.which(a, b)
    assert isinstance(choice, dispatch.Choice)
    assert (choice.stage, choice.backend, choice.params, choice.source) == (
        "decode", "triton", {}, "rule")
    text = str(choice)
    first, second = text.split("\n")
    assert first == "decode (triton) with the defaults"
    assert second.startswith("  CPU tensors have no GPU to look up in the dispatch table")
    assert "decode for bf16 with min(M, N) <= 64" in second
    assert lab.which(a.float(), b.float(), precision="tf32").stage == "persistent"
    assert "which" in lab.__all__


@pytest.mark.fast
@pytest.mark.parametrize("call,words", [
    (lambda: lab.matmul(torch.randn(4, 4), torch.randn(4, 4), tile=16),
     "stage='auto' picks the stage's parameters itself, so it takes none (tile)"),
    (lambda: lab.which([[1.0]], torch.randn(1, 1)), "a must be a torch.Tensor, not list"),
    (lambda: lab.which(torch.randn(4), torch.randn(4, 4)), "a must be a 2-D matrix"),
    (lambda: lab.which(torch.randn(4, 5), torch.randn(4, 4)), "A's columns and B's rows differ"),
    (lambda: lab.which(torch.randn(4, 4), torch.randn(4, 4), backend="gpu"),
     "unknown backend 'gpu'"),
    (lambda: lab.which(torch.randn(4, 4).int(), torch.randn(4, 4).int()), "int32"),
    (lambda: parse_variants(["auto:BM=64"], dispatch=True),
     "auto (the lab's choice of stage) takes no parameters (BM=64)"),
    (lambda: parse_variants(["auto"]), "auto on its own, the lab's choice of stage, is for "
                                       "lab.compare and lab.matmul"),
])
def test_auto_refusals_are_one_sentence(call, words):
    with pytest.raises(LabError) as info:
        call()
    assert words in refusal(info)


@cpu_only
def test_cpu_tensors_with_backend_cuda_are_refused_in_one_sentence():
    with pytest.raises(LabError) as info:
        lab.matmul(torch.randn(4, 4), torch.randn(4, 4), backend="cuda")
    assert "found no stage on backend cuda that runs fp32 nn 4x4x4 on CPU tensors" in \
        refusal(info)


@pytest.mark.fast
def test_auto_parses_as_the_labs_choice_beside_stage_auto():
    vs = parse_variants(["auto,persistent", "warptiling:auto", "auto"], dispatch=True)
    assert [(v.label, v.dispatch, v.auto) for v in vs] == [
        ("auto", True, False), ("persistent", False, False), ("warptiling:auto", False, True)]


# ------------------------------------------------------------------- lab.compare --stage auto


@cpu_only
def test_compare_stage_auto_in_cpu_mode_names_what_ran(tmp_path, capsys, monkeypatch):
    from lab.compare import main

    monkeypatch.setenv("COLUMNS", "100")
    out = tmp_path / "auto.csv"
    code = main(["--mode", "cpu", "--stage", "auto,tiled", "--backend", "triton", "--precision",
                 "bf16,fp32", "--sizes", "24x56x40", "--csv", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    import pandas as pd

    df = pd.read_csv(out)
    auto = df[df.stage == "auto"].set_index("precision")
    assert list(auto.backend) == ["triton", "triton"] and set(auto.status) == {"pass"}
    assert auto.loc["bf16", "params"].startswith("decode/triton: splitk=")
    assert auto.loc["fp32", "params"].startswith("warptiling/triton: splitk=")
    assert auto.loc["bf16", "detail"].startswith("auto: by the rule: CPU tensors")
    assert "auto bf16 nn 24x56x40: decode/triton: splitk=" in " ".join(text.split())
    assert len(df[df.stage == "tiled"]) == 2  # tiled ran beside it, both precisions
    # with --backend cuda, CPU mode compiles the CUDA stage the rule picks for sm_90
    code = main(["--mode", "cpu", "--stage", "auto", "--backend", "cuda", "--precision", "bf16",
                 "--sizes", "16x64x64", "--csv", str(out)])
    assert code == 0
    row = pd.read_csv(out).iloc[0]
    assert (row.stage, row.backend, row.status) == ("auto", "cuda", "compiled")
    assert row.params.startswith("decode/cuda: ")


def test_compare_list_mentions_auto():
    from lab.compare import list_stages

    text = list_stages()
    assert "\nauto " in text and "NAME:auto is another thing" in " ".join(text.split())
    assert list_stages(["auto"]).startswith("auto ")


# ------------------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,layout,dtype,precision", [
    (1, 12288, 4096, "nt", torch.bfloat16, None),
    (16, 4096, 4096, "nt", torch.bfloat16, None),
    (64, 8192, 1024, "nt", torch.float8_e4m3fn, None),
    (4096, 4096, 4096, "nn", torch.bfloat16, None),
    (1025, 1025, 1025, "tt", torch.float16, None),
    (7919, 6007, 3001, "nn", torch.bfloat16, None),
    (2048, 2048, 2048, "nt", torch.float32, "tf32"),
    (1024, 1024, 1024, "nn", torch.float32, None),
])
def test_matmul_with_no_stage_is_right_on_the_gpu(M, N, K, layout, dtype, precision,
                                                   fresh_plans):
    from lab import check as chk
    from lab.base.dtypes import PRECISION_OF_DTYPE

    p = precision or PRECISION_OF_DTYPE[str(dtype).removeprefix("torch.")]
    a, b, scales = chk.inputs_for(p, M, N, K, 0, "cuda", layout)
    kw = {} if scales is None else dict(scale_a=scales[0], scale_b=scales[1])
    choice = lab.which(a, b, precision=precision)
    c = lab.matmul(a, b, precision=precision, **kw)
    result = chk.compare(c, chk.reference(a, b, scales), K, p)
    assert result.passed, (str(choice), result.reason)
    lab.matmul(a, b, precision=precision, **kw)  # the replayed plan
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_every_entry_of_this_gpus_table_runs_its_choice():
    """Each entry of the shipped table for this GPU: its choice (and runners-up) can run here,
    and the choice runs correctly at a small shape of its bucket's class and layout."""
    target = dispatch.target_of("cuda")
    table = dispatch.load_table(dispatch.TABLE)
    mine = [e for e in table.entries if e["gpu"] == target.gpu]
    if not mine:
        pytest.skip(f"the shipped table has no entry for {target.gpu}")
    for e in mine:
        for item in [e, *e["next"]]:
            assert dispatch.why_not(item["stage"], item["backend"], item["params"],
                                    e["precision"], target) is None, (e["bucket"], item)


def test_api_timing_of_an_auto_row_calls_auto_every_time(monkeypatch):
    """--api on an auto row times lab.matmul(a, b, stage="auto") in three places: one checked
    call, the interleaved timing and the CPU microseconds per call. Every one of them must be the
    auto call (a name the timing's result once shadowed turned the CPU timing's calls into a
    TypeError, so every auto row of an --api run on a GPU ended as an error)."""
    from lab import run, timing
    from lab.stages import Variant, get_stage

    calls = []

    def fake_matmul(a, b, stage=None, backend=None, out=None, precision=None, **kw):
        calls.append((stage, backend))
        out.copy_(a @ b)

    def fake_bench(fn, base, rep_ms):
        fn()
        return (timing.Timing(2.0, 1.9, 2.1, 5), timing.Timing(1.0, 0.9, 1.1, 5))

    monkeypatch.setattr(lab, "matmul", fake_matmul)
    monkeypatch.setattr(timing, "bench_adjacent", fake_bench)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    stage = get_stage("decode")
    variant = Variant(stage, stage.defaults())
    module = stage.module("triton")
    monkeypatch.setattr(module, "prepare", lambda *a, **k: None)
    a, b = torch.randn(4, 8), torch.randn(8, 6)
    c = a @ b
    row = Row("auto", "triton", "bf16", 4, 6, 8)
    spec = run.RunSpec([variant], ["triton"], [], precision="bf16", api=True, rep_ms=1.0)
    run._time_api(row, variant, "triton", a, b, c, spec, launch=None, api=("auto", None))
    assert "differs" not in row.detail
    assert row.api_ms == 2.0 and row.api_ratio == 2.0
    assert row.api_us is not None and row.prepare_us is not None
    assert len(calls) >= 3 and set(calls) == {("auto", None)}


def test_a_power_capped_row_is_held_against_the_top_clock():
    """A power-capped row's clock moves between NVML's samples: its peak is the top clock's, so
    that cuBLAS at 730 TFLOPS with every sample at 1305 MHz (an H200 row) stays a speed; a row
    that was not capped keeps the peak of its highest sampled clock."""
    from lab.run import _GpuInfo

    gpu = _GpuInfo((9, 0), 132, 1980.0)
    capped = Row("cublas", "cublas", "bf16", 16384, 4096, 4096, sm_mhz_max=1305.0,
                 throttle="power_cap")
    free = Row("cublas", "cublas", "bf16", 16384, 4096, 4096, sm_mhz_max=1305.0)
    gpu.set_peak(capped)
    gpu.set_peak(free)
    assert capped.peak_gflops == pytest.approx(132 * 4096 * 1980e6 / 1e9)
    assert free.peak_gflops == pytest.approx(132 * 4096 * 1305e6 / 1e9)
    assert 730e3 < 1.02 * capped.peak_gflops and 730e3 > 1.02 * free.peak_gflops
