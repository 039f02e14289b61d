"""Launching a @triton.jit kernel the lab's way, and compiling one without a GPU.

Part of the lab's shared base (lab/toolchain/): the Triton launchers launch with it, and the
harness (lab.profile, lab.matmul) reads from it; it imports nothing above lab.contract.

On a GPU, `launcher` compiles the kernel once up front (JITFunction.warmup) so that the harness's
timed call only launches, and reads the compiled kernel's metadata (registers, spills, shared
memory, warps) for the resource columns. Under the Triton interpreter (TRITON_INTERPRET=1, the CPU
mode) there is nothing to compile and no resource report. `recording()` turns launches into
records (the profiler compiles a stage's kernel exactly as its prepare() would); FakeDriver lets
Triton compile for an sm_90 GPU that is not here.
"""

from __future__ import annotations

import contextlib
import contextvars

from lab.contract import Prepared

_KERNELS_INTERPRETED: list[bool] = []  # set once, when the first stage module is imported


def kernels_imported(interpreting: bool) -> None:
    """Called by triton_kernels/_common.py as the first Triton stage is imported: whether
    TRITON_INTERPRET=1 was set then (it decides, for the whole process, whether every
    @triton.jit kernel is interpreted or compiled)."""
    if not _KERNELS_INTERPRETED:
        _KERNELS_INTERPRETED.append(interpreting)


def kernels_interpreted() -> bool | None:
    """Whether this process's Triton kernels are interpreted; None before any was imported."""
    return _KERNELS_INTERPRETED[0] if _KERNELS_INTERPRETED else None


def interpreted(kernel) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def compiled_resources(compiled, grid) -> dict[str, int]:
    meta = compiled.metadata
    num_warps = int(getattr(meta, "num_warps", 4))
    blocks = 1
    for g in grid:
        blocks *= int(g)
    return {
        "registers": int(compiled.n_regs),
        "smem_static": 0,  # Triton allocates all shared memory dynamically
        "smem_dynamic": int(getattr(meta, "shared", 0)),
        "spill_bytes": int(compiled.n_spills),
        "threads": num_warps * 32,
        "grid_blocks": blocks,
    }


_RECORDER: contextvars.ContextVar = contextvars.ContextVar("triton_launch_recorder", default=None)


@contextlib.contextmanager
def recording():
    """Within this block, launcher() compiles and launches nothing: it appends (kernel, grid,
    args, meta) of each launch a stage's prepare() would make to the list it yields (the
    profiler's way to compile a stage's kernel exactly as its launcher would, lab/profile.py)."""
    calls: list = []
    token = _RECORDER.set(calls)
    try:
        yield calls
    finally:
        _RECORDER.reset(token)


def launcher(kernel, grid: tuple, args: tuple, **meta) -> Prepared:
    """A Prepared launch of `kernel[grid](*args, **meta)`, compiled now (JITFunction.warmup) so
    that calling it only launches."""
    grid = tuple(int(g) for g in grid)
    calls = _RECORDER.get()
    if calls is not None:
        calls.append((kernel, grid, args, meta))
        return Prepared(lambda: None)
    resources = None
    if not interpreted(kernel):
        compiled = kernel.warmup(*args, grid=grid, **meta)
        compiled._init_handles()
        resources = compiled_resources(compiled, grid)

    def launch():
        kernel[grid](*args, **meta)

    return Prepared(launch, resources=resources)


class FakeDriver:
    """Just enough of a Triton driver to compile (never launch) for a GPU that is not here."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")
