"""NaN and Inf through the tensor-core stages' TF32 rounding and 3xTF32 split
(cuda_kernels/variants/mma.cu: tf32_rn, tf32_hi, tf32_split; cuda_kernels/hopper.cuh: tf32_head,
tf32_tail).

The bugs these tests keep out. (1) TF32 operands were rounded by adding half a TF32 unit (0x1000)
to their bit pattern. The GPU's fp32 arithmetic makes the NaN 0x7fffffff (0/0, log(-1), Inf -
Inf), and 0x7fffffff + 0x1000 = 0x80000fff, which the tensor core reads as -0 (0xffffffff wraps
to +0): a NaN in A or B vanished from C in tf32, and in 3xtf32 (head -0, tail rounded to 0),
where cuBLAS propagates it. mma.cu's TF32_RN now picks a NaN-safe rounding: 1 (the default)
cvt.rn.tf32.f32 on sm_90 (nearest even; cvt.rna below sm_90), 2 the add guarded by a finite
test, 0 none (the tensor core truncates; 3xTF32 still splits with mode 2's rounding). (2) 3xTF32
split an Inf into the head Inf and the tail Inf - Inf = NaN: C was NaN wherever an Inf entered,
where fp32 gives +-Inf. Both CUDA kernels now split Inf and NaN into the head +-1 and the tail x.

CPU (skipped when a GPU is present, like the other CPU-mode tests):
(a) the CPU twins of tf32_rn / tf32_hi / tf32_split (g++, a tiny harness around mma.cu) against a
    NumPy model of the sm_90 build's bits, and that model against a float64 reference (nearest
    even for mode 1, ties away for mode 2) on special values (zeros, denormals, ties with even and
    odd bit 13, their neighbours, FLT_MAX, Inf, the NaNs) and random bit patterns;
(b) the kernel emulated on the CPU (tests/cuda_emulator.py's prelude, as tests/test_mma.py) with
    NaN (0x7fffffff, 0xffffffff, 0x7fc00000) and +-Inf planted in A and B, at first, last and
    middle rows, columns and k and at block and k-tile edges, and a zero and a TF32-exact value
    beside each Inf: every C element whose row of A or column of B holds a NaN is NaN, one an Inf
    enters is IEEE's +-Inf or NaN (the float64 sum) in tf32 and 3xtf32 alike, every other element
    is finite and within the precision's elementwise bound; tf32 and 3xtf32, TF32_RN 1 and 2,
    layouts nn and tt. Planted, the old unguarded add fails it (NaN lost), and so do the old
    3xTF32 split and a split that zeroes only an Inf's tail (Inf turned into NaN);
(c) NVRTC and SASS: sm_90's default TF32 build rounds with F2FP.TF32 (cvt.rn) and no guarded
    adds; every mode builds spill-free for sm_90 and sm_80; TF32_RN outside 0..2 is refused; the
    default 3xtf32 builds of both stages (mma: sm_90, wgmma: sm_90a, every layout) are spill-free
    and carry the split's finite test and +-1 head, which their tf32 builds do not.
GPU (marked `gpu`): (d) the device's rounding and split bits are the CPU twins' (the NumPy
model), and wgmma.cu's split gives the model's bits; (e) the public launchers of both backends,
NaN planted as bit patterns and made by the GPU itself: C is NaN exactly where torch.matmul of the
float64 inputs is, and close to it elsewhere, in tf32 and 3xtf32 (CUDA with TF32_RN 1 and 2, and
the Triton twin, whose tl.dot is mma.sync too) and in bf16 / fp16; Inf as IEEE says; (f) both
tensor-core stages (mma, wgmma), both backends, every precision and layout, with (b)'s planting
at the default tiles' edges: C's NaN, +Inf and -Inf are exactly torch.matmul's in fp32.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import ROOT, cpu_only, stage_module, stage_params
from lab import check as chk

from mma_defaults_helpers import count_ops, sass_mix

KERNELS = ROOT / "cuda_kernels"

NAN_BITS = (0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000)  # GPU arithmetic's NaN, its negation, torch's
INF_BITS = (0x7F800000, 0xFF800000)


def _cuda():
    return stage_module("mma", "cuda")


def _triton():
    return stage_module("mma", "triton")


def _params(backend: str = "cuda", **changes) -> dict:
    return stage_params("mma", backend, **changes)


def _with_tf32_rn(monkeypatch, rn: int | None):
    """Every build of cuda_kernels.mma made while the test runs gets -DTF32_RN=rn (None: the
    source's default), as scripts/experiments/tf32_truncation.py does for its runs."""
    if rn is None:
        return
    mma = _cuda()
    defines = mma.defines
    monkeypatch.setattr(mma, "defines", lambda *a, **k: {**defines(*a, **k), "TF32_RN": rn})


# ------------------------------------------------------- NumPy models of the rounding


def _u32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.uint64).astype(np.uint32)


def model_bits(x: np.ndarray, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """(tf32_rn(x), tf32_hi(x)) as the sm_90 build computes them, bit for bit. Mode 1: cvt.rn,
    nearest even, low 13 bits cleared, Inf kept, every NaN 0x7fffe000 (as an H100 gave); mode 2:
    x + 0x1000 where the exponent field is not all ones, x itself elsewhere."""
    u = x.astype(np.uint64)
    special = (u & 0x7F800000) == 0x7F800000
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if mode == 1:
        rn = np.where(special, u, (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000)
        rn = np.where(nan, 0x7FFFE000, rn)
    else:
        rn = np.where(special, u, u + 0x1000)
    rn = (rn & 0xFFFFFFFF).astype(np.uint32)
    return rn, rn & np.uint32(0xFFFFE000)


def model_split(x: np.ndarray, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """3xTF32's split of x as mma.cu's tf32_split and wgmma.cu's tf32_head / tf32_tail compute
    it: (head bits, the tail as float32 bit patterns before its rounding, x - head). A finite x:
    head tf32_hi(x). Inf and NaN: head +-1 (x's sign: x & 0xbf800000), so that the tail x - head
    is x itself (+-Inf, NaN) and every product of a head is finite or the IEEE product's Inf."""
    finite = (x.astype(np.uint64) & 0x7F800000) != 0x7F800000
    head = np.where(finite, model_bits(x, mode)[1], x & np.uint32(0xBF800000)).astype(np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = (x.view(np.float32) - head.view(np.float32)).view(np.uint32)
    return head, diff


def reference_tf32(x: np.ndarray, ties_even: bool) -> np.ndarray:
    """x (float32 bit patterns) rounded to TF32 (10 mantissa bits) in float64 arithmetic: to
    nearest, ties to even or away from zero; overflow to +-Inf; Inf and NaN as they are. Returned
    as float32 bit patterns."""
    f = x.view(np.float32).astype(np.float64)
    out = f.copy()
    fin = np.isfinite(f)
    a = np.abs(f[fin])
    _, e = np.frexp(a)  # a = m 2^e, m in [0.5, 1): the unit in the last TF32 place is 2^(e-11)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -126) - 10)  # denormals: TF32's fixed 2^-136
    q = a / ulp  # exact: at most 24 significant bits, 13 of them below the point
    r = np.round(q) if ties_even else np.floor(q + 0.5)
    v = r * ulp
    v = np.where(v >= 2.0**128, np.inf, v)
    out[fin] = np.copysign(v, f[fin])
    return out.astype(np.float32).view(np.uint32)


SPECIALS = _u32([
    0x00000000, 0x80000000,                                     # +-0
    0x00000001, 0x00000FFF, 0x00001000, 0x00001001, 0x00001FFF,  # denormals (ties: 0x1000, 0x3000)
    0x00003000, 0x007FF000, 0x007FFFFF, 0x80001000, 0x80003000,
    0x00800000, 0x00801000, 0x00803000,                         # the smallest normals
    0x3F800000, 0x3F801000, 0x3F803000,                         # ties, bit 13 even / odd
    0x3F800FFF, 0x3F801001, 0x3F802FFF, 0x3F803001,             # just below / above them
    0xBF801000, 0xBF803000, 0xBF800FFF, 0xBF803001,             # and negative
    0x3FFFF000, 0x3FFFEFFF, 0x3FFFFFFF,                         # carries into the exponent
    0x7F7FFFFF, 0xFF7FFFFF,                                     # +-FLT_MAX: round up to +-Inf
    0x7F7FD000, 0x7F7FE000, 0x7F7FEFFF, 0x7F7FF000,             # ties below FLT_MAX
    *INF_BITS, *NAN_BITS, 0xFFC00000, 0x7FBFFFFF, 0x7FFFE000,
])
LOW_PAYLOAD_NANS = _u32([0x7F800001, 0xFF800001, 0x7F801000])  # the documented corner


def _random_bits(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("mode", [1, 2])
def test_numpy_model_rounds_as_the_float64_reference(mode):
    """The model's bits (what the tests below expect of the CPU twins and of the GPU) are the
    TF32 rounding the mode promises: nearest even (1) or nearest, ties away (2), after the tensor
    core drops the low 13 bits; Inf stays Inf, NaN stays NaN."""
    x = np.concatenate([SPECIALS, _random_bits(50000)])
    _, hi = model_bits(x, mode)  # hi: what the tensor core reads of tf32_rn(x) (low bits dropped)
    nan = (x.astype(np.uint64) & 0x7FFFFFFF) > 0x7F800000
    ref = reference_tf32(x[~nan], ties_even=mode == 1)
    bad = np.nonzero(hi[~nan] != ref)[0]
    assert bad.size == 0, [f"{a:08x} -> {b:08x}, want {c:08x}"
                           for a, b, c in zip(x[~nan][bad][:8], hi[~nan][bad][:8], ref[bad][:8])]
    assert np.isnan(hi[nan].view(np.float32)).all()
    # spot checks a reader can follow: ties go to even in mode 1, away in mode 2
    table = {0x3F801000: (0x3F800000, 0x3F802000), 0x3F803000: (0x3F804000, 0x3F804000),
             0x00001000: (0x00000000, 0x00002000), 0x7F7FFFFF: (0x7F800000, 0x7F800000),
             0x7F7FD000: (0x7F7FC000, 0x7F7FE000), 0xBF801000: (0xBF800000, 0xBF802000)}
    for inp, want in table.items():
        assert int(model_bits(_u32([inp]), mode)[1][0]) == want[mode - 1], hex(inp)
    # the corner mma.cu documents: a NaN with payload only in the low 13 bits reads as Inf in
    # mode 2 (as under plain truncation and sm_80's cvt.rna); sm_90's cvt.rn keeps it a NaN
    _, corner = model_bits(LOW_PAYLOAD_NANS, mode)
    assert np.isnan(corner.view(np.float32)).all() == (mode == 1)


# ------------------------------------------------------- (a) the CPU twins, bit for bit

HARNESS_MAIN = r'''
#include KERNEL_FILE
// tf32_rn, tf32_hi and tf32_split (hi, lo) of every hex word on stdin, one line each
int main() {
    unsigned x, hi, lo;
    while (std::scanf("%x", &x) == 1) {
        tf32_split(x, hi, lo);
        std::printf("%08x %08x %08x %08x\n", tf32_rn(x), tf32_hi(x), hi, lo);
    }
    return 0;
}
'''


def _emulator_module():
    sys.path.insert(0, str(ROOT / "tests"))
    import cuda_emulator as ce

    if ce.compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to build the CPU twins with")
    return ce


def _prelude(ce) -> str:
    head, sep, _ = ce.EMULATOR.partition("#include KERNEL_FILE")
    if not sep:
        pytest.skip("tests/cuda_emulator.py's prelude has no '#include KERNEL_FILE' to cut at")
    return head


def _tile_defines() -> dict:
    """The defines a default tf32 build of mma.cu passes (mma.cu has no defaults for its tile)."""
    defines = _cuda().defines(precision="tf32")
    return {k: int(v) if isinstance(v, bool) else v for k, v in defines.items()}


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """mode -> the harness executable (mma.cu's CPU twins of tf32_rn / tf32_hi, PREC_TF32)."""
    ce = _emulator_module()
    root = tmp_path_factory.mktemp("tf32_twins")
    src = root / "mma.cu"
    src.write_text(ce.emulated_source(KERNELS / "variants" / "mma.cu"))
    (root / "harness.cpp").write_text(_prelude(ce) + HARNESS_MAIN)
    tile = _tile_defines()
    futures = {mode: ce.compile_async(root / "harness.cpp", root / f"twin_{mode}",
                                      {**tile, "KERNEL_FILE": f'"{src}"', "TF32_RN": mode},
                                      flags=("-O1",))
               for mode in (1, 2)}
    return {mode: f.result() for mode, f in futures.items()}


def _run_twin(exe: Path, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """(tf32_rn(x), tf32_hi(x), tf32_split(x)'s hi, its lo) as the CPU twins compute them."""
    out = subprocess.run([str(exe)], input="\n".join(f"{int(v):08x}" for v in x),
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    words = np.array([int(w, 16) for w in out], dtype=np.uint64).astype(np.uint32)
    return tuple(words[i::4] for i in range(4))


def _same_tf32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether two operand registers give the tensor core one value: the same top 19 bits, or
    both NaN."""
    ma, mb = a & np.uint32(0xFFFFE000), b & np.uint32(0xFFFFE000)
    return (ma == mb) | (np.isnan(ma.view(np.float32)) & np.isnan(mb.view(np.float32)))


@cpu_only
@pytest.mark.parametrize("mode", [1, 2])
def test_cpu_twins_compute_the_sm90_bits(twins, mode):
    """mma.cu's host tf32_rn / tf32_hi (what the emulator runs) against the model: exactly the
    bits of the sm_90 build (mode 1: cvt.rn, NaN -> 0x7fffe000; mode 2: the guarded add)."""
    x = np.concatenate([SPECIALS, LOW_PAYLOAD_NANS, _random_bits(20000, seed=1)])
    rn, hi, split_hi, split_lo = _run_twin(twins[mode], x)
    want_rn, want_hi = model_bits(x, mode)
    want_head, diff = model_split(x, mode)
    for name, got, want in (("tf32_rn", rn, want_rn), ("tf32_hi", hi, want_hi),
                            ("tf32_split hi", split_hi, want_head)):
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (name, [f"{a:08x} -> {b:08x}, want {c:08x}"
                                      for a, b, c in zip(x[bad][:8], got[bad][:8], want[bad][:8])])
    # 3xTF32's tail: tf32_rn(x - hi), as the tensor core reads it (mode 2 tests x once for both
    # parts: where x rounds up to Inf, the tail -Inf + 0x1000 still reads as -Inf)
    bad = np.nonzero(~_same_tf32(split_lo, model_bits(diff, mode)[0]))[0]
    assert bad.size == 0, [f"{a:08x}: lo {b:08x}" for a, b in zip(x[bad][:8], split_lo[bad][:8])]
    # and the properties the bugs broke, said plainly: NaN stays NaN through the rounding and
    # through 3xTF32's tail (low-payload NaNs too), Inf's rounding is Inf, and 3xTF32 splits +-Inf
    # into the head +-1 and the tail +-Inf, never NaN
    for bits in NAN_BITS:
        i = int(np.nonzero(x == bits)[0][0])
        assert math.isnan(np.uint32(rn[i] & 0xFFFFE000).view(np.float32)), hex(bits)
        assert math.isnan(hi[i].view(np.float32)), hex(bits)
    for bits in (*NAN_BITS, *LOW_PAYLOAD_NANS):
        i = int(np.nonzero(x == bits)[0][0])
        assert math.isnan(np.uint32(split_lo[i] & 0xFFFFE000).view(np.float32)), hex(bits)
        assert math.isfinite(split_hi[i].view(np.float32)), hex(bits)
    for bits in INF_BITS:
        i = int(np.nonzero(x == bits)[0][0])
        assert rn[i] & 0xFFFFE000 == bits and hi[i] == bits
        assert split_hi[i] == (bits & 0xBF800000) and split_lo[i] & 0xFFFFE000 == bits, hex(bits)


# ------------------------------------------------------- (b) the kernel, emulated, with NaN / Inf

NAN_MAIN = r'''
#include KERNEL_FILE
// ---- main: random normal A and B with NaN / Inf planted, C checked element by element
// argv: M N K lda ldb ldc blocks threads smem e_prod specials
// specials: "A:i:k:bits,B:k:j:bits,..." (bits in hex): NaN and Inf, and finite values planted
// beside them (zeros, values exact in TF32, whose tail is 0)
// Every C element whose row of A or column of B holds a NaN must be NaN. One touched by an Inf
// (and no NaN), in tf32 and 3xtf32 alike: IEEE's value, the float64 sum of the same operands
// (+-Inf; NaN where Inf meets -Inf or 0). Every other element: finite and within
// |c - ref| <= (e_prod + (K / KSTEP + 1) 2^-24) S, S = sum_k |a_ik b_kj| (the bound of
// tests/test_mma.py). Outside C: untouched NaN.
int main(int argc, char** argv) {
    if (argc != 12) {
        std::fprintf(stderr, "usage: M N K lda ldb ldc blocks threads smem e_prod specials\n");
        return 2;
    }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldc = atoi(argv[6]);
    const unsigned gx = atoi(argv[7]), bx = atoi(argv[8]);
    const long smem = atol(argv[9]);
    const double e_prod = atof(argv[10]);
    std::mt19937 gen(M * 131 + N * 7 + K);
    std::normal_distribution<float> normal;
    const size_t a_lines = TRANS_A ? K : M, b_lines = TRANS_B ? N : K;
    std::vector<float> A(a_lines * lda + 8, NAN), B(b_lines * ldb + 8, NAN);
    std::vector<float> C(size_t(M) * ldc + 8, NAN);
    auto a_at = [&](int i, int k) -> float& {
        return A[TRANS_A ? size_t(k) * lda + i : size_t(i) * lda + k];
    };
    auto b_at = [&](int k, int j) -> float& {
        return B[TRANS_B ? size_t(j) * ldb + k : size_t(k) * ldb + j];
    };
    for (int i = 0; i < M; ++i) for (int k = 0; k < K; ++k) a_at(i, k) = normal(gen);
    for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) b_at(k, j) = normal(gen);
    std::vector<char> a_nan(M, 0), a_inf(M, 0), b_nan(N, 0), b_inf(N, 0);
    for (char* s = std::strtok(argv[11], ","); s; s = std::strtok(nullptr, ",")) {
        char op;
        int r, c;
        unsigned bits;
        if (std::sscanf(s, "%c:%d:%d:%x", &op, &r, &c, &bits) != 4) {
            std::fprintf(stderr, "bad special %s\n", s);
            return 2;
        }
        float v;
        std::memcpy(&v, &bits, 4);
        if (op == 'A') {
            a_at(r, c) = v;
            if (!std::isfinite(v)) (std::isnan(v) ? a_nan : a_inf)[r] = 1;
        } else {
            b_at(r, c) = v;
            if (!std::isfinite(v)) (std::isnan(v) ? b_nan : b_inf)[c] = 1;
        }
    }
    lab_run_grid(gx, 1, bx, 1, smem, [&] { matmul_mma(A.data(), B.data(), C.data(), M, N, K, lda, ldb, ldc); });
    long nan_missed = 0, inf_wrong = 0, clean_bad = 0, loose = 0, gaps = 0, nans = 0, infs = 0;
    long inf_nans = 0;  // elements touched by an Inf whose IEEE value is NaN (Inf times 0)
    for (size_t e = 0; e < C.size(); ++e)
        if ((long(e) / ldc >= M || long(e) % ldc >= N) && !std::isnan(C[e])) ++gaps;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            const double c = C[size_t(i) * ldc + j];
            double ref = 0, S = 0;
            for (int k = 0; k < K; ++k) {
                const double p = double(a_at(i, k)) * double(b_at(k, j));
                ref += p;
                S += std::fabs(p);
            }
            if (a_nan[i] || b_nan[j]) {
                ++nans;
                if (!std::isnan(c)) {
                    if (nan_missed < 5) std::printf("C(%d, %d) = %g, want NaN\n", i, j, c);
                    ++nan_missed;
                }
            } else if (a_inf[i] || b_inf[j]) {
                ++infs;
                const bool want_nan = std::isnan(ref);
                inf_nans += want_nan;
                if (want_nan ? !std::isnan(c) : c != ref) {
                    if (inf_wrong < 5)
                        std::printf("C(%d, %d) = %g, want %s\n", i, j, c,
                                    want_nan ? "NaN" : ref > 0 ? "+Inf" : "-Inf");
                    ++inf_wrong;
                }
            } else if (!std::isfinite(c)) {
                if (clean_bad < 5) std::printf("C(%d, %d) = %g, untouched by NaN / Inf\n", i, j, c);
                ++clean_bad;
            } else if (std::fabs(c - ref) > (e_prod + (K / KSTEP + 1) * 0x1p-24) * S) {
                if (loose < 5) std::printf("C(%d, %d) = %.9g, reference %.9g\n", i, j, c, ref);
                ++loose;
            }
        }
    std::printf("%dx%dx%d nan-elements=%ld nan-missed=%ld inf-elements=%ld inf-nan=%ld "
                "inf-wrong=%ld clean-non-finite=%ld beyond-bound=%ld gap-writes=%ld\n", M, N, K,
                nans, nan_missed, infs, inf_nans, inf_wrong, clean_bad, loose, gaps);
    return nan_missed || inf_wrong || clean_bad || loose || gaps || !nans || !infs ||
                   !inf_nans || inf_nans == infs ? 1 : 0;
}
'''

# The elementwise bound's product term (tests/test_mma.py's BOUND): TF32 operands rounded to
# nearest (2^-11 each), 3xTF32's dropped and rounded small terms.
E_PROD = {"tf32": 2.0**-10 + 2.0**-21, "3xtf32": 2.0**-19}
# One warp, 32 x 32 x 16 tiles, 2 stages: a few blocks of 32 emulated threads per shape (the
# emulator runs a fiber per CUDA thread; the launcher takes tiles the registry's choices do
# not). A 32-float line still takes the TF32 runs (LDS.128) path for M/N-contiguous tiles, and
# ldmatrix for K-contiguous ones: nn and tt cover both paths of each operand.
SMALL = {"BM": 32, "BN": 32, "BK": 16, "WM": 32, "WN": 32, "STAGES": 2}
# 37 x 45 x 29: edge blocks on both sides and a partial k-tile; 64 x 64 x 80: whole interior
# blocks on full k-tiles (the kernel's bounds-free loop).
SHAPES = [(37, 45, 29), (64, 64, 80)]


EXACT_BITS = (0x3F800000, 0xC0200000, 0x3F400000)  # 1, -2.5, 0.75: exact in TF32 (tail 0)
ZERO_BITS = (0x00000000, 0x80000000)                # +0, -0


def specials(M: int, N: int, K: int, rows=(31, 32), cols=(32, 31),
             ks=(15, 16)) -> list[tuple[str, int, int, int]]:
    """NaN and Inf positions (operand, row, column, bits) reaching first, last and middle rows of
    A, columns of B and k, in different fragment registers, and the edges of blocks and k-tiles
    (by default SMALL's: rows / columns 31 | 32, k 15 | 16; Inf at A(rows[t], ks[t]) and
    B(ks[t], cols[t]), where they fit); then, beside every Inf, at its k in the other operand, a
    zero (IEEE: Inf * 0 is NaN) and a value exact in TF32 (tail 0: Inf times it is Inf, which
    3xTF32 with only its tails zeroed for Inf turns into NaN, Inf * 0)."""
    out = [("A", 0, 0, 0x7FFFFFFF), ("A", M - 1, K - 1, 0xFFFFFFFF),
           ("A", M // 2, K // 3, 0x7FC00000), ("A", M // 4, K // 2, 0x7F800000),
           ("A", 3 * M // 4, 1, 0xFF800000),
           ("B", 0, N - 1, 0xFFFFFFFF), ("B", K - 1, 0, 0x7FFFFFFF),
           ("B", K // 2, N // 3, 0x7FC00000), ("B", K // 4, N // 2, 0x7F800000),
           ("B", 2, 3 * N // 4, 0xFF800000)]
    edges = [e for t, (r, c, k) in enumerate(zip(rows, cols, ks))
             for e in (("A", r, k, INF_BITS[t % 2]), ("B", k, c, INF_BITS[1 - t % 2]))]
    out += [(op, r, c, bits) for op, r, c, bits in edges
            if r < (M if op == "A" else K) and c < (K if op == "A" else N)]
    taken = {(op, r, c) for op, r, c, _ in out}
    special_lines = {(op, r if op == "A" else c) for op, r, c, _ in out}  # rows of A, columns of B
    n = 0
    for op, r, c, bits in list(out):
        if bits not in INF_BITS:
            continue
        other, k, width = ("B", c, N) if op == "A" else ("A", r, M)
        free = [x for x in range(width)
                if (other, k, x) not in taken and (other, x) not in special_lines
                and ((other, x, k) if other == "A" else (other, k, x)) not in taken]
        for pick, value in ((free[(7 * n) % len(free)], ZERO_BITS[n % 2]),
                            (free[(7 * n + 3) % len(free)], EXACT_BITS[n % 3])):
            at = (other, pick, k) if other == "A" else (other, k, pick)
            taken.add(at)
            out.append((*at, value))
        n += 1
    return out


class NanEmulator:
    """mma.cu builds (defines as build() passes them, plus TF32_RN) compiled with g++ against the
    emulator prelude and NAN_MAIN, cached per define set, all compiles started at once."""

    def __init__(self, root: Path):
        self.ce = _emulator_module()
        self.root = root
        (root / "nan_main.cpp").write_text(_prelude(self.ce) + NAN_MAIN)
        self.exes: dict = {}

    @staticmethod
    def defines(precision: str, layout: str, rn: int) -> dict:
        from cuda_kernels._build import layout_defines

        d = {**_cuda().defines(**{**_params(), **SMALL}, precision=precision), "UNROLL": True,
             **layout_defines(layout), "TF32_RN": rn}
        return {k: int(v) if isinstance(v, bool) else v for k, v in d.items()}

    def start(self, precision: str, layout: str, rn: int, source: Path | None = None):
        key = (precision, layout, rn, str(source))
        if key in self.exes:
            return key
        exe = self.root / f"nan_{len(self.exes)}"
        src = self.root / f"{exe.name}.cu"
        src.write_text(self.ce.emulated_source(source or KERNELS / "variants" / "mma.cu"))
        self.exes[key] = self.ce.compile_async(
            self.root / "nan_main.cpp", exe,
            {"KERNEL_FILE": f'"{src}"', **self.defines(precision, layout, rn)},
            flags=("-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"))
        return key

    def run(self, precision: str, layout: str, rn: int, M: int, N: int, K: int,
            source: Path | None = None) -> tuple[bool, str]:
        exe = self.exes[self.start(precision, layout, rn, source)].result()
        grid, block, smem = _cuda().geometry(M, N, K, **{**_params(), **SMALL}, precision=precision)
        # leading dimensions past the widths (gaps of NaN the kernel must not read), lines on 16
        # bytes (ALIGN_A / ALIGN_B 16), C's rows on 8 (VEC_C)
        lda = _ld(M if layout[0] == "t" else K, 4)
        ldb = _ld(K if layout[1] == "t" else N, 4)
        spec = ",".join(f"{op}:{r}:{c}:{bits:08x}" for op, r, c, bits in specials(M, N, K))
        args = [M, N, K, lda, ldb, _ld(N, 2), grid[0], block[0], smem, E_PROD[precision], spec]
        out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                             timeout=600, check=False)
        return out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def _ld(width: int, multiple: int) -> int:
    """A leading dimension above `width`, a multiple of `multiple` elements."""
    return (width // multiple + 1) * multiple


EMU_CASES = [(p, lay, rn) for p in ("tf32", "3xtf32") for rn in (1, 2) for lay in ("nn", "tt")]


@pytest.fixture(scope="module")
def nan_emulator(tmp_path_factory):
    emu = NanEmulator(tmp_path_factory.mktemp("mma_nan"))
    for case in EMU_CASES:
        emu.start(*case)
    return emu


@cpu_only
@pytest.mark.parametrize("precision,layout,rn", EMU_CASES,
                         ids=[f"{p}-{lay}-TF32_RN={rn}" for p, lay, rn in EMU_CASES])
def test_emulated_kernel_propagates_nan_and_inf(nan_emulator, precision, layout, rn):
    for M, N, K in SHAPES:
        ok, out = nan_emulator.run(precision, layout, rn, M, N, K)
        assert ok, f"{precision} {layout} TF32_RN={rn} {M}x{N}x{K}:\n{out}"
        assert "nan-missed=0" in out


# The bug, planted: the unguarded half-unit add (tf32_rn, and 3xTF32's split, which tests x once
# for head and tail). 0x7fffffff + 0x1000 is -0 to the tensor core.
UNGUARDED = [("return tf32_finite(x) ? x + 0x1000u : x;", "return x + 0x1000u;"),
             ("const bool finite = tf32_finite(x);", "const bool finite = true;")]


@cpu_only
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_the_emulator_catches_the_unguarded_add(nan_emulator, tmp_path, precision):
    text = (KERNELS / "variants" / "mma.cu").read_text()
    for old, new in UNGUARDED:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    mutated = tmp_path / "mma.cu"
    mutated.write_text(text)
    ok, out = nan_emulator.run(precision, "nn", 2, 37, 45, 29, source=mutated)
    assert not ok and "nan-missed=0" not in out, out


# The split before Inf was handled (head tf32(x), tail tf32(x - head): an Inf's tail Inf - Inf is
# NaN, so every product of an Inf operand's tail was NaN), and a half-way fix that zeroes only the
# tail of a non-finite x (the cross term head * tail of the other operand is then Inf * 0 = NaN
# wherever that operand is exact in TF32: the EXACT_BITS planted beside every Inf).
SPLIT_BODIES = {
    "before": """
#if TF32_ROUND == 2
    const bool finite = tf32_finite(x);
    hi = (finite ? x + 0x1000u : x) & 0xffffe000u;
    const u32 d = f32_sub_bits(x, hi);
    lo = finite ? d + 0x1000u : d;
#else
    hi = tf32_rn(x) & 0xffffe000u;
    lo = tf32_rn(f32_sub_bits(x, hi));
#endif
""",
    "tails-zeroed": """
    const bool finite = tf32_finite(x);
    hi = tf32_rn(x) & 0xffffe000u;
    lo = finite ? tf32_rn(f32_sub_bits(x, hi)) : 0u;
""",
}


def _with_split(text: str, body: str) -> str:
    """mma.cu with tf32_split's body replaced by `body`."""
    head = "__device__ __forceinline__ void tf32_split(u32 x, u32& hi, u32& lo) {"
    assert text.count(head) == 1
    start = text.index(head) + len(head)
    end = text.index("\n}\n", start)
    return text[:start] + body.rstrip("\n") + text[end:]


@cpu_only
@pytest.mark.parametrize("rn", [1, 2])
@pytest.mark.parametrize("split", sorted(SPLIT_BODIES))
def test_the_emulator_catches_3xtf32_turning_inf_into_nan(nan_emulator, tmp_path, split, rn):
    """The earlier split, planted, makes C NaN where IEEE (and tf32) give +-Inf: the emulated
    test above fails on the Inf elements (and only there: NaN still reaches C)."""
    mutated = tmp_path / "mma.cu"
    mutated.write_text(_with_split((KERNELS / "variants" / "mma.cu").read_text(),
                                   SPLIT_BODIES[split]))
    ok, out = nan_emulator.run("3xtf32", "nn", rn, 37, 45, 29, source=mutated)
    assert not ok and "nan-missed=0 " in out and "inf-wrong=0 " not in out, out
    assert "beyond-bound=0 " in out and "clean-non-finite=0 " in out, out


# ------------------------------------------------------- (c) NVRTC and SASS (no GPU needed)


def _build(monkeypatch, precision: str, rn: int | None, arch: str, layout: str = "nn"):
    monkeypatch.setenv("LAB_CUDA_ARCH", arch)
    _with_tf32_rn(monkeypatch, rn)
    build = _cuda().build(**_params(), precision=precision, layout=layout)
    assert build.arch == arch
    assert (f"-DTF32_RN={rn}" in build.options) == (rn is not None)
    return build


_mix = sass_mix  # tests/mma_defaults_helpers.py
_count = count_ops


def _spill_free(build) -> None:
    assert build.spill_bytes == 0 and build.stack_frame == 0, build.log
    assert 0 < build.registers <= 255


@cpu_only
def test_sm90_default_tf32_rounds_with_cvt_rn(monkeypatch):
    """The default (TF32_RN=1) on sm_90: one F2FP.TF32.F32.PACK_B (cvt.rn.tf32.f32) per rounded
    register, none of the guarded add's finite tests, no spills."""
    build = _build(monkeypatch, "tf32", None, "sm_90")
    _spill_free(build)
    mix = _mix(build)
    assert _count(mix, "F2FP.TF32") > 0 and _count(mix, "HMMA.1688.F32.TF32") > 0, mix
    assert _count(mix, "FSETP") == 0, mix


@cpu_only
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_sm90_guarded_add_builds_without_spills(monkeypatch, precision):
    """TF32_RN=2: the finite test (FSETP.GEU |x|, +INF) guards the add; no cvt; no spills."""
    mix = _mix(build := _build(monkeypatch, precision, 2, "sm_90"))
    _spill_free(build)
    assert _count(mix, "FSETP.GEU") > 0 and _count(mix, "F2FP.TF32") == 0, mix


@cpu_only
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_sm90_3xtf32_default_and_tf32_rn_0_builds(monkeypatch, precision):
    """3xTF32's default splits with cvt.rn on sm_90; TF32_RN=0 still builds: TF32 operands left
    to the tensor core's truncation (no rounding instruction at all), 3xTF32 split with the
    guarded add."""
    if precision == "3xtf32":
        build = _build(monkeypatch, precision, None, "sm_90")
        _spill_free(build)
        assert _count(_mix(build), "F2FP.TF32") > 0
    build = _build(monkeypatch, precision, 0, "sm_90")
    _spill_free(build)
    mix = _mix(build)
    assert _count(mix, "F2FP.TF32") == 0
    assert (_count(mix, "FSETP.GEU") > 0) == (precision == "3xtf32"), mix


@cpu_only
@pytest.mark.parametrize("rn", [1, 2])
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_sm80_builds_without_spills(monkeypatch, precision, rn):
    """sm_80 has no cvt.rn.tf32: mode 1 is cvt.rna there (ptxas: the finite test and add)."""
    build = _build(monkeypatch, precision, rn, "sm_80")
    _spill_free(build)
    mix = _mix(build)
    assert _count(mix, "F2FP.TF32") == 0 and _count(mix, "FSETP.GEU") > 0, mix


INF_GUARD = re.compile(r"FSETP\.GEU\.AND P\d, PT, \|R\d+\|, \+INF")  # |x| >= Inf, or NaN


@cpu_only
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("stage", ["mma", "wgmma", "persistent"])
def test_3xtf32_default_builds_keep_inf_without_spills(monkeypatch, stage, layout):
    """What prepare() builds for 3xtf32 at 4096^3 (mma: sm_90, wgmma and persistent: sm_90a, whose
    split is tma_tiles.cuh's, with hopper.cuh's tf32_head / tf32_tail): no spills, no
    stack, at most 255 registers, and the split's Inf guard in the SASS: the finite test (FSETP.GEU
    |x|, +INF, one per split register) and the head +-1 (x & 0xbf800000). The tf32 build of the
    same stage has neither (it splits nothing)."""
    from lab.toolchain import sass as _sass

    monkeypatch.setenv("LAB_CUDA_ARCH", "sm_90")
    offer = stage_module(stage, "cuda").OFFER
    builds = {p: offer.compile(stage_params(stage, "cuda"), 4096, 4096, 4096, layout, p)[0]
              for p in ("3xtf32", "tf32")}
    build = builds["3xtf32"]
    assert build.arch == ("sm_90" if stage == "mma" else "sm_90a")
    _spill_free(build)
    _mix(build)  # skips where no disassembler is installed
    text = _sass.sass(build)
    assert len(INF_GUARD.findall(text)) > 0 and "0xbf800000" in text, build.log
    text = _sass.sass(builds["tf32"])
    assert not INF_GUARD.findall(text) and "0xbf800000" not in text


@cpu_only
def test_tf32_rn_outside_its_values_is_refused(monkeypatch):
    from lab.base.errors import LabError

    with pytest.raises(LabError, match="TF32_RN must be"):
        _build(monkeypatch, "tf32", 3, "sm_90")


# ------------------------------------------------------- (d), (e) GPU

GPU_SHAPES = [(256, 320, 192), (131, 77, 203)]  # (M, N, K): A = M x K, B = K x N


def _need_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


ROUND_KERNEL = r'''
#include "variants/mma.cu"
extern "C" __global__ void lab_tf32_round(const u32* x, u32* rn, u32* hi, u32* sh, u32* lo, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        rn[i] = tf32_rn(x[i]);
        hi[i] = tf32_hi(x[i]);
        tf32_split(x[i], sh[i], lo[i]);
    }
}
'''
# wgmma.cu's split (its A' in registers and its B' in shared memory both use it); sm_90a only
WGMMA_SPLIT_KERNEL = r'''
#include "wgmma.cu"
extern "C" __global__ void lab_wgmma_split(const u32* x, u32* sh, u32* lo, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        sh[i] = tf32_head(x[i]);
        lo[i] = tf32_tail(x[i], sh[i]);
    }
}
'''


def _check_split_bits(x: np.ndarray, head, lo, mode: int) -> None:
    '''The device's 3xTF32 head, bit for bit, and tail, as the tensor core reads it (the GPU's
    NaNs are its own: any NaN matches), against model_split.'''
    want_head, diff = model_split(x, mode)
    got = head.cpu().numpy().view(np.uint32)
    bad = np.nonzero(got != want_head)[0]
    assert bad.size == 0, [f"{a:08x}: head {b:08x}, model {c:08x}"
                           for a, b, c in zip(x[bad][:8], got[bad][:8], want_head[bad][:8])]
    got = lo.cpu().numpy().view(np.uint32)
    bad = np.nonzero(~_same_tf32(got, model_bits(diff, mode)[0]))[0]
    assert bad.size == 0, [f"{a:08x}: lo {b:08x}" for a, b in zip(x[bad][:8], got[bad][:8])]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [1, 2])
def test_device_rounding_is_the_cpu_twins(tmp_path, mode):
    '''mma.cu's tf32_rn / tf32_hi / tf32_split on this GPU give the model's bits, which the CPU
    twins give too (test_cpu_twins_compute_the_sm90_bits): the emulator rounds and splits as the
    sm_90 build does.'''
    _need_gpu()
    from lab.toolchain.nvrtc import compile_kernel, device_arch, launcher

    if mode == 1 and int(device_arch().split("_")[1]) < 90:
        pytest.skip("mode 1 is cvt.rna below sm_90: the CPU twins emulate sm_90's cvt.rn")
    src = tmp_path / "tf32_round.cu"
    src.write_text(ROUND_KERNEL)
    build = compile_kernel(str(src), "lab_tf32_round", {**_tile_defines(), "TF32_RN": mode})
    x = np.concatenate([SPECIALS, LOW_PAYLOAD_NANS, _random_bits(1 << 20, seed=2)])
    xs = torch.from_numpy(x.view(np.int32)).cuda()
    rn, hi, sh, lo = (torch.empty_like(xs) for _ in range(4))
    n = xs.numel()
    launcher(build, ((n + 255) // 256, 1, 1), (256, 1, 1), (xs, rn, hi, sh, lo, np.int32(n)))()
    torch.cuda.synchronize()
    want_rn, want_hi = model_bits(x, mode)
    for name, got, want in (("tf32_rn", rn, want_rn), ("tf32_hi", hi, want_hi)):
        got = got.cpu().numpy().view(np.uint32)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (name, [f"{a:08x} -> {b:08x}, model {c:08x}"
                                      for a, b, c in zip(x[bad][:8], got[bad][:8], want[bad][:8])])
    _check_split_bits(x, sh, lo, mode)


@pytest.mark.gpu
def test_wgmma_split_is_the_model_on_the_gpu(tmp_path):
    '''wgmma.cu's tf32_head / tf32_tail (cvt.rn, as mma.cu's mode 1) give model_split's bits:
    +-Inf splits into +-1 and +-Inf, NaN into a finite head and a NaN tail.'''
    _need_gpu()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma.cu builds for sm_90a only")
    from cuda_kernels._build import compile_kernel, launcher

    src = tmp_path / "wgmma_split.cu"
    src.write_text(WGMMA_SPLIT_KERNEL)
    build = compile_kernel(str(src), "lab_wgmma_split", {"PREC_3XTF32": 1}, arch="sm_90a")
    x = np.concatenate([SPECIALS, LOW_PAYLOAD_NANS, _random_bits(1 << 20, seed=3)])
    xs = torch.from_numpy(x.view(np.int32)).cuda()
    sh, lo = torch.empty_like(xs), torch.empty_like(xs)
    n = xs.numel()
    launcher(build, ((n + 255) // 256, 1, 1), (256, 1, 1), (xs, sh, lo, np.int32(n)))()
    torch.cuda.synchronize()
    _check_split_bits(x, sh, lo, 1)


def _plant_bits(t: torch.Tensor, where: list[tuple[int, int]], bits: list[int]) -> None:
    """Write raw bit patterns into float32 (int32 view) or 16-bit (int16 view) elements."""
    view = t.view(torch.int32 if t.element_size() == 4 else torch.int16)
    for (r, c), b in zip(where, bits):
        signed = b - (1 << (8 * t.element_size())) if b >> (8 * t.element_size() - 1) else b
        view[r, c] = signed


def _nan_operands(M, N, K, dtype, made_by: str, seed: int):
    """A (M x K) and B (K x N) random normal with NaN planted in a few rows of A and columns of B
    (first, last, middle; different fragment positions): as raw bit patterns (`bits`), or as
    the GPU's own arithmetic makes them (`gpu`: log of a negative number, 0 / 0 and its
    negation)."""
    a, b = chk.make_inputs(M, N, K, seed, "cuda", dtype=dtype)
    a_at = [(0, 0), (M - 1, K - 1), (M // 2, K // 3), (M // 3, 7)]
    b_at = [(0, N - 1), (K - 1, 0), (K // 2, N // 3)]
    if made_by == "bits":
        if a.element_size() == 4:
            _plant_bits(a, a_at, [0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x7FFFFFFF])
            _plant_bits(b, b_at, [0xFFFFFFFF, 0x7FFFFFFF, 0x7FC00000])
        else:
            _plant_bits(a, a_at, [0x7FFF, 0xFFFF, 0x7E00 if dtype == torch.float16 else 0x7FC0,
                                  0x7FFF])
            _plant_bits(b, b_at, [0xFFFF, 0x7FFF, 0xFFFF])
    else:
        made = torch.cat([torch.log(-torch.ones(2, device="cuda")),
                          torch.zeros(2, device="cuda") / 0,
                          -(torch.zeros(3, device="cuda") / 0)]).to(dtype)
        for n, (r, c) in enumerate(a_at):
            a[r, c] = made[n]
        for n, (r, c) in enumerate(b_at):
            b[r, c] = made[4 + n]
    assert torch.isnan(a).sum() == len(a_at) and torch.isnan(b).sum() == len(b_at)
    return a, b


def _assert_nan_exactly_where_the_reference_is(c, a, b, K, precision, what):
    ref = chk.reference(a, b)
    want = torch.isnan(ref)
    got = torch.isnan(c)
    assert want.any()
    missed, extra = (want & ~got).sum().item(), (got & ~want).sum().item()
    assert missed == 0 and extra == 0, (f"{what}: {missed} NaN missing, {extra} NaN extra of "
                                        f"{want.sum().item()} expected")
    clean = ~want
    assert torch.isfinite(c[clean]).all(), what
    diff = c[clean].double() - ref[clean]
    rel = (torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref[clean])).item()
    assert rel <= chk.tolerance(precision, K), (what, rel)


DTYPE = {"tf32": torch.float32, "3xtf32": torch.float32, "bf16": torch.bfloat16,
         "fp16": torch.float16}


@pytest.mark.gpu
@pytest.mark.parametrize("rn", [1, 2])
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_cuda_mma_propagates_nan_on_the_gpu(monkeypatch, precision, rn):
    _need_gpu()
    _with_tf32_rn(monkeypatch, rn)
    mma = _cuda()
    assert mma.defines(precision=precision)["TF32_RN"] == rn
    for M, N, K in GPU_SHAPES:
        for made_by in ("bits", "gpu"):
            a, b = _nan_operands(M, N, K, torch.float32, made_by, M + K)
            c = torch.empty((M, N), device="cuda")
            mma.prepare(a, b, c, precision=precision)()
            torch.cuda.synchronize()
            _assert_nan_exactly_where_the_reference_is(
                c, a, b, K, precision, f"cuda {precision} TF32_RN={rn} {M}x{N}x{K} {made_by}")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_triton_mma_propagates_nan_on_the_gpu(precision):
    _need_gpu()
    for M, N, K in GPU_SHAPES:
        for made_by in ("bits", "gpu"):
            a, b = _nan_operands(M, N, K, torch.float32, made_by, M + K)
            c = torch.zeros((M, N), device="cuda")
            _triton().prepare(a, b, c, precision=precision)()
            torch.cuda.synchronize()
            _assert_nan_exactly_where_the_reference_is(
                c, a, b, K, precision, f"triton {precision} {M}x{N}x{K} {made_by}")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16_bit_mma_propagates_nan_on_the_gpu(precision, backend):
    """No rounding step in bf16 / fp16 (the operands are already 16-bit), but a NaN must still
    reach C, and C's rounding on store (cvt.rn.bf16x2 / f16x2) must keep it."""
    _need_gpu()
    stage = _cuda() if backend == "cuda" else _triton()
    for M, N, K in GPU_SHAPES:
        for made_by in ("bits", "gpu"):
            a, b = _nan_operands(M, N, K, DTYPE[precision], made_by, M + K)
            c = torch.zeros((M, N), device="cuda", dtype=DTYPE[precision])
            stage.prepare(a, b, c, precision=precision)()
            torch.cuda.synchronize()
            _assert_nan_exactly_where_the_reference_is(
                c, a, b, K, precision, f"{backend} {precision} {M}x{N}x{K} {made_by}")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_inf_on_the_gpu(monkeypatch, precision, backend):
    """+-Inf in A and B: C is non-finite exactly where the float64 reference is, NaN where it is
    NaN, and the reference's +-Inf elsewhere, in tf32 and 3xtf32 alike (3xTF32 splits an Inf into
    the head +-1 and the tail +-Inf: tf32_split in mma.cu)."""
    _need_gpu()
    M, N, K = GPU_SHAPES[0]
    a, b = chk.make_inputs(M, N, K, 3, "cuda")
    _plant_bits(a, [(0, 0), (M - 1, 5), (M // 2, K - 1)], [0x7F800000, 0xFF800000, 0x7F800000])
    _plant_bits(b, [(K - 1, N - 1), (3, 0)], [0xFF800000, 0x7F800000])
    ref = chk.reference(a, b)
    for rn in ((1, 2) if backend == "cuda" else (None,)):
        with monkeypatch.context() as m:
            _with_tf32_rn(m, rn)
            stage = _cuda() if backend == "cuda" else _triton()
            c = torch.zeros((M, N), device="cuda")
            stage.prepare(a, b, c, precision=precision)()
            torch.cuda.synchronize()
        what = f"{backend} {precision} TF32_RN={rn}"
        special = ~torch.isfinite(ref)
        assert torch.equal(~torch.isfinite(c), special), what
        assert torch.isnan(c[torch.isnan(ref)]).all(), what
        inf = torch.isinf(ref)
        assert inf.any() and torch.equal(c[inf].double(), ref[inf]), what
        clean = ~special
        rel = (torch.linalg.vector_norm(c[clean].double() - ref[clean])
               / torch.linalg.vector_norm(ref[clean])).item()
        assert rel <= chk.tolerance(precision, K), (what, rel)


# ------------------------------------------------------- (f) both stages, torch's pattern

# Block and k-tile edges of the default tiles (mma 3xtf32: 128 x 64, k 16; tf32 / 16-bit: 256 or
# 128 rows, k 32 or 64 bytes; wgmma: 128 rows, 128 or 256 columns, 128 bytes of k, and its nn
# layout swaps A and B): rows, columns and k on both sides of 64 and 128, k of 16 and 32.
GPU_EDGES = dict(rows=(63, 64, 127, 128), cols=(64, 63, 128, 127), ks=(15, 16, 31, 32))


def _special_operands(M, N, K, dtype, layout, seed):
    """Random normal A (M x K) and B (K x N) of `dtype` in `layout` with specials() planted (NaN
    as GPU arithmetic's 0x7fffffff, its negation and torch's 0x7fc00000, +-Inf, and zeros and
    TF32-exact values beside each Inf) at first, last, middle and tile-edge positions; 16-bit
    operands get the same values (NaN as the dtype's NaN)."""
    a, b = chk.make_inputs(M, N, K, seed, "cuda", dtype=dtype)
    for op, r, c, bits in specials(M, N, K, **GPU_EDGES):
        t = a if op == "A" else b
        if t.element_size() == 4:
            _plant_bits(t, [(r, c)], [bits])
        else:
            t[r, c] = float(np.uint32(bits).view(np.float32))
    if layout[0] == "t":
        a = a.t().contiguous().t()
    if layout[1] == "t":
        b = b.t().contiguous().t()
    return a, b


def assert_torch_pattern(c, a, b, K, precision, what):
    """C's NaN, Inf and Inf signs are those of torch.matmul in IEEE fp32 (TF32 off) on the same
    operands (16-bit ones upcast), and its finite elements are within the precision's threshold
    of the float64 reference."""
    matmul = torch.backends.cuda.matmul
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    try:
        ref32 = torch.matmul(a.float(), b.float())
    finally:
        matmul.allow_tf32 = before
    got = c.float()
    for name, f in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        want, has = f(ref32), f(got)
        assert want.any(), (what, f"no {name} in torch's C: nothing planted?")
        missing, extra = (want & ~has).sum().item(), (has & ~want).sum().item()
        assert missing == 0 and extra == 0, (f"{what}: {name} missing at {missing}, extra at "
                                             f"{extra} of {want.sum().item()} elements")
    inf = torch.isinf(ref32)
    assert torch.equal(got[inf], ref32[inf]), (what, "an Inf of the wrong sign")
    clean = torch.isfinite(ref32)
    ref = chk.reference(a, b)
    rel = (torch.linalg.vector_norm(got[clean].double() - ref[clean])
           / torch.linalg.vector_norm(ref[clean])).item()
    assert rel <= chk.tolerance(precision, K), (what, rel)



@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32", "bf16", "fp16"])
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("stage", ["mma", "wgmma", "tma_wgmma", "warp_specialized", "persistent"])
def test_nan_and_inf_give_torchs_pattern_on_the_gpu(stage, backend, precision):
    """The tensor-core stages, both backends, every precision each offers, every layout: with
    NaN, +-Inf (and zeros and TF32-exact values beside the Infs) planted in A and in B, at first,
    last, middle and tile-edge positions, C is NaN, +Inf and -Inf exactly where torch.matmul in
    fp32 is. (3xtf32 on the CUDA kernels gave NaN wherever an Inf entered, until its split kept
    Inf.)"""
    _need_gpu()
    if stage != "mma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"stage {stage} needs an sm_90 GPU")
    launcher = stage_module(stage, backend)
    if precision not in launcher.OFFER.precisions:
        pytest.skip(f"stage {stage} ({backend}) does not offer {precision}")
    for M, N, K in GPU_SHAPES:
        for layout in ("nn", "nt", "tn", "tt"):
            a, b = _special_operands(M, N, K, DTYPE[precision], layout, M + N + K)
            c = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPE[precision])
            launcher.prepare(a, b, c, precision=precision)()
            torch.cuda.synchronize()
            assert_torch_pattern(c, a, b, K, precision,
                                 f"{stage} {backend} {precision} {layout} {M}x{N}x{K}")
