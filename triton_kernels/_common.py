"""What every Triton launcher shares: launching a @triton.jit kernel as a no-argument callable.

On a GPU, `launcher` compiles the kernel once up front (JITFunction.warmup) so that the harness's
timed callable only launches, and reads the compiled kernel's metadata (registers, spills, shared
memory, warps) for the resource columns. Under the Triton interpreter (TRITON_INTERPRET=1, the CPU
mode) there is nothing to compile and no resource report.
"""

from __future__ import annotations

from lab.errors import LabError


def interpreted(kernel) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def compiled_resources(compiled, grid) -> dict[str, int]:
    meta = compiled.metadata
    num_warps = int(getattr(meta, "num_warps", 4))
    blocks = 1
    for g in grid:
        blocks *= int(g)
    return {
        "registers": int(compiled.n_regs),
        "smem_static": 0,  # Triton allocates all shared memory dynamically
        "smem_dynamic": int(getattr(meta, "shared", 0)),
        "spill_bytes": int(compiled.n_spills),
        "threads": num_warps * 32,
        "grid_blocks": blocks,
    }


def problem_args(p) -> tuple:
    """The argument list every stage's kernel takes: (a, b, c, M, N, K, stride_am, stride_ak,
    stride_bk, stride_bn, stride_cm, stride_cn), from the shared description of the operands
    (lab/operands.py). Triton specializes a stride equal to 1 as a constant and one divisible by
    16 as such, so the row-major case compiles to the kernel it was before strides were added."""
    return (p.a.tensor, p.b.tensor, p.c.tensor, p.M, p.N, p.K, p.a.s0, p.a.s1, p.b.s0, p.b.s1,
            p.c.s0, p.c.s1)


def launcher(kernel, grid: tuple, args: tuple, **meta):
    """Return a no-argument callable that launches `kernel[grid](*args, **meta)`."""
    grid = tuple(int(g) for g in grid)
    resources = None
    if not interpreted(kernel):
        compiled = kernel.warmup(*args, grid=grid, **meta)
        compiled._init_handles()
        resources = compiled_resources(compiled, grid)

    def launch():
        kernel[grid](*args, **meta)

    launch.resources = resources
    return launch


# ------------------------------------------------- the register-tiling stages' block tile

SMEM_LIMIT = 227 * 1024  # an H100 block's opt-in shared memory


def block_k(BK: int) -> int:
    """tl.dot's K-tile: at least 16."""
    return max(BK, 16)


def validate_block_tile(stage: str, BM: int, BN: int, BK: int, num_stages: int) -> None:
    """Raise LabError (one sentence) for a tile Triton cannot compile on an H100."""
    smem = max(1, num_stages) * (BM + BN) * block_k(BK) * 4
    if smem > SMEM_LIMIT:
        raise LabError(f"{stage} (Triton) with BM={BM}, BN={BN}, BK={BK}, num_stages={num_stages} "
                       f"needs about {smem // 1024} KiB of shared memory, more than an H100's "
                       f"227 KiB; lower num_stages or BK")


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
