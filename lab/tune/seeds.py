"""Split-K seeds: for a shape with fewer output tiles than the GPU has SMs, configurations that
split K so that tiles x split lands near 1x, 2x and 4x the SM count, tried right after the
defaults (lab/tune/__init__.py, step 3); for a launcher with stream-K (Tuning.streamk), also the
defaults with it on where the tiles pass a round of the SMs unevenly. The parameters they set are
the launcher's to name: `OFFER.tuning.split` and `OFFER.tuning.tile` or `tile_of`, and
`OFFER.tuning.streamk` (lab/base/contract.py Tuning); a space without a split
gets no seeds. The arithmetic (tiles, the splits a K allows, the split nearest a target) is
lab/base/splitk.py's, the same the launchers' automatic split (`splitk=0`) uses; the seeds allow
shorter splits than that default (SEED_MIN_SPLIT_K: the search measures what the rule can only
estimate)."""

from __future__ import annotations

from typing import Callable

from lab.base.device import DEFAULT_SMS
from lab.base.splitk import TARGETS, allowed_splits, few_tiles, nearest_split, tile_count
from lab.tune.space import Space, fmt, nearest_valid

SEED_SMS = DEFAULT_SMS  # SMs the split-K seeds assume when the GPU's count is not known (132)
SEED_TILES = 2  # block tiles seeded: the defaults' and one smaller (at most 3 seeds each)
SEED_TARGETS = TARGETS  # tiles x split is aimed at these multiples of the SM count (1, 2, 4)
SEED_MIN_SPLIT_K = 256  # a seed's split leaves every split at least this much of K
SEED_REPAIR_LIMIT = 2_000  # configurations validate() may be asked for a seed it refuses


def splitk_seeds(space: Space, M: int, N: int, K: int, sm_count: int | None = None,
                 validate: Callable[[dict], str | None] | None = None) -> list[dict]:
    """The split-K seeds of `space` at M x N x K, in the order they are tried: the defaults' tile
    first, then the smaller tiles; per tile the split nearest 1x, 2x, 4x the SM count. [] when
    the space searches no split (space.tuning.split), has no block tile (space.tuning.tile), or
    the shape has enough tiles or too short a K. Seeds equal to the defaults are left out; one
    equal to what the defaults' automatic split (splitk=0) resolves to is the same build, tried
    once (the search's build identity, OFFER.resolve)."""
    sms = int(sm_count or SEED_SMS)
    name = space.tuning.split
    split = next((p for p in space.searched if p.name == name), None) if name else None
    edges = tuple(space.tuning.tile)
    default = space.default
    tile_of = space.tuning.tile_of
    if split is None or K < 1:
        return []
    if tile_of is not None and not edges:  # the defaults' tile only, the split alone seeded
        return _split_only_seeds(space, split, tile_of(default), M, N, K, sms, validate)
    if len(edges) != 2 or any(e not in default for e in edges):
        return []
    searched = {p.name: p for p in space.searched}

    def sizes(edge: str) -> list:  # the defaults' edge, then the smaller choices, largest first
        p = searched.get(edge)
        if p is None:
            return [default[edge]]
        return sorted((c for c in p.choices if c <= default[edge]), reverse=True)

    rows, cols = sizes(edges[0]), sizes(edges[1])
    tiles_tried: list[tuple] = []
    for step in range(SEED_TILES):
        t = (rows[min(step, len(rows) - 1)], cols[min(step, len(cols) - 1)])
        if t not in tiles_tried:
            tiles_tried.append(t)
    splits = allowed_splits(split.choices, K, SEED_MIN_SPLIT_K)  # the automatic 0 left out
    if not few_tiles(tile_count(M, N, *tiles_tried[0]), sms) or not any(s > 1 for s in splits):
        return []
    seeds, keys = [], {space.key(default)}
    for bm, bn in tiles_tried:
        tiles = tile_count(M, N, bm, bn)
        for factor in SEED_TARGETS:
            s = nearest_split(tiles, factor * sms, splits)
            seed = space.full({**{n: default[n] for n in space.names}, edges[0]: bm,
                               edges[1]: bn, name: s})
            if validate is not None and validate(seed) is not None:
                seed = nearest_valid(space, validate, seed, (*edges, name), SEED_REPAIR_LIMIT)
            if seed is not None and space.key(seed) not in keys:
                keys.add(space.key(seed))
                seeds.append(seed)
    return seeds


def _split_only_seeds(space: Space, split, tile: tuple[int, int], M: int, N: int, K: int,
                      sms: int, validate) -> list[dict]:
    """splitk_seeds for a launcher whose tile is not two edge parameters (Tuning.tile_of): the
    defaults with the split nearest 1x, 2x, 4x the SM count over the defaults' `tile` where its
    tiles are fewer than the SMs; and, where they pass a round of the SMs unevenly (more tiles
    than SMs, not a multiple of them), the defaults with stream-K on (Tuning.streamk)."""
    splits = allowed_splits(split.choices, K, SEED_MIN_SPLIT_K)
    tiles = tile_count(M, N, *tile)
    default = space.default
    seeds, keys = [], {space.key(default)}

    def add(seed: dict) -> None:
        if validate is not None and validate(seed) is not None:
            return
        if space.key(seed) not in keys:
            keys.add(space.key(seed))
            seeds.append(seed)

    if few_tiles(tiles, sms) and any(s > 1 for s in splits):
        for factor in SEED_TARGETS:
            add(space.full({**{n: default[n] for n in space.names},
                            split.name: nearest_split(tiles, factor * sms, splits)}))
    streamk = space.tuning.streamk
    if streamk in space.names and tiles > sms and tiles % sms:
        add(space.full({**{n: default[n] for n in space.names}, streamk: 1}))
    return seeds


def seed_text(seed: dict, tuning) -> str:
    """rows=128,cols=128,split=16 (the offer's own names): what makes a split-K seed; a stream-K
    seed is its parameter at 1 (STREAMK=1)."""
    if tuning.streamk and seed.get(tuning.streamk) == 1:
        return f"{tuning.streamk}=1"
    names = (*tuning.tile, tuning.split) if tuning.split else tuple(tuning.tile)
    return ",".join(f"{k}={fmt(seed[k])}" for k in names if k in seed)

