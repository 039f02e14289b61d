"""64-bit offsets where an operand needs them, in every stage and both backends.

A problem whose operand spans 2^31 elements or more (its furthest element plus a 256-row and
-column margin: lab/base/index_range.py, span) is marked Problem.offsets64, and every launcher builds its
kernels with 64-bit offsets for it: CUDA with OFFSET64=1 (cuda_kernels/common.cuh, offset_t),
Triton with the constexpr OFFSET64 (triton_kernels/_common.py, wide_strides). Every other problem
runs the 32-bit build, which must stay the kernel measured in results/.

(a) describe() marks offsets64 exactly when a span exceeds INDEX_LIMIT ('meta' tensors and
    strided views: nothing is allocated), and a Problem made from one keeps or gains the mark.
(b) NVRTC (sm_90; wgmma sm_90a): the default builds without the flag are the builds recorded before
    the switch existed (registers, spills, SASS instruction count; NVRTC 13.0, pinned in
    pyproject.toml); with OFFSET64=1 every stage's build compiles without spills and is another
    build (wgmma.cu's addresses are 64-bit in every build: the same SASS).
(c) common.cuh's offsets past 2^31 on the CPU (g++): the arithmetic of both builds.
(d) The CUDA emulator (tests/cuda_emulator.py) runs OFFSET64=1 builds of several stages correctly.
(e) Every Triton twin with OFFSET64 on computes a small problem correctly under the interpreter.
(f) GPU: every stage x backend computes 2048x1x1048576 and 47000x47000x2 (fp32; 3xtf32 on float32
    tensors and bf16 for the tensor-core stages mma and wgmma, and also tf32 and fp8 for the TMA
    stages) against a float64 reference computed in chunks, and a normal shape still runs the
    32-bit build. Run alone (two 8-9 GB operands):
        python -m pytest -q -m gpu tests/test_offsets64.py
"""

from __future__ import annotations

import re
import subprocess
import types
from dataclasses import replace

import pytest
import torch

from helpers import cpu_only, fresh_build, new_emulator
from lab import check as chk
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.index_range import INDEX_LIMIT, INDEX_MARGIN, span
from lab.base.needs import CUDA, TRITON
from lab.base.padding import Padded
from lab.base.device import DEFAULT_SMS
from lab.stages import BACKENDS, STAGES, Variant, get_stage

MV = (2048, 1, 1_048_576)  # A: 2048 x 1048576, 2.1e9 elements
WIDE_C = (47_000, 47_000, 2)  # C: 2.2e9 elements


def _meta(rows: int, cols: int, trans: bool = False, dtype=torch.float32):
    """A rows x cols 'meta' tensor (shape and strides only), row-major or a transposed view."""
    if trans:
        return torch.empty((cols, rows), device="meta", dtype=dtype).t()
    return torch.empty((rows, cols), device="meta", dtype=dtype)


def _over(t) -> bool:
    """What the mark must be for one tensor: its span, margin included, beyond INDEX_LIMIT."""
    r, c = t.shape
    s0, s1 = t.stride()
    return span(r, c, s0 if r > 1 else c, s1 if c > 1 else 1) > INDEX_LIMIT


# ------------------------------------------------------------------ (a) the mark


CASES = [
    ("mv", MV, "nn"),
    ("wide C", WIDE_C, "nn"),
    ("mv, A transposed", MV, "tn"),
    ("largest 32-bit square", (46_213, 46_213, 46_213), "nn"),  # max_square_side()
    ("one more", (46_214, 46_214, 46_214), "nn"),
    ("4096", (4096, 4096, 4096), "tt"),
    ("tall B", (4, 4, 46_085 * 46_085 // 4), "nt"),
]


@pytest.mark.parametrize("name,shape,layout", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("needs", [CUDA, TRITON], ids=["cuda", "triton"])
def test_describe_marks_offsets64_exactly_when_a_span_exceeds_the_limit(name, shape, layout,
                                                                       needs):
    from lab.base.index_range import max_square_side

    assert max_square_side() == 46_213
    M, N, K = shape
    a, b, c = _meta(M, K, layout[0] == "t"), _meta(K, N, layout[1] == "t"), _meta(M, N)
    p = describe(a, b, c, needs)
    assert p.offsets64 == any(_over(t) for t in (a, b, c)), (name, p.offsets64)
    assert p.offsets64 == (name in ("mv", "wide C", "mv, A transposed", "one more", "tall B"))


def test_the_margin_and_the_strides_decide_not_the_element_count():
    """A view with a large row stride over few elements is marked; at the limit, the 256-row and
    -column margin decides."""
    view = torch.empty(16, 2**27 + 64, device="meta")[:, :8]  # 16 x 8, rows 2^27 + 64 apart
    p = describe(view, _meta(8, 3), _meta(16, 3), TRITON)
    assert p.offsets64 and p.a.s0 == 2**27 + 64
    # rows of 1024: the span is (rows + 256) * 1024 + 255 elements, margin included
    rows = (INDEX_LIMIT - (INDEX_MARGIN - 1)) // 1024 - INDEX_MARGIN
    assert span(rows, 1024, 1024, 1) <= INDEX_LIMIT < span(rows + 1, 1024, 1024, 1)
    for r, marked in ((rows, False), (rows + 1, True)):
        q = describe(_meta(r, 1024), _meta(1024, 8), _meta(r, 8), CUDA)
        assert q.offsets64 == marked, r
    assert rows * 1024 < 2**31 - 1 - 255 * 1024  # the margin, not the elements, decided


def test_a_problem_made_from_a_marked_one_keeps_the_mark_and_a_grown_one_gains_it():
    M, N, K = MV
    p = describe(_meta(M, K), _meta(K, N), _meta(M, N), CUDA)
    assert p.offsets64
    assert replace(p, setup_ms=1.0).offsets64  # replace() keeps it
    small = describe(_meta(37, 45), _meta(45, 29), _meta(37, 29), CUDA)
    assert not small.offsets64 and replace(small, offsets64=True).offsets64  # the tests' switch
    # zero padding to tile multiples can carry an operand past the limit: the padded problem is
    # marked by its own operands (here padded on the meta device: shapes only)
    side = 46_100  # 32-bit as it is; padded to 46,336 (a multiple of 256) it is not
    q = describe(_meta(side, side), _meta(side, side), _meta(side, side), CUDA)
    assert not q.offsets64
    padded = Padded(q, 256)
    assert padded.problem.M == 46_336 and padded.problem.offsets64


# The TMA stages (cuda_kernels/_tma.py) have no 64-bit build: TMA's coordinates are per dimension
# and their stores of C use 64-bit offsets in every build, as wgmma.cu's copies do.
TMA_STAGES = {"tma_wgmma", "warp_specialized", "persistent"}
NO_OFFSET64_BUILD = {"wgmma"} | TMA_STAGES


@pytest.mark.parametrize("shape,wide", [(MV, True), (WIDE_C, True), ((130, 67, 45), False)],
                         ids=["mv", "wide_c", "small"])
def test_every_cuda_launcher_builds_what_the_problem_needs(monkeypatch, shape, wide):
    """Each CUDA stage's own prepare (the launcher's code after the shared check), on 'meta'
    operands, with the launch itself recorded instead of loaded: every kernel it would launch is
    the OFFSET64=1 build exactly where the problem is marked (wgmma: one build for all sizes),
    and its grid is within CUDA's limits."""
    import cuda_kernels._build as build_module
    from lab.toolchain.nvrtc import MAX_GRID

    launched = []

    def record(build, grid, block, args, smem_dynamic=0):
        launched.append((build, tuple(grid)))
        return types.SimpleNamespace(step=(lambda *a: None, ()))

    import cuda_kernels._tma as tma_module

    def record_tma(build, grid, block, args, smem_dynamic, specs, cluster=1):
        return record(build, grid, block, args, smem_dynamic)

    monkeypatch.setattr(tma_module, "tma_launcher", record_tma)
    monkeypatch.setattr(tma_module, "max_active_clusters", lambda *a: DEFAULT_SMS // 2)
    for stage in STAGES:
        module = stage.module("cuda")
        monkeypatch.setattr(build_module, "launcher", record)
        if hasattr(module, "launcher"):
            monkeypatch.setattr(module, "launcher", record)
        precision = "fp32" if "fp32" in stage.precisions_for("cuda") else "bf16"
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        M, N, K = shape
        p = describe(_meta(M, K, dtype=dtype), _meta(K, N, dtype=dtype), _meta(M, N, dtype=dtype),
                     CUDA, precision)
        assert p.offsets64 == wide
        launched.clear()
        module.prepare.inner(p, **_params(stage))
        assert launched, stage.name
        for build, grid in launched:
            assert ("-DOFFSET64=1" in build.options) == (wide and stage.name not in
                                                          NO_OFFSET64_BUILD), (stage.name,
                                                                               build.kernel)
            dims = grid + (1,) * (3 - len(grid))
            assert all(g <= limit for g, limit in zip(dims, MAX_GRID)), (stage.name, grid)


# ------------------------------------------------------------------ (b) NVRTC

# Registers and SASS instructions of each stage's default build (4096^3, layout nn), and of a few
# variants, compiled by NVRTC 13.0 from the sources before OFFSET64 existed. Without the flag
# every build must be exactly these (the sources only gained casts to offset_t, an int there).
BEFORE = {
    ("naive", "fp32"): (29, 112),
    ("coalesced", "fp32"): (32, 216),
    ("tiled", "fp32"): (32, 296),
    ("tiled_padded", "fp32"): (32, 288),
    ("tiled_rect", "fp32"): (32, 256),
    ("blocktile_1d", "fp32"): (32, 336),
    ("blocktile_2d", "fp32"): (127, 1160),
    ("vectorized", "fp32"): (123, 1168),
    ("bank_conflicts", "fp32"): (127, 1168),
    ("warptiling", "fp32"): (221, 1592),
    # the lesson file (cuda_kernels/double_buffered.cu, written out since): the same FFMA, LDS, STS,
    # LDG, STG and BAR counts as the former file's 3400, 32 fewer integer instructions; measured
    # on an H200 at 4096^3 within 0.5% of the former build (results/2026-11-29-h200/
    # lessons-rerun.csv); the former build is variants/double_buffered.cu's
    ("double_buffered", "fp32"): (255, 3368),
    ("mma", "tf32"): (255, 2632),
    ("mma", "3xtf32"): (235, 2104),
    ("mma", "bf16"): (250, 2160),
    ("mma", "fp16"): (250, 2160),
    ("wgmma", "tf32"): (204, 4288),
    # the subnormal cure since (hopper.cuh's tf32x3_scale, docs/stages/wgmma.md): 236 registers
    # and 3224 instructions before it; TF32X3_SCALE=0 builds the split as it was
    ("wgmma", "3xtf32"): (242, 3568),
    ("wgmma", "bf16"): (204, 4360),
    ("wgmma", "fp16"): (204, 4360),
}
# (stage's launcher module, build() arguments) -> (registers, instructions)
VARIANTS_BEFORE = {
    ("vectorized", (("vec_a", False), ("vec_b", False), ("vec_c", False))): (127, 1104),
    ("warptiling", (("splitk", 8), ("layout", "tt"))): (225, 1664),
    ("double_buffered", (("pipeline", "cp_async"), ("stages", 3))): (255, 3448),
    ("mma", (("precision", "bf16"), ("align_a", 2), ("align_b", 2), ("vec_c", False))): (242, 2344),
    ("tiled_rect", (("rows", 16), ("cols", 16), ("layout", "tn"))): (32, 192),
}


def _sass_tools():
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    return _sass


def _instructions(build) -> list[str]:
    """The build's SASS instructions, without addresses and encodings."""
    out = []
    for line in _sass_tools().sass(build).splitlines():
        m = re.match(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(/\*.*)?$", line)
        if m:
            out.append(m.group(1))
    return out


def _params(stage) -> dict:
    return Variant(stage, stage.defaults()).params_for("cuda")


def _build(stage, precision: str, shape=(4096, 4096, 4096), offsets64: bool = False):
    """The build prepare() makes for contiguous operands of `shape` in layout nn, with or without
    the flag (the stage's own resolution of its automatic values, as its prepare() does)."""
    M, N, K = shape
    module, params = stage.module("cuda"), _params(stage)
    if not offsets64:
        return stage.offer("cuda").compile(params, M, N, K, "nn", precision)[0]
    if stage.name == "mma":
        cfg = module.launch_config(M, N, precision, DEFAULT_SMS, **params)
        return module.build(**cfg, **module.contiguous_flags(M, N, K, "nn", precision),
                            precision=precision, layout="nn", offsets64=True)
    if stage.name == "warptiling":
        return module.build(**module.resolve(params, M, N, K, precision, DEFAULT_SMS),
                            layout="nn", offsets64=True)
    if stage.name == "wgmma":  # no flag of its own: the same defines with OFFSET64=1 added
        from lab.toolchain.nvrtc import compile_kernel

        base = _build(stage, precision, shape)
        defines = {o[2:].split("=")[0]: o.split("=", 1)[1] for o in base.options
                   if o.startswith("-D") and not o.startswith(("-DTRANS_", "-DUNROLL"))}
        return compile_kernel(base.source, base.kernel, defines, arch=base.arch, offsets64=True)
    return module.build(**params, layout="nn", offsets64=True)


TC = {"mma", "wgmma"}
BUILD_CASES = [(s.name, p) for s in STAGES for p in s.precisions_for("cuda")
               if s.name in TC or p == "fp32"]


# stages registered after the switch existed (gemv) have no earlier build to compare with
BEFORE_CASES = [c for c in BUILD_CASES if c in BEFORE]


def _counts(build, expected=None) -> tuple[int, int]:
    """(registers, SASS instructions) of `build`, compiled afresh once where they differ from
    `expected` (BEFORE's entry by default): ptxas's output can differ on a busy machine
    (helpers.fresh_build)."""
    counts = (build.registers, len(_instructions(build)))
    if expected is None:
        return counts
    if counts != expected:
        fresh = fresh_build(build)
        counts = (fresh.registers, len(_instructions(fresh)))
    return counts


@cpu_only
@pytest.mark.parametrize("stage,precision", BEFORE_CASES,
                         ids=[f"{s}-{p}" for s, p in BEFORE_CASES])
def test_without_the_flag_the_build_is_the_one_measured_before(stage, precision):
    build = _build(get_stage(stage), precision)
    assert "-DOFFSET64=1" not in build.options and not any("OFFSET64" in o for o in build.options)
    assert _counts(build, BEFORE[(stage, precision)]) == BEFORE[(stage, precision)]
    assert build.spill_bytes == 0


@cpu_only
@pytest.mark.parametrize("stage,args", list(VARIANTS_BEFORE), ids=lambda x: str(x)[:40])
def test_without_the_flag_other_variants_are_unchanged_too(stage, args):
    build = get_stage(stage).module("cuda").build(**dict(args))
    assert _counts(build, VARIANTS_BEFORE[(stage, args)]) == VARIANTS_BEFORE[(stage, args)]


@cpu_only
@pytest.mark.parametrize("stage,precision", BUILD_CASES, ids=[f"{s}-{p}" for s, p in BUILD_CASES])
def test_the_64_bit_build_compiles_without_spills(stage, precision):
    st = get_stage(stage)
    plain, wide = _build(st, precision), _build(st, precision, offsets64=True)
    assert "-DOFFSET64=1" in wide.options
    assert wide.arch == ("sm_90a" if stage == "wgmma" else "sm_90")
    assert wide.spill_bytes == 0 and wide.stack_frame == 0 and wide.registers <= 255
    same = _instructions(plain) == _instructions(wide)
    # wgmma.cu addresses its operands with 64-bit offsets in every build (long long copier
    # offsets, 64-bit C strides): the define changes nothing there; everywhere else it must
    assert same == (stage == "wgmma"), f"{stage} {precision}: OFFSET64=1 gave the same SASS"


@cpu_only
@pytest.mark.parametrize("stage,precision", [("warptiling", "fp32"), ("mma", "bf16"),
                                             ("mma", "3xtf32")])
def test_the_matrix_vector_shape_builds_64_bit_without_spills(stage, precision):
    """What 2048x1x1048576 compiles (warptiling: a split-K build and its reduction; mma: the
    small-grid tile), with the flag on."""
    st = get_stage(stage)
    wide = _build(st, precision, MV, offsets64=True)
    assert "-DOFFSET64=1" in wide.options and wide.spill_bytes == 0
    if stage == "warptiling":
        r = st.module("cuda").resolve(_params(st), *MV, precision, DEFAULT_SMS)
        assert r["splitk"] > 1
        red = st.module("cuda").build_reduce(r["splitk"], True, offsets64=True)
        assert "-DOFFSET64=1" in red.options and red.spill_bytes == 0
        assert _instructions(red) != _instructions(st.module("cuda").build_reduce(r["splitk"]))


# ------------------------------------------------------------------ (c) the arithmetic

ARITHMETIC = r"""
#include <cstdio>
#include <vector>
static long failures = 0;
#define EXPECT(cond) do { if (!(cond)) { ++failures; \
    std::printf("FAILED line %d: %s\n", __LINE__, #cond); } } while (0)

struct Loader {  // records a loader's pointer steps (copy_ktile's advance)
    long long moved = 0;
    template <bool FULL> void copy(const float*, int, int, int, int, int) {}
    void advance(offset_t step) { moved += step; }
};

int main() {
    EXPECT(sizeof(offset_t) == (OFFSET64 ? 8 : 4));
    // 2048 x 1048576 row-major A (lda 2^20): row 2047, column 5 lies 2^31 - 2^20 + 5 elements on,
    // beyond INT_MAX only in the transposed walk below
    const int lda = 1 << 20, ldb = 3 << 20;
    const long long row = 2047, col = 5;
    const long long a = TRANS_A ? col * lda + row : row * lda + col;
    const long long b = TRANS_B ? col * ldb + row : row * ldb + col;
    if (OFFSET64 || (a <= 2147483647LL && b <= 2147483647LL)) {
        EXPECT((long long)A_OFF(2047, 5) == a);
        EXPECT((long long)B_OFF(2047, 5) == b);
    }
    if (OFFSET64) {
        // k-steps of a transposed A (BK * lda) and of a row-major B past 2^31
        EXPECT((long long)a_step<4096>(lda) == (TRANS_A ? 4096LL << 20 : 4096));
        EXPECT((long long)b_step<4096>(ldb) == (TRANS_B ? 4096 : 4096LL * (3 << 20)));
        Loader la, lb;
        float ring[64];
        copy_ktile<4096, 16>(la, lb, ring, true, 0, 0, 0, 64, 64, 8192, lda, ldb);
        EXPECT(la.moved == (long long)a_step<4096>(lda));
        EXPECT(lb.moved == (long long)b_step<4096>(ldb));
        // an element of the 47000 x 47000 C: row 46999, column 46999
        EXPECT((offset_t)46999 * 47000 + 46999 == 46999LL * 47000 + 46999);
    }
    std::printf("failures %ld\n", failures);
    return failures != 0;
}
"""


@pytest.fixture(scope="module")
def arithmetic_programs(tmp_path_factory):
    import cuda_emulator as ce

    return ce.common_cuh_programs(tmp_path_factory.mktemp("offsets64"), "offsets", ARITHMETIC,
                                  {(layout, wide): {**ce.layout_defines(layout),
                                                    "OFFSET64": int(wide)}
                                   for layout in ("nn", "tt") for wide in (False, True)})


@pytest.mark.parametrize("wide", [False, True], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_common_cuh_offsets_past_2_31(arithmetic_programs, layout, wide):
    out = subprocess.run([str(arithmetic_programs[(layout, wide)])], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "failures 0" in out.stdout, out.stdout + out.stderr


# ------------------------------------------------------------------ (d) the emulator

# (stage, layout, precision): OFFSET64=1 builds of the stages' defaults, in several layouts
EMULATED = [("naive", "nn", "fp32"), ("tiled", "tn", "fp32"), ("blocktile_2d", "nt", "fp32"),
            ("vectorized", "tt", "fp32"), ("warptiling", "nn", "fp32"),
            ("double_buffered", "nt", "fp32"), ("mma", "tn", "3xtf32")]


def _with_offsets64(build):
    """What the emulator reads of a Build (source, kernel, -D options), with OFFSET64=1 added:
    the 64-bit variant of exactly that build."""
    return types.SimpleNamespace(source=build.source, kernel=build.kernel,
                                 options=(*build.options, "-DOFFSET64=1"))


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = new_emulator(tmp_path_factory, "offsets64_emulator")
    for stage, layout, precision in EMULATED:  # start every g++ build at once
        st = get_stage(stage)
        build = st.offer("cuda").compile(_params(st), 130, 67, 45, layout, precision)[0]
        emu.start(_with_offsets64(build))
    return emu


@cpu_only
@pytest.mark.parametrize("stage,layout,precision", EMULATED, ids=[e[0] for e in EMULATED])
def test_64_bit_builds_are_correct_in_the_emulator(emulator, stage, layout, precision):
    st = get_stage(stage)
    for M, N, K in [(1, 1, 1), (37, 45, 29), (130, 67, 45)]:
        build, (grid, block, _) = st.offer("cuda").compile(_params(st), M, N, K, layout,
                                                           precision)
        lda = (M if layout[0] == "t" else K) + 4 + (-(M if layout[0] == "t" else K)) % 4
        ldb = (K if layout[1] == "t" else N) + 8 + (-(K if layout[1] == "t" else N)) % 4
        ldc = N + 4 + (-N) % 4
        ok, out = emulator.run(_with_offsets64(build), grid, block, M, N, K, lda, ldb, ldc)
        assert ok, f"{stage} {layout} {M}x{N}x{K} with OFFSET64=1:\n{out}"
        assert re.search(r"rel_err=\d", out)


# ------------------------------------------------------------------ (e) the Triton twins

# every twin in fp32 (bf16 where it has none), wgmma's K-major copy of B (3xtf32: kmajor_b on)
# and warptiling's split-K (its workspace and reduction)
TWINS = [(s, "fp32" if "fp32" in s.precisions_for("triton") else "bf16") for s in STAGES
         if s.offer("triton").interpreted]  # a Gluon twin runs on the GPU only
TWINS += [(get_stage("wgmma"), "3xtf32"), (get_stage("warptiling"), "fp32")]
TWIN_PARAMS = {len(TWINS) - 1: {"splitk": 2}}


@cpu_only
@pytest.mark.parametrize("i", range(len(TWINS)),
                         ids=[f"{s.name}-{p}" + ("-splitk" if i in TWIN_PARAMS else "")
                              for i, (s, p) in enumerate(TWINS)])
def test_triton_twins_with_64_bit_offsets_under_the_interpreter(i):
    from lab.toolchain.triton import recording

    stage, precision = TWINS[i]
    params = {**Variant(stage, stage.defaults()).params_for("triton"), **TWIN_PARAMS.get(i, {})}
    M, N, K = 37, 45, 29
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = chk.make_inputs(M, N, K, seed=64 + i, device="cpu", dtype=dtype)
    c = torch.empty((M, N), dtype=dtype)
    p = replace(describe(a, b, c, TRITON, precision), offsets64=True)
    module = stage.module("triton")
    with recording() as calls:  # every kernel of the launch gets the flag
        module.prepare.inner(p, **params)
    gemm = [meta for kernel, _, _, meta in calls if "reduce" not in kernel.fn.__name__]
    assert gemm and all(meta.get("OFFSET64") is True for meta in gemm), gemm
    result = chk.check(module.prepare.inner(p, **params), c, chk.reference(a, b), K, precision)
    assert result.passed, f"{stage.name} {precision}: {result.reason}"


# ------------------------------------------------------------------ refusals

def test_what_cannot_run_is_refused_in_one_sentence():
    from lab.base.index_range import SIZE_LIMIT, check_index_range
    from lab.toolchain.nvrtc import check_grid

    # check_operands' index check: sizes and strides, never the span
    check_index_range("A", *MV[::2], MV[2], 1, "stage tiled (cuda)")
    check_index_range("C", 47_000, 47_000, 47_000, 1, "stage tiled (cuda)")
    with pytest.raises(LabError) as info:
        check_index_range("C", SIZE_LIMIT + 1, 1, 1, 1, "stage tiled (cuda)")
    assert "32-bit integers" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(LabError, match="strides up to"):  # rows 2^31 apart
        check_index_range("A", 2, 3, 2**31, 1, "stage tiled (cuda)")
    check_grid((2**31 - 1, 65535, 65535), "matmul_naive")
    for grid in [(2**31, 1, 1), (1, 65536, 1), (1, 1, 65536)]:
        with pytest.raises(LabError) as info:
            check_grid(grid, "matmul_warptiling")
        message = str(info.value)
        assert "warptiling or mma" in message and "\n" not in message, message


@pytest.mark.parametrize("shape", [MV, WIDE_C], ids=["mv", "wide_c"])
def test_the_two_shapes_fit_every_stage_grid(shape):
    """Every stage's grid for the two shapes is within CUDA's limits: the CUDA geometry of the
    resolved parameters (Offer.compile), and every launch a Triton twin's prepare() records
    ('meta' tensors, in the precision the GPU test runs)."""
    from lab.toolchain.nvrtc import MAX_GRID
    from lab.toolchain.triton import recording

    M, N, K = shape
    for stage in STAGES:
        for backend in BACKENDS:
            precision = "fp32" if "fp32" in stage.precisions_for(backend) else "bf16"
            if backend == "cuda":
                _, (grid, _, _) = stage.offer("cuda").compile(_params(stage), M, N, K, "nn",
                                                              precision)
                grids = [grid]
            else:
                dtype = torch.bfloat16 if precision == "bf16" else torch.float32
                p = describe(_meta(M, K, dtype=dtype), _meta(K, N, dtype=dtype),
                             _meta(M, N, dtype=dtype), TRITON, precision)
                assert p.offsets64
                with recording() as calls:
                    stage.module("triton").prepare.inner(
                        p, **Variant(stage, stage.defaults()).params_for("triton"))
                grids = [g for _, g, _, _ in calls]
                assert grids, stage.name
            for grid in grids:
                dims = tuple(grid) + (1,) * (3 - len(grid))
                assert all(g <= limit for g, limit in zip(dims, MAX_GRID)), (stage.name, grid)


# ------------------------------------------------------------------ (f) on the GPU

# the TMA stages also in tf32 (persistent's nn: C^T = B^T A^T stored from registers) and fp8
# (e4m3 operands with scales, a bf16 C)
GPU_CASES = [(s.name, b, p) for s in STAGES for b in BACKENDS
             for p in (("3xtf32", "bf16") + (("tf32", "fp8") if s.name in TMA_STAGES else ())
                       if s.name in TC | TMA_STAGES else ("fp32",))
             if p in s.precisions_for(b)]


def _operand_dtype(precision: str):
    return {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}.get(precision, torch.float32)


def _sample(n: int, count: int, seed: int) -> torch.Tensor:
    """`count` indices below n: both edges and random ones between (sorted, distinct)."""
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, n, (count,), generator=gen)
    return torch.unique(torch.cat([torch.tensor([0, 1, n - 2, n - 1]), picks])).cuda()


@pytest.fixture(scope="module",
                params=[("mv", torch.float32), ("mv", torch.bfloat16), ("wide_c", torch.float32),
                        ("wide_c", torch.bfloat16), ("mv", torch.float8_e4m3fn),
                        ("wide_c", torch.float8_e4m3fn)],
                ids=["mv-fp32", "mv-bf16", "wide_c-fp32", "wide_c-bf16", "mv-fp8", "wide_c-fp8"])
def big(request):
    """The operands of one shape and dtype on the GPU, and the float64 reference of what is
    checked: every row of the matrix-vector product (in chunks of 128 rows: 1 GiB of float64),
    and sampled rows and columns of the 47000 x 47000 C."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    name, dtype = request.param
    M, N, K = MV if name == "mv" else WIDE_C
    scales, factor = None, 1.0
    if dtype == torch.float8_e4m3fn:  # e4m3 with per-tensor scales (lab.check)
        a, b, sa, sb = chk.make_scaled_inputs(M, N, K, 2024, "cuda")
        scales, factor = (sa, sb), sa.item() * sb.item()
    else:
        a, b = chk.make_inputs(M, N, K, seed=2024, device="cuda", dtype=dtype)
    if name == "mv":
        ref = torch.cat([a[i:i + 128].double() @ b.double() for i in range(0, M, 128)]) * factor
        yield dict(name=name, shape=(M, N, K), a=a, b=b, ref=ref, scales=scales)
    else:
        rows, cols = _sample(M, 60, 1), _sample(N, 60, 2)
        yield dict(name=name, shape=(M, N, K), a=a, b=b, rows=rows, cols=cols, scales=scales,
                   ref_rows=a[rows].double() @ b.double() * factor,
                   ref_cols=a.double() @ b[:, cols].double() * factor)
    del a, b
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("stage,backend,precision", GPU_CASES,
                         ids=[f"{s}-{b}-{p}" for s, b, p in GPU_CASES])
def test_past_2_31_elements_on_the_gpu(big, stage, backend, precision):
    dtype = _operand_dtype(precision)
    if big["a"].dtype != dtype:
        pytest.skip("another dtype's operands")
    st = get_stage(stage)
    M, N, K = big["shape"]
    params = Variant(st, st.defaults()).params_for(backend)
    c = torch.empty((M, N), device="cuda",
                    dtype=torch.bfloat16 if precision == "fp8" else dtype)
    scales = {} if big["scales"] is None else dict(zip(("scale_a", "scale_b"), big["scales"]))
    launch = st.module(backend).prepare(big["a"], big["b"], c, precision=precision, **params,
                                        **scales)
    assert launch.problem.offsets64
    if backend == "cuda" and stage not in NO_OFFSET64_BUILD:
        assert "-DOFFSET64=1" in launch.build.options
    c.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    assert torch.isfinite(c).all().item(), f"{stage} {backend}: unwritten or non-finite elements"
    if big["name"] == "mv":
        checks = [(c, big["ref"])]
    else:
        checks = [(c[big["rows"]], big["ref_rows"]), (c[:, big["cols"]], big["ref_cols"])]
    del c
    for got, ref in checks:
        result = chk.compare(got, ref, K, precision)
        assert result.passed, f"{stage} {backend} {precision} {big['name']}: {result.reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage,backend,precision", GPU_CASES,
                         ids=[f"{s}-{b}-{p}" for s, b, p in GPU_CASES])
def test_a_normal_shape_runs_the_32_bit_build(stage, backend, precision):
    st = get_stage(stage)
    M, N, K = 1025, 1000, 257
    a, b, scales = chk.inputs_for(precision, M, N, K, 7, "cuda")
    c = torch.empty((M, N), device="cuda",
                    dtype=torch.bfloat16 if precision == "fp8" else a.dtype)
    params = Variant(st, st.defaults()).params_for(backend)
    given = {} if scales is None else dict(zip(("scale_a", "scale_b"), scales))
    launch = st.module(backend).prepare(a, b, c, precision=precision, **params, **given)
    assert not launch.problem.offsets64
    if backend == "cuda":
        assert not any("OFFSET64" in o for o in launch.build.options)
    result = chk.check(launch, c, chk.reference(a, b, scales), K, precision)
    assert result.passed, f"{stage} {backend} {precision}: {result.reason}"
