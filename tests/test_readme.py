"""Every command the README shows works on a machine without a GPU (exit 0): the lab.* command
lines of its code blocks and backticks, and its Python example. On a GPU machine the same file is
skipped (the GPU run of these commands is done by hand and recorded under results/)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-mode README run")


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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("TRITON_INTERPRET", None)  # a fresh shell, as a reader would have
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
