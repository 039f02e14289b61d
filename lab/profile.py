"""python -m lab.profile: Nsight Compute counters, roofline position, SASS and PTX of a stage.

    python -m lab.profile --stage tiled --size 4096              # ncu: one launch per kernel
    python -m lab.profile --stage all --backend cuda --csv prof.csv
    python -m lab.profile --stage tiled --dry-run                # print the ncu command lines
    python -m lab.profile --stage tiled --sass --backend cuda    # SASS + instruction mix (no GPU)
    python -m lab.profile --stage tiled --ptx                    # PTX (CUDA: NVRTC; Triton: its compiler)
    python -m lab.profile --stage tiled --sass --csv mix.csv     # ... and the mix as a CSV
    python -m lab.profile --stage mma --backend cuda --precision bf16   # another precision

Profiling runs each kernel in a child process ("the target"): the target allocates the inputs,
prepares the launcher, launches once to warm up, then launches once more inside an NVTX range
`lab_profile`; ncu profiles only that launch (--nvtx-include lab_profile/ --launch-count 1), with
only the metrics the table needs and never touching the clocks (--clock-control none). cuBLAS
(torch.matmul, TF32 off) is profiled the same way as the reference.

--precision P (one of lab/stages.py PRECISIONS, one per run; default fp32) is used wherever a kernel
is built, launched or compared, as in lab.compare: the target's inputs are in P's dtype
(lab.operands.DTYPE_NAMES) and prepare() gets precision=P; cuBLAS runs in P as lab.compare runs it
(lab.run._cublas_mode: TF32 allowed for tf32 only); the listings build the CUDA variant and compile
the Triton kernel for P; the roofline's compute roof is P's peak (lab/peaks.py) unless P is fp32
(the FP32 SIMT peak). A stage x backend that does not compute in P is skipped with one line, or
refused when a stage named explicitly computes in P on none of the backends asked for
(lab.run.validate, as lab.compare does).

Without a CUDA GPU nothing can be profiled: the command says so in one line on stderr, shows the
static view instead and exits 0 (EPILOG below, which --help prints, says what that view holds and
what --csv writes then).

Exit status: 0 when every kernel was profiled (or shown), 1 when some kernel could not be (the
others are still shown), 2 for a usage or environment error (one sentence on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from lab.cli import ArgumentParser, guarded, note
from lab.errors import LabError

REPO = Path(__file__).resolve().parent.parent
CUBLAS_KERNELS = "regex:gemm|Gemm|GEMM|cutlass|nvjet|xmma|Kernel"
CHECK_FAILED = "lab.profile target: check failed"
EPILOG = """\
without a GPU:
  nothing can be profiled; one line on stderr says so, then the static view is shown instead
  (each kernel compiled for sm_90, never run: resources, theoretical occupancy, SASS instruction
  mix; cuBLAS has none) and the exit status is 0; --csv then writes the mix CSV below.

--precision P:
  one precision per run (fp32, tf32, 3xtf32, bf16, fp16; default fp32): the inputs' dtype, the
  build and the roofline's compute roof (P's tensor-core peak from lab/peaks.py, the FP32 SIMT
  peak for fp32). Stages that do not compute in P are skipped with one line on stderr; a stage
  named on its own that computes in P on none of the backends is refused.

--sass, --ptx:
  need no GPU and run no ncu (so --dry-run, --reports, --filter, --peak-* and --timeout are
  refused with them); both together print the PTX, then the SASS, of each kernel.

the mix CSV (--csv with --sass/--ptx, or without a GPU), one row per kernel:
  stage, backend, precision, params, M, N, K, kernel, compiled_for, threads, grid_blocks, registers,
  smem_static, smem_dynamic (bytes), local_bytes (per thread), blocks_per_sm, occupancy_pct,
  occupancy_limiter (theoretical: the GPU's limits, sm_90's without one), then one column per
  counted instruction: sass:<label> (sass:FFMA, sass:LDG.E, ..., sass:total) with --sass or in
  the static view, ptx:<label> (ptx:fma.rn.f32, ...) with --ptx. Counts are static (instructions
  in the listing, an unrolled loop once per copy), not executed instructions.
"""
WARMUP = 1


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.profile", description=__doc__.split("\n\n")[0],
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", action="append", metavar="NAME[:k=v,...]",
                   help="stage(s): a name, a comma list, 'all', or a variant such as tiled:tile=16")
    p.add_argument("--backend", default="cuda,triton",
                   help="comma list of backends (default cuda,triton)")
    p.add_argument("--size", default="4096", help="one shape: N (square) or MxNxK (default 4096)")
    p.add_argument("--csv", metavar="PATH",
                   help="write one row per kernel to PATH: the ncu table when profiling; the mix "
                        "CSV (resources and instruction counts, below) with --sass/--ptx or "
                        "without a GPU")
    p.add_argument("--no-cublas", action="store_true", help="do not profile cuBLAS for reference")
    p.add_argument("--dry-run", action="store_true",
                   help="print the ncu command lines instead of running them (no GPU needed)")
    p.add_argument("--filter", choices=("nvtx", "skip"), default="nvtx",
                   help="how ncu finds the one launch: nvtx (default; the NVTX range) or skip "
                        "(--launch-skip past the warm-up, for an ncu without NVTX support)")
    p.add_argument("--reports", metavar="DIR",
                   help="keep ncu's .ncu-rep reports in DIR (open them with ncu-ui)")
    p.add_argument("--precision", default="fp32", metavar="P",
                   help="one precision to build, launch and compare in: fp32, tf32, 3xtf32, bf16 "
                        "or fp16 (default fp32); stages that do not compute in it are skipped")
    p.add_argument("--peak-tflops", type=float,
                   help="compute peak for the roofline in TFLOP/s (default: from the GPU: the FP32 "
                        "SIMT peak, SMs x 128 x 2 x clock, or --precision's tensor-core peak)")
    p.add_argument("--peak-bw", type=float, default=3.0,
                   help="DRAM bandwidth roof in TB/s (default 3.0, the measured H100 copy)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one ncu run may take (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--sass", action="store_true",
                   help="print each kernel's SASS and an instruction mix instead of profiling "
                        "(no GPU needed; combine with --ptx for both listings)")
    p.add_argument("--ptx", action="store_true",
                   help="print each kernel's PTX and a PTX mix instead of profiling (no GPU "
                        "needed)")
    # internal: the child process ncu and compute-sanitizer run
    p.add_argument("--_target", dest="target", choices=("cuda", "triton", "cublas"),
                   help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=WARMUP, help=argparse.SUPPRESS)
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-nvtx", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


def one_shape(text: str):
    from lab.shapes import parse_sizes

    shapes = parse_sizes(text)
    if len(shapes) != 1:
        raise LabError(f"--size takes one shape (N or MxNxK), not {len(shapes)}; profile one "
                       "shape at a time")
    return shapes[0]


def one_precision(text: str) -> str:
    """The --precision value: one name of lab/stages.py PRECISIONS, or one LabError sentence."""
    from lab.stages import PRECISIONS

    name = text.strip().lower()
    if "," in name:
        raise LabError(f"--precision takes one precision per run, not the list {text!r}; profile "
                       f"one of {', '.join(PRECISIONS)} at a time")
    if name not in PRECISIONS:
        raise LabError(f"unknown precision {text!r}; choose from {', '.join(PRECISIONS)}")
    return name


def runnable(variants, backends, shape, precision: str) -> list[tuple]:
    """The (variant, backend) pairs that compute in `precision`, in order. As lab.compare does
    (lab.run.validate, Plan.unsupported): a stage named on its own that computes in `precision`
    on none of the backends is refused, and so is a selection where nothing does; the others that
    do not (e.g. --stage all) are skipped, named in one line on stderr."""
    from lab.run import Plan, validate

    # mode "cpu": validate() then checks no GPU memory (nothing is allocated here)
    plan = Plan(list(variants), list(backends), [shape], precision, mode="cpu")
    validate(plan)
    skipped = plan.unsupported()
    if skipped:
        note(f"note: skipped (the stage does not compute in that precision): "
             f"{', '.join(skipped)}", file=sys.stderr)
    return [(v, b) for v in variants for b in backends if plan.runs(v, b, precision)]


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    shape = one_shape(args.size)
    args.precision = one_precision(args.precision)
    if args.target:
        return run_target(args, shape)

    from lab.axes import parse_backends
    from lab.stages import parse_variants

    variants = parse_variants(args.stage or [])
    backends = parse_backends(args.backend)
    if args.csv and not args.dry_run:  # an unwritable path is refused before anything compiles
        from lab.cli import check_writable

        check_writable(args.csv)
    if args.sass or args.ptx:
        refuse_profiling_options(args)
        pairs = runnable(variants, backends, shape, args.precision)
        return show_listings(pairs, shape, sass=args.sass, ptx=args.ptx, csv=args.csv,
                             precision=args.precision)
    if args.peak_bw <= 0 or (args.peak_tflops is not None and args.peak_tflops <= 0):
        raise LabError("--peak-bw and --peak-tflops must be positive")
    if args.dry_run and args.csv:
        raise LabError("--dry-run only prints the ncu command lines and profiles nothing, so "
                       "--csv would have no rows to write; drop --csv (or --dry-run)")
    pairs = runnable(variants, backends, shape, args.precision)
    if not args.dry_run:
        try:
            require_gpu()
        except NoGpu:
            return static_view(pairs, shape, args)
    targets = plan(pairs, shape, args)
    if args.dry_run:
        print_dry_run(targets, args)
        return 0
    return profile_all(targets, shape, args)


# options that only mean something to an ncu run: (dest, flag)
PROFILING_ONLY = (("dry_run", "--dry-run"), ("reports", "--reports"), ("filter", "--filter"),
                  ("peak_tflops", "--peak-tflops"), ("peak_bw", "--peak-bw"),
                  ("timeout", "--timeout"))


def refuse_profiling_options(args) -> None:
    """--sass/--ptx compile and print; an ncu option given with them would be silently ignored."""
    defaults = build_parser()
    given = [flag for dest, flag in PROFILING_ONLY
             if getattr(args, dest) != defaults.get_default(dest)]
    if given:
        both = args.sass and args.ptx
        listing = "--sass and --ptx" if both else ("--sass" if args.sass else "--ptx")
        runs, it = (("run", "they compile and print") if both
                    else ("runs", "it compiles and prints"))
        raise LabError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to "
                       f"profiling with ncu, and {listing} {runs} no ncu ({it} without a GPU, "
                       f"launching nothing); drop {', '.join(given)}")


# ------------------------------------------------------------------------------------ targets


@dataclass
class Target:
    label: str  # stage variant label, or "cublas"
    backend: str  # cuda | triton | cublas
    params: str
    kernel_filter: str  # ncu --kernel-name value
    argv: list[str] = field(default_factory=list)  # the child command (python -m lab.profile ...)

    @property
    def name(self) -> str:
        return f"{self.label}-{self.backend}".replace(":", "_").replace(",", "_").replace("=", "")


def cuda_build(variant, precision: str = "fp32", shape=(4096, 4096, 4096), layout: str = "nn"):
    """The NVRTC build of a CUDA stage variant in `precision`, as its launcher builds it for
    `shape` and `layout` (the Offer's compile; no GPU needed: sm_90 without one)."""
    offer = variant.stage.offer("cuda")
    return offer.compile(variant.params_for("cuda"), *shape, layout, precision)[0]


def kernel_names(variant, backend: str, precision: str = "fp32") -> tuple[str, ...]:
    """The kernels one launch of this variant runs, as its launcher's Offer declares them."""
    return variant.stage.offer(backend).kernel_names(variant.params_for(backend), precision)


def kernel_filter(variant, backend: str, precision: str = "fp32") -> str:
    """ncu's --kernel-name for the kernels of one launch (ncu then profiles the first match)."""
    names = kernel_names(variant, backend, precision)
    if not names:
        raise LabError(f"stage {variant.stage.name} ({backend}) declares no kernel in its OFFER")
    if backend == "cuda":
        return names[0] if len(names) == 1 else "regex:^(" + "|".join(names) + ")$"
    # prefix match: older Triton versions appended a specialization suffix to the name
    return "regex:^" + (names[0] if len(names) == 1 else "(" + "|".join(names) + ")")


def target_argv(backend: str, label: str | None, shape, args, check: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "lab.profile", "--_target", backend]
    if label:
        argv += ["--stage", label]
    argv += ["--size", str(shape), "--precision", getattr(args, "precision", "fp32"),
             "--seed", str(args.seed), "--warmup", str(WARMUP)]
    if check:
        argv.append("--check")
    if getattr(args, "filter", "nvtx") == "skip":
        argv.append("--no-nvtx")
    return argv


def plan(pairs, shape, args) -> list[Target]:
    """cuBLAS (unless --no-cublas), then one target per (variant, backend) pair (runnable())."""
    targets = []
    if not args.no_cublas:
        targets.append(Target("cublas", "cublas", "", CUBLAS_KERNELS,
                              target_argv("cublas", None, shape, args)))
    for v, backend in pairs:
        params = ",".join(f"{k}={val}" for k, val in v.params_for(backend).items())
        targets.append(Target(v.label, backend, params,
                              kernel_filter(v, backend, args.precision),
                              target_argv(backend, v.label, shape, args)))
    return targets


# ------------------------------------------------------------------------- the target (child)


def _nvtx():
    """push/pop for the profiled range: torch's NVTX, else CuPy's."""
    try:
        import torch

        torch.cuda.nvtx.range_push("probe")
        torch.cuda.nvtx.range_pop()
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except Exception:  # pragma: no cover - torch without NVTX
        from cupy.cuda import nvtx

        return nvtx.RangePush, nvtx.RangePop


def run_target(args, shape) -> int:
    """The child: inputs, launcher, warm-up, one launch inside the NVTX range, optional check."""
    import torch

    from lab import check as chk
    from lab.ncu import NVTX_RANGE
    from lab.operands import DTYPE_NAMES

    if not torch.cuda.is_available():
        raise LabError("the profiling target launches kernels and needs a CUDA GPU, but torch "
                       "sees none")
    M, N, K = shape
    precision = args.precision
    dtype = getattr(torch, DTYPE_NAMES[precision])  # C in the operands' dtype, as lab.compare
    a, b = chk.make_inputs(M, N, K, args.seed, "cuda", dtype=dtype)
    c = torch.empty((M, N), device="cuda", dtype=dtype)
    if args.target == "cublas":
        from lab.run import _cublas_mode

        label = "cublas"

        def launch():  # as lab.compare's cuBLAS row: TF32 allowed for tf32 only
            _cublas_mode(precision)
            torch.matmul(a, b, out=c)
    else:
        from lab.stages import parse_variants

        variants = parse_variants(args.stage or [])
        if len(variants) != 1:
            raise LabError("the profiling target takes exactly one stage variant")
        variant = variants[0]
        label = variant.label
        launch = variant.stage.module(args.target).prepare(a, b, c, precision=precision,
                                                           **variant.params_for(args.target))
    for _ in range(args.warmup):
        launch()
    torch.cuda.synchronize()
    if args.no_nvtx:
        launch()
    else:  # a launch that copies an operand first (mma's kmajor_b) offers the kernel alone
        push, pop = _nvtx()
        push(NVTX_RANGE)
        (launch.kernel_only or launch)()
        pop()
    torch.cuda.synchronize()
    if args.check:
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        if not result.passed:
            print(f"{CHECK_FAILED}: {label} {args.target} {precision} {shape}: {result.reason}",
                  file=sys.stderr)
            return 1
    print(f"lab.profile target: {label} {args.target} {precision} {shape}: launched "
          f"{args.warmup} + 1 times" + (", checked" if args.check else ""), file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ running ncu


def _child_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TRITON_INTERPRET", None)
    return env


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=REPO, env=_child_env(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"ncu did not finish within {timeout:.0f} s ({shlex.join(cmd[:3])} ...); "
                       "raise --timeout or profile a smaller --size") from None
    except OSError as exc:
        raise LabError(f"could not start {cmd[0]}: {exc.strerror}") from None


class KernelError(LabError):
    """This kernel could not be profiled; the other kernels still can."""


def profile_one(t: Target, ncu: str, report_dir: Path, args, log) -> tuple[object, list[str]]:
    """Run ncu on one target; return (NcuKernel, metrics that ncu did not know)."""
    from lab import ncu as N

    metrics = N.metric_list()
    dropped: list[str] = []
    report = str(report_dir / f"{t.name}.ncu-rep")
    nvtx = args.filter == "nvtx"
    for _ in range(8):  # each round may drop metrics this ncu does not know
        cmd = N.ncu_command(ncu, t.argv, t.kernel_filter, metrics, report=report, nvtx=nvtx,
                            launch_skip=WARMUP)
        res = _run(cmd, args.timeout)
        out = (res.stdout or "") + "\n" + (res.stderr or "")
        bad = N.unknown_metrics(out, metrics)
        if bad:
            log(f"  ncu does not know {', '.join(bad)}; dropping and retrying")
            dropped += bad
            metrics = [m for m in metrics if m not in bad]
            continue
        break
    else:
        raise LabError(f"ncu kept rejecting metrics for {t.label} {t.backend}; last lines:\n"
                       + N.tail(out))
    if CHECK_FAILED in out:
        line = next(ln for ln in out.splitlines() if CHECK_FAILED in ln)
        raise KernelError(line.split(": ", 1)[1] + "; fix the kernel before profiling it")
    if N.NO_KERNELS in out:
        raise KernelError(
            f"ncu profiled no kernel matching {t.kernel_filter!r} for {t.label} {t.backend} "
            f"(\"{N.NO_KERNELS}\"); check the kernel name, or try --filter skip if NVTX ranges "
            "are not seen")
    if res.returncode != 0 or not Path(report).exists():
        raise LabError(f"ncu failed (exit status {res.returncode}) on {t.label} {t.backend}; "
                       f"its last lines:\n{N.tail(out)}")
    imp = _run(N.import_command(ncu, report), args.timeout)
    if imp.returncode != 0:
        raise LabError(f"ncu could not read back its report {report} (exit status "
                       f"{imp.returncode}); its last lines:\n{N.tail(imp.stdout + imp.stderr)}")
    kernels = N.parse_raw_csv(imp.stdout)
    if not kernels:
        raise KernelError(f"ncu's report for {t.label} {t.backend} holds no kernel "
                          f"(filter {t.kernel_filter!r})")
    return kernels[0], dropped


class NoGpu(LabError):
    """Torch sees no CUDA GPU: nothing can be profiled (the static view is shown instead)."""


def require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise NoGpu("profiling with Nsight Compute needs a CUDA GPU and torch sees none; "
                    "--sass and --ptx work without a GPU, and --dry-run prints the ncu "
                    "command lines to run on one")


def roof_label(precision: str) -> str:
    """What the compute roof of `precision` is: the FP32 SIMT pipe, or the tensor cores."""
    if precision == "fp32":
        return "FP32 SIMT"
    if precision == "3xtf32":
        return "3xtf32 (TF32 tensor-core peak / 3)"
    return f"{precision} tensor-core"


def _device():
    """(name, compute capability, SMs, max SM clock in MHz) of the current GPU; None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        import cupy.cuda.runtime as rt

        dev = torch.cuda.current_device()
        sms = rt.deviceGetAttribute(rt.cudaDevAttrMultiProcessorCount, dev)
        clock_khz = rt.deviceGetAttribute(rt.cudaDevAttrClockRate, dev)
        return (torch.cuda.get_device_name(dev), tuple(torch.cuda.get_device_capability(dev)),
                sms, clock_khz / 1e3)
    except Exception:  # pragma: no cover - a broken driver: fall back to the anchors
        return None


def precision_peaks(precision: str, bw: float):
    """The roofline's peaks for `precision`: fp32 the FP32 SIMT peak (lab/roofline.py), any other
    precision its tensor-core peak from lab/peaks.py (SMs x FLOP per SM per clock x max SM clock)
    on this GPU, or on the H100 anchors (132 SMs, 1.98 GHz, sm_90) without one."""
    from lab import roofline
    from lab.peaks import peak

    if precision == "fp32":
        return roofline.device_peaks(bw) or roofline.Peaks(roofline.DEFAULT_PEAKS.flops, bw,
                                                           roofline.DEFAULT_PEAKS.source)
    dev = _device()
    if dev is None:
        name, cc, sms, mhz = ("H100 SXM anchors", (9, 0), roofline.H100_SMS,
                              roofline.H100_SM_CLOCK_HZ / 1e6)
    else:
        name, cc, sms, mhz = dev
    p = peak(precision, cc, sms, mhz)
    if p is None:
        raise LabError(f"lab/peaks.py knows no {precision} peak for compute capability "
                       f"{cc[0]}.{cc[1]} ({name}); give the roof with --peak-tflops")
    return roofline.Peaks(p.tflops * 1e12, bw,
                          f"{name}: {sms} SMs x {p.flop_per_sm_clock:g} FLOP/clock "
                          f"({roof_label(precision)}) x {mhz / 1e3:.2f} GHz; "
                          f"DRAM {bw / 1e12:.2f} TB/s")


def peaks_for(args):
    from lab import roofline

    bw = args.peak_bw * 1e12
    precision = getattr(args, "precision", "fp32")
    if args.peak_tflops:
        return roofline.Peaks(args.peak_tflops * 1e12, bw,
                              f"{roof_label(precision)} peak given on the command line")
    return precision_peaks(precision, bw)


def profile_all(targets: list[Target], shape, args) -> int:
    from lab import ncu as N

    require_gpu()
    ncu = N.require_tool("ncu", "profiling needs it")
    peaks = peaks_for(args)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    tmp = None
    if args.reports:
        report_dir = Path(args.reports)
        report_dir.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="lab_profile_")
        report_dir = Path(tmp)
    rows, failures, dropped = [], [], set()
    try:
        for t in targets:
            log(f"profiling {t.label} {t.backend} (ncu --kernel-name {t.kernel_filter}) ...")
            start = time.perf_counter()
            try:
                kernel, missing = profile_one(t, ncu, report_dir, args, log)
            except KernelError as exc:
                failures.append((t, str(exc)))
                log(f"  error: {exc}")
                continue
            dropped.update(missing)
            log(f"  {kernel.kernel}: done in {time.perf_counter() - start:.1f} s")
            summary = N.summarize(kernel, *shape, peaks)
            rows.append({"stage": t.label, "backend": t.backend,
                         "precision": args.precision, "params": t.params,
                         "M": shape.M, "N": shape.N, "K": shape.K, **summary,
                         "_values": kernel.values})
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if rows:
        render(rows, shape, peaks)
    if dropped:
        note(f"note: this ncu does not know {', '.join(sorted(dropped))}; shown as n/a",
             file=sys.stderr)
    if args.csv and rows:
        path = write_csv(rows, args.csv, peaks)
        print(f"wrote {path}")
    for t, msg in failures:
        print(f"error: {t.label} {t.backend}: {msg}", file=sys.stderr)
    if args.reports:
        print(f"ncu reports kept in {args.reports} (open with ncu-ui)")
    return 1 if failures else 0


# ------------------------------------------------------------------------------- output


def _f(value, fmt: str = ".3g") -> str:
    from lab.ncu import fmt_number

    if value is None:
        return "n/a"
    if fmt == "si":
        return fmt_number(value)
    return format(value, fmt)


TABLE_ROWS = (
    ("kernel", lambda r: r["kernel"]),
    ("grid / block", lambda r: f"{r['grid']} / {r['block']}"),
    ("duration (ms)", lambda r: _f(r["duration_ms"], ".4g")),
    ("SM clock during the run (GHz)", lambda r: _f(r["sm_clock_ghz"], ".3g")),
    ("occupancy achieved / theoretical (%)",
     lambda r: f"{_f(r['occupancy_achieved_pct'], '.1f')} / {_f(r['occupancy_theoretical_pct'], '.1f')}"),
    ("SM throughput (% of peak)", lambda r: _f(r["sm_throughput_pct"], ".1f")),
    ("DRAM throughput (% of peak)", lambda r: _f(r["dram_throughput_pct"], ".1f")),
    ("L1 hit rate (%)", lambda r: _f(r["l1_hit_pct"], ".1f")),
    ("L2 hit rate (%)", lambda r: _f(r["l2_hit_pct"], ".1f")),
    ("global load sectors / request", lambda r: _f(r["gld_sectors_per_request"], ".2f")),
    ("global store sectors / request", lambda r: _f(r["gst_sectors_per_request"], ".2f")),
    ("shared wavefronts load / store",
     lambda r: f"{_f(r['smem_ld_wavefronts'], 'si')} / {_f(r['smem_st_wavefronts'], 'si')}"),
    ("shared bank conflicts load / store",
     lambda r: f"{_f(r['smem_ld_bank_conflicts'], 'si')} / {_f(r['smem_st_bank_conflicts'], 'si')}"),
    *((f"stall #{i} (% of active warp cycles)",
       (lambda i: lambda r: "n/a" if r[f"stall_{i}"] is None else
        f"{r[f'stall_{i}']} {r[f'stall_{i}_pct']:.1f}")(i)) for i in (1, 2, 3)),
    ("achieved TFLOP/s (2MNK / duration)", lambda r: _f(r["achieved_tflops"], ".3g")),
    ("DRAM bytes (read + write)",
     lambda r: "n/a" if r["dram_bytes"] is None else _f(r["dram_bytes"], "si") + "B"),
    ("arithmetic intensity (FLOP / DRAM byte)", lambda r: _f(r["intensity"], ".3g")),
    ("roofline: bound, % of roof", lambda r: "n/a" if r["bound"] is None else
     f"{r['bound']}, {r['pct_of_roof']:.1f}%"),
    ("roof at this intensity (TFLOP/s)", lambda r: _f(r["attainable_tflops"], ".3g")),
)


def render(rows: list[dict], shape, peaks, console=None) -> None:
    """One table, one column per kernel: the counters a learner compares between stages."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=240)
    precision = rows[0].get("precision", "fp32") if rows else "fp32"
    table = Table(title=f"Nsight Compute, one launch each, {shape} {precision} (clocks not "
                        "locked)",
                  caption=f"roofline ({roof_label(precision)} compute roof): {peaks.source}; "
                          f"ridge point {peaks.ridge:.1f} FLOP/byte",
                  header_style="bold")
    table.add_column("metric", justify="left")
    for r in rows:
        table.add_column(f"{r['stage']}\n{r['backend']}", justify="right")
    for title, cell in TABLE_ROWS:
        table.add_row(title, *(cell(r) for r in rows))
    console.print(table)


def write_csv(rows: list[dict], path: str, peaks) -> Path:
    import pandas as pd

    flat = []
    for r in rows:
        rec = {k: v for k, v in r.items() if k != "_values"}
        rec.update(peak_tflops=peaks.flops / 1e12, peak_bw_tbs=peaks.bw / 1e12,
                   ridge_flop_per_byte=peaks.ridge, peaks_source=peaks.source)
        rec.update({f"ncu:{m}": v for m, v in r["_values"].items()})
        flat.append(rec)
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(flat).to_csv(out, index=False)
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror}") from None
    return out


def print_dry_run(targets: list[Target], args) -> None:
    from lab import ncu as N

    ncu = N.find_tool("ncu") or "ncu"
    report_dir = args.reports or "/tmp/lab_profile"
    print(f"# run from the repository root ({REPO}); the target needs PYTHONPATH=.")
    print("export PYTHONPATH=.")
    print(f"mkdir -p {shlex.quote(report_dir)}")
    for t in targets:
        report = f"{report_dir}/{t.name}.ncu-rep"
        argv = ["python3", *t.argv[1:]]
        print(f"# {t.label} {t.backend}")
        print(shlex.join(N.ncu_command(ncu, argv, t.kernel_filter, N.metric_list(), report=report,
                                       nvtx=args.filter == "nvtx", launch_skip=WARMUP)))
        print(shlex.join(N.import_command(ncu, report)))


# ------------------------------------------------------------------------- SASS / PTX


def _cuda_sass(build) -> str:
    try:  # another engineer's helper, if present
        from cuda_kernels._sass import sass as sass_of_build
    except ImportError:
        sass_of_build = None
    if sass_of_build is not None:
        from lab.ncu import clean_sass

        return clean_sass(sass_of_build(build))
    from lab.ncu import sass_of_cubin

    return sass_of_cubin(build.cubin)


class TritonInterpreted(LabError):
    """TRITON_INTERPRET=1: the Triton kernels of this process are interpreted, never compiled."""


def triton_compiled(variant, shape, precision: str = "fp32"):
    """(compiled kernel, where it was compiled for): see _triton_compile."""
    compiled, where, _ = _triton_compile(variant, shape, precision)
    return compiled, where


def triton_launch(variant, shape, precision: str = "fp32") -> dict:
    """What a Triton stage's prepare() launches for this shape and precision, recorded, never
    launched: {kernel, grid, args, meta}.

    The stage's own prepare runs inside triton_kernels._common.recording(), which records each
    launch instead of compiling it; the one kept is the last launch of the first kernel the
    stage's OFFER names (its GEMM, not a split-K sum or a copy). With a GPU the inputs
    are real (uninitialised) tensors; without one they are 'meta' tensors (shape and dtype only).
    The tensors are in `precision`'s dtype (lab.operands.DTYPE_NAMES) and the Problem carries the
    precision, so the stage passes the meta it passes when it runs (tl.dot's INPUT_PRECISION:
    triton_kernels._common.dot_meta)."""
    import torch

    from lab.operands import DTYPE_NAMES, TRITON, describe

    from triton_kernels._common import recording

    module = variant.stage.module("triton")
    params = variant.params_for("triton")
    main = variant.stage.offer("triton").kernel_names(params, precision)[0]
    device = "cuda" if torch.cuda.is_available() else "meta"
    M, N, K = shape
    dtype = getattr(torch, DTYPE_NAMES[precision])
    a = torch.empty((M, K), device=device, dtype=dtype)
    b = torch.empty((K, N), device=device, dtype=dtype)
    c = torch.empty((M, N), device=device, dtype=dtype)
    # the stage's own part of prepare (meta tensors cannot pass the shared device check)
    with recording() as calls:
        module.prepare.inner(describe(a, b, c, TRITON, precision), **params)
    launched = [call for call in calls if call[0].fn.__name__ == main]
    if not launched:
        raise LabError(f"triton_kernels.{variant.stage.name}.prepare launched no {main} (the first "
                       f"kernel its OFFER names) through triton_kernels._common.launcher")
    kernel, grid, args, meta = launched[-1]
    return {"kernel": kernel, "grid": grid, "args": args, "meta": meta}


def _triton_compile(variant, shape, precision: str = "fp32"):
    """Compile a Triton stage for this shape and precision exactly as its launcher would, without
    launching: triton_launch() records the kernel, grid, arguments and meta-parameters its
    prepare() would launch (operands in the precision's dtype, the precision's tl.dot meta), then
    JITFunction.warmup compiles them, for the device's target with a GPU and for sm_90 (the H100)
    without one. Returns (compiled, where, grid)."""
    import warnings

    import torch

    from triton_kernels._common import FakeDriver, interpreted

    captured = triton_launch(variant, shape, precision)
    kernel = captured["kernel"]

    if interpreted(kernel):
        raise TritonInterpreted("TRITON_INTERPRET=1 is set, so Triton kernels are interpreted and "
                                "have no PTX or SASS; unset it")
    from triton.runtime import driver

    gpu = torch.cuda.is_available()
    previous = driver._active if not gpu else None
    where = "this GPU"
    try:
        if not gpu:
            from triton.backends.compiler import GPUTarget

            driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
            where = "sm_90 (no GPU here: compiled, never run)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = kernel.warmup(*captured["args"], grid=captured["grid"], **captured["meta"])
    except LabError:
        raise
    except Exception as exc:
        raise LabError(f"Triton could not compile {variant.label} for {where} "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                       "Triton's PTX and SASS need a GPU here") from None
    finally:
        if not gpu:
            driver._active = previous
    return compiled, where, captured["grid"]


PTX_MIX = (
    ("fma.rn.f32", r"^\s*(?:@!?%p\d+\s+)?fma\.rn(?:\.ftz)?\.f32"),
    ("ld.global (scalar)", r"^\s*(?:@!?%p\d+\s+)?ld\.global(?![.a-z0-9]*\.v[24]\.)[.a-z0-9]*\.(?:f32|b32|u32)\s"),
    ("ld.global.v2", r"^\s*(?:@!?%p\d+\s+)?ld\.global[.a-z0-9]*\.v2"),
    ("ld.global.v4", r"^\s*(?:@!?%p\d+\s+)?ld\.global[.a-z0-9]*\.v4"),
    ("ld.shared", r"^\s*(?:@!?%p\d+\s+)?ld\.shared"),
    ("st.shared", r"^\s*(?:@!?%p\d+\s+)?st\.shared"),
    ("st.global", r"^\s*(?:@!?%p\d+\s+)?st\.global"),
    ("cp.async", r"^\s*(?:@!?%p\d+\s+)?cp\.async"),
    ("bar.sync", r"^\s*(?:@!?%p\d+\s+)?(?:bar\.sync|barrier\.sync)"),
    ("mma/wgmma", r"^\s*(?:@!?%p\d+\s+)?(?:mma|wgmma)\."),
)


def ptx_counts(ptx: str) -> dict[str, int]:
    """Static counts of the PTX_MIX instructions in a PTX listing."""
    import re

    counts = {}
    for label, pattern in PTX_MIX:
        rx = re.compile(pattern)
        counts[label] = sum(1 for ln in ptx.splitlines() if rx.match(ln))
    return counts


def ptx_mix(ptx: str) -> str:
    counts = ptx_counts(ptx)
    shown = [f"{label} {n}" for label, n in counts.items()
             if n or label in ("fma.rn.f32", "ld.shared", "bar.sync")]
    return "PTX mix (static count in the listing): " + ", ".join(shown)


@dataclass
class Listing:
    """One kernel compiled (never launched) for this shape: its listings, resources and mixes."""

    label: str
    backend: str  # cuda | triton
    params: str
    kernel: str
    compiled_for: str  # e.g. "sm_90 (NVRTC)"
    head: str  # the banner line over a listing
    precision: str = "fp32"
    ptx: str | None = None
    sass: str | None = None
    # threads, grid_blocks, registers, smem_static, smem_dynamic, local_bytes
    resources: dict | None = None
    occupancy: object | None = None  # lab.occupancy.Occupancy

    @cached_property
    def sass_mix(self) -> dict[str, int] | None:
        from lab.ncu import instruction_mix

        return None if self.sass is None else instruction_mix(self.sass)


def cubin_usage(cubin: bytes, kernel: str) -> dict[str, int]:
    """`cuobjdump --dump-resource-usage` of one function: REG, SHARED (static, including the
    1 KiB the driver reserves), LOCAL (bytes per thread: stack and spills)."""
    import re

    from lab.ncu import require_tool

    tool = require_tool("cuobjdump", "it is needed to read a kernel's resource usage")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        res = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True,
                             text=True)
    text = res.stdout or ""
    usage: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"\s*Function\s+([^:\s]+)\s*:", line)
        if head:
            current = head.group(1)
            continue
        if current is not None and (current == kernel or not usage):
            fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line))
            if "REG" in fields:
                usage = {k: int(v) for k, v in fields.items()}
                if current == kernel:
                    break
    if res.returncode != 0 or "REG" not in usage:
        raise LabError(f"cuobjdump could not read the resource usage of {kernel} (exit status "
                       f"{res.returncode})")
    return usage


def compile_listing(v, backend: str, shape, sass: bool, ptx: bool,
                    resources: bool = False, precision: str = "fp32") -> Listing:
    """Compile one stage variant for one backend at this shape and precision, as its launcher
    would, without a GPU if need be (CUDA: NVRTC for the device or sm_90, the build of
    `precision` where the launcher has one per precision; Triton: see _triton_compile).
    resources=True also reads the registers, shared and local memory, and the theoretical
    occupancy on this GPU's limits (sm_90's without one)."""
    from lab.occupancy import from_device, from_resources

    params = ",".join(f"{k}={val}" for k, val in v.params_for(backend).items())
    if backend == "cuda":
        from cuda_kernels._build import resources as cuda_resources

        build, geometry = v.stage.offer("cuda").compile(v.params_for("cuda"), *shape, "nn",
                                                        precision)
        item = Listing(v.label, "cuda", params, build.kernel, f"{build.arch} (NVRTC)",
                       f"{v.label} cuda {build.kernel} ({build.arch}, NVRTC, {precision})",
                       precision=precision)
        if ptx:
            from cuda_kernels._ptx import ptx as ptx_of_build

            item.ptx = ptx_of_build(build)
        if sass:
            item.sass = _cuda_sass(build)
        if resources:
            res = cuda_resources(build, *geometry)
            usage = cubin_usage(build.cubin, build.kernel)
            item.resources = {**res, "local_bytes": usage.get("LOCAL", 0)}
    else:
        compiled, where, grid = _triton_compile(v, shape, precision)
        name = getattr(compiled.metadata, "name", v.label)
        target = getattr(compiled.metadata, "target", None)
        arch = f"sm_{target.arch}" if getattr(target, "arch", None) else "?"
        item = Listing(v.label, "triton", params, name, f"{arch} (Triton)",
                       f"{v.label} triton {name} (Triton, {where}, specialised for {shape}, "
                       f"{precision})", precision=precision)
        if ptx:
            item.ptx = compiled.asm.get("ptx")
        cubin = compiled.asm.get("cubin") if (sass or resources) else None
        if (sass or resources) and not cubin:
            raise LabError(f"Triton produced no cubin for {v.label}")
        if sass:
            from lab.ncu import sass_of_cubin

            item.sass = sass_of_cubin(cubin)
        if resources:
            usage = cubin_usage(cubin, name)
            blocks = 1
            for g in grid:
                blocks *= int(g)
            item.resources = {
                "registers": usage["REG"],
                "smem_static": 0,  # Triton allocates all shared memory dynamically
                "smem_dynamic": int(getattr(compiled.metadata, "shared", 0)),
                "threads": int(getattr(compiled.metadata, "num_warps", 4)) * 32,
                "grid_blocks": blocks,
                "local_bytes": usage.get("LOCAL", 0),
            }
    if item.resources is not None:
        try:
            item.occupancy = from_resources(item.resources, from_device())
        except ValueError:  # a configuration no launch could have: leave it blank
            item.occupancy = None
    return item


def mix_csv_rows(items: list[Listing], shape) -> list[dict]:
    """One row per kernel: identity, resources, occupancy, then sass:* and ptx:* counts."""
    from lab.ncu import MIX_ROWS

    rows = []
    for it in items:
        res = it.resources or {}
        occ = it.occupancy
        row = {"stage": it.label, "backend": it.backend, "precision": it.precision,
               "params": it.params,
               "M": shape.M, "N": shape.N, "K": shape.K, "kernel": it.kernel,
               "compiled_for": it.compiled_for}
        for key in ("threads", "grid_blocks", "registers", "smem_static", "smem_dynamic",
                    "local_bytes"):
            row[key] = res.get(key)
        row["blocks_per_sm"] = occ.blocks_per_sm if occ else None
        row["occupancy_pct"] = round(100 * occ.occupancy, 2) if occ else None
        row["occupancy_limiter"] = occ.limiter if occ else None
        mix = it.sass_mix
        if mix is not None:
            row.update({f"sass:{label}": mix[label] for label, _, _ in MIX_ROWS})
            row["sass:total"] = mix["total"]
        if it.ptx is not None:
            row.update({f"ptx:{label}": n for label, n in ptx_counts(it.ptx).items()})
        rows.append(row)
    return rows


def write_mix_csv(items: list[Listing], shape, path: str) -> Path:
    import pandas as pd

    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(mix_csv_rows(items, shape)).to_csv(out, index=False)
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror}") from None
    return out


def show_listings(pairs, shape, sass: bool, ptx: bool, csv: str | None = None,
                  precision: str = "fp32") -> int:
    """--sass/--ptx: each (variant, backend) pair of runnable() compiled in `precision`."""
    from lab.ncu import format_mix, instruction_mix

    items = []
    for v, backend in pairs:
        item = compile_listing(v, backend, shape, sass, ptx, resources=bool(csv),
                               precision=precision)
        items.append(item)
        if item.ptx is not None:
            print(f"// ===== PTX: {item.head} =====")
            print(item.ptx.rstrip())
            print(f"// {ptx_mix(item.ptx)}")
        if item.sass is not None:
            print(f"// ===== SASS: {item.head} =====")
            print(item.sass.rstrip())
            print(f"// {format_mix(instruction_mix(item.sass))}")
        sys.stdout.flush()
    if csv:
        # stderr: the mix stays the last line of stdout (`| tail -1` shows it)
        print(f"wrote {write_mix_csv(items, shape, csv)}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ the static view (no GPU)


def _kib(n) -> str:
    return "n/a" if n is None else (f"{n / 1024:g} KiB" if n >= 1024 else f"{n} B")


def render_static(items: list[Listing], shape, cublas: bool, console=None) -> None:
    """One table, one column per kernel: what the compiler says, without running anything."""
    from rich.console import Console
    from rich.table import Table

    from lab.ncu import MIX_ROWS

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=240)
    caption = ("static counts: instructions in the SASS listing (an unrolled loop counts once "
               "per copy), not executed ones; occupancy is theoretical, on sm_90's limits")
    if cublas:
        caption += "; cuBLAS has no static view (it picks its kernel at run time)"
    precision = items[0].precision if items else "fp32"
    table = Table(title=f"Static view, {shape} {precision}: compiled, never run (no GPU here)",
                  caption=caption, header_style="bold")
    table.add_column("", justify="left")
    for it in items:
        table.add_column(f"{it.label}\n{it.backend}", justify="right")

    def res(it, key):
        return None if it.resources is None else it.resources.get(key)

    def occ(it):
        o = it.occupancy
        if o is None:
            return "n/a"
        return f"{100 * o.occupancy:.1f}% ({o.blocks_per_sm} blocks/SM, {o.limiter})"

    rows = [
        ("kernel", lambda it: it.kernel),
        ("compiled for", lambda it: it.compiled_for),
        ("threads / block", lambda it: str(res(it, "threads"))),
        ("blocks in the grid", lambda it: str(res(it, "grid_blocks"))),
        ("registers / thread", lambda it: str(res(it, "registers"))),
        ("shared memory / block",
         lambda it: _kib((res(it, "smem_static") or 0) + (res(it, "smem_dynamic") or 0))),
        ("local memory / thread (stack, spills)", lambda it: _kib(res(it, "local_bytes"))),
        ("theoretical occupancy", occ),
    ]
    mixes = [it.sass_mix or {} for it in items]
    for label, _, _ in MIX_ROWS:
        if any(m.get(label) for m in mixes) or label in ("FFMA", "LDG.E", "LDS", "STS", "STG",
                                                          "BAR"):
            rows.append((f"SASS {label}",
                         (lambda lb: lambda it: str((it.sass_mix or {}).get(lb, "n/a")))(label)))
    rows.append(("SASS instructions (NOPs excluded)",
                 lambda it: str((it.sass_mix or {}).get("total", "n/a"))))
    for title, cell in rows:
        table.add_row(title, *(cell(it) for it in items))
    console.print(table)


def static_view(pairs, shape, args) -> int:
    """No GPU: say that nothing is profiled, then show what the compilers say (exit 0)."""
    from lab import ncu as N

    ncu = "" if N.find_tool("ncu") else " (and ncu, not found here either)"
    note(f"note: profiling with Nsight Compute needs a CUDA GPU{ncu} and torch sees none; "
         "below is the static view instead: each kernel compiled for sm_90, never run",
         file=sys.stderr)
    items, failures, interpreted = [], [], []
    for v, backend in pairs:
        try:
            items.append(compile_listing(v, backend, shape, sass=True, ptx=False,
                                         resources=True, precision=args.precision))
        except TritonInterpreted:
            interpreted.append(v.label)
        except LabError as exc:
            failures.append((v.label, backend, str(exc)))
    if interpreted:
        note(f"note: Triton kernels ({', '.join(interpreted)}) are left out: TRITON_INTERPRET=1 "
             "is set, so they are interpreted and have no SASS; unset it to see them",
             file=sys.stderr)
    if items:
        render_static(items, shape, cublas=not args.no_cublas)
    if args.csv and items:
        print(f"wrote {write_mix_csv(items, shape, args.csv)} (the static view; ncu's counters "
              "need a GPU)")
    for label, backend, msg in failures:
        print(f"error: {label} {backend}: {msg}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
