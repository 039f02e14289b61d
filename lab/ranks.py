"""Runs over several GPUs: lab.compare's work handed out to ranks of torch.distributed.

    python -m lab.compare --stage all --sizes 4096,1025 --gpus 2 --csv out.csv   # this host
    torchrun --nproc-per-node=8 -m lab.compare --stage all --csv out.csv          # or torchrun
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \\
        -m lab.compare ...                                                        # several hosts

docs/MULTIGPU.md is the user's page. How it works:

- **Ranks.** Every process is a rank of torch.distributed, started by torchrun (on one host or
  several, with its rendezvous) or by `--gpus N` (launch(): N processes on this host, started the
  way torchrun starts them, the launching process hosting the store as torchrun's agent does).
  A rank owns one GPU, its LOCAL_RANK. The ranks coordinate through torch.distributed's key-value
  store (`torch.distributed.rendezvous("env://")`), and nothing else: no collective runs, so a
  rank that dies cannot leave the others waiting in one.
- **Work.** The run is cut into units (lab/run.py Unit: one stage's rows, or the cuBLAS row, of
  a shape in one layout and precision, in one repeat; each stage row is timed beside a cuBLAS
  launch on its own GPU; work_items() keeps a shape's units together under --cublas-timing
  once). Each rank takes the next unit from a shared counter (`store.add`) when it has
  finished the last one, so a slow unit keeps one GPU busy while the others go on; units are
  handed out largest first (M*N*K), which leaves the small ones to fill the end.
- **Merging.** One process merges (merge()): the launching process under `--gpus`, rank 0 under
  torchrun (a thread beside its own work). It first reads every rank's GPU and refuses a run
  whose GPUs are of different models in one sentence (their % of cuBLAS would not be one
  measurement); then it collects each finished unit's rows from the store, appending them to
  a journal beside the CSV (`<csv>.partial`) as they come, and returns them in the order one GPU
  would have run them. Every row records its rank and GPU (`rank`, `gpu_index`, `gpu_name`,
  `gpu_uuid`).
- **Faults.** A rank that dies (the launcher sees its process end) or whose GPU fails (a CUDA
  error that outlives the row: the rank says so and stops taking work) loses the unit it was
  running and nothing else: the others finish the run, the unit is named, and the run exits 1.
  `--resume` with the same `--csv` runs only the units that file (and its journal) lack. Under
  torchrun a rank's death ends the whole job, as torchrun ends it; the journal keeps what was
  finished and `--resume` adds the rest.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import Callable

from lab.base.errors import LabError
from lab.row import Row

PREFIX = "lab-compare/"  # the run's keys in the store
JOIN_TIMEOUT = timedelta(seconds=300)  # a rank waiting for the store, or for the go
POLL_S = 0.2  # the merger's look at the store between units
MERGER_ENV = "LAB_MERGER"  # "launcher": the process that started the ranks merges, not rank 0
FAULT_ENV = "LAB_FAULT"  # a test's injected fault: "die:RANK:NTH" (the rank's NTH unit, 1-based)
JOURNAL_SUFFIX = ".partial"
STARTED_ENV = "LAB_RUN_STARTED"  # the launcher's start (time.time()), for the ranks' progress lines


@dataclass
class World:
    """This process's place in a run over several GPUs."""

    store: object  # torch.distributed.Store, every key under PREFIX
    rank: int
    size: int
    local_rank: int
    merges: bool  # rank 0 under torchrun; nobody here under --gpus (the launcher does)


def in_rank() -> bool:
    """Whether this process was started as a rank (by torchrun or --gpus): RANK and WORLD_SIZE
    set, as torchrun sets them."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def worker_only() -> bool:
    """Whether this process is a rank that does not merge: any rank under --gpus, every rank but
    0 under torchrun. Such a rank says nothing of the run (the merger does) and writes no file."""
    if not in_rank():
        return False
    return os.environ.get(MERGER_ENV) == "launcher" or os.environ.get("RANK") != "0"


def join(prefix: str = PREFIX) -> World:
    """This rank's World, from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT) through torch.distributed's env:// rendezvous; the run's keys under `prefix`
    (lab.compare's PREFIX, lab.autotune's lab/tune/workers.py PREFIX)."""
    import torch.distributed as dist

    try:
        store, rank, size = next(dist.rendezvous("env://", timeout=JOIN_TIMEOUT))
    except (RuntimeError, ValueError) as exc:
        raise LabError(f"this rank could not reach the run's store at "
                       f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
                       f"({exc}); start the ranks with torchrun or --gpus") from None
    store = dist.PrefixStore(prefix, store)
    local = int(os.environ.get("LOCAL_RANK", rank))
    merges = rank == 0 and os.environ.get(MERGER_ENV) != "launcher"
    return World(store, rank, size, local, merges)


# ---------------------------------------------------------------- the plan every rank shares


def hand_out_order(items: list) -> list[int]:
    """Indices of `items` (lists of units, lab/run.py work_items) in the order they are handed
    out: largest M*N*K first (a stable sort, so equal sizes keep the plan's order)."""
    return sorted(range(len(items)), key=lambda i: -_volume(items[i][0]))


def _volume(unit) -> int:
    M, N, K = unit.shape
    return M * N * K


def _split(item: list, rows: list[Row]) -> list[tuple[object, list[Row]]]:
    """An item's rows, unit by unit."""
    from lab.run import unit_key

    return [(u, [r for r in rows if unit_key(r) == u.key]) for u in item]


def _get(store, key: str) -> str:
    return store.get(key).decode()


def _has(store, key: str) -> bool:
    return store.check([key])


def _wait(store, keys: list[str]) -> None:
    store.wait(keys, JOIN_TIMEOUT)


# ---------------------------------------------------------------- a rank's work


def _gpu_of(mode: str) -> dict:
    """What this rank runs on: GPU index, name, UUID, compute capability and host (CPU mode: the
    host and 'cpu')."""
    host = socket.gethostname()
    if mode != "gpu":
        return {"host": host, "name": "cpu", "index": None, "uuid": ""}
    from lab.run import gpu_identity
    import torch

    index, name, uuid = gpu_identity()
    cc = torch.cuda.get_device_capability(index)
    return {"host": host, "name": name, "index": index, "uuid": uuid, "capability": f"{cc[0]}.{cc[1]}"}


def work(world: World, spec, env_of: Callable[[float | None], dict], on_row=None,
         measure_bw=None) -> None:
    """Run this rank's share of `spec`: publish its GPU and environment, wait for the merger's
    go (and the units to run), then take units until none are left, each unit's rows stored under
    unit/<index>. `env_of(read_bw)`: this rank's environment (lab/env.py collect); `measure_bw()`:
    its GPU's read bandwidth in bytes/s, or None."""
    from lab.run import execute, work_items

    store = world.store
    if spec.mode == "gpu":
        import torch

        torch.cuda.set_device(world.local_rank)
    gpu = _gpu_of(spec.mode)
    read_bw = measure_bw() if measure_bw else None
    env = env_of(read_bw)
    store.set(f"env/{world.rank}", json.dumps({"gpu": gpu, "env": env}, default=str))
    _wait(store, ["go"])
    go = _get(store, "go")
    if go != "ok":  # refused by the merger (it says why)
        return
    todo = json.loads(_get(store, "plan"))  # indices into work_items(spec), in hand-out order
    plan = work_items(spec)
    fault = _fault(world.rank)
    taken = 0
    while True:
        n = store.add("next", 1) - 1
        if n >= len(todo):
            break
        index = todo[n]
        store.set(f"taken/{index}", str(world.rank))
        taken += 1
        if fault is not None and taken == fault:
            os._exit(9)  # a test's killed rank: no word, no rows, as a SIGKILL leaves it
        rows = execute(spec, on_row, only=plan[index], gpu_columns=True)
        for r in rows:
            r.rank = world.rank
            if read_bw is not None:
                r.hbm_read_gbps = read_bw / 1e9
        store.set(f"unit/{index}", json.dumps([asdict(r) for r in rows], default=str))
        broken = _gpu_broken(spec.mode)
        if broken:
            store.set(f"done/{world.rank}", f"its GPU failed: {broken}")
            return
    store.set(f"done/{world.rank}", "ok")


def _fault(rank: int) -> int | None:
    """LAB_FAULT=die:RANK:NTH: the unit (1-based) at which this rank dies, for the tests."""
    text = os.environ.get(FAULT_ENV, "")
    parts = text.split(":")
    if len(parts) == 3 and parts[0] == "die" and parts[1] == str(rank) and parts[2].isdigit():
        return int(parts[2])
    return None


def _gpu_broken(mode: str) -> str | None:
    """A CUDA error that outlived its row (an illegal address leaves the context unusable): its
    text, else None."""
    if mode != "gpu":
        return None
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1).item()
    except Exception as exc:  # the context is gone: every later row would fail
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


# ---------------------------------------------------------------- the merger


def gather(store, size: int, dead: Callable[[int], str | None] = lambda rank: None) -> dict:
    """What every rank published under env/<rank> (its "gpu" and more), once all have; refuses
    (setting go to "refused", so the ranks stop) a run whose GPUs are of different models, or one
    whose rank ended before publishing, in one sentence."""
    for rank in range(size):  # every rank's GPU, before any work
        while not _has(store, f"env/{rank}"):
            why = dead(rank)
            if why:
                store.set("go", "refused")
                raise LabError(f"rank {rank} ended before the run began ({why}); its output "
                               f"above says why")
            time.sleep(POLL_S)
    told = {r: json.loads(_get(store, f"env/{r}")) for r in range(size)}
    gpus = {r: t["gpu"] for r, t in told.items()}
    models = {g["name"] for g in gpus.values()}
    if len(models) > 1:
        store.set("go", "refused")
        named = ", ".join(f"rank {r}: {g['name']}" for r, g in gpus.items())
        raise LabError(f"the GPUs of this run are of different models ({named}); a % of cuBLAS "
                       f"is one GPU model's measurement, so run each model on its own (pick its "
                       f"GPUs with CUDA_VISIBLE_DEVICES)")
    return told


@dataclass
class Merged:
    """What the merger gathered: the rows in plan order, the units lost and why, each rank's GPU,
    rank 0's environment with the run's GPUs added."""

    rows: list[Row]
    lost: list[tuple[object, str]]  # (Unit, why)
    gpus: dict[int, dict]
    env: dict


def merge(store, size: int, spec, done_keys: set, journal: Path | None,
          dead: Callable[[int], str | None] = lambda rank: None, say=print) -> Merged:
    """Gather a run from its ranks (module docstring). `done_keys`: the unit keys an earlier run
    of the same CSV already holds (--resume), not run again; `journal`: where each finished unit's
    rows are appended as they arrive (None: nowhere); `dead(rank)`: why a rank's process is gone,
    or None while it lives (the launcher watches its processes; under torchrun nobody can)."""
    from lab.run import work_items

    told = gather(store, size, dead)
    gpus = {r: t["gpu"] for r, t in told.items()}
    plan = work_items(spec)
    todo = [i for i in hand_out_order(plan) if any(u.key not in done_keys for u in plan[i])]
    store.set("plan", json.dumps(todo))
    store.set("go", "ok")
    pending = set(todo)
    got: dict[int, list[Row]] = {}
    lost: list[tuple[object, str]] = []
    finished: dict[int, str] = {}  # rank -> why it stopped ("ok" when it ran out of work)
    while pending:
        for i in sorted(pending):
            if _has(store, f"unit/{i}"):
                rows = [_row(d) for d in json.loads(_get(store, f"unit/{i}"))]
                got[i] = rows
                pending.discard(i)
                if journal is not None:
                    for unit, mine in _split(plan[i], rows):
                        _append(journal, unit, mine)
        for rank in range(size):
            if rank in finished:
                continue
            if _has(store, f"done/{rank}"):
                finished[rank] = _get(store, f"done/{rank}")
            else:
                why = dead(rank)
                if why:
                    finished[rank] = why
            if rank in finished and finished[rank] != "ok":
                say(f"rank {rank} ({_where(gpus[rank])}) stopped: {finished[rank]}")
        if len(finished) == size:  # nobody is left to finish what is pending
            for i in sorted(pending):
                if _has(store, f"unit/{i}"):
                    continue  # arrived since: taken on the next pass
                taker = _get(store, f"taken/{i}") if _has(store, f"taken/{i}") else None
                why = (f"rank {taker} ({_where(gpus[int(taker)])}) was running it when it "
                       f"stopped: {finished[int(taker)]}" if taker is not None
                       else "no rank was left to run it")
                lost.extend((u, why) for u in plan[i] if u.key not in done_keys)
            pending = {i for i in pending if _has(store, f"unit/{i}")}
            if not pending:
                break
        time.sleep(POLL_S if pending else 0)
    rows = [r for i in sorted(got) for r in got[i]]
    env = dict(told[0]["env"])
    env["gpus"] = [{"rank": r, **g} for r, g in sorted(gpus.items())]
    env["world_size"] = size
    return Merged(rows, lost, gpus, env)


def _where(gpu: dict) -> str:
    if gpu.get("index") is None:
        return gpu.get("host", "?")
    return f"GPU {gpu['index']} of {gpu.get('host', '?')}"


_FIELDS = {f.name: f for f in fields(Row)}


def _row(d: dict) -> Row:
    return Row(**{k: v for k, v in d.items() if k in _FIELDS})


def _append(journal: Path, unit, rows: list[Row]) -> None:
    """One line per finished unit: its key and its rows, flushed as it comes."""
    with open(journal, "a", encoding="utf-8") as f:
        f.write(json.dumps({"unit": list(unit.key), "rows": [asdict(r) for r in rows]},
                           default=str) + "\n")
        f.flush()


def journal_path(csv: str | os.PathLike) -> Path:
    return Path(str(csv) + JOURNAL_SUFFIX)


# ---------------------------------------------------------------- resuming


def earlier_rows(csv: str | os.PathLike) -> list[Row]:
    """The rows an earlier run of this CSV holds: the CSV's, then its journal's (the units a run
    that was stopped had finished), a unit in both counted once."""
    from lab.run import unit_key

    rows: list[Row] = []
    path = Path(csv)
    if path.is_file():
        from lab.csvfile import read_csv

        try:
            df = read_csv(path)
        except Exception as exc:
            raise LabError(f"--resume cannot read {path} ({type(exc).__name__}); give the CSV "
                           f"of the run to resume") from None
        for rec in df.to_dict("records"):
            rows.append(_row({k: (None if _nan(v) else v) for k, v in rec.items()}))
    seen = {unit_key(r) for r in rows}
    jpath = journal_path(csv)
    if jpath.is_file():
        for line in jpath.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a stop: that unit runs again
            key = tuple(entry["unit"])
            if key in seen:
                continue
            seen.add(key)
            rows.extend(_row(d) for d in entry["rows"])
    return rows


def _nan(v) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def done_keys(rows: list[Row]) -> set:
    from lab.run import unit_key

    return {unit_key(r) for r in rows}


# ---------------------------------------------------------------- --gpus N: start the ranks


def count_gpus(text: str, mode: str) -> int:
    """--gpus: a number of ranks (GPU mode: at most the GPUs visible) or `all`."""
    visible = None
    if mode == "gpu":
        import torch

        visible = torch.cuda.device_count()
    if text == "all":
        if visible is None:
            raise LabError("--gpus all counts this machine's GPUs, and it has none; give a "
                           "number (CPU mode then runs that many ranks, to try the mechanism)")
        return visible
    try:
        n = int(text)
    except ValueError:
        raise LabError(f"--gpus takes a number of GPUs or all, not {text!r}") from None
    if n < 1:
        raise LabError(f"--gpus must be 1 or more, not {n}")
    if visible is not None and n > visible:
        raise LabError(f"--gpus {n} asks for more GPUs than this machine shows ({visible}); "
                       f"use --gpus {visible} or --gpus all")
    return n


def strip_gpus(argv: list[str]) -> list[str]:
    """The command line without --gpus (the ranks run the rest of it)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--gpus":
            skip = True
            continue
        if a.startswith("--gpus="):
            continue
        out.append(a)
    return out


class Launcher:
    """--gpus N: N ranks on this host, started as torchrun starts them (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT), this process hosting the store, as torchrun's agent
    does (TORCHELASTIC_USE_AGENT_STORE), and merging."""

    def __init__(self, n: int, argv: list[str], mode: str, module: str = "lab.compare",
                 prefix: str = PREFIX):
        """Start the ranks at once (this needs no torch: they import theirs while this process
        goes on, and wait for the store, which `store` opens on the port chosen here)."""
        self.n = n
        self.prefix = prefix
        self.started_after = time.time() - _process_started()  # a note: when the ranks started
        self.port = _free_port()
        self._store = None
        self.procs = []
        base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
                    WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                    TORCHELASTIC_USE_AGENT_STORE="True",
                    **{MERGER_ENV: "launcher", STARTED_ENV: str(_process_started())})
        for rank in range(n):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", module, *strip_gpus(argv)], env=env))

    @property
    def store(self):
        """The run's store, hosted here (opened on first use; the ranks wait for it)."""
        if self._store is None:
            import torch.distributed as dist

            try:
                self.store_server = dist.TCPStore("127.0.0.1", self.port, None, True,
                                                  JOIN_TIMEOUT, wait_for_workers=False)
            except (RuntimeError, OSError) as exc:
                self.kill()
                raise LabError(f"could not open the run's store on port {self.port} of this "
                               f"machine ({str(exc).splitlines()[0]}); run the command again")
            self._store = dist.PrefixStore(self.prefix, self.store_server)
        return self._store

    def dead(self, rank: int) -> str | None:
        code = self.procs[rank].poll()
        if code is None or code == 0:
            return None
        return f"its process ended with exit status {code}"

    def kill(self) -> None:
        """End every rank now (a run refused after they started)."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def close(self, grace_s: float = 60.0) -> None:
        """Wait for the ranks to end, `grace_s` in all (not per rank), then end those left."""
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _free_port() -> int:
    """A TCP port of this machine that nothing listens on now (the store takes it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _process_started() -> float:
    """When this process started (time.time()), from /proc where there is one, else now."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def merge_in_thread(size, spec, done, journal, say) -> tuple[threading.Thread, dict]:
    """Rank 0 under torchrun: merge() in a thread beside its own work, through a store client of
    its own (one client's socket cannot serve the rank's blocking wait and the merger's polls at
    once); the box gets `merged` or `error`."""
    import torch.distributed as dist

    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None,
                           False, JOIN_TIMEOUT)
    store = dist.PrefixStore(PREFIX, client)
    box: dict = {}

    def run():
        try:
            box["merged"] = merge(store, size, spec, done, journal, say=say)
        except BaseException as exc:  # said by the caller once the work is over
            box["error"] = exc
    t = threading.Thread(target=run, name="lab-merge", daemon=True)
    t.start()
    return t, box


def spread(rows: list[Row]) -> list[tuple[str, float, int]]:
    """Per GPU (UUID or index), the median over the configurations (stage, backend, params,
    shape, layout, precision) measured on every GPU of the run of that GPU's mean % of cuBLAS
    for the configuration: [(gpu, median, configurations)], the same configurations for every
    GPU, so the medians differ only by the GPUs; [] when no configuration ran on all of them."""
    from statistics import mean, median

    by_config: dict[tuple, dict[str, list[float]]] = {}
    gpus_seen: set[str] = set()
    for r in rows:
        if r.backend == "cublas" or r.pct_cublas is None or not (r.gpu_uuid or r.gpu_index is not None):
            continue
        gpu = r.gpu_uuid or f"GPU {r.gpu_index}"
        gpus_seen.add(gpu)
        key = (r.stage, r.backend, r.params, r.M, r.N, r.K, r.layout, r.precision)
        by_config.setdefault(key, {}).setdefault(gpu, []).append(float(r.pct_cublas))
    if len(gpus_seen) < 2:
        return []
    shared = [g for g in by_config.values() if set(g) == gpus_seen]
    if not shared:
        return []
    return [(gpu, median(mean(g[gpu]) for g in shared), len(shared)) for gpu in sorted(gpus_seen)]
