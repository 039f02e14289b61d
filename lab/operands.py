"""Temporary compatibility module (lab/_compat.py): the operand check and description now live in
lab/base/: checks, describe, dtypes, entry, index_range, needs, padding, problem, timer.

.ab/rewrite_imports.py rewrites the imports of this path and deletes this file.
"""

# ruff: noqa: F401
from lab.base.checks import check_operands, device_name, overlap_message, scales_for
from lab.base.describe import describe
from lab.base.dtypes import (DTYPE_NAMES, OUT_DTYPE_NAMES, PRECISION_OF_DTYPE, SCALED, dtypes_of,
                             precision_for)
from lab.base.entry import (INTERPRETER_S_PER_WORK, INTERPRETER_WARN_WORK, _WARNED_INTERPRETER,
                            entry)
from lab.base.index_range import (INDEX_LIMIT, INDEX_MARGIN, SIZE_LIMIT, check_index_range,
                                  fits_32bit, max_square_side, needs_offsets64, span)
from lab.base.needs import CUDA, TRITON, Needs
from lab.base.padding import Padded
from lab.base.problem import Operand, Problem
from lab.base.timer import timer

from lab._compat import forward  # noqa: E402

forward(__name__)
