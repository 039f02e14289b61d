"""Compare a run with an earlier one (`lab.compare --baseline OLD.csv`): no GPU needed.

A row of the run matches the row of the earlier CSV with the same stage label, backend, M, N, K,
precision and layout (a CSV without a layout column is an nn run), and the same params when the
earlier CSV has a params column (every CSV lab.compare writes has one, so a variant whose
parameters changed, a new default for example, does not match). A matched row gets
`vs_baseline_pct` = 100 * (t_new / t_old - 1): positive is slower, -50 is twice as fast.

    baseline = load("out/run.csv")       # {key: median_ms or None}; LabError if unusable
    matched = apply(rows, baseline)      # fills Row.vs_baseline_pct, returns how many got one
    regressed(rows, 5.0)                 # the rows slower by more than 5 %
"""

from __future__ import annotations

import math
from pathlib import Path

from lab.base.errors import LabError
from lab.row import Row

# What a lab results CSV must have to be compared with (layout and params are optional).
NEEDED = ("stage", "backend", "precision", "M", "N", "K", "median_ms")

Key = tuple  # (stage, backend, M, N, K, precision, layout, params or None)


def key(r: Row, params: bool = True) -> Key:
    """A row's matching key; params=False gives the key of a CSV without a params column."""
    return (r.stage, r.backend, r.M, r.N, r.K, r.precision, r.layout,
            r.params if params else None)


def _text(value, default: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    try:
        import pandas as pd

        if value is pd.NA:
            return default
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def load(path: str | Path) -> dict[Key, float | None]:
    """The earlier run's median times by key (None for a row that has no time: failed, skipped,
    CPU mode). Raises LabError, one sentence, when the file is missing or is not a lab results
    CSV. Where two rows share a key, the first one counts."""
    import pandas as pd

    from lab.csvfile import read_csv

    path = Path(path)
    if not path.exists():
        raise LabError(f"--baseline {path} does not exist; give a CSV written by "
                       f"lab.compare --csv")
    if not path.is_file():
        raise LabError(f"--baseline {path} is not a file; give a CSV written by "
                       f"lab.compare --csv")
    try:
        df = read_csv(path)
    except OSError as exc:
        raise LabError(f"cannot read --baseline {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        raise LabError(f"--baseline {path} is not a lab results CSV (written by lab.compare "
                       f"--csv): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                       ) from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise LabError(f"--baseline {path} is not a lab results CSV (written by lab.compare "
                       f"--csv): it has no {' or '.join(missing)} column")
    try:
        times = pd.to_numeric(df["median_ms"])
        dims = {d: pd.to_numeric(df[d]) for d in ("M", "N", "K")}
    except (ValueError, TypeError):
        raise LabError(f"--baseline {path} is not a lab results CSV (written by lab.compare "
                       f"--csv): its median_ms, M, N or K column is not numeric") from None
    has_layout, has_params = "layout" in df.columns, "params" in df.columns
    out: dict[Key, float | None] = {}
    for i in range(len(df)):
        M, N, K = (dims[d].iloc[i] for d in ("M", "N", "K"))
        if any(pd.isna(x) for x in (M, N, K)):
            continue
        t = times.iloc[i]
        ms = float(t) if not pd.isna(t) and float(t) > 0 else None
        k = (_text(df["stage"].iloc[i]), _text(df["backend"].iloc[i]), int(M), int(N), int(K),
             _text(df["precision"].iloc[i]),
             _text(df["layout"].iloc[i], "nn") if has_layout else "nn",
             _text(df["params"].iloc[i]) if has_params else None)
        out.setdefault(k, ms)
    return out


def apply(rows: list[Row], baseline: dict[Key, float | None]) -> int:
    """Fill each row's vs_baseline_pct from its match in `baseline` (None when there is none or
    either side has no time). Returns the number of rows that got a value."""
    matched = 0
    for r in rows:
        old = baseline.get(key(r))
        if old is None:
            old = baseline.get(key(r, params=False))
        if old is not None and r.median_ms is not None and old > 0 and r.median_ms > 0:
            r.vs_baseline_pct = 100.0 * (r.median_ms / old - 1.0)
            matched += 1
        else:
            r.vs_baseline_pct = None
    return matched


def regressed(rows: list[Row], pct: float) -> list[Row]:
    """The rows slower than their baseline by more than `pct` percent."""
    return [r for r in rows if r.vs_baseline_pct is not None and r.vs_baseline_pct > pct]


def regression_label(r: Row) -> str:
    """'tiled cuda nn 1024x1024x1024 +10.0%': a row as the regression line names it."""
    return f"{r.stage} {r.backend} {r.layout} {r.M}x{r.N}x{r.K} {r.vs_baseline_pct:+.1f}%"
