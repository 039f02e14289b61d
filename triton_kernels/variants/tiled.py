"""tiled's Triton twin in the precisions other than fp32: what its lesson
(triton_kernels/tiled.py, IEEE fp32) leaves out. Not a stage of its own: tiled's prepare() hands
the launch to variant_launch() here for a problem in tf32, 3xtf32, bf16 or fp16; fp32 runs the
lesson kernel.

matmul_tiled_kernel below is the twin's former kernel, unchanged: the lesson's kernel with tl.dot's
precision as an argument (INPUT_PRECISION, _common.DOT_PRECISION: fp32 operands as IEEE fp32, TF32
or 3xTF32; bf16 and fp16 operands to the tensor cores as they are) and UPCAST, the interpreter's
bf16 cure (_common.dot_meta: bf16 tiles converted to fp32 before tl.dot under TRITON_INTERPRET=1,
where the interpreter's bf16 dot is wrong; compiled kernels never upcast). validate() refuses
tile=8 (no tl.dot: a broadcast product on the CUDA cores, fp32 only) in the other precisions.
In fp32 it compiles to the lesson kernel's PTX, instruction for instruction
(tests/test_lessons_triton_variants.py), and its name is the lesson's, so rows, lab.profile and
the tuner see one stage.
"""

import triton
import triton.language as tl

from lab.base.contract import PRECISIONS as ALL_PRECISIONS
from lab.base.precisions import get as precision_record
from lab.base.errors import LabError
from triton_kernels import _common as common
from triton_kernels._common import cdiv, dot_meta, launcher, offsets_meta, problem_args

# every precision but the fp8 ones (whose e4m3 tl.dot and scales belong to the TMA stages' twins)
PRECISIONS = tuple(p for p in ALL_PRECISIONS if not precision_record(p).scaled)


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, TILE: tl.constexpr, USE_DOT: tl.constexpr,
                        INPUT_PRECISION: tl.constexpr = "ieee", UPCAST: tl.constexpr = False,
                        OFFSET64: tl.constexpr = False):
    if OFFSET64:  # an operand past 2^31 elements: 64-bit offsets (_common.wide_strides)
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn = common.wide_strides(
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn)
    grid_n = tl.cdiv(N, TILE)
    pid = tl.program_id(0)
    rn = (pid % grid_n) * TILE + tl.arange(0, TILE)  # column-blocks fastest
    rm = (pid // grid_n) * TILE + tl.arange(0, TILE)
    rk = tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), dtype=tl.float32)
    for k0 in range(0, K, TILE):  # one TILE x TILE tile of A and of B per k-step, zero-filled
        ka = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ka[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        if USE_DOT:
            if UPCAST:  # the interpreter's bf16 dot is wrong (_common.dot_meta)
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        else:  # tile 8, under tl.dot's 16: a broadcast multiply and sum on the CUDA cores
            acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def validate(params, precision: str) -> None:
    tile = params.get("tile", 32)
    if tile < 16 and precision != "fp32":
        raise LabError(f"tiled (triton) with tile={tile} multiplies without tl.dot, on the CUDA "
                       f"cores in fp32, so it cannot compute in {precision}; use tile=16 or 32")


def variant_launch(p, tile: int, num_warps: int, num_stages: int):
    """The launch of the kernel above on problem p (its precision: p.precision), as tiled's
    prepare() was given it."""
    grid = (cdiv(p.M, tile) * cdiv(p.N, tile),)
    return launcher(matmul_tiled_kernel, grid, (*problem_args(p),), TILE=tile,
                    USE_DOT=tile >= 16, **dot_meta(matmul_tiled_kernel, p), **offsets_meta(p),
                    num_warps=num_warps, num_stages=num_stages)
