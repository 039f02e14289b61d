"""PTX of a CUDA stage: the same source and options as its Build, compiled by NVRTC to PTX.

`python -m lab.profile --stage tiled --ptx` prints it. No GPU is needed (NVRTC is a library). The
options are the Build's own (defines, -std, -I, --use_fast_math, -lineinfo), with the real
architecture `-arch=sm_XY` swapped for its virtual one `-arch=compute_XY` (so NVRTC stops at PTX)
and the ptxas flags dropped (ptxas does not run). The SASS that ran is in Build.cubin; this is the
PTX ptxas started from.
"""

from __future__ import annotations

import functools

from lab.toolchain.nvrtc import Build, compile_kernel, nvrtc_compile


def ptx_options(options: tuple[str, ...]) -> tuple[str, ...]:
    """A Build's NVRTC options turned into PTX-only options."""
    out = []
    for opt in options:
        if opt.startswith("-Xptxas") or opt.startswith("--ptxas-options"):
            continue
        if opt.startswith("-arch=sm_"):
            opt = "-arch=compute_" + opt[len("-arch=sm_"):]
        out.append(opt)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _ptx(source: str, options: tuple[str, ...]) -> str:
    code, _log = nvrtc_compile(source, options, "ptx")
    return code.rstrip(b"\x00").decode(errors="replace")


def ptx(build: Build) -> str:
    """The PTX of a Build: same source, same options, virtual architecture."""
    return _ptx(build.source, ptx_options(build.options))


def ptx_of(source: str, kernel: str, defines: dict[str, object] | None = None, *,
           fast_math: bool = False, unroll: bool = True, arch: str | None = None) -> str:
    """PTX of `source` with the options `compile_kernel` would use for these arguments."""
    return ptx(compile_kernel(source, kernel, defines, fast_math=fast_math, unroll=unroll,
                              arch=arch))
