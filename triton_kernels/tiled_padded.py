"""Stage tiled_padded, Triton twin: the tiled kernel on zero-padded operands, with no masks at all.

CUDA stage: cuda_kernels/tiled_padded.cu. Changed from tiled: prepare() pads A, B and C with zeros
to multiples of TILE once, outside the timed callable (lab/base/padding.py's `Padded`, which the CUDA
launcher uses too, so both backends pad and crop identically), and the kernel's tl.load/tl.store
carry no mask: every program handles a full TILE x TILE tile. When M or N is not a multiple of TILE the
timed callable is the launch followed by c.copy_(cpad[:M, :N]); otherwise the kernel writes c
directly and nothing is copied. The one-time padding cost is `launch.setup_ms` (ms).
Bottleneck attacked: the per-element edge tests (masks) in every k-step of every program.

What Triton does for you that the CUDA stage does by hand: shared-memory staging of the tiles and
the barriers, register tiling of the TILE x TILE accumulator inside tl.dot, software pipelining
when num_stages > 1 (default 1, like the CUDA kernel). Specific to this stage: Triton specializes
integer arguments that are multiples of 16, so where an operand was padded (a row-major copy whose
row stride is Kp or Np, a multiple of the tile) with tile 16 or 32 that stride always is one, and
it can prove every tile row is 64-byte aligned and use vector loads without being told (the
unpadded twin gets this only when its row strides happen to be multiples of 16). The masks removed
here were lowered to predicated loads, not branches, so expect a small effect otherwise.
tl.dot needs tiles of at least 16, so tile=8 computes the product as a broadcast multiply and sum.
Layouts: the kernel takes all six strides, of the padded problem: an operand that needed padding is
a row-major zero-padded copy; one that did not (its sizes already tile multiples) is used as it is,
in its own layout (transposed, offset or sliced views included). Triton specializes an integer
argument equal to 1 as a constant, so the row-major case (stride_ak = stride_bn = stride_cn = 1)
compiles as it did with plain row-major indexing.
Launch: a 1-D grid of (Mp/TILE) * (Np/TILE) programs, column-blocks fastest (pid % grid_n is the
column-block, pid // grid_n the row-block: the order of the former 2-D grid (Np/TILE, Mp/TILE),
whose second axis stopped at 65535 programs), num_warps 4 by default, like the tiled twin (whose
K-step is TILE; the CUDA-only ktile and group parameters have no Triton counterpart here).
"""

import triton
import triton.language as tl

from lab.base.contract import Offer
from lab.base.entry import entry
from lab.base.padding import Padded
from triton_kernels import _common as common
from triton_kernels._common import launcher, offsets_meta, problem_args


@triton.jit
def matmul_tiled_padded_kernel(a_ptr, b_ptr, c_ptr, Mp, Np, Kp, stride_am, stride_ak, stride_bk,
                               stride_bn, stride_cm, stride_cn, TILE: tl.constexpr,
                               USE_DOT: tl.constexpr, OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    # Mp, Np, Kp are multiples of TILE: no load or store needs a mask.
    grid_n = Np // TILE
    pid = tl.program_id(0)
    rn = (pid % grid_n) * TILE + tl.arange(0, TILE)  # column-blocks fastest
    rm = (pid // grid_n) * TILE + tl.arange(0, TILE)
    rk = tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), dtype=tl.float32)
    for k0 in range(0, Kp, TILE):  # one TILE x TILE tile of A and of B per k-step, no mask
        ka = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak)
        b = tl.load(b_ptr + ka[:, None] * stride_bk + rn[None, :] * stride_bn)
        if USE_DOT:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:  # tile 8, under tl.dot's 16: a broadcast multiply and sum on the CUDA cores
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)


OFFER = Offer("tiled_padded", "triton", kernels=("matmul_tiled_padded_kernel",))


@entry(OFFER)
def prepare(p, tile: int = 32, num_warps: int = 4, num_stages: int = 1, **_):
    """p: the shared description of the operands (lab/base/problem.py)."""
    pad = Padded(p, tile)  # K padded to a multiple of TILE: the twin's K-step
    grid = ((pad.Mp // tile) * (pad.Np // tile),)
    kernel = launcher(matmul_tiled_padded_kernel, grid, (*problem_args(pad.problem),), TILE=tile,
                      USE_DOT=tile >= 16, **offsets_meta(pad.problem), num_warps=num_warps,
                      num_stages=num_stages)
    return pad.with_crop(kernel, resources=kernel.resources, padded_shape=(pad.Mp, pad.Np, pad.Kp))
