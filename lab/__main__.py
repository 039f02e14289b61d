"""python -m lab: what the lab's commands are, one line each (exit 0).

The lab itself is a set of commands, `python -m lab.<command>`; this page only points to them.
"""

from __future__ import annotations

import sys

# (command, what it does): the order a newcomer meets them in (README.md, "Using it"); each
# description fits one line of 80 columns beside the names
COMMANDS = (
    ("lab.compare", "check and time the stages next to cuBLAS (start here)"),
    ("lab.lesson", "a stage's kernels as a diff from the stage it builds on"),
    ("lab.autotune", "search a stage's parameters on a GPU; --dry-run needs none"),
    ("lab.dispatch", "which stage auto (lab.matmul's default) picks; its table"),
    ("lab.model", "a Llama block and a short training run through the lab, beside torch"),
    ("lab.profile", "Nsight Compute counters per kernel; --sass, --ptx need no GPU"),
    ("lab.doctor", "what this machine can do: versions, NVRTC, ncu, clocks"),
    ("lab.plot", "PNGs (ladder, sweep, roofline, occupancy) of a run's CSV"),
    ("lab.results", "results/README.md, summaries and plots from the committed run"),
    ("lab.occupancy", "theoretical occupancy of a block (threads, registers) by hand"),
)


def text(width: int | None = None) -> str:
    """The overview, wrapped to `width` (the terminal's by default) at spaces."""
    from lab.cli import wrap

    name = max(len(c) for c, _ in COMMANDS)
    lines = ["The CUDA x Triton matmul kernel lab. Its commands, python -m lab.<command>",
             "(each takes --help):", ""]
    for command, what in COMMANDS:
        lines.append(wrap(what, width, indent=f"  {command:<{name}}  ",
                          subsequent=" " * (name + 4)))
    lines += ["", wrap("Start with python -m lab.compare --stage tiled; README.md says more, and "
                       "docs/ARCHITECTURE.md shows how the lab is built.", width)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the overview (exit 0); anything but --help after `python -m lab` is a mistake: one
    sentence, exit 2."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] not in ("-h", "--help"):
        print(f"error: python -m lab takes no arguments ({args[0]!r} was given); run one of its "
              f"commands, such as python -m lab.compare --stage tiled (python -m lab lists them)",
              file=sys.stderr)
        return 2
    print(text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
