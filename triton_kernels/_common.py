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


# ------------------------------------------------------------------- precisions of tl.dot

# tl.dot's input_precision for each of the lab's precisions (lab/stages.py PRECISIONS): fp32
# operands as IEEE fp32, TF32, or 3xTF32 ("tf32x3": the operands split into a TF32 high part and
# a TF32 residual, three products); bf16/fp16 operands go to the tensor cores as they are (the
# argument only applies to fp32 operands). The accumulator is fp32 in every case.
DOT_PRECISION = {"fp32": "ieee", "tf32": "tf32", "3xtf32": "tf32x3", "bf16": "ieee",
                 "fp16": "ieee"}
# The precisions a Triton twin gains by passing DOT_PRECISION to tl.dot (and loading the operands
# in their own dtype): the twins whose registry entry offers them.
TL_DOT_PRECISIONS = ("fp32", "tf32", "3xtf32", "bf16", "fp16")


def dot_meta(kernel, p) -> dict:
    """The constexprs INPUT_PRECISION and UPCAST of a kernel for problem p (its p.precision).

    UPCAST: the Triton interpreter multiplies bf16 tiles as raw 16-bit integers (a relative error
    of ~1e9 in Triton 3.9's interpreter), so under the interpreter bf16 tiles are converted to fp32
    before tl.dot. The products of two bf16 values are exact in fp32, so this computes what the
    tensor cores compute (fp32 products, fp32 accumulation); compiled kernels never upcast."""
    precision = getattr(p, "precision", "fp32")
    return {"INPUT_PRECISION": DOT_PRECISION[precision],
            "UPCAST": interpreted(kernel) and precision == "bf16"}


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
