"""`auto`: the lab picks the stage for a call, and `python -m lab.dispatch`, the table it reads.

lab.matmul(a, b) with no stage (or stage="auto"), lab.which(a, b) and `lab.compare --stage auto`
ask choose() which stage x backend, with which parameters, runs a call (docs/DISPATCH.md):

1. The target: the GPU the tensors are on (its name as torch.cuda.get_device_name gives it, its
   compute capability), or, for CPU tensors, the Triton interpreter.
2. The table (lab/data/dispatch.json, or the file $LAB_DISPATCH_TABLE names): entries measured by
   lab.compare, one per GPU, shape bucket, precision and layout, each naming the stage x backend
   (and parameters) that measured fastest there and the runners-up. The call's own bucket first
   (Choice.source "table"), except where the call's own shape was measured in that bucket and
   another configuration measured fastest there (source "shape": the entry's `shapes`), then the
   measured buckets of the same GPU, precision and layout nearest to it (source "nearest";
   bucket_distance(), same class only: thin or not).
3. The rule (source "rule"): by architecture and shape (RULE below, the only place this module
   names stages), then any stage of the registry that can run the call, the last rung first.
4. Every candidate is checked before it is taken (why_not): the stage x backend offers the
   precision (its Offer), the Offer's validate() accepts the parameters, the GPU has the
   architecture its kernels need for the precision (Offer.runs_on: its arch or requires, and the
   precision's min_capability), and CPU tensors get a Triton kernel the interpreter runs
   (Offer.interpreted). A candidate that fails is passed over and the Choice's reason says why. Nothing runs: nothing is left, one sentence (LabError).

The shape bucket is the tuner's (lab/tune/cache.py bucket): M, N and K each rounded up to a power
of two, and the alignment flag a128 / a4 / a1.

`python -m lab.dispatch build CSV [CSV ...] --out PATH` writes a table from lab.compare CSVs
(build_table), `show` prints one, `which` prints the choice for a shape. This module is harness:
it imports the registry, the tuner's bucket, lab.csvfile and the shared base, and no command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lab.axes import LAYOUTS
from lab.base.errors import LabError
from lab.base.precisions import get as precision_record
from lab.stages import (AUTO, BACKENDS, FALLBACK_RULE, PRECISIONS, STAGES, Variant,
                        get_stage)
from lab.tune.cache import bucket

ROOT = Path(__file__).resolve().parent.parent
TABLE = Path(__file__).resolve().parent / "data" / "dispatch.json"  # shipped as package data
TABLE_ENV = "LAB_DISPATCH_TABLE"  # a table of one's own instead of the committed one
FORMAT = "matmul-lab dispatch table"
VERSION = 1

THIN = 64  # a product whose small side (min(M, N)) is at most this is decode-shaped
FLAGS = ("a1", "a4", "a128")  # the bucket's alignment flags, least aligned first
FLAG_WEIGHT = 2.0  # bucket_distance(): one step of alignment weighs as much as two of size
MAX_DISTANCE = 6.0  # nearest buckets further than this are not used (the rule decides)
KEEP = 4  # stage x backend pairs an entry keeps: the choice and up to three runners-up
# A shape of a bucket whose own fastest configuration beat the bucket's choice there by more than
# this fraction keeps that configuration in the entry's `shapes` (a call of exactly that shape
# takes it): less would be the runs' spread
SHAPE_MARGIN = 0.03
HOPPER = (9, 0)  # the compute capability whose GPUs run sm_90a code (Offer.arch)

# The rule for a call the table does not answer: the registry's (lab/stages.py FALLBACK_RULE).
RULE = FALLBACK_RULE


# ----------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class Target:
    """What a call runs on: a GPU (`gpu` as torch names it, its compute capability), CPU tensors
    under the Triton interpreter (`interpreter`; the rule for sm_90 applies, the GPU lab.compare's
    CPU mode stands in for), or no GPU at all where only a CUDA build is made (CPU mode's
    `--backend cuda` rows: compiled for sm_90)."""

    gpu: str | None
    capability: tuple[int, int] = HOPPER
    interpreter: bool = False

    def __str__(self) -> str:
        if self.interpreter:
            return "CPU tensors (the Triton interpreter)"
        cc = f"compute capability {self.capability[0]}.{self.capability[1]}"
        return f"{self.gpu} ({cc})" if self.gpu else f"no GPU (builds for sm_90, {cc})"


CPU_TENSORS = Target(None, HOPPER, interpreter=True)
SM90_BUILD = Target(None, HOPPER)  # lab.compare's CPU mode, CUDA rows: compiled for sm_90


def device_gpu(device) -> tuple[str, tuple[int, int]]:
    """(name, compute capability) of a CUDA device, as torch reports them (tests replace this)."""
    import torch

    return (torch.cuda.get_device_name(device),
            tuple(int(x) for x in torch.cuda.get_device_capability(device)))


def target_of(device) -> Target:
    """The Target of tensors on `device` (a torch.device or its name)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return CPU_TENSORS
    name, capability = device_gpu(device)
    return Target(name, capability)


# ----------------------------------------------------------------------------- the choice


@dataclass(frozen=True)
class Choice:
    """What runs a call: the stage, the backend, the parameters (registry names; {} = the
    defaults, whose automatic values the launcher resolves for the call's shape), why (`reason`,
    one or more clauses joined by '; '), where it came from (`source`: "shape", "table",
    "nearest" or "rule") and, from the table, its entry's record (`measured`: each shape's median ms, % of
    cuBLAS and the CSV it was read from)."""

    stage: str
    backend: str
    params: dict = field(default_factory=dict, hash=False, compare=False)
    reason: str = ""
    source: str = "rule"
    measured: tuple = field(default=(), hash=False, compare=False)

    @property
    def params_text(self) -> str:
        return ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items()) or "the defaults"

    @property
    def label(self) -> str:
        """'persistent/cuda': how lab.compare's params column names what an auto row ran."""
        return f"{self.stage}/{self.backend}"

    def __str__(self) -> str:
        return f"{self.stage} ({self.backend}) with {self.params_text}\n  {self.reason}"


# how a Choice's source reads in a row's detail and in `which`
SOURCE_WORDS = {"shape": "from the dispatch table, measured at this shape",
                "table": "from the dispatch table", "nearest": "from the dispatch table's "
                "nearest measured bucket", "rule": "by the rule"}


def _fmt(value) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def layout_of(a, b) -> str:
    """The BLAS layout letters of A and B (lab/base/problem.py Operand.letter); an operand with no
    unit stride (copied row-major by the CUDA stages) counts as n."""
    from lab.base.problem import Operand

    return "".join("t" if Operand.of(n, t).letter == "t" else "n" for n, t in (("A", a), ("B", b)))


def thin(M: int, N: int) -> bool:
    return min(M, N) <= THIN


def parse_bucket(text: str) -> tuple[int, int, int, str]:
    dims, _, flag = text.partition(":")
    M, N, K = (int(x) for x in dims.split("x"))
    return M, N, K, flag


def bucket_distance(one: str, other: str) -> float:
    """How far two buckets lie apart: the sum over M, N and K of |log2| of their ratio, plus
    FLAG_WEIGHT per step between their alignment flags (a1, a4, a128)."""
    *d1, f1 = parse_bucket(one)
    *d2, f2 = parse_bucket(other)
    size = sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for x, y in zip(d1, d2))
    return size + FLAG_WEIGHT * abs(FLAGS.index(f1) - FLAGS.index(f2))


def why_not(stage: str, backend: str, params: dict, precision: str, target: Target,
            only: str | None = None) -> str | None:
    """None when `stage` on `backend` with `params` can run a `precision` call on `target` (and
    `backend` is `only`, where given), else why not, as a clause."""
    try:
        spec = get_stage(stage)
    except LabError:
        return f"this lab has no stage {stage}"
    if backend not in BACKENDS:
        return f"there is no backend {backend}"
    if only is not None and backend != only:
        return f"backend={only!r} was asked for"
    if target.interpreter and backend != "triton":
        return "CPU tensors run only Triton kernels, under the interpreter"
    offer = spec.offer(backend)
    if precision not in offer.precisions:
        return f"it does not compute in {precision}"
    if target.interpreter:
        if not offer.interpreted:
            return "the Triton interpreter cannot run it (a GPU-only kernel)"
    else:
        # its declared GPUs for this precision and these parameters (Offer.requires, arch)
        arch = offer.runs_on(target.capability, precision, {**spec.defaults(), **params})
        if arch:
            return f"it {arch}"
    declared = {p.name: p for p in spec.params if backend in p.backends}
    values = spec.defaults()
    for name, value in params.items():
        prm = declared.get(name)
        if prm is None:
            return f"it has no {backend} parameter {name}"
        value = prm.coerce(value)
        if (value not in prm.choices
                or isinstance(value, bool) is not isinstance(prm.default, bool)):
            return f"{name}={_fmt(value)} is not one of its choices"
        values[name] = value
    refused = offer.check(Variant(spec, values).params_for(backend), precision)
    return f"it refuses {_params_text(params)} ({refused})" if refused else None


def _params_text(params: dict) -> str:
    return ",".join(f"{k}={_fmt(v)}" for k, v in params.items()) or "its defaults"


def _rule_stage(M: int, N: int, precision: str, target: Target) -> tuple[str, str] | None:
    """(stage, the rule's words) of RULE for this call, or None."""
    hopper = tuple(target.capability) == HOPPER
    for arch, shape, precisions, stage in RULE:
        if (arch == "sm_90a") != hopper or (shape == "thin" and not thin(M, N)):
            continue
        if precision in precisions:
            where = "sm_90 GPUs" if hopper else "GPUs without sm_90a"
            if target.interpreter:
                where += " (CPU tensors stand in for one, as in lab.compare's CPU mode)"
            when = f" with min(M, N) <= {THIN}" if shape == "thin" else ""
            return stage, f"the rule for {where}: {stage} for {precision}{when}"
    return None


def choose(M: int, N: int, K: int, precision: str, layout: str = "nn",
           target: Target = CPU_TENSORS, backend: str | None = None,
           table: "Table | None" = None) -> Choice:
    """The stage x backend (and parameters) that runs an M x N x K `precision` call in `layout` on
    `target`; `backend` restricts the choice to that backend. `table`: the dispatch table (None:
    load_table()). LabError (one sentence) when no stage can run the call."""
    if precision not in PRECISIONS:
        raise LabError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if layout not in LAYOUTS:
        raise LabError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if backend is not None and backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    where = bucket(M, N, K)
    passed: list[str] = []  # "stage (backend): why not", for the reason
    tried: set = set()

    def attempt(stage, b, params, reason, source, measured=()) -> Choice | None:
        key = (stage, b, tuple(sorted(params.items())))
        if key in tried:
            return None
        tried.add(key)
        why = why_not(stage, b, params, precision, target, backend)
        if why is None:
            skipped = (f"passed over {'; '.join(passed)}; " if passed else "")
            return Choice(stage, b, dict(params), skipped + reason, source, tuple(measured))
        passed.append(f"{stage} ({b}): {why}")
        return None

    why_no_table = ""
    if target.interpreter:
        why_no_table = ("CPU tensors have no GPU to look up in the dispatch table and run Triton "
                        "kernels only")
    elif target.gpu is None:
        why_no_table = "no GPU to look up in the dispatch table"
    else:
        table = load_table() if table is None else table
        if not table.has_gpu(target.gpu):
            why_no_table = f"the dispatch table has no entry for {target.gpu}"
        else:
            found = table.candidates(target.gpu, where, precision, layout)
            shape = f"{M}x{N}x{K}"
            for entry, distance in found:
                for item in (entry.get("shapes", []) if distance == 0 else []):
                    if item["measured"][0]["shape"] != shape:
                        continue
                    m = item["measured"][0]
                    choice = attempt(item["stage"], item["backend"], item.get("params", {}),
                                     f"measured fastest at {shape} itself, {precision} {layout} "
                                     f"on {target.gpu} ({m['median_ms']:.4g} ms"
                                     + (f", {m['pct_cublas']:.1f}% of cuBLAS"
                                        if m.get("pct_cublas") is not None else "")
                                     + f", {m['csv']}), where its bucket {where} takes "
                                     f"{entry['stage']} ({entry['backend']})", "shape",
                                     item["measured"])
                    if choice is not None:
                        return choice
                for item in [entry, *entry.get("next", [])]:
                    source = "table" if distance == 0 else "nearest"
                    choice = attempt(item["stage"], item["backend"], item.get("params", {}),
                                     _entry_reason(entry, item, where, layout, target, distance),
                                     source, item.get("measured", []))
                    if choice is not None:
                        return choice
            why_no_table = (f"the dispatch table's entries for {target.gpu} cannot run it"
                            if found else
                            f"the dispatch table has no {precision} {layout} entry for "
                            f"{target.gpu} within distance {MAX_DISTANCE:g} of {where}")
    order = ("triton",) if target.interpreter else BACKENDS
    ruled = _rule_stage(M, N, precision, target)
    if ruled is not None:
        stage, words = ruled
        for b in order:
            choice = attempt(stage, b, {}, f"{why_no_table}, so {words}", "rule")
            if choice is not None:
                return choice
    for spec in reversed(STAGES):  # the last rung that can run it
        for b in order:
            choice = attempt(spec.name, b, {}, f"{why_no_table}, and the rule has no stage "
                             f"for {precision} here, so {spec.name}, the last stage of the "
                             f"ladder that runs it", "rule")
            if choice is not None:
                return choice
    raise LabError(_refusal(M, N, K, precision, layout, target, backend))


def _entry_reason(entry: dict, item: dict, where: str, layout: str, target: Target,
                  distance: float) -> str:
    rank = "measured fastest" if item is entry else "measured next fastest"
    at = "; ".join(f"{m['shape']}: {m['median_ms']:.4g} ms, {m['pct_cublas']:.1f}% of cuBLAS "
                   f"({m['csv']})" if m.get("pct_cublas") is not None else
                   f"{m['shape']}: {m['median_ms']:.4g} ms ({m['csv']})"
                   for m in item.get("measured", []))
    if distance == 0:
        return f"{rank} for {where} {entry['precision']} {layout} on {target.gpu} ({at})"
    return (f"no measurement for {where}, so the nearest measured bucket {entry['bucket']} "
            f"(distance {distance:g}), {rank} there ({at})")


def _refusal(M, N, K, precision, layout, target, backend) -> str:
    need = precision_record(precision).min_capability
    if not target.interpreter and tuple(target.capability) < tuple(need):
        cc = f"{target.capability[0]}.{target.capability[1]}"
        return (f"the automatic choice has no stage for {precision} on {target.gpu or 'this GPU'}"
                f": {precision} needs compute capability {need[0]}.{need[1]} or newer and this "
                f"GPU is {cc}; use bf16 or fp16 tensors")
    offers = [s.offer(b) for s in STAGES for b in BACKENDS if precision in s.precisions_for(b)]
    need = min(o.min_capability(precision) for o in offers)
    if not target.interpreter and tuple(target.capability) < need:
        cc = f"{target.capability[0]}.{target.capability[1]}"
        return (f"the automatic choice has no stage for {precision} on {target.gpu or 'this GPU'}"
                f": {precision} needs compute capability {need[0]}.{need[1]} or newer on every "
                f"stage of this lab and this GPU is {cc}; python -m lab.compare --list says "
                f"where each stage runs")
    only = f" on backend {backend}" if backend else ""
    return (f"the automatic choice found no stage{only} that runs {precision} {layout} "
            f"{M}x{N}x{K} on {target}; name one with stage= (python -m lab.compare --list shows "
            f"each stage's precisions)")


# ----------------------------------------------------------------------------- the table


@dataclass
class Table:
    """A dispatch table as read from its file (docs/DISPATCH.md, "The table")."""

    path: Path
    data: dict

    def __post_init__(self) -> None:
        self.index: dict[tuple, list[dict]] = {}
        for e in self.data["entries"]:
            self.index.setdefault((e["gpu"], e["precision"], e["layout"]), []).append(e)

    @property
    def entries(self) -> list[dict]:
        return self.data["entries"]

    @property
    def gpus(self) -> dict:
        return self.data.get("gpus", {})

    def has_gpu(self, gpu: str) -> bool:
        return any(e["gpu"] == gpu for e in self.entries)

    def candidates(self, gpu: str, where: str, precision: str, layout: str):
        """[(entry, distance)]: the entry of bucket `where`, then the entries of the same class
        (thin or not) within MAX_DISTANCE, nearest first (a tie: the bucket's name)."""
        M, N, _, _ = parse_bucket(where)
        found = []
        for e in self.index.get((gpu, precision, layout), []):
            m, n, _, _ = parse_bucket(e["bucket"])
            if thin(m, n) != thin(M, N):
                continue
            d = bucket_distance(where, e["bucket"])
            if d <= MAX_DISTANCE:
                found.append((e, d))
        return sorted(found, key=lambda x: (x[1], x[0]["bucket"]))


_LOADED: dict[tuple, Table] = {}


def table_path(path: str | os.PathLike | None = None) -> Path:
    """`path`, else $LAB_DISPATCH_TABLE, else the table shipped with the lab."""
    chosen = path or os.environ.get(TABLE_ENV) or TABLE
    return Path(os.path.expanduser(str(chosen)))


def load_table(path: str | os.PathLike | None = None) -> Table:
    """The dispatch table (read once per file and modification time). LabError, one sentence
    naming the file, when it cannot be read or is not a dispatch table."""
    p = table_path(path)
    try:
        stamp = p.stat().st_mtime_ns
    except OSError as exc:
        raise LabError(f"cannot read the dispatch table {p}: {exc.strerror or exc}; "
                       f"{_table_hint()}") from None
    key = (str(p), stamp)
    if key not in _LOADED:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LabError(f"cannot read the dispatch table {p}: "
                           f"{getattr(exc, 'strerror', None) or exc}; {_table_hint()}") from None
        _LOADED.clear()
        _LOADED[key] = Table(p, parse_table(text, p))
    return _LOADED[key]


def _table_hint() -> str:
    return (f"rebuild it with python -m lab.dispatch build (docs/DISPATCH.md), or point "
            f"{TABLE_ENV} at another table")


def parse_table(text: str, where: str | os.PathLike = "the table") -> dict:
    """The table's data, checked: LabError (one sentence) for anything that is not a dispatch
    table this lab reads."""
    def bad(what: str) -> LabError:
        return LabError(f"{where} is not a usable dispatch table ({what}); {_table_hint()}")

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad(f"its format is not {FORMAT!r}")
    if data.get("version") != VERSION:
        raise bad(f"version {data.get('version')!r}, where this lab reads {VERSION}")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise bad("it has no list of entries")
    if not isinstance(data.get("gpus", {}), dict):
        raise bad("its gpus are not an object")
    for i, e in enumerate(entries):
        what = _entry_problem(e)
        if what:
            raise bad(f"entry {i + 1} {what}")
    return data


def _entry_problem(e) -> str:
    """What is wrong with one entry, or ""."""
    if not isinstance(e, dict):
        return "is not an object"
    for key in ("gpu", "bucket", "precision", "layout"):
        if not isinstance(e.get(key), str):
            return f"has no {key}"
    try:
        *_, flag = parse_bucket(e["bucket"])
        if flag not in FLAGS:
            raise ValueError
    except ValueError:
        return f"has a bucket {e['bucket']!r} that is not MxNxK:a128, :a4 or :a1"
    if e["precision"] not in PRECISIONS:
        return f"names an unknown precision {e['precision']!r}"
    if e["layout"] not in LAYOUTS:
        return f"names an unknown layout {e['layout']!r}"
    nxt, shapes = e.get("next", []), e.get("shapes", [])
    if not isinstance(nxt, list):
        return "has a next that is not a list"
    if not isinstance(shapes, list) or not all(
            isinstance(x, dict) and isinstance(x.get("measured"), list) and len(x["measured"]) == 1
            for x in shapes):
        return "has shapes that are not a list of choices measured at one shape each"
    for item in [e, *nxt, *shapes]:
        if not isinstance(item, dict) or not isinstance(item.get("stage"), str):
            return "has a choice without a stage"
        if item.get("backend") not in BACKENDS:
            return f"has a backend {item.get('backend')!r} that is not cuda or triton"
        if not isinstance(item.get("params", {}), dict):
            return "has params that are not an object"
        measured = item.get("measured", [])
        if not isinstance(measured, list) or not all(
                isinstance(m, dict) and isinstance(m.get("shape"), str)
                and isinstance(m.get("median_ms"), (int, float))
                and isinstance(m.get("csv"), str) for m in measured):
            return "has a measured record without shape, median_ms and csv"
    return ""


# ----------------------------------------------------------------------------- building


# The columns a lab.compare CSV must have to be read (layout, params and pct_cublas are optional)
NEEDED = ("stage", "backend", "precision", "M", "N", "K", "status", "median_ms")
RANKS = ("pct", "ms")


@dataclass
class _Measure:
    csv: str
    stamp: str
    order: int
    ms: float
    pct: float | None
    ran: dict


def build_table(paths: list[str], by: str = "pct", keep: int = KEEP, exclude: tuple = (),
                say=None) -> dict:
    """A dispatch table from lab.compare CSVs (docs/DISPATCH.md, "Building the table").

    Each CSV's GPU is its .env.json's `gpu` (a CSV without one, or of a CPU-mode run, is left out
    with a note). Read: the stage rows that passed (not cuBLAS, not failed, errors or invalid rows),
    of stages the registry has, each with the parameters it set and what ran (_stage_and_params:
    the `params` column parsed into the registry's names for the stage and backend). Where
    several files measured one configuration (stage x backend x the parameters it set) at one
    shape, precision and layout on one GPU, the newest file's rows stand (its .env.json's
    timestamp; the order given breaks a tie); other configurations of the stage measured in
    older files stand beside them. The repeats of a configuration give one figure,
    their median. Per GPU, shape bucket, precision and layout, each stage x backend is ranked
    by `by`: "pct", its % of cuBLAS (cuBLAS timed beside each row, so clock changes between
    rows cancel), or "ms", its median time; across the bucket's shapes the geometric mean of its
    figure relative to the best at each shape; a configuration measured at fewer of the bucket's
    shapes ranks after those measured at all. An entry keeps the `keep` best stage x backend
    pairs, each with its best parameters. `exclude`: stages left out (one whose timed call leaves
    out work a lab.matmul call pays, such as tiled_padded's zero padding, made outside the
    timing and again on every call)."""
    from lab.csvfile import read_csv, read_env

    if by not in RANKS:
        raise LabError(f"--by takes {' or '.join(RANKS)}, not {by!r}")
    exclude = tuple(get_stage(name).name for name in exclude)  # an unknown name: one sentence
    say = say or (lambda text: None)
    gpus: dict[str, dict] = {}
    sources: list[dict] = []
    seen: dict[tuple, dict[tuple, list[_Measure]]] = {}  # (gpu, stage, backend, shape, p, l)
    left_out: dict[str, int] = {}

    def count(why: str, n: int = 1) -> None:
        left_out[why] = left_out.get(why, 0) + n

    for order, name in enumerate(paths):
        path = Path(name)
        if not path.is_file():
            raise LabError(f"no CSV file {name}; give the lab.compare CSVs to build from")
        env = read_env(path)
        shown = _shown_path(path)
        if not env.get("gpu") or env.get("mode", "gpu") != "gpu":
            say(f"left out {shown}: its .env.json names no GPU it ran on")
            continue
        try:
            df = read_csv(path)
        except Exception as exc:  # a CSV pandas cannot parse: not a lab.compare CSV
            say(f"left out {shown}: not a lab.compare CSV ({type(exc).__name__})")
            continue
        missing = [c for c in NEEDED if c not in df.columns]
        if missing:
            say(f"left out {shown}: no column {', '.join(missing)}")
            continue
        gpu = str(env["gpu"])
        sms = int(env.get("sm_count") or 0) or None
        info = gpus.setdefault(gpu, {})
        if env.get("compute_capability"):
            info.setdefault("capability", str(env["compute_capability"]))
        if sms:
            info.setdefault("sm_count", sms)
        used = 0
        for r in df.to_dict("records"):
            if r["stage"] == "cublas":
                continue
            if r["status"] != "pass" or _missing(r["median_ms"]):
                count("rows that did not pass")
                continue
            parsed = _stage_and_params(r)
            if isinstance(parsed, str):
                count(parsed)
                continue
            stage, backend, params, ran = parsed
            if stage in exclude:
                count("rows of stages left out with --exclude")
                continue
            layout = _text(r.get("layout")) or "nn"
            shape = (int(r["M"]), int(r["N"]), int(r["K"]))
            pct = None if _missing(r.get("pct_cublas")) else float(r["pct_cublas"])
            m = _Measure(shown, str(env.get("timestamp", "")), order, float(r["median_ms"]), pct,
                         ran)
            key = (gpu, stage, backend, shape, str(r["precision"]), layout)
            seen.setdefault(key, {}).setdefault(tuple(sorted(params.items())), []).append(m)
            used += 1
        sources.append({"csv": shown, "gpu": gpu, "commit": env.get("commit"),
                        "timestamp": env.get("timestamp"), "rows": used})
        say(f"read {shown}: {used} stage rows on {gpu}")
    # the newest file's rows stand for one configuration (stage x backend x parameters) at a
    # shape: a newer file that measured other parameters of the stage says nothing new of these
    groups: dict[tuple, dict[tuple, dict[tuple, list[_Measure]]]] = {}
    for (gpu, stage, backend, shape, precision, layout), configs in seen.items():
        key = (gpu, bucket(*shape), precision, layout)
        for c, ms in configs.items():
            newest = max((m.stamp, m.order) for m in ms)
            kept = [m for m in ms if (m.stamp, m.order) == newest]
            if len(ms) > len(kept):
                count("rows measured again in a newer file", len(ms) - len(kept))
            groups.setdefault(key, {}).setdefault((stage, backend, c), {})[shape] = kept
    entries = [_entry(key, configs, by, keep) for key, configs in groups.items()]
    entries.sort(key=lambda e: (e["gpu"], PRECISIONS.index(e["precision"]), e["layout"],
                                parse_bucket(e["bucket"])))
    for why, n in sorted(left_out.items()):
        say(f"left out: {n} {why}")
    return {"format": FORMAT, "version": VERSION,
            "built": {"command": "python -m lab.dispatch build " + " ".join(
                          s["csv"] for s in sources) + (f" --by {by}" if by != "pct" else "")
                      + (f" --exclude {','.join(exclude)}" if exclude else ""),
                      "rank": {"pct": "% of cuBLAS", "ms": "median ms"}[by],
                      "left_out": dict(sorted(left_out.items()))},
            "gpus": gpus, "sources": sources, "entries": entries}


def _shown_path(path: Path) -> str:
    """A CSV's path as the table records it: relative to the repository where it lies inside."""
    full = path.resolve()
    try:
        return str(full.relative_to(ROOT))
    except ValueError:
        return str(path)


def _missing(value) -> bool:
    try:
        return value is None or bool(value != value)  # NaN and pandas' NA
    except TypeError:  # pd.NA
        return True


def _text(value) -> str:
    return "" if _missing(value) else str(value)


def _stage_and_params(r: dict):
    """(stage, backend, params, ran) of a CSV row, or why it is left out. params: the parameters
    the row set, in the registry's names: those of its label (`stage:name=value,...`), or, for a
    tuned `stage:auto` row, the configuration it ran wherever that differs from the defaults; {}
    for a row of the defaults, whose automatic values the launcher resolves for each call's
    shape and operands. ran: the row's `params` column (the values that ran, resolved) parsed
    into the registry's parameter names of the stage and backend (other facts dropped)."""
    label = str(r["stage"])
    name, _, given = label.partition(":")
    if "[" in label:
        return "rows of a build define the registry does not have"
    if name == AUTO:
        return "rows of the automatic choice (stage auto)"
    try:
        spec = get_stage(name)
    except LabError:
        return "rows of stages this lab no longer has"
    backend = str(r["backend"])
    if backend not in BACKENDS:
        return "rows of an unknown backend"
    declared = {p.name: p for p in spec.params if backend in p.backends}
    everywhere = {p.name: p for p in spec.params}

    def parse(text: str, names: dict, strict: bool) -> dict | None:
        out = {}
        for item in filter(None, (x.strip() for x in text.split(","))):
            k, sep, v = (x.strip() for x in item.partition("="))
            if not sep or k not in names:
                if strict and sep and k not in everywhere:
                    return None
                continue  # a fact that is no parameter (swap=1), or another backend's
            try:
                out[k] = names[k].parse(name, v)
            except LabError:
                if strict:
                    return None
                out[k] = v  # what ran, as written, where today's choices lack it
        return out

    ran = parse(_text(r.get("params")), declared, strict=False)
    if given.strip().lower() == "auto":  # the tuner's configuration: what ran, where not default
        defaults = spec.defaults()
        params = {k: v for k, v in ran.items() if v != defaults[k]}
        if any(v not in declared[k].choices for k, v in params.items()):
            return "rows whose parameters the registry no longer takes"
    else:
        params = parse(given, declared, strict=True)
        if params is None:
            return "rows whose parameters the registry no longer takes"
    return spec.name, backend, params, ran


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _entry(key: tuple, configs: dict, by: str, keep: int) -> dict:
    """One table entry: the stage x backend pairs of a (gpu, bucket, precision, layout) ranked."""
    gpu, where, precision, layout = key
    shapes = sorted({s for per in configs.values() for s in per})
    figures = {}  # config -> {shape: (ms, pct, repeats, csv, ran)}
    for config, per in configs.items():
        figures[config] = {}
        for shape, ms in per.items():
            pcts = [m.pct for m in ms if m.pct is not None]
            figures[config][shape] = (_median([m.ms for m in ms]),
                                      _median(pcts) if len(pcts) == len(ms) else None,
                                      len(ms), ms[0].csv, ms[0].ran)
    use_pct = by == "pct" and all(f[1] is not None for per in figures.values()
                                  for f in per.values())

    def speed(f) -> float:
        return f[1] if use_pct else 1.0 / f[0]

    best = {s: max(speed(per[s]) for per in figures.values() if s in per) for s in shapes}

    def score(config) -> tuple:
        per = figures[config]
        rel = [speed(per[s]) / best[s] for s in per]
        return (-len(per), -math.exp(sum(map(math.log, rel)) / len(rel)), config[0], config[1])

    ranked, pairs = [], set()
    for config in sorted(figures, key=score):
        if (config[0], config[1]) in pairs:
            continue  # one configuration per stage x backend: its best
        pairs.add((config[0], config[1]))
        stage, backend, params = config
        ranked.append({"stage": stage, "backend": backend, "params": dict(params),
                       "measured": [{"shape": "x".join(map(str, s)),
                                     "median_ms": float(f"{f[0]:.5g}"),
                                     "pct_cublas": None if f[1] is None else round(f[1], 1),
                                     "repeats": f[2], "ran": f[4], "csv": f[3]}
                                    for s, f in sorted(figures[config].items())]})
        if len(ranked) == keep:
            break
    top, rest = ranked[0], ranked[1:]
    entry = {"gpu": gpu, "bucket": where, "precision": precision, "layout": layout, **top,
             "next": rest}
    # a shape whose own fastest configuration beat the choice there by more than SHAPE_MARGIN
    # (or that the choice did not measure) keeps it, for a call of exactly that shape
    mine = figures[(top["stage"], top["backend"], tuple(sorted(top["params"].items())))]
    shaped = []
    for s in shapes if len(shapes) > 1 else ():
        fastest = max((c for c in figures if s in figures[c]),
                      key=lambda c: (speed(figures[c][s]), c[0], c[1]))
        if s in mine and speed(figures[fastest][s]) <= speed(mine[s]) * (1 + SHAPE_MARGIN):
            continue
        f = figures[fastest][s]
        shaped.append({"stage": fastest[0], "backend": fastest[1], "params": dict(fastest[2]),
                       "measured": [{"shape": "x".join(map(str, s)),
                                     "median_ms": float(f"{f[0]:.5g}"),
                                     "pct_cublas": None if f[1] is None else round(f[1], 1),
                                     "repeats": f[2], "ran": f[4], "csv": f[3]}]})
    if shaped:
        entry["shapes"] = shaped
    return entry


def dump_table(data: dict) -> str:
    """The table as its file holds it: the header indented, one line per entry (diffs stay
    small when a rebuild changes a few entries)."""
    head = json.dumps({**data, "entries": []}, indent=1)
    body = ",\n  ".join(json.dumps(e) for e in data["entries"])
    return head.replace('"entries": []', '"entries": [\n  ' + body + "\n ]" if body
                        else '"entries": []') + "\n"


def write_table(data: dict, out: str | os.PathLike) -> Path:
    """Write a table atomically (a temporary file renamed into place)."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_table(data))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary file (mkstemp makes it private)
        os.replace(tmp, out)
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


# ----------------------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    from lab.cli import ArgumentParser

    p = ArgumentParser(prog="lab.dispatch",
                       description="The table lab.matmul's automatic choice (stage auto) reads: "
                                   "build it from lab.compare CSVs, show it, or ask which stage "
                                   "a shape gets (docs/DISPATCH.md).")
    sub = p.add_subparsers(dest="command", metavar="{build,show,which}")
    b = sub.add_parser("build", help="write a table from lab.compare CSVs")
    b.add_argument("csv", nargs="+", metavar="CSV", help="lab.compare CSVs, each with its "
                   ".env.json beside it (the GPU's name is read there)")
    b.add_argument("--out", required=True, metavar="PATH",
                   help=f"the table to write (the lab's own: {_shown_path(TABLE)})")
    b.add_argument("--by", choices=RANKS, default="pct",
                   help="rank by %% of cuBLAS (pct, default: cuBLAS was timed beside each row) "
                        "or by median ms")
    b.add_argument("--exclude", metavar="STAGE[,STAGE]", default="",
                   help="stages to leave out, such as tiled_padded (its zero padding is made "
                        "outside the timed call, and again on every lab.matmul call)")
    s = sub.add_parser("show", help="print a table's entries")
    w = sub.add_parser("which", help="the stage, backend and parameters a shape gets")
    w.add_argument("--size", required=True, metavar="MxNxK", help="the shape (or N for N^3)")
    w.add_argument("--precision", default="fp32", help="fp32, tf32, 3xtf32, bf16, fp16 or fp8")
    w.add_argument("--layout", default="nn", help="nn, nt, tn or tt")
    w.add_argument("--backend", help="only stages of this backend (cuda or triton)")
    w.add_argument("--cc", metavar="X.Y", help="the GPU's compute capability, for a GPU the "
                   "table does not know")
    for q in (s, w):
        q.add_argument("--gpu", metavar="NAME", help="a GPU name as torch gives it (default: this "
                       "machine's GPU, else every GPU of the table)")
        q.add_argument("--table", metavar="PATH",
                       help=f"the table to read (default ${TABLE_ENV}, else the lab's own)")
    s.add_argument("--precision", help="only this precision")
    s.add_argument("--layout", help="only this layout")
    return p


def main(argv: list[str] | None = None) -> int:
    from lab.cli import guarded

    return guarded(_main, argv)


def _main(argv: list[str] | None) -> int:
    from lab.cli import note

    args = build_parser().parse_args(argv)
    if args.command is None:
        raise LabError("name a command: build, show or which (see python -m lab.dispatch --help)")
    if args.command == "build":
        exclude = tuple(x.strip() for x in args.exclude.split(",") if x.strip())
        data = build_table(args.csv, by=args.by, exclude=exclude,
                           say=lambda t: note(t, file=sys.stderr))
        path = write_table(data, args.out)
        note(f"wrote {path}: {len(data['entries'])} entries on "
             f"{', '.join(data['gpus']) or 'no GPU'}")
        return 0
    table = load_table(args.table)
    if args.command == "show":
        print(show(table, args.gpu, args.precision, args.layout))
        return 0
    from lab.shapes import parse_sizes

    shapes = parse_sizes(args.size)
    if len(shapes) != 1:
        raise LabError(f"--size takes one shape, not {args.size!r}")
    M, N, K = shapes[0]
    for target in _which_targets(table, args.gpu, args.cc):
        choice = choose(M, N, K, args.precision.strip().lower(), args.layout.strip().lower(),
                        target, args.backend, table)
        note(f"{target}, {args.precision} {args.layout} {M}x{N}x{K}: {choice.stage} "
             f"({choice.backend}) with {choice.params_text}", subsequent="  ")
        note(f"{SOURCE_WORDS[choice.source]}: {choice.reason}", indent="  ",
             subsequent="    ")
    return 0


def _which_targets(table: Table, gpu: str | None, cc: str | None) -> list[Target]:
    """The GPUs `which` answers for: --gpu (its capability from --cc or the table), else this
    machine's GPU, else every GPU of the table."""
    def capability(name: str) -> tuple[int, int]:
        text = cc or table.gpus.get(name, {}).get("capability")
        if not text:
            raise LabError(f"the dispatch table does not know {name}'s compute capability; give "
                           f"it with --cc, such as --cc 8.0")
        try:
            major, minor = (int(x) for x in str(text).split("."))
        except ValueError:
            raise LabError(f"--cc takes a compute capability such as 9.0, not {text!r}") from None
        return major, minor

    if gpu:
        return [Target(gpu, capability(gpu))]
    import torch

    if torch.cuda.is_available() and cc is None:
        return [target_of("cuda")]
    names = list(dict.fromkeys(e["gpu"] for e in table.entries))
    if not names:
        raise LabError("the dispatch table has no GPU; name one with --gpu NAME --cc X.Y")
    return [Target(n, capability(n)) for n in names]


def show(table: Table, gpu: str | None = None, precision: str | None = None,
         layout: str | None = None) -> str:
    """The table as text: per GPU, one line per entry (precision, layout, bucket, the choice, its %
    of cuBLAS and ms where measured at one shape, the runners-up)."""
    entries = [e for e in table.entries if (gpu is None or e["gpu"] == gpu)
               and (precision is None or e["precision"] == precision)
               and (layout is None or e["layout"] == layout)]
    if not entries:
        return f"{table.path}: no entries" + (" for that selection" if (gpu or precision or layout)
                                              else "")
    lines = [f"{table.path}: {len(entries)} entries"]
    for name in dict.fromkeys(e["gpu"] for e in entries):
        info = table.gpus.get(name, {})
        extra = ", ".join(x for x in (f"compute capability {info['capability']}"
                                      if info.get("capability") else "",
                                      f"{info['sm_count']} SMs" if info.get("sm_count") else "")
                          if x)
        lines += ["", f"{name}" + (f" ({extra})" if extra else "")]
        lines.append(f"  {'prec':<6} {'layout':<6} {'bucket':<22} {'choice':<24} "
                     f"{'% cuBLAS':>8}  next")
        for e in (x for x in entries if x["gpu"] == name):
            pct = _mean_pct(e)
            nxt = ", ".join(f"{n['stage']}/{n['backend']}"
                            + (f" {_mean_pct(n):.0f}" if _mean_pct(n) is not None else "")
                            for n in e.get("next", []))
            choice = f"{e['stage']}/{e['backend']}" + (" *" if e.get("params") else "")
            lines.append(f"  {e['precision']:<6} {e['layout']:<6} {e['bucket']:<22} "
                         f"{choice:<24} {'' if pct is None else f'{pct:.1f}':>8}  {nxt}")
    lines += ["", "% cuBLAS: the choice's (the geometric mean over a bucket's shapes); * : "
              "parameters other than the defaults (python -m lab.dispatch which prints them)"]
    return "\n".join(lines)


def _mean_pct(item: dict) -> float | None:
    pcts = [m.get("pct_cublas") for m in item.get("measured", [])]
    if not pcts or any(p is None for p in pcts):
        return None
    return math.exp(sum(math.log(p) for p in pcts) / len(pcts))


if __name__ == "__main__":
    sys.exit(main())
