"""Where each stage runs: every launcher's declaration (Offer.requires, Offer.arch), checked
without a GPU of each kind.

Builds (NVRTC; not in the fast tier): every CUDA stage's default build (its OFFER.compile at
1025 x 1000 x 513, layout nn, as tests/test_cpu_stages.py builds it; gemv and decode at
16 x 1000 x 513, the thin products they are built for) in every precision it offers, for each of sm_75, sm_80, sm_86, sm_89 and sm_90 its declaration says it runs on (the
Hopper stages: sm_90a), so that a change that breaks the build on an A100 or an L40S is caught
here. And the declarations are not too loose where NVRTC can show it: the build for the
architecture just below a stage's oldest one fails (mma on sm_75, fp8 decode on sm_86, the sm_90a
kernels as plain sm_90). The builds run in threads (NVRTC releases the GIL; building_for sets
each thread's target), once per process, about 70 s on 2 cores from a cold build cache.

Declarations (fast): runs_on's clauses, the one-sentence refusal of prepare() on a GPU a stage
does not run on (the GPU's capability replaced), where `auto`, lab.compare and lab.doctor read
the same declarations, and the lists (ARCHS, Offer.archs) the builds above are made from. The
Triton twins cannot be compiled for another GPU here; their declarations are checked as logic.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from helpers import cpu_only
from lab.base import entry as entry_mod
from lab.base.contract import ARCHS, FLOOR, Offer, capability_of
from lab.base.dtypes import DTYPE_NAMES
from lab.base.errors import CompileError, LabError
from lab.stages import BACKENDS, STAGES, Variant, get_stage
from lab.toolchain.nvrtc import building_for, compile_kernel

SHAPE = (1025, 1000, 513)  # tests/test_cpu_stages.py's: the sm_90 builds are shared on disk
THIN = (16, 1000, 513)  # a stage built for thin products (Stage.built_for: gemv, decode)
fast = pytest.mark.fast


def _params(stage, backend="cuda") -> dict:
    return Variant(stage, stage.defaults()).params_for(backend)


def _jobs() -> list[tuple[str, str, str, bool]]:
    """(stage, precision, arch, expected to build) for every CUDA stage: each declared arch, and
    the one of ARCHS just below the oldest declared (where there is one)."""
    jobs = []
    for stage in STAGES:
        offer = stage.offer("cuda")
        for p in offer.precisions:
            archs = offer.archs(p, _params(stage))
            assert archs, f"{stage.name} declares no GPU for {p}"
            jobs += [(stage.name, p, a, True) for a in archs]
            if offer.arch is None and archs[0] != ARCHS[0]:
                jobs.append((stage.name, p, ARCHS[ARCHS.index(archs[0]) - 1], False))
    return jobs


JOBS = _jobs()


def _build(job):
    name, precision, arch, _ = job
    stage = get_stage(name)
    try:
        with building_for(arch):
            build, _geometry = stage.offer("cuda").compile(
                _params(stage), *(THIN if stage.built_for else SHAPE), "nn", precision)
        return build
    except CompileError as exc:
        return exc


@pytest.fixture(scope="module")
def builds() -> dict:
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip(JOBS, pool.map(_build, JOBS)))


@pytest.mark.parametrize("job", [j for j in JOBS if j[3]], ids=lambda j: "-".join(j[:3]))
def test_every_cuda_stage_builds_for_every_architecture_it_declares(builds, job):
    name, precision, arch, _ = job
    build = builds[job]
    assert not isinstance(build, Exception), f"{name} {precision} on {arch}: {build}"
    assert build.arch == arch and build.cubin[:4] == b"\x7fELF"
    assert build.spill_bytes == 0, f"{name} {precision} spills {build.spill_bytes} bytes on {arch}"


@pytest.mark.parametrize("job", [j for j in JOBS if not j[3]], ids=lambda j: "-".join(j[:3]))
def test_the_build_below_the_oldest_declared_architecture_fails(builds, job):
    """The declaration is not too loose: mma, decode and gemv's bf16 / fp16 do not build for
    sm_75, fp8 decode not for sm_86 (no e4m3 MMA before sm_89)."""
    name, precision, arch, _ = job
    assert isinstance(builds[job], CompileError), f"{name} {precision} builds for {arch}"
    assert "sm_80" in str(builds[job]) or "sm_89" in str(builds[job]) or \
        "8.0" in str(builds[job])


def test_the_cp_async_pipeline_builds_from_sm_80_only():
    offer = get_stage("double_buffered").offer("cuda")
    params = {**_params(get_stage("double_buffered")), "pipeline": "cp_async", "stages": 3}
    assert offer.archs("fp32", params) == ARCHS[1:]
    with building_for("sm_80"):
        assert offer.compile(params, *SHAPE, "nn", "fp32")[0].arch == "sm_80"
    with building_for("sm_75"), pytest.raises(CompileError, match="compute capability 8.0"):
        offer.compile(params, *SHAPE, "nn", "fp32")


@pytest.mark.parametrize("source", ["wgmma.cu", "tma_wgmma.cu", "warp_specialized.cu",
                                    "persistent.cu"])
def test_the_hopper_kernels_do_not_build_as_plain_sm_90(source):
    with pytest.raises(CompileError, match="sm_90a"):
        compile_kernel(source, "k", {"PREC_BF16": 1}, arch="sm_90")


# ------------------------------------------------------------------------------ declarations


@fast
def test_the_architectures_named_are_the_ones_nvrtc_builds():
    from lab.toolchain.nvrtc import _nvrtc

    _, supported = _nvrtc().nvrtcGetSupportedArchs()
    assert min(supported) == 10 * FLOOR[0] + FLOOR[1]  # the lab's floor is NVRTC's oldest
    assert all(10 * capability_of(a)[0] + capability_of(a)[1] in supported for a in ARCHS)
    assert capability_of("sm_90a") == (9, 0) and capability_of("sm_120") == (12, 0)


@fast
def test_what_each_stage_declares():
    """The table of docs/ARCHITECTURE.md ("Which GPUs run what"), as the Offers declare it."""
    want = {
        "mma": "sm_80+", "decode": "sm_80+",
        **{s: "sm_90a" for s in ("wgmma", "tma_wgmma", "warp_specialized", "persistent")},
    }
    for stage in STAGES:
        for backend in BACKENDS:
            offer = stage.offer(backend)
            for p in offer.precisions:
                need = offer.requirement(p)
                if p == "fp8":
                    assert need in ("sm_89+", "sm_90a"), (stage.name, backend)
                elif stage.name in want:
                    assert need == want[stage.name], (stage.name, backend, p)
                elif p == "fp32" or (stage.name == "gemv" and backend == "triton"):
                    assert need == "sm_75+", (stage.name, backend, p)  # CUDA cores
                else:  # gemv's CUDA bf16 / fp16, tl.dot on the tensor cores
                    assert need == "sm_80+", (stage.name, backend, p)
    db = get_stage("double_buffered").offer("cuda")
    assert db.requirement("fp32", {"pipeline": "regs"}) == "sm_75+"
    assert db.requirement("fp32", {"pipeline": "cp_async"}) == "sm_80+"


@fast
@pytest.mark.parametrize("capability,precision,clause", [
    ((7, 5), "bf16", "needs sm_80 or newer (compute capability 8.0+)"),
    ((8, 6), "fp8", "needs sm_89 or newer (compute capability 8.9+) for fp8"),
    ((8, 9), "fp8", None),
    ((12, 0), "bf16", None),
])
def test_runs_on_says_what_a_stage_needs_as_a_clause(capability, precision, clause):
    assert get_stage("decode").offer("cuda").runs_on(capability, precision) == clause
    gemv = get_stage("gemv").offer("cuda")
    assert gemv.runs_on((7, 5), "fp32") is None
    assert gemv.runs_on((7, 5), "fp16") == ("needs sm_80 or newer (compute capability 8.0+) "
                                            "for fp16")
    assert gemv.runs_on((7, 5)) is None  # in some precision: fp32
    assert get_stage("double_buffered").offer("cuda").runs_on(
        (7, 5), "fp32", {"pipeline": "cp_async"}) == ("needs sm_80 or newer (compute capability "
                                                      "8.0+) with pipeline=cp_async")
    for cc in ((8, 0), (8, 9), (10, 0), (12, 0)):
        assert get_stage("persistent").offer("cuda").runs_on(cc, "bf16") == \
            "needs sm_90a (compute capability 9.0)"


@fast
def test_a_declaration_that_makes_no_sense_is_refused():
    for requires in ({"fp8": (8, 9)}, {"all": (7, 0)}, {"all": 8}, {"=x": (8, 0)}):
        with pytest.raises(ValueError, match="requires"):
            Offer("x", "cuda", precisions=("fp32",), requires=requires)
    with pytest.raises(ValueError, match="requires"):
        Offer("x", "cuda", precisions=("bf16",), arch="sm_90a", requires={"all": (9, 0)})


def _refusals():
    """(stage, backend, precision, arch) for each architecture of ARCHS (and sm_100, sm_120) the
    stage does not run on in that precision."""
    out = []
    for stage in STAGES:
        for backend in BACKENDS:
            offer = stage.offer(backend)
            for p in offer.precisions:
                for arch in (*ARCHS, "sm_100", "sm_120"):
                    if offer.runs_on(capability_of(arch), p, _params(stage, backend)):
                        out.append((stage.name, backend, p, arch))
    return out


@fast
@pytest.mark.parametrize("case", _refusals(), ids=lambda c: "-".join(c))
def test_prepare_refuses_a_gpu_the_stage_does_not_run_on_in_one_sentence(case, monkeypatch):
    """The public prepare() on tensors of a GPU of that architecture (its capability and name
    replaced; CPU tensors stand in): one sentence naming the stage, what it needs and the GPU,
    before any operand check or build."""
    name, backend, precision, arch = case
    cc = capability_of(arch)
    monkeypatch.setattr(entry_mod._device, "capability", lambda device: cc)
    monkeypatch.setattr(entry_mod._device, "gpu_name", lambda device: "NVIDIA Other")
    stage = get_stage(name)
    dtype = getattr(torch, DTYPE_NAMES[precision])
    a, b = torch.zeros(8, 8).to(dtype), torch.zeros(8, 8).to(dtype)
    with pytest.raises(LabError) as info:
        stage.module(backend).prepare(a, b, torch.empty(8, 8), precision=precision)
    text = str(info.value)
    assert text.startswith(f"stage {name} ({backend}) needs sm_"), text
    assert f"this GPU, NVIDIA Other, is compute capability {cc[0]}.{cc[1]} ({arch[:6]})" in text
    assert "\n" not in text and ". " not in text


@fast
def test_a_gpu_a_stage_runs_on_is_not_refused(monkeypatch):
    offer = get_stage("mma").offer("cuda")
    for cc in ((8, 0), (8, 6), (9, 0), (12, 0)):
        monkeypatch.setattr(entry_mod._device, "capability", lambda device, cc=cc: cc)
        entry_mod.refuse_gpu(offer, None, "bf16", {})  # nothing raised
    monkeypatch.undo()
    entry_mod.refuse_gpu(offer, torch.device("cpu"), "bf16", {})  # CPU tensors: the interpreter


@fast
def test_auto_reads_the_same_declarations():
    from lab import dispatch

    turing = dispatch.Target("Tesla T4", (7, 5))
    empty = dispatch.Table(None, {"entries": []})
    c = dispatch.choose(4096, 4096, 4096, "bf16", "nn", turing, table=empty)
    assert dispatch.why_not(c.stage, c.backend, c.params, "bf16", turing) is None
    assert "mma (cuda): it needs sm_80 or newer" in c.reason
    assert dispatch.why_not("double_buffered", "cuda", {"pipeline": "cp_async"}, "fp32",
                            turing) == ("it needs sm_80 or newer (compute capability 8.0+) with "
                                        "pipeline=cp_async")
    assert dispatch.why_not("decode", "cuda", {}, "fp8", dispatch.Target("A100", (8, 0))) == \
        "it needs sm_89 or newer (compute capability 8.9+) for fp8"
    with pytest.raises(LabError, match="tf32 needs compute capability 8.0 or newer on every "
                                       "stage of this lab and this GPU is 7.5"):
        dispatch.choose(4096, 4096, 4096, "tf32", "nn", turing, table=empty)


@fast
def test_the_list_and_the_doctor_say_where_each_stage_runs():
    from lab import doctor
    from lab.compare import list_stages

    cpu = list_stages(gpu=None)
    assert "precisions fp32 (sm_75+), tf32, 3xtf32, bf16, fp16 (sm_80+);" in " ".join(cpu.split())
    assert "no GPU here" in cpu
    ampere = " ".join(list_stages(gpu=((8, 0), "NVIDIA A100")).split())
    assert "precisions bf16, fp16 (run here), fp8 (needs sm_89+);" in ampere
    assert "tf32, 3xtf32, bf16, fp16, fp8 (needs sm_90a)" in ampere
    assert "this GPU, NVIDIA A100, is 8.0 (sm_80)" in ampere
    one = " ".join(list_stages(["double_buffered"], gpu=None).split())
    assert "GPUs: cuda fp32 (sm_75+), pipeline=cp_async sm_80+; triton fp32 (sm_75+)" in one
    f = doctor.stages_here((8, 0))
    assert f.value == ("13 of 18 stages, every precision; decode without fp8 (sm_89+); not here: "
                       "wgmma, tma_wgmma, warp_specialized, persistent (sm_90a)")
    assert doctor.stages_here((9, 0)).value == "all 18 stages, every precision"
    assert "sm_80+: mma, decode; sm_90a: wgmma" in doctor.stages_by_gpu().value


@cpu_only  # CPU mode in this process (the Triton interpreter switched on)
def test_compare_refuses_a_named_stage_and_skips_the_rest_of_all(monkeypatch, capsys):
    """CPU mode with LAB_CUDA_ARCH=sm_75 stands in for a GPU the stages do not all run on: a
    stage named for it is refused in one sentence (exit 2); from 'all', its rows are skipped,
    each with the sentence, and the others are built."""
    from lab.compare import main

    monkeypatch.setenv("LAB_CUDA_ARCH", "sm_75")
    assert main(["--stage", "mma", "--backend", "cuda", "--precision", "bf16", "--mode", "cpu",
                 "--sizes", "64"]) == 2
    err = capsys.readouterr().err
    assert ("stage mma needs sm_80 or newer (compute capability 8.0+), and the CUDA builds are "
            "for sm_75 (LAB_CUDA_ARCH)") in err
    assert main(["--stage", "gemv", "--backend", "cuda", "--precision", "fp32,bf16",
                 "--mode", "cpu", "--sizes", "16x64x64"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "gemv (cuda) is skipped: it needs sm_80 or newer (compute capability 8.0+) for bf16, " \
           "and the CUDA builds are for sm_75 (LAB_CUDA_ARCH)" in out
    assert "CUDA compiled with NVRTC for sm_75" in out and "1 row ok, 0 failed, 1 skipped" in out
    assert main(["--stage", "all", "--backend", "cuda", "--precision", "bf16", "--mode", "cpu",
                 "--sizes", "64"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "mma (cuda) is skipped: it needs sm_80 or newer" in out
    assert "persistent (cuda) is skipped: it needs sm_90a" in out
