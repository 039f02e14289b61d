"""Every `python -m lab.<tool> ...` command the docs show works with today's command line.

docs_commands() finds them in README.md, docs/*.md and docs/stages/*.md: the lines of indented code
blocks, joined over their `\\` continuations, and inline code spans, which may wrap over lines; a
`# comment` and a `| pipe` after a command are not part of it. A bare `python -m lab.<tool>` names
the command rather than runs it, and `...`, `<...>` or an upper-case placeholder (`--repeat N`)
make a command a form: of those only the tool's existence is checked.

- test_docs_command_is_accepted (fast tier: in this process, nothing compiled or run, about 10 s):
  the tool's own main() runs on the command's arguments as far as the point where its work would
  start, and must get there. So the parser takes every option; every stage, parameter, precision,
  layout and size exists; and each launcher's validate() accepts the parameters in every precision
  the command asks for. lab.compare and lab.profile are checked as on a GPU, where the docs'
  commands are meant to run (their GPU-only options are refused in CPU mode by design);
  lab.autotune as its `--dry-run`, its no-GPU mode; lab.doctor and lab.plot by their parsers;
  lab.lesson in full (its `--pages` compares the pages and writes none).
- test_docs_command_runs_in_cpu_mode (CPU only): the commands that work without a GPU in seconds
  run in full and must exit 0: lab.occupancy, `lab.autotune --show`, `lab.compare --list`,
  lab.profile's `--dry-run` and its SASS / PTX listings, and the "Run:" command of two stage pages
  at 64^3 with `--mode cpu`. The README's commands are tests/test_readme.py's, which runs them all.
  Every other lab.compare command of the docs takes from seconds to many minutes in CPU mode (each
  compiles its CUDA builds and interprets its Triton kernels), so it is checked by the test above
  only; tests/test_cpu_stages.py runs every stage.
- test_the_variants_a_stage_page_lists_parse: the variants a stage page's "Run:" paragraph offers
  (`tiled:tile=16`, ...) are valid.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ROOT, cpu_only, run_lab


def _tools() -> tuple[str, ...]:
    """`lab` and its commands, as `python -m lab` lists them."""
    from lab.__main__ import COMMANDS as LISTED

    return ("lab", *(name for name, _what in LISTED))


TOOLS = _tools()
# `...`, `<name>`, or an upper-case word standing for a value: a command's form, not a command
PLACEHOLDER = re.compile(r"\.\.\.|<[\w.-]+>|(?<!\S)(?:N|PATH|DIR|PCT|OLD\.csv)(?!\S)")
COMMAND_START = r"(?:[A-Z_][A-Z0-9_]*=\S+\s+)*python\s+-m\s+lab\b"


@dataclass(frozen=True)
class DocCommand:
    page: str    # relative to the repository root
    line: int    # where the command starts
    text: str    # the command, whitespace collapsed, comment and pipe removed

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def env(self) -> dict[str, str]:
        out = {}
        for word in self.argv:
            if "=" not in word or word.startswith("-"):
                break
            key, _, value = word.partition("=")
            out[key] = value
        return out

    @property
    def tool(self) -> str:
        argv = self.argv
        return argv[argv.index("-m") + 1]

    @property
    def args(self) -> list[str]:
        argv = self.argv
        return argv[argv.index("-m") + 2:]

    @property
    def is_form(self) -> bool:
        """A bare tool name, or a command with a placeholder in it."""
        return not self.args or bool(PLACEHOLDER.search(self.text))

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _clean(command: str) -> str:
    """One line: whitespace collapsed, a trailing `# comment` and a `| pipe` cut off."""
    command = " ".join(command.split())
    command = re.split(r"\s#\s", command)[0]
    words = shlex.split(command)
    if "|" in words:  # a pipe into tail or grep: the command is what comes before it
        command = shlex.join(words[:words.index("|")])
    return command.strip()


def commands_in(text: str, page: str) -> list[DocCommand]:
    """The commands of one Markdown page, in order of their line."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if re.match(rf" {{4,}}{COMMAND_START}", lines[i]):
            start, command = i, lines[i].strip()
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            found.append(DocCommand(page, start + 1, _clean(command)))
        i += 1
    for m in re.finditer(rf"`({COMMAND_START}[^`]*)`", text):
        found.append(DocCommand(page, text.count("\n", 0, m.start()) + 1, _clean(m.group(1))))
    return sorted(found, key=lambda c: c.line)


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "docs" / "stages").glob("*.md"))]


def docs_commands(pages: list[Path] | None = None) -> list[DocCommand]:
    out = []
    for path in pages or doc_pages():
        out += commands_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return out


COMMANDS = docs_commands()
RUNNABLE = [c for c in COMMANDS if not c.is_form]
# the forms that name a tool (`python -m lab.<tool>` names none)
NAMED = [c for c in COMMANDS if c.is_form and re.fullmatch(r"lab(?:\.\w+)?", c.tool)]


def _id(c: DocCommand) -> str:
    return f"{c.page}:{c.line}"


# ------------------------------------------------------------------------- the extraction


@pytest.mark.fast
def test_the_extraction_reads_blocks_spans_continuations_comments_and_pipes():
    page = "\n".join([
        "Run: `python -m lab.compare --stage",
        "tiled --sizes 64`, or the form `python -m lab.compare --repeat N`.",
        "",
        "    python -m lab.profile --stage tiled --sass | tail -1   # the mix",
        "    LAB_BUILD_CACHE=off python -m lab.compare --stage naive \\",
        "        --sizes 65",
        "",
        "The command `python -m lab.doctor` says more.",
    ])
    found = commands_in(page, "x.md")
    assert [(c.line, c.text) for c in found] == [
        (1, "python -m lab.compare --stage tiled --sizes 64"),
        (2, "python -m lab.compare --repeat N"),
        (4, "python -m lab.profile --stage tiled --sass"),
        (5, "LAB_BUILD_CACHE=off python -m lab.compare --stage naive --sizes 65"),
        (8, "python -m lab.doctor"),
    ]
    assert [c.is_form for c in found] == [False, True, False, False, True]
    assert found[3].env == {"LAB_BUILD_CACHE": "off"} and found[3].tool == "lab.compare"


@pytest.mark.fast
def test_the_docs_show_commands_of_every_tool():
    assert len(RUNNABLE) >= 60, len(RUNNABLE)
    tools = {c.tool for c in RUNNABLE}
    assert {"lab.compare", "lab.profile", "lab.autotune", "lab.occupancy"} <= tools, tools
    pages = {c.page for c in RUNNABLE}
    assert sum(p.startswith("docs/stages/") for p in pages) == len(
        list((ROOT / "docs" / "stages").glob("*.md")))  # every stage page says how to run it
    unknown = [str(c) for c in RUNNABLE + NAMED if c.tool not in TOOLS]
    assert unknown == []


# --------------------------------------------------------- accepted by today's command line


class _Accepted(Exception):
    """Raised where a command's work would start: everything before it accepted the command."""


def _accept(*_args, **_kwargs):
    raise _Accepted


@pytest.fixture
def as_on_a_gpu(monkeypatch, tmp_path):
    """The commands' checks as a GPU machine makes them, stopping before any work: lab.compare's
    plan is validated (no GPU memory asked for) and not executed, lab.profile stops once it knows
    what it would profile, lab.autotune's dry run before it shows the space, lab.results before
    it writes or compares a page. Output paths (`--csv out/run.csv`) land in a temporary folder;
    `stage:auto` rows read the committed tuning cache."""
    import lab.profile
    import lab.results
    import lab.run
    import lab.tune.cli

    monkeypatch.setattr(lab.run, "detect_mode",
                        lambda requested="auto": "cpu" if requested == "cpu" else "gpu")
    monkeypatch.setattr(lab.run, "check_memory", lambda shapes: None)
    monkeypatch.setattr(lab.run, "execute", _accept)
    real_runnable = lab.profile.runnable

    def runnable(*args, **kwargs):
        real_runnable(*args, **kwargs)
        raise _Accepted

    monkeypatch.setattr(lab.profile, "runnable", runnable)
    monkeypatch.setattr(lab.tune.cli, "dry_run", _accept)
    monkeypatch.setattr(lab.results, "regenerate", _accept)
    import lab.dispatch

    monkeypatch.setattr(lab.dispatch, "write_table", _accept)  # build reads, never writes
    import lab.ranks

    # --gpus N: as on a machine of 8 GPUs, stopping before the ranks start
    real_count = lab.ranks.count_gpus
    monkeypatch.setattr(lab.ranks, "count_gpus",
                        lambda text, mode: real_count(text, "cpu") if text != "all" else 8)
    monkeypatch.setattr(lab.ranks, "Launcher", _accept)
    import lab.lesson

    real_update = lab.lesson.update_page
    monkeypatch.setattr(lab.lesson, "update_page", lambda stage, check: real_update(stage, True))
    monkeypatch.setenv("LAB_TUNE_CACHE", str(ROOT / "results" / "autotune.json"))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)


def _accepted(command: DocCommand) -> tuple[bool, str]:
    """(whether the tool got to where its work starts, or ran in full with exit 0; its output)."""
    args = command.args
    if command.tool == "lab.autotune" and "--show" not in args and "--dry-run" not in args:
        args = [*args, "--dry-run"]  # its no-GPU mode: every check of a real search, then the space
    if command.tool in ("lab.doctor", "lab.plot", "lab.model"):  # the parser only: a full run
        module = importlib.import_module(command.tool)  # is a GPU probe, needs a CSV, or trains
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                module.build_parser().parse_args(args)
        except Exception as exc:  # lab's parsers raise LabError for argparse's errors
            return False, f"{out.getvalue()}{type(exc).__name__}: {exc}"
        return True, out.getvalue()
    if command.tool not in ("lab", "lab.compare", "lab.profile", "lab.autotune", "lab.occupancy",
                            "lab.results", "lab.lesson", "lab.dispatch"):
        return False, f"this test does not know how to check {command.tool} with arguments"
    module = importlib.import_module("lab.__main__" if command.tool == "lab" else command.tool)
    out = io.StringIO()
    here = Path.cwd()
    if command.tool == "lab.dispatch":  # its CSVs are named from the repository's root
        os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                rc = module.main(args)
            except _Accepted:
                return True, out.getvalue()
    finally:
        os.chdir(here)
    return rc == 0, out.getvalue() + f"\n(exit status {rc})"


@pytest.mark.fast
@pytest.mark.parametrize("command", RUNNABLE, ids=_id)
def test_docs_command_is_accepted(command, as_on_a_gpu):
    ok, output = _accepted(command)
    assert ok, f"{command}\n{output[-3000:]}"


@pytest.mark.fast
@pytest.mark.parametrize("command", NAMED, ids=_id)
def test_a_named_tool_exists(command):
    module = importlib.import_module("lab.__main__" if command.tool == "lab" else command.tool)
    assert callable(getattr(module, "main", None)), command


@pytest.mark.fast
def test_the_acceptance_check_refuses_a_stale_command(as_on_a_gpu):
    """What the check must catch: a parameter a stage no longer has, an option a tool does not
    take, a precision a stage does not compute in, a restriction the tuner cannot search."""
    for text in ("python -m lab.compare --stage mma:wgmma=0 --precision bf16",
                 "python -m lab.profile --stage warptiling --repeat 3",
                 "python -m lab.profile --stage tma_wgmma --sass",
                 "python -m lab.autotune --stage 'mma:kmajor_b=0' --backend triton --sizes 4096",
                 "python -m lab.compare --stage tiled --precision fp8"):
        ok, output = _accepted(DocCommand("x.md", 1, text))
        assert not ok and "error: " in output, (text, output)


# ------------------------------------------------------------ the variants of a stage page


def run_paragraph_variants() -> list[tuple[str, str]]:
    """(page, `stage:name=value,...`) for every variant the "Run:" paragraph of a stage page
    lists."""
    from lab.stages import BY_NAME

    out = []
    for path in sorted((ROOT / "docs" / "stages").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        m = re.search(r"^Run\b.*?(?=\n\n)", text, re.S | re.M)
        assert m, f"{path.name} has no 'Run:' paragraph"
        for span in re.findall(r"`([^`]+)`", m.group(0)):
            if re.fullmatch(r"\w+:[\w=|,.-]+", span) and span.split(":")[0] in BY_NAME:
                out.append((path.name, span))
    return out


@pytest.mark.fast
def test_the_variants_a_stage_page_lists_parse():
    from lab.base.errors import LabError
    from lab.stages import parse_variants

    variants = run_paragraph_variants()
    assert len(variants) >= 40
    bad = []
    for page, spec in variants:
        try:
            parse_variants([spec])
        except LabError as exc:
            bad.append(f"{page}: {spec}: {exc}")
    assert bad == []


# ------------------------------------------------------------------ run in full, CPU mode


def _backends(args: list[str]) -> set[str]:
    return set(args[args.index("--backend") + 1].split(",")) if "--backend" in args else {
        "cuda", "triton"}


def _cpu_form(command: DocCommand) -> tuple[list[str], bool] | None:
    """(the arguments a CPU-mode run of `command` takes, whether it needs a fresh process), or None
    for a command that is only checked above: one that needs a GPU, writes committed files, or
    takes minutes without a GPU.

    Triton's listings (`lab.profile --ptx` / `--sass` of a Triton kernel) compile for sm_90 and so
    need TRITON_INTERPRET unset, which this process cannot do (tests/conftest.py sets it before
    any kernel is imported): a listing of Triton alone runs in a fresh process as the reader's
    shell would; a listing of both backends runs its CUDA half here."""
    args = command.args
    if command.tool == "lab.occupancy":
        return args, False
    if command.tool == "lab.compare":
        return ([*args, "--mode", "cpu"], False) if "--list" in args else None
    if command.tool == "lab.autotune":
        return (args, False) if "--show" in args else None
    if command.tool == "lab.profile" and {"--sass", "--ptx"} & set(args):  # no GPU needed
        if "triton" not in _backends(args):
            return args, False
        if _backends(args) == {"triton"}:
            return args, True
        return [*args, "--backend", "cuda"], False
    if command.tool == "lab.profile" and "--dry-run" in args:
        return args, False
    if command.tool == "lab.dispatch" and args[:1] in (["which"], ["show"]):
        return args, False  # build writes a table: checked above only
    return None


# The stage pages whose "Run:" command (the page's first lab.compare command) runs in full, at
# 64^3: a CUDA build and a Triton kernel under the interpreter in fp32 (naive), and a Hopper
# stage's in its tensor-core precisions (tma_wgmma). Every stage's full run is test_cpu_stages.py's.
FULL_COMPARE = ("docs/stages/naive.md", "docs/stages/tma_wgmma.md")


def full_runs() -> list[tuple[DocCommand, list[str], bool]]:
    """(command, the arguments it runs with, whether in a fresh process), each run once; the
    README's commands are left to tests/test_readme.py, which runs every one of them."""
    readme = {(c.tool, tuple(c.args)) for c in COMMANDS if c.page == "README.md"}
    first_compare: dict[str, DocCommand] = {}
    for c in RUNNABLE:
        if c.tool == "lab.compare":
            first_compare.setdefault(c.page, c)
    out, seen = [], set(readme)
    for c in RUNNABLE:
        if c.page == "README.md":
            continue
        if c.page in FULL_COMPARE and first_compare[c.page] is c:
            form = ([*c.args, "--sizes", "64", "--mode", "cpu"], False)
        else:
            form = _cpu_form(c)
        if form is not None and (c.tool, tuple(form[0])) not in seen:
            seen.add((c.tool, tuple(form[0])))
            out.append((c, *form))
    return out


FULL_RUNS = full_runs()


@pytest.mark.fast
def test_some_commands_of_every_cpu_capable_kind_run_in_full():
    kinds = {(c.tool, fresh) for c, _args, fresh in FULL_RUNS}
    assert {("lab.compare", False), ("lab.profile", False), ("lab.profile", True),
            ("lab.occupancy", False)} <= kinds, kinds
    assert {c.page for c, *_ in FULL_RUNS} >= set(FULL_COMPARE)


@cpu_only
@pytest.mark.parametrize("command,args,fresh", FULL_RUNS,
                         ids=[_id(c) for c, *_ in FULL_RUNS])
def test_docs_command_runs_in_cpu_mode(command, args, fresh, monkeypatch, capsys):
    how = f"(run as python -m {command.tool} {shlex.join(args)})"
    env = {**command.env, "COLUMNS": "100",
           "LAB_TUNE_CACHE": str(ROOT / "results" / "autotune.json")}
    if fresh:  # a reader's shell: no TRITON_INTERPRET
        r = run_lab(command.tool, *args, timeout=600, drop=("TRITON_INTERPRET",), **env)
        rc, out, err = r.returncode, r.stdout, r.stderr
    else:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        rc = importlib.import_module(command.tool).main(args)
        out, err = capsys.readouterr()
    assert rc == 0, f"{command}\n{how}\n{out[-2000:]}\n{err[-2000:]}"
    assert "Traceback" not in err, f"{command}\n{how}\n{err[-2000:]}"
