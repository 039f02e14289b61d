"""warp_specialized's Triton twin (Gluon) for what its lesson (triton_kernels/warp_specialized.py)
leaves out: a C that is not stored through one TMA store of a row-major tile (a column-major C,
stored through its transpose's descriptor; a C no descriptor can describe, stored masked, with
64-bit offsets under OFFSET64). Not a stage of its own: the launcher (_common.TmaTwin.launch,
lesson_or_variant) runs the lesson kernel where C_DESC is on and C_T off (_common.LESSON_CASE)
and this kernel elsewhere.

Everything below is the twin's former kernel and its partitions, unchanged. For the lesson's
cases it compiles to the lesson kernel's PTX, instruction for instruction
(tests/test_warp_specialized_triton.py, test_the_lesson_compiles_to_the_variants_ptx), and the
launch is named the same (matmul_warp_specialized_kernel), so rows, lab.profile and the tuner
see one stage.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)

from triton_kernels import _common as common

# Triton 3.9 renames the TMA copies (async_load / async_store; the 3.6 names raise there)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.constexpr_function
def _warps_per_cta(BLOCK_M, num_warps):
    """[rows, cols] of warps over the accumulator: one warp per 16 rows (a warpgroup's wgmma
    covers 64), the warps left over side by side along N (BLOCK_M = 64 with 8 warps: [4, 2])."""
    rows = max(1, min(num_warps, BLOCK_M // 16))
    return [rows, num_warps // rows]


@gluon.jit
def _descriptor(ptr, rows, cols, ld, BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr,
                TRANSPOSED: gl.constexpr):
    """As _common.tma_descriptor, in Gluon: the layout (the swizzle) is named here, and the
    shared-memory tiles are allocated in it."""
    if TRANSPOSED:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_C, BLOCK_R],
                                                                    ptr.dtype.element_ty)
        desc = tma.make_tensor_descriptor(ptr, [cols, rows], [ld, 1], [BLOCK_C, BLOCK_R], layout)
    else:
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_R, BLOCK_C],
                                                                    ptr.dtype.element_ty)
        desc = tma.make_tensor_descriptor(ptr, [rows, cols], [ld, 1], [BLOCK_R, BLOCK_C], layout)
    return desc


@gluon.jit
def _producer(a_desc, b_desc, a_ring, b_ring, full, empty, m0, n0, K, BLOCK_K: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, STAGES: gl.constexpr):
    """The producer partition (one warp): fill slot i % STAGES with k-step i once the consumers
    have released it."""
    tile_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for i in range(gl.cdiv(K, BLOCK_K)):
        s = i % STAGES
        # a fresh barrier counts as having completed the phase before phase 0: the first pass
        # over the ring does not wait
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        bar = full.index(s)
        mbarrier.expect(bar, tile_bytes)  # the full barrier completes when these bytes land
        k0 = i * BLOCK_K
        if A_T:
            _tma_load(a_desc, [k0, m0], bar, a_ring.index(s))
        else:
            _tma_load(a_desc, [m0, k0], bar, a_ring.index(s))
        if B_T:
            _tma_load(b_desc, [n0, k0], bar, b_ring.index(s))
        else:
            _tma_load(b_desc, [k0, n0], bar, b_ring.index(s))


@gluon.jit
def _consumers(a_ring, b_ring, full, empty, K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               BLOCK_K: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
               STAGES: gl.constexpr, num_warps: gl.constexpr):
    """The default partition (num_warps warps, the consumer warpgroups): wgmma on each slot as it
    fills, one wgmma group left in flight, the previous slot released. Returns the fp32
    accumulator in wgmma's register layout."""
    warps: gl.constexpr = _warps_per_cta(BLOCK_M, num_warps)
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=warps,
        instr_shape=[16, BLOCK_N // warps[1], 256 // a_ring.dtype.primitive_bitwidth])
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=layout)
    for i in range(gl.cdiv(K, BLOCK_K)):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        a = a_ring.index(s)
        b = b_ring.index(s)
        if A_T:  # the tile of A^T, read as A through wgmma's transpose bit
            a = a.permute((1, 0))
        if B_T:
            b = b.permute((1, 0))
        # fp32 operands go in as TF32 (the compile option default_dot_input_precision)
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc, a, b = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
        # k-step i-1's wgmma have retired: its slot goes back to the producer
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    return (acc,)


@gluon.jit
def matmul_warp_specialized_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, stride_cm,
                                   stride_cn, scale_a_ptr, scale_b_ptr, BLOCK_M: gl.constexpr,
                                   BLOCK_N: gl.constexpr,
                                   BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                                   A_T: gl.constexpr, B_T: gl.constexpr, C_DESC: gl.constexpr,
                                   C_T: gl.constexpr, STAGES: gl.constexpr,
                                   PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                                   OFFSET64: gl.constexpr, num_warps: gl.constexpr):
    # a @triton.jit function of scalars, inlined into the Gluon kernel as into a Triton one
    pid_m, pid_n = common.grouped_block(gl.program_id(0), gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N),
                                  GROUP_M)
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    a_desc = _descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, A_T)
    b_desc = _descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, B_T)
    # the ring: STAGES tiles of A and of B in their descriptors' swizzled layouts, and a full
    # and an empty barrier per slot
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape,
                                       a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape,
                                       b_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)  # the producer's expect; the TMA bytes complete it
        mbarrier.init(empty.index(s), count=1)  # one arrival of the consumers (see the header)
    acc, = gl.warp_specialize([
        (_consumers, (a_ring, b_ring, full, empty, K, BLOCK_M, BLOCK_N, BLOCK_K, A_T, B_T, STAGES,
                      num_warps)),
        (_producer, (a_desc, b_desc, a_ring, b_ring, full, empty, m0, n0, K, BLOCK_K, A_T, B_T,
                     STAGES)),
    ], [PRODUCER_WARPS], [PRODUCER_REGS])
    # C, by the consumers' warps, in its own dtype (fp8: scaled by scale_a * scale_b in fp32
    # first; None in the other precisions, where this is decided at compile time)
    if scale_a_ptr is not None:
        acc = acc * (gl.load(scale_a_ptr) * gl.load(scale_b_ptr))
    c = acc.to(c_ptr.dtype.element_ty)
    if C_DESC:  # through a staging tile (in the ring's memory, now free) and one TMA store
        c_desc = _descriptor(c_ptr, M, N, ldc, BLOCK_M, BLOCK_N, C_T)
        staging = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
        if C_T:
            staging.store(gl.permute(c, (1, 0)))
            fence_async_shared()  # the generic proxy's writes, seen by the TMA unit
            _tma_store(c_desc, [n0, m0], staging)
        else:
            staging.store(c)
            fence_async_shared()
            _tma_store(c_desc, [m0, n0], staging)
        tma.store_wait(0)
    else:
        if OFFSET64:  # gl.cast, not .to(): a stride of 1 arrives as a constant
            stride_cm = gl.cast(stride_cm, gl.int64)
            stride_cn = gl.cast(stride_cn, gl.int64)
        rm = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, c.type.layout))
        rn = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, c.type.layout))
        gl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
