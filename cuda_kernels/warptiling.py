"""Launcher for cuda_kernels/warptiling.cu: block tile -> warp tile -> thread tile, and split-K.
The lesson file is the unsplit kernel with double-buffered fragments (frags=2) for nn,
16-byte-aligned lines and 32-bit offsets; split-K, frags=1 and every other layout, alignment and
size compile variants/warptiling.cu (build()).

Geometry: block 32 * (BM/WM) * (BN/WN) threads (1-D; 128 at the defaults, 4 warps of 64 x 64);
grid (ceil(M/BM) * ceil(N/BN), splitk): x is the tile, ordered by block_tile() in common.cuh
(group), y the K split; static shared memory (BK*(BM+4) + BK*BN) * 4 bytes (16.25 KiB at the
defaults; a transposed B pads the rows of Bs by 4 floats), no dynamic shared memory.

Derived sizes (warptiling.cu): WMITER = WM*WN / (32*TM*TN*WNITER) subtiles down a warp tile,
WSUBM = WM/WMITER, WSUBN = WN/WNITER, and the 32 lanes of a subtile form TR = WSUBM/TM rows by
TC = WSUBN/TN columns. validate() refuses, in one sentence, every combination that cannot be
compiled or launched (the tuner prunes with it).

Split-K (splitk = S > 1): prepare() allocates the workspace, S slabs of M x ldw floats (ldw = N
rounded up to a multiple of 4, so partial tiles are float4 stores; this allocation is setup, in
launch.setup_ms), and the launch callable runs two kernels: matmul_warptiling (grid y = S, each
split writes its slab) and splitk_reduce (splitk_reduce.cu: C = slab 0 + ... + slab S-1, always in
that order, so the result is bitwise reproducible). Both are timed. The resource columns describe
the first kernel; launch.reduce_build is the second.

The automatic split (splitk = 0, the registry's default): resolve() makes it concrete for the
problem's M, N, K and the GPU's SM count with lab/base/splitk.py's auto_tile_and_split() (the same
function the Triton twin uses, beside the tuner's split-K seeds; its docstring has the rule and the
arithmetic): S = 1 unless the tiles are fewer than the SMs and K leaves every split at least 1024,
else tiles x S near 8x the SM count, raised until no split sums more than 16384 products; where a
split is taken, a 64 x 64 tile (four 32 x 32 warp tiles) replaces the given one if it pads less
of C's edge (320x192: 64 x 64; 256x256: the given 128 x 128). prepare() builds and
launches that S, and its resources carry the `params` text with it (splitk=64, never 0); OFFER's
compile (CPU mode, the tuner's probe) resolves it for DEFAULT_SMS (132). build() and geometry()
take a concrete S: without a shape they read 0 as 1, the unsplit kernel.

Variants per call, as in vectorized.py: the layout (-DTRANS_A / -DTRANS_B) and VEC_A / VEC_B / VEC_C
(aligned_operands: which operands' lines are 16-byte aligned).
"""

from __future__ import annotations

from cuda_kernels._build import (cdiv, compile_kernel, first_min_blocks, launcher, lesson_case,
                                 require_even_split, require_static_smem, resources,
                                 stage_launcher, stage_source)
from cuda_kernels.vectorized import aligned_operands
from lab.base.contract import Offer, Prepared, Tuning
from lab.base.errors import LabError
from lab.base.entry import entry
from lab.base.timer import timer
from lab.base.device import DEFAULT_SMS, sm_count
from lab.base.splitk import AUTO, auto_split, auto_tile_and_split

MAX_ACC = 128  # accumulators per thread that fit beside the fragments in 255 registers
REDUCE_THREADS = 256
# Registers a thread needs besides its accumulators and `frags` sets of fragments, at the least:
# addresses and loop state. The first MIN_BLOCKS tried leaves that many (first_blocks); fewer
# blocks are tried until the build has no spills (spill_free).
REGS_OVERHEAD = 8


def shape(BM=128, BN=128, WM=64, WN=64, WNITER=4, TM=8, TN=4, **_) -> dict[str, int]:
    """The derived sizes of warptiling.cu (only meaningful for a combination validate() passes)."""
    threads = 32 * (BM // WM) * (BN // WN)
    wmiter = (WM * WN) // (32 * TM * TN * WNITER) or 1
    return {"threads": threads, "WMITER": wmiter, "WSUBM": WM // wmiter, "WSUBN": WN // WNITER,
            "TR": WM // wmiter // TM, "TC": WN // WNITER // TN,
            "acc": WM * WN // 32, "frag_values": TM * wmiter + TN * WNITER}


def threads(BM=128, BN=128, WM=64, WN=64, **_) -> int:
    return 32 * (BM // WM) * (BN // WN)


def smem_bytes(BM: int = 128, BN: int = 128, BK: int = 16, **_) -> int:
    return (BK * (BM + 4) + BK * BN) * 4  # nn; a transposed B adds 4 floats per row of Bs


def validate(BM: int = 128, BN: int = 128, BK: int = 16, WM: int = 64, WN: int = 64,
             WNITER: int = 4, TM: int = 8, TN: int = 4, splitk: int = 1, frags: int = 2,
             **_) -> None:
    """Raise LabError (one sentence) if this combination cannot be compiled or launched."""
    where = (f"warptiling with BM={BM}, BN={BN}, BK={BK}, WM={WM}, WN={WN}, WNITER={WNITER}, "
             f"TM={TM}, TN={TN}")
    if TM % 4 or TN % 4 or BK % 8:
        raise LabError(f"{where}: TM and TN must be multiples of 4 (float4 groups) and BK a "
                       f"multiple of 8 (the loaders' 8-k slabs)")
    if BM % WM or BN % WN:
        raise LabError(f"{where}: BM must be a multiple of WM and BN a multiple of WN (whole warp "
                       f"tiles)")
    t = threads(BM, BN, WM, WN)
    if t > 1024:
        raise LabError(f"{where} needs 32*(BM/WM)*(BN/WN) = {t} threads per block, more than "
                       f"1024; raise WM or WN")
    if (WM * WN) % (32 * TM * TN * WNITER) or WN % WNITER:
        raise LabError(f"{where}: the {WM}x{WN} warp tile is not a whole number of WNITER "
                       f"column subtiles each holding the 32 lanes' {TM}x{TN} thread tiles; change "
                       f"WNITER, TM or TN")
    s = shape(BM, BN, WM, WN, WNITER, TM, TN)
    if s["WSUBM"] % TM or s["WSUBN"] % TN or WM % s["WMITER"]:
        raise LabError(f"{where}: the {s['WSUBM']}x{s['WSUBN']} warp subtile cannot be split into "
                       f"{TM}x{TN} thread tiles for 32 lanes; change WNITER, TM or TN")
    if s["acc"] > MAX_ACC:
        raise LabError(f"{where} gives each thread WM*WN/32 = {s['acc']} accumulators, more than "
                       f"the {MAX_ACC} that fit in registers beside the fragments; lower WM or WN")
    require_even_split(where, t, BM * BK // 4, BK * BN // 4, "float4 chunks",
                       "raise BK (or BM, BN), or use fewer warps (larger WM/WN)")
    # the larger (transposed B) of the layouts
    require_static_smem(where, (BK * (BM + 4) + BK * (BN + 4)) * 4)
    if splitk < 0:
        raise LabError(f"warptiling with splitk={splitk}: splitk must be 0 (chosen from the "
                       f"shape) or 1 or more")
    if frags not in (1, 2):
        raise LabError(f"warptiling with frags={frags}: frags (fragment register sets) is 1 or 2")


def first_blocks(BM=128, BN=128, WM=64, WN=64, WNITER=4, TM=8, TN=4, frags=2, **_) -> int:
    """Blocks per SM to ask ptxas for first: as many as the thread count allows, but no more than
    leave accumulators + `frags` fragment sets + REGS_OVERHEAD registers per thread (at the
    defaults 128 + 2*24 + 8 = 184: 2 blocks of 128 threads; with frags=1, 160: 3 blocks)."""
    s = shape(BM, BN, WM, WN, WNITER, TM, TN)
    need = s["acc"] + frags * s["frag_values"] + REGS_OVERHEAD
    return max(1, min(first_min_blocks(s["threads"]), 65536 // (s["threads"] * need)))


def spill_free(defines: dict, first: int, source: str = "warptiling.cu", **switches):
    """Compile `source` with __launch_bounds__(THREADS, MIN_BLOCKS) for MIN_BLOCKS = first,
    first-1, ..., 1: the first build without spills wins. _build.spill_free_build halves
    MIN_BLOCKS instead; here one block more per SM is worth the extra compile (64x64 tiles: 6
    blocks at 80 registers, where halving from 7 lands on 3)."""
    for blocks in range(first, 0, -1):
        build = compile_kernel(source, "matmul_warptiling",
                               {**defines, "MIN_BLOCKS": blocks}, **switches)
        if build.spill_bytes == 0:
            return build
    return build


def build(BM: int = 128, BN: int = 128, BK: int = 16, WM: int = 64, WN: int = 64,
          WNITER: int = 4, TM: int = 8, TN: int = 4, frags: int = 2, group: int = 16,
          splitk: int = 1, fast_math: bool = False, unroll: bool = True, vec_a: bool = True,
          vec_b: bool = True, vec_c: bool = True, layout: str = "nn", offsets64: bool = False,
          **_):
    """The main kernel (NVRTC, no GPU needed). splitk > 1 compiles the split-K variant, whose
    partial tiles go to the workspace (always float4: VEC_OUT in the .cu); splitk = 0 (automatic)
    has no shape here to be resolved against and builds the unsplit kernel (resolve() first).

    The lesson (warptiling.cu: the warp tile, fragments double-buffered in registers) computes
    nn with 16-byte-aligned lines and 32-bit offsets, unsplit, frags=2; every other build
    (another layout, unaligned lines, offsets64, splitk > 1, frags=1) compiles
    variants/warptiling.cu, the same kernel with those switches."""
    tile = dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=TM, TN=TN)
    validate(**tile, splitk=splitk, frags=frags)
    defines = {**tile, "FRAG_BUFFERS": frags, "GROUP": group, "SPLITK": max(splitk, 1),
               "VEC_A": bool(vec_a), "VEC_B": bool(vec_b), "VEC_C": bool(vec_c)}
    lesson = lesson_case(layout, offsets64, vec_a, vec_b, vec_c) and max(splitk, 1) == 1 \
        and frags == 2
    return spill_free(defines, first_blocks(**tile, frags=frags),
                      stage_source("warptiling", lesson), fast_math=fast_math, unroll=unroll,
                      layout=layout, offsets64=offsets64)


# C's element type -> splitk_reduce.cu's output switch (fp32 writes floats: no switch)
REDUCE_OUT = {"fp32": None, "bf16": "OUT_BF16", "fp16": "OUT_F16"}


def build_reduce(splitk: int = 2, vec_c: bool = True, offsets64: bool = False, out: str = "fp32",
                 streamk: tuple | None = None, **_):
    """The split-K reduction kernel (splitk_reduce.cu) for `splitk` slabs, rounding to C's type
    `out` (fp32, or bf16 / fp16 for the Hopper stage's 16-bit C: cuda_kernels/_tma.py);
    `streamk` = (BM, BN, GROUP): persistent's stream-K parts, up to `splitk` a tile."""
    defines = {"SPLITK": splitk, "VEC_C": bool(vec_c), "RTHREADS": REDUCE_THREADS}
    if REDUCE_OUT[out]:
        defines[REDUCE_OUT[out]] = 1
    if streamk is not None:
        defines.update(STREAMK=1, TBM=streamk[0], TBN=streamk[1], GROUP=streamk[2])
    return compile_kernel("splitk_reduce.cu", "splitk_reduce", defines, offsets64=offsets64)


def geometry(M: int, N: int, K: int, BM: int = 128, BN: int = 128, WM: int = 64, WN: int = 64,
             splitk: int = 1, **_):
    """(grid, block, dynamic shared bytes) for a concrete splitk (0 reads as 1, as in build())."""
    return (cdiv(M, BM) * cdiv(N, BN), max(splitk, 1), 1), (threads(BM, BN, WM, WN), 1, 1), 0


def workspace_ld(N: int) -> int:
    """Row length of the split-K workspace: N rounded up to a multiple of 4 floats (16 bytes)."""
    return cdiv(N, 4) * 4


def reduce_geometry(M: int, N: int):
    return (cdiv(M * cdiv(N, 4), REDUCE_THREADS), 1, 1), (REDUCE_THREADS, 1, 1), 0


def kernels(params, precision: str) -> tuple[str, ...]:
    """The main kernel, and the reduction after it when K is split (or may be: splitk=0)."""
    return ("matmul_warptiling",) + (("splitk_reduce",) if params.get("splitk", 1) != 1 else ())


# the registry's CUDA parameters of this stage, in its order: the `params` column's order
PARAM_ORDER = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "frags", "group", "fast_math",
               "unroll", "splitk")


def resolve(params, M: int, N: int, K: int, precision: str = "fp32",
            sms: int = DEFAULT_SMS) -> dict:
    """The parameters as they are built and launched (the contract's `resolve`): splitk=0 made
    the tile and split lab.base.splitk.auto_tile_and_split() chooses for M x N x K on `sms` SMs (a
    64 x 64 tile is four 32 x 32 warp tiles; kept only where the other parameters allow it)."""
    out = dict(params)
    if out.get("splitk", AUTO) != AUTO:
        return out
    BM, BN = out.get("BM", 128), out.get("BN", 128)
    tm, tn, s = auto_tile_and_split(M, N, K, BM, BN, sms)
    out["splitk"] = s
    if (tm, tn) != (BM, BN):
        small = {**out, "BM": tm, "BN": tn, "WM": 32, "WN": 32, "WNITER": 1}
        try:
            validate(**small)
        except LabError:  # the given thread tile does not fit it: the given tile, its own split
            out["splitk"] = auto_split(M, N, K, BM, BN, sms)
        else:
            out = small
    return out


def show(resolved) -> str:
    """The `params` column: the registry's parameters in its order, the split as it runs."""
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if k in resolved)


def compile_for(params, M: int, N: int, K: int, layout: str = "nn", precision: str = "fp32"):
    """The main kernel's build and geometry as prepare() makes them for M x N x K on an H100
    (DEFAULT_SMS: CPU mode and the tuner's probe have no GPU to ask)."""
    r = resolve(params, M, N, K, precision, DEFAULT_SMS)
    return build(**r, layout=layout), geometry(M, N, K, **r)


OFFER = Offer("warptiling", "cuda", kernels=kernels,
              validate=lambda params, precision: validate(**params), resolve=resolve, show=show,
              compile=compile_for, tuning=Tuning(split="splitk", tile=("BM", "BN")))


@entry(OFFER)
def prepare(p, splitk: int = AUTO, **params):
    """p: the shared description of the operands (lab/base/problem.py). splitk=0: the split for this
    problem and this GPU (resolve()); launch.config is the configuration that runs and its text
    the row's `params` column."""
    import numpy as np
    import torch

    params = {k: v for k, v in params.items() if k not in ("vec_a", "vec_b", "vec_c")}
    config = resolve({**params, "splitk": splitk}, p.M, p.N, p.K, p.precision,
                     sm_count(p.c.tensor.device))
    params = {k: v for k, v in config.items() if k != "splitk"}  # the tile splitk=0 chose
    splitk = config["splitk"]
    flags = aligned_operands(p)
    main = build(**params, splitk=splitk, **flags, layout=p.layout, offsets64=p.offsets64)
    grid, block, smem = geometry(p.M, p.N, p.K, **params, splitk=splitk)
    if splitk == 1:
        out = stage_launcher(main, (grid, block, smem), p)
        out.resources = {**out.resources, "params": show(config)}
        out.config = config
        return out

    clock = timer(p.c.tensor.is_cuda)
    ldw = workspace_ld(p.N)
    work = torch.empty(splitk * p.M * ldw, dtype=torch.float32, device=p.c.tensor.device)
    setup_ms = clock.stop()
    i32 = np.int32
    partials = launcher(main, grid, block, (p.a.tensor, p.b.tensor, work, i32(p.M), i32(p.N),
                                            i32(p.K), i32(p.a.ld), i32(p.b.ld), i32(ldw)))
    red = build_reduce(splitk, flags["vec_c"], offsets64=p.offsets64)
    rgrid, rblock, _ = reduce_geometry(p.M, p.N)
    reduce = launcher(red, rgrid, rblock, (work, p.c.tensor, i32(p.M), i32(p.N), i32(ldw),
                                           i32(p.c.ld)))
    # setup_reusable: the workspace is allocated once and every call rewrites all of it
    return Prepared.of_steps([partials.step, reduce.step],
                             resources={**resources(main, grid, block, smem),
                                        "params": show(config)},
                             build=main, setup_ms=setup_ms, reduce_build=red, workspace=work,
                             config=config, setup_reusable=True)
