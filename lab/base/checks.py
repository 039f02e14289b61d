"""The one check of every call's operands, before any launcher's own code runs.

`check_operands`: torch tensors, 2-D, inner dimensions equal, C of shape M x N, dtypes the stage
supports, one device for all three (a CUDA GPU for CUDA stages), an output whose elements do not
overlap each other (no broadcast `expand()`ed C) nor an input, and sizes and strides that fit the
32-bit integers the kernels take them as (lab/base/index_range.py). `scales_for`: the fp8
precisions' scales (per tensor, per row, per block), checked and made tensors. Every refusal is
one LabError sentence.
"""

from __future__ import annotations

import math

from lab.base.dtypes import SCALE_KIND, SCALED
from lab.base.errors import LabError
from lab.base.index_range import check_index_range
from lab.base.needs import CUDA, Needs
from lab.base.problem import Operand

def device_name(t) -> str:
    return "the CPU" if t.device.type == "cpu" else f"{t.device}"


def _overlaps(x, y) -> bool:
    """Whether the memory spans of x and y intersect (conservative: interleaved views count)."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    if x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False

    def bounds(t):
        lo = t.data_ptr()
        hi = lo + t.element_size() * (1 + sum((n - 1) * abs(s) for n, s in
                                              zip(t.shape, t.stride())))
        return lo, hi

    (a0, a1), (b0, b1) = bounds(x), bounds(y)
    return a0 < b1 and b0 < a1


def _self_overlapping(t) -> bool:
    """Two different (i, j) of t at one address: a broadcast (stride 0) or overlapping strides."""
    dims = sorted((abs(s), n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach = 1
    for stride, n in dims:
        if stride < reach:
            return True
        reach = stride * n
    return False


def _dtype_mismatch(where, a, b, c, names, out_given: bool) -> str:
    """The sentence for operands of different dtypes, naming the odd one out and its fix."""
    if not out_given or a.dtype == c.dtype != b.dtype:  # B differs (a new C has A's dtype)
        said = (f"A is {names[0]} and B is {names[1]}" if not out_given else
                f"A and C (out) are {names[0]} and B is {names[1]}")
        return (f"{where}: {said}, but they must have one dtype; convert B with "
                f"b.to({a.dtype})")
    if a.dtype == b.dtype != c.dtype:
        return (f"{where}: A and B are {names[0]} and C (out) is {names[2]}, but C must have "
                f"their dtype; pass out=torch.empty(..., dtype={a.dtype})")
    if b.dtype == c.dtype != a.dtype:
        return (f"{where}: B and C (out) are {names[1]} and A is {names[0]}, but they must have "
                f"one dtype; convert A with a.to({b.dtype})")
    return (f"{where}: A is {names[0]}, B is {names[1]} and C (out) is {names[2]}, but the three "
            f"must have one dtype; convert with .to(), such as b.to({a.dtype}) and an out of "
            f"that dtype")


def check_operands(a, b, c, where: str, needs: Needs = CUDA, device: str | None = None,
                   out_given: bool = True) -> None:
    """Raise LabError (one sentence) unless C = A @ B can be computed by `where` on these.

    `device`: "cuda" when the kernel needs a CUDA GPU, "any" when CPU tensors are fine too (the
    Triton interpreter); None derives it from `needs` (blas -> cuda). `out_given`: whether the
    caller passed C (out=); when not, C was made here with A's dtype, and the sentences speak of
    A and B only."""
    import torch

    for name, t in (("A", a), ("B", b), ("C", c)):
        if not isinstance(t, torch.Tensor):
            raise LabError(f"{where}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 2:
            raise LabError(f"{where}: {name} must be a 2-D matrix, but it has {t.dim()} "
                           f"dimension{'s' if t.dim() != 1 else ''} (shape {tuple(t.shape)})")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise LabError(f"{where}: the inner dimensions differ: A is {M}x{K} and B is {K2}x{N}, so "
                       f"A @ B is undefined")
    if tuple(c.shape) != (M, N):
        raise LabError(f"{where}: C (out) must be {M}x{N} for a {M}x{K} A and a {K}x{N} B, but it "
                       f"is {c.shape[0]}x{c.shape[1]}")
    names = [str(t.dtype).removeprefix("torch.") for t in (a, b, c)]
    if needs.out is None and not a.dtype == b.dtype == c.dtype:
        raise LabError(_dtype_mismatch(where, a, b, c, names, out_given))
    if needs.out is not None and a.dtype != b.dtype:
        raise LabError(f"{where}: A is {names[0]} and B is {names[1]}, but the two must have one "
                       f"dtype; convert with .to(), such as b.to({str(a.dtype)})")
    for name, dt in (("A", names[0]), ("B", names[1])):
        if dt not in needs.dtypes:
            raise LabError(f"{where} takes {' or '.join(needs.dtypes)} tensors, but {name} is {dt}")
    if needs.out is not None and names[2] != needs.out:
        raise LabError(f"{where} writes a {needs.out} C from {names[0]} operands, but C (out) is "
                       f"{names[2]}; pass out=torch.empty(..., dtype=torch.{needs.out})")
    if needs.out is None and names[2] not in needs.dtypes:
        raise LabError(f"{where} takes {' or '.join(needs.dtypes)} tensors, but C is {names[2]}")
    if not (a.device == b.device == c.device):
        raise LabError(f"{where}: A, B and C must be on one device, but they are on "
                       f"{device_name(a)}, {device_name(b)} and {device_name(c)}")
    if _self_overlapping(c):
        raise LabError(f"{where}: C (out) has elements that share memory (strides "
                       f"{tuple(c.stride())}, as from expand()); pass a C whose elements are "
                       f"distinct, such as torch.empty({M}, {N})")
    for name, t in (("A", a), ("B", b)):
        if _overlaps(c, t):
            raise LabError(overlap_message(where, name))
    for name, t in (("A", a), ("B", b), ("C", c)):
        if t.numel():
            op = Operand.of(name, t)
            check_index_range(name, op.rows, op.cols, op.s0, op.s1, where)
    # last: what is wrong with the operands themselves is worth saying first, on any device
    device = device or ("cuda" if needs.blas else "any")
    if device == "cuda" and a.device.type != "cuda":
        if not torch.cuda.is_available() and not needs.blas:  # a Triton kernel, compiled
            raise LabError(f"{where} runs CPU tensors only under the Triton interpreter, which is "
                           f"off in this process; set TRITON_INTERPRET=1 before importing the lab "
                           f"(lab.matmul switches it on by itself on a machine without a GPU)")
        if not torch.cuda.is_available():
            raise LabError(f"{where} is a CUDA kernel and needs a CUDA GPU, but this machine has "
                           f"none; backend='triton' runs the stage's Triton twin on CPU tensors "
                           f"under the Triton interpreter")
        raise LabError(f"{where} runs on a CUDA GPU, but the tensors are on {device_name(a)}; "
                       f"move them with .cuda() (Triton stages also run CPU tensors under the "
                       f"Triton interpreter, TRITON_INTERPRET=1)")
    if a.device.type not in ("cuda", "cpu"):
        raise LabError(f"{where} runs on CUDA (or, for Triton, on CPU tensors under the "
                       f"interpreter), not on {a.device.type} tensors")
    if a.device.type == "cuda":
        import torch

        current = torch.cuda.current_device()
        if a.device.index is not None and a.device.index != current:
            raise LabError(f"{where}: the tensors are on {a.device} but the current CUDA device "
                           f"is cuda:{current}, where the kernel would be launched; call "
                           f"torch.cuda.set_device({a.device.index}) or use "
                           f"`with torch.cuda.device({a.device.index}):`")


def overlap_message(where: str, name: str) -> str:
    return (f"{where}: C (out) shares memory with {name}; the kernel would read values it has "
            f"already overwritten, so pass a separate C")


def scale_shapes(kind: str, M: int, N: int, K: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of scale_a and scale_b for scales of `kind` (a precision record's `scale`), as
    torch._scaled_mm takes them: tensor (1,) and (1,); row (M, 1) and (1, N); block (M, ceil(K/128))
    (one per 1 x 128 slice of A along K) and (ceil(K/128), ceil(N/128)) (one per 128 x 128 block of
    B)."""
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    return {"tensor": ((1,), (1,)), "row": ((M, 1), (1, N)),
            "block": ((M, kb), (kb, nb))}[kind]


SCALE_BLOCK = 128  # fp8_block's scale granularity along K (A and B) and along N (B)
SCALE_WORDS = {"tensor": "a per-tensor scale", "row": "row-wise scales",
               "block": "1 x 128 and 128 x 128 block scales"}


def scales_for(a, b, precision: str, scale_a, scale_b, where: str) -> tuple | None:
    """The scales of a scaled precision (its record's `scale`: tensor, row or block) as two
    float32 tensors on A's device, in the shapes scale_shapes gives (per-tensor: a Python number
    becomes a one-element tensor; None is 1 for per-tensor scales and required otherwise); None
    for a precision without scales. LabError (one sentence) for scales given to another
    precision, or a scale of another kind, shape, dtype or device. Row and block scales keep
    their strides (the kernels read them through their strides)."""
    import torch

    if precision not in SCALED:
        if scale_a is not None or scale_b is not None:
            raise LabError(f"{where}: scale_a and scale_b are the fp8 precisions' scales, and "
                           f"this call computes in {precision}")
        return None
    kind = SCALE_KIND[precision]
    M, K = a.shape
    N = b.shape[1]
    shapes = scale_shapes(kind, M, N, K)
    out = []
    for name, s, shape in (("scale_a", scale_a, shapes[0]), ("scale_b", scale_b, shapes[1])):
        if kind != "tensor":
            if not isinstance(s, torch.Tensor):
                got = "none" if s is None else type(s).__name__
                raise LabError(f"{where}: {precision} takes {SCALE_WORDS[kind]}: {name} must be "
                               f"a float32 tensor of shape {shape}, not {got}")
            if tuple(s.shape) != shape or s.dtype != torch.float32:
                raise LabError(f"{where}: {precision} takes {SCALE_WORDS[kind]}: {name} must be "
                               f"float32 of shape {shape}, but it is "
                               f"{str(s.dtype).removeprefix('torch.')} of shape {tuple(s.shape)}")
        else:
            if s is None:
                s = 1.0
            if isinstance(s, (int, float)) and not isinstance(s, bool):
                if not math.isfinite(s):
                    raise LabError(f"{where}: {name} must be finite, not {s}")
                s = torch.full((1,), float(s), dtype=torch.float32, device=a.device)
            if not isinstance(s, torch.Tensor):
                raise LabError(f"{where}: {name} must be a number or a one-element float32 "
                               f"tensor, not {type(s).__name__}")
            if s.numel() != 1 or s.dtype != torch.float32:
                raise LabError(f"{where}: {name} must be one float32 value (a per-tensor scale), "
                               f"but it is {str(s.dtype).removeprefix('torch.')} of shape "
                               f"{tuple(s.shape)}")
        if s.device != a.device:
            raise LabError(f"{where}: {name} is on {device_name(s)} and the operands on "
                           f"{device_name(a)}; move it with .to(a.device)")
        if kind == "tensor":
            s = s.detach().reshape(1) if s.dim() != 1 or s.requires_grad else s
        elif s.requires_grad:
            s = s.detach()
        out.append(s)
    return tuple(out)
