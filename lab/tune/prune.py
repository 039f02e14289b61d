"""What the tuner asks before it launches a configuration, all of it read from the launcher's
declared OFFER (lab/base/contract.py) or from the resources a build reports: whether validate()
accepts it, what build it resolves to for the shape, and whether that build is worth timing."""

from __future__ import annotations

from typing import Callable

from lab.tune.seeds import SEED_SMS


def validator(offer, precision: str = "fp32") -> Callable[[dict], str | None]:
    """params -> None if the launcher's OFFER.validate(params, precision) accepts them, else its
    sentence (Offer.check)."""

    def why_not(params: dict) -> str | None:
        return offer.check(params, precision)

    return why_not


def build_identity(offer, M: int, N: int, K: int, precision: str = "fp32",
                   sms: int | None = None) -> Callable[[dict], tuple]:
    """identity(params) for search(): the configuration as the launcher will build and launch it
    for an M x N x K problem on a GPU of `sms` SMs, from OFFER.resolve(params, M, N, K,
    precision, sms)
    (automatic values such as 0 made concrete), as a sorted tuple of items. The contract's default
    resolve() returns the parameters unchanged: then every value tuple is its own build."""
    sms = int(sms or SEED_SMS)
    known: dict[tuple, tuple] = {}  # the search asks again for the same configurations

    def identity(params: dict) -> tuple:
        k = tuple(sorted(params.items()))
        if k not in known:
            known[k] = tuple(sorted(offer.resolve(dict(params), M, N, K, precision,
                                                  sms).items()))
        return known[k]

    return identity


def resource_problem(res: dict | None, limits=None) -> str | None:
    """Why a launch with these resources (a Prepared launch's `resources`: registers,
    smem_static, smem_dynamic, spill_bytes, threads) is not worth timing, or None: spills, or a
    block that does not fit one SM of `limits` (lab.occupancy; sm_90 by default)."""
    from lab.occupancy import SM90, from_resources

    if not res:
        return None
    spills = int(res.get("spill_bytes") or 0)
    if spills:
        return f"{spills} bytes of register spills"
    if res.get("threads") is None or res.get("registers") is None:
        return None
    limits = limits or SM90
    try:
        occ = from_resources(res, limits)
    except ValueError as exc:
        return str(exc)
    if occ.blocks_per_sm < 1:
        return f"no block fits on one {limits.name} SM (limited by {occ.limiter})"
    return None
