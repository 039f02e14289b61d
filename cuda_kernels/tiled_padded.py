"""Launcher for cuda_kernels/tiled_padded.cu: tiled with zero padding instead of bounds checks.

Geometry: block (TILE, TILE); 1-D grid of (Mp/TILE) * (Np/TILE) blocks ordered by block_tile()
(group), where Mp, Np are M, N rounded up to multiples of TILE and Kp is K rounded up to a multiple
of KTILE = TILE * ktile; static shared 2*TILE*KTILE*4 bytes in the nn build. Parameters tile, ktile
and group are tiled's (same defaults), so the only difference from tiled is the edge handling. The
kernel takes the standard arguments (A, B, C, M, N, K, lda, ldb, ldc) but with the PADDED operands
and sizes (Mp, Np, Kp).

prepare() pads once, outside the timed callable (`Padded`):
- A is copied into a zero, row-major Mp x Kp tensor only if M or K is not a multiple already (else
  it is used as it is, in its own layout and leading dimension);
- B likewise (Kp x Np);
- C: if M and N are multiples the kernel writes the caller's C directly and the timed callable is
  the bare launch; otherwise the kernel writes a padded Mp x Np buffer and the timed callable is
  launch + c.copy_(cpad[:M, :N]), so the crop is paid for in the row's time.
The kernel is built for the layout of the padded problem (a padded operand is row-major, 'n').
The one-time padding cost is attached as `launch.setup_ms` (float, milliseconds): CUDA events
around the allocation and copies on a GPU, time.perf_counter on the CPU; 0.0 when nothing needed
padding. Because A and B are snapshotted by prepare(), the callable multiplies the values A and B
had at prepare() time wherever they were padded (the harness never changes them in between).
"""

from __future__ import annotations

from cuda_kernels._build import cdiv, compile_kernel, launcher, matmul_args, resources
from lab.operands import entry


def build(tile: int = 32, ktile: int = 2, group: int = 16, fast_math: bool = False,
          unroll: bool = True, layout: str = "nn", **_):
    """ktile is the K depth of a stage in units of TILE (1: square tiles), as in tiled."""
    return compile_kernel("tiled_padded.cu", "matmul_tiled_padded",
                          {"TILE": tile, "KTILE": tile * ktile, "GROUP": group},
                          fast_math=fast_math, unroll=unroll, layout=layout)


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def geometry(M: int, N: int, K: int, tile: int = 32, **_):
    """For the padded sizes this is exactly (Mp/TILE * Np/TILE) blocks."""
    return (cdiv(M, tile) * cdiv(N, tile), 1, 1), (tile, tile, 1), 0


class Padded:
    """A problem (lab.operands.Problem) with its operands zero-padded to tile multiples, and what
    that took.

    M and N are rounded up to multiples of `tile`, K to a multiple of `k_multiple` (the K depth of
    one stage in elements, TILE * ktile for the CUDA kernel; `tile` when not given). An operand
    that needs padding is copied into a zero, row-major buffer; one that does not is used as it
    is, in its own layout and leading dimension (the kernel reads layouts and leading dimensions).
    `problem` is the padded problem the kernel runs on; `with_crop` makes the timed callable."""

    def __init__(self, p, tile: int, k_multiple: int | None = None):
        from dataclasses import replace

        from lab.operands import Operand, timer

        M, N, K = p.M, p.N, p.K
        self.M, self.N, self.K = M, N, K
        self.Mp, self.Np = round_up(M, tile), round_up(N, tile)
        self.Kp = round_up(K, k_multiple or tile)
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

    def with_crop(self, launch):
        """The timed callable: the bare launch, or the launch followed by the crop copy."""
        if not self.pads_c:
            return launch
        c, view = self.c, self.cpad[: self.M, : self.N]

        def launch_and_crop():
            launch()
            c.copy_(view)

        return launch_and_crop


def _zero_padded(x, rows: int, cols: int):
    out = x.new_zeros((rows, cols))
    out[: x.shape[0], : x.shape[1]].copy_(x)
    return out


@entry("tiled_padded", "cuda")
def prepare(p, tile: int = 32, ktile: int = 2, **params):
    """p: the shared description of the operands (lab/operands.py); the kernel runs on the
    padded problem."""
    padded = Padded(p, tile, tile * ktile)
    q = padded.problem
    bld = build(tile=tile, ktile=ktile, **params, layout=q.layout)
    grid, block, smem = geometry(q.M, q.N, q.K, tile=tile)
    launch = padded.with_crop(launcher(bld, grid, block, matmul_args(q), smem))
    launch.resources = resources(bld, grid, block, smem)
    launch.build = bld
    launch.setup_ms = padded.setup_ms
    launch.padded_shape = (padded.Mp, padded.Np, padded.Kp)
    return launch
