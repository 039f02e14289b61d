"""The registry: the one and only list of stages.

The CLI's choices, the tests' parametrization, CSV rows and plot labels all read `STAGES`. Adding a
stage means writing cuda_kernels/<name>.cu + cuda_kernels/<name>.py + triton_kernels/<name>.py and
adding one `Stage(...)` entry below; nothing else changes.

A stage may declare parameters (`Param`): name, default and allowed values, and which backends use
it. On the command line a variant is written `stage:name=value,name=value` (e.g. `tiled:tile=16`);
each variant is its own row.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

from lab.base.contract import PRECISIONS as CONTRACT_PRECISIONS
from lab.base.contract import Offer
from lab.base.errors import LabError
from lab.base.splitk import AUTO as SPLITK_AUTO, SPLITS as SPLITK_CHOICES

BACKENDS = ("cuda", "triton")
# The precisions the harness can check and baseline; each stage x backend supports a subset.
#   fp32    IEEE fp32 operands and arithmetic (CUDA cores; cuBLAS with TF32 off)
#   tf32    fp32 operands rounded to TF32 (10-bit mantissa) on the tensor cores, fp32 accumulation
#   3xtf32  fp32 operands split into a TF32 high part and a TF32 residual, three TF32 products:
#           near-fp32 accuracy on the tensor cores (compared with cuBLAS fp32, which it stands in for)
#   bf16    bfloat16 operands and output, fp32 accumulation
#   fp16    float16 operands and output, fp32 accumulation
#   fp8     float8 e4m3 operands with per-tensor scales (C = scale_a * scale_b * A @ B), fp32
#           accumulation, bfloat16 output (compared with cuBLAS fp8 through torch._scaled_mm)
PRECISIONS = CONTRACT_PRECISIONS


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    choices: tuple
    help: str
    backends: tuple[str, ...] = BACKENDS
    numerics: bool = False  # changes the results' numerics: the tuner never searches it

    def coerce(self, value: object) -> object:
        """`value` as this parameter's type where that is unambiguous: True / False for an
        integer switch whose choices hold 0 and 1 (mma's kmajor_b: -1 automatic, 0, 1), so that
        a bool from Python, the command line or an older cache entry still means off / on."""
        if (isinstance(value, bool) and not isinstance(self.default, bool)
                and isinstance(self.default, int) and {0, 1} <= set(self.choices)):
            return int(value)
        return value

    def parse(self, stage: str, text: str) -> object:
        kind = type(self.default)
        try:
            if kind is bool or (kind is int and text.lower() in ("true", "on", "false", "off")
                                and {0, 1} <= set(self.choices)):
                value = kind({"1": True, "true": True, "on": True, "0": False, "false": False,
                              "off": False}[text.lower()])
            else:
                value = kind(text)
        except (KeyError, ValueError):
            raise LabError(
                f"parameter {self.name} of stage {stage} takes one of "
                f"{', '.join(map(str, self.choices))}, not {text!r}"
            ) from None
        if value not in self.choices:
            raise LabError(
                f"parameter {self.name} of stage {stage} takes one of "
                f"{', '.join(map(str, self.choices))}, not {text!r}"
            )
        return value


@dataclass(frozen=True)
class Stage:
    """One rung of the ladder: its name (the files' name), a one-line title, and its parameters.
    What each backend's launcher offers (precisions, kernels, validation, tuning hints) is
    declared beside the kernel, in that launcher's `OFFER` (lab/base/contract.py)."""

    name: str
    title: str
    params: tuple[Param, ...] = ()
    # the published SGEMM ladder's kernel that corresponds to this stage: its % of cuBLAS fp32
    # (PUBLISHED_LABEL says whose and when), or None where it has none
    published: float | None = None
    # the stage whose lesson this one changes (lab.lesson prints the diff from it): None for the
    # previous entry of STAGES, "" for none (the start of the ladder)
    builds_on: str | None = None
    # what the stage is built for where that is not a square GEMM (the results' ladder picture
    # writes it in place of the stage's square-shape bars), "" for a GEMM stage
    built_for: str = ""
    # False: the canonical square run (lab/results.py CANONICAL_RUN) does not measure the stage;
    # its page has its own tables
    square_run: bool = True

    def module(self, backend: str) -> ModuleType:
        """The launcher module of this stage for a backend (cuda_kernels.<name> / triton_kernels.<name>)."""
        package = {"cuda": "cuda_kernels", "triton": "triton_kernels"}[backend]
        return importlib.import_module(f"{package}.{self.name}")

    def offer(self, backend: str) -> Offer:
        """What this stage's `backend` launcher declares (lab/base/contract.py)."""
        offer = self.module(backend).OFFER
        if offer.stage != self.name or offer.backend != backend:
            raise LabError(f"{backend} launcher of stage {self.name} declares the Offer of "
                           f"{offer.stage} ({offer.backend})")
        return offer

    def precisions_for(self, backend: str) -> tuple[str, ...]:
        """The precisions this stage's `backend` kernel computes in."""
        return self.offer(backend).precisions

    def all_precisions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for b in BACKENDS for p in self.precisions_for(b)))

    def _offers_in(self, precision: str | None) -> list[Offer]:
        return [o for o in map(self.offer, BACKENDS)
                if precision is None or precision in o.precisions]

    def requirement(self, precision: str | None = None) -> str:
        """The GPUs the stage runs on in `precision` (None: in any of its precisions), through
        whichever backend runs on the most: "sm_75+", "sm_80+" or "sm_90a" (Offer.requirement;
        the defaults' parameters)."""
        params = self.defaults()
        best = min(self._offers_in(precision),
                   key=lambda o: (o.min_capability(precision, params), o.arch is not None))
        return best.requirement(precision, params)

    def runs_on(self, capability: tuple[int, int], precision: str | None = None) -> bool:
        """Whether a backend of the stage runs it in `precision` (None: in any) on a GPU of
        compute capability `capability`, with the defaults' parameters (Offer.runs_on)."""
        params = self.defaults()
        return any(o.runs_on(capability, precision, params) is None
                   for o in self._offers_in(precision))

    def defaults(self) -> dict[str, object]:
        return {p.name: p.default for p in self.params}


@dataclass(frozen=True)
class Variant:
    """A stage with concrete parameter values: one row per backend and size.

    `auto` (written `stage:auto`) asks for the autotuner's cached winner for each row's GPU, shape,
    layout and backend (lab.autotune.resolve_variant); until then `params` holds the defaults,
    which are also what runs when no tuned configuration is cached."""

    stage: Stage
    params: dict = field(default_factory=dict, hash=False)
    auto: bool = False
    implicit: bool = False  # listed by 'all' rather than named: skipped where it cannot run

    @property
    def dispatch(self) -> bool:
        """`auto` on its own: no stage of the ladder but the lab's choice of one for each row
        (lab/dispatch.py), not a stage's tuned configuration (`stage:auto`)."""
        return self.stage.name == AUTO

    @property
    def label(self) -> str:
        if self.auto:
            return f"{self.stage.name}:auto"
        changed = {k: v for k, v in self.params.items() if self.stage.defaults().get(k) != v}
        if not changed:
            return self.stage.name
        return self.stage.name + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in changed.items())

    def params_for(self, backend: str) -> dict[str, object]:
        """Only the parameters this backend's launcher understands."""
        return {p.name: self.params[p.name] for p in self.stage.params if backend in p.backends}


def _fmt(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


# Compiler switches every CUDA stage offers (see lab/toolchain/nvrtc.py and common.cuh).
SWITCHES = (
    Param("fast_math", False, (False, True), "compile with --use_fast_math", ("cuda",),
          numerics=True),
    Param("unroll", True, (False, True), "unroll the inner loop (0 = #pragma unroll 1)", ("cuda",)),
)


def group(default: int = 1) -> Param:
    return Param("group", default, (1, 4, 8, 16),
                 "block rasterization: block-rows walked together for L2 reuse (1 = row-major)",
                 ("cuda",))


def num_warps(default: int = 4) -> Param:
    return Param("num_warps", default, (1, 2, 4, 8, 16), "Triton warps per program", ("triton",))


def num_stages(default: int = 1) -> Param:
    return Param("num_stages", default, (1, 2, 3, 4, 5), "Triton software-pipeline depth",
                 ("triton",))


def block_tile(edge: int) -> tuple[Param, ...]:
    """BM x BN x BK: the block tile of the register-tiling stages (both backends)."""
    return (
        Param("BM", edge, (32, 64, 128), "block tile rows (Triton: BLOCK_M)"),
        Param("BN", edge, (32, 64, 128), "block tile columns (Triton: BLOCK_N)"),
        Param("BK", 8, (8, 16, 32), "k-step of the shared tiles (Triton: BLOCK_K = max(BK, 16))"),
    )


def warp_block_tile() -> tuple[Param, ...]:
    """BM x BN: the block tile of the warp-tiled CUDA stages (warptiling, double_buffered)."""
    return (
        Param("BM", 128, (64, 128, 256), "block tile rows", ("cuda",)),
        Param("BN", 128, (64, 128, 256), "block tile columns", ("cuda",)),
    )


def warp_tile() -> tuple[Param, ...]:
    """WM x WN: a warp's tile in the warp-tiled CUDA stages."""
    return (
        Param("WM", 64, (32, 64, 128), "warp tile rows (BM/WM x BN/WN warps)", ("cuda",)),
        Param("WN", 64, (32, 64, 128), "warp tile columns", ("cuda",)),
    )


def triton_tile() -> tuple[Param, ...]:
    """BLOCK_M x BLOCK_N x BLOCK_K and GROUP_M: the Triton twins of the warp-tiled stages."""
    return (
        Param("BLOCK_M", 128, (32, 64, 128, 256), "Triton block tile rows", ("triton",)),
        Param("BLOCK_N", 128, (32, 64, 128, 256), "Triton block tile columns", ("triton",)),
        Param("BLOCK_K", 32, (16, 32, 64), "Triton k-step", ("triton",)),
        Param("GROUP_M", 8, (1, 4, 8, 16), "Triton tile-rows walked together (L2 reuse)",
              ("triton",)),
    )


def square_tile() -> tuple[Param, ...]:
    """The parameters of tiled and of its padded variant (the same kernel but for the edges)."""
    return (
        Param("tile", 32, (8, 16, 32), "tile edge: TILE x TILE threads and tiles"),
        Param("ktile", 2, (1, 2, 4), "K depth staged per barrier, in units of TILE", ("cuda",)),
        group(16),
        *SWITCHES, num_warps(), num_stages(),
    )


def thread_tile() -> tuple[Param, ...]:
    """TM x TN: a thread's register tile in the 2-D stages (CUDA only; tl.dot decides in Triton)."""
    return (
        Param("TM", 8, (4, 8), "rows of a thread's register tile", ("cuda",)),
        Param("TN", 8, (4, 8), "columns of a thread's register tile", ("cuda",)),
    )


def hopper_triton(persistent: bool = False) -> tuple[Param, ...]:
    """The Triton twins of the TMA stages: tiles, pipeline depth, and the copies and stores that
    Triton 3.6's wgmma lowering calls for (triton_kernels/tma_wgmma.py, persistent.py)."""
    stages = "3; 4 for 3xtf32" if persistent else "4; 3 for 3xtf32"
    extra = (Param("flatten", -1, (-1, 0, 1),
                   "Triton: fuse the tile loop and the k-loop into one pipelined loop "
                   "(tl.range flatten=True), so that the next tile's loads are issued before this "
                   "tile's C store (-1: per precision, on; off in fp8_block, where it measured "
                   "slower)", ("triton",)),) if persistent else ()
    return (
        Param("BLOCK_M", 128, (64, 128, 256), "Triton block tile rows", ("triton",)),
        Param("BLOCK_N", 0, (0, 64, 128, 256),
              "Triton block tile columns (0: per precision, 256; 128 for 3xtf32, and when that "
              "grid has fewer tiles than the GPU has SMs)", ("triton",)),
        Param("BLOCK_K", 0, (0, 32, 64, 128),
              "Triton k-step (0: per precision, 128 bytes, i.e. 64 bf16/fp16 or 32 TF32"
              + ("" if persistent else "; 64 for 3xtf32") + ")", ("triton",)),
        Param("GROUP_M", 8, (1, 4, 8, 16), "Triton tile-rows walked together (L2 reuse)",
              ("triton",)),
        num_warps(8),
        Param("num_stages", 0, (0, 2, 3, 4, 5),
              f"Triton software-pipeline depth, TMA loads in flight (0: per precision, {stages}; "
              "no effect when interpreted)", ("triton",)),
        Param("kmajor", -1, (-1, 0, 1),
              "Triton: copy an operand that is not K-major (a column-major A, a row-major B) "
              "into a K-major buffer in every call (timed); TF32 wgmma reads shared operands "
              "K-major only (-1: on for tf32/3xtf32, off for bf16/fp16)", ("triton",)),
        Param("subtile", -1, (-1, 0, 1),
              "Triton: store C's tile in two halves, halving the shared-memory staging tile that "
              "lives beside the ring (-1: on for tf32" + (", and where the automatic tile would "
              "not fit otherwise" if persistent else "") + ")", ("triton",)),
        *extra,
    )


# Published SGEMM_CUDA (https://github.com/siboehm/SGEMM_CUDA) kernels, measured on the same H100
# on 2026-11-22 at 4096^3, fp32, as % of cuBLAS (Stage.published): tiled is its shared-memory
# kernel; bank_conflicts its kernel 7, the better of its two bank-conflict fixes (54.7 and 45.3);
# its autotuned kernel 9 (60.9) has no stage of its own, and its double-buffering kernel 11 gave
# wrong results, so neither is recorded.
PUBLISHED_LABEL = "siboehm/SGEMM_CUDA (H100, 2026-11-22)"

STAGES: tuple[Stage, ...] = (
    Stage(
        "naive",
        "one thread per C element, threadIdx.x walking rows: uncoalesced A reads and C writes",
        builds_on="",
        published=1.0,
        params=(*SWITCHES, num_warps()),
    ),
    Stage(
        "coalesced",
        "one thread per C element, threadIdx.x walking columns: a warp reads 128 contiguous bytes of B",
        published=12.4,
        params=(
            Param("rows", 32, (4, 8, 16, 32), "block rows: a block is 32 x rows threads", ("cuda",)),
            Param("kunroll", 16, (2, 4, 8, 16), "k-loop unroll count (loads in flight per thread)",
                  ("cuda",)),
            group(16),
            *SWITCHES, num_warps(),
        ),
    ),
    Stage(
        "tiled",
        "shared-memory tiling (TILE 32): each loaded element is reused TILE times from shared memory",
        published=17.9,
        params=square_tile(),
    ),
    # The divergence and occupancy variants of tiled (docs/stages/tiled_padded.md, tiled_rect.md).
    Stage(
        "tiled_padded",
        "tiled on zero-padded operands (padded once, outside the timing): no bounds checks, no "
        "divergence; the crop back into C is timed",
        params=square_tile(),
    ),
    Stage(
        "tiled_rect",
        "rectangular ROWS x COLS tiles (8x32): 128-byte tile rows with 256-thread blocks; each "
        "thread loads COLS/ROWS rows of the COLS x COLS B tile",
        params=(
            Param("rows", 8, (4, 8, 16, 32), "tile rows = threadIdx.y extent (C rows per block)"),
            Param("cols", 32, (16, 32, 64),
                  "tile columns = threadIdx.x extent = K-step; a multiple of rows"),
            group(16),
            *SWITCHES, num_warps(), num_stages(),
        ),
    ),
    # Register tiling: several results per thread, then vector access.
    Stage(
        "blocktile_1d",
        "1-D register tiling: each thread computes TM results down a column of C, reusing one B "
        "value from a register for TM FMAs (BM x BN block tile, BM*BN/TM threads)",
        published=33.4,
        params=(
            *block_tile(64),
            Param("TM", 8, (4, 8, 16), "results per thread (rows of one column of C)", ("cuda",)),
            group(16), *SWITCHES, num_warps(16), num_stages(),
        ),
    ),
    Stage(
        "blocktile_2d",
        "2-D register tiling: each thread computes a TM x TN tile of C as outer products of TM "
        "A and TN B values held in registers (128 x 128 block tile, 256 threads)",
        published=50.3,
        params=(
            *block_tile(128), *thread_tile(), group(16), *SWITCHES, num_warps(8), num_stages(),
        ),
    ),
    Stage(
        "vectorized",
        "blocktile_2d with float4 (128-bit) global loads/stores and a transposed A tile in shared "
        "memory, so A and B fragments are read with LDS.128 too",
        published=61.5,
        params=(
            *block_tile(128), *thread_tile(), group(16), *SWITCHES, num_warps(8), num_stages(),
        ),
    ),
    Stage(
        "bank_conflicts",
        "vectorized with a conflict-free shared layout for the transposing store: the float4 of "
        "A scattered down 4 rows of As hits 32 distinct banks at every BK (padding per group of "
        "4 rows, or an XOR swizzle)",
        published=54.7,
        params=(
            *block_tile(128), *thread_tile(),
            Param("fix", "pad", ("none", "pad", "swizzle", "raw"),
                  "shared layout of the scattered tile: none (vectorized's rows + 4), pad "
                  "(128/BK floats per 4 rows), swizzle (column XOR (k/4)*(128/BK)), raw "
                  "(unpadded: conflicted control)", ("cuda",)),
            group(16), *SWITCHES, num_warps(8), num_stages(),
        ),
    ),
    Stage(
        "warptiling",
        "block tile -> warp tile -> thread tile: each warp computes a compact WM x WN region "
        "from one-wavefront LDS.128 fragments, double-buffered in registers; split-K for shapes "
        "with few output tiles",
        published=70.9,
        params=(
            *warp_block_tile(),
            Param("BK", 16, (8, 16, 32), "k-step of the shared tiles", ("cuda",)),
            *warp_tile(),
            Param("WNITER", 4, (1, 2, 4, 8), "warp subtiles across a warp tile's columns",
                  ("cuda",)),
            Param("TM", 8, (4, 8), "rows of a thread's tile in one warp subtile", ("cuda",)),
            Param("TN", 4, (4, 8), "columns of a thread's tile in one warp subtile", ("cuda",)),
            Param("frags", 2, (1, 2), "fragment register sets (2: k+1 loaded while k computes)",
                  ("cuda",)),
            group(16), *SWITCHES,
            Param("splitk", SPLITK_AUTO, (SPLITK_AUTO, *SPLITK_CHOICES),
                  "K splits: partial tiles into a workspace, then a fixed-order sum (2 kernels); "
                  "0 = chosen from the shape (lab/base/splitk.py: only with fewer tiles than SMs "
                  "and a long K; the params column shows the split that ran)"),
            *triton_tile(),
            num_warps(8), num_stages(3),
            Param("realign", False, (False, True),
                  "Triton: copy an A or B whose leading dimension is not a multiple of 16 (or "
                  "base not 16-byte aligned) into an aligned buffer in every call (timed, before "
                  "the split-K kernel and its sum), for 16-byte loads",
                  ("triton",)),
        ),
    ),
    Stage(
        "double_buffered",
        "warp-tiled GEMM whose copies overlap the FMAs: two shared buffers filled through "
        "registers with one barrier per k-step (pipeline=regs) or a cp.async ring of 2-4 tiles "
        "(pipeline=cp_async); fragments prefetched a k-step ahead",
        params=(
            *warp_block_tile(),
            Param("BK", 16, (8, 16, 32), "k-step of the shared tiles (a multiple of 8)",
                  ("cuda",)),
            *warp_tile(),
            Param("TM", 8, (4, 8, 16),
                  "rows of a thread's whole register tile ((WM/TM)*(WN/TN) = 32 lanes)",
                  ("cuda",)),
            Param("TN", 16, (4, 8, 16), "columns of a thread's whole register tile", ("cuda",)),
            Param("pipeline", "regs", ("regs", "cp_async"),
                  "regs: global -> registers -> the other shared buffer, one barrier per k-step; "
                  "cp_async: global -> shared with cp.async, `stages` tiles in a ring",
                  ("cuda",)),
            Param("stages", 2, (2, 3, 4), "cp.async ring depth (pipeline=regs: 2)", ("cuda",)),
            group(16), *SWITCHES,
            *triton_tile(),
            num_warps(8),
            Param("num_stages", 3, (2, 3, 4, 5),
                  "Triton software-pipeline depth (tiles in flight; no effect when interpreted)",
                  ("triton",)),
            Param("realign", False, (False, True),
                  "Triton: copy an A or B whose leading dimension is not a multiple of 16 (or "
                  "base not 16-byte aligned) into an aligned buffer in every call (timed), for "
                  "16-byte loads",
                  ("triton",)),
        ),
    ),
    Stage(
        "gemv",
        "thin products (matrix-vector): no tiles, A streamed once with 16-byte loads into "
        "registers, B reused across a thread's rows, sums by warp shuffles; split-K with a "
        "fixed-order sum where the rows cannot fill the GPU (any N runs, a wide one slowly)",
        builds_on="coalesced",  # a side branch: one output per thread again, no tiles
        built_for="matrix-vector stage (thin N)",
        params=(
            Param("ncol", 0, (0, 1, 2, 4, 8),
                  "columns of C per block (0 = the power of two at or above N, at most 8)",
                  ("cuda",)),
            Param("rows", 0, (0, 1, 2, 4, 8),
                  "row-major A: rows per thread, each load of B serving all of them (0 = 4 for "
                  "1 or 2 columns, 2 for 4, 1 for 8)", ("cuda",)),
            Param("lanes", 0, (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
                  "row-major A: threads sharing a row's K (0 = from K: every lane gets a full "
                  "batch of loads, at most the block)", ("cuda",)),
            Param("kunroll", 2, (1, 2, 4, 8),
                  "16-byte loads per row in flight per thread (at most: lowered where rows and "
                  "columns leave fewer registers; the params column shows what runs)",
                  ("cuda",)),
            Param("warps", 8, (2, 4, 8, 16), "warps per block", ("cuda",)),
            *SWITCHES,
            Param("splitk", SPLITK_AUTO, (SPLITK_AUTO, *SPLITK_CHOICES),
                  "K splits: partial sums into a workspace, then a fixed-order sum (2 kernels); "
                  "0 = chosen from the shape (blocks x split near 32 per SM, at least 64 KiB "
                  "of A per block; the params column shows the split that ran)"),
            Param("BLOCK_M", 0, (0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
                  "Triton rows per program (0 = 4 for a row-major A, 32 x the 16-byte vector "
                  "for a column-major one)", ("triton",)),
            Param("BLOCK_N", 0, (0, 1, 2, 4, 8, 16),
                  "Triton columns per program (0 = the power of two at or above N, at most 8)",
                  ("triton",)),
            Param("BLOCK_K", 0, (0, 16, 32, 64, 128, 256, 512, 1024, 2048),
                  "Triton k-step (0 = what fills 4 16-byte loads per thread)", ("triton",)),
            num_warps(4), num_stages(1),
        ),
    ),
    Stage(
        "mma",
        "tensor cores: each warp's tile is mma.sync instructions (m16n8k16 bf16/fp16, m16n8k8 "
        "TF32, 3xTF32 as three TF32 products) fed by ldmatrix from XOR-swizzled shared memory "
        "and a cp.async ring",
        builds_on="double_buffered",  # the cp.async ring; gemv is a side branch
        params=(
            Param("BM", 0, (0, 64, 128, 256),
                  "block tile rows (0: per precision, 256 for tf32/bf16/fp16, 128 for 3xtf32; "
                  "128 when that grid has fewer blocks than the GPU has SMs)", ("cuda",)),
            Param("BN", 0, (0, 64, 128, 256),
                  "block tile columns (0: per precision, 128; 64 for 3xtf32)", ("cuda",)),
            Param("BK", 0, (0, 16, 32, 64),
                  "k-step of the shared tiles (0: per precision, 128 bytes, i.e. 64 bf16/fp16 or "
                  "32 TF32; 16 for 3xtf32, and for tf32 on small problems)", ("cuda",)),
            Param("WM", 0, (0, 32, 64, 128),
                  "warp tile rows, BM/WM x BN/WN warps (0: per precision, 128 for bf16/fp16, 64 "
                  "for tf32, 32 for 3xtf32)", ("cuda",)),
            Param("WN", 0, (0, 32, 64, 128),
                  "warp tile columns (0: per precision, 32 for bf16/fp16, 64 for tf32/3xtf32)",
                  ("cuda",)),
            Param("STAGES", 0, (0, 2, 3, 4),
                  "cp.async ring depth, tiles in shared memory (0: per precision, 4 for tf32, 3 "
                  "for the others)", ("cuda",)),
            Param("frags", 0, (0, 1, 2),
                  "fragment register sets (2: the next k-step's ldmatrix during this one's mma; "
                  "0: 2, except 1 for 3xtf32)", ("cuda",)),
            group(8),
            Param("BLOCK_M", 128, (64, 128, 256), "Triton block tile rows", ("triton",)),
            Param("BLOCK_N", 128, (64, 128, 256), "Triton block tile columns", ("triton",)),
            Param("BLOCK_K", 0, (0, 32, 64, 128),
                  "Triton k-step (0: 128 bytes, i.e. 64 bf16/fp16 or 32 TF32)", ("triton",)),
            Param("GROUP_M", 8, (1, 4, 8, 16), "Triton tile-rows walked together (L2 reuse)",
                  ("triton",)),
            num_warps(8),
            Param("num_stages", 3, (2, 3, 4, 5),
                  "Triton software-pipeline depth (no effect when interpreted)", ("triton",)),
        ),
    ),
    Stage(
        "wgmma",
        "Hopper's warpgroup MMA (wgmma.mma_async, sm_90 only): 4 warps multiply a 64 x BN tile "
        "with A from registers and B read by the tensor cores straight from 128-byte-swizzled "
        "shared memory, fed by a cp.async ring; operands it cannot read are copied in the call",
        params=(
            Param("WGS", 0, (0, 1, 2, 3),
                  "warpgroups per block, 64 rows each (0: per precision, 2)", ("cuda",)),
            Param("BN", 0, (0, 64, 128, 192, 256),
                  "block tile columns (0: per precision, 256; 128 for 3xtf32)", ("cuda",)),
            Param("STAGES", 0, (0, 3, 4, 5, 6),
                  "cp.async ring slots (0: per precision, 4)", ("cuda",)),
            Param("COPY_AT", 0, (0, 2),
                  "where each tile's copy goes out: 0 before the tile's wgmma, 2 after",
                  ("cuda",)),
            Param("LOAD_FIRST", -1, (-1, 0, 1),
                  "A' fragment loads before the next tile's copy (1) or after it (0) (-1: per "
                  "precision, 1 for 3xtf32, 0 for the others)", ("cuda",)),
            Param("SUM_TILES", -1, (-1, 0, 1, 2),
                  "3xtf32: k-tiles per fresh sum added in fp32 (0: the tensor core's own sum "
                  "over all of K, 25x cuBLAS fp32's error; -1: 2; no effect in other "
                  "precisions)", ("cuda",), numerics=True),
            group(8),
            Param("BLOCK_M", 128, (64, 128, 256), "Triton block tile rows", ("triton",)),
            Param("BLOCK_N", 0, (0, 64, 128, 256),
                  "Triton block tile columns (0: per precision, 256 for tf32/bf16/fp16, 128 "
                  "when that grid has fewer programs than the GPU has SMs, and for 3xtf32)",
                  ("triton",)),
            Param("BLOCK_K", 0, (0, 32, 64, 128),
                  "Triton k-step (0: per precision, 128 bytes, i.e. 64 bf16/fp16 or 32 TF32; 64 "
                  "for 3xtf32)", ("triton",)),
            Param("GROUP_M", 8, (1, 4, 8, 16), "Triton tile-rows walked together (L2 reuse)",
                  ("triton",)),
            num_warps(8),
            Param("num_stages", 0, (0, 2, 3, 4, 5),
                  "Triton software-pipeline depth (0: per precision, 4; 3 for 3xtf32; no effect "
                  "when interpreted)", ("triton",)),
            Param("kmajor_b", -1, (-1, 0, 1),
                  "Triton: copy an N-major B K-major in every call (timed) before the kernel; "
                  "TF32 wgmma reads 32-bit operands K-major only (-1: per precision, on for "
                  "tf32/3xtf32, off for bf16/fp16)", ("triton",)),
            Param("regs_mn", -1, (-1, 0, 1),
                  "Triton, tf32: feed the operand that is not K-major to wgmma from registers "
                  "(computing C^T = B^T A^T where B is N-major) instead of copying it; it rounds "
                  "that operand to nearest TF32 where the tensor core would truncate it (-1: on "
                  "for tf32; no effect in other precisions)", ("triton",), numerics=True),
        ),
    ),
    # Hopper's own path (sm_90 only): TMA loads into swizzled shared memory, mbarrier rings, wgmma
    # with both operands in shared memory (docs/stages/tma_wgmma.md and the pages after it).
    Stage(
        "tma_wgmma",
        "Hopper's TMA (sm_90 only): one thread loads each tile with a tensor map into 128-byte-"
        "swizzled shared memory, an mbarrier ring tracks the slots, and wgmma reads both operands "
        "from shared memory (every 16-bit layout as it lies)",
        params=(
            Param("WGS", 0, (0, 1, 2, 3),
                  "warpgroups per block, 64 rows each (0: 2)", ("cuda",)),
            Param("BN", 0, (0, 64, 128, 192, 256), "block tile columns (0: 256)", ("cuda",)),
            Param("STAGES", 0, (0, 2, 3, 4, 5, 6, 7, 8), "ring slots (0: 4)", ("cuda",)),
            group(8),
            *hopper_triton(),
        ),
    ),
    Stage(
        "warp_specialized",
        "tma_wgmma's tiles split by role: a producer warpgroup only issues TMA loads (its "
        "registers given to the others with setmaxnreg), two consumer warpgroups only issue wgmma "
        "(Triton: Gluon's explicit warp_specialize)",
        params=(
            Param("CONSUMERS", 0, (0, 1, 2),
                  "consumer warpgroups per block, 64 rows each (0: 2)", ("cuda",)),
            Param("BN", 0, (0, 64, 128, 192, 256),
                  "block tile columns (0: 256; 128 for 3xtf32)", ("cuda",)),
            Param("STAGES", 0, (0, 2, 3, 4, 5, 6, 7, 8), "ring slots (0: 4)", ("cuda",)),
            group(8),
            Param("BLOCK_M", 128, (64, 128, 256),
                  "Triton block tile rows, split over the consumer warps (at most 32 rows per "
                  "warp: 256 needs num_warps=8)", ("triton",)),
            Param("BLOCK_N", 0, (0, 64, 128, 256),
                  "Triton block tile columns (0: 256; 128 when that grid has fewer tiles than the "
                  "GPU has SMs)", ("triton",)),
            Param("BLOCK_K", 0, (0, 32, 64, 128),
                  "Triton k-step (0: 128 bytes, i.e. 64 bf16/fp16 or 32 TF32)", ("triton",)),
            Param("GROUP_M", 8, (1, 4, 8, 16), "Triton tile-rows walked together (L2 reuse)",
                  ("triton",)),
            Param("num_warps", 8, (4, 8),
                  "Triton consumer warps (two warpgroups at 8); Gluon adds the producer's warp, "
                  "rounded to a warpgroup", ("triton",)),
            Param("num_stages", 0, (0, 2, 3, 4, 5),
                  "Triton ring slots, TMA loads in flight (0: 4; at least 2)", ("triton",)),
            Param("kmajor", -1, (-1, 0, 1),
                  "Triton: copy an operand that is not K-major into a K-major buffer in every call "
                  "(timed); required in tf32 (-1: on for tf32, off for bf16/fp16)", ("triton",)),
        ),
    ),
    Stage(
        "persistent",
        "one resident block per SM walks the output tiles: a producer warpgroup's TMA ring runs on "
        "across tiles (each tile's stores overlap the next tile's loads), and clusters of two "
        "blocks share each B tile through TMA multicast",
        params=(
            Param("CONSUMERS", 0, (0, 1, 2, 3),
                  "consumer warpgroups per block, 64 rows each (0: 2; 3 for fp8_block; 3 takes "
                  "BN 64 or 128)", ("cuda",)),
            Param("BN", 0, (0, 64, 128, 192, 256),
                  "block tile columns (0: 256; 128 for 3xtf32 and fp8_block)", ("cuda",)),
            Param("STAGES", 0, (0, 2, 3, 4, 5, 6, 7, 8), "ring slots (0: 4)", ("cuda",)),
            Param("CLUSTER", 0, (0, 1, 2),
                  "blocks per cluster sharing each B tile by TMA multicast (0: 1 where C goes out "
                  "through TMA stores, 2 where C's lines are not 16-byte aligned and it is stored "
                  "from registers)", ("cuda",)),
            Param("STORE", 0, (0, 1, 2),
                  "how C leaves the block (0: 1; 1: through shared memory and TMA stores; 2: from "
                  "registers, the lesson's epilogue: STORE=2,CLUSTER=1 runs "
                  "cuda_kernels/persistent.cu, anything else its variant file)", ("cuda",)),
            Param("SPLITK", 0, (0, 1, 2, 3, 4, 5, 6, 8, 12, 16),
                  "bf16, fp16, fp8: K cut into this many ranges, each its own work unit (few "
                  "output tiles, long K); fp32 partial sums in a workspace, added in a fixed "
                  "order by a second kernel, cuda_kernels/splitk_reduce.cu (0: 1, no split)",
                  ("cuda",)),
            Param("STREAMK", 0, (0, 1),
                  "bf16, fp16, fp8: 1 cuts the tiles' k-tiles into one equal range per block "
                  "(stream-K: every SM the same work where the tiles do not divide evenly among "
                  "the SMs); a whole tile's C stored directly, the parts of the others added by "
                  "the same second kernel (0: off)", ("cuda",)),
            group(8),
            *hopper_triton(persistent=True),
        ),
    ),
    # A side branch for decode-shaped layers (docs/stages/decode.md): few rows of activations
    # times a large weight matrix, bound by reading the weights once.
    Stage(
        "decode",
        "decode-shaped products (M up to 64, or N up to 64 through C^T = B^T A^T): the weight "
        "matrix streamed once from DRAM straight into mma.sync fragments with 16-byte loads, K "
        "split over enough blocks to fill the GPU, the partial sums added in a fixed order",
        builds_on="mma",  # mma.sync fragments, loaded from global memory instead of ldmatrix
        built_for="decode shapes (M or N up to 64)",
        square_run=False,  # measured on the Llama and DeepSeek layers: docs/stages/decode.md
        params=(
            Param("tiles", 0, (0, 1, 2, 4),
                  "16-row tiles of the weight matrix per warp, each activation fragment serving "
                  "all of them (0: 1)", ("cuda",)),
            Param("warps", 4, (2, 4, 8), "warps per block, each its own rows of the weights",
                  ("cuda",)),
            Param("kunroll", 0, (0, 1, 2, 4, 8),
                  "64-byte steps along K per row in flight per thread (0: 4 for up to 16 "
                  "activation rows, 2 beyond; the params column shows what runs)", ("cuda",)),
            *SWITCHES,
            Param("splitk", SPLITK_AUTO, (SPLITK_AUTO, *SPLITK_CHOICES),
                  "K splits: each block sums its share of K, the last block of a tile to finish "
                  "adds the partial tiles in split order (one kernel); 0 = chosen from the shape "
                  "(the params column shows the split that ran)"),
            Param("BLOCK_N", 0, (0, 32, 64, 128, 256),
                  "Triton weight rows (columns of C) per program (0: 64)", ("triton",)),
            Param("BLOCK_K", 0, (0, 64, 128, 256, 512),
                  "Triton k-step (0: 256 bytes of a weight row: 128 bf16/fp16, 256 fp8)",
                  ("triton",)),
            num_warps(4),
            Param("num_stages", 3, (1, 2, 3, 4, 5),
                  "Triton software-pipeline depth (no effect when interpreted)", ("triton",)),
        ),
    ),
)

BY_NAME = {s.name: s for s in STAGES}
# The rule for a call lab.matmul's `auto` finds no measured entry for (lab/dispatch.py,
# docs/DISPATCH.md, "The rule"): the first line whose architecture, shape class and precision
# match names the stage; its CUDA launcher is tried before its Triton twin. "sm_90a": a GPU of
# compute capability 9.0 (H100, H200); "other": any other GPU. "thin": min(M, N) <= 64
# (lab/dispatch.py THIN).
FALLBACK_RULE = (
    ("sm_90a", "thin", ("bf16", "fp16", "fp8"), "decode"),
    ("sm_90a", "any", ("bf16", "fp16", "fp8", "tf32", "3xtf32"), "persistent"),
    ("sm_90a", "any", ("fp32",), "warptiling"),
    ("other", "any", ("tf32", "3xtf32", "bf16", "fp16"), "mma"),
    ("other", "any", ("fp32",), "warptiling"),
)
# lab.doctor's launch probe (lab.matmul with no stage runs AUTO: lab/dispatch.py chooses one)
DEFAULT_STAGE = "vectorized"
# `auto` on its own: the lab picks the stage, backend and parameters of a call (lab/dispatch.py):
# lab.matmul's default and `lab.compare --stage auto`. AUTO_STAGE stands for it in a Variant; it
# is no rung of the ladder (not in STAGES) and has no launcher.
AUTO = "auto"
AUTO_STAGE = Stage(AUTO, "the lab picks the stage, backend and parameters for each row's GPU, "
                         "shape, precision and layout, as lab.matmul does when no stage is named "
                         "(docs/DISPATCH.md)")


def get_stage(name: str) -> Stage:
    try:
        return BY_NAME[name.strip().lower()]
    except KeyError:
        raise LabError(
            f"unknown stage {name!r}; valid stages are: {', '.join(BY_NAME)}"
        ) from None


def parse_variants(specs: list[str], dispatch: bool = False) -> list[Variant]:
    """Turn `--stage` values into variants.

    Each value is a comma list of `stage` or `stage:param=value` items; a `param=value` item with no
    stage name continues the previous item's parameters, so `tiled_rect:rows=8,cols=32,naive` works.
    `all` means every registered stage with its defaults. `stage:auto` is a variant flagged `auto`
    (label `stage:auto`): each row runs the autotuner's cached winner (lab.autotune), or the
    defaults when none is cached; it takes no explicit parameters. With `dispatch` (lab.compare),
    `auto` on its own is the lab's choice of stage for each row (Variant(AUTO_STAGE), label
    `auto`, lab/dispatch.py); elsewhere it is refused in one sentence.
    """
    def no_auto_with_params(name: str, assignments: list[str]) -> None:
        explicit = ",".join(a.strip() for a in assignments if a.strip().lower() != "auto")
        raise LabError(f"{name}:auto picks its parameters from the autotuner's cache, so it cannot "
                       f"be combined with explicit ones ({explicit}); use {name}:auto or "
                       f"{name}:{explicit}")

    items: list[tuple[str, list[str]]] = []
    for spec in specs:
        start = len(items)  # this value's first item: `auto` refers back only within it
        for piece in (p.strip() for p in spec.split(",")):
            if not piece:
                continue
            if ":" in piece:
                name, first = piece.split(":", 1)
                items.append((name.strip(), [first] if first else []))
            elif piece.lower() == AUTO:
                if len(items) > start and any(a.strip().lower() != AUTO for a in items[-1][1]):
                    no_auto_with_params(items[-1][0], items[-1][1] + ["auto"])
                if not dispatch:
                    raise LabError("'auto' follows a stage name here, as in vectorized:auto (the "
                                   "tuner's configuration of vectorized); auto on its own, the "
                                   "lab's choice of stage, is for lab.compare and lab.matmul")
                items.append((AUTO, []))
            elif "=" in piece:
                if not items:
                    raise LabError(f"parameter {piece!r} must follow a stage name, as in tiled:{piece}")
                items[-1][1].append(piece)
            else:
                items.append((piece, []))
    if not items:
        raise LabError("no stage given; use --stage NAME (see --list) or --stage all")

    variants: list[Variant] = []
    for name, assignments in items:
        if dispatch and name.strip().lower() == AUTO:
            if assignments:
                raise LabError(f"auto (the lab's choice of stage) takes no parameters "
                               f"({','.join(assignments)}); name a stage to set them, such as "
                               f"persistent:{assignments[0]}, or NAME:auto for the tuner's "
                               f"configuration of one stage")
            if all(not v.dispatch for v in variants):
                variants.append(Variant(AUTO_STAGE, {}))
            continue
        if name.lower() == "all":
            if assignments:
                raise LabError("'all' takes no parameters; name a stage to set parameters")
            variants += [Variant(s, s.defaults(), implicit=True) for s in STAGES]
            continue
        stage = get_stage(name)
        params = stage.defaults()
        if any(a.strip().lower() == "auto" for a in assignments):
            if len(assignments) > 1:
                no_auto_with_params(name, assignments)
            variant = Variant(stage, params, auto=True)
            if all(v.label != variant.label for v in variants):
                variants.append(variant)
            continue
        specs_by_name = {p.name: p for p in stage.params}
        for assignment in assignments:
            key, sep, value = assignment.partition("=")
            key = key.strip()
            if not sep or not value.strip():
                raise LabError(f"stage parameter {assignment!r} must be written name=value")
            if key not in specs_by_name:
                known = ", ".join(specs_by_name) or "none"
                raise LabError(f"stage {name} has no parameter {key!r} (its parameters: {known})")
            params[key] = specs_by_name[key].parse(name, value.strip())
        variant = Variant(stage, params)
        if all(v.label != variant.label for v in variants):
            variants.append(variant)
    return variants
