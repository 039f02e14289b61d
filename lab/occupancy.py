"""Theoretical occupancy: how many blocks of a kernel fit on one SM, and which resource says so.

This is the "Block Limit Warps / Registers / Shared Mem" analysis of the CUDA Occupancy Calculator
(and of cuda_occupancy.h, which the CUDA occupancy API implements) done in pure Python, so CPU mode
can print it next to the registers and shared memory that ptxas reports. No GPU is needed; on a GPU
`from_device()` reads the limits from the device instead of using the H100's.

For a block of T threads using R registers per thread and S bytes of shared memory:

    warps per block     W = ceil(T / 32)
    limit by warps      floor(max_warps_per_sm / W)
    limit by registers  registers are allocated per warp, in units of 256:
                          regs per warp  = ceil(R * 32 / 256) * 256
                          warps by regs  = floor(regs_per_sm / regs per warp), rounded DOWN to a
                                           multiple of the warp allocation granularity (4: the
                                           SM's register file is split over 4 sub-partitions,
                                           each holding whole warps; this equals cuda_occupancy.h's
                                           floor(floor(regs_per_sm / 4) / regs per warp) * 4)
                          limit          = floor(warps by regs / W)
                        and 0 when one block cannot get its registers at all (the API's per-block
                        check: regs per warp * W, and regs per warp * W rounded up to a multiple
                        of 4 warps, must both fit in regs_per_block), i.e. the launch would fail
                        with "too many resources requested". R = 0 means no register limit (None).
    limit by smem       allocated per block = ceil((S + reserved_smem_per_block) / 128) * 128
                        (1 KiB is reserved per block by the driver on sm_8x/9x), and the limit is
                        floor(smem_per_sm / allocated). S = 0 means no shared-memory limit (None):
                        the hardware still reserves the 1 KiB, which caps blocks at 228 on sm_90
                        and 100 on sm_89, always above the block limit, so the answer is the same.
    limit by blocks     max_blocks_per_sm (hardware)

blocks_per_sm is the smallest limit; occupancy = blocks_per_sm * W / max_warps_per_sm. The
limiter is the name of the smallest limit; when several limits tie at the minimum, all their names
are reported, joined by "+", in the fixed order warps, registers, shared memory, blocks (so
tiled:tile=32 with 32 registers reads "warps+registers": one more register per thread would halve
its occupancy).

Assumptions (as the occupancy API with default settings): the full shared-memory carveout is
available (no cudaFuncAttributePreferredSharedMemoryCarveout), no thread-block clusters, and
barriers are not a limit. `occupancy()` takes what ptxas reports (registers, static smem) plus the
launch's dynamic smem; `from_resources()` takes a launch's `resources` dict directly.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace

from lab.cli import ArgumentParser, guarded
from lab.base.errors import LabError

LIMITERS = ("warps", "registers", "shared memory", "blocks")


@dataclass(frozen=True)
class DeviceLimits:
    """The per-SM and per-block limits that bound occupancy (cudaDeviceProp names in comments)."""

    name: str
    max_warps_per_sm: int  # maxThreadsPerMultiProcessor / warpSize
    max_blocks_per_sm: int  # maxBlocksPerMultiProcessor
    regs_per_sm: int  # regsPerMultiprocessor
    smem_per_sm: int  # sharedMemPerMultiprocessor (bytes, the largest carveout)
    smem_per_block_max: int  # sharedMemPerBlockOptin (bytes a block may use, opted in)
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many
    warp_alloc_granularity: int = 4  # warps-by-registers is rounded down to a multiple of this
    smem_alloc_unit: int = 128  # shared memory is allocated per block in units of this (sm_8x+)
    reserved_smem_per_block: int = 1024  # reservedSharedMemPerBlock (sm_8x+)
    warp_size: int = 32
    max_threads_per_block: int = 1024  # maxThreadsPerBlock
    regs_per_block: int = 65536  # regsPerBlock

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * self.warp_size


# H100 (sm_90): 2048 threads, 32 blocks, 64K registers, 228 KiB shared per SM, 227 KiB per block.
SM90 = DeviceLimits("sm_90", max_warps_per_sm=64, max_blocks_per_sm=32, regs_per_sm=65536,
                    smem_per_sm=228 * 1024, smem_per_block_max=227 * 1024)
# A100 (sm_80): 2048 threads, 32 blocks, 64K registers, 164 KiB per SM, 163 KiB per block.
SM80 = DeviceLimits("sm_80", max_warps_per_sm=64, max_blocks_per_sm=32, regs_per_sm=65536,
                    smem_per_sm=164 * 1024, smem_per_block_max=163 * 1024)
# RTX 4090 / L4 / L40 (sm_89): 1536 threads, 24 blocks, 64K registers, 100 KiB per SM, 99 per block.
SM89 = DeviceLimits("sm_89", max_warps_per_sm=48, max_blocks_per_sm=24, regs_per_sm=65536,
                    smem_per_sm=100 * 1024, smem_per_block_max=99 * 1024)
BY_ARCH = {d.name: d for d in (SM80, SM89, SM90)}


@dataclass(frozen=True)
class Occupancy:
    """Blocks per SM under each limit, the resulting occupancy, and what limits it."""

    threads_per_block: int
    registers_per_thread: int
    smem_per_block: int  # bytes the kernel uses (static + dynamic), before reservation/rounding
    warps_per_block: int
    regs_per_warp: int  # allocated: rounded up to reg_alloc_unit
    smem_allocated_per_block: int  # bytes: (smem + reserved) rounded up to smem_alloc_unit; 0 if no smem
    blocks_by_warps: int
    blocks_by_regs: int | None  # None: no register limit (0 registers)
    blocks_by_smem: int | None  # None: no shared-memory limit (0 bytes)
    blocks_by_blocks: int
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float  # active_warps / max_warps, 0..1
    limiter: str  # "warps", "registers", "shared memory", "blocks", or tied names joined by "+"
    device: str = "sm_90"

    def __str__(self) -> str:
        return (f"{self.blocks_per_sm} blocks/SM, {self.active_warps}/{self.max_warps} warps "
                f"({100 * self.occupancy:.1f}%), limited by {self.limiter}")


def _check_int(name: str, value, low: int, high: int, why: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} is {value}, but {why}")
    return value


def occupancy(threads_per_block: int, registers_per_thread: int, smem_per_block: int = 0,
              limits: DeviceLimits = SM90) -> Occupancy:
    """Theoretical occupancy of one kernel launch configuration on `limits` (see the module doc).

    Raises ValueError for a configuration no launch could have: threads outside 1..1024,
    registers outside 0..255, shared memory below 0 or above the per-block maximum.
    """
    d = limits
    T = _check_int("threads_per_block", threads_per_block, 1, d.max_threads_per_block,
                   f"a block on {d.name} holds 1 to {d.max_threads_per_block} threads")
    R = _check_int("registers_per_thread", registers_per_thread, 0, d.max_regs_per_thread,
                   f"a thread on {d.name} can have 0 to {d.max_regs_per_thread} registers")
    S = _check_int("smem_per_block", smem_per_block, 0, d.smem_per_block_max,
                   f"a block on {d.name} can use 0 to {d.smem_per_block_max} bytes "
                   f"({d.smem_per_block_max / 1024:g} KiB) of shared memory")

    W = math.ceil(T / d.warp_size)
    by_warps = d.max_warps_per_sm // W

    regs_per_warp = math.ceil(R * d.warp_size / d.reg_alloc_unit) * d.reg_alloc_unit
    if R == 0:
        by_regs = None
    else:
        g = d.warp_alloc_granularity
        per_block = regs_per_warp * W
        per_block_hw = regs_per_warp * (math.ceil(W / g) * g)
        if per_block > d.regs_per_block or per_block_hw > d.regs_per_block:
            by_regs = 0  # the launch itself would fail: too many resources requested
        else:
            warps_by_regs = (d.regs_per_sm // regs_per_warp) // g * g
            by_regs = warps_by_regs // W

    if S == 0:
        smem_alloc, by_smem = 0, None
    else:
        u = d.smem_alloc_unit
        smem_alloc = math.ceil((S + d.reserved_smem_per_block) / u) * u
        by_smem = d.smem_per_sm // smem_alloc

    by_blocks = d.max_blocks_per_sm
    candidates = dict(zip(LIMITERS, (by_warps, by_regs, by_smem, by_blocks)))
    blocks = min(v for v in candidates.values() if v is not None)
    limiter = "+".join(k for k, v in candidates.items() if v == blocks)
    active = blocks * W
    return Occupancy(
        threads_per_block=T, registers_per_thread=R, smem_per_block=S, warps_per_block=W,
        regs_per_warp=regs_per_warp, smem_allocated_per_block=smem_alloc,
        blocks_by_warps=by_warps, blocks_by_regs=by_regs, blocks_by_smem=by_smem,
        blocks_by_blocks=by_blocks, blocks_per_sm=blocks, active_warps=active,
        max_warps=d.max_warps_per_sm, occupancy=active / d.max_warps_per_sm, limiter=limiter,
        device=d.name,
    )


def from_resources(resources: dict, limits: DeviceLimits = SM90) -> Occupancy:
    """Occupancy of a launch from its `resources` dict (registers, smem_static, smem_dynamic,
    threads), as CUDA launchers and compiled Triton launchers attach it."""
    smem = int(resources.get("smem_static") or 0) + int(resources.get("smem_dynamic") or 0)
    return occupancy(int(resources["threads"]), int(resources["registers"]), smem, limits)


# ------------------------------------------------------------------------------------ the device

_CUPY_FIELDS = {  # DeviceLimits field: (cudaDeviceProp key, conversion)
    "max_blocks_per_sm": "maxBlocksPerMultiProcessor",
    "regs_per_sm": "regsPerMultiprocessor",
    "smem_per_sm": "sharedMemPerMultiprocessor",
    "smem_per_block_max": "sharedMemPerBlockOptin",
    "reserved_smem_per_block": "reservedSharedMemPerBlock",
    "warp_size": "warpSize",
    "max_threads_per_block": "maxThreadsPerBlock",
    "regs_per_block": "regsPerBlock",
}
_TORCH_FIELDS = {
    "regs_per_sm": "regs_per_multiprocessor",
    "smem_per_sm": "shared_memory_per_multiprocessor",
    "smem_per_block_max": "shared_memory_per_block_optin",
    "warp_size": "warp_size",
}


def from_properties(cupy_props: dict | None = None, torch_props=None,
                    fallback: DeviceLimits = SM90) -> DeviceLimits:
    """DeviceLimits from CuPy's getDeviceProperties dict and/or torch's device properties.

    CuPy's dict (cudaDeviceProp) is preferred, field by field; torch's properties fill what it
    lacks; any field neither provides keeps `fallback`'s value (the H100's). The allocation rules
    (256-register units, 4-warp granularity, 255 registers per thread) are the same on sm_70 to
    sm_12x; the shared-memory unit is 128 bytes from sm_80 on and 256 before, and nothing is
    reserved per block before sm_80.
    """
    values: dict[str, object] = {}
    cupy_props = cupy_props or {}
    major = cupy_props.get("major", getattr(torch_props, "major", None))
    minor = cupy_props.get("minor", getattr(torch_props, "minor", None))
    for fld, key in _TORCH_FIELDS.items():
        v = getattr(torch_props, key, None) if torch_props is not None else None
        if isinstance(v, int) and v > 0:
            values[fld] = v
    for fld, key in _CUPY_FIELDS.items():
        v = cupy_props.get(key)
        if isinstance(v, int) and (v > 0 or fld == "reserved_smem_per_block"):
            values[fld] = v
    warp = int(values.get("warp_size", fallback.warp_size))
    threads_per_sm = cupy_props.get("maxThreadsPerMultiProcessor",
                                    getattr(torch_props, "max_threads_per_multi_processor", None))
    if isinstance(threads_per_sm, int) and threads_per_sm > 0:
        values["max_warps_per_sm"] = threads_per_sm // warp
    if isinstance(major, int):
        values["name"] = f"sm_{major}{minor or 0}"
        if major < 8:
            values.setdefault("reserved_smem_per_block", 0)
            values["smem_alloc_unit"] = 256
    return replace(fallback, **values)


def from_device(device: int | None = None) -> DeviceLimits:
    """The limits of a visible CUDA GPU (CuPy's device attributes, else torch's), or SM90 when
    there is no GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return SM90
        index = torch.cuda.current_device() if device is None else int(device)
        torch_props = torch.cuda.get_device_properties(index)
    except Exception:  # pragma: no cover - a broken driver means "no GPU" here
        return SM90
    cupy_props = None
    try:
        import cupy

        cupy_props = cupy.cuda.runtime.getDeviceProperties(index)
    except Exception:  # pragma: no cover - CuPy missing or failing: torch's fields only
        cupy_props = None
    return from_properties(cupy_props, torch_props)


# ------------------------------------------------------------------------------------------ CLI


def gpu_visible() -> bool:
    """Whether torch sees a CUDA GPU (a broken driver or no torch counts as none)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch missing or a broken driver
        return False


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.occupancy",
                       description="Theoretical occupancy of one launch configuration.")
    p.add_argument("threads", type=int, help="threads per block")
    p.add_argument("registers", type=int, help="registers per thread (ptxas's 'Used N registers')")
    p.add_argument("smem", type=int, nargs="?", default=0,
                   help="shared memory per block in bytes (static + dynamic; default 0)")
    p.add_argument("--arch", default="sm_90", choices=(*BY_ARCH, "device"),
                   help="device limits to use (default sm_90; 'device' reads the current GPU "
                        "and needs one)")
    return p


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.arch == "device":
        if not gpu_visible():
            raise LabError("--arch device reads the limits of the current GPU, but torch sees no "
                           "CUDA GPU here; name the architecture instead, e.g. --arch sm_90 "
                           f"(choices: {', '.join(BY_ARCH)})")
        limits = from_device()
    else:
        limits = BY_ARCH[args.arch]
    try:
        occ = occupancy(args.threads, args.registers, args.smem, limits)
    except ValueError as exc:
        raise LabError(str(exc)) from None
    none = "no limit"
    print(f"{limits.name}: {occ.threads_per_block} threads ({occ.warps_per_block} warps), "
          f"{occ.registers_per_thread} regs ({occ.regs_per_warp}/warp), {occ.smem_per_block} B smem "
          f"({occ.smem_allocated_per_block} B allocated)")
    print(f"  blocks by warps {occ.blocks_by_warps}, registers "
          f"{none if occ.blocks_by_regs is None else occ.blocks_by_regs}, shared memory "
          f"{none if occ.blocks_by_smem is None else occ.blocks_by_smem}, blocks "
          f"{occ.blocks_by_blocks}")
    print(f"  {occ}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
