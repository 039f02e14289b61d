"""A planted fast-but-wrong kernel (tests/planted/zero_registers.cu) and the check that stops it.

The kernel's per-thread accumulator is declared with 64 entries and indexed up to 127 (the class
of defect of larme/Faster_SGEMM_CUDA's `sgemmZeroRegisters`). NVRTC compiles it without a word,
keeps the 64 accumulators that exist and drops the statements that touch the rest: half the FFMAs
and half the stores of the fixed kernel, so it is fast, and half of C is never written. A naive
check (`abs(c - ref) > tol` per element, counting mismatches) passes it, because NaN compares
false; the lab's check (lab/check.py: C poisoned with NaN, any non-finite element fails) does not.

CPU: (a) the SASS of the defective build has exactly half the FFMA and STG of the fixed build,
and as many stores as the model of its output (planted.written_rows) says; (b) the g++ emulator
stops it at the first out-of-bounds index (UBSan) and runs the fixed kernel correctly; (c) on the
modelled output the lab's check fails and the naive check passes, and the lab's run machinery
records the row as 'fail', not timed. GPU (marked gpu): the same on the real kernel at 1024^3.
"""

from __future__ import annotations

import math

import pytest
import torch

from lab import check as chk
from lab.row import Row
from lab.run import RunSpec, _check_and_time
from planted import kernel as planted


def _count(mix: dict, opcode: str) -> int:
    """Static count of an opcode in the listing, any modifiers (STG.E, STG.E.128, ...)."""
    return sum(n for name, n in mix.items() if name.split(".")[0] == opcode)


def _mix(build):
    from lab.toolchain import sass as _sass

    return _sass.instruction_mix(_sass.sass(build))


# ------------------------------------------------------------------ (a) what the compiler made of it


@pytest.mark.parametrize("vec", [True, False], ids=["float4", "scalar"])
def test_the_defective_build_does_half_the_work_and_half_the_stores(vec):
    bad = planted.build(planted.ACC_DEFECT, vec=vec, arch="sm_90")
    good = planted.build(planted.ACC_FIXED, vec=vec, arch="sm_90")
    # NVRTC says nothing: no warning, no spill, no local memory
    for b in (bad, good):
        assert "warning" not in b.log.lower(), b.log
        assert b.spill_bytes == 0 and b.stack_frame == 0
    mix_bad, mix_good = _mix(bad), _mix(good)
    # the fixed kernel: TM * TN = 128 accumulators, 8 k's per tile -> 1024 FFMA, 128 stores
    assert _count(mix_good, "FFMA") == planted.TM * planted.TN * 8
    assert _count(mix_good, "STG") == planted.TM * planted.TN
    # the defective one: the accumulators that do not exist are gone, with their work and stores
    assert _count(mix_bad, "FFMA") * 2 == _count(mix_good, "FFMA")
    assert _count(mix_bad, "STG") * 2 == _count(mix_good, "STG")
    # ... and the stores left are those of the rows the model says are written
    rows_per_tile = int(planted.written_rows(planted.TM).sum())
    assert _count(mix_bad, "STG") == rows_per_tile * planted.TN == planted.ACC_DEFECT
    assert bad.registers < good.registers


# ------------------------------------------------------------------ (b) the emulator


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    from cuda_emulator import Emulator, compiler

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    emu = Emulator(tmp_path_factory.mktemp("planted"))
    for acc in (planted.ACC_DEFECT, planted.ACC_FIXED):
        emu.start(planted.build(acc, arch="sm_90"))
    return emu


def test_the_emulator_stops_the_defect_at_its_first_out_of_bounds_index(emulator):
    M, N, K = 130, 67, 33
    grid, block, _ = planted.geometry(M, N, K)
    ok, out = emulator.run(planted.build(planted.ACC_DEFECT, arch="sm_90"), grid, block, M, N, K,
                           36, 68, 68)
    assert not ok
    assert "out of bounds" in out and "float [64]" in out, out


@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 67, 33), (256, 256, 16)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_fixed_kernel_is_correct_in_the_emulator(emulator, shape):
    M, N, K = shape
    # 256^2 x 16: aligned, whole tiles, so the float4 path runs; the others take the edge path
    lda, ldb, ldc = (K, N, N) if shape == (256, 256, 16) else (K + 3, N + 1, N + 1)
    grid, block, _ = planted.geometry(M, N, K)
    ok, out = emulator.run(planted.build(planted.ACC_FIXED, arch="sm_90"), grid, block, M, N, K,
                           lda, ldb, ldc)
    assert ok, out


# ------------------------------------------------------------------ (c) the two checks, on the CPU


def _inputs(M, N, K, device="cpu"):
    a, b = chk.make_inputs(M, N, K, seed=11, device=device)
    return a, b, chk.reference(a, b)


def test_the_lab_check_rejects_what_a_naive_check_passes():
    M, N, K = 256, 192, 320
    a, b, ref = _inputs(M, N, K)
    c = torch.empty(M, N)
    result = chk.check(planted.emulated_launch(a, b, c), c, ref, K)  # C is NaN-poisoned first
    # the lab: any NaN fails, whatever the norm of the rest
    assert not result.passed
    assert f"{M // 2 * N} of {M * N} elements are NaN" in result.reason
    assert math.isnan(result.rel_err)
    # the naive check on the very same output: no element has |c - ref| > tol, so it passes
    assert planted.naive_mismatches(c, ref) == 0 and planted.naive_passes(c, ref)
    # and the half it did write is right (which is why nothing looks wrong at a glance)
    rows = planted.written_rows(M)
    assert chk.compare(c[rows], ref[rows], K).passed


def test_the_lab_check_also_fails_a_c_that_was_not_poisoned():
    """Without NaN poisoning (C left as zeros, or as old memory) the unwritten half is wrong
    values: the relative error is about 0.7, far above 1e-5."""
    M, N, K = 128, 128, 64
    a, b, ref = _inputs(M, N, K)
    c = torch.zeros(M, N)
    planted.emulated_launch(a, b, c)()
    result = chk.compare(c, ref, K)
    assert not result.passed and result.rel_err > 0.5
    assert "relative error" in result.reason


def test_the_fixed_kernel_passes_both_checks():
    M, N, K = 256, 192, 320
    a, b, ref = _inputs(M, N, K)
    c = torch.empty(M, N)
    assert chk.check(planted.emulated_launch(a, b, c, planted.ACC_FIXED), c, ref, K).passed
    assert planted.naive_passes(c, ref)


def test_the_run_machinery_records_the_row_as_fail_and_does_not_time_it():
    M, N, K = 128, 256, 64
    a, b, ref = _inputs(M, N, K)
    c = torch.empty(M, N)
    row = Row(stage="zero_registers(planted)", backend="cuda", precision="fp32", M=M, N=N, K=K)
    plan = RunSpec(variants=[], backends=["cuda"], shapes=[], precision="fp32", mode="cpu")
    _check_and_time(row, planted.emulated_launch(a, b, c), a, b, c, ref, plan)
    assert row.status == "fail" and "not timed" in row.detail and "NaN" in row.detail
    assert row.median_ms is None and row.reps is None


# ------------------------------------------------------------------ GPU: the real kernel


@pytest.mark.gpu
def test_on_the_gpu_the_lab_check_fails_it_and_the_naive_check_passes_it():
    M = N = K = 1024
    a, b, ref = _inputs(M, N, K, device="cuda")
    c = torch.empty(M, N, device="cuda")
    launch = planted.launcher(a, b, c)
    result = chk.check(launch, c, ref, K)  # NaN-poisoned C, one launch, compare
    assert not result.passed, "the planted kernel passed the lab's check"
    assert "NaN" in result.reason
    assert planted.naive_passes(c, ref), "the naive check caught it: the kernel changed"
    # the rows left NaN are exactly those the model says the build never writes
    unwritten = ~planted.written_rows(M).to(c.device)
    nan = torch.isnan(c)
    assert torch.equal(nan.all(dim=1), unwritten) and not nan[~unwritten].any()
    assert chk.compare(c[~unwritten], ref[~unwritten], K).passed
    # run the way lab.compare runs a row: checked, failed, never timed
    row = Row(stage="zero_registers(planted)", backend="cuda", precision="fp32", M=M, N=N, K=K)
    plan = RunSpec(variants=[], backends=["cuda"], shapes=[], precision="fp32", rep_ms=10.0)
    _check_and_time(row, launch, a, b, c, ref, plan)
    assert row.status == "fail" and row.median_ms is None, (row.status, row.detail)


@pytest.mark.gpu
def test_on_the_gpu_the_fixed_kernel_passes_the_lab_check():
    M = N = K = 1024
    a, b, ref = _inputs(M, N, K, device="cuda")
    c = torch.empty(M, N, device="cuda")
    result = chk.check(planted.launcher(a, b, c, acc=planted.ACC_FIXED), c, ref, K)
    assert result.passed, result.reason
