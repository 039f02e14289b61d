"""What the CUDA launchers of the TMA stages share (tma_wgmma, warp_specialized, persistent): the
operand plan, the tensor maps, the build and the launch. Each stage module declares a
`HopperStage` (its source, kernel, knobs and grid) and takes its OFFER and prepare() from it.

Operands (every kernel reads A and B through TMA tensor maps, lab/toolchain/tma.py, with the
boxes of cuda_kernels/tma_tiles.cuh):
    bf16, fp16: any layout as it is. A row-major is K-major, A column-major M-major, B column-major
        K-major, B row-major N-major; wgmma's transpose bits read each (TRANS_A / TRANS_B build
        defines, common.cuh's layouts).
    tf32: wgmma reads 32-bit shared operands K-major only, so an A that is column-major or a B
        that is row-major (layouts nn, tn, tt) is copied K-major first, in every call, inside the
        timed call (a row-major A buffer, a column-major B buffer): the row's time is the copy
        plus the kernel, as a caller who holds the operand that way pays.
    fp8 (float8 e4m3): wgmma reads 8-bit operands K-major only too, so the kernel reads layout
        nt and the others are copied as tf32's (torch's copy_). A k-tile is one 128-byte line,
        128 elements (k-steps of 32): the slots, boxes and swizzle are bf16's byte for byte. C is
        bfloat16 (C_BYTES: its stores, its map's 64-column box and the TMA-store test are bf16's),
        and the kernel takes Problem.scales, (scale_a, scale_b), as two more pointer arguments
        after ldc: C = scale_a * scale_b * (A @ B), the scales read on the GPU and multiplied into
        the fp32 accumulators once, before the bf16 rounding.
    Any precision: a map needs the operand's base address and leading dimension on 16-byte
        boundaries (fp8: K a multiple of 16 for K-major lines); an operand whose lines are not (a
        bf16 matrix of 3001 columns) is copied into a buffer whose lines are, in the same
        orientation, in every call, timed likewise.
C is row-major (lab/base/problem.py turns a column-major C into C^T = B^T A^T) with any ldc; the
kernels' stores use 64-bit offsets and TMA's coordinates are per dimension, so an operand past
2^31 elements needs no other build.

Every kernel is built for sm_90a; prepare() refuses any other GPU in one sentence, and without a
GPU the build still compiles (CPU mode's resource report, the tests' SASS checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cuda_kernels._build import (LINE_ALIGN, aligned_buffer, cdiv, compile_kernel, device_arch_of,
                                 launcher, resources, stage_source)
from lab.base.contract import Offer, Prepared, Tuning
from lab.base.errors import LabError
from lab.base.precisions import c_bytes, cuda_defines, elem_bytes
from lab.base.precisions import get as get_precision
from lab.base.entry import entry
from lab.base.device import DEFAULT_SMS, sm_count
from lab.toolchain.tma import MapSpec, max_active_clusters, tma_launcher

PRECISIONS = ("bf16", "fp16", "tf32", "fp8")  # every TMA stage's; 3xtf32 where a stage says `split`
# fp8 with row-wise and block-wise scales, where a stage says `scaled` (persistent's variant file)
SCALED_PRECISIONS = ("fp8_row", "fp8_block")
SCALE_DEFINES = {"row": "SCALE_ROW", "block": "SCALE_BLOCK"}  # beside fp8's PREC_FP8
BLOCK_BN = (64, 128)  # fp8_block's tile lies in one of B's 128-column scale blocks
# fp8_block's automatic row takes three consumer warpgroups (a 192 x 128 tile) where a stage offers
# them (persistent): each waits for its k-tile's wgmma before promoting it, and a third warpgroup
# keeps the tensor cores fed meanwhile. On an H200 (results/2026-11-30-h200/fp8-block-consumers.csv)
# three ran DeepGEMM's shapes at M = 4096 and 8192^3 1.03-1.52x faster than two.
DEFINES = cuda_defines("tf32", "3xtf32", "bf16", "fp16", "fp8", *SCALED_PRECISIONS)
# A's and B's element, and C's (the operands', but fp8's C is bfloat16): lab/base/precisions.py
ELEM_BYTES = elem_bytes("tf32", "3xtf32", "bf16", "fp16", "fp8", *SCALED_PRECISIONS)
C_BYTES = c_bytes(*ELEM_BYTES)
ARCH = "sm_90a"
SMEM_PER_BLOCK = 227 * 1024  # an H100 block's opt-in shared-memory limit


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ------------------------------------------------------------------------------ tile schedules
@dataclass(frozen=True)
class TileSchedule:
    """Which output tiles the blocks of a launch compute: the host's half of a kernel's tile walk
    (as DeepGEMM's Scheduler is the kernel's). This one is tma_wgmma's and warp_specialized's: one
    block per tile, the kernel mapping blockIdx.x to its tile in grouped order (common.cuh's
    block_tile). A new schedule (stream-K, say) is a new subclass beside its kernel's walk, not a
    flag of HopperStage; one that needs more than the tile count (K, a workspace) widens blocks()
    then."""

    resident: bool = False  # blocks() reads how many blocks (clusters) the GPU holds at once

    def blocks(self, tiles: int, resident: int) -> int:
        """Blocks (clusters, in a cluster launch) to launch for `tiles` output tiles (cluster
        tiles), `resident` of which the GPU holds at once."""
        return tiles


@dataclass(frozen=True)
class PersistentTiles(TileSchedule):
    """persistent's: min(tiles, resident) blocks stay resident, block b walking tiles b, b + grid,
    b + 2 grid, ... in grouped order (persistent.cu's TileWalk)."""

    resident: bool = True

    def blocks(self, tiles: int, resident: int) -> int:
        return min(tiles, resident)


ONE_TILE_PER_BLOCK = TileSchedule()
PERSISTENT = PersistentTiles()


@dataclass(frozen=True)
class HopperStage:
    """One TMA stage's launcher: `warpgroups` is the knob that counts the warpgroups computing C
    (64 rows each: BM = 64 * warpgroups), `producer` adds a loading warpgroup, `schedule` says
    how many blocks walk the tiles (a TileSchedule: one per tile, or PERSISTENT's min(tiles,
    SMs)). `defaults` is the automatic row (every knob's 0), `choices` each knob's values (0
    first). `split` offers 3xtf32 (tma_tiles.cuh's split3x: a slot holds the B tile's tails too),
    with `split_defaults` over `defaults`. `lesson_case(defines, layout)`, where a stage has a
    variant file: whether `source` (the lesson) is the build for those defines and kernel layout;
    elsewhere build() compiles cuda_kernels/variants/<stage>.cu (docs/ARCHITECTURE.md, "Lessons and
    variants")."""

    stage: str
    source: str
    kernel: str
    warpgroups: str
    defaults: dict
    choices: dict
    producer: bool = False
    schedule: TileSchedule = ONE_TILE_PER_BLOCK
    tma_store: bool = False  # C through shared memory and TMA stores where its lines allow
    # (a stage whose choices have a STORE knob lets the row choose: STORE=2 stores C from
    # registers, as a stage without TMA stores does; store_allowed())
    split: bool = False
    split_defaults: dict = field(default_factory=dict)
    # tf32's A may be M-major, through registers (variants/persistent.cu's A_REGS)
    tf32_regs: bool = False
    # fp8_row and fp8_block too (the variant file's SCALE_ROW / SCALE_BLOCK); fp8_block's tile is
    # 128 columns wide by default (two accumulator sets: the k-tile's product and the sum), and
    # 192 rows where the stage offers three consumer warpgroups (BLOCK_BN's note)
    scaled: bool = False
    lesson_case: Callable[[dict, str], bool] | None = None
    knobs: tuple = field(init=False)

    def store_allowed(self, c: dict) -> bool:
        """Whether C may go out through TMA stores in this configuration: the stage stores that
        way, neither the row's STORE=2 nor a probe's TMA_STORE=0 define says otherwise, and K is
        not split (a split build stores fp32 partial sums into a workspace: splitk_plan)."""
        return (self.tma_store and c.get("STORE", 1) != 2 and bool(c.get("TMA_STORE", 1))
                and c.get("SPLITK", 1) <= 1)

    @staticmethod
    def cluster_of(c: dict) -> int:
        """Blocks per cluster (the CLUSTER knob where a stage has one; 0, automatic, is resolved
        by with_cluster before a build or launch)."""
        return c.get("CLUSTER", 1) or 1

    @staticmethod
    def with_cluster(c: dict, store: bool) -> dict:
        """`c` with an automatic CLUSTER (0) made concrete: 1 where C goes out through TMA stores
        straight into C (`store`), 2 where it is stored from registers or through an aligned
        buffer. Measured on an H100 in bf16 (docs/stages/persistent.md,
        results/2026-11-26-h100/persistent-cluster.csv): with TMA stores one block per cluster was
        as fast or faster at every shape tried (4096^3 99.9-100.6% of cuBLAS against 98.5%, 8192^3
        103.0-104.6% against 102.2-102.6%, 1025^3 89.8% against 81.2%), and with C stored from
        registers clusters of two were (7919x6007x3001 318.7% against 250.6%); through the buffer,
        at 7919x6007x3001 on an H200 (results/2026-11-29-h200/persistent-odd-c.csv), two were
        too (bf16 nn 0.619-0.623 ms against 0.715 ms, tf32 1.136-1.143 ms against 1.474-1.482 ms,
        fp8 and bf16 nt within 1%). A B tile
        that does not split into two multicast loads of whole 64-column boxes (BN 64, 192: an
        N-major B is loaded in boxes 64 columns wide) takes one block, and so does a split-K
        build (SPLITK: few tiles, each block's C written by the reduction; three consumer
        warpgroups in clusters of two spill there)."""
        if c.get("CLUSTER", 1) != 0:
            return c
        one = store or c["BN"] % 128 or c.get("SPLITK", 1) > 1 or c.get("STREAMK")
        return {**c, "CLUSTER": 1 if one else 2}

    def __post_init__(self):
        object.__setattr__(self, "knobs", tuple(self.choices))

    # ---------------------------------------------------------------- parameters
    @property
    def param_order(self) -> tuple:
        return self.knobs + ("group",)

    @property
    def precisions(self) -> tuple:
        return (PRECISIONS + (("3xtf32",) if self.split else ())
                + (SCALED_PRECISIONS if self.scaled else ()))

    def defaults_for(self, precision: str | None) -> dict:
        """The automatic row of `precision` (3xtf32: split_defaults over the others'; fp8_block:
        BN 128, and three consumer warpgroups where the stage offers them)."""
        extra = self.split_defaults if precision == "3xtf32" else {}
        if precision and get_precision(precision).scale == "block":
            extra = {"BN": BLOCK_BN[-1]}
            if 3 in self.choices.get(self.warpgroups, ()):
                extra[self.warpgroups] = 3  # measured: BLOCK_BN's note
        return {**self.defaults, **extra}

    def config(self, precision: str | None = None, **params) -> dict:
        """The build defines: the precision's defaults with the explicit (non-zero) values over
        them."""
        d = self.defaults_for(precision)
        return {k: params.get(k) or d[k] for k in self.knobs}

    def slot_lines(self, c: dict, precision: str | None = None) -> int:
        """128-byte lines per ring slot: A's BM and B's BN, and 3xtf32's B tails (BN more)."""
        return 64 * c[self.warpgroups] + c["BN"] * (2 if precision == "3xtf32" else 1)

    def smem_bytes(self, c: dict, tma_store: bool | None = None,
                   precision: str | None = None) -> int:
        """STAGES slots of slot_lines() 128-byte lines (A's BM, B's BN, 3xtf32's B tails), plus
        1 KiB to align the ring to the swizzle's 1024-byte atom, plus (TMA stores of C) two 8 KiB
        staging chunks per warpgroup (tma_tiles.cuh's C_STAGE_BYTES)."""
        store = self.store_allowed(c) if tma_store is None else tma_store
        staging = 2 * 64 * 128 * c[self.warpgroups] if store else 0
        # fp8_block's SCALE_TMA switch: a ring of A's scales, BM floats per slot
        scales = c["STAGES"] * 64 * c[self.warpgroups] * 4 if c.get("SCALE_TMA") else 0
        return c["STAGES"] * self.slot_lines(c, precision) * 128 + 1024 + staging + scales

    def validate(self, params, precision: str | None = None) -> None:
        """LabError (one sentence) for an unknown parameter, a value outside `choices`, or a ring
        over the 227 KiB an H100 block can have."""
        unknown = sorted(set(params) - set(self.param_order))
        if unknown:
            raise LabError(f"stage {self.stage} (cuda) has no parameter {', '.join(unknown)} (it "
                           f"takes {', '.join(self.param_order)})")
        shown = ", ".join(f"{k}={params[k]}" for k in self.param_order if k in params)
        where = f"{self.stage} with {shown or 'defaults'}"
        for k, allowed in self.choices.items():
            v = params.get(k, 0)
            if not (_int(v) and v in allowed):
                raise LabError(f"{where}: {k} must be one of {', '.join(map(str, allowed))} (0: "
                               f"automatic, {self.defaults[k]})")
        group = params.get("group", 8)
        if not _int(group) or group < 1:
            raise LabError(f"{where}: group must be a positive integer")
        c = self.config(precision, **params)
        if precision and get_precision(precision).scale == "block" and c["BN"] not in BLOCK_BN:
            raise LabError(f"{where}: in fp8_block a tile lies in one of B's 128-column scale "
                           f"blocks, so BN must be 64 or 128 (0: 128)")
        if c.get("SPLITK", 1) > 1 and precision and precision not in SPLITK_PRECISIONS:
            raise LabError(f"{where}: split-K runs {', '.join(SPLITK_PRECISIONS)} (C from fp32 "
                           f"partial sums added in a second kernel), not {precision}; use "
                           f"SPLITK=1")
        if c.get("STREAMK"):
            if precision and precision not in SPLITK_PRECISIONS:
                raise LabError(f"{where}: stream-K runs {', '.join(SPLITK_PRECISIONS)} (parts of "
                               f"tiles as fp32 sums added in a second kernel), not {precision}; "
                               f"use STREAMK=0")
            if c.get("SPLITK", 1) > 1 or c.get("CLUSTER") == 2:
                raise LabError(f"{where}: stream-K cuts the k-tiles into one range per block by "
                               f"itself, with one block per cluster, so it takes neither SPLITK "
                               f"nor CLUSTER=2")
        if c[self.warpgroups] == 3 and c["BN"] > 128:
            raise LabError(f"{where}: three consumer warpgroups hold 160 registers a thread, too "
                           f"few for BN={c['BN']}'s accumulators, so BN must be 64 or 128")
        cl = self.cluster_of(c)
        if cl > 1 and c["BN"] % (64 * cl):
            raise LabError(f"{where}: a cluster of {cl} blocks splits each B tile into {cl} "
                           f"multicast loads of whole 64-column boxes, so BN must be a multiple "
                           f"of {64 * cl}")
        need = self.smem_bytes(c, precision=precision)
        if need > SMEM_PER_BLOCK:
            tails = f" + {c['BN']} of B's tails" if precision == "3xtf32" else ""
            raise LabError(f"{where}: the ring needs {need} bytes of shared memory per block "
                           f"({c['STAGES']} slots of {64 * c[self.warpgroups]} + {c['BN']}{tails} "
                           f"lines of 128 bytes), more than the 227 KiB an H100 block can have; "
                           f"lower STAGES, BN or {self.warpgroups}")

    def resolve(self, params, M: int, N: int, K: int, precision: str, sms: int,
                store: bool | None = None) -> dict:
        """Every knob concrete. An automatic CLUSTER follows how C is stored (with_cluster):
        `store` (TMA stores straight into C), or, not given, whether a contiguous M x N C has
        16-byte lines (a C without them goes through an aligned buffer: launch())."""
        c = self.config(precision, **params)
        if "SPLITK" in c:  # the splits that run: at most one per k-tile
            c["SPLITK"] = splits_for(c["SPLITK"], K, precision)
        if store is None:
            store = self.store_allowed(c) and (N * C_BYTES.get(precision, 4)) % LINE_ALIGN == 0
        c = self.with_cluster(c, bool(store))
        return {**params, **c, "group": params.get("group", 8)}

    def show(self, resolved: dict) -> str:
        return ",".join(f"{k}={resolved[k]}" for k in self.param_order
                        if resolved.get(k) is not None)

    # ---------------------------------------------------------------- build, geometry
    def build(self, precision: str, layout: str = "nn", group: int = 8, c: dict | None = None,
                tma_store: bool | None = None, c_trans: bool | None = None):
        """The kernel for `precision` and the layout it reads, compiled for sm_90a (no GPU
        needed). `c` may carry extra build defines (scripts/experiments/hopper_probe.py).
        `c_trans`: the kernel computes C^T = B^T A^T (swapped(); None: as `layout` says), and
        stores it from registers."""
        d = {DEFINES[precision]: 1, "GROUP": group, **(c or self.defaults_for(precision))}
        if d.pop("SPLITK", 1) > 1:  # the split-K build (the count of splits is an argument)
            d["SPLITK"], tma_store = 1, False
        if d.pop("STREAMK", 0):  # the stream-K build (0: no define, the unsplit kernel's build)
            d["STREAMK"] = 1
        kind = get_precision(precision).scale
        if kind in SCALE_DEFINES:
            d[SCALE_DEFINES[kind]] = 1
        if d.pop("STORE", 1) == 2:  # the row's choice, not a define: C from registers
            tma_store = False
        if c_trans is None:
            c_trans = swapped(layout, precision, self.tf32_regs)
        if c_trans:
            d["C_TRANS"], tma_store = 1, False
        if self.tma_store:  # the launch passes C as a tensor map only where it says so
            d["TMA_STORE"] = int(self.tma_store if tma_store is None else tma_store)
        read = kernel_layout(layout, precision, self.tf32_regs)
        source = self.source
        if self.lesson_case is not None and not self.lesson_case(d, read):
            source = stage_source(self.stage, False)  # the variant: the same kernel, every case
        return compile_kernel(source, self.kernel, d, layout=read, arch=ARCH)

    def geometry(self, M: int, N: int, c: dict | None = None, sms: int = DEFAULT_SMS,
                 clusters: int | None = None, tma_store: bool | None = None,
                 precision: str | None = None, K: int | None = None):
        """(grid, block, dynamic shared bytes). The schedule gives the blocks: one per tile, or
        (persistent) one per SM, or, in clusters, `clusters` clusters (as many as the GPU holds at
        once; SMs / CLUSTER without a GPU). Stream-K (STREAMK) takes one block per SM, but no
        more than the tiles' k-tiles (K, as the kernel cuts them: streamk_work)."""
        c = c or self.defaults_for(precision)
        wgs, cl = c[self.warpgroups], self.cluster_of(c)
        # a cluster takes `cl` tiles down M with the same columns
        tiles = cdiv(M, 64 * wgs * cl) * cdiv(N, c["BN"]) * c.get("SPLITK", 1)  # split-K: units
        resident = clusters if clusters is not None else sms // cl
        if c.get("STREAMK"):
            work = streamk_work(M, N, K or 1, 64 * wgs, c["BN"], precision)
            return ((min(resident, work), 1, 1), (128 * (wgs + self.producer), 1, 1),
                    self.smem_bytes(c, tma_store, precision))
        blocks = cl * self.schedule.blocks(tiles, resident)
        return ((blocks, 1, 1), (128 * (wgs + self.producer), 1, 1),
                self.smem_bytes(c, tma_store, precision))

    def compile_for(self, params, M: int, N: int, K: int, layout: str, precision: str):
        """The build and geometry prepare() uses (the contract's `compile`), without a GPU (for
        operands whose lines TMA can read: no aligned copies)."""
        swap = swapped(layout, precision, self.tf32_regs)
        if swap:  # the kernel's M x N is C^T's
            M, N = N, M
        c = self.resolve(params, M, N, K, precision, DEFAULT_SMS, store=False if swap else None)
        c = {k: c[k] for k in self.knobs}  # (resolve keeps SPLITK to the k-tiles there are)
        return (self.build(precision, layout, params.get("group", 8), c),
                self.geometry(M, N, c, tma_store=False if swap else None, precision=precision,
                              K=K))

    # ---------------------------------------------------------------- launch
    def require_hopper(self, p) -> None:
        """LabError (one sentence) unless Problem `p` lies on an sm_90 GPU (or on the CPU)."""
        arch = device_arch_of(p)
        if arch is not None and arch != "sm_90":
            raise LabError(f"stage {self.stage} runs Hopper's TMA and wgmma instructions, which "
                           f"only sm_90 GPUs (H100, H200) have, and this GPU is {arch}; use stage "
                           f"mma (mma.sync) here")

    def launch(self, p, precision: str, group: int = 8, c: dict | None = None) -> Prepared:
        """The copies plan() asks for, then the kernel (and, where C's lines are off 16 bytes
        and the stage stores C through TMA, the copy of its aligned buffer into C)."""
        import numpy as np
        import torch

        self.require_hopper(p)
        c = c or self.defaults_for(precision)
        if "SPLITK" in c:  # at most one split per k-tile; one is the unsplit kernel
            c = {**c, "SPLITK": splits_for(c["SPLITK"], p.K, precision)}
        splits = c.get("SPLITK", 1)
        w = plan(p, self.tf32_regs)
        swap = w["swap"]
        M, N = (p.N, p.M) if swap else (p.M, p.N)  # the kernel's D: C, or C^T
        # C through TMA stores where a map can describe it (16-byte lines), else direct stores
        # (TMA_STORE=0 in `c`, a probe's define, keeps the direct stores; D = C^T is stored
        # from registers). A C whose lines are off 16 bytes (a bf16 C of 6007 columns) is
        # computed into an aligned buffer through TMA stores and copied into C in the call: on
        # an H100 the kernel's direct stores into such a C cost more than the copy (persistent,
        # bf16 7919 x 6007 x 3001 nt: 0.676 ms, against 0.510 ms into a C of 6008 columns).
        user_c, c_buf = p.c.tensor, None
        ldc_map = line_ld(user_c, False) if self.tma_store and not swap else None
        if (self.store_allowed(c) and not swap and ldc_map is None and min(user_c.shape) > 0):
            c_buf = aligned_buffer(p.M, p.N, False, user_c)
            ldc_map = line_ld(c_buf, False)
        c_out = user_c if c_buf is None else c_buf
        store = ldc_map is not None and self.store_allowed(c)
        # the automatic CLUSTER: 1 for TMA stores straight into C, 2 through the buffer (there
        # the operands are copied too, and clusters of two measured faster: with_cluster)
        c = self.with_cluster(c, store and c_buf is None)
        if c.get("SCALE_TMA") and not _scale_tma_fits(p):  # the bulk copy's alignment
            c = {**c, "SCALE_TMA": 0}
        b = self.build(precision, w["layout"], group, c, store, c_trans=swap)
        cl = self.cluster_of(c)
        clusters = None
        if self.schedule.resident and cl > 1:
            _, block, smem = self.geometry(M, N, c, tma_store=store, precision=precision)
            clusters = max_active_clusters(b, block, smem, cl)
        grid, block, smem = self.geometry(M, N, c, sm_count(p.c.tensor.device), clusters,
                                          store, precision, K=p.K)
        specs = map_specs(w["a"], w["b"], M, N, p.K, 64 * c[self.warpgroups], c["BN"] // cl,
                          ELEM_BYTES[precision])
        if store:  # C's map: {128 bytes of columns, 64 rows} boxes, as store_acc_tma writes them
            specs += (MapSpec(2, (p.N, p.M), ldc_map, (128 // C_BYTES[precision], 64)),)
        args = (w["a"][0], w["b"][0], c_out, np.int32(M), np.int32(N),
                np.int32(p.K), np.int64(p.c.ld if c_buf is None else c_buf.stride(0)))
        if p.scales is not None:  # fp8: scale_a, scale_b (the tensors: a plan swaps them)
            args += tuple(p.scales)
            if get_precision(precision).scale in SCALE_DEFINES:  # and their strides
                args += tuple(np.int64(x) for s in p.scales for x in s.stride())
        reduce = None
        if splits > 1:  # the workspace's slabs, and the kernel that adds them into C
            work, ldw, reduce, red = splitk_plan(p, precision, splits)
            args += (work, np.int64(ldw), np.int32(splits))
        elif c.get("STREAMK"):  # the tiles' parts: slabs, and the kernel that adds them into C
            tile = (64 * c[self.warpgroups], c["BN"])
            splits = streamk_parts(M, N, p.K, *tile, grid[0], group, precision)
            work, ldw, reduce, red = splitk_plan(p, precision, splits,
                                                 streamk=(*tile, group, grid[0]), c_out=c_out)
            args += (work, np.int64(ldw), np.int32(splits))
        kernel = tma_launcher(b, grid, block, args, smem, specs, cl)
        res = resources(b, grid, block, smem)
        names = tuple(name for name, _, _ in w["copies"])
        facts = dict(copies=names, tma_store=store, cluster=cl, c_trans=swap,
                     c_buffer=c_buf is not None, splits=splits, streamk=bool(c.get("STREAMK")))
        if reduce is not None:  # copies, partial sums, their sum into C (or C's aligned buffer)
            steps = [copy_step(dst, src) for _, dst, src in w["copies"]] + [kernel.step,
                                                                             reduce.step]
            if c_buf is not None:  # stream-K's whole tiles and summed parts, copied into C
                steps.append((torch.Tensor.copy_, (user_c, c_buf)))
            return Prepared.of_steps(steps, resources=res, build=b, kernel_only=kernel,
                                     reduce_build=red, workspace=work,
                                     setup_reusable=True, **facts)
        if not w["copies"] and c_buf is None:
            return Prepared.of_steps([kernel.step], resources=res, build=b, **facts)
        # the copies are part of the computation, so of the timed call
        steps = [copy_step(dst, src) for _, dst, src in w["copies"]] + [kernel.step]
        if c_buf is not None:
            steps.append((torch.Tensor.copy_, (user_c, c_buf)))
        return Prepared.of_steps(steps, resources=res, build=b, kernel_only=kernel, **facts)

    def offer(self) -> Offer:
        def kernels(params, precision) -> tuple:  # split-K adds the reduction after the kernel
            split = (params or {}).get("SPLITK", 1) > 1 or (params or {}).get("STREAMK")
            return (self.kernel,) + (("splitk_reduce",) if split else ())

        def tile_of(params) -> tuple[int, int]:  # 0 reads as the defaults (the split precisions')
            rows = 64 * (params.get("CONSUMERS") or self.defaults[self.warpgroups])
            return rows, params.get("BN") or self.defaults["BN"]

        # the tuner's seeds (lab/tune/seeds.py): SPLITK over the defaults' tile, and STREAMK
        tuning = (Tuning(split="SPLITK", tile_of=tile_of,
                         streamk="STREAMK" if "STREAMK" in self.choices else None)
                  if "SPLITK" in self.choices else Tuning())
        return Offer(self.stage, "cuda", precisions=self.precisions, kernels=kernels,
                     validate=self.validate, resolve=self.resolve, show=self.show,
                     compile=self.compile_for, arch=ARCH, tuning=tuning)

    def prepare_for(self, offer: Offer):
        """The stage's public prepare(a, b, c, precision=None, **params) (lab/base/entry.py's
        entry around the launch)."""
        @entry(offer)
        def prepare(p, **params):
            self.require_hopper(p)
            out = self.launch(p, p.precision, params.get("group", 8),
                              self.config(p.precision, **params))
            resolved = self.resolve(params, p.M, p.N, p.K, p.precision, 0,
                                    store=out.extra.get("tma_store"))
            out.resources = {**out.resources, "params": self.show(resolved)}
            out.extra["config"] = resolved
            return out

        return prepare


# ------------------------------------------------------------------------------ split-K
# persistent's SPLITK knob (cuda_kernels/variants/persistent.cu, "split-K"): the precisions whose
# kernel keeps its sum in the plain accumulators (not 3xtf32's three products, fp8_block's
# promotion or fp8_row's epilogue scales; tf32 may read A through registers)
SPLITK_PRECISIONS = ("bf16", "fp16", "fp8")


def k_tiles(K: int, precision: str | None) -> int:
    """The kernels' k-tiles over K: 128 bytes of K each (BK, the swizzle's line), at least 1."""
    return max(1, cdiv(K, 128 // ELEM_BYTES.get(precision, 2)))


def splits_for(splits: int, K: int, precision: str | None) -> int:
    """The splits a launch runs for a SPLITK of `splits`: at most one per k-tile (so no split is
    empty), at least 1."""
    return max(1, min(splits, k_tiles(K, precision)))


def streamk_work(M: int, N: int, K: int, BM: int, BN: int, precision: str | None) -> int:
    """The k-iterations of a stream-K launch, tiles x k-tiles: it takes no more blocks."""
    return cdiv(M, BM) * cdiv(N, BN) * k_tiles(K, precision)


def streamk_parts(M: int, N: int, K: int, BM: int, BN: int, blocks: int, group: int,
                  precision: str | None) -> int:
    """The most parts any tile of a stream-K launch has (its workspace's slab count). The kernel
    (variants/persistent.cu, STREAMK) runs the first (T / G) G of the T tiles whole, G = `blocks`
    at a time, and cuts the other tiles' W k-iterations into GS = min(G, W) ranges, range i being
    [i W / GS, (i + 1) W / GS); a tile has a part in each range its k-tiles meet. The tile order
    (`group`) does not change the count."""
    import numpy as np

    kt = k_tiles(K, precision)
    tiles = cdiv(M, BM) * cdiv(N, BN)
    dp = tiles // blocks * blocks
    work = (tiles - dp) * kt
    if work == 0:
        return 1
    gs = min(blocks, work)
    x = np.arange(tiles - dp, dtype=np.int64) * kt  # each tile's first k-iteration of the W
    first = ((x + 1) * gs - 1) // work
    last = ((x + kt) * gs - 1) // work
    return int((last - first).max()) + 1


def splitk_plan(p, precision: str, splits: int, streamk: tuple | None = None, c_out=None):
    """(workspace, ldw, reduce launch, its build) of a split-K launch: `splits` slabs of M rows of
    ldw floats (warptiling's workspace_ld: splitk_reduce.cu reads a float4 of each slab), allocated
    once per prepare (every call rewrites all of it), and warptiling's reduction built for C's
    16-bit type and launched over C (row-major, ldc; 8-byte stores where its base and ldc allow
    them). `streamk` = (BM, BN, group, blocks) of a stream-K launch: `splits` is then the most
    parts a tile has, the reduction adds each tile's own number of them and leaves the tiles of
    one part (stored by the main kernel) alone; with at most one part a tile there is no
    reduction (None) and a one-float workspace. `c_out`: the tensor the reduction writes (C, or
    the aligned buffer a stream-K launch computes C into; default C)."""
    import numpy as np
    import torch

    from cuda_kernels import warptiling

    ldw = warptiling.workspace_ld(p.N)
    dev = p.c.tensor.device
    if streamk is not None and splits == 1:
        return torch.empty(1, dtype=torch.float32, device=dev), ldw, None, None
    work = torch.empty(splits * p.M * ldw, dtype=torch.float32, device=dev)
    c = p.c.tensor if c_out is None else c_out
    ldc = p.c.ld if c is p.c.tensor else c.stride(0)
    vec = c.data_ptr() % 8 == 0 and ldc % 4 == 0
    out = "fp16" if precision == "fp16" else "bf16"  # fp8's C: bf16
    offsets64 = p.M * max(ldc, ldw) >= 2 ** 31
    args = (work, c, np.int32(p.M), np.int32(p.N), np.int32(ldw), np.int32(ldc))
    if streamk is None:
        red = warptiling.build_reduce(splits, vec, offsets64=offsets64, out=out)
    else:
        bm, bn, group, blocks = streamk
        red = warptiling.build_reduce(splits, vec, offsets64=offsets64, out=out,
                                      streamk=(bm, bn, group))
        args += (np.int32(cdiv(p.M, bm)), np.int32(cdiv(p.N, bn)),
                 np.int32(k_tiles(p.K, precision)), np.int32(blocks))
    grid, block, _ = warptiling.reduce_geometry(p.M, p.N)
    reduce = launcher(red, grid, block, args)
    return work, ldw, reduce, red


# ------------------------------------------------------------------------------ the plan


def _scale_tma_fits(p) -> bool:
    """Whether fp8_block's A scales can be bulk-copied per k-tile (the SCALE_TMA switch):
    M-major, 16-byte aligned columns, M a multiple of 4."""
    if p.scales is None or get_precision(p.precision).scale != "block":
        return False
    sa = p.scales[0]
    return (sa.stride(0) == 1 and (sa.stride(1) * 4) % 16 == 0 and sa.data_ptr() % 16 == 0
            and p.M % 4 == 0)


def kernel_layout(layout: str, precision: str, regs: bool = False) -> str:
    """The layout the kernel reads for operands in `layout` (as plan() maps aligned operands):
    16-bit types read every layout as it lies. TF32 reads B K-major only: without `regs` both
    operands K-major (nt; the others copied); with `regs` (A through registers, which may be
    M-major) nt as it lies, tt as it lies, nn as C^T = B^T A^T (whose B^T is M-major: tt), and tn
    with B copied K-major (tt). 3xtf32 and fp8 read both K-major."""
    if ELEM_BYTES[precision] == 2:
        return layout
    if regs and precision == "tf32":
        return "nt" if layout == "nt" else "tt"
    return "nt"


def swapped(layout: str, precision: str, regs: bool) -> bool:
    """Whether the kernel computes C^T = B^T A^T for `layout` (tf32 nn with `regs`)."""
    return regs and precision == "tf32" and layout == "nn"


def line_ld(t, col: bool) -> int | None:
    """The leading dimension at which a TMA map reads rows x cols tensor `t` column-major (`col`:
    unit stride down the rows) or row-major, or None where it cannot: no unit stride that way, or
    a base or leading dimension off 16-byte boundaries. A single line may have any leading
    dimension (the map is given the line's length rounded up to 16 bytes: it never steps over it)."""
    inner, outer = (0, 1) if col else (1, 0)
    n_inner, n_outer = t.shape[inner], t.shape[outer]
    if n_inner > 1 and t.stride(inner) != 1:
        return None
    per = LINE_ALIGN // t.element_size()
    ld = t.stride(outer) if n_outer > 1 else max(per, cdiv(n_inner, per) * per)
    if t.data_ptr() % LINE_ALIGN or ld % per or ld < n_inner:
        return None
    return ld


def plan(p, regs: bool = False) -> dict:
    """The copies to run first in every call, (name, dst, src), and what the kernel reads: for A
    and B the tensor, whether it is read column-major (A: M-major, B: K-major) and its leading
    dimension; `swap` where the kernel computes C^T = B^T A^T (its A the user's B^T, its B the
    user's A^T, its D C^T). 16-bit operands are read the way they lie; 3xtf32 and fp8 read both
    K-major; tf32 reads B K-major, and A K-major or, with `regs` (tf32 only), either way
    (kernel_layout); where B lies N-major and A K-major (nn) the operands swap roles instead of B
    being copied. An operand the maps cannot read as planned (another orientation, lines off
    16-byte boundaries, no unit stride) is copied into an aligned buffer of the orientation read
    (cuda_kernels/_build.py's aligned_buffer)."""
    es = ELEM_BYTES[p.precision]
    regs = regs and p.precision == "tf32"
    a, b, swap = ("A", p.a.tensor), ("B", p.b.tensor), False
    if es == 2:
        want = (p.a.trans, p.b.trans)
    elif not regs:
        want = (False, True)
    elif line_ld(b[1], True) is not None or line_ld(a[1], False) is None:
        want = (p.a.trans, True)  # nt, tt as they lie; tn (and unaligned nn): B copied K-major
    else:  # nn: B^T (M-major) through registers, A^T K-major
        a, b, swap, want = ("B", p.b.tensor.t()), ("A", p.a.tensor.t()), True, (True, True)
    copies, out = [], {}
    for role, (name, t), col in (("A", a, want[0]), ("B", b, want[1])):
        ld = line_ld(t, col)
        if ld is None:
            src = t
            t = aligned_buffer(t.shape[0], t.shape[1], col, src)
            copies.append((name, t, src))
            ld = line_ld(t, col)
        out[role] = (t, col, ld)
    layout = "".join("t" if out[n][1] else "n" for n in ("A", "B"))
    return {"copies": copies, "layout": layout, "a": out["A"], "b": out["B"], "swap": swap}


def copy_step(dst, src):
    """One copy of plan()'s as a step of the launch: an fp32 or e4m3 operand turned the other way
    round (tf32's and fp8's K-major copy) through transpose.cu's tiled transposes, anything else
    with torch's copy_ (which moves a transposed fp32 view at about a third of the bandwidth, and
    a transposed e4m3 view of 4096 x 4096 in 0.116 ms on an H100, a tenth of it)."""
    import numpy as np
    import torch

    def unit(t, dim):  # stride 1 along dim (a dimension of one element has any stride)
        return t.shape[dim] <= 1 or t.stride(dim) == 1

    kernel = {torch.float32: "transpose_f32", torch.float8_e4m3fn: "transpose_u8"}.get(src.dtype)
    if kernel and src.dim() == 2 and min(src.shape) > 1:
        # src with unit stride along its columns and dst along its rows: dst^T's storage is src's
        # transpose (and the other way round)
        for s_dim in (1, 0):
            d_dim = 1 - s_dim
            if unit(src, s_dim) and unit(dst, d_dim) and not unit(src, d_dim):
                R, C = src.shape[d_dim], src.shape[s_dim]
                lds, ldd = src.stride(d_dim), dst.stride(s_dim)
                src_rows = src if s_dim == 1 else src.t()
                dst_rows = dst.t() if s_dim == 1 else dst
                b = compile_kernel("transpose.cu", kernel, {})
                # transpose_f32: 32 x 32 tiles, 32 x 8 threads; transpose_u8: 64 x 64 bytes,
                # 16 x 16 threads (transpose.cu)
                tile, block = (32, (32, 8, 1)) if kernel == "transpose_f32" else (64, (16, 16, 1))
                grid = (cdiv(C, tile), cdiv(R, tile), 1)
                k = launcher(b, grid, block, (src_rows, dst_rows, np.int32(R), np.int32(C),
                                              np.int64(lds), np.int64(ldd)))
                return k.step
    return (torch.Tensor.copy_, (dst, src))


def map_specs(a, b, M: int, N: int, K: int, bm: int, bn: int, es: int) -> tuple:
    """The tensor maps of A (kernel argument 0) and B (argument 1), each given as plan()'s
    (tensor, column-major, ld): K-major operands as one {BK, lines} box, M- or N-major ones as
    {64, BK} boxes (tma_tiles.cuh). `bn` is the lines of B one block loads: BN, or BN / CLUSTER
    where a cluster's blocks share the tile."""
    bk = 128 // es  # also the width of an M- or N-major box: 128 bytes
    (_, a_col, lda), (_, b_col, ldb) = a, b
    sa = MapSpec(0, (M, K), lda, (bk, bk)) if a_col else MapSpec(0, (K, M), lda, (bk, bm))
    sb = MapSpec(1, (K, N), ldb, (bk, bn)) if b_col else MapSpec(1, (N, K), ldb, (bk, bk))
    return sa, sb
