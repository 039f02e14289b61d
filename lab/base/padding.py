"""Zero padding to tile multiples (`Padded`), for a stage that asks for it in one line.

The operands that need padding are copied into zero buffers once in prepare() (the time goes
into `setup_ms`); the timed call is the kernel on the padded problem and, where C was padded, the
crop copy C <- padded C[:M, :N] (`with_crop`).
"""

from __future__ import annotations

from dataclasses import replace

from lab.base.contract import Prepared
from lab.base.problem import Operand
from lab.base.timer import timer

def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class Padded:
    """A problem (lab/base/problem.py) with its operands zero-padded to tile multiples, and what
    that took.

    M and N are rounded up to multiples of `tile`, K to a multiple of `k_multiple` (the K depth of
    one stage in elements, TILE * ktile for the CUDA kernel; `tile` when not given). An operand
    that needs padding is copied into a zero, row-major buffer; one that does not is used as it
    is, in its own layout and leading dimension (the kernel reads layouts and leading dimensions).
    `problem` is the padded problem the kernel runs on; `with_crop` makes the timed call."""

    def __init__(self, p, tile: int, k_multiple: int | None = None):
        M, N, K = p.M, p.N, p.K
        self.M, self.N, self.K = M, N, K
        self.Mp, self.Np = _round_up(M, tile), _round_up(N, tile)
        self.Kp = _round_up(K, k_multiple or tile)
        self.pads_a = (self.Mp, self.Kp) != (M, K)
        self.pads_b = (self.Kp, self.Np) != (K, N)
        self.pads_c = (self.Mp, self.Np) != (M, N)
        self.c = p.c.tensor
        self.setup_ms = 0.0
        a, b, c = p.a, p.b, p.c
        if self.pads_a or self.pads_b or self.pads_c:
            clock = timer(p.c.tensor.is_cuda)
            if self.pads_a:
                a = Operand.of("A", _zero_padded(p.a.tensor, self.Mp, self.Kp))
            if self.pads_b:
                b = Operand.of("B", _zero_padded(p.b.tensor, self.Kp, self.Np))
            if self.pads_c:
                # The kernel writes every element of the padded C; start it as NaN (like the
                # harness does with c) so a kernel that skipped one could not pass on stale memory.
                c = Operand.of("C", p.c.tensor.new_full((self.Mp, self.Np), float("nan")))
            self.setup_ms = clock.stop()
        self.cpad = c.tensor
        self.problem = replace(p, M=self.Mp, N=self.Np, K=self.Kp, a=a, b=b, c=c, setup_ms=0.0,
                               copy_back=None)

    def with_crop(self, launch, **fields) -> Prepared:
        """The timed call as a Prepared: `launch` (a Prepared with steps, or a KernelLaunch's
        step) alone, or followed by the crop copy C <- padded C[:M, :N]; `fields` go to the
        Prepared (resources, ...), with this padding's setup_ms."""
        import torch

        steps = [launch]
        if self.pads_c:
            steps.append((torch.Tensor.copy_, (self.c, self.cpad[: self.M, : self.N])))
        return Prepared.of_steps(steps, setup_ms=self.setup_ms, **fields)


def _zero_padded(x, rows: int, cols: int):
    out = x.new_zeros((rows, cols))
    out[: x.shape[0], : x.shape[1]].copy_(x)
    return out
