"""GPU tests: every stage x backend x shape matches torch.matmul (skipped without CUDA)."""

import pytest

from helpers import check_in_layout
from lab import check as chk
from lab.shapes import GPU_TEST_SHAPES, Shape
from lab.stages import Variant
from stage_sets import FP32_CASES, FP32_CUDA, FP32_TRITON  # noqa: F401

pytestmark = pytest.mark.gpu

CASES = FP32_CASES
# every fp32 stage x backend, one test each
each_stage = pytest.mark.parametrize("stage,backend", CASES,
                                     ids=[f"{s.name}-{b}" for s, b in CASES])


def _defaults(stage, backend) -> dict:
    """The registry's default parameters of `stage` for `backend`."""
    return Variant(stage, stage.defaults()).params_for(backend)


@pytest.mark.parametrize("shape", GPU_TEST_SHAPES, ids=str)
@each_stage
def test_stage_matches_torch(stage, backend, shape):
    import torch

    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M * 7 + N * 3 + K, device="cuda")
    ref = chk.reference(a, b)
    c = torch.empty((M, N), device="cuda")
    launch = stage.module(backend).prepare(a, b, c, **_defaults(stage, backend))
    result = chk.check(launch, c, ref, K)
    assert result.passed, result.reason
    # and a second launch on fresh inputs through the same prepared callable's buffers
    assert torch.isfinite(c).all()


LAYOUT_SHAPES = (Shape(1, 1, 1), Shape(3, 130, 2), Shape(65, 64, 63), Shape(1000, 1500, 257),
                 Shape(256, 384, 1024))


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@each_stage
def test_stage_on_every_layout(stage, backend, layout):
    """A and B row-major or transposed views; in tt, C a transposed view too."""
    check_in_layout(stage.module(backend), _defaults(stage, backend), LAYOUT_SHAPES, layout)


@each_stage
def test_stage_on_offset_sliced_and_strided_views(stage, backend):
    """Storage offsets that break 16-byte alignment, row strides larger than the widths, an
    operand with no unit stride, and a sliced C whose neighbours must stay untouched."""
    import torch

    M, N, K = 130, 67, 95
    module = stage.module(backend)
    params = _defaults(stage, backend)
    a0, b0 = chk.make_inputs(M, N, K, seed=9, device="cuda")
    ref = chk.reference(a0, b0)
    cases = {
        "offset": (torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a0),
                   torch.empty(K * N + 3, device="cuda")[3:].view(K, N).copy_(b0)),
        "sliced": (torch.empty(M, K + 5, device="cuda")[:, 2:K + 2].copy_(a0),
                   torch.empty(K + 1, N + 8, device="cuda")[1:, :N].copy_(b0)),
        "strided": (torch.empty(2 * M, 2 * K, device="cuda")[::2, ::2].copy_(a0), b0),
        "broadcast": (a0[:1].expand(M, K), b0),  # stride 0: every row of A is row 0
    }
    for kind, (a, b) in cases.items():
        big = torch.full((M + 2, N + 9), -1.0, device="cuda")
        c = big[1:M + 1, 4:N + 4]
        expected = chk.reference(a, b) if kind == "broadcast" else ref
        result = chk.check(module.prepare(a, b, c, **params), c, expected, K)
        assert result.passed, f"{kind}: {result.reason}"
        outside = torch.ones_like(big, dtype=torch.bool)
        outside[1:M + 1, 4:N + 4] = False
        assert (big[outside] == -1.0).all(), f"{kind}: wrote outside the sliced C"
    # a C with no unit stride (every other column of a wider matrix) and inputs requiring grad
    big = torch.full((M, 2 * N), -1.0, device="cuda")
    c = big[:, ::2]
    a = a0.clone().requires_grad_(True)
    result = chk.check(module.prepare(a, b0, c, **params), c, ref, K)
    assert result.passed, f"C with no unit stride: {result.reason}"
    assert (big[:, 1::2] == -1.0).all(), "wrote between the columns of a strided C"


@each_stage
def test_the_python_api_on_the_gpu(stage, backend):
    import torch

    from lab import matmul

    a, b = chk.make_inputs(77, 45, 33, seed=4, device="cuda", layout="tn")
    c = matmul(a, b, stage=stage.name, backend=backend)
    torch.cuda.synchronize()
    assert chk.compare(c, chk.reference(a, b), 33).passed
    empty = matmul(a[:, :0], b[:0], stage=stage.name, backend=backend)
    assert torch.equal(empty, torch.zeros(77, 45, device="cuda"))


@each_stage
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
            if module.OFFER.check(params, "fp32") is not None:
                continue  # a combination the kernel rejects up front (CPU tests cover these)
            c = torch.empty((M, N), device="cuda")
            launch = module.prepare(a, b, c, **params)
            result = chk.check(launch, c, ref, K)
            assert result.passed, f"{prm.name}={value}: {result.reason}"


@pytest.mark.parametrize("stage", FP32_CUDA, ids=lambda s: s.name)
def test_theoretical_occupancy_matches_the_cuda_occupancy_api(stage):
    """lab.occupancy's blocks/SM for the compiled kernel equals cuOccupancyMaxActiveBlocksPerMultiprocessor."""
    import torch

    from lab.toolchain.nvrtc import occupancy_blocks_per_sm
    from lab.occupancy import from_device, from_resources

    M, N, K = 1000, 1100, 300
    a, b = chk.make_inputs(M, N, K, seed=1, device="cuda")
    c = torch.empty((M, N), device="cuda")
    launch = stage.module("cuda").prepare(a, b, c, **_defaults(stage, "cuda"))
    res = launch.resources
    theory = from_resources(res, from_device())
    api = occupancy_blocks_per_sm(launch.build, res["threads"], res["smem_dynamic"])
    assert theory.blocks_per_sm == api, f"{theory} vs API {api}"
