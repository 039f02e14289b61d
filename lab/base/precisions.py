"""One record per precision: everything the lab knows about a precision, in one place.

A precision is how a kernel multiplies: the operands' dtype, C's dtype, the units it runs on, the
cuBLAS call it is compared with, the threshold its result is checked against, and the words the
pages use for it. The harness (inputs, reference, check, baseline, peaks, tables, plots) and the
launchers (element sizes, Triton's tl.dot precision, which operands must lie K-major, the CUDA
build's define) read this record; a new precision is one `Precision(...)` entry here plus the
kernels that compute in it (docs/ARCHITECTURE.md, "Precisions").

This module is part of the shared base: it imports nothing of the lab but lab.base.errors, and no
torch (dtypes are named; lab/base/problem.py turns a name into a torch dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.base.errors import LabError

# bytes of each dtype the lab names (torch's names)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class Precision:
    name: str             # the name on the command line, in rows and in Offer.precisions
    word: str             # how the pages write it ("TF32", "3xTF32")
    glossary: str         # its entry in docs/GLOSSARY.md (the anchor)
    dtype: str            # torch dtype name of A and B
    c_dtype: str          # torch dtype name of C
    # the check (lab/check.py, docs/CHECKING.md): the operands' unit roundoff as the multiplier
    # sees them, the threshold's K-independent floor, and the unit roundoff of the accumulation
    # where it is not fp32's (the threshold grows like u * sqrt(K))
    unit_roundoff: float
    floor: float
    accumulate_u: float = 2.0**-24
    # the cuBLAS row it is compared with: that precision's name (3xtf32 stands in for fp32), and
    # the row's detail
    compared_with: str = ""
    cublas: str = ""
    # units: the precision whose FLOP rate (lab/peaks.py) it runs at, and how many of its products
    # make one multiply-add (3xtf32: three TF32 products)
    units: str = ""
    products: int = 1
    tensor_cores: bool = True
    # the operands' scales (fp8): "" none; "tensor": one float32 each, C = scale_a * scale_b *
    # (A @ B); "row": one per row of A, shape (M, 1), and per column of B, (1, N), C[m, n] =
    # scale_a[m] * scale_b[n] * (A @ B)[m, n]; "block": A one per 1 x 128 slice along K, shape
    # (M, ceil(K/128)), B one per 128 x 128 block, (ceil(K/128), ceil(N/128)), each 128-long
    # partial sum scaled and added in fp32 (DeepSeek-V3's recipe). The shapes are torch's
    # (torch._scaled_mm), so a caller's scale tensors pass as they are.
    scale: str = ""
    tl_dot: str | None = None  # Triton tl.dot's input_precision, None where tl.dot takes none
    kmajor_only: bool = False  # Hopper's wgmma reads its operands from shared memory K-major only
    # the oldest GPU (compute capability) whose tensor cores multiply these operands: e4m3 from
    # sm_89 on; (0, 0) where every GPU the lab runs on does (its tensor-core stages need sm_80)
    min_capability: tuple[int, int] = (0, 0)
    cuda_define: str = ""      # the define the tensor-core CUDA builds take (mma.cu, tma_tiles.cuh)
    note: str = ""             # what a reader must know to read its summary line (README)
    # what a picture of its % of cuBLAS writes beside it (plain text, one sentence): the cuBLAS
    # call it is compared with, where "cuBLAS <baseline>" alone would mislead
    plot_note: str = ""

    @property
    def elem_bytes(self) -> int:
        """Bytes of one element of A and B."""
        return DTYPE_BYTES[self.dtype]

    @property
    def c_bytes(self) -> int:
        """Bytes of one element of C."""
        return DTYPE_BYTES[self.c_dtype]

    @property
    def scaled(self) -> bool:
        """Its operands come with scales (scale: tensor, row or block)."""
        return bool(self.scale)

    @property
    def baseline(self) -> str:
        """The precision of the cuBLAS row it is compared with."""
        return self.compared_with or self.name

    @property
    def cublas_tf32(self) -> bool:
        """torch's cuBLAS runs fp32 operands with TF32 for this precision's baseline."""
        return self.baseline == "tf32"

    @property
    def peak_units(self) -> str:
        return self.units or self.name


RECORDS: tuple[Precision, ...] = (
    Precision("fp32", "fp32", "fp32", "float32", "float32", unit_roundoff=2.0**-24, floor=1e-5,
              cublas="cuBLAS fp32, TF32 off", tensor_cores=False, tl_dot="ieee"),
    Precision("tf32", "TF32", "tf32", "float32", "float32", unit_roundoff=2.0**-11, floor=2e-3,
              # every TMA stage's kernel (CUDA and Triton, wgmma summing k-steps in order) gave
              # rel_err 3.07e-3 on the 2048 x 1 x 1,048,576 product on an H100
              # (tests/test_offsets64.py), where the operands' TF32 rounding alone gives about
              # 4e-4: about 3e-6 * sqrt(K) beside it, 2^-18.4 per addition; the threshold takes
              # 2^-17, which leaves the floor in place up to K ~ 17,000
              accumulate_u=2.0**-17,
              cublas="cuBLAS with TF32 allowed", tl_dot="tf32", kmajor_only=True,
              cuda_define="PREC_TF32"),
    Precision("3xtf32", "3xTF32", "3xtf32", "float32", "float32", unit_roundoff=2.0**-22,
              floor=1e-5, compared_with="fp32",
              cublas="cuBLAS fp32 (TF32 off): the precision 3xtf32 stands in for",
              units="tf32", products=3, tl_dot="tf32x3", kmajor_only=True,
              cuda_define="PREC_3XTF32",
              plot_note="against cuBLAS fp32 (TF32 off): 3xTF32 stands in for fp32"),
    Precision("bf16", "bf16", "bf16-and-fp16", "bfloat16", "bfloat16", unit_roundoff=2.0**-8,
              floor=2e-2, cublas="cuBLAS bf16 operands and output, fp32 accumulation",
              tl_dot="ieee", cuda_define="PREC_BF16"),
    Precision("fp16", "fp16", "bf16-and-fp16", "float16", "float16", unit_roundoff=2.0**-11,
              floor=1e-2, cublas="cuBLAS fp16 operands and output, fp32 accumulation",
              tl_dot="ieee", cuda_define="PREC_FP16"),
    Precision("fp8", "fp8", "fp8", "float8_e4m3fn", "bfloat16", unit_roundoff=2.0**-4,
              floor=2e-2,
              # Hopper's fp8 wgmma keeps fewer bits of its running sum: measured on an H100
              # (results/2026-11-26-h100/fp8-accuracy.csv, cuBLAS fp8 with fast accumulation and
              # the lab's kernels alike) its error grows like 2.8e-5 * sqrt(K), about 2^-15 per
              # addition; the threshold takes 2^-14
              accumulate_u=2.0**-14,
              cublas="cuBLAS fp8 (torch._scaled_mm, e4m3 with per-tensor scales, bf16 output, "
                     "fast accumulation)",
              scale="tensor", kmajor_only=True, cuda_define="PREC_FP8", min_capability=(8, 9),
              note=" cuBLAS fp8 (`torch._scaled_mm`) takes B column-major only, so its `nn` row "
                   "includes torch's copy of B; kernel against kernel, in `nt`, see "
                   "[docs/stages/persistent.md]({persistent}).",
              plot_note="against cuBLAS fp8 through torch._scaled_mm (per-tensor scales); in "
                        "layout nn its time includes torch's copy of B"),
    Precision("fp8_row", "fp8 row-scaled", "fp8-row-and-block", "float8_e4m3fn", "bfloat16",
              unit_roundoff=2.0**-4, floor=2e-2,
              # the whole K in wgmma's fp8 accumulator, as per-tensor fp8: its sqrt(K) term
              accumulate_u=2.0**-14,
              cublas="cuBLAS fp8 with row-wise scales (torch._scaled_mm, scale_a (M, 1), "
                     "scale_b (1, N), bf16 output, fast accumulation)",
              units="fp8", scale="row", kmajor_only=True, min_capability=(8, 9),
              cuda_define="PREC_FP8",  # fp8's build, with SCALE_ROW (cuda_kernels/_tma.py)
              plot_note="against cuBLAS fp8 with row-wise scales through torch._scaled_mm"),
    Precision("fp8_block", "fp8 block-scaled", "fp8-row-and-block", "float8_e4m3fn", "bfloat16",
              unit_roundoff=2.0**-4,
              # each 128-long partial sum leaves wgmma's accumulator for an fp32 one, so the
              # error no longer grows with K beside C's bf16 rounding (about 1.1e-3): fp32's
              # sqrt(K) term and a floor half fp8's
              floor=1e-2,
              cublas="cuBLAS fp8 with 1 x 128 and 128 x 128 block scales (torch._scaled_mm), "
                     "bf16 output",
              units="fp8", scale="block", kmajor_only=True, min_capability=(8, 9),
              cuda_define="PREC_FP8",  # fp8's build, with SCALE_BLOCK (cuda_kernels/_tma.py)
              plot_note="against cuBLAS fp8 with block scales through torch._scaled_mm where "
                        "this torch offers them, else per-tensor fp8 (the detail says which)"),
)

BY_NAME = {r.name: r for r in RECORDS}
NAMES = tuple(r.name for r in RECORDS)


def get(name: str) -> Precision:
    """The record of precision `name`; LabError (one sentence) for an unknown name."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise LabError(f"unknown precision {name!r}; choose from {', '.join(NAMES)}") from None


def where(**fields) -> tuple[str, ...]:
    """The names of the precisions whose record has these field values, e.g. where(scale="row")
    (scaled=True: those with scales of any kind)."""
    return tuple(r.name for r in RECORDS if all(getattr(r, k) == v for k, v in fields.items()))


def of_dtype(dtype: str) -> str | None:
    """The precision a dtype means when none is named: the first record with those operands
    (float32 tensors: IEEE fp32)."""
    return next((r.name for r in RECORDS if r.dtype == dtype), None)


def elem_bytes(*names: str) -> dict[str, int]:
    """{precision: bytes of one element of A and B} for the precisions named (a launcher's own
    list, in its order)."""
    return {n: get(n).elem_bytes for n in names}


def c_bytes(*names: str) -> dict[str, int]:
    """{precision: bytes of one element of C} for the precisions named."""
    return {n: get(n).c_bytes for n in names}


def cuda_defines(*names: str) -> dict[str, str]:
    """{precision: the define its tensor-core CUDA build takes} for the precisions named (a
    launcher's own list; fp32 builds take none)."""
    return {n: get(n).cuda_define for n in names}
