"""torch.nn through the lab: `lab.nn.Linear`, a drop-in for torch.nn.Linear whose product runs
through `torch.ops.lab.matmul` (lab/ops.py), and `swap_linears`, which makes every Linear of a
model one.

    import lab.nn
    layer = lab.nn.Linear(4096, 11008, bias=False, device="cuda", dtype=torch.bfloat16)
    n = lab.nn.swap_linears(model, stage="auto")   # every nn.Linear of the model, in place

A lab.nn.Linear is a torch.nn.Linear (isinstance holds): the same parameters under the same names,
so the same state_dict, initialisation and optimiser; only forward differs. docs/IN_YOUR_MODEL.md
is the user's page.
"""

from __future__ import annotations

import torch

from lab import ops
from lab.base.errors import LabError

__all__ = ["Linear", "swap_linears"]


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose forward is lab.ops.linear(x, weight, bias, stage, backend):
    y = x @ weight^T + bias, x of shape (..., in_features). `stage`: "auto" (the lab picks per
    shape), a stage name, or a stage string with parameters ("tiled:tile=16", "warptiling:auto");
    `backend`: "cuda", "triton" or None."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, stage: str = "auto", backend: str | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.stage, self.backend = stage, backend

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, stage: str = "auto",
                    backend: str | None = None) -> "Linear":
        """A lab Linear holding `linear`'s own parameters (the same tensors, nothing copied)."""
        if not isinstance(linear, torch.nn.Linear):
            raise LabError(f"from_linear takes a torch.nn.Linear, not {type(linear).__name__}")
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  device="meta", stage=stage, backend=backend)
        new.weight = linear.weight
        new.bias = linear.bias
        new.train(linear.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias, stage=self.stage, backend=self.backend)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", stage={self.stage!r}"
                + (f", backend={self.backend!r}" if self.backend else ""))


def swap_linears(model: torch.nn.Module, stage: str = "auto", backend: str | None = None,
                 skip=lambda name, module: False) -> int:
    """Replace every torch.nn.Linear in `model` (exactly that class, not subclasses, which may
    compute something else) by a lab.nn.Linear holding the same parameters; `skip(name, module)`
    keeps a layer as it is. Returns how many were replaced. The model's state_dict is unchanged."""
    if not isinstance(model, torch.nn.Module):
        raise LabError(f"swap_linears takes a torch.nn.Module, not {type(model).__name__}")
    swaps = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is torch.nn.Linear and not skip(full, child):
                swaps.append((module, child_name, child))
    for parent, child_name, child in swaps:
        setattr(parent, child_name, Linear.from_linear(child, stage=stage, backend=backend))
    return len(swaps)
