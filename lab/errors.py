"""Temporary compatibility module (lab/_compat.py): LabError and CompileError now live in lab/base/errors.py.

.ab/rewrite_imports.py rewrites the imports of this path and deletes this file.
"""

# ruff: noqa: F401
from lab.base.errors import CompileError, LabError

from lab._compat import forward  # noqa: E402

forward(__name__)
