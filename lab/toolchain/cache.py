"""An on-disk cache of build products, keyed by content: NVRTC cubins (with ptxas's resource
report) and the CPU emulator's g++ executables.

A key is a SHA-256 over everything that decides the product: the source and every header it
includes (read from disk, not their paths), the compiler options and the compiler's release. So
an edit to a kernel or to `common.cuh` misses the cache, and the same build in another process,
another test file or another checkout hits it.

Where it lives: `$LAB_BUILD_CACHE` if set (a folder; `off` turns the cache off), else
`$XDG_CACHE_HOME/matmul-kernel-lab`, else `~/.cache/matmul-kernel-lab`. Entries are written to a
temporary name and renamed into place, so concurrent processes never read half an entry. Deleting
the folder is always safe. Nothing here needs a GPU.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

ENV = "LAB_BUILD_CACHE"
# Bump when what an entry holds changes shape, so old entries are never misread.
FORMAT = "1"
_OFF = {"off", "0", "no", "false", "none", ""}


def root() -> Path | None:
    """The cache folder, or None when the cache is turned off (LAB_BUILD_CACHE=off)."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "matmul-kernel-lab"


def digest(*parts: bytes | str) -> str:
    """SHA-256 of the parts, each length-prefixed (so ("ab", "c") and ("a", "bc") differ)."""
    h = hashlib.sha256(FORMAT.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def source_closure(path: Path, include_dirs: tuple[Path, ...] = ()) -> list[tuple[str, bytes]]:
    """(name, bytes) of `path` and of every file it includes with `#include "..."`, recursively,
    looked up beside the including file and then in `include_dirs` (as the compiler does).

    Every quoted include is followed, also one inside an `#if` that is off: the key may then
    change when it need not, never the other way round. Angle-bracket includes come from the
    compiler, whose version is part of every key."""
    seen: dict[Path, bytes] = {}
    todo = [Path(path)]
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        data = file.read_bytes()
        seen[file] = data
        for name in _INCLUDE.findall(data):
            rel = name.decode(errors="replace")
            for folder in (file.parent, *include_dirs):
                candidate = (folder / rel).resolve()
                if candidate.is_file():
                    todo.append(candidate)
                    break
    return [(p.name, seen[p]) for p in sorted(seen, key=lambda p: (p.name, str(p)))]


def closure_parts(path: Path, include_dirs: tuple[Path, ...] = ()) -> list[bytes]:
    """source_closure flattened into key parts (names and contents)."""
    parts: list[bytes] = []
    for name, data in source_closure(path, include_dirs):
        parts += [name.encode(), data]
    return parts


def entry_folder(kind: str, key: str) -> Path | None:
    """The folder of one entry (`<root>/<kind>/<key[:2]>/<key>`), or None with the cache off."""
    base = root()
    return None if base is None else base / kind / key[:2] / key


def load(kind: str, key: str, names: tuple[str, ...]) -> dict[str, bytes] | None:
    """The named files of an entry, or None on a miss (or with the cache off)."""
    folder = entry_folder(kind, key)
    if folder is None:
        return None
    try:
        return {name: (folder / name).read_bytes() for name in names}
    except OSError:
        return None


def store(kind: str, key: str, files: dict[str, bytes], executable: tuple[str, ...] = ()) -> Path | None:
    """Write an entry atomically (a temporary folder renamed into place); return its folder.

    Returns None with the cache off or when the folder cannot be written (a read-only home, a
    full disk): the cache is an optimization, never a reason for a build to fail."""
    folder = entry_folder(kind, key)
    if folder is None:
        return None
    if folder.is_dir():
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=folder.parent))
        for name, data in files.items():
            (tmp / name).write_bytes(data)
            if name in executable:
                (tmp / name).chmod(0o755)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process stored the same entry first: keep theirs
            for child in tmp.iterdir():
                child.unlink()
            tmp.rmdir()
        return folder if folder.is_dir() else None
    except OSError:
        return None
