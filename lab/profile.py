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
(lab.base.dtypes.DTYPE_NAMES) and prepare() gets precision=P; cuBLAS runs in P as lab.compare runs
it (lab.run._cublas_mode: TF32 allowed for tf32 only); the listings build the CUDA variant and compile
the Triton kernel for P; the roofline's compute roof is P's peak (lab/peaks.py) unless P is fp32
(the FP32 SIMT peak). A stage x backend that does not compute in P is skipped with one line, or
refused when a stage named explicitly computes in P on none of the backends asked for
(lab.run.validate, as lab.compare does).

Without a CUDA GPU nothing can be profiled: the command says so in one line on stderr, shows the
static view instead and exits 0 (EPILOG below, which --help prints, says what that view holds and
what --csv writes then).

Exit status: 0 when every kernel was profiled (or shown), 1 when some kernel could not be (the
others are still shown), 2 for a usage or environment error (one sentence on stderr, no traceback).

This module is the command: its options, their checks and main(). What it runs lives in
lab/profiling/ (targets, the child, running ncu, the table, listings, the static view), whose
__init__.py lists one module per concern.
"""

from __future__ import annotations

import argparse
import sys

from lab.cli import ArgumentParser, guarded, note
from lab.base.errors import LabError
from lab.profiling import child, ncu_run, static
from lab.profiling.listings import show_listings
from lab.profiling.targets import WARMUP, targets_for

# Also importable from lab.profile, where scripts/experiments/*.sh and tests import them from.
from lab.profiling.listings import compile_listing
from lab.profiling.targets import CHECK_FAILED, kernel_filter, kernel_names
from lab.profiling.triton_capture import triton_launch

__all__ = ["build_parser", "main", "CHECK_FAILED", "compile_listing", "kernel_filter",
           "kernel_names", "triton_launch"]

EPILOG = """\
without a GPU:
  nothing can be profiled; one line on stderr says so, then the static view is shown instead
  (each kernel compiled for sm_90, never run: resources, theoretical occupancy, SASS instruction
  mix; cuBLAS has none) and the exit status is 0; --csv then writes the mix CSV below.

--precision P:
  one precision per run (fp32, tf32, 3xtf32, bf16, fp16, fp8; default fp32): the inputs' dtype, the
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


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.profile", description=__doc__.split("\n\n")[0],
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", action="append", metavar="NAME[:k=v,...]",
                   help="stage(s): a name, a comma list, 'all', or a variant such as tiled:tile=16")
    p.add_argument("--backend", default="cuda,triton",
                   help="comma list of backends (default cuda,triton)")
    p.add_argument("--size", "--sizes", dest="size", default="4096",
                   help="one shape: N (square) or MxNxK (default 4096); --sizes is the same "
                        "option, spelled as lab.compare spells it")
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
                   help="one precision to build, launch and compare in: fp32, tf32, 3xtf32, "
                        "bf16, fp16 or fp8 (default fp32); stages that do not compute in it are "
                        "skipped")
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
    (lab.run.validate, RunSpec.unsupported): a stage named on its own that computes in `precision`
    on none of the backends is refused, and so is a selection where nothing does; the others that
    do not (e.g. --stage all) are skipped, named in one line on stderr."""
    from lab.run import RunSpec, validate

    # mode "cpu": validate() then checks no GPU memory (nothing is allocated here)
    spec = RunSpec(list(variants), list(backends), [shape], precision, mode="cpu")
    validate(spec)
    skipped = spec.unsupported()
    if skipped:
        note(f"note: skipped (the stage does not compute in that precision): "
             f"{', '.join(skipped)}", file=sys.stderr)
    return [(v, b) for v in variants for b in backends if spec.runs(v, b, precision)]


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    shape = one_shape(args.size)
    args.precision = one_precision(args.precision)
    if args.target:
        return child.run_target(args, shape)

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
            ncu_run.require_gpu()
        except ncu_run.NoGpu:
            return static.static_view(pairs, shape, args)
    targets = targets_for(pairs, shape, args)
    if args.dry_run:
        ncu_run.print_dry_run(targets, args)
        return 0
    return ncu_run.profile_all(targets, shape, args)


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


if __name__ == "__main__":
    sys.exit(main())
