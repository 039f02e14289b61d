"""Peak arithmetic: what a GPU can do per SM per clock, and the peak at a given clock.

peak FLOP/s = SMs x FLOP per SM per clock x SM clock. The per-SM rates below are dense (no 2:4
sparsity) and count an FMA as 2 FLOP. They come from NVIDIA's architecture whitepapers and are
cross-checked against the datasheet peaks they imply:

  H100 SXM5 (sm_90, 132 SMs, 1830 MHz boost in the datasheet): 132 x 4096 x 1.83 GHz = 989 TFLOPS
  bf16/fp16 dense (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022: 989.4), FP8 1978.9,
  TF32 494.7,
  FP32 SIMT 132 x 256 x 1.98 GHz = 66.9 TFLOPS at the H100's top SM clock (1980 MHz).
  A100 (sm_80, 108 SMs, 1410 MHz): bf16 108 x 2048 x 1.41 GHz = 312 TFLOPS, TF32 156, FP32 19.5.

A timed row whose GFLOPS exceed the peak of its precision at the clock measured while it ran is
not a speed: the kernel skipped work or the timer missed it (lab/run.py marks it invalid). The
3xtf32 precision does three TF32 products per multiply-add, so its ceiling is a third of TF32's;
a row labelled 3xtf32 is held against that.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.base.precisions import RECORDS

# FLOP per SM per clock, dense, by compute capability (major, minor). "fp32" is the SIMT FMA pipe;
# the others are the tensor cores with fp32 accumulation (what the lab's tensor-core rows use).
RATES: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): {"fp32": 128, "fp16": 1024},  # V100
    (7, 5): {"fp32": 128, "fp16": 512},  # T4
    (8, 0): {"fp32": 128, "tf32": 1024, "bf16": 2048, "fp16": 2048},  # A100
    (8, 6): {"fp32": 256, "tf32": 512, "bf16": 1024, "fp16": 1024},  # A6000, A10, RTX 30
    (8, 9): {"fp32": 256, "tf32": 512, "bf16": 1024, "fp16": 1024},  # L4, L40, RTX 40
    (9, 0): {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp16": 4096, "fp8": 8192},  # H100, H200
}

# Precisions that run on another precision's units (their records, lab/base/precisions.py): 3xtf32
# does 3 TF32 products per FMA.
DERIVED = {r.name: (r.peak_units, r.products) for r in RECORDS if r.peak_units != r.name}

# A measured rate may sit a little above the arithmetic peak at the sampled clock: NVML samples
# the clock, and a boost between samples is invisible. Above this margin a row is invalid.
MARGIN = 1.02


@dataclass(frozen=True)
class Peak:
    precision: str
    sms: int
    clock_mhz: float
    flop_per_sm_clock: float

    @property
    def tflops(self) -> float:
        return self.sms * self.flop_per_sm_clock * self.clock_mhz * 1e6 / 1e12

    @property
    def gflops(self) -> float:
        return self.tflops * 1e3


def rate(precision: str, capability: tuple[int, int]) -> float | None:
    """FLOP per SM per clock for `precision` on a GPU of compute capability `capability`; None
    when the table does not know it (an unlisted GPU, or a precision its tensor cores lack)."""
    base, divisor = DERIVED.get(precision, (precision, 1))
    per_sm = RATES.get(tuple(capability), {}).get(base)
    return None if per_sm is None else per_sm / divisor


def peak(precision: str, capability: tuple[int, int], sms: int, clock_mhz: float) -> Peak | None:
    r = rate(precision, capability)
    if r is None or not sms or not clock_mhz:
        return None
    return Peak(precision, sms, clock_mhz, r)


def pct_of_peak(gflops: float, p: Peak | None) -> float | None:
    return None if p is None or gflops is None else 100.0 * gflops / p.gflops


def exceeds(gflops: float, p: Peak | None) -> bool:
    """True when `gflops` is beyond what the hardware can do at that clock (with MARGIN)."""
    return p is not None and gflops is not None and gflops > MARGIN * p.gflops
