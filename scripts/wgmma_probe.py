"""Moved to scripts/experiments/wgmma_probe.py (the mma stage's Hopper-kernel probe); this file
only runs it, with the same arguments, for the callers that still name the old path
(tests/test_mma_wgmma.py). Delete it once none does."""

import runpy
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent / "experiments" / "wgmma_probe.py"

if __name__ == "__main__":
    sys.argv[0] = str(TARGET)
    runpy.run_path(str(TARGET), run_name="__main__")
