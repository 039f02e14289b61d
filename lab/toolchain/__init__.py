"""The lab's build and launch tools, shared by the launchers (cuda_kernels/, triton_kernels/)
and the harness: nvrtc (compile with NVRTC, ptxas's report, launch through CuPy), cache (build
products on disk, by content), sass and ptx (what a build compiled to), triton (launch a
@triton.jit kernel, record launches, compile without a GPU). Like lab.errors, lab.contract and
lab.operands, these modules import nothing of the harness, so both sides may import them.
"""
