"""Scheduling hints rewritten in a compiled kernel: the FFMA yield experiment of fp8_block.

Every sm_90 instruction is 16 bytes; the high 64-bit word carries, besides the encoding's last
bits, the control bits ptxas sets for the warp scheduler: a stall count (bits 41-44 of the high
word), a yield bit (45: 0 lets the scheduler switch to another warp after this instruction, 1
keeps it on this one), scoreboard barriers (46-57) and the operand-reuse flags (58-61: keep a source
operand in the reuse cache for this warp's next instruction).

In a run of FFMAs that share a scale (fp8_block's promotion: acc += part * scale, 64 of them a
k-tile), ptxas alternates: an FFMA that keeps the scale in the reuse cache and holds the warp
(yield 1), then one that lets go of both (yield 0). DeepGEMM (deepseek-ai/DeepGEMM, its README,
"FFMA SASS interleaving", February 2025) reported that letting go more often in its fp8 kernel's
promotion, by clearing the reuse flag and the yield bit of some of those FFMAs in the cubin, gave
other warps (the other warpgroups' wgmma issue) the scheduler sooner and the kernel 10% or more on
some shapes. `ffma_yield` does that to the first share of a kernel's FFMAs: both bits are hints,
so the product is the same bits; only the order in which warps issue changes.

Used by lab/toolchain/nvrtc.py for a build whose options define FFMA_YIELD=n (1 to 16): the first
n/16 of the kernel's FFMAs, in address order, are eligible (docs/stages/persistent.md, fp8_block).
"""

from __future__ import annotations

import struct

from lab.base.errors import LabError

FFMA_OPCODE = 0x223  # the low 12 bits of an FFMA with three register sources (sm_90)
YIELD = 1 << 45  # in the high word: 1 holds the warp, 0 lets the scheduler switch
REUSE = 0xF << 58  # in the high word: the four operand-reuse flags


def text_section(cubin: bytes, kernel: str) -> tuple[int, int]:
    """(file offset, size) of `kernel`'s code, the ELF section .text.<kernel> of the cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise LabError("the cubin is not a 64-bit ELF file, so its code cannot be rewritten")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    want = f".text.{kernel}".encode()
    for name, _, _, _, offset, size in heads:
        start = names_at + name
        if cubin[start:cubin.index(b"\0", start)] == want:
            return offset, size
    raise LabError(f"the cubin has no code section for kernel {kernel}")


def ffma_yield(cubin: bytes, kernel: str, sixteenths: int) -> tuple[bytes, int]:
    """The cubin with the FFMAs among the first `sixteenths`/16 of `kernel`'s FFMAs that keep an
    operand for reuse and hold the warp (reuse flag set, yield 1) made to let go of both (reuse
    flags and yield bit cleared); and how many were changed."""
    if not 0 <= sixteenths <= 16:
        raise LabError(f"FFMA_YIELD must be 0 to 16 (sixteenths of the FFMAs), not {sixteenths}")
    offset, size = text_section(cubin, kernel)
    ffmas = [at for at in range(offset, offset + size, 16)
             if struct.unpack_from("<Q", cubin, at)[0] & 0xFFF == FFMA_OPCODE]
    out = bytearray(cubin)
    changed = 0
    for at in ffmas[:len(ffmas) * sixteenths // 16]:
        hi = struct.unpack_from("<Q", out, at + 8)[0]
        if hi & REUSE and hi & YIELD:
            struct.pack_into("<Q", out, at + 8, hi & ~(REUSE | YIELD))
            changed += 1
    return bytes(out), changed
