"""python -m lab.model without a GPU: the tiny block and a short training run through the lab, beside
torch, with the same weights: the output, the gradients and the loss curves agree."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from helpers import ROOT


def _run(*args):
    return subprocess.run([sys.executable, "-m", "lab.model", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path (a GPU runs the real sizes)")
def test_the_tiny_block_and_training_agree_with_torch():
    r = _run("--steps", "2", "--seq", "6")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("No CUDA GPU: the tiny block runs instead")
    assert "7 Linear layers through the lab (stage auto)" in out
    assert re.search(r"^torch\s+[\d,]+\s+[\d,]+$", out, re.M)
    assert re.search(r"^lab\s+[\d,]+\s+[\d,]+$", out, re.M)
    output, grads = map(float, re.search(r"output ([\d.e+-]+); gradients up to ([\d.e+-]+)",
                                         out).groups())
    assert output < 1e-5 and grads < 1e-4
    steps = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert [s for s, _, _ in steps] == ["1", "2"]
    gap = float(re.search(r"loss curves: ([\d.e+-]+)", out).group(1))
    assert gap < 1e-4


@pytest.mark.fast
def test_its_mistakes_are_one_sentence():
    from lab.model import main

    assert main(["--batch", "0", "--steps", "0"]) == 2
    if not torch.cuda.is_available():
        r = _run("--dtype", "bf16")
        assert r.returncode == 2 and "needs a GPU here" in r.stderr and "Traceback" not in r.stderr
