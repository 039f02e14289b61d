"""Temporary compatibility module (lab/_compat.py): the launcher contract now lives in lab/base/contract.py.

.ab/rewrite_imports.py rewrites the imports of this path and deletes this file.
"""

# ruff: noqa: F401
from lab.base.contract import PRECISIONS, Offer, Prepared, Tuning

from lab._compat import forward  # noqa: E402

forward(__name__)
