"""tma_wgmma's Triton twin for what its lesson (triton_kernels/tma_wgmma.py) leaves out: a C that
is not stored through one TMA store of a row-major tile (a column-major C, stored through its
transpose's descriptor; a C no descriptor can describe, stored masked, with 64-bit offsets under
OFFSET64), C in two halves (subtile, which lets a tf32 tile of 128 x 256 fit), and the Triton
interpreter's bf16 upcast (UPCAST, _common.dot_meta). Not a stage of its own: the launcher
(_common.TmaTwin.launch, lesson_or_variant) runs the lesson kernel where every meta-parameter
the lesson does not take holds its lesson value (_common.LESSON_CASE) and this kernel elsewhere.

matmul_tma_wgmma_kernel below is the twin's former kernel, unchanged: the lesson's kernel plus
those paths. For the lesson's cases it compiles to the lesson kernel's PTX, instruction for
instruction (tests/test_hopper_triton.py, test_the_lesson_compiles_to_the_variants_ptx), and the
launch is named the same (its kernel is matmul_tma_wgmma_kernel too), so rows, lab.profile and
the tuner see one stage. The header of triton_kernels/tma_wgmma.py explains both.
"""

import triton
import triton.language as tl

from triton_kernels import _common as common


@triton.jit
def matmul_tma_wgmma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm, stride_cn,
                            scale_a_ptr, scale_b_ptr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                            C_DESC: tl.constexpr, C_T: tl.constexpr, SUBTILE: tl.constexpr,
                            INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                            OFFSET64: tl.constexpr = False):
    # grouped order (warptiling's, _common.grouped_block)
    pid_m, pid_n = common.grouped_block(tl.program_id(0), tl.cdiv(M, BLOCK_M),
                                        tl.cdiv(N, BLOCK_N), GROUP_M)
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    # A is M x K and B is K x N; a column-major one (A_T, B_T) is described as its transpose
    a_desc = common.tma_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = common.tma_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    if scale_a_ptr is not None:  # fp8: scale_a * scale_b, loaded before the loop
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # A plain loop over k-steps; num_stages makes Triton pipeline its TMA loads (the header)
    for k0 in range(0, K, BLOCK_K):
        # one TMA load per tile: no pointers, no masks (zeros past the edges); a column-major
        # operand's tile is loaded from its transpose and transposed back (.T: a view, which
        # wgmma reads with its transpose bit in 16-bit types)
        a = a_desc.load([k0, m0]).T if A_T else a_desc.load([m0, k0])
        b = b_desc.load([n0, k0]).T if B_T else b_desc.load([k0, n0])
        if UPCAST:  # the interpreter's bf16 dot is wrong (_common.dot_meta)
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    if scale_a_ptr is not None:  # fp8: C = scale_a * scale_b * (A @ B), scaled in fp32
        acc = acc * scale
    c = acc.to(c_ptr.dtype.element_ty)  # C in its own dtype: the fp32 accumulator rounded
    if C_DESC:  # through shared memory and one TMA store (clipped at C's edges)
        c_desc = common.c_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, C_T, SUBTILE)
        if SUBTILE:  # subtile: C's left and right halves (a renaming of registers), two stores
            c, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        if C_T:  # a column-major C, described as its transpose
            c_desc.store([n0, m0], c.T)
        else:
            c_desc.store([m0, n0], c)
        if SUBTILE:  # the right half, BLOCK_N / 2 columns on
            if C_T:
                c_desc.store([n0 + BLOCK_N // 2, m0], c1.T)
            else:
                c_desc.store([m0, n0 + BLOCK_N // 2], c1)
    else:  # a C no descriptor can describe (its lines off 16 bytes): a masked store
        if OFFSET64:  # tl.cast, not .to(): a stride of 1 arrives as a constant
            stride_cm = tl.cast(stride_cm, tl.int64)
            stride_cn = tl.cast(stride_cn, tl.int64)
        rm = m0 + tl.arange(0, BLOCK_M)
        rn = n0 + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
