"""Every registered stage against the launcher contract (lab/base/contract.py), on the CPU.

For each stage x backend: the launcher module declares an Offer for itself; its precisions are
the lab's; its validate() accepts the registry's defaults in every precision it offers and
refuses with one LabError sentence, never another exception; resolve() returns a value for every
parameter; its tuning hints name parameters the stage declares for that backend; its kernels
exist (the CUDA names in the stage's .cu files, the Triton names as @triton.jit functions in
triton_kernels/); prepare is `entry(OFFER)` and returns a Prepared (checked by running each
Triton stage under the interpreter, and by an empty problem for CUDA); the harness's own code
has no `hasattr`/`inspect`/module-globals discovery and names no stage.
"""

from __future__ import annotations

import ast
import re

import pytest
import torch

from lab.base.contract import PRECISIONS, Offer, Prepared
from lab.base.errors import LabError
from lab.stages import BACKENDS, STAGES, Variant
from tests.helpers import ROOT, cpu_only

PAIRS = [(s, b) for s in STAGES for b in BACKENDS]
IDS = [f"{s.name}-{b}" for s, b in PAIRS]


@pytest.mark.parametrize("stage,backend", PAIRS, ids=IDS)
def test_each_launcher_declares_its_own_offer(stage, backend):
    module = stage.module(backend)
    offer = module.OFFER
    assert isinstance(offer, Offer)
    assert (offer.stage, offer.backend) == (stage.name, backend)
    assert offer.precisions and set(offer.precisions) <= set(PRECISIONS)
    assert module.prepare.offer is offer  # prepare is entry(OFFER)
    assert stage.offer(backend) is offer


@pytest.mark.parametrize("stage,backend", PAIRS, ids=IDS)
def test_validate_accepts_the_defaults_and_resolve_covers_every_parameter(stage, backend):
    offer = stage.offer(backend)
    params = Variant(stage, stage.defaults()).params_for(backend)
    for precision in offer.precisions:
        assert offer.check(params, precision) is None, (precision, offer.check(params, precision))
        resolved = offer.resolve(params, 4096, 4096, 4096, precision, 132)
        assert set(params) <= set(resolved)
        if offer.show is not None:
            assert isinstance(offer.show(resolved), str) and offer.show(resolved)


@pytest.mark.parametrize("stage,backend", PAIRS, ids=IDS)
def test_validate_answers_every_registry_choice_with_one_sentence_or_nothing(stage, backend):
    """One parameter at a time off its default, every registry choice: validate() accepts it or
    says why in one LabError sentence; no other exception escapes."""
    offer = stage.offer(backend)
    defaults = Variant(stage, stage.defaults()).params_for(backend)
    for param in (p for p in stage.params if backend in p.backends):
        for choice in param.choices:
            for precision in offer.precisions:
                try:
                    offer.validate({**defaults, param.name: choice}, precision)
                except LabError as exc:
                    assert "\n" not in str(exc) and str(exc).strip()


@pytest.mark.parametrize("stage,backend", PAIRS, ids=IDS)
def test_tuning_hints_name_the_stages_own_parameters(stage, backend):
    tuning = stage.offer(backend).tuning
    own = {p.name for p in stage.params if backend in p.backends}
    if tuning.split is not None:
        assert tuning.split in own
        # the two tile edges the seeds shrink, or (persistent) tile_of: the defaults' tile alone
        assert (len(tuning.tile) == 2 and set(tuning.tile) <= own) or \
            (not tuning.tile and tuning.tile_of is not None)
    if tuning.streamk is not None:
        assert tuning.tile_of is not None and tuning.streamk in own
        assert {0, 1} <= set(next(p for p in stage.params if p.name == tuning.streamk).choices)
    assert set(tuning.tile) <= own


def _cuda_kernel_names() -> set[str]:
    names = set()
    for path in (ROOT / "cuda_kernels").rglob("*.cu"):  # variants/ too
        names |= set(re.findall(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?'
                                r"(\w+)", path.read_text()))
    return names


def _triton_kernel_names() -> set[str]:
    names = set()
    for path in (ROOT / "triton_kernels").rglob("*.py"):  # variants/ too
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                    "jit" in ast.unparse(d) for d in node.decorator_list):
                names.add(node.name)
    return names


@pytest.mark.parametrize("stage,backend", PAIRS, ids=IDS)
def test_declared_kernels_exist(stage, backend):
    offer = stage.offer(backend)
    known = _cuda_kernel_names() if backend == "cuda" else _triton_kernel_names()
    params = Variant(stage, stage.defaults()).params_for(backend)
    for precision in offer.precisions:
        names = offer.kernel_names(params, precision)
        assert names, f"{stage.name} ({backend}) declares no kernel in {precision}"
        missing = [n for n in names if n not in known]
        assert not missing, f"{stage.name} ({backend}) declares unknown kernels {missing}"


@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_cuda_offer_compiles_for_the_cpu_mode(stage):
    """offer.compile builds what prepare() would (NVRTC, no GPU) with the declared first kernel."""
    offer = stage.offer("cuda")
    params = Variant(stage, stage.defaults()).params_for("cuda")
    precision = offer.precisions[0]
    build, (grid, block, smem) = offer.compile(params, 256, 192, 64, "nn", precision)
    assert build.kernel == offer.kernel_names(params, precision)[0]
    assert all(int(g) >= 1 for g in grid) and 32 <= block[0] * block[1] * block[2] <= 1024
    assert smem >= 0


@cpu_only
@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_triton_prepare_returns_a_prepared_that_computes(stage):
    """Under the interpreter; a twin its Offer declares GPU-only (interpreted=False: Gluon)
    refuses CPU tensors in one sentence instead."""
    offer = stage.offer("triton")
    precision = offer.precisions[0]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    a = torch.randn(24, 40).to(dtype)
    b = torch.randn(40, 20).to(dtype)
    c = torch.empty(24, 20, dtype=dtype)
    params = Variant(stage, stage.defaults()).params_for("triton")
    if not offer.interpreted:
        with pytest.raises(LabError) as e:
            stage.module("triton").prepare(a, b, c, precision=precision, **params)
        assert "\n" not in str(e.value) and "GPU" in str(e.value)
        return
    launch = stage.module("triton").prepare(a, b, c, precision=precision, **params)
    assert isinstance(launch, Prepared)
    launch()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_an_empty_problem_is_a_prepared_that_launches_nothing(stage):
    """M = 0 never reaches a kernel, so this runs without a GPU for the CUDA launchers too."""
    for backend in BACKENDS:
        offer = stage.offer(backend)
        if offer.backend == "cuda" and not torch.cuda.is_available():
            continue  # the shared check refuses CPU tensors for CUDA stages, before M = 0
        precision = offer.precisions[0]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        a, b = torch.empty(0, 8, dtype=dtype), torch.empty(8, 4, dtype=dtype)
        c = torch.empty(0, 4, dtype=dtype)
        if backend == "cuda":
            a, b, c = a.cuda(), b.cuda(), c.cuda()
        launch = stage.module(backend).prepare(a, b, c, precision=precision)
        assert isinstance(launch, Prepared)


def _harness_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in (ROOT / "lab").rglob("*.py")}


def test_the_harness_discovers_nothing_about_launchers():
    """No hasattr/inspect/__globals__ look-ups of launcher modules or launches in lab/ (torch's
    own feature checks, `hasattr(torch.backends...)`, are about torch, not launchers)."""
    offenders = []
    for name, text in _harness_sources().items():
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if "__globals__" in code or "inspect.signature" in code:
                offenders.append(f"{name}:{n}: {line.strip()}")
            if re.search(r"hasattr\((module|mod|launch|inner|kernel|stage|spec|v|variant)\b", code):
                offenders.append(f"{name}:{n}: {line.strip()}")
            if re.search(r"getattr\((module|mod|launch|inner)\b", code):
                offenders.append(f"{name}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _stage_literals(tree, stage_names) -> list[tuple[int, str]]:
    """String constants equal to a stage name where code acts on them: compared (== / in), a
    dict key, a `stage=` keyword, or an argument of get_stage / BY_NAME[...] / Variant(...)."""
    def names(node):
        return [n for n in ast.walk(node) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and n.value in stage_names]

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += names(node)
        elif isinstance(node, ast.Dict):
            found += [k for k in node.keys if k is not None and k in names(k)]
        elif isinstance(node, ast.keyword) and node.arg == "stage":
            found += names(node.value)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
                "get_stage", "Variant", "parse_variants"):
            found += [n for a in node.args for n in names(a)]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("BY_NAME"):
            found += names(node.slice)
    return sorted({(n.lineno, n.value) for n in found})


def test_the_harness_names_no_stage():
    """lab/ code never acts on a stage's name (a comparison, a key, a `stage=` argument, a
    registry look-up): the registry, lab/stages.py, is the one place that lists the stages.
    Prose may name one as an example, and a word such as "wgmma" may name an instruction."""
    stage_names = {s.name for s in STAGES}
    offenders = [f"{name}:{line}: {value!r}"
                 for name, text in _harness_sources().items() if name != "stages.py"
                 for line, value in _stage_literals(ast.parse(text), stage_names)]
    assert not offenders, "\n".join(offenders)


def test_the_stage_name_check_finds_what_it_looks_for():
    """The check above on planted code: each way of acting on a name is found, prose is not."""
    planted = ast.parse('if stage.name == "tiled": pass\n'
                        'TABLE = {"naive": 1.0}\n'
                        'matmul(a, b, stage="vectorized")\n'
                        'get_stage("warptiling")\n'
                        'x = BY_NAME["mma"]\n'
                        'note = "the wgmma instruction"\n')
    found = [v for _, v in _stage_literals(planted, {s.name for s in STAGES})]
    assert found == ["tiled", "naive", "vectorized", "warptiling", "mma"]
