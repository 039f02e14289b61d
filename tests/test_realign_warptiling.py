"""Tests of `realign` in the Triton warptiling twin, with and without split-K.

realign=True (triton_kernels/warptiling.py, the machinery shared with the double_buffered twin in
triton_kernels/_realign.py): an A or B whose leading dimension is not a multiple of 16 elements,
whose base pointer is not 16-byte aligned, or that has no unit stride is copied, at the start of
every call and before the split-K kernel and its reduction, into a buffer allocated and zeroed
once in prepare(); the kernel reads the buffer with the alignment hints on, and PAD_A / PAD_B
round its wrap (m or n) or its ragged-k mask along the buffer's contiguous dimension up to a
multiple of 4 (into the zero padding). Checked here, under the Triton interpreter (CPU mode)
unless said otherwise:
(a) results equal torch.matmul (lab.check, the fp32 threshold) on odd shapes in every layout with
    splitk = 1 and 3, with the default tile, and on offset views; split-K's C is still the
    ordered sum of its workspace slabs;
(b) only misaligned operands are copied (`launch.realigned`), aligned ones are read where they
    are, and realign=False copies nothing;
(c) the copy is made in every call, before both split-K kernels (values changed between two
    calls are what the second multiplies), kernel_only runs the kernel(s) on the buffers, and the
    buffers' padding stays zero;
(d) the kernel gets the hints for the buffers (VEC_* and PAD_*), recorded by a launcher stand-in
    in every layout, and compiled for sm_90 without a GPU (a subprocess without TRITON_INTERPRET;
    skipped where Triton cannot) its K loop copies with 16-byte cp.async;
(e) the registry parses the parameter and the autotuner's dry run lists it with split-K;
(f) `gpu`: 1025^3 and 515x777x301 in every layout with splitk 1 and 3 (skipped without one).
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from lab import check as chk
from lab.stages import parse_variants
from helpers import LAYOUTS, cpu_only, run_lab, run_python
from realign_helpers import offset_view, padding_of, triton_functions

STAGE = "warptiling"
SPLITS = (1, 3)
_params, _triton, _prepare = triton_functions(STAGE)
_padding_of, _offset = padding_of, offset_view


def _ordered_sum(launch, splitk, M, N):
    slabs = launch.workspace.view(splitk, M, N)
    total = slabs[0].clone()
    for s in range(1, splitk):
        total += slabs[s]  # fp32, in the order 0, 1, ..., like the reduction kernel
    return total


# ------------------------------------------------------------------- (a) equal to torch.matmul


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(33, 17, 45), (1, 1, 1), (65, 31, 7), (37, 29, 83),
                                   (30, 45, 32)], ids=str)
def test_realign_matches_torch_in_every_layout(shape, layout, splitk):
    """Odd M, N and K (the wrap of a column-major A or a row-major B at M or N rounded up to 4,
    the ragged last k-tile), K = 7 with fewer k-tiles than splits, and K = 32 (EVEN_K)."""
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 7 * K, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{shape} {layout} splitk={splitk}: {result.reason}"
    # the leading dimensions (A: K in n, M in t; B: N in n, K in t) that are not multiples of 16
    lds = {"A": K if layout[0] == "n" else M, "B": N if layout[1] == "n" else K}
    copied = tuple(name for name, ld in lds.items() if ld % 16)
    assert launch.realigned == copied
    p = launch.kernel_problem
    for name, op, user in (("A", p.a, a), ("B", p.b, b)):
        assert (op.tensor.data_ptr() != user.data_ptr()) == (name in copied)
        assert op.ld % 16 == 0 and op.tensor.data_ptr() % 16 == 0
        assert op.row_major == (user.stride(1) == 1 or user.shape[1] == 1)  # its own layout
    if splitk > 1:  # the reduction is untouched: C is the ordered sum of the slabs
        assert torch.equal(c, _ordered_sum(launch, splitk, M, N))


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
def test_realign_with_the_default_tile(splitk):
    """The registry's defaults (128 x 128 x 32, GROUP_M 8): one program per tile and split, K not
    a multiple of BLOCK_K."""
    M, N, K = 65, 63, 97
    a, b = chk.make_inputs(M, N, K, seed=5, device="cpu", layout="tn")
    c = torch.empty((M, N))
    launch = _triton().prepare(a, b, c, **_params(realign=True, splitk=splitk))
    assert launch.realigned == ("A", "B")
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_realign_on_offset_views(layout, splitk):
    """A starts 1 element (4 bytes) past a 16-byte boundary with a leading dimension that is a
    multiple of 16; B is the same kind of view starting 16 elements in (64 bytes: aligned)."""
    M, N, K = 37, 29, 41
    a0, b0 = chk.make_inputs(M, N, K, seed=11, device="cpu")
    a = _offset(M, K, 48, 1, col_major=layout[0] == "t")
    b = _offset(K, N, 32 if layout[1] == "n" else 48, 16, col_major=layout[1] == "t")
    a.copy_(a0)
    b.copy_(b0)
    assert a.data_ptr() % 16 == 4 and b.data_ptr() % 16 == 0
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{layout} splitk={splitk}: {result.reason}"
    assert launch.realigned == ("A",)  # B's lines and base are aligned: read where it is
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()


@cpu_only
def test_realign_on_sliced_and_strided_views_with_a_strided_c():
    """A sliced A (rows 50 floats apart, starting at column 3), a B with no unit stride (copied
    into a row-major buffer), and C a sliced view, which realign never copies."""
    M, N, K = 30, 21, 19
    a0, b0 = chk.make_inputs(M, N, K, seed=17, device="cpu")
    a = torch.full((M, 50), float("nan"))[:, 3:3 + K]
    a.copy_(a0)
    b = torch.full((2 * K, 2 * N), float("nan"))[::2, ::2]
    b.copy_(b0)
    big = torch.full((M, N + 5), -1.0)
    c = big[:, 2:2 + N]
    for splitk in SPLITS:
        launch = _prepare(a, b, c, realign=True, splitk=splitk)
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, result.reason
        assert launch.realigned == ("A", "B")
        assert launch.kernel_problem.b.row_major and launch.kernel_problem.b.ld == 32
        assert launch.kernel_problem.c.tensor.data_ptr() == c.data_ptr()
        assert (big[:, :2] == -1).all() and (big[:, 2 + N:] == -1).all()


# ------------------------------------------------------------------- (b) only what is misaligned


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
def test_aligned_operands_are_not_copied(splitk):
    M, N, K = 20, 48, 32  # A's rows are 32 floats, B's 48: multiples of 16, 16-byte bases
    a, b = chk.make_inputs(M, N, K, seed=23, device="cpu")
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    assert launch.realigned == ()
    assert launch.kernel_only is None  # the call is the kernel(s) alone
    assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # K = 33: a transposed A's leading dimension is M = 20 (misaligned), B's rows stay 48 floats
    a, b = chk.make_inputs(M, N, 33, seed=29, device="cpu", layout="tn")
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    assert launch.realigned == ("A",)
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), 33).passed
    a, b = chk.make_inputs(M, 40, 32, seed=31, device="cpu")  # N = 40: B's rows misaligned
    c = torch.empty((M, 40))
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    assert launch.realigned == ("B",)
    assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), 32).passed


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
def test_realign_off_copies_nothing(splitk):
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=37, device="cpu")
    c = torch.empty((M, N))
    for launch in (_prepare(a, b, c, splitk=splitk), _prepare(a, b, c, realign=False,
                                                              splitk=splitk)):
        assert launch.realigned == () and launch.kernel_only is None
        assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
        assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
        if splitk == 1:
            assert not getattr(launch, "setup_ms", None)
        assert chk.check(launch, c, chk.reference(a, b), K).passed


# ------------------------------------------------------------------- (c) a copy in every call


@cpu_only
@pytest.mark.parametrize("splitk", SPLITS)
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_the_copy_is_made_in_every_call(layout, splitk):
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=41, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True, splitk=splitk)
    assert launch.realigned == ("A", "B")
    assert launch.setup_ms is not None and launch.setup_ms >= 0  # buffers (and workspace): setup
    assert callable(launch.kernel_only)
    if splitk > 1:  # the split-K launch's workspace is still there
        assert launch.workspace is launch.kernel_only.workspace
        assert launch.workspace.numel() == splitk * M * N
    p = launch.kernel_problem
    for op in (p.a, p.b):  # zeroed in prepare(), before any call
        assert _padding_of(op).numel() and not _padding_of(op).any()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # new values in the user's tensors after prepare(): the next call multiplies them (so the
    # copy runs before the split-K kernel, and the reduction sums what that kernel made of them)
    a.mul_(-2.0).add_(0.5)
    b.copy_(torch.randn(K, N, generator=torch.Generator().manual_seed(43)))
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason
    if splitk > 1:
        assert torch.equal(c, _ordered_sum(launch, splitk, M, N))
    # the kernel(s) alone read the buffers as the last call left them
    c.fill_(float("nan"))
    launch.kernel_only()
    assert chk.compare(c, chk.reference(a, b), K).passed
    for op in (p.a, p.b):  # the copies wrote the data, never the padding
        assert not _padding_of(op).any()


# ------------------------------------------------------------------- (d) the hints the kernel gets


def _recorded(layout, shape, **changes) -> list[dict]:
    """The meta-parameters prepare() hands each launcher() call (meta tensors, nothing
    launched): the GEMM kernel's, then (split-K) the reduction's, in the order of the calls."""
    from lab.operands import TRITON, describe
    from triton_kernels._common import recording

    module = _triton()
    M, N, K = shape
    a = torch.empty((K, M), device="meta").t() if layout[0] == "t" else torch.empty(
        (M, K), device="meta")
    b = torch.empty((N, K), device="meta").t() if layout[1] == "t" else torch.empty(
        (K, N), device="meta")
    c = torch.empty((M, N), device="meta")
    with recording() as launches:
        module.prepare.inner(describe(a, b, c, TRITON), **_params(**changes))
    return [dict(meta, kernel=getattr(kernel, "__name__", str(kernel)), grid=grid, a=args[0],
                 b=args[1]) for kernel, grid, args, meta in launches]


@pytest.mark.parametrize("splitk", SPLITS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_kernel_gets_the_hints_for_the_buffers(layout, splitk):
    """At 1025^3 the lines of A and B are 1025 floats, so without realign there are no hints; with
    it the buffers have them (VEC_*: their layout), with PAD_* because 1025 is not a multiple of
    4. C is not copied and keeps no hint; the split-K reduction's launch is unchanged."""
    shape = (1025, 1025, 1025)
    plain = _recorded(layout, shape, splitk=splitk)[-1]
    assert (plain["VEC_A"], plain["VEC_B"], plain["VEC_C"]) == ("", "", "")
    assert "PAD_A" not in plain and "PAD_B" not in plain
    calls = _recorded(layout, shape, splitk=splitk, realign=1)
    gemm = calls[-1]  # the GEMM kernel is launcher()'s last call (lab.profile captures it)
    flags = dict(VEC_A=layout[0], VEC_B=layout[1], PAD_A=True, PAD_B=True)
    assert {k: gemm[k] for k in flags} == flags and gemm["VEC_C"] == ""
    assert gemm["SPLITK"] == splitk
    assert tuple(gemm["a"].stride()) == ((1, 1040) if layout[0] == "t" else (1040, 1))
    assert tuple(gemm["b"].stride()) == ((1, 1040) if layout[1] == "t" else (1040, 1))
    if splitk > 1:
        assert len(calls) == 2 and "PAD_A" not in calls[0] and calls[0]["SPLITK"] == splitk


SM90_SASS = r"""
import json, re, sys
from lab import profile as prof
from lab.stages import parse_variants
out = {}
for spec in sys.argv[1:]:
    item = prof.compile_listing(parse_variants([spec])[0], "triton", (1025, 1025, 1025),
                                sass=True, ptx=False)
    counts = {}
    for line in item.sass.splitlines():
        m = re.search(r"\b(LDGSTS[.A-Z0-9]*|LDG[.A-Z0-9]*)\b", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    out[spec] = counts
print(json.dumps(out))
"""


@cpu_only
def test_the_buffers_get_16_byte_copies_when_compiled_for_sm90():
    """Compiled for sm_90 without a GPU (lab.profile's path, row-major operands, 1025^3, never
    run): without realign the K loop's copies are 4-byte LDGSTS and the ragged last k-tile's
    loads 4-byte LDG; with it, for splitk 1 and 3, every copy is a 16-byte cp.async
    (LDGSTS.E.BYPASS.128, a quarter as many) and every load 128-bit."""
    specs = ["warptiling", "warptiling:realign=1", "warptiling:realign=1,splitk=3"]
    run = run_python(SM90_SASS, *specs, timeout=600, drop=("TRITON_INTERPRET",))
    if run.returncode != 0:
        pytest.skip(f"Triton could not compile for sm_90 here: {run.stderr.strip()[-300:]}")
    found = json.loads(run.stdout.strip().splitlines()[-1])
    plain = found["warptiling"]
    assert plain.get("LDGSTS.E", 0) > 0 and plain.get("LDG.E", 0) > 0
    assert not any(k.endswith(".128") for k in plain)
    for spec in specs[1:]:
        counts = found[spec]
        wide = {k: n for k, n in counts.items() if re.match(r"LDG(STS)?\.", k)}
        assert wide and all(k.endswith(".128") for k in wide), (spec, counts)
        assert counts.get("LDGSTS.E.BYPASS.128", 0) * 4 == plain["LDGSTS.E"], (spec, counts)


# ------------------------------------------------------------------- (e) registry and autotuner


@pytest.mark.parametrize("text,value", [("1", True), ("True", True), ("0", False)])
def test_the_registry_parses_realign(text, value):
    variant = parse_variants([f"{STAGE}:realign={text},splitk=3"])[0]
    assert variant.params["realign"] is value
    assert variant.params_for("triton")["realign"] is value
    assert "realign" not in variant.params_for("cuda")
    assert variant.label == (f"{STAGE}:splitk=3,realign=1" if value else f"{STAGE}:splitk=3")


def test_the_autotuner_dry_run_lists_realign_with_splitk():
    r = run_lab("lab.autotune", "--stage", f"{STAGE}:realign=1,splitk=1|3", "--backend",
                "triton", "--sizes", "1025", "--dry-run", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "realign=1" in r.stdout and "realign=0" not in r.stdout
    assert re.search(r"splitk=3", r.stdout), r.stdout[-2000:]


# ------------------------------------------------------------------- (f) on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_realign_on_the_gpu(layout):
    """The compiled kernel (16-byte copies from the buffers, the wrap and the ragged-k mask
    rounded up to 4 into the zero padding) with splitk 1 and 3 at 1025^3 and 515x777x301, an
    offset view, and a copy in every call."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for M, N, K in [(1025, 1025, 1025), (515, 777, 301)]:
        a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", layout=layout)
        ref = chk.reference(a, b)
        for splitk in SPLITS:
            c = torch.empty((M, N), device="cuda")
            launch = _triton().prepare(a, b, c, **_params(realign=True, splitk=splitk))
            assert launch.realigned == ("A", "B")
            result = chk.check(launch, c, ref, K)
            assert result.passed, (layout, M, N, K, splitk, result.reason)
    # an offset A (base 4 bytes past 16) and new values in a second call, split-K
    M, N, K = 300, 203, 517
    a0, b = chk.make_inputs(M, N, K, 5, "cuda", layout=layout)
    a = torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a0)
    c = torch.empty((M, N), device="cuda")
    launch = _triton().prepare(a, b, c, **_params(realign=True, splitk=3))
    assert "A" in launch.realigned
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    a.mul_(-3.0)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("nn", "tt"))
def test_realign_at_a_long_k_on_the_gpu(layout):
    """A long, odd K (no 16-byte aligned lines in A, nor in B for tt): the copies, the
    16-byte loads from the buffers and the split-K sum stay within lab.check's K-aware bound,
    with and without split-K."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N, K = 67, 45, 262147
    a, b = chk.make_inputs(M, N, K, 11, "cuda", layout=layout)
    ref = chk.reference(a, b)
    for splitk in (1, 16):
        c = torch.empty((M, N), device="cuda")
        launch = _triton().prepare(a, b, c, **_params(realign=True, splitk=splitk))
        assert "A" in launch.realigned
        result = chk.check(launch, c, ref, K)
        assert result.passed, (layout, splitk, result.reason)
