"""The GPU's conditions while a row is timed: SM clock, power, temperature, throttle reasons (NVML).

How: a background thread samples NVML every SAMPLE_S seconds while the timed repetitions run
(Sampler, a context manager around the timing loop), plus one sample when the timing starts and one
when it ends. Why sampled rather than read before and after: before a row the GPU has just been
idle or busy with the previous row, so its clock then says little; under a tensor-core GEMM the SM
clock falls within tens of milliseconds as power reaches its cap and rises again at the end, so
only readings taken during the repetitions describe the clock the kernel ran at. NVML reports the
current SM clock (nvmlDeviceGetClockInfo), board power (nvmlDeviceGetPowerUsage, a running
average kept by the driver), the GPU temperature and a bit mask of why the clock is held below its
maximum (nvmlDeviceGetCurrentClocksEventReasons, formerly ...ThrottleReasons); a reason is recorded
when any sample showed it. The sampler holds the GIL for a few microseconds every SAMPLE_S, which
does not slow a timing loop that queues its work on the GPU.

Without NVML (no GPU, or the nvidia-ml-py package missing) every reading is None: CPU rows get
empty columns, never invented ones.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

SAMPLE_S = 0.005

# NVML clock-event (throttle) reason bits, with the names the lab prints. GPU idle and the
# (informational) sync boost are left out: they do not mean the kernel ran slower.
REASONS = {
    0x2: "app_clocks",  # applications clocks setting (a locked or lowered clock)
    0x4: "power_cap",  # software power cap: power at its limit, the clock lowered to stay there
    0x8: "hw_slowdown",  # hardware slowdown (power brake or thermal, reported by the board)
    0x20: "sw_thermal",  # software thermal slowdown
    0x40: "hw_thermal",  # hardware thermal slowdown
    0x80: "power_brake",  # external power brake
    0x100: "display_clocks",
}

_nvml = None  # the pynvml module once initialised; False when NVML cannot be used


def _init():
    global _nvml
    if _nvml is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _nvml = pynvml
        except Exception:  # no package, no driver, no GPU: no readings
            _nvml = False
    return _nvml or None


def handle(cuda_index: int | None = None):
    """The NVML handle of the CUDA device torch uses (matched by PCI bus id, so that
    CUDA_VISIBLE_DEVICES cannot pair the wrong GPU), or None."""
    nvml = _init()
    if nvml is None:
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device() if cuda_index is None else cuda_index
        props = torch.cuda.get_device_properties(index)
        bus = getattr(props, "pci_bus_id", None)
        if bus is not None:
            pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
            try:
                return nvml.nvmlDeviceGetHandleByPciBusId(pci.encode())
            except Exception:
                pass
        return nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def reasons(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def _reason_mask(nvml, h) -> int:
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(nvml, name, None)
        if fn is not None:
            try:
                return int(fn(h))
            except Exception:
                continue
    return 0


def read(h) -> dict | None:
    """One reading: sm_mhz, power_w, temp_c, reason mask."""
    nvml = _init()
    if nvml is None or h is None:
        return None
    try:
        out = {"sm_mhz": float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))}
    except Exception:
        return None
    try:
        out["power_w"] = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
    except Exception:
        out["power_w"] = None
    try:
        out["temp_c"] = float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
    except Exception:
        out["temp_c"] = None
    out["mask"] = _reason_mask(nvml, h)
    return out


def max_sm_mhz(h=None) -> float | None:
    nvml = _init()
    h = h if h is not None else handle()
    if nvml is None or h is None:
        return None
    try:
        return float(nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM))
    except Exception:
        return None


@dataclass
class Conditions:
    """Summary of the samples taken while one row was timed."""

    sm_mhz_mean: float | None = None
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    power_w: float | None = None  # mean board power over the samples
    temp_c: float | None = None  # highest GPU temperature seen
    throttle: str = ""  # reasons seen in any sample, '+'-joined ('' = none)
    samples: int = 0


def summarize(readings: list[dict]) -> Conditions:
    readings = [r for r in readings if r]
    if not readings:
        return Conditions()
    clocks = [r["sm_mhz"] for r in readings]
    powers = [r["power_w"] for r in readings if r.get("power_w") is not None]
    temps = [r["temp_c"] for r in readings if r.get("temp_c") is not None]
    mask = 0
    for r in readings:
        mask |= r.get("mask", 0)
    return Conditions(
        sm_mhz_mean=sum(clocks) / len(clocks), sm_mhz_min=min(clocks), sm_mhz_max=max(clocks),
        power_w=sum(powers) / len(powers) if powers else None,
        temp_c=max(temps) if temps else None,
        throttle="+".join(reasons(mask)), samples=len(readings))


class Sampler:
    """`with Sampler() as s: ...timed work...; torch.cuda.synchronize()` then `s.conditions`.

    The with-block must end only after the GPU work it describes has finished (synchronize
    inside it), or the last samples describe an idle GPU. `reader` is injectable for tests.
    """

    def __init__(self, h=None, interval_s: float = SAMPLE_S, reader=None):
        self._h = h if h is not None or reader is not None else handle()
        self._read = reader or (lambda: read(self._h))
        self._interval = interval_s
        self._readings: list[dict] = []
        self._stop = threading.Event()
        self._thread = None
        self.conditions = Conditions()

    def _loop(self):
        while not self._stop.wait(self._interval):
            r = self._read()
            if r:
                self._readings.append(r)

    def __enter__(self):
        first = self._read()
        if first is None:  # nothing to sample: stay inert
            self._thread = None
            return self
        self._readings.append(first)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            last = self._read()
            if last:
                self._readings.append(last)
        self.conditions = summarize(self._readings)
        return False
