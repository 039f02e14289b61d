"""`stage:auto` rows: the cached winner of this GPU, stage, backend, shape bucket, precision and
layout (lab.compare and lab.run read it through resolve_variant), or the defaults and a sentence
saying why."""

from __future__ import annotations

from lab.tune.cache import bucket, cache_key, load_cache, source_hash
from lab.tune.gpu import gpu_available, gpu_name
from lab.tune.prune import validator
from lab.tune.search import DEFAULT_BUDGET_S
from lab.tune.space import fmt, space_of
from lab.tune.tuner import tune


def lookup(stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
           precision: str = "fp32", *, tune_if_missing: bool = False, mode: str = "gpu",
           cache=None, gpu: str | None = None,
           budget_s: float = DEFAULT_BUDGET_S) -> tuple[dict | None, str]:
    """(the cached winner's parameters for this backend, every one of them, or None; and one
    sentence for the row's detail saying which configuration runs and why)."""
    from lab.stages import get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    if gpu is None:
        if mode != "gpu" or not gpu_available():
            return None, ("auto: no GPU to look up a tuned configuration for, so the defaults "
                          "run")
        gpu = gpu_name()
    where = f"{bucket(M, N, K)} {layout} on {gpu}"
    entry = load_cache(cache).get(cache_key(gpu, stage.name, backend, M, N, K, precision, layout))
    how = "cached"
    if entry is None and tune_if_missing and mode == "gpu":
        outcome = tune(stage, backend, M, N, K, layout=layout, precision=precision, cache=cache,
                       gpu=gpu, budget_s=budget_s)
        entry, how = outcome.entry, "tuned now"
    if entry is None:
        return None, (f"auto: no tuned configuration for {where}, so the defaults run (python -m "
                      f"lab.autotune --stage {stage.name} --backend {backend} --sizes {M}x{N}x{K} "
                      f"--layout {layout})")
    problem = _stale(stage, backend, entry["params"], precision)
    if problem:
        return None, (f"auto: the cached configuration for {where} no longer fits the registry "
                      f"({problem}), so the defaults run; tune again with --retune")
    params = space_of(stage, backend).full({})
    declared = {p.name: p for p in stage.params if backend in p.backends}
    params.update({k: declared[k].coerce(v) for k, v in entry["params"].items() if k in params})
    speed = entry.get("speedup")
    changed = entry.get("source") not in (None, source_hash(stage, backend))
    return params, (f"auto: {how} winner for {where} ({entry.get('configs_tried', '?')} configs"
                    + (f", {speed:.2f}x the defaults" if speed else "")
                    + f", {str(entry.get('date', ''))[:10]})"
                    + ("; the kernel's files changed since it was tuned (--retune)" if changed
                       else ""))


def _stale(stage, backend: str, params: dict, precision: str = "fp32") -> str:
    """Why a cached configuration no longer fits the registry or the launcher's validate() in
    `precision`, or ""."""
    declared = {p.name: p for p in stage.params if backend in p.backends}
    for name, value in params.items():
        p = declared.get(name)
        if p is None:
            return f"{stage.name} has no {backend} parameter {name}"
        value = p.coerce(value)
        if value not in p.choices or isinstance(value, bool) is not isinstance(p.default, bool):
            return f"{name}={fmt(value)} is not a choice of {stage.name}"
    why = validator(stage.offer(backend), precision)({**space_of(stage, backend).full({}),
                                                      **params})
    return why or ""


def resolve(stage, backend: str, M: int, N: int, K: int, layout: str = "nn",
            precision: str = "fp32", *, tune_if_missing: bool = False, mode: str = "gpu",
            cache=None, gpu: str | None = None, budget_s: float = DEFAULT_BUDGET_S) -> dict | None:
    """The cached winner's parameters for a `stage:auto` row (all of this backend's parameters),
    or None: then the caller runs the defaults and says so (lookup() gives the sentence)."""
    return lookup(stage, backend, M, N, K, layout, precision, tune_if_missing=tune_if_missing,
                  mode=mode, cache=cache, gpu=gpu, budget_s=budget_s)[0]


def resolve_variant(variant, backend: str, M: int, N: int, K: int, layout: str = "nn",
                    precision: str = "fp32", *, mode: str = "gpu", tune_if_missing: bool = False,
                    cache=None, gpu: str | None = None, budget_s: float = DEFAULT_BUDGET_S):
    """(the Variant a row runs, a sentence for its detail). A normal variant comes back unchanged
    with ""; a `stage:auto` one as a plain Variant holding the cached winner's parameters for this
    backend (or the defaults), and the sentence saying which."""
    from lab.stages import Variant

    if not variant.auto:
        return variant, ""
    params, note = lookup(variant.stage, backend, M, N, K, layout, precision,
                          tune_if_missing=tune_if_missing, mode=mode, cache=cache, gpu=gpu,
                          budget_s=budget_s)
    return Variant(variant.stage, {**variant.stage.defaults(), **(params or {})}), note
