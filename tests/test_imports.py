"""The import graph of lab/, cuda_kernels/ and triton_kernels/, read from the source (ast): every
`import` and `from ... import`, at module level or inside a function, is an edge.

- No circle anywhere: among lab modules, among cuda_kernels/'s or triton_kernels/'s, nor across
  the three packages (Tarjan's strongly connected components of the whole graph); a stage's launcher
  imports only the launchers of stages before it in the registry (reuse points down the ladder).
- A command (lab.autotune, lab.compare, lab.run, lab.profile) may
  import a lower module, never one that imports it back.
- Kernel modules import from lab only the shared base (the package lab.base: errors, contract,
  entry, the operand description, ...) and the toolchain layer (the package lab.toolchain: build
  and launch tools, shared with the harness). lab.base imports nothing of lab outside itself;
  lab.toolchain imports only lab.base and itself. Dependencies point one way: commands ->
  harness -> registry -> launchers -> lab.toolchain -> lab.base.
- lab/ imports nothing of cuda_kernels/ or triton_kernels/ (the registry reaches a launcher by
  its module name, lab/stages.py Stage.module); cuda_kernels/ and triton_kernels/ import nothing
  of each other (twins share through the base).
- lab/axes.py and the tuner package lab/tune/ stay low: they import no command module.

CPU only, no kernel is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lab", "cuda_kernels", "triton_kernels")
# What a launcher (cuda_kernels/*, triton_kernels/*) may import from lab: the shared base and
# the toolchain layer (docs/ARCHITECTURE.md, "Layout").
BASE_PACKAGE = "lab.base"
TOOLCHAIN = "lab.toolchain"


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


COMMANDS = ("lab.autotune", "lab.compare", "lab.run", "lab.profile")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of PACKAGES (a package is its __init__)."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `mods` it imports anywhere in its file. `from a import b` is an
    edge to a.b where that is a module, else to a; imports of other packages are left out."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..y import z
                    up = package[:len(package) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


GRAPH = import_graph(modules())


def is_base(module: str) -> bool:
    return in_package(module, BASE_PACKAGE)


def may_be_imported_by_launchers(module: str) -> bool:
    return is_base(module) or in_package(module, TOOLCHAIN)


def test_the_graph_reads_function_level_and_relative_imports(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "a.py").write_text("def f():\n    from lab.b import g\n")
    (tmp_path / "lab" / "b.py").write_text("from . import a\nimport os\n")
    for pkg in ("cuda_kernels", "triton_kernels"):
        (tmp_path / pkg).mkdir()
    graph = import_graph(modules(tmp_path))
    assert graph["lab.a"] == {"lab.b"} and graph["lab.b"] == {"lab.a"}
    assert circles(graph) == [["lab.a", "lab.b"]]


def test_the_graph_holds_the_known_edges():
    assert "lab.stages" in GRAPH["lab.axes"]
    assert "lab.tune.cli" in GRAPH["lab.autotune"]
    assert "lab.axes" in GRAPH["lab.compare"]
    assert len(GRAPH) > 40


def test_no_circle_among_lab_modules():
    lab = {m: {t for t in ts if t.split(".")[0] == "lab"} for m, ts in GRAPH.items()
           if m.split(".")[0] == "lab"}
    assert circles(lab) == []


def test_no_circle_among_kernel_modules():
    for pkg in ("cuda_kernels", "triton_kernels"):
        sub = {m: {t for t in ts if t.split(".")[0] == pkg} for m, ts in GRAPH.items()
               if m.split(".")[0] == pkg}
        assert circles(sub) == [], pkg


def test_a_stage_launcher_reuses_only_stages_below_it():
    """Reuse points down the ladder: a stage's launcher imports only earlier stages' modules."""
    from lab.stages import STAGES

    order = {s.name: i for i, s in enumerate(STAGES)}
    up = sorted((m, t) for m, ts in GRAPH.items() for t in ts
                if m.partition(".")[2] in order and t.partition(".")[2] in order
                and order[t.partition(".")[2]] >= order[m.partition(".")[2]])
    assert up == []


def test_no_circle_anywhere():
    """One graph of lab/, cuda_kernels/ and triton_kernels/ together: no circle across them."""
    assert circles(GRAPH) == []


def test_kernel_modules_import_only_the_shared_base_and_the_toolchain():
    beyond = sorted((m, t) for m, ts in GRAPH.items() if m.split(".")[0] != "lab"
                    for t in ts if t.split(".")[0] == "lab" and not may_be_imported_by_launchers(t))
    assert beyond == []


def test_the_shared_base_imports_nothing_of_lab_outside_it():
    """The base may import the lab package itself (lab/__init__.py imports only lab.base.errors)."""
    base = [m for m in GRAPH if is_base(m)]
    assert {"lab.base", "lab.base.entry", "lab.base.problem", "lab.base.errors"} <= set(base)
    above = sorted((m, t) for m in base for t in GRAPH[m]
                   if not is_base(t) and t != "lab")
    assert above == []


def test_the_toolchain_imports_only_the_base():
    tools = [m for m in GRAPH if in_package(m, TOOLCHAIN)]
    assert len(tools) > 4
    above = sorted((m, t) for m in tools for t in GRAPH[m]
                   if not (is_base(t) or in_package(t, TOOLCHAIN) or t == "lab"))
    assert above == []


def test_no_module_at_the_base_s_former_paths():
    """The shared base has one home: nothing is left at lab/operands.py, lab/contract.py,
    lab/errors.py, lab/splitk.py, lab/precisions.py or lab/report.py (their concerns are in
    lab/base/ and, for report.py's, lab/row.py, lab/computed.py and lab/repeats.py)."""
    former = ("lab.operands", "lab.contract", "lab.errors", "lab.splitk", "lab.precisions",
              "lab.report", "lab._compat")
    assert [m for m in former if m in GRAPH] == []
    assert [(m, t) for m, ts in GRAPH.items() for t in ts if t in former] == []


def test_lab_imports_no_launcher_package_and_the_twins_import_no_twin():
    down = sorted((m, t) for m, ts in GRAPH.items() if m.split(".")[0] == "lab"
                  for t in ts if t.split(".")[0] in ("cuda_kernels", "triton_kernels"))
    assert down == []
    across = sorted((m, t) for m, ts in GRAPH.items() for t in ts
                    if {m.split(".")[0], t.split(".")[0]} == {"cuda_kernels", "triton_kernels"})
    assert across == []


# lab/tune/'s modules in the order lab/tune/__init__.py lists them: each imports only earlier ones.
TUNE_LAYERS = ("space", "seeds", "prune", "search", "pool", "cache", "gpu", "tuner", "auto",
               "report", "dryrun", "workers", "cli")


def test_the_tuner_modules_import_only_the_ones_listed_before_them():
    names = [f"lab.tune.{m}" for m in TUNE_LAYERS]
    assert sorted(names) == sorted(m for m in GRAPH if m.startswith("lab.tune."))
    upward = {m: sorted(t for t in GRAPH[m] if t in names[i:]) for i, m in enumerate(names)}
    assert {m: ts for m, ts in upward.items() if ts} == {}


def test_the_axes_and_the_tuner_import_no_command():
    assert GRAPH["lab.axes"] <= {"lab.base.errors", "lab.base.contract", "lab.stages"}
    tuner = {m: ts for m, ts in GRAPH.items() if m == "lab.tune" or m.startswith("lab.tune.")}
    assert len(tuner) > 5
    assert {m: sorted(ts & set(COMMANDS)) for m, ts in tuner.items() if ts & set(COMMANDS)} == {}
