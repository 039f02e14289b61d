"""Messages a newcomer met that misled, each now about the user's own input and what to do: stage
'all' in matmul, the odd tensor of a dtype mismatch, lab.compare's default precision, a size no GPU
holds, lab.profile's --sizes, a short --list, lab.autotune's hint and a missing cache, a closed
pipe."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import lab
from lab.base.errors import LabError

from helpers import ROOT


def _cli(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.fast
def test_matmul_says_all_is_for_lab_compare():
    with pytest.raises(LabError) as info:
        lab.matmul(torch.randn(4, 4), torch.randn(4, 4), stage="all", backend="triton")
    text = str(info.value)
    assert "runs one stage" in text and "--stage all" in text and "(or 'all')" not in text


@pytest.mark.fast
@pytest.mark.parametrize("dtypes,out,words,never", [
    # no out: C is made with A's dtype, so B is the odd one, and no C (out) is spoken of
    ((torch.float32, torch.bfloat16, None), False, "convert B with b.to(torch.float32)",
     "C (out)"),
    ((torch.float32, torch.float32, torch.bfloat16), True,
     "C (out) is bfloat16, but C must have their dtype; pass out=", "b.to("),
    ((torch.bfloat16, torch.float32, torch.float32), True, "convert A with a.to(torch.float32)",
     "b.to("),
])
def test_a_dtype_mismatch_names_the_odd_tensor(dtypes, out, words, never):
    a = torch.randn(4, 4, dtype=dtypes[0])
    b = torch.randn(4, 4, dtype=dtypes[1])
    kwargs = {"out": torch.empty(4, 4, dtype=dtypes[2])} if out else {}
    with pytest.raises(LabError) as info:
        lab.matmul(a, b, stage="tiled", backend="triton", precision="fp32", **kwargs)
    assert words in str(info.value) and never not in str(info.value)


@pytest.mark.fast
def test_compare_says_fp32_is_its_default_precision():
    from lab.compare import main

    r = _cli("lab.compare", "--stage", "mma", "--sizes", "64", "--mode", "cpu")
    assert r.returncode == 2
    assert "does not compute in fp32, the precision lab.compare runs when --precision is not " \
           "given" in r.stderr and "add --precision tf32" in r.stderr
    assert main(["--stage", "mma", "--sizes", "64", "--mode", "cpu", "--precision", "fp8",
                 "--backend", "cuda"]) == 2  # asked for: the old sentence


@pytest.mark.fast
def test_a_size_beyond_every_gpu_is_refused():
    from lab.compare import main

    assert main(["--stage", "tiled", "--sizes", "1000000000", "--mode", "cpu"]) == 2
    r = _cli("lab.compare", "--stage", "tiled", "--sizes", "1000000000", "--mode", "cpu")
    assert "more than any GPU holds" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.fast
def test_profile_takes_sizes_as_compare_spells_it():
    from lab.profile import build_parser

    assert build_parser().parse_args(["--stage", "tiled", "--sizes", "512"]).size == "512"


@pytest.mark.fast
def test_list_is_short_and_list_of_one_stage_is_whole():
    from lab.compare import list_stages
    from lab.stages import STAGES

    brief = list_stages()
    assert len(brief.splitlines()) <= 120
    assert all(f"\n{s.name} " in "\n" + brief for s in STAGES)
    assert "--list --stage NAME" in brief and "tile=8|16|32" not in brief
    assert "tile=8|16|32" in list_stages(["tiled"])


@pytest.mark.fast
def test_autotune_names_the_stage_asked_for_and_a_missing_cache():
    r = _cli("lab.autotune", "--show", "--cache", "/no/such/cache.json")
    assert r.returncode == 2 and "no tuning cache at /no/such/cache.json" in r.stderr
    if not torch.cuda.is_available():
        r = _cli("lab.autotune", "--stage", "tiled")
        assert r.returncode == 2 and "--stage tiled --sizes 4096 --dry-run" in r.stderr


@pytest.mark.fast
def test_a_closed_pipe_ends_quietly():
    r = subprocess.run(f"{sys.executable} -m lab.compare --list | head -1", shell=True,
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.stdout.startswith("naive") and "Traceback" not in r.stderr
