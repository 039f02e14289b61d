"""The fp32 check scales with K: a correct sequential kernel passes at K = 1,048,576, and the
defects a kernel can have (a dropped K tile, a wrong row, a wrong column, one wrong element) fail
at every K. Synthetic outputs on the CPU: the "kernel" is a sequential fp32 accumulation written
with numpy (np.add.accumulate adds left to right in float32, one rounding per step, like a
thread's `acc += a * b` loop without FMA, which is slightly worse than the GPU's FMA)."""

import math

import numpy as np
import pytest
import torch

from lab import check as chk


def sequential_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B with each element accumulated sequentially in fp32 (k = 0, 1, ..., K-1)."""
    A, B = a.numpy(), b.numpy()
    M, K = A.shape
    out = np.empty((M, B.shape[1]), dtype=np.float32)
    for i in range(M):
        products = (A[i][:, None] * B).astype(np.float32)  # K x N fp32 products
        out[i] = np.add.accumulate(products, axis=0, dtype=np.float32)[-1]
    return torch.from_numpy(out)


def _inputs(M, N, K, seed=0):
    a, b = chk.make_inputs(M, N, K, seed=seed, device="cpu")
    return a, b, chk.reference(a, b)


def test_threshold_follows_the_random_walk_bound():
    u = 2.0**-24
    assert chk.tolerance("fp32", 1) == 1e-5
    assert chk.tolerance("fp32", 4096) == 1e-5  # below K ~ 7,000 the floor rules
    assert chk.tolerance("fp32", 2**20) == pytest.approx(2 * u * 1024)  # 1.2e-4
    assert chk.tolerance("fp32", 4 * 2**20) == pytest.approx(2 * chk.tolerance("fp32", 2**20))
    for k in (1, 100, 10_000, 10**6):
        assert chk.tolerance("fp32", k) >= 1e-5


@pytest.fixture(scope="module")
def long_k():
    """K = 1,048,576 (the matrix-vector shape that failed the old fixed 1e-5 threshold)."""
    M, N, K = 2, 3, 2**20
    a, b, ref = _inputs(M, N, K, seed=11)
    return a, b, ref, sequential_fp32(a, b)


def test_a_correct_sequential_kernel_passes_at_one_mebi_k(long_k):
    a, b, ref, c = long_k
    K = a.shape[1]
    result = chk.compare(c, ref, K)
    assert result.passed, result.reason
    assert result.rel_err > 1e-6  # a real fp32 accumulation error, not a double-precision one
    # the old fixed threshold would have had little or no margin here; the new one has several x
    assert result.rel_err < chk.tolerance("fp32", K) / 2


def test_a_dropped_k_tile_fails_at_one_mebi_k(long_k):
    a, b, ref, c = long_k
    K = a.shape[1]
    k0, tile = 123 * 1024, 128
    missing = (a[:, k0:k0 + tile].double() @ b[k0:k0 + tile].double()).float()
    result = chk.compare(c - missing, ref, K)
    assert not result.passed


def test_a_dropped_k_tile_in_one_element_fails_at_one_mebi_k(long_k):
    a, b, ref, c = long_k
    K = a.shape[1]
    bad = c.clone()
    bad[1, 2] -= float(a[1, :128].double() @ b[:128, 2].double())
    result = chk.compare(bad, ref, K)
    assert not result.passed


@pytest.mark.parametrize("K", [1, 7, 64, 4096, 65_536])
def test_each_planted_defect_fails_at_every_k(K):
    M, N = 48, 40
    a, b, ref = _inputs(M, N, K, seed=K)
    good = (a.double() @ b.double()).float()
    assert chk.compare(good, ref, K).passed
    tile = max(1, min(32, K // 4))
    if K > 1:
        dropped = good - (a[:, :tile].double() @ b[:tile].double()).float()
        assert not chk.compare(dropped, ref, K).passed, "dropped K tile"
    row = good.clone()
    row[M // 2] = 0.0
    assert not chk.compare(row, ref, K).passed, "a row of C left at zero"
    col = good.clone()
    col[:, N - 1] = good[:, 0]
    assert not chk.compare(col, ref, K).passed, "a column of C copied from another"
    one = good.clone()
    one[3, 4] = -one[3, 4] if one[3, 4] != 0 else 1.0
    assert not chk.compare(one, ref, K).passed, "one element with the wrong sign"


def test_one_dropped_product_among_millions_fails_although_the_frobenius_error_passes():
    """A 2048 x 2048 C at K = 4096 (elements of size ~64) with one element missing one product
    (~1): the Frobenius error moves by only 7.6e-6, under the 1e-5 threshold; the elementwise
    test is what catches it."""
    M = N = 2048
    K = 4096
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(M, N, generator=gen, dtype=torch.float64) * math.sqrt(K)
    c = ref.float()
    c[100, 7] -= 1.0
    rel = (torch.linalg.vector_norm(c.double() - ref) / torch.linalg.vector_norm(ref)).item()
    assert rel < chk.tolerance("fp32", K)
    result = chk.compare(c, ref, K)
    assert not result.passed and "element (100, 7)" in result.reason


def test_unwritten_element_fails_even_at_huge_k():
    a, b, ref = _inputs(4, 4, 8)
    c = (a @ b).clone()
    c[2, 2] = float("nan")
    assert not chk.compare(c, ref, 2**24).passed
