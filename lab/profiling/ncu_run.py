"""Running Nsight Compute: one ncu run per Target (metrics this ncu does not know are dropped and
the run repeated), its report read back through lab/ncu.py, every kernel's row summarised
against the roofline and shown; --dry-run prints the same command lines instead."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.cli import note
from lab.base.errors import LabError
from lab.profiling.ncu_table import render, write_csv
from lab.profiling.roof import peaks_for
from lab.profiling.targets import CHECK_FAILED, REPO, WARMUP, Target


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
            summary = N.kernel_columns(kernel, *shape, peaks)
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
