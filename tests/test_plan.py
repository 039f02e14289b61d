"""lab.matmul's plan cache (lab/plan.py): the first call of a signature prepares, later calls replay
the plan on the new tensors; what depends on the tensors themselves is still checked every call.

CPU: Triton stages under the interpreter (CPU tensors are planned too). GPU (marked `gpu`): every
stage x backend replays correctly, C column-major and strided too; a replayed call is captured in
a CUDA graph and the graph follows new input values; the hit path's CPU time is reported.
"""

from __future__ import annotations

import time

import pytest
import torch

import lab
from lab import plan as plans
from lab.base.contract import Prepared
from lab.base.errors import LabError

SMALL = (24, 40, 16)  # M, N, K: tiny enough for the interpreter


def _pair(M, N, K, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(dtype=dtype, device=device)
    b = torch.randn(K, N, generator=g).to(dtype=dtype, device=device)
    return a, b


def _plan_of(a, b, out, stage, backend="triton", precision=None, **params):
    return plans.lookup(plans.signature(a, b, out, stage, backend, precision, params))


@pytest.fixture(autouse=True)
def _fresh_plans():
    plans.clear()
    yield
    plans.clear()


def _cpu():
    if torch.cuda.is_available():
        pytest.skip("the CPU tests run the Triton interpreter; a GPU runs the GPU tests")


def test_second_call_replays_the_plan_on_new_values():
    _cpu()
    M, N, K = SMALL
    a, b = _pair(M, N, K, seed=1)
    c = lab.matmul(a, b, stage="tiled", backend="triton")
    plan = _plan_of(a, b, None, "tiled")
    assert plan is not None and plan.replay is not None
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    a2, b2 = _pair(M, N, K, seed=2)
    calls = []
    plan.prepare, keep = (lambda *x, **k: calls.append(1)), plan.prepare  # must not prepare
    c2 = lab.matmul(a2, b2, stage="tiled", backend="triton")
    plan.prepare = keep
    assert not calls
    torch.testing.assert_close(c2, a2 @ b2, rtol=1e-5, atol=1e-5)
    assert c2.data_ptr() != c.data_ptr()


def test_out_given_transposed_and_strided_follow_the_new_tensors():
    _cpu()
    M, N, K = SMALL
    for make_out in (lambda: torch.empty(N, M).t(),  # column-major C
                     lambda: torch.empty(M, 2 * N)[:, ::2]):  # no unit stride
        out = make_out()
        for seed in (3, 4, 5):
            a, b = _pair(M, N, K, seed=seed)
            at = torch.empty(K, M).t().copy_(a)  # a transposed view of the same values
            lab.matmul(at, b, stage="naive", backend="triton", out=out)
            torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
        assert _plan_of(at, b, out, "naive") is not None


def test_a_new_signature_makes_a_new_plan():
    _cpu()
    M, N, K = SMALL
    a, b = _pair(M, N, K)
    lab.matmul(a, b, stage="naive", backend="triton")
    lab.matmul(a[:, :8], b[:8], stage="naive", backend="triton")  # K 8, A's rows still K apart
    assert len(plans._PLANS) == 2
    lab.matmul(a, b, stage="naive", backend="triton", num_warps=2)
    assert len(plans._PLANS) == 3


def test_out_overlapping_an_input_is_refused_on_a_replay_too():
    _cpu()
    M, N, K = 16, 16, 16
    store = torch.zeros(4 * M * K)
    a = store[: M * K].view(M, K)
    b = torch.randn(K, N)
    lab.matmul(a, b, stage="naive", backend="triton", out=store[2 * M * K: 3 * M * K].view(M, N))
    a.copy_(torch.randn(M, K))
    assert _plan_of(a, b, store[2 * M * K: 3 * M * K].view(M, N), "naive") is not None
    with pytest.raises(LabError, match="shares memory with A") as info:
        lab.matmul(a, b, stage="naive", backend="triton", out=store[M * K // 2:][: M * N].view(M, N))
    assert "\n" not in str(info.value)


def test_setup_copies_are_redone_each_call():
    """tiled_padded pads A and B into zeroed buffers in prepare() (setup): replaying those
    buffers would compute the first call's values again, so the plan prepares every call."""
    _cpu()
    M, N, K = 20, 20, 20  # not a multiple of the tile: padded
    a, b = _pair(M, N, K, seed=6)
    lab.matmul(a, b, stage="tiled_padded", backend="triton", tile=16)
    plan = _plan_of(a, b, None, "tiled_padded", tile=16)
    assert plan is not None and plan.replay is None
    a2, b2 = _pair(M, N, K, seed=7)
    c2 = lab.matmul(a2, b2, stage="tiled_padded", backend="triton", tile=16)
    torch.testing.assert_close(c2, a2 @ b2, rtol=1e-5, atol=1e-5)


def test_empty_sums_and_empty_outputs_replay():
    _cpu()
    a, b = torch.randn(8, 0), torch.randn(0, 6)
    for _ in range(2):
        out = torch.full((8, 6), 7.0)
        lab.matmul(a, b, stage="naive", backend="triton", out=out)
        assert torch.equal(out, torch.zeros(8, 6))
    assert _plan_of(a, b, out, "naive").replay is not None
    assert lab.matmul(torch.randn(0, 4), torch.randn(4, 3), stage="naive", backend="triton").shape == (0, 3)


def test_tensors_that_require_grad():
    _cpu()
    M, N, K = SMALL
    for seed in (8, 9):
        a, b = _pair(M, N, K, seed=seed)
        a.requires_grad_(True)
        c = lab.matmul(a, b, stage="naive", backend="triton")
        torch.testing.assert_close(c, (a @ b).detach(), rtol=1e-5, atol=1e-5)


def _steps_holding(view_of_user: bool):
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    own = torch.empty(4, 4)
    held = a[1:] if view_of_user else own
    launch = Prepared.of_steps([(torch.Tensor.copy_, (c, a)), (torch.Tensor.add_, (own, held))])
    return plans.make_plan(launch, None, {}, a, b, c, "stage x (triton)")


def test_a_plan_is_not_made_from_steps_that_hold_a_view_of_user_memory():
    assert _steps_holding(view_of_user=False).replay is not None
    assert _steps_holding(view_of_user=True).replay is None


def test_of_steps_runs_in_order_and_splices():
    seen = []
    inner = Prepared.of_steps([(seen.append, (1,)), (seen.append, (2,))])
    outer = Prepared.of_steps([inner, (seen.append, (3,))])
    outer()
    assert seen == [1, 2, 3] and len(outer.steps) == 3
    with pytest.raises(ValueError):
        Prepared.of_steps([Prepared(lambda: None)])


def test_the_cache_is_bounded():
    _cpu()
    keep = plans.MAX_PLANS
    plans.MAX_PLANS = 3
    try:
        for k in range(1, 6):
            a, b = _pair(4, 4, k)
            lab.matmul(a, b, stage="naive", backend="triton")
        assert len(plans._PLANS) == 3
    finally:
        plans.MAX_PLANS = keep


# ------------------------------------------------------------------------------------------ GPU


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _stage_rows():
    from lab.stages import STAGES

    for spec in STAGES.values() if isinstance(STAGES, dict) else STAGES:
        for backend in ("cuda", "triton"):
            precisions = spec.precisions_for(backend)
            if not precisions:
                continue
            precision = "bf16" if "bf16" in precisions else precisions[0]
            yield pytest.param(spec.name, backend, precision, id=f"{spec.name}-{backend}")


def _dtype(precision):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def _close(c, a, b, precision):
    ref = a.double() @ b.double()
    tol = 1e-4 if precision == "fp32" else 2e-2
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < tol, err


@pytest.mark.gpu
@pytest.mark.parametrize("stage,backend,precision", list(_stage_rows()))
def test_replay_on_the_gpu(stage, backend, precision):
    """Each stage x backend: three calls of one signature with new values each time, into a new C,
    a given C and a column-major C (the CUDA stages compute C^T = B^T A^T there), all correct."""
    _gpu()
    from lab.toolchain.nvrtc import device_arch

    if stage == "wgmma" and device_arch() != "sm_90":
        pytest.skip("wgmma needs an sm_90 GPU")
    M, N, K = 257, 136, 96
    dt = _dtype(precision)
    outs = (None, torch.empty(M, N, dtype=dt, device="cuda"),
            torch.empty(N, M, dtype=dt, device="cuda").t())
    for out in outs:
        for seed in (1, 2, 3):
            a, b = _pair(M, N, K, dt, "cuda", seed)
            c = lab.matmul(a, b, stage=stage, backend=backend, out=out, precision=precision)
            torch.cuda.synchronize()
            _close(c, a, b, precision)
        plan = _plan_of(a, b, out, stage, backend, precision)
        assert plan is not None
        if stage != "tiled_padded":  # it pads copies of A and B in prepare(): prepared each call
            assert plan.replay is not None  # replayed, not prepared again


@pytest.mark.gpu
@pytest.mark.parametrize("stage,backend,precision", list(_stage_rows()))
def test_cuda_graph_capture(stage, backend, precision):
    """lab.matmul captured in torch.cuda.graph: the replayed graph computes C for whatever A and
    B hold at replay time (the kernels read the captured tensors' memory)."""
    _gpu()
    from lab.toolchain.nvrtc import device_arch

    if stage == "wgmma" and device_arch() != "sm_90":
        pytest.skip("wgmma needs an sm_90 GPU")
    M, N, K = 256, 128, 128
    dt = _dtype(precision)
    a, b = _pair(M, N, K, dt, "cuda", 4)
    c = torch.empty(M, N, dtype=dt, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compiles, plans) off the capture, as torch asks
        lab.matmul(a, b, stage=stage, backend=backend, out=c, precision=precision)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        lab.matmul(a, b, stage=stage, backend=backend, out=c, precision=precision)
    for seed in (5, 6):
        a2, b2 = _pair(M, N, K, dt, "cuda", seed)
        a.copy_(a2)
        b.copy_(b2)
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _close(c, a2, b2, precision)


@pytest.mark.gpu
def test_replay_cpu_time_is_reported():
    """Not a speed target (results/ holds those): the hit path's CPU time per call, printed."""
    _gpu()
    a, b = _pair(1024, 1024, 1024, torch.bfloat16, "cuda", 7)
    c = torch.empty(1024, 1024, dtype=torch.bfloat16, device="cuda")
    for stage in ("mma", "vectorized"):
        prec = "bf16" if stage == "mma" else None
        x, y, z = (a, b, c) if prec else (a.float(), b.float(), c.float())
        for backend in ("cuda", "triton"):
            lab.matmul(x, y, stage=stage, backend=backend, out=z, precision=prec)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                lab.matmul(x, y, stage=stage, backend=backend, out=z, precision=prec)
            us = (time.perf_counter() - t0) / 20 * 1e6
            torch.cuda.synchronize()
            print(f"{stage} {backend}: {us:.1f} us of CPU per call")
            assert us < 5000


def test_reusable_setup_replays_and_refills_its_buffers():
    """realign=True copies misaligned operands into zeroed buffers made once in prepare() (setup
    the launch marks reusable) and refilled at the start of every call; the split-K workspace is
    rewritten by every call. Both replay, and the replays compute the new values."""
    _cpu()
    M, N, K = 20, 24, 33  # lines of 33 floats: not 16-byte multiples, so realign copies
    for stage, params in (("double_buffered", {"realign": True}), ("warptiling", {"splitk": 3})):
        for seed in (10, 11):
            a, b = _pair(M, N, K, seed=seed)
            c = lab.matmul(a, b, stage=stage, backend="triton", **params)
            torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
        plan = _plan_of(a, b, None, stage, **params)
        assert plan is not None and plan.replay is not None, stage


def test_a_launchers_own_swap_is_replayed():
    """The Triton wgmma twin computes tf32 as C^T = B^T A^T itself (its kernel's rows are C's
    columns), so its launch holds transposed views of the user's tensors: found by pointer, shape
    and strides, and made again from the new tensors on each replay."""
    _cpu()
    M, N, K = 64, 48, 32
    for seed in (12, 13):
        a, b = _pair(M, N, K, seed=seed)
        c = lab.matmul(a, b, stage="wgmma", backend="triton", precision="tf32")
        torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-2)
    plan = _plan_of(a, b, None, "wgmma", precision="tf32")
    assert plan.replay is not None and plan.derived


def test_fp8_scale_tensors_are_replayed_without_transposed_views():
    """fp8's scale tensors take slots of their own (6, 7), which are not the transposed views of
    A, B and C (3-5): a plan that replays only the user's tensors and scales makes no views per
    call (three per call cost an fp8 decode call of lab.matmul a third of its CPU time)."""
    _cpu()
    from lab import check as chk

    M, N, K = 1, 64, 256
    for seed in (15, 16):
        a, b, (sa, sb) = chk.inputs_for("fp8", M, N, K, seed, "cpu", "nt")
        c = lab.matmul(a, b, stage="decode", backend="triton", precision="fp8", scale_a=sa,
                       scale_b=sb)
        assert chk.compare(c, chk.reference(a, b, (sa, sb)), K, "fp8").passed
    plan = plans.lookup(plans.signature(a, b, None, "decode", "triton", "fp8", {}, (sa, sb)))
    assert plan.replay is not None
    assert any(slot >= 6 for _, _, subs in plan.replay for _, slot in subs)  # the scales
    assert not plan.derived


def test_a_plan_is_never_served_to_another_signature():
    """Each of shape, strides, dtype, device, alignment and parameters changes the key, and a
    call that differs in one of them is prepared (and correct), not served another's plan."""
    _cpu()
    a, b = _pair(16, 24, 8, seed=14)
    base = plans.signature(a, b, None, "naive", "triton", None, {})
    a2 = torch.empty(8, 16).t().copy_(a)  # the same values, column-major
    b_off = torch.empty(8 * 24 + 1)[1:].view(8, 24).copy_(b)  # 4 bytes past a 16-byte boundary
    variants = {
        "shape": (_pair(16, 24, 9)[0], _pair(16, 24, 9)[1]),
        "strides": (a2, b),
        "dtype": (a.double(), b.double()),
        "device": (a.to("meta"), b.to("meta")),
        "alignment": (a, b_off),
    }
    for what, (x, y) in variants.items():
        assert plans.signature(x, y, None, "naive", "triton", None, {}) != base, what
    assert plans.signature(a, b, None, "naive", "triton", None, {"num_warps": 2}) != base
    assert plans.signature(a, b, torch.empty(16, 24), "naive", "triton", None, {}) != base
    lab.matmul(a, b, stage="naive", backend="triton")
    for x, y in (variants["strides"], variants["alignment"]):
        c = lab.matmul(x, y, stage="naive", backend="triton")
        torch.testing.assert_close(c, x @ y, rtol=1e-5, atol=1e-5)
    assert len(plans._PLANS) == 3
