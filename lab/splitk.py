"""Temporary compatibility module (lab/_compat.py): the split-K arithmetic now lives in lab/base/splitk.py.

.ab/rewrite_imports.py rewrites the imports of this path and deletes this file.
"""

# ruff: noqa: F401
from lab.base.splitk import (AUTO, MAX_CHAIN, MIN_SPLIT_K, SMALL_TILE, SPLITS, TARGET, TARGETS,
                            allowed_splits, auto_split, auto_tile_and_split, cdiv, few_tiles,
                            nearest_split, padded_area, tile_count)

from lab._compat import forward  # noqa: E402

forward(__name__)
