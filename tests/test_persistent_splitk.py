"""persistent's split-K (the SPLITK knob: cuda_kernels/variants/persistent.cu's SPLITK build and
cuda_kernels/splitk_reduce.cu's 16-bit outputs), for layers with few output tiles and a long K.

CPU: the split build compiles for sm_90a in bf16, fp16 and fp8 without spills, issues wgmma and
TMA loads, stores its partial sums as 8-byte global stores and has no TMA store of C; the
reduction compiles for bf16 and fp16 C and converts with cvt.rn; the grid counts work units
(tiles x splits, at most the SMs); SPLITK is kept to one split per k-tile and refused in one
sentence where the kernel's sum is not the plain accumulators (tf32, 3xtf32, fp8_row, fp8_block);
a split build is never the lesson; the launch (kernels mocked) passes the workspace, its leading
dimension and the split count after the kernel's arguments and adds the reduction as the call's
last step.

GPU (marked `gpu`; sm_90 only): every layout at edge sizes with 2, 3 and 16 splits and both
cluster sizes, against the float64 reference; a column-major C and a C with odd leading dimension
(the reduction's single-element stores); two calls give the same bits (the fixed-order sum).
"""

from __future__ import annotations

import re

import pytest
import torch

from helpers import (C_DTYPE as OUT, LAYOUTS, check_scaled, check_sliced_operands,
                     gpu_operands, mock_tma_launches, needs_hopper,
                     one_sentence as _one_sentence, zero_problem as _problem)
from lab.base.errors import LabError
from lab.toolchain.sass import sass

import cuda_kernels._tma as tma
from cuda_kernels import persistent
from cuda_kernels.persistent import STAGE

SPLIT_PRECISIONS = ("bf16", "fp16", "fp8")


# ------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("precision", SPLIT_PRECISIONS)
def test_split_build_stores_partial_sums_not_c(precision):
    layout = "nt" if precision == "fp8" else "tn"
    build, (grid, block, smem) = persistent.OFFER.compile({"SPLITK": 4}, 256, 2304, 16384,
                                                          layout, precision)
    assert "-DSPLITK=1" in " ".join(build.options) and "variants" in build.source
    assert build.spill_bytes == 0
    text = sass(build)
    assert re.search(r"[HQ]GMMA\.64x256", text) and "UTMALDG" in text
    assert "UTMASTG" not in text, "C leaves through the reduction, not TMA stores"
    assert re.search(r"STG\.E\.64", text), "the workspace: 8-byte stores of accumulator pairs"
    # 256 x 2304 is 2 x 9 tiles of 128 x 256: 18 tiles x 4 splits = 72 units, one block each
    assert grid[0] == 72 and block[0] == 384
    assert smem == 4 * (128 + 256) * 128 + 1024  # no staging for C's TMA stores


@pytest.mark.parametrize("out", ("OUT_BF16", "OUT_F16"))
def test_reduction_rounds_to_16_bit_c(out):
    build = tma.compile_kernel("splitk_reduce.cu", "splitk_reduce",
                               {"SPLITK": 3, "VEC_C": 1, "RTHREADS": 256, out: 1})
    text = sass(build)
    assert len(re.findall(r"LDG\.E\.128", text)) == 3, "one float4 of each slab"
    assert "F2FP" in text and "STG.E.64" in text


def test_splits_are_units_of_the_walk_and_kept_to_the_k_tiles():
    _, (grid, _, _) = persistent.OFFER.compile({"SPLITK": 16}, 4096, 4096, 4096, "nt", "bf16")
    assert grid[0] == 132  # 512 tiles x 16 splits: one resident block per SM
    # K = 100 in bf16 is two k-tiles of 64: at most two splits, and each has one
    r = STAGE.resolve({"SPLITK": 16}, 256, 256, 100, "bf16", 132)
    assert r["SPLITK"] == 2
    _, (grid, _, _) = persistent.OFFER.compile({"SPLITK": 16}, 256, 256, 100, "nt", "bf16")
    assert grid[0] == 2 * 1 * 2
    assert STAGE.resolve({"SPLITK": 8}, 256, 256, 100, "fp8", 132)["SPLITK"] == 1  # one k-tile
    assert STAGE.resolve({}, 256, 256, 8192, "bf16", 132)["SPLITK"] == 1  # 0: no split
    assert tma.splits_for(5, 0, "bf16") == 1
    # the automatic CLUSTER of a split build is 1 (C is not stored by TMA, yet no cluster)
    assert STAGE.resolve({"SPLITK": 4}, 256, 2304, 16384, "bf16", 132)["CLUSTER"] == 1
    assert STAGE.resolve({"SPLITK": 1, "STORE": 2}, 256, 2304, 16384, "bf16", 132)["CLUSTER"] == 2


def test_split_builds_are_never_the_lesson_and_name_the_reduction():
    d = {"CLUSTER": 1, "TMA_STORE": 0, "CONSUMERS": 2}
    assert persistent.lesson_case(d, "nn")
    assert not persistent.lesson_case({**d, "SPLITK": 1}, "nn")
    kernels = persistent.OFFER.kernels
    assert kernels({"SPLITK": 4}, "bf16") == ("matmul_persistent", "splitk_reduce")
    assert kernels({"SPLITK": 1}, "bf16") == ("matmul_persistent",)


@pytest.mark.parametrize("precision", ("tf32", "3xtf32", "fp8_row", "fp8_block"))
def test_split_is_refused_in_one_sentence_where_the_sum_is_not_plain(precision):
    with pytest.raises(LabError) as e:
        persistent.OFFER.validate({"SPLITK": 2}, precision)
    assert "split-K runs bf16, fp16, fp8" in str(e.value) and precision in str(e.value)
    _one_sentence(str(e.value))
    persistent.OFFER.validate({"SPLITK": 1}, precision)


@pytest.mark.parametrize("precision", SPLIT_PRECISIONS)
def test_launch_passes_the_workspace_and_adds_the_reduction(precision, monkeypatch):
    import numpy as np

    seen, reduced = mock_tma_launches(monkeypatch, tma)
    monkeypatch.setattr(tma, "max_active_clusters", lambda *a: 66)
    M, N, K = 300, 1001, 4096  # C's lines are 2002 bytes: no buffer, the reduction writes C
    p = _problem(M, N, K, "nt", precision)
    out = STAGE.launch(p, precision, c=STAGE.config(precision, SPLITK=3))
    assert out.extra["splits"] == 3 and not out.extra["tma_store"] and not out.extra["c_buffer"]
    assert len(out.steps) == 2  # the kernel, then the reduction
    args = seen["args"]
    work, ldw, splits = args[-3:]
    assert isinstance(ldw, np.int64) and ldw == 1004 and int(splits) == 3
    assert work.dtype == torch.float32 and work.numel() == 3 * M * 1004
    assert args[2] is p.c.tensor and 2 not in {s.arg for s in seen["specs"]}
    if precision == "fp8":  # the scales still follow ldc, the workspace after them
        assert args[7] is p.scales[0] and args[8] is p.scales[1] and len(args) == 12
    opts = " ".join(reduced["build"].options)
    assert "-DSPLITK=3" in opts and ("-DOUT_F16=1" if precision == "fp16" else "-DOUT_BF16=1") \
        in opts
    assert "-DVEC_C=0" in opts  # 1001 columns: rows off 8 bytes, single-element stores
    r = reduced["args"]
    assert r[0] is work and r[1] is p.c.tensor and int(r[4]) == 1004 and int(r[5]) == 1001
    assert reduced["grid"][0] == -(-M * 251 // 256)
    # SPLITK=1: the unsplit kernel, one step
    out = STAGE.launch(p, precision, c=STAGE.config(precision, SPLITK=1))
    assert out.extra["splits"] == 1 and len(out.steps) in (1, 2)  # (2: the aligned C buffer)
    assert "-DSPLITK" not in " ".join(seen["build"].options)


# ------------------------------------------------------------------------------ GPU
gpu = pytest.mark.gpu


@gpu
@needs_hopper
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("precision", SPLIT_PRECISIONS)
def test_split_k_at_edge_sizes(precision, layout):
    for M, N, K in ((333, 257, 1029), (129, 520, 5000), (64, 8, 8), (1, 1, 300), (256, 2304, 4096)):
        a, b, scales = gpu_operands(M, N, K, layout, precision)
        for params in ({"SPLITK": 2}, {"SPLITK": 3, "CLUSTER": 2},
                       {"SPLITK": 16, "CONSUMERS": 3, "BN": 128}):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
            persistent.prepare(a, b, c, precision=precision, **params, **scales)()
            check_scaled(c, a, b, precision, scales)


@gpu
@needs_hopper
@pytest.mark.parametrize("precision", SPLIT_PRECISIONS)
def test_split_k_into_odd_and_column_major_c_gives_the_same_bits_twice(precision):
    M, N, K = 300, 129, 3001 if precision != "fp8" else 3008
    a, b, scales = gpu_operands(M, N, K, "nt", precision, seed=3)
    dt = OUT[precision]
    for c in (torch.full((N, M), float("nan"), device="cuda", dtype=dt).t(),
              torch.full((M, 135), float("nan"), device="cuda", dtype=dt)[:, 3:132]):
        run = persistent.prepare(a, b, c, precision=precision, SPLITK=5, **scales)
        run()
        check_scaled(c, a, b, precision, scales)
        first = c.clone()
        c.fill_(float("nan"))
        run()
        assert torch.equal(c.view(torch.int16), first.view(torch.int16)), "not reproducible"


@gpu
@needs_hopper
@pytest.mark.parametrize("precision", SPLIT_PRECISIONS)
def test_split_k_on_sliced_operands_and_a_k_past_2_to_the_17(precision):
    """Operands that are views into larger tensors, at an aligned offset (read in place by TMA)
    and at an odd one (copied by the plan), and a K of 2^17 + 384 split 16 ways (8,216 of K a
    unit), into a C view at a column offset."""
    check_sliced_operands(persistent.prepare, precision, SPLITK=4)
    M, N, K = 96, 72, 2 ** 17 + 384
    a, b, scales = gpu_operands(M, N, K, "tn", precision, seed=12)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
    persistent.prepare(a, b, c, precision=precision, SPLITK=16, **scales)()
    check_scaled(c, a, b, precision, scales)
