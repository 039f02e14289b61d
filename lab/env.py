"""The environment recorded beside every results file: GPU, clocks, driver, CUDA, versions, commit,
and the DRAM read bandwidth measured for the run (lab/bandwidth.py) beside the datasheet's."""

from __future__ import annotations

import datetime
import os
import importlib.metadata
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _nvidia_smi(which: str = "0") -> dict[str, str]:
    """nvidia-smi's driver, clocks, power limit and temperature of one GPU (`which`: an index,
    a UUID or a PCI bus id, as its -i takes them)."""
    fields = ["driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit",
              "temperature.gpu"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
             "-i", which], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(["driver", "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz",
                     "power_limit_w", "temperature_c"], values))


def _flag(text: str | None) -> bool | None:
    """LAB_DIRTY's value: 1/true/yes -> True, 0/false/no -> False, unset or other -> None."""
    value = (text or "").strip().lower()
    return True if value in ("1", "true", "yes") else False if value in ("0", "false", "no") else None


def collect(mode: str, seed: int, read_bw: float | None = None) -> dict[str, object]:
    """The environment of a run; `read_bw` (bytes/s) is the read bandwidth measured for it."""
    import torch

    env: dict[str, object] = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "seed": seed,
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _version("triton"),
        "cupy": _version("cupy-cuda13x") or _version("cupy-cuda12x") or _version("cupy"),
        "cuda_bindings": _version("cuda-bindings"),
        "numpy": _version("numpy"),
        # A copy of the tree (as on a remote GPU machine) may have no .git, or a .git whose HEAD
        # is not the code that runs: LAB_COMMIT, when set, names the code and wins.
        "commit": os.environ.get("LAB_COMMIT") or _git("rev-parse", "HEAD"),
        # whether tracked files differ from that commit; with LAB_COMMIT the copy's own .git (if
        # any) says nothing about it, so LAB_DIRTY=0/1 says it, else it is unknown (None)
        "dirty": (_flag(os.environ.get("LAB_DIRTY")) if os.environ.get("LAB_COMMIT")
                  else bool(_git("status", "--porcelain", "--untracked-files=no"))),
    }
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        env["nvrtc"] = f"{major}.{minor}"
    except Exception:
        env["nvrtc"] = None
    if mode == "gpu":
        index = torch.cuda.current_device()  # a rank's own GPU in a run over several
        props = torch.cuda.get_device_properties(index)
        env.update({
            "gpu": props.name,
            "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}",
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "l2_bytes": getattr(props, "L2_cache_size", None),
        })
        from lab.roofline import datasheet_bw

        sheet = datasheet_bw(props.name)
        env["hbm_read_gbps"] = None if read_bw is None else round(read_bw / 1e9, 1)
        env["hbm_datasheet_gbps"] = None if sheet is None else round(sheet / 1e9, 1)
        uuid = str(getattr(props, "uuid", "") or "")
        uuid = "GPU-" + uuid if uuid and not uuid.startswith("GPU-") else uuid
        env.update((_nvidia_smi(uuid) if uuid else {}) or _nvidia_smi(str(index)))
        try:
            import cupy

            env["cuda_driver_api"] = cupy.cuda.runtime.driverGetVersion()
            env["cuda_runtime_cupy"] = cupy.cuda.runtime.runtimeGetVersion()
        except Exception:
            pass
    return env
