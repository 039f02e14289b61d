"""Whether the lab's bf16 kernels and cuBLAS (torch.matmul) give the same bits at one shape of a
Llama-2-7B block (512 x 4096 x 4096, C = A B^T): the fraction of identical elements and the
largest difference, for auto and three stages. Needs an NVIDIA GPU; run with PYTHONPATH=.

    PYTHONPATH=. python scripts/experiments/bitwise_vs_cublas.py
"""
import torch, lab
torch.manual_seed(0)
x = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
ref = x @ w.t()
for stage, be in [("auto", None), ("persistent", "triton"), ("persistent", "cuda"), ("tiled", "triton")]:
    y = lab.matmul(x, w.t(), stage=stage, backend=be)
    d = (y.float() - ref.float()).abs()
    print(f"{stage}/{be}: identical elements {(d == 0).float().mean().item():.4f}, max |diff| {d.max().item():.3e}")
