"""Launcher for cuda_kernels/decode.cu: decode-shaped products (few rows of activations times a
large weight matrix), the weights streamed once from DRAM straight into mma.sync fragments, K
split over enough blocks to fill the GPU, the partial tiles added in a fixed order in one kernel.

decode.cu is the lesson, written for bf16, layout nt (A row-major, B column-major: B^T is the
N x K weight matrix as torch.nn.Linear stores it), 16-byte-aligned lines, a row-major C, 32-bit
offsets and unroll on; every other build compiles cuda_kernels/variants/decode.cu, the same kernel
with switches (build(), lesson(); docs/stages/decode.md).

The small side. The kernel's activation side is at most 64 rows per block (MROWS = 8, 16, 32 or
64) and the weight side is streamed; a problem whose N is smaller than its M is computed as
C^T = B^T A^T (the operands swap roles and layouts and C is written column-major: `swap=1` in the
params column), so the weights are always the larger operand. A problem with both sides above 64
runs too, one block row per 64 rows of the small side, each reading the weights again: correct,
and slower than the tiled stages (lab.matmul's automatic choice does not send it here).

Geometry (geometry()): block 32 x warps threads (128), each warp 16 x tiles rows of B^T, so a
block covers BLOCK_N = 16 x tiles x warps columns of C; grid (ceil(N / BLOCK_N), splits,
ceil(M / MROWS)) with N, M those of the (possibly swapped) problem. No dynamic shared memory.

Automatic values (0 in the registry; resolve(), for a shape and a GPU's SM count):
- groups (not a parameter): MROWS / 8, the power of two at or above ceil(min(M, 64) / 8).
- tiles = 0: 1 (auto_tiles()).
- kunroll = 0 (auto_kunroll()): 4 steps per batch for up to 8 activation rows, 2 for up to 32, 1
  for 64 (the activation pieces take the registers: two batches are held at once, the one being
  multiplied and the next one loading), and at most 2 where an operand is read one element at a
  time (a layout whose k's are not contiguous, or unaligned lines: each piece is 8 or 16 loads).
- splitk = 0 (auto_split()): the split S of lab.base.splitk.SPLITS, each split at least
  min_depth() k's (two batches of kunroll steps, and 8x as many weight bytes per block as the
  bytes of the partial tile it writes: 32 x MROWS / element bytes k's), that takes the least time
  in a model of waves: the GPU holds `capacity` blocks at once (SMs x resident_blocks(), from the
  build's registers), each block costs its K / S k's plus min_depth() (its start and its partial
  tile), so the time is ceil(blocks x S / capacity) x (K / S + depth). On an H200 (132 SMs):
  1 x 4096 x 4096 bf16, 64 blocks of 64 columns at 121 registers (4 blocks per SM, capacity 528):
  S = 8, 512 blocks; 1 x 13312 x 16384: 208 blocks, S = 2 (416 blocks in one wave beats 624 in
  two); 64 x 12288 x 4096: 192 blocks at 161 registers (capacity 396), S = 2.
resources["params"] shows the resolved values; launch.config is the dict.

Split-K (splits = S > 1): prepare() allocates the workspace (tiles x S x threads x accumulators
floats, written by each split and read by the last one) and a zeroed int32 arrival counter per
tile (the last block resets its counter, so both are reused by every call: setup_reusable).
"""

from __future__ import annotations

from cuda_kernels._build import (cdiv, launcher, lines_aligned, resources,
                                spill_free_build)
from lab.base.contract import Offer, Prepared
from lab.base.device import DEFAULT_SMS, sm_count
from lab.base.entry import entry
from lab.base.errors import LabError
from lab.base.precisions import cuda_defines, elem_bytes
from lab.base.splitk import AUTO, SPLITS, allowed_splits
from lab.base.timer import timer

PRECISIONS = ("bf16", "fp16", "fp8")
LESSON_PRECISION = "bf16"  # the precision decode.cu, the lesson, is written for
LESSON_LAYOUT = "nt"       # ... and its layout: the weights as torch.nn.Linear stores them
ELEM_BYTES = elem_bytes(*PRECISIONS)
PREC_DEFINES = {p: {d: 1} if d else {} for p, d in cuda_defines(*PRECISIONS).items()}
MAX_MROWS = 64  # activation rows per block at most (8 pieces of mma's 8-column side)
WORKSPACE_RATIO = 8  # each block's weight bytes at least this many times its partial tile's
FIRST_MIN_BLOCKS = 4  # __launch_bounds__ min blocks tried first (128 registers at 128 threads)

# the registry's CUDA parameters of this stage, in its order: the `params` column's order
PARAM_ORDER = ("tiles", "warps", "kunroll", "fast_math", "unroll", "splitk")


def step_k(precision: str) -> int:
    """k's in one 64-byte step of a row: 4 lanes x 16 bytes."""
    return 64 // ELEM_BYTES[precision]


def groups_for(m: int) -> int:
    """8-row activation groups per block for `m` activation rows (MROWS = 8 x groups)."""
    need = cdiv(min(max(m, 1), MAX_MROWS), 8)
    g = 1
    while g < need:
        g *= 2
    return g


def swapped(M: int, N: int) -> bool:
    """Whether the kernel computes C^T = B^T A^T: N is the small side."""
    return N < M


def min_depth(kunroll: int, groups: int, precision: str) -> int:
    """The fewest k's a split may have: two batches of kunroll steps, and WORKSPACE_RATIO x as
    many weight bytes per block as the floats of its partial tile (MROWS x BLOCK_N x 4 bytes)."""
    e = ELEM_BYTES[precision]
    return max(2 * kunroll * step_k(precision), WORKSPACE_RATIO * 4 * 8 * groups // e)


def resident_blocks(registers: int, threads: int) -> int:
    """Blocks of `threads` threads at `registers` per thread one SM holds at once (sm_90: 65,536
    registers allocated 256 per warp, 64 warps, 32 blocks; no shared memory to speak of)."""
    warps = threads // 32
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    return max(1, min((65536 // per_warp) // warps, 64 // warps, 32))


def auto_split(blocks: int, K: int, depth: int, capacity: int) -> int:
    """splitk = 0: the split S of SPLITS, each split at least `depth` k's, that takes the least
    time when every block costs its K / S k's plus `depth` (its start and its partial tile) and
    the blocks run in waves of `capacity` (the blocks the GPU holds at once):
    ceil(blocks x S / capacity) x (K / S + depth). A tie goes to the smaller S."""
    splits = allowed_splits(SPLITS, K, depth)
    return min(splits, key=lambda s: (cdiv(blocks * s, capacity) * (K / s + depth), s))


def auto_tiles(groups: int, precision: str) -> int:
    """tiles = 0: 1 (one 16-row tile of the weights per warp)."""
    return 1


def auto_kunroll(groups: int, gathered: bool = False) -> int:
    """kunroll = 0: 4 steps per batch for up to 8 activation rows, 2 for up to 32, 1 for 64 (two
    batches are in registers at once: the one being multiplied and the next one loading); at
    most 2 where an operand is gathered (each piece 8 or 16 loads)."""
    ku = 4 if groups == 1 else 2 if groups <= 4 else 1
    return min(ku, 2) if gathered else ku


def resolve(params, M: int, N: int, K: int, precision: str = "bf16", sms: int = DEFAULT_SMS,
            gathered: bool = False, registers: int | None = None) -> dict:
    """The parameters as they are built and launched for an M x N x K problem on a GPU of `sms`
    SMs (the contract's `resolve`; gathered: an operand is read one element at a time, whose
    loads take more registers; registers: the build's, which decide how many blocks an SM holds,
    else the contiguous nt build is compiled to read them). Also `swap` (C^T = B^T A^T) and
    `groups`."""
    out = dict(params)
    swap = swapped(M, N)
    m, n = (N, M) if swap else (M, N)
    groups = groups_for(m)
    tiles = out.get("tiles", 0) or auto_tiles(groups, precision)
    kunroll = out.get("kunroll", 0) or auto_kunroll(groups, gathered)
    warps = out.get("warps", 4)
    out.update(tiles=tiles, kunroll=kunroll, warps=warps, groups=groups, swap=int(swap))
    if out.get("splitk", AUTO) == AUTO:
        if registers is None:
            registers = build(**out, precision=precision).registers
        blocks = cdiv(n, 16 * tiles * warps) * cdiv(m, 8 * groups)
        capacity = int(sms or DEFAULT_SMS) * resident_blocks(registers, 32 * warps)
        out["splitk"] = auto_split(blocks, K, min_depth(kunroll, groups, precision), capacity)
    return out


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order as they run, and swap=1 where
    C^T = B^T A^T ran."""
    text = ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if k in resolved)
    return text + (",swap=1" if resolved.get("swap") else "")


def validate(tiles: int = 0, warps: int = 4, kunroll: int = 0, splitk: int = AUTO, **_) -> None:
    """Raise LabError (one sentence) for a combination that cannot be built or launched."""
    if splitk < 0:
        raise LabError(f"decode with splitk={splitk}: splitk must be 0 (chosen from the shape) "
                       f"or 1 or more")
    if (tiles or 1) * (kunroll or 4) > 16:
        raise LabError(f"decode with tiles={tiles} and kunroll={kunroll} holds {(tiles or 1) * (kunroll or 4) * 2} "
                       f"16-byte weight loads per thread in flight, more than the 32 that fit in "
                       f"registers; lower tiles or kunroll")


def kernels(params, precision: str) -> tuple[str, ...]:
    return ("matmul_decode",)


def lesson(precision: str = "bf16", layout: str = "nt", vec_a: bool = True, vec_b: bool = True,
           trans_c: bool = False, offsets64: bool = False, unroll: bool = True) -> bool:
    """True where build() compiles the lesson, cuda_kernels/decode.cu: bf16, layout nt, both
    operands' lines on 16 bytes, a row-major C, 32-bit offsets, unroll on. Every other build
    compiles cuda_kernels/variants/decode.cu, which for the lesson case compiles to the same SASS
    (tests/test_lessons_decode.py)."""
    return (precision == LESSON_PRECISION and layout == LESSON_LAYOUT and bool(vec_a)
            and bool(vec_b) and not trans_c and not offsets64 and bool(unroll))


def build(tiles: int = 1, warps: int = 4, kunroll: int = 4, groups: int = 1,
          fast_math: bool = False, unroll: bool = True, precision: str = "bf16",
          layout: str = "nt", vec_a: bool = True, vec_b: bool = True, trans_c: bool = False,
          offsets64: bool = False, **_):
    """matmul_decode (NVRTC, no GPU needed) for resolved values (0 reads as its automatic value
    for one activation group). __launch_bounds__(threads, MIN_BLOCKS): the largest MIN_BLOCKS
    from FIRST_MIN_BLOCKS down whose build does not spill."""
    validate(tiles=tiles, warps=warps, kunroll=kunroll)
    tiles = tiles or 1
    kunroll = kunroll or 4
    defines = {"THREADS": 32 * warps, "TILES": tiles, "GROUPS": groups, "KU": kunroll,
               **PREC_DEFINES[precision]}
    if lesson(precision, layout, vec_a, vec_b, trans_c, offsets64, unroll):
        source = "decode.cu"
    else:
        source = "variants/decode.cu"
        defines.update(VEC_A=bool(vec_a), VEC_B=bool(vec_b), TRANS_C=bool(trans_c))
    return spill_free_build(source, "matmul_decode", defines, FIRST_MIN_BLOCKS,
                            fast_math=fast_math, unroll=unroll, layout=layout,
                            offsets64=offsets64)


def geometry(M: int, N: int, K: int, tiles: int = 1, warps: int = 4, groups: int = 1,
             splitk: int = 1, **_):
    """(grid, block, dynamic shared bytes) of matmul_decode for the problem as the kernel sees it
    (M: the activation side, N: the weight side; swapped already)."""
    block_n = 16 * (tiles or 1) * warps
    return (cdiv(N, block_n), max(splitk, 1), cdiv(M, 8 * groups)), (32 * warps, 1, 1), 0


def compile_for(params, M: int, N: int, K: int, layout: str = "nt", precision: str = "bf16"):
    """The build and geometry prepare() makes for contiguous operands of M x N x K in `layout`
    on an H100 (DEFAULT_SMS: CPU mode and the tuner's probe have no GPU)."""
    r = resolve(params, M, N, K, precision, DEFAULT_SMS)
    if r["swap"]:  # A' = B^T, B' = A^T: each operand's letter flips, and they trade places
        flip = {"n": "t", "t": "n"}
        layout = flip[layout[1]] + flip[layout[0]]
    m, n = (N, M) if r["swap"] else (M, N)
    return (build(**r, precision=precision, layout=layout, trans_c=bool(r["swap"])),
            geometry(m, n, K, **r))


# GPUs: sm_80+ (mma.sync m16n8k16 with bf16 / fp16, cvt.rn.bf16.f32); fp8 sm_89+ (mma with e4m3,
# the fp8 record's min_capability)
OFFER = Offer("decode", "cuda", precisions=PRECISIONS, kernels=kernels,
              validate=lambda params, precision: validate(**params), resolve=resolve, show=show,
              compile=compile_for, requires={"all": (8, 0)})


def vec_ok(op, kmajor: bool) -> bool:
    """16-byte pieces along k: the operand's k's are contiguous (kmajor) and its lines start on
    16 bytes."""
    return kmajor and lines_aligned(op)


@entry(OFFER)
def prepare(p, splitk: int = AUTO, **params):
    """p: the shared description of the operands (lab/base/problem.py). The automatic values are
    resolved for this problem and this GPU (resolve()); launch.config is what runs and its text
    the row's `params` column."""
    import numpy as np
    import torch

    if swapped(p.M, p.N):  # C^T = B^T A^T: the activations are B^T, the weights A^T
        a, b, c = p.b.transposed(), p.a.transposed(), p.c.transposed()
        m, n = p.N, p.M
    else:
        a, b, c = p.a, p.b, p.c
        m, n = p.M, p.N
    layout = a.letter + b.letter
    trans_c = c.trans
    # A's k's are contiguous when it is row-major; B's when it is column-major (B^T row-major)
    flags = {"vec_a": vec_ok(a, a.row_major), "vec_b": vec_ok(b, b.trans)}
    sms = sm_count(p.c.tensor.device)
    gathered = not all(flags.values())
    config = resolve({**params, "splitk": 1}, p.M, p.N, p.K, p.precision, sms, gathered)
    main = build(**config, precision=p.precision, layout=layout, trans_c=trans_c,
                 offsets64=p.offsets64, **flags)
    config = resolve({**params, "splitk": splitk}, p.M, p.N, p.K, p.precision, sms, gathered,
                     registers=main.registers)
    grid, block, smem = geometry(m, n, p.K, **config)
    s = grid[1]
    clock = timer(p.c.tensor.is_cuda)
    tiles = grid[0] * grid[2]
    per_tile = s * block[0] * 4 * config["tiles"] * config["groups"] if s > 1 else 1
    work = torch.empty(tiles * per_tile, dtype=torch.float32, device=p.c.tensor.device)
    arrivals = torch.zeros(tiles if s > 1 else 1, dtype=torch.int32, device=p.c.tensor.device)
    setup_ms = clock.stop()
    i32 = np.int32
    args = (a.tensor, b.tensor, c.tensor, i32(m), i32(n), i32(p.K), i32(a.ld), i32(b.ld),
            i32(c.ld), work, arrivals)
    if p.scales is not None:  # fp8: scale_a, scale_b (the tensors: a plan swaps them)
        args += tuple(p.scales)
    kernel = launcher(main, grid, block, args, smem)
    info = {**resources(main, grid, block, smem), "params": show(config)}
    # setup_reusable: the workspace is rewritten by every call, the counters left at zero
    return Prepared.of_steps([kernel.step], resources=info, build=main, setup_ms=setup_ms,
                             workspace=work, arrivals=arrivals, config=config,
                             setup_reusable=True)
