"""Launcher for cuda_kernels/bank_conflicts.cu: vectorized with a conflict-free shared layout.

Geometry: as vectorized.py. Block (BM/TM)*(BN/TN) threads (1-D; 256 by default); 1-D grid of
ceil(M/BM) * ceil(N/BN) blocks ordered by block_tile() in common.cuh (group); static shared memory
only (smem_bytes: it depends on the fix and, for a transposed B, on the layout), no dynamic shared
memory.

`fix` (compiled as -DFIX=0..3) picks the layout of the tile whose store scatters a float4 down 4
rows (As for a row-major A, Bs for a transposed B; bank_conflicts.cu says why each is, or is not,
conflict-free):
  none     vectorized's layout (rows of As padded by 4 floats): the control;
  pad      no row padding; 128/BK floats after every group of 4 rows (32 floats per tile);
  swizzle  no padding; column x of row k stored at x ^ ((k/4) * (128/BK));
  raw      no padding at all: 2-, 4-, 8-way conflicts at BK = 8, 16, 32 (a positive control).
Everything else, including which float4 variant (VEC_A / VEC_B / VEC_C) a problem gets, is
vectorized.py's rule, and so is the file: the lesson cuda_kernels/bank_conflicts.cu (layout nn,
16-byte-aligned lines, 32-bit offsets; As is the one scattered tile there) for the lesson case,
cuda_kernels/variants/bank_conflicts.cu (every layout, alignment and size; a transposed B is
scattered too, into Bs) for every other problem.
"""

from cuda_kernels import blocktile_2d, vectorized
from cuda_kernels._build import (cdiv, cuda_offer, lesson_case, require_even_split,
                                 require_static_smem, spill_free_build, stage_source)
from lab.base.errors import LabError
from lab.base.entry import entry

FIXES = {"none": 0, "pad": 1, "swizzle": 2, "raw": 3}  # -DFIX values (bank_conflicts.cu)
threads = blocktile_2d.threads
aligned_operands = vectorized.aligned_operands


def tile_floats(width: int, BK: int, fix: str, scatter: bool, none_pad: int) -> int:
    """Floats of one BK-row shared tile of `width`-float rows, as variants/bank_conflicts.cu's
    Tile::SIZE (the lesson's AS_SIZE for As, BK * BN for Bs)."""
    ld = width + (none_pad if fix == "none" else 0)
    gpad = 128 // BK if fix == "pad" and scatter else 0
    return BK * ld + (BK // 4) * gpad


def smem_bytes(BM: int = 128, BN: int = 128, BK: int = 8, fix: str = "pad",
               layout: str = "nn", **_) -> int:
    """Static shared memory of the build for `layout` (a transposed B makes Bs the scatter)."""
    trans_a, trans_b = layout[0] == "t", layout[1] == "t"
    return 4 * (tile_floats(BM, BK, fix, not trans_a, 4)
                + tile_floats(BN, BK, fix, trans_b, 4 if trans_b else 0))


def validate(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8,
             fix: str = "pad", **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    if fix not in FIXES:
        raise LabError(f"bank_conflicts: fix must be one of {', '.join(FIXES)}, not {fix!r}")
    blocktile_2d.validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, stage="bank_conflicts")
    where = f"bank_conflicts with BM={BM}, BN={BN}, BK={BK}, TM={TM}, TN={TN}"
    # the loaders move whole float4s, the same count per thread
    require_even_split(where, threads(BM, BN, TM, TN), BM * BK // 4, BK * BN // 4,
                       "float4 chunks", "raise BK (or BM, BN), or raise TM/TN for fewer threads")
    require_static_smem(f"{where}, fix={fix}",
                        max(smem_bytes(BM, BN, BK, fix, layout) for layout in ("nn", "nt")))


def build(BM: int = 128, BN: int = 128, BK: int = 8, TM: int = 8, TN: int = 8,
          fix: str = "pad", group: int = 16, fast_math: bool = False, unroll: bool = True,
          vec_a: bool = True, vec_b: bool = True, vec_c: bool = True, layout: str = "nn",
          offsets64: bool = False, **_):
    validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN, fix=fix)
    defines = {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "TN": TN, "GROUP": group,
               "FIX": FIXES[fix], "VEC_A": bool(vec_a), "VEC_B": bool(vec_b),
               "VEC_C": bool(vec_c)}
    # the lesson (bank_conflicts.cu) for nn, aligned lines, 32-bit offsets; else the variant
    source = stage_source("bank_conflicts", lesson_case(layout, offsets64, vec_a, vec_b, vec_c))
    return spill_free_build(source, "matmul_bank_conflicts", defines,
                            blocktile_2d.first_blocks(BM, BN, TM, TN), fast_math=fast_math,
                            unroll=unroll, layout=layout, offsets64=offsets64)


def geometry(M: int, N: int, K: int, BM: int = 128, BN: int = 128, TM: int = 8, TN: int = 8, **_):
    return (cdiv(M, BM) * cdiv(N, BN), 1, 1), (threads(BM, BN, TM, TN), 1, 1), 0


OFFER = cuda_offer("bank_conflicts", ("matmul_bank_conflicts",), build, geometry,
                   validate=validate)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py)."""
    return vectorized.vector_launch(build, geometry, p, params)
