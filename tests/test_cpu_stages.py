"""CPU checks of every registered stage: Triton under the interpreter, CUDA through NVRTC."""

import pytest
import torch

from helpers import cpu_only
from lab import check as chk
from lab.shapes import TEST_SHAPES
from lab.stages import STAGES, Variant
from stage_sets import FP32_TRITON

pytestmark = cpu_only


@pytest.mark.parametrize("shape", TEST_SHAPES, ids=str)
@pytest.mark.parametrize("stage", FP32_TRITON, ids=lambda s: s.name)
def test_triton_stage_is_correct_under_the_interpreter(stage, shape):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 10 * N + 100 * K, device="cpu")
    ref = chk.reference(a, b)
    c = torch.empty((M, N))
    params = Variant(stage, stage.defaults()).params_for("triton")
    launch = stage.module("triton").prepare(a, b, c, **params)
    result = chk.check(launch, c, ref, K)
    assert result.passed, f"{stage.name} {shape}: {result.reason}"
    assert result.rel_err < 1e-6


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_cuda_stage_compiles_for_sm90_without_spills(stage):
    """Through the stage's OFFER.compile, in its first precision: sm_90 (sm_90a where the kernel
    uses Hopper-only instructions), no spills, a launchable geometry."""
    offer = stage.offer("cuda")
    params = Variant(stage, stage.defaults()).params_for("cuda")
    build, (grid, block, smem) = offer.compile(params, 1025, 1000, 513, "nn", offer.precisions[0])
    assert build.arch in ("sm_90", "sm_90a")
    assert build.cubin[:4] == b"\x7fELF"
    assert build.spill_bytes == 0, f"{stage.name} spills {build.spill_bytes} bytes"
    assert build.stack_frame == 0
    assert 0 < build.registers <= 255
    threads = block[0] * block[1] * block[2]
    assert 32 <= threads <= 1024 and all(g >= 1 for g in grid)


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_cuda_switches_compile(stage):
    """fast_math and the unroll switch change the build (other options, still no spills)."""
    cuda = stage.module("cuda")
    params = Variant(stage, stage.defaults()).params_for("cuda")
    if "fast_math" not in params:
        pytest.skip("no compiler switches on this stage")
    base = cuda.build(**params)
    fast = cuda.build(**{**params, "fast_math": True})
    rolled = cuda.build(**{**params, "unroll": False})
    assert "--use_fast_math" in fast.options and "--use_fast_math" not in base.options
    assert "-DUNROLL=0" in rolled.options and "-DUNROLL=1" in base.options
    assert fast.spill_bytes == 0 and rolled.spill_bytes == 0
