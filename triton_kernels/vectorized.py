"""Stage vectorized, Triton twin: blocktile_2d's twin plus the CUDA launcher's alignment facts.

CUDA stage: cuda_kernels/vectorized.cu. Same tile as blocktile_2d (BLOCK_M x BLOCK_N = 128 x 128,
8 warps = the CUDA block's 256 threads), masked loads with zero fill, and
tl.dot(..., input_precision="ieee"): IEEE fp32 FMAs, no TF32.

What Triton does for you that the CUDA stage does by hand:
- 128-bit global loads and stores (ld.global.v4 / LDG.E.128, STG.E.128): Triton emits them on its
  own wherever its alignment analysis can prove that 4 consecutive elements are contiguous,
  16-byte aligned and under one mask value. It learns that from (a) the arguments: pointers are
  specialized as 16-byte aligned and integers divisible by 16 as such (K = N = 4096: yes; 4095,
  4097: no, and it falls back to 32-bit loads, exactly like the CUDA launcher's VEC_A=0/VEC_B=0),
  and (b) hints in the kernel, the knobs this file exposes:
    tl.multiple_of(x, d)      every value of x is a multiple of d (here: row offsets rm*K, rk*N);
    tl.max_contiguous(x, d)   x is made of runs of d consecutive values (rm, rn, rk);
    tl.max_constancy(x, d)    x is constant over runs of d (here: the edge masks).
  The launcher passes VEC_A / VEC_B from the same rule as cuda_kernels/vectorized.py (K % 4 == 0,
  N % 4 == 0, 16-byte aligned pointers), so N = 4100 (not a multiple of 16, but of 4) still gets
  128-bit access here, as in the CUDA stage. EVEN_K (K % BLOCK_K == 0) drops the K masks.
- the transposed A tile: where the CUDA stage stores As[k][m] so that a thread's A fragment is one
  LDS.128, tl.dot's shared-memory layout and fragment loads are chosen by the compiler (the
  compiled kernel reads its operands with LDS.128 as well);
- register tiling, shared-memory staging and barriers (see blocktile_2d's twin);
- software pipelining when num_stages > 1 (default 1: the CUDA kernel does not prefetch).
BLOCK_K = max(BK, 16): tl.dot needs a K-tile of at least 16 (16 at the default BK = 8).
Knobs: BM, BN, BK, num_warps (default 8 = 256 threads / 32), num_stages.
Changed from blocktile_2d's twin: the VEC_A / VEC_B / EVEN_K specializations and the hints above;
the tile, warps and tl.dot are the same. Bottleneck it attacks (as the CUDA stage): load and store
instruction count, by making 128-bit global access provable where it is legal.
Launch: grid (ceil(N/BLOCK_N), ceil(M/BLOCK_M)), num_warps 8.
"""

import triton
import triton.language as tl

from triton_kernels._common import block_k, cdiv, launcher, validate_block_tile


@triton.jit
def matmul_vectorized_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC_A: tl.constexpr,
                             VEC_B: tl.constexpr, EVEN_K: tl.constexpr):
    # Offsets of this program's rows and columns: runs of BLOCK consecutive values starting at a
    # multiple of BLOCK (Triton infers this from program_id * BLOCK + arange; said explicitly).
    rn = tl.max_contiguous(tl.multiple_of(tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N),
                                          BLOCK_N), BLOCK_N)
    rm = tl.max_contiguous(tl.multiple_of(tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M),
                                          BLOCK_M), BLOCK_M)
    rk = tl.max_contiguous(tl.arange(0, BLOCK_K), BLOCK_K)
    a_rows = rm * K  # start of each row of A
    b_rows = rk * N  # start of each row of the B tile
    c_rows = rm * N
    if VEC_A:  # K % 4 == 0: every row of A starts on a 16-byte boundary
        a_rows = tl.multiple_of(a_rows, 4)
    if VEC_B:  # N % 4 == 0: every row of B and of C starts on a 16-byte boundary
        b_rows = tl.multiple_of(b_rows, 4)
        c_rows = tl.multiple_of(c_rows, 4)
    a_ptrs = a_ptr + a_rows[:, None] + rk[None, :]
    b_ptrs = b_ptr + b_rows[:, None] + rn[None, :]
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    if VEC_B:  # N % 4 == 0 and rn runs start at multiples of 4: the mask is constant per float4
        in_n = tl.max_constancy(in_n, [1, 4])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:  # every k-step is full: only the M / N edges are masked
            a = tl.load(a_ptrs, mask=in_m, other=0.0)
            b = tl.load(b_ptrs, mask=in_n, other=0.0)
        else:
            in_k_a = k0 + rk[None, :] < K
            if VEC_A:  # K % 4 == 0: the K mask is constant per float4 too
                in_k_a = tl.max_constancy(in_k_a, [1, 4])
            a = tl.load(a_ptrs, mask=in_m & in_k_a, other=0.0)
            b = tl.load(b_ptrs, mask=(k0 + rk[:, None] < K) & in_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    tl.store(c_ptr + c_rows[:, None] + rn[None, :], acc, mask=in_m & in_n)


def validate(BM: int = 128, BN: int = 128, BK: int = 8, num_stages: int = 1, **_) -> None:
    validate_block_tile("vectorized", BM, BN, BK, num_stages)


def vector_flags(a, b, c) -> dict[str, bool]:
    """The CUDA launcher's rule (cuda_kernels/vectorized.py), for Triton's hints."""
    K, N = a.shape[1], b.shape[1]
    return {
        "VEC_A": K % 4 == 0 and a.data_ptr() % 16 == 0,
        "VEC_B": N % 4 == 0 and b.data_ptr() % 16 == 0 and c.data_ptr() % 16 == 0,
    }


def prepare(a, b, c, BM: int = 128, BN: int = 128, BK: int = 8, num_warps: int = 8,
            num_stages: int = 1, **_):
    validate(BM=BM, BN=BN, BK=BK, num_stages=num_stages)
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(N, BN), cdiv(M, BM))
    return launcher(matmul_vectorized_kernel, grid, (a, b, c, M, N, K), BLOCK_M=BM, BLOCK_N=BN,
                    BLOCK_K=block_k(BK), EVEN_K=K % block_k(BK) == 0, **vector_flags(a, b, c),
                    num_warps=num_warps, num_stages=num_stages)
