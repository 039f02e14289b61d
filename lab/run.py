"""Run a RunSpec (what lab.compare was asked for): for every shape, the cuBLAS baseline, then
every stage variant x backend.

GPU mode: each row is checked (NaN-poisoned output vs a float64 reference) and, only if it passes,
timed. CPU mode (no GPU): Triton rows run under the Triton interpreter and are checked; CUDA rows
are compiled with NVRTC for sm_90 and report their resources; nothing is timed.

A row that fails (wrong values, NaN, a compile error, an exception in a launcher) is recorded as
failed and the run goes on; nothing else is lost.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Callable

from lab import check as chk
from lab.axes import LAYOUTS
from lab.base.errors import LabError
from lab.base.precisions import RECORDS as PRECISION_RECORDS
from lab.base.precisions import get as get_precision
from lab.row import Row
from lab.shapes import Shape
from lab.stages import AUTO, Variant

# The Triton interpreter runs every program in numpy: keep CPU-mode problems small.
CPU_MAX_WORK = 256**3
# How each stage row's cuBLAS baseline is timed (lab/timing.py's header): adjacent = interleaved
# with the row's own repetitions; once = the shape's cuBLAS row, timed before every stage.
CUBLAS_TIMINGS = ("adjacent", "once")


@dataclass
class RunSpec:
    variants: list[Variant]
    backends: list[str]
    shapes: list[Shape]
    precision: str | list[str] = "fp32"  # one precision or a list (lab/stages.py PRECISIONS)
    seed: int = 0
    mode: str = "gpu"
    rep_ms: float = 100.0
    cublas: bool = True
    transfers: bool = False  # also time host -> device -> host around each launch
    api: bool = False  # also time each stage row as a user's lab.matmul call (its plan cached)
    layouts: list[str] = field(default_factory=lambda: ["nn"])  # BLAS names: nn, nt, tn, tt
    notes: list[str] = field(default_factory=list)
    repeat: int = 1  # run the whole spec this many times (fresh inputs: seed + repeat index)
    cublas_timing: str = "adjacent"  # adjacent: cuBLAS timed beside each row | once: per shape
    # shape suites (lab/suites.py, --sizes llm): the layouts a suite's shape runs in instead of
    # `layouts` (when --layout was not given), and the (model, layer) label of the rows of a
    # (shape, layout); shapes not in them run in `layouts`, unlabelled
    shape_layouts: dict[Shape, list[str]] = field(default_factory=dict)
    labels: dict[tuple[Shape, str], tuple[str, str]] = field(default_factory=dict)

    def layouts_for(self, shape: Shape) -> list[str]:
        """The layouts this shape's rows run in."""
        return self.shape_layouts.get(shape, self.layouts)

    @property
    def precisions(self) -> list[str]:
        return [self.precision] if isinstance(self.precision, str) else list(self.precision)

    def runs(self, variant: Variant, backend: str, precision: str) -> bool:
        """Whether this stage x backend computes in `precision` (others are not run: see
        unsupported()). `auto` (the lab's choice, lab/dispatch.py) is one row per shape, layout
        and precision, whatever backend it picks: it runs under the first backend listed."""
        if variant.dispatch:
            return backend == self.backends[0]
        return precision in variant.stage.precisions_for(backend)

    @property
    def dispatch_backend(self) -> str | None:
        """The backend `auto` rows must choose from: the one --backend named, or None (any)."""
        return self.backends[0] if len(self.backends) == 1 else None

    def unsupported(self) -> list[str]:
        """'stage backend precision' for each combination of the spec that is not run."""
        return [f"{v.label} {b} {p}" for p in self.precisions for v in self.variants
                if not v.dispatch for b in self.backends if not self.runs(v, b, p)]

    @property
    def n_rows(self) -> int:
        rows = 0
        for p in self.precisions:
            rows += sum(self.runs(v, b, p) for v in self.variants for b in self.backends)
            rows += self.mode == "gpu" and self.cublas
        return rows * sum(len(self.layouts_for(s)) for s in self.shapes) * self.repeat


def detect_mode(requested: str = "auto") -> str:
    """'gpu' when CUDA is usable, else 'cpu'. In CPU mode Triton must run under its interpreter,
    which has to be switched on before any @triton.jit kernel is imported."""
    import torch

    has_gpu = torch.cuda.is_available()
    if requested == "gpu" and not has_gpu:
        raise LabError("--mode gpu was asked for but no CUDA GPU is visible to torch; "
                       "run on a GPU machine or drop --mode gpu")
    mode = requested if requested != "auto" else ("gpu" if has_gpu else "cpu")
    if mode == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    return mode


def validate(spec: RunSpec) -> None:
    """Everything that can be said about a spec before anything is allocated or compiled."""
    from lab.stages import PRECISIONS

    for p in spec.precisions:
        if p not in PRECISIONS:
            raise LabError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    for v in spec.variants:
        if v.implicit or v.dispatch:  # 'all': a stage without these precisions is skipped;
            continue                  # auto: each row's choice is checked when it is made
        if not any(spec.runs(v, b, p) for b in spec.backends for p in spec.precisions):
            offered = "; ".join(f"{b}: {', '.join(v.stage.precisions_for(b)) or 'none'}"
                                for b in spec.backends)
            raise LabError(f"stage {v.stage.name} computes in none of the precisions asked for "
                           f"({', '.join(spec.precisions)}); it offers {offered}")
        for backend in spec.backends:  # each launcher's own parameter rules (its OFFER)
            offer = v.stage.offer(backend)
            for p in spec.precisions:
                if p in offer.precisions:
                    offer.validate(v.params_for(backend), p)
    if not any(spec.runs(v, b, p) for v in spec.variants for b in spec.backends
               for p in spec.precisions):
        raise LabError(f"none of the stages asked for computes in {', '.join(spec.precisions)} "
                       f"on {', '.join(spec.backends)}; python -m lab.compare --list shows each "
                       f"stage's precisions")
    target = built_for(spec)
    for v in spec.variants:  # a stage named for a GPU it does not run on: one sentence
        if v.implicit or v.dispatch or target is None:
            continue
        why = [not_here(spec, target, v, b, p) for b in spec.backends for p in spec.precisions
               if spec.runs(v, b, p)]
        if why and all(why):
            raise LabError(f"stage {v.stage.name} {why[0]}, and {target[1]}; python -m "
                           f"lab.compare --list says where each stage runs")
    if not isinstance(spec.repeat, int) or spec.repeat < 1:
        raise LabError(f"--repeat must be a whole number of 1 or more, not {spec.repeat}")
    if spec.cublas_timing not in CUBLAS_TIMINGS:
        raise LabError(f"unknown cuBLAS timing {spec.cublas_timing!r}; choose from "
                       f"{', '.join(CUBLAS_TIMINGS)}")
    if spec.transfers and spec.mode != "gpu":
        raise LabError("--include-transfers times host<->device copies and needs a CUDA GPU; "
                       "run it on a GPU machine")
    for layout in dict.fromkeys([*spec.layouts, *(x for s in spec.shapes
                                                   for x in spec.layouts_for(s))]):
        if layout not in LAYOUTS:
            raise LabError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)} (first "
                           f"letter A, second B; t = the operand is stored transposed)")
    for s in spec.shapes:  # beyond every GPU in either mode (CPU mode would only compile it)
        need = bytes_needed(s)
        if need > MAX_BYTES:
            raise LabError(f"size {s} needs about {need / 2**40:,.0f} TiB for its operands, "
                           f"result and float64 reference, more than any GPU holds (the largest "
                           f"hold well under {MAX_BYTES // 2**40} TiB); choose smaller sizes")
    if spec.mode != "cpu":
        check_memory(spec.shapes)


MAX_BYTES = 2**40  # a size needing more than this (1 TiB) is refused in every mode


def built_for(spec: RunSpec) -> tuple[tuple[int, int], str] | None:
    """(compute capability, words) of the GPU the run's kernels must run on: GPU mode's GPU
    ("this GPU, NVIDIA A100-SXM4-80GB, is compute capability 8.0 (sm_80)"), or in CPU mode the
    architecture LAB_CUDA_ARCH names for the CUDA builds; None where nothing narrows it (CPU mode
    builds for sm_90, and the Hopper stages for sm_90a, as they always do; a GPU-mode spec
    checked where no GPU is, as the tests of the commands do)."""
    from lab.base.contract import capability_of, sm

    if spec.mode == "gpu":
        import torch

        from lab.base import device

        if not torch.cuda.is_available():
            return None
        dev = torch.device("cuda", torch.cuda.current_device())
        cc = device.capability(dev)
        return cc, (f"this GPU, {device.gpu_name(dev)}, is compute capability {cc[0]}.{cc[1]} "
                    f"({sm(cc)})")
    arch = os.environ.get("LAB_CUDA_ARCH")
    if arch:
        return capability_of(arch), f"the CUDA builds are for {arch} (LAB_CUDA_ARCH)"
    return None


def not_here(spec: RunSpec, target, variant: Variant, backend: str, precision: str) -> str | None:
    """Why `variant` on `backend` does not run in `precision` on the run's target (built_for),
    as a clause (Offer.runs_on); None where it runs, or where nothing narrows the target (CPU
    mode's Triton rows run under the interpreter)."""
    if target is None or (spec.mode == "cpu" and backend != "cuda"):
        return None
    return variant.stage.offer(backend).runs_on(target[0], precision, variant.params_for(backend))


def interpretable(shape: Shape) -> bool:
    """Whether CPU mode runs Triton rows at this size (the interpreter runs every program in
    numpy: M*N*K up to 256^3, about 1.5 s per row for the tiled stages)."""
    return shape.M * shape.N * shape.K <= CPU_MAX_WORK


def cpu_skips(spec: RunSpec) -> list[Shape]:
    """The shapes whose Triton rows CPU mode skips (CUDA rows are compiled at any size)."""
    if spec.mode != "cpu" or "triton" not in spec.backends:
        return []
    return [s for s in spec.shapes if not interpretable(s)]


def bytes_needed(s: Shape) -> int:
    """GPU memory one shape needs: fp32 A, B, two C's, the float64 reference and its upcast
    inputs, and the 256 MiB L2 flush buffer."""
    from lab.timing import FLUSH_BYTES

    return 4 * (s.M * s.K + s.K * s.N + 2 * s.M * s.N) + 8 * (s.M * s.K + s.K * s.N + s.M * s.N) \
        + FLUSH_BYTES


def check_memory(shapes: list[Shape]) -> None:
    import torch

    free, _total = torch.cuda.mem_get_info()
    for s in shapes:
        need = bytes_needed(s)
        if need > 0.9 * free:
            raise LabError(
                f"size {s} needs about {need / 2**30:.1f} GiB of GPU memory but only "
                f"{free / 2**30:.1f} GiB is free; choose smaller sizes"
            )


def _error_row(row: Row, exc: BaseException) -> Row:
    row.status = "error"
    if isinstance(exc, LabError):
        row.detail = str(exc)
    else:  # a bug in a launcher or a kernel fault: keep the last frame so it can be found
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
        row.detail = f"{type(exc).__name__}: {exc}{where}"
    return row


CUBLAS_PART = "cublas"  # the stage of the unit that holds a shape's cuBLAS row


@dataclass(frozen=True)
class Unit:
    """One piece of a run's work: one stage's rows (both backends; or the cuBLAS row, stage
    CUBLAS_PART) of a shape in one layout and precision, in one repeat. On one GPU the units of a
    shape run together (execute(): one set of inputs, one cuBLAS row); lab/ranks.py hands them
    out to the GPUs of a run one by one, each stage row timed beside a cuBLAS launch on its own
    GPU (work_items)."""

    repeat: int
    shape: Shape
    layout: str
    precision: str
    stage: str = CUBLAS_PART

    @property
    def base(self) -> tuple:
        """(repeat, M, N, K, layout, precision): the shape's inputs, shared by its units."""
        return (self.repeat, *self.shape, self.layout, self.precision)

    @property
    def key(self) -> tuple:
        """(repeat, M, N, K, layout, precision, stage): what names the unit in a CSV."""
        return (*self.base, self.stage)

    def __str__(self) -> str:
        M, N, K = self.shape
        return f"{self.stage} {self.precision} {self.layout} {M}x{N}x{K}, repeat {self.repeat}"


def units(spec: RunSpec) -> list[Unit]:
    """The run's units in the order a single GPU runs them: repeat, shape, layout, precision,
    then the cuBLAS row and each stage listed that computes in the precision."""
    out = []
    for repeat in range(spec.repeat):
        for shape in spec.shapes:
            for layout in spec.layouts_for(shape):
                for precision in spec.precisions:
                    if spec.mode == "gpu" and spec.cublas:
                        out.append(Unit(repeat, shape, layout, precision))
                    for listed in spec.variants:
                        if any(spec.runs(listed, be, precision) for be in spec.backends):
                            out.append(Unit(repeat, shape, layout, precision, listed.label))
    return out


def work_items(spec: RunSpec) -> list[list[Unit]]:
    """What a GPU of a run over several takes at a time: one unit, each stage row timed beside
    a cuBLAS launch of its own GPU; with --cublas-timing once (every row held against the
    shape's one cuBLAS row) all the units of a shape, so that row is timed on their GPU."""
    plan = units(spec)
    if spec.cublas_timing == "adjacent":
        return [[u] for u in plan]
    items: dict[tuple, list[Unit]] = {}
    for u in plan:
        items.setdefault(u.base, []).append(u)
    return list(items.values())


def unit_key(row: Row) -> tuple:
    """The key of the unit a row belongs to (a run without --repeat has repeat None: 0)."""
    return (row.repeat or 0, row.M, row.N, row.K, row.layout, row.precision, row.stage)


def execute(spec: RunSpec, on_row: Callable[[Row], None] | None = None,
            only: list[Unit] | None = None, gpu_columns: bool = False) -> list[Row]:
    """Run the spec's units (or `only` those) and return their rows. `gpu_columns`: fill each
    row's gpu_index, gpu_name and gpu_uuid (a run over several GPUs, lab/ranks.py)."""
    import torch

    from lab.occupancy import SM90, from_device

    validate(spec)
    device = "cuda" if spec.mode == "gpu" else "cpu"
    limits = from_device() if spec.mode == "gpu" else SM90  # CPU mode: the H100's limits
    rows: list[Row] = []
    gpu = _GpuInfo.read() if spec.mode == "gpu" else None
    ident = gpu_identity() if gpu_columns and spec.mode == "gpu" else None

    def emit(row: Row) -> None:
        if row.status in ("pass", "compiled", "fail"):
            _fill_occupancy(row, limits)
        if ident:
            row.gpu_index, row.gpu_name, row.gpu_uuid = ident
        rows.append(row)
        if on_row:
            on_row(row)

    groups: dict[tuple, list[Unit]] = {}  # the units of a shape share its inputs
    for unit in units(spec) if only is None else only:
        groups.setdefault(unit.base, []).append(unit)
    for group in groups.values():
        unit = group[0]
        runs = spec.mode == "gpu" or interpretable(unit.shape)
        _run_precision(spec, unit.shape, unit.layout, unit.precision, spec.seed + unit.repeat,
                       unit.repeat, runs, gpu, emit, stages={u.stage for u in group})
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def gpu_identity() -> tuple[int, str, str]:
    """(index, name, UUID) of the current CUDA device, as nvidia-smi names them."""
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid and not uuid.startswith("GPU-"):
        uuid = f"GPU-{uuid}"
    return index, props.name, uuid


# the start of a row's detail where CPU mode skips a Triton row for its size (lab.compare says so
# once, above the table)
SIZE_SKIP = "CPU mode runs Triton under its interpreter only"


def _run_precision(spec: RunSpec, shape: Shape, layout: str, precision: str, seed: int, repeat: int,
                   runs: bool, gpu, emit, stages: set | None = None) -> None:
    """The rows of one shape in one layout and precision: the cuBLAS row and each stage's, or
    those of the units in `stages` (their Unit.stage; None: all)."""
    import torch

    from lab.base.dtypes import DTYPE_NAMES, OUT_DTYPE_NAMES

    M, N, K = shape
    device = "cuda" if spec.mode == "gpu" else "cpu"
    target = built_for(spec)  # the GPU (or LAB_CUDA_ARCH's build) rows must run on
    # fp8: e4m3 operands with per-tensor scales (scales), the others None
    a, b, scales = chk.inputs_for(precision, M, N, K, seed, device, layout) if runs \
        else (None,) * 3
    # float64 of the operands the kernel receives (times fp8's scales)
    ref = chk.reference(a, b, scales) if runs else None
    host = (a.cpu(), b.cpu(), torch.empty((M, N), dtype=getattr(torch, OUT_DTYPE_NAMES[precision]))
            ) if spec.transfers else None
    model, layer = spec.labels.get((shape, layout), ("", ""))
    base = dict(precision=precision, M=M, N=N, K=K, mode=spec.mode, seed=seed, layout=layout,
                repeat=repeat if spec.repeat > 1 else None, dtype=DTYPE_NAMES[precision],
                model=model, layer=layer)
    cublas = None  # the checked cuBLAS launch, timed beside each stage row (adjacent)
    wanted = [v for v in spec.variants if stages is None or v.label in stages]
    if spec.mode == "gpu" and spec.cublas:
        if stages is None or CUBLAS_PART in stages:
            row, cublas = _run_cublas(a, b, ref, spec, base, host, gpu, scales)
            emit(row)
        elif wanted:  # the shape's cuBLAS row runs elsewhere: a launch to time beside these
            cublas = _cublas_launch(a, b, precision, scales)
    from lab.tune.auto import resolve_variant

    def run_row(row: Row, variant: Variant, backend: str, api=None) -> None:
        try:
            offer = variant.stage.offer(backend)
            why = not_here(spec, target, variant, backend, precision)
            if why:  # a GPU the kernels do not run on ('all', or one precision of several)
                row.status = "skipped"
                row.detail = f"it {why}, and {target[1]}"
            elif spec.mode == "cpu" and backend == "cuda":
                _compile_only(row, variant, shape, layout, precision)
            elif spec.mode == "cpu" and not offer.interpreted:
                row.status = "skipped"
                row.detail = ("a GPU-only kernel, which the Triton interpreter cannot run "
                              "(run it on an sm_90 GPU)")
            elif not runs:
                row.status = "skipped"
                row.detail = (f"{SIZE_SKIP} up to M*N*K = 256^3; {shape} is larger "
                              f"(run it on a GPU)")
            else:
                _run_stage(row, variant, backend, a, b, ref, spec, host, cublas, gpu,
                           scales, api)
        except Exception as exc:  # the row fails; the run goes on
            _error_row(row, exc)

    for listed in wanted:
        for backend in spec.backends:
            if not spec.runs(listed, backend, precision):
                continue
            if listed.dispatch:  # auto: the lab's choice of stage for this row
                emit(_dispatch_row(spec, shape, layout, precision, base, run_row))
                continue
            try:  # stage:auto -> the tuner's cached winner for this GPU, shape and layout
                variant, auto_note = resolve_variant(listed, backend, M, N, K, layout, precision,
                                                     mode=spec.mode)
            except LabError as exc:  # an unreadable cache: say so, run the defaults
                variant, auto_note = listed, f"auto: {exc}; the defaults run"
            row = Row(stage=listed.label, backend=backend,
                      params=_params(variant, backend), **base)
            run_row(row, variant, backend)
            if auto_note:
                row.detail = f"{auto_note}; {row.detail}" if row.detail else auto_note
            emit(row)


def _dispatch_row(spec: RunSpec, shape: Shape, layout: str, precision: str, base: dict,
                  run_row) -> Row:
    """The row of `auto` (lab/dispatch.py): the stage x backend and parameters the lab picks for
    this GPU (in CPU mode: CPU tensors, whose choice is a Triton kernel the interpreter runs; or,
    with --backend cuda, a CUDA build for sm_90), run like any row. Its stage column reads
    `auto`, its backend column the backend chosen, its params column `stage/backend: what ran`,
    its detail why (one sentence each); a shape no stage can run is an error row."""
    from lab import dispatch
    from lab.stages import get_stage

    only = spec.dispatch_backend
    if spec.mode == "gpu":
        import torch

        target = dispatch.target_of(torch.device("cuda", torch.cuda.current_device()))
    else:
        target = dispatch.SM90_BUILD if only == "cuda" else dispatch.CPU_TENSORS
    try:
        choice = dispatch.choose(*shape, precision, layout, target, only)
    except LabError as exc:
        return Row(stage=AUTO, backend=only or "-", status="error", detail=f"auto: {exc}", **base)
    stage = get_stage(choice.stage)
    variant = Variant(stage, {**stage.defaults(), **choice.params})
    row = Row(stage=AUTO, backend=choice.backend, params=_params(variant, choice.backend), **base)
    run_row(row, variant, choice.backend, api=(AUTO, only))
    row.params = f"{choice.label}: {row.params}"
    note = f"auto: {dispatch.SOURCE_WORDS[choice.source]}: {choice.reason}"
    row.detail = f"{note}; {row.detail}" if row.detail else note
    return row


@dataclass
class _GpuInfo:
    """What the peak of a row needs: compute capability, SM count, and the clock to assume when
    NVML gives no samples (the maximum SM clock)."""

    capability: tuple[int, int]
    sms: int
    max_mhz: float | None

    @classmethod
    def read(cls) -> "_GpuInfo":
        import torch

        from lab import clocks

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        max_mhz = clocks.max_sm_mhz()
        if max_mhz is None:
            try:
                import cupy

                max_mhz = cupy.cuda.Device().attributes["ClockRate"] / 1000.0
            except Exception:
                max_mhz = None
        return cls((props.major, props.minor), props.multi_processor_count, max_mhz)

    def set_peak(self, row: Row) -> None:
        from lab.peaks import peak

        # Under a power cap the clock moves between NVML's samples (an H200 row at 1305 MHz in
        # every sample ran at 730 TFLOPS, the peak of 1350 MHz): hold such a row against the top
        # clock, so that a boost the samples missed is not taken for a timer that missed the work.
        capped = "power_cap" in (row.throttle or "").split("+")
        clock = (self.max_mhz if capped else None) or row.sm_mhz_max or self.max_mhz
        p = peak(row.precision, self.capability, self.sms, clock) if clock else None
        row.peak_gflops = p.gflops if p else None


def _fill_occupancy(row: Row, limits) -> None:
    """Theoretical occupancy from the row's resources and the device's limits."""
    from lab.occupancy import from_resources

    if row.threads is None or row.registers is None:
        return
    occ = from_resources({"threads": row.threads, "registers": row.registers,
                          "smem_static": row.smem_static, "smem_dynamic": row.smem_dynamic}, limits)
    row.blocks_per_sm, row.occupancy, row.occupancy_limiter = (occ.blocks_per_sm, occ.occupancy,
                                                               occ.limiter)
    row.blocks_by_warps, row.blocks_by_regs, row.blocks_by_smem = (occ.blocks_by_warps,
                                                                   occ.blocks_by_regs,
                                                                   occ.blocks_by_smem)


def _params(variant: Variant, backend: str) -> str:
    return ",".join(f"{k}={v}" for k, v in variant.params_for(backend).items())


def _cublas_fp32_ieee():
    """Turn TF32 off for cuBLAS fp32 (like-for-like with IEEE fp32 kernels)."""
    _cublas_mode("fp32")


def _cublas_mode(precision: str) -> None:
    """Set torch's cuBLAS switches for a baseline at `precision`, like for like with the lab's
    kernels: fp32 and 3xtf32 (which stands in for fp32) with TF32 off; tf32 with TF32 on; bf16
    and fp16 with fp32 accumulation throughout (no reduced-precision reductions in split-K)."""
    import torch

    matmul = torch.backends.cuda.matmul
    tf32 = get_precision(precision).cublas_tf32
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if tf32 else "ieee"
    else:  # pragma: no cover - older torch
        matmul.allow_tf32 = tf32
    for flag in ("allow_bf16_reduced_precision_reduction",
                 "allow_fp16_reduced_precision_reduction"):
        if hasattr(matmul, flag):
            setattr(matmul, flag, False)


# What the cuBLAS row of each precision runs (its detail): the precision records' words.
CUBLAS_AT = {r.name: r.cublas for r in PRECISION_RECORDS}

# torch._scaled_mm's use_fast_accum for the fp8 baseline: True, like for like with the lab's fp8
# kernels, which keep every product in wgmma's own accumulator over all of K (False: cuBLAS
# promotes partial sums into fp32 registers every few k-steps, slower and more accurate)
FP8_FAST_ACCUM = True


def scaled_mm_launch(a, b, c, scales, fast_accum: bool = FP8_FAST_ACCUM, kind: str = "tensor"):
    """cuBLAS fp8 as torch exposes it: torch._scaled_mm takes A row-major and B column-major
    (both K-major), K and N multiples of 16 and 16-byte aligned lines. An operand lying the other
    way is copied K-major inside the call; where K or N is not a multiple of 16 (or a line is off
    16 bytes), A and B are copied into zero-padded K-major buffers and C is computed into a padded
    buffer and copied back, also inside the call: what a caller who holds the operands so pays
    (the lab's fp8 kernels pay their own copies likewise). The buffers are made once, here.
    kind: the scales' (a precision record's `scale`): "row" scales go as they are ((M, 1) and
    (1, N), scale_b padded with ones where N is); "block" scales are laid out once, here, as this
    torch's block-wise recipe reads them (block_recipe), which needs fast_accum off."""
    import torch

    sa, sb = scales
    M, K = a.shape
    N = b.shape[1]
    kp, np_ = -(-K // 16) * 16, -(-N // 16) * 16
    if kind == "block":
        layout, why = block_recipe(a.device)
        if layout is None:
            raise LabError(f"torch._scaled_mm has no block-scaled fp8 here: {why}")
        sa, sb = layout(sa, sb)
        fast_accum = False
    elif kind == "row" and np_ != N:
        sb = torch.cat([sb, torch.ones((1, np_ - N), dtype=sb.dtype, device=sb.device)], 1)

    def aligned(t, ld):
        return t.data_ptr() % 16 == 0 and ld % 16 == 0

    fits = (kp == K and np_ == N and (a.stride(1) != 1 or aligned(a, a.stride(0)))
            and (b.stride(0) != 1 or aligned(b, b.stride(1))) and c.is_contiguous())
    if fits:
        def launch():
            x = a if a.stride(1) == 1 else a.contiguous()
            y = b if b.stride(0) == 1 else b.t().contiguous().t()
            torch._scaled_mm(x, y, scale_a=sa, scale_b=sb, out_dtype=c.dtype,
                             use_fast_accum=fast_accum, out=c)
        return launch
    ap = torch.zeros((M, kp), dtype=a.dtype, device=a.device)
    bp = torch.zeros((np_, kp), dtype=b.dtype, device=b.device).t()
    cp = torch.empty((M, np_), dtype=c.dtype, device=c.device)

    def padded():
        ap[:, :K].copy_(a)
        bp[:K, :N].copy_(b)
        torch._scaled_mm(ap, bp, scale_a=sa, scale_b=sb, out_dtype=c.dtype,
                         use_fast_accum=fast_accum, out=cp)
        c.copy_(cp[:, :N])
    return padded


# the scale layouts torch._scaled_mm may take for 1 x 128 (A) and 128 x 128 (B) block scales,
# given the lab's (M, K/128) and (K/128, N/128) tensors: torch's checks (ScaledBlas.cpp,
# is_blockwise_1x128_scaling / is_blockwise_128x128_scaling) want A's scales M-major, and B's
# checked on B^T, so K/128-major, with the other dimension rounded up to 4 in some versions
def col_major(x):
    return x.t().contiguous().t()


def _padded_col_major(x):
    import torch

    r, c = x.shape
    ld = -(-r // 4) * 4
    buf = torch.zeros((c, ld), dtype=x.dtype, device=x.device)
    buf[:, :r] = x.t()
    return buf.t()[:r]


BLOCK_LAYOUTS = {
    "A M-major, B K/128-major": lambda sa, sb: (col_major(sa), col_major(sb)),
    "A M-major, B row-major": lambda sa, sb: (col_major(sa), sb.contiguous()),
    "A M-major, B K/128-major, lines of 4": lambda sa, sb: (col_major(sa),
                                                            _padded_col_major(sb)),
}
_BLOCK_RECIPE: dict = {}


def block_recipe(device):
    """(layout, "") where this torch's _scaled_mm computes the block-scaled product (1 x 128 on A,
    128 x 128 on B) from scales laid out by `layout(sa, sb)`; (None, why) where it refuses every
    layout of BLOCK_LAYOUTS or gives a wrong product with each. Found once per process, on a
    384 x 384 x 640 product with random scales against its float64 reference."""
    import torch

    from lab import check as chk

    key = str(device)
    if key in _BLOCK_RECIPE:
        return _BLOCK_RECIPE[key]
    M, N, K = 384, 384, 640
    a, b, sa, sb = chk.make_scaled_inputs(M, N, K, 7, device, "nt", "block")
    gen = torch.Generator(device=device).manual_seed(8)
    sa = sa * torch.rand(sa.shape, generator=gen, device=device) * 4
    sb = sb * torch.rand(sb.shape, generator=gen, device=device) * 4
    ref = chk.reference(a, b, (sa, sb))
    tried = []
    for name, layout in BLOCK_LAYOUTS.items():
        try:
            xa, xb = layout(sa, sb)
            out = torch._scaled_mm(a, b, scale_a=xa, scale_b=xb, out_dtype=torch.bfloat16,
                                   use_fast_accum=False)
        except Exception as exc:  # refused: the first line of torch's reason
            tried.append(f"{name}: refused ({str(exc).strip().splitlines()[0][:80]})")
            continue
        err = (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()
        if err < 1e-2:
            _BLOCK_RECIPE[key] = (layout, "")
            return _BLOCK_RECIPE[key]
        tried.append(f"{name}: relative error {err:.1e}")
    _BLOCK_RECIPE[key] = (None, "; ".join(tried))
    return _BLOCK_RECIPE[key]


def _run_cublas(a, b, ref, spec: RunSpec, base: dict, host=None, gpu=None, scales=None):
    """The shape's cuBLAS row, and its launch (None if it failed) for the adjacent baselines."""
    precision = base["precision"]
    row = Row(stage="cublas", backend="cublas", cublas_timing=spec.cublas_timing,
              detail=CUBLAS_AT[precision], **base)
    try:
        launch, c, stand_in = _cublas_launch(a, b, precision, scales, with_out=True)
        if stand_in:  # no cuBLAS call computes this product: the speed a user gives up instead
            row.detail = stand_in
            ref = chk.reference(a, b, _unit_scales(a))
        _check_and_time(row, launch, a, b, c, ref, spec, host, gpu=gpu)
        if spec.api and row.status == "pass":  # torch.matmul's own CPU time per call
            row.api_us = _cpu_us(launch, max(10, min(API_CPU_CALLS, int(200 / row.median_ms))))
    except Exception as exc:
        _error_row(row, exc)
    return row, (launch if row.status == "pass" else None)


def cublas_launch(a, b, precision: str, scales=None):
    """The cuBLAS call lab.compare's cuBLAS row times for these operands and precision (with
    `scales` for the fp8 precisions; fp8_block's stand-in where this torch has no block-wise
    call), as a launch callable that writes a C of its own."""
    return _cublas_launch(a, b, precision, scales)


def _unit_scales(a):
    import torch

    return tuple(torch.ones(1, dtype=torch.float32, device=a.device) for _ in range(2))


def _cublas_launch(a, b, precision: str, scales=None, with_out: bool = False):
    """cuBLAS's launch on these operands (torch.matmul, or torch._scaled_mm for the fp8
    precisions), and with `with_out` its output and, where this torch has no cuBLAS call for the
    precision's scales (fp8_block without a block-wise recipe), the row's detail for the stand-in
    it times instead: per-tensor cuBLAS fp8 on the same operands ("" otherwise)."""
    import torch

    from lab.base.dtypes import OUT_DTYPE_NAMES, SCALE_KIND

    c = torch.empty((a.shape[0], b.shape[1]), device=a.device,
                    dtype=getattr(torch, OUT_DTYPE_NAMES[precision]))
    stand_in = ""
    if scales is not None:
        kind = SCALE_KIND[precision]
        if kind == "block" and block_recipe(a.device)[0] is None:
            stand_in = (f"no block-scaled cuBLAS in this torch ({block_recipe(a.device)[1]}): "
                        f"cuBLAS fp8 with per-tensor scales and promoted accumulation "
                        f"(use_fast_accum=False) on the same operands, the speed a user gives "
                        f"up, checked against that product")
            launch = scaled_mm_launch(a, b, c, _unit_scales(a), fast_accum=False)
        else:
            launch = scaled_mm_launch(a, b, c, scales, kind=kind)
    else:
        def launch():  # the switches are process-wide: set them on every call
            _cublas_mode(precision)
            torch.matmul(a, b, out=c)
    return (launch, c, stand_in) if with_out else launch


def _scale_kwargs(scales) -> dict:
    """prepare()'s and lab.matmul's keywords for fp8's scales (none for other precisions)."""
    return {} if scales is None else dict(scale_a=scales[0], scale_b=scales[1])


def _run_stage(row: Row, variant: Variant, backend: str, a, b, ref, spec: RunSpec, host,
               cublas=None, gpu=None, scales=None, api=None) -> None:
    import torch

    from lab.base.dtypes import OUT_DTYPE_NAMES

    module = variant.stage.module(backend)
    c = torch.empty((a.shape[0], b.shape[1]), device=a.device,
                    dtype=getattr(torch, OUT_DTYPE_NAMES[row.precision]))
    launch = module.prepare(a, b, c, precision=row.precision, **variant.params_for(backend),
                            **_scale_kwargs(scales))
    row.set_resources(launch.resources)
    row.setup_ms = launch.setup_ms
    if spec.mode == "cpu":
        result = chk.check(launch, c, ref, a.shape[1], row.precision)
        _apply_check(row, result)
        return
    if backend == "cuda" and launch.build is not None and row.threads:
        from lab.toolchain.nvrtc import occupancy_blocks_per_sm

        row.api_blocks_per_sm = occupancy_blocks_per_sm(launch.build, row.threads,
                                                        row.smem_dynamic or 0)
    _check_and_time(row, launch, a, b, c, ref, spec, host, cublas, gpu)
    if spec.api and row.status == "pass":
        _time_api(row, variant, backend, a, b, c, spec, launch, scales, api)


API_CPU_CALLS = 50  # lab.matmul calls whose CPU time is averaged (no wait between them)
PREPARE_CALLS = 5  # prepare() calls whose CPU time is averaged (--api's prepare_us)


def _cpu_us(fn, calls: int = API_CPU_CALLS) -> float:
    """CPU microseconds per call of fn: `calls` calls back to back, no wait between them (the GPU
    queues the work), the wall time divided; the GPU is waited for before and after."""
    import time

    import torch

    fn()  # one call not counted: the first after a pause pays for what the others share
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return us


def _time_api(row: Row, variant: Variant, backend: str, a, b, c, spec: RunSpec, launch,
              scales=None, api=None) -> None:
    """--api: the row's computation as a user calls it, lab.matmul(a, b, out=c, ...) with the
    row's stage, backend, precision and parameters. Its C must equal the prepared launch's (the
    same kernel on the same inputs); then `api_ms` is its median GPU-visible time (L2 flushed,
    as `median_ms`), timed interleaved with the prepared launch so that `api_ratio` (api_ms over
    the launch's median in the same interleaving) is free of clock drift between the two, and
    `api_us` its CPU time per call once the signature's plan is cached
    (lab/spec.py): API_CPU_CALLS calls back to back, divided; `prepare_us` the CPU time of the
    stage's prepare() for the same call (what every call cost before plans were cached).
    api: (stage, backend) of the call where it is not the row's own: an `auto` row times
    lab.matmul(a, b, stage="auto", backend=<its --backend or None>), the choice included."""
    import torch

    import lab
    from lab.timing import bench_adjacent

    params = variant.params_for(backend)
    want = c.clone()

    def call():
        if api is not None:
            lab.matmul(a, b, stage=api[0], backend=api[1], out=c, precision=row.precision,
                       **_scale_kwargs(scales))
            return
        lab.matmul(a, b, stage=variant.stage.name, backend=backend, out=c,
                   precision=row.precision, **params, **_scale_kwargs(scales))

    c.fill_(float("nan"))
    call()
    if not torch.equal(c, want):
        row.detail = (row.detail + "; " if row.detail else "") + (
            "lab.matmul's C differs from the prepared launch's (not timed)")
        return
    # (not `api`: call() reads that name, and _cpu_us below calls it again)
    called, prepared = bench_adjacent(call, launch, rep_ms=spec.rep_ms)
    row.api_ms, row.api_ratio = called.median_ms, called.median_ms / prepared.median_ms
    # no more calls than fit in about 0.2 s of GPU time (the loop queues them all), at least 10
    row.api_us = _cpu_us(call, max(10, min(API_CPU_CALLS, int(200 / max(row.api_ms, 1e-3)))))
    module = variant.stage.module(backend)
    row.prepare_us = _cpu_us(lambda: module.prepare(a, b, c, precision=row.precision, **params,
                                                    **_scale_kwargs(scales)), PREPARE_CALLS)


def _apply_check(row: Row, result: chk.CheckResult) -> bool:
    row.rel_err, row.max_err_k = result.rel_err, result.max_err_k
    if not result.passed:
        row.status, row.detail = "fail", result.reason + " (not timed)"
    return result.passed


def _check_and_time(row: Row, launch, a, b, c, ref, spec: RunSpec, host=None, cublas=None,
                    gpu=None) -> None:
    """Check, then (only if correct) time: beside the cuBLAS launch `cublas` when the spec times
    baselines adjacent to each row and one is given, alone otherwise; NVML samples the clock,
    power and throttle reasons throughout (lab/clocks.py)."""
    from lab.clocks import Sampler
    from lab.timing import bench, bench_adjacent

    if not _apply_check(row, chk.check(launch, c, ref, row.K, row.precision)):
        return
    with Sampler() as sampler:
        if cublas is not None and spec.cublas_timing == "adjacent":
            t, base = bench_adjacent(launch, cublas, rep_ms=spec.rep_ms)
            row.cublas_ms = base.median_ms
            row.pct_cublas_lo = 100.0 * base.p20_ms / t.p80_ms
            row.pct_cublas_hi = 100.0 * base.p80_ms / t.p20_ms
        else:
            t = bench(launch, rep_ms=spec.rep_ms)
        import torch

        torch.cuda.synchronize()
    row.cublas_timing = spec.cublas_timing
    row.set_conditions(sampler.conditions)
    if gpu is not None:
        gpu.set_peak(row)
    row.median_ms, row.p20_ms, row.p80_ms, row.reps = t.median_ms, t.p20_ms, t.p80_ms, t.reps
    if host is not None:
        a_h, b_h, c_h = host

        def end_to_end():  # the user's data lives on the host (docs/TRANSFERS.md)
            a.copy_(a_h)
            b.copy_(b_h)
            launch()
            c_h.copy_(c)  # device -> pageable host memory: waits for the kernel

        e2e = bench(end_to_end, rep_ms=spec.rep_ms)
        row.e2e_ms = e2e.median_ms
        row.transfer_ms = e2e.median_ms - t.median_ms


def _compile_only(row: Row, variant: Variant, shape: Shape, layout: str = "nn",
                  precision: str = "fp32") -> None:
    """CPU mode, CUDA backend: compile with NVRTC for the H100 and report resources, through the
    launcher's OFFER: validate, resolve (automatic values, for the H100's SMs), compile."""
    from lab.toolchain.nvrtc import resources
    from lab.base.device import DEFAULT_SMS

    offer = variant.stage.offer("cuda")
    params = variant.params_for("cuda")
    offer.validate(params, precision)
    build, geometry = offer.compile(params, *shape, layout, precision)
    res = resources(build, *geometry)
    if offer.show is not None:
        res = {**res, "params": offer.show(offer.resolve(params, *shape, precision,
                                                         DEFAULT_SMS))}
    row.set_resources(res)
    row.status = "compiled"
    row.detail = f"built for {build.arch} by NVRTC; not run (no GPU)"
    if build.spill_bytes:
        row.detail += f"; ptxas reports {build.spill_bytes} spill bytes"
