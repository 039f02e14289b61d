"""Tests of the gemv stage: thin products, both backends (CPU; `gpu`-marked ones at the end).

(a) NVRTC (sm_90, no GPU): matmul_gemv in every layout x precision, with 32- and 64-bit offsets,
    builds without spills or stack, and the OFFSET64=1 build is another build; the split-K sum
    for every split; the matrix-vector builds read A and B with 16-byte loads (LDG.E.128).
(b) The CUDA emulator (tests/cuda_emulator.py: g++, ASan/UBSan, CUDA threads as fibers) runs
    matmul_gemv of cuda_kernels/variants/gemv.cu (every case; tests/test_lessons_gemv.py runs the
    lesson, cuda_kernels/gemv.cu) with its own main() in fp32, bf16 and fp16, unsplit and split:
    the rows kernel (row-major A: every LANES regime, ROWS and NCOL, the ldb == 1 vector path of
    a K x 1 B, unaligned lines read one element at a time) and the columns kernel (column-major
    A: blocks inside and across M's edge); N = 1, 3, 17; K not a multiple of the 16-byte vector.
    It checks C against a float64 reference of the (rounded) inputs, that the gaps between rows of
    C stay untouched, each split's slab against the partial product over its k range (an empty
    range: exact zeros), and that C is bitwise the ordered sum of the slabs rounded once.
(c) The Triton twin under the interpreter: N = 1, 3, 17, K not a multiple of the vector, every
    layout, offset / sliced / strided views, the three precisions, explicit splits (C the ordered
    sum of the workspace), the 64-bit offsets flag.
(d) The automatic values: the split of each shape (pure Python), the tile of the Triton twin,
    the `params` column; validate() refusals in one sentence.
(e) `gpu` (skipped without CUDA): both backends against torch.matmul at 4097x1x4096 and on small
    shapes in every layout and precision, explicit splits bitwise reproducible; and
    2048x1x1048576 (A of 2^31 elements, 8.6 GB in fp32: run it alone, as tests/test_offsets64.py
    says of its big operands):
        python -m pytest -q -m gpu tests/test_gemv.py -k 2048x1x1048576
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import replace

import pytest
import torch

from helpers import LAYOUTS, cpu_only
from lab import check as chk
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.needs import TRITON
from lab.base.device import DEFAULT_SMS
from lab.stages import Variant, get_stage

STAGE = get_stage("gemv")
PRECISIONS = ("fp32", "bf16", "fp16")
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MV = (2048, 1, 1_048_576)  # the matrix-vector product whose A has 2^31 elements
SMALL_MV = (4097, 1, 4096)
SPLIT_CHOICES = next(p.choices for p in STAGE.params if p.name == "splitk")


def _cuda():
    return STAGE.module("cuda")


def _triton():
    return STAGE.module("triton")


def _params(backend: str, **changes) -> dict:
    return {**Variant(STAGE, STAGE.defaults()).params_for(backend), **changes}


# ------------------------------------------------------------------ (a) NVRTC

BUILDS = [(layout, precision, wide) for layout in LAYOUTS for precision in PRECISIONS
          for wide in (False, True)]


def _sass(build) -> str:
    from lab.toolchain import sass

    if sass.find_tool("cuobjdump") is None and sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    return sass.sass(build)


@pytest.mark.parametrize("layout,precision,wide", BUILDS,
                         ids=[f"{l}-{p}-{'64' if w else '32'}" for l, p, w in BUILDS])
def test_every_layout_and_precision_builds_without_spills(layout, precision, wide):
    """The build prepare() makes for the matrix-vector product (the default parameters resolved
    for 2048x1x1048576: a split, 4 rows per thread in the rows kernel) and for a wide one."""
    cuda = _cuda()
    for shape in (MV, (1025, 1000, 257)):
        r = cuda.resolve(_params("cuda"), *shape, precision, DEFAULT_SMS,
                         a_trans=layout[0] == "t")
        build = cuda.build(**r, precision=precision, layout=layout, offsets64=wide)
        assert build.arch == "sm_90" and build.cubin[:4] == b"\x7fELF"
        assert build.spill_bytes == 0 and build.stack_frame == 0, (shape, build.log)
        assert 0 < build.registers <= 255
        assert ("-DOFFSET64=1" in build.options) == wide
        assert f"-DTRANS_A={int(layout[0] == 't')}" in build.options
        if precision != "fp32":
            assert f"-DPREC_{precision.upper()}=1" in build.options


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_64_bit_build_is_another_build(precision):
    cuda = _cuda()
    r = cuda.resolve(_params("cuda"), *MV, precision, DEFAULT_SMS)
    plain = cuda.build(**r, precision=precision)
    wide = cuda.build(**r, precision=precision, offsets64=True)
    assert _sass(plain) != _sass(wide)


@pytest.mark.parametrize("splitk", [s for s in SPLIT_CHOICES if s > 1])
def test_the_split_k_sum_builds_for_every_split(splitk):
    cuda = _cuda()
    for precision in PRECISIONS:
        for wide in (False, True):
            build = cuda.build_sum(splitk, precision, offsets64=wide)
            assert build.kernel == "gemv_splitk_sum" and build.spill_bytes == 0
            assert ("-DOFFSET64=1" in build.options) == wide


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_matrix_vector_build_reads_a_and_b_with_16_byte_loads(precision):
    """The rows kernel at 2048x1x1048576 (ldb = 1: B's column is a vector along k): the loop
    body's A chunks (rows 4 x KU 2) and B chunks (KU 2) are LDG.E.128, all issued before the
    FMAs use them."""
    build, _ = _cuda().OFFER.compile(_params("cuda"), *MV, "nn", precision)
    sass = _sass(build)
    wide = [line for line in sass.splitlines() if "LDG.E.128" in line]
    assert len(wide) >= 10, len(wide)
    # somewhere 10 LDG.E.128 come before the next FFMA: one iteration's loads in flight
    ops = re.findall(r"\b(LDG\.E\.128|FFMA)\b", sass)
    run = best = 0
    for op in ops:
        run = run + 1 if op == "LDG.E.128" else 0
        best = max(best, run)
    assert best >= 10, best


def test_the_cpu_mode_compile_is_the_build_prepare_makes():
    """OFFER.compile (CPU mode's resource report) resolves the shape's values like prepare()."""
    offer = _cuda().OFFER
    build, (grid, block, smem) = offer.compile(_params("cuda"), *MV, "nn", "fp32")
    assert "-DSPLITK=8" in build.options and "-DROWS=4" in build.options
    assert grid == (512, 8, 1) and block == (256, 1, 1) and smem == 0
    build, (grid, _, _) = offer.compile(_params("cuda"), *SMALL_MV, "nn", "fp32")
    assert "-DSPLITK=1" in build.options and grid == (1025, 1, 1)
    build, (grid, _, _) = offer.compile(_params("cuda"), *SMALL_MV, "tn", "fp32")
    assert grid[0] == math.ceil(4097 / 128)  # the columns kernel: 32 lanes x 4 rows per block


# ------------------------------------------------------------------ (b) the CUDA emulator

# main() after gemv.cu and the emulator's LabOperands (cuda_emulator.program): the operands as
# elem_t (rounded to bf16 / fp16 by the kernel's own put()), the product, and its checks.
# argv: M N K lda ldb ldc gx gy bx rgx rbx
MAIN = r"""
int main(int argc, char** argv) {
    if (argc != 12) {
        std::fprintf(stderr, "usage: M N K lda ldb ldc gx gy bx rgx rbx\n");
        return 2;
    }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldc = atoi(argv[6]);
    const unsigned gx = atoi(argv[7]), gy = atoi(argv[8]), bx = atoi(argv[9]);
    const unsigned rgx = atoi(argv[10]), rbx = atoi(argv[11]);
    auto elem = [](float x) { elem_t h; put(&h, x); return h; };
    LabOperands ops(M, N, K, lda, ldb);  // float values, NaN in the gaps
    std::vector<elem_t> A(ops.A.size()), B(ops.B.size());
    for (size_t i = 0; i < A.size(); ++i) A[i] = elem(ops.A[i]);
    for (size_t i = 0; i < B.size(); ++i) B[i] = elem(ops.B[i]);
    auto a = [&](int i, int k) {
        return double(to_float(A[TRANS_A ? size_t(k) * lda + i : size_t(i) * lda + k])); };
    auto b = [&](int k, int j) {
        return double(to_float(B[TRANS_B ? size_t(j) * ldb + k : size_t(k) * ldb + j])); };
    auto ref = [&](int i, int j, int k0, int k1) {
        double s = 0;
        for (int k = k0; k < k1; ++k) s += a(i, k) * b(k, j);
        return s;
    };
    std::vector<elem_t> C(size_t(M) * ldc, elem(NAN));
    long slab_bad = 0, empty = 0, unordered = 0;
    double worst = 0;
#if SPLITK > 1
    std::vector<float> W(size_t(SPLITK) * M * N, NAN);
    lab_run_grid(gx, gy, bx, 1, 0, [&] {
        matmul_gemv(A.data(), B.data(), W.data(), M, N, K, lda, ldb, N); });
#if TRANS_A
    const long long ks = (K + SPLITK - 1) / SPLITK;
#else
    const long long ks = ((K + SPLITK - 1) / SPLITK + VW - 1) / VW * VW;
#endif
    for (int s = 0; s < SPLITK; ++s) {
        const int k0 = int(std::min<long long>(K, s * ks));
        const int k1 = int(std::min<long long>(K, k0 + ks));
        empty += k1 <= k0;
        LabCheck slab;
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
                const float w = W[(size_t(s) * M + i) * N + j];
                slab.add(w, j, N, [&] { return ref(i, j, k0, k1); });
                slab_bad += k1 <= k0 && w != 0.0f;  // an empty split writes exact zeros
            }
        slab_bad += slab.bad;
        worst = std::max(worst, slab.rel());
    }
    lab_run_grid(rgx, 1, rbx, 1, 0, [&] { gemv_splitk_sum(W.data(), C.data(), M, N, ldc); });
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float sum = W[size_t(i) * N + j];  // slab 0 + slab 1 + ..., in fp32, in order
            for (int s = 1; s < SPLITK; ++s) sum += W[(size_t(s) * M + i) * N + j];
            const elem_t want = elem(sum);
            unordered += std::memcmp(&want, &C[size_t(i) * ldc + j], sizeof want) != 0;
        }
#else
    lab_run_grid(gx, gy, bx, 1, 0, [&] {
        matmul_gemv(A.data(), B.data(), C.data(), M, N, K, lda, ldb, ldc); });
#endif
    LabCheck check;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < ldc; ++j)
            check.add(to_float(C[size_t(i) * ldc + j]), j, N, [&] { return ref(i, j, 0, K); });
    const double rel = check.rel();
    const double tol = PREC == 0 ? 1e-5 : PREC == 2 ? 1e-2 : 2e-3;  // C rounded to its type
    std::printf("%dx%dx%d lda=%d ldb=%d ldc=%d splits=%d empty=%ld slab_err=%.2e slab_bad=%ld "
                "rel_err=%.2e non-finite=%ld gap-writes=%ld not-ordered-sum=%ld\n", M, N, K, lda,
                ldb, ldc, SPLITK, empty, worst, slab_bad, rel, check.bad, check.gaps, unordered);
    return slab_bad == 0 && worst < 1e-5 && check.bad == 0 && check.gaps == 0 &&
           unordered == 0 && rel < tol ? 0 : 1;
}
"""


def _ld(width: int, elems: int, aligned: bool) -> int:
    """A leading dimension larger than `width` (the gap holds NaN) that is a multiple of `elems`
    (16 bytes: aligned lines) or not."""
    ld = width + 1
    while (ld % elems == 0) != aligned:
        ld += 1
    return ld


# (name, layout, precision, explicit parameters, vec_a, vec_b, shapes (M, N, K, ldb = 1?)).
# The parameters are all given (no 0), so one build serves every shape of a case.
BASE = dict(kunroll=2, warps=8, splitk=1)
EMULATED = [
    # rows kernel, one column: ldb = 1 (B's column a vector, VEC_B), whole-block lanes
    ("mv", "nn", "fp32", dict(BASE, ncol=1, rows=4, lanes=256), True, True,
     [(1, 1, 1, True), (5, 1, 4099, True), (37, 1, 130, True), (9, 1, 2050, False)]),
    ("mv-bf16", "nn", "bf16", dict(BASE, ncol=1, rows=4, lanes=256), True, True,
     [(5, 1, 4099, True), (37, 1, 130, True), (3, 1, 9, False)]),
    ("mv-fp16-t", "nt", "fp16", dict(BASE, ncol=1, rows=2, lanes=64), True, True,
     [(5, 1, 4099, False), (70, 1, 77, False)]),
    # several columns: k-strided B (nn), vector B (nt); lanes within a warp (16, 1), across warps
    ("cols3-nn", "nn", "fp32", dict(BASE, ncol=4, rows=2, lanes=16), True, False,
     [(33, 3, 70, False), (5, 3, 4099, False)]),
    ("cols17-nt", "nt", "fp32", dict(BASE, ncol=8, rows=1, lanes=64, warps=4), True, True,
     [(65, 17, 63, False), (9, 17, 300, False)]),
    ("lane1-bf16", "nn", "bf16", dict(BASE, ncol=2, rows=1, lanes=1, warps=2), True, False,
     [(130, 3, 2, False), (7, 17, 19, False)]),
    # unaligned lines: A and B one element at a time (UBSan checks every 16-byte access)
    ("unaligned", "nt", "fp32", dict(BASE, ncol=1, rows=4, lanes=32, kunroll=8), False, False,
     [(37, 1, 130, False), (6, 3, 257, False)]),
    # no unrolling: one chunk per row in flight
    ("rolled", "nn", "fp16", dict(BASE, ncol=1, rows=4, lanes=128, unroll=False), True, True,
     [(37, 1, 1030, True)]),
    # columns kernel: blocks inside M and across its edge, one column and several
    ("colkernel", "tn", "fp32", dict(BASE, ncol=1), True, True,
     [(300, 1, 17, False), (130, 3, 33, False), (1, 1, 1, False)]),
    ("colkernel-bf16", "tt", "bf16", dict(BASE, ncol=8, warps=4), True, True,
     [(300, 17, 19, False), (520, 1, 70, False)]),
    ("colkernel-fp16", "tn", "fp16", dict(BASE, ncol=2, warps=2, kunroll=4), False, False,
     [(70, 3, 45, False)]),
    # split-K: empty splits (K shorter than the splits), both kernels, every precision
    ("split-mv", "nn", "fp32", dict(BASE, ncol=1, rows=4, lanes=256, splitk=3), True, True,
     [(5, 1, 4099, True), (9, 1, 5, True)]),
    ("split-bf16", "nn", "bf16", dict(BASE, ncol=4, rows=2, lanes=32, splitk=8), True, False,
     [(33, 3, 130, False), (3, 1, 9, False)]),
    ("split-nt", "nt", "fp16", dict(BASE, ncol=8, rows=1, lanes=64, splitk=16), True, True,
     [(17, 17, 300, False)]),
    ("split-tn", "tn", "fp32", dict(BASE, ncol=1, splitk=6), True, True,
     [(300, 1, 17, False), (130, 3, 4, False)]),
    ("split-tt", "tt", "bf16", dict(BASE, ncol=4, warps=4, splitk=64), True, True,
     [(260, 3, 70, False)]),
]


def _build_of(case):
    name, layout, precision, params, vec_a, vec_b, _ = case
    return _cuda().build(**params, precision=precision, layout=layout, vec_a=vec_a,
                         vec_b=vec_b)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """One g++ executable per EMULATED case (the emulator's compile pool): {name: path}."""
    from cuda_emulator import KERNELS, compile_async, compiler, defines_of, program

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    root = tmp_path_factory.mktemp("gemv")
    (root / "gemv.cpp").write_text(program(MAIN, "KERNEL_FILE"))
    futures = {}
    for i, case in enumerate(EMULATED):
        build = _build_of(case)
        assert build.spill_bytes == 0
        # the variant in every case: this main() reads its switches (TRANS_A, PREC, SPLITK, ...),
        # and its lesson-case builds are the lesson's (tests/test_lessons_gemv.py)
        defines = {"KERNEL_FILE": f'"{KERNELS / "variants" / "gemv.cu"}"', **defines_of(build)}
        futures[case[0]] = compile_async(root / "gemv.cpp", root / f"gemv_{i}", defines)
    return {name: f.result() for name, f in futures.items()}


@cpu_only
@pytest.mark.parametrize("case", EMULATED, ids=[c[0] for c in EMULATED])
def test_the_kernel_in_the_emulator(emulated, case):
    name, layout, precision, params, vec_a, vec_b, shapes = case
    cuda = _cuda()
    elems = 16 // cuda.ELEM_BYTES[precision]
    for M, N, K, unit_b in shapes:
        lda = _ld(M if layout[0] == "t" else K, elems, vec_a)
        if unit_b:  # a K x 1 row-major B with unit stride: ldb = 1, the vector path
            assert layout[1] == "n" and N == 1
            ldb = 1
        else:
            ldb = _ld(K if layout[1] == "t" else N, elems, vec_b)
        ldc = _ld(N, elems, True)
        grid, block, _ = cuda.geometry(M, N, K, **params, precision=precision, layout=layout)
        rgrid, rblock, _ = cuda.sum_geometry(M, N)
        args = [M, N, K, lda, ldb, ldc, grid[0], grid[1], block[0], rgrid[0], rblock[0]]
        out = subprocess.run([str(emulated[name]), *map(str, args)], capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, f"{name} {M}x{N}x{K}:\n" + (out.stdout + out.stderr)[-3000:]
        assert re.search(r"rel_err=\d", out.stdout)
        if params["splitk"] > 1 and K < params["splitk"]:  # more splits than k's: empty ones
            assert not re.search(r"empty=0\b", out.stdout), out.stdout


def test_the_emulated_cases_cover_both_kernels_every_precision_and_lanes_regime():
    layouts = {c[1][0] for c in EMULATED}
    precisions = {c[2] for c in EMULATED}
    lanes = {c[3].get("lanes") for c in EMULATED if c[1][0] == "n"}
    assert layouts == {"n", "t"} and precisions == set(PRECISIONS)
    assert {1, 16, 32, 64, 256} <= lanes  # one lane, a part of a warp, a warp, several warps
    assert any(c[3]["splitk"] > 1 and c[1][0] == "t" for c in EMULATED)
    assert any(not c[4] for c in EMULATED) and any(c[3].get("unroll") is False for c in EMULATED)


# ------------------------------------------------------------------ (c) the Triton twin

SHAPES = [(1, 1, 1), (17, 1, 129), (33, 3, 70), (65, 17, 63), (5, 1, 4097), (9, 3, 2)]


@cpu_only
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_triton_twin_on_every_layout(shape, layout):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + N + K, device="cpu", layout=layout)
    c = torch.empty(M, N) if layout != "tt" else torch.empty(N, M).t()
    launch = _triton().prepare(a, b, c, **_params("triton"))
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed and result.rel_err < 1e-6, (launch.config, result.reason)


@cpu_only
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_triton_twin_in_16_bit(precision, layout):
    for M, N, K in [(17, 1, 129), (33, 3, 70), (5, 1, 4097)]:
        a, b = chk.make_inputs(M, N, K, seed=K, device="cpu", dtype=DTYPE[precision],
                               layout=layout)
        c = torch.empty(M, N, dtype=DTYPE[precision])
        launch = _triton().prepare(a, b, c, precision=precision, **_params("triton"))
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (M, N, K, result.reason)


def _views(M, N, K, kind, seed):
    a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu")
    c = torch.empty(M, N)
    if kind == "offset":  # storage offsets that break 16-byte alignment
        a = torch.empty(M * K + 1)[1:].view(M, K).copy_(a)
        b = torch.empty(K * N + 3)[3:].view(K, N).copy_(b)
        c = torch.empty(M * N + 1)[1:].view(M, N)
    elif kind == "sliced":  # row strides larger than the widths
        a = torch.empty(M, K + 5)[:, 2:K + 2].copy_(a)
        b = torch.empty(K + 1, N + 7)[1:, :N].copy_(b)
        c = torch.empty(M + 2, N + 3)[1:M + 1, 3:]
    elif kind == "strided":  # no unit stride at all
        a = torch.empty(2 * M, 2 * K)[::2, ::2].copy_(a)
        b = torch.empty(3 * K, 2 * N)[::3, ::2].copy_(b)
        c = torch.empty(M, 3 * N)[:, ::3]
    return a, b, c


@cpu_only
@pytest.mark.parametrize("kind", ["offset", "sliced", "strided"])
def test_triton_twin_on_views(kind):
    for M, N, K in [(19, 1, 41), (19, 3, 130)]:
        a, b, c = _views(M, N, K, kind, seed=len(kind))
        launch = _triton().prepare(a, b, c, **_params("triton"))
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, (kind, M, N, K, result.reason)


@cpu_only
@pytest.mark.parametrize("splitk", [2, 3, 16])
def test_triton_split_is_the_ordered_sum_of_its_slabs(splitk):
    for M, N, K, layout in [(9, 1, 300, "nn"), (17, 3, 70, "tn"), (5, 17, 5, "nt")]:
        a, b = chk.make_inputs(M, N, K, seed=splitk + K, device="cpu", layout=layout)
        c = torch.empty(M, N)
        launch = _triton().prepare(a, b, c, **_params("triton", splitk=splitk, BLOCK_K=16))
        assert launch.config["splitk"] == splitk
        result = chk.check(launch, c, chk.reference(a, b), K)
        assert result.passed, (M, N, K, layout, result.reason)
        slabs = launch.workspace.view(splitk, M, N)
        total = slabs[0].clone()
        for s in range(1, splitk):
            total += slabs[s]
        assert torch.equal(total, c), (M, N, K, layout)


@cpu_only
def test_triton_split_in_16_bit_rounds_the_ordered_sum_once():
    """fp16: C is the fp32 sum of the slabs, rounded once. (bf16 alike on the GPU; Triton 3.9's
    interpreter truncates fp32 to bf16 instead of rounding it, so bf16 is not bitwise here.)"""
    M, N, K = 9, 1, 300
    a, b = chk.make_inputs(M, N, K, seed=3, device="cpu", dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)
    launch = _triton().prepare(a, b, c, precision="fp16", **_params("triton", splitk=4,
                                                                     BLOCK_K=16))
    assert chk.check(launch, c, chk.reference(a, b), K, "fp16").passed
    slabs = launch.workspace.view(4, M, N)
    assert torch.equal((slabs[0] + slabs[1] + slabs[2] + slabs[3]).to(torch.float16), c)


@cpu_only
def test_triton_twin_with_64_bit_offsets():
    from lab.toolchain.triton import recording

    for M, N, K, splitk in [(37, 1, 29, 0), (37, 3, 70, 3)]:
        a, b = chk.make_inputs(M, N, K, seed=64, device="cpu")
        c = torch.empty(M, N)
        p = replace(describe(a, b, c, TRITON, "fp32"), offsets64=True)
        params = _params("triton", splitk=splitk)
        with recording() as calls:
            _triton().prepare.inner(p, **params)
        kernels = [meta for kernel, _, _, meta in calls if kernel.fn.__name__ == "gemv_kernel"]
        assert kernels and all(meta["OFFSET64"] is True for meta in kernels)
        result = chk.check(_triton().prepare.inner(p, **params), c, chk.reference(a, b), K)
        assert result.passed, result.reason


# ------------------------------------------------------------------ (d) automatic values


def test_the_matrix_vector_shapes_get_the_intended_configuration():
    cuda, tri = _cuda(), _triton()
    r = cuda.resolve(_params("cuda"), *MV, "fp32", 132)
    assert (r["ncol"], r["rows"], r["lanes"], r["kunroll"], r["splitk"]) == (1, 4, 256, 2, 8)
    assert cuda.show(r) == "ncol=1,rows=4,lanes=256,kunroll=2,warps=8,fast_math=False," \
                           "unroll=True,splitk=8"
    r = cuda.resolve(_params("cuda"), *SMALL_MV, "fp32", 132)
    assert (r["ncol"], r["rows"], r["lanes"], r["splitk"]) == (1, 4, 256, 1)
    t = tri.resolve(_params("triton"), *MV, "fp32", 132)
    assert (t["BLOCK_M"], t["BLOCK_N"], t["BLOCK_K"], t["splitk"]) == (4, 1, 512, 8)
    assert tri.show(t) == "splitk=8,BLOCK_M=4,BLOCK_N=1,BLOCK_K=512,num_warps=4,num_stages=1"
    t = tri.resolve(_params("triton"), *SMALL_MV, "bf16", 132)
    assert (t["BLOCK_M"], t["BLOCK_K"], t["splitk"]) == (4, 1024, 1)
    # the column-major A's tile: 32 lanes x 16 bytes of rows, the rest along k
    t = tri.config(_params("triton"), *SMALL_MV, "fp32", 132, a_kmajor=False)
    assert (t["BLOCK_M"], t["BLOCK_K"]) == (128, 16)


@pytest.mark.parametrize("N,ncol,rows", [(1, 1, 4), (2, 2, 4), (3, 4, 2), (8, 8, 1), (17, 8, 1),
                                         (1000, 8, 1)])
def test_columns_and_rows_per_block_follow_n(N, ncol, rows):
    r = _cuda().resolve(_params("cuda"), 1000, N, 300, "fp32", 132)
    assert (r["ncol"], r["rows"]) == (ncol, rows)
    assert r["rows"] * r["ncol"] <= 8
    assert _triton().resolve(_params("triton"), 1000, N, 300, "fp32", 132)["BLOCK_N"] == ncol


@pytest.mark.parametrize("K,lanes", [(1, 1), (2, 1), (8, 1), (16, 2), (129, 16), (2048, 256),
                                     (4096, 256), (1 << 20, 256)])
def test_lanes_follow_k(K, lanes):
    assert _cuda().resolve(_params("cuda"), 64, 1, K, "fp32", 132)["lanes"] == lanes


def test_kunroll_is_lowered_to_what_the_registers_hold():
    cuda = _cuda()
    r = cuda.resolve(_params("cuda", kunroll=8, rows=4, ncol=8), 64, 8, 4096, "fp32", 132)
    assert r["kunroll"] == 2  # (4 * 4 + 4 * 8) words per chunk: 128 // 48
    r = cuda.resolve(_params("cuda", kunroll=8), 64, 1, 4096, "fp32", 132)
    assert r["kunroll"] == 6  # rows 4, one column: 128 // 20
    assert cuda.resolve(_params("cuda", kunroll=1), 64, 1, 4096, "fp32", 132)["kunroll"] == 1


def _block_count(backend, r, M, N, precision, a_trans=False):
    if backend == "cuda":
        cuda = _cuda()
        br = cuda.block_rows(precision, a_trans, 32 * r["warps"], r["lanes"], r["rows"])
        return math.ceil(M / br) * math.ceil(N / r["ncol"]), br
    return math.ceil(M / r["BLOCK_M"]) * math.ceil(N / r["BLOCK_N"]), r["BLOCK_M"]


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_the_automatic_split_keeps_its_rules_over_many_shapes(backend):
    """Over a grid of shapes and SM counts: no split where the blocks reach the target, else a
    split whose blocks x split is the nearest allowed to it (never further than the split below
    or above would be), and every block keeps at least MIN_SPLIT_BYTES of A."""
    from lab.base.splitk import SPLITS

    module = _cuda() if backend == "cuda" else _triton()
    for precision in ("fp32", "bf16"):
        es = module.ELEM_BYTES[precision]
        for sms in (1, 16, 132):
            target = module.TARGET_PER_SM * sms
            for M in (1, 7, 100, 2048, 4097, 100_000):
                for N in (1, 3, 17):
                    for K in (1, 100, 4096, 65536, 1 << 20, 3 << 20):
                        r = module.resolve(_params(backend), M, N, K, precision, sms)
                        s = r["splitk"]
                        blocks, rows = _block_count(backend, r, M, N, precision)
                        if blocks >= target:
                            assert s == 1, (M, N, K, sms)
                            continue
                        per_block = rows * es * (K // s)
                        assert s == 1 or per_block >= module.MIN_SPLIT_BYTES, (M, N, K, s)
                        allowed = [c for c in SPLITS
                                   if c == 1 or rows * es * (K // c) >= module.MIN_SPLIT_BYTES]
                        best = min(abs(math.log(blocks * c / target)) for c in allowed)
                        assert abs(math.log(blocks * s / target)) == best, (M, N, K, s)


def test_both_twins_split_by_the_same_rule():
    cuda, tri = _cuda(), _triton()
    assert (cuda.TARGET_PER_SM, cuda.MIN_SPLIT_BYTES) == (tri.TARGET_PER_SM, tri.MIN_SPLIT_BYTES)
    for blocks in (1, 7, 100, 512, 1025, 4000, 5000):
        for K in (100, 4096, 1 << 20):
            for bytes_per_k in (2, 16, 512):
                assert cuda.auto_split(blocks, K, bytes_per_k, 132) == \
                    tri.auto_split(blocks, K, bytes_per_k, 132)


def test_explicit_values_pass_through_and_the_kernels_follow_the_split():
    cuda, tri = _cuda(), _triton()
    r = cuda.resolve(_params("cuda", splitk=3, ncol=2, rows=1, lanes=64), *MV, "fp32", 132)
    assert (r["splitk"], r["ncol"], r["rows"], r["lanes"]) == (3, 2, 1, 64)
    assert cuda.OFFER.kernel_names(_params("cuda"), "fp32") == ("matmul_gemv", "gemv_splitk_sum")
    assert cuda.OFFER.kernel_names(_params("cuda", splitk=1), "fp32") == ("matmul_gemv",)
    t = tri.resolve(_params("triton", splitk=2, BLOCK_M=16, BLOCK_K=64), *MV, "fp32", 132)
    assert (t["splitk"], t["BLOCK_M"], t["BLOCK_K"], t["BLOCK_N"]) == (2, 16, 64, 1)
    assert tri.OFFER.kernel_names(_params("triton", splitk=1), "bf16") == ("gemv_kernel",)


@cpu_only
def test_the_params_column_shows_what_ran():
    M, N, K = 9, 1, 300
    a, b = chk.make_inputs(M, N, K, seed=1, device="cpu")
    launch = _triton().prepare(a, b, torch.empty(M, N), **_params("triton"))
    assert launch.resources["params"] == _triton().show(launch.config)
    assert "BLOCK_M=" in launch.resources["params"] and "=0," not in launch.resources["params"]


@pytest.mark.parametrize("backend,changes,words", [
    ("cuda", dict(lanes=512, warps=8), "lanes=512 and warps=8"),
    ("cuda", dict(rows=8, ncol=8), "64 accumulators"),
    ("cuda", dict(rows=8), "ncol (0 may mean 8 columns)"),
    ("cuda", dict(warps=64), "1024"),
    ("cuda", dict(splitk=-1), "splitk must be 0"),
    ("triton", dict(BLOCK_M=256, BLOCK_K=2048), "accumulators"),
    ("triton", dict(splitk=-2), "splitk must be 0"),
])
def test_validate_refuses_in_one_sentence(backend, changes, words):
    offer = STAGE.offer(backend)
    with pytest.raises(LabError) as info:
        offer.validate(_params(backend, **changes), "fp32")
    message = str(info.value)
    assert words in message and "\n" not in message, message


def test_the_stage_follows_double_buffered_in_the_registry():
    from lab.stages import STAGES

    names = [s.name for s in STAGES]
    assert names[names.index("double_buffered") + 1] == "gemv"
    for backend in ("cuda", "triton"):
        assert STAGE.precisions_for(backend) == PRECISIONS


# ------------------------------------------------------------------ (e) on the GPU

GPU_SHAPES = [(1, 1, 1), (37, 1, 130), (5, 1, 4099), (33, 3, 70), (65, 17, 63), (300, 1, 17),
              (1025, 1000, 257)]
GPU_CASES = [(backend, precision) for backend in ("cuda", "triton") for precision in PRECISIONS]


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _out(M, N, layout, dtype):
    """C: a transposed view in tt (CUDA computes C^T = B^T A^T there), row-major otherwise."""
    if layout == "tt":
        return torch.empty((N, M), device="cuda", dtype=dtype).t()
    return torch.empty((M, N), device="cuda", dtype=dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend,precision", GPU_CASES, ids=[f"{b}-{p}" for b, p in GPU_CASES])
def test_small_shapes_in_every_layout_on_the_gpu(backend, precision):
    _gpu()
    module = STAGE.module(backend)
    for layout in LAYOUTS:
        for M, N, K in GPU_SHAPES:
            a, b = chk.make_inputs(M, N, K, seed=M + N + K, device="cuda",
                                   dtype=DTYPE[precision], layout=layout)
            c = _out(M, N, layout, DTYPE[precision])
            launch = module.prepare(a, b, c, precision=precision, **_params(backend))
            result = chk.check(launch, c, chk.reference(a, b), K, precision)
            assert result.passed, f"{backend} {precision} {layout} {M}x{N}x{K}: {result.reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("backend,precision", GPU_CASES, ids=[f"{b}-{p}" for b, p in GPU_CASES])
def test_4097x1x4096_on_the_gpu(backend, precision):
    _gpu()
    M, N, K = SMALL_MV
    for layout in ("nn", "tn"):
        a, b = chk.make_inputs(M, N, K, seed=11, device="cuda", dtype=DTYPE[precision],
                               layout=layout)
        c = torch.empty((M, N), device="cuda", dtype=DTYPE[precision])
        launch = STAGE.module(backend).prepare(a, b, c, precision=precision, **_params(backend))
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, f"{backend} {precision} {layout}: {result.reason}"
        if precision == "fp32":  # a tree of sums: far below the fp32 threshold
            assert result.rel_err < 2e-6, result.rel_err


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_explicit_splits_and_unaligned_views_on_the_gpu(backend):
    _gpu()
    module = STAGE.module(backend)
    M, N, K = 300, 3, 20_000
    a, b = chk.make_inputs(M, N, K, seed=5, device="cuda")
    ref = chk.reference(a, b)
    for splitk in (1, 2, 3, 16, 64):
        c = torch.empty((M, N), device="cuda")
        launch = module.prepare(a, b, c, **_params(backend, splitk=splitk))
        assert chk.check(launch, c, ref, K).passed, splitk
        first = c.clone()
        launch()
        torch.cuda.synchronize()
        assert torch.equal(first, c), f"splitk={splitk}: not bitwise reproducible"
    # lines off 16-byte boundaries: A, B and C one element into their storage
    a1 = torch.empty(M * K + 1, device="cuda")[1:].view(M, K).copy_(a)
    b1 = torch.empty(K * N + 1, device="cuda")[1:].view(K, N).copy_(b)
    c1 = torch.empty(M * N + 1, device="cuda")[1:].view(M, N)
    assert chk.check(module.prepare(a1, b1, c1, **_params(backend)), c1, ref, K).passed


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_2048x1x1048576_on_the_gpu(backend):
    """A of 2^31 elements (8.6 GB): the 64-bit build, checked row by row against a float64
    reference computed in chunks. Run alone (see the module docstring)."""
    _gpu()
    free, _ = torch.cuda.mem_get_info()
    if free < 12 * 2**30:
        pytest.skip(f"needs about 12 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    M, N, K = MV
    a, b = chk.make_inputs(M, N, K, seed=2024, device="cuda")
    ref = torch.cat([a[i:i + 128].double() @ b.double() for i in range(0, M, 128)])
    c = torch.empty((M, N), device="cuda")
    launch = STAGE.module(backend).prepare(a, b, c, **_params(backend))
    assert launch.problem.offsets64 and launch.config["splitk"] > 1
    if backend == "cuda":
        assert "-DOFFSET64=1" in launch.build.options
    c.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    del a
    result = chk.compare(c, ref, K)
    assert result.passed, result.reason
    assert result.rel_err < 2e-6, result.rel_err  # cuBLAS fp32: 1.3e-7 on the H100
