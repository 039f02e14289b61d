"""Temporary: the old import paths of names that moved (into lab/base/, and out of lab/report.py).

A compatibility module (lab/operands.py, lab/errors.py, lab/contract.py, lab/splitk.py,
lab/report.py) holds nothing but `from <new home> import <names>` lines and a call of
`forward(__name__)`, so that the launchers, tests and scripts that import the old paths keep
working while other work on them is under way. `forward` makes an assignment to the old module's
attribute (a test's monkeypatch.setattr) reach the new home too, so patching either path patches
the one object the code reads. `.ab/rewrite_imports.py` rewrites every import to the new homes
(it reads them off these modules' import lines) and deletes these modules and this one.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types


def homes_of(path) -> dict[str, tuple[str, str]]:
    """name -> (home module, name there) for every `from X import a [as b]` of the file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__" \
                and node.module != "lab._compat":
            for a in node.names:
                out[a.asname or a.name] = (node.module, a.name)
    return out


def forward(module_name: str) -> None:
    """Make assignments to module `module_name`'s re-exported names reach their homes."""
    old = sys.modules[module_name]
    homes = homes_of(old.__file__)

    class Forwarding(types.ModuleType):
        def __setattr__(self, name, value):
            if name in homes:
                home, there = homes[name]
                setattr(importlib.import_module(home), there, value)
            super().__setattr__(name, value)

    old.__class__ = Forwarding
