"""How fast can mma.sync go on this GPU, with nothing else in the way? A ceiling for stage mma.

    PYTHONPATH=. python scripts/experiments/mma_ceiling.py OUT.csv

Each warp issues ILP independent mma.sync chains (m16n8k16 bf16 / fp16, m16n8k8 tf32) on operands
held in registers: no loads, no shared memory, no epilogue, only the tensor-core instruction and
its loop. The grid fills every SM with WARPS warps. The best over ILP x WARPS is the most a
kernel built on mma.sync can reach here; docs/stages/mma.md compares it with cuBLAS (which uses
Hopper's wgmma) and with the stage. The SM clock is sampled while each point runs
(lab.clocks.Sampler), so FLOP per SM per clock is printed too (H100 datasheet rate for dense
bf16 through wgmma: 4096 FLOP/SM/clock, lab/peaks.py).

Writes one CSV row per (precision, ILP, warps per SM) and prints the best per precision.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SOURCE = r"""
extern "C" __global__ void ceiling(float* out, int iters) {
    unsigned a[4], b[2];
    for (int r = 0; r < 4; ++r) a[r] = 0x3c003c00u ^ (threadIdx.x * (r + 1));
    for (int r = 0; r < 2; ++r) b[r] = 0x3c003c00u ^ (threadIdx.x * (r + 7));
    float acc[ILP][4];
    for (int i = 0; i < ILP; ++i)
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < ILP; ++i) {
#if PREC == 0
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif PREC == 2
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
        }
    }
    float s = 0.f;
    for (int i = 0; i < ILP; ++i)
        for (int e = 0; e < 4; ++e) s += acc[i][e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""

PRECS = {"tf32": (0, 2 * 16 * 8 * 8), "bf16": (2, 2 * 16 * 8 * 16), "fp16": (3, 2 * 16 * 8 * 16)}


def main(argv: list[str]) -> int:
    import cupy
    import torch

    from lab.clocks import Sampler

    out_path = Path(argv[0]) if argv else Path("mma_ceiling.csv")
    dev = torch.cuda.get_device_properties(0)
    sms = dev.multi_processor_count
    rows = []
    for prec, (code, flop) in PRECS.items():
        for ilp in (2, 4, 8, 16):
            kern = cupy.RawKernel(SOURCE, "ceiling", options=(
                "-arch=sm_90", f"-DILP={ilp}", f"-DPREC={code}"))
            for warps in (4, 8, 16, 32):
                threads = 128  # 4 warps per block; warps/4 blocks per SM
                blocks = sms * warps // 4
                outbuf = cupy.empty(blocks * threads, dtype=cupy.float32)
                iters = 4096
                kern((blocks,), (threads,), (outbuf, cupy.int32(iters)))  # warm up, compile
                cupy.cuda.Device().synchronize()
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                reps = 20
                with Sampler() as s:
                    start.record()
                    for _ in range(reps):
                        kern((blocks,), (threads,), (outbuf, cupy.int32(iters)))
                    stop.record()
                    stop.synchronize()
                ms = cupy.cuda.get_elapsed_time(start, stop) / reps
                total = blocks * (threads // 32) * iters * ilp * flop
                tflops = total / (ms * 1e-3) / 1e12
                mhz = s.conditions.sm_mhz_mean
                per_clk = tflops * 1e12 / (sms * mhz * 1e6) if mhz else None
                rows.append(dict(precision=prec, ilp=ilp, warps_per_sm=warps, ms=round(ms, 4),
                                 tflops=round(tflops, 1), sm_mhz_mean=mhz and round(mhz),
                                 sm_mhz_min=s.conditions.sm_mhz_min,
                                 flop_per_sm_per_clock=per_clk and round(per_clk),
                                 throttle=s.conditions.throttle, gpu=dev.name))
                print(rows[-1], flush=True)
    with out_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for prec in PRECS:
        best = max((r for r in rows if r["precision"] == prec), key=lambda r: r["tflops"])
        print(f"best {prec}: {best['tflops']} TFLOPS at ILP {best['ilp']}, {best['warps_per_sm']} "
              f"warps/SM, {best['sm_mhz_mean']} MHz, {best['flop_per_sm_per_clock']} "
              f"FLOP/SM/clock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
