"""The CSV of a run, one row per measurement (lab/row.py's Row), and its environment file
beside it (<name>.env.json); read back with Row's types."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

from lab.base.errors import LabError
from lab.row import Row

# Integer columns: pandas' nullable Int64 in the frame, so that a column with empty cells (None)
# is still written as 29, not 29.0. Every Row field annotated `int` or `int | None`.
INT_COLUMNS = tuple(f.name for f in fields(Row) if f.type in ("int", "int | None"))


def to_frame(rows: list[Row]):
    """The rows as a DataFrame, one column per Row field; integer fields are nullable Int64."""
    import pandas as pd

    df = pd.DataFrame([asdict(r) for r in rows], columns=[f.name for f in fields(Row)])
    for col in INT_COLUMNS:
        try:
            df[col] = pd.to_numeric(df[col]).astype("Int64")
        except (TypeError, ValueError):  # a non-integral value: write it as it is, never lose it
            pass
    return df


def write_csv(rows: list[Row], path: str | Path, env: dict) -> tuple[Path, Path]:
    """One CSV row per measurement, and the environment beside it as <name>.env.json."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        to_frame(rows).to_csv(path, index=False)
        env_file = env_path(path)
        env_file.write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise LabError(f"cannot write {path}: {exc.strerror}") from None
    return path, env_file


def env_path(path: str | Path) -> Path:
    """The environment file beside a CSV: <name>.env.json."""
    return Path(path).with_suffix(".env.json")


def read_env(path: str | Path) -> dict:
    """The environment written beside the CSV at `path` (lab/env.py: gpu, compute_capability,
    sm_count, commit, timestamp, ...), or {} when there is none or it is not a JSON object."""
    try:
        env = json.loads(env_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return env if isinstance(env, dict) else {}


def read_csv(path: str | Path):
    """A CSV written by write_csv, with Row's types: integer columns as nullable Int64 (an empty
    cell is <NA>; plain pandas.read_csv reads a column with empty cells as float), text columns
    with "" for an empty cell. Also reads older CSVs (29.0 becomes 29; missing columns stay
    missing)."""
    import pandas as pd

    df = pd.read_csv(path)
    text = [f.name for f in fields(Row) if f.type.startswith("str")]
    for col in df.columns:
        if col in INT_COLUMNS:
            df[col] = pd.to_numeric(df[col]).astype("Int64")
        elif col in text:
            df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
    return df
