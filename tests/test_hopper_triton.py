"""The Triton twins of the Hopper stages tma_wgmma (triton_kernels/tma_wgmma.py: TMA descriptor
loads, an mbarrier pipeline, wgmma on two shared-memory tiles) and persistent
(triton_kernels/persistent.py: one program per SM walking the tiles), and the pieces they share
(triton_kernels/_common.py's descriptors, triton_kernels/_realign.py's tma_lines / tma_operands).

Their prepare() is called directly (the registry entries come with the stages' CUDA halves), as
`prepare(a, b, c, precision=..., **params)`.

CPU (the Triton interpreter, which emulates tensor descriptors and checks their 16-byte rules):
every precision x layout at odd shapes (33x17x9, K not a multiple of BLOCK_K) and at one with no
copy (fp8 included: the interpreter runs tl.dot on two float8e4nv tiles, decoding them to fp16 and
multiplying in fp32, so fp8 is checked here against the scaled float64 reference, and each element
of C lies within one bf16 ulp of it; kmajor=0 reads an fp8 operand in any layout there), C
row-major, column-major (a descriptor of C^T), strided and unaligned (the masked store); the
persistent loop with more tiles than programs; which operand a descriptor reads where it lies and
which is copied in every call (unaligned lines or base, no unit stride, kmajor), and that the
copies and the GEMM replay through lab.matmul's plans on new tensors; the automatic values, the
fallbacks and every refusal in one sentence; the scratch allocator; the sm_90 refusal; OFFSET64 for
a C past 2^31 elements. Compiled for sm_90 without a GPU (FakeDriver, in a child process without
the interpreter): the PTX holds TMA loads and stores (cp.async.bulk.tensor), device-side tensormaps
and wgmma, no mma.sync; a TF32 operand that is not K-major costs a shared-memory round trip
(ttg.local_load) that kmajor removes, and so does an fp8 one; fp8 is
wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 with Triton's default max_num_imprecise_acc
(2^30: no partial sums moved out of wgmma's accumulator) and two scalar loads (the scales); the
shared memory each launcher estimates bounds the compiled kernel's.

GPU (marked `gpu`; sm_90): bf16 at 1025^3 and 7919x6007x3001 (both operands copied, C stored
masked) against torch.matmul, fp8 at the same sizes against the scaled reference, every precision x
layout at 512^3 (fp8: lab.check.make_scaled_inputs and the scaled reference, the scales passed to
prepare()), and two calls of one signature through lab.plan (what lab.matmul does) and, once the
stages are registered, lab.matmul itself.
"""

from __future__ import annotations

import json
import threading

import pytest
import torch

from helpers import HAS_GPU, cpu_only, run_python
from lab import check as chk
from lab import plan as plans
from lab.base.contract import Prepared
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.needs import TRITON
from lab.base.problem import Operand
from lab.stages import BY_NAME
from triton_kernels import _common as common
from triton_kernels import _realign as realign
from triton_kernels import persistent, tma_wgmma

MODULES = {"tma_wgmma": tma_wgmma, "persistent": persistent}
STAGES = tuple(MODULES)
PRECISIONS = ("bf16", "fp16", "tf32", "3xtf32", "fp8")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
         "3xtf32": torch.float32, "fp8": torch.float8_e4m3fn}
OUT = {**DTYPE, "fp8": torch.bfloat16}  # C's dtype: fp8's is bfloat16
LAYOUTS = ("nn", "nt", "tn", "tt")
SMALL = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16}  # interpreter-sized tiles


def _small(precision):
    """SMALL, with fp8's smallest k-step (32, an fp8 wgmma's k) in fp8."""
    return {**SMALL, "BLOCK_K": 32} if precision == "fp8" else SMALL


def _one_sentence(text: str) -> None:
    assert text and "\n" not in text and text.count(". ") == 0, text


def _inputs(M, N, K, precision, layout, device="cpu", seed=1):
    return chk.make_inputs(M, N, K, seed, device, dtype=DTYPE[precision], layout=layout)


def _operands(M, N, K, precision, layout, device="cpu", seed=1):
    """(a, b, scales): `precision`'s operands (lab.check.inputs_for: the same values as _inputs,
    and fp8's e4m3 A and B with their per-tensor scales; scales None in the other precisions)."""
    return chk.inputs_for(precision, M, N, K, seed, device, layout)


def _scale_kwargs(scales) -> dict:
    """prepare()'s scale_a and scale_b for fp8's scales (nothing for None)."""
    return {} if scales is None else {"scale_a": scales[0], "scale_b": scales[1]}


def _check(launch, c, a, b, precision, scales=None):
    result = chk.check(launch, c, chk.reference(a, b, scales), a.shape[1], precision)
    assert result.passed, result.reason


# ------------------------------------------------------------------ numbers, interpreter


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_precision_and_layout_at_odd_shapes(stage, precision, layout):
    """33x17x9: no line of A or B is a multiple of 16 bytes long in any dtype, so both are copied;
    64x48x72 (K a multiple of none of the k-steps, 16, 32 and 64: its last k-step is partly past
    K, where the descriptor reads zeros; in fp8 64x48x80, 80 one-byte elements being the shortest
    16-byte line past 64, a multiple of neither 32 nor 128) read where they lie, except what kmajor
    copies in TF32 and fp8; both with small tiles, then the registry's defaults on the second
    shape. fp8: e4m3 operands with their scales, a bf16 C, against the scaled reference."""
    m = MODULES[stage]
    K2 = 80 if precision == "fp8" else 72
    small = _small(precision)
    for (M, N, K), params in (((33, 17, 9), small), ((64, 48, K2), small), ((64, 48, K2), {})):
        a, b, scales = _operands(M, N, K, precision, layout)
        c = torch.empty(M, N, dtype=OUT[precision])
        launch = m.prepare(a, b, c, precision=precision, **_scale_kwargs(scales), **params)
        _check(launch, c, a, b, precision, scales)
        if (M, N, K) == (33, 17, 9):
            assert launch.realigned == ("A", "B")
        elif precision in ("bf16", "fp16"):  # 16-bit: any layout is read as it is
            assert launch.realigned == ()
        else:  # TF32, fp8: an M-major A (tn, tt) and an N-major B (nn, tn) are copied K-major
            want = tuple(n for n, copied in (("A", layout[0] == "t"), ("B", layout[1] == "n"))
                         if copied)
            assert launch.realigned == want


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_fp8_is_the_scaled_product_rounded_once_to_bf16(stage):
    """fp8 in every layout, read where it lies (kmajor=0: the interpreter takes an M-major or
    N-major e4m3 tile as Triton's round trip does on the GPU), with the scales given as tensors
    and as numbers: each element of C is scale_a * scale_b * (A @ B) rounded once to bf16, within
    one bf16 ulp (2^-7 of it) of the float64 value plus fp32's accumulation error (one ulp, not
    half: the interpreter's fp32 -> bf16 conversion truncates, where the GPU's cvt.rn rounds to
    nearest); scales left out are 1."""
    m = MODULES[stage]
    M, N, K = 64, 48, 80
    for layout in LAYOUTS:
        a, b, (sa, sb) = _operands(M, N, K, "fp8", layout)
        for scale_a, scale_b in ((sa, sb), (0.25, 3.0), (None, None)):
            c = torch.empty(M, N, dtype=torch.bfloat16)
            launch = m.prepare(a, b, c, precision="fp8", kmajor=0, scale_a=scale_a,
                               scale_b=scale_b, **_small("fp8"))
            assert launch.realigned == ()
            launch()
            s = float(1.0 if scale_a is None else scale_a) * float(1.0 if scale_b is None
                                                                   else scale_b)
            ref = chk.reference(a, b) * s
            sums = (a.double().abs() @ b.double().abs()) * abs(s)
            bound = ref.abs() * 2.0**-7 + (K + 4) * 2.0**-23 * sums
            assert ((c.double() - ref).abs() <= bound).all(), (layout, scale_a, scale_b)


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_c_in_every_form(stage):
    """Row-major C and column-major C go through a descriptor (C^T's for the latter); a strided C
    (no unit stride) and one whose base is off 16 bytes through the masked store. Each with the
    whole tile stored and with subtile's two halves."""
    m = MODULES[stage]
    M, N, K = 40, 48, 32
    a, b = _inputs(M, N, K, "bf16", "nn")
    forms = {
        "row": (torch.empty(M, N, dtype=torch.bfloat16), (True, False)),
        "col": (torch.empty(N, M, dtype=torch.bfloat16).t(), (True, True)),
        "strided": (torch.empty(M, 2 * N, dtype=torch.bfloat16)[:, ::2], (False, False)),
        "unaligned": (torch.empty(M * N + 1, dtype=torch.bfloat16)[1:].view(M, N),
                      (False, False)),
    }
    for name, (c, (desc, c_t)) in forms.items():
        for subtile in (0, 1):
            launch = m.prepare(a, b, c, precision="bf16", subtile=subtile, **SMALL)
            assert (launch.layout["C_DESC"], launch.layout["C_T"]) == (desc, c_t), name
            _check(launch, c, a, b, "bf16")


@cpu_only
def test_the_persistent_programs_walk_every_tile(monkeypatch):
    """3 programs for 7 x 4 = 28 tiles (the SM count mocked to 3): each walks its tiles in grouped
    order and stores each one, flattened or not, through a descriptor or masked."""
    monkeypatch.setattr(persistent, "sm_count", lambda device: 3)
    M, N, K = 7 * 64 - 5, 4 * 32, 40
    for flatten in (True, False):
        for c in (torch.empty(M, N, dtype=torch.float16),
                  torch.empty(M, N + 3, dtype=torch.float16)[:, :N]):  # lines 2N+6 bytes apart
            a, b = _inputs(M, N, K, "fp16", "nt")
            launch = persistent.prepare(a, b, c, precision="fp16", flatten=flatten, GROUP_M=4,
                                        **SMALL)
            assert launch.programs == 3 and launch.config["flatten"] is flatten
            _check(launch, c, a, b, "fp16")


@cpu_only
def test_vectors_and_single_lines():
    """M = 1, N = 1 and K = 1: a single line has no stride to align (its descriptor's is rounded
    up), and a vector is read in whichever orientation a descriptor can take it."""
    for M, N, K in ((1, 17, 9), (33, 1, 9), (33, 17, 1), (1, 1, 1)):
        for layout in LAYOUTS:
            a, b = _inputs(M, N, K, "tf32", layout)
            c = torch.empty(M, N)
            launch = tma_wgmma.prepare(a, b, c, precision="tf32", **SMALL)
            _check(launch, c, a, b, "tf32")


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_views_that_a_descriptor_cannot_read_are_copied_in_every_call(stage):
    """A strided view (no unit stride), a bf16 operand whose lines are not 16 bytes apart (as a
    contiguous 7919 x 3001 A), and a view whose base is off 16 bytes: each is copied into a
    buffer in the call (launch.realigned), in its own layout when kmajor is off, and a value
    changed after prepare() is the value the next call multiplies."""
    m = MODULES[stage]
    M, N, K = 48, 40, 64
    big = torch.randn(2 * M, 2 * K).to(torch.bfloat16)
    cases = {
        "strided A": (big[::2, ::2], _inputs(M, N, K, "bf16", "nn")[1], ("A",)),
        "unaligned ld": (torch.randn(M, K + 3).to(torch.bfloat16)[:, :K],
                         _inputs(M, N, K, "bf16", "nt")[1], ("A",)),
        "unaligned base": (_inputs(M, N, K, "bf16", "nn")[0],
                           torch.randn(K * N + 1).to(torch.bfloat16)[1:].view(K, N), ("B",)),
        "column-major, unaligned ld": (torch.randn(K, M + 1).to(torch.bfloat16)[:, :M].t(),
                                       _inputs(M, N, K, "bf16", "nn")[1], ("A",)),
    }
    for name, (a, b, copied) in cases.items():
        c = torch.empty(M, N, dtype=torch.bfloat16)
        launch = m.prepare(a, b, c, precision="bf16", **SMALL)
        assert launch.realigned == copied, name
        assert launch.setup_ms is not None and launch.setup_reusable
        if name.startswith("column-major"):
            assert launch.layout["A_T"]  # the buffer stays column-major
        _check(launch, c, a, b, "bf16")
        a.mul_(-1)  # the next call copies the new values
        _check(launch, c, a, b, "bf16")


@cpu_only
def test_offset64_reaches_the_masked_store(monkeypatch):
    """Under OFFSET64 (forced here: a C past 2^31 elements cannot be made on the CPU) the masked
    store computes in 64 bits and gives the same C."""
    M, N, K = 40, 24, 32
    a, b = _inputs(M, N, K, "fp16", "tn")
    c = torch.empty(M, 3 * N, dtype=torch.float16)[:, ::3]
    # the launchers read OFFSET64 from _common (TmaSetup.meta)
    monkeypatch.setattr(common, "offsets_meta", lambda q: {"OFFSET64": True})
    for m in MODULES.values():
        launch = m.prepare(a, b, c, precision="fp16", **SMALL)
        assert not launch.layout["C_DESC"]
        _check(launch, c, a, b, "fp16")


# ------------------------------------------------------------------ what is read, what is copied


def _op(t, name="A"):
    return Operand.of(name, t)


def test_tma_lines_reads_rows_or_columns_on_16_byte_lines():
    f32, bf16 = torch.float32, torch.bfloat16
    assert realign.tma_lines(_op(torch.empty(8, 12, dtype=f32))) == (False, 12)
    assert realign.tma_lines(_op(torch.empty(8, 12, dtype=f32).t())) == (True, 12)
    assert realign.tma_lines(_op(torch.empty(8, 16, dtype=bf16)[:, :9])) == (False, 16)
    assert realign.tma_lines(_op(torch.empty(8, 9, dtype=f32))) is None  # 36-byte lines
    assert realign.tma_lines(_op(torch.empty(8, 12, dtype=bf16))) is None  # 24-byte lines
    assert realign.tma_lines(_op(torch.empty(16, 16)[::2, ::2])) is None  # no unit stride
    assert realign.tma_lines(_op(torch.empty(8 * 12 + 1)[1:].view(8, 12))) is None  # base
    overlapping = torch.empty(64).as_strided((4, 8), (4, 1))  # lines overlap: never read so
    assert realign.tma_lines(_op(overlapping)) is None
    # a single line: any stride; the descriptor's is its length rounded up to 16 bytes
    assert realign.tma_lines(_op(torch.empty(1, 9, dtype=f32))) == (False, 12)
    assert realign.tma_lines(_op(torch.empty(9, 1, dtype=bf16))) == (True, 16)
    # a vector can be either: the caller says which to try first
    v = _op(torch.empty(8, 1, dtype=f32))
    assert realign.tma_lines(v) == (True, 8)  # rows 4 bytes apart: only as a column
    col = _op(torch.empty(1, 8, dtype=f32).t())
    assert realign.tma_lines(col, transposed_first=True)[0] is True


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kmajor_copies_exactly_the_operands_that_are_not_k_major(layout):
    M, N, K = 32, 24, 16
    a, b = _inputs(M, N, K, "tf32", layout)
    p = describe(a, b, torch.empty(M, N), TRITON, "tf32")
    q, copies, setup_ms = realign.tma_operands(p, kmajor=True)
    want = [n for n, copied in (("A", layout[0] == "t"), ("B", layout[1] == "n")) if copied]
    assert sorted(copies) == want
    assert (setup_ms is None) == (not want)
    (lda, ldb, _), flags = realign.tma_layout(q)
    assert flags["A_T"] is False and flags["B_T"] is True  # both K-major now
    assert lda % 4 == 0 and ldb % 4 == 0
    for name in want:
        buf, user = copies[name]
        assert buf.shape == user.shape and buf.data_ptr() % 16 == 0
    # without kmajor an aligned operand is read where it lies, in its own orientation
    q, copies, setup_ms = realign.tma_operands(p, kmajor=False)
    assert copies == {} and setup_ms is None
    assert realign.tma_layout(q)[1]["A_T"] == (layout[0] == "t")
    assert realign.tma_layout(q)[1]["B_T"] == (layout[1] == "t")


# ------------------------------------------------------------------ lab.matmul's plans


@cpu_only
@pytest.mark.parametrize("stage", STAGES)
def test_a_plan_replays_the_copies_and_the_kernel_on_new_tensors(stage):
    """What lab.matmul keeps for a signature (lab.plan.make_plan): the copies and the GEMM
    replayed with the next call's tensors, including a transposed view (C^T = ...)."""
    m = MODULES[stage]
    M, N, K = 33, 40, 24
    for precision, layout in (("bf16", "nt"), ("tf32", "tn"), ("fp16", "tt"), ("fp8", "nn")):
        a1, b1, s1 = _operands(M, N, K, precision, layout, seed=1)
        c1 = torch.empty(M, N, dtype=OUT[precision])
        kwargs = dict(precision=precision, **_small(precision))
        launch = m.prepare(a1, b1, c1, **kwargs, **_scale_kwargs(s1))
        plan = plans.make_plan(launch, m.prepare, kwargs, a1, b1, c1, stage,
                               scales=s1 or (None, None))
        assert plan.replay is not None, "a plan that prepares on every call"
        _check(launch, c1, a1, b1, precision, s1)
        a2, b2, s2 = _operands(M, N, K, precision, layout, seed=2)
        if s2 is not None:  # fp8: the next call's scales are what it multiplies by
            s2 = (s2[0] * 4, s2[1])
        c2 = torch.full((M, N), float("nan"), dtype=OUT[precision])
        plan(a2, b2, c2, s2 or (None, None))
        result = chk.compare(c2, chk.reference(a2, b2, s2), K, precision)
        assert result.passed, (precision, result.reason)


# ------------------------------------------------------------------ parameters


def test_the_automatic_values_per_precision_and_shape():
    cases = {
        (tma_wgmma, "bf16"): (256, 64, 4, 0, 0), (tma_wgmma, "fp16"): (256, 64, 4, 0, 0),
        (tma_wgmma, "tf32"): (256, 32, 4, 1, 1), (tma_wgmma, "3xtf32"): (128, 64, 3, 1, 0),
        (persistent, "bf16"): (256, 64, 3, 0, 0), (persistent, "tf32"): (256, 32, 3, 1, 1),
        (persistent, "3xtf32"): (128, 32, 4, 1, 0),
        (tma_wgmma, "fp8"): (256, 128, 4, 1, 0), (persistent, "fp8"): (256, 128, 3, 1, 0),
    }
    for (m, precision), want in cases.items():
        r = m.OFFER.resolve({}, 4096, 4096, 4096, precision, 132)
        got = tuple(r[k] for k in ("BLOCK_N", "BLOCK_K", "num_stages", "kmajor", "subtile"))
        assert got == want, (m.STAGE, precision)
        assert m.OFFER.check({}, precision) is None
        assert m.OFFER.show(r).startswith("BLOCK_M=128,BLOCK_N=")
    for m in MODULES.values():
        # fewer 128 x 256 tiles than SMs: 128 columns (1025^3: 45 tiles for 132 SMs)
        assert m.OFFER.resolve({}, 1025, 1025, 1025, "bf16", 132)["BLOCK_N"] == 128
        assert m.OFFER.resolve({"BLOCK_N": 256}, 1025, 1025, 1025, "bf16", 132)["BLOCK_N"] == 256
        # 256 accumulators per thread with 4 warps: the automatic tile narrows
        assert m.OFFER.resolve({"num_warps": 4}, 4096, 4096, 4096, "bf16", 132)["BLOCK_N"] == 128
        assert m.OFFER.kernel_names({}, "bf16")[1] == "realign_copy_kernel"
    # fp8: 128-byte k-steps of 1-byte elements, C's staging tile in bf16 (2 bytes an element)
    r = persistent.OFFER.resolve({}, 4096, 4096, 4096, "fp8", 132)
    assert persistent.smem_bytes(r, "fp8") == 3 * 384 * 128 + 128 * 256 * 2 == 212_992
    r = tma_wgmma.OFFER.resolve({}, 4096, 4096, 4096, "fp8", 132)
    assert tma_wgmma.smem_bytes(r, "fp8") == 4 * 384 * 128 == 196_608
    # persistent, 4 stages in bf16: the ring and C's whole tile do not fit; half of it does
    r = persistent.OFFER.resolve({"num_stages": 4}, 4096, 4096, 4096, "bf16", 132)
    assert (r["BLOCK_N"], r["subtile"]) == (256, 1)
    assert persistent.smem_bytes(r, "bf16") <= common.SMEM_LIMIT


def test_every_refusal_is_one_sentence():
    bad = [
        ({"BLOCK_M": 32}, "BLOCK_M must be 64"), ({"BLOCK_N": 96}, "powers of two"),
        ({"num_warps": 2}, "warpgroups"), ({"GROUP_M": 0}, "GROUP_M"),
        ({"num_stages": -1}, "num_stages"), ({"kmajor": 2}, "kmajor must be"),
        ({"subtile": 5}, "subtile must be"), ({"bogus": 1}, "no parameter bogus"),
        ({"BLOCK_M": 256, "BLOCK_N": 256}, "256 fp32 accumulators"),
        ({"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5}, "KiB of shared memory"),
    ]
    for m in MODULES.values():
        for params, words in bad:
            with pytest.raises(LabError, match=words) as info:
                m.OFFER.validate(params, "bf16")
            _one_sentence(str(info.value))
        with pytest.raises(LabError, match="precision must be one of"):
            m.OFFER.validate({}, "fp32")
        for precision in PRECISIONS:  # a refusal names the precision it was checked in
            with pytest.raises(LabError, match=precision):
                m.OFFER.validate({"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5}, precision)
        with pytest.raises(LabError, match="fp8 wgmma's k of 32") as info:  # wgmma k32 in fp8
            m.OFFER.validate({"BLOCK_K": 16}, "fp8")
        _one_sentence(str(info.value))
        assert m.OFFER.check({"BLOCK_K": 16}, "bf16") is None
    with pytest.raises(LabError, match="flatten"):
        persistent.OFFER.validate({"flatten": 3}, "bf16")


def test_a_gpu_other_than_sm_90_is_refused_in_one_sentence(monkeypatch):
    a, b = _inputs(64, 32, 16, "bf16", "nn")
    p = describe(a, b, torch.empty(64, 32, dtype=torch.bfloat16), TRITON, "bf16")
    monkeypatch.setattr(common, "sm_arch", lambda device: "sm_80")
    for name, m in MODULES.items():
        with pytest.raises(LabError, match=f"stage {name} .*sm_90 GPU.*this GPU is sm_80") as e:
            m.prepare.inner(p)
        _one_sentence(str(e.value))
    monkeypatch.undo()
    assert common.sm_arch(torch.device("cpu")) is None
    assert common.sm_arch(torch.device("meta")) is None


def test_a_c_past_2_31_elements_gets_64_bit_offsets_only_where_it_is_stored_masked():
    """Meta tensors (shape only) through the launchers' own prepare, recorded, never launched:
    a 47000 x 47000 bf16 C is stored by descriptor (no 64-bit switch needed, but the flag is
    passed); a strided one of that span by the masked store, with OFFSET64."""
    from lab.toolchain.triton import recording

    n = 47000
    a = torch.empty((n, 64), device="meta", dtype=torch.bfloat16)
    b = torch.empty((64, n), device="meta", dtype=torch.bfloat16)
    for c, desc in ((torch.empty((n, n), device="meta", dtype=torch.bfloat16), True),
                    (torch.empty((n, 2 * n), device="meta", dtype=torch.bfloat16)[:, ::2], False)):
        p = describe(a, b, c, TRITON, "bf16")
        assert p.offsets64
        for m in MODULES.values():
            with recording() as calls:
                m.prepare.inner(p)
            (_, _, _, meta), = calls
            assert meta["OFFSET64"] is True and meta["C_DESC"] is desc


# ------------------------------------------------------------------ the scratch allocator


class _OnGpu:
    """Stands for a CUDA tensor in a step's arguments (with_tma_scratch looks at is_cuda)."""
    is_cuda = True


def test_the_scratch_allocator_is_set_where_a_launch_runs(monkeypatch):
    """with_tma_scratch wraps each step of a GPU launch so that Triton has an allocator in the
    thread that runs it (Triton keeps it in a context variable, empty in a new thread), and
    leaves an allocator the caller set alone; an interpreted launch is returned as it is."""
    from triton.runtime import _allocation

    ran = []
    launch = Prepared.of_steps([(lambda *a: ran.append(a), (_OnGpu(), 3))], resources={"r": 1})
    wrapped = common.with_tma_scratch(launch)
    assert wrapped.resources == {"r": 1} and len(wrapped.steps) == 1

    seen = {}

    def in_a_new_thread():
        seen["before"] = type(_allocation._allocator.get()).__name__
        wrapped()
        seen["after"] = _allocation._allocator.get()

    t = threading.Thread(target=in_a_new_thread)
    t.start()
    t.join()
    assert seen["before"] == "NullAllocator" and seen["after"] is common._tma_scratch
    assert len(ran) == 1 and ran[0][1] == 3

    def mine(size, alignment, stream):
        return None

    def with_mine():
        import triton

        triton.set_allocator(mine)
        wrapped()
        seen["kept"] = _allocation._allocator.get()

    t = threading.Thread(target=with_mine)
    t.start()
    t.join()
    assert seen["kept"] is mine
    cpu = Prepared.of_steps([(print, (torch.empty(1),))])
    assert common.with_tma_scratch(cpu) is cpu


# ------------------------------------------------------------------ compiled for sm_90 (no GPU)

# Each (stage, precision, layout, params) compiled as its prepare() would launch it (recorded
# with meta tensors, then JITFunction.warmup for an sm_90 FakeDriver), in a child process without
# the interpreter; the facts the tests read, as JSON.
PTX_PROBE = r"""
import json, re, sys
import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab.base.needs import TRITON
from lab.base.describe import describe
from lab.toolchain.triton import FakeDriver, recording
from triton_kernels import persistent, tma_wgmma
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "3xtf32": torch.float32,
      "fp8": torch.float8_e4m3fn}
out = []
for case in json.loads(sys.argv[1]):
    stage, precision, layout, params = case
    m = {"tma_wgmma": tma_wgmma, "persistent": persistent}[stage]
    M = N = K = 4096
    dt = DT[precision]
    a = torch.empty((M, K) if layout[0] == "n" else (K, M), device="meta", dtype=dt)
    b = torch.empty((K, N) if layout[1] == "n" else (N, K), device="meta", dtype=dt)
    a, b = (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())
    c = torch.empty((M, N), device="meta", dtype=torch.bfloat16 if precision == "fp8" else dt)
    scales = None  # fp8's: two one-element float32 tensors
    if precision == "fp8":
        scales = (torch.empty(1, device="meta"), torch.empty(1, device="meta"))
    with recording() as calls:
        m.prepare.inner(describe(a, b, c, TRITON, precision, scales), **params)
    kernel, grid, args, meta = [x for x in calls if x[0].fn.__name__.startswith("matmul")][-1]
    previous = driver._active
    driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        compiled = kernel.warmup(*args, grid=grid, **meta)
    finally:
        driver._active = previous
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    # the last two immediates of a wgmma with both operands in shared memory: imm-trans-a, -b
    trans = sorted({tuple(int(x) for x in m.groups()) for m in re.finditer(
        r"wgmma\.mma_async[^;]*\}, %rd\d+, %rd\d+, %p\d+, 1, 1, ([01]), ([01]);", ptx)})
    config = m.resolve_config(precision, params, M=M, N=N)
    out.append({
        "tma_load": len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global", ptx)),
        "tma_store": len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared", ptx)),
        "tensormap": ptx.count("tensormap.replace"), "wgmma": ptx.count("wgmma.mma_async"),
        "mma_sync": ptx.count("mma.sync"), "ld_global": len(re.findall(r"ld\.global", ptx)),
        "local_load": ttgir.count("ttg.local_load"), "shared": compiled.metadata.shared,
        "estimate": m.smem_bytes(config, precision), "grid": grid,
        "scratch": compiled.metadata.global_scratch_size, "trans": trans,
        "ops": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.[\w.]+", ptx))),
        "imprecise": sorted({int(x) for x in re.findall(r"maxNumImpreciseAcc = (\d+)", ttgir)})})
print(json.dumps(out))
"""

COMPILED = [
    ("tma_wgmma", "bf16", "nn", {}), ("tma_wgmma", "fp16", "tt", {}),
    ("tma_wgmma", "tf32", "nn", {}), ("tma_wgmma", "tf32", "nn", {"kmajor": 0}),
    ("tma_wgmma", "3xtf32", "nt", {}),
    ("persistent", "bf16", "tn", {}), ("persistent", "tf32", "nt", {}),
    ("persistent", "bf16", "nn", {"num_stages": 4}), ("persistent", "fp16", "nn", {"flatten": 0}),
    ("persistent", "fp8", "nt", {}), ("persistent", "fp8", "nn", {"kmajor": 0}),
    ("tma_wgmma", "fp8", "tn", {}),
]


@pytest.fixture(scope="module")
def compiled_sm90():
    """COMPILED's facts, one child process for all; skips where this Triton cannot compile for
    sm_90 without a GPU."""
    if HAS_GPU:
        pytest.skip("compiled on the GPU itself by the GPU tests")
    r = run_python(PTX_PROBE, json.dumps(COMPILED), timeout=1800, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: "
                        + r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    return dict(zip(range(len(COMPILED)), json.loads(r.stdout.strip().splitlines()[-1])))


@cpu_only
@pytest.mark.parametrize("i", range(len(COMPILED)),
                         ids=["-".join([s, p, lay] + [f"{k}={v}" for k, v in x.items()])
                              for s, p, lay, x in COMPILED])
def test_compiled_for_sm90_the_kernel_is_tma_and_wgmma(compiled_sm90, i):
    stage, precision, layout, params = COMPILED[i]
    f = compiled_sm90[i]
    assert f["tma_load"] > 0 and f["tma_store"] > 0, f  # cp.async.bulk.tensor both ways
    assert f["tensormap"] > 0 and f["scratch"] > 0, f  # descriptors built on the device
    assert f["wgmma"] > 0 and f["mma_sync"] == 0, f
    # no operand comes through plain loads; fp8's two scales do (scalar loads, once per program)
    assert f["ld_global"] == (2 if precision == "fp8" else 0), f
    assert f["shared"] <= common.SMEM_LIMIT, f
    assert f["shared"] <= f["estimate"] + 1024, f  # the launcher's estimate bounds it
    if stage == "persistent":
        assert f["grid"] == [132], f  # one program per SM (the SM count of an H100 SXM)
    # wgmma reads a 16-bit operand in whichever orientation the descriptor delivered it, through
    # its transpose bits: A M-major (t) sets imm-trans-a, B N-major (n) imm-trans-b. A TF32 or
    # fp8 wgmma has no such bits (PTX allows them for 16-bit types only): both operands reach it
    # K-major, by kmajor's copy or by Triton's round trip below
    if precision in ("bf16", "fp16"):
        assert f["trans"] == [[int(layout[0] == "t"), int(layout[1] == "n")]], f
    else:
        assert f["trans"] == [], f
    # TF32 or fp8 with an N-major B left as it is: the B tile goes through registers and back to
    # shared memory K-major before each wgmma (the header's account); kmajor's copy removes it
    round_trip = precision in ("tf32", "fp8") and params.get("kmajor") == 0
    assert (f["local_load"] > 0) == round_trip or precision == "3xtf32", f
    if precision == "fp8":  # e4m3 x e4m3 into fp32, the whole K in wgmma's accumulator
        assert f["ops"] == ["wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"], f
        assert f["imprecise"] == [2**30], f


def test_the_sweep_script_refuses_a_malformed_request_before_any_gpu_work():
    """scripts/experiments/hopper_triton_sweep.py: a configuration or precision it cannot read is
    one line on stderr, before torch is imported; its grid holds the automatic row first and
    BLOCK_K in elements of the precision (128 or 256 bytes of k)."""
    import subprocess
    import sys

    from helpers import ROOT, lab_env

    script = ROOT / "scripts" / "experiments" / "hopper_triton_sweep.py"
    for args, words in ((["--configs", "BLOCK_N=wide"], "BLOCK_N=wide"),
                        (["--precisions", "fp64"], "fp64")):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                           cwd=ROOT, env=lab_env())
        assert r.returncode != 0 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    sys.path.insert(0, str(script.parent))
    try:
        import hopper_triton_sweep as sweep
    finally:
        sys.path.remove(str(script.parent))
    for precision, ks in (("bf16", {64, 128}), ("tf32", {32, 64})):
        configs = sweep.configurations("persistent", None, True, precision)
        assert configs[0] == {} and {c["BLOCK_K"] for c in configs[1:] if "BLOCK_K" in c} == ks
    assert sweep.configurations("tma_wgmma", "BLOCK_N=128;flatten=False", True, "bf16") == [
        {"BLOCK_N": 128}, {"flatten": False}]


# ------------------------------------------------------------------ GPU

gpu = pytest.mark.gpu


def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TMA twins need an sm_90 GPU")


@gpu
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("shape", [(1025, 1025, 1025), (7919, 6007, 3001)])
def test_bf16_against_torch_at_odd_sizes(stage, shape):
    _need_sm90()
    M, N, K = shape
    a, b = _inputs(M, N, K, "bf16", "nn", device="cuda")
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    launch = MODULES[stage].prepare(a, b, c, precision="bf16")
    _check(launch, c, a, b, "bf16")
    ref = torch.matmul(a, b)
    rel = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < 2e-2, rel
    if K == 3001:  # 6002-byte lines: both operands copied; C's 12014-byte lines: masked store
        assert launch.realigned == ("A", "B") and not launch.layout["C_DESC"]
    else:  # 2050-byte lines: copied too
        assert launch.realigned == ("A", "B")


@gpu
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_precision_and_layout_at_512(stage, precision, layout):
    """fp8: lab.check.make_scaled_inputs' e4m3 operands, their scales passed to prepare(), a bf16
    C, against the scaled float64 reference."""
    _need_sm90()
    a, b, scales = _operands(512, 512, 512, precision, layout, device="cuda")
    c = torch.empty(512, 512, device="cuda", dtype=OUT[precision])
    if layout == "tt":
        c = torch.empty(512, 512, device="cuda", dtype=OUT[precision]).t()
    launch = MODULES[stage].prepare(a, b, c, precision=precision, **_scale_kwargs(scales))
    _check(launch, c, a, b, precision, scales)


@gpu
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("shape", [(1025, 1025, 1025), (7919, 6007, 3001)])
def test_fp8_at_odd_sizes(stage, shape):
    """e4m3 lines of 1025 and 3001 bytes: both operands copied (K-major buffers); C's bf16 lines
    (2050 and 12014 bytes) are not multiples of 16 bytes either, so C is stored masked."""
    _need_sm90()
    M, N, K = shape
    a, b, scales = _operands(M, N, K, "fp8", "nn", device="cuda")
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    launch = MODULES[stage].prepare(a, b, c, precision="fp8", **_scale_kwargs(scales))
    _check(launch, c, a, b, "fp8", scales)
    assert launch.realigned == ("A", "B") and not launch.layout["C_DESC"]


@gpu
@pytest.mark.parametrize("stage", STAGES)
def test_two_calls_of_one_signature_through_a_plan(stage):
    """What lab.matmul does with a second call of a signature (lab.plan): the steps replayed on
    the new tensors, the scratch allocator found, the copies of an unaligned operand redone."""
    _need_sm90()
    m = MODULES[stage]
    for precision, (M, N, K) in (("bf16", (1024, 1024, 1024)), ("bf16", (515, 333, 259)),
                                 ("tf32", (512, 384, 256)), ("fp8", (1024, 1024, 1024)),
                                 ("fp8", (515, 333, 259))):
        kwargs = dict(precision=precision)
        a1, b1, s1 = _operands(M, N, K, precision, "nn", "cuda", seed=1)
        c1 = torch.empty(M, N, device="cuda", dtype=OUT[precision])
        launch = m.prepare(a1, b1, c1, **kwargs, **_scale_kwargs(s1))
        plan = plans.make_plan(launch, m.prepare, kwargs, a1, b1, c1, stage,
                               scales=s1 or (None, None))
        assert plan.replay is not None
        _check(launch, c1, a1, b1, precision, s1)
        for seed in (2, 3):
            a2, b2, s2 = _operands(M, N, K, precision, "nn", "cuda", seed=seed)
            c2 = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
            plan(a2, b2, c2, s2 or (None, None))
            torch.cuda.synchronize()
            result = chk.compare(c2, chk.reference(a2, b2, s2), K, precision)
            assert result.passed, (precision, result.reason)


@gpu
@pytest.mark.parametrize("stage", STAGES)
def test_lab_matmul_replays_a_signature(stage):
    _need_sm90()
    if stage not in BY_NAME:
        pytest.skip(f"stage {stage} is not in lab/stages.py yet")
    import lab

    plans.clear()
    for seed in (1, 2):
        a, b = _inputs(1031, 517, 263, "bf16", "nt", "cuda", seed=seed)
        c = lab.matmul(a, b, stage=stage, backend="triton")
        result = chk.compare(c, chk.reference(a, b), 263, "bf16")
        assert result.passed, result.reason


# ------------------------------------------- the lessons compile to their variants' PTX (no GPU)

# Each case recorded as its prepare() launches it (the lesson kernel: C row-major through one TMA
# store, _common.LESSON_CASE) and again with lesson_or_variant forced to the variant (the twin's
# former kernel, unchanged: triton_kernels/variants/<stage>.py), both compiled for an sm_90
# FakeDriver without line info, in a child process without the interpreter; the PTX compared
# with its .loc / .file lines and debug sections left out (the kernels have one name). Shared by
# tests/test_warp_specialized_triton.py.
LESSON_PROBE = r"""
import importlib, json, os, sys
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab.base.needs import TRITON
from lab.base.describe import describe
from lab.toolchain.triton import FakeDriver, recording
from triton_kernels import _common as common
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
      "3xtf32": torch.float32, "fp8": torch.float8_e4m3fn}

def launched(m, p, params, force):
    real = common.lesson_or_variant
    if force:
        common.lesson_or_variant = lambda lesson, variant, meta: (variant, meta)
    try:
        with recording() as calls:
            m.prepare.inner(p, **params)
    finally:
        common.lesson_or_variant = real
    return [x for x in calls if x[0].fn.__name__.startswith("matmul")][-1]

def ptx(kernel, grid, args, meta):
    previous = driver._active
    driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        compiled = kernel.warmup(*args, grid=grid, **meta)
    finally:
        driver._active = previous
    text = compiled.asm["ptx"].split(".section\t.debug", 1)[0]
    return [s for s in text.splitlines() if not s.strip().startswith((".loc", ".file", "//"))]

out = []
for stage, precision, layout, params in json.loads(sys.argv[1]):
    m = importlib.import_module(f"triton_kernels.{stage}")
    v = importlib.import_module(f"triton_kernels.variants.{stage}")
    name = f"matmul_{stage}_kernel"
    M = N = K = 4096
    dt = DT[precision]
    a = torch.empty((M, K) if layout[0] == "n" else (K, M), device="meta", dtype=dt)
    b = torch.empty((K, N) if layout[1] == "n" else (N, K), device="meta", dtype=dt)
    a, b = (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())
    c = torch.empty((M, N), device="meta", dtype=torch.bfloat16 if precision == "fp8" else dt)
    scales = (torch.empty(1, device="meta"),) * 2 if precision == "fp8" else None
    p = describe(a, b, c, TRITON, precision, scales)
    lesson, former = launched(m, p, params, False), launched(m, p, params, True)
    lp, vp = ptx(*lesson), ptx(*former)
    first = next((i for i, (x, y) in enumerate(zip(lp, vp)) if x != y), None)
    out.append({"lesson": lesson[0] is getattr(m, name), "variant": former[0] is getattr(v, name),
                "same": lp == vp, "lines": len(lp),
                "wgmma": sum("wgmma.mma_async" in s for s in lp),
                "first_difference": None if first is None else [lp[first], vp[first]]})
print(json.dumps(out))
"""

LESSON_CASES = [
    ("tma_wgmma", "bf16", "nn", {}), ("tma_wgmma", "fp16", "tt", {}),
    ("tma_wgmma", "bf16", "tn", {"BLOCK_M": 64, "BLOCK_N": 128, "num_stages": 3}),
    ("tma_wgmma", "fp16", "nt", {"num_warps": 4, "GROUP_M": 1}),
    ("tma_wgmma", "tf32", "nt", {"subtile": 0, "BLOCK_N": 128}),
    ("tma_wgmma", "tf32", "nn", {"subtile": 0, "BLOCK_N": 128, "kmajor": 0}),
    ("tma_wgmma", "3xtf32", "nt", {}), ("tma_wgmma", "fp8", "tn", {}),
    ("persistent", "bf16", "tn", {}), ("persistent", "fp16", "nn", {"flatten": 0}),
    ("persistent", "bf16", "nt", {"BLOCK_N": 128, "num_stages": 4, "subtile": 0}),
    ("persistent", "tf32", "nt", {"subtile": 0, "BLOCK_N": 128}),
    ("persistent", "3xtf32", "tt", {}), ("persistent", "fp8", "nt", {}),
]


def compile_lessons(cases):
    """LESSON_PROBE's facts for `cases`, or a skip where this Triton cannot compile for sm_90
    without a GPU."""
    r = run_python(LESSON_PROBE, json.dumps(cases), timeout=1800, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: "
                        + r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def lessons_sm90():
    if HAS_GPU:
        pytest.skip("the lesson and the variant are compared where no GPU is (a FakeDriver)")
    return dict(enumerate(compile_lessons(LESSON_CASES)))


@cpu_only
@pytest.mark.parametrize("i", range(len(LESSON_CASES)),
                         ids=["-".join([s, p, lay] + [f"{k}={v}" for k, v in x.items()])
                              for s, p, lay, x in LESSON_CASES])
def test_the_lesson_compiles_to_the_variants_ptx(lessons_sm90, i):
    """Where the lesson kernel runs, it compiles to the former kernel's PTX (its variant's),
    instruction for instruction: nothing that ran before computes differently."""
    f = lessons_sm90[i]
    assert f["lesson"] and f["variant"], f
    assert f["wgmma"] > 0 and f["same"], f


def test_the_variant_runs_where_the_lesson_does_not_reach(monkeypatch):
    """Recorded (meta tensors): C row-major through a descriptor runs the lesson kernel; a
    column-major C, a C no descriptor describes, subtile (tf32's automatic value) and the
    interpreter's bf16 upcast run the variant, with every meta-parameter it had before."""
    from lab.toolchain.triton import recording
    from triton_kernels.variants import persistent as persistent_variant
    from triton_kernels.variants import tma_wgmma as tma_wgmma_variant

    variants = {"tma_wgmma": tma_wgmma_variant, "persistent": persistent_variant}
    M = N = K = 512
    for name, m in MODULES.items():
        kernel = f"matmul_{name}_kernel"
        for precision, c_form, params, lesson in (
                ("fp16", "row", {}, True), ("fp16", "col", {}, False),
                ("fp16", "strided", {}, False), ("tf32", "row", {}, False),
                ("tf32", "row", {"subtile": 0, "BLOCK_N": 128}, True),
                ("bf16", "row", {}, False)):  # bf16 here: the interpreter's UPCAST
            dt = DTYPE[precision]
            c = {"row": lambda: torch.empty((M, N), device="meta", dtype=dt),
                 "col": lambda: torch.empty((N, M), device="meta", dtype=dt).t(),
                 "strided": lambda: torch.empty((M, 2 * N), device="meta", dtype=dt)[:, ::2]}
            p = describe(torch.empty((M, K), device="meta", dtype=dt),
                         torch.empty((K, N), device="meta", dtype=dt), c[c_form](), TRITON,
                         precision)
            with recording() as calls:
                m.prepare.inner(p, **params)
            (k, _, _, meta), = [x for x in calls if x[0].fn.__name__ == kernel]
            want = getattr(m if lesson else variants[name], kernel)
            assert k is want, (name, precision, c_form, params)
            assert ("C_DESC" in meta) == (not lesson), meta
