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
