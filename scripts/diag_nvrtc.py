"""Diagnose NVRTC's ptxas report in different process states (device-only helper)."""
import os, sys
sys.path.insert(0, ".")
from cuda.bindings import nvrtc
import cuda_kernels._build as B

def raw(tag, opts_extra=()):
    code = (B.KERNEL_DIR / "naive.cu").read_bytes()
    _, prog = nvrtc.nvrtcCreateProgram(code, b"naive.cu", 0, [], [])
    opts = [b"-arch=sm_90", b"-Xptxas=-v", f"-I{B.KERNEL_DIR}".encode(), *opts_extra]
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n; nvrtc.nvrtcGetProgramLog(prog, buf)
    print(f"[{tag}] result={r[0].name} logsize={n} log={buf[:160]!r}", flush=True)

print({k: v for k, v in os.environ.items() if any(s in k.upper() for s in ("NV", "CUDA", "PTX", "TRITON"))})
raw("fresh")
raw("fresh-again")
import torch; raw("after import torch")
torch.zeros(1, device="cuda"); raw("after cuda init")
a = torch.randn(64, 64, device="cuda"); a @ a; raw("after cublas")
import cupy; raw("after import cupy")
import triton; raw("after import triton")
import rich, pandas; raw("after rich pandas")
for lib in sorted({l.split()[-1] for l in open("/proc/self/maps") if "nvrtc" in l or "ptx" in l.lower()}):
    print("mapped:", lib)
