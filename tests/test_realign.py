"""Tests of `realign`, the Triton double_buffered twin's copy into 16-byte aligned buffers.

realign=True (triton_kernels/double_buffered.py): an A or B whose leading dimension is not a
multiple of 16 elements, whose base pointer is not 16-byte aligned, or that has no unit stride is
copied, at the start of every call, into a buffer allocated and zeroed once in prepare() (its own
layout, leading dimension rounded up to 16 elements, 16-byte aligned storage); the kernel reads
the buffer with the alignment hints on, and along the buffer's contiguous dimension its mask runs
to the size rounded up to 4 (the zero padding fills in). Checked here under the Triton
interpreter (CPU mode):
(a) results equal torch.matmul (lab.check, the fp32 threshold) on odd shapes in every layout, and
    on offset, sliced and strided views;
(b) only misaligned operands are copied (`launch.realigned`), aligned ones are read where they
    are, and realign=False copies nothing;
(c) the copy is made in every call (values changed between two calls are what the second
    multiplies) and the buffers' padding stays zero;
(d) the kernel gets the hints for the buffers (VEC_* and PAD_*), as recorded by lab.profile's
    launch recorder;
(e) operand errors are the same one sentence as without realign;
(f) the registry parses the parameter and the autotuner's dry run lists it.
"""

from __future__ import annotations

import re

import pytest
import torch

from lab import check as chk
from lab.errors import LabError
from lab.stages import parse_variants
from helpers import LAYOUTS, cpu_only, run_lab
from realign_helpers import offset_view, padding_of, triton_functions

STAGE = "double_buffered"
_params, _triton, _prepare = triton_functions(STAGE)
_padding_of, _offset = padding_of, offset_view


# ------------------------------------------------------------------- (a) equal to torch.matmul


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(33, 17, 45), (1, 1, 1), (65, 31, 7), (36, 40, 20)], ids=str)
def test_realign_matches_torch_in_every_layout(shape, layout):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 7 * K, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{shape} {layout}: {result.reason}"
    # every leading dimension here (K, N, M or 1) is off a multiple of 16: both are copied
    assert launch.realigned == ("A", "B")
    p = launch.kernel_problem
    assert p.a.tensor.data_ptr() != a.data_ptr() and p.b.tensor.data_ptr() != b.data_ptr()
    for op, user in ((p.a, a), (p.b, b)):
        assert op.ld % 16 == 0 and op.tensor.data_ptr() % 16 == 0
        assert op.row_major == (user.stride(1) == 1 or user.shape[1] == 1)  # its own layout


@cpu_only
def test_realign_with_the_default_tile():
    """The registry's defaults (128 x 128 x 32, GROUP_M 8) on a shape with edges in every
    dimension: one program per tile, K not a multiple of BLOCK_K."""
    M, N, K = 65, 63, 17
    a, b = chk.make_inputs(M, N, K, seed=5, device="cpu")
    c = torch.empty((M, N))
    launch = _triton().prepare(a, b, c, **_params(realign=True))
    assert launch.realigned == ("A", "B")
    assert chk.check(launch, c, chk.reference(a, b), K).passed


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
def test_realign_on_offset_views(layout):
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
    launch = _prepare(a, b, c, realign=True)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{layout}: {result.reason}"
    assert launch.realigned == ("A",)  # B's lines and base are aligned: read where it is
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()


@cpu_only
def test_realign_on_sliced_and_strided_views():
    """A sliced A whose rows are 50 floats apart and that starts at column 3 (neither its leading
    dimension nor its base aligned), and a B with no unit stride (every other row and column):
    both are copied, B into a row-major buffer."""
    M, N, K = 30, 21, 19
    a0, b0 = chk.make_inputs(M, N, K, seed=17, device="cpu")
    a = torch.full((M, 50), float("nan"))[:, 3:3 + K]
    a.copy_(a0)
    b = torch.full((2 * K, 2 * N), float("nan"))[::2, ::2]
    b.copy_(b0)
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason
    assert launch.realigned == ("A", "B")
    assert launch.kernel_problem.b.row_major and launch.kernel_problem.b.ld == 32


@cpu_only
def test_realign_with_a_strided_c():
    """C is never copied by realign: a column-major C (a transposed view) and a sliced C are
    written where they are."""
    M, N, K = 23, 35, 18
    a, b = chk.make_inputs(M, N, K, seed=19, device="cpu")
    for c in (torch.empty((N, M)).t(), torch.empty((M, N + 5))[:, 2:2 + N]):
        launch = _prepare(a, b, c, realign=True)
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, result.reason
        assert launch.kernel_problem.c.tensor.data_ptr() == c.data_ptr()


# ------------------------------------------------------------------- (b) only what is misaligned


@cpu_only
def test_aligned_operands_are_not_copied():
    M, N, K = 20, 48, 32  # A's rows are 32 floats, B's 48: multiples of 16, 16-byte bases
    a, b = chk.make_inputs(M, N, K, seed=23, device="cpu")
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True)
    assert launch.realigned == ()
    assert launch.kernel_only is None  # the call is the kernel alone
    assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # K = 33: a transposed A's leading dimension is M = 20 (misaligned), B's rows stay 48 floats
    a, b = chk.make_inputs(M, N, 33, seed=29, device="cpu", layout="tn")
    launch = _prepare(a, b, c, realign=True)
    assert launch.realigned == ("A",)
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), 33).passed
    a, b = chk.make_inputs(M, 40, 32, seed=31, device="cpu")  # N = 40: B's rows misaligned
    c = torch.empty((M, 40))
    launch = _prepare(a, b, c, realign=True)
    assert launch.realigned == ("B",)
    assert chk.check(launch, c, chk.reference(a, b), 32).passed


@cpu_only
def test_realign_off_copies_nothing():
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=37, device="cpu")
    c = torch.empty((M, N))
    for launch in (_prepare(a, b, c), _prepare(a, b, c, realign=False)):
        assert launch.realigned == ()
        assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
        assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
        assert not getattr(launch, "setup_ms", None)
        assert chk.check(launch, c, chk.reference(a, b), K).passed


# ------------------------------------------------------------------- (c) a copy in every call


@cpu_only
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_the_copy_is_made_in_every_call(layout):
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=41, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = _prepare(a, b, c, realign=True)
    assert launch.realigned == ("A", "B")
    assert launch.setup_ms is not None and launch.setup_ms >= 0  # the buffers: setup, untimed
    assert callable(launch.kernel_only)
    p = launch.kernel_problem
    for op in (p.a, p.b):  # zeroed in prepare(), before any call
        assert _padding_of(op).numel() and not _padding_of(op).any()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # new values in the user's tensors after prepare(): the next call multiplies them
    a.mul_(-2.0).add_(0.5)
    b.copy_(torch.randn(K, N, generator=torch.Generator().manual_seed(43)))
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason
    # the kernel alone reads the buffers as the last call left them
    c.fill_(float("nan"))
    launch.kernel_only()
    assert chk.compare(c, chk.reference(a, b), K).passed
    for op in (p.a, p.b):  # the copies wrote the data, never the padding
        assert not _padding_of(op).any()


# ------------------------------------------------------------------- (d) the hints the kernel gets


@pytest.mark.parametrize("layout,flags", [
    ("nn", dict(VEC_A="n", VEC_B="n", PAD_A=True, PAD_B=True)),
    ("tt", dict(VEC_A="t", VEC_B="t", PAD_A=True, PAD_B=True)),
])
def test_the_kernel_gets_the_hints_for_the_buffers(layout, flags):
    """lab.profile's recorder (meta tensors, nothing launched): at 1025^3 the lines of A and B
    are 1025 floats, so without realign there are no hints; with it the buffers have them, with
    PAD_* because 1025 is not a multiple of 4. C is not copied and keeps no hint."""
    from lab import profile as prof

    shape = (1025, 1025, 1025)
    plain = prof.triton_launch(parse_variants([STAGE])[0], shape)["meta"]
    assert (plain["VEC_A"], plain["VEC_B"], plain["VEC_C"]) == ("", "", "")
    assert "PAD_A" not in plain and "PAD_B" not in plain
    if layout == "nn":  # triton_launch builds row-major operands
        meta = prof.triton_launch(parse_variants([STAGE + ":realign=1"])[0], shape)["meta"]
        assert {k: meta[k] for k in flags} == flags and meta["VEC_C"] == ""
    else:
        from lab.operands import TRITON, describe
        from triton_kernels._common import recording

        module = _triton()
        M = N = K = 1025
        a = torch.empty((K, M), device="meta").t()
        b = torch.empty((N, K), device="meta").t()
        c = torch.empty((M, N), device="meta")
        with recording() as launches:
            module.prepare.inner(describe(a, b, c, TRITON), **_params(realign=True))
        captured = launches[-1][3]
        assert {k: captured[k] for k in flags} == flags and captured["VEC_C"] == ""


# ------------------------------------------------------------------- (e) errors unchanged


@cpu_only
def test_mismatched_shapes_are_the_same_one_sentence():
    a, b, c = torch.randn(5, 7), torch.randn(6, 4), torch.empty(5, 4)
    messages = []
    for realign in (False, True):
        with pytest.raises(LabError) as info:
            _prepare(a, b, c, realign=realign)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "inner dimensions differ" in messages[1]
    assert "\n" not in messages[1] and ". " not in messages[1].rstrip(".")
    with pytest.raises(LabError, match="C \\(out\\) must be 5x4"):
        _prepare(a, torch.randn(7, 4), torch.empty(4, 5), realign=True)


@cpu_only
def test_empty_problems_with_realign():
    a, b = torch.randn(3, 0), torch.randn(0, 5)
    c = torch.full((3, 5), float("nan"))
    _prepare(a, b, c, realign=True)()
    assert not c.any()  # K = 0: zeros, as torch.matmul
    _prepare(torch.randn(0, 4), torch.randn(4, 5), torch.empty(0, 5), realign=True)()


# ------------------------------------------------------------------- (f) registry and autotuner


@pytest.mark.parametrize("text,value", [("1", True), ("True", True), ("true", True),
                                        ("on", True), ("0", False), ("False", False)])
def test_the_registry_parses_realign(text, value):
    variant = parse_variants([f"{STAGE}:realign={text}"])[0]
    assert variant.params["realign"] is value
    assert variant.params_for("triton")["realign"] is value
    assert "realign" not in variant.params_for("cuda")
    assert variant.label == (f"{STAGE}:realign=1" if value else STAGE)


def test_the_registry_refuses_other_values():
    with pytest.raises(LabError, match="realign") as info:
        parse_variants([f"{STAGE}:realign=maybe"])
    assert "\n" not in str(info.value)


def _autotune(*args):
    return run_lab("lab.autotune", *args, timeout=300)


@pytest.mark.parametrize("spec", [f"{STAGE}:realign=True|False", f"{STAGE}:realign=1"])
def test_the_autotuner_dry_run_lists_realign(spec):
    r = _autotune("--stage", spec, "--backend", "triton", "--sizes", "1025", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "realign" in r.stdout
    if "|" in spec:
        assert re.search(r"^\s+realign\s+0\|1\b", r.stdout, re.M)  # both values in the space
    else:
        assert "realign=1" in r.stdout and "realign=0" not in r.stdout


# ------------------------------------------------------------------- (g) on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_realign_on_the_gpu(layout):
    """The compiled kernel (16-byte copies from the buffers, the mask rounded up to 4 into the
    zero padding) at odd and tuned-tile shapes, offset views, and a copy in every call."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tiles = [dict(), dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4,
                          num_stages=4),
             dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)]
    for M, N, K in [(1, 1, 1), (33, 17, 45), (1025, 1025, 1025), (515, 777, 301)]:
        a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", layout=layout)
        ref = chk.reference(a, b)
        for tile in tiles:
            c = torch.empty((M, N), device="cuda")
            launch = _triton().prepare(a, b, c, **_params(**tile, realign=True))
            result = chk.check(launch, c, ref, K)
            assert result.passed, (layout, M, N, K, tile, result.reason)
    # an offset A (base 4 bytes past 16) and new values in a second call
    M, N, K = 300, 203, 517
    a0, b = chk.make_inputs(M, N, K, 5, "cuda")
    a = torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a0)
    c = torch.empty((M, N), device="cuda")
    launch = _triton().prepare(a, b, c, **_params(realign=True))
    assert "A" in launch.realigned
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    a.mul_(-3.0)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


# ------------------------------------------------------- the one-launch copy (realign_copy_kernel)


def _buffers(*ops):
    from lab.operands import Operand
    from triton_kernels._realign import realign_buffer

    out = []
    for name, t in ops:
        op = Operand(name, t, t.shape[0], t.shape[1], *t.stride())
        out.append((realign_buffer(op), t))
    return out


@cpu_only
@pytest.mark.parametrize("a_src, b_src", [
    # row-major 1025-wide lines and a column-major operand (a transposed view)
    (lambda: torch.randn(37, 1025), lambda: torch.randn(130, 17).t()),
    # no unit stride at all (a strided slice) and a line shorter than one copy tile
    (lambda: torch.randn(70, 90)[::2, ::3], lambda: torch.randn(5, 3)),
    # 1 x 1 and a single long column
    (lambda: torch.randn(1, 1), lambda: torch.randn(300, 1)),
    # expanded inputs: every row the same (row stride 0), every column the same (column stride 0)
    (lambda: torch.randn(1, 77).expand(19, 77), lambda: torch.randn(33, 1).expand(33, 130)),
])
def test_one_launch_copies_both_operands_and_leaves_the_padding_zero(a_src, b_src):
    from triton_kernels._realign import copy_into_buffers

    a, b = a_src(), b_src()
    (ba, _), (bb, _) = pairs = _buffers(("A", a), ("B", b))
    copy_into_buffers(tuple((buf.tensor, user) for buf, user in pairs))()
    for buf, user in ((ba, a), (bb, b)):
        assert torch.equal(buf.tensor, user)
        pad = _padding_of(buf)
        assert pad.numel() == 0 or not pad.any()


@cpu_only
def test_one_launch_copies_a_single_operand_and_nothing_else():
    from triton_kernels._realign import copy_into_buffers

    a = torch.randn(33, 65)
    ((ba, _),) = _buffers(("A", a))
    other = ba.tensor.clone()
    copy_into_buffers(((ba.tensor, a),))()
    assert torch.equal(ba.tensor, a) and not torch.equal(other, a)
    empty = torch.randn(0, 7)
    ((be, _),) = _buffers(("B", empty))
    copy_into_buffers(((be.tensor, empty),))()  # no programs: nothing launched, no error


@cpu_only
def test_the_copy_tile_boundaries_are_exact():
    # sizes on and around the tile's edges (COPY_LINES x COPY_WIDTH): no element missed or doubled
    from triton_kernels._realign import COPY_LINES, COPY_WIDTH, copy_into_buffers

    for rows, cols in ((COPY_LINES, COPY_WIDTH), (COPY_LINES + 1, COPY_WIDTH - 1),
                       (COPY_LINES - 1, COPY_WIDTH + 1)):
        a = torch.arange(rows * cols, dtype=torch.float32).view(rows, cols)
        b = torch.arange(rows * cols, dtype=torch.float32).view(cols, rows).t()
        pairs = _buffers(("A", a), ("B", b))
        copy_into_buffers(tuple((buf.tensor, user) for buf, user in pairs))()
        assert all(torch.equal(buf.tensor, user) for buf, user in pairs)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("nn", "tt"))
def test_realign_at_a_long_k_on_the_gpu(layout):
    """A long, odd K: the copies and the kernel's 16-byte loads from the buffers stay within
    lab.check's K-aware bound."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N, K = 33, 65, 131073
    a, b = chk.make_inputs(M, N, K, 12, "cuda", layout=layout)
    c = torch.empty((M, N), device="cuda")
    launch = _triton().prepare(a, b, c, **_params(realign=True))
    assert "A" in launch.realigned
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, (layout, result.reason)
