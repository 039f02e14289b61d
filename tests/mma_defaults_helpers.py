"""Helpers shared by the tests of stage mma's automatic defaults (tests/test_mma_defaults.py: the
Triton twin; tests/test_mma_cuda_defaults.py: the CUDA launcher); imported by module name, as
pytest puts tests/ on sys.path."""

from __future__ import annotations

import json

import pytest

from helpers import DTYPE, ROOT, TC_PRECISIONS, cpu_only, run_lab  # noqa: F401  (re-exported)

PRECISIONS = TC_PRECISIONS
CACHE = ROOT / "results" / "autotune.json"
GPU = "NVIDIA H100 80GB HBM3"


def one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message.rstrip("."), message


def cached_entries(backend: str) -> dict:
    """The stage mma entries of results/autotune.json for one backend ("triton" or "cuda")."""
    entries = json.loads(CACHE.read_text())["entries"]
    return {k: e for k, e in entries.items() if f"|mma|{backend}|" in k}


def sass_mix(build) -> dict:
    """The SASS instruction mix of a build (cuda_kernels/_sass.py); skips the test where no
    cuobjdump or nvdisasm is installed."""
    from cuda_kernels import _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump / nvdisasm to disassemble with")
    return _sass.instruction_mix(_sass.sass(build))


def count_ops(mix: dict, prefix: str) -> int:
    """How many instructions of `mix` start with `prefix` (HMMA, LDSM, ...)."""
    return sum(n for op, n in mix.items() if op.startswith(prefix))

