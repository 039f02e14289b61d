"""Which scale layouts torch._scaled_mm takes for DeepSeek-V3's block scales (1 x 128 on A, 128 x
128 on B) on this GPU and torch, and whether what it computes is the block-scaled product.

For each candidate layout of the lab's scale tensors (A's (M, K/128), B's (K/128, N/128); the
strides differ) and both use_fast_accum settings: refused (torch's first line), or the relative
error against the float64 block-scaled reference, and against references that read B's scales
the other ways round (to name a product that is wrong in a known way). Prints one line each.

    PYTHONPATH=. python scripts/experiments/scaled_mm_block_probe.py
"""

import torch

from lab import check as chk
from lab.run import BLOCK_LAYOUTS, col_major


def rel(x, ref):
    return (torch.linalg.vector_norm(x.double() - ref) / torch.linalg.vector_norm(ref)).item()


def main():
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name()}")
    M, N, K = 384, 512, 640
    a, b, sa, sb = chk.make_scaled_inputs(M, N, K, 7, "cuda", "nt", "block")
    gen = torch.Generator(device="cuda").manual_seed(8)
    sa = sa * torch.rand(sa.shape, generator=gen, device="cuda") * 4
    sb = sb * torch.rand(sb.shape, generator=gen, device="cuda") * 4
    refs = {"block-scaled": chk.reference(a, b, (sa, sb))}
    kb, nb = sb.shape
    # B's scales read as if they were laid out the other way (a transposed reading)
    refs["B's scales read transposed"] = chk.reference(
        a, b, (sa, sb.t().contiguous().reshape(nb, kb).reshape(kb, nb)))
    refs["no B scales"] = chk.reference(a, b, (sa, torch.ones_like(sb)))
    refs["no A scales"] = chk.reference(a, b, (torch.ones_like(sa), sb))
    layouts = dict(BLOCK_LAYOUTS)
    layouts["A row-major, B row-major"] = lambda x, y: (x.contiguous(), y.contiguous())
    layouts["A row-major, B K/128-major"] = lambda x, y: (x.contiguous(), col_major(y))
    layouts["A M-major, B as (N/128, K/128) row-major"] = lambda x, y: (
        col_major(x), y.t().contiguous())
    for name, layout in layouts.items():
        for fast in (False, True):
            try:
                x, y = layout(sa, sb)
                out = torch._scaled_mm(a, b, scale_a=x, scale_b=y, out_dtype=torch.bfloat16,
                                       use_fast_accum=fast)
                torch.cuda.synchronize()
            except Exception as exc:
                print(f"{name}, fast_accum={fast}: refused: "
                      f"{str(exc).strip().splitlines()[0][:120]}")
                continue
            errs = ", ".join(f"{k} {rel(out, r):.1e}" for k, r in refs.items())
            print(f"{name}, fast_accum={fast}: scales {tuple(x.shape)} {x.stride()} and "
                  f"{tuple(y.shape)} {y.stride()}: relative error against {errs}")


if __name__ == "__main__":
    main()
