"""Any tensor in, the right answer out (CPU tests).

- lab/base/problem.py: how each kind of view is described, the column-major C turned into C^T = B^T
  A^T, the copies made for operands with no unit stride, and every refusal (one sentence);
- lab.matmul, the Python API: errors, empty problems, out= views;
- every Triton stage under the interpreter on every layout and on offset / sliced / transposed
  views of A, B and C;
- every CUDA stage, run on the CPU by the emulator (tests/cuda_emulator.py) in every layout with
  leading dimensions larger than the widths.
"""

from __future__ import annotations

import re

import pytest
import torch

from helpers import LAYOUTS, cpu_only
from lab import LabError, check as chk, matmul
from lab.base.describe import describe
from lab.base.index_range import max_square_side
from lab.base.needs import CUDA, TRITON
from lab.base.problem import Operand
from lab.stages import STAGES, Variant
from stage_sets import FP32_CASES, FP32_CUDA, FP32_TRITON  # noqa: F401

pytestmark = cpu_only



def _one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message.rstrip("."), message


# ------------------------------------------------------------------ describing operands


def test_row_major_column_major_and_strided_views_are_told_apart():
    x = torch.empty(6, 10)
    assert (Operand.of("A", x).letter, Operand.of("A", x).ld) == ("n", 10)
    assert (Operand.of("A", x[:, :7]).letter, Operand.of("A", x[:, :7]).ld) == ("n", 10)
    t = torch.empty(10, 6).t()
    assert (Operand.of("A", t).letter, Operand.of("A", t).ld) == ("t", 6)
    assert Operand.of("A", x[::2, ::2]).letter == "s"
    # size-1 dimensions: their stride is never used, so 1 x n and n x 1 are both row-major
    assert Operand.of("A", torch.empty(5, 1).t()).letter == "n"
    assert Operand.of("A", torch.empty(1, 5).t()).letter == "n"
    assert Operand.of("A", torch.empty(7, 1)[::3]).letter == "n"


def test_a_column_major_c_becomes_the_transposed_problem_without_a_copy():
    a, b = torch.empty(5, 7), torch.empty(7, 3)
    c = torch.empty(3, 5).t()
    p = describe(a, b, c, CUDA)
    assert p.swapped and (p.M, p.N, p.K) == (3, 5, 7)
    assert p.layout == "tt" and p.c.row_major and p.c.tensor.data_ptr() == c.data_ptr()
    assert p.a.tensor.data_ptr() == b.data_ptr() and p.b.tensor.data_ptr() == a.data_ptr()
    assert p.setup_ms == 0.0


def test_an_operand_with_no_unit_stride_is_copied_once_for_cuda_but_not_for_triton():
    base = torch.randn(10, 14)
    a = base[::2, ::2]  # 5 x 7, strides (28, 2)
    b, c = torch.randn(7, 3), torch.empty(5, 3)
    p = describe(a, b, c, CUDA)
    assert p.a.row_major and p.a.tensor.data_ptr() != a.data_ptr() and p.setup_ms > 0
    assert torch.equal(p.a.tensor, a)
    q = describe(a, b, c, TRITON)
    assert q.a.tensor.data_ptr() == a.data_ptr() and (q.a.s0, q.a.s1) == (28, 2)


def test_a_c_with_no_unit_stride_is_written_through_a_buffer_inside_the_call():
    a, b = torch.randn(4, 6), torch.randn(6, 5)
    c = torch.empty(8, 10)[::2, ::2]
    p = describe(a, b, c, CUDA)
    assert p.copy_back is not None and p.c.row_major and p.copy_back[1] is c


# ------------------------------------------------------------------ refusals, one sentence each

BAD = [
    ("not a tensor", lambda: ([[1.0]], torch.empty(1, 1), None), "torch.Tensor"),
    ("1-D", lambda: (torch.empty(4), torch.empty(4, 2), None), "2-D"),
    ("3-D", lambda: (torch.empty(2, 3, 4), torch.empty(4, 2), None), "2-D"),
    ("inner dims", lambda: (torch.empty(3, 4), torch.empty(5, 2), None), "inner dimensions"),
    ("dtype", lambda: (torch.empty(3, 4, dtype=torch.float64), torch.empty(4, 2), None), "float32"),
    ("int", lambda: (torch.ones(3, 4, dtype=torch.int32), torch.empty(4, 2), None), "float32"),
    ("out shape", lambda: (torch.empty(3, 4), torch.empty(4, 2), torch.empty(2, 3)), "3x2"),
    ("out dtype", lambda: (torch.empty(3, 4), torch.empty(4, 2),
                           torch.empty(3, 2, dtype=torch.float16)), "float32"),
    ("out expanded", lambda: (torch.empty(3, 4), torch.empty(4, 2),
                              torch.empty(1, 2).expand(3, 2)), "share memory"),
    ("out aliases A", lambda: (lambda x: (x, torch.empty(4, 4), x))(torch.empty(4, 4)), "shares memory"),
    ("out overlaps B", lambda: (lambda x: (torch.empty(4, 4), x[:, :4], x[:, 2:]))(torch.empty(4, 6)),
     "shares memory"),
]


@pytest.mark.parametrize("what,make,words", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_the_api_refuses_bad_operands_in_one_sentence(what, make, words, backend):
    a, b, out = make()
    with pytest.raises(LabError) as info:
        matmul(a, b, stage="tiled", backend=backend, out=out)
    message = str(info.value)
    _one_sentence(message)
    assert words in message, message


def test_a_cuda_stage_refuses_cpu_tensors():
    with pytest.raises(LabError, match="CUDA GPU"):
        matmul(torch.randn(3, 4), torch.randn(4, 2), stage="naive", backend="cuda")


def test_prepare_itself_refuses_mismatched_shapes_before_anything_is_written():
    from triton_kernels import tiled

    a, b = torch.randn(8, 5), torch.randn(6, 8)
    c = torch.full((8, 8), 7.0)
    with pytest.raises(LabError, match="inner dimensions"):
        tiled.prepare(a, b, c)
    with pytest.raises(LabError, match="must be 8x9"):
        tiled.prepare(a, torch.randn(5, 9), c)
    assert (c == 7.0).all()


def test_only_sizes_and_strides_beyond_32_bit_integers_are_refused():
    """Past 2^31 elements an operand gets 64-bit offsets (tests/test_offsets64.py); what stays
    refused is a size or a stride the kernels cannot take as a 32-bit integer."""
    from lab.base.index_range import SIZE_LIMIT, check_index_range
    from lab.shapes import parse_sizes

    check_index_range("C", 50_000, 50_000, 50_000, 1, "stage tiled (cuda)")  # 2.5e9: 64-bit
    check_index_range("A", 2048, 1_048_576, 1_048_576, 1, "stage tiled (cuda)")
    for dims in [(SIZE_LIMIT + 1, 1, 1, 1), (3, 2, 2**31, 1), (2, 3, 1, 2**31)]:
        with pytest.raises(LabError) as info:
            check_index_range("A", *dims, "stage tiled (cuda)")
        message = str(info.value)
        _one_sentence(message)
        assert "32-bit" in message and "stage tiled (cuda): A is" in message, message
    check_index_range("A", 1, 3, 2**40, 1, "stage tiled (cuda)")  # a 1-row stride is never used
    assert parse_sizes("50000x50000x4") and parse_sizes("2048x1x1048576")
    with pytest.raises(LabError, match="32-bit"):
        parse_sizes(f"{SIZE_LIMIT + 1}x1x1")


def test_the_largest_32_bit_square_and_one_more():
    from lab.base.index_range import fits_32bit

    n = max_square_side()
    assert fits_32bit(n, n, n, 1) and not fits_32bit(n + 1, n + 1, n + 1, 1)
    assert 46_000 < n < 46_341


def test_unknown_stage_backend_and_parameters_are_one_sentence():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    for kwargs, words in [(dict(stage="nope"), "unknown stage"),
                          (dict(stage="tiled", backend="hip"), "unknown backend"),
                          (dict(stage="tiled", backend="triton", tile=7), "takes one of"),
                          (dict(stage="tiled", backend="triton", tile=16.0), "takes one of"),
                          (dict(stage="tiled", backend="cuda", unroll=1), "takes one of"),
                          (dict(stage="tiled", backend="triton", BM=64), "no parameter"),
                          (dict(stage="tiled", backend="cuda", num_warps=4), "no parameter")]:
        with pytest.raises(LabError) as info:
            matmul(a, b, **kwargs)
        _one_sentence(str(info.value))
        assert words in str(info.value)


# ------------------------------------------------------------------ the API computes


def test_the_api_returns_c_for_triton_stages_on_cpu_tensors():
    a, b = chk.make_inputs(17, 9, 33, seed=1, device="cpu")
    c = matmul(a, b, stage="tiled", backend="triton", tile=16)
    assert c.shape == (17, 9) and chk.compare(c, chk.reference(a, b), 33).passed


@pytest.mark.parametrize("M,N,K", [(0, 5, 3), (4, 0, 3), (0, 0, 0), (4, 5, 0)])
def test_empty_problems_give_what_torch_matmul_gives(M, N, K):
    a, b = torch.randn(M, K), torch.randn(K, N)
    out = torch.full((M, N), float("nan"))
    c = matmul(a, b, stage="vectorized", backend="triton", out=out)
    assert c is out and c.shape == (M, N)
    assert torch.equal(c, torch.matmul(a, b))  # zeros when K = 0


def test_the_api_writes_into_a_sliced_out_and_leaves_the_rest_alone():
    a, b = chk.make_inputs(20, 12, 9, seed=2, device="cpu")
    big = torch.full((24, 16), -1.0)
    out = big[2:22, 3:15]
    matmul(a.t().contiguous().t(), b, stage="blocktile_2d", backend="triton", out=out, BM=32,
           BN=32, BK=16, num_warps=4)
    assert chk.compare(out, chk.reference(a, b), 9).passed
    mask = torch.ones_like(big, dtype=torch.bool)
    mask[2:22, 3:15] = False
    assert (big[mask] == -1.0).all()


def test_broadcast_inputs_and_tensors_that_require_grad():
    """expand()ed A and B (stride 0: one row or column shared) are legal inputs; autograd flags
    do not matter to a kernel."""
    # seeded: every element of C is one dot product of 24 terms, and an unlucky draw whose terms
    # cancel can leave fp32's rounding above the threshold (1.17e-5 against 1.0e-5 happened once)
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(1, 24, generator=gen)
    a = row.expand(10, 24)  # every row of A is the same
    b = torch.randn(24, 1, generator=gen).expand(24, 7).requires_grad_(False)
    ref = a.double() @ b.double()
    for stage in ("naive", "tiled", "vectorized"):
        c = matmul(a, b, stage=stage, backend="triton")
        assert chk.compare(c, ref, 24).passed, stage
    g = torch.randn(9, 5, requires_grad=True)
    c = matmul(g, torch.randn(5, 4), stage="blocktile_1d", backend="triton", BM=32, BN=32, BK=16,
               num_warps=4)
    assert c.shape == (9, 4) and not c.requires_grad


# ------------------------------------------------------------------ every Triton stage


def _views(M, N, K, kind, seed):
    """(a, b, c, ref) for a kind of operand layout / view; the values are the same random
    matrices whatever the layout."""
    a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu")
    ref = chk.reference(a, b)
    c = torch.empty(M, N)
    if kind in LAYOUTS:
        a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu", layout=kind)
        if kind == "tt":  # and C transposed too
            c = torch.empty(N, M).t()
    elif kind == "offset":  # storage offsets that break 16-byte alignment
        a = torch.empty(M * K + 1)[1:].view(M, K).copy_(a)
        b = torch.empty(K * N + 3)[3:].view(K, N).copy_(b)
        c = torch.empty(M * N + 1)[1:].view(M, N)
    elif kind == "sliced":  # row strides larger than the widths, C a slice of a bigger matrix
        a = torch.empty(M, K + 5)[:, 2:K + 2].copy_(a)
        b = torch.empty(K + 1, N + 7)[1:, :N].copy_(b)
        c = torch.empty(M + 2, N + 3)[1:M + 1, 3:]
    elif kind == "strided":  # no unit stride at all
        a = torch.empty(2 * M, 2 * K)[::2, ::2].copy_(a)
        c = torch.empty(M, 3 * N)[:, ::3]
    return a, b, c, ref


KINDS = (*LAYOUTS, "offset", "sliced", "strided")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stage", FP32_TRITON, ids=lambda s: s.name)
def test_triton_stage_on_every_layout_and_view(stage, kind):
    M, N, K = 19, 35, 41
    a, b, c, ref = _views(M, N, K, kind, seed=len(kind) + len(stage.name))
    params = Variant(stage, stage.defaults()).params_for("triton")
    launch = stage.module("triton").prepare(a, b, c, **params)
    result = chk.check(launch, c, ref, K)
    assert result.passed, f"{stage.name} {kind}: {result.reason}"


# ------------------------------------------------------------------ every CUDA stage, emulated


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    from cuda_emulator import Emulator, compiler

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    emu = Emulator(tmp_path_factory.mktemp("layouts"))
    for stage in EMULATED:  # start every compile at once; the 2 cores work through them
        for layout in LAYOUTS:
            emu.start(_cuda_build(stage, layout))
    return emu


def _float_precision(stage) -> str:
    """The precision a stage's CUDA kernel computes in on float32 operands (fp32, or 3xtf32 for
    a tensor-core stage): what the emulator's float32 program feeds it."""
    offered = stage.precisions_for("cuda")
    return next(p for p in FLOAT32_PRECISIONS if p in offered)


def _cuda_build(stage, layout):
    """The build prepare() would use for a large problem (the stage's default tiles), through the
    stage's OFFER.compile."""
    params = Variant(stage, stage.defaults()).params_for("cuda")
    return stage.offer("cuda").compile(params, 4096, 4096, 4096, layout, _float_precision(stage))[0]


# The emulator runs C++ on the CPU on float32 operands: kernels built for sm_90a (Hopper's wgmma
# and TMA instructions) have no CPU model, and a stage with no precision that reads float32
# operands (decode: bf16, fp16, fp8) has no program here, so those stages are checked on the GPU.
FLOAT32_PRECISIONS = ("fp32", "3xtf32", "tf32")
EMULATED = [s for s in STAGES
            if any(p in s.precisions_for("cuda") for p in FLOAT32_PRECISIONS)
            and _cuda_build(s, "nn").arch != "sm_90a"]


def _emulated_shapes(stage):
    module = stage.module("cuda")
    if hasattr(module, "Padded"):  # the kernel runs on padded sizes: tile and K-step multiples
        return [(32, 64, 64), (96, 32, 128)]
    return [(1, 1, 1), (37, 45, 29), (130, 67, 33)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stage", EMULATED, ids=lambda s: s.name)
def test_cuda_stage_on_every_layout_emulated(emulator, stage, layout):
    params = Variant(stage, stage.defaults()).params_for("cuda")
    build = _cuda_build(stage, layout)
    assert f"-DTRANS_A={int(layout[0] == 't')}" in build.options
    assert f"-DTRANS_B={int(layout[1] == 't')}" in build.options
    for M, N, K in _emulated_shapes(stage):
        # leading dimensions larger than the widths (multiples of 4, so 16-byte lines stay legal)
        lda = (M if layout[0] == "t" else K) + 4 + (-(M if layout[0] == "t" else K)) % 4
        ldb = (K if layout[1] == "t" else N) + 8 + (-(K if layout[1] == "t" else N)) % 4
        ldc = N + 4 + (-N) % 4
        # this problem's build and geometry, as prepare() resolves them (the same build as the
        # fixture's wherever the stage has no size-dependent automatic values)
        build, (grid, block, _) = stage.offer("cuda").compile(params, M, N, K, layout,
                                                              _float_precision(stage))
        ok, out = emulator.run(build, grid, block, M, N, K, lda, ldb, ldc)
        assert ok, f"{stage.name} {layout} {M}x{N}x{K}:\n{out}"
        assert re.search(r"rel_err=\d", out)


CASES = FP32_CASES


@pytest.mark.parametrize("stage,backend", CASES, ids=[f"{s.name}-{b}" for s, b in CASES])
def test_every_prepare_refuses_bad_operands_before_writing(stage, backend):
    """Each stage's own prepare() (not only lab.matmul) goes through the shared check: one
    sentence, and C untouched."""
    module = stage.module(backend)
    params = Variant(stage, stage.defaults()).params_for(backend)
    a = torch.randn(100, 70)
    c = torch.full((100, 100), 7.0)
    bad = [
        ((a, a, c), "inner dimensions"),  # 100x70 @ 100x70
        ((a, torch.randn(70, 90), c), "must be 100x90"),
        ((a.double(), torch.randn(70, 100).double(), c), "float32"),
        ((a, torch.randn(70, 100), c[:, :99]), "must be 100x100"),
        ((a[0], torch.randn(70, 100), c), "2-D"),
    ]
    for args, words in bad:
        with pytest.raises(LabError) as info:
            module.prepare(*args, **params)
        _one_sentence(str(info.value))
        assert words in str(info.value), (words, str(info.value))
    assert (c == 7.0).all()
