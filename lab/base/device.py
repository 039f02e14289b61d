"""The GPU as the launchers see it: `sm_count(device)` (`DEFAULT_SMS` off a GPU), and
`capability(device)` and `gpu_name(device)`, which prepare() reads to refuse a GPU its kernels do
not run on (lab/base/entry.py).

The tensor-core launchers size their automatic tiles by the SM count, and the split-K arithmetic
(lab/base/splitk.py) aims its blocks at it. Where no GPU says (CPU and meta tensors) the lab takes
an H100 SXM's 132 SMs, the GPU the results/ files were first measured on.
"""

from __future__ import annotations

DEFAULT_SMS = 132  # SMs assumed where no GPU says (CPU and meta tensors): an H100 SXM's 132


def sm_count(device) -> int:
    """SMs of the GPU `device` is on (torch's multiprocessor count); DEFAULT_SMS (132) for a CPU
    or meta device, where no GPU says. The tensor-core launchers size their automatic tiles by
    it."""
    if getattr(device, "type", None) != "cuda":
        return DEFAULT_SMS
    import torch

    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def capability(device) -> tuple[int, int] | None:
    """(major, minor) compute capability of the GPU `device` is on; None for a CPU or meta
    device (the Triton interpreter, lab.profile's recording), where no GPU runs anything."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return tuple(int(x) for x in torch.cuda.get_device_capability(device))


def gpu_name(device) -> str:
    """The name torch gives the GPU `device` is on (e.g. "NVIDIA A100-SXM4-80GB")."""
    import torch

    return torch.cuda.get_device_name(device)
