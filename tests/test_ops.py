"""The lab in a model (lab/ops.py, lab/nn.py, docs/IN_YOUR_MODEL.md): torch.ops.lab.matmul and its
out= form, their gradients, leading batch dimensions, torch.compile(fullgraph=True), stage strings
with parameters, and lab.nn.Linear / swap_linears. On the CPU (Triton under the interpreter,
which tests/conftest.py switches on); the CUDA graph capture and bf16 training on a GPU."""

from __future__ import annotations

import pytest
import torch

import lab
import lab.nn
import lab.ops
from lab.base.errors import LabError

HAS_GPU = torch.cuda.is_available()


def _close(x, y, tol=1e-5):
    assert x.shape == y.shape
    assert (x - y).abs().max().item() <= tol * max(1.0, y.abs().max().item())


@pytest.mark.parametrize("stage", ["auto", "tiled", "tiled:tile=16", "warptiling:auto"])
def test_the_op_is_a_matmul_with_batch_dimensions(stage):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 24)
    w = torch.randn(10, 24)
    _close(lab.ops.matmul(x, w.t(), stage=stage, backend="triton"), x @ w.t())
    _close(torch.ops.lab.matmul(x[0], w.t(), stage, "triton", ""), x[0] @ w.t())
    bias = torch.randn(10)
    _close(lab.ops.linear(x, w, bias, stage=stage, backend="triton"),
           torch.nn.functional.linear(x, w, bias))


def test_its_gradients_are_two_products_through_the_lab():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16, requires_grad=True)
    w = torch.randn(12, 16, requires_grad=True)
    b = torch.randn(12, requires_grad=True)
    y = lab.ops.linear(x, w, b)
    assert y.requires_grad and y.grad_fn is not None
    (y * torch.linspace(-1, 1, 12)).sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    (torch.nn.functional.linear(x2, w2, b2) * torch.linspace(-1, 1, 12)).sum().backward()
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        _close(got, want)
    # only the inputs that need a gradient get one
    x3 = torch.randn(4, 16, requires_grad=True)
    lab.ops.matmul(x3, w2.detach().t()).sum().backward()
    assert x3.grad is not None


def test_the_ops_pass_torchs_operator_checks():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    torch.library.opcheck(torch.ops.lab.matmul.default, (a, b, "auto", "", ""))
    torch.library.opcheck(torch.ops.lab.matmul_out.default,
                          (a, b, torch.empty(4, 3), "tiled", "triton", ""))


def test_torch_compile_traces_the_op_in_one_graph_forward_and_backward():
    torch.manual_seed(2)

    def block(x, w1, w2):
        return lab.ops.linear(torch.nn.functional.gelu(lab.ops.linear(x, w1)), w2)

    x = torch.randn(2, 3, 16, requires_grad=True)
    w1 = torch.randn(32, 16, requires_grad=True)
    w2 = torch.randn(8, 32, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    y = compiled(x, w1, w2)
    ref = torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(x, w1)),
                                     w2)
    _close(y, ref, 1e-4)
    y.sum().backward()
    assert x.grad.shape == x.shape and w1.grad.shape == w1.shape

    def into(x, w, out):
        return lab.ops.matmul(x, w.t(), out=out)

    out = torch.full((2, 3, 8), float("nan"))
    with torch.no_grad():
        torch.compile(into, fullgraph=True, backend="aot_eager")(x.detach(), w2.detach()[:, :16],
                                                                 out)
    _close(out, x.detach() @ w2.detach()[:, :16].t())


def test_out_has_no_gradient_and_its_shape_is_checked():
    x, w = torch.randn(3, 8, requires_grad=True), torch.randn(8, 4)
    with pytest.raises(LabError, match="no gradient"):
        lab.ops.matmul(x, w, out=torch.empty(3, 4))
    with pytest.raises(LabError, match=r"out must be of shape \(3, 4\)"):
        lab.ops.matmul(x.detach(), w, out=torch.empty(4, 3))
    with pytest.raises(LabError, match="K x N matrix"):
        lab.ops.matmul(x, torch.randn(2, 8, 4))


def test_empty_products_launch_nothing():
    w = torch.randn(8, 4)
    assert lab.ops.matmul(torch.randn(0, 8), w).shape == (0, 4)
    assert lab.ops.matmul(torch.randn(2, 0, 8), w).shape == (2, 0, 4)
    assert torch.equal(torch.ops.lab.matmul(torch.randn(3, 0), torch.randn(0, 4), "auto", "", ""),
                       torch.zeros(3, 4))


def test_stage_strings_reach_a_stages_parameters_and_the_tuners_cache():
    a, b = torch.randn(9, 20), torch.randn(20, 7)
    _close(lab.matmul(a, b, stage="tiled:tile=16", backend="triton"), a @ b)
    _close(lab.matmul(a, b, stage="warptiling:auto", backend="triton"), a @ b)
    with pytest.raises(LabError, match="set each parameter once"):
        lab.matmul(a, b, stage="tiled:tile=16", backend="triton", tile=16)
    with pytest.raises(LabError, match="names 2 stages"):
        lab.matmul(a, b, stage="tiled:tile=16,naive", backend="triton")
    with pytest.raises(LabError):
        lab.matmul(a, b, stage="tiled:nosuch=1", backend="triton")


def test_lab_linear_is_a_torch_linear_with_the_same_parameters():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(32, 8, bias=False)),
                                torch.nn.Linear(8, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    x = torch.randn(4, 3, 16)
    want = model(x)
    n = lab.nn.swap_linears(model, skip=lambda name, m: name == "3")
    assert n == 2
    assert type(model[0]) is lab.nn.Linear and type(model[2][0]) is lab.nn.Linear
    assert type(model[3]) is torch.nn.Linear  # skipped
    assert all(isinstance(m, torch.nn.Linear) for m in (model[0], model[2][0]))
    assert [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)] == weights
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    _close(model(x), want, 1e-5)
    assert "stage='auto'" in repr(model[0])
    fresh = lab.nn.Linear(16, 32, stage="tiled", backend="triton")
    fresh.load_state_dict(model[0].state_dict())
    _close(fresh(x), model[0](x))
    with pytest.raises(LabError, match="torch.nn.Module"):
        lab.nn.swap_linears("not a model")


@pytest.mark.gpu
def test_on_the_gpu_bf16_training_and_cuda_graph_capture():
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(4)
    x = torch.randn(4, 64, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = lab.ops.linear(x, w)
    y.float().square().mean().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.linear(x2, w2).float().square().mean().backward()
    for got, want in ((y, torch.nn.functional.linear(x2, w2)), (x.grad, x2.grad),
                      (w.grad, w2.grad)):
        err = ((got.float() - want.float()).norm() / want.float().norm()).item()
        assert err < 2e-2, err
    # a captured graph replays the lab's launch
    xs = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    ws = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(256, 1024, device="cuda", dtype=torch.bfloat16)
    lab.ops.matmul(xs, ws.t(), out=out)  # plans the launch outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        lab.ops.matmul(xs, ws.t(), out=out)
    xs.copy_(torch.randn_like(xs))
    graph.replay()
    torch.cuda.synchronize()
    want = (xs.float() @ ws.float().t())
    assert ((out.float() - want).norm() / want.norm()).item() < 2e-2


GPU_PRECISIONS = [(torch.float32, 1e-4), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)]


def _rel(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", GPU_PRECISIONS, ids=lambda v: str(v).removeprefix("torch."))
@pytest.mark.parametrize("lead", [(96,), (3, 40)], ids=["2d", "3d"])
def test_on_the_gpu_forward_and_backward_match_float64(dtype, tol, lead):
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(5)
    x = torch.randn(*lead, 320, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(272, 320, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(272, device="cuda", dtype=dtype, requires_grad=True)
    y = lab.ops.linear(x, w, b)
    g = torch.randn_like(y)
    y.backward(g)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    yd = torch.nn.functional.linear(xd, wd, bd)
    yd.backward(g.double())
    assert y.dtype == dtype and y.shape == (*lead, 272)
    for got, want in ((y, yd), (x.grad, xd.grad), (w.grad, wd.grad), (b.grad, bd.grad)):
        assert _rel(got, want) < tol


@pytest.mark.gpu
def test_on_the_gpu_fp8_runs_forward_and_refuses_a_gradient():
    if not HAS_GPU or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs a GPU with fp8 (compute capability 8.9 or newer)")
    torch.manual_seed(6)
    a = (torch.randn(128, 256, device="cuda") / 2).to(torch.float8_e4m3fn)
    w = (torch.randn(192, 256, device="cuda") / 2).to(torch.float8_e4m3fn)
    y = lab.ops.matmul(a, w.t())
    assert y.dtype == torch.bfloat16
    assert _rel(y, a.double() @ w.double().t()) < 2e-2
    y8 = lab.ops.matmul(a.clone().requires_grad_(), w.t())
    with pytest.raises(Exception, match="no gradient for float8"):
        y8.float().sum().backward()


@pytest.mark.gpu
def test_on_the_gpu_torch_compile_fullgraph_and_opcheck():
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(7)

    def block(x, w1, w2):
        return lab.ops.linear(torch.nn.functional.silu(lab.ops.linear(x, w1)), w2)

    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w1 = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w2 = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x, w1, w2)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(block, fullgraph=True)  # inductor, as a model would compile
    y = compiled(x, w1, w2)
    y.float().square().mean().backward()
    xd, w1d, w2d = (t.detach().double().requires_grad_() for t in (x, w1, w2))
    F = torch.nn.functional
    yd = F.linear(F.silu(F.linear(xd, w1d)), w2d)
    yd.square().mean().backward()
    assert _rel(y, yd) < 2e-2 and _rel(x.grad, xd.grad) < 3e-2 and _rel(w1.grad, w1d.grad) < 3e-2
    a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(128, 96, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.lab.matmul.default, (a, bm, "auto", "", ""))
    torch.library.opcheck(torch.ops.lab.matmul_out.default,
                          (a, bm, torch.empty(64, 96, device="cuda", dtype=torch.bfloat16),
                           "auto", "", ""))
