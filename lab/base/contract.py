"""The launcher contract: what a launcher declares, and what its prepare() returns.

The harness never asks a launcher module what it has (no `hasattr`, no `inspect`, no module
globals): every launcher module (cuda_kernels/<stage>.py, triton_kernels/<stage>.py) declares one

    OFFER = Offer(stage="tiled", backend="cuda", precisions=("fp32",), kernels=("matmul_tiled",),
                  validate=..., compile=..., tuning=Tuning(...))

and decorates its prepare with `@entry(OFFER)` (lab/base/entry.py). The registry (lab/stages.py)
reads `OFFER` for each stage x backend; tests/test_contract.py checks every registered stage
against this file. docs/ARCHITECTURE.md ("The launcher contract") is the prose version.

What the harness hands a launcher, once per row: a frozen `Problem` (lab/base/problem.py: sizes, the
three operand descriptions with layout and alignment, the precision, whether C^T = B^T A^T is
computed) and the row's parameters, resolved from the registry's defaults and the user's values.

What prepare() returns: a `Prepared`, a no-argument callable that only launches, with the fields
the harness reads (resources, setup_ms, build, kernel_only, ...) always present.

This module is part of the shared base (lab/base/): it imports nothing of the lab but the errors
and the precision records, so launchers, the registry and the harness may all import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from lab.base.errors import LabError
from lab.base.precisions import NAMES
from lab.base.precisions import get as precision_record

# precision names (lab/stages.py explains each); a launcher offers a subset
PRECISIONS = NAMES  # lab/base/precisions.py: one record per precision
# Offer.arch: an architecture-specific target and the one compute capability that runs it
# (sm_90a code runs on 9.0 only, not on later GPUs)
ARCH_CAPABILITY = {"sm_90a": (9, 0)}
# The oldest GPU the lab runs on: NVRTC 13 (CUDA 13), which builds the CUDA stages, targets
# sm_75 (Turing) and newer, as torch's CUDA 13 builds do. Offer.requires raises it per stage.
FLOOR = (7, 5)
# The architectures the lab names when it says where a stage runs (--list --stage NAME), and
# that tests/test_arch_matrix.py builds every CUDA stage for: Turing, Ampere (A100; RTX 30),
# Ada (L4, L40S, RTX 40) and Hopper (H100, H200; sm_90a beside it for its own instructions).
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")


def sm(capability: tuple[int, int]) -> str:
    """The architecture name of a compute capability: (8, 6) -> "sm_86"."""
    return f"sm_{capability[0]}{capability[1]}"


def capability_of(arch: str) -> tuple[int, int]:
    """The compute capability of an architecture name: "sm_86" -> (8, 6), "sm_90a" -> (9, 0),
    "sm_120" -> (12, 0)."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def _param_text(value) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _accept(params: Mapping, precision: str) -> None:
    """The validate() of a launcher that takes every value the registry lists."""


def _as_given(params: Mapping, M: int, N: int, K: int, precision: str, sms: int) -> dict:
    """The resolve() of a launcher with no automatic values: the parameters are what runs."""
    return dict(params)


@dataclass(frozen=True)
class Tuning:
    """What the autotuner (lab/autotune.py) needs to know beside the registry's choices.

    split: the parameter that splits K across blocks (warptiling's `splitk`), if any; the tuner
        seeds it from the shape (tiles x split near 1x, 2x, 4x the SM count).
    tile: the two block-tile edge parameters (rows, columns) those seeds shrink, in that order.
    tile_of: for a launcher whose block tile is not two edge parameters (persistent: 64 rows per
        consumer warpgroup, BN columns), tile_of(params) -> (rows, columns) of the configuration's
        tile; the seeds then keep the defaults' tile and set the split only.
    streamk: (with tile_of) a 0/1 parameter that shares the k-tiles out evenly over the SMs
        (persistent's `STREAMK`); the tuner seeds it on where the defaults' tiles pass a round of
        the SMs unevenly.
    """

    split: str | None = None
    tile: tuple[str, ...] = ()
    tile_of: Callable[[Mapping], tuple[int, int]] | None = None
    streamk: str | None = None


@dataclass(frozen=True)
class Offer:
    """What one stage's launcher for one backend offers, declared as data beside its kernel.

    precisions: the precisions its kernels compute in (a subset of PRECISIONS).
    kernels: the names of the GPU kernels one launch runs, as the profiler sees them (CUDA: the
        extern "C" names; Triton: the @triton.jit function names) -- a tuple, or a function
        kernels(params, precision) -> tuple for a launcher whose kernels depend on its parameters.
    validate(params, precision): raise LabError (one sentence) for a parameter combination the
        kernel cannot run; called before any tensor is looked at, by prepare(), the CLI and the
        tuner.
    resolve(params, M, N, K, precision, sms): the parameters as they will be built and launched
        for an M x N x K problem on a GPU of `sms` SMs (automatic values such as 0 made concrete:
        a tile from M and N, a split of K from all three). Two parameter sets with the same
        resolution are one build to the tuner.
    show(resolved): the resolved configuration as the `params` column writes it (None: the
        parameters themselves).
    compile(params, M, N, K, layout, precision): CUDA only -- the NVRTC build and the launch
        geometry (grid, block, dynamic shared bytes) that prepare() would use, without a GPU:
        CPU mode's resource report and the profiler's SASS.
    tuning: the tuner's extra knowledge (Tuning).
    interpreted: Triton only -- whether the Triton interpreter (TRITON_INTERPRET=1, CPU mode) can
        run the kernel; False for a GPU-only kernel such as a Gluon one, whose CPU-mode rows are
        skipped with one sentence.
    arch: the architecture-specific GPU target the kernels need, or None: "sm_90a" for Hopper's
        wgmma and TMA instructions (compute capability 9.0 only, not later GPUs; a Triton twin
        that lowers to them needs it too).
    requires: where arch is None, the oldest compute capability the kernels run on, as
        {condition: (major, minor)}: "all" for every call (mma's {"all": (8, 0)}), a precision
        name (gemv's bf16 and fp16, each at (8, 0)) or "name=value" for a parameter's value
        (double_buffered's {"pipeline=cp_async": (8, 0)}). Every condition that holds for a call
        applies, and so do the lab's FLOOR (sm_75) and the precision record's min_capability
        (fp8: 8.9), the newest of them winning; {} is a kernel that runs from sm_75 on. Declare
        the instructions' truth: mma.sync with bf16 or TF32, cp.async and cvt to bf16 exist from
        sm_80, e4m3 MMA from sm_89; tests/test_arch_matrix.py builds every CUDA stage for each
        of ARCHS it declares, and below its oldest where NVRTC can.
    Where the kernels run is read through runs_on(capability, precision, params) (None, or the
    clause that says what they need), requirement() ("sm_80+", "sm_90a") and archs() (which of
    ARCHS): by prepare() (lab/base/entry.py refuses another GPU in one sentence), lab.compare
    (rows skipped, --list), lab.doctor and lab.matmul's automatic choice (lab/dispatch.py).
    """

    stage: str
    backend: str
    precisions: tuple[str, ...] = ("fp32",)
    kernels: tuple[str, ...] | Callable[[Mapping, str], tuple[str, ...]] = ()
    validate: Callable[[Mapping, str], None] = _accept
    resolve: Callable[[Mapping, int, int, int, str, int], dict] = _as_given
    show: Callable[[Mapping], str] | None = None
    compile: Callable | None = None
    tuning: Tuning = field(default_factory=Tuning)
    interpreted: bool = True
    arch: str | None = None
    requires: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        unknown = [p for p in self.precisions if p not in PRECISIONS]
        if unknown or not self.precisions:
            raise ValueError(f"Offer of {self.stage} ({self.backend}): precisions must be a "
                             f"non-empty subset of {PRECISIONS}, not {self.precisions}")
        if self.arch is not None and self.arch not in ARCH_CAPABILITY:
            raise ValueError(f"Offer of {self.stage} ({self.backend}): arch must be None or one "
                             f"of {', '.join(ARCH_CAPABILITY)}, not {self.arch!r}")
        for key, cc in self.requires.items():
            name, eq, _ = key.partition("=")
            if not ((key == "all" or key in self.precisions or (eq and name))
                    and isinstance(cc, tuple) and len(cc) == 2 and cc > FLOOR
                    and self.arch is None):
                raise ValueError(f"Offer of {self.stage} ({self.backend}): requires maps 'all', "
                                 f"one of its precisions or 'name=value' to a compute "
                                 f"capability newer than {FLOOR}, such as (8, 0), and is not "
                                 f"given beside arch; not {key!r}: {cc!r}")

    def _needs(self, precision: str, params: Mapping | None) -> list[tuple[tuple, str]]:
        """(capability, why) of every condition that holds for a call: why is "" for the floor
        and "all", else " for <precision>" or " with name=value"."""
        found = [(FLOOR, ""), (tuple(self.requires.get("all", FLOOR)), ""),
                 (tuple(precision_record(precision).min_capability), f" for {precision}"),
                 (tuple(self.requires.get(precision, FLOOR)), f" for {precision}")]
        for key, cc in self.requires.items():
            name, eq, value = key.partition("=")
            if eq and params and name in params and _param_text(params[name]) == value:
                found.append((tuple(cc), f" with {key}"))
        return found

    def min_capability(self, precision: str | None = None,
                       params: Mapping | None = None) -> tuple[int, int]:
        """The oldest compute capability whose GPUs run the kernels for a call in `precision`
        with `params` (arch's one capability where arch is set); precision None: the oldest
        over its precisions (where it runs at all)."""
        if self.arch:
            return ARCH_CAPABILITY[self.arch]
        if precision is None:
            return min(self.min_capability(p, params) for p in self.precisions)
        return max(cc for cc, _ in self._needs(precision, params))

    def requirement(self, precision: str | None = None, params: Mapping | None = None) -> str:
        """Where the kernels run, as --list and the pages write it: "sm_90a" (that target only)
        or "sm_80+" (compute capability 8.0 and newer)."""
        return self.arch or sm(self.min_capability(precision, params)) + "+"

    def archs(self, precision: str | None = None, params: Mapping | None = None
              ) -> tuple[str, ...]:
        """The architectures of ARCHS (and arch) the kernels run on for such a call."""
        if self.arch:
            return (self.arch,)
        need = self.min_capability(precision, params)
        return tuple(a for a in ARCHS if capability_of(a) >= need)

    def runs_on(self, capability: tuple[int, int], precision: str | None = None,
                params: Mapping | None = None) -> str | None:
        """None when the kernels run on a GPU of compute capability `capability` for a call in
        `precision` with `params` (precision None: in any of its precisions), else why not, a
        clause: "needs sm_90a (compute capability 9.0)", "needs sm_80 or newer (compute
        capability 8.0+) for bf16"."""
        cc = tuple(capability)
        if self.arch:
            need = ARCH_CAPABILITY[self.arch]
            return None if cc == need else f"needs {self.arch} (compute capability " \
                                             f"{need[0]}.{need[1]})"
        need = self.min_capability(precision, params)
        if cc >= need:
            return None
        why = ""
        if precision is not None:
            base = max(cc_ for cc_, w in self._needs(precision, params) if not w)
            if need > base:  # a precision or a parameter asks for more than the kernels do
                why = next(w for cc_, w in self._needs(precision, params) if cc_ == need)
        return (f"needs {sm(need)} or newer (compute capability {need[0]}.{need[1]}+)"
                f"{why}")

    @property
    def where(self) -> str:
        return f"stage {self.stage} ({self.backend})"

    def kernel_names(self, params: Mapping, precision: str) -> tuple[str, ...]:
        names = self.kernels(params, precision) if callable(self.kernels) else self.kernels
        return tuple(names)

    def check(self, params: Mapping, precision: str) -> str | None:
        """None when validate() accepts these parameters in `precision`, else its sentence."""
        try:
            self.validate(params, precision)
        except LabError as exc:
            return str(exc)
        return None


class Prepared:
    """What prepare() returns: call it (no arguments) to launch; nothing else happens in the call.

    resources: the kernel's registers, shared memory, threads, spills (lab/toolchain/nvrtc.py
        resources(); Triton: the compiled kernel's), or None where nothing was compiled.
    setup_ms: one-time work prepare() did outside the timed call (copies, padding), or None.
    build: the NVRTC build that runs (CUDA), for the occupancy API.
    kernel_only: the kernel launch without the per-call copies a stage may add, for a profiler.
    problem: the Problem the launcher was handed.
    steps: the call as data, when it is nothing but a sequence of `(run, args)` pairs (kernel
        launches, tensor copies): calling the Prepared runs `run(*args)` for each in order. Made
        with `Prepared.of_steps`; lab.matmul's plan cache (lab/plan.py) replays the steps on new
        tensors of the same shapes, strides and alignment, so a launcher that builds its call this
        way runs at the kernel's speed when a user calls lab.matmul in a loop. None: an opaque
        call, which lab.matmul prepares again on every call.
    extra: launcher-specific facts a test or a page may read (e.g. a workspace, a resolved
        configuration); the harness reads none of them, with one exception: `setup_reusable`
        (True where the setup made only buffers that every call rewrites, such as a split-K
        workspace or zeroed realign buffers), which lets lab.matmul replay a launch whose
        setup_ms is not zero; a setup that copies operand values (zero padding) must not set it.
    """

    __slots__ = ("fn", "resources", "setup_ms", "build", "kernel_only", "problem", "steps",
                 "extra")

    def __init__(self, fn: Callable[[], object], *, resources: dict | None = None,
                 setup_ms: float | None = None, build=None, kernel_only=None, problem=None,
                 steps: tuple | None = None, **extra):
        self.fn = fn
        self.resources = resources
        self.setup_ms = setup_ms
        self.build = build
        self.kernel_only = kernel_only
        self.problem = problem
        self.steps = steps
        self.extra = dict(extra)

    @classmethod
    def of_steps(cls, steps, **fields) -> "Prepared":
        """A Prepared whose call runs `run(*args)` for each (run, args) of `steps`, in order.
        A step may itself be a Prepared made this way (its steps are spliced in)."""
        flat: list[tuple] = []
        for step in steps:
            if isinstance(step, Prepared):
                if step.steps is None:
                    raise ValueError("of_steps: a Prepared without steps cannot be spliced")
                flat.extend(step.steps)
            else:
                run, args = step
                flat.append((run, tuple(args)))
        flat_t = tuple(flat)
        if len(flat_t) == 1:
            run, args = flat_t[0]

            def call():
                run(*args)
        else:
            def call():
                for run, args in flat_t:
                    run(*args)

        return cls(call, steps=flat_t, **fields)

    def __call__(self):
        return self.fn()

    def __getattr__(self, name: str):  # launcher-specific facts: launch.workspace, launch.config
        extra = object.__getattribute__(self, "extra")
        if name in extra:
            return extra[name]
        raise AttributeError(name)

    def __setattr__(self, name: str, value) -> None:  # launch.config = ...: one more fact
        if name in Prepared.__slots__:
            object.__setattr__(self, name, value)
        else:
            self.extra[name] = value

    def add_setup(self, ms: float) -> None:
        self.setup_ms = (self.setup_ms or 0.0) + ms
