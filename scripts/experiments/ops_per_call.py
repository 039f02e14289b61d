"""What one call of the lab's torch op costs beside F.linear and torch.matmul, bf16, at the
Llama-2-7B block's shapes (512 tokens) and at 16 rows: CPU microseconds per call (200 calls
issued back to back) and wall microseconds per call (to the last kernel's end), for lab.matmul,
torch.ops.lab.matmul, lab.ops.linear (with and without autograd) and the backward's two products.
Needs an NVIDIA GPU; run with PYTHONPATH=.

    PYTHONPATH=. python scripts/experiments/ops_per_call.py
"""
import time, torch
import torch.nn.functional as F
import lab, lab.ops

def per_call(fn, n=200):
    for _ in range(10): fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): fn()
    cpu = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / n
    return cpu * 1e6, wall * 1e6

torch.manual_seed(0)
for M, N, K in [(512, 4096, 4096), (512, 11008, 4096), (512, 4096, 11008), (16, 4096, 4096)]:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    cases = {
        "F.linear": lambda: F.linear(x, w),
        "lab.matmul(x, w.t())": lambda: lab.matmul(x, w.t()),
        "torch.ops.lab.matmul": lambda: torch.ops.lab.matmul(x, w.t(), "auto", "", ""),
        "lab.ops.linear": lambda: lab.ops.linear(x, w),
        "lab.ops.linear, x needs grad": lambda: lab.ops.linear(xg, w),
        "dX: torch g @ w": lambda: torch.matmul(g, w),
        "dX: lab g @ w": lambda: lab.matmul(g, w),
        "dW: torch g.t() @ x": lambda: torch.matmul(g.t(), x),
        "dW: lab g.t() @ x": lambda: lab.matmul(g.t(), x),
    }
    for name, fn in cases.items():
        cpu, wall = per_call(fn)
        print(f"{M}x{N}x{K} {name:<30} cpu {cpu:8.1f} us/call  wall {wall:8.1f} us/call", flush=True)
