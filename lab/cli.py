"""What the lab's commands share: argparse errors as LabError, and one-sentence error exits."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from lab.errors import LabError


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
            p.unlink()
    return csv, env
