"""Launcher for cuda_kernels/wgmma.cu: the tensor-core GEMM of stage mma written for Hopper's own
instruction, warpgroup MMA (wgmma.mma_async, sm_90a), in tf32, 3xtf32, bf16 and fp16.
The lesson file is the kernel for bf16 in layout nn (as the kernel reads it, after plan()'s
copies) with COPY_AT=0 and LOAD_FIRST=0; every other build (tf32, 3xtf32, fp16, the layouts nt
and tt, COPY_AT=2, LOAD_FIRST=1) compiles variants/wgmma.cu (lesson(), build()).

The kernel computes D = A' B' with B' K-major in shared memory and A' from registers
(variants/wgmma.cu's header; wgmma.cu's for nn); plan() maps a problem onto it:
    B column-major (layouts nt, tt): A' = A, B' = B, D = C;
    else A row-major (nn):           A' = B^T (M-major), B' = A^T, D = C^T (C stored transposed,
                                     csm = 1, csn = ldc);
    neither (tn):                    the smaller of A and B is copied K-major first (B into a
                                     column-major buffer: then tt; else A into a row-major one:
                                     then nn);
and an operand whose lines do not start on 16-byte boundaries (data pointer or leading dimension;
the kernel's copies are 16-byte cp.async) is copied into a buffer whose lines do, in the same
orientation. Every such copy is a torch copy_ into a buffer allocated here, run at the start of
every call, inside the timed call: the row's time is the copy plus the kernel, as a caller who
holds the operand that way pays (docs/stages/wgmma.md, "Operands the kernel cannot read").
Nothing is ever handed to another stage's kernel.

Geometry (geometry()): 1-D grid of ceil(M'/BM) * ceil(N'/BN) blocks (BM = 64 * WGS; M' and N'
are swapped where D = C^T) in grouped order (group), 128 * WGS threads, dynamic shared memory
smem_bytes() (STAGES ring slots, 1024-byte aligned, plus 1 KiB to align the ring), one block per
SM (__launch_bounds__(THREADS, 1)). Built for sm_90a (wgmma exists there only); prepare() refuses
any other GPU in one sentence, and without a GPU compile_for() builds it for sm_90a all the same
(CPU mode's resource report).

Parameters (lab/stages.py, stage wgmma): the build defines of wgmma.cu, each 0 (or -1) meaning
the precision's row of WGMMA below:
    WGS        warpgroups per block (1-3; BM = 64 * WGS)
    BN         block tile columns (64, 128, 192, 256)
    STAGES     ring slots (3-6)
    COPY_AT    where each tile's copy goes out: 0 before the tile's wgmma, 2 after
    LOAD_FIRST A' fragment loads before (1) or after (0) the next tile's copy
    SUM_TILES  3xTF32 only: tiles per fresh sum (1, 2; 0 leaves the whole sum to the tensor core,
               25x cuBLAS fp32's error at 4096^3): changes the numerics
    group      block-rows walked together (L2 reuse)
The defaults resolve to exactly the WGMMA row, so their build defines (and SASS) are those the
mma stage's wgmma kernel ran with before it became this stage. validate() refuses a ring over the
227 KiB an H100 block can have, and values outside those lists, in one sentence.
"""

from __future__ import annotations

from cuda_kernels._build import (aligned_buffer, cdiv, compile_kernel, device_arch_of, launcher,
                                 lesson_case, lines_aligned, resources, stage_source)
from lab.base.contract import Offer, Prepared
from lab.base.errors import LabError
from lab.base.precisions import cuda_defines, elem_bytes
from lab.base.entry import entry
from lab.base.problem import Operand

PRECISIONS = ("tf32", "3xtf32", "bf16", "fp16")
DEFINES = cuda_defines("tf32", "3xtf32", "bf16", "fp16")  # lab/base/precisions.py
ELEM_BYTES = elem_bytes("tf32", "3xtf32", "bf16", "fp16")  # sizes from lab/base/precisions.py
ARCH = "sm_90a"
KERNEL = "matmul_wgmma"
LESSON_PRECISION = "bf16"  # the precision cuda_kernels/wgmma.cu is written for (lesson())
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit

# The kernel per precision: warpgroups (BM = 64 per warpgroup), BN, ring depth, where each tile's
# copy goes out (COPY_AT), whether A' fragments are loaded before that copy (LOAD_FIRST) and, for
# 3xTF32, how many tiles one fresh sum spans (SUM_TILES). Chosen by
# scripts/experiments/wgmma_probe.py's sweeps on the H100 at 4096^3 and 8192^3
# (results/2026-11-23-h100/29-wgmma-probe.log, 30-wgmma-probe-copier.log, 33-*, 34-*, 45-*):
# 128 x 256 tiles, four slots (two tiles in flight); 3xTF32, whose two B tiles per slot and fresh
# sums fit a 128 x 128 tile, prepares tile kt+1 before it waits for tile kt, and sums each pair
# of tiles afresh: 190% / 187% of cuBLAS fp32 at 4096^3 / 8192^3 against 183% / 177% with a
# fresh sum per tile (39-wgmma-probe-rowpair.log), for a relative error of 4.9e-7 against 3.2e-7
# (cuBLAS fp32: 1.1e-6). No fresh sum at all (the tensor core's own accumulation over all of K)
# was a few percent faster still, at 2.9e-5: 25x cuBLAS fp32's error. LOAD_FIRST=1 is 1-4%
# faster for 3xTF32 and 3-6% slower for the others (45-wgmma-probe-grouped-loads.log).
WGMMA = {
    "tf32": dict(WGS=2, BN=256, STAGES=4, COPY_AT=0, LOAD_FIRST=0),
    "3xtf32": dict(WGS=2, BN=128, STAGES=4, COPY_AT=0, LOAD_FIRST=1, SUM_TILES=2),
    "bf16": dict(WGS=2, BN=256, STAGES=4, COPY_AT=0, LOAD_FIRST=0),
    "fp16": dict(WGS=2, BN=256, STAGES=4, COPY_AT=0, LOAD_FIRST=0),
}
KNOBS = ("WGS", "BN", "STAGES", "COPY_AT", "LOAD_FIRST", "SUM_TILES")  # build defines, in order
PARAM_ORDER = KNOBS + ("group",)  # registry order, as the `params` column writes them
# what each knob may be (the first value is the automatic one) and wgmma.cu's own limits
CHOICES = {"WGS": (0, 1, 2, 3), "BN": (0, 64, 128, 192, 256), "STAGES": (0, 3, 4, 5, 6),
           "COPY_AT": (0, 2), "LOAD_FIRST": (-1, 0, 1), "SUM_TILES": (-1, 0, 1, 2)}
AUTOMATIC = {"WGS": 0, "BN": 0, "STAGES": 0, "COPY_AT": 0, "LOAD_FIRST": -1, "SUM_TILES": -1}


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def config(precision: str, WGS: int = 0, BN: int = 0, STAGES: int = 0, COPY_AT: int = 0,
           LOAD_FIRST: int = -1, SUM_TILES: int = -1, **_) -> dict:
    """The build defines beyond the precision, A_KMAJOR and GROUP: the precision's WGMMA row with
    the explicit values over it, in the row's order. SUM_TILES exists in 3xTF32 only (the other
    precisions have no fresh sums): outside it the value given is left out, so every value is
    one build."""
    row = WGMMA[precision]
    given = {"WGS": WGS, "BN": BN, "STAGES": STAGES, "COPY_AT": COPY_AT,
             "LOAD_FIRST": LOAD_FIRST, "SUM_TILES": SUM_TILES}
    out = {}
    for k in KNOBS:
        if k == "SUM_TILES" and precision != "3xtf32":
            continue
        auto = given[k] == AUTOMATIC[k] and k != "COPY_AT"
        out[k] = row[k] if auto else given[k]
    return out


def smem_bytes(precision: str, a_kmajor: bool, config: dict | None = None) -> int:
    """Dynamic shared memory of the kernel (wgmma.cu's STAGES * SLOT, plus 1 KiB to align the
    ring to 1024 bytes), for the precision's WGMMA row or `config` (WGS, BN, STAGES)."""
    w, es = config or WGMMA[precision], ELEM_BYTES[precision]
    bm, bk = 64 * w["WGS"], 128 // es
    a_line = 144 if a_kmajor else bm * es + (32 if es == 4 else 16)
    a_bytes = cdiv((a_line * (bm if a_kmajor else bk)), 1024) * 1024
    slot = w["BN"] * 128 * (2 if precision == "3xtf32" else 1) + a_bytes
    return w["STAGES"] * slot + 1024


def _shown(params: dict) -> str:
    return ", ".join(f"{k}={params[k]}" for k in PARAM_ORDER if k in params)


def validate(params, precision: str | None = None) -> None:
    """Raise LabError (one sentence) for parameters the kernel cannot take: an unknown name, a
    value outside CHOICES, or a ring over 227 KiB in `precision` (in every precision when none
    is given), with A' either way (the layout decides, and is not known here)."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        hint = ("; the mma.sync kernel's tile parameters belong to stage mma"
                if set(unknown) & {"BM", "BK", "WM", "WN", "frags", "wgmma"} else "")
        raise LabError(f"stage wgmma (cuda) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)}){hint}")
    where = f"wgmma with {_shown(params)}"
    if precision is not None and precision not in PRECISIONS:
        raise LabError(f"{where}: the precision must be one of {', '.join(PRECISIONS)}, not "
                       f"{precision}")
    for k, allowed in CHOICES.items():
        v = params.get(k, AUTOMATIC[k])
        if _int(v) and v in allowed:
            continue
        if k == "COPY_AT":
            raise LabError(f"{where}: COPY_AT must be 0 (copy before the tile's wgmma) or 2 "
                           f"(after)")
        raise LabError(f"{where}: {k} must be one of {', '.join(map(str, allowed))} "
                       f"({allowed[0]}: automatic, per precision)")
    group = params.get("group", 8)
    if not _int(group) or group < 1:
        raise LabError(f"{where}: group must be a positive integer")
    for prec in (precision,) if precision else PRECISIONS:
        c = config(prec, **{k: v for k, v in params.items() if k in KNOBS})
        smem = max(smem_bytes(prec, a_kmajor, c) for a_kmajor in (False, True))
        if smem > SMEM_PER_BLOCK:
            auto = ", ".join(f"{k}={c[k]}" for k in ("WGS", "BN", "STAGES"))
            raise LabError(f"{where} in {prec} ({auto}): the ring needs {smem} bytes of shared "
                           f"memory per block, more than the 227 KiB an H100 block can have; lower "
                           f"STAGES, BN or WGS")


def resolve(params, M: int, N: int, K: int, precision: str, sms: int) -> dict:
    """The parameters as they are built and launched (the contract's `resolve`): every knob
    concrete for `precision` (no shape rule: the WGMMA rows run at every size); SUM_TILES is None
    outside 3xTF32, where it changes nothing."""
    c = config(precision, **{k: v for k, v in params.items() if k in KNOBS})
    return {**params, **{k: c.get(k) for k in KNOBS}, "group": params.get("group", 8)}


def show(resolved: dict) -> str:
    """The configuration as the `params` column writes it: name=value,... in registry order (a
    knob that does not apply in the precision left out)."""
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if resolved.get(k) is not None)


# ------------------------------------------------------------------------------ the plan


def plan(p) -> dict:
    """How the kernel computes Problem `p`: the copies to run first in every call and the
    kernel's D = A' B'. Returns dict(copies=[(name, dst, src), ...], layout (the layout the
    kernel reads, after the copies), Ap, lda, a_kmajor, Bp, ldb, M, N, csm, csn). The copies'
    buffers are allocated here (module docstring: which operand is copied, and how)."""
    a, b = p.a, p.b
    # the orientation each operand must have: as it is, unless neither is K-major (tn)
    a_col, b_col = a.trans, b.trans
    if a_col and not b_col:  # tn: copy the smaller operand K-major (B: K x N, A: M x K)
        if p.N <= p.M:
            b_col = True
        else:
            a_col = False
    copies = []
    ops = {}
    for name, op, col in (("A", a, a_col), ("B", b, b_col)):
        if col == op.trans and lines_aligned(op):
            ops[name] = op
            continue
        dst = aligned_buffer(op.rows, op.cols, col, op.tensor)
        copies.append((name, dst, op.tensor))
        ops[name] = Operand.of(name, dst)
    a, b = ops["A"], ops["B"]
    layout = a.letter + b.letter
    ldc = p.c.ld
    if b.trans:
        w = dict(Ap=a.tensor, lda=a.ld, a_kmajor=not a.trans, Bp=b.tensor, ldb=b.ld, M=p.M,
                 N=p.N, csm=ldc, csn=1)
    else:  # A row-major: D = C^T = B^T A^T
        w = dict(Ap=b.tensor, lda=b.ld, a_kmajor=False, Bp=a.tensor, ldb=a.ld, M=p.N, N=p.M,
                 csm=1, csn=ldc)
    return {"copies": copies, "layout": layout, **w}


def _layout_plan(layout: str, M: int, N: int) -> tuple[str, bool, bool]:
    """(the layout the kernel reads, A_KMAJOR, D = C^T) for operands in `layout` whose lines are
    16-byte aligned (plan() without the tensors; an unaligned operand's copy keeps its
    orientation, so the build is the same)."""
    if layout == "tn":
        layout = "tt" if N <= M else "nn"
    if layout[1] == "t":
        return layout, layout[0] == "n", False
    return layout, False, True


# ------------------------------------------------------------------------------ build, launch


def lesson(precision: str, a_kmajor: bool, layout: str, config: dict) -> bool:
    """True where build() compiles the lesson, cuda_kernels/wgmma.cu: bf16 (LESSON_PRECISION) in
    layout nn as the kernel reads it (after plan()'s copies; A' = B^T M-major, D = C^T), with
    each tile's copy before its wgmma (COPY_AT=0) and A' loaded after the next tile's copy
    (LOAD_FIRST=0), at any WGS, BN, STAGES and group. Every other build compiles
    cuda_kernels/variants/wgmma.cu (tf32, 3xtf32, fp16, the layouts nt and tt, COPY_AT=2,
    LOAD_FIRST=1), which for the lesson case compiles to the same SASS
    (tests/test_lessons_wgmma.py)."""
    return (precision == LESSON_PRECISION and not a_kmajor and lesson_case(layout)
            and config.get("COPY_AT", 0) == 0 and config.get("LOAD_FIRST", 0) == 0)


def build(precision: str, a_kmajor: bool, group: int = 8, layout: str = "nn",
          config: dict | None = None):
    """The kernel for `precision`, compiled for sm_90a by NVRTC (no GPU needed): the precision's
    WGMMA row, or `config` (the build defines WGS, BN, STAGES, COPY_AT, LOAD_FIRST, SUM_TILES).
    The defines are passed in the order the mma stage's wgmma kernel passed them. The source is
    the lesson, wgmma.cu, where lesson() says so, else variants/wgmma.cu; both name the kernel
    matmul_wgmma. One build for every size: the kernel's offsets are 64-bit in every build, so a
    Problem.offsets64 problem (an operand past 2^31 elements) needs no OFFSET64 build here
    (tests/test_offsets64.py)."""
    c = config or WGMMA[precision]
    d = {DEFINES[precision]: 1, "A_KMAJOR": bool(a_kmajor), "GROUP": group, **c}
    source = stage_source("wgmma", lesson(precision, a_kmajor, layout, c))
    return compile_kernel(source, KERNEL, d, layout=layout, arch=ARCH)


def geometry(M: int, N: int, precision: str, a_kmajor: bool, config: dict | None = None):
    """(grid, block, dynamic shared bytes) of the kernel for D of M x N (plan()'s M and N, which
    are swapped for C^T)."""
    w = config or WGMMA[precision]
    return ((cdiv(M, 64 * w["WGS"]) * cdiv(N, w["BN"]), 1, 1), (128 * w["WGS"], 1, 1),
            smem_bytes(precision, a_kmajor, config))


def compile_for(params, M: int, N: int, K: int, layout: str, precision: str):
    """The build and geometry prepare() uses for operands in `layout` with 16-byte lines,
    without a GPU (the contract's `compile`; CPU mode, the profiler's SASS)."""
    c = config(precision, **{k: v for k, v in params.items() if k in KNOBS})
    layout, a_kmajor, swap = _layout_plan(layout, M, N)
    b = build(precision, a_kmajor, params.get("group", 8), layout, c)
    return b, geometry(N if swap else M, M if swap else N, precision, a_kmajor, c)


def require_hopper(p) -> None:
    """Raise LabError (one sentence) unless Problem `p` lies on an sm_90 GPU (or on the CPU)."""
    arch = device_arch_of(p)
    if arch is not None and arch != "sm_90":
        raise LabError(f"stage wgmma runs Hopper's wgmma instruction, which only sm_90 GPUs (H100, "
                       f"H200) have, and this GPU is {arch}; use stage mma (mma.sync) here")


def launch(p, precision: str, group: int = 8, config: dict | None = None) -> Prepared:
    """The launch for Problem `p` with build defines `config` (default: the precision's WGMMA
    row; scripts/experiments/wgmma_probe.py passes its sweeps' rows): the copies plan() asks for,
    then the kernel. Carries its build, the kernel alone (kernel_only, where something is copied
    first), the names of the copied operands (copies) and the resources."""
    import numpy as np

    require_hopper(p)
    c = config or WGMMA[precision]
    w = plan(p)
    b = build(precision, w["a_kmajor"], group, w["layout"], c)
    grid, block, smem = geometry(w["M"], w["N"], precision, w["a_kmajor"], c)
    args = (w["Ap"], w["Bp"], p.c.tensor, np.int32(w["M"]), np.int32(w["N"]), np.int32(p.K),
            np.int32(w["lda"]), np.int32(w["ldb"]), np.int64(w["csm"]), np.int64(w["csn"]))
    kernel = launcher(b, grid, block, args, smem)
    res = resources(b, grid, block, smem)
    copies = tuple((dst, src) for _, dst, src in w["copies"])
    names = tuple(name for name, _, _ in w["copies"])
    if not copies:
        return Prepared.of_steps([kernel.step], resources=res, build=b, copies=names)
    import torch

    # the copies are part of the computation, so of the timed call
    steps = [(torch.Tensor.copy_, (dst, src)) for dst, src in copies] + [kernel.step]
    return Prepared.of_steps(steps, resources=res, build=b, kernel_only=kernel, copies=names)


OFFER = Offer("wgmma", "cuda", precisions=PRECISIONS, kernels=(KERNEL,), validate=validate,
              resolve=resolve, show=show, compile=compile_for, arch=ARCH)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/base/problem.py), with p.precision. The
    launch's `config` is the configuration that runs (resolve()); its text is
    launch.resources["params"], the row's `params` column."""
    require_hopper(p)
    resolved = resolve(params, p.M, p.N, p.K, p.precision, 0)
    c = config(p.precision, **{k: v for k, v in params.items() if k in KNOBS})
    out = launch(p, p.precision, resolved["group"], c)
    out.resources = {**out.resources, "params": show(resolved)}
    out.extra["config"] = resolved
    return out
