"""The mma stage's Hopper kernel, cuda_kernels/mma_wgmma.cu (warpgroup MMA, sm_90a).

CPU: the generated wgmma wrappers match their generator; every precision x operand layout compiles
for sm_90a without spills or local memory, and its SASS holds HGMMA of the intended shape with A
from registers; the sm_90 / bad-define builds stop with the compiler's own sentence; wgmma_plan()
maps each layout to the kernel's D = A' B' (swap or not, strides of C); the wgmma parameter's
checks (values, next to tile parameters, layout tn, unaligned lines) give one sentence each; the
CPU mode reports the wgmma build's resources.

The build options that scripts/experiments/wgmma_probe.py sweeps (SUM_TILES, LOAD_FIRST, three
warpgroups, 192-column tiles, one warpgroup) compile without spills to HGMMA of their width.

GPU (marked `gpu`; sm_90 only): every precision x layout at aligned and edge sizes with K, M and N
not multiples of the tiles (sliced views keep the lines 16-byte aligned), through the stage's
public launcher, with wgmma forced and with the automatic choice; the sweep's build options at
edge sizes; NaN and Inf reach C; a long K;
views (offset starts, wide rows, a column-major C); the automatic choice itself (wgmma on sm_90
where it can, mma.sync where it cannot).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, lab_env, run_lab
from lab import check as chk
from lab.errors import CompileError, LabError
from lab.operands import CUDA, describe
from lab.stages import get_stage, parse_variants
from mma_defaults_helpers import DTYPE, PRECISIONS, count_ops, sass_mix

WG_LAYOUTS = ("nn", "nt", "tt")  # the layouts with a K-major operand


def _mma():
    return get_stage("mma").module("cuda")


def _params(spec: str = "mma") -> dict:
    return parse_variants([spec])[0].params_for("cuda")


def _one_sentence(text: str) -> None:
    assert "\n" not in text and text.count(". ") == 0, text


# ------------------------------------------------------------------------------ CPU


def test_generated_wrappers_match_their_generator():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_wgmma_ops.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", WG_LAYOUTS)
def test_wgmma_builds_compile_without_spills_and_issue_hgmma(precision, layout):
    mma = _mma()
    build = mma.build(**_params("mma:wgmma=1"), precision=precision, layout=layout)
    assert build.arch == "sm_90a"
    assert build.spill_bytes == 0 and build.stack_frame == 0, build.log
    mix = sass_mix(build)
    from cuda_kernels import _sass

    text = _sass.sass(build)
    k = 8 if precision in ("tf32", "3xtf32") else 16
    n = mma.WGMMA[precision]["BN"]
    # the SASS names the input type, except fp16 (the default): HGMMA.64x256x16.F32
    kind = {"tf32": ".TF32", "3xtf32": ".TF32", "bf16": ".BF16", "fp16": ""}[precision]
    shape = f"HGMMA.64x{n}x{k}.F32{kind}"
    hgmma = re.findall(r"HGMMA\.\S+ R\d+, R\d+, gdesc", text)  # A from registers (RS)
    assert hgmma and all(h.split()[0] == shape for h in hgmma), (shape, hgmma[:3])
    assert count_ops(mix, "HGMMA") == len(re.findall(r"\bHGMMA\b", text))
    assert count_ops(mix, "HMMA") == 0  # no mma.sync left in this kernel
    assert count_ops(mix, "LDL") == 0 and count_ops(mix, "STL") == 0
    # 4 k-steps per 128-byte tile, three products each in 3xTF32; the loop body is unrolled over
    # tile pairs, so each copy of it holds a whole number of tiles' HGMMA
    assert len(hgmma) % (4 * (3 if precision == "3xtf32" else 1)) == 0


# Build options that scripts/experiments/wgmma_probe.py sweeps beyond the WGMMA rows the launcher
# uses: 3xTF32 summed straight in the tensor core (SUM_TILES=0) or afresh over two tiles, three
# warpgroups (copy rounds that do not divide the tile evenly), 192-column tiles, one warpgroup; 3xTF32 with
# LOAD_FIRST=0 and TF32 with LOAD_FIRST=1 (the other way round from their WGMMA rows).
VARIANTS = [
    ("3xtf32", dict(WGS=2, BN=128, STAGES=4, COPY_AT=0, SUM_TILES=0)),
    ("3xtf32", dict(WGS=2, BN=128, STAGES=4, COPY_AT=2, SUM_TILES=2)),
    ("3xtf32", dict(WGS=2, BN=64, STAGES=3, COPY_AT=0, SUM_TILES=1)),
    ("bf16", dict(WGS=3, BN=128, STAGES=4, COPY_AT=0)),
    ("tf32", dict(WGS=2, BN=192, STAGES=4, COPY_AT=2, LOAD_FIRST=1)),
    ("fp16", dict(WGS=3, BN=192, STAGES=3, COPY_AT=0)),
    ("tf32", dict(WGS=1, BN=64, STAGES=3, COPY_AT=0)),
]


@pytest.mark.parametrize("precision,config", VARIANTS)
@pytest.mark.parametrize("a_kmajor", [False, True])
def test_wgmma_build_options_compile_without_spills(precision, config, a_kmajor):
    mma = _mma()
    build = mma.wgmma_build(precision, a_kmajor, 8, "nt" if a_kmajor else "nn", config)
    assert build.spill_bytes == 0 and build.stack_frame == 0, build.log
    assert "C751" not in build.log, build.log  # no "wgmma serialized" from ptxas
    from cuda_kernels import _sass

    k = 8 if precision in ("tf32", "3xtf32") else 16
    shapes = set(re.findall(r"HGMMA\.(64x\d+x\d+)", _sass.sass(build)))
    assert shapes == {f"64x{config['BN']}x{k}"}, shapes
    grid, block, smem = mma.wgmma_geometry(1000, 999, precision, a_kmajor, config)
    assert block == (128 * config["WGS"], 1, 1)
    assert grid[0] == -(-1000 // (64 * config["WGS"])) * -(-999 // config["BN"])
    assert smem <= 232448


def test_wgmma_source_refuses_plain_sm_90_and_bad_defines_with_the_compiler_log():
    from cuda_kernels._build import compile_kernel

    with pytest.raises(CompileError, match="needs sm_90a"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_TF32": 1}, arch="sm_90")
    with pytest.raises(CompileError, match="COPY_AT must be 0"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_BF16": 1, "COPY_AT": 1},
                       arch="sm_90a")
    with pytest.raises(CompileError, match="BN must be 64, 128, 192 or 256"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_BF16": 1, "BN": 96}, arch="sm_90a")
    with pytest.raises(CompileError, match="WGS must be 1, 2 or 3"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_BF16": 1, "WGS": 4}, arch="sm_90a")
    with pytest.raises(CompileError, match="SUM_TILES must be 0"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_3XTF32": 1, "SUM_TILES": 3},
                       arch="sm_90a")
    with pytest.raises(CompileError, match="LOAD_FIRST must be 0"):
        compile_kernel("mma_wgmma.cu", "matmul_mma_wgmma", {"PREC_3XTF32": 1, "LOAD_FIRST": 2},
                       arch="sm_90a")


def test_wgmma_probe_refuses_a_malformed_configs_list_before_any_gpu_work():
    probe = ROOT / "scripts" / "experiments" / "wgmma_probe.py"
    r = subprocess.run([sys.executable, str(probe), "--precisions",
                        "3xtf32", "--sweep", "4096", "--configs", "STAGES=3;STAGES=four"],
                       capture_output=True, text=True, cwd=ROOT, env=lab_env())
    assert r.returncode != 0
    assert "KEY=INTEGER" in r.stderr and "STAGES=four" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def _problem(layout, M=40, N=24, K=56, dtype=torch.float32, c=None):
    a, b = chk.make_inputs(M, N, K, 1, "cpu", dtype=dtype, layout=layout)
    c = torch.empty(M, N, dtype=dtype) if c is None else c
    return describe(a, b, c, CUDA), a, b, c


def test_wgmma_plan_maps_each_layout_to_a_k_major_shared_operand():
    mma = _mma()
    p, a, b, c = _problem("nn")
    w = mma.wgmma_plan(p)  # C^T = B^T A^T: A' = B^T (n contiguous), B' = A^T (k contiguous)
    assert w["Ap"].data_ptr() == b.data_ptr() and w["Bp"].data_ptr() == a.data_ptr()
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (24, 40, 24, 56, False)
    assert (w["csm"], w["csn"]) == (1, 24)
    p, a, b, c = _problem("nt")  # A' = A (k contiguous), B' = B
    w = mma.wgmma_plan(p)
    assert w["Ap"].data_ptr() == a.data_ptr() and w["Bp"].data_ptr() == b.data_ptr()
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (40, 24, 56, 56, True)
    assert (w["csm"], w["csn"]) == (24, 1)
    p, a, b, c = _problem("tt")  # A' = A (m contiguous)
    w = mma.wgmma_plan(p)
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (40, 24, 40, 56, False)
    # a column-major C: the shared code hands the launcher C^T = B^T A^T, and the plan applies to
    # that problem (nn becomes tt)
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu")
    ct = torch.empty(24, 40).t()
    p = describe(a, b, ct, CUDA)
    assert p.layout == "tt" and p.M == 24
    w = mma.wgmma_plan(p)
    assert (w["M"], w["N"], w["csm"], w["csn"]) == (24, 40, 40, 1)


def test_wgmma_plan_refuses_layout_tn_and_unaligned_lines_in_one_sentence():
    mma = _mma()
    p, *_ = _problem("tn")
    with pytest.raises(LabError, match="layout tn") as info:
        mma.wgmma_plan(p)
    _one_sentence(str(info.value))
    a = torch.randn(40, 57)[:, :56]  # ld 57 floats: 228 bytes, not a multiple of 16
    b = torch.randn(56, 24)
    p = describe(a, b, torch.empty(40, 24), CUDA)
    with pytest.raises(LabError, match="16-byte boundary") as info:
        mma.wgmma_plan(p)
    _one_sentence(str(info.value))
    a = torch.randn(40 * 56 + 1)[1:].view(40, 56)  # base 4 bytes past an allocation
    p = describe(a, b, torch.empty(40, 24), CUDA)
    with pytest.raises(LabError, match="16-byte boundary"):
        mma.wgmma_plan(p)
    a = torch.randn(40, 60)[:, :56]  # ld 60 floats, 240 bytes: aligned although sliced
    assert mma.wgmma_plan(describe(a, b, torch.empty(40, 24), CUDA))["ldb"] == 60


@pytest.mark.parametrize("spec,match", [
    ("mma:wgmma=1,BM=128", "takes none of the mma.sync tile parameters"),
    ("mma:wgmma=1,STAGES=3", "STAGES=3"),
])
def test_wgmma_next_to_tile_parameters_is_refused_up_front(spec, match):
    with pytest.raises(LabError, match=match) as info:
        _mma().validate(**_params(spec), precision="bf16")
    _one_sentence(str(info.value))
    with pytest.raises(LabError, match=match):  # lab.compare's check, without a precision
        _mma().validate(**_params(spec))


def test_wgmma_values_are_checked():
    with pytest.raises(LabError, match="takes one of -1, 0, 1"):
        parse_variants(["mma:wgmma=2"])
    for bad in (2, "1", 1.0):
        with pytest.raises(LabError, match="wgmma must be -1"):
            _mma().validate(wgmma=bad)
    _mma().validate(wgmma=True)  # a bool means on, as for the other switches
    p, a, b, c = _problem("tn")
    with pytest.raises(LabError, match="layout tn"):
        _mma().use_wgmma(p, "tf32", {"wgmma": 1})
    assert _mma().use_wgmma(p, "tf32", {"wgmma": -1}) is False
    assert _mma().use_wgmma(p, "tf32", {"wgmma": 0}) is False


def test_automatic_choice_is_mma_sync_off_a_gpu():
    p, *_ = _problem("nn")
    if torch.cuda.is_available():
        pytest.skip("CPU-mode test")
    assert _mma().use_wgmma(p, "bf16", _params()) is False
    assert _mma().launch_config(4096, 4096, "bf16", **_params()).get("wgmma") is None


@pytest.mark.parametrize("layout,grid", [("nn", 8 * 2), ("nt", 4 * 4), ("tt", 4 * 4)])
def test_cpu_mode_reports_the_wgmma_build(layout, grid):
    """The compile-only path (lab.run._compile_only) with wgmma=1: the sm_90a build, its shared
    memory and the grid of the problem it computes (C^T for nn: N x M)."""
    mma = _mma()
    cfg = mma.launch_config(1000, 500, "bf16", **_params("mma:wgmma=1"))
    assert cfg == {"wgmma": 1, "group": 8}
    assert mma.config_text(cfg) == "group=8,wgmma=1"
    (g, _, _), block, smem = mma.geometry(1000, 500, 64, **cfg, precision="bf16", layout=layout)
    # nn: D = C^T is 500 x 1000 (4 x 4 tiles of 128 x 256); nt, tt: 1000 x 500 (8 x 2)
    assert g == {"nn": 4 * 4, "nt": 8 * 2, "tt": 8 * 2}[layout]
    assert block == (256, 1, 1) and smem == mma.wgmma_smem_bytes("bf16", layout == "nt")
    assert smem <= mma.SMEM_PER_BLOCK


@pytest.mark.parametrize("spec,want", [
    ("mma", "regex:^(matmul_mma|matmul_mma_wgmma)$"),  # chosen per GPU and problem
    ("mma:wgmma=0", "matmul_mma"),
    ("mma:wgmma=1", "matmul_mma_wgmma"),
    ("mma:BM=128", "matmul_mma"),  # explicit tiles: always mma.sync
])
def test_the_profilers_kernel_filter_names_the_kernels_prepare_may_launch(spec, want):
    from lab.profile import kernel_filter

    variant = parse_variants([spec])[0]
    assert kernel_filter(variant, "cuda", "bf16") == want
    for name in _mma().kernel_names(**variant.params_for("cuda")):
        build = (_mma().build(**_params("mma:wgmma=1"), precision="bf16") if "wgmma" in name
                 else _mma().build(**_params("mma:wgmma=0"), precision="bf16"))
        assert build.kernel == name


def test_lab_compare_cpu_mode_compiles_the_wgmma_variant():
    if torch.cuda.is_available():
        pytest.skip("CPU-mode test")
    r = run_lab("lab.compare", "--stage", "mma:wgmma=1", "--backend", "cuda", "--precision",
                "tf32,bf16", "--sizes", "256", "--layout", "nn,tn", timeout=900)
    out = r.stdout + r.stderr
    assert "compiled" in out, out[-2000:]
    assert "layout tn" in out, out[-2000:]  # the tn row fails with the one sentence
    assert "Traceback" not in out


# ------------------------------------------------------------------------------ GPU


def _hopper():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")


def _aligned(x, pad):
    """x with its lines 16 bytes apart: a slice of a wider buffer (padded leading dimension)."""
    col = x.stride(0) == 1 and x.stride(1) != 1
    base = x.t() if col else x
    rows, cols = base.shape
    wide = torch.empty(rows, cols + pad, dtype=x.dtype, device=x.device)[:, :cols]
    wide.copy_(base)
    return wide.t() if col else wide


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", WG_LAYOUTS)
def test_wgmma_on_the_gpu(precision, layout):
    _hopper()
    dt = DTYPE[precision]
    pad = 16 // torch.empty(0, dtype=dt).element_size()
    for M, N, K in ((1, 1, 1), (33, 17, 40), (257, 129, 1000), (256, 512, 512),
                    (1000, 999, 1003), (130, 260, 8)):
        a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", dtype=dt, layout=layout)
        ref = chk.reference(a, b)
        a, b = _aligned(a, pad - a.shape[1] % pad if layout[0] == "n" else pad - M % pad), \
            _aligned(b, pad - N % pad if layout[1] == "n" else pad - K % pad)
        for spec in ("mma:wgmma=1", "mma"):
            c = torch.empty((M, N), dtype=dt, device="cuda")
            launch = _mma().prepare(a, b, c, precision=precision, **_params(spec))
            assert launch.config.get("wgmma") == 1, spec  # automatic: on for these problems
            result = chk.check(launch, c, ref, K, precision)
            assert result.passed, (precision, layout, M, N, K, spec, result.reason)
            if precision == "3xtf32" and K >= 512:
                assert result.rel_err < 2e-6, result.rel_err
            if precision == "tf32" and K >= 512:
                assert result.rel_err > 1e-5, result.rel_err


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_wgmma_on_views_on_the_gpu(precision):
    """Operands that start 16 bytes into their buffer, rows wider than the matrix, and a
    column-major C (the shared code hands the launcher C^T = B^T A^T, layout tt) or a C whose
    rows are wider than it."""
    _hopper()
    dt = DTYPE[precision]
    e = 16 // torch.empty(0, dtype=dt).element_size()  # elements per 16 bytes
    M, N, K = 200, 136, 264  # lines of 16-byte multiples in every dtype
    a0, b0 = chk.make_inputs(M, N, K, 21, "cuda", dtype=dt)
    ref = chk.reference(a0, b0)

    def buf(n):
        return torch.empty(n + e, dtype=dt, device="cuda")[e:]  # 16 bytes past the start

    cases = {
        "offset": (buf(M * K).view(M, K).copy_(a0), buf(K * N).view(K, N).copy_(b0),
                   torch.empty(M, N, dtype=dt, device="cuda")),
        "wide rows": (torch.empty(M, K + e, dtype=dt, device="cuda")[:, :K].copy_(a0),
                      torch.empty(K, N + 2 * e, dtype=dt, device="cuda")[:, e:N + e].copy_(b0),
                      torch.empty(M, N + 3, dtype=dt, device="cuda")[:, 1:N + 1]),
        "c column-major": (a0, b0, torch.empty(N, M, dtype=dt, device="cuda").t()),
    }
    for name, (a, b, c) in cases.items():
        launch = _mma().prepare(a, b, c, precision=precision, wgmma=1)
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (precision, name, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision,config", VARIANTS)
def test_wgmma_build_options_on_the_gpu(precision, config):
    """The sweep's build options give the right C at edge sizes, in both A' layouts (nn: A' is
    M-major; nt: K-major), launched through wgmma_prepare() as
    scripts/experiments/wgmma_probe.py does."""
    _hopper()
    mma = _mma()
    dt = DTYPE[precision]
    pad = 16 // torch.empty(0, dtype=dt).element_size()
    for layout in ("nn", "nt"):
        for M, N, K in ((33, 17, 40), (257, 199, 1000), (200, 72, 40)):
            a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", dtype=dt, layout=layout)
            ref = chk.reference(a, b)
            a = _aligned(a, pad - K % pad)
            b = _aligned(b, pad - N % pad if layout[1] == "n" else pad - K % pad)
            c = torch.empty((M, N), dtype=dt, device="cuda")
            launch = mma.wgmma_prepare(describe(a, b, c, CUDA), precision, 8, config)
            result = chk.check(launch, c, ref, K, precision)
            assert result.passed, (precision, config, layout, M, N, K, result.reason)


@pytest.mark.gpu
def test_automatic_choice_on_the_gpu():
    _hopper()
    mma = _mma()
    a, b = chk.make_inputs(300, 200, 100, 3, "cuda")
    c = torch.empty(300, 200, device="cuda")
    assert mma.prepare(a, b, c, precision="tf32").config.get("wgmma") == 1
    assert "wgmma" not in mma.prepare(a, b, c, precision="tf32", wgmma=0).config
    assert "wgmma" not in mma.prepare(a, b, c, precision="tf32", BM=128).config
    at, bt = chk.make_inputs(300, 200, 100, 3, "cuda", layout="tn")
    launch = mma.prepare(at, bt, c, precision="tf32")  # tn: mma.sync, still right
    assert "wgmma" not in launch.config
    assert chk.check(launch, c, chk.reference(at, bt), 100, "tf32").passed
    odd_a, odd_b = chk.make_inputs(300, 201, 101, 3, "cuda")  # 404-byte lines: mma.sync
    c2 = torch.empty(300, 201, device="cuda")
    assert "wgmma" not in mma.prepare(odd_a, odd_b, c2, precision="tf32").config
    with pytest.raises(LabError, match="16-byte boundary"):
        mma.prepare(odd_a, odd_b, c2, precision="tf32", wgmma=1)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_wgmma_carries_nan_and_inf_to_c_on_the_gpu(precision):
    _hopper()
    dt = DTYPE[precision]
    M, N, K = 192, 320, 128
    for layout in WG_LAYOUTS:
        a, b = chk.make_inputs(M, N, K, 5, "cuda", dtype=dt)
        a, b = a.clone(), b.clone()
        a[3, 5] = float("nan")
        a[40, 9] = torch.tensor(-1.0, device="cuda").log().to(dt)  # a NaN made by the GPU
        b[7, 11] = float("inf")
        b[20, 30] = float("-inf")
        if layout[0] == "t":
            a = a.t().contiguous().t()
        if layout[1] == "t":
            b = b.t().contiguous().t()
        want = torch.isfinite(a.double() @ b.double())
        if precision == "3xtf32":  # an infinite operand's tail is Inf - Inf: NaN, as in mma.sync
            want &= torch.isfinite(a.double()).all(1, keepdim=True)
            want &= torch.isfinite(b.double()).all(0, keepdim=True)
        c = torch.empty((M, N), dtype=dt, device="cuda")
        _mma().prepare(a, b, c, precision=precision, wgmma=1)()
        assert (torch.isfinite(c) == want).all(), (precision, layout)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32", "bf16"])
def test_wgmma_over_a_long_k_on_the_gpu(precision):
    """K = 131,073: thousands of k-tiles through the ring and the fragment register sets, and a
    last tile of one element."""
    _hopper()
    dt = DTYPE[precision]
    M, N, K = 128, 256, 131073
    a, b = chk.make_inputs(M, N, K, 11, "cuda", dtype=dt)
    pad = 16 // a.element_size()
    a = _aligned(a, pad - K % pad)
    ref = chk.reference(a, b)
    c = torch.empty((M, N), dtype=dt, device="cuda")
    result = chk.check(_mma().prepare(a, b, c, precision=precision, wgmma=1), c, ref, K,
                       precision)
    assert result.passed, result.reason
