"""Every command the README shows works on a machine without a GPU (exit 0): the lab.* command
lines of its code blocks and backticks, and its Python example. On a GPU machine the same file is
skipped (the GPU run of these commands is done by hand and recorded under results/)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, cpu_only, lab_env

README = (ROOT / "README.md").read_text()
pytestmark = cpu_only  # the CPU-mode README run


def readme_commands() -> list[str]:
    """`python -m lab.<tool> ...` lines of indented code blocks and inline code spans."""
    found = []
    for line in README.splitlines():
        if line.startswith("    python -m lab."):
            found.append(line.strip().split("  #")[0].strip())
    found += re.findall(r"`(python -m lab\.[^`]+)`", README)
    return list(dict.fromkeys(found))


def readme_python() -> str:
    """The indented Python example (the block that starts with `import torch`)."""
    lines, inside = [], False
    for line in README.splitlines():
        if line.startswith("    import torch"):
            inside = True
        if inside:
            if line and not line.startswith("    "):
                break
            lines.append(line[4:])
    return "\n".join(lines)


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """From the repository root, as the README's commands are written (their files go to out/,
    which git ignores)."""
    env = lab_env(drop=("TRITON_INTERPRET",), COLUMNS="80")  # a fresh shell, as a reader would have
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_readme_shows_commands():
    cmds = readme_commands()
    assert len(cmds) >= 8 and any("lab.profile" in c for c in cmds)
    assert "import torch" in readme_python()


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_exits_0_without_a_gpu(command, tmp_path):
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"]
    r = _run([sys.executable, *argv[1:]], tmp_path)
    assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr


def test_readme_python_example_runs_without_a_gpu(tmp_path):
    r = _run([sys.executable, "-c", readme_python()], tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "inner dimensions" in r.stdout


# ----------------------------------------------------------------------- the way in


def test_the_reading_order_links_every_stage_page_in_ladder_order():
    from lab.stages import STAGES

    start = README.index("## Reading order")
    section = README[start:README.index("\n## ", start + 1)]
    linked = re.findall(r"\]\(docs/stages/(\w+)\.md\)", section)
    assert linked == [s.name for s in STAGES]
    for name in linked:
        assert (ROOT / "docs" / "stages" / f"{name}.md").is_file()
    assert len(re.findall(r"^\s*\d+\. \[", section, re.M)) == len(STAGES)  # one line each


# ------------------------------------------------------------------------------ scripts/

TOOLS = {"gpu_run.sh", "gpu_batch.sh", "gpu_tests.py", "ab.sh", "run_readme.py", "gen_wgmma_ops.py",
         "trust_measure.py", "spread_protocols.sh", "spread_table.py", "stage_matrix.py"}
PACKAGES = ("lab", "cuda_kernels", "triton_kernels")


def private_names(path: Path) -> list[str]:
    """Names with a leading underscore that a script takes from lab, cuda_kernels or
    triton_kernels: private modules, imported names, and attributes of imported modules (also
    in the Python a shell script runs with `python -c`)."""
    import ast

    source = path.read_text(encoding="utf-8")
    found = []
    if path.suffix == ".sh":
        pkg = "|".join(PACKAGES)
        found += re.findall(rf"\b(?:{pkg})(?:\.\w+)*\._\w+", source)
        for m in re.finditer(rf"from\s+((?:{pkg})[\w.]*)\s+import\s+([\w, ]+)", source):
            found += [n.strip() for n in m.group(2).split(",") if n.strip().startswith("_")]
        return found
    tree = ast.parse(source)
    modules = {}  # local name -> module path, for the packages above
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    found += [p for p in a.name.split(".") if p.startswith("_")]
                    modules[a.asname or a.name.split(".")[0]] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            found += [p for p in node.module.split(".") if p.startswith("_")]
            for a in node.names:
                if a.name.startswith("_"):
                    found.append(a.name)
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{base.id}...{node.attr}")
    return found


def scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "scripts").rglob("*") if p.suffix in (".py", ".sh"))


@pytest.mark.parametrize("path", scripts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_script_uses_a_private_name_of_the_lab(path):
    assert private_names(path) == []


def test_the_private_name_check_sees_each_kind(tmp_path):
    cases = {"a.py": "from triton_kernels._realign import copy_into_buffers\n",
             "b.py": "import triton_kernels.mma as mma\nmma._rs_wait = None\n",
             "c.py": "from cuda_kernels import _build\n",
             "d.sh": "python3 -c 'from cuda_kernels._sass import sass'\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert private_names(tmp_path / name), name
    (tmp_path / "ok.py").write_text("from lab.stages import get_stage\nimport lab\nlab.matmul\n")
    assert private_names(tmp_path / "ok.py") == []


def test_scripts_are_tools_or_listed_experiments():
    top = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())
    assert set(top) == TOOLS
    listing = (ROOT / "scripts" / "experiments" / "README.md").read_text()
    for path in (ROOT / "scripts" / "experiments").iterdir():
        if path.is_file() and path.name != "README.md":
            assert f"]({path.name})" in listing, path.name  # one line on what it showed


def test_every_script_path_the_docs_and_scripts_name_exists():
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *scripts(),
               ROOT / "scripts" / "experiments" / "README.md"]
    for src in sources:
        for path in re.findall(r"\bscripts/[\w/]+\.(?:py|sh)\b", src.read_text()):
            assert (ROOT / path).is_file(), f"{src.relative_to(ROOT)} names {path}"
