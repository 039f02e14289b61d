"""Tests of the mma stage (cuda_kernels/mma.cu, its launcher and its Triton twin), the mma.sync
stage; Hopper's wgmma kernel is stage wgmma (tests/test_wgmma.py).

CPU (skipped when a GPU is present, like the other CPU-mode tests):
(a) NVRTC: the default build of every precision compiles for sm_80 and sm_90 in every layout with
    no spills and no local memory; the SASS holds the tensor-core instruction of the precision
    (HMMA.16816.F32[.BF16], HMMA.1688.F32.TF32, three times as many for 3xTF32), ldmatrix (LDSM)
    for 16-bit operands and for K-contiguous TF32 tiles, cp.async (LDGSTS) and one barrier per
    k-tile;
(b) the kernel itself, run on the CPU: tests/cuda_emulator.py's prelude (threads, barriers,
    deferred cp.async copies, NaN-filled shared memory) with a main() of our own that stores A, B
    and C in the kernel's element type (float, or the bits of bf16 / fp16). ldmatrix and mma.sync
    have C++ twins in mma.cu that exchange registers between the lanes of a warp exactly as the
    PTX ISA's fragment layouts say, so the lane mapping, the swizzle, the ring and the edges all
    run. Every element is checked against a float64 reference with a bound derived from the
    precision (the rounding of C, of TF32 operands, and of fp32 accumulation), not only the
    norm: a single misplaced fragment fails. Every precision x layout, the 4- and 2-byte
    alignment paths, unaligned C stores, storage offsets, K below and not a multiple of BK,
    interior blocks, odd k-step counts, other tile shapes, ring depths and fragment buffering;
(c) the emulator catches the defects this stage is about: a cp.async wait one group too shallow
    and an ldmatrix without (or with a wrong) .trans, in mutated copies of the kernel;
(d) validate() and the launchers refuse impossible combinations with one sentence, and the
    launcher picks ALIGN_A / ALIGN_B / VEC_C from the operands' alignment;
(e) the Triton twin under the interpreter: every precision and layout on small odd shapes against
    a float64 reference of the operands it received, and its validate(); compiled for sm_90
    without a GPU, its PTX holds mma.sync and no wgmma (Triton's choice on sm_90 is wgmma: the
    twin compiles with DISABLE_MMA_V3 / DISABLE_MMA_V5), and the variables are as they were after.
GPU (marked `gpu`): the CUDA kernel in every precision x layout at odd and aligned sizes, on
offset (unaligned) views, and a few tile variants; 3xTF32 at fp32-level error, TF32 really TF32;
the Triton twin in every precision x layout, its compiled kernel mma.sync on this GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import (DTYPE, ES, LAYOUTS, ROOT, TC_PRECISIONS, cpu_only, run_python, stage_module,
                     stage_params)
from lab import check as chk
from lab.base.errors import LabError
from lab.stages import get_stage

from mma_defaults_helpers import count_ops, sass_mix

STAGE = "mma"
PRECISIONS = TC_PRECISIONS


def _params(backend: str = "cuda", **changes) -> dict:
    return stage_params(STAGE, backend, **changes)


def _cuda():
    return stage_module(STAGE, "cuda")


def _tolerance(precision: str, K: int) -> float:
    # lab.check has every precision; 3xtf32 stands in for fp32 and gets fp32's threshold
    return chk.tolerance(precision, K)


# ------------------------------------------------------- (a) NVRTC, resources and SASS


@cpu_only
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_default_build_compiles_without_spills_in_every_layout(arch, precision, monkeypatch):
    monkeypatch.setenv("LAB_CUDA_ARCH", arch)
    for layout in LAYOUTS:
        build = _cuda().build(**_params(), precision=precision, layout=layout)
        assert build.arch == arch
        assert build.spill_bytes == 0 and build.stack_frame == 0, (precision, layout, build.log)
        assert 0 < build.registers <= 255
        assert f"-DPREC_{precision.upper()}=1" in build.options
        # 256 threads (2 blocks of 128, or one of 256) per SM fit the 65536 registers
        # (allocated per warp in 256s)
        assert 2 * 4 * 32 * (-(-build.registers // 8) * 8) <= 65536


_sass_mix = sass_mix  # tests/mma_defaults_helpers.py
_count = count_ops


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_sass_has_tensor_core_ldmatrix_and_cp_async(precision, layout, monkeypatch):
    monkeypatch.setenv("LAB_CUDA_ARCH", "sm_90")
    mix = _sass_mix(_cuda().build(**_params(), precision=precision, layout=layout))
    hmma = {"bf16": "HMMA.16816.F32.BF16", "fp16": "HMMA.16816.F32",
            "tf32": "HMMA.1688.F32.TF32", "3xtf32": "HMMA.1688.F32.TF32"}[precision]
    assert mix.get(hmma, 0) > 0, mix
    assert _count(mix, "FFMA") == 0, "the products must all be on the tensor cores"
    assert _count(mix, "LDGSTS") > 0  # cp.async
    assert _count(mix, "LDL") == 0 and _count(mix, "STL") == 0  # no local memory
    # the prologue's, and one per k-tile in each of the two k-loops (whole interior tiles; the
    # rest, with bounds)
    assert _count(mix, "BAR.SYNC") == 3
    ldsm = _count(mix, "LDSM")
    if ES[precision] == 2:
        assert ldsm > 0
        # .trans exactly for the operands stored M/N-contiguous (A column-major, B row-major)
        assert (_count(mix, "LDSM.16.MT88") > 0) == (layout[0] == "t" or layout[1] == "n")
        assert (_count(mix, "LDSM.16.M88") > 0) == (layout[0] == "n" or layout[1] == "t")
    else:  # TF32: ldmatrix for K-contiguous tiles only (row-major A, column-major B)
        assert (ldsm > 0) == (layout[0] == "n" or layout[1] == "t")
        assert _count(mix, "LDSM.16.MT88") == 0
        # and LDS.128 runs for M/N-contiguous ones (column-major A, row-major B)
        assert (mix.get("LDS.128", 0) > 0) == (layout[0] == "t" or layout[1] == "n")


@cpu_only
def test_3xtf32_issues_three_tensor_core_products_per_tf32_one(monkeypatch):
    monkeypatch.setenv("LAB_CUDA_ARCH", "sm_90")
    # one tile for both (the automatic defaults differ per precision): the previous fixed ones
    same = _params(BM=128, BN=128, BK=16, WM=64, WN=32, STAGES=4, frags=1)
    one = _sass_mix(_cuda().build(**same, precision="tf32", layout="nt"))
    three = _sass_mix(_cuda().build(**same, precision="3xtf32", layout="nt"))
    n1, n3 = one["HMMA.1688.F32.TF32"], three["HMMA.1688.F32.TF32"]
    assert n3 == 3 * n1 or n3 == 6 * n1, (n1, n3)  # ptxas may unroll the tile loop twice


# ------------------------------------------------------- (b) the kernel, emulated on the CPU

# The prelude of tests/cuda_emulator.py (thread model, barriers, cp.async) and a main() of our own:
# operands in the kernel's element type, storage offsets, and an elementwise bound.
MAIN = r'''
#include KERNEL_FILE
// ---- the mma stage's main: operands in the kernel's element type (elem_t, PREC from mma.cu)
static double lab_dec(elem_t x) {
#if HALF
    return double(lab_half_to_float(x));
#else
    return double(x);
#endif
}
static elem_t lab_enc(float x) {
#if HALF
    return elem_t(pack2(x, 0.0f) & 0xffffu);  // the kernel's own round-to-nearest-even
#else
    return x;
#endif
}
// argv: M N K lda ldb ldc offa offb offc blocks threads smem tol u_out e_prod
// Every element must satisfy |c - ref| <= u_out |ref| + (e_prod + (K / KSTEP + 1) 2^-24) S with
// S = sum_k |a_ik b_kj|: the rounding of C, of the products' operands, and of the fp32
// accumulation (one rounding per mma). Outside C's M x N (gaps, before, after): untouched NaN.
int main(int argc, char** argv) {
    if (argc != 16) { std::fprintf(stderr, "usage: M N K lda ldb ldc offa offb offc blocks "
                                           "threads smem tol u_out e_prod\n"); return 2; }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldc = atoi(argv[6]);
    const int offa = atoi(argv[7]), offb = atoi(argv[8]), offc = atoi(argv[9]);
    const unsigned gx = atoi(argv[10]), bx = atoi(argv[11]);
    const long smem = atol(argv[12]);
    const double tol = atof(argv[13]), u_out = atof(argv[14]), e_prod = atof(argv[15]);
    std::mt19937 gen(M * 131 + N * 7 + K);
    std::normal_distribution<float> normal;
    const size_t a_lines = TRANS_A ? K : M, b_lines = TRANS_B ? N : K;
    const elem_t nan = lab_enc(NAN);
    std::vector<elem_t> Ab(a_lines * lda + offa + 8, nan), Bb(b_lines * ldb + offb + 8, nan),
        Cb(size_t(M) * ldc + offc + 8, nan);
    elem_t* A = Ab.data() + offa;
    elem_t* B = Bb.data() + offb;
    elem_t* C = Cb.data() + offc;
    auto a_at = [&](int i, int k) -> elem_t& { return A[TRANS_A ? size_t(k) * lda + i : size_t(i) * lda + k]; };
    auto b_at = [&](int k, int j) -> elem_t& { return B[TRANS_B ? size_t(j) * ldb + k : size_t(k) * ldb + j]; };
    for (int i = 0; i < M; ++i) for (int k = 0; k < K; ++k) a_at(i, k) = lab_enc(normal(gen));
    for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) b_at(k, j) = lab_enc(normal(gen));
    lab_run_grid(gx, 1, bx, 1, smem, [&] { matmul_mma(A, B, C, M, N, K, lda, ldb, ldc); });
    double num = 0, den = 0, maxabs = 0;
    long bad = 0, gaps = 0, loose = 0;
    for (size_t i = 0; i < Cb.size(); ++i) {
        const long e = long(i) - offc;
        const bool in = e >= 0 && e / ldc < M && e % ldc < N;
        if (!in && !std::isnan(lab_dec(Cb[i]))) ++gaps;
    }
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            const double c = lab_dec(C[size_t(i) * ldc + j]);
            double ref = 0, S = 0;
            for (int k = 0; k < K; ++k) {
                const double p = lab_dec(a_at(i, k)) * lab_dec(b_at(k, j));
                ref += p;
                S += std::fabs(p);
            }
            if (!std::isfinite(c)) { ++bad; continue; }
            const double bound = u_out * std::fabs(ref) + (e_prod + (K / KSTEP + 1) * 0x1p-24) * S;
            if (std::fabs(c - ref) > bound) {
                if (loose < 5) std::printf("C(%d, %d) = %.9g, reference %.9g, bound %.3g\n", i, j, c, ref, bound);
                ++loose;
            }
            num += (c - ref) * (c - ref);
            den += ref * ref;
            maxabs = std::max(maxabs, std::fabs(c - ref));
        }
    const double rel = std::sqrt(num / (den > 0 ? den : 1));
    std::printf("%dx%dx%d lda=%d ldb=%d ldc=%d off=%d,%d,%d rel_err=%.3e non-finite=%ld "
                "gap-writes=%ld beyond-bound=%ld tol=%.1e\n", M, N, K, lda, ldb, ldc, offa, offb,
                offc, rel, bad, gaps, loose, tol);
    return bad == 0 && gaps == 0 && loose == 0 && rel <= tol ? 0 : 1;
}
'''

# Per precision: (u_out, e_prod) of the elementwise bound. bf16 / fp16: C rounded to nearest
# (unit roundoff 2^-8, 2^-11), exact products of the inputs; TF32: each operand rounded to nearest
# TF32 (2^-11 each, so 2^-10 + 2^-22 per product); 3xTF32: the dropped lo*lo term and the tails'
# own rounding, a few 2^-22 (2^-19 leaves a margin of 2).
BOUND = {"bf16": (2.0**-8, 0.0), "fp16": (2.0**-11, 0.0), "tf32": (0.0, 2.0**-10 + 2.0**-21),
         "3xtf32": (0.0, 2.0**-19)}


class MmaEmulator:
    """Compiles mma.cu builds against the shared prelude plus MAIN (cached per define set) and
    runs them."""

    def __init__(self, root: Path):
        import cuda_emulator as ce

        self.ce = ce
        self.root = root
        (root / "mma_emulator.cpp").write_text(ce.prelude() + MAIN)
        self.exes: dict = {}

    def start(self, build, source: Path | None = None):
        """Start compiling `build` (optionally from a mutated copy of mma.cu) in the background."""
        ce = self.ce
        key = (str(source), tuple(sorted(ce.defines_of(build).items())))
        if key in self.exes:
            return key
        exe = self.root / f"mma_{len(self.exes)}"
        src = self.root / f"{exe.name}.cu"
        src.write_text(ce.emulated_source(source or ce.KERNELS / build.source))
        self.exes[key] = ce.compile_async(self.root / "mma_emulator.cpp", exe,
                                          {"KERNEL_FILE": f'"{src}"', **ce.defines_of(build)})
        return key

    def executable(self, build, source: Path | None = None) -> Path:
        return self.exes[self.start(build, source)].result()

    def run(self, build, precision, params, M, N, K, lda, ldb, ldc, offs=(0, 0, 0),
            source: Path | None = None) -> tuple[bool, str]:
        grid, block, smem = _cuda().geometry(M, N, K, **params, precision=precision)
        assert grid[1] == grid[2] == 1 and block[1] == block[2] == 1
        u_out, e_prod = BOUND[precision]
        args = [M, N, K, lda, ldb, ldc, *offs, grid[0], block[0], smem,
                _tolerance(precision, K), u_out, e_prod]
        out = subprocess.run([str(self.executable(build, source)), *map(str, args)],
                             capture_output=True, text=True, timeout=900)
        return out.returncode == 0, (out.stdout + out.stderr)[-3000:]


# (precision, layout, parameter changes, (align_a, align_b, vec_c))
ALIGNED = (16, 16, True)
EMU_CASES = (
    # every layout for bf16 and TF32 (ldmatrix / ldmatrix.trans / LDS.128 runs per operand); fp16 and
    # 3xTF32 (frags=1 by default) on layouts that cover both load paths of each operand
    [(p, lay, {}, ALIGNED) for p in ("bf16", "tf32") for lay in LAYOUTS]
    + [(p, lay, {}, ALIGNED) for p in ("fp16", "3xtf32") for lay in ("nn", "tt")]
    + [("bf16", "nn", {}, (4, 4, False)), ("bf16", "tt", {}, (2, 2, False)),
       ("fp16", "nt", {}, (2, 4, True)), ("fp16", "tn", {}, (4, 2, False)),
       ("tf32", "tn", {}, (4, 4, False)), ("3xtf32", "nt", {}, (4, 16, False))]
    + [("bf16", "nn", dict(BK=16), ALIGNED),                      # one k-step per tile (odd)
       ("fp16", "tn", dict(BK=64, STAGES=2), ALIGNED),
       ("tf32", "nt", dict(BK=32, frags=1), ALIGNED),
       ("3xtf32", "tn", dict(BK=32, STAGES=3), ALIGNED),
       ("bf16", "tt", dict(BM=64, BN=64, WM=32, WN=32, STAGES=3, group=4), ALIGNED),
       ("fp16", "nn", dict(WN=32, group=1), ALIGNED),             # 8 warps
       ("tf32", "tn", dict(BM=64, WM=32, STAGES=2), ALIGNED),
       ("bf16", "nt", dict(BM=256, BN=64, WM=64, WN=32, STAGES=2), ALIGNED),
       ("tf32", "nt", dict(BK=64, WM=128, WN=32, STAGES=2), ALIGNED),    # k-steps 4..7, 8 pieces
       ("bf16", "tn", dict(WM=128, WN=32, STAGES=3), ALIGNED),           # .trans pieces 4..7
       # TF32 runs of 4 and 16 floats (the default warp tile reads runs of 8): A's rows and B's
       # columns permuted with each run length's swizzle
       ("tf32", "tn", dict(BM=64, BN=128, WM=32, WN=128, STAGES=3), ALIGNED),
       ("3xtf32", "tt", dict(BN=64, WM=128, WN=32, STAGES=2), ALIGNED)]
)


def _case_id(case) -> str:
    precision, layout, changes, flags = case
    body = ",".join(f"{k}={v}" for k, v in changes.items()) or "defaults"
    return f"{precision}-{layout}-{body}-align{flags[0]}.{flags[1]}.{int(flags[2])}"


class _Defines:
    """What the emulator needs of a Build (its source and -D options), without running NVRTC:
    the defines build() would pass (mma.defines, the layout's, UNROLL), less MIN_BLOCKS, which
    only sets __launch_bounds__ (nothing on the CPU). The NVRTC builds of the same variants are
    checked in (a) and on the GPU."""

    source = "variants/mma.cu"  # the emulator runs the variant (the CPU twins live there)

    def __init__(self, layout: str, **params):
        from cuda_kernels._build import layout_defines

        d = {**_cuda().defines(**params), "UNROLL": True, **layout_defines(layout)}
        self.options = tuple(f"-D{k}={int(v) if isinstance(v, bool) else v}"
                             for k, v in sorted(d.items()))


def _case_build(case):
    precision, layout, changes, (aa, ab, vc) = case
    return _Defines(layout, **_params(**changes), precision=precision, align_a=aa, align_b=ab,
                    vec_c=vc)


def _ld(width: int, align: int, es: int) -> int:
    """A leading dimension (in elements) larger than `width` whose lines start on `align`-byte
    boundaries and on no larger power of two up to 16 (so each path is really exercised)."""
    ld = width + 3
    while not ((ld * es) % align == 0 and (align == 16 or (ld * es) % (2 * align) != 0)):
        ld += 1
    return ld


def _offset(align: int, es: int) -> int:
    """A storage offset (elements) that keeps the first line on `align` bytes and no more."""
    return 0 if align == 16 else align // es


def _shapes(changes, precision) -> list:
    # 1x1x1; K below BK; edges everywhere with K not a multiple of BK; a whole interior block
    # on full k-steps (the no-bounds-test path) next to edge blocks (the block tile as the build
    # resolves it: the automatic defaults are per precision)
    tile = _cuda().config(precision, **_params(**changes))
    BM, BN = tile["BM"], tile["BN"]
    return [(1, 1, 1), (37, 45, 13), (130, 67, 40), (BM + 3, BN + 5, 64)]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    import cuda_emulator as ce

    if ce.compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    emu = MmaEmulator(tmp_path_factory.mktemp("mma"))
    for case in EMU_CASES:  # start every compile at once; the cores work through them
        emu.start(_case_build(case))
    return emu


@cpu_only
@pytest.mark.parametrize("case", EMU_CASES, ids=_case_id)
def test_kernel_emulated(emulator, case):
    precision, layout, changes, (aa, ab, vc) = case
    es = ES[precision]
    build = _case_build(case)
    params = _params(**changes)
    for M, N, K in _shapes(changes, precision):
        lda = _ld(M if layout[0] == "t" else K, aa, es)
        ldb = _ld(K if layout[1] == "t" else N, ab, es)
        ldc = _ld(N, 2 * es if vc else es, es) if vc else _ld(N, 16, es) + 1
        offs = (_offset(aa, es), _offset(ab, es), 0 if vc else 1)
        ok, out = emulator.run(build, precision, params, M, N, K, lda, ldb, ldc, offs)
        assert ok, f"{_case_id(case)} {M}x{N}x{K}:\n{out}"
        assert re.search(r"rel_err=\d", out)


def test_the_emulated_smem_is_what_the_kernel_declares():
    """geometry()'s dynamic shared memory is mma.cu's DYNAMIC_SMEM_BYTES for the build's defines
    (the emulator allocates exactly what geometry() says, and ASan catches an access past it)."""
    for precision, changes in [(p, {}) for p in PRECISIONS] + [("bf16", dict(BK=64, STAGES=2))]:
        params = _params(**changes)
        b = _cuda().build(**params, precision=precision)
        d = {o[2:].split("=")[0]: int(o.split("=")[1]) for o in b.options
             if o.startswith("-D") and "=" in o and o.split("=")[1].isdigit()}
        declared = d["STAGES"] * (d["BM"] + d["BN"]) * d["BK"] * ES[precision]
        assert _cuda().geometry(100, 100, 100, **params, precision=precision)[2] == declared


# ------------------------------------------------------- (c) planted defects the emulator catches

MUTATIONS = [
    # the wait at the end of a k-tile one group too shallow: tile t+1 may not have landed
    ("cp_async_wait<STAGES - 2>();  // our copies of tile t + 1 have landed",
     "cp_async_wait<STAGES - 1>();  // our copies of tile t + 1 have landed", "bf16", "nn"),
    # the M/N-contiguous B tile read without .trans: every B fragment transposed
    ("ldsm_x4<!B_KMAJOR>(r, shared_address(Bs) + fb.ldsm(jj, ks));",
     "ldsm_x4<B_KMAJOR>(r, shared_address(Bs) + fb.ldsm(jj, ks));",
     "fp16", "nn"),
    # the TF32 runs (LDS.128) read without the swizzle their tile was written with
    ("base[c] = TILE::at(t, w + RUN * g + CE * c);",
     "base[c] = t * LEN + w + RUN * g + CE * c;", "tf32", "nn"),
    # the TF32 runs' C store without undoing the column permutation
    ("const int col = n0 + wn + NJ * (2 * t4 + e) + j;",
     "const int col = n0 + wn + 8 * j + 2 * t4 + e;", "tf32", "nn"),
]


@cpu_only
@pytest.mark.parametrize("old,new,precision,layout", MUTATIONS,
                         ids=["shallow-wait", "no-trans", "reader-without-swizzle",
                              "store-without-unpermuting"])
def test_the_emulator_catches_planted_defects(emulator, tmp_path, old, new, precision, layout):
    text = (ROOT / "cuda_kernels" / "variants" / "mma.cu").read_text()
    assert old in text, old
    mutated = tmp_path / "mma.cu"
    mutated.write_text(text.replace(old, new))
    build = _Defines(layout, **_params(), precision=precision)
    failed = False
    for M, N, K in [(37, 45, 70), (130, 67, 100)]:
        ok, out = emulator.run(build, precision, _params(), M, N, K,
                               _ld(M if layout[0] == "t" else K, 16, ES[precision]),
                               _ld(K if layout[1] == "t" else N, 16, ES[precision]),
                               _ld(N, 16, ES[precision]), source=mutated)
        failed = failed or not ok
    assert failed, f"the mutation went unnoticed:\n{new}"


# The tensor core rounds its sums toward zero (mma.cu: lab_round_to_zero). 3xTF32 carried
# through one accumulator for all K / 8 k-steps inherits that bias (2.9e-5 relative at K = 4096 on
# the H100, above fp32's 1e-5); summed per k-step in a fresh accumulator and added in fp32 it
# stays at fp32 level. Both are run at K = 4096 in the emulator, with the carried form planted.
CARRIED = ("""                float t[4] = {0.f, 0.f, 0.f, 0.f};
                lab_mma_piece(t, xa, xb, tid, i, j, SETS - 1, 0);
                lab_mma_piece(t, xa, xb, tid, i, j, 0, SETS - 1);
                lab_mma_piece(t, xa, xb, tid, i, j, 0, 0);
                for (int e = 0; e < 4; ++e) acc[i][j][e] += t[e];""",
           """                lab_mma_piece(acc[i][j], xa, xb, tid, i, j, SETS - 1, 0);
                lab_mma_piece(acc[i][j], xa, xb, tid, i, j, 0, SETS - 1);
                lab_mma_piece(acc[i][j], xa, xb, tid, i, j, 0, 0);""")
LONG_K = dict(BM=64, BN=64, WM=32, WN=32, STAGES=3)


@cpu_only
@pytest.mark.parametrize("carried", [False, True], ids=["fresh-per-kstep", "carried-planted"])
def test_3xtf32_keeps_fp32_accuracy_at_long_k_despite_truncating_sums(emulator, tmp_path,
                                                                      carried):
    source = None
    if carried:
        text = (ROOT / "cuda_kernels" / "variants" / "mma.cu").read_text()
        assert CARRIED[0] in text
        source = tmp_path / "mma.cu"
        source.write_text(text.replace(CARRIED[0], CARRIED[1]))
    params = _params(**LONG_K)
    build = _Defines("nn", **params, precision="3xtf32")
    M, N, K = 64, 64, 4096
    ok, out = emulator.run(build, "3xtf32", params, M, N, K, _ld(K, 16, 4), _ld(N, 16, 4),
                           _ld(N, 16, 4), source=source)
    err = float(re.search(r"rel_err=([0-9.eE+-]+)", out).group(1))
    if carried:
        assert not ok and err > chk.tolerance("3xtf32", K), out
    else:
        assert ok and err < 2e-6, out


@cpu_only
@pytest.mark.parametrize("layout", ["nn", "tt"])  # B runs rounded per piece / B by ldmatrix
def test_tf32_rounds_both_operands_to_nearest(emulator, layout):
    """TF32_RN=1 (the default) rounds every A and B fragment register to nearest before the
    tensor core reads it; TF32_RN=0 leaves the truncation to the tensor core. Rounding both
    operands takes the error to 0.38 of truncation's (2.95e-4 vs 7.76e-4 at 64x64x512, nn); B
    left truncated gives 0.60."""
    params = _params(BM=64, BN=64, WM=32, WN=32, STAGES=3)
    M, N, K = 64, 64, 512
    errs = {}
    for rn in (1, 0):
        build = _Defines(layout, **params, precision="tf32")
        build.options = build.options + (f"-DTF32_RN={rn}",)
        ok, out = emulator.run(build, "tf32", params, M, N, K,
                               _ld(M if layout[0] == "t" else K, 16, 4),
                               _ld(K if layout[1] == "t" else N, 16, 4), _ld(N, 16, 4))
        assert ok, out
        errs[rn] = float(re.search(r"rel_err=([0-9.eE+-]+)", out).group(1))
    assert errs[1] < 0.5 * errs[0], errs  # 0.38; B left truncated: 0.60


# ------------------------------------------------------- (d) validate(), launchers, variants


def _one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message.rstrip("."), message


BAD = [
    (dict(BM=96), "powers of two"),
    (dict(STAGES=5), "STAGES"),
    (dict(WM=128, WN=64), "accumulators"),
    (dict(BM=64, WM=128), "multiple of WM"),
    (dict(BM=256, BN=256, WM=32, WN=32), "warps"),
    (dict(BK=8), "at least 16"),
    (dict(frags=3), "frags"),
    (dict(WN=16), "at least 32"),
]


@pytest.mark.parametrize("changes,words", BAD, ids=[w for _, w in BAD])
def test_validate_refuses_in_one_sentence(changes, words):
    params = {**_params(), **changes}
    with pytest.raises(LabError) as info:
        _cuda().validate(**params)
    _one_sentence(str(info.value))
    assert words in str(info.value), str(info.value)


def test_validate_checks_precision_dependent_rules_when_the_precision_is_known():
    # 256 x 256 x 64 TF32 tiles in 4 stages: 512 KiB of shared memory; bf16 BK=64, 2 stages fit
    params = {**_params(), "BM": 256, "BN": 256, "BK": 64, "WM": 64, "WN": 64, "STAGES": 4}
    _cuda().validate(**params)  # no precision: only the precision-free rules
    with pytest.raises(LabError, match="227 KiB"):
        _cuda().validate(**params, precision="tf32")
    _cuda().validate(**{**params, "STAGES": 2}, precision="bf16")
    # BM=64, BK=16 bf16 with 8 warps: 128 chunks of A for 256 threads
    small = {**_params(), "BM": 64, "BK": 16, "WM": 32, "WN": 32}
    with pytest.raises(LabError, match="does not split evenly"):
        _cuda().validate(**small, precision="bf16")
    _cuda().validate(**small, precision="tf32")


def test_automatic_warp_tile_is_validated_as_every_value_it_stands_for():
    # BN = 32 with WN = 0: fits in bf16 (its tuned WN is 32) and in 3xtf32 (its tuned 64 does not
    # fit, so the previous default, 32), not in tf32 (64, tuned and previous)
    params = {**_params(), "BN": 32}
    _cuda().validate(**params, precision="3xtf32")
    _cuda().validate(**params, precision="bf16")
    with pytest.raises(LabError, match="automatic: 64") as info:
        _cuda().validate(**params, precision="tf32")
    _one_sentence(str(info.value))
    with pytest.raises(LabError, match="automatic: 64"):
        _cuda().validate(**params)  # no precision: every value WN = 0 can mean


def test_automatic_bk_and_frags():
    mma = _cuda()
    assert mma.resolve("bf16") == (64, 2) and mma.resolve("fp16") == (64, 2)
    assert mma.resolve("tf32") == (32, 2) and mma.resolve("3xtf32") == (16, 1)
    assert mma.resolve("bf16", 64, 1) == (64, 1)
    # 256 x 128 tiles of 128-byte lines: 3 stages for bf16, 4 for tf32
    assert mma.smem_bytes(precision="bf16") == 3 * 384 * 128
    assert mma.smem_bytes(precision="tf32") == 4 * 384 * 128


@cpu_only
def test_the_launcher_picks_alignment_variants_from_the_operands():
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    mma = _cuda()
    cases = [
        # (A, B, C, expected flags)
        (torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 32, dtype=torch.bfloat16),
         torch.empty(64, 32, dtype=torch.bfloat16), (16, 16, True)),
        (torch.empty(64, 66, dtype=torch.bfloat16)[:, :64],            # lda = 66: 4 bytes
         torch.empty(64, 33, dtype=torch.bfloat16)[:, :32],            # ldb = 33: 2 bytes
         torch.empty(64, 33, dtype=torch.bfloat16)[:, :32], (4, 2, False)),
        (torch.empty(64 * 64 + 1)[1:].view(64, 64), torch.empty(64, 32),
         torch.empty(64 * 32 + 1)[1:].view(64, 32), (4, 16, False)),   # fp32 offset by 1
        (torch.empty(64 * 64 + 2)[2:].view(64, 64), torch.empty(64, 36)[:, :32],
         torch.empty(64 * 32 + 2)[2:].view(64, 32), (4, 16, True)),    # 8-byte C is enough
    ]
    for a, b, c, expected in cases:
        p = describe(a, b, c, CUDA)
        flags = mma.variant_flags(p)
        assert (flags["align_a"], flags["align_b"], flags["vec_c"]) == expected, flags


@cpu_only
def test_prepare_needs_a_precision_it_can_compute_in():
    mma = _cuda()
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with pytest.raises(LabError) as info:
        mma.prepare(a, b, torch.empty(8, 8), precision="fp32")
    _one_sentence(str(info.value))
    with pytest.raises(LabError, match="bfloat16"):
        mma.prepare(a, b, torch.empty(8, 8), precision="bf16")


# ------------------------------------------------------- (e) the Triton twin, interpreted


def _triton():
    return get_stage(STAGE).module("triton")


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_triton_twin_every_precision_and_layout(precision, layout):
    """Small odd shapes against a float64 reference of the operands the kernel received (the
    inputs already rounded to bf16 / fp16). The interpreter accepts input_precision="tf32" and
    "tf32x3" but multiplies in fp32 (NumPy), so TF32 passes at fp32-level error here."""
    for M, N, K, params in ((33, 17, 40, {}), (70, 9, 129, dict(BLOCK_M=64, BLOCK_N=64,
                                                                BLOCK_K=32, GROUP_M=4))):
        a, b = chk.make_inputs(M, N, K, M + N + K, "cpu", dtype=DTYPE[precision], layout=layout)
        c = torch.empty((M, N), dtype=DTYPE[precision])
        launch = _triton().prepare(a, b, c, precision=precision, **params)
        assert launch.problem.precision == precision
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (precision, layout, M, N, K, result.reason)
        assert c.dtype == DTYPE[precision]


def _views(M, N, K, kind, dt):
    """(a, b, c, ref): the same random matrices as offset, sliced or strided views."""
    a0, b0 = chk.make_inputs(M, N, K, len(kind), "cpu", dtype=dt)
    if kind == "offset":  # storage offsets that break 16-byte alignment
        a = torch.empty(M * K + 1, dtype=dt)[1:].view(M, K).copy_(a0)
        b = torch.empty(K * N + 3, dtype=dt)[3:].view(K, N).copy_(b0)
        c = torch.empty(M * N + 1, dtype=dt)[1:].view(M, N)
    elif kind == "sliced":  # row strides larger than the widths, C a slice of a bigger matrix
        a = torch.empty(M, K + 5, dtype=dt)[:, 2:K + 2].copy_(a0)
        b = torch.empty(K + 1, N + 7, dtype=dt)[1:, :N].copy_(b0)
        c = torch.empty(M + 2, N + 3, dtype=dt)[1:M + 1, 3:]
    else:  # strided: no unit stride at all (A, C)
        a = torch.empty(2 * M, 2 * K, dtype=dt)[::2, ::2].copy_(a0)
        b = b0
        c = torch.empty(M, 3 * N, dtype=dt)[:, ::3]
    return a, b, c, chk.reference(a0, b0)


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", ["offset", "sliced", "strided"])
def test_triton_twin_on_offset_sliced_and_strided_views(precision, kind):
    a, b, c, ref = _views(19, 35, 41, kind, DTYPE[precision])
    launch = _triton().prepare(a, b, c, precision=precision)
    result = chk.check(launch, c, ref, 41, precision)
    assert result.passed, (precision, kind, result.reason)


def test_triton_validate_refuses_in_one_sentence():
    tv = _triton().OFFER.validate
    tv(_params("triton"), "bf16")
    for changes, words in ((dict(BLOCK_M=256, BLOCK_N=256, num_warps=4), "accumulators"),
                           (dict(BLOCK_K=128, num_stages=5), "227 KiB"),
                           (dict(BLOCK_N=96), "powers of two"),
                           (dict(kmajor_b=1), "stage wgmma")):
        with pytest.raises(LabError) as info:
            tv({**_params("triton"), **changes}, None)
        _one_sentence(str(info.value))
        assert words in str(info.value)
    # 128 x 128 x 64 floats in 4 stages is 256 KiB: too much for TF32, not for bf16
    big = {**_params("triton"), "BLOCK_K": 64, "num_stages": 4}
    with pytest.raises(LabError, match="tf32"):
        tv(big, "tf32")
    tv(big, "bf16")


def test_triton_twin_resolves_and_shows_what_it_compiles():
    m = _triton()
    for precision, bk in (("tf32", 32), ("3xtf32", 32), ("bf16", 64), ("fp16", 64)):
        r = m.OFFER.resolve(_params("triton"), 4096, 4096, 4096, precision, 132)
        assert r == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": bk, "GROUP_M": 8,
                     "num_warps": 8, "num_stages": 3}
        assert m.OFFER.show(r) == (f"BLOCK_M=128,BLOCK_N=128,BLOCK_K={bk},GROUP_M=8,"
                                   f"num_warps=8,num_stages=3")
    assert m.OFFER.kernel_names(_params("triton"), "bf16") == ("matmul_mma_kernel",)


# The Triton twins compiled for sm_90 without a GPU (triton_kernels._common.FakeDriver), from the
# launch each stage's prepare() records (lab.profile.triton_launch, the profiler's path): the
# instructions their PTX holds, and DISABLE_MMA_V3 as it is after the compile.
PTX_PROBE = r"""
import json, os, sys
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab.profile import triton_launch
from lab.stages import parse_variants
from triton_kernels._common import FakeDriver
out = {}
for spec in sys.argv[2:]:
    captured = triton_launch(parse_variants([spec])[0], (256, 256, 256), sys.argv[1])
    previous = driver._active
    driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        compiled = captured["kernel"].warmup(*captured["args"], grid=captured["grid"],
                                             **captured["meta"])
    finally:
        driver._active = previous
    ptx = compiled.asm["ptx"]
    out[spec] = {"mma.sync": ptx.count("mma.sync.aligned"), "wgmma": ptx.count("wgmma.mma_async"),
                 "env": os.environ.get("DISABLE_MMA_V3")}
print(json.dumps(out))
"""


def triton_ptx(precision: str, *specs: str) -> dict:
    """{spec: {"mma.sync": n, "wgmma": n, "env": DISABLE_MMA_V3 after the compile}}, the specs
    compiled in this order in one process; skips where this Triton cannot compile without a GPU."""
    import json

    r = run_python(PTX_PROBE, precision, *specs, timeout=900, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: " +
                        r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


@cpu_only
@pytest.mark.parametrize("precision", ["bf16", "tf32", "3xtf32"])
def test_triton_twin_compiles_to_mma_sync_on_sm90(precision):
    """Left alone, Triton lowers tl.dot to wgmma on sm_90; the mma twin's kernel compiles with
    DISABLE_MMA_V3 set, so its PTX holds mma.sync and no wgmma, and the variable is unset again
    afterwards: the wgmma twin compiled next in the same process gets wgmma."""
    ptx = triton_ptx(precision, "mma", "wgmma")
    assert ptx["mma"]["mma.sync"] > 0 and ptx["mma"]["wgmma"] == 0, ptx
    assert ptx["mma"]["env"] is None, ptx
    assert ptx["wgmma"]["wgmma"] > 0 and ptx["wgmma"]["mma.sync"] == 0, ptx


def test_the_mma_sync_variables_are_set_only_while_compiling(monkeypatch):
    m = _triton()
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    monkeypatch.setenv("DISABLE_MMA_V5", "0")
    with m.mma_sync_compiles():
        assert os.environ["DISABLE_MMA_V3"] == os.environ["DISABLE_MMA_V5"] == "1"
    assert "DISABLE_MMA_V3" not in os.environ and os.environ["DISABLE_MMA_V5"] == "0"
    with pytest.raises(RuntimeError), m.mma_sync_compiles():
        raise RuntimeError("a failed compile")
    assert "DISABLE_MMA_V3" not in os.environ


def test_registry_defaults_are_the_documented_ones():
    spec = get_stage(STAGE)
    assert set(spec.precisions_for("triton")) == set(spec.precisions_for("cuda")) == set(PRECISIONS)
    d = spec.defaults()
    assert (d["BM"], d["BN"], d["BK"], d["WM"], d["WN"], d["STAGES"]) == (0, 0, 0, 0, 0, 0)
    assert "wgmma" not in d  # Hopper's kernel is its own stage
    assert _params("triton") == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 0, "GROUP_M": 8,
                                 "num_warps": 8, "num_stages": 3}
    # all automatic, per precision (cuda_kernels/mma.py, AUTO): WN = 0 is 32 columns per warp for
    # bf16 (256 x 128 block, 128 x 32 warps: 8 warps), 64 for tf32 (256 x 128, 64 x 64: 8 warps)
    # and 3xtf32 (128 x 64, 32 x 64: 4 warps), in the build and the launch
    mma = _cuda()
    for precision, wn, warps in (("bf16", 32, 8), ("tf32", 64, 8), ("3xtf32", 64, 4)):
        assert mma.warp_n(0, precision) == wn
        assert mma.defines(**_params(), precision=precision)["WN"] == wn
        assert mma.geometry(1000, 1000, 1000, **_params(), precision=precision)[1][0] == \
            warps * 32
    page = (ROOT / "docs" / "stages" / "mma.md").read_text()
    assert "results/2026-11-22-h100/32-mma-done.csv" in page  # its numbers come from a file
    assert "docs/stages/wgmma.md" in page or "(wgmma.md)" in page  # and it points to the next


# ------------------------------------------------------- GPU


GPU_SHAPES = [(1, 1, 1), (33, 17, 40), (257, 129, 1000), (256, 384, 512), (1000, 999, 1003)]


def _gpu_operands(M, N, K, precision, layout, seed):
    return chk.make_inputs(M, N, K, seed, "cuda", dtype=DTYPE[precision], layout=layout)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_mma_on_the_gpu(precision, layout):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for M, N, K in GPU_SHAPES:
        a, b = _gpu_operands(M, N, K, precision, layout, M + N + K)
        ref = chk.reference(a, b)
        c = torch.empty((M, N), dtype=DTYPE[precision], device="cuda")
        launch = _cuda().prepare(a, b, c, precision=precision)
        assert launch.build.kernel == "matmul_mma"  # mma.sync on every GPU, sm_90 too
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (precision, layout, M, N, K, result.reason)
        if precision == "3xtf32" and K >= 512:  # fp32-level accuracy, not TF32's
            assert result.rel_err < 2e-6, result.rel_err
        if precision == "tf32" and K >= 512:  # TF32 is really in use
            assert result.rel_err > 1e-5, result.rel_err


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_cuda_mma_on_unaligned_views_and_variants_on_the_gpu(precision):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dt = DTYPE[precision]
    M, N, K = 300, 203, 517
    a0, b0 = chk.make_inputs(M, N, K, 7, "cuda", dtype=dt)
    ref = chk.reference(a0, b0)
    views = {
        "offset": (torch.empty(M * K + 1, dtype=dt, device="cuda")[1:].view(M, K).copy_(a0),
                   torch.empty(K * N + 3, dtype=dt, device="cuda")[3:].view(K, N).copy_(b0),
                   torch.empty(M * N + 1, dtype=dt, device="cuda")[1:].view(M, N)),
        "sliced": (torch.empty(M, K + 6, dtype=dt, device="cuda")[:, 2:K + 2].copy_(a0),
                   torch.empty(K, N + 7, dtype=dt, device="cuda")[:, :N].copy_(b0),
                   torch.empty(M, N + 2, dtype=dt, device="cuda")[:, 1:N + 1]),
    }
    for name, (a, b, c) in views.items():
        launch = _cuda().prepare(a, b, c, precision=precision)
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (name, result.reason)
    variants = [dict(BK=16 if ES[precision] == 2 else 32), dict(STAGES=2), dict(frags=1),
                dict(BM=64, BN=64, WM=32, WN=32, STAGES=3, group=1), dict(WN=32),
                dict(BM=256, BN=128, WN=64)]
    for changes in variants:
        c = torch.empty((M, N), dtype=dt, device="cuda")
        params = _params(**changes)
        try:
            _cuda().validate(**params, precision=precision)
        except LabError:
            continue
        launch = _cuda().prepare(a0, b0, c, precision=precision, **params)
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (changes, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_triton_mma_on_the_gpu(precision, layout):
    """The Triton twin at odd and aligned sizes, and the kernel those launches compiled: the
    profiler's recorded launch of the same shape finds it in the kernel's cache, and its PTX holds
    mma.sync, not wgmma, on this GPU too."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from lab.profile import triton_launch
    from lab.stages import parse_variants

    for M, N, K in GPU_SHAPES:
        a, b = _gpu_operands(M, N, K, precision, layout, M + N + K)
        c = torch.empty((M, N), dtype=DTYPE[precision], device="cuda")
        launch = _triton().prepare(a, b, c, precision=precision)
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (precision, layout, M, N, K, result.reason)
    captured = triton_launch(parse_variants(["mma"])[0], (256, 384, 512), precision)
    compiled = captured["kernel"].warmup(*captured["args"], grid=captured["grid"],
                                         **captured["meta"])
    ptx = compiled.asm["ptx"]
    assert "mma.sync.aligned" in ptx and "wgmma" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("K", [4096, 32768])
def test_cuda_3xtf32_stays_at_fp32_accuracy_at_long_k_on_the_gpu(K):
    """The tensor core truncates its sums; carried through K / 8 k-steps that gave 2.9e-5 at
    K = 4096 on the H100. Summed per k-step and added in fp32, 3xTF32 must stay under the fp32
    threshold, at 2e-6, and at K = 4096 within 2x of cuBLAS fp32 (at K = 32768 on the H100 cuBLAS
    fp32 measured 5.1e-7 for this small M x N against our 1.1e-6: its kernel for a long, thin
    problem probably sums K in shorter pieces; ours runs one sum per element)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N = 256, 384
    a, b = chk.make_inputs(M, N, K, 11, "cuda", dtype=torch.float32)
    ref = chk.reference(a, b)
    c = torch.empty((M, N), dtype=torch.float32, device="cuda")
    result = chk.check(_cuda().prepare(a, b, c, precision="3xtf32"), c, ref, K, "3xtf32")
    assert result.passed, result.reason
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cublas = chk.compare(a @ b, ref, K, "fp32").rel_err
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    if K <= 4096:
        assert result.rel_err <= 2 * cublas, (result.rel_err, cublas)
    assert result.rel_err < 2e-6, result.rel_err
