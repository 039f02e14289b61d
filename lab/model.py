"""python -m lab.model: a Llama-shaped transformer block, every Linear through the lab, beside the
same block on torch; then a short training run of a small model, both ways.

    python -m lab.model                                   # Llama-2-7B's layer sizes, bf16, on a GPU
    python -m lab.model --model llama3-70b-tp8 --batch 4 --seq 512
    python -m lab.model --stage persistent --backend cuda # one stage for every Linear
    python -m lab.model --tiny                            # a tiny block (no GPU needed)

Part 1, the block (real layer sizes, random weights): RMSNorm, attention (q, k, v and o
projections, grouped key/value heads, torch's scaled_dot_product_attention, causal), RMSNorm, and
the SwiGLU MLP (gate, up, down), each with its residual. One copy runs torch.nn.Linear, the other
the same weights through lab.nn.Linear (lab.nn.swap_linears). For each: tokens per second of the
forward pass and of forward + backward (the median of timed repeats after warm-up), and the
largest difference between the two in the output and in every weight's gradient, relative to
torch's largest value.

Part 2, training (--steps N, 0 to skip): a small model of two such blocks with an embedding and an
output layer learns a synthetic sequence task (each token is the previous plus one, modulo the
vocabulary) with AdamW, from the same initial weights and batches both ways; the two loss curves
side by side.

Without a GPU it runs a tiny configuration (--tiny is implied) in float32 under the Triton
interpreter, and says so. docs/IN_YOUR_MODEL.md is the user's page.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import dataclass

from lab.base.errors import LabError
from lab.cli import ArgumentParser, guarded


@dataclass(frozen=True)
class Config:
    name: str
    dim: int  # the model width
    heads: int
    kv_heads: int
    ffn: int  # the MLP's hidden width
    source: str


CONFIGS = {
    "llama2-7b": Config("Llama-2-7B", 4096, 32, 32, 11008, "Llama 2 (Touvron et al., 2023), 7B"),
    "llama3-8b": Config("Llama-3-8B", 4096, 32, 8, 14336, "Llama 3 (Meta, 2024), 8B"),
    "llama3-70b-tp8": Config("Llama-3-70B, one of 8 tensor-parallel ranks", 8192, 8, 1, 3584,
                             "Llama 3 70B (8192 wide, 64 heads, 8 KV heads, MLP 28672) split 8 "
                             "ways"),
    "tiny": Config("tiny", 64, 4, 2, 176, "a block small enough for the Triton interpreter"),
}


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="lab.model", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama2-7b", choices=sorted(CONFIGS),
                   help="the block's layer sizes (default llama2-7b)")
    p.add_argument("--tiny", action="store_true", help="the tiny block (what runs without a GPU)")
    p.add_argument("--batch", type=int, default=None, help="sequences per batch (default 2; 2 tiny)")
    p.add_argument("--seq", type=int, default=None,
                   help="tokens per sequence (default 256 on a GPU, 8 tiny)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                   help="the weights' and activations' dtype (default bf16 on a GPU, fp32 "
                        "without one)")
    p.add_argument("--stage", default="auto",
                   help="the stage of every Linear: auto (default), a name, or a stage string "
                        "such as tiled:tile=16")
    p.add_argument("--backend", default=None, help="cuda or triton (default: the stage's)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps of part 2 (default 30 on a GPU, 3 without; 0 skips it)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed repeats of the block (default 10 on a GPU, 1 without)")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    return guarded(_main, argv)


# ---------------------------------------------------------------------------------- the model


def _modules():
    import torch
    import torch.nn.functional as F

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim, dtype, device):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(dim, dtype=dtype, device=device))

        def forward(self, x):
            var = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(var + 1e-5)).to(x.dtype) * self.weight

    class Block(torch.nn.Module):
        """A Llama block: attention and SwiGLU MLP, each after an RMSNorm, with residuals."""

        def __init__(self, c: Config, dtype, device):
            super().__init__()
            kw = dict(bias=False, dtype=dtype, device=device)
            hd = c.dim // c.heads
            self.c, self.hd = c, hd
            self.attn_norm = RMSNorm(c.dim, dtype, device)
            self.q_proj = torch.nn.Linear(c.dim, c.heads * hd, **kw)
            self.k_proj = torch.nn.Linear(c.dim, c.kv_heads * hd, **kw)
            self.v_proj = torch.nn.Linear(c.dim, c.kv_heads * hd, **kw)
            self.o_proj = torch.nn.Linear(c.heads * hd, c.dim, **kw)
            self.mlp_norm = RMSNorm(c.dim, dtype, device)
            self.gate_proj = torch.nn.Linear(c.dim, c.ffn, **kw)
            self.up_proj = torch.nn.Linear(c.dim, c.ffn, **kw)
            self.down_proj = torch.nn.Linear(c.ffn, c.dim, **kw)

        def forward(self, x):
            b, s, _ = x.shape
            c, hd = self.c, self.hd
            h = self.attn_norm(x)
            q = self.q_proj(h).view(b, s, c.heads, hd).transpose(1, 2)
            k = self.k_proj(h).view(b, s, c.kv_heads, hd).transpose(1, 2)
            v = self.v_proj(h).view(b, s, c.kv_heads, hd).transpose(1, 2)
            if c.kv_heads != c.heads:  # grouped key/value heads
                k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
                v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o_proj(a.transpose(1, 2).reshape(b, s, c.heads * hd))
            h = self.mlp_norm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Small(torch.nn.Module):
        """Embedding, two blocks, a norm and the output layer: the model part 2 trains."""

        def __init__(self, c: Config, vocab, dtype, device):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, c.dim, dtype=dtype, device=device)
            self.blocks = torch.nn.ModuleList([Block(c, dtype, device) for _ in range(2)])
            self.norm = RMSNorm(c.dim, dtype, device)
            self.head = torch.nn.Linear(c.dim, vocab, bias=False, dtype=dtype, device=device)

        def forward(self, tokens):
            x = self.embed(tokens)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))

    return Block, Small


def _init(module, seed: int) -> None:
    """Weights drawn from a seeded generator, scaled as a trained model's are (std 1/sqrt(fan_in))."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                continue
            fan_in = p.shape[-1]
            w = torch.randn(p.shape, generator=g) / fan_in ** 0.5
            p.copy_(w.to(p.dtype))


# ---------------------------------------------------------------------------------- measuring


def _timed(fn, device, repeats: int) -> float:
    """Median seconds of fn() over `repeats` calls after one warm-up (CUDA events on a GPU)."""
    import torch

    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _rel_diff(x, y) -> float:
    """max |x - y| over max |y|: the largest difference, relative to torch's largest value."""
    scale = y.float().abs().max().item()
    return (x.float() - y.float()).abs().max().item() / (scale or 1.0)


def _block_part(args, c, dtype, device, say) -> tuple[dict, list]:
    import torch

    import lab.nn

    Block, _ = _modules()
    ref = Block(c, dtype, device)
    _init(ref, args.seed)
    mine = copy.deepcopy(ref)
    swapped = lab.nn.swap_linears(mine, stage=args.stage, backend=args.backend)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.seq, c.dim, generator=g).to(device=device, dtype=dtype)
    tokens = args.batch * args.seq
    say(f"block: {c.name} ({c.source}): width {c.dim}, {c.heads} heads ({c.kv_heads} key/value), "
        f"MLP {c.ffn}; batch {args.batch} x {args.seq} tokens, {str(dtype).removeprefix('torch.')}"
        f"; {swapped} Linear layers through the lab (stage {args.stage}"
        + (f", backend {args.backend}" if args.backend else "") + ")")

    def fwd(model):
        with torch.no_grad():
            return model(x)

    def fwd_bwd(model, xin):
        model.zero_grad(set_to_none=True)
        y = model(xin)
        y.float().square().mean().backward()
        return y

    results = {}
    for label, model in (("torch", ref), ("lab", mine)):
        t_f = _timed(lambda: fwd(model), device, args.repeats)
        xg = x.clone().requires_grad_()
        t_fb = _timed(lambda: fwd_bwd(model, xg), device, args.repeats)
        results[label] = (tokens / t_f, tokens / t_fb)
    y_ref = fwd_bwd(ref, x.clone().requires_grad_())
    grads_ref = {n: p.grad.clone() for n, p in ref.named_parameters()}
    y_lab = fwd_bwd(mine, x.clone().requires_grad_())
    diffs = [("output", _rel_diff(y_lab, y_ref))]
    for n, p in mine.named_parameters():
        diffs.append((f"grad {n}", _rel_diff(p.grad, grads_ref[n])))
    return results, diffs


def _train_part(args, c, dtype, device, say) -> list[tuple[int, float, float]]:
    import torch
    import torch.nn.functional as F

    import lab.nn

    _, Small = _modules()
    vocab = 256 if c.name != "tiny" else 64
    ref = Small(c, vocab, dtype, device)
    _init(ref, args.seed)
    mine = copy.deepcopy(ref)
    lab.nn.swap_linears(mine, stage=args.stage, backend=args.backend)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0) for m in (ref, mine)]
    g = torch.Generator().manual_seed(args.seed + 2)
    curve = []
    for step in range(args.steps):
        start = torch.randint(0, vocab, (args.batch, 1), generator=g)
        seq = (start + torch.arange(args.seq + 1)) % vocab  # each token the previous plus one
        seq = seq.to(device)
        losses = []
        for model, opt in zip((ref, mine), opts):
            opt.zero_grad(set_to_none=True)
            logits = model(seq[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), seq[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curve.append((step + 1, *losses))
    return curve


# ---------------------------------------------------------------------------------- the command


def _main(argv: list[str] | None) -> int:
    import torch

    args = build_parser().parse_args(argv)
    gpu = torch.cuda.is_available()
    notes = []
    if not gpu:
        if not args.tiny and args.model != "tiny":
            notes.append("No CUDA GPU: the tiny block runs instead, in float32, every Linear "
                         "through a Triton stage under the Triton interpreter (slow, small); "
                         "the sizes of --model need a GPU")
        args.tiny = True
    c = CONFIGS["tiny" if args.tiny else args.model]
    if args.dtype is None:
        args.dtype = "bf16" if gpu else "fp32"
    from lab.base.dtypes import DTYPE_NAMES

    dtype = getattr(torch, DTYPE_NAMES[args.dtype])  # the precision records' torch dtype
    if not gpu and dtype != torch.float32:
        raise LabError(f"--dtype {args.dtype} needs a GPU here: without one the block runs in "
                       f"fp32 (leave --dtype out)")
    args.batch = args.batch if args.batch is not None else 2
    args.seq = args.seq if args.seq is not None else (256 if gpu and not args.tiny else 8)
    args.steps = args.steps if args.steps is not None else (30 if gpu else 3)
    args.repeats = args.repeats if args.repeats is not None else (10 if gpu else 1)
    for name in ("batch", "seq", "repeats"):
        if getattr(args, name) < 1:
            raise LabError(f"--{name} must be 1 or more, not {getattr(args, name)}")
    if args.steps < 0:
        raise LabError(f"--steps must be 0 or more, not {args.steps}")
    device = "cuda" if gpu else "cpu"
    if not gpu:
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")
    import importlib

    importlib.import_module("lab.ops")  # registers torch.ops.lab (without a GPU: interpreted)

    def say(text: str) -> None:
        print(text, flush=True)

    for n in notes:
        say(n)
    results, diffs = _block_part(args, c, dtype, device, say)
    say(f"{'':8} {'forward tokens/s':>18} {'fwd+bwd tokens/s':>18}")
    for label in ("torch", "lab"):
        f, fb = results[label]
        say(f"{label:8} {f:18,.0f} {fb:18,.0f}")
    say(f"lab / torch: forward {results['lab'][0] / results['torch'][0]:.3f}, forward + backward "
        f"{results['lab'][1] / results['torch'][1]:.3f}" + ("" if gpu else
                                                             " (the interpreter: not a speed)"))
    worst = max(diffs, key=lambda d: d[1])
    say(f"largest difference from torch (relative to torch's largest value): output "
        f"{diffs[0][1]:.2e}; gradients up to {max(d for _, d in diffs[1:]):.2e} ({worst[0]})")
    if args.steps:
        curve = _train_part(args, c, dtype, device, say)
        say(f"training: 2 blocks of {c.name}, {args.steps} AdamW steps on a synthetic sequence "
            f"task, the same weights and batches both ways")
        say(f"{'step':>5} {'torch loss':>11} {'lab loss':>11}")
        for step, a, b in curve:
            if step <= 3 or step == len(curve) or step % max(1, len(curve) // 10) == 0:
                say(f"{step:5d} {a:11.4f} {b:11.4f}")
        gap = max(abs(a - b) / max(abs(a), 1e-9) for _, a, b in curve)
        say(f"largest relative difference between the two loss curves: {gap:.2e}; loss "
            f"{curve[0][1]:.3f} -> {curve[-1][1]:.3f} (torch), {curve[0][2]:.3f} -> "
            f"{curve[-1][2]:.3f} (lab)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
