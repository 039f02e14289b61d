"""The lab as a torch operator: `torch.ops.lab.matmul`, with autograd, a fake (meta) kernel for
torch.compile, leading batch dimensions as torch.nn.functional.linear takes them, and an out=
form that functionalization accepts. `import lab.ops` registers it.

    import torch, lab.ops
    y = lab.ops.matmul(x, w)                         # stage auto; x may be (batch, seq, K)
    y = lab.ops.matmul(x, w, stage="persistent")     # a named stage, its defaults
    y = lab.ops.matmul(x, w, stage="tiled:tile=16")  # ... with parameters
    y = lab.ops.matmul(x, w, stage="warptiling:auto")  # ... with the tuner's cached ones
    y = lab.ops.linear(x, layer.weight, layer.bias)  # F.linear through the lab
    y.sum().backward()                               # dA = dC B^T, dB = A^T dC, through the lab

The operators, as torch sees them (torch.library.custom_op):

- `lab::matmul(Tensor a, Tensor b, str stage, str backend, str precision) -> Tensor`: C = A @ B
  of two matrices through lab.matmul (`""` for "no backend / precision given"). Its gradient is
  two more products through the same operator and the same stage string: dA = dC @ B^T and
  dB = A^T @ dC (with stage "auto", each product gets the stage auto picks for its own shape).
- `lab::matmul_out(Tensor a, Tensor b, Tensor(a!) out, str stage, str backend, str precision)
  -> ()`: the same product written into `out`, declared as mutating it, so that torch.compile's
  functionalization sees the write. It has no gradient (as torch.matmul's out= has none).

Both have fake kernels (the output's shape and dtype, nothing computed), so torch.compile traces
them as single nodes (`fullgraph=True` works), and both replay the lab's launch plan on a
repeated call, so a CUDA graph capture records the kernel launch (lab/plan.py).
docs/IN_YOUR_MODEL.md is the user's page.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import Tensor

import lab
from lab.base.errors import LabError

# Without a GPU, CPU tensors run the Triton stages under the interpreter, which must be switched
# on before Triton is imported, and the first call of any custom operator imports it (through
# torch._dynamo): so here, as the lab's own CPU paths do.
if not torch.cuda.is_available() and "triton.language" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")

__all__ = ["matmul", "linear"]


def _opt(text: str) -> str | None:
    return text or None


def _out_dtype(a: Tensor) -> torch.dtype:
    return lab._out_dtype(a)  # the precision record's C (float8 e4m3 operands: bfloat16)


def _check_2d(a: Tensor, b: Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise LabError(f"lab::matmul multiplies two matrices, not {a.dim()}-D by {b.dim()}-D; "
                       f"lab.ops.matmul flattens a's leading dimensions for you")
    if a.shape[1] != b.shape[0]:
        raise LabError(f"lab::matmul: A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x"
                       f"{b.shape[1]}; A @ B needs A's columns to equal B's rows")


@torch.library.custom_op("lab::matmul", mutates_args=())
def _matmul(a: Tensor, b: Tensor, stage: str, backend: str, precision: str) -> Tensor:
    _check_2d(a, b)
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0 or K == 0:  # nothing to launch: an empty C, or zeros (a sum of nothing)
        return torch.zeros((M, N), dtype=_out_dtype(a), device=a.device)
    return lab.matmul(a, b, stage=_opt(stage), backend=_opt(backend), precision=_opt(precision))


@_matmul.register_fake
def _(a, b, stage, backend, precision):
    _check_2d(a, b)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=_out_dtype(a))


def _setup_context(ctx, inputs, output) -> None:
    a, b, stage, backend, precision = inputs
    if a.dtype == torch.float8_e4m3fn or b.dtype == torch.float8_e4m3fn:
        ctx.fp8 = True
    else:
        ctx.fp8 = False
    ctx.save_for_backward(a, b)
    ctx.config = (stage, backend, precision)


def _backward(ctx, grad: Tensor):
    if ctx.fp8:
        raise LabError("lab::matmul has no gradient for float8 operands; train in bf16 or fp16")
    a, b = ctx.saved_tensors
    stage, backend, precision = ctx.config
    grad = grad.contiguous()  # a gradient may arrive broadcast (stride 0), which C never is
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.lab.matmul(grad, b.t(), stage, backend, precision)  # dC B^T
    if ctx.needs_input_grad[1]:
        grad_b = torch.ops.lab.matmul(a.t(), grad, stage, backend, precision)  # A^T dC
    return grad_a, grad_b, None, None, None


_matmul.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("lab::matmul_out", mutates_args=("out",))
def _matmul_out(a: Tensor, b: Tensor, out: Tensor, stage: str, backend: str,
                precision: str) -> None:
    _check_2d(a, b)
    if a.shape[0] == 0 or b.shape[1] == 0:
        return
    if a.shape[1] == 0:
        out.zero_()
        return
    lab.matmul(a, b, stage=_opt(stage), backend=_opt(backend), precision=_opt(precision),
               out=out)


@_matmul_out.register_fake
def _(a, b, out, stage, backend, precision):
    _check_2d(a, b)
    return None


def _flat(a: Tensor) -> Tensor:
    """a's leading dimensions folded into rows (..., K) -> (rows, K), as F.linear does."""
    return a.reshape(-1, a.shape[-1])


def matmul(a: Tensor, b: Tensor, stage: str = "auto", backend: str | None = None,
           precision: str | None = None, out: Tensor | None = None) -> Tensor:
    """C = A @ B through `torch.ops.lab.matmul` (differentiable, traceable by torch.compile).

    a: (..., K), its leading dimensions flattened into rows as F.linear does and restored in C;
    b: K x N. stage: "auto" (the lab picks), a stage name ("persistent"), a stage with parameters
    ("tiled:tile=16") or with the autotuner's cached ones ("warptiling:auto"). backend: "cuda",
    "triton" or None; precision: as lab.matmul takes it (None: from the dtype). out: (..., N)
    to write (through `lab::matmul_out`, which has no gradient), or None."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor):
            raise LabError(f"lab.ops.matmul: {name} must be a torch.Tensor, not "
                           f"{type(t).__name__}")
    if b.dim() != 2:
        raise LabError(f"lab.ops.matmul: b must be a K x N matrix (a weight), not {b.dim()}-D of "
                       f"shape {tuple(b.shape)}")
    if a.dim() < 1:
        raise LabError("lab.ops.matmul: a must have at least one dimension, its last being K")
    lead = a.shape[:-1]
    flat = _flat(a)
    args = (stage or "auto", backend or "", precision or "")
    if out is not None:
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            raise LabError("lab.ops.matmul with out= has no gradient (as torch.matmul's out= has "
                           "none); leave out= away to train through it")
        if tuple(out.shape) != (*lead, b.shape[1]):
            raise LabError(f"lab.ops.matmul: out must be of shape {(*lead, b.shape[1])}, not "
                           f"{tuple(out.shape)}")
        try:
            target = out.view(-1, b.shape[1]) if out.dim() != 2 else out
        except RuntimeError:
            raise LabError("lab.ops.matmul: out's leading dimensions cannot be folded into rows "
                           "without a copy (it is not contiguous there); give a contiguous out, "
                           "or a 2-D one") from None
        torch.ops.lab.matmul_out(flat, b, target, *args)
        return out
    c = torch.ops.lab.matmul(flat, b, *args)
    return c.reshape(*lead, b.shape[1])


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, stage: str = "auto",
           backend: str | None = None, precision: str | None = None) -> Tensor:
    """torch.nn.functional.linear through the lab: x @ weight^T (+ bias), x of shape (..., K),
    weight (N, K) as nn.Linear holds it (its transposed view is the `nt` layout: nothing is
    copied)."""
    y = matmul(x, weight.t(), stage=stage, backend=backend, precision=precision)
    return y if bias is None else y + bias
