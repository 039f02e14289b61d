"""Run every command the README shows (its `python -m lab.*` lines and its Python example), each
in a fresh process with COLUMNS=80, and print each command's exit status and output. Used to
check the README on a GPU machine (tests/test_readme.py does the same on a CPU-only one).

    python scripts/run_readme.py [LOG]
"""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_readme import readme_commands, readme_python  # noqa: E402


def main() -> int:
    log = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}
    env.pop("TRITON_INTERPRET", None)
    runs = [(c, [sys.executable, *shlex.split(c)[1:]]) for c in readme_commands()]
    runs.append(("python -c <the README's Python example>", [sys.executable, "-c", readme_python()]))
    failed = 0
    for shown, argv in runs:
        t0 = time.time()
        r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        failed += r.returncode != 0
        print(f"$ {shown}\n{r.stdout}{r.stderr}[exit {r.returncode}, {time.time() - t0:.0f} s]\n",
              file=log, flush=True)
        print(f"exit {r.returncode}  {time.time() - t0:5.0f} s  {shown}", flush=True)
    print(f"{len(runs) - failed} of {len(runs)} commands exited 0", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
