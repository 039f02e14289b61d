"""What `python -m lab.profile` profiles: one Target per kernel (cuBLAS, then each stage x
backend), the kernel filter ncu finds it by (the kernels its launcher's OFFER declares), and the
child command line that runs it ("the target": python -m lab.profile --_target ...). Also the
few facts parent and child share: the repository root the child runs from, the warm-up count and
the line a failed check prints."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from lab.base.errors import LabError

REPO = Path(__file__).resolve().parents[2]
CUBLAS_KERNELS = "regex:gemm|Gemm|GEMM|cutlass|nvjet|xmma|Kernel"
CHECK_FAILED = "lab.profile target: check failed"
WARMUP = 1


@dataclass
class Target:
    label: str  # stage variant label, or "cublas"
    backend: str  # cuda | triton | cublas
    params: str
    kernel_filter: str  # ncu --kernel-name value
    argv: list[str] = field(default_factory=list)  # the child command (python -m lab.profile ...)

    @property
    def name(self) -> str:
        return f"{self.label}-{self.backend}".replace(":", "_").replace(",", "_").replace("=", "")


def cuda_build(variant, precision: str = "fp32", shape=(4096, 4096, 4096), layout: str = "nn"):
    """The NVRTC build of a CUDA stage variant in `precision`, as its launcher builds it for
    `shape` and `layout` (the Offer's compile; no GPU needed: sm_90 without one)."""
    offer = variant.stage.offer("cuda")
    return offer.compile(variant.params_for("cuda"), *shape, layout, precision)[0]


def kernel_names(variant, backend: str, precision: str = "fp32") -> tuple[str, ...]:
    """The kernels one launch of this variant runs, as its launcher's Offer declares them."""
    return variant.stage.offer(backend).kernel_names(variant.params_for(backend), precision)


def kernel_filter(variant, backend: str, precision: str = "fp32") -> str:
    """ncu's --kernel-name for the kernels of one launch (ncu then profiles the first match)."""
    names = kernel_names(variant, backend, precision)
    if not names:
        raise LabError(f"stage {variant.stage.name} ({backend}) declares no kernel in its OFFER")
    if backend == "cuda":
        return names[0] if len(names) == 1 else "regex:^(" + "|".join(names) + ")$"
    # prefix match: older Triton versions appended a specialization suffix to the name
    return "regex:^" + (names[0] if len(names) == 1 else "(" + "|".join(names) + ")")


def target_argv(backend: str, label: str | None, shape, args, check: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "lab.profile", "--_target", backend]
    if label:
        argv += ["--stage", label]
    argv += ["--size", str(shape), "--precision", getattr(args, "precision", "fp32"),
             "--seed", str(args.seed), "--warmup", str(WARMUP)]
    if check:
        argv.append("--check")
    if getattr(args, "filter", "nvtx") == "skip":
        argv.append("--no-nvtx")
    return argv


def targets_for(pairs, shape, args) -> list[Target]:
    """cuBLAS (unless --no-cublas), then one target per (variant, backend) pair (runnable())."""
    targets = []
    if not args.no_cublas:
        targets.append(Target("cublas", "cublas", "", CUBLAS_KERNELS,
                              target_argv("cublas", None, shape, args)))
    for v, backend in pairs:
        params = ",".join(f"{k}={val}" for k, val in v.params_for(backend).items())
        targets.append(Target(v.label, backend, params,
                              kernel_filter(v, backend, args.precision),
                              target_argv(backend, v.label, shape, args)))
    return targets
