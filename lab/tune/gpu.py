"""The GPU side of a search: whether there is a GPU, its name and SM count, and GpuBench (the
inputs, reference and output of one shape, and the real launch factory, checker and timer that
search() takes). Everything here imports torch only when called."""

from __future__ import annotations

from lab.tune.search import LONG_REP_MS


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver or no torch: no GPU
        return False


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def gpu_sm_count() -> int | None:
    """The current GPU's multiprocessor count, or None (no GPU, or torch cannot say)."""
    try:
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device())
                   .multi_processor_count)
    except Exception:  # a broken driver or no GPU: the seeds assume SEED_SMS
        return None


class GpuBench:
    """Inputs, reference and output of one shape on the GPU, and the real launch factory (the
    launcher's prepare(), which returns a lab.base.contract.Prepared), checker and timer for
    `search`."""

    def __init__(self, stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
                 precision: str = "fp32", seed: int = 0):
        import torch

        from lab import check as chk
        from lab.base.dtypes import OUT_DTYPE_NAMES

        self.module = stage.module(backend)
        self.K, self.precision = K, precision
        # fp8: e4m3 operands with per-tensor scales (self.scales), as lab.compare makes them
        self.a, self.b, self.scales = chk.inputs_for(precision, M, N, K, seed, "cuda", layout)
        self.ref = chk.reference(self.a, self.b, self.scales)
        self.c = torch.empty((M, N), device="cuda",
                             dtype=getattr(torch, OUT_DTYPE_NAMES.get(precision, "float32")))

    def launch(self, params: dict):
        # fp32 is what float32 operands mean; other precisions are named (tf32, 3xtf32 take
        # float32 operands too)
        named = {} if self.precision == "fp32" else {"precision": self.precision}
        if self.scales is not None:
            named.update(scale_a=self.scales[0], scale_b=self.scales[1])
        return self.module.prepare(self.a, self.b, self.c, **named, **params)

    def check(self, launch):
        from lab.check import check

        return check(launch, self.c, self.ref, self.K, self.precision)

    @staticmethod
    def time(params: dict, launch, rep_ms: float) -> float:
        from lab.timing import bench

        return bench(launch, warmup_ms=min(25.0, rep_ms), rep_ms=rep_ms).median_ms

    def cublas_ms(self, rep_ms: float = LONG_REP_MS) -> float | None:
        """cuBLAS (torch.matmul, TF32 off) on the same operands, for the % of cuBLAS line."""
        import torch

        from lab.timing import bench

        matmul = torch.backends.cuda.matmul
        from lab.base.precisions import get

        tf32 = get(self.precision).cublas_tf32  # 3xtf32 stands in for fp32, compared with it
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "tf32" if tf32 else "ieee"
        else:  # pragma: no cover - older torch
            matmul.allow_tf32 = tf32
        c = torch.empty_like(self.c)
        try:
            return bench(lambda: torch.matmul(self.a, self.b, out=c), rep_ms=rep_ms).median_ms
        except Exception:  # the baseline is a convenience here, not a result
            return None

    def release(self) -> None:
        import torch

        del self.a, self.b, self.ref, self.c
        torch.cuda.empty_cache()
