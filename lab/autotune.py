"""python -m lab.autotune: search a stage's parameter space on this GPU, for one shape, and cache
the winner so that `--stage <stage>:auto` rows of lab.compare run it.

    python -m lab.autotune --stage vectorized --sizes 4096
    python -m lab.autotune --stage vectorized,blocktile_2d --backend cuda --sizes 1025,4096 \
        --budget-s 300 --max-configs 200
    python -m lab.autotune --stage vectorized --sizes 4096 --dry-run   # no GPU, seconds
    python -m lab.autotune --stage warptiling:splitk=16|32,BM=64|128 --backend cuda \
        --sizes 320x192x786432                                         # a restricted space
    python -m lab.autotune --show                                      # the cache

This file is the command and the tuner's public names; the tuner itself is the package lab/tune/
(one module per concern; lab/tune/__init__.py lists them and describes the search step by step,
docs/AUTOTUNE.md has the whole story).
"""

from __future__ import annotations

import sys

from lab.tune.auto import lookup, resolve, resolve_variant
from lab.tune.cache import (CACHE_ENV, CACHE_FORMAT, CACHE_VERSION, DEFAULT_CACHE, CacheError,
                            alignment, bucket, cache_key, cache_path, load_cache, make_entry,
                            source_hash, store, write_cache)
from lab.tune.cli import _for_backend, _parse_stages, build_parser, main
from lab.tune.dryrun import DRY_RUN_COMPILE_S, DRY_RUN_SAMPLE, DRY_RUN_SHOWN, DryRunBudget
from lab.tune.gpu import GpuBench, gpu_available, gpu_name, gpu_sm_count
from lab.tune.pool import (COMPILE_AHEAD_PER_JOB, CompileAhead, compile_sample, cuda_probe,
                           default_jobs)
from lab.tune.prune import build_identity, resource_problem, validator
from lab.tune.report import plain_progress, report_lines
from lab.tune.search import (DEFAULT_BUDGET_S, EXPLORE_FRACTION, LONG_REP_MS, NEIGHBOUR_PICKS,
                             REFINE_ROUNDS, SHORT_REP_MS, TOP, Candidates, Result, Trial,
                             candidates, search)
from lab.tune.seeds import (SEED_MIN_SPLIT_K, SEED_REPAIR_LIMIT, SEED_SMS, SEED_TARGETS, SEED_TILES,
                            splitk_seeds)
from lab.tune.space import (ENUMERATE_LIMIT, ORDER_RNG, Space, params_text, restriction_text,
                            space_of)
from lab.tune.space import fmt as _fmt
from lab.tune.tuner import Outcome, tune

__all__ = [
    "CACHE_ENV", "CACHE_FORMAT", "CACHE_VERSION", "COMPILE_AHEAD_PER_JOB", "DEFAULT_BUDGET_S",
    "DEFAULT_CACHE", "DRY_RUN_COMPILE_S", "DRY_RUN_SAMPLE", "DRY_RUN_SHOWN", "ENUMERATE_LIMIT",
    "EXPLORE_FRACTION", "LONG_REP_MS", "NEIGHBOUR_PICKS", "ORDER_RNG", "REFINE_ROUNDS",
    "SEED_MIN_SPLIT_K", "SEED_REPAIR_LIMIT", "SEED_SMS", "SEED_TARGETS", "SEED_TILES",
    "SHORT_REP_MS", "TOP", "CacheError", "Candidates", "CompileAhead", "DryRunBudget", "GpuBench",
    "Outcome", "Result", "Space", "Trial", "_fmt", "_for_backend", "_parse_stages", "alignment",
    "bucket", "build_identity", "build_parser", "cache_key", "cache_path", "candidates",
    "compile_sample", "cuda_probe", "default_jobs", "gpu_available", "gpu_name", "gpu_sm_count",
    "load_cache", "lookup", "main", "make_entry", "params_text", "plain_progress", "report_lines",
    "resolve", "resolve_variant", "resource_problem", "restriction_text", "search",
    "source_hash", "space_of", "splitk_seeds", "store", "tune", "validator", "write_cache",
]

if __name__ == "__main__":
    sys.exit(main())
