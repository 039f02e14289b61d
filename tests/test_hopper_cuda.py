"""The TMA stages' CUDA kernels: tma_wgmma.cu, warp_specialized.cu, persistent.cu (sm_90a), their
shared launcher cuda_kernels/_tma.py and the TMA launch of lab/toolchain/tma.py.

CPU: every stage x precision x layout compiles for sm_90a through the stage's OFFER.compile with
no spills, and its SASS holds HGMMA (wgmma) and UTMALDG (TMA loads); the warp-specialized kernels
also move registers between warpgroups (setmaxnreg: USETMAXREG); the generated wrappers match
their generator; the parameters' checks give one sentence each (a ring over 227 KiB named with
its size); geometry: one block per tile, or min(tiles, SMs) for persistent, with the producer's
warpgroup counted; plan(): which operand is copied (tf32 needs both K-major; unaligned lines are
copied in the same orientation) and the tensor maps' dims, strides and boxes; prepare() refuses
a GPU that is not sm_90 (the architecture mocked).

GPU (marked `gpu`; sm_90 only): every stage x precision x layout at edge sizes (M, N, K not
multiples of the tiles), views with offset starts and wide rows, a column-major C, odd leading
dimensions (the aligned copy in the call), operands that change between calls of one Prepared
(the tensor maps follow the tensors through lab.matmul's plans), and K of one element.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
import torch

from helpers import LAYOUTS, ROOT
from lab import check as chk
from lab.errors import LabError
from lab.operands import CUDA, describe
from lab.toolchain.sass import sass

STAGES = ("tma_wgmma", "warp_specialized", "persistent")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
         "3xtf32": torch.float32}


def _mod(stage):
    return importlib.import_module(f"cuda_kernels.{stage}")


# every stage with every precision it offers (persistent adds 3xtf32)
CASES = [(s, p) for s in STAGES for p in _mod(s).OFFER.precisions]


def _one_sentence(text: str) -> None:
    assert "\n" not in text and text.count(". ") == 0, text


# ------------------------------------------------------------------------------ CPU


def test_generated_wrappers_match_their_generator():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_wgmma_ops.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stage,precision", CASES)
def test_builds_compile_without_spills_and_issue_hgmma_and_tma(stage, precision, layout):
    build, (grid, block, smem) = _mod(stage).OFFER.compile({}, 1000, 1000, 1000, layout, precision)
    assert build.spill_stores == 0 and build.spill_loads == 0, build.log
    text = sass(build)
    width = {"bf16": "64x256x16", "fp16": "64x256x16", "tf32": "64x256x8",
             "3xtf32": "64x128x8"}[precision]
    assert re.search(rf"HGMMA\.{width}\.F32", text), "no HGMMA of the tile's shape in the SASS"
    assert "UTMALDG.2D" in text, "no TMA load in the SASS"
    assert ("USETMAXREG" in text) == (stage != "tma_wgmma")
    assert smem <= 227 * 1024


@pytest.mark.parametrize("stage", ["warp_specialized", "persistent"])
def test_3xtf32_builds_hold_b_tails_in_each_slot(stage):
    """3xtf32 (tma_tiles.cuh's split3x) is offered by the stages with a producer warpgroup, whose
    idle warps split B: a 128 x 128 tile whose slots hold A, B and B's tails (4 x 48 KiB, and
    persistent's C staging: 225 KiB), A from registers (LDSM, then HGMMA with a register A
    operand), three HGMMA per k-step; a wider tile's ring is refused in one sentence that counts
    the tails."""
    assert [s for s in STAGES if "3xtf32" in _mod(s).OFFER.precisions] == \
        ["warp_specialized", "persistent"]
    m = _mod(stage)
    build, (grid, block, smem) = m.OFFER.compile({}, 4096, 4096, 4096, "nn", "3xtf32")
    assert block[0] == 384 and grid[0] == (132 if stage == "persistent" else 32 * 32)
    staging = 2 * 2 * 64 * 128 if stage == "persistent" else 0
    assert smem == 4 * (128 + 2 * 128) * 128 + 1024 + staging <= 227 * 1024
    text = sass(build)
    hgmma = re.findall(r"HGMMA\.64x128x8\.F32\.TF32 R\d+, R\d+, gdesc", text)
    assert len(hgmma) % 12 == 0 and hgmma, "no register-A HGMMA, or not three per k-step"
    assert "LDSM" in text and "STS.128" in text  # A's fragments; the splitters' heads and tails
    with pytest.raises(LabError) as e:
        m.OFFER.validate({"BN": 256}, "3xtf32")
    assert "B's tails" in str(e.value)
    _one_sentence(str(e.value))
    m.OFFER.validate({"BN": 256}, "bf16")  # the same ring without tails fits


def test_tf32_builds_read_both_operands_k_major():
    """TF32 has no transpose bits: every layout's build is the nt one, the others are copied."""
    m = _mod("tma_wgmma")
    for layout in LAYOUTS:
        b, _ = m.OFFER.compile({}, 256, 256, 256, layout, "tf32")
        options = " ".join(b.options)
        assert "-DTRANS_A=0" in options and "-DTRANS_B=1" in options


@pytest.mark.parametrize("stage", STAGES)
def test_geometry(stage):
    m = _mod(stage)
    _, (grid, block, smem) = m.OFFER.compile({}, 4096, 4096, 4096, "nn", "bf16")
    tiles = (4096 // 128) * (4096 // 256)
    assert grid[0] == (min(tiles, 132) if stage == "persistent" else tiles)
    assert block[0] == (256 if stage == "tma_wgmma" else 384)
    staging = 2 * 2 * 64 * 128 if stage == "persistent" else 0  # C's TMA-store chunks
    assert smem == 4 * (128 + 256) * 128 + 1024 + staging
    wg = m.STAGE.warpgroups
    _, (grid, block, _) = m.OFFER.compile({wg: 1, "BN": 128}, 100, 300, 64, "nn", "bf16")
    assert grid[0] == 2 * 3 and block[0] == (128 if stage == "tma_wgmma" else 256)


@pytest.mark.parametrize("stage", STAGES)
def test_parameter_checks_are_one_sentence(stage):
    m = _mod(stage)
    wg = m.STAGE.warpgroups
    for params, words in (({"BN": 96}, "BN must be one of"), ({"bogus": 1}, "no parameter bogus"),
                          ({"STAGES": 8}, "more than the 227 KiB"), ({"group": 0}, "group")):
        with pytest.raises(LabError) as e:
            m.OFFER.validate(params, "bf16")
        assert words in str(e.value)
        _one_sentence(str(e.value))
    m.OFFER.validate({wg: 1, "BN": 128, "STAGES": 8}, "bf16")  # 8 x 24 KiB: fits


def _problem(M, N, K, layout, precision, lda_pad=0):
    dt = DTYPE[precision]

    def mat(rows, cols, trans, pad):
        if trans:
            return torch.zeros(cols, rows + pad, dtype=dt)[:, :rows].t()
        return torch.zeros(rows, cols + pad, dtype=dt)[:, :cols]

    a = mat(M, K, layout[0] == "t", lda_pad)
    b = mat(K, N, layout[1] == "t", 0)
    c = torch.empty(M, N, dtype=dt)
    return describe(a, b, c, CUDA, precision)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_plan_copies_only_what_tma_cannot_read(layout):
    from cuda_kernels._tma import plan

    assert plan(_problem(64, 64, 64, layout, "bf16"))["copies"] == []  # every 16-bit layout
    w = plan(_problem(64, 64, 64, layout, "tf32"))
    copied = {name for name, _, _ in w["copies"]}
    assert copied == {n for n, want, have in (("A", "n", layout[0]), ("B", "t", layout[1]))
                      if want != have}
    assert w["layout"] == "nt"
    # K = 3001: a row-major A's and a column-major B's lines are 6002 bytes apart: copied, each
    # in its own orientation
    w = plan(_problem(64, 64, 3001, layout, "bf16"))
    assert [n for n, _, _ in w["copies"]] == [n for n, k_lines in (("A", layout[0] == "n"),
                                                                   ("B", layout[1] == "t"))
                                              if k_lines]
    w = plan(_problem(64, 64, 64, layout, "bf16", lda_pad=3))
    assert [n for n, _, _ in w["copies"]] == ["A"]
    t, col, ld = w["a"]
    assert col == (layout[0] == "t") and ld % 8 == 0 and t.data_ptr() % 16 == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tf32_with_a_through_registers_copies_only_tn(layout):
    """persistent's tf32 (tf32_regs): B is read K-major, A either way (registers where it lies
    M-major); nn swaps the operands' roles (C^T = B^T A^T: the kernel's A is B^T, M-major, its B
    is A^T, K-major) instead of copying B; tn still copies B K-major. The build the offer compiles
    for each layout matches: TRANS_A for an M-major A, C_TRANS (and no TMA store) for nn, and C^T's
    grid for a non-square nn."""
    from cuda_kernels._tma import plan

    w = plan(_problem(64, 96, 32, layout, "tf32"), regs=True)
    assert [n for n, _, _ in w["copies"]] == (["B"] if layout == "tn" else [])
    assert w["swap"] == (layout == "nn")
    assert w["layout"] == ("nt" if layout == "nt" else "tt")
    if w["swap"]:
        (ta, a_col, lda), (tb, b_col, ldb) = w["a"], w["b"]
        assert ta.shape == (96, 32) and tb.shape == (32, 64) and a_col and b_col
        assert lda == 96 and ldb == 32  # B's and A's leading dimensions
    assert plan(_problem(64, 96, 32, layout, "3xtf32"), regs=True)["swap"] is False
    build, (grid, _, smem) = _mod("persistent").OFFER.compile({}, 1024, 4096, 1024, layout, "tf32")
    options = " ".join(build.options)
    assert ("-DTRANS_A=1" in options) == (layout != "nt") and "-DTRANS_B=1" in options
    assert ("-DC_TRANS=1" in options) == (layout == "nn")
    assert ("-DTMA_STORE=1" in options) == (layout != "nn")
    assert build.spill_stores == 0 and build.spill_loads == 0, build.log
    text = sass(build)
    assert re.search(r"HGMMA\.64x256x8\.F32\.TF32 R\d+, R\d+, gdesc", text) if layout != "nt" \
        else re.search(r"HGMMA\.64x256x8\.F32\.TF32 R\d+, gdesc", text)
    # C^T of 4096 x 1024 in clusters of two 128 x 256 tiles: 16 x 4 cluster tiles, all resident
    tiles = (4096 // 256) * (1024 // 256) if layout == "nn" else (1024 // 128) * (4096 // 256)
    assert grid[0] == min(tiles * (2 if layout == "nn" else 1), 132)


def test_tensor_maps_boxes():
    from cuda_kernels._tma import map_specs, plan

    w = plan(_problem(304, 512, 200, "nn", "bf16"))
    sa, sb = map_specs(w["a"], w["b"], 304, 512, 200, 128, 256, 2)
    assert (sa.dims, sa.stride, sa.box) == ((200, 304), 200, (64, 128))  # K-major A
    assert (sb.dims, sb.stride, sb.box) == ((512, 200), 512, (64, 64))  # N-major B
    w = plan(_problem(304, 512, 200, "tt", "bf16"))
    sa, sb = map_specs(w["a"], w["b"], 304, 512, 200, 128, 128, 2)  # a cluster of two: BN / 2
    assert (sa.dims, sa.stride, sa.box) == ((304, 200), 304, (64, 64))  # M-major A
    assert (sb.dims, sb.stride, sb.box) == ((200, 512), 200, (64, 128))  # K-major B
    # a 500-column bf16 B (1000-byte lines) is copied into 504-element lines
    w = plan(_problem(304, 500, 200, "nn", "bf16"))
    assert [n for n, _, _ in w["copies"]] == ["B"] and w["b"][2] == 504


@pytest.mark.parametrize("stage", STAGES)
def test_other_gpus_are_refused_in_one_sentence(stage, monkeypatch):
    import cuda_kernels._tma as tma

    monkeypatch.setattr(tma, "device_arch_of", lambda p: "sm_80")
    with pytest.raises(LabError) as e:
        _mod(stage).STAGE.require_hopper(None)
    assert "sm_90" in str(e.value) and "sm_80" in str(e.value)
    _one_sentence(str(e.value))


# ------------------------------------------------------------------------------ GPU

gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 GPU (H100, H200)")


def _operands(M, N, K, layout, precision, seed=0):
    return chk.make_inputs(M, N, K, seed, "cuda", DTYPE[precision], layout)


def _check(c, a, b, precision):
    res = chk.compare(c.float(), chk.reference(a, b), a.shape[1], precision)
    assert res.passed, res.reason


@gpu
@needs_hopper
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stage,precision", CASES)
def test_every_layout_at_edge_sizes(stage, layout, precision):
    m = _mod(stage)
    for M, N, K in ((333, 257, 129), (129, 520, 1000), (64, 8, 8), (1, 1, 1)):
        a, b = _operands(M, N, K, layout, precision)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPE[precision])
        m.prepare(a, b, c, precision=precision)()
        _check(c, a, b, precision)


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_views_odd_leading_dimensions_and_column_major_c(stage):
    m = _mod(stage)
    big = torch.randn(700, 900, device="cuda").bfloat16()
    a = big[3:300, 5:262]  # offset start (unaligned), rows 900 apart
    b = torch.randn(257, 3001, device="cuda").bfloat16()[:, :129]  # 6002-byte lines: copied
    c = torch.full((129, 297), float("nan"), device="cuda").bfloat16().t()  # column-major C
    m.prepare(a, b, c, precision="bf16")()
    _check(c, a, b, "bf16")
    # tf32 (persistent: nn as C^T = B^T A^T, tt with A through registers) into a column-major C
    # and into a row-major C with an odd leading dimension
    for layout in LAYOUTS:
        a, b = _operands(300, 129, 257, layout, "tf32")
        for c in (torch.full((129, 300), float("nan"), device="cuda").t(),
                  torch.full((300, 135), float("nan"), device="cuda")[:, 3:132]):
            m.prepare(a, b, c, precision="tf32")()
            _check(c, a, b, "tf32")
    for M, N, K in ((7919 // 8, 6007 // 8, 3001), (1, 1000, 3001)):
        a, b = _operands(M, N, K, "nn", "bf16")
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        m.prepare(a, b, c, precision="bf16")()
        _check(c, a, b, "bf16")


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_lab_matmul_replays_on_new_tensors(stage):
    import lab

    for i in range(3):  # new tensors each call: the maps follow their addresses
        a, b = _operands(300, 200, 100, "nn", "bf16", seed=i)
        c = lab.matmul(a, b, stage=stage, backend="cuda")
        _check(c, a, b, "bf16")
    a, b = _operands(300, 200, 100, "nn", "bf16", seed=7)
    out = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
    for i in range(2):  # the same tensors, new values
        a.copy_(torch.randn_like(a.float()).bfloat16())
        lab.matmul(a, b, stage=stage, backend="cuda", out=out)
        _check(out, a, b, "bf16")


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", ["warp_specialized", "persistent"])
def test_3xtf32_is_as_accurate_as_cublas_fp32_over_many_tiles(stage):
    """Many tiles (persistent: blocks that walk several, 256 and 162 tiles on 132 SMs), pairs of
    k-tiles with and without a last odd one (K = 4000: 125 k-tiles), both orientations of B (nn
    copies it K-major): the error against float64 is at most cuBLAS fp32's on the same operands."""
    m = _mod(stage)
    matmul = torch.backends.cuda.matmul
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    try:
        for M, N, K, layout in ((2048, 2048, 4000, "nt"), (1100, 2200, 1000, "nn")):
            a, b = _operands(M, N, K, layout, "3xtf32")
            c = torch.full((M, N), float("nan"), device="cuda")
            m.prepare(a, b, c, precision="3xtf32")()
            ref = chk.reference(a, b)
            ours = chk.compare(c, ref, K, "3xtf32")
            cublas = chk.compare(torch.matmul(a, b), ref, K, "fp32")
            assert ours.passed, ours.reason
            assert ours.rel_err <= cublas.rel_err, (M, N, K, ours.rel_err, cublas.rel_err)
    finally:
        matmul.allow_tf32 = before
