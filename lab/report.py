"""Temporary compatibility module (lab/_compat.py): the rows now live in lab/row.py (the Row record,
its statuses), lab/computed.py (GFLOPS, % of cuBLAS, noise) and lab/repeats.py (medians over
repeats).

.ab/rewrite_imports.py rewrites the imports of this path and deletes this file.
"""

# ruff: noqa: F401
from lab.computed import (baseline_within_noise, finalize, gflops, pct_of, time_spread_pct,
                          within_noise)
from lab.repeats import repeat_key, summarize_repeats
from lab.row import OK_STATUSES, ROW_FIELDS, Row

from lab._compat import forward  # noqa: E402

forward(__name__)
