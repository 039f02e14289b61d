"""The tuning cache: one JSON file of winners keyed by GPU, stage, backend, shape bucket,
precision and layout (docs/AUTOTUNE.md, "The cache"); written atomically, a corrupted file kept
aside, never overwritten unread."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from lab.base.errors import LabError

if TYPE_CHECKING:
    from lab.tune.search import Result

CACHE_ENV = "LAB_TUNE_CACHE"
DEFAULT_CACHE = "~/.cache/matmul-lab/autotune.json"
CACHE_FORMAT = "matmul-lab autotune cache"
CACHE_VERSION = 1


def cache_path(path: str | os.PathLike | None = None) -> Path:
    """--cache PATH, else $LAB_TUNE_CACHE, else ~/.cache/matmul-lab/autotune.json."""
    chosen = path or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(os.path.expanduser(str(chosen)))


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def alignment(M: int, N: int, K: int) -> str:
    """a128: M, N and K are all multiples of 128 (no partial tiles for tiles up to 128);
    a4: all multiples of 4 (every row of A, B and C starts on a 16-byte boundary in every layout,
    so float4 paths apply); a1: anything else."""
    if all(x % 128 == 0 for x in (M, N, K)):
        return "a128"
    if all(x % 4 == 0 for x in (M, N, K)):
        return "a4"
    return "a1"


def bucket(M: int, N: int, K: int) -> str:
    """The shape bucket of the cache key: M, N and K each rounded up to a power of two, and the
    alignment flag, e.g. 4096x4096x4096:a128 (4096^3), 2048x2048x2048:a1 (1025^3)."""
    return f"{next_pow2(M)}x{next_pow2(N)}x{next_pow2(K)}:{alignment(M, N, K)}"


def cache_key(gpu: str, stage: str, backend: str, M: int, N: int, K: int, precision: str = "fp32",
              layout: str = "nn") -> str:
    """GPU name | stage | backend | bucket | precision | layout."""
    return "|".join((gpu, stage, backend, bucket(M, N, K), precision, layout))


class CacheError(LabError):
    """The cache file exists but is not a readable autotune cache."""


def load_cache(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """The cache's entries by key; {} when the file does not exist. A file that cannot be read or
    is not an autotune cache raises CacheError (one sentence); it is never overwritten here."""
    p = cache_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CacheError(f"cannot read the autotune cache {p}: {exc.strerror or exc}") from None
    return _parse_cache(text, p)


def _parse_cache(text: str, p: Path) -> dict[str, dict]:
    hint = (f"move it aside or delete it (python -m lab.autotune backs it up before writing), or "
            f"point {CACHE_ENV} elsewhere")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise CacheError(f"the autotune cache {p} is not valid JSON{where}; {hint}") from None
    if (not isinstance(data, dict) or data.get("format") != CACHE_FORMAT
            or not isinstance(data.get("entries"), dict)
            or not all(isinstance(e, dict) and isinstance(e.get("params"), dict)
                       for e in data["entries"].values())):
        raise CacheError(f"{p} is not an autotune cache (no '{CACHE_FORMAT}' format with entries "
                         f"that hold params); {hint}")
    if data.get("version") != CACHE_VERSION:
        raise CacheError(f"the autotune cache {p} has format version {data.get('version')!r} and "
                         f"this lab reads version {CACHE_VERSION}; {hint}")
    return data["entries"]


def backup_name(p: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = p.with_name(f"{p.name}.corrupt-{stamp}")
    n = 1
    while candidate.exists():
        candidate = p.with_name(f"{p.name}.corrupt-{stamp}-{n}")
        n += 1
    return candidate


def store(entry: dict, path: str | os.PathLike | None = None) -> str:
    """Add (or replace) `entry` under entry["key"] and write the cache atomically (a temporary file
    in the same folder, then a rename). A corrupted cache is first renamed to
    <name>.corrupt-<time> and a new one started; the returned sentence says so ("" otherwise)."""
    p = cache_path(path)
    note = ""
    try:
        entries = load_cache(p)
    except CacheError as exc:
        if not p.is_file():
            raise
        kept = backup_name(p)
        os.replace(p, kept)
        entries = {}
        note = f"{exc.args[0].split(';')[0]}; kept it as {kept} and started a new cache"
    entries[entry["key"]] = entry
    write_cache(entries, p)
    return note


def write_cache(entries: dict[str, dict], path: str | os.PathLike | None = None) -> Path:
    p = cache_path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise LabError(f"cannot write the autotune cache {p}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION,
                       "entries": dict(sorted(entries.items()))}, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def source_hash(stage, backend: str) -> str | None:
    """A short hash of the stage's kernel files for this backend (the launcher module, and the .cu
    for CUDA): an entry tuned for other sources still resolves, and the row's note says so."""
    import hashlib

    from lab.stages import get_stage

    stage = get_stage(stage) if isinstance(stage, str) else stage
    package = {"cuda": "cuda_kernels", "triton": "triton_kernels"}[backend]
    root = Path(__file__).resolve().parents[2] / package
    files = [root / f"{stage.name}.py"] + ([root / f"{stage.name}.cu"] if backend == "cuda" else [])
    digest = hashlib.sha256()
    try:
        for f in files:
            digest.update(f.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()[:12]


def versions() -> dict[str, str | None]:
    out = {}
    for name in ("torch", "triton", "cupy"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # not installed, or broken: recorded as unknown
            out[name] = None
    return out


def make_entry(result: Result, gpu: str, *, budget_s: float, cublas_ms: float | None = None,
               now: _dt.datetime | None = None, versions_: dict | None = None) -> dict:
    """The cache record of a finished search (its winner must exist)."""
    w, d = result.winner, result.default_trial
    default_ms = d.best_ms if d is not None and d.status == "timed" else None
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return {
        "key": cache_key(gpu, result.stage, result.backend, result.M, result.N, result.K,
                         result.precision, result.layout),
        "gpu": gpu, "stage": result.stage, "backend": result.backend,
        "bucket": bucket(result.M, result.N, result.K), "precision": result.precision,
        "layout": result.layout, "shape": [result.M, result.N, result.K],
        "params": dict(w.params), "median_ms": w.best_ms,
        "default_params": dict(result.default), "default_ms": default_ms,
        "speedup": (default_ms / w.best_ms) if default_ms and w.best_ms else None,
        "cublas_ms": cublas_ms,
        "configs_tried": result.count("timed"), "configs_wrong": result.count("wrong"),
        "configs_error": result.count("error"), "configs_pruned": result.count("pruned"),
        "configs_valid": result.valid, "space_size": result.space_size, "space": result.space,
        "restricted": ({k: list(v) for k, v in result.restricted.items()}
                       if result.restricted else None),
        "seeds": len(result.seeds),
        "stopped": result.stopped or None, "budget_s": budget_s,
        "elapsed_s": round(result.elapsed_s, 3),
        "source": source_hash(result.stage, result.backend),
        "date": now.isoformat(timespec="seconds"),
        **(versions_ if versions_ is not None else versions()),
    }


