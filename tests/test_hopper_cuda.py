"""The TMA stages' CUDA kernels: tma_wgmma.cu, warp_specialized.cu, persistent.cu (sm_90a), their
shared launcher cuda_kernels/_tma.py and the TMA launch of lab/toolchain/tma.py.

CPU: every stage x precision x layout compiles for sm_90a through the stage's OFFER.compile with
no spills, and its SASS holds HGMMA (wgmma; fp8's e4m3 wgmma is QGMMA ... .E4M3.E4M3) and UTMALDG
(TMA loads); the warp-specialized kernels also move registers between warpgroups (setmaxnreg:
USETMAXREG); the generated wrappers match their generator; the parameters' checks give one
sentence each (a ring over 227 KiB named with its size); geometry: one block per tile, or
min(tiles, SMs) for persistent, with the producer's warpgroup counted; plan(): which operand is
copied (tf32 and fp8 need both K-major; unaligned lines are copied in the same orientation) and
the tensor maps' dims, strides and boxes; fp8's launch (tma_launcher mocked): its bf16 C map's
64-column box and the scales as the last two kernel arguments; prepare() refuses a GPU that is
not sm_90 (the architecture mocked).

GPU (marked `gpu`; sm_90 only): every stage x precision x layout at edge sizes (M, N, K not
multiples of the tiles; fp8 with e4m3 operands and per-tensor scales, lab.check's
make_scaled_inputs, checked against the scaled reference), views with offset starts and wide
rows, a column-major C, odd leading dimensions (the aligned copy in the call), operands that
change between calls of one Prepared (the tensor maps follow the tensors through lab.matmul's
plans; fp8's scales too, read on the GPU in every call), fp8 over many tiles and in clusters,
and K of one element.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
import torch

from helpers import LAYOUTS, ROOT, check_scaled, gpu_operands, needs_hopper
from lab import check as chk
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.dtypes import OUT_DTYPE_NAMES
from lab.base.needs import CUDA
from lab.toolchain.sass import sass

STAGES = ("tma_wgmma", "warp_specialized", "persistent")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
         "3xtf32": torch.float32, "fp8": torch.float8_e4m3fn}
# C's dtype (the fp8 precisions: bfloat16), for every precision a stage offers
OUT = {p: getattr(torch, OUT_DTYPE_NAMES[p]) for p in (*DTYPE, "fp8_row", "fp8_block")}


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
    # fp8's wgmma (e4m3 x e4m3, k = 32) is QGMMA in the SASS, the others HGMMA
    mma = {"bf16": r"HGMMA\.64x256x16\.F32\.BF16", "fp16": r"HGMMA\.64x256x16\.F32",
           "tf32": r"HGMMA\.64x256x8\.F32\.TF32", "3xtf32": r"HGMMA\.64x128x8\.F32\.TF32",
           "fp8": r"QGMMA\.64x256x32\.F32\.E4M3\.E4M3",
           "fp8_row": r"QGMMA\.64x256x32\.F32\.E4M3\.E4M3",
           # two accumulator sets (the k-tile's product beside the sum): a 128-column tile
           "fp8_block": r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3"}[precision]
    assert re.search(mma, text), "no wgmma of the tile's shape and type in the SASS"
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
def test_fp8_builds_read_both_operands_k_major_and_scale_c(stage):
    """8-bit wgmma has no transpose bits: every layout's fp8 build is the nt one (the others are
    copied), with a k-step of 32 bytes like bf16's (the same slots: bf16's shared memory and grid),
    four QGMMA per k-tile of 128, the two scales loaded once (LDG) and C rounded to bf16
    (F2FP.BF16), no spills."""
    m = _mod(stage)
    assert "fp8" in m.OFFER.precisions
    _, bf16_geometry = m.OFFER.compile({}, 4096, 4096, 4096, "nt", "bf16")
    for layout in LAYOUTS:
        b, geometry = m.OFFER.compile({}, 4096, 4096, 4096, layout, "fp8")
        options = " ".join(b.options)
        assert "-DPREC_FP8=1" in options
        assert "-DTRANS_A=0" in options and "-DTRANS_B=1" in options
        assert b.spill_stores == 0 and b.spill_loads == 0, b.log
        assert geometry == bf16_geometry
    text = sass(b)
    assert len(re.findall(r"QGMMA\.64x256x32\.F32\.E4M3\.E4M3 R\d+, gdesc", text)) % 4 == 0
    assert "HGMMA" not in text
    assert len(re.findall(r"LDG\.E\S*", text)) == 2, "scale_a and scale_b: one load each"
    assert "F2FP.BF16" in text


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


def test_a_cluster_takes_whole_64_column_boxes_of_b():
    """persistent with BN 192: the automatic CLUSTER is 1 even where C is stored from registers
    (two blocks would multicast 96 columns each, and an N-major B is loaded in 64-column boxes);
    CLUSTER=2 with it is refused in one sentence."""
    m = _mod("persistent")
    c = m.STAGE.resolve({"BN": 192}, 1000, 1001, 512, "bf16", 132, store=False)
    assert c["CLUSTER"] == 1
    assert m.STAGE.resolve({"BN": 256}, 1000, 1001, 512, "bf16", 132, store=False)["CLUSTER"] == 2
    build, _ = m.OFFER.compile({"BN": 192}, 1000, 1001, 512, "nn", "bf16")  # compiles
    assert build is not None
    with pytest.raises(LabError, match="BN must be a multiple of 128") as e:
        m.OFFER.validate({"BN": 192, "CLUSTER": 2}, "bf16")
    _one_sentence(str(e.value))


def _problem(M, N, K, layout, precision, lda_pad=0):
    dt = DTYPE[precision]

    def mat(rows, cols, trans, pad):
        if trans:
            return torch.zeros(cols, rows + pad, dtype=dt)[:, :rows].t()
        return torch.zeros(rows, cols + pad, dtype=dt)[:, :cols]

    a = mat(M, K, layout[0] == "t", lda_pad)
    b = mat(K, N, layout[1] == "t", 0)
    c = torch.empty(M, N, dtype=OUT[precision])
    scales = (torch.full((1,), 0.5), torch.full((1,), 3.0)) if precision == "fp8" else None
    return describe(a, b, c, CUDA, precision, scales)


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


def test_the_k_major_copies_compile_for_fp32_and_bytes():
    """transpose.cu: tf32's copy (transpose_f32) and fp8's (transpose_u8, one byte an element)
    compile without spills (the GPU tests of fp8 in nn, tn and tt run transpose_u8)."""
    from cuda_kernels._build import compile_kernel, resources

    for name, smem, block in (("transpose_f32", 32 * 33 * 4, (32, 8, 1)),
                              ("transpose_u8", 64 * 17 * 4, (16, 16, 1))):
        b = compile_kernel("transpose.cu", name, {})
        r = resources(b, (1, 1, 1), block, 0)
        assert r["spill_bytes"] == 0, (name, r)
        assert r["smem_static"] == smem, (name, r)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp8_plan_copies_operands_that_are_not_k_major(layout):
    """fp8 reads both operands K-major (as 3xtf32; persistent's register-A is tf32's only): an A
    that is column-major and a B that is row-major are copied, nt copies nothing; a K-major line
    of fp8 needs K % 16 == 0 (16 bytes), else it is copied in its own orientation."""
    from cuda_kernels._tma import plan

    for regs in (False, True):
        w = plan(_problem(64, 96, 64, layout, "fp8"), regs=regs)
        assert [n for n, _, _ in w["copies"]] == [n for n, want, have in (("A", "n", layout[0]),
                                                                          ("B", "t", layout[1]))
                                                  if want != have]
        assert w["layout"] == "nt" and w["swap"] is False
        for name, dst, src in w["copies"]:
            assert dst.dtype == torch.float8_e4m3fn and dst.shape == src.shape
        (ta, a_col, lda), (tb, b_col, ldb) = w["a"], w["b"]
        assert (a_col, b_col, lda, ldb) == (False, True, 64, 64)
    w = plan(_problem(64, 96, 40, "nt", "fp8"))  # 40-byte lines: copied into 48-byte ones
    assert [n for n, _, _ in w["copies"]] == ["A", "B"] and w["a"][2] == w["b"][2] == 48


@pytest.mark.parametrize("stage", STAGES)
def test_fp8_launch_stores_a_bf16_c_and_passes_the_scales(stage, monkeypatch):
    """fp8's launch (the kernel launch mocked, no GPU): A's and B's maps have bf16's 128-byte
    boxes, 128 e4m3 elements of K; C's map (persistent's TMA stores) has bf16's 64-column box; the
    two scale tensors are the kernel's last arguments, after ldc, as the tensors themselves (a
    plan swaps them); a tn problem copies both operands K-major first."""
    import numpy as np

    import cuda_kernels._tma as tma

    seen = {}

    class Fake:
        step = (lambda *args: None, ())

    def fake_launcher(build, grid, block, args, smem, specs, cluster):
        seen.update(build=build, args=args, specs=specs, cluster=cluster)
        return Fake()

    copies = []

    def fake_copy_launcher(build, grid, block, args):  # copy_step's transposes
        copies.append((build.kernel, block))
        return Fake()

    monkeypatch.setattr(tma, "tma_launcher", fake_launcher)
    monkeypatch.setattr(tma, "launcher", fake_copy_launcher)
    m = _mod(stage)
    p = _problem(256, 512, 256, "tn", "fp8")
    out = m.STAGE.launch(p, "fp8", c=m.STAGE.config("fp8"))
    assert out.extra["copies"] == ("A", "B") and len(out.steps) == 3
    # both K-major copies are transpose.cu's byte transpose (16 x 16 threads), not torch's copy_
    assert copies == [("transpose_u8", (16, 16, 1))] * 2
    assert "-DPREC_FP8=1" in " ".join(seen["build"].options)
    args, specs = seen["args"], {s.arg: s for s in seen["specs"]}
    assert args[7] is p.scales[0] and args[8] is p.scales[1] and len(args) == 9
    assert isinstance(args[6], np.int64)  # ldc, before them
    assert specs[0].box == (128, 128) and specs[0].dims == (256, 256)  # K-major A: {K, M}
    assert specs[1].box == (128, 256 // seen["cluster"]) and specs[1].dims == (256, 512)
    if stage == "persistent":
        assert out.extra["tma_store"] and specs[2].box == (64, 64)  # bf16 C: 128-byte chunks
        assert specs[2].dims == (512, 256) and specs[2].stride == 512
    else:
        assert 2 not in specs and args[2] is p.c.tensor
    # the bf16 build's C map: the same box (its ELEM_BYTES is C's)
    assert tma.C_BYTES["fp8"] == tma.C_BYTES["bf16"] == 2 and tma.ELEM_BYTES["fp8"] == 1


def test_a_c_with_lines_off_16_bytes_goes_through_an_aligned_buffer(monkeypatch):
    """persistent (TMA stores of C): a bf16 C of 1001 columns (2002-byte lines, which no tensor
    map can write) is computed into an aligned buffer through TMA stores and copied into C as the
    launch's last step; tma_wgmma, without TMA stores, writes such a C directly."""
    import cuda_kernels._tma as tma

    seen = {}

    class Fake:
        step = (lambda *args: None, ())

    def fake_launcher(build, grid, block, args, smem, specs, cluster):
        seen.update(args=args, specs={s.arg: s for s in specs}, cluster=cluster)
        return Fake()

    monkeypatch.setattr(tma, "tma_launcher", fake_launcher)
    # clusters of two ask the driver how many fit at once: 66 on an H100's 132 SMs
    monkeypatch.setattr(tma, "max_active_clusters", lambda *a: 66)
    p = _problem(300, 1001, 256, "nn", "bf16")
    out = _mod("persistent").STAGE.launch(p, "bf16", c=_mod("persistent").STAGE.config("bf16"))
    # through the buffer, the automatic CLUSTER is 2 (as where C is stored from registers)
    assert out.extra["c_buffer"] and out.extra["tma_store"] and seen["cluster"] == 2
    buf = seen["args"][2]
    assert buf is not p.c.tensor and buf.shape == (300, 1001) and buf.stride(0) % 8 == 0
    assert seen["args"][6] == buf.stride(0)  # ldc: the buffer's
    assert seen["specs"][2].stride == buf.stride(0) and seen["specs"][2].dims == (1001, 300)
    run, args = out.steps[-1]
    assert run is torch.Tensor.copy_ and args[0] is p.c.tensor and args[1] is buf
    # an aligned C: no buffer
    p = _problem(300, 1024, 256, "nn", "bf16")
    out = _mod("persistent").STAGE.launch(p, "bf16", c=_mod("persistent").STAGE.config("bf16"))
    assert not out.extra["c_buffer"] and seen["args"][2] is p.c.tensor and len(out.steps) == 1
    # tma_wgmma stores from registers: C as it is
    p = _problem(300, 1001, 256, "nn", "bf16")
    out = _mod("tma_wgmma").STAGE.launch(p, "bf16", c=_mod("tma_wgmma").STAGE.config("bf16"))
    assert not out.extra["c_buffer"] and seen["args"][2] is p.c.tensor and 2 not in seen["specs"]


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


@gpu
@needs_hopper
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("stage,precision", CASES)
def test_every_layout_at_edge_sizes(stage, layout, precision):
    m = _mod(stage)
    for M, N, K in ((333, 257, 129), (129, 520, 1000), (64, 8, 8), (1, 1, 1)):
        a, b, scales = gpu_operands(M, N, K, layout, precision)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
        m.prepare(a, b, c, precision=precision, **scales)()
        check_scaled(c, a, b, precision, scales)


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
    check_scaled(c, a, b, "bf16")
    # tf32 (persistent: nn as C^T = B^T A^T, tt with A through registers) and fp8 (both operands
    # K-major: copied where they are not, and K = 257 bytes per line: copied where they are) into
    # a column-major C (C^T = B^T A^T, the scales the same) and into a row-major C with an odd
    # leading dimension (lines off 16-byte boundaries: direct stores)
    for precision in ("tf32", "fp8"):
        for layout in LAYOUTS:
            a, b, scales = gpu_operands(300, 129, 257, layout, precision)
            dt = OUT[precision]
            for c in (torch.full((129, 300), float("nan"), device="cuda", dtype=dt).t(),
                      torch.full((300, 135), float("nan"), device="cuda", dtype=dt)[:, 3:132]):
                m.prepare(a, b, c, precision=precision, **scales)()
                check_scaled(c, a, b, precision, scales)
    for M, N, K in ((7919 // 8, 6007 // 8, 3001), (1, 1000, 3001)):
        a, b, _ = gpu_operands(M, N, K, "nn", "bf16")
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        m.prepare(a, b, c, precision="bf16")()
        check_scaled(c, a, b, "bf16")


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_lab_matmul_replays_on_new_tensors(stage):
    import lab

    for i in range(3):  # new tensors each call: the maps follow their addresses
        a, b, _ = gpu_operands(300, 200, 100, "nn", "bf16", seed=i)
        c = lab.matmul(a, b, stage=stage, backend="cuda")
        check_scaled(c, a, b, "bf16")
    a, b, _ = gpu_operands(300, 200, 100, "nn", "bf16", seed=7)
    out = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
    for i in range(2):  # the same tensors, new values
        a.copy_(torch.randn_like(a.float()).bfloat16())
        lab.matmul(a, b, stage=stage, backend="cuda", out=out)
        check_scaled(out, a, b, "bf16")
    # fp8: new operands and new scale tensors each call (nt: no copy; tn: both copied in the
    # call), then the same tensors with new scale values (read on the GPU in every call, not baked
    # into the plan)
    for layout in ("nt", "tn"):
        for i in range(3):
            a, b, scales = gpu_operands(300, 200, 96, layout, "fp8", seed=i)
            c = lab.matmul(a, b, stage=stage, backend="cuda", **scales)
            assert c.dtype == torch.bfloat16
            check_scaled(c, a, b, "fp8", scales)
        out = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
        for factor in (2.0, 0.25):
            scales["scale_a"].mul_(factor)
            lab.matmul(a, b, stage=stage, backend="cuda", out=out, **scales)
            check_scaled(out, a, b, "fp8", scales)


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
            a, b, _ = gpu_operands(M, N, K, layout, "3xtf32")
            c = torch.full((M, N), float("nan"), device="cuda")
            m.prepare(a, b, c, precision="3xtf32")()
            ref = chk.reference(a, b)
            ours = chk.compare(c, ref, K, "3xtf32")
            cublas = chk.compare(torch.matmul(a, b), ref, K, "fp32")
            assert ours.passed, ours.reason
            assert ours.rel_err <= cublas.rel_err, (M, N, K, ours.rel_err, cublas.rel_err)
    finally:
        matmul.allow_tf32 = before


@gpu
@needs_hopper
@pytest.mark.parametrize("stage", STAGES)
def test_fp8_over_many_tiles_and_in_clusters(stage):
    """fp8 where a persistent block walks several tiles (4096 x 2048: 256 tiles of 128 x 256 on
    132 SMs) with and without clusters sharing B (CLUSTER=2: each block multicasts half of the
    K-major B tile), narrower tiles, a C whose 2002-byte lines take direct stores, and a K that
    leaves a last partial k-tile (K = 1040: 8 k-tiles of 128 and 16 more): within fp8's check of
    the scaled float64 reference."""
    m = _mod(stage)
    rows = [({}, 4096, 2048, 1040), ({"BN": 128}, 1000, 1001, 4096), ({"BN": 192}, 2048, 2048, 512)]
    if stage == "persistent":
        rows += [({"CLUSTER": 2}, 4096, 2048, 1040), ({"CLUSTER": 2, "BN": 128}, 1000, 1001, 512)]
    for params, M, N, K in rows:
        for layout in ("nt", "nn"):
            a, b, scales = gpu_operands(M, N, K, layout, "fp8", seed=M + N)
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            m.prepare(a, b, c, precision="fp8", **params, **scales)()
            check_scaled(c, a, b, "fp8", scales)


@gpu
@needs_hopper
def test_the_k_major_copies_transpose_exactly():
    """copy_step's transposes (transpose.cu) against torch: e4m3 bytes through transpose_u8's
    word path (whole 64 x 64 tiles, 4-byte aligned lines) and its byte path (edge tiles, odd
    leading dimensions, an offset start), and fp32 through transpose_f32."""
    from cuda_kernels._tma import copy_step

    def run(step):
        fn, args = step
        fn(*args)

    for dtype in (torch.float8_e4m3fn, torch.float32):
        for rows, cols, pad, offset in ((256, 192, 0, 0), (1000, 77, 3, 1), (64, 4096, 0, 0),
                                        (130, 129, 5, 3)):
            raw = torch.randn(cols, rows + pad + offset, device="cuda").to(dtype)
            src = raw[:, offset:offset + rows].t()  # rows x cols, column-major, ld rows+pad+offset
            dst = torch.empty(rows, cols, device="cuda", dtype=dtype)  # row-major
            run(copy_step(dst, src))
            torch.cuda.synchronize()
            assert torch.equal(dst.view(torch.uint8) if dtype != torch.float32 else dst,
                               src.contiguous().view(torch.uint8) if dtype != torch.float32
                               else src.contiguous()), (dtype, rows, cols, pad, offset)
