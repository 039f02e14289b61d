"""The planted fast-but-wrong kernel (zero_registers.cu): build, launch, a model of what its
compiled code writes, and the naive check that lets it through. Not a stage: nothing registers it.

    from planted import kernel as planted          # tests/ on sys.path (pytest puts it there)
    build = planted.build()                        # NVRTC, no GPU needed
    launch = planted.launcher(a, b, c)             # GPU: torch CUDA tensors, row-major
    planted.naive_mismatches(c, ref)               # 0 for a C that is half NaN

The defect: the thread tile is TM x TN = 8 x 16 = 128 results but the accumulator is declared
`float acc[ACC]` with ACC = 64. The NVRTC 13.0 build for sm_90 keeps the accumulators that exist
(acc[0..63], rows 0..3 of each thread tile) and drops every statement that touches the others:
half the FFMAs and half the stores of the fixed build (ACC = 128). `written_rows` is that model:
a row of C is written when its place in the thread tile, row % TM, is below ACC // TN.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("zero_registers.cu")
KERNEL = "matmul_zero_registers"
BM = BN = 128
TM, TN = 8, 16
THREADS = (BM // TM) * (BN // TN)  # 128
ACC_DEFECT = 64  # the declared accumulator (the defect)
ACC_FIXED = TM * TN  # 128: what it should be
GROUP = 8
NAIVE_TOL = 1e-2  # the absolute tolerance of the naive check (as in the public harnesses)


def build(acc: int = ACC_DEFECT, vec: bool = True, layout: str = "nn", arch: str | None = None):
    """NVRTC build of the planted kernel (acc=ACC_FIXED builds the corrected kernel)."""
    from cuda_kernels._build import compile_kernel

    return compile_kernel(str(SOURCE), KERNEL, {"ACC": acc, "VEC": bool(vec), "GROUP": GROUP},
                          layout=layout, arch=arch)


def geometry(M: int, N: int, K: int = 0):
    from cuda_kernels._build import cdiv

    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (THREADS, 1, 1), 0


def launcher(a, b, c, acc: int = ACC_DEFECT):
    """A no-argument launch of the planted kernel on row-major CUDA tensors a (MxK), b (KxN),
    c (MxN), through cuda_kernels/_build.launcher like every CUDA stage."""
    import numpy as np

    from cuda_kernels._build import launcher as make_launcher

    for name, t in (("a", a), ("b", b), ("c", c)):
        if not (t.is_cuda and t.is_contiguous() and t.dim() == 2):
            raise ValueError(f"{name} must be a contiguous 2-D CUDA tensor")
    M, K = a.shape
    N = b.shape[1]
    aligned = all(t.data_ptr() % 16 == 0 for t in (a, b)) and K % 4 == 0 and N % 4 == 0
    grid, block, smem = geometry(M, N, K)
    args = (a, b, c, np.int32(M), np.int32(N), np.int32(K), np.int32(K), np.int32(N), np.int32(N))
    return make_launcher(build(acc, vec=aligned), grid, block, args, smem)


def written_rows(M: int, acc: int = ACC_DEFECT):
    """Bool tensor (M,): the rows of C the compiled kernel writes. Row m of C is row m % TM of its
    thread's tile (block tiles start at multiples of BM, thread tiles at multiples of TM), and
    acc[i * TN + j] exists for i < acc // TN."""
    import torch

    return (torch.arange(M) % TM) < min(TM, acc // TN)


def emulated_launch(a, b, c, acc: int = ACC_DEFECT):
    """CPU stand-in for the compiled kernel: writes a @ b (fp32) into the rows of c it writes
    (written_rows) and leaves the others as they were, as the GPU build does."""
    rows = written_rows(a.shape[0], acc)

    def launch():
        c[rows] = (a @ b)[rows]

    return launch


def naive_mismatches(c, ref, tol: float = NAIVE_TOL) -> int:
    """The check of a timing-only harness: count the elements with |c - ref| > tol. A NaN
    compares false with anything, so an element left NaN is counted as a match."""
    return int(((c.double() - ref.double()).abs() > tol).sum().item())


def naive_passes(c, ref, tol: float = NAIVE_TOL) -> bool:
    return naive_mismatches(c, ref, tol) == 0
