"""The command lines' axes: the operand layouts, and the comma lists of names (backends, layouts,
precisions) that `lab.compare`, `lab.profile` and `lab.autotune` parse.

A low module: it imports only lab.base.errors and lab.stages (the registry), so every command can
use it without importing another command.
"""

from __future__ import annotations

from lab.base.errors import LabError
from lab.stages import BACKENDS

# Operand layouts, BLAS naming: first letter A, second B; n = row-major, t = stored transposed.
LAYOUTS = ("nn", "nt", "tn", "tt")


def parse_choices(text: str, valid: tuple, what: str, hint: str) -> list[str]:
    """A comma list of names from `valid` (case-insensitive, duplicates dropped), or one sentence
    naming the unknown ones."""
    names = [x.strip().lower() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in valid]
    if bad or not names:
        raise LabError(f"unknown {what} {', '.join(bad) or repr(text)}; choose from "
                       f"{', '.join(valid)} ({hint})")
    return list(dict.fromkeys(names))


def parse_backends(text: str) -> list[str]:
    return parse_choices(text, BACKENDS, "backend", "comma list")


def parse_layouts(text: str) -> list[str]:
    return parse_choices(text, LAYOUTS, "layout",
                         "first letter A, second B; t = stored transposed")
