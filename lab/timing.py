"""Timing on the GPU: device events, warm-up, L2 flushed before every repetition, median + p20/p80.

This is what triton.testing.do_bench does, written out so that the lab controls the minimum number
of repetitions (a slow naive kernel still gets a real median, not a single sample) and keeps every
sample. The flush writes a 256 MiB buffer (five times the H100's 50 MB L2) before each repetition;
because it runs on the GPU ahead of the timed launch, it also hides the Python launch overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int


_flush_buffer = None


def _flush():
    import torch

    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    _flush_buffer.zero_()


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    """(p20, median, p80) by linear interpolation, as torch.quantile does."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("no samples")

    def q(p: float) -> float:
        pos = p * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return q(0.2), q(0.5), q(0.8)


def bench(fn, *, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_reps: int = 5,
          max_reps: int = 500) -> Timing:
    """Time `fn` (a no-argument launch) with CUDA events; returns median and p20/p80 in ms."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        _flush()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-3)
    for _ in range(max(1, min(int(warmup_ms / estimate), 100))):
        fn()
    reps = max(min_reps, min(int(rep_ms / estimate), max_reps))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        _flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    p20, med, p80 = quantiles([s.elapsed_time(e) for s, e in zip(starts, ends)])
    return Timing(med, p20, p80, reps)
