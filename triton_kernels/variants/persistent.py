"""persistent's Triton twin for what its lesson (triton_kernels/persistent.py) leaves out: a C
that is not stored through one TMA store of a row-major tile (a column-major C, stored through
its transpose's descriptor; a C no descriptor can describe, stored masked, with 64-bit offsets
under OFFSET64), C in two halves (subtile: a tf32 tile, and the FALLBACKS that fit a deeper ring
beside C's staging tile), the Triton interpreter's bf16 upcast (UPCAST, _common.dot_meta), and
fp8 with row-wise or block-wise scales (SCALE, _common.scale_meta: fp8_row scales the
accumulator's rows and columns in the epilogue; fp8_block sums each k-step alone in wgmma's
accumulator and adds it, scaled by its block's scales, into an fp32 accumulator of its own, the
promotion DeepSeek-V3 describes).
Not a stage of its own: the launcher (_common.TmaTwin.launch, lesson_or_variant) runs the lesson
kernel where every meta-parameter the lesson does not take holds its lesson value
(_common.LESSON_CASE) and this kernel elsewhere.

matmul_persistent_kernel below is the twin's former kernel, unchanged: the lesson's kernel plus
those paths. For the lesson's cases it compiles to the lesson kernel's PTX, instruction for
instruction (tests/test_hopper_triton.py, test_the_lesson_compiles_to_the_variants_ptx), and the
launch is named the same, so rows, lab.profile and the tuner see one stage.
"""

import triton
import triton.language as tl

from triton_kernels import _common as common


@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm, stride_cn,
                             scale_a_ptr, scale_b_ptr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, A_T: tl.constexpr,
                             B_T: tl.constexpr, C_DESC: tl.constexpr, C_T: tl.constexpr,
                             SUBTILE: tl.constexpr, FLATTEN: tl.constexpr,
                             INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                             OFFSET64: tl.constexpr = False, SCALE: tl.constexpr = 0,
                             stride_sa0=None, stride_sa1=None, stride_sb0=None,
                             stride_sb1=None):
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    tiles = grid_m * grid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    # the descriptors, once per program (a column-major operand: its transpose, A_T / B_T / C_T)
    a_desc = common.tma_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = common.tma_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    if C_DESC:
        c_desc = common.c_descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, C_T, SUBTILE)
    if scale_a_ptr is not None and SCALE == 0:  # fp8: scale_a * scale_b, once per program
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    # The epilogue counts its tiles on a counter of its own, as Triton's tutorial 09 does, so
    # that the flattened loop's pipeline never needs one value both in the loads it issues
    # ahead (the next tile's) and in the store it finishes (this tile's).
    tile_c = tl.program_id(0) - NUM_SMS
    # Program p computes tiles p, p + NUM_SMS, p + 2 NUM_SMS, ... (grouped order: warptiling's,
    # _common.grouped_block); FLATTEN fuses this loop and the k-loop into one pipelined loop
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = common.grouped_block(tile, grid_m, grid_n, GROUP_M)
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if SCALE == 2:  # fp8_block: the first k-step's scales (the k-loop loads each next one)
            rm = m0 + tl.arange(0, BLOCK_M)
            kb_count = tl.cdiv(K, 128)
            sb_col = scale_b_ptr + (n0 // 128) * stride_sb1
            sa_next = tl.load(scale_a_ptr + rm * stride_sa0, mask=rm < M, other=0.0)
            sb_next = tl.load(sb_col)
        for ks in range(k_steps):  # tma_wgmma's k-loop
            k0 = ks * BLOCK_K
            a = a_desc.load([k0, m0]).T if A_T else a_desc.load([m0, k0])
            b = b_desc.load([n0, k0]).T if B_T else b_desc.load([k0, n0])
            if UPCAST:  # the interpreter's bf16 dot is wrong (_common.dot_meta)
                a, b = a.to(tl.float32), b.to(tl.float32)
            if SCALE == 2:  # fp8_block: this k-step's sum alone in wgmma's accumulator, then
                # promoted: scaled by its 1 x 128 scales of A and its 128 x 128 scale of B (the
                # tile lies in one of B's blocks along N, BLOCK_K divides 128 along K) and added
                # in fp32. The next k-step's scales are loaded now, a k-step ahead of their use:
                # Triton pipelines only the loads that feed tl.dot, and a load waited for in the
                # k-step that issues it stalls every k-step for a trip to memory
                sa, sb = sa_next, sb_next
                kn = tl.minimum((k0 + BLOCK_K) // 128, kb_count - 1)  # the last reloads itself
                sa_next = tl.load(scale_a_ptr + rm * stride_sa0 + kn * stride_sa1, mask=rm < M,
                                  other=0.0)
                sb_next = tl.load(sb_col + kn * stride_sb0)
                part = tl.dot(a, b, input_precision=INPUT_PRECISION)
                acc += part * (sa * sb)[:, None]
            else:
                acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        tile_c += NUM_SMS
        pid_m, pid_n = common.grouped_block(tile_c, grid_m, grid_n, GROUP_M)
        if SCALE == 1:  # fp8_row: C[m, n] = scale_a[m] * scale_b[n] * (A @ B)[m, n], in fp32
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            sa = tl.load(scale_a_ptr + rm * stride_sa0, mask=rm < M, other=0.0)
            sb = tl.load(scale_b_ptr + rn * stride_sb1, mask=rn < N, other=0.0)
            acc = acc * sa[:, None] * sb[None, :]
        elif scale_a_ptr is not None and SCALE == 0:  # fp8: C = scale_a * scale_b * (A @ B)
            acc = acc * scale
        c = acc.to(c_ptr.dtype.element_ty)  # C in its own dtype: the fp32 accumulator rounded
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        if SUBTILE:  # subtile: C's left and right halves stored one after the other (_common)
            if C_DESC:
                common.tma_store_c(c_desc, c, m0, n0, BLOCK_M, BLOCK_N, C_T, SUBTILE)
            else:
                common.masked_store_c(c_ptr, c, m0, n0, M, N, stride_cm, stride_cn, BLOCK_M,
                                      BLOCK_N, OFFSET64, SUBTILE)
        elif C_DESC:  # through shared memory and one TMA store (clipped at C's edges)
            if C_T:  # a column-major C, described as its transpose
                c_desc.store([n0, m0], c.T)
            else:
                c_desc.store([m0, n0], c)
        else:  # a C no descriptor can describe (its lines off 16 bytes): a masked store
            # OFFSET64: 64-bit offsets (tl.cast, not .to(): a stride of 1 arrives as a constant)
            s_cm = tl.cast(stride_cm, tl.int64) if OFFSET64 else stride_cm
            s_cn = tl.cast(stride_cn, tl.int64) if OFFSET64 else stride_cn
            rm = m0 + tl.arange(0, BLOCK_M)
            rn = n0 + tl.arange(0, BLOCK_N)
            tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, c,
                     mask=(rm[:, None] < M) & (rn[None, :] < N))
