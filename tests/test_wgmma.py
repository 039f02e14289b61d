"""Stage wgmma: Hopper's warpgroup MMA, cuda_kernels/wgmma.cu (sm_90a) and its launcher
cuda_kernels/wgmma.py, and its Triton twin triton_kernels/wgmma.py (tl.dot as Triton lowers it on
sm_90: wgmma, with kmajor_b and regs_mn; the regs_mn path has its own file,
tests/test_wgmma_regs.py, and the twin's tuned defaults tests/test_wgmma_defaults.py).

CPU: the generated wgmma wrappers match their generator; every precision x operand layout compiles
for sm_90a through the launcher's OFFER.compile without spills or local memory, and its SASS holds
HGMMA of the intended shape with A from registers; the sm_90 / bad-define builds stop with the
compiler's own sentence; the defaults resolve to the WGMMA rows, build for sm_90a with exactly the
defines the mma stage's wgmma kernel had; plan() maps each layout to the kernel's D = A' B' (swap
or not, strides of C), and where the kernel cannot read an operand as given (layout tn, lines not
on 16-byte boundaries) it copies that operand into a buffer of the form the kernel reads: the
plan, with its copies run, computes the right C (the kernel's contract evaluated in float64);
the parameters' checks give one sentence each; prepare() refuses a GPU that is not sm_90 (the
architecture mocked); lab.compare's CPU mode compiles every layout, tn included; the profiler's
kernel filter names the kernel; the Triton twin's kmajor_b copy under the interpreter.

The build options that scripts/experiments/wgmma_probe.py sweeps (SUM_TILES, LOAD_FIRST, three
warpgroups, 192-column tiles, one warpgroup) compile without spills to HGMMA of their width, and
are the stage's parameters.

GPU (marked `gpu`; sm_90 only): every precision x layout at aligned and edge sizes with K, M and N
not multiples of the tiles (sliced views keep the lines 16-byte aligned), through the stage's
public launcher; layout tn and unaligned lines, copied in the call and still right (and a B
changed after prepare() is what the next call multiplies); the sweep's build options at edge
sizes; NaN and Inf reach C where torch.matmul puts them in fp32 (both backends, every precision,
3xtf32 included); a long K; views (offset starts, wide rows, a column-major C); the Triton twin
with kmajor_b on and off.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from helpers import LAYOUTS, ROOT, cpu_only, lab_env, run_lab, stage_params
from lab import check as chk
from lab.base.errors import CompileError, LabError
from lab.base.describe import describe
from lab.base.needs import CUDA
from lab.base.problem import Operand
from lab.stages import get_stage, parse_variants
from mma_defaults_helpers import DTYPE, PRECISIONS, count_ops, sass_mix

STAGE = "wgmma"
WG_LAYOUTS = ("nn", "nt", "tt")  # the layouts with a K-major operand (tn: one is copied)


def _wg():
    return get_stage(STAGE).module("cuda")


def _triton():
    return get_stage(STAGE).module("triton")


def _params(spec: str = STAGE, backend: str = "cuda") -> dict:
    return parse_variants([spec])[0].params_for(backend)


def _one_sentence(text: str) -> None:
    assert "\n" not in text and text.count(". ") == 0, text


# ------------------------------------------------------------------------------ CPU


def test_generated_wrappers_match_their_generator():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_wgmma_ops.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_wgmma_builds_compile_without_spills_and_issue_hgmma(precision, layout):
    """What OFFER.compile builds (CPU mode's rows, the profiler's SASS): NVRTC for sm_90a, no
    spills, no local memory, HGMMA of the precision's shape with A from registers, no HMMA."""
    wg = _wg()
    build, (grid, block, smem) = wg.OFFER.compile(_params(), 1000, 500, 64, layout, precision)
    assert build.arch == "sm_90a" and build.kernel == "matmul_wgmma"
    assert build.spill_bytes == 0 and build.stack_frame == 0, build.log
    mix = sass_mix(build)
    from lab.toolchain import sass as _sass

    text = _sass.sass(build)
    k = 8 if precision in ("tf32", "3xtf32") else 16
    n = wg.WGMMA[precision]["BN"]
    # the SASS names the input type, except fp16 (the default): HGMMA.64x256x16.F32
    kind = {"tf32": ".TF32", "3xtf32": ".TF32", "bf16": ".BF16", "fp16": ""}[precision]
    shape = f"HGMMA.64x{n}x{k}.F32{kind}"
    hgmma = re.findall(r"HGMMA\.\S+ R\d+, R\d+, gdesc", text)  # A from registers (RS)
    assert hgmma and all(h.split()[0] == shape for h in hgmma), (shape, hgmma[:3])
    assert count_ops(mix, "HGMMA") == len(re.findall(r"\bHGMMA\b", text))
    assert count_ops(mix, "HMMA") == 0  # no mma.sync in this kernel
    assert count_ops(mix, "LDL") == 0 and count_ops(mix, "STL") == 0
    # 4 k-steps per 128-byte tile, three products each in 3xTF32; the loop body is unrolled over
    # tile pairs, so each copy of it holds a whole number of tiles' HGMMA
    assert len(hgmma) % (4 * (3 if precision == "3xtf32" else 1)) == 0
    assert block == (256, 1, 1) and smem <= wg.SMEM_PER_BLOCK


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_defaults_are_the_wgmma_rows_with_the_defines_the_mma_stage_used(precision):
    """The registry's defaults resolve to the precision's WGMMA row, and the build passes exactly
    the defines the mma stage's wgmma kernel was built with (the precision, A_KMAJOR, GROUP, the
    row; the layout's TRANS_A / TRANS_B and UNROLL): the same SASS, so the rows of results/
    measured through stage mma describe this build."""
    wg = _wg()
    assert wg.config(precision, **_params()) == wg.WGMMA[precision]
    d = {"tf32": "PREC_TF32", "3xtf32": "PREC_3XTF32", "bf16": "PREC_BF16",
         "fp16": "PREC_FP16"}[precision]
    row = wg.WGMMA[precision]
    for layout, a_kmajor in (("nn", False), ("nt", True), ("tt", False)):
        build, _ = wg.OFFER.compile(_params(), 4096, 4096, 4096, layout, precision)
        want = ([f"-D{d}=1", f"-DA_KMAJOR={int(a_kmajor)}", "-DGROUP=8"]
                + [f"-D{k}={v}" for k, v in row.items()]
                + ["-DUNROLL=1", f"-DTRANS_A={int(layout[0] == 't')}",
                   f"-DTRANS_B={int(layout[1] == 't')}"])
        defines = [o for o in build.options if o.startswith("-D")]
        assert sorted(defines) == sorted(want), (layout, defines)


# Build options that scripts/experiments/wgmma_probe.py sweeps beyond the WGMMA rows: 3xTF32 summed
# straight in the tensor core (SUM_TILES=0) or afresh over two tiles, three warpgroups (copy rounds
# that do not divide the tile evenly), 192-column tiles, one warpgroup; 3xTF32 with LOAD_FIRST=0
# and TF32 with LOAD_FIRST=1 (the other way round from their WGMMA rows).
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
    wg = _wg()
    build = wg.build(precision, a_kmajor, 8, "nt" if a_kmajor else "nn", config)
    assert build.spill_bytes == 0 and build.stack_frame == 0, build.log
    assert "C751" not in build.log, build.log  # no "wgmma serialized" from ptxas
    from lab.toolchain import sass as _sass

    k = 8 if precision in ("tf32", "3xtf32") else 16
    shapes = set(re.findall(r"HGMMA\.(64x\d+x\d+)", _sass.sass(build)))
    assert shapes == {f"64x{config['BN']}x{k}"}, shapes
    grid, block, smem = wg.geometry(1000, 999, precision, a_kmajor, config)
    assert block == (128 * config["WGS"], 1, 1)
    assert grid[0] == -(-1000 // (64 * config["WGS"])) * -(-999 // config["BN"])
    assert smem <= 232448


@pytest.mark.parametrize("precision,config", VARIANTS)
def test_the_swept_build_options_are_the_stages_parameters(precision, config):
    """Every configuration of the sweep is a `wgmma:...` variant: the registry takes its values,
    validate() accepts it, and it resolves to exactly those defines (LOAD_FIRST and SUM_TILES
    automatic where the sweep leaves them to the row; SUM_TILES only in 3xTF32)."""
    wg = _wg()
    spec = "wgmma:" + ",".join(f"{k}={v}" for k, v in config.items())
    params = _params(spec)
    wg.OFFER.validate(params, precision)
    want = {**wg.WGMMA[precision], **config}
    if precision != "3xtf32":
        want.pop("SUM_TILES", None)
    assert wg.config(precision, **{k: v for k, v in params.items() if k in wg.KNOBS}) == want
    text = wg.OFFER.show(wg.OFFER.resolve(params, 4096, 4096, 4096, precision, 132))
    assert text == ",".join(f"{k}={v}" for k, v in {**want, "group": 8}.items())


def test_wgmma_source_refuses_plain_sm_90_and_bad_defines_with_the_compiler_log():
    """The every-precision file (the lesson, cuda_kernels/wgmma.cu, is bf16 only and has none
    of these switches) refuses what it cannot build, with the compiler's log."""
    from cuda_kernels._build import compile_kernel

    WGMMA_VARIANT = "variants/wgmma.cu"

    with pytest.raises(CompileError, match="needs sm_90a"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_TF32": 1}, arch="sm_90")
    with pytest.raises(CompileError, match="COPY_AT must be 0"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_BF16": 1, "COPY_AT": 1},
                       arch="sm_90a")
    with pytest.raises(CompileError, match="BN must be 64, 128, 192 or 256"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_BF16": 1, "BN": 96}, arch="sm_90a")
    with pytest.raises(CompileError, match="WGS must be 1, 2 or 3"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_BF16": 1, "WGS": 4}, arch="sm_90a")
    with pytest.raises(CompileError, match="SUM_TILES must be 0"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_3XTF32": 1, "SUM_TILES": 3},
                       arch="sm_90a")
    with pytest.raises(CompileError, match="LOAD_FIRST must be 0"):
        compile_kernel(WGMMA_VARIANT, "matmul_wgmma", {"PREC_3XTF32": 1, "LOAD_FIRST": 2},
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


def test_plan_maps_each_readable_layout_to_a_k_major_shared_operand():
    wg = _wg()
    p, a, b, c = _problem("nn")
    w = wg.plan(p)  # C^T = B^T A^T: A' = B^T (n contiguous), B' = A^T (k contiguous)
    assert w["copies"] == [] and w["layout"] == "nn"
    assert w["Ap"].data_ptr() == b.data_ptr() and w["Bp"].data_ptr() == a.data_ptr()
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (24, 40, 24, 56, False)
    assert (w["csm"], w["csn"]) == (1, 24)
    p, a, b, c = _problem("nt")  # A' = A (k contiguous), B' = B
    w = wg.plan(p)
    assert w["copies"] == [] and w["layout"] == "nt"
    assert w["Ap"].data_ptr() == a.data_ptr() and w["Bp"].data_ptr() == b.data_ptr()
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (40, 24, 56, 56, True)
    assert (w["csm"], w["csn"]) == (24, 1)
    p, a, b, c = _problem("tt")  # A' = A (m contiguous)
    w = wg.plan(p)
    assert w["copies"] == []
    assert (w["M"], w["N"], w["lda"], w["ldb"], w["a_kmajor"]) == (40, 24, 40, 56, False)
    # a column-major C: the shared code hands the launcher C^T = B^T A^T, and the plan applies to
    # that problem (nn becomes tt)
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu")
    ct = torch.empty(24, 40).t()
    p = describe(a, b, ct, CUDA)
    assert p.layout == "tt" and p.M == 24
    w = wg.plan(p)
    assert (w["M"], w["N"], w["csm"], w["csn"]) == (24, 40, 40, 1)


def _run_contract(w, c):
    """What the kernel computes for plan `w` (wgmma.cu's header), in float64 on the CPU: the
    plan's copies first, then D(i, j) = sum_k A'(i, k) B'(j, k) stored at C[i * csm + j * csn]."""
    for _, dst, src in w["copies"]:
        dst.copy_(src)
    M, N = w["M"], w["N"]
    Ap, Bp = w["Ap"], w["Bp"]
    K = Bp.shape[0] if Bp.stride(0) == 1 else Bp.shape[1]  # B' lines run along k
    a = torch.as_strided(Ap, (M, K), (w["lda"], 1) if w["a_kmajor"] else (1, w["lda"]),
                         Ap.storage_offset())
    b = torch.as_strided(Bp, (N, K), (w["ldb"], 1), Bp.storage_offset())
    d = a.double() @ b.double().t()
    torch.as_strided(c, (M, N), (w["csm"], w["csn"]), c.storage_offset()).copy_(d.to(c.dtype))


def _unreadable_cases():
    """(name, A, B, C, which operands must be copied): layout tn (the smaller operand copied
    K-major), and lines that do not start on 16-byte boundaries (copied the same way round)."""
    M, N, K = 40, 24, 56
    a0, b0 = chk.make_inputs(M, N, K, 3, "cpu")
    at = a0.t().contiguous().t()  # column-major A
    return [
        ("tn, N <= M: B copied K-major", at, b0, (M, N), ("B",)),
        ("tn, N > M: A copied K-major", at[:20], b0, (20, N), ("A",)),
        ("nn, A's lines 228 bytes apart", torch.empty(M, K + 1)[:, :K].copy_(a0), b0, (M, N),
         ("A",)),
        ("nt, B 4 bytes past an allocation",
         a0, torch.empty(N * K + 1)[1:].view(N, K).t().copy_(b0), (M, N), ("B",)),
        ("tt, both unaligned", torch.empty(K, M + 3)[:, :M].t().copy_(a0),
         torch.empty(N, K + 1)[:, :K].t().copy_(b0), (M, N), ("A", "B")),
        ("tn with an unaligned A", torch.empty(K, M + 1)[:, :M].t().copy_(a0), b0, (M, N),
         ("A", "B")),
    ]


@pytest.mark.parametrize("case", _unreadable_cases(), ids=lambda c: c[0])
def test_an_unreadable_operand_is_copied_into_the_form_the_kernel_reads(case):
    """CPU-side planning: plan() copies exactly the operands the kernel cannot read as given into
    buffers of the kernel's form (16-byte lines; K-major for tn's copied operand), and the plan,
    its copies run, computes the right C (the kernel's contract in float64)."""
    wg = _wg()
    name, a, b, (M, N), copied = case
    c = torch.full((M, N), float("nan"))
    p = describe(a, b, c, CUDA)
    w = wg.plan(p)
    assert tuple(n for n, _, _ in w["copies"]) == copied, name
    for n, dst, src in w["copies"]:
        assert dst.shape == src.shape and dst.data_ptr() != src.data_ptr()
        from lab.base.problem import Operand

        assert wg.lines_aligned(Operand.of(n, dst)), name
    assert w["layout"] in ("nn", "nt", "tt"), name  # the kernel reads what the copies made
    assert w["Bp"].stride(0) == 1 or w["Bp"].stride(1) == 1
    _run_contract(w, p.c.tensor)
    ref = chk.reference(a, b)
    assert torch.allclose(c.double(), ref, rtol=1e-5, atol=1e-4), name


def test_a_copy_is_the_same_build_as_the_readable_layout():
    """The CPU-mode build of tn is the build prepare() makes after its copy: tt where B is the
    smaller operand (A' = A, M-major), nn where A is (D = C^T)."""
    wg = _wg()
    b_tn, g_tn = wg.OFFER.compile(_params(), 1000, 500, 64, "tn", "bf16")
    b_tt, g_tt = wg.OFFER.compile(_params(), 1000, 500, 64, "tt", "bf16")
    assert b_tn.options == b_tt.options and g_tn == g_tt
    b_tn, g_tn = wg.OFFER.compile(_params(), 500, 1000, 64, "tn", "bf16")
    b_nn, g_nn = wg.OFFER.compile(_params(), 500, 1000, 64, "nn", "bf16")
    assert b_tn.options == b_nn.options and g_tn == g_nn


def _cpu_kernel(build, grid, block, args, smem):
    """A stand-in for _build.launcher: a launch that computes, in float64 on the CPU, what the
    kernel computes from these arguments (wgmma.cu's contract; A_KMAJOR from the build)."""
    a_kmajor = "-DA_KMAJOR=1" in build.options

    class Launch:  # what KernelLaunch offers: call it, or run(*args) with other tensors
        def run(self, Ap, Bp, C, M, N, K, lda, ldb, csm, csn):
            w = {"copies": [], "Ap": Ap, "Bp": Bp, "M": int(M), "N": int(N), "lda": int(lda),
                 "ldb": int(ldb), "a_kmajor": a_kmajor, "csm": int(csm), "csn": int(csn)}
            _run_contract(w, C)

        def __call__(self):
            self.run(*args)

        step = property(lambda self: (self.run, tuple(args)))

    return Launch()


@pytest.mark.parametrize("layout,M,N", [("tn", 40, 24), ("tn", 24, 40), ("nn", 40, 24)])
def test_prepare_copies_inside_the_call_and_is_right(monkeypatch, layout, M, N):
    """prepare()'s body on CPU tensors, its kernel evaluated on the CPU from the arguments it is
    launched with: layout tn (and, in nn, A's lines 228 bytes apart) is copied at the start of
    every call, so C is right, and right again for a B changed after prepare(); the launch
    carries the copied operands' names and the kernel alone."""
    wg = _wg()
    monkeypatch.setattr(wg, "launcher", _cpu_kernel)
    K = 57
    a, b = chk.make_inputs(M, N, K, 1, "cpu", layout=layout)
    c = torch.full((M, N), float("nan"))
    launch = wg.prepare.inner(describe(a, b, c, CUDA, "tf32"), **_params())
    want = {("tn", 40, 24): ("B",), ("tn", 24, 40): ("A",), ("nn", 40, 24): ("A",)}
    assert launch.copies == want[(layout, M, N)]
    assert launch.kernel_only is not None and launch.setup_ms is None
    assert launch.resources["params"].startswith("WGS=2,BN=256,")
    for _ in range(2):
        launch()
        assert torch.allclose(c.double(), chk.reference(a, b), rtol=1e-5, atol=1e-4), layout
        b.mul_(-2)  # the next call copies the B of that moment
    # a readable layout with 16-byte lines: nothing copied, the launch is the kernel itself
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu", layout="nt")
    launch = wg.prepare.inner(describe(a, b, torch.empty(40, 24), CUDA, "tf32"), **_params())
    assert launch.copies == () and launch.kernel_only is None


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_100"])
def test_prepare_refuses_a_gpu_that_is_not_sm_90(monkeypatch, arch):
    wg = _wg()
    monkeypatch.setattr(wg, "device_arch_of", lambda p: arch)
    monkeypatch.setattr(wg, "launcher", lambda *a, **k: pytest.fail("launched on " + arch))
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu")
    p = describe(a, b, torch.empty(40, 24), CUDA, "bf16")
    with pytest.raises(LabError, match=f"sm_90 GPUs.*this GPU is {arch}") as info:
        wg.prepare.inner(p, **_params())
    _one_sentence(str(info.value))
    monkeypatch.setattr(wg, "device_arch_of", lambda p: "sm_90")  # an H100: it builds
    monkeypatch.setattr(wg, "launcher", lambda *a, **k: SimpleNamespace(step=(print, ())))
    assert wg.prepare.inner(p, **_params()).build.kernel == "matmul_wgmma"


def test_the_triton_twin_refuses_a_gpu_that_is_not_sm_90(monkeypatch):
    tw = _triton()
    monkeypatch.setattr(tw, "device_arch_of", lambda device: "sm_80")
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu")
    with pytest.raises(LabError, match="sm_90 GPU.*this GPU is sm_80") as info:
        tw.prepare.inner(describe(a, b, torch.empty(40, 24), CUDA, "bf16"),
                         **_params(backend="triton"))
    _one_sentence(str(info.value))


@pytest.mark.parametrize("changes,precision,words", [
    (dict(BN=96), None, "BN must be one of 0, 64, 128, 192, 256"),
    (dict(WGS=4), "bf16", "WGS must be one of"),
    (dict(STAGES=2), None, "STAGES must be one of 0, 3, 4, 5, 6"),
    (dict(COPY_AT=1), None, "COPY_AT must be 0"),
    (dict(LOAD_FIRST=2), None, "LOAD_FIRST must be one of -1, 0, 1"),
    (dict(SUM_TILES=True), None, "SUM_TILES must be one of"),
    (dict(group=0), None, "group must be a positive integer"),
    (dict(STAGES=6), "tf32", "227 KiB"),
    (dict(BN=256), "3xtf32", "in 3xtf32 (WGS=2, BN=256, STAGES=4)"),
    (dict(WGS=3, STAGES=6), None, "227 KiB"),
    (dict(BM=128), "bf16", "belong to stage mma"),
    (dict(wgmma=1), "bf16", "no parameter wgmma"),
])
def test_validate_refuses_in_one_sentence(changes, precision, words):
    with pytest.raises(LabError) as info:
        _wg().OFFER.validate({**_params(), **changes}, precision)
    _one_sentence(str(info.value))
    assert words in str(info.value), str(info.value)


def test_validate_accepts_every_registry_default_and_choice_that_fits():
    wg = _wg()
    for precision in PRECISIONS:
        wg.OFFER.validate(_params(), precision)
    wg.OFFER.validate(_params(), None)
    wg.OFFER.validate(_params("wgmma:BN=192,WGS=3,STAGES=3"), "bf16")
    assert parse_variants(["wgmma:WGS=0,BN=0,STAGES=0,LOAD_FIRST=-1,SUM_TILES=-1"])[0].label == \
        "wgmma"
    with pytest.raises(LabError, match="takes one of"):
        parse_variants(["wgmma:BN=96"])
    spec = {p.name: p for p in get_stage(STAGE).params}
    assert spec["SUM_TILES"].numerics and spec["regs_mn"].numerics  # the tuner keeps them
    assert not any(spec[k].numerics for k in ("WGS", "BN", "STAGES", "COPY_AT", "LOAD_FIRST"))


def test_resolve_and_show_make_one_build_of_values_that_change_nothing():
    wg = _wg()
    r = {p: wg.OFFER.resolve(_params(), 4096, 4096, 4096, p, 132) for p in PRECISIONS}
    assert wg.OFFER.show(r["bf16"]) == "WGS=2,BN=256,STAGES=4,COPY_AT=0,LOAD_FIRST=0,group=8"
    assert wg.OFFER.show(r["3xtf32"]) == \
        "WGS=2,BN=128,STAGES=4,COPY_AT=0,LOAD_FIRST=1,SUM_TILES=2,group=8"
    # SUM_TILES means nothing outside 3xTF32: all its values are one build there
    for v in (-1, 0, 1, 2):
        assert wg.OFFER.resolve({**_params(), "SUM_TILES": v}, 64, 64, 64, "tf32", 132) == r["tf32"]
    assert wg.OFFER.resolve({**_params(), "SUM_TILES": 0}, 64, 64, 64, "3xtf32", 132) != r["3xtf32"]
    # no shape rule: the WGMMA rows run at every size
    assert wg.OFFER.resolve(_params(), 64, 64, 64, "bf16", 132) == r["bf16"]


def test_cpu_mode_reports_the_wgmma_build():
    """lab.compare's CPU mode (the contract's compile): the sm_90a build, its shared memory and
    the grid of the problem it computes (C^T for nn: N x M)."""
    wg = _wg()
    for layout in ("nn", "nt", "tt", "tn"):
        build, ((g, _, _), block, smem) = wg.OFFER.compile(_params(), 1000, 500, 64, layout,
                                                            "bf16")
        # nn: D = C^T is 500 x 1000 (4 x 4 tiles of 128 x 256); nt, tt (and tn, B copied: tt):
        # 1000 x 500 (8 x 2)
        assert g == (4 * 4 if layout == "nn" else 8 * 2), layout
        assert block == (256, 1, 1) and smem == wg.smem_bytes("bf16", layout == "nt")
        assert smem <= wg.SMEM_PER_BLOCK


def test_the_profilers_kernel_filter_names_the_kernel_prepare_launches():
    from lab.profile import kernel_filter

    variant = parse_variants([STAGE])[0]
    assert kernel_filter(variant, "cuda", "bf16") == "matmul_wgmma"
    build, _ = _wg().OFFER.compile(_params(), 256, 256, 256, "nn", "bf16")
    assert build.kernel == "matmul_wgmma"
    # the copy into 16-byte lines may run before it (an operand such lines cannot hold)
    assert _triton().OFFER.kernel_names(_params(backend="triton"), "bf16") == \
        ("matmul_wgmma_kernel", "realign_copy_kernel")
    assert _triton().OFFER.kernel_names(_params(backend="triton"), "3xtf32") == \
        ("matmul_wgmma_kernel", "transpose_kernel", "realign_copy_kernel")  # kmajor_b: B K-major


@cpu_only
def test_lab_compare_cpu_mode_compiles_every_layout():
    r = run_lab("lab.compare", "--stage", STAGE, "--backend", "cuda", "--precision",
                "tf32,bf16", "--sizes", "256,65", "--layout", "nn,tn", timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    assert out.count("compiled") >= 8, out[-2000:]  # tn too: its copied operand is timed
    assert "Traceback" not in out


# ------------------------------------------------- the Triton twin's kmajor_b, interpreted


@cpu_only
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_triton_kmajor_b_copies_an_n_major_b_inside_every_call(precision):
    # regs_mn=0: in tf32 the automatic regs_mn multiplies an N-major B from registers instead
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu", dtype=DTYPE[precision])
    c = torch.empty((40, 24), dtype=DTYPE[precision])
    launch = _triton().prepare(a, b, c, precision=precision, kmajor_b=True, regs_mn=0)
    # ahead, outside the timing, only the buffer is made (zeroed: its lines padded to 16
    # elements), and every call refills it, so a plan may replay it
    assert launch.setup_ms is not None and launch.setup_reusable
    q = launch.kernel_problem  # the problem the kernel ran on
    assert q.b.col_major and q.b.tensor.data_ptr() != b.data_ptr()
    assert q.b.ld % 16 == 0 and q.b.ld >= 56
    assert launch.kernel_only is not None
    assert chk.check(launch, c, chk.reference(a, b), 56, precision).passed
    # the copy is part of the call: a B changed after prepare() is what the next call multiplies
    b.mul_(-2)
    assert chk.check(launch, c, chk.reference(a, b), 56, precision).passed
    # an already K-major B is left alone, and the call is the kernel alone
    a, b = chk.make_inputs(40, 24, 56, 1, "cpu", dtype=DTYPE[precision], layout="nt")
    launch = _triton().prepare(a, b, c, precision=precision, kmajor_b=True, regs_mn=0)
    assert launch.kernel_problem.b.tensor.data_ptr() == b.data_ptr()
    assert launch.kernel_only is None
    assert chk.check(launch, c, chk.reference(a, b), 56, precision).passed
    # a sliced B (row stride above its width), K = 1, and N = 1 (a column: nothing to turn)
    for M, N, K, pad in ((33, 70, 65, 9), (17, 40, 1, 3), (21, 1, 30, 2)):
        a, b0 = chk.make_inputs(M, N, K, 2, "cpu", dtype=DTYPE[precision])
        b = torch.zeros((K, N + pad), dtype=DTYPE[precision])[:, 1:N + 1]
        b.copy_(b0)
        c = torch.empty((M, N), dtype=DTYPE[precision])
        launch = _triton().prepare(a, b, c, precision=precision, kmajor_b=True, regs_mn=0)
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (M, N, K, result.reason)


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
def test_triton_twin_copies_operands_without_16_byte_lines_into_padded_ones(precision):
    """An A or B whose lines cannot be read 16 bytes at a time (a length along them that is not a
    whole number of 16 bytes, or a row stride that is not) is copied in every call into a
    zero-padded buffer of 16-byte lines in its own layout (launch.realigned), and the kernel reads
    that with 16-byte hints; operands with 16-byte lines are read where they are."""
    dt = DTYPE[precision]
    vec = 16 // torch.empty(0, dtype=dt).element_size()
    for layout in LAYOUTS:
        for M, N, K in ((37, 45, 51), (40, 24, 3 * vec + 1), (1, 40, 19)):
            a, b = chk.make_inputs(M, N, K, M + K, "cpu", dtype=dt, layout=layout)
            c = torch.full((M, N), float("nan"), dtype=dt)
            launch = _triton().prepare(a, b, c, precision=precision, regs_mn=0, kmajor_b=0)
            result = chk.check(launch, c, chk.reference(a, b), K, precision)
            assert result.passed, (layout, M, N, K, result.reason)
            # the lines (contiguous operands: as long as they are apart) run along the unit
            # stride: A's along K (row-major) or M, B's along N (row-major) or K
            ops = [Operand.of("A", a), Operand.of("B", b)]
            lengths = [op.rows if op.col_major else op.cols for op in ops]
            want = tuple(op.name for op, n in zip(ops, lengths) if n % vec and n >= vec)
            assert launch.realigned == want, (layout, M, N, K)
            kp = launch.kernel_problem
            for op, user in zip((kp.a, kp.b), ops):
                if op.name in want:  # 16-byte lines, in the operand's own layout
                    assert op.ld % 16 == 0 and op.tensor.data_ptr() % 16 == 0
                    assert op.row_major == user.row_major
    # the copy is part of the call: an operand changed after prepare() is what is multiplied
    a, b = chk.make_inputs(37, 45, 51, 3, "cpu", dtype=dt)
    c = torch.empty((37, 45), dtype=dt)
    launch = _triton().prepare(a, b, c, precision=precision)
    a.mul_(-1.5)
    assert chk.check(launch, c, chk.reference(a, b), 51, precision).passed
    # a row stride off 16 bytes (a slice), and an unaligned base, are copied too
    a0, b = chk.make_inputs(40, 32, 48, 4, "cpu", dtype=dt)
    a = torch.zeros((40, 49), dtype=dt)[:, 1:]
    a.copy_(a0)
    launch = _triton().prepare(a, b, torch.empty((40, 32), dtype=dt), precision=precision,
                               regs_mn=0, kmajor_b=0)
    assert launch.realigned == ("A",)
    # a long K (65 k-steps, the last one element deep): A's lines read to their padded length
    a, b = chk.make_inputs(16, 16, 4097, 12, "cpu", dtype=dt)
    c = torch.empty((16, 16), dtype=dt)
    launch = _triton().prepare(a, b, c, precision=precision, regs_mn=0, kmajor_b=0)
    assert launch.realigned == ("A",)
    assert chk.check(launch, c, chk.reference(a, b), 4097, precision).passed
    # lab.matmul's plan replays the copies on new tensors of the same signature
    import lab

    for seed in (5, 6):
        a, b = chk.make_inputs(37, 45, 51, seed, "cpu", dtype=dt)
        got = lab.matmul(a, b, stage=STAGE, backend="triton", precision=precision)
        assert chk.compare(got.float(), chk.reference(a, b), 51, precision).passed


def test_triton_validate_refuses_a_parameter_it_does_not_take():
    with pytest.raises(LabError, match="no parameter BM") as info:
        _triton().OFFER.validate({**_params(backend="triton"), "BM": 128}, "bf16")
    _one_sentence(str(info.value))


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
        c = torch.empty((M, N), dtype=dt, device="cuda")
        launch = _wg().prepare(a, b, c, precision=precision)
        assert launch.copies == () and launch.build.kernel == "matmul_wgmma"  # read as given
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (precision, layout, M, N, K, result.reason)
        if precision == "3xtf32" and K >= 512:
            assert result.rel_err < 2e-6, result.rel_err
        if precision == "tf32" and K >= 512:
            assert result.rel_err > 1e-5, result.rel_err


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_unreadable_operands_are_copied_in_the_call_and_right_on_the_gpu(precision):
    """Layout tn and lines that do not start on 16-byte boundaries: the operand is copied at the
    start of every call into the form the kernel reads, and C is right; the next call multiplies
    the operands of that moment."""
    _hopper()
    dt = DTYPE[precision]
    for M, N, K, layout, odd in ((300, 201, 101, "nn", True), (257, 129, 1000, "tn", False),
                                 (129, 257, 1000, "tn", False), (200, 136, 264, "tn", True),
                                 (33, 17, 40, "tt", True)):
        a, b = chk.make_inputs(M, N, K, M + K, "cuda", dtype=dt, layout=layout)
        if not odd:  # tn with 16-byte lines: only the layout is unreadable
            pad = 16 // a.element_size()
            a, b = _aligned(a, pad - M % pad), _aligned(b, pad - N % pad)
        c = torch.empty((M, N), dtype=dt, device="cuda")
        launch = _wg().prepare(a, b, c, precision=precision)
        assert launch.copies, (layout, M, N, K)
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (precision, layout, M, N, K, launch.copies, result.reason)
        b.mul_(-1)
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (precision, layout, M, N, K, "after B changed", result.reason)


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
        launch = _wg().prepare(a, b, c, precision=precision)
        assert launch.copies == (), name
        result = chk.check(launch, c, ref, K, precision)
        assert result.passed, (precision, name, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision,config", VARIANTS)
def test_wgmma_build_options_on_the_gpu(precision, config):
    """The sweep's build options give the right C at edge sizes, in both A' layouts (nn: A' is
    M-major; nt: K-major), as the stage's parameters (wgmma:WGS=...,BN=...)."""
    _hopper()
    dt = DTYPE[precision]
    pad = 16 // torch.empty(0, dtype=dt).element_size()
    for layout in ("nn", "nt"):
        for M, N, K in ((33, 17, 40), (257, 199, 1000), (200, 72, 40)):
            a, b = chk.make_inputs(M, N, K, M + N + K, "cuda", dtype=dt, layout=layout)
            ref = chk.reference(a, b)
            a = _aligned(a, pad - K % pad)
            b = _aligned(b, pad - N % pad if layout[1] == "n" else pad - K % pad)
            c = torch.empty((M, N), dtype=dt, device="cuda")
            launch = _wg().prepare(a, b, c, precision=precision, **{**_params(), **config})
            result = chk.check(launch, c, ref, K, precision)
            assert result.passed, (precision, config, layout, M, N, K, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_wgmma_carries_nan_and_inf_to_c_on_the_gpu(precision, backend):
    """NaN (torch's and one the GPU makes) and +-Inf in A and B, with a zero and a value exact in
    TF32 beside each Inf (at its k, in the other operand), every layout: C is NaN, +Inf and -Inf
    exactly where torch.matmul in IEEE fp32 is, in every precision. 3xTF32 too: its split keeps
    an Inf's head finite (+-1) and puts the Inf in the tail (wgmma.cu's tf32_head), so no product
    of a head meets Inf * 0. (tests/test_mma_nan.py plants more, tile edges included, in both
    tensor-core stages.)"""
    _hopper()
    dt = DTYPE[precision]
    M, N, K = 192, 320, 128
    stage = _wg() if backend == "cuda" else _triton()
    matmul = torch.backends.cuda.matmul
    for layout in LAYOUTS:
        a, b = chk.make_inputs(M, N, K, 5, "cuda", dtype=dt)
        a, b = a.clone(), b.clone()
        a[3, 5] = float("nan")
        a[40, 9] = torch.tensor(-1.0, device="cuda").log().to(dt)  # a NaN made by the GPU
        b[7, 11] = float("inf")
        b[20, 30] = float("-inf")
        a[100, 64] = float("-inf")  # k 64: the first k of the third 128-byte k-tile in TF32
        a[50, 7], a[60, 7] = 1.0, 0.0  # beside B's Inf at k 7: Inf and NaN (Inf * 0)
        a[70, 20], a[80, 20] = -2.5, -0.0
        b[64, 200], b[64, 201] = 0.0, 0.75
        if layout[0] == "t":
            a = a.t().contiguous().t()
        if layout[1] == "t":
            b = b.t().contiguous().t()
        before, matmul.allow_tf32 = matmul.allow_tf32, False
        try:
            want = torch.matmul(a.float(), b.float())
        finally:
            matmul.allow_tf32 = before
        c = torch.empty((M, N), dtype=dt, device="cuda")
        stage.prepare(a, b, c, precision=precision)()
        got = c.float()
        what = (precision, backend, layout)
        planted = want[[50, 60, 70, 80, 100, 100], [11, 11, 30, 30, 201, 200]].tolist()
        assert planted[:5:2] == [float("inf")] * 2 + [float("-inf")], (what, planted)
        assert all(math.isnan(x) for x in planted[1::2]), (what, planted)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), what
        assert torch.equal(torch.isinf(got), torch.isinf(want)), what
        inf = torch.isinf(want)
        assert torch.equal(got[inf], want[inf]), what


@pytest.mark.gpu
@pytest.mark.parametrize("kmajor_b", [0, 1])
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_triton_twin_propagates_nan_with_and_without_the_copy(precision, kmajor_b):
    """NaN planted in A and B (GPU arithmetic's 0x7fffffff and torch's): C is NaN exactly in
    their rows and columns, with B copied K-major (kmajor_b=1) or read as it is."""
    _hopper()
    M, N, K = 131, 77, 203
    a, b = chk.make_inputs(M, N, K, 9, "cuda")
    a, b = a.clone(), b.clone()
    a[0, 0] = a[M // 2, K // 3] = float("nan")
    b[K - 1, 0] = torch.tensor(-1.0, device="cuda").log()
    c = torch.zeros((M, N), device="cuda")
    _triton().prepare(a, b, c, precision=precision, kmajor_b=kmajor_b, regs_mn=0)()
    torch.cuda.synchronize()
    want = torch.isnan(chk.reference(a, b))
    assert torch.equal(torch.isnan(c), want), (precision, kmajor_b)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_triton_twin_kmajor_b_on_the_gpu(precision):
    _hopper()
    a, b = chk.make_inputs(513, 257, 1000, 5, "cuda", dtype=DTYPE[precision])
    c = torch.empty((513, 257), dtype=DTYPE[precision], device="cuda")
    for kmajor in (False, True):
        launch = _triton().prepare(a, b, c, precision=precision, kmajor_b=kmajor, regs_mn=0)
        result = chk.check(launch, c, chk.reference(a, b), 1000, precision)
        assert result.passed, (kmajor, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_triton_twin_at_odd_leading_dimensions_on_the_gpu(precision):
    """Operands copied into zero-padded 16-byte lines (the kernel's masks run to the padded
    length along them, constant per 16 bytes: wrong there, they would show as wrong elements)
    in every layout, at sizes with no 16-byte line, a column and a row, and NaN-poisoned C."""
    _hopper()
    dt = DTYPE[precision]
    for layout in LAYOUTS:
        for M, N, K in ((333, 257, 129), (989, 750, 3001), (1, 1000, 3001), (257, 1, 1000),
                        (130, 261, 9)):
            a, b = chk.make_inputs(M, N, K, M + N, "cuda", dtype=dt, layout=layout)
            c = torch.empty((M, N), dtype=dt, device="cuda")
            launch = _triton().prepare(a, b, c, precision=precision)
            result = chk.check(launch, c, chk.reference(a, b), K, precision)
            assert result.passed, (layout, M, N, K, launch.realigned, result.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_triton_twin_copies_views_and_a_long_k_on_the_gpu(precision):
    """The copy into 16-byte lines from views (an offset start, rows far apart, a transposed
    slice) and over K = 131,073 (2,049 k-steps, the last one element deep, read up to the padded
    length of A's lines)."""
    _hopper()
    dt = DTYPE[precision]
    big = torch.randn(700, 900, device="cuda").to(dt)
    a = big[3:300, 5:262]  # offset start, rows 900 apart: 297 x 257
    b = torch.randn(3001, 257, device="cuda").to(dt)[:257, :129]  # rows 257 apart
    c = torch.empty((297, 129), dtype=dt, device="cuda")
    launch = _triton().prepare(a, b, c, precision=precision)
    result = chk.check(launch, c, chk.reference(a, b), 257, precision)
    assert result.passed, result.reason
    bt = torch.randn(129, 3001, device="cuda").to(dt)[:, :257].t()  # column-major, 3001 apart
    result = chk.check(_triton().prepare(a, bt, c, precision=precision), c,
                       chk.reference(a, bt), 257, precision)
    assert result.passed, result.reason
    M, N, K = 128, 256, 131073
    a, b = chk.make_inputs(M, N, K, 12, "cuda", dtype=dt)
    c = torch.empty((M, N), dtype=dt, device="cuda")
    launch = _triton().prepare(a, b, c, precision=precision)
    assert "A" in launch.realigned or "B" in launch.realigned
    result = chk.check(launch, c, chk.reference(a, b), K, precision)
    assert result.passed, result.reason


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
    result = chk.check(_wg().prepare(a, b, c, precision=precision), c, ref, K, precision)
    assert result.passed, result.reason


def test_stage_params_hands_each_backend_its_own():
    assert set(stage_params(STAGE, "cuda")) == {"WGS", "BN", "STAGES", "COPY_AT", "LOAD_FIRST",
                                                "SUM_TILES", "group"}
    assert set(stage_params(STAGE, "triton")) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M",
                                                  "num_warps", "num_stages", "kmajor_b",
                                                  "regs_mn"}
