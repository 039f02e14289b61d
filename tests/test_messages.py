"""What a user is told when a call cannot run: the choices that would (lab/base/problem.py).

- A stage called with a dtype whose precision it does not offer names the precisions it offers
  for that dtype (mma with float32 tensors: 'tf32' or '3xtf32') and the other dtypes it takes.
- A CUDA stage on a machine without a GPU says that, and names the Triton backend.
- Operands of different dtypes are refused as such, not as "takes float32".
- A CPU call beyond 256^3 under the Triton interpreter warns once how long it will take.
Each refusal is one LabError sentence.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lab.base import checks, dtypes, entry, needs
from helpers import cpu_only
from lab import LabError, matmul

pytestmark = pytest.mark.fast


def one_sentence(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and ". " not in text, text
    return text


def test_a_dtype_the_stage_takes_only_with_a_named_precision_names_the_choices():
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    with pytest.raises(LabError) as info:
        dtypes.precision_for(a, None, "stage mma (cuda)", ("tf32", "3xtf32", "bf16", "fp16"))
    assert one_sentence(info) == ("stage mma (cuda) does not compute in fp32; with float32 tensors "
                                  "pass precision='tf32' or '3xtf32', or give it bfloat16 or "
                                  "float16 tensors")
    with pytest.raises(LabError, match=r"pass precision='tf32' or '3xtf32'"):
        matmul(a, b, stage="mma", backend="triton")


def test_a_dtype_the_stage_never_takes_says_which_it_takes():
    a = torch.randn(4, 4).bfloat16()
    with pytest.raises(LabError) as info:
        dtypes.precision_for(a, None, "stage tiled (cuda)", ("fp32",))
    assert one_sentence(info) == "stage tiled (cuda) takes float32 tensors, but A is bfloat16"
    with pytest.raises(LabError) as info:
        dtypes.precision_for(a.double(), None, "stage mma (cuda)", ("tf32", "bf16"))
    assert one_sentence(info) == ("stage mma (cuda) takes float32 or bfloat16 tensors, but A is "
                                  "float64")


def test_mixed_dtypes_are_refused_as_such():
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    with pytest.raises(LabError) as info:
        matmul(a, b.half(), stage="tiled", backend="triton")
    assert one_sentence(info) == ("stage tiled (triton): A is float32 and B is float16, but "
                                  "they must have one dtype; convert B with "
                                  "b.to(torch.float32)")
    out = torch.empty(8, 4, dtype=torch.bfloat16)
    with pytest.raises(LabError, match="C \\(out\\) is bfloat16, but C must have their dtype"):
        matmul(a, b, stage="tiled", backend="triton", out=out)


def test_a_cuda_stage_without_a_gpu_names_the_triton_backend(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    with pytest.raises(LabError) as info:
        matmul(a, b, stage="vectorized")  # a named stage's default backend: CUDA
    text = one_sentence(info)
    assert "is a CUDA kernel and needs a CUDA GPU, but this machine has none" in text
    assert "backend='triton'" in text and ".cuda()" not in text


def test_a_triton_prepare_without_the_interpreter_says_how_to_switch_it_on(monkeypatch):
    """A Triton stage's prepare() called directly with CPU tensors where the interpreter is off:
    not 'a CUDA kernel', but how to switch the interpreter on."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    a, b, c = torch.randn(8, 6), torch.randn(6, 4), torch.empty(8, 4)
    with pytest.raises(LabError) as info:
        checks.check_operands(a, b, c, "stage tiled (triton)", needs.TRITON, "cuda")
    text = one_sentence(info)
    assert "TRITON_INTERPRET=1" in text and "CUDA kernel" not in text


def test_cpu_tensors_on_a_gpu_machine_are_told_to_move(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    a, b, c = torch.randn(8, 6), torch.randn(6, 4), torch.empty(8, 4)
    with pytest.raises(LabError, match=r"move them with \.cuda\(\)"):
        checks.check_operands(a, b, c, "stage tiled (cuda)", needs.CUDA, "cuda")


@cpu_only
def test_a_large_cpu_call_warns_once_how_long_the_interpreter_takes(monkeypatch):
    monkeypatch.setattr(entry, "_WARNED_INTERPRETER", [])
    monkeypatch.setattr(entry, "INTERPRETER_WARN_WORK", 16**3)  # a small "large" call
    a, b = torch.randn(32, 16), torch.randn(16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = matmul(a, b, stage="tiled", backend="triton")
        matmul(a, b, stage="tiled", backend="triton")  # the second call says nothing
    messages = [str(w.message) for w in caught if "Triton interpreter" in str(w.message)]
    assert len(messages) == 1
    assert "runs 32x16x16 on CPU tensors under the Triton interpreter" in messages[0]
    assert "expect about" in messages[0] and "1.5 s per 256^3" in messages[0]
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    small = torch.randn(4, 4)
    monkeypatch.setattr(entry, "_WARNED_INTERPRETER", [])
    monkeypatch.setattr(entry, "INTERPRETER_WARN_WORK", 256**3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matmul(small, small, stage="tiled", backend="triton")
    assert not [w for w in caught if "Triton interpreter" in str(w.message)]
