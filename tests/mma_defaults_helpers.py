"""Helpers shared by the tests of the tensor-core stages' automatic defaults
(tests/test_mma_cuda_defaults.py: stage mma's CUDA launcher; tests/test_wgmma_defaults.py: stage
wgmma's Triton twin) and their SASS checks; imported by module name, as pytest puts tests/ on
sys.path."""

from __future__ import annotations

import json

import pytest

from helpers import DTYPE, ROOT, TC_PRECISIONS, cpu_only, run_lab  # noqa: F401  (re-exported)

PRECISIONS = TC_PRECISIONS
CACHE = ROOT / "results" / "autotune.json"
GPU = "NVIDIA H100 80GB HBM3"


def one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message.rstrip("."), message


def cached_entries(backend: str, stage: str = "mma") -> dict:
    """The entries of results/autotune.json for one stage and backend ("triton" or "cuda").

    stage="wgmma", backend="triton": the Triton searches of 2026-11-22/23 ran the kernel that is
    now stage wgmma's Triton twin while it was stage mma's, so they are cached under
    `|mma|triton|`; entries under `|wgmma|triton|` count too."""
    entries = json.loads(CACHE.read_text())["entries"]
    names = ("mma", "wgmma") if (stage, backend) == ("wgmma", "triton") else (stage,)
    return {k: e for k, e in entries.items() if any(f"|{n}|{backend}|" in k for n in names)}


def as_stage(entries: dict, stage: str) -> dict:
    """`entries` (results/autotune.json's) keyed under `stage` instead of the name they were
    searched under: what lab.autotune.lookup finds for that stage in a cache file of them."""
    out = {}
    for key, e in entries.items():
        gpu, _, rest = key.split("|", 2)
        new = f"{gpu}|{stage}|{rest}"
        out[new] = {**e, **({"stage": stage} if "stage" in e else {}),
                    **({"key": new} if "key" in e else {})}
    return out


def sass_mix(build) -> dict:
    """The SASS instruction mix of a build (lab/toolchain/sass.py); skips the test where no
    cuobjdump or nvdisasm is installed."""
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump / nvdisasm to disassemble with")
    return _sass.instruction_mix(_sass.sass(build))


def count_ops(mix: dict, prefix: str) -> int:
    """How many instructions of `mix` start with `prefix` (HMMA, LDSM, ...)."""
    return sum(n for op, n in mix.items() if op.startswith(prefix))

