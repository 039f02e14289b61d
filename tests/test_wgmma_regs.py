"""The wgmma stage's Triton twin's regs_mn path (triton_kernels/wgmma.py): in TF32, the operand that
is not K-major goes to wgmma from registers, rounded to TF32 on the way (round_tf32).

CPU (interpreter): round_tf32's bit arithmetic against a NumPy reference of round-to-nearest-even
TF32 on special values (NaN bit patterns that a carry would turn into zeros, Inf, ties, the
largest float); plan() picks the copy / swap / registers path for every layout; the kernel in
every layout, on views and edge shapes, with regs_mn on and off, against a float64 reference;
regs_mn is one build outside TF32 for the tuner.
GPU (marked `gpu`): round_tf32 through cvt.rn.tf32.f32 / cvt.rna.tf32.f32 gives the reference's
bits; the regs path in every layout at odd and tile-sized shapes; NaN and Inf in the rounded
operand reach C.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from helpers import LAYOUTS, cpu_only
from lab import check as chk
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.needs import TRITON
from lab.stages import get_stage
from triton_kernels.wgmma import round_tf32

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_stages=1)  # quick under the interpreter


def _mod():
    return get_stage("wgmma").module("triton")


# ------------------------------------------------------------------------- round_tf32


SPECIAL_BITS = [
    0x00000000, 0x80000000,              # +-0
    0x00000001, 0x00001000, 0x00003000,  # denormals: below a tie, ties to even (down, up)
    0x3F800000, 0xBF800000,              # +-1
    0x3F801000, 0x3F803000,              # ties: to even down (bit 13 is 0), up (bit 13 is 1)
    0x3F800FFF, 0x3F801001,              # just below / above a tie
    0xBF801001, 0xBF803000,              # negative: the magnitude rounds
    0x7F7FFFFF, 0xFF7FFFFF,              # +-FLT_MAX: rounds to +-Inf
    0x7F7FEFFF,                          # just below FLT_MAX's tie: stays finite
    0x7F800000, 0xFF800000,              # +-Inf
    0x7FFFFFFF, 0xFFFFFFFF,              # NaNs GPU arithmetic makes: a carry would give -0, +0
    0x7FC00000, 0x7F800001,              # quiet NaN, the smallest signalling NaN
]


def rne_tf32_reference(bits: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even TF32 of float32 bit patterns (uint32), NaN and Inf unchanged,
    worked out in Python integers."""
    out = []
    for b in bits.tolist():
        if (b >> 23) & 0xFF == 0xFF:
            out.append(b)
            continue
        low, kept = b & 0x1FFF, b & ~0x1FFF & 0xFFFFFFFF
        if low > 0x1000 or (low == 0x1000 and kept & 0x2000):
            kept += 0x2000  # carries into the exponent when the mantissa is full: Inf at the top
        out.append(kept)
    return np.array(out, dtype=np.uint32)


@triton.jit
def round_kernel(x_ptr, y_ptr, n, HOW: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, round_tf32(x, HOW), mask=i < n)


def _rounded(bits: np.ndarray, how: int, device: str) -> np.ndarray:
    x = torch.from_numpy(bits.view(np.int32).copy()).view(torch.float32).to(device)
    y = torch.empty_like(x)
    round_kernel[(1,)](x, y, x.numel(), HOW=how, BLOCK=64)
    return y.cpu().view(torch.int32).numpy().view(np.uint32)


def _random_bits(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)


@cpu_only
def test_round_tf32_bit_arithmetic_is_round_to_nearest_even_and_keeps_nan():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the interpreter runs the bit arithmetic (TRITON_INTERPRET=1)")
    bits = np.array(SPECIAL_BITS, dtype=np.uint32)
    got = _rounded(bits, _mod().ROUND_BITS, "cpu")
    want = rne_tf32_reference(bits)
    assert [hex(g) for g in got] == [hex(w) for w in want]
    # the NaNs stay NaNs (a plain + 0x1000 would make 0x7fffffff -0.0 and 0xffffffff +0.0)
    assert np.isnan(got[-4:].view(np.float32)).all()
    assert got[SPECIAL_BITS.index(0x7F7FFFFF)] == 0x7F800000  # FLT_MAX rounds to Inf
    for seed in range(3):
        bits = _random_bits(64, seed)
        assert (_rounded(bits, _mod().ROUND_BITS, "cpu") == rne_tf32_reference(bits)).all()


# ------------------------------------------------------------------------- plan()


def _operands(layout, M=40, N=24, K=56, dtype=torch.float32):
    return chk.make_inputs(M, N, K, 3, "cpu", dtype=dtype, layout=layout)


@pytest.mark.parametrize("layout,regs,kmajor,want", [
    ("nn", 1, 1, (False, True, True)),    # swap: B^T from registers, A^T K-major; no copy
    ("nn", 1, 0, (False, True, True)),
    ("nt", 1, 1, (False, False, False)),  # both K-major: nothing to do
    ("tt", 1, 0, (False, False, True)),   # A from registers
    ("tn", 1, 1, (True, False, True)),    # copy B K-major, A from registers
    ("tn", 1, 0, (False, True, True)),    # swap; the kernel's B (A^T) is left to the compiler
    ("nn", 0, 1, (True, False, False)),   # regs_mn off: as before, the copy
    ("nn", 0, 0, (False, False, False)),
    ("tt", 0, 1, (False, False, False)),
])
def test_plan_picks_copy_swap_or_registers_by_layout(layout, regs, kmajor, want):
    a, b = _operands(layout)
    c = torch.empty(a.shape[0], b.shape[1])
    p = describe(a, b, c, TRITON)
    assert _mod().plan(p, {"regs_mn": regs, "kmajor_b": kmajor}) == want


def test_regs_mn_resolves_per_precision_and_is_one_build_outside_tf32():
    m = _mod()
    assert m.resolve("tf32")["regs_mn"] == 1  # automatic: on in TF32
    assert m.resolve("tf32", regs_mn=0)["regs_mn"] == 0
    for precision in ("3xtf32", "bf16", "fp16"):
        assert m.resolve(precision)["regs_mn"] == 0
        assert m.resolve(precision, regs_mn=1)["regs_mn"] == 0  # no effect: one build
        on = m.resolved_params({"regs_mn": 1}, 4096, 4096, 4096, precision)
        off = m.resolved_params({"regs_mn": 0}, 4096, 4096, 4096, precision)
        assert on == off
    assert (m.resolved_params({"regs_mn": 1}, 4096, 4096, 4096, "tf32")
            != m.resolved_params({"regs_mn": 0}, 4096, 4096, 4096, "tf32"))


@pytest.mark.parametrize("bad", [2, -2, "1", 1.0])
def test_validate_refuses_a_bad_regs_mn_in_one_sentence(bad):
    with pytest.raises(LabError, match="regs_mn must be -1"):
        _mod().validate(regs_mn=bad)


def test_the_params_column_names_regs_mn():
    m = _mod()
    text = m.config_text({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8,
                          "num_warps": 8, "num_stages": 4, "kmajor_b": 1, "regs_mn": 1})
    assert text.endswith(",kmajor_b=1,regs_mn=1")


# ------------------------------------------------------------------------- the kernel, CPU


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
def test_regs_path_in_every_layout_interpreted(layout):
    """Every layout with regs_mn on and off, kmajor_b on and off, at odd shapes, M = 1 and
    N = 1: C must match the float64 reference at TF32's threshold, and the launch's config says
    what ran."""
    for (M, N, K), regs, kmajor in itertools.product(
            ((37, 45, 29), (1, 33, 70), (21, 1, 18)), (0, 1), (0, 1)):
        a, b = _operands(layout, M, N, K)
        c = torch.full((M, N), float("nan"))
        launch = _mod().prepare(a, b, c, precision="tf32", regs_mn=regs, kmajor_b=kmajor,
                                **SMALL)
        assert launch.config["regs_mn"] == regs
        result = chk.check(launch, c, chk.reference(a, b), K, "tf32")
        assert result.passed, (layout, M, N, K, regs, kmajor, result.reason)


@cpu_only
@pytest.mark.parametrize("kind", ["offset", "sliced", "strided", "c-transposed"])
def test_regs_path_on_views_interpreted(kind):
    M, N, K = 19, 35, 41
    a0, b0 = chk.make_inputs(M, N, K, 7, "cpu")
    if kind == "offset":
        a = torch.empty(M * K + 1)[1:].view(M, K).copy_(a0)
        b = torch.empty(K * N + 3)[3:].view(K, N).copy_(b0)
        c = torch.empty(M * N + 1)[1:].view(M, N)
    elif kind == "sliced":
        a = torch.empty(M, K + 5)[:, 2:K + 2].copy_(a0)
        b = torch.empty(K + 1, N + 7)[1:, :N].copy_(b0)
        c = torch.empty(M + 2, N + 3)[1:M + 1, 3:]
    elif kind == "strided":  # no unit stride in A, B or C
        a = torch.empty(2 * M, 2 * K)[::2, ::2].copy_(a0)
        b = torch.empty(3 * K, 2 * N)[::3, ::2].copy_(b0)
        c = torch.empty(M, 3 * N)[:, ::3]
    else:  # C column-major: the swapped kernel writes C^T, which is then row-major
        a, b = a0, b0
        c = torch.empty(N, M).t()
    launch = _mod().prepare(a, b, c, precision="tf32", regs_mn=1, **SMALL)
    result = chk.check(launch, c, chk.reference(a0, b0), K, "tf32")
    assert result.passed, (kind, result.reason)


@cpu_only
def test_regs_path_rounds_the_register_operand_to_tf32():
    """The interpreter multiplies in fp32, so the rounding of the register operand is what moves
    C away from an fp32 product: with B holding values that are not TF32 and A holding exact
    TF32 values, C is the product of A and B rounded to TF32, not of A and B."""
    M, N, K = 16, 16, 16
    a = torch.eye(M, K)                                   # exact in TF32
    b = torch.full((K, N), 1.0) + 2.0 ** -12              # not TF32: 1 + 2^-12 rounds to 1
    c = torch.empty(M, N)
    _mod().prepare(a, b, c, precision="tf32", regs_mn=1, **SMALL)()  # nn: B from registers
    assert (c == 1.0).all()
    _mod().prepare(a, b, c, precision="tf32", regs_mn=0, kmajor_b=0, **SMALL)()
    assert (c == 1.0 + 2.0 ** -12).all()  # from shared memory: the interpreter keeps fp32


# ------------------------------------------------------------------------- GPU


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.gpu
def test_round_tf32_on_the_gpu_matches_the_reference():
    _gpu()
    m = _mod()
    cap = torch.cuda.get_device_capability()
    hows = [m.ROUND_BITS, m.ROUND_RNA] + ([m.ROUND_RN] if cap[0] >= 9 else [])
    bits = np.concatenate([np.array(SPECIAL_BITS, dtype=np.uint32), _random_bits(40, 5)])
    want = rne_tf32_reference(bits)
    for how in hows:
        got = _rounded(bits, how, "cuda")
        finite = (want >> 23) & 0xFF != 0xFF
        if how == m.ROUND_RNA:  # ties away from zero: equal except at exact ties
            ties = (bits & 0x1FFF) == 0x1000
            assert (got[finite & ~ties] & ~np.uint32(0x1FFF)
                    == want[finite & ~ties]).all()
        else:
            assert (got[finite] & ~np.uint32(0x1FFF) == want[finite]).all(), how
        # a NaN stays a NaN, except one whose payload lies only in the 13 bits TF32 drops: no
        # TF32 value holds it, and the hardware conversions make it Inf (as the tensor core's
        # own truncation does)
        nan = np.isnan(bits.view(np.float32))
        tf32_nan = nan & ((bits & np.uint32(0x7FE000)) != 0)
        assert np.isnan(got[tf32_nan].view(np.float32)).all(), how
        assert (~np.isfinite(got[nan].view(np.float32))).all(), how
        inf = np.isinf(bits.view(np.float32))
        assert (got[inf] == bits[inf]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_regs_path_on_the_gpu(layout):
    _gpu()
    for M, N, K in ((1, 1, 1), (33, 17, 40), (257, 129, 1000), (1000, 999, 1003),
                    (512, 768, 1024)):
        a, b = chk.make_inputs(M, N, K, M + K, "cuda", layout=layout)
        ref = chk.reference(a, b)
        for regs, kmajor in itertools.product((0, 1), (0, 1)):
            c = torch.empty((M, N), device="cuda")
            launch = _mod().prepare(a, b, c, precision="tf32", regs_mn=regs, kmajor_b=kmajor)
            result = chk.check(launch, c, ref, K, "tf32")
            assert result.passed, (layout, M, N, K, regs, kmajor, result.reason)
            if K >= 512:
                assert result.rel_err > 1e-5, result.rel_err  # TF32 really in use


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["offset", "sliced", "strided", "c-transposed"])
def test_regs_path_on_views_on_the_gpu(kind):
    """Views change the alignment hints and the strides the swapped kernel sees: offsets that
    break 16-byte alignment, row strides above the width, no unit stride, a column-major C."""
    _gpu()
    M, N, K = 300, 260, 520
    a0, b0 = chk.make_inputs(M, N, K, 9, "cuda")
    if kind == "offset":
        a = torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a0)
        b = torch.empty(K * N + 3, device="cuda")[3:].view(K, N).copy_(b0)
        c = torch.empty(M * N + 1, device="cuda")[1:].view(M, N)
    elif kind == "sliced":
        a = torch.empty(M, K + 5, device="cuda")[:, 2:K + 2].copy_(a0)
        b = torch.empty(K + 1, N + 7, device="cuda")[1:, :N].copy_(b0)
        c = torch.empty(M + 2, N + 3, device="cuda")[1:M + 1, 3:]
    elif kind == "strided":
        a = torch.empty(2 * M, 2 * K, device="cuda")[::2, ::2].copy_(a0)
        b = torch.empty(3 * K, 2 * N, device="cuda")[::3, ::2].copy_(b0)
        c = torch.empty(M, 3 * N, device="cuda")[:, ::3]
    else:
        a, b = a0, b0
        c = torch.empty(N, M, device="cuda").t()
    launch = _mod().prepare(a, b, c, precision="tf32", regs_mn=1)
    result = chk.check(launch, c, chk.reference(a0, b0), K, "tf32")
    assert result.passed, (kind, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "tt", "tn"])
def test_regs_path_carries_nan_and_inf_to_c_on_the_gpu(layout):
    _gpu()
    M, N, K = 96, 80, 64
    a, b = chk.make_inputs(M, N, K, 1, "cuda", layout=layout)
    a, b = a.clone(), b.clone()  # row-major copies to poke into, then back to the layout
    specials = (0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x7F800000)
    for i, v in enumerate(specials):
        a.view(torch.int32)[3 + i, 5 + i] = v - 2 ** 32 if v >= 2 ** 31 else v
        b.view(torch.int32)[7 + i, 11 + i] = v - 2 ** 32 if v >= 2 ** 31 else v
    b.view(torch.int32)[20, 30] = torch.tensor(0.0).log().view(torch.int32).item()  # -Inf
    a[40, 9] = torch.tensor(-1.0, device="cuda").log()  # a NaN made by the GPU itself
    if layout[0] == "t":
        a = a.t().contiguous().t()
    if layout[1] == "t":
        b = b.t().contiguous().t()
    want = torch.isfinite(a.double() @ b.double())
    c = torch.empty((M, N), device="cuda")
    _mod().prepare(a, b, c, precision="tf32", regs_mn=1)()
    assert (torch.isfinite(c) == want).all(), layout
