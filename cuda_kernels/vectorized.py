"""Launcher for cuda_kernels/vectorized.cu: blocktile_2d with float4 global access and As[k][m].

Geometry: block (BM/TM)*(BN/TN) threads (1-D; 256 by default); 1-D grid of ceil(M/BM) * ceil(N/BN)
blocks ordered by block_tile() in common.cuh (group); static shared memory (BK*(BM+4) + BK*BN) * 4
bytes (8.1 KiB by default), no dynamic shared memory.

The vector variant is chosen per call, from the operands (prepare): a float4 access must be
16-byte aligned, so
  VEC_A = 1 only if K % 4 == 0 and A's data pointer is 16-byte aligned (every row of A starts on
          a 16-byte boundary), else the A chunks are read one float at a time;
  VEC_B = 1 only if N % 4 == 0 and B's and C's data pointers are 16-byte aligned (rows of B and C).
Each variant is its own compiled kernel (-DVEC_A / -DVEC_B), cached per process. build() without
those arguments compiles the vector variant (what CPU mode reports and what 4096^3 runs).
"""

from cuda_kernels import blocktile_2d
from cuda_kernels._build import STATIC_SMEM_LIMIT, cdiv, spill_free_build, stage_launcher
from lab.errors import LabError

threads = blocktile_2d.threads


def smem_bytes(BM: int = 128, BN: int = 128, BK: int = 8, **_) -> int:
    return (BK * (BM + 4) + BK * BN) * 4  # As[k][m] rows padded by 4 floats (see the .cu)


def validate(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8, **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    blocktile_2d.validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, stage="vectorized")
    where = f"vectorized with BM={BM}, BN={BN}, BK={BK}, TM={TM}, TN={TN}"
    t = threads(BM, BN, TM, TN)
    if (BM * BK // 4) % t or BM * BK // 4 < t:
        raise LabError(f"{where}: the A tile ({BM * BK // 4} float4 chunks) does not split evenly "
                       f"over {t} threads; raise BK (or BM), or raise TM/TN for fewer threads")
    if (BK * BN // 4) % t or BK * BN // 4 < t:
        raise LabError(f"{where}: the B tile ({BK * BN // 4} float4 chunks) does not split evenly "
                       f"over {t} threads; raise BK (or BN), or raise TM/TN for fewer threads")
    smem = smem_bytes(BM, BN, BK)
    if smem > STATIC_SMEM_LIMIT:
        raise LabError(f"{where} needs {smem} bytes of static shared memory, more than the 48 KiB "
                       f"limit; lower BK, BM or BN")


def build(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8, group: int = 16,
          fast_math: bool = False, unroll: bool = True, vec_a: bool = True, vec_b: bool = True,
          **_):
    validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
    defines = {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "TN": TN, "GROUP": group,
               "VEC_A": bool(vec_a), "VEC_B": bool(vec_b)}
    return spill_free_build("vectorized.cu", "matmul_vectorized", defines,
                            blocktile_2d.first_blocks(BM, BN, TM, TN), fast_math=fast_math,
                            unroll=unroll)


def vector_flags(a, b, c) -> dict[str, bool]:
    """Which operands may use float4: rows 16-byte aligned (K % 4, N % 4) and base pointers too."""
    K, N = a.shape[1], b.shape[1]
    return {
        "vec_a": K % 4 == 0 and a.data_ptr() % 16 == 0,
        "vec_b": N % 4 == 0 and b.data_ptr() % 16 == 0 and c.data_ptr() % 16 == 0,
    }


def geometry(M: int, N: int, K: int, BM: int = 128, BN: int = 128, TM: int = 8, TN: int = 8, **_):
    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, TM, TN), 1, 1), 0


def prepare(a, b, c, **params):
    validate(**params)
    params = {k: v for k, v in params.items() if k not in ("vec_a", "vec_b")}
    M, K = a.shape
    return stage_launcher(build(**params, **vector_flags(a, b, c)),
                          geometry(M, b.shape[1], K, **params), a, b, c)
