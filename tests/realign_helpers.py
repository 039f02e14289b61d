"""Helpers of the realign tests (tests/test_realign.py: the double_buffered and warptiling
twins); imported by module name, as pytest puts tests/ on sys.path."""

from __future__ import annotations

import torch

from helpers import stage_module, stage_params

# a small tile, so that the interpreter visits several programs and k-steps quickly
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=4, num_warps=4, num_stages=2)


def triton_functions(stage: str):
    """(params, triton, prepare) of `stage`'s Triton launcher: the registry's Triton parameters
    for a variant (`params(**changes)`, as the harness hands them over), the launcher module, and
    `prepare(a, b, c, **changes)` on the SMALL tile with `changes`."""
    def params(**changes) -> dict:
        return stage_params(stage, "triton", **changes)

    def triton():
        return stage_module(stage, "triton")

    def prepare(a, b, c, **changes):
        return triton().prepare(a, b, c, **params(**{**SMALL, **changes}))

    return params, triton, prepare


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
