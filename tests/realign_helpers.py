"""Helpers shared by the realign tests (tests/test_realign.py: the double_buffered twin;
tests/test_realign_warptiling.py: the warptiling twin); imported by module name, as pytest puts
tests/ on sys.path."""

from __future__ import annotations

import torch


def padding_of(op):
    """The padding of a realign buffer: the elements of each line past the operand's contiguous
    dimension, up to its leading dimension."""
    t = op.tensor
    if op.row_major:
        return t.as_strided((op.rows, op.s0), (op.s0, 1))[:, op.cols:]
    return t.as_strided((op.s1, op.cols), (1, op.s1))[op.rows:, :]


def offset_view(rows, cols, ld, start, col_major=False):
    """A rows x cols view with leading dimension `ld` that starts `start` elements into its
    storage (start = 1: a base 4 bytes past a 16-byte boundary)."""
    lines, width = (cols, rows) if col_major else (rows, cols)
    store = torch.full((start + lines * ld,), float("nan"))
    view = store[start:].view(lines, ld)[:, :width]
    return view.t() if col_major else view
