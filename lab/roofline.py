"""The roofline: where a kernel sits between the memory roof and the compute roof.

    attainable(I) = min(peak_flops, I * peak_bw)        I = FLOP / DRAM byte (arithmetic intensity)
    ridge point   = peak_flops / peak_bw                 the intensity where the two roofs meet

A kernel left of the ridge point is memory-bound (more bytes per FLOP than DRAM can feed at full
compute speed); right of it, compute-bound. "% of roof" is achieved FLOP/s over the attainable
FLOP/s at the kernel's own intensity: how much of what the hardware allows at that intensity it gets.

Pure functions, no GPU needed. The peaks are parameters; the defaults are the figures of the NVIDIA
H100 80GB HBM3 (SXM, 132 SMs) the results/ files were measured on (2026-11-22):

- FP32 SIMT peak: 132 SMs x 128 FP32 lanes x 2 FLOP (one FFMA) x 1.98 GHz = 66.9 TFLOP/s.
  On a GPU, `device_peaks()` recomputes it as SM count x lanes per SM x 2 x max SM clock.
- DRAM bandwidth: about 3.0 TB/s, a device-to-device copy measured on that H100 (the HBM3 spec
  sheet says 3.35 TB/s; a real kernel does not reach the sheet). No GPU query gives an achievable
  bandwidth, so this stays the default unless --peak-bw is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

H100_SMS = 132
H100_SM_CLOCK_HZ = 1.98e9
FP32_LANES_PER_SM = 128  # Hopper, Ada, Blackwell; Ampere GA100 (A100) has 64
H100_FP32_PEAK = H100_SMS * FP32_LANES_PER_SM * 2 * H100_SM_CLOCK_HZ  # 66.9e12 FLOP/s
H100_DRAM_BW = 3.0e12  # byte/s, a device-to-device copy measured on that H100

# DRAM (HBM) bandwidth by the datasheet, byte/s, by a piece of the name torch gives the GPU (the
# first piece found in the name wins, so a longer name comes before a shorter one it contains).
# No kernel reaches these: a torch reduction read an H200's HBM3e at 4.38 TB/s (lab/bandwidth.py,
# 2026-11-29) and a copy moved 3.0 TB/s on the H100; lab/bandwidth.py measures what a run reads.
DATASHEET_DRAM_BW: tuple[tuple[str, float], ...] = (
    ("H100 80GB HBM3", 3.35e12),  # H100 SXM5
    ("H100 PCIe", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H200", 4.8e12),  # H200 SXM and H200 NVL
)


def datasheet_bw(name: str) -> float | None:
    """The datasheet's DRAM bandwidth (byte/s) of the GPU torch calls `name`; None when the table
    does not know it."""
    for piece, bw in DATASHEET_DRAM_BW:
        if piece in (name or ""):
            return bw
    return None

# FP32 lanes per SM by compute capability (major, minor); anything unlisted is taken as 128.
_LANES = {(8, 0): 64, (7, 0): 64, (6, 0): 64}


@dataclass(frozen=True)
class Peaks:
    flops: float  # FLOP/s
    bw: float  # byte/s
    source: str  # where the figures came from, for the table's caption

    @property
    def ridge(self) -> float:
        return ridge_point(self.flops, self.bw)


DEFAULT_PEAKS = Peaks(H100_FP32_PEAK, H100_DRAM_BW,
                      "H100 SXM anchors: 132 SMs x 128 x 2 x 1.98 GHz, 3.0 TB/s measured copy")


def fp32_peak(sms: int, clock_hz: float, lanes_per_sm: int = FP32_LANES_PER_SM) -> float:
    """FP32 SIMT peak in FLOP/s: every lane retires one FFMA (2 FLOP) per cycle."""
    return float(sms) * lanes_per_sm * 2.0 * clock_hz


def ridge_point(peak_flops: float, peak_bw: float) -> float:
    """FLOP per byte at which the memory roof meets the compute roof."""
    if not (peak_flops > 0 and peak_bw > 0):
        raise ValueError("peaks must be positive")
    return peak_flops / peak_bw


def attainable(intensity: float, peak_flops: float, peak_bw: float) -> float:
    """The roof at this arithmetic intensity (FLOP/byte), in FLOP/s."""
    if intensity < 0 or math.isnan(intensity):
        raise ValueError(f"intensity must be >= 0, got {intensity}")
    if math.isinf(intensity):
        return peak_flops
    return min(peak_flops, intensity * peak_bw)


def classify(intensity: float, achieved_flops: float, peak_flops: float,
             peak_bw: float) -> tuple[str, float]:
    """('memory' | 'compute', percent of the roof at this intensity that the kernel achieved).

    Exactly at the ridge point a kernel counts as compute-bound (both roofs equal there)."""
    bound = "memory" if intensity < ridge_point(peak_flops, peak_bw) else "compute"
    roof = attainable(intensity, peak_flops, peak_bw)
    pct = 100.0 * achieved_flops / roof if roof > 0 else float("nan")
    return bound, pct


def intensity(flops: float, dram_bytes: float) -> float:
    """FLOP per DRAM byte; infinite when the kernel moved no DRAM bytes at all."""
    if dram_bytes <= 0:
        return math.inf
    return flops / dram_bytes


def current_device():
    """(name, compute capability, SMs, max SM clock in MHz) of the current GPU; None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        import cupy.cuda.runtime as rt

        dev = torch.cuda.current_device()
        sms = rt.deviceGetAttribute(rt.cudaDevAttrMultiProcessorCount, dev)
        clock_khz = rt.deviceGetAttribute(rt.cudaDevAttrClockRate, dev)
        return (torch.cuda.get_device_name(dev), tuple(torch.cuda.get_device_capability(dev)),
                sms, clock_khz / 1e3)
    except Exception:  # pragma: no cover - a broken driver: fall back to the anchors
        return None


def device_peaks(peak_bw: float = H100_DRAM_BW) -> Peaks | None:
    """FP32 peak from the current GPU (SM count x lanes x 2 x max SM clock); None without a GPU.

    The bandwidth stays a parameter (default: the measured H100 copy figure)."""
    device = current_device()
    if device is None:
        return None
    name, cc, sms, mhz = device
    lanes = _LANES.get(tuple(cc), FP32_LANES_PER_SM)
    flops = fp32_peak(sms, mhz * 1e6, lanes)
    return Peaks(flops, peak_bw,
                 f"{name}: {sms} SMs x {lanes} x 2 x {mhz / 1e3:.2f} GHz; "
                 f"DRAM {peak_bw / 1e12:.2f} TB/s")
