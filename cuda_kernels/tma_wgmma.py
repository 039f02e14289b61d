"""Launcher for cuda_kernels/tma_wgmma.cu: TMA loads, an mbarrier ring, and wgmma with both
operands in shared memory (sm_90a), in bf16, fp16 and tf32.

Operands (the kernel reads A and B through TMA tensor maps, lab/toolchain/tma.py):
    bf16, fp16: any layout as it is. A row-major is K-major, A column-major M-major, B column-major
        K-major, B row-major N-major; wgmma's transpose bits read each (TRANS_A / TRANS_B build
        defines, common.cuh's layouts).
    tf32: wgmma reads 32-bit shared operands K-major only, so an A that is column-major or a B
        that is row-major (layouts nn, tn, tt) is copied K-major first, in every call, inside the
        timed call (a row-major A buffer, a column-major B buffer): the row's time is the copy
        plus the kernel, as a caller who holds the operand that way pays.
    Any precision: a map needs the operand's base address and leading dimension on 16-byte
        boundaries; an operand whose lines are not (a bf16 matrix of 3001 columns) is copied into
        a buffer whose lines are, in the same orientation, in every call, timed likewise.
C is row-major (lab/operands.py turns a column-major C into C^T = B^T A^T) with any ldc; the
kernel's stores are 64-bit-offset, and TMA's coordinates are per dimension, so an operand past
2^31 elements needs no other build.

Geometry: a 1-D grid of ceil(M/BM) * ceil(N/BN) blocks (BM = 64 * WGS) in grouped order,
128 * WGS threads, STAGES * (BM + BN) * 128 + 1024 bytes of dynamic shared memory, one block per
SM. Built for sm_90a; prepare() refuses any other GPU in one sentence, and without a GPU the
build still compiles (CPU mode's resource report, the tests' SASS checks).

Parameters (lab/stages.py, stage tma_wgmma): WGS (consumer warpgroups, 1-2), BN (64-256), STAGES
(ring slots, 2-8), group (block-rows walked together); 0 means the DEFAULTS row below.
"""

from __future__ import annotations

from cuda_kernels._build import (LINE_ALIGN, aligned_buffer, cdiv, compile_kernel, device_arch_of,
                                 lines_aligned, resources)
from lab.contract import Offer, Prepared
from lab.errors import LabError
from lab.operands import Operand, entry
from lab.toolchain.tma import MapSpec, tma_launcher

PRECISIONS = ("bf16", "fp16", "tf32")
DEFINES = {"tf32": "PREC_TF32", "bf16": "PREC_BF16", "fp16": "PREC_FP16"}
ELEM_BYTES = {"tf32": 4, "bf16": 2, "fp16": 2}
ARCH = "sm_90a"
SOURCE, KERNEL = "tma_wgmma.cu", "matmul_tma_wgmma"
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit

# The automatic row: two consumer warpgroups (128 x 256 tiles, 128 accumulators per thread), a
# four-slot ring (48 KiB per slot: three tiles in flight while one multiplies).
DEFAULTS = {"WGS": 2, "BN": 256, "STAGES": 4}
KNOBS = ("WGS", "BN", "STAGES")
PARAM_ORDER = KNOBS + ("group",)
CHOICES = {"WGS": (0, 1, 2), "BN": (0, 64, 128, 192, 256), "STAGES": (0, 2, 3, 4, 5, 6, 7, 8)}


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def config(WGS: int = 0, BN: int = 0, STAGES: int = 0, **_) -> dict:
    """The build defines WGS, BN, STAGES: DEFAULTS with the explicit (non-zero) values over it."""
    given = {"WGS": WGS, "BN": BN, "STAGES": STAGES}
    return {k: given[k] or DEFAULTS[k] for k in KNOBS}


def smem_bytes(c: dict) -> int:
    """Dynamic shared memory: STAGES slots of a BM x 128-byte A tile and a BN x 128-byte B tile,
    plus 1 KiB to align the ring to the swizzle's 1024-byte atom."""
    return c["STAGES"] * (64 * c["WGS"] + c["BN"]) * 128 + 1024


def _shown(params: dict) -> str:
    return ", ".join(f"{k}={params[k]}" for k in PARAM_ORDER if k in params) or "defaults"


def validate(params, precision: str | None = None) -> None:
    """Raise LabError (one sentence) for an unknown parameter, a value outside CHOICES, or a ring
    over the 227 KiB an H100 block can have."""
    unknown = sorted(set(params) - set(PARAM_ORDER))
    if unknown:
        raise LabError(f"stage tma_wgmma (cuda) has no parameter {', '.join(unknown)} (it takes "
                       f"{', '.join(PARAM_ORDER)})")
    where = f"tma_wgmma with {_shown(params)}"
    for k, allowed in CHOICES.items():
        v = params.get(k, 0)
        if not (_int(v) and v in allowed):
            raise LabError(f"{where}: {k} must be one of {', '.join(map(str, allowed))} (0: "
                           f"automatic, {DEFAULTS[k]})")
    group = params.get("group", 8)
    if not _int(group) or group < 1:
        raise LabError(f"{where}: group must be a positive integer")
    c = config(**params)
    if smem_bytes(c) > SMEM_PER_BLOCK:
        raise LabError(f"{where}: the ring needs {smem_bytes(c)} bytes of shared memory per block "
                       f"({c['STAGES']} slots of {64 * c['WGS']} + {c['BN']} lines of 128 bytes), "
                       f"more than the 227 KiB an H100 block can have; lower STAGES, BN or WGS")


def resolve(params, M: int, N: int, K: int, precision: str, sms: int) -> dict:
    """Every knob concrete (the contract's `resolve`)."""
    return {**params, **config(**params), "group": params.get("group", 8)}


def show(resolved: dict) -> str:
    return ",".join(f"{k}={resolved[k]}" for k in PARAM_ORDER if resolved.get(k) is not None)


# ------------------------------------------------------------------------------ the plan


def kernel_layout(layout: str, precision: str) -> str:
    """The layout the kernel reads for operands in `layout`: the same for 16-bit types, nt (A
    row-major, B column-major: both K-major) for tf32, which copies the others."""
    return "nt" if ELEM_BYTES[precision] == 4 else layout


def plan(p) -> dict:
    """The copies to run first in every call, (name, dst, src), and the operands the kernel
    reads: a tf32 operand that is not K-major goes into a K-major buffer, any operand whose lines
    are not 16-byte aligned into an aligned buffer of the same orientation."""
    want = kernel_layout(p.layout, p.precision)
    copies, ops = [], {}
    for name, op, col in (("A", p.a, want[0] == "t"), ("B", p.b, want[1] == "t")):
        if col == op.trans and lines_aligned(op):
            ops[name] = op
            continue
        dst = aligned_buffer(op.rows, op.cols, col, op.tensor)
        copies.append((name, dst, op.tensor))
        ops[name] = Operand.of(name, dst)
    return {"copies": copies, "layout": ops["A"].letter + ops["B"].letter, "a": ops["A"],
            "b": ops["B"]}


def _ld_for_map(op) -> int:
    """The leading dimension to encode: the operand's, except that a single line may have any
    (TMA wants a 16-byte multiple even where it never steps over it)."""
    lines = op.cols if op.trans else op.rows
    if lines > 1:
        return op.ld
    per = LINE_ALIGN // op.tensor.element_size()
    return max(per, cdiv(op.ld, per) * per)


def map_specs(a, b, M: int, N: int, K: int, c: dict, es: int) -> tuple[MapSpec, MapSpec]:
    """The tensor maps of A (kernel argument 0) and B (argument 1): K-major operands as one
    {BK, rows} box, M- or N-major ones as {64, BK} boxes (tma_wgmma.cu's header)."""
    bk, bm, bn = 128 // es, 64 * c["WGS"], c["BN"]
    if a.trans:  # M-major
        sa = MapSpec(0, (M, K), _ld_for_map(a), (64, bk))
    else:
        sa = MapSpec(0, (K, M), _ld_for_map(a), (bk, bm))
    if b.trans:  # K-major
        sb = MapSpec(1, (K, N), _ld_for_map(b), (bk, bn))
    else:
        sb = MapSpec(1, (N, K), _ld_for_map(b), (64, bk))
    return sa, sb


# ------------------------------------------------------------------------------ build, launch


def build(precision: str, layout: str = "nn", group: int = 8, c: dict | None = None):
    """The kernel for `precision` and the layout it reads, compiled for sm_90a by NVRTC (no GPU
    needed)."""
    d = {DEFINES[precision]: 1, "GROUP": group, **(c or DEFAULTS)}
    return compile_kernel(SOURCE, KERNEL, d, layout=kernel_layout(layout, precision), arch=ARCH)


def geometry(M: int, N: int, c: dict | None = None):
    c = c or DEFAULTS
    return ((cdiv(M, 64 * c["WGS"]) * cdiv(N, c["BN"]), 1, 1), (128 * c["WGS"], 1, 1),
            smem_bytes(c))


def compile_for(params, M: int, N: int, K: int, layout: str, precision: str):
    """The build and geometry prepare() uses (the contract's `compile`), without a GPU."""
    c = config(**params)
    return build(precision, layout, params.get("group", 8), c), geometry(M, N, c)


def require_hopper(p) -> None:
    """Raise LabError (one sentence) unless Problem `p` lies on an sm_90 GPU (or on the CPU)."""
    arch = device_arch_of(p)
    if arch is not None and arch != "sm_90":
        raise LabError(f"stage tma_wgmma runs Hopper's TMA and wgmma instructions, which only "
                       f"sm_90 GPUs (H100, H200) have, and this GPU is {arch}; use stage mma "
                       f"(mma.sync) here")


def launch(p, precision: str, group: int = 8, c: dict | None = None) -> Prepared:
    """The copies plan() asks for, then the kernel."""
    import numpy as np
    import torch

    require_hopper(p)
    c = c or DEFAULTS
    w = plan(p)
    b = build(precision, w["layout"], group, c)
    grid, block, smem = geometry(p.M, p.N, c)
    es = ELEM_BYTES[precision]
    specs = map_specs(w["a"], w["b"], p.M, p.N, p.K, c, es)
    args = (w["a"].tensor, w["b"].tensor, p.c.tensor, np.int32(p.M), np.int32(p.N),
            np.int32(p.K), np.int64(p.c.ld))
    kernel = tma_launcher(b, grid, block, args, smem, specs)
    res = resources(b, grid, block, smem)
    names = tuple(name for name, _, _ in w["copies"])
    if not w["copies"]:
        return Prepared.of_steps([kernel.step], resources=res, build=b, copies=names)
    # the copies are part of the computation, so of the timed call
    steps = [(torch.Tensor.copy_, (dst, src)) for _, dst, src in w["copies"]] + [kernel.step]
    return Prepared.of_steps(steps, resources=res, build=b, kernel_only=kernel, copies=names)


OFFER = Offer("tma_wgmma", "cuda", precisions=PRECISIONS, kernels=(KERNEL,), validate=validate,
              resolve=resolve, show=show, compile=compile_for)


@entry(OFFER)
def prepare(p, **params):
    """p: the shared description of the operands (lab/operands.py), with p.precision."""
    require_hopper(p)
    resolved = resolve(params, p.M, p.N, p.K, p.precision, 0)
    out = launch(p, p.precision, resolved["group"], config(**params))
    out.resources = {**out.resources, "params": show(resolved)}
    out.extra["config"] = resolved
    return out
