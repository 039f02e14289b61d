"""Correct before timed: a float64 reference, NaN-poisoned outputs, and pass thresholds that scale
with K.

rel_err    = ||C - ref||_F / ||ref||_F        the whole result
max_err_k  = max |C - ref| / K                (the largest elementwise error, per unit of K)
max_rel    = max |C - ref| / rms(ref)         the worst single element, against the typical size

A result with any NaN or Inf fails, whatever its norm: the output is filled with NaN before the
kernel runs, so an element the kernel never wrote stays NaN and is counted.

Thresholds (`tolerance`). A dot product of length K accumulated in fp32 commits one rounding
error of at most u = 2^-24 per addition; with random signs these add up like a random walk, so the
relative error of a correct kernel grows like u * sqrt(K) (a sequential loop, measured on an H100:
1.3e-05 at K = 524,288, that is 0.3 * u * sqrt(K); split or tree accumulation stays lower). The
fp32 threshold is therefore

    tol(K) = max(1e-5, 2 * u * sqrt(K))       (1e-5 up to K ~ 7,000; 1.2e-4 at K = 1,048,576)

which leaves a correct sequential kernel a margin of about 6x at every K, while the defects a
kernel can have stay far above it: a dropped K tile of T terms leaves a relative error of about
sqrt(T / K) (0.011 for T = 128 at K = 1Mi, ~90x the threshold; a single dropped term stays above
it up to K ~ 8 million), and a wrong or missing row or column of C, which hardly moves the Frobenius
norm of a large C, is caught by the elementwise test: every element must satisfy

    |C - ref| <= 8 * tol(K) * rms(ref)

(8 standard errors of a correct kernel at its most pessimistic; a wrong element is off by about
rms(ref), more than 100x the limit at any K). Both figures are written into the table and CSV
(`rel_err`, `max_err_k`).

Other precisions. Every precision accumulates in fp32, so the sqrt(K) term keeps fp32's unit
roundoff; what changes is the floor, set by how the operands are rounded before they are
multiplied (and, for bf16/fp16, the rounding of C on store). With operands rounded to a format of
unit roundoff u_in, each product carries a relative error of about u_in * sqrt(2/3) (two
independent uniform roundings), which does not grow with K, so the relative error of C is about
0.8 * u_in whatever K is:

    precision  operands            u_in     expected rel_err   floor (pass threshold)
    tf32       fp32 -> TF32        2^-11    ~4e-4              2e-3
    3xtf32     fp32 = hi + lo TF32 ~2^-22   ~2e-7              1e-5 (fp32's: it stands in for fp32)
    bf16       bfloat16, C bf16    2^-8     ~3e-3 (+1e-3 C)    2e-2
    fp16       float16, C fp16     2^-11    ~4e-4 (+2e-4 C)    1e-2
    fp8        e4m3 x scale, C bf16 (exact)  ~1.7e-3 (C) + accumulation   2e-2
    fp8_row    the same, scales per row / column                          2e-2
    fp8_block  the same, scales per block, fp32 every 128 of K   ~1.1e-3   1e-2

fp8 is the exception in two ways. Its operands are the e4m3 values and scales the kernel
receives, exact in float64, so their rounding (2^-4) is not counted; C is bf16. And the tensor
core's fp8 accumulation keeps fewer bits than fp32 (cuBLAS's fast accumulation and the lab's
kernels both sum in it): measured on an H100, rel_err = 1.7e-3 at K = 256 growing to 7.2e-3 at
K = 65,536, about 2.8e-5 * sqrt(K) beside C's rounding, so fp8's sqrt(K) term takes u = 2^-14
(ACCUMULATE_U_OF): 2e-2 up to K ~ 26,800, 3.1e-2 at K = 65,536. TF32 on Hopper's wgmma shows the
same at a smaller scale: 3.07e-3 at K = 1,048,576 where the operands' rounding gives 4e-4, so its
sqrt(K) term takes u = 2^-17 (its 2e-3 floor holds up to K ~ 17,000; 1.6e-2 at K = 1,048,576).

The reference is always float64 of the operands the kernel received (after they were rounded to
bf16/fp16), so for bf16/fp16 the check measures the kernel's arithmetic and C's rounding, not the
inputs' conversion; for tf32 the operand rounding happens inside the kernel and is counted.

The derivation, the measured margins and the planted-defect tests are in docs/CHECKING.md and
tests/test_check_k.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lab.base import precisions

# Per precision, from its record (lab/base/precisions.py, where each figure's measurement is cited):
# the unit roundoff of the operands as the multiplier sees them (documentation, and the floors),
UNIT_ROUNDOFF = {r.name: r.unit_roundoff for r in precisions.RECORDS}
ACCUMULATE_U = 2.0**-24  # every precision accumulates in fp32 ...
# ... except where the tensor cores keep fewer bits of the running sum (fp8, and tf32 at long K
# on wgmma, measured on an H100)
ACCUMULATE_U_OF = {r.name: r.accumulate_u for r in precisions.RECORDS
                   if r.accumulate_u != ACCUMULATE_U}
# and the threshold's K-independent floor
FLOOR = {r.name: r.floor for r in precisions.RECORDS}
RANDOM_WALK_FACTOR = 2.0  # tol = max(floor, factor * u * sqrt(K))
ELEMENT_FACTOR = 8.0  # an element may be off by this many tol(K) * rms(ref)
# Kept for callers that want the K-independent floor of a precision.
TOLERANCE = FLOOR


def tolerance(precision: str, K: int) -> float:
    """The pass threshold on rel_err for a K-long accumulation at `precision`."""
    u = ACCUMULATE_U_OF.get(precision, ACCUMULATE_U)
    return max(FLOOR[precision], RANDOM_WALK_FACTOR * u * math.sqrt(max(K, 1)))


@dataclass
class CheckResult:
    passed: bool
    rel_err: float
    max_err_k: float
    reason: str = ""
    max_rel: float = float("nan")  # max |C - ref| / rms(ref)
    tol: float = float("nan")


def make_inputs(M: int, N: int, K: int, seed: int, device: str, dtype=None, layout: str = "nn"):
    """Fresh seeded standard-normal A (MxK) and B (KxN); never zeros.

    `layout` (BLAS naming, first letter A, second B): 't' stores that operand transposed, i.e. the
    returned tensor is a column-major view (x.t() of a contiguous tensor) holding the same values,
    so every layout multiplies the same matrices and has the same reference."""
    import torch

    dtype = dtype or torch.float32
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((M, K), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn((K, N), generator=gen, device=device, dtype=torch.float32).to(dtype)
    if layout[0] == "t":
        a = a.t().contiguous().t()
    if layout[1] == "t":
        b = b.t().contiguous().t()
    return a, b


E4M3_MAX = 448.0  # the largest finite float8 e4m3 (fn) value


def quantize_e4m3(x):
    """float32 `x` as float8 e4m3 with a per-tensor scale: (q, scale), x ~ scale * q, the scale
    (a float32 tensor of one element) mapping x's largest magnitude to E4M3_MAX, as fp8 training
    recipes do (NVIDIA Transformer Engine's per-tensor current scaling)."""
    import torch

    amax = x.abs().amax().clamp(min=1e-12).float()
    scale = (amax / E4M3_MAX).reshape(1)
    q = (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _block_amax(x, rows: int, cols: int):
    """The largest |x| of each rows x cols block of 2-D `x` (edge blocks partial), float32."""
    import torch

    R, C = x.shape
    rp, cp = -(-R // rows) * rows, -(-C // cols) * cols
    padded = torch.zeros((rp, cp), dtype=torch.float32, device=x.device)
    padded[:R, :C] = x.abs()
    return padded.reshape(rp // rows, rows, cp // cols, cols).amax(dim=(1, 3))


def expand_scale(s, rows: int, cols: int, R: int, C: int):
    """A scale tensor of one value per rows x cols block, repeated to an R x C matrix."""
    return s.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:R, :C]


def quantize_scaled(a, b, kind: str):
    """float32 A (M x K) and B (K x N) as float8 e4m3 with scales of `kind` (a precision record's
    `scale`), each scale mapping its block's largest magnitude to E4M3_MAX: "tensor" one each
    (quantize_e4m3); "row" one per row of A, shape (M, 1), and per column of B, (1, N); "block"
    one per 1 x 128 slice of A along K, (M, ceil(K/128)), and per 128 x 128 block of B,
    (ceil(K/128), ceil(N/128)), as DeepSeek-V3 quantizes activations and weights. Returns
    (qa, qb, scale_a, scale_b), A ~ scale_a * qa blockwise."""
    import torch

    from lab.base.checks import SCALE_BLOCK as S

    if kind == "tensor":
        (qa, sa), (qb, sb) = quantize_e4m3(a), quantize_e4m3(b)
        return qa, qb, sa, sb
    K = a.shape[1]
    blocks = {"row": ((1, K), (K, 1)), "block": ((1, S), (S, S))}[kind]
    (ra, ca), (rb, cb) = blocks
    sa = (_block_amax(a, ra, ca).clamp(min=1e-12) / E4M3_MAX).contiguous()
    sb = (_block_amax(b, rb, cb).clamp(min=1e-12) / E4M3_MAX).contiguous()

    def q(x, s, r, c):
        full = expand_scale(s, r, c, *x.shape)
        return (x / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q(a, sa, ra, ca), q(b, sb, rb, cb), sa, sb


def make_scaled_inputs(M: int, N: int, K: int, seed: int, device: str, layout: str = "nn",
                       kind: str = "tensor"):
    """The fp8 precisions' operands: make_inputs' standard-normal A and B quantized to float8
    e4m3 with scales of `kind` (quantize_scaled). Returns (a, b, scale_a, scale_b); the product
    the kernels compute is the scaled one, and reference(a, b, (scale_a, scale_b)) is its
    float64 value. `layout` as make_inputs."""
    a, b = make_inputs(M, N, K, seed, device, layout="nn")
    qa, qb, sa, sb = quantize_scaled(a, b, kind)
    if kind == "block":  # A's scales M-major, as torch._scaled_mm's block-wise recipe takes them
        sa = sa.t().contiguous().t()
    if layout[0] == "t":
        qa = qa.t().contiguous().t()
    if layout[1] == "t":
        qb = qb.t().contiguous().t()
    return qa, qb, sa, sb


def inputs_for(precision: str, M: int, N: int, K: int, seed: int, device: str,
               layout: str = "nn"):
    """The operands a row of `precision` multiplies: (a, b, scales), scales None except the fp8
    precisions' (scale_a, scale_b), of their record's kind."""
    import torch

    from lab.base.dtypes import DTYPE_NAMES, SCALE_KIND

    if precision in SCALE_KIND:
        a, b, sa, sb = make_scaled_inputs(M, N, K, seed, device, layout, SCALE_KIND[precision])
        return a, b, (sa, sb)
    dtype = getattr(torch, DTYPE_NAMES[precision])
    a, b = make_inputs(M, N, K, seed, device, dtype=dtype, layout=layout)
    return a, b, None


def reference(a, b, scales=None):
    """torch.matmul on float64-upcast inputs; with `scales` (the fp8 precisions'), the scaled
    product: per-tensor scales multiply the product; row scales (M, 1) and (1, N) scale its rows
    and columns; block scales ((M, K/128) for A, (K/128, N/128) for B) scale each operand's
    blocks before the product (exact in float64: the same sum as scaling each 128-long partial
    sum)."""
    from lab.base.checks import SCALE_BLOCK as S

    if scales is None:
        return a.double() @ b.double()
    sa, sb = scales
    (M, K), N = a.shape, b.shape[1]
    if sa.numel() == 1 and sb.numel() == 1 and tuple(sa.shape) != (M, 1):
        return (a.double() @ b.double()) * (sa.double().item() * sb.double().item())
    if tuple(sa.shape) == (M, 1) and tuple(sb.shape) == (1, N):
        return (a.double() @ b.double()) * sa.double() * sb.double()
    xa = a.double() * expand_scale(sa.double(), 1, S, M, K)
    xb = b.double() * expand_scale(sb.double(), S, S, K, N)
    return xa @ xb


def compare(c, ref, K: int, precision: str = "fp32") -> CheckResult:
    """Judge an already-computed output against the float64 reference."""
    import torch

    bad = (~torch.isfinite(c)).sum().item()
    if bad:
        what = "NaN (unwritten or invalid)" if torch.isnan(c).any().item() else "Inf"
        return CheckResult(False, float("nan"), float("nan"),
                           f"{bad} of {c.numel()} elements are {what}")
    tol = tolerance(precision, K)
    if c.numel() == 0:
        return CheckResult(True, 0.0, 0.0, tol=tol, max_rel=0.0)
    diff = c.double() - ref
    ref_norm = torch.linalg.vector_norm(ref).item()
    rel = torch.linalg.vector_norm(diff).item() / (ref_norm if ref_norm > 0 else 1.0)
    max_abs = diff.abs().max().item()
    max_err_k = max_abs / max(K, 1)
    rms = ref_norm / math.sqrt(ref.numel())
    max_rel = max_abs / (rms if rms > 0 else 1.0)
    if not rel <= tol:
        return CheckResult(False, rel, max_err_k, f"relative error {rel:.2e} exceeds {tol:.1e} "
                           f"(the threshold at K = {K})", max_rel, tol)
    if not max_rel <= ELEMENT_FACTOR * tol:
        i = int(diff.abs().argmax().item())
        row, col = divmod(i, c.shape[1])
        return CheckResult(False, rel, max_err_k,
                           f"element ({row}, {col}) is off by {max_rel:.2e} of the result's RMS, "
                           f"above {ELEMENT_FACTOR * tol:.1e} (a wrong or missing element, row or "
                           f"column)", max_rel, tol)
    return CheckResult(True, rel, max_err_k, max_rel=max_rel, tol=tol)


def check(launch, c, ref, K: int, precision: str = "fp32") -> CheckResult:
    """Poison C with NaN, run the launch once, and compare with the reference."""
    import torch

    c.fill_(float("nan"))
    launch()
    if c.is_cuda:
        torch.cuda.synchronize()
    return compare(c, ref, K, precision)
