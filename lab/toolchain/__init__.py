"""The lab's build and launch tools, shared by the launchers (cuda_kernels/, triton_kernels/)
and the harness: nvrtc (compile with NVRTC, ptxas's report, launch through CuPy), cache (build
products on disk, by content), sass and ptx (what a build compiled to), triton (launch a
@triton.jit kernel, record launches, compile without a GPU). The toolchain layer sits on the shared
base: it imports only lab.base and itself, nothing of the harness, so launchers and harness may
both import it (tests/test_imports.py).
"""
