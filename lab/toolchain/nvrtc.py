"""Compile a kernel source with NVRTC, read ptxas's resource report, and launch it through CuPy.

Part of the lab's toolchain layer (lab/toolchain/): the CUDA launchers build and launch with it,
and the harness reads resources, occupancy and versions from it; it imports nothing above
lab.base.errors and lab.toolchain.cache. Compilation needs no GPU (NVRTC is a library), so the CPU
mode of the lab and the CPU tests use `compile_kernel` alone; `launcher` is the only part that needs a
GPU. Sources are read from cuda_kernels/ (KERNEL_DIR), where every stage's .cu file lives.

Compile-time parameters (tile sizes, switches) arrive as `-DNAME=value` defines, so one .cu file
serves every variant of a stage. Each distinct (source, defines, options, arch) is compiled once per
process, and its cubin and ptxas report are kept on disk by content (lab/toolchain/cache.py), so
another process, test file or command gets them without compiling again.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as _np  # KernelLaunch.run, on every call

from lab.base.errors import CompileError, LabError
from lab.toolchain import cache as _cache

KERNEL_DIR = Path(__file__).resolve().parents[2] / "cuda_kernels"
# Without a GPU, compile for sm_90: the NVIDIA H100 80GB HBM3 that results/ were measured on.
# On a GPU the launcher asks the device for its architecture instead.
DEFAULT_ARCH = "sm_90"
_TARGET = threading.local()  # building_for's architecture, per thread


@contextlib.contextmanager
def building_for(arch: str):
    """While the block runs, this thread's builds that name no architecture target `arch`, ahead
    of LAB_CUDA_ARCH and the GPU present: how tests/test_arch_matrix.py builds every stage's
    launcher (its OFFER.compile) for sm_75 ... sm_90 without such a GPU, several threads at once
    (NVRTC releases the GIL)."""
    before = getattr(_TARGET, "arch", None)
    _TARGET.arch = arch
    try:
        yield
    finally:
        _TARGET.arch = before


@dataclass(frozen=True)
class Build:
    """One compiled kernel: its cubin and what ptxas said about it."""

    source: str
    kernel: str
    arch: str
    options: tuple[str, ...]
    cubin: bytes = field(repr=False)
    log: str = field(repr=False)
    registers: int
    smem_static: int  # bytes of __shared__ declared in the kernel
    spill_stores: int
    spill_loads: int
    stack_frame: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


def parse_ptxas_log(log: str, kernel: str) -> dict[str, int]:
    """Pull registers, static shared memory, stack frame and spills for `kernel` out of -Xptxas=-v."""
    # The log has one "Function properties for X" block per function; keep the one for our kernel.
    blocks = re.split(r"ptxas info\s*: (?:Compiling entry function|Function properties for) ", log)
    text = log
    for i, blk in enumerate(blocks):
        if blk.startswith(f"'{kernel}'") or blk.startswith(kernel):
            text = "".join(blocks[i : i + 3])
            break
    regs = _PTXAS_REGS.search(text)
    smem = _PTXAS_SMEM.search(text)
    frame = _PTXAS_FRAME.search(text)
    if regs is None or frame is None:
        raise LabError(f"could not read ptxas's resource report for {kernel}; log was:\n{log}")
    return {
        "registers": int(regs.group(1)),
        "smem_static": int(smem.group(1)) if smem else 0,
        "stack_frame": int(frame.group(1)),
        "spill_stores": int(frame.group(2)),
        "spill_loads": int(frame.group(3)),
    }


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise LabError(
            "cuda-bindings is not installed, so CUDA stages cannot be compiled; "
            "run the README's install command"
        ) from exc
    return nvrtc


def _check(result, what: str):
    nvrtc = _nvrtc()
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise LabError(f"NVRTC failed in {what}: {err.name}")
    return result[1] if len(result) == 2 else result[1:]


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = bytearray(size)  # writable: NVRTC fills it (never hand it an immutable bytes object)
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\x00 ").decode(errors="replace")


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    _, major, minor = _nvrtc().nvrtcVersion()
    return major, minor


@functools.lru_cache(maxsize=None)
def nvrtc_release() -> str:
    """The NVRTC library this process compiles with, as the build cache keys it: its version and
    the size of the loaded libnvrtc (nvrtcVersion says 13.0 for both 13.0.48 and 13.0.88, whose
    ptxas can allocate registers differently). The size is read from /proc/self/maps where the
    system has one; elsewhere the version alone."""
    import os

    release = "%d.%d" % nvrtc_version()
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libnvrtc.so" in line}
    except OSError:
        return release
    for path in sorted(paths):
        try:
            return f"{release} {os.path.basename(path)} {os.path.getsize(path)}"
        except OSError:
            continue
    return release


def nvrtc_options(defines: dict[str, object], arch: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    opts = [f"-arch={arch}", "-std=c++17", "-Xptxas=-v", "-lineinfo", f"-I{KERNEL_DIR}"]
    if nvrtc_version() >= (12, 9):
        # NVRTC 12.9+ caches compiled programs (on disk too); a cache hit runs no ptxas and so
        # prints no resource report. Measured on the H100 image (NVRTC 13.0): the second compile
        # of the same source in a process returned an empty log.
        opts.append("--no-cache")
    opts += [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(defines.items())]
    opts += list(extra)
    return tuple(opts)


def nvrtc_compile(source: str, options: tuple[str, ...], output: str = "cubin") -> tuple[bytes, str]:
    """Compile cuda_kernels/<source> with NVRTC; return (the cubin or PTX bytes, the log).

    A failed compile raises CompileError with NVRTC's log (file(line): error ...).
    """
    nvrtc = _nvrtc()
    path = KERNEL_DIR / source
    try:
        code = path.read_bytes()
        # the on-disk cache's key: this source, every header it includes, the options (the
        # checkout's own path left out) and the compiler's release (lab/toolchain/cache.py)
        key = _cache.digest("nvrtc", output, nvrtc_release(),
                            *(o.replace(str(KERNEL_DIR), "<kernels>") for o in options),
                            *_cache.closure_parts(path, (KERNEL_DIR,)))
    except OSError as exc:
        raise LabError(f"cannot read CUDA source {path}: {exc.strerror}") from exc
    hit = _cache.load("nvrtc", key, (output, "log"))
    if hit is not None:
        return hit[output], hit["log"].decode()
    get_size, get = {"cubin": (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN),
                     "ptx": (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)}[output]
    prog = _check(nvrtc.nvrtcCreateProgram(code, source.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _program_log(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(
                f"NVRTC could not compile {source} to {output} (options: {' '.join(options)}); "
                "compiler log:\n" + log.strip()
            )
        buf = bytearray(_check(get_size(prog), f"{output} size"))  # writable: NVRTC fills it
        _check(get(prog, buf), f"get {output}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    _cache.store("nvrtc", key, {output: bytes(buf), "log": log.encode()})
    return bytes(buf), log


@functools.lru_cache(maxsize=None)
def _compile(source: str, kernel: str, options: tuple[str, ...], arch: str) -> Build:
    cubin, log = nvrtc_compile(source, options, "cubin")
    return Build(
        source=source, kernel=kernel, arch=arch, options=options, cubin=cubin, log=log,
        **parse_ptxas_log(log, kernel),
    )


def compile_kernel(
    source: str,
    kernel: str,
    defines: dict[str, object] | None = None,
    *,
    fast_math: bool = False,
    unroll: bool = True,
    layout: str = "nn",
    arch: str | None = None,
    offsets64: bool = False,
) -> Build:
    """Compile `source` (a file in cuda_kernels/) and return the Build for `kernel` (extern "C").

    The two compiler switches every stage offers: `fast_math` adds --use_fast_math (flush
    denormals to zero, approximate division and square root, FMA contraction); `unroll=False`
    defines UNROLL=0, which common.cuh turns into `#pragma unroll 1` on the inner loop.
    `layout` ('nn', 'nt', 'tn', 'tt') sets TRANS_A and TRANS_B (common.cuh): each operand layout
    is its own build. `offsets64` defines OFFSET64=1: common.cuh's offset_t becomes 64-bit, for
    a problem whose operands span 2^31 elements or more (lab/base/problem.py: Problem.offsets64);
    without it no define is added, so the 32-bit build's options (and cache entry) are the ones
    every build had before the switch existed. `arch`: the target, else building_for()'s, else
    $LAB_CUDA_ARCH, else the GPU present's, else DEFAULT_ARCH (sm_90).
    """
    arch = (arch or getattr(_TARGET, "arch", None) or os.environ.get("LAB_CUDA_ARCH")
            or device_arch() or DEFAULT_ARCH)
    defines = {**(defines or {}), "UNROLL": bool(unroll), **layout_defines(layout)}
    if offsets64:
        defines["OFFSET64"] = True
    options = nvrtc_options(defines, arch, ("--use_fast_math",) if fast_math else ())
    return _compile(source, kernel, options, arch)


@functools.lru_cache(maxsize=None)
def device_arch() -> str | None:
    """sm_XY of the current GPU, or None when there is none (then we build for the H100, sm_90)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    except Exception:  # pragma: no cover - a broken driver means "no GPU" here
        return None


# --------------------------------------------------------------------------------------------- GPU


@functools.lru_cache(maxsize=None)
def _load(build: Build):
    import cupy

    module = cupy.cuda.function.Module()
    module.load(build.cubin)
    return module, module.get_function(build.kernel)


def function_attributes(build: Build) -> dict[str, int]:
    """What the driver says about the loaded kernel (registers, static smem, local memory)."""
    from cupy_backends.cuda.api import driver

    _, fn = _load(build)
    get = lambda attr: driver.funcGetAttribute(attr, fn.ptr)  # noqa: E731
    return {
        "registers": get(driver.CU_FUNC_ATTRIBUTE_NUM_REGS),
        "smem_static": get(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        "local_bytes": get(driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
        "max_threads_per_block": get(driver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    }


def occupancy_blocks_per_sm(build: Build, threads: int, smem_dynamic: int = 0) -> int:
    """The CUDA occupancy API's answer for this kernel and block size."""
    from cupy_backends.cuda.api import driver

    _, fn = _load(build)
    return driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem_dynamic)


def current_stream_ptr(device: int | None = None) -> int:
    """The raw handle of torch's current CUDA stream on `device` (None: the current device), a
    stream being captured into a CUDA graph too. About a microsecond; torch.cuda.current_stream()
    builds a Python object and takes a few."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(torch.cuda.current_device() if device is None else device))
    return int(torch.cuda.current_stream().cuda_stream)  # pragma: no cover - older torch


_STREAMS: dict[int, object] = {}


def _cupy_stream(ptr: int):
    """CuPy's view of a CUDA stream handle (made once per handle)."""
    stream = _STREAMS.get(ptr)
    if stream is None:
        import cupy

        with warnings.catch_warnings():  # ExternalStream is deprecated in CuPy 14 but still the
            warnings.simplefilter("ignore", DeprecationWarning)  # one spelling 13 and 14 share
            stream = _STREAMS[ptr] = cupy.cuda.ExternalStream(ptr)
    return stream


class KernelLaunch:
    """One launch of an NVRTC build: `launch()` runs it with the arguments it was made with,
    `launch.run(*args)` with others of the same kinds (lab.matmul's plan cache replays a launch on
    new tensors of the same shapes this way: lab/plan.py). Either way it goes to torch's current
    stream at call time, so it can be captured in a CUDA graph.

    Arguments: torch CUDA tensors, passed by their data pointer (the tensor stays referenced by
    whoever holds the arguments), and numpy scalars (np.int32 for sizes)."""

    __slots__ = ("fn", "grid", "block", "smem", "args", "pointers")

    def __init__(self, fn, grid, block, smem: int, args: tuple, pointers: tuple[int, ...]):
        self.fn, self.grid, self.block, self.smem, self.args = fn, grid, block, smem, args
        self.pointers = pointers  # the positions of the tensor arguments

    def run(self, *args) -> None:
        cargs = list(args)
        for i in self.pointers:
            cargs[i] = _np.uint64(cargs[i].data_ptr())
        self.fn(self.grid, self.block, tuple(cargs), shared_mem=self.smem,
                stream=_cupy_stream(current_stream_ptr()))

    def __call__(self) -> None:
        self.run(*self.args)

    @property
    def step(self) -> tuple:
        """(run, args): what lab.base.contract.Prepared.steps holds for this launch."""
        return (self.run, self.args)


# CUDA's grid limits: blocks along x, y and z (the same for a Triton launch's programs)
MAX_GRID = (2**31 - 1, 65535, 65535)


def check_grid(grid, kernel: str) -> None:
    """Raise LabError (one sentence) for a grid beyond MAX_GRID. Every stage launches a 1-D grid
    of tiles (warptiling's split is its y), so only a problem with more tiles than 2^31 - 1, or
    a split above 65,535, gets here; a stage with larger tiles, or a smaller split, runs it."""
    dims = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
    if any(g > limit for g, limit in zip(dims, MAX_GRID)):
        shown = " x ".join(f"{g:,}" for g in dims)
        raise LabError(f"{kernel} would launch a grid of {shown} blocks, more than a GPU takes "
                       f"({MAX_GRID[0]:,} x {MAX_GRID[1]:,} x {MAX_GRID[2]:,}); a stage with "
                       f"larger tiles, such as warptiling or mma, or a smaller splitk runs this "
                       f"problem")


def launcher(build: Build, grid, block, args, smem_dynamic: int = 0) -> KernelLaunch:
    """A KernelLaunch of `build` (a no-argument callable that launches on torch's current stream).

    `args` may hold torch CUDA tensors (passed by their data pointer) and numpy scalars (np.int32
    for sizes). Everything is resolved here so that the call only launches. A grid beyond CUDA's
    limits (check_grid) is refused in one sentence.
    """
    import numpy as np
    import torch

    check_grid(grid, build.kernel)
    _, fn = _load(build)
    if smem_dynamic > 48 * 1024:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(
            fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_dynamic
        )
    for x in args:
        if isinstance(x, torch.Tensor):
            if not x.is_cuda:
                raise TypeError(f"kernel argument of shape {tuple(x.shape)} is not on a CUDA GPU")
        elif not isinstance(x, np.generic):
            raise TypeError(f"kernel argument {x!r} must be a tensor or a numpy scalar")
    grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
    pointers = tuple(i for i, x in enumerate(args) if isinstance(x, torch.Tensor))
    return KernelLaunch(fn, grid, block, int(smem_dynamic), tuple(args), pointers)


# ----------------------------------------------------------------- register caps (no GPU needed)


def resources(build: Build, grid, block, smem_dynamic: int = 0) -> dict[str, int]:
    """The resource columns for one launch of `build` (figures from ptxas; no GPU needed)."""
    threads = 1
    for b in block:
        threads *= int(b)
    return {
        "registers": build.registers,
        "smem_static": build.smem_static,
        "smem_dynamic": int(smem_dynamic),
        "spill_bytes": build.spill_bytes,
        "threads": threads,
        "grid_blocks": int(grid[0]) * int(grid[1]) * int(grid[2] if len(grid) > 2 else 1),
    }


def layout_defines(layout: str = "nn") -> dict[str, bool]:
    """-DTRANS_A / -DTRANS_B for a BLAS layout name ('nn', 'nt', 'tn', 'tt'; common.cuh)."""
    if len(layout) != 2 or any(ch not in "nt" for ch in layout):
        raise LabError(f"layout {layout!r} must be two letters of n and t, such as nn or tn")
    return {"TRANS_A": layout[0] == "t", "TRANS_B": layout[1] == "t"}
