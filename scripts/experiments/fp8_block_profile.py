"""One call of persistent's CUDA kernel for Nsight Compute: fp8_block at its defaults, or
per-tensor fp8 on a 128 x 128 tile (BN=128), at M x N x K, after three warm-up calls. Any fp8
precision works (fp8_row too); a sixth argument, KEY=V,..., gives the stage's parameters instead
(`-` for its defaults).

    ncu --kernel-name matmul_persistent --launch-skip 3 --launch-count 1 --section ... \
        python scripts/experiments/fp8_block_profile.py fp8_block 4096 7168 16384 [BN=128,...]
"""

import sys

import torch

import lab
from lab import check as chk


def main():
    precision = sys.argv[1]
    M, N, K = (int(x) for x in sys.argv[2:5])
    a, b, (sa, sb) = chk.inputs_for(precision, M, N, K, 0, "cuda", "nt")
    params = {"BN": 128} if precision == "fp8" else {}
    if len(sys.argv) > 5:
        params = {k: int(v) for k, _, v in (x.partition("=") for x in sys.argv[5].split(",") if
                                           x and x != "-")}
    for _ in range(4):
        c = lab.matmul(a, b, stage="persistent", backend="cuda", precision=precision,
                       scale_a=sa, scale_b=sb, **params)
    torch.cuda.synchronize()
    print(precision, chk.compare(c, chk.reference(a, b, (sa, sb)), K, precision).passed)


if __name__ == "__main__":
    main()
