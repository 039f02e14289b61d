"""The Triton twin of stage wgmma chooses its defaults per precision (triton_kernels/wgmma.py,
Knobs). It is the kernel that was stage mma's Triton twin when the H100 searches ran, so its
winners are cached under `|mma|triton|` in results/autotune.json (tests/mma_defaults_helpers.py,
cached_entries).

BLOCK_N=0, BLOCK_K=0, num_stages=0 and kmajor_b=-1 (the registry's defaults) stand for the
winners of the H100 searches cached in results/autotune.json, with a shape rule (128 x 128 when a
128 x 256 grid has fewer programs than SMs) and a fit rule (the previous fixed defaults where the
tuned values would be refused next to explicit ones). CPU: the resolution, what the launch and
the row report, validate(), the results at every precision under the interpreter, the cached
configurations, the tuner's space and its dry run. The GPU timings are not checked here.
"""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
import torch

from lab import autotune as at
from lab import check as chk
from lab.base.errors import LabError
from lab.stages import get_stage, parse_variants
from mma_defaults_helpers import (CACHE, DTYPE, GPU, PRECISIONS, as_stage, cached_entries,
                                  cpu_only, one_sentence, run_lab)
from triton_kernels.mma import vec_width_and_hints

STAGE = "wgmma"

# the table of the module docstring: BLOCK_N (large problems), BLOCK_K, num_stages, kmajor_b
# (regs_mn: on in tf32 only, REGS)
REGS = {"tf32": 1, "3xtf32": 0, "bf16": 0, "fp16": 0}
EXPECTED = {"tf32": (256, 32, 4, 1), "3xtf32": (128, 64, 3, 1), "bf16": (256, 64, 4, 0),
            "fp16": (256, 64, 4, 0)}
# 12 x 11 = 132 programs of 128 x 256: as many as an H100 has SMs (the shape rule keeps 256)
BIG_M, BIG_N = 128 * 12, 256 * 11


def _mma():
    return get_stage(STAGE).module("triton")


def _params(spec: str = STAGE) -> dict:
    return parse_variants([spec])[0].params_for("triton")


def _entries() -> dict:
    return cached_entries("triton", STAGE)


def _operands(M, N, K, precision, layout="nn", seed=0):
    a, b = chk.make_inputs(M, N, K, seed, "cpu", dtype=DTYPE[precision], layout=layout)
    return a, b, torch.empty((M, N), dtype=DTYPE[precision])


# ------------------------------------------------------------------ the resolved defaults


def test_registry_defaults_are_the_automatic_values():
    d = _params()
    assert (d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["GROUP_M"], d["num_warps"],
            d["num_stages"], d["kmajor_b"], d["regs_mn"]) == (128, 0, 0, 8, 8, 0, -1, -1)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_resolved_defaults_per_precision(precision):
    mma = _mma()
    bn, bk, stages, kmajor = EXPECTED[precision]
    want = {"BLOCK_N": bn, "BLOCK_K": bk, "num_stages": stages, "kmajor_b": kmajor,
            "regs_mn": REGS[precision]}
    assert mma.resolve(precision, **_params()) == want  # no shape: the tuned tile
    assert mma.resolve(precision, **_params(), M=BIG_M, N=BIG_N) == want
    assert mma.resolve(precision, **_params(), M=4096, N=4096) == want
    # 1025^3: 9 x 5 = 45 programs of 128 x 256 for 132 SMs -> 128 x 128 (81 programs)
    small = mma.resolve(precision, **_params(), M=1025, N=1025)
    assert small == {**want, "BLOCK_N": 128}


def test_the_automatic_values_are_the_cached_winners():
    """Every Triton mma entry of results/autotune.json (4096^3 and 8192^3, nn) won with the table's
    values, BLOCK_K automatic or equal to it, except fp16 at 8192^3 (BLOCK_K=32). (The tf32
    entries were searched with regs_mn=1 and kmajor_b=0 only.)"""
    mma = _mma()
    entries = _entries()
    assert {(e["precision"], e["shape"][0]) for e in entries.values()} == \
        {(p, n) for p in PRECISIONS for n in (4096, 8192)}
    for key, e in entries.items():
        w, prec = e["params"], e["precision"]
        M, N, _ = e["shape"]
        r = mma.resolve(prec, **_params(), M=M, N=N)
        assert (w["BLOCK_M"], w["GROUP_M"], w["num_warps"]) == (128, 8, 8), key
        assert (w["BLOCK_N"], w["num_stages"]) == (r["BLOCK_N"], r["num_stages"]), key
        assert w.get("regs_mn", -1) in (-1, r["regs_mn"]), key
        if not r["regs_mn"]:  # with regs_mn an nn problem copies nothing, whatever kmajor_b says
            assert int(w["kmajor_b"]) == r["kmajor_b"], key
        if (prec, M) == ("fp16", 8192):
            assert w["BLOCK_K"] == 32
        else:
            assert mma.block_k(w["BLOCK_K"], prec) == r["BLOCK_K"], key


def test_the_shape_rule_compares_the_grid_with_the_sm_count():
    mma = _mma()
    assert mma.DEFAULT_SMS == 132
    assert mma.sm_count(torch.device("cpu")) == mma.sm_count(torch.device("meta")) == 132
    res = lambda M, N, **kw: mma.resolve("bf16", **_params(), M=M, N=N, **kw)["BLOCK_N"]  # noqa: E731
    assert res(BIG_M, BIG_N) == 256  # 132 programs: not fewer than the SMs
    assert res(BIG_M, BIG_N - 256) == 128  # 12 x 10 = 120 < 132
    assert res(BIG_M - 128, BIG_N) == 128  # 11 x 11 = 121
    assert res(BIG_M, BIG_N - 256, sms=120) == 256  # a GPU with 120 SMs
    # the grid counts the BLOCK_M given: 64-row tiles make twice as many programs
    assert mma.resolve("bf16", **{**_params(), "BLOCK_M": 64}, M=BIG_M // 2 + 1,
                       N=BIG_N)["BLOCK_N"] == 256
    # an explicit BLOCK_N is never changed, and 3xtf32's tuned tile is 128 anyway
    assert mma.resolve("bf16", **{**_params(), "BLOCK_N": 256}, M=33, N=40)["BLOCK_N"] == 256
    assert mma.resolve("3xtf32", **_params(), M=BIG_M, N=BIG_N)["BLOCK_N"] == 128


# ------------------------------------------------------------ what the launch reports


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_launch_reports_the_resolved_configuration(precision):
    mma = _mma()
    bn, bk, stages, kmajor = EXPECTED[precision]
    a, b, c = _operands(33, 40, 24, precision)  # 16-byte lines: nothing copied into new ones
    launch = mma.prepare(a, b, c, precision=precision, **_params())
    want = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": 8,
            "num_stages": stages, "kmajor_b": kmajor, "regs_mn": REGS[precision]}
    assert launch.config == want  # 33 x 40: one program, so 128 x 128
    assert launch.resources["params"] == (
        f"BLOCK_M=128,BLOCK_N=128,BLOCK_K={bk},GROUP_M=8,num_warps=8,num_stages={stages},"
        f"kmajor_b={kmajor},regs_mn={REGS[precision]}")
    # 3xtf32 copied B K-major; tf32 multiplies B^T from registers instead (regs_mn), bf16/fp16
    # take B as it is
    # (a copy runs in the call exactly where kernel_only, the kernel alone, is set)
    assert (launch.kernel_only is not None) == (precision == "3xtf32")
    assert launch.kernel_problem.b.col_major == (precision in ("tf32", "3xtf32"))  # tf32: A^T
    # a problem with enough programs gets the tuned tile (prepared, not run: the interpreter)
    a, b, c = _operands(BIG_M, BIG_N, 16, precision)
    launch = mma.prepare(a, b, c, precision=precision, **_params())
    assert launch.config == {**want, "BLOCK_N": bn}
    assert f"BLOCK_N={bn}," in launch.resources["params"]


@cpu_only
def test_the_row_shows_the_configuration_that_ran(tmp_path):
    """lab.compare's `params` column (and the line that says what an :auto row ran) carries the
    resolved values, never the 0s and -1 of the registry."""
    out = tmp_path / "run.csv"
    r = run_lab("lab.compare", "--stage", "wgmma,wgmma:auto", "--backend", "triton", "--sizes",
                "33x40x17", "--precision", "tf32,bf16", "--csv", str(out), timeout=300,
                COLUMNS="250")
    assert r.returncode == 0, r.stderr + r.stdout
    df = pd.read_csv(out)
    assert set(df.status) == {"pass"} and len(df) == 4
    want = {"tf32": "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,GROUP_M=8,num_warps=8,num_stages=4,"
                    "kmajor_b=1,regs_mn=1",
            "bf16": "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,GROUP_M=8,num_warps=8,num_stages=4,"
                    "kmajor_b=0,regs_mn=0"}
    for row in df.itertuples():
        assert row.params == want[row.precision], row
    # CPU mode: the :auto row says it checked (not ran) the defaults, and names them resolved
    said = " ".join(r.stdout.split())
    assert "checked under the Triton interpreter, not timed" in said
    assert want["tf32"].replace(",", ", ") in said


# ------------------------------------------------------------------ explicit values


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
def test_explicit_values_override_the_automatic_ones(precision):
    mma = _mma()
    explicit = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4,
                "num_stages": 2, "kmajor_b": 0, "regs_mn": 0}
    spec = "wgmma:" + ",".join(f"{k}={v}" for k, v in explicit.items())
    params = _params(spec)
    assert params == explicit
    a, b, c = _operands(70, 45, 33, precision)
    launch = mma.prepare(a, b, c, precision=precision, **params)
    assert launch.config == explicit
    # kmajor_b=0: B stays N-major (its lines of 45 elements are copied into 16-byte lines)
    assert launch.kernel_problem.b.row_major and launch.realigned == ("A", "B")
    assert chk.check(launch, c, chk.reference(a, b), 33, precision).passed
    # kmajor_b=1 copies B in bf16/fp16 too (and in tf32 with regs_mn off); BLOCK_N=256 on a
    # tiny problem stays 256
    launch = mma.prepare(a, b, c, precision=precision,
                         **_params("wgmma:kmajor_b=1,regs_mn=0,BLOCK_N=256"))
    assert launch.kernel_problem.b.col_major and launch.config["BLOCK_N"] == 256
    assert chk.check(launch, c, chk.reference(a, b), 33, precision).passed


def test_the_fit_rule_keeps_variants_that_ran_before():
    """Where the tuned values would be refused next to an explicit value, every automatic value
    takes the previous fixed default (BLOCK_N 128, BLOCK_K 128 bytes, 3 stages)."""
    mma = _mma()
    for spec, prec, want in (
            ("wgmma:num_warps=4", "bf16", (128, 64, 3)),  # 256 accumulators a thread with 256
            ("wgmma:num_stages=5", "bf16", (128, 64, 5)),  # 240 KiB with 256
            ("wgmma:BLOCK_K=64", "tf32", (128, 64, 3)),  # 384 KiB with 256 x 4 stages
            ("wgmma:num_stages=4", "3xtf32", (128, 32, 4)),  # 256 KiB with BLOCK_K=64
            ("wgmma:BLOCK_N=256", "3xtf32", (256, 32, 3)),  # 288 KiB with BLOCK_K=64
            ("wgmma:num_stages=4", "bf16", (256, 64, 4)),  # fits: the tuned values stay
            ("wgmma:BLOCK_M=64", "tf32", (256, 32, 4))):
        params = _params(spec)
        mma.validate(**params, precision=prec)
        r = mma.resolve(prec, **params)
        assert (r["BLOCK_N"], r["BLOCK_K"], r["num_stages"]) == want, spec


# -------------------------------------------------------------------------- validate


@pytest.mark.parametrize("changes,precision,words", [
    (dict(kmajor_b=2), None, "kmajor_b must be -1"),
    (dict(BLOCK_N=96), None, "powers of two"),
    (dict(BLOCK_K=8), "bf16", "at least 16"),
    (dict(num_stages=-1), None, "num_stages must be 0"),
    (dict(num_warps=3), None, "num_warps must be a power of two"),
    (dict(BLOCK_M=256, BLOCK_N=256, num_warps=4), None, "512 accumulators"),
    (dict(BLOCK_K=128, num_stages=5), None, "BLOCK_N=0 (automatic: 128)"),
    (dict(BLOCK_K=128, num_stages=4), "bf16", "in bf16 with BLOCK_M=128, BLOCK_N=0 (automatic: "
                                              "128), BLOCK_K=128, num_warps=8, num_stages=4 needs"),
    (dict(BLOCK_K=64, num_stages=4), "tf32", "256 KiB of shared memory in tf32"),
    (dict(BLOCK_N=256, BLOCK_K=128), "3xtf32", "num_stages=0 (automatic: 3)"),
    (dict(BLOCK_M=256, BLOCK_N=0, num_warps=4), "fp16", "256 accumulators"),
    (dict(), "fp32", "precision must be one of"),
])
def test_validate_refuses_in_one_sentence(changes, precision, words):
    with pytest.raises(LabError) as info:
        _mma().validate(**{**_params(), **changes}, precision=precision)
    one_sentence(str(info.value))
    assert words in str(info.value)


def test_validate_accepts_the_defaults_and_the_registry_refuses_other_values():
    mma = _mma()
    mma.validate(**_params())
    for prec in PRECISIONS:
        mma.validate(**_params(), precision=prec)
        assert mma.smem_bytes(**_params(), precision=prec) == 192 * 1024
    assert _params("wgmma:kmajor_b=-1,BLOCK_N=0,num_stages=0") == _params()
    assert parse_variants(["wgmma:kmajor_b=-1,BLOCK_N=0"])[0].label == "wgmma"
    for spec, words in (("wgmma:kmajor_b=2", "takes one of -1, 0, 1"),
                        ("wgmma:BLOCK_N=32", "takes one of 0, 64, 128, 256"),
                        ("wgmma:num_stages=1", "takes one of 0, 2, 3, 4, 5")):
        with pytest.raises(LabError, match=words):
            parse_variants([spec])


def test_validate_checks_what_the_automatic_values_stand_for():
    """Over the tuner's whole Triton space in each precision: a configuration validate() accepts
    resolves, for a small and a large problem, to concrete values the kernel's rules accept; one
    it refuses is refused in its resolved form too."""
    mma = _mma()
    stage = get_stage(STAGE)
    space = [p for p in stage.params if "triton" in p.backends]
    for prec in PRECISIONS:
        for values in itertools.product(*(p.choices for p in space)):
            params = dict(zip((p.name for p in space), values))
            try:
                mma.validate(**params, precision=prec)
                ok = True
            except LabError:
                ok = False
            for M, N in ((33, 40), (BIG_M, BIG_N)):
                r = mma.resolve(prec, **params, M=M, N=N)
                assert min(r["BLOCK_N"], r["BLOCK_K"], r["num_stages"]) > 0
                assert r["kmajor_b"] in (0, 1)
                why = mma._refusal(prec, params["BLOCK_M"], r["BLOCK_N"], r["BLOCK_K"],
                                   params["num_warps"], r["num_stages"])
                if ok:
                    assert why is None, (prec, params, M, N, why)
            if not ok:
                r = mma.resolve(prec, **params)
                assert mma._refusal(prec, params["BLOCK_M"], r["BLOCK_N"], r["BLOCK_K"],
                                    params["num_warps"], r["num_stages"])


# ------------------------------------------------ results at every precision (interpreted)


@cpu_only
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(33, 40, 17), (65, 31, 70)], ids=lambda s: "x".join(map(str, s)))
def test_new_defaults_are_correct_in_every_precision(precision, layout, shape):
    """Against a float64 reference of the operands the kernel received (bf16 / fp16 already
    rounded); the interpreter multiplies TF32 and 3xTF32 in fp32."""
    M, N, K = shape
    a, b, c = _operands(M, N, K, precision, layout, seed=M + N + K)
    launch = _mma().prepare(a, b, c, precision=precision, **_params())
    result = chk.check(launch, c, chk.reference(a, b), K, precision)
    assert result.passed, (precision, layout, shape, result.reason)
    kmajor = precision == "3xtf32" and layout == "nn"
    # 3xtf32 copies an N-major B K-major; a K-major B (nt) is left alone; tf32 multiplies an
    # N-major B from registers (regs_mn) and bf16/fp16 read it as it is: neither transposes
    assert launch.kernel_problem.b.col_major == (kmajor or precision == "tf32" or layout == "nt")
    # every operand the kernel reads has 16-byte lines: the user's, or a zero-padded copy made
    # in the call (launch.realigned; kmajor_b's K-major copy is one such buffer itself)
    kp, vec = launch.kernel_problem, 16 // a.element_size()
    hints = vec_width_and_hints(kp)
    for name, op in (("A", kp.a), ("B", kp.b)):
        assert (hints[f"VEC_{name}"] or name in launch.realigned or (kmajor and name == "B")
                or (op.rows if op.col_major else op.cols) < vec), (name, op)
    copied = launch.kernel_only is not None  # the call runs a copy before the kernel
    assert copied == (kmajor or bool(launch.realigned))


# -------------------------------------------------- the cache, the tuner's space, dry run


@cpu_only
@pytest.mark.parametrize("key", sorted(_entries()))
def test_cached_configurations_still_validate_and_run(key):
    """The explicit winners of results/autotune.json (kmajor_b stored as true/false) pass
    validate() in their precision and compute correct results under the interpreter."""
    e = _entries()[key]
    prec, params = e["precision"], e["params"]
    mma = _mma()
    mma.validate(**params, precision=prec)
    a, b, c = _operands(33, 40, 17, prec)
    launch = mma.prepare(a, b, c, precision=prec, **params)
    assert launch.config == {**params, "kmajor_b": int(params["kmajor_b"]),
                             "BLOCK_K": mma.block_k(params["BLOCK_K"], prec),
                             "regs_mn": mma.resolve(prec, **params)["regs_mn"]}
    assert chk.check(launch, c, chk.reference(a, b), 17, prec).passed


def test_cached_entries_load_through_lookup(tmp_path):
    """The cache stores kmajor_b as true / false (it was a bool switch); Param.coerce reads them
    as 1 / 0 of the integer switch, so the tuned entries still run. The entries searched under
    stage mma's name are looked up as this stage's (a cache file of them keyed `|wgmma|`)."""
    cache = tmp_path / "autotune.json"
    whole = json.loads(CACHE.read_text())
    cache.write_text(json.dumps({**whole, "entries": as_stage(_entries(), STAGE)}))
    for e in _entries().values():
        M, N, K = e["shape"]
        params, note = at.lookup(STAGE, "triton", M, N, K, e["layout"], e["precision"],
                                 cache=cache, gpu=GPU)
        assert params is not None, note
        assert params["kmajor_b"] == int(e["params"]["kmajor_b"])
        assert not isinstance(params["kmajor_b"], bool)


def test_kmajor_b_takes_a_bool_where_it_took_one():
    """An integer switch with choices 0 and 1 takes True / False (Python) and true / on / false /
    off (command line) as 1 / 0; -1 stays the automatic choice."""
    prm = {p.name: p for p in get_stage(STAGE).params}["kmajor_b"]
    assert prm.coerce(True) == 1 and prm.coerce(False) == 0 and prm.coerce(-1) == -1
    assert prm.parse(STAGE, "on") == 1 and prm.parse(STAGE, "false") == 0
    assert prm.parse(STAGE, "-1") == -1
    with pytest.raises(LabError):
        prm.parse(STAGE, "2")


def test_the_tuners_space_keeps_explicit_values_and_the_automatic_ones():
    space = at.space_of(get_stage(STAGE), "triton")
    choices = {p.name: p.choices for p in space.searched}
    assert choices["BLOCK_N"] == (0, 64, 128, 256)
    assert choices["BLOCK_K"] == (0, 32, 64, 128)
    assert choices["num_stages"] == (0, 2, 3, 4, 5)
    assert choices["kmajor_b"] == (-1, 0, 1)
    assert space.default == _params()  # the search starts from the automatic defaults
    # restricted spaces as the tuning logs wrote them, and with the automatic values
    (stage, restrict), = at._parse_stages(
        "wgmma:BLOCK_M=128|256,BLOCK_N=128|256,BLOCK_K=0|64,GROUP_M=8,num_warps=8,"
        "num_stages=3|4,kmajor_b=1", ("triton",))
    assert restrict["kmajor_b"] == (1,) and restrict["BLOCK_N"] == (128, 256)
    (stage, restrict), = at._parse_stages("wgmma:BLOCK_N=0|256,num_stages=0|4,kmajor_b=-1|0",
                                          ("triton",))
    assert restrict == {"BLOCK_N": (0, 256), "num_stages": (0, 4), "kmajor_b": (-1, 0)}


def test_autotune_dry_run_exits_0():
    r = run_lab("lab.autotune", "--stage", STAGE, "--backend", "triton", "--precision", "bf16",
                "--sizes", "4096", "--dry-run", timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "wgmma triton nn 4096x4096x4096 bf16" in r.stdout
    assert "1. BLOCK_M=128,BLOCK_N=0,BLOCK_K=0,GROUP_M=8,num_warps=8,num_stages=0,kmajor_b=-1" \
        in r.stdout


# ------------------------------------------------------------------ on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_the_automatic_defaults_on_the_gpu(precision, layout):
    """The compiled defaults (wgmma on an H100, the copy of B where kmajor_b resolves on) at odd
    shapes, a grid below the SM count (the shape rule's 128-wide tile) and a grid above it."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for M, N, K in [(1, 1, 1), (33, 40, 17), (1025, 1025, 1025), (2048, 3072, 520)]:
        a, b = chk.make_inputs(M, N, K, M + K, "cuda", dtype=DTYPE[precision], layout=layout)
        c = torch.empty((M, N), dtype=DTYPE[precision], device="cuda")
        launch = _mma().prepare(a, b, c, precision=precision, **_params())
        result = chk.check(launch, c, chk.reference(a, b), K, precision)
        assert result.passed, (precision, layout, M, N, K, launch.config, result.reason)
        cfg = launch.config
        assert cfg["BLOCK_N"] in (128, 256) and cfg["num_stages"] > 0 and cfg["kmajor_b"] in (0, 1)
