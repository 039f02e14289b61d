"""3xTF32 where the products are subnormal: the CUDA wgmma, warp_specialized and persistent
kernels with fp32 operands near 1e-20 (2^-66), whose products (near 2^-132) lie below fp32's
smallest normal, 2^-126. The cure is in all three (wgmma.cu; tma_tiles.cuh's split_ring and
mma_tile_loop_3x for the other two).

The cause (hopper.cuh, above tf32x3_scale): these kernels sum each pair of k-tiles afresh in the
tensor core and add that sum to the accumulators in fp32; every wgmma writes its sum back truncated
onto fp32's grid, which below 2^-126 is the fixed 2^-149 instead of 2^-23 of the sum, so the fresh
sums of subnormal products keep a few bits and lose the rest toward zero 24 times per pair. On an
H200 at 2048^3, U[0, 1) operands times 2^-66: 7.1e-6 relative error, cuBLAS fp32 6.0e-7. The cure:
a k-tile whose B is tiny (every |b| below 2^-24) is summed alone, each warp's rows of A scaled by
2^k (exact) so that the fresh sum is normal, and the sum added times 2^-k: 2.4e-7 there.

CPU: a model of that accumulation (products exact, each wgmma's sum truncated toward zero onto
fp32's grid, subnormals included) loses accuracy on operands near 2^-66 and recovers it once tiny
k-tiles of B are summed alone with A scaled by the rule whose constants hopper.cuh holds; the test
for a tiny B never passes one with some |b| >= 2^-24, the scale is exact, keeps every scaled |a|
below 2^-16 and lifts the largest to 2^-17; the default builds hold the scale's instructions and
the TF32X3_SCALE=0 builds (the split as before the fix) do not: wgmma's, and warp_specialized's
and persistent's (the lesson file and the variant file), whose splitters OR the bits of their B
chunks into a word per warp (REDUX.OR) that each consumer warp's lane 0 reads (SHFL to the warp).

GPU (marked `gpu`; sm_90): through lab.matmul, each stage in 3xtf32 on U[0, 1) operands times 1
and times 2^-66: the relative error is within 3x of cuBLAS fp32's (TF32 off) on the same operands
and below 1e-6, and the tiny operands' error at most 1.5x that of the same mantissas near 1; A and
B whose sizes change from k-tile to k-tile (pairs of k-tiles with one tiny B, all-zero k-tiles, a
tiny k-tile of A beside one whose products are near 2^120) give a finite C as accurate as cuBLAS's.

The bound is 1e-6, not 3e-7: these kernels' 3xTF32 gives 4.7e-7 to 4.9e-7 on ordinary operands
(results/2026-11-29-h200/hopper-stages.csv, randn at 1025^3 and 4096^3; 4.9e-7 on U[0, 1) at
2048^3) from the tensor core's truncation of its fresh sums over a pair of k-tiles, which the fix
leaves as it was.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from helpers import ROOT

STAGES = ("wgmma", "warp_specialized", "persistent")
# In warp_specialized and persistent the producer's splitters tell the consumers that a k-tile's B
# is tiny through a word of shared memory per splitting warp and slot (tma_tiles.cuh tiny_or),
# written after the slot's previous round was released (its empty barrier) and read after the
# slot's ready barrier; tests/test_sanitizer.py runs racecheck and synccheck on those builds.

TINY = 2.0 ** -66  # operands below 1.4e-20: products below 2^-132

HOPPER = (ROOT / "cuda_kernels" / "hopper.cuh").read_text()


def _constant(name: str) -> int:
    return int(re.search(rf"\b{name} = (0x[0-9a-fA-F]+|\d+)", HOPPER).group(1), 0)


SCALE_TO, TINY_B_BITS = _constant("SCALE_TO"), _constant("TINY_B_BITS")  # 110, 2^-24's bits


# ------------------------------------------------------------------------------ model

def _tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rn.tf32.f32 of finite fp32 values: nearest, ties to even, low 13 bits cleared."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = _tf32(x)
    return h, _tf32((x - h).astype(np.float32))


def _truncate(x: np.ndarray) -> np.ndarray:
    """float64 onto fp32's grid toward zero (the tensor core's rounding of its sums)."""
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


def tiny(b: np.ndarray) -> bool:
    """tiny_bits of a k-tile's B: the OR of its elements' bits has an exponent field below 2^-24's."""
    return (int(np.bitwise_or.reduce(b.astype(np.float32).view(np.uint32).ravel())) & 0x7F800000) \
        < TINY_B_BITS


def scale_k(a: np.ndarray, tiny_b: bool) -> int:
    """tf32x3_scale's k for a warp's fragments `a` (fp32) of one k-tile whose B is `tiny_b`."""
    if not tiny_b:
        return 0
    m = int(np.nanmax(np.abs(a.astype(np.float32))).view(np.uint32)) if not np.isnan(a).all() \
        else 0x7FC00000
    return 0 if m == 0 else max(SCALE_TO - max(m >> 23, 1), 0)


def model_3xtf32(a: np.ndarray, b: np.ndarray, scale: bool) -> np.ndarray:
    """The CUDA kernels' 3xTF32 as a model: 32-wide k-tiles summed afresh in pairs, three products
    per 8-k step (tail x head, head x tail, head x head) each truncated onto fp32's grid, each sum
    added in fp32. With `scale`, a pair with a tiny k-tile of B is summed tile by tile, each tile's
    A (16-row groups, as the warps) scaled by 2^k and its sum added times 2^-k."""
    M, K = a.shape
    acc = np.zeros((M, b.shape[1]), np.float32)
    bh, bt = _split(b)
    for r0 in range(0, M, 16):
        rows = slice(r0, r0 + 16)
        for p0 in range(0, K, 64):
            tiles = list(range(p0, min(K, p0 + 64), 32))
            alone = scale and any(tiny(b[t0:t0 + 32]) for t0 in tiles)
            for group in ([[t] for t in tiles] if alone else [tiles]):
                part = np.zeros((16, b.shape[1]), np.float32)
                k = scale_k(a[rows, group[0]:group[0] + 32], True) if alone else 0
                for t0 in group:
                    x = (a[rows, t0:t0 + 32] * np.float32(2.0 ** k)).astype(np.float32)
                    ah, at = _split(x)
                    for s in range(0, 32, 8):
                        cols = slice(t0 + s, t0 + s + 8)
                        for pa, pb in ((at, bh), (ah, bt), (ah, bh)):
                            part = _truncate(part.astype(np.float64) + pa[:, s:s + 8].astype(
                                np.float64) @ pb[cols].astype(np.float64))
                acc[rows] = (acc[rows].astype(np.float64)
                             + part.astype(np.float64) * 2.0 ** -k).astype(np.float32)
    return acc


def _rel(c: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref))


def test_the_model_loses_subnormal_fresh_sums_and_the_scale_restores_them():
    rng = np.random.default_rng(0)
    a1 = rng.random((16, 512), dtype=np.float32)
    b1 = rng.random((512, 24), dtype=np.float32)
    a, b = (a1 * np.float32(TINY)).astype(np.float32), (b1 * np.float32(TINY)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    near_one = model_3xtf32(a1, b1, scale=True)
    unscaled = model_3xtf32(a, b, scale=False)
    scaled = model_3xtf32(a, b, scale=True)
    assert np.array_equal(model_3xtf32(a1, b1, scale=False), near_one)  # B not tiny: as before
    assert _rel(unscaled, ref) > 10 * _rel(scaled, ref), (_rel(unscaled, ref), _rel(scaled, ref))
    # every fresh sum normal once A is scaled (summed k-tile by k-tile): as accurate as near 1
    ref1 = a1.astype(np.float64) @ b1.astype(np.float64)
    assert _rel(scaled, ref) <= 1.2 * _rel(near_one, ref1), (_rel(scaled, ref), _rel(near_one, ref1))


def test_the_tiny_test_and_the_scale_are_safe_and_exact():
    """tiny_bits never passes a B with some |b| >= 2^-24 and passes every B below 2^-63; k is 0
    where B is not tiny, and otherwise lifts the largest |a| to [2^-17, 2^-16) (a subnormal one as
    2^-126), exactly, never past 2^-16, with 2^-k normal; Inf and NaN give k = 0."""
    rng = np.random.default_rng(1)
    for e in range(-149, 128):
        x = (rng.random((32, 64), dtype=np.float32) * np.float32(2.0 ** e)).astype(np.float32)
        x[0, 0] = np.float32(2.0 ** e)  # the largest |x| in binade e
        assert not tiny(x) or e < -24, e
        assert tiny(x) or e >= -63, e
        assert scale_k(x, False) == 0
        k = scale_k(x, True)
        assert 0 <= k <= 126, (e, k)  # 2^-k is normal
        y = (x * np.float32(2.0 ** k)).astype(np.float32)
        assert np.array_equal((y.astype(np.float64) * 2.0 ** -k).astype(np.float32), x), e  # exact
        assert k == 0 or np.abs(y).max() < 2.0 ** (SCALE_TO - 126), (e, k)  # no sum overflows
        if -127 < e < SCALE_TO - 127:
            assert np.abs(y).max() >= 2.0 ** (SCALE_TO - 127), (e, k)
    for bad in (np.inf, np.nan):
        x = np.full((16, 32), bad, np.float32)
        assert not tiny(x) and scale_k(x, True) == 0


def test_the_default_3xtf32_builds_hold_the_scale_and_the_switch_removes_it():
    """wgmma's default 3xTF32 build (sm_90a, no GPU needed): the warp's largest |a| (REDUX.MAX) and
    A times 2^k (FMUL) where B is tiny, the sums added times 2^-k (FFMA), the barrier after the
    split voting on a tiny B (BAR.RED.AND), no spills; TF32X3_SCALE=0 builds the split as before
    the fix (FADD, none of these)."""
    import importlib

    from lab.toolchain.sass import instruction_mix, sass

    def builds(extra):
        wg = importlib.import_module("cuda_kernels.wgmma")
        yield "wgmma", wg.build("3xtf32", True, layout="nt", config={**wg.WGMMA["3xtf32"], **extra})
        for stage, params in (("warp_specialized", {}), ("persistent", {}),
                              ("persistent", {"STORE": 2, "CLUSTER": 1})):  # variant, lesson
            st = importlib.import_module(f"cuda_kernels.{stage}").STAGE
            c = st.resolve(params, 4096, 4096, 4096, "3xtf32", 132)
            yield stage, st.build("3xtf32", "nt", 8, {**{k: c[k] for k in st.knobs}, **extra})

    for (name, new), (_, old) in zip(builds({}), builds({"TF32X3_SCALE": 0})):
        for b in (new, old):
            assert b.spill_bytes == 0 and b.stack_frame == 0, (name, b.log)
        mix_new, mix_old = instruction_mix(sass(new)), instruction_mix(sass(old))
        vote = "BAR.RED.AND.DEFER_BLOCKING" if name == "wgmma" else "REDUX.OR"
        for op in ("REDUX.MAX", "FMUL", vote):
            assert mix_new.get(op, 0) > 0 and mix_old.get(op, 0) == 0, (name, op)
        assert mix_new.get("FFMA", 0) >= mix_old.get("FADD", 0) > 0 == mix_old.get("FFMA", 0), name


# ------------------------------------------------------------------------------ GPU

gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 GPU (H100, H200)")


def _rel_t(c: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))


def _cublas_fp32(a, b):
    matmul = torch.backends.cuda.matmul
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    try:
        return torch.matmul(a, b)
    finally:
        matmul.allow_tf32 = before


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_tiny_operands_are_as_accurate_as_cublas_fp32(stage):
    """U[0, 1) operands times 2^-66 (products below 2^-132, C near 2^-122: normal) and times 1,
    layouts nn and nt, K = 1024 and 4000 (125 k-tiles: a last one without a pair); C of 256 tiles of
    128 x 128, so that cuBLAS has no reason to split K (at 1024 x 1536 x 4000 it gave 1.0e-7, more
    accurate than these kernels' 4.9e-7 near 1)."""
    import lab

    gen = torch.Generator(device="cuda").manual_seed(3)
    for M, N, K, layout in ((2048, 2048, 1024, "nn"), (2048, 2048, 4000, "nt")):
        a1 = torch.rand(M, K, device="cuda", generator=gen)
        b1 = torch.rand(K, N, device="cuda", generator=gen)
        if layout[1] == "t":
            b1 = b1.t().contiguous().t()
        near_one = None
        for scale in (1.0, TINY):  # near 1 first: the bound for the tiny ones
            a, b = a1 * scale, b1 * scale
            ref = a.double() @ b.double()
            c = lab.matmul(a, b, stage=stage, backend="cuda", precision="3xtf32")
            ours, cublas = _rel_t(c, ref), _rel_t(_cublas_fp32(a, b), ref)
            what = (stage, M, N, K, layout, scale, ours, cublas)
            assert ours <= 3 * cublas and ours < 1e-6, what
            if scale == 1.0:
                near_one = ours
            else:  # as accurate as the same mantissas near 1
                assert ours <= 1.5 * near_one, (what, near_one)


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_the_scale_changes_inside_pairs_and_large_values_stay_finite(stage):
    """A's size changes from k-tile to k-tile (32 columns each), B's rows the other way so that
    every k-tile adds products near 2^-120: pairs of k-tiles where one or both B are tiny (summed
    alone, A scaled) or neither is, and all-zero k-tiles of A. Then a k-tile of A near 2^-100
    beside one whose products are near 2^120 (B not tiny: a pair, no scale), which must stay
    finite."""
    import lab

    gen = torch.Generator(device="cuda").manual_seed(4)
    exps = [-66, -40, -100, -10, -66, -66, None, -90, -20, -70, None, None, -64, -50, -60, -66]
    M, N, K = 320, 384, 32 * len(exps)
    a = torch.rand(M, K, device="cuda", generator=gen) + 0.5
    b = torch.rand(K, N, device="cuda", generator=gen) + 0.5
    for j, e in enumerate(exps):
        cols = slice(32 * j, 32 * j + 32)
        a[:, cols] *= 0.0 if e is None else 2.0 ** e
        b[cols] *= 2.0 ** (-120 - (e or 0))
    big_a = torch.rand(M, 64, device="cuda", generator=gen) + 0.5
    big_b = torch.rand(64, N, device="cuda", generator=gen) + 0.5
    big_a[:, :32] *= 2.0 ** -100
    big_a[:, 32:] *= 2.0 ** 60
    big_b[32:] *= 2.0 ** 60
    for x, y in ((a, b), (big_a, big_b)):
        ref = x.double() @ y.double()
        c = lab.matmul(x, y, stage=stage, backend="cuda", precision="3xtf32")
        assert torch.isfinite(c).all(), stage
        ours, cublas = _rel_t(c, ref), _rel_t(_cublas_fp32(x, y), ref)
        assert ours <= max(3 * cublas, 1e-6), (stage, x.shape[1], ours, cublas)
