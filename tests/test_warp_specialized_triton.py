"""The Triton twin of stage warp_specialized (triton_kernels/warp_specialized.py), a Gluon kernel:
a producer partition issuing TMA loads into an mbarrier ring, consumer warpgroups issuing wgmma.

Its prepare() is called directly (the registry entry comes with the stage's CUDA half), as
`prepare(a, b, c, precision=..., **params)`.

CPU: Gluon kernels do not run under the Triton interpreter, so there are no numbers here (fp8's
neither); CPU tensors get one sentence. The launch a prepare() would make is recorded with meta
tensors (lab.toolchain.triton.recording): which operand is copied in every call (kmajor in tf32 and
fp8, unaligned lines) and how C is stored; the automatic values, the fallbacks and every refusal in
one sentence (kmajor=0 in tf32 and fp8, a k-step under 32 in fp8); the sm_90 refusal. Compiled for
sm_90 without a GPU (FakeDriver, in a child process without the interpreter): the kernel is
warp-specialized (num_warps + 4 warps, setmaxnreg.dec to the producer's 24 registers and .inc for
the consumers), its TMA loads lie in the producer's code and its wgmma in the consumers', C leaves
by TMA store or masked store, and the shared memory the launcher estimates bounds the compiled
kernel's; fp8 is wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 with max_num_imprecise_acc
at Triton's default (2^30) and two scalar loads of the scales. GPU (marked `gpu`; sm_90): every
precision x layout against the float64 reference at odd sizes (fp8: lab.check.make_scaled_inputs,
the scales passed to prepare(), the scaled reference), C in every form, and two calls through
lab.plan.
"""

from __future__ import annotations

import json

import pytest
import torch

from helpers import HAS_GPU, cpu_only, run_python
from lab import check as chk
from lab import plan as plans
from lab.base.errors import LabError
from lab.base.describe import describe
from lab.base.needs import TRITON
from lab.toolchain.triton import recording
from triton_kernels import _common as common
from triton_kernels import warp_specialized as ws
from triton_kernels.variants import warp_specialized as ws_variant

PRECISIONS = ("bf16", "fp16", "tf32", "fp8")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
         "fp8": torch.float8_e4m3fn}
OUT = {**DTYPE, "fp8": torch.bfloat16}  # C's dtype: fp8's is bfloat16
LAYOUTS = ("nn", "nt", "tn", "tt")


def _one_sentence(text: str) -> None:
    assert text and "\n" not in text and text.count(". ") == 0, text


def _meta(M, N, K, precision, layout, c_form="row"):
    dt, ct = DTYPE[precision], OUT[precision]
    a = torch.empty((M, K) if layout[0] == "n" else (K, M), device="meta", dtype=dt)
    b = torch.empty((K, N) if layout[1] == "n" else (N, K), device="meta", dtype=dt)
    a, b = (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())
    c = {"row": lambda: torch.empty((M, N), device="meta", dtype=ct),
         "col": lambda: torch.empty((N, M), device="meta", dtype=ct).t(),
         "strided": lambda: torch.empty((M, 2 * N), device="meta", dtype=ct)[:, ::2]}[c_form]()
    scales = None  # fp8's: two one-element float32 tensors
    if precision == "fp8":
        scales = (torch.empty(1, device="meta"), torch.empty(1, device="meta"))
    return describe(a, b, c, TRITON, precision, scales)


def _recorded(p, **params):
    """(grid, meta) of the kernel launch prepare() makes for problem p, recorded, not launched."""
    with recording() as calls:
        ws.prepare.inner(p, **params)
    (kernel, grid, _, meta), = calls
    # the lesson kernel, or its variant where C is not row-major through a descriptor
    assert kernel is ws.matmul_warp_specialized_kernel or (
        kernel is ws_variant.matmul_warp_specialized_kernel and meta["C_T"] or not meta["C_DESC"])
    return grid, meta


# ------------------------------------------------------------------ what prepare() launches


def test_cpu_tensors_are_refused_in_one_sentence():
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    with pytest.raises(LabError, match="Gluon kernel.*interpreter.*sm_90 GPU") as e:
        ws.prepare(a, b, torch.empty(64, 48), precision="tf32")
    _one_sentence(str(e.value))
    a8, b8, sa, sb = chk.make_scaled_inputs(64, 48, 32, 1, "cpu")
    with pytest.raises(LabError, match="Gluon kernel.*interpreter.*sm_90 GPU") as e:
        ws.prepare(a8, b8, torch.empty(64, 48, dtype=torch.bfloat16), precision="fp8",
                   scale_a=sa, scale_b=sb)
    _one_sentence(str(e.value))


def test_a_gpu_other_than_sm_90_is_refused_in_one_sentence(monkeypatch):
    p = _meta(64, 32, 16, "bf16", "nn")
    monkeypatch.setattr(common, "sm_arch", lambda device: "sm_80")
    with pytest.raises(LabError, match="warp_specialized .*sm_90 GPU.*this GPU is sm_80") as e:
        ws.prepare.inner(p)
    _one_sentence(str(e.value))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_which_operands_are_copied_and_how_each_is_read(layout):
    """bf16/fp16: any layout read where it lies (a column-major operand through its transpose's
    descriptor); tf32 and fp8: an M-major A and an N-major B copied K-major in every call
    (kmajor), so the kernel always sees A row-major and B column-major. fp8's scales are the
    kernel's two arguments after C's strides."""
    for precision in PRECISIONS:
        p = _meta(512, 384, 256, precision, layout)
        with recording() as calls:
            launch = ws.prepare.inner(p)
        launch_copies = launch.realigned
        (kernel, grid, args, meta), = calls
        assert grid == (4 * 3,), grid  # 128 x 128 tiles: 128 x 256 would give 8 for 132 SMs
        if precision in ("tf32", "fp8"):
            want = tuple(n for n, copied in (("A", layout[0] == "t"), ("B", layout[1] == "n"))
                         if copied)
            assert launch_copies == want, (precision, layout)
            assert (meta["A_T"], meta["B_T"]) == (False, True)
        else:
            assert launch_copies == ()
            assert (meta["A_T"], meta["B_T"]) == (layout[0] == "t", layout[1] == "t")
        assert meta["num_warps"] == 8 and meta["PRODUCER_WARPS"] == 1
        # C row-major through a descriptor: the lesson kernel, which takes no C_DESC / C_T
        assert launch.layout["C_DESC"] and not launch.layout["C_T"]
        assert kernel is ws.matmul_warp_specialized_kernel and "C_DESC" not in meta
        scales = p.scales if precision == "fp8" else (None, None)  # the tensors themselves
        assert all(x is y for x, y in zip(args[11:13], scales, strict=True)), args


def test_unaligned_operands_are_copied_and_an_unaligned_c_is_stored_masked():
    """bf16 7919 x 6007 x 3001: A's and B's lines (6002 and 12014 bytes) are not multiples of 16
    bytes, so both are copied; C's neither, so it is stored masked, with OFFSET64 where C spans
    2^31 elements."""
    p = _meta(7919, 6007, 3001, "bf16", "nn")
    with recording() as calls:
        launch = ws.prepare.inner(p)
    assert launch.realigned == ("A", "B")
    (kernel, _, _, meta), = calls
    assert kernel is ws_variant.matmul_warp_specialized_kernel  # C stored masked: the variant
    assert not meta["C_DESC"] and meta["OFFSET64"] is False
    n = 47000
    a = torch.empty((n, 64), device="meta", dtype=torch.bfloat16)
    b = torch.empty((64, n), device="meta", dtype=torch.bfloat16)
    c = torch.empty((n, 2 * n), device="meta", dtype=torch.bfloat16)[:, ::2]
    _, meta = _recorded(describe(a, b, c, TRITON, "bf16"))
    assert meta["OFFSET64"] is True and not meta["C_DESC"]


# ------------------------------------------------------------------ parameters


def test_the_automatic_values_per_precision_and_shape():
    for precision, want in (("bf16", (256, 64, 4, 0)), ("fp16", (256, 64, 4, 0)),
                            ("tf32", (256, 32, 4, 1)), ("fp8", (256, 128, 4, 1))):
        r = ws.OFFER.resolve({}, 4096, 4096, 4096, precision, 132)
        assert tuple(r[k] for k in ("BLOCK_N", "BLOCK_K", "num_stages", "kmajor")) == want
        assert ws.OFFER.check({}, precision) is None
        assert ws.OFFER.show(r) == (f"BLOCK_M=128,BLOCK_N=256,BLOCK_K={want[1]},GROUP_M=8,"
                                    f"num_warps=8,num_stages=4,kmajor={want[3]}")
        assert ws.smem_bytes(r, precision) <= common.SMEM_LIMIT
    # fp8: the ring of 128-byte k-steps is the larger; C's staging tile is bf16
    r = ws.OFFER.resolve({}, 4096, 4096, 4096, "fp8", 132)
    assert ws.smem_bytes(r, "fp8") == 4 * 384 * 128 + ws.BARRIER_BYTES
    # fewer 128 x 256 tiles than SMs: 128 columns (1025^3: 45 tiles for 132 SMs)
    assert ws.OFFER.resolve({}, 1025, 1025, 1025, "bf16", 132)["BLOCK_N"] == 128
    assert ws.OFFER.resolve({"BLOCK_N": 256}, 1025, 1025, 1025, "bf16", 132)["BLOCK_N"] == 256
    # 4 consumer warps: 256 accumulators per thread at 128 x 256; the fallback tile is taken
    r = ws.OFFER.resolve({"num_warps": 4}, 4096, 4096, 4096, "bf16", 132)
    assert (r["BLOCK_N"], r["num_stages"]) == (128, 3)
    assert ws.OFFER.kernel_names({}, "bf16") == ("matmul_warp_specialized_kernel",
                                                 "realign_copy_kernel")
    assert ws.OFFER.precisions == PRECISIONS


def test_every_refusal_is_one_sentence():
    bad = [
        ({"BLOCK_M": 32}, "bf16", "BLOCK_M must be 64"), ({"BLOCK_N": 96}, "bf16", "powers of two"),
        ({"num_warps": 16}, "bf16", "num_warps must be 4 or 8"),
        ({"num_warps": 4, "BLOCK_M": 256}, "bf16", "at most 32 rows per consumer warp"),
        ({"GROUP_M": 0}, "bf16", "GROUP_M"), ({"num_stages": 1}, "bf16", "never be refilled"),
        ({"kmajor": 2}, "bf16", "kmajor must be"), ({"kmajor": 0}, "tf32", "K-major only"),
        ({"kmajor": 0}, "fp8", "K-major only"), ({"BLOCK_K": 16}, "fp8", "fp8 wgmma's k of 32"),
        ({"subtile": 1}, "bf16", "no parameter subtile"),
        ({"BLOCK_M": 256, "BLOCK_N": 256}, "bf16", "256 fp32 accumulators"),
        ({"BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5}, "fp16", "KiB of shared memory"),
        ({}, "3xtf32", "precision must be one of bf16, fp16, tf32"),
    ]
    for params, precision, words in bad:
        with pytest.raises(LabError, match=words) as info:
            ws.OFFER.validate(params, precision)
        _one_sentence(str(info.value))
    assert ws.OFFER.check({"kmajor": 0}, "bf16") is None  # 16-bit operands: any layout
    assert ws.OFFER.check({"kmajor": 1, "num_stages": 2}, "bf16") is None


# ------------------------------------------------------------------ compiled for sm_90 (no GPU)

# Each case compiled as its prepare() would launch it (recorded with meta tensors, then
# JITFunction.warmup for an sm_90 FakeDriver) in a child process without the interpreter.
PTX_PROBE = r"""
import json, re, sys
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab.base.needs import TRITON
from lab.base.describe import describe
from lab.toolchain.triton import FakeDriver, recording
from triton_kernels import warp_specialized as ws
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
      "fp8": torch.float8_e4m3fn}
out = []
for precision, layout, c_form, params in json.loads(sys.argv[1]):
    M = N = K = 4096
    dt = DT[precision]
    ct = torch.bfloat16 if precision == "fp8" else dt  # C's dtype
    a = torch.empty((M, K) if layout[0] == "n" else (K, M), device="meta", dtype=dt)
    b = torch.empty((K, N) if layout[1] == "n" else (N, K), device="meta", dtype=dt)
    a, b = (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())
    c = {"row": lambda: torch.empty((M, N), device="meta", dtype=ct),
         "col": lambda: torch.empty((N, M), device="meta", dtype=ct).t(),
         "strided": lambda: torch.empty((M, 2 * N), device="meta", dtype=ct)[:, ::2],
         # unit column stride, lines 4098 bytes apart (masked), 2^31 elements apart (OFFSET64)
         "offset64": lambda: torch.empty((M, 2 ** 31 // (M - 1) + 1), device="meta",
                                         dtype=ct)[:, :N]}[c_form]()
    scales = None  # fp8's: two one-element float32 tensors
    if precision == "fp8":
        scales = (torch.empty(1, device="meta"), torch.empty(1, device="meta"))
    with recording() as calls:
        ws.prepare.inner(describe(a, b, c, TRITON, precision, scales), **params)
    (kernel, grid, args, meta), = calls
    # (the lesson kernel, C row-major through a descriptor, takes no OFFSET64)
    assert meta.get("OFFSET64", False) == (c_form == "offset64")
    previous = driver._active
    driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
    try:
        compiled = kernel.warmup(*args, grid=grid, **meta)
    finally:
        driver._active = previous
    ptx = compiled.asm["ptx"]
    lines = ptx.splitlines()
    def where(pattern):
        return [i for i, s in enumerate(lines) if re.search(pattern, s)]
    def regs(way):
        return sorted({int(m) for m in re.findall(rf"setmaxnreg\.{way}\S*\s+(\d+)", ptx)})
    dec = where(r"setmaxnreg\.dec")
    out.append({
        "triton": triton.__version__, "warps": compiled.metadata.num_warps,
        "dec": regs("dec"), "inc": regs("inc"),
        "dec_line": dec[0] if dec else None,
        "tma_load": where(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global"),
        "wgmma": where(r"wgmma\.mma_async"), "mma_sync": ptx.count("mma.sync"),
        "expect_tx": ptx.count("mbarrier.arrive.expect_tx"),
        "tma_store": len(where(r"cp\.async\.bulk\.tensor\.2d\.global\.shared")),
        "st_global": ptx.count("st.global"), "ld_global": ptx.count("ld.global"),
        "shared": compiled.metadata.shared,
        "estimate": ws.smem_bytes(ws.resolve_config(precision, params, M=M, N=N), precision),
        "num_warps": meta["num_warps"],
        "ops": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.[\w.]+", ptx))),
        "imprecise": sorted({int(x) for x in re.findall(r"maxNumImpreciseAcc = (\d+)",
                                                        compiled.asm["ttgir"])})})
print(json.dumps(out))
"""

COMPILED = [
    ("bf16", "nn", "row", {}), ("fp16", "tt", "col", {}), ("tf32", "nn", "row", {}),
    ("bf16", "nt", "strided", {"BLOCK_M": 64, "BLOCK_N": 128}),
    ("bf16", "tn", "row", {"num_warps": 4, "num_stages": 3}),
    ("fp16", "nn", "offset64", {}), ("fp8", "nt", "row", {}), ("fp8", "tn", "strided", {}),
]


@pytest.fixture(scope="module")
def compiled_sm90():
    if HAS_GPU:
        pytest.skip("compiled on the GPU itself by the GPU tests")
    r = run_python(PTX_PROBE, json.dumps(COMPILED), timeout=1800, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: "
                        + r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    return dict(enumerate(json.loads(r.stdout.strip().splitlines()[-1])))


@cpu_only
@pytest.mark.parametrize("i", range(len(COMPILED)),
                         ids=["-".join([p, lay, c] + [f"{k}={v}" for k, v in x.items()])
                              for p, lay, c, x in COMPILED])
def test_compiled_for_sm90_the_kernel_is_warp_specialized(compiled_sm90, i):
    precision, c_form = COMPILED[i][0], COMPILED[i][2]
    f = compiled_sm90[i]
    # the consumers' warps and one producer warp, rounded up to a warpgroup
    assert f["warps"] == f["num_warps"] + 4, f
    # registers move: the producer's warpgroup gives them back, the consumers take them
    assert f["dec"] == [ws.PRODUCER_REGS], f
    assert f["inc"] and max(f["inc"]) >= 232, f
    # the roles: Triton lays the consumers' code (the default partition) out first and the
    # producer's after its setmaxnreg.dec; the TMA loads are all in the latter, wgmma in the
    # former (a Triton whose layout of the partitions differs makes this say so)
    assert f["tma_load"] and f["wgmma"] and f["mma_sync"] == 0, f
    assert min(f["tma_load"]) > f["dec_line"] > max(f["wgmma"]), f
    assert f["expect_tx"] > 0, f  # the producer arms each full barrier with the tiles' bytes
    # no operand comes through plain loads; fp8's two scales do (scalar loads)
    assert f["ld_global"] == (2 if precision == "fp8" else 0), f
    if precision == "fp8":  # e4m3 x e4m3 into fp32, the whole K in wgmma's accumulator
        assert f["ops"] == ["wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"], f
        assert f["imprecise"] == [2**30], f
    if c_form in ("strided", "offset64"):
        assert f["tma_store"] == 0 and f["st_global"] > 0, f
    else:
        assert f["tma_store"] > 0 and f["st_global"] == 0, f
    # C's staging tile shares the ring's memory: the estimate (the larger of the two, and the
    # barriers) bounds the compiled kernel's shared memory
    assert f["shared"] <= f["estimate"] <= common.SMEM_LIMIT, f


# ------------------------------------------------------------------ GPU

gpu = pytest.mark.gpu


def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the warp-specialized twin needs an sm_90 GPU")


def _inputs(M, N, K, precision, layout, seed=1):
    """(a, b, scales) on the GPU: lab.check.inputs_for (fp8: e4m3 operands and their per-tensor
    scales; scales None in the other precisions)."""
    return chk.inputs_for(precision, M, N, K, seed, "cuda", layout)


def _scale_kwargs(scales) -> dict:
    return {} if scales is None else {"scale_a": scales[0], "scale_b": scales[1]}


def _check(launch, c, a, b, precision, scales=None):
    result = chk.check(launch, c, chk.reference(a, b, scales), a.shape[1], precision)
    assert result.passed, result.reason


@gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_precision_and_layout_at_odd_and_round_sizes(precision, layout):
    """33x17x9 (every operand copied, C masked), 520x264x200 (K's last k-step past K: zeros from
    the TMA unit; tiles past M and N), 1025^3 and 512^3, each with the automatic values, then
    small tiles and a 2-slot ring at 520x264x200."""
    _need_sm90()
    cases = [((33, 17, 9), {}), ((520, 264, 200), {}), ((1025, 1025, 1025), {}),
             ((512, 512, 512), {}),
             ((520, 264, 200), {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 2}),
             ((520, 264, 200), {"num_warps": 4, "BLOCK_N": 128})]
    for (M, N, K), params in cases:
        a, b, scales = _inputs(M, N, K, precision, layout)
        c = torch.empty(M, N, device="cuda", dtype=OUT[precision])
        launch = ws.prepare(a, b, c, precision=precision, **_scale_kwargs(scales), **params)
        _check(launch, c, a, b, precision, scales)


@gpu
def test_bf16_at_7919x6007x3001_against_torch():
    _need_sm90()
    M, N, K = 7919, 6007, 3001
    a, b, _ = _inputs(M, N, K, "bf16", "nn")
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    launch = ws.prepare(a, b, c, precision="bf16")
    _check(launch, c, a, b, "bf16")
    assert launch.realigned == ("A", "B") and not launch.layout["C_DESC"]
    ref = torch.matmul(a, b)
    rel = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < 2e-2, rel


@gpu
def test_c_in_every_form():
    _need_sm90()
    # M = 304: a column-major C's lines (608 bytes) start on 16-byte boundaries, so its
    # transpose has a descriptor
    M, N, K = 304, 200, 136
    a, b, _ = _inputs(M, N, K, "fp16", "nt")
    forms = {
        "row": (torch.empty(M, N, device="cuda", dtype=torch.float16), (True, False)),
        "col": (torch.empty(N, M, device="cuda", dtype=torch.float16).t(), (True, True)),
        "strided": (torch.empty(M, 2 * N, device="cuda", dtype=torch.float16)[:, ::2],
                    (False, False)),
    }
    for name, (c, (desc, c_t)) in forms.items():
        launch = ws.prepare(a, b, c, precision="fp16")
        assert (launch.layout["C_DESC"], launch.layout["C_T"]) == (desc, c_t), name
        _check(launch, c, a, b, "fp16")


@gpu
def test_two_calls_of_one_signature_through_a_plan():
    """What lab.matmul does with a second call of a signature (lab.plan): the steps replayed on
    the new tensors, the scratch allocator found, the copies redone."""
    _need_sm90()
    for precision, (M, N, K) in (("bf16", (1024, 1024, 1024)), ("bf16", (515, 333, 259)),
                                 ("tf32", (512, 384, 256)), ("fp8", (1024, 1024, 1024)),
                                 ("fp8", (515, 333, 259))):
        kwargs = {"precision": precision}
        a1, b1, s1 = _inputs(M, N, K, precision, "nn", seed=1)
        c1 = torch.empty(M, N, device="cuda", dtype=OUT[precision])
        launch = ws.prepare(a1, b1, c1, **kwargs, **_scale_kwargs(s1))
        plan = plans.make_plan(launch, ws.prepare, kwargs, a1, b1, c1, "warp_specialized",
                               scales=s1 or (None, None))
        assert plan.replay is not None
        _check(launch, c1, a1, b1, precision, s1)
        for seed in (2, 3):
            a2, b2, s2 = _inputs(M, N, K, precision, "nn", seed=seed)
            c2 = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
            plan(a2, b2, c2, s2 or (None, None))
            torch.cuda.synchronize()
            result = chk.compare(c2, chk.reference(a2, b2, s2), K, precision)
            assert result.passed, (precision, result.reason)


# ------------------------------------------- the lesson compiles to its variant's PTX (no GPU)

# The lesson kernel (C row-major through one TMA store, its partitions written in the file, the
# descriptors, the ring's barriers, the store of C and wgmma's accumulator layout through
# _common's Gluon wrappers) against the former kernel, unchanged in
# triton_kernels/variants/warp_specialized.py: test_hopper_triton.py's LESSON_PROBE.
WS_LESSON_CASES = [
    ("warp_specialized", "bf16", "nn", {}), ("warp_specialized", "fp16", "tt", {}),
    ("warp_specialized", "tf32", "nn", {}), ("warp_specialized", "fp8", "nt", {}),
    ("warp_specialized", "bf16", "tn", {"BLOCK_M": 64, "BLOCK_N": 128}),
    ("warp_specialized", "fp16", "nt", {"num_warps": 4, "num_stages": 3}),
]


@pytest.fixture(scope="module")
def ws_lessons_sm90():
    from test_hopper_triton import compile_lessons

    if HAS_GPU:
        pytest.skip("the lesson and the variant are compared where no GPU is (a FakeDriver)")
    return dict(enumerate(compile_lessons(WS_LESSON_CASES)))


@cpu_only
@pytest.mark.parametrize("i", range(len(WS_LESSON_CASES)),
                         ids=["-".join([p, lay] + [f"{k}={v}" for k, v in x.items()])
                              for _, p, lay, x in WS_LESSON_CASES])
def test_the_lesson_compiles_to_the_variants_ptx(ws_lessons_sm90, i):
    f = ws_lessons_sm90[i]
    assert f["lesson"] and f["variant"], f
    assert f["wgmma"] > 0 and f["same"], f
