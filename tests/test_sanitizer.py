"""compute-sanitizer over every CUDA stage: memcheck (out-of-bounds and misaligned accesses) and
racecheck (shared-memory hazards, e.g. a missing __syncthreads), on an odd shape that is not a
multiple of any tile, so the edge guards are exercised.

Each case runs the profiling target of lab.profile (`python -m lab.profile --_target cuda ...
--check`): inputs, one warm-up launch, one launch, then the NaN-poisoned check against the float64
reference. PYTORCH_NO_CUDA_MEMORY_CACHING=1 gives every tensor its own cudaMalloc, so memcheck sees
an access past the end of A, B or C instead of landing silently in torch's cached pool.

GPU only (marked `gpu`); skipped, with the reason, when compute-sanitizer is not installed.
"""

from __future__ import annotations

import importlib

import re

import pytest

from helpers import TC_PRECISIONS, run_sanitized, sanitizer_clean, sanitizer_findings
from lab.ncu import find_tool
from lab.stages import Variant
from stage_sets import FP32_CASES, FP32_CUDA, FP32_TRITON  # noqa: F401

pytestmark = pytest.mark.gpu

SHAPE = "129x67x95"
SANITIZER = find_tool("compute-sanitizer")
TOOLS = ("memcheck", "racecheck")


@pytest.mark.skipif(SANITIZER is None, reason="compute-sanitizer not found on PATH, in the venv "
                                              "or in /usr/local/cuda/bin")
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("stage", FP32_CUDA, ids=[s.name for s in FP32_CUDA])
def test_cuda_stage_is_clean_under_compute_sanitizer(stage, tool):
    label = Variant(stage, stage.defaults()).label
    r, out, tail = run_sanitized(SANITIZER, tool, label, "--size", SHAPE)
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), f"{tool} found errors in {label}:\n{tail}"
    assert r.returncode == 0, f"{tool} run of {label} exited {r.returncode}:\n{tail}"
    assert "checked" in out, f"the target did not finish its check:\n{tail}"


# The tensor-core stages compute in tf32, 3xtf32, bf16 and fp16 (not fp32): every precision under
# memcheck, racecheck and synccheck (the cp.async ring's and the mbarriers' waits), on a shape
# with interior blocks (the whole-tile copy path) and edges: mma (mma.sync) with its defaults and
# with the tuned 128 x 256 bf16 tile, wgmma (Hopper's warpgroup MMA, cuda_kernels/wgmma.cu) with
# its defaults, and the TMA stages (their mbarrier rings; persistent's cluster multicast) in the
# precisions they offer.
MMA_SHAPE = "300x520x200"
TOOLS_TC = ("memcheck", "racecheck", "synccheck")
MMA_CASES = [("mma", p, tool, "") for p in TC_PRECISIONS for tool in TOOLS_TC] + \
    [("mma", "bf16", tool, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,frags=2")
     for tool in TOOLS_TC] + \
    [("wgmma", p, tool, "") for p in TC_PRECISIONS for tool in TOOLS_TC] + \
    [(s, p, tool, "") for s in ("tma_wgmma", "warp_specialized", "persistent")
     for p in importlib.import_module(f"cuda_kernels.{s}").OFFER.precisions for tool in TOOLS_TC] + \
    [("persistent", p, tool, "STORE=2,CLUSTER=1")  # the lesson file (C from registers)
     for p in ("bf16", "3xtf32") for tool in TOOLS_TC]


@pytest.mark.skipif(SANITIZER is None, reason="compute-sanitizer not found on PATH, in the venv "
                                              "or in /usr/local/cuda/bin")
@pytest.mark.parametrize("stage,precision,tool,params", MMA_CASES,
                         ids=[f"{s}-{p}-{t}-" + ("defaults" if not q else "tuned" if s == "mma"
                                                 else "lesson") for s, p, t, q in MMA_CASES])
def test_tensor_core_stages_are_clean_under_compute_sanitizer(stage, precision, tool, params):
    label = stage + (f":{params}" if params else "")
    r, out, tail = run_sanitized(SANITIZER, tool, label, "--precision", precision, "--size", MMA_SHAPE)
    assert sanitizer_findings(out) == 0, f"{tool} found errors in {label}:\n{tail}"
    assert sanitizer_clean(r, out), f"{tool} run of {label} ({precision}) exited {r.returncode}:\n{tail}"
    assert "checked" in out, f"the target did not finish its check:\n{tail}"


# persistent writes a C whose lines are off 16 bytes (519 bf16 columns: 1038-byte lines) through
# TMA stores into an aligned buffer, in clusters of two, and copies the buffer into C in the call
# (cuda_kernels/_tma.py launch()); B's lines are off too, so B is copied before the kernel.
ODD_C_SHAPE = "300x519x200"
ODD_C_CASES = [(p, tool) for p in ("bf16", "fp8") for tool in TOOLS_TC]


@pytest.mark.skipif(SANITIZER is None, reason="compute-sanitizer not found on PATH, in the venv "
                                              "or in /usr/local/cuda/bin")
@pytest.mark.parametrize("precision,tool", ODD_C_CASES, ids=[f"{p}-{t}" for p, t in ODD_C_CASES])
def test_persistent_through_an_aligned_c_buffer_is_clean_under_compute_sanitizer(precision, tool):
    r, out, tail = run_sanitized(SANITIZER, tool, "persistent", "--precision", precision,
                                 "--size", ODD_C_SHAPE)
    assert sanitizer_findings(out) == 0, f"{tool} found errors in persistent:\n{tail}"
    assert sanitizer_clean(r, out), f"{tool} run of persistent ({precision}) exited {r.returncode}:\n{tail}"
    assert "checked" in out, f"the target did not finish its check:\n{tail}"
