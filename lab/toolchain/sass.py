"""Read the SASS (the GPU's machine code) of a compiled stage, without a GPU.

`sass(build)` writes `Build.cubin` to a temporary file and returns `cuobjdump --dump-sass` of it
(or `nvdisasm`'s disassembly when cuobjdump is missing). The tools come from the pip wheels
nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm (site-packages/nvidia/cu13/bin/), from PATH, or from
a CUDA toolkit; `find_tool` says which one is used. `instruction_mix(text)` counts opcodes, e.g.
{"FFMA": 512, "LDS.128": 32, "LDG.E.128.CONSTANT": 4, ...}.

    from cuda_kernels import vectorized
    from lab.toolchain import sass
    print(sass.instruction_mix(sass.sass(vectorized.build())))
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from lab.base.errors import LabError


def find_tool(name: str) -> Path | None:
    """Path of a CUDA binary tool (cuobjdump, nvdisasm, ...), or None if there is none.

    Looked for in the nvidia-* pip wheels first (they match the NVRTC the lab compiles with), then
    on PATH, then under $CUDA_HOME / $CUDA_PATH and /usr/local/cuda.
    """
    candidates: list[Path] = []
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
                candidates.append(Path(root) / sub / "bin" / name)
    except ImportError:
        pass
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / name)
    candidates.append(Path("/usr/local/cuda/bin") / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def sass(build) -> str:
    """Disassembly of `build.cubin` (cuobjdump --dump-sass, else nvdisasm)."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None and nvdisasm is None:
        raise LabError("neither cuobjdump nor nvdisasm was found; install the pip wheels "
                       "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (see pyproject.toml)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{build.kernel}.cubin"
        path.write_bytes(build.cubin)
        cmd = [str(cuobjdump), "--dump-sass", str(path)] if cuobjdump else \
            [str(nvdisasm), "--print-code", str(path)]
        result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"{Path(cmd[0]).name} could not disassemble {build.kernel}: "
                       f"{result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


# An instruction line: optional predicate (@P0, @!P1), then the opcode with its dotted modifiers.
_OPCODE = re.compile(
    r"^\s*(?:/\*[0-9a-f]+\*/)?\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def instruction_mix(text: str) -> dict[str, int]:
    """Opcode (with modifiers) -> count, over every instruction line of a SASS listing."""
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if not re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line):  # cuobjdump: /*0010*/ before each op
            continue
        m = _OPCODE.match(line)
        if m:
            counts[m.group(1)] += 1
    return dict(counts)
