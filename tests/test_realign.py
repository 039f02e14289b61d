"""Tests of `realign`, the Triton twins' copy into 16-byte aligned buffers: double_buffered, and
warptiling with and without split-K.

realign=True (triton_kernels/double_buffered.py and triton_kernels/warptiling.py; the machinery
they share is triton_kernels/_realign.py): an A or B whose leading dimension is not a multiple of
16 elements, whose base pointer is not 16-byte aligned, or that has no unit stride is copied, at
the start of every call (in warptiling before the split-K kernel and its reduction), into a
buffer allocated and zeroed once in prepare() (its own layout, leading dimension rounded up to 16
elements, 16-byte aligned storage); the kernel reads the buffer with the alignment hints on, and
PAD_A / PAD_B round its mask along the buffer's contiguous dimension (warptiling: its wrap at m
or n, and its ragged-k mask) up to a multiple of 4 (the zero padding fills in).

Every test runs for each `twin`: double_buffered, and warptiling with splitk = 1 and 3 (the long-K
GPU test: 1 and 16). Checked here under the Triton interpreter (CPU mode) unless said otherwise:
(a) results equal torch.matmul (lab.check, the fp32 threshold) on odd shapes in every layout, with
    the default tile, and on offset, sliced and strided views and strided C; split-K's C is still
    the ordered sum of its workspace slabs;
(b) only misaligned operands are copied (`launch.realigned`), aligned ones are read where they
    are, and realign=False copies nothing;
(c) the copy is made in every call, before both split-K kernels (values changed between two calls
    are what the second multiplies), kernel_only runs the kernel(s) on the buffers, and the
    buffers' padding stays zero;
(d) the kernel gets the hints for the buffers (VEC_* and PAD_*), recorded by a launcher stand-in
    in every layout and by lab.profile's launch recorder; warptiling compiled for sm_90 without a
    GPU (a subprocess without TRITON_INTERPRET; skipped where Triton cannot) copies with 16-byte
    cp.async in its K loop;
(e) operand errors are the same one sentence as without realign;
(f) the registry parses the parameter and the autotuner's dry run lists it (with split-K);
(g) `gpu`: the compiled kernels at odd, tuned-tile and long-K shapes (skipped without a GPU);
(h) the one-launch copy of both operands (realign_copy_kernel) on its own.
The double_buffered cases and (h) are in the fast tier (`pytest -m fast`), the warptiling ones
are not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
import torch

from lab import check as chk
from lab.base.errors import LabError
from lab.stages import parse_variants
from helpers import LAYOUTS, cpu_only, run_lab, run_python
from realign_helpers import offset_view, padding_of, triton_functions


@dataclass(frozen=True)
class Twin:
    """A Triton twin with realign, and its split-K count (None: a stage without split-K)."""
    stage: str
    splitk: int | None = None

    def __str__(self) -> str:
        return self.stage if self.splitk is None else f"{self.stage}-splitk{self.splitk}"

    @property
    def split(self) -> int:
        """The number of k-splits the kernel makes (1 without split-K)."""
        return self.splitk or 1

    @property
    def changes(self) -> dict:
        return {} if self.splitk is None else {"splitk": self.splitk}

    def params(self, **changes) -> dict:
        """The registry's Triton parameters with this twin's splitk and `changes`."""
        return triton_functions(self.stage)[0](**self.changes, **changes)

    def module(self):
        return triton_functions(self.stage)[1]()

    def prepare(self, a, b, c, **changes):
        """prepare() on the small tile (realign_helpers.SMALL) with `changes`."""
        return triton_functions(self.stage)[2](a, b, c, **self.changes, **changes)

    def spec(self, **changes) -> str:
        """The variant as lab.compare takes it, with `changes` first."""
        values = {**changes, **self.changes}
        return self.stage + (":" + ",".join(f"{k}={v}" for k, v in values.items()) if values
                             else "")


DB = Twin("double_buffered")
TWINS = (DB, Twin("warptiling", 1), Twin("warptiling", 3))


def cases(rows) -> list:
    """pytest.param of each (twin, *values) row, with an id; the double_buffered ones fast."""
    return [pytest.param(twin, *values, id="-".join([str(twin), *map(str, values)]),
                         marks=[pytest.mark.fast] if twin.stage == DB.stage else [])
            for twin, *values in rows]


each_twin = pytest.mark.parametrize("twin", cases((t,) for t in TWINS))


def _ordered_sum(launch, splitk, M, N):
    slabs = launch.workspace.view(splitk, M, N)
    total = slabs[0].clone()
    for s in range(1, splitk):
        total += slabs[s]  # fp32, in the order 0, 1, ..., like the reduction kernel
    return total


def _check_split_sum(twin: Twin, launch, c) -> None:
    """With split-K the reduction is untouched: C is the ordered sum of the workspace slabs."""
    if twin.split > 1:
        assert torch.equal(c, _ordered_sum(launch, twin.split, *c.shape))


# ------------------------------------------------------------------- (a) equal to torch.matmul

# Odd M, N and K in every leading dimension; K = 7: fewer k-tiles than splits. warptiling's
# shapes add the wrap of a column-major A or a row-major B at M or N rounded up to 4 and a ragged
# last k-tile (37x29x83), and K = 32 (EVEN_K).
ODD_SHAPES = {
    "double_buffered": [(33, 17, 45), (1, 1, 1), (65, 31, 7), (36, 40, 20)],
    "warptiling": [(33, 17, 45), (1, 1, 1), (65, 31, 7), (37, 29, 83), (30, 45, 32)],
}


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("twin,shape", cases((t, s) for t in TWINS for s in ODD_SHAPES[t.stage]))
def test_realign_matches_torch_in_every_layout(twin, shape, layout):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 7 * K, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = twin.prepare(a, b, c, realign=True)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{twin} {shape} {layout}: {result.reason}"
    # the leading dimensions (A: K in n, M in t; B: N in n, K in t) that are not multiples of 16
    lds = {"A": K if layout[0] == "n" else M, "B": N if layout[1] == "n" else K}
    copied = tuple(name for name, ld in lds.items() if ld % 16)
    assert launch.realigned == copied
    p = launch.kernel_problem
    for name, op, user in (("A", p.a, a), ("B", p.b, b)):
        assert (op.tensor.data_ptr() != user.data_ptr()) == (name in copied)
        assert op.ld % 16 == 0 and op.tensor.data_ptr() % 16 == 0
        assert op.row_major == (user.stride(1) == 1 or user.shape[1] == 1)  # its own layout
    _check_split_sum(twin, launch, c)


# The registry's defaults (128 x 128 x 32, GROUP_M 8) on a shape with edges in every dimension:
# one program per tile (and split), K not a multiple of BLOCK_K.
DEFAULT_TILE_CASES = {"double_buffered": ((65, 63, 17), "nn"), "warptiling": ((65, 63, 97), "tn")}


@cpu_only
@each_twin
def test_realign_with_the_default_tile(twin):
    (M, N, K), layout = DEFAULT_TILE_CASES[twin.stage]
    a, b = chk.make_inputs(M, N, K, seed=5, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = twin.module().prepare(a, b, c, **twin.params(realign=True))
    assert launch.realigned == ("A", "B")
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
@each_twin
def test_realign_on_offset_views(twin, layout):
    """A starts 1 element (4 bytes) past a 16-byte boundary with a leading dimension that is a
    multiple of 16; B is the same kind of view starting 16 elements in (64 bytes: aligned)."""
    M, N, K = 37, 29, 41
    a0, b0 = chk.make_inputs(M, N, K, seed=11, device="cpu")
    a = offset_view(M, K, 48, 1, col_major=layout[0] == "t")
    b = offset_view(K, N, 32 if layout[1] == "n" else 48, 16, col_major=layout[1] == "t")
    a.copy_(a0)
    b.copy_(b0)
    assert a.data_ptr() % 16 == 4 and b.data_ptr() % 16 == 0
    c = torch.empty((M, N))
    launch = twin.prepare(a, b, c, realign=True)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, f"{twin} {layout}: {result.reason}"
    assert launch.realigned == ("A",)  # B's lines and base are aligned: read where it is
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()


@cpu_only
@each_twin
def test_realign_on_sliced_and_strided_views(twin):
    """A sliced A whose rows are 50 floats apart and that starts at column 3 (neither its leading
    dimension nor its base aligned), and a B with no unit stride (every other row and column):
    both are copied, B into a row-major buffer. C is a whole matrix, then a sliced view whose
    neighbours must stay untouched (realign never copies C)."""
    M, N, K = 30, 21, 19
    a0, b0 = chk.make_inputs(M, N, K, seed=17, device="cpu")
    a = torch.full((M, 50), float("nan"))[:, 3:3 + K]
    a.copy_(a0)
    b = torch.full((2 * K, 2 * N), float("nan"))[::2, ::2]
    b.copy_(b0)
    big = torch.full((M, N + 5), -1.0)
    for c in (torch.empty((M, N)), big[:, 2:2 + N]):
        launch = twin.prepare(a, b, c, realign=True)
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, result.reason
        assert launch.realigned == ("A", "B")
        assert launch.kernel_problem.b.row_major and launch.kernel_problem.b.ld == 32
        assert launch.kernel_problem.c.tensor.data_ptr() == c.data_ptr()
    assert (big[:, :2] == -1).all() and (big[:, 2 + N:] == -1).all()


@cpu_only
@each_twin
def test_realign_with_a_strided_c(twin):
    """C is never copied by realign: a column-major C (a transposed view) and a sliced C are
    written where they are."""
    M, N, K = 23, 35, 18
    a, b = chk.make_inputs(M, N, K, seed=19, device="cpu")
    for c in (torch.empty((N, M)).t(), torch.empty((M, N + 5))[:, 2:2 + N]):
        launch = twin.prepare(a, b, c, realign=True)
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, result.reason
        assert launch.kernel_problem.c.tensor.data_ptr() == c.data_ptr()


# ------------------------------------------------------------------- (b) only what is misaligned


@cpu_only
@each_twin
def test_aligned_operands_are_not_copied(twin):
    M, N, K = 20, 48, 32  # A's rows are 32 floats, B's 48: multiples of 16, 16-byte bases
    a, b = chk.make_inputs(M, N, K, seed=23, device="cpu")
    c = torch.empty((M, N))
    launch = twin.prepare(a, b, c, realign=True)
    assert launch.realigned == ()
    assert launch.kernel_only is None  # the call is the kernel(s) alone
    assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # K = 33: a transposed A's leading dimension is M = 20 (misaligned), B's rows stay 48 floats
    a, b = chk.make_inputs(M, N, 33, seed=29, device="cpu", layout="tn")
    launch = twin.prepare(a, b, c, realign=True)
    assert launch.realigned == ("A",)
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), 33).passed
    a, b = chk.make_inputs(M, 40, 32, seed=31, device="cpu")  # N = 40: B's rows misaligned
    c = torch.empty((M, 40))
    launch = twin.prepare(a, b, c, realign=True)
    assert launch.realigned == ("B",)
    assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
    assert chk.check(launch, c, chk.reference(a, b), 32).passed


@cpu_only
@each_twin
def test_realign_off_copies_nothing(twin):
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=37, device="cpu")
    c = torch.empty((M, N))
    for launch in (twin.prepare(a, b, c), twin.prepare(a, b, c, realign=False)):
        assert launch.realigned == () and launch.kernel_only is None
        assert launch.kernel_problem.a.tensor.data_ptr() == a.data_ptr()
        assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
        if twin.split == 1:  # (split-K's workspace is set up in prepare())
            assert not getattr(launch, "setup_ms", None)
        assert chk.check(launch, c, chk.reference(a, b), K).passed


# ------------------------------------------------------------------- (c) a copy in every call


@cpu_only
@pytest.mark.parametrize("layout", ["nn", "tt"])
@each_twin
def test_the_copy_is_made_in_every_call(twin, layout):
    M, N, K = 33, 17, 45
    a, b = chk.make_inputs(M, N, K, seed=41, device="cpu", layout=layout)
    c = torch.empty((M, N))
    launch = twin.prepare(a, b, c, realign=True)
    assert launch.realigned == ("A", "B")
    assert launch.setup_ms is not None and launch.setup_ms >= 0  # buffers (and workspace): setup
    assert callable(launch.kernel_only)
    if twin.split > 1:  # the split-K launch's workspace is still there
        assert launch.workspace is launch.kernel_only.workspace
        assert launch.workspace.numel() == twin.split * M * N
    p = launch.kernel_problem
    for op in (p.a, p.b):  # zeroed in prepare(), before any call
        assert padding_of(op).numel() and not padding_of(op).any()
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    # new values in the user's tensors after prepare(): the next call multiplies them (so the
    # copy runs before the split-K kernel, and the reduction sums what that kernel made of them)
    a.mul_(-2.0).add_(0.5)
    b.copy_(torch.randn(K, N, generator=torch.Generator().manual_seed(43)))
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason
    _check_split_sum(twin, launch, c)
    # the kernel(s) alone read the buffers as the last call left them
    c.fill_(float("nan"))
    launch.kernel_only()
    assert chk.compare(c, chk.reference(a, b), K).passed
    for op in (p.a, p.b):  # the copies wrote the data, never the padding
        assert not padding_of(op).any()


# ------------------------------------------------------------------- (d) the hints the kernel gets


def _recorded(twin: Twin, layout, shape, **changes) -> list[dict]:
    """The meta-parameters prepare() hands each launcher() call (meta tensors, nothing
    launched), in the order of the calls (split-K: the reduction's, then the GEMM kernel's),
    with the kernel's name, its grid and its A and B arguments."""
    from lab.base.describe import describe
    from lab.base.needs import TRITON
    from triton_kernels._common import recording

    M, N, K = shape
    a = torch.empty((K, M), device="meta").t() if layout[0] == "t" else torch.empty(
        (M, K), device="meta")
    b = torch.empty((N, K), device="meta").t() if layout[1] == "t" else torch.empty(
        (K, N), device="meta")
    c = torch.empty((M, N), device="meta")
    with recording() as launches:
        twin.module().prepare.inner(describe(a, b, c, TRITON), **twin.params(**changes))
    return [dict(meta, kernel=getattr(kernel, "__name__", str(kernel)), grid=grid, a=args[0],
                 b=args[1]) for kernel, grid, args, meta in launches]


@pytest.mark.parametrize("layout", LAYOUTS)
@each_twin
def test_the_kernel_gets_the_hints_for_the_buffers(twin, layout):
    """At 1025^3 the lines of A and B are 1025 floats, so without realign there are no hints; with
    it the buffers have them (VEC_*: their layout, lines of 1040 floats), with PAD_* because 1025
    is not a multiple of 4. C is not copied and keeps no hint; the split-K reduction's launch is
    unchanged. lab.profile's recorder (row-major operands) sees the same hints."""
    shape = (1025, 1025, 1025)
    plain = _recorded(twin, layout, shape)[-1]
    assert (plain["VEC_A"], plain["VEC_B"], plain["VEC_C"]) == ("", "", "")
    assert "PAD_A" not in plain and "PAD_B" not in plain
    calls = _recorded(twin, layout, shape, realign=1)
    gemm = calls[-1]  # the GEMM kernel is launcher()'s last call (lab.profile captures it)
    flags = dict(VEC_A=layout[0], VEC_B=layout[1], PAD_A=True, PAD_B=True)
    assert {k: gemm[k] for k in flags} == flags and gemm["VEC_C"] == ""
    assert tuple(gemm["a"].stride()) == ((1, 1040) if layout[0] == "t" else (1040, 1))
    assert tuple(gemm["b"].stride()) == ((1, 1040) if layout[1] == "t" else (1040, 1))
    if twin.splitk is not None:
        assert gemm["SPLITK"] == twin.splitk
    if twin.split > 1:
        assert len(calls) == 2 and "PAD_A" not in calls[0] and calls[0]["SPLITK"] == twin.split
    if layout == "nn":  # lab.profile's triton_launch builds row-major operands
        from lab import profile as prof

        plain = prof.triton_launch(parse_variants([twin.spec()])[0], shape)["meta"]
        assert (plain["VEC_A"], plain["VEC_B"], plain["VEC_C"]) == ("", "", "")
        assert "PAD_A" not in plain and "PAD_B" not in plain
        meta = prof.triton_launch(parse_variants([twin.spec(realign=1)])[0], shape)["meta"]
        assert {k: meta[k] for k in flags} == flags and meta["VEC_C"] == ""


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
    """warptiling compiled for sm_90 without a GPU (lab.profile's path, row-major operands,
    1025^3, never run): without realign the K loop's copies are 4-byte LDGSTS and the ragged last
    k-tile's loads 4-byte LDG; with it, for splitk 1 and 3, every copy is a 16-byte cp.async
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


# ------------------------------------------------------------------- (e) errors unchanged


@cpu_only
@each_twin
def test_mismatched_shapes_are_the_same_one_sentence(twin):
    a, b, c = torch.randn(5, 7), torch.randn(6, 4), torch.empty(5, 4)
    messages = []
    for realign in (False, True):
        with pytest.raises(LabError) as info:
            twin.prepare(a, b, c, realign=realign)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "inner dimensions differ" in messages[1]
    assert "\n" not in messages[1] and ". " not in messages[1].rstrip(".")
    with pytest.raises(LabError, match="C \\(out\\) must be 5x4"):
        twin.prepare(a, torch.randn(7, 4), torch.empty(4, 5), realign=True)


@cpu_only
@each_twin
def test_empty_problems_with_realign(twin):
    a, b = torch.randn(3, 0), torch.randn(0, 5)
    c = torch.full((3, 5), float("nan"))
    twin.prepare(a, b, c, realign=True)()
    assert not c.any()  # K = 0: zeros, as torch.matmul
    twin.prepare(torch.randn(0, 4), torch.randn(4, 5), torch.empty(0, 5), realign=True)()


# ------------------------------------------------------------------- (f) registry and autotuner


@pytest.mark.parametrize("text,value", [("1", True), ("True", True), ("true", True),
                                        ("on", True), ("0", False), ("False", False)])
@each_twin
def test_the_registry_parses_realign(twin, text, value):
    variant = parse_variants([twin.spec(realign=text)])[0]
    assert variant.params["realign"] is value
    assert variant.params_for("triton")["realign"] is value
    assert "realign" not in variant.params_for("cuda")
    # the label names what differs from the defaults (warptiling's splitk is 0, automatic, so
    # its twins' 1 and 3 are both named)
    named = ([f"splitk={twin.splitk}"] if twin.splitk is not None else []) + \
        (["realign=1"] if value else [])
    assert variant.label == twin.stage + (":" + ",".join(named) if named else "")


@each_twin
def test_the_registry_refuses_other_values(twin):
    with pytest.raises(LabError, match="realign") as info:
        parse_variants([twin.spec(realign="maybe")])
    assert "\n" not in str(info.value)


# (--stage, patterns the dry run's output must hold (multi-line regular expressions), words it
# must not hold)
DRY_RUNS = [
    ("double_buffered:realign=True|False", [r"^\s+realign\s+0\|1\b"], []),  # both values
    ("double_buffered:realign=1", ["realign=1"], ["realign=0"]),
    ("warptiling:realign=1,splitk=1|3", ["realign=1", "splitk=3"], ["realign=0"]),
]


@pytest.mark.parametrize("spec,found,absent", [
    pytest.param(*row, id=row[0], marks=[pytest.mark.fast] if row[0].startswith(DB.stage) else [])
    for row in DRY_RUNS])
def test_the_autotuner_dry_run_lists_realign(spec, found, absent):
    r = run_lab("lab.autotune", "--stage", spec, "--backend", "triton", "--sizes", "1025",
                "--dry-run", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "realign" in r.stdout
    for pattern in found:
        assert re.search(pattern, r.stdout, re.M), (pattern, r.stdout[-2000:])
    for words in absent:
        assert words not in r.stdout, words


# ------------------------------------------------------------------- (g) on the GPU

# (shapes, tiles): odd and 1025^3 shapes on the default tile and, for double_buffered, two tuned
# tiles; the compiled kernels' 16-byte copies from the buffers and masks rounded up to 4 into
# the zero padding
GPU_CASES = {
    "double_buffered": ([(1, 1, 1), (33, 17, 45), (1025, 1025, 1025), (515, 777, 301)],
                        [dict(), dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4,
                                      num_stages=4),
                         dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)]),
    "warptiling": ([(1025, 1025, 1025), (515, 777, 301)], [dict()]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@each_twin
def test_realign_on_the_gpu(twin, layout):
    """The compiled kernel at odd and tuned-tile shapes, an offset view, and a copy in every
    call."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    shapes, tiles = GPU_CASES[twin.stage]
    for M, N, K in shapes:
        a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", layout=layout)
        ref = chk.reference(a, b)
        for tile in tiles:
            c = torch.empty((M, N), device="cuda")
            launch = twin.module().prepare(a, b, c, **twin.params(**tile, realign=True))
            assert launch.realigned == ("A", "B")
            result = chk.check(launch, c, ref, K)
            assert result.passed, (str(twin), layout, M, N, K, tile, result.reason)
    # an offset A (base 4 bytes past 16) and new values in a second call
    M, N, K = 300, 203, 517
    a0, b = chk.make_inputs(M, N, K, 5, "cuda", layout=layout)
    a = torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a0)
    c = torch.empty((M, N), device="cuda")
    launch = twin.module().prepare(a, b, c, **twin.params(realign=True))
    assert "A" in launch.realigned
    assert chk.check(launch, c, chk.reference(a, b), K).passed
    a.mul_(-3.0)
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


# (shape, seed) of a long, odd K: no 16-byte aligned lines in A, nor in B for tt
LONG_K = {"double_buffered": ((33, 65, 131073), 12), "warptiling": ((67, 45, 262147), 11)}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("nn", "tt"))
@pytest.mark.parametrize("twin", cases((t,) for t in (DB, Twin("warptiling", 1),
                                                      Twin("warptiling", 16))))
def test_realign_at_a_long_k_on_the_gpu(twin, layout):
    """The copies, the kernel's 16-byte loads from the buffers and the split-K sum stay within
    lab.check's K-aware bound."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    (M, N, K), seed = LONG_K[twin.stage]
    a, b = chk.make_inputs(M, N, K, seed, "cuda", layout=layout)
    c = torch.empty((M, N), device="cuda")
    launch = twin.module().prepare(a, b, c, **twin.params(realign=True))
    assert "A" in launch.realigned
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, (str(twin), layout, result.reason)


# ------------------------------------------------ (h) the one-launch copy (realign_copy_kernel)


def _buffers(*ops):
    from lab.base.problem import Operand
    from triton_kernels._realign import realign_buffer

    out = []
    for name, t in ops:
        op = Operand(name, t, t.shape[0], t.shape[1], *t.stride())
        out.append((realign_buffer(op), t))
    return out


@pytest.mark.fast
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
        pad = padding_of(buf)
        assert pad.numel() == 0 or not pad.any()


@pytest.mark.fast
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


@pytest.mark.fast
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
