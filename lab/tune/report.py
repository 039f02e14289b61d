"""What the tuner prints: progress while it searches (a rich bar on a terminal, plain lines in
logs and pipes), the report of one search or cache hit, and the lines the dry run shares with it.
docs/AUTOTUNE.md explains each line."""

from __future__ import annotations

import sys
import time

from lab.cli import plural
from lab.tune.search import TOP, Progress, Result, Trial
from lab.tune.seeds import seed_text
from lab.tune.space import params_text
from lab.tune.tuner import Outcome

PROGRESS_EVERY_S = 2.0  # a progress line at most this often (logs and pipes)


def reporter(title: str):
    """A progress callback and a closer: a rich bar on a terminal, plain lines otherwise."""
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        console = Console(stderr=True)
        terminal = console.is_terminal
    except ImportError:  # rich is a dependency, but plain text works without it
        terminal = False
    if not terminal:
        return plain_progress(title, sys.stderr), lambda: None
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    bar.start()
    task = bar.add_task(title, total=None)

    def on_progress(phase, done, total, trial, best):
        text = f"{title} {phase}" + (f", best {best.ms:.3f} ms" if best and best.ms else "")
        bar.update(task, completed=done, total=total, description=text)

    return on_progress, bar.stop


def plain_progress(title: str, stream) -> Progress:
    """One line per trial (logs and pipes)."""

    def on_progress(phase, done, total, trial, best):
        if trial is None:
            return
        what = {"timed": f"{trial.ms:.3f} ms" if trial.ms is not None else "",
                "wrong": "WRONG: " + trial.detail, "error": "error: " + trial.detail,
                "pruned": "pruned: " + trial.detail}.get(trial.status, trial.status)
        if phase == "refine":
            what = f"refined {trial.refined_ms:.3f} ms"
        elif trial.how == "seed":
            what += " (split-K seed)"
        print(f"  {title} {phase} [{done}/{total}] {params_text(trial.params)}: {what}",
              file=stream, flush=True)

    return on_progress



def same_text(r: Result) -> str:
    """The report's note on configurations merged by search()'s identity, or ""."""
    if not r.same_build:
        return ""
    return (f"; {r.same_build} more are the same build as one of those once the automatic "
            f"values are resolved for this shape, and are not tried again")


def report_lines(outcome: Outcome, title: str) -> list[str]:
    """What the CLI prints for one search (or cache hit); docs/AUTOTUNE.md explains each line."""
    lines = [f"{title}:"]
    if outcome.note:
        lines.append(f"  note: {outcome.note}")
    e, r = outcome.entry, outcome.result
    if outcome.cached:
        lines.append(f"  cached ({e.get('date', '?')[:10]}, {e.get('configs_tried', '?')} configs; "
                     f"--retune searches again): {params_text(e['params'])}")
        lines.append("  " + times_line(e))
        return lines
    invalid = len(r.invalid)
    lines.append(f"  space {r.space}" + (f"; sampled {r.considered}" if r.sampled else ""))
    lines.append(f"  {r.valid} pass validate ({invalid} rejected{same_text(r)}); "
                 f"tried {len(r.trials)}: "
                 f"{r.count('timed')} timed, {r.count('pruned')} pruned by resources, "
                 f"{r.count('wrong')} wrong, {plural(r.count('error'), 'error')}; "
                 f"{r.not_reached} not reached"
                 + (f" (stopped: {r.stopped})" if r.stopped else "") + f"; {r.elapsed_s:.0f} s")
    if r.seeds:
        sk = (f"; {r.tuning.streamk}=1 where the tiles pass a round of the SMs unevenly"
              if r.tuning.streamk else "")
        lines.append(f"  split-K seeds (tiles x {r.tuning.split} near 1x, 2x, 4x {r.sm_count} "
                     f"SMs{sk}), tried after the defaults: "
                     + "; ".join(seed_text(s, r.tuning) for s in r.seeds))
    ranked = r.ranked[:TOP + 2]
    if ranked:
        d_ms = r.default_trial.best_ms if r.default_trial and r.default_trial.status == "timed" \
            else None
        lines.append(f"  {'rank':>4} {'search ms':>10} {'refined ms':>10} {'vs default':>10}  "
                     f"params")
        for i, t in enumerate(ranked, 1):
            refined = f"{t.refined_ms:.3f}" if t.refined_ms is not None else "-"
            vs = f"{d_ms / t.best_ms:.2f}x" if d_ms and t.best_ms else "-"
            mark = " (defaults)" if r.default_trial is t else ""
            lines.append(f"  {i:>4} {t.ms:>10.3f} {refined:>10} {vs:>10}  "
                         f"{params_text(t.params)}{mark}")
    for t in r.trials:
        if t.status == "wrong":
            lines.append(f"  WRONG (discarded): {params_text(t.params)}: {t.detail}")
    errors = [t for t in r.trials if t.status == "error"]
    for t in errors[:3]:
        lines.append(f"  error: {params_text(t.params)}: {t.detail}")
    if len(errors) > 3:
        lines.append(f"  ... and {plural(len(errors) - 3, 'more error')}")
    if e is None:
        lines.append("  no configuration passed its check; nothing cached")
        return lines
    lines.append(f"  winner: {params_text(e['params'])}")
    lines.append("  " + times_line(e))
    lines.append(f"  cached as {e['key']}")
    return lines


def times_line(e: dict) -> str:
    text = f"{e['median_ms']:.3f} ms"
    if e.get("default_ms"):
        text += f", defaults {e['default_ms']:.3f} ms ({e['default_ms'] / e['median_ms']:.2f}x)"
    if e.get("cublas_ms"):
        text += f", cuBLAS {e['cublas_ms']:.3f} ms ({100 * e['cublas_ms'] / e['median_ms']:.1f}% " \
                f"of cuBLAS)"
    return text



class Ticker:
    """Progress of a dry-run phase that may take more than a moment: a transient rich bar on a
    terminal, else a line on stderr at most every PROGRESS_EVERY_S seconds (and a last one when a
    phase that printed any ends)."""

    def __init__(self, title: str, total: int, stream=None):
        self.title, self.total, self.done = title, total, 0
        self.stream = stream or sys.stderr
        self.start = self.last = time.monotonic()
        self.printed = 0  # the count the last line showed
        self.bar = None
        sys.stdout.flush()  # what was said so far comes before the progress
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            console = Console(file=self.stream)
            if console.is_terminal:
                self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                    MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                    transient=True)
                self.bar.start()
                self.task = self.bar.add_task(title, total=total)
        except ImportError:  # rich is a dependency, but plain lines work without it
            self.bar = None

    def set_total(self, total: int) -> None:
        if total != self.total:
            self.total = total
            if self.bar is not None:
                self.bar.update(self.task, total=total)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            return
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.printed = self.done
            print(f"  {self.title}: {self.done}/{self.total} ({now - self.start:.0f} s)",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif self.printed and self.printed != self.done:
            print(f"  {self.title}: {self.done}/{self.total} "
                  f"({time.monotonic() - self.start:.0f} s)", file=self.stream, flush=True)



def thousands(x: int) -> str:
    """12,803: a count with thousands separators."""
    return f"{x:,}"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def resources_text(res: dict) -> str:
    from lab.occupancy import SM90, from_resources

    occ = from_resources(res, SM90)
    return (f"{res['registers']} regs, "
            f"{(res['smem_static'] or 0) + (res['smem_dynamic'] or 0)} B smem, "
            f"{res['threads']} threads, {occ.blocks_per_sm} blocks/SM "
            f"({100 * occ.occupancy:.0f}%)")


def trial_line(i: int, t: Trial, seed: bool = False) -> str:
    head = f"  {i:>4}. {params_text(t.params)}" + (" (split-K seed)" if seed else "")
    if t.status == "pruned":
        return f"{head}: pruned: {t.detail}"
    if t.status == "error":
        return f"{head}: error: {t.detail}"
    if t.resources:
        return f"{head}: {resources_text(t.resources)}"
    return head
