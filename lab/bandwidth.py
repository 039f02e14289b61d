"""The GPU's DRAM (HBM) read bandwidth, measured: the roof of a product that is bound by reading
its operands once, such as a decode-shaped product (a few rows of activations times a large weight
matrix, M <= 64), where time goes into reading the weights, not into arithmetic.

measure_read_bandwidth() times torch's float32 sum over one buffer (2 GiB by default, some forty
times the 50 MB L2 of an H100 or an H200, so each repetition reads every byte from DRAM and no
flush is needed): WARMUP_MS of reads first, then REPS reads, each between its own pair of CUDA
events; the buffer's bytes over the median time. About 30 ms of GPU time and the buffer's
allocation, well under a second. A reduction reads and writes almost nothing else, so it reads at
what the memory gives: 4.38 TB/s on an H200 (the datasheet says 4.8; 2026-11-29), where cuBLAS
bf16 reads decode-shaped weights at 2.3-3.5 TB/s. The warm-up matters: there, the first 3 ms of
reads after an idle moment ran at 3.9 TB/s and the reads after them at 4.38.

Used by lab.doctor (a finding beside the datasheet's figure, lab/roofline.py's DATASHEET_DRAM_BW)
and by lab.compare, once per run: the environment file's `hbm_read_gbps` and every row's, the
denominator of `pct_hbm` (docs/COLUMNS.md). Kernel-agnostic; torch only.
"""

from __future__ import annotations

from typing import Callable

from lab.base.errors import LabError

DEFAULT_BYTES = 2 * 2**30  # the buffer read: many times any GPU's L2
REPS = 10  # timed repetitions (after the warm-up)
WARMUP_MS = 25.0  # reads before the timed ones, until the memory system runs at its full rate
ELEM_BYTES = 4  # float32

# A timer: (fn, reps) -> the milliseconds of each of `reps` calls of fn.
Timer = Callable[[Callable[[], object], int], list[float]]


def event_timer(fn: Callable[[], object], reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls of fn on the current CUDA stream, each between its own
    pair of CUDA events, after WARMUP_MS of calls."""
    import time

    import torch

    start = time.perf_counter()
    while True:  # batches of calls, each batch waited for, until WARMUP_MS have passed
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
        if (time.perf_counter() - start) * 1e3 >= WARMUP_MS:
            break
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def measure_read_bandwidth(device="cuda", nbytes: int = DEFAULT_BYTES, *, reps: int = REPS,
                           timer: Timer | None = None) -> float:
    """The DRAM read bandwidth of `device` in bytes per second: the bytes of a float32 buffer of
    about `nbytes` (at most half the free GPU memory) over the median time of a sum over it.

    `timer` times the reads (default: CUDA events, event_timer); a test passes its own, which also
    lets the logic run on a CPU tensor. Without one, a device that is not a CUDA GPU is refused
    with one sentence."""
    import torch

    from lab.timing import quantiles

    dev = torch.device(device)
    if timer is None:
        if dev.type != "cuda" or not torch.cuda.is_available():
            raise LabError(f"measuring the read bandwidth needs a CUDA GPU, and {device} is not one")
        timer = event_timer
    if reps < 1:
        raise ValueError(f"reps must be 1 or more, got {reps}")
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        nbytes = min(nbytes, free // 2)
    numel = nbytes // ELEM_BYTES
    if numel < 1:
        raise LabError(f"no room for a buffer to read: {nbytes} bytes asked for")
    x = torch.ones(numel, dtype=torch.float32, device=dev)
    try:
        samples = timer(lambda: x.sum(), reps)
    finally:
        x = None  # the buffer goes back to the GPU before the rows are run
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if not samples:
        raise ValueError("the timer returned no samples")
    median_ms = quantiles(list(samples))[1]
    if not median_ms > 0:
        raise ValueError(f"the median time must be positive, got {median_ms}")
    return numel * ELEM_BYTES / (median_ms * 1e-3)
