"""Plain helpers shared by the test files; imported by module name (`from helpers import ...`), as
pytest puts tests/ on sys.path. Fixtures and markers pytest itself must see live in
tests/conftest.py.

- ROOT: the repository root.
- cpu_only: skips a test (or, as `pytestmark = cpu_only`, a file) where a CUDA GPU is present;
  the CPU-mode paths (Triton interpreter, the g++ emulator, the "no GPU" messages) only run without.
- lab_env / run_lab: the environment and the run of a `python -m lab.<tool>` subprocess in the
  repository root, with it on PYTHONPATH and the output captured as text; one_line_error: what
  every command's refusal of a user's mistake looks like; stage_option_errors: the mistakes in
  --stage, --backend and a size option that every command refuses alike.
- check_in_layout: a prepared launch checked against torch.matmul on the GPU, shape by shape.
- gpu_operands / check_scaled: a precision's operands on the GPU (the fp8 precisions with their
  scales, as prepare() takes them) and C checked against the float64 reference of the scaled
  product.
- The Hopper launcher's tests (cuda_kernels/_tma.py): needs_hopper (skip without an sm_90 GPU),
  one_sentence (what a refusal looks like), C_DTYPE (C's dtype in bf16, fp16 and fp8),
  zero_problem (a Problem of zero CPU operands as the launcher sees it) and mock_tma_launches
  (the kernel launches recorded instead of made, so a launch can be inspected without a GPU).
"""

from __future__ import annotations

import contextlib
import re

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.base import precisions
from lab.base.dtypes import DTYPE_NAMES
from lab.run import LAYOUTS  # noqa: F401  (re-exported: the four operand layouts nn, nt, tn, tt)
from lab.stages import PRECISIONS, get_stage, parse_variants

from lab import check as chk

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
cpu_only = pytest.mark.skipif(HAS_GPU, reason="CPU-mode test (GPU present)")

# The precision tables, from the lab's own declarations (lab/stages.py's PRECISIONS,
# lab/base/problem.py's DTYPE_NAMES): the tensor-core precisions, each precision's operand dtype and
# its element size in bytes.
# (TC_PRECISIONS: those of the mma and wgmma stages; fp8, whose e4m3 operands wgmma reads from
# TMA tiles only, is the TMA stages' alone: FP8_STAGES)
TC_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32" and not precisions.get(p).scaled)
FP8_STAGES = ("tma_wgmma", "warp_specialized", "persistent")
DTYPE = {p: getattr(torch, DTYPE_NAMES[p]) for p in PRECISIONS}
ES = {p: DTYPE[p].itemsize for p in PRECISIONS}


def stage_params(stage: str, backend: str, **changes) -> dict:
    """The registry's parameters of `stage` with `changes`, for `backend`, as the harness hands
    them to a launcher."""
    spec = stage + (":" + ",".join(f"{k}={v}" for k, v in changes.items()) if changes else "")
    return parse_variants([spec])[0].params_for(backend)


def stage_module(stage: str, backend: str):
    """The launcher module of `stage` for `backend`."""
    return get_stage(stage).module(backend)


def lab_env(*, drop: tuple[str, ...] = (), **extra: str) -> dict:
    """os.environ with the repository on PYTHONPATH, `extra` added and the names in `drop`
    removed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    for key in drop:
        env.pop(key, None)
    return env


def run_lab(tool: str, *args, timeout: float, cwd: Path = ROOT, drop: tuple[str, ...] = (),
            prefix: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
    """`python -m TOOL ARGS` (TOOL a module name such as "lab.compare") in `cwd`, the repository on
    PYTHONPATH, `env` added and `drop` removed; `prefix` goes before the interpreter (a wrapper
    such as compute-sanitizer and its options). Returns the CompletedProcess, output as text."""
    return subprocess.run([*prefix, sys.executable, "-m", tool, *map(str, args)], cwd=cwd,
                          env=lab_env(drop=drop, **env), capture_output=True, text=True,
                          timeout=timeout)


def run_python(code: str, *args, timeout: float, cwd: Path = ROOT, drop: tuple[str, ...] = (),
               **env: str) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` in `cwd` with the environment of run_lab; output as text."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd,
                          env=lab_env(drop=drop, **env), capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *words: str) -> str:
    """Asserts that the command `r` refused a user's mistake: exit status 2, nothing on stdout,
    one line on stderr that starts with "error: " and holds each of `words`, no traceback.
    Returns that line."""
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert r.stdout == "" and "Traceback" not in out, out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    missing = [w for w in words if w not in lines[0]]
    assert not missing, f"{missing} not in: {lines[0]}"
    return lines[0]


def stage_option_errors(size_option: str) -> list[tuple[list[str], str]]:
    """The mistakes every command that takes --stage, --backend and a size option (`--sizes` in
    lab.compare, `--size` in lab.profile) refuses in one sentence: (arguments, words the
    error holds)."""
    return [
        (["--stage", "bogus"], "unknown stage 'bogus'"),
        (["--stage", "tiled", size_option, "0"], "positive"),
        (["--stage", "tiled", size_option, "12x"], "MxNxK"),
        (["--stage", "tiled", "--backend", "opencl"], "unknown backend opencl"),
    ]


# ------------------------------------------------------------------------- GPU checks
def check_in_layout(module, params: dict, shapes, layout: str, label: str = "") -> None:
    """`module.prepare(a, b, c, **params)` at each (M, N, K) of `shapes` on fresh CUDA inputs
    in `layout` (seed M + N + K; C a transposed view in tt), checked against torch.matmul by
    lab.check; a failure names `label`, the layout and the shape."""
    from lab import check as chk

    for M, N, K in shapes:
        a, b = chk.make_inputs(M, N, K, seed=M + N + K, device="cuda", layout=layout)
        c = output_for(M, N, layout)
        result = chk.check(module.prepare(a, b, c, **params), c, chk.reference(a, b), K)
        assert result.passed, f"{label}{layout} {M}x{N}x{K}: {result.reason}"


# ------------------------------------------------------------------ the emulator tests' operands
def padded_ld(width: int, aligned: bool) -> int:
    """A leading dimension larger than `width` (the gap holds NaN in the emulator) that is a
    multiple of 4 floats (16 bytes: float4 lines) or not."""
    ld = width + 1
    while (ld % 4 == 0) != bool(aligned):
        ld += 1
    return ld


def line_widths(M: int, N: int, K: int, layout: str) -> tuple[int, int, int]:
    """The lengths of the contiguous lines of A, B and C in `layout` (the least each leading
    dimension can be)."""
    return (M if layout[0] == "t" else K, K if layout[1] == "t" else N, N)


def strided_operands(M: int, N: int, K: int, layout: str, lda: int, ldb: int, ldc: int):
    """CPU tensors A (M x K), B (K x N), C (M x N) in `layout` with these leading dimensions."""
    a = torch.empty(K, lda)[:, :M].t() if layout[0] == "t" else torch.empty(M, lda)[:, :K]
    b = torch.empty(N, ldb)[:, :K].t() if layout[1] == "t" else torch.empty(K, ldb)[:, :N]
    return a, b, torch.empty(M, ldc)[:, :N]


def output_for(M: int, N: int, layout: str, device: str = "cuda") -> torch.Tensor:
    """An M x N fp32 C for `layout`: a transposed view in tt, row-major otherwise."""
    return torch.empty((N, M), device=device).t() if layout == "tt" else \
        torch.empty((M, N), device=device)


def new_emulator(tmp_path_factory, name: str):
    """A tests/cuda_emulator.py Emulator in a fresh temporary folder; skips the test where no C++
    compiler (g++ or clang++) is installed."""
    from cuda_emulator import Emulator, compiler

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    return Emulator(tmp_path_factory.mktemp(name))


def compile_for_emulator(emulator, cases, build_of, jobs: int | None = None):
    """Every case's build (NVRTC on a thread pool) compiled for `emulator`: each build goes to g++
    in the background as soon as it exists, at most `jobs` g++ processes at a time. `build_of(case)`
    returns (key, build). Returns ({key: build}, [error message of each failed g++ build])."""
    import concurrent.futures

    jobs = jobs or max(1, os.cpu_count() or 1)
    builds, running, errors = {}, [], []

    def finish(build):
        try:
            emulator.executable(build)
        except AssertionError as exc:
            errors.append(str(exc))

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for future in concurrent.futures.as_completed([pool.submit(build_of, c) for c in cases]):
            key, build = future.result()
            builds[key] = build
            if len(running) >= jobs:
                finish(running.pop(0))
            emulator.start(build)
            running.append(build)
    for build in running:
        finish(build)
    return builds, errors


# ------------------------------------------------------------------------- compute-sanitizer
@contextlib.contextmanager
def build_cache_off():
    """The on-disk build cache turned off (LAB_BUILD_CACHE=off) inside the block, as it was after."""
    saved = os.environ.get("LAB_BUILD_CACHE")
    os.environ["LAB_BUILD_CACHE"] = "off"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["LAB_BUILD_CACHE"]
        else:
            os.environ["LAB_BUILD_CACHE"] = saved


def fresh_build(build):
    """`build` compiled again by NVRTC, past both the process's memo and the on-disk build cache.
    ptxas's output for one source can differ between runs on a busy machine (docs/ARCHITECTURE.md,
    "The build cache"): a test that asserts a build's exact instructions checks a fresh build once
    more before it fails."""
    from lab.toolchain import nvrtc

    with build_cache_off():
        return nvrtc._compile.__wrapped__(build.source, build.kernel, build.options, build.arch)


def sanitizer_findings(out: str) -> int:
    """compute-sanitizer's error count in `out`, less the driver-entry-point probes of
    cuda-bindings: the TMA stages encode tensor maps and launch clusters through
    `cuda.bindings.driver`, whose first call looks every driver function up with
    cuGetProcAddress_v2, and the lookups the installed driver does not answer come back
    CUDA_ERROR_INVALID_VALUE; memcheck reports each as an API error ("Program hit ... on CUDA API
    call to cuGetProcAddress_v2"). They are not errors of a kernel or of a call the lab makes; every
    other report still counts."""
    m = re.search(r"ERROR SUMMARY: (\d+)", out)
    total = int(m.group(1)) if m else 0
    return total - sanitizer_probes(out)


def sanitizer_probes(out: str) -> int:
    """How many of compute-sanitizer's reports in `out` are cuda-bindings' cuGetProcAddress_v2
    probes (sanitizer_findings)."""
    return len(re.findall(r"Program hit CUDA_ERROR_\w+ \(error \d+\) due to \"[^\"]*\" on CUDA "
                          r"API call to cuGetProcAddress", out))


def sanitizer_clean(r, out: str) -> bool:
    """The sanitized run found nothing: no findings beyond the probes, and an exit status of 0,
    or the --error-exitcode 1 that the probes alone set."""
    return sanitizer_findings(out) == 0 and (
        r.returncode == 0 or (r.returncode == 1 and sanitizer_probes(out) > 0))


def run_sanitized(sanitizer: str, tool: str, label: str, *args: str):
    """lab.profile's CUDA target of stage `label` (its --check on) under compute-sanitizer's
    `tool`: (the CompletedProcess, its whole output, the output's last 30 lines)."""
    r = run_lab("lab.profile", "--_target", "cuda", "--stage", label, *args, "--no-nvtx",
                "--check", timeout=900,
                prefix=(sanitizer, "--tool", tool, "--error-exitcode", "1"),
                PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    out = r.stdout + r.stderr
    return r, out, "\n".join(out.strip().splitlines()[-30:])


def gpu_operands(M: int, N: int, K: int, layout: str, precision: str, seed: int = 0):
    """A and B of `precision` on the GPU (the fp8 precisions: e4m3 with scales of their kind,
    lab.check.inputs_for) and prepare()'s scale arguments ({} but the fp8 precisions' scale_a
    and scale_b)."""
    a, b, scales = chk.inputs_for(precision, M, N, K, seed, "cuda", layout)
    return a, b, ({} if scales is None else {"scale_a": scales[0], "scale_b": scales[1]})


def check_scaled(c, a, b, precision: str, scales: dict | None = None) -> None:
    """C against the float64 reference (times the scales of gpu_operands' dict, if any)."""
    s = (scales["scale_a"], scales["scale_b"]) if scales else None
    res = chk.compare(c.float(), chk.reference(a, b, s), a.shape[1], precision)
    assert res.passed, res.reason


def check_sliced_operands(prepare, precision: str, **params) -> None:
    """`prepare` (a stage's public prepare) with `params` on 200 x 136 x 3072 operands that are
    views into larger tensors, at an aligned offset (read in place by TMA) and at an odd one
    (copied by the plan), into a C view at a column offset: C against float64, nothing written
    beside it."""
    M, N, K = 200, 136, 3072
    a0, b0, scales = gpu_operands(M + 9, N + 9, K + 160, "nt", precision, seed=11)
    # nt: A is M x K row-major, B is K x N with unit stride down K (a view of N x K)
    for off in (128, 5):  # 128 elements: 16-byte aligned in every precision; 5: not
        a = a0[3:3 + M, off:off + K]
        b = b0[off:off + K, 2:2 + N]
        assert a.dtype == b.dtype == DTYPE[precision]
        c_big = torch.full((M, N + 8), float("nan"), device="cuda", dtype=C_DTYPE[precision])
        c = c_big[:, 8:]
        prepare(a, b, c, precision=precision, **params, **scales)()
        check_scaled(c, a, b, precision, scales)
        assert torch.isnan(c_big[:, :8]).all(), "wrote outside C"


# ------------------------------------------------------------------------------ Hopper launcher
needs_hopper = pytest.mark.skipif(
    not HAS_GPU or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 GPU (H100, H200)")
C_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}


def one_sentence(text: str) -> None:
    """A refusal is one sentence: no line break, no sentence break inside."""
    assert "\n" not in text and text.count(". ") == 0, text


def zero_problem(M: int, N: int, K: int, layout: str, precision: str, c=None):
    """The Problem of zero operands of `precision` in `layout` on the CPU, as a launcher sees it
    (lab.base.describe), C empty (or `c`); fp8 with per-tensor scales 0.5 and 3."""
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    dt = DTYPE[precision]
    a = torch.zeros(K, M, dtype=dt).t() if layout[0] == "t" else torch.zeros(M, K, dtype=dt)
    b = torch.zeros(N, K, dtype=dt).t() if layout[1] == "t" else torch.zeros(K, N, dtype=dt)
    c = torch.empty(M, N, dtype=C_DTYPE[precision]) if c is None else c
    scales = (torch.full((1,), 0.5), torch.full((1,), 3.0)) if precision == "fp8" else None
    return describe(a, b, c, CUDA, precision, scales)


def mock_tma_launches(monkeypatch, tma) -> tuple[dict, dict]:
    """Replace the TMA launcher and the plain launcher of module `tma` (cuda_kernels._tma) by
    recorders: returns (seen, reduced), filled at each launch with the main kernel's build, grid,
    args, specs and cluster, and the split-K reduction's build, grid and args."""
    seen, reduced = {}, {}

    class Fake:
        step = (lambda *args: None, ())

    def fake_tma(build, grid, block, args, smem, specs, cluster):
        seen.update(build=build, grid=grid, args=args, specs=specs, cluster=cluster)
        return Fake()

    def fake_launcher(build, grid, block, args):
        if build.kernel == "splitk_reduce":
            reduced.update(build=build, grid=grid, args=args)
        return Fake()

    monkeypatch.setattr(tma, "tma_launcher", fake_tma)
    monkeypatch.setattr(tma, "launcher", fake_launcher)
    return seen, reduced
