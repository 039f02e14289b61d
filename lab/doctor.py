"""`python -m lab.doctor`: what this machine can do with the lab, in one short table.

On a GPU: the GPU (name, compute capability, whether the sm_90a paths, wgmma and TMA, exist: cc 9.0,
and which stages run on it, as their Offers declare), SM count, driver, the CUDA runtime torch was built with, NVRTC, cuBLAS, the Python packages; whether
Nsight Compute can read performance counters and whether compute-sanitizer runs (each a quick probe
of a one-kernel script, with a timeout); whether the clocks are locked, the top SM clock and the
power limit (NVML); whether a CUDA stage (NVRTC + CuPy) and a Triton kernel launch; and a ~10 s
calibration: cuBLAS fp32 (IEEE, TF32 off) and bf16 at 4096^3, timed by lab.timing.bench while
lab.clocks.Sampler samples the SM clock, as TFLOPS and as a % of lab.peaks' peak at the highest
clock sampled (as lab.compare's peak_gflops column). cuBLAS fp32 below 60% of the FP32 peak, or bf16 below 50%, means something on the
machine is wrong (a low power limit, another process, throttling): timings from it mislead. And
the DRAM (HBM) read bandwidth, measured as lab.compare measures it for each run (lab/bandwidth.py:
a float32 sum over 2 GiB), beside the datasheet's figure where lab/roofline.py knows it; below 70%
of the datasheet's it is flagged (an H200 reads at 4.38 of its 4.8 TB/s, 91%).

Without a GPU: the GPUs each stage runs on, what works in CPU mode (the Triton interpreter, NVRTC builds for sm_90 and sm_90a,
a C++20 compiler for the tests' CUDA emulator; the read bandwidth is skipped), and the exit status
is 0.

Every failed probe is reported with one sentence: what it means and what to do.

    python -m lab.doctor                         # the table
    python -m lab.doctor --json doctor.json      # and every finding as JSON
    python -m lab.doctor --skip-calibration --timeout-s 60

Exit status: 0 when the doctor finished (failed probes are findings, not errors), 1 when the
calibration says the GPU runs cuBLAS far below its peak, 2 for a usage error (one sentence).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.cli import ArgumentParser, guarded
from lab.base.errors import LabError
from lab.ncu import find_tool

REPO = Path(__file__).resolve().parent.parent

# Calibration: the shape, the seconds of timed repetitions per precision, and the floors below
# which the machine is flagged (% of the peak of that precision at the SM clock measured).
CAL_SIZE = 4096
CAL_SECONDS = 2.0
CAL_WARM_SECONDS = 1.0  # back-to-back GEMMs first, so the clock has settled under load
CAL_FLOOR = {"fp32": 60.0, "bf16": 50.0}
# On an NVIDIA H100 80GB HBM3 (2026-11-22) cuBLAS reached 51.7 TFLOPS fp32 (77% of 66.9) and
# 745 TFLOPS bf16 at 4096^3; far below the floors, the GPU is not running as it should.
# The DRAM read bandwidth below this % of the datasheet's is flagged: lab/bandwidth.py read an
# H200's memory at 4.38 TB/s, 91% of its 4.8 (2026-11-29).
BW_FLOOR = 70.0

# The one-kernel script that ncu and compute-sanitizer run.
TINY = ("import torch; x = torch.ones(1 << 20, device='cuda'); y = x * 2; "
        "torch.cuda.synchronize(); print('tiny kernel ran', float(y[0]))")
NCU_METRIC = "sm__cycles_elapsed.avg"

PACKAGES = {  # finding key -> distributions to ask importlib.metadata, first found wins
    "torch": ("torch",),
    "triton": ("triton",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "cuda_bindings": ("cuda-bindings",),
    "nvidia_ml_py": ("nvidia-ml-py", "pynvml"),
    "numpy": ("numpy",),
    "rich": ("rich",),
}


@dataclass
class Finding:
    """One line of the table. ok: True (works), False (a failed probe: `advice` says what to do),
    None (information only)."""

    key: str
    label: str
    value: object
    ok: bool | None = None
    advice: str = ""
    data: dict = field(default_factory=dict)  # numbers behind the value, for --json


# ------------------------------------------------------------------------------------ helpers


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run a probe command: (exit status, stdout + stderr); status None when it timed out or could
    not start (the output then says why)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                           env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        return None, f"timed out after {timeout:g} s\n{out}"
    except OSError as exc:
        return None, f"could not start {cmd[0]}: {exc.strerror or exc}"
    return r.returncode, (r.stdout or "") + (r.stderr or "")


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _last_line(text: str) -> str:
    """The last non-empty line of a tool's output, shortened, quoted inside one sentence."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[-1][:160] if lines else "no output"
    return line.replace(". ", ", ").rstrip(".")


def _python_env() -> dict:
    """The environment of a probe's child process: the repository importable."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


# ---------------------------------------------------------------------------- versions (any mode)


def versions() -> list[Finding]:
    import torch

    labels = {"torch": "torch", "triton": "Triton", "cupy": "CuPy", "cuda_bindings": "cuda-bindings",
              "nvidia_ml_py": "nvidia-ml-py", "numpy": "numpy", "rich": "rich"}
    needed = {"triton": "Triton stages", "cuda_bindings": "CUDA stages", "cupy": "CUDA stages"}
    out = [Finding("python", "Python", platform.python_version())]
    for key, dists in PACKAGES.items():
        v = torch.__version__ if key == "torch" else _version(*dists)
        if v or key not in needed:
            out.append(Finding(key, labels[key], v or "not installed"))
        else:
            out.append(Finding(key, labels[key], "not installed", False,
                               f"{dists[0]} is not installed, so {needed[key]} cannot run; run "
                               f"the README's install command"))
    out.append(Finding("torch_cuda", "CUDA runtime (torch)", torch.version.cuda or "none (CPU build)"))
    try:
        from lab.toolchain.nvrtc import nvrtc_version

        major, minor = nvrtc_version()
        out.append(Finding("nvrtc", "NVRTC", f"{major}.{minor}"))
    except Exception as exc:  # no cuda-bindings, or no NVRTC library
        out.append(Finding("nvrtc", "NVRTC", "unavailable", False,
                           f"NVRTC could not be loaded ({type(exc).__name__}), so no CUDA stage can "
                           f"be built; install cuda-bindings and nvidia-cuda-nvrtc (the README's "
                           f"install command)"))
    return out


# ------------------------------------------------------------------------------- CPU-mode probes


def probe_nvrtc_arch(arch: str) -> Finding:
    """Compile the naive stage for `arch` with NVRTC (no GPU needed)."""
    from lab.toolchain.nvrtc import compile_kernel

    try:
        build = compile_kernel("naive.cu", "matmul_naive", {"BLOCK": 32}, arch=arch)
    except Exception as exc:
        return Finding(f"nvrtc_{arch}", f"NVRTC builds {arch}", "no", False,
                       f"NVRTC could not build a kernel for {arch} ({_last_line(str(exc))}); "
                       f"check that nvidia-cuda-nvrtc 13.0 is installed (pyproject.toml)")
    return Finding(f"nvrtc_{arch}", f"NVRTC builds {arch}",
                   f"yes ({build.registers} registers for naive)", True)


def probe_triton_interpreter(timeout: float) -> Finding:
    """Run the naive Triton stage on CPU tensors under TRITON_INTERPRET=1, in a child process
    (the switch must be set before Triton kernels are imported)."""
    code = ("import torch; from lab import matmul; a = torch.randn(17, 9); b = torch.randn(9, 5); "
            "c = matmul(a, b, stage='naive', backend='triton'); "
            "assert torch.allclose(c, a @ b, atol=1e-4), 'wrong result'; print('interpreter ok')")
    rc, out = _run([sys.executable, "-c", code], timeout,
                   {**_python_env(), "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    if rc == 0 and "interpreter ok" in out:
        return Finding("triton_interpreter", "Triton interpreter", "runs (naive, 17x5x9)", True)
    return Finding("triton_interpreter", "Triton interpreter", "fails", False,
                   f"the Triton interpreter could not run the naive stage ({_last_line(out)}), so "
                   f"CPU mode cannot check Triton stages; install triton >= 3.7 (Triton 3.6's "
                   f"interpreter needs numpy < 2.4)")


def probe_cxx(timeout: float) -> Finding:
    """A C++20 compiler with ASan/UBSan and ASan's fiber interface: what tests/cuda_emulator.py
    needs."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        return Finding("cxx_emulator", "C++ for the emulator", "not found", False,
                       "no g++ or clang++ was found, so the tests that run the CUDA kernels on the "
                       "CPU (tests/cuda_emulator.py) are skipped; install g++ 11 or newer")
    src = ("#include <sanitizer/common_interface_defs.h>\n#include <ucontext.h>\n"
           "#include <vector>\nint main() { auto f = &__sanitizer_finish_switch_fiber; "
           "std::vector<int> v(2); return f && v.size() == 2 ? 0 : 1; }\n")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "probe.cpp").write_text(src)
        rc, out = _run([cxx, "-std=c++20", "-pthread", "-fsanitize=address,undefined",
                        str(Path(tmp) / "probe.cpp"), "-o", str(Path(tmp) / "probe")], timeout)
        if rc == 0:
            rc, out = _run([str(Path(tmp) / "probe")], timeout)
    if rc == 0:
        return Finding("cxx_emulator", "C++ for the emulator", f"{Path(cxx).name}: C++20, ASan/UBSan",
                       True)
    return Finding("cxx_emulator", "C++ for the emulator", f"{Path(cxx).name} fails", False,
                   f"{Path(cxx).name} could not build a C++20 program with AddressSanitizer and "
                   f"its fiber interface ({_last_line(out)}), so the CUDA emulator tests fail; "
                   f"install g++ 11 or newer with libasan and libubsan")


def tools_present() -> list[Finding]:
    """CPU mode: where ncu and compute-sanitizer are (they need a GPU to be probed)."""
    out = []
    for key, name, use in (("ncu", "ncu", "lab.profile"),
                           ("compute_sanitizer", "compute-sanitizer", "tests/test_sanitizer.py")):
        path = find_tool(name)
        out.append(Finding(key, name, f"found at {path} (probed on a GPU only)" if path else
                           f"not found (needed on a GPU machine for {use})"))
    return out


# ------------------------------------------------------------------------------- GPU probes


def gpu_facts() -> list[Finding]:
    import torch

    props = torch.cuda.get_device_properties(0)
    cc = (props.major, props.minor)
    out = [
        Finding("gpu", "GPU", props.name),
        Finding("compute_capability", "compute capability", f"{cc[0]}.{cc[1]}",
                data={"major": cc[0], "minor": cc[1]}),
        Finding("sm90a", "sm_90a (wgmma, TMA)",
                "available (cc 9.0)" if cc == (9, 0) else
                f"not on cc {cc[0]}.{cc[1]} (the sm_90a stages need cc 9.0)",
                data={"available": cc == (9, 0)}),
        stages_here(cc),
        Finding("sm_count", "SMs", props.multi_processor_count),
        Finding("gpu_memory_gib", "GPU memory", f"{props.total_memory / 2**30:.1f} GiB",
                data={"gib": round(props.total_memory / 2**30, 1)}),
    ]
    nvml = _nvml()
    if nvml is not None:
        try:
            drv = nvml.nvmlSystemGetDriverVersion()
            drv = drv.decode() if isinstance(drv, bytes) else drv
            cuda = nvml.nvmlSystemGetCudaDriverVersion()
            out.append(Finding("driver", "driver", f"{drv} (CUDA {cuda // 1000}.{cuda % 1000 // 10})",
                               data={"driver": drv, "cuda_driver": cuda}))
        except Exception:
            out.append(Finding("driver", "driver", "unknown (NVML could not say)"))
    else:
        out.append(Finding("driver", "driver", "unknown (no NVML)", False,
                           "NVML is unavailable, so clocks, power and throttle reasons are not "
                           "recorded beside timings; pip install nvidia-ml-py"))
    out.append(Finding("cublas", "cuBLAS", cublas_version()))
    return out


def _nvml():
    from lab import clocks

    return clocks._init()


def cublas_version() -> str:
    """The version of the libcublas torch has loaded (after one GEMM), read with cublasGetProperty;
    else the nvidia-cublas wheel's version; else torch's CUDA version."""
    import ctypes

    import torch

    try:
        a = torch.ones(8, 8, device="cuda")
        (a @ a).sum().item()
        with open("/proc/self/maps") as maps:
            libs = sorted({ln.split()[-1] for ln in maps if re.search(r"/libcublas\.so", ln)})
        for lib in libs:
            cublas = ctypes.CDLL(lib)
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if cublas.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(value.value))
            return ".".join(parts) + f" ({Path(lib).name})"
    except Exception:
        pass
    wheel = _version("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
    if wheel:
        return f"{wheel} (nvidia-cublas wheel)"
    return f"the one of CUDA {torch.version.cuda} (version not readable)"


def probe_ncu(timeout: float) -> Finding:
    """Can Nsight Compute read a hardware counter? ncu on a one-kernel script, one metric."""
    ncu = find_tool("ncu")
    if ncu is None:
        return Finding("ncu", "ncu reads counters", "ncu not found", False,
                       "Nsight Compute (ncu) was not found, so python -m lab.profile cannot "
                       "collect counters; install it (it ships with the CUDA toolkit) or point "
                       "LAB_NCU at it")
    rc, out = _run([ncu, "--metrics", NCU_METRIC, "--target-processes", "all", "--launch-count",
                    "1", "--csv", sys.executable, "-c", TINY], timeout, _python_env())
    if "ERR_NVGPUCTRPERM" in out:
        return Finding("ncu", "ncu reads counters", "no permission (ERR_NVGPUCTRPERM)", False,
                       "ncu may not read the GPU's performance counters as this user: run the "
                       "profiler as root, or have an administrator set the NVIDIA driver option "
                       "NVreg_RestrictProfilingToAdminUsers=0 (timing works without it, "
                       "lab.profile does not)")
    value = _ncu_value(out)
    if value is not None:
        return Finding("ncu", "ncu reads counters", f"yes ({NCU_METRIC} = {value:,.0f})", True,
                       data={"path": ncu, NCU_METRIC: value})
    if rc is None:
        why = f"it did not finish in {timeout:g} s"
    elif "No kernels were profiled" in out:
        why = "it profiled no kernel"
    else:
        why = f"it exited {rc}: {_last_line(out)}"
    return Finding("ncu", "ncu reads counters", "probe failed", False,
                   f"ncu could not profile a one-kernel script ({why}), so lab.profile will fail "
                   f"too; run the same ncu command by hand and read its message (a longer "
                   f"--timeout-s helps a slow first start)", data={"path": ncu})


def _ncu_value(out: str) -> float | None:
    """The value of NCU_METRIC in ncu's --csv output (or its plain-text table)."""
    pat = re.escape(NCU_METRIC)
    m = (re.search(rf'"{pat}","[^"]*","([0-9][0-9,.]*)"', out)
         or re.search(rf"{pat}\s+\S+\s+([0-9][0-9,.]*)\s*$", out, re.M))
    if not m:
        return None
    try:
        return float(m.group(1).replace(",", ""))
    except ValueError:
        return None


def probe_sanitizer(timeout: float) -> Finding:
    """Does compute-sanitizer (memcheck) run a one-kernel script to a clean end?"""
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return Finding("compute_sanitizer", "compute-sanitizer runs", "not found", False,
                       "compute-sanitizer was not found, so tests/test_sanitizer.py is skipped; it "
                       "ships with the CUDA toolkit (or point LAB_COMPUTE_SANITIZER at it)")
    rc, out = _run([tool, "--tool", "memcheck", "--error-exitcode", "1", sys.executable, "-c",
                    TINY], timeout, {**_python_env(), "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    if rc == 0 and re.search(r"ERROR SUMMARY: 0 errors", out):
        return Finding("compute_sanitizer", "compute-sanitizer runs", "yes (memcheck, 0 errors)",
                       True, data={"path": tool})
    why = (f"it did not finish in {timeout:g} s" if rc is None
           else f"it exited {rc}: {_last_line(out)}")
    return Finding("compute_sanitizer", "compute-sanitizer runs", "probe failed", False,
                   f"compute-sanitizer could not run a one-kernel script cleanly ({why}), so "
                   f"tests/test_sanitizer.py will fail; run the same command by hand and read its "
                   f"message", data={"path": tool})


def clocks_and_power() -> list[Finding]:
    """Locked clocks, the top SM clock, the power limit (NVML)."""
    from lab import clocks

    nvml = _nvml()
    h = clocks.handle()
    if nvml is None or h is None:
        return [Finding("clocks_locked", "clocks locked", "unknown (no NVML)")]
    out = []
    data: dict = {}
    for key, fn in (("app_sm_mhz", "nvmlDeviceGetApplicationsClock"),
                    ("default_app_sm_mhz", "nvmlDeviceGetDefaultApplicationsClock")):
        try:
            data[key] = int(getattr(nvml, fn)(h, nvml.NVML_CLOCK_SM))
        except Exception:
            data[key] = None
    try:
        lo, hi = nvml.nvmlDeviceGetMinMaxClockOfPState(h, nvml.NVML_CLOCK_GRAPHICS,
                                                       nvml.NVML_PSTATE_0)
        data["pstate0_min_mhz"], data["pstate0_max_mhz"] = int(lo), int(hi)
    except Exception:
        pass
    reading = clocks.read(h) or {}
    data["reasons_now"] = "+".join(clocks.reasons(reading.get("mask", 0)))
    app, default = data.get("app_sm_mhz"), data.get("default_app_sm_mhz")
    app_set = app is not None and default is not None and app != default
    locked = app_set or "app_clocks" in data["reasons_now"]
    if locked:
        value = (f"yes (applications clock {app} MHz, default {default})" if app_set
                 else "yes (the applications-clocks reason is active)")
    else:
        value = "no (the SM clock boosts and falls with load; the lab records it per row)"
    out.append(Finding("clocks_locked", "clocks locked", value, None, data=data))
    top = clocks.max_sm_mhz(h)
    out.append(Finding("max_sm_mhz", "max SM clock", f"{top:.0f} MHz" if top else "unknown",
                       data={"mhz": top}))
    try:
        enforced = nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
    except Exception:
        enforced = None
    try:
        default_w = nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0
    except Exception:
        default_w = None
    pdata = {"enforced_w": enforced, "default_w": default_w}
    if enforced is None:
        out.append(Finding("power_limit", "power limit", "unknown", data=pdata))
    elif default_w and enforced < 0.95 * default_w:
        out.append(Finding("power_limit", "power limit", f"{enforced:.0f} W (default {default_w:.0f} W)",
                           False, f"the power limit is {enforced:.0f} W, below the default "
                           f"{default_w:.0f} W, so tensor-core GEMMs run at lower clocks than on "
                           f"other machines; compare only with runs at the same limit, or restore "
                           f"it (nvidia-smi -pl {default_w:.0f}, as root)", data=pdata))
    else:
        out.append(Finding("power_limit", "power limit", f"{enforced:.0f} W"
                           + (f" (default {default_w:.0f} W)" if default_w else ""), data=pdata))
    return out


def probe_launches() -> list[Finding]:
    """A CUDA stage (NVRTC + CuPy) and a Triton stage on the GPU, checked against torch."""
    import torch

    from lab import matmul
    from lab.stages import DEFAULT_STAGE

    out = []
    a = torch.randn(129, 67, device="cuda")
    b = torch.randn(67, 95, device="cuda")
    ref = a.double() @ b.double()
    for backend, label in (("cuda", "CUDA stage launches"), ("triton", "Triton stage launches")):
        try:
            c = matmul(a, b, stage=DEFAULT_STAGE, backend=backend)
            torch.cuda.synchronize()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            if not err < 1e-5:
                raise RuntimeError(f"relative error {err:.1e}")
            out.append(Finding(f"{backend}_launch", label, f"yes ({DEFAULT_STAGE}, rel err {err:.0e})", True))
        except Exception as exc:
            what = ("NVRTC or CuPy" if backend == "cuda" else "Triton")
            out.append(Finding(f"{backend}_launch", label, "fails", False,
                               f"the tiled {backend} stage did not run correctly here "
                               f"({type(exc).__name__}: {_last_line(str(exc))}), so {what} is "
                               f"not usable; check the install against the README"))
    return out


def debug_switches() -> Finding | None:
    """Environment switches that make every timing wrong."""
    bad = [k for k in ("CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET") if os.environ.get(k) == "1"]
    if not bad:
        return None
    return Finding("debug_switches", "debug switches", "=1, ".join(bad) + "=1", False,
                   f"{' and '.join(bad)} is set, which serializes or interprets every launch, so "
                   f"no timing from this shell means anything; unset it before measuring")


# ------------------------------------------------------------------------- read bandwidth


BW_KEY, BW_LABEL = "hbm_read_bw", "HBM read bandwidth"


def bandwidth_finding(bw: float, gpu_name: str) -> Finding:
    """The finding of a measured read bandwidth `bw` (bytes/s) on the GPU torch calls `gpu_name`:
    beside the datasheet's figure where lab/roofline.py knows it, flagged below BW_FLOOR % of it."""
    from lab.bandwidth import DEFAULT_BYTES, REPS, WARMUP_MS
    from lab.roofline import datasheet_bw

    sheet = datasheet_bw(gpu_name)
    pct = None if sheet is None else 100.0 * bw / sheet
    data = {"bytes_per_s": bw, "tbps": bw / 1e12, "buffer_bytes": DEFAULT_BYTES,
            "method": f"float32 sum over {DEFAULT_BYTES / 2**30:g} GiB, median of {REPS} reps "
                      f"timed with CUDA events after {WARMUP_MS:g} ms of warm-up",
            "datasheet_tbps": None if sheet is None else sheet / 1e12, "pct_of_datasheet": pct,
            "floor_pct": BW_FLOOR, "flagged": pct is not None and pct < BW_FLOOR}
    read = f"{bw / 1e12:.2f} TB/s"
    if pct is None:
        return Finding(BW_KEY, BW_LABEL, f"{read} (no datasheet figure known for this GPU)", None,
                       data=data)
    value = f"{read} = {pct:.0f}% of the datasheet's {sheet / 1e12:.2f}"
    if not data["flagged"]:
        return Finding(BW_KEY, BW_LABEL, value, True, data=data)
    return Finding(BW_KEY, BW_LABEL, value, False,
                   f"the GPU's memory was read at only {pct:.0f}% of its datasheet bandwidth (a "
                   f"healthy GPU gives at least {BW_FLOOR:.0f}%), so another process is using the "
                   f"memory or its clock is lowered, and memory-bound rows such as decode shapes "
                   f"will read slow: look at nvidia-smi before trusting their % HBM", data=data)


def probe_read_bandwidth(measure=None) -> Finding:
    """The GPU's DRAM read bandwidth (lab/bandwidth.py; `measure(device)` stands in for it in
    the tests); one sentence instead without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return Finding(BW_KEY, BW_LABEL, "skipped: CPU mode has no GPU memory to read")
    from lab.bandwidth import measure_read_bandwidth

    try:
        bw = (measure or measure_read_bandwidth)("cuda")
    except Exception as exc:
        return Finding(BW_KEY, BW_LABEL, "failed", False,
                       f"the read bandwidth could not be measured ({type(exc).__name__}: "
                       f"{_last_line(str(exc))}), so lab.compare's % HBM stays empty here; free "
                       f"some GPU memory (it reads a 2 GiB buffer) and run the doctor again")
    return bandwidth_finding(bw, torch.cuda.get_device_properties(0).name)


# ------------------------------------------------------------------------------- calibration


def calibrate(precision: str, seconds: float = CAL_SECONDS, size: int = CAL_SIZE) -> dict:
    """cuBLAS (torch.matmul) at size^3 in `precision` ('fp32' IEEE or 'bf16'): TFLOPS, the SM
    clock/power/throttle reasons sampled while it ran, and the % of the peak at that clock."""
    import torch

    from lab import check, clocks, peaks
    from lab.timing import bench

    matmul_flags = torch.backends.cuda.matmul
    if precision == "fp32":  # IEEE fp32: TF32 off (what the lab's fp32 rows compare with)
        if hasattr(matmul_flags, "fp32_precision"):
            matmul_flags.fp32_precision = "ieee"
        else:  # pragma: no cover - older torch
            matmul_flags.allow_tf32 = False
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    a, b = check.make_inputs(size, size, size, 0, "cuda", dtype=dtype)
    c = torch.empty((size, size), device="cuda", dtype=dtype)

    def fn():
        torch.matmul(a, b, out=c)

    start = time.perf_counter()
    while time.perf_counter() - start < CAL_WARM_SECONDS:  # the clock settles under load
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    with clocks.Sampler() as sampler:
        t = bench(fn, warmup_ms=10, rep_ms=seconds * 1000, max_reps=20000)
        torch.cuda.synchronize()
    cond = sampler.conditions
    tflops = 2.0 * size**3 / (t.median_ms * 1e-3) / 1e12
    props = torch.cuda.get_device_properties(0)
    # the peak at the highest clock sampled, as lab.compare's peak_gflops column (docs/COLUMNS.md)
    mhz = cond.sm_mhz_max or clocks.max_sm_mhz()
    pk = peaks.peak(precision, (props.major, props.minor), props.multi_processor_count, mhz)
    pct = None if pk is None else 100.0 * tflops / pk.tflops
    del a, b, c
    torch.cuda.empty_cache()
    return {"precision": precision, "size": size, "median_ms": t.median_ms, "p20_ms": t.p20_ms,
            "p80_ms": t.p80_ms, "reps": t.reps, "tflops": tflops,
            "peak_tflops": None if pk is None else pk.tflops, "pct_of_peak": pct,
            "floor_pct": CAL_FLOOR[precision], "peak_clock_mhz": mhz, "sm_mhz_mean": cond.sm_mhz_mean,
            "sm_mhz_min": cond.sm_mhz_min, "power_w": cond.power_w, "temp_c": cond.temp_c,
            "throttle": cond.throttle, "flagged": pct is not None and pct < CAL_FLOOR[precision]}


def calibration_finding(cal: dict) -> Finding:
    prec = cal["precision"]
    label = f"cuBLAS {prec} {cal['size']}^3" + (" (IEEE)" if prec == "fp32" else "")
    mean = f", mean clock {cal['sm_mhz_mean']:.0f} MHz" if cal.get("sm_mhz_mean") else ""
    if cal["pct_of_peak"] is None:
        return Finding(f"calibration_{prec}", label,
                       f"{cal['tflops']:.1f} TFLOPS{mean} (no peak known for this GPU)", None,
                       data=cal)
    at = f" at {cal['peak_clock_mhz']:.0f} MHz" if cal.get("peak_clock_mhz") else ""
    value = (f"{cal['tflops']:.1f} TFLOPS = {cal['pct_of_peak']:.0f}% of the peak "
             f"{cal['peak_tflops']:.1f}{at}{mean}")
    if cal["throttle"]:
        value += f", {cal['throttle']}"
    if not cal["flagged"]:
        return Finding(f"calibration_{prec}", label, value, True, data=cal)
    return Finding(f"calibration_{prec}", label, value, False,
                   f"cuBLAS {prec} reached only {cal['pct_of_peak']:.0f}% of the {prec} peak at "
                   f"the measured clock (a healthy GPU gives at least {cal['floor_pct']:.0f}%), so "
                   f"something on this machine slows it (another process, a low power limit, "
                   f"throttling or a debug setting): look at nvidia-smi before trusting any timing",
                   data=cal)


# ------------------------------------------------------------------------------------- collect

def stages_here(cc: tuple[int, int]) -> Finding:
    """Which stages run on a GPU of compute capability `cc`, as their Offers declare (lab.compare
    --list marks each precision): "14 of 18 stages, every precision; decode without fp8
    (sm_89+); not here: wgmma, tma_wgmma, warp_specialized, persistent (sm_90a)"."""
    from lab.stages import STAGES

    full, partial, absent = [], [], {}
    for s in STAGES:
        missing = [p for p in s.all_precisions() if not s.runs_on(cc, p)]
        if not missing:
            full.append(s.name)
        elif len(missing) < len(s.all_precisions()):
            partial.append(f"{s.name} without {', '.join(missing)} "
                           f"({s.requirement(missing[0])})")
        else:
            absent.setdefault(s.requirement(), []).append(s.name)
    value = (f"all {len(STAGES)} stages, every precision" if len(full) == len(STAGES)
             else f"{len(full)} of {len(STAGES)} stages, every precision")
    value += "".join(f"; {p}" for p in partial)
    if absent:
        value += "; not here: " + ", ".join(f"{', '.join(names)} ({need})"
                                           for need, names in absent.items())
    return Finding("stages_here", "stages on this GPU", value,
                   data={"every_precision": full, "some_precisions": partial,
                         "not_here": [n for names in absent.values() for n in names]})


def stages_by_gpu() -> Finding:
    """CPU mode: the GPUs each stage runs on, the oldest first ("sm_75+: naive, ...; sm_80+:
    mma, decode; sm_90a: ...": Stage.requirement, in any of its precisions)."""
    from lab.stages import STAGES

    groups: dict[str, list[str]] = {}
    for s in STAGES:
        groups.setdefault(s.requirement(), []).append(s.name)
    return Finding("stages_by_gpu", "stages by GPU",
                   "; ".join(f"{need}: {', '.join(names)}" for need, names in groups.items())
                   + " (python -m lab.compare --list: each precision's)", data=groups)


def collect_findings(mode: str, timeout: float, calibration: bool = True,
                     progress=None) -> list[Finding]:
    """Every finding for this machine; `progress(text)` is told what runs (slow probes)."""
    say = progress or (lambda text: None)
    findings: list[Finding] = []
    if mode == "gpu":
        findings += gpu_facts()
    else:
        findings.append(Finding("gpu", "GPU", "none visible to torch: CPU mode"))
        findings.append(stages_by_gpu())
    findings += versions()
    if mode == "cpu":
        wheel = _version("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
        findings.append(Finding("cublas", "cuBLAS", f"{wheel} (nvidia-cublas wheel)" if wheel
                                else "not loaded (torch has no CUDA here)"))
    if mode == "cpu":
        say("NVRTC builds for sm_90 and sm_90a")
        findings += [probe_nvrtc_arch("sm_90"), probe_nvrtc_arch("sm_90a")]
        say("the Triton interpreter")
        findings.append(probe_triton_interpreter(timeout))
        say("a C++20 compiler for the CUDA emulator")
        findings.append(probe_cxx(timeout))
        findings += tools_present()
        findings.append(probe_read_bandwidth())  # one sentence: skipped
        return findings
    import torch

    if torch.cuda.get_device_capability(0) == (9, 0):  # the wgmma/TMA code paths build here
        findings.append(probe_nvrtc_arch("sm_90a"))
    switches = debug_switches()
    if switches:
        findings.append(switches)
    findings += clocks_and_power()
    say("a CUDA stage and a Triton stage")
    findings += probe_launches()
    say(f"ncu (one metric, up to {timeout:g} s)")
    findings.append(probe_ncu(timeout))
    say(f"compute-sanitizer (up to {timeout:g} s)")
    findings.append(probe_sanitizer(timeout))
    say("the HBM read bandwidth (a float32 sum over 2 GiB)")
    findings.append(probe_read_bandwidth())
    if calibration:
        for prec in ("fp32", "bf16"):
            say(f"calibration: cuBLAS {prec} at {CAL_SIZE}^3")
            try:
                findings.append(calibration_finding(calibrate(prec)))
            except Exception as exc:
                findings.append(Finding(f"calibration_{prec}", f"cuBLAS {prec} {CAL_SIZE}^3",
                                        "failed", False,
                                        f"the cuBLAS {prec} calibration failed "
                                        f"({type(exc).__name__}: {_last_line(str(exc))}), so the "
                                        f"GPU or torch's CUDA build is not usable as it is"))
    return findings


def to_json(mode: str, findings: list[Finding]) -> dict:
    cal = [f.data for f in findings if f.key.startswith("calibration_") and f.data]
    return {
        "tool": "lab.doctor",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "host": platform.node(),
        "findings": {f.key: asdict(f) for f in findings},
        "calibration": cal,
        # the measured DRAM read bandwidth and the datasheet's; None where it was not measured
        "read_bandwidth": next((f.data for f in findings if f.key == BW_KEY and f.data), None),
        "problems": [f.advice for f in findings if f.ok is False and f.advice],
    }


def render(mode: str, findings: list[Finding], console) -> None:
    from rich.markup import escape
    from rich.table import Table

    title = ("lab doctor: GPU mode" if mode == "gpu"
             else "lab doctor: CPU mode (no CUDA GPU; nothing is timed)")
    table = Table(title=title, title_justify="left", show_header=True, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("value")
    table.add_column("", no_wrap=True)
    marks = {True: "[green]ok[/green]", False: "[red]NO[/red]", None: ""}
    for f in findings:
        table.add_row(escape(f.label), escape(str(f.value)), marks[f.ok])
    console.print(table)
    problems = [f for f in findings if f.ok is False]
    if problems:
        console.print("[bold]What to do:[/bold]")
        for f in problems:
            console.print(f"- {escape(f.label)}: {escape(f.advice)}", highlight=False)
    else:
        console.print("Every probe passed.")


def _writable_json(path: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise LabError(f"cannot write {p}: it is a folder; give a file name such as "
                       f"{p / 'doctor.json'}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        existed = p.exists()
        with open(p, "a"):
            pass
        if not existed:
            p.unlink()
    except OSError as exc:
        raise LabError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="lab.doctor", description="What this machine can do with the "
                            "lab: GPU, versions, profiler and sanitizer probes, clocks, power, the "
                            "memory's read bandwidth, and a short cuBLAS calibration against the "
                            "peak.")
    parser.add_argument("--skip-calibration", action="store_true",
                        help="leave out the ~10 s cuBLAS fp32/bf16 calibration at 4096^3")
    parser.add_argument("--json", metavar="PATH", help="also write every finding as JSON to PATH")
    parser.add_argument("--timeout-s", type=float, default=120.0, metavar="S",
                        help="the longest each probe of an external tool (ncu, compute-sanitizer, "
                             "the Triton interpreter, the C++ compiler) may take (default 120)")
    return parser


def _main(argv: list[str] | None) -> int:
    import json

    from rich.console import Console

    args = build_parser().parse_args(argv)
    if not args.timeout_s > 0:
        raise LabError(f"--timeout-s must be a positive number of seconds, not {args.timeout_s:g}")
    json_path = _writable_json(args.json) if args.json else None
    import torch

    mode = "gpu" if torch.cuda.is_available() else "cpu"
    console = Console()
    err = Console(stderr=True)
    findings = collect_findings(mode, args.timeout_s, calibration=not args.skip_calibration,
                       progress=lambda text: err.print(f"[dim]probing {text}...[/dim]",
                                                       highlight=False))
    render(mode, findings, console)
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(to_json(mode, findings), indent=2, default=str) + "\n")
        except OSError as exc:
            raise LabError(f"cannot write {json_path}: {exc.strerror or exc}") from None
        console.print(f"wrote {json_path}", highlight=False)
    flagged = any(f.key.startswith("calibration_") and f.ok is False for f in findings)
    return 1 if flagged else 0


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
