"""Correct before timed: a float64 reference, NaN-poisoned outputs, and the two error figures.

rel_err    = ||C - ref||_F / ||ref||_F        (fp32 lands far below 1e-5)
max_err_k  = max |C - ref| / K                (the largest elementwise error, per unit of K)

A result with any NaN or Inf fails, whatever its norm: the output is filled with NaN before the
kernel runs, so an element the kernel never wrote stays NaN and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

# Pass thresholds on rel_err per precision (DESIGN.md: fp32 far below 1e-5).
TOLERANCE = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 2e-2, "fp16": 1e-2}


@dataclass
class CheckResult:
    passed: bool
    rel_err: float
    max_err_k: float
    reason: str = ""


def make_inputs(M: int, N: int, K: int, seed: int, device: str, dtype=None):
    """Fresh seeded standard-normal A (MxK) and B (KxN); never zeros."""
    import torch

    dtype = dtype or torch.float32
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((M, K), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn((K, N), generator=gen, device=device, dtype=torch.float32).to(dtype)
    return a, b


def reference(a, b):
    """torch.matmul on float64-upcast inputs."""
    return a.double() @ b.double()


def compare(c, ref, K: int, precision: str = "fp32") -> CheckResult:
    """Judge an already-computed output against the float64 reference."""
    import torch

    bad = (~torch.isfinite(c)).sum().item()
    if bad:
        what = "NaN (unwritten or invalid)" if torch.isnan(c).any().item() else "Inf"
        return CheckResult(False, float("nan"), float("nan"),
                           f"{bad} of {c.numel()} elements are {what}")
    diff = c.double() - ref
    ref_norm = torch.linalg.vector_norm(ref).item()
    rel = torch.linalg.vector_norm(diff).item() / (ref_norm if ref_norm > 0 else 1.0)
    max_err_k = diff.abs().max().item() / K
    tol = TOLERANCE[precision]
    if not rel <= tol:
        return CheckResult(False, rel, max_err_k, f"relative error {rel:.2e} exceeds {tol:.0e}")
    return CheckResult(True, rel, max_err_k)


def check(launch, c, ref, K: int, precision: str = "fp32") -> CheckResult:
    """Poison C with NaN, run the launch once, and compare with the reference."""
    import torch

    c.fill_(float("nan"))
    launch()
    if c.is_cuda:
        torch.cuda.synchronize()
    return compare(c, ref, K, precision)
