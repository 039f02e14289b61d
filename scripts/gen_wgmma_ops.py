"""Write cuda_kernels/wgmma_ops.cuh and cuda_kernels/wgmma_ss_ops.cuh: the inline-PTX wrappers of
the wgmma instructions that cuda_kernels/wgmma.cu (A from registers, B from shared memory) and the
TMA stages (cuda_kernels/tma_wgmma.cu: both operands from shared memory) issue.

One wgmma names every accumulator register of its warpgroup's 64 x N tile (N / 2 of them per
thread), so the asm statements are long and regular: this script writes them, and
tests/test_wgmma.py checks that the committed header is what it writes.

    python scripts/gen_wgmma_ops.py          # rewrite the headers
    python scripts/gen_wgmma_ops.py --check  # exit 1 if a header differs
"""

from __future__ import annotations

import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "cuda_kernels"
HEADER = KERNELS / "wgmma_ops.cuh"
SS_HEADER = KERNELS / "wgmma_ss_ops.cuh"

# (name in the function, PTX type, k per instruction, takes imm-trans-b)
TYPES = (("tf32", "tf32", 8, False), ("bf16", "bf16", 16, True), ("f16", "f16", 16, True))
# the TMA stages' shared-operand wrappers add fp8 (e4m3 x e4m3, k = 32 one-byte elements: 32
# bytes of K, as bf16's 16): like TF32, 8-bit types have no transpose bits (both K-major)
SS_TYPES = TYPES + (("e4m3", "e4m3", 32, False),)
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


def ss_wrapper(name: str, ptx: str, k: int, trans: bool, n: int) -> str:
    """Both operands from shared memory (descriptors a and b). 16-bit types take the transpose
    immediates as template arguments (TA = 1: A is M-major, TB = 1: B is N-major); TF32 and e4m3
    have no such bits: both operands K-major."""
    nd = n // 2
    d_list = ", ".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    tail = f", %{nd + 3}, %{nd + 4}" if trans else ""
    trans_in = ', "n"(TA), "n"(TB)' if trans else ""
    lines = [
        f"// D(64 x {n}, f32) (+)= A(64 x {k}, {ptx}) * B({k} x {n}, {ptx}), both in shared memory",
        "// through the descriptors a and b" + (" (TA / TB = 1: M- / N-major)" if trans
                                                 else " (both K-major)") + "; scale_d = 0 overwrites D.",
    ]
    if trans:
        lines.append("template <int TA, int TB>")
    lines += [
        f"__device__ __forceinline__ void wgmma_ss_{name}_n{n}(float* d, u64 a, u64 b, int scale_d) {{",
        '    asm volatile(',
        '        "{\\n.reg .pred p;\\n"',
        f'        "setp.ne.b32 p, %{nd + 2}, 0;\\n"',
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx}.{ptx} "',
        f'        "{{{d_list}}}, "',
        f'        "%{nd}, %{nd + 1}, p, 1, 1{tail};\\n}}\\n"',
        f"        : {outs}",
        f'        : "l"(a), "l"(b), "r"(scale_d){trans_in});',
        "}",
    ]
    return "\n".join(lines)


def render_ss() -> str:
    parts = [
        "// wgmma_ss_ops.cuh: the wgmma wrappers of the TMA stages (both operands from shared memory).",
        "// Written by scripts/gen_wgmma_ops.py; edit that script, not this file.",
        "#pragma once",
        "",
    ]
    for name, ptx, k, trans in SS_TYPES:
        for n in WIDTHS:
            parts.append(ss_wrapper(name, ptx, k, trans, n))
            parts.append("")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    outputs = ((HEADER, render()), (SS_HEADER, render_ss()))
    if "--check" in argv:
        stale = [h for h, text in outputs if not h.exists() or h.read_text() != text]
        for h in stale:
            print(f"{h} is not what scripts/gen_wgmma_ops.py writes; run it", file=sys.stderr)
        return 1 if stale else 0
    for h, text in outputs:
        h.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
