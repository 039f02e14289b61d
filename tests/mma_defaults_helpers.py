"""Helpers shared by the tests of stage mma's automatic defaults (tests/test_mma_defaults.py: the
Triton twin; tests/test_mma_cuda_defaults.py: the CUDA launcher); imported by module name, as
pytest puts tests/ on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "results" / "autotune.json"
GPU = "NVIDIA H100 80GB HBM3"
PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16")
DTYPE = {"tf32": torch.float32, "3xtf32": torch.float32, "bf16": torch.bfloat16,
         "fp16": torch.float16}
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-mode tests (GPU present)")


def one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message.rstrip("."), message


def cached_entries(backend: str) -> dict:
    """The stage mma entries of results/autotune.json for one backend ("triton" or "cuda")."""
    entries = json.loads(CACHE.read_text())["entries"]
    return {k: e for k, e in entries.items() if f"|mma|{backend}|" in k}


def run_lab(*args: str, timeout: int, **env: str) -> subprocess.CompletedProcess:
    """python -m ARGS in the repository root with it on PYTHONPATH (and `env` added), its output
    captured as text."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


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

