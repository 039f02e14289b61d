"""`entry(OFFER)`: the decorator on every stage's `prepare`, the one road into a launcher.

A stage's `prepare(a, b, c, **params)` and `lab.matmul` are public: a user may hand them any
tensors. Before a launcher's own code runs, the decorated prepare:

1. resolves the precision (lab/base/dtypes.py) and checks the parameters (the Offer's validate);
   tensors on a GPU the stage's kernels do not run on (Offer.runs_on: an sm_90a stage off
   Hopper, mma on sm_75) are refused in one sentence;
2. **checks** the operands (lab/base/checks.py), warning once about a long call under the Triton
   interpreter;
3. handles **empty problems**: M = 0 or N = 0 launches nothing; K = 0 writes zeros (as
   `torch.matmul`);
4. **describes** the operands once, fitted to the stage's Needs (lab/base/describe.py), and hands
   that frozen Problem to the launcher;
5. completes the launcher's Prepared: the copy back into a C with no unit stride, the shared
   code's setup time, the Problem as `.problem`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from typing import Callable

from lab.base import device as _device
from lab.base.checks import check_operands, scales_for
from lab.base.contract import Offer, Prepared, sm
from lab.base.describe import describe
from lab.base.dtypes import DTYPE_NAMES, OUT_DTYPE_NAMES, precision_for
from lab.base.errors import LabError
from lab.base.needs import CUDA, TRITON, Needs

# The Triton interpreter runs every program in numpy: about 1.5 s for a 256^3 problem with the
# tiled stages (lab/run.py's CPU_MAX_WORK, the size CPU mode stops at), and in proportion beyond.
INTERPRETER_WARN_WORK = 256**3
INTERPRETER_S_PER_WORK = 1.5 / 256**3
_WARNED_INTERPRETER: list[bool] = []


def _warn_interpreter_time(where: str, M: int, N: int, K: int) -> None:
    """Once per process: a CPU call beyond 256^3 runs for a while under the interpreter."""
    work = M * N * K
    if work <= INTERPRETER_WARN_WORK or _WARNED_INTERPRETER:
        return
    import warnings

    _WARNED_INTERPRETER.append(True)
    seconds = work * INTERPRETER_S_PER_WORK
    warnings.warn(f"{where} runs {M}x{N}x{K} on CPU tensors under the Triton interpreter, which "
                  f"computes every program in numpy: expect about {seconds:,.0f} s or more (some "
                  f"1.5 s per 256^3 of M*N*K); a CUDA GPU runs it in milliseconds",
                  UserWarning, stacklevel=4)


def _copy_back(kernel: Prepared, buf, user_c) -> Prepared:
    import torch

    fields = dict(resources=kernel.resources, setup_ms=kernel.setup_ms, build=kernel.build,
                  kernel_only=kernel.kernel_only or kernel, **kernel.extra)
    if kernel.steps is not None:  # the copy is part of the computation (and of a replay)
        return Prepared.of_steps([kernel, (torch.Tensor.copy_, (user_c, buf))], **fields)

    def run():
        kernel()
        user_c.copy_(buf)  # a C with no unit stride: the copy is part of the computation

    return Prepared(run, resources=kernel.resources, setup_ms=kernel.setup_ms, build=kernel.build,
                    kernel_only=kernel.kernel_only or kernel, **kernel.extra)


def refuse_gpu(offer: Offer, device, precision: str, params: dict) -> None:
    """LabError (one sentence) when `device` is a GPU the offer's kernels do not run on for a
    `precision` call with `params` (Offer.runs_on); nothing for CPU and meta tensors."""
    cc = _device.capability(device)
    why = offer.runs_on(cc, precision, params) if cc is not None else None
    if why:
        raise LabError(f"{offer.where} {why}, and this GPU, {_device.gpu_name(device)}, is "
                       f"compute capability {cc[0]}.{cc[1]} ({sm(cc)}); python -m lab.compare "
                       f"--list marks the stages that run on it")


def entry(offer: Offer, needs: Needs | None = None):
    """Decorator for a stage's `prepare(problem, **params)`, declared by its Offer: the public
    `prepare(a, b, c, precision=None, scale_a=None, scale_b=None, **params)` (the scales: fp8's
    per-tensor scales, scales_for) checks the parameters (offer.validate) and the
    operands, handles empty problems, describes the operands once (a frozen Problem, fitted to
    the kernel's needs and carrying the precision) and returns the stage's Prepared launch, with
    the shared code's one-time copies added to its `setup_ms` and the Problem as `.problem`."""
    needs = needs or (CUDA if offer.backend == "cuda" else TRITON)
    where = offer.where
    # CUDA kernels need a GPU; Triton kernels run CPU tensors only under the interpreter.
    device = "cuda" if offer.backend == "cuda" else None

    def wrap(inner: Callable) -> Callable:
        @functools.wraps(inner)
        def prepare(a, b, c, precision: str | None = None, scale_a=None, scale_b=None,
                    **params):
            precision = precision_for(a, precision, where, offer.precisions)
            offer.validate(params, precision)  # the stage's parameter rules first
            refuse_gpu(offer, getattr(a, "device", None), precision, params)  # its GPUs
            out = OUT_DTYPE_NAMES[precision]
            call_needs = replace(needs, dtypes=(DTYPE_NAMES[precision],),
                                 out=None if out == DTYPE_NAMES[precision] else out)
            interpreting = os.environ.get("TRITON_INTERPRET") == "1"
            check_operands(a, b, c, where, call_needs,
                           device or ("any" if interpreting else "cuda"))
            M, K = a.shape
            N = b.shape[1]
            if interpreting and a.device.type == "cpu":
                _warn_interpreter_time(where, M, N, K)
            if M == 0 or N == 0:  # nothing to compute
                return Prepared.of_steps([])
            if K == 0:  # an empty sum: C is zero, as torch.matmul gives
                import torch

                return Prepared.of_steps([(torch.Tensor.zero_, (c,))])
            # autograd plays no part here (an in-place write to a C that requires grad would be
            # refused); the tensors themselves are kept where they need no detaching, so a plan
            # (lab/plan.py) can find them in the launch's steps
            a, b, c = (t.detach() if t.requires_grad else t for t in (a, b, c))
            scales = scales_for(a, b, precision, scale_a, scale_b, where)
            p = describe(a, b, c, needs, precision, scales)
            launch = inner(p, **params)
            if not isinstance(launch, Prepared):
                raise TypeError(f"{where}: prepare() must return a lab.base.contract.Prepared, not "
                                f"{type(launch).__name__}")
            if p.copy_back is not None:
                launch = _copy_back(launch, *p.copy_back)
            if p.setup_ms:
                launch.add_setup(p.setup_ms)
            launch.problem = p
            return launch

        prepare.inner = inner
        prepare.offer = offer
        prepare.needs = needs
        return prepare

    return wrap
