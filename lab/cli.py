"""What the lab's commands share: argparse errors as LabError, one-sentence error exits, notes
wrapped to the terminal, counts with the right plural, and the check that an output path can be
written."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from lab.base.errors import LabError


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: one sentence, exit 2
        raise LabError(f"{message} (see python -m {self.prog} --help)")


def guarded(main: Callable[[list[str] | None], int], argv: list[str] | None) -> int:
    """Run a command's main; a LabError becomes `error: <sentence>` on stderr and exit 2."""
    try:
        return main(argv)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141


def terminal_width(default: int = 80) -> int:
    """The width notes are wrapped to: $COLUMNS, else the terminal's, else `default` (a pipe or a
    log)."""
    import shutil

    return max(20, shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, width: int | None = None, indent: str = "",
         subsequent: str | None = None) -> str:
    """`text` as lines of at most `width` characters (the terminal's by default), broken only at
    spaces: never inside a word, a number or a path (a single word longer than a line stays
    whole on its own line)."""
    import textwrap

    width = width or terminal_width()
    subsequent = indent if subsequent is None else subsequent
    return "\n".join(textwrap.wrap(text, width, initial_indent=indent,
                                   subsequent_indent=subsequent, break_long_words=False,
                                   break_on_hyphens=False)) or indent.rstrip()


def note(text: str, file=None, width: int | None = None, indent: str = "",
         subsequent: str = "  ") -> None:
    """Print a note wrapped to the terminal's width (continuation lines indented)."""
    print(wrap(text, width, indent, subsequent), file=file or sys.stdout, flush=True)


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 row', '2 rows', '0 rows' (`many` for an irregular plural: plural(2, 'entry',
    'entries'))."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def check_writable(path: str) -> tuple:
    """Refuse at once (one LabError sentence) a --csv path that cannot be written, before a long
    run starts; create missing parent folders. Returns (csv path, the .env.json beside it)."""
    from pathlib import Path

    csv = Path(path)
    env = csv.with_suffix(".env.json")
    for p in (csv, env):
        if p.is_dir():
            raise LabError(f"cannot write {p}: it is a folder; give a file name such as "
                           f"{p / 'run.csv'}")
    for parent in csv.parents:  # the nearest existing ancestor must be a folder
        if parent.exists():
            if not parent.is_dir():
                raise LabError(f"cannot write {csv}: {parent} is a file, not a folder")
            break
    try:
        csv.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create the folder {csv.parent} for {csv}: "
                       f"{exc.strerror or exc}") from None
    for p in (csv, env):
        existed = p.exists()
        try:
            with open(p, "a"):
                pass
        except OSError as exc:
            raise LabError(f"cannot write {p}: {exc.strerror or exc}") from None
        if not existed:
            p.unlink(missing_ok=True)  # another process may have checked the same path at once
    return csv, env


def check_folder(path: str, what: str):
    """Refuse at once (one LabError sentence naming `path` and the option `what`) a folder that
    cannot be created or written into, before a long run starts; create it if missing. Returns
    the folder as a Path."""
    import tempfile
    from pathlib import Path

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise LabError(f"{what} {folder}: it is a file, not a folder; give a folder such as "
                       f"out/plots")
    for parent in folder.parents:  # the nearest existing ancestor must be a folder
        if parent.exists():
            if not parent.is_dir():
                raise LabError(f"{what} {folder}: cannot create it, {parent} is a file, not a "
                               f"folder")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabError(f"{what} {folder}: cannot create that folder ({exc.strerror or exc}); "
                       f"give a folder you can write, such as out/plots") from None
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".lab-write-test-"):
            pass
    except OSError as exc:
        raise LabError(f"{what} {folder}: cannot write into that folder "
                       f"({exc.strerror or exc}); give a folder you can write, such as "
                       f"out/plots") from None
    return folder
