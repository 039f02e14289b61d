"""Launcher for cuda_kernels/naive.cu: one thread per element of C, threadIdx.x walks rows of C (uncoalesced).

Geometry: BLOCK x BLOCK threads per block, grid (cdiv(M, BLOCK), cdiv(N, BLOCK), 1).
"""

from cuda_kernels._build import cdiv, compile_kernel, stage_launcher

SOURCE, KERNEL = "naive.cu", "matmul_naive"
BLOCK = 32


def build(fast_math: bool = False, unroll: bool = True, **_):
    return compile_kernel(SOURCE, KERNEL, {"BLOCK": BLOCK}, fast_math=fast_math, unroll=unroll)


def geometry(M: int, N: int, K: int, **_):
    return (cdiv(M, BLOCK), cdiv(N, BLOCK), 1), (BLOCK, BLOCK, 1), 0


def prepare(a, b, c, **params):
    M, K = a.shape
    return stage_launcher(build(**params), geometry(M, b.shape[1], K), a, b, c)
