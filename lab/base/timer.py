"""The timer of one-time work in prepare() (copies, padding) that goes into `setup_ms`.

CUDA events on the current stream on a GPU, perf_counter on the CPU; inside a CUDA graph capture
an event cannot be waited on, so the work is captured untimed (0 ms).
"""

from __future__ import annotations

import time

class _Timer:
    """CUDA events on the current stream on a GPU, perf_counter on the CPU."""

    def __init__(self, cuda: bool):
        # Inside a CUDA graph capture an event cannot be waited on; the copy is captured untimed.
        self.cuda = cuda
        self.capturing = cuda and _capturing()
        if self.capturing:
            return
        if cuda:
            import torch

            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.capturing:
            return 0.0
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return float(self.start.elapsed_time(self.end))
        return (time.perf_counter() - self.t0) * 1e3


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def timer(cuda: bool) -> _Timer:
    return _Timer(cuda)
