"""Test set-up shared by every test file.

- Without a GPU, Triton kernels must run under the interpreter, and the switch has to be on before
  any @triton.jit kernel module is imported.
- Tiers: `pytest -m fast` runs the fast tier (the harness, registry, table, checks, occupancy,
  plots and docs: no CUDA or g++ compile, no Triton kernel beyond a few tiny shapes), under two
  minutes on a 2-core machine; `pytest` runs everything; `pytest -m gpu` the GPU tests.
  A test file joins the fast tier by its name in FAST_FILES below (its tests are all fast), a
  single test by `@pytest.mark.fast`.
"""

import os

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

# Whole files in the fast tier. Keep every file here fast from a cold build cache: none of them
# emulates a CUDA stage or compiles one with NVRTC (test_build_cache compiles a few-line kernel),
# and the few `python -m lab...` subprocesses they start run in CPU mode on tiny shapes. The tier
# as a whole took 121 s on an idle 2-core machine (2026-11-29), most of it the subprocesses of
# the command tests (test_precision, test_occupancy); the README says about two minutes. The
# picture tests (test_plot.py) grew past what that leaves and left the tier: its one fast test is
# marked in the file (every picture drawn once).
FAST_FILES = frozenset({
    "test_registry.py", "test_harness.py", "test_table.py", "test_check_k.py",
    "test_docs_words.py", "test_occupancy.py", "test_conditions.py", "test_precision.py",
    "test_build_cache.py", "test_lesson.py", "test_precisions.py",
})


def pytest_collection_modifyitems(config, items):
    fast = pytest.mark.fast
    for item in items:
        if item.path.name in FAST_FILES:
            item.add_marker(fast)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# A GPU run may be stopped at a time limit before pytest prints its summary. With
# LAB_TEST_STREAM=<file>, each test's outcome (and a failure's traceback) is appended to that file
# the moment it is known (scripts/gpu_tests.py reads it).
_STREAM = os.environ.get("LAB_TEST_STREAM")


def pytest_runtest_logreport(report):
    """One line per test outcome: OUTCOME nodeid seconds phase (a skip or an error in set-up
    is the test's outcome too), then a failure's traceback indented."""
    if not _STREAM or (report.passed and report.when != "call"):
        return
    if report.skipped and report.when == "teardown":
        return
    with open(_STREAM, "a") as f:
        f.write(f"{report.outcome.upper()} {report.nodeid} {report.duration:.2f}s {report.when}\n")
        if report.failed:
            f.write("".join(f"    {line}\n" for line in str(report.longrepr).splitlines()[-60:]))
