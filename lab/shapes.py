"""Shapes are data: the default sets, the parser for --sizes, and the suites it takes by name
(lab/suites.py: llm, deepseek, kernelbench)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from lab.base.errors import LabError
from lab.base.index_range import SIZE_LIMIT
from lab.suites import SUITES, Entry, labels


class Shape(NamedTuple):
    M: int
    N: int
    K: int

    def __str__(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K


# On a GPU: aligned and unaligned squares, and a non-square shape with an odd K.
GPU_SIZES = "1024,1025,2048,4096,4096x2048x1000"
# Under the Triton interpreter (CPU mode): small, odd, not tile multiples.
CPU_SIZES = "64,65,17x33x129"
# Odd shapes the tests run on: 1s, primes, not multiples of any tile.
TEST_SHAPES = (Shape(1, 1, 1), Shape(17, 33, 129), Shape(65, 64, 63), Shape(3, 130, 2),
               Shape(64, 64, 64))
GPU_TEST_SHAPES = (*TEST_SHAPES, Shape(1, 1025, 17), Shape(1025, 1025, 1025),
                   Shape(1000, 1500, 257), Shape(256, 384, 1024))
# Named size sets --sizes takes in its comma list. sweep: the powers of two 256..8192 and, next to
# them, one more (odd, so no tile divides it: the unaligned edge each kernel must handle).
PRESETS = {
    "sweep": "256,257,512,1024,1025,2048,2049,4096,4097,8192",
}


def parse_sizes(text: str) -> list[Shape]:
    """'1024,1025,512x768x333' -> shapes. A plain number is square; MxNxK names all three; a
    preset name (sweep) stands for its sizes, in place; a suite name (llm, deepseek, kernelbench:
    lab/suites.py), with an optional M filter (llm@1-64), for its shapes. Repeated shapes count
    once. parse_labelled_sizes() gives the suites' labels and layouts too."""
    return parse_labelled_sizes(text).shapes


@dataclass
class Sizes:
    """What --sizes asked for: the shapes, in order, each once; the suite entries of each shape
    (lab/suites.py: model, layer, layout), and which shapes were also given as plain sizes."""

    shapes: list[Shape] = field(default_factory=list)
    entries: dict[Shape, list[Entry]] = field(default_factory=dict)
    plain: set[Shape] = field(default_factory=set)

    def layouts(self, shape: Shape, default: list[str]) -> list[str]:
        """The layouts `shape` runs in when --layout was not given: its suites' layouts, in
        order, and `default` (nn) where it is a plain size too."""
        own = [e.layout for e in self.entries.get(shape, [])]
        if shape in self.plain or not own:
            own += default
        return list(dict.fromkeys(own))

    def label(self, shape: Shape, layout: str) -> tuple[str, str]:
        """(model, layer) of the rows of `shape` in `layout`: the entries of that shape in that
        layout; where none is (an explicit --layout, or the shape also given as a plain size),
        every entry of the shape; ("", "") for a shape of no suite."""
        entries = self.entries.get(shape, [])
        return labels([e for e in entries if e.layout == layout] or entries)

    def shape_layouts(self, default: list[str]) -> dict[Shape, list[str]]:
        """layouts() of every shape of a suite (lab.run's RunSpec.shape_layouts)."""
        return {s: self.layouts(s, default) for s in self.shapes if s in self.entries}

    def labels(self, layouts_of) -> dict[tuple[Shape, str], tuple[str, str]]:
        """label() of every suite shape in each layout `layouts_of(shape)` gives it (lab.run's
        RunSpec.labels)."""
        return {(s, lay): self.label(s, lay) for s in self.shapes if s in self.entries
                for lay in layouts_of(s)}


def _suite_entries(token: str) -> list[Entry] | None:
    """The entries a suite token stands for ('llm', 'llm@1-64', 'deepseek@1+128'), or None when
    the token names no suite."""
    name, at, selection = token.partition("@")
    if name not in SUITES:
        if at:
            raise LabError(f"size {token!r} names no suite before '@'; the suites are "
                           f"{', '.join(SUITES)}")
        return None
    suite = SUITES[name]
    if not at:
        return list(suite.entries)
    keep = []  # (lo, hi) ranges of M, inclusive
    for part in selection.split("+"):
        lo, dash, hi = part.partition("-")
        try:
            keep.append((int(lo), int(hi)) if dash else (int(lo), int(lo)))
        except ValueError:
            raise LabError(f"size {token!r} must give after '@' the M values to keep, numbers "
                           f"or ranges joined by '+', e.g. {name}@1-64 or {name}@1+16+64"
                           ) from None
    entries = [e for e in suite.entries if any(lo <= e.M <= hi for lo, hi in keep)]
    if not entries:
        raise LabError(f"size {token!r} selects none of {name}'s shapes; its M values are "
                       f"{', '.join(map(str, suite.ms))}")
    return entries


def parse_labelled_sizes(text: str) -> Sizes:
    """parse_sizes(), keeping what each suite says of its shapes: Sizes.entries (the model,
    layer and layout of each) and Sizes.plain (the shapes given as numbers)."""
    out = Sizes()
    tokens = []
    for token in (t.strip().lower() for t in text.split(",")):
        tokens += PRESETS[token].split(",") if token in PRESETS else [token]
    for token in tokens:
        if not token:
            continue
        entries = _suite_entries(token)
        if entries is not None:
            for e in entries:
                shape = Shape(e.M, e.N, e.K)
                if shape not in out.entries:
                    out.entries[shape] = []
                if e not in out.entries[shape]:
                    out.entries[shape].append(e)
                if shape not in out.shapes:
                    out.shapes.append(shape)
            continue
        shape = _plain_size(token)
        out.plain.add(shape)
        if shape not in out.shapes:
            out.shapes.append(shape)
    if not out.shapes:
        raise LabError("--sizes is empty; give sizes such as 1024,1025,512x768x333")
    return out


def _plain_size(token: str) -> Shape:
    """'1024' or '512x768x333' -> a Shape, or one LabError sentence."""
    parts = token.split("x")
    if len(parts) not in (1, 3):
        raise LabError(f"size {token!r} must be one number (square) or MxNxK, e.g. 512x768x333")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise LabError(
            f"size {token!r} must be whole numbers, one (square) or MxNxK, e.g. 512x768x333, "
            f"a preset ({', '.join(PRESETS)}) or a suite ({', '.join(SUITES)})"
        ) from None
    if any(d < 1 for d in dims):
        raise LabError(f"size {token!r} must be positive: every dimension needs M, N, K >= 1")
    shape = Shape(*(dims * 3 if len(dims) == 1 else dims))
    # the kernels take sizes as 32-bit ints (lab/base/problem.py); a matrix past 2^31 elements
    # runs with 64-bit offsets
    if max(shape) > SIZE_LIMIT:
        raise LabError(f"size {token} has a dimension above {SIZE_LIMIT:,}, beyond the 32-bit "
                       f"sizes the kernels take; choose smaller sizes")
    return shape
