"""The search space of one stage x backend: the registry's choices of every parameter, those the
tuner pins (the numerics switches, single choices), a user's restriction, and the order of a
configuration's neighbours (lab/tune/__init__.py, step 1)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from lab.cli import plural
from lab.base.contract import Tuning
from lab.base.errors import LabError

ENUMERATE_LIMIT = 50_000  # a larger product is sampled down to this many configurations
ORDER_RNG = 0  # the fixed state of the random generator that shuffles (and samples) the space
NEAREST_VALID_LIMIT = 20_000  # configurations validate() may be asked for a restricted default

@dataclass(frozen=True)
class Space:
    """The parameters of one stage x backend the tuner searches, and those it pins."""

    stage: object  # lab.stages.Stage
    backend: str
    searched: tuple  # Params with more than one choice, in registry order
    pinned: dict  # name -> value: the numerics Params at their defaults, and single choices
    # name -> the values a restriction allows (registry order); its Params in `searched` carry
    # those choices and the restricted space's default, a single value is in `pinned`
    restricted: dict = field(default_factory=dict)
    tuning: Tuning = field(default_factory=Tuning)  # the launcher's OFFER.tuning (split-K seeds)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.searched)

    @property
    def size(self) -> int:
        return math.prod(len(p.choices) for p in self.searched)

    @property
    def default(self) -> dict:
        return self.full({p.name: p.default for p in self.searched})

    def full(self, values: dict) -> dict:
        """Every parameter of this backend, in registry order: `values`, else pinned, else the
        default."""
        out = {}
        for p in self.stage.params:
            if self.backend in p.backends:
                out[p.name] = values.get(p.name, self.pinned.get(p.name, p.default))
        return out

    def key(self, params: dict) -> tuple:
        return tuple(params[n] for n in self.names)

    def describe(self, dims: bool = True) -> str:
        """'864 configurations (name 3 x ... x name 2); pinned: name=0', with any restriction;
        without `dims` the product is left out (the dry run lists each parameter)."""
        dims_text = " x ".join(f"{p.name} {len(p.choices)}" for p in self.searched) or "nothing"
        pins = ", ".join(f"{k}={fmt(v)}" for k, v in self.pinned.items()
                         if k not in self.restricted)
        return (f"{self.size} configurations" + (f" ({dims_text})" if dims else
                                                 f", {plural(len(self.searched), 'parameter')} "
                                                 f"searched")
                + (f"; restricted: {restriction_text(self.restricted)}" if self.restricted
                   else "")
                + (f"; pinned: {pins}" if pins else ""))

    def enumerate(self, limit: int = ENUMERATE_LIMIT) -> tuple[list[dict], bool]:
        """The configurations to consider (the defaults first) and whether they are a sample."""
        default = self.default
        if self.size <= limit:
            out = [default] + [self.full(dict(zip(self.names, values)))
                               for values in itertools.product(*(p.choices for p in self.searched))]
            return unique(out, self.key), False
        rng = random.Random(ORDER_RNG)
        seen = {self.key(default)}
        out = [default]
        tries = 0
        while len(out) < limit and tries < 20 * limit:
            tries += 1
            values = {p.name: rng.choice(p.choices) for p in self.searched}
            k = self.key(values)
            if k not in seen:
                seen.add(k)
                out.append(self.full(values))
        return out, True

    def neighbours(self, params: dict) -> Iterable[dict]:
        """Configurations that differ from `params` in one parameter: parameters in registry order,
        nearest choices first (index distance, the lower one first on a tie)."""
        for p in self.searched:
            i = p.choices.index(params[p.name]) if params[p.name] in p.choices else 0
            others = sorted((j for j in range(len(p.choices)) if j != i),
                            key=lambda j: (abs(j - i), j))
            for j in others:
                yield {**params, p.name: p.choices[j]}


def space_of(stage, backend: str, restrict: dict | None = None,
             validate: Callable[[dict], str | None] | None = None) -> Space:
    """The search space of a registered stage (or stage name) for a backend.

    `restrict` (name -> allowed values, each one of the registry's choices) narrows parameters of
    this backend; names the stage declares only for other backends are ignored. A restricted
    parameter whose registry default is not allowed starts at its first given value, and with
    `validate`, a default it refuses moves to the nearest configuration it accepts. A Param marked
    `numerics` is pinned at its registry default. The space carries the launcher's
    OFFER.tuning (which parameters the split-K seeds set)."""
    from lab.stages import BACKENDS, get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    allowed = check_restriction(stage, restrict or {})
    searched, pinned, restricted = [], {}, {}
    for p in stage.params:
        if backend not in p.backends:
            continue
        if p.name in allowed:
            values = tuple(c for c in p.choices if c in allowed[p.name])
            restricted[p.name] = values
            start = p.default if p.default in values else allowed[p.name][0]
            if p.numerics or len(values) == 1:
                pinned[p.name] = start
            else:
                searched.append(replace(p, choices=values, default=start))
        elif p.numerics or len(p.choices) <= 1:
            pinned[p.name] = p.default
        else:
            searched.append(p)
    space = Space(stage, backend, tuple(searched), pinned, restricted,
                  stage.offer(backend).tuning)
    if validate is not None and space.searched and validate(space.default) is not None:
        nearest = nearest_valid(space, validate)
        if nearest is not None:
            space = replace(space, searched=tuple(replace(p, default=nearest[p.name])
                                                  for p in space.searched))
    return space


def check_restriction(stage, restrict: dict) -> dict[str, tuple]:
    """name -> the allowed values (deduplicated, as given), after checking that each name is a
    parameter of the stage and each value one of its registry choices (one sentence if not)."""
    declared = {p.name: p for p in stage.params}
    out = {}
    for name, values in restrict.items():
        p = declared.get(name)
        if p is None:
            raise LabError(f"stage {stage.name} has no parameter {name!r}; its parameters are "
                           f"{', '.join(declared) or 'none'}")
        values = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
        kept = []
        for v in values:
            if v not in p.choices or isinstance(v, bool) is not isinstance(p.default, bool):
                raise LabError(f"{name}={fmt(v)} is not a choice of stage {stage.name}; the "
                               f"registry's {name} choices are {choices_text(p)}, and the tuner "
                               f"searches only those")
            if v not in kept:
                kept.append(v)
        if not kept:
            raise LabError(f"the restriction of {name} of stage {stage.name} allows no value; "
                           f"give at least one of {choices_text(p)}")
        refused = numerics_refusal(p, kept)
        if refused:
            raise LabError(f"{refused}; leave it out of the restriction")
        out[name] = tuple(kept)
    return out


def numerics_refusal(p, values: list) -> str:
    """The first half of the sentence that refuses a restriction of a numerics Param to anything
    but its registry default (the tuner pins it there), or "" when `values` is allowed."""
    if p.numerics and list(values) != [p.default]:
        return f"{p.name} changes the numerics, so the tuner keeps it at {fmt(p.default)}"
    return ""


def nearest_valid(space: Space, validate: Callable[[dict], str | None], start: dict | None = None,
                   keep: tuple = (), limit: int = NEAREST_VALID_LIMIT) -> dict | None:
    """The configuration validate() accepts that differs from `start` (the defaults) in the
    fewest parameters, leaving those in `keep` alone (breadth first over Space.neighbours, so
    nearer choices and earlier parameters first), or None when none is found within `limit`
    checks."""
    start = space.full(start) if start is not None else space.default
    seen = {space.key(start)}
    frontier = [start]
    checks = 0
    while frontier:
        following = []
        for config in frontier:
            for n in space.neighbours(config):
                k = space.key(n)
                if k in seen or any(n[name] != start[name] for name in keep if name in start):
                    continue
                seen.add(k)
                n = space.full(n)
                if validate(n) is None:
                    return n
                checks += 1
                if checks >= limit:
                    return None
                following.append(n)
        frontier = following
    return None


def restriction_text(restricted: dict) -> str:
    """name=16|32, other=64|128: a restriction as the command line writes it."""
    return ", ".join(f"{k}={'|'.join(fmt(v) for v in vs)}" for k, vs in restricted.items())


def choices_text(p) -> str:
    return ", ".join(fmt(c) for c in p.choices)


def unique(items: list[dict], key: Callable) -> list[dict]:
    seen, out = set(), []
    for it in items:
        k = key(it)
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def fmt(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def params_text(params: dict) -> str:
    return ",".join(f"{k}={fmt(v)}" for k, v in params.items())

