"""Write cuda_kernels/wgmma_ops.cuh: the inline-PTX wrappers of the wgmma instructions that
cuda_kernels/wgmma.cu issues.

One wgmma names every accumulator register of its warpgroup's 64 x N tile (N / 2 of them per
thread), so the asm statements are long and regular: this script writes them, and
tests/test_wgmma.py checks that the committed header is what it writes.

    python scripts/gen_wgmma_ops.py          # rewrite the header
    python scripts/gen_wgmma_ops.py --check  # exit 1 if the header differs
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADER = Path(__file__).resolve().parent.parent / "cuda_kernels" / "wgmma_ops.cuh"

# (name in the function, PTX type, k per instruction, takes imm-trans-b)
TYPES = (("tf32", "tf32", 8, False), ("bf16", "bf16", 16, True), ("f16", "f16", 16, True))
WIDTHS = (64, 128, 192, 256)


def wrapper(name: str, ptx: str, k: int, trans: bool, n: int) -> str:
    nd = n // 2  # f32 accumulators per thread of a 64 x n tile
    d_list = ", ".join(f"%{i}" for i in range(nd))
    a_list = ", ".join(f"%{nd + i}" for i in range(4))
    tail = ", 0" if trans else ""  # imm-trans-b = 0: B is K-major in shared memory
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    lines = [
        f"// D(64 x {n}, f32) (+)= A(64 x {k}, {ptx}, registers) * B({k} x {n}, {ptx}, shared memory",
        "// through the descriptor b, K-major); scale_d = 0 overwrites D.",
        f"__device__ __forceinline__ void wgmma_{name}_n{n}(float* d, u32 a0, u32 a1, u32 a2, u32 a3,",
        "                                                  u64 b, int scale_d) {",
        '    asm volatile(',
        '        "{\\n.reg .pred p;\\n"',
        f'        "setp.ne.b32 p, %{nd + 5}, 0;\\n"',
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx}.{ptx} "',
        f'        "{{{d_list}}}, "',
        f'        "{{{a_list}}}, %{nd + 4}, p, 1, 1{tail};\\n}}\\n"',
        f"        : {outs}",
        '        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(scale_d));',
        "}",
    ]
    return "\n".join(lines)


def render() -> str:
    parts = [
        "// wgmma_ops.cuh: the wgmma wrappers of wgmma.cu (A from registers, B from shared memory).",
        "// Written by scripts/gen_wgmma_ops.py; edit that script, not this file.",
        "#pragma once",
        "",
    ]
    for name, ptx, k, trans in TYPES:
        for n in WIDTHS:
            parts.append(wrapper(name, ptx, k, trans, n))
            parts.append("")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not HEADER.exists() or HEADER.read_text() != text:
            print(f"{HEADER} is not what scripts/gen_wgmma_ops.py writes; run it", file=sys.stderr)
            return 1
        return 0
    HEADER.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
