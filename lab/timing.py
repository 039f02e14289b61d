"""Timing on the GPU: device events, warm-up, L2 flushed before every repetition, median + p20/p80.

bench() is what triton.testing.do_bench does, written out so that the lab controls the minimum
number of repetitions (a slow naive kernel still gets a real median, not a single sample) and keeps
every sample. The flush writes a 256 MiB buffer (five times the H100's 50 MB L2) before each
repetition; because it runs on the GPU ahead of the timed launch, it also hides the Python launch
overhead.

The baseline beside each row (bench_adjacent). The SM clock of a GPU moves with its power draw and
temperature: on the H100 cuBLAS bf16 at 4096^3 read 771 TFLOPS in one call and 668 a few minutes
later. A stage timed a minute after its cuBLAS baseline gets a % of cuBLAS that is partly the
clock's doing. So each stage row is timed next to its own cuBLAS call, interleaved:

    1. both are run once and timed over 3 flushed launches, for an estimate of each;
    2. both are warmed up (25 ms each);
    3. BATCHES batches follow; in each, n flushed repetitions of one and n of the other, the order
       alternating from batch to batch (stage, cuBLAS | cuBLAS, stage | stage, cuBLAS | ...), so a
       clock that drifts during the row weighs on both alike; n is each one's repetition budget
       (rep_ms, between min_reps and max_reps) split over the batches;
    4. each gets the median (and p20/p80) of all its samples, and % of cuBLAS is
       100 x cuBLAS median / stage median, the two taken under the same conditions.

The old protocol (one cuBLAS row per shape, timed before all stages) is still there as
`lab.compare --cublas-timing once`, so the two can be compared: docs/TRUST.md has the spread of a
stage's % of cuBLAS over repeated runs under each.
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


def _estimate(fn) -> float:
    """ms per flushed launch, from 3 launches after a first (compiling, caching) one."""
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
    return max(start.elapsed_time(end) / 3, 1e-3)


def _warm(fn, estimate: float, warmup_ms: float) -> None:
    for _ in range(max(1, min(int(warmup_ms / estimate), 100))):
        fn()


def _measure(fn, n: int) -> list[float]:
    """n flushed repetitions of fn, each between its own pair of events (ms each)."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        _flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _summary(samples: list[float]) -> Timing:
    p20, med, p80 = quantiles(samples)
    return Timing(med, p20, p80, len(samples))


BATCHES = 6  # interleaved batches per row: enough alternations to average a drifting clock


def reps_for(estimate: float, rep_ms: float, min_reps: int = 5, max_reps: int = 500) -> int:
    return max(min_reps, min(int(rep_ms / estimate), max_reps))


def bench_adjacent(fn, base, *, warmup_ms: float = 25.0, rep_ms: float = 100.0,
                   min_reps: int = 6, max_reps: int = 500, batches: int = BATCHES,
                   estimate=None, warm=None, measure=None) -> tuple[Timing, Timing]:
    """Time `fn` and the baseline `base` interleaved (see the module's header): returns
    (fn's Timing, base's Timing). estimate/warm/measure are the GPU steps, injectable so that the
    schedule can be tested without a GPU (tests/test_timing.py)."""
    estimate = estimate or _estimate
    warm = warm or _warm
    measure = measure or _measure
    est = {"fn": estimate(fn), "base": estimate(base)}
    warm(fn, est["fn"], warmup_ms)
    warm(base, est["base"], warmup_ms)
    per_batch = {k: max(1, -(-reps_for(v, rep_ms, min_reps, max_reps) // batches))
                 for k, v in est.items()}
    samples: dict[str, list[float]] = {"fn": [], "base": []}
    funcs = {"fn": fn, "base": base}
    for i in range(batches):
        for k in (("fn", "base") if i % 2 == 0 else ("base", "fn")):
            samples[k] += measure(funcs[k], per_batch[k])
    return _summary(samples["fn"]), _summary(samples["base"])


def bench(fn, *, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_reps: int = 5,
          max_reps: int = 500) -> Timing:
    """Time `fn` (a no-argument launch) with CUDA events; returns median and p20/p80 in ms."""
    estimate = _estimate(fn)
    _warm(fn, estimate, warmup_ms)
    return _summary(_measure(fn, reps_for(estimate, rep_ms, min_reps, max_reps)))
