"""Launcher for cuda_kernels/vectorized.cu: blocktile_2d with float4 global access and As[k][m].

Geometry: block (BM/TM)*(BN/TN) threads (1-D; 256 by default); 1-D grid of ceil(M/BM) * ceil(N/BN)
blocks ordered by block_tile() in common.cuh (group); static shared memory (BK*(BM+4) + BK*BN) * 4
bytes (8.1 KiB by default; a transposed B pads the rows of Bs by 4 floats), no dynamic shared memory.

The build is chosen per call, from the shared description of the operands (prepare): the layout
(Problem.layout: nn, nt, tn, tt; -DTRANS_A / -DTRANS_B), which operands may use float4, and the
offsets (Problem.offsets64). A float4 runs along an operand's contiguous dimension (a row of a
row-major operand, a column of a transposed one: variants/vectorized.cu, Layouts) and must be
16-byte aligned, so (aligned_operands)
  VEC_A = 1 only if A's lines are 16-byte aligned: its data pointer and lda * 4 bytes are
          multiples of 16 (Operand.aligned); else the A chunks are read one float at a time;
  VEC_B = 1 likewise for B (ldb), VEC_C = 1 for C (ldc; C is always row-major), whose float4 are
          the stores.
The lesson case (layout nn, all three aligned, 32-bit offsets) compiles the lesson,
cuda_kernels/vectorized.cu; every other problem compiles cuda_kernels/variants/vectorized.cu, the
same kernel for every layout, alignment and size (the lesson's build is the variant's nn aligned
build instruction for instruction: tests/test_lessons_vectorized.py). Each build is its own compiled
kernel (-DVEC_A / -DVEC_B / -DVEC_C: the lesson ignores them), cached per process. build() without
those arguments compiles the lesson (what CPU mode reports and what 4096^3 runs).
"""

from cuda_kernels import blocktile_2d
from cuda_kernels._build import (cdiv, cuda_offer, lesson_case, require_even_split,
                                 require_static_smem, spill_free_build, stage_launcher,
                                 stage_source)
from lab.base.entry import entry

threads = blocktile_2d.threads


def smem_bytes(BM: int = 128, BN: int = 128, BK: int = 8, **_) -> int:
    return (BK * (BM + 4) + BK * BN) * 4  # As[k][m] rows padded by 4 floats (see the .cu)


def validate(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8, **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    blocktile_2d.validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, stage="vectorized")
    where = f"vectorized with BM={BM}, BN={BN}, BK={BK}, TM={TM}, TN={TN}"
    require_even_split(where, threads(BM, BN, TM, TN), BM * BK // 4, BK * BN // 4,
                       "float4 chunks", "raise BK (or BM, BN), or raise TM/TN for fewer threads")
    require_static_smem(where, smem_bytes(BM, BN, BK))


def build(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8, group: int = 16,
          fast_math: bool = False, unroll: bool = True, vec_a: bool = True, vec_b: bool = True,
          vec_c: bool = True, layout: str = "nn", offsets64: bool = False, **_):
    validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
    defines = {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "TN": TN, "GROUP": group,
               "VEC_A": bool(vec_a), "VEC_B": bool(vec_b), "VEC_C": bool(vec_c)}
    # the lesson (vectorized.cu) for nn, aligned lines, 32-bit offsets; else variants/vectorized.cu
    source = stage_source("vectorized", lesson_case(layout, offsets64, vec_a, vec_b, vec_c))
    return spill_free_build(source, "matmul_vectorized", defines,
                            blocktile_2d.first_blocks(BM, BN, TM, TN), fast_math=fast_math,
                            unroll=unroll, layout=layout, offsets64=offsets64)


def aligned_operands(p) -> dict[str, bool]:
    """Which operands of Problem `p` may use float4: those whose lines (rows, or columns of a
    transposed A or B) start on 16-byte boundaries, i.e. base pointer and leading dimension."""
    return {"vec_a": p.a.aligned(16), "vec_b": p.b.aligned(16), "vec_c": p.c.aligned(16)}


def geometry(M: int, N: int, K: int, BM: int = 128, BN: int = 128, TM: int = 8, TN: int = 8, **_):
    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, TM, TN), 1, 1), 0


OFFER = cuda_offer("vectorized", ("matmul_vectorized",), build, geometry, validate=validate)


def vector_launch(build, geometry, p, params):
    """prepare()'s body for a kernel with VEC_A / VEC_B / VEC_C variants (this stage and
    bank_conflicts): the build for p's layout, alignment and offsets, launched on p."""
    params = {k: v for k, v in params.items() if k not in ("vec_a", "vec_b", "vec_c")}
    return stage_launcher(build(**params, **aligned_operands(p), layout=p.layout,
                                offsets64=p.offsets64),
                          geometry(p.M, p.N, p.K, **params), p)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return vector_launch(build, geometry, p, params)
