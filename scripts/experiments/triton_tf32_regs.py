"""Does Triton 3.6 keep a TF32 operand that lies M-major in registers (wgmma with A from
registers) when the tile goes through an elementwise operation first, as the CUDA persistent
stage does by hand (cuda_kernels/variants/persistent.cu a_frags_mn)? And is tf32 nn then faster computed
as C^T = B^T A^T (B^T the M-major A operand, A^T K-major) than with B copied K-major?

    PYTHONPATH=. python scripts/experiments/triton_tf32_regs.py [--size 4096] [--out DIR]

Runs the persistent Triton twin's loop (triton_kernels/persistent.py, reduced: TMA descriptors,
flattened tile loop, C through a TMA store) in three forms, each checked against float64 and
timed beside torch.matmul in TF32 (lab.timing.bench_adjacent, L2 flushed):
    copy   nn, B copied K-major in the call (what the twin does today: kmajor=1)
    swap   nn as C^T = B^T A^T, B^T's tile rounded to TF32 by inline PTX (cvt.rna.tf32.f32)
    plain  the swap without the rounding (Triton's own handling of an M-major TF32 A)
and prints which wgmma form the PTX holds (a register A operand or two descriptors).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SMS: tl.constexpr,
            A_T: tl.constexpr, B_T: tl.constexpr, C_T: tl.constexpr, ROUND_A: tl.constexpr):
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    tiles = grid_m * grid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, [K, M], [lda, 1], [BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [lda, 1], [BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [ldb, 1], [BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [ldb, 1], [BLOCK_K, BLOCK_N])
    if C_T:
        c_desc = tl.make_tensor_descriptor(c_ptr, [N, M], [ldc, 1], [BLOCK_N, BLOCK_M // 2])
    else:
        c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [ldc, 1], [BLOCK_M, BLOCK_N // 2])
    tile_c = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True):
        width = 8 * grid_n
        first_m = (tile // width) * 8
        rows = tl.minimum(grid_m - first_m, 8)
        pid_m = first_m + (tile % width) % rows
        pid_n = (tile % width) // rows
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            k0 = ks * BLOCK_K
            if A_T:
                a = a_desc.load([k0, pid_m * BLOCK_M]).T
            else:
                a = a_desc.load([pid_m * BLOCK_M, k0])
            if ROUND_A:
                a = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [a],
                                              dtype=tl.float32, is_pure=True, pack=1)
            if B_T:
                b = b_desc.load([pid_n * BLOCK_N, k0]).T
            else:
                b = b_desc.load([k0, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc, input_precision="tf32")
        tile_c += NUM_SMS
        first_m = (tile_c // width) * 8
        rows = tl.minimum(grid_m - first_m, 8)
        pid_m = first_m + (tile_c % width) % rows
        pid_n = (tile_c % width) // rows
        if C_T:  # D's upper and lower halves of rows, each stored as C's columns
            c0, c1 = tl.split(tl.permute(tl.reshape(acc, (2, BLOCK_M // 2, BLOCK_N)), (1, 2, 0)))
            c_desc.store([pid_n * BLOCK_N, pid_m * BLOCK_M], c0.T)
            c_desc.store([pid_n * BLOCK_N, pid_m * BLOCK_M + BLOCK_M // 2], c1.T)
        else:
            c0, c1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c0)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], c1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from lab.check import compare, reference
    from lab.timing import bench_adjacent

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))
    n = args.size
    torch.manual_seed(0)
    A = torch.randn(n, n, device="cuda")
    B = torch.randn(n, n, device="cuda")
    C = torch.empty(n, n, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lines = []
    for name in ("copy", "swap", "plain"):
        for bm, bn, bk, stages in ((128, 256, 32, 3), (128, 128, 32, 4), (128, 256, 32, 4)):
            grid = (min(sms, triton.cdiv(n, bm) * triton.cdiv(n, bn)),)
            meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_SMS=sms, num_warps=8,
                        num_stages=stages)
            if name == "copy":
                Bk = torch.empty(n, n, device="cuda")  # B^T row-major: B column-major

                def run():
                    Bk.copy_(B.t())
                    return _kernel[grid](A, Bk, C, n, n, n, n, n, n, A_T=False, B_T=True, C_T=False,
                                  ROUND_A=False, **meta)
            else:
                rnd = name == "swap"

                def run(rnd=rnd):  # D = C^T (N x M) = B^T A^T: its A is B^T (M-major)
                    return _kernel[grid](B, A, C, n, n, n, n, n, n, A_T=True, B_T=True, C_T=True,
                                  ROUND_A=rnd, **meta)
            compiled = None
            try:
                C.fill_(float("nan"))
                compiled = run()
                torch.cuda.synchronize()
                res = compare(C, reference(A, B), n, "tf32")
                torch.backends.cuda.matmul.allow_tf32 = True
                ref_out = torch.empty_like(C)
                t, base = bench_adjacent(run, lambda: torch.matmul(A, B, out=ref_out))
                torch.backends.cuda.matmul.allow_tf32 = False
                cfg = f"{bm}x{bn}x{bk} s{stages}"
                line = (f"{name:6s} {cfg:16s} {'pass' if res.passed else 'FAIL'} err "
                        f"{res.rel_err:.2e} {t.median_ms:.4f} ms, torch {base.median_ms:.4f} ms, "
                        f"{100 * base.median_ms / t.median_ms:.1f}% of cuBLAS")
            except Exception as e:  # one form failing does not stop the others
                line = f"{name:6s} {bm}x{bn}x{bk} s{stages} error {type(e).__name__}: {str(e)[:300]}"
            print(line, flush=True)
            lines.append(line)
            if compiled is None:  # it did not compile or launch: nothing to read
                continue
            regs_a = bool(re.search(r"wgmma\.mma_async[^\n]*\{[^}]*\}, \{%r",
                                    compiled.asm["ptx"]))
            lines.append(f"   PTX: wgmma with a register A operand: {regs_a}; shared memory "
                         f"{compiled.metadata.shared} bytes")
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "triton-tf32-regs.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
