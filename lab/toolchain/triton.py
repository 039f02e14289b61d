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

from lab.base.contract import Prepared
from lab.toolchain.nvrtc import current_stream_ptr

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


class CompiledLaunch:
    """A launch of a compiled Triton kernel through its handle (`compiled[grid]`), skipping
    JITFunction.run's per-call work (binding the arguments, computing the specialization key,
    looking the kernel up): `run(*args)` takes every parameter of the kernel in order, constexprs
    included, as the compiled kernel's launcher does. It launches on torch's current stream at
    call time (a stream being captured into a CUDA graph, too)."""

    __slots__ = ("runner",)

    def __init__(self, compiled, grid: tuple):
        self.runner = compiled[tuple(grid) + (1,) * (3 - len(grid))]

    def run(self, *args) -> None:
        self.runner(*args, stream=current_stream_ptr())


def _bound(kernel, args: tuple, meta: dict) -> tuple:
    """Every parameter of `kernel` in order (its defaults applied) for kernel[grid](*args, **meta):
    the compiled kernel's argument list. The launch options (num_warps, ...) are not parameters.
    Read from the JITFunction's own signature of the Python function it compiles."""
    values = []
    for i, (name, param) in enumerate(kernel.signature.parameters.items()):
        if i < len(args):
            values.append(args[i])
        elif name in meta:
            values.append(meta[name])
        elif param.default is not param.empty:
            values.append(param.default)
        else:
            raise TypeError(f"{kernel.fn.__name__}: no value for its parameter {name}")
    return tuple(values)


def launcher(kernel, grid: tuple, args: tuple, *, helper: bool = False, **meta) -> Prepared:
    """A Prepared launch of `kernel[grid](*args, **meta)`, compiled now (JITFunction.warmup) so
    that calling it only launches: through the compiled kernel's handle on a GPU (CompiledLaunch),
    through the interpreter on the CPU. Its `steps` replay it on other tensors (lab/plan.py).

    helper=True: a copy around a stage's kernels (not one of them); recording() leaves it out.
    A grid beyond CUDA's limits is refused in one sentence (lab.toolchain.nvrtc.check_grid)."""
    from lab.toolchain.nvrtc import check_grid

    grid = tuple(int(g) for g in grid)
    check_grid(grid, getattr(getattr(kernel, "fn", kernel), "__name__", "the kernel"))
    calls = _RECORDER.get()
    if calls is not None:
        if not helper:
            calls.append((kernel, grid, args, meta))
        return Prepared.of_steps([])
    if interpreted(kernel):
        def interpret(*a):
            kernel[grid](*a, **meta)

        return Prepared.of_steps([(interpret, tuple(args))])
    compiled = kernel.warmup(*args, grid=grid, **meta)
    compiled._init_handles()
    resources = compiled_resources(compiled, grid)
    fast = CompiledLaunch(compiled, grid)
    return Prepared.of_steps([(fast.run, _bound(kernel, tuple(args), meta))], resources=resources)


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
