"""The CUDA launcher of stage mma chooses its defaults per precision (cuda_kernels/mma.py, AUTO).

BM=0, BN=0, BK=0, WM=0, WN=0, STAGES=0 and frags=0 (the registry's defaults) stand for one
configuration per precision taken from the CUDA searches on the H100 (results/autotune.json, the
`|mma|cuda|` entries of 2026-11-23, and the top-5 tables of
results/2026-11-23-h100/06-tune-cuda-*.log), with a shape rule (a 128 x 128 row when the tuned
tile gives fewer blocks than the GPU has SMs) and a fit rule (the previous fixed defaults where
the tuned values would be refused next to explicit ones), as the wgmma stage's Triton twin's
(tests/test_wgmma_defaults.py). CPU only, no GPU: the resolution, the numbers it comes from,
validate(), NVRTC builds without spills, what prepare() and lab.compare report, the cached
entries and the tuner's space.
"""

from __future__ import annotations

import itertools
import re
import pandas as pd
import pytest
import torch

from lab import autotune as at
from lab import check as chk
from lab.base.errors import LabError
from lab.stages import get_stage, parse_variants
from mma_defaults_helpers import (CACHE, DTYPE, GPU, PRECISIONS, ROOT, cached_entries, cpu_only,
                                  one_sentence, run_lab)

LOGS = ROOT / "results" / "2026-11-23-h100"
LAYOUTS = ("nn", "nt", "tn", "tt")
ES = {"tf32": 4, "3xtf32": 4, "bf16": 2, "fp16": 2}
NAMES = ("BM", "BN", "BK", "WM", "WN", "STAGES", "frags")


def _row(*values) -> dict:
    return dict(zip(NAMES, values))


# the module docstring's table: BM, BN, BK, WM, WN, STAGES, frags
EXPECTED = {"tf32": _row(256, 128, 32, 64, 64, 4, 2), "3xtf32": _row(128, 64, 16, 32, 64, 3, 1),
            "bf16": _row(256, 128, 64, 128, 32, 3, 2), "fp16": _row(256, 128, 64, 128, 32, 3, 2)}
# ... and on problems whose tuned tile gives fewer blocks than SMs (3xtf32 keeps its 128 x 64)
SMALL = {"tf32": _row(128, 128, 16, 64, 64, 4, 2), "3xtf32": EXPECTED["3xtf32"],
         "bf16": _row(128, 128, 64, 128, 32, 3, 2), "fp16": _row(128, 128, 64, 128, 32, 3, 2)}
# 12 x 11 = 132 blocks of 256 x 128: as many as an H100 has SMs (the shape rule keeps the tile)
BIG_M, BIG_N = 256 * 12, 128 * 11


def _mma():
    return get_stage("mma").module("cuda")


def _params(spec: str = "mma") -> dict:
    return parse_variants([spec])[0].params_for("cuda")


def _text(config: dict) -> str:
    return ",".join(f"{k}={config[k]}" for k in (*NAMES, "group"))


# ------------------------------------------------------------------ the resolved defaults


def test_registry_defaults_are_the_automatic_values():
    assert _params() == {**dict.fromkeys(NAMES, 0), "group": 8}  # no wgmma: stage wgmma
    assert _mma().DEFAULTS == dict.fromkeys(NAMES, 0)
    assert {p: _mma().AUTO[p] for p in PRECISIONS} == EXPECTED
    assert {p: _mma().SMALL_GRID[p] for p in PRECISIONS} == SMALL


@pytest.mark.parametrize("precision", PRECISIONS)
def test_resolved_defaults_per_precision(precision):
    mma = _mma()
    want = EXPECTED[precision]
    assert mma.config(precision, **_params()) == want  # no shape: the tuned row
    assert mma.config(precision, **_params(), M=BIG_M, N=BIG_N) == want
    assert mma.config(precision, **_params(), M=4096, N=4096) == want
    assert mma.config(precision, **_params(), M=8192, N=8192) == want
    # 64^3 and 2048^3 (8 x 16 = 128 blocks of 256 x 128 for 132 SMs): the small-grid row
    for n in (64, 1025, 2048):
        assert mma.config(precision, **_params(), M=n, N=n) == SMALL[precision], n
    # what the helpers, the build and the launch geometry make of the defaults (no shape)
    assert mma.resolve(precision) == (want["BK"], want["frags"])
    assert mma.warp_n(0, precision) == want["WN"]
    d = mma.defines(**_params(), precision=precision)
    assert (d["BM"], d["BN"], d["BK"], d["WM"], d["WN"], d["STAGES"], d["FRAGS"], d["GROUP"]) == \
        (*want.values(), 8)
    grid, block, smem = mma.geometry(1000, 1000, 1000, **_params(), precision=precision)
    assert grid == (-(-1000 // want["BM"]) * -(-1000 // want["BN"]), 1, 1)
    assert block == ((want["BM"] // want["WM"]) * (want["BN"] // want["WN"]) * 32, 1, 1)
    assert smem == want["STAGES"] * (want["BM"] + want["BN"]) * want["BK"] * ES[precision]
    assert mma.launch_config(64, 64, precision, **_params()) == {**SMALL[precision], "group": 8}


def _log_tables(precision: str, size: int) -> tuple[dict, dict]:
    """({configuration: [search ms]}, {configuration: refined ms}) of a tuning log, the
    configuration with the values its automatic ones had when it was tuned (BK=0: 64 bytes of k;
    frags=0: 2, or 1 in 3xtf32), so frags=0 and the explicit frags it meant are one build."""
    part = {"tf32": "tf32", "3xtf32": "3x", "bf16": "half", "fp16": "half"}[precision]
    text = (LOGS / f"06-tune-cuda-{part}-{size}.log").read_text()
    head = rf"mma cuda nn {size}x{size}x{size} {precision}"

    def key(params: str) -> tuple:
        p = {k: int(v) for k, v in (kv.split("=") for kv in params.split(","))}
        p["BK"] = p["BK"] or 64 // ES[precision]
        p["frags"] = p["frags"] or (1 if precision == "3xtf32" else 2)
        return tuple(p[k] for k in NAMES)

    searched: dict = {}
    for params, ms in re.findall(head + r" search \[\d+/\d+\] (\S+): ([\d.]+) ms", text):
        searched.setdefault(key(params), []).append(float(ms))
    refined: dict = {}
    for params, ms in re.findall(head + r" refine \[\d+/\d+\] (\S+): refined ([\d.]+) ms", text):
        refined[key(params)] = min(float(ms), refined.get(key(params), float("inf")))
    return searched, refined


def _behind_the_winner(precision: str, size: int, row: dict) -> float:
    """The row's time over the winner's at this size: refined over refined where the row was
    refined (the top-5 tables), else search over search (the row's fastest timing of the build)."""
    searched, refined = _log_tables(precision, size)
    winner = min(refined, key=refined.get)
    k = tuple(row[n] for n in NAMES)
    if k in refined:
        return refined[k] / refined[winner]
    return min(searched[k]) / min(searched[winner])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_tuned_row_is_within_a_few_percent_of_the_winner_at_both_sizes(precision):
    """The numbers of the module docstring, from results/2026-11-23-h100/06-tune-cuda-*.log."""
    behind = {n: _behind_the_winner(precision, n, EXPECTED[precision]) for n in (4096, 8192)}
    assert max(behind.values()) <= 1.035, behind
    quoted = {"tf32": (1.022, 1.0), "3xtf32": (1.0, 1.0), "bf16": (1.031, 1.031),
              "fp16": (1.0, 1.002)}[precision]
    assert (round(behind[4096], 3), round(behind[8192], 3)) == quoted, behind
    # the small-grid row (these logs time no small problem): within a few percent at 4096 too
    assert _behind_the_winner(precision, 4096, SMALL[precision]) <= 1.035
    if precision == "tf32":  # the tuned row merely narrowed to 128 x 128 is far behind
        narrowed = {**EXPECTED["tf32"], "BM": 128}
        assert _behind_the_winner("tf32", 4096, narrowed) > 1.3


def test_the_automatic_values_are_cached_winners():
    """Every CUDA mma entry of results/autotune.json dated 2026-11-23 (4 precisions x 4096^3 and
    8192^3, nn) is there; the table's rows are the winners of 3xtf32 (both sizes), tf32 at 8192^3
    and fp16 at 4096^3, and the others keep their explicit values."""
    mma = _mma()
    entries = {k: e for k, e in cached_entries("cuda").items()
               if str(e.get("date", "")).startswith("2026-11-23")}
    assert {(e["precision"], e["shape"][0]) for e in entries.values()} == \
        {(p, n) for p in PRECISIONS for n in (4096, 8192)}
    for key, e in entries.items():
        prec, n, params = e["precision"], e["shape"][0], e["params"]
        c = mma.config(prec, **params)
        assert all(c[k] == v for k, v in params.items() if k in NAMES and v), key
        if (prec, n) in {("3xtf32", 4096), ("3xtf32", 8192), ("tf32", 8192), ("fp16", 4096)}:
            assert c == EXPECTED[prec], key


def test_the_shape_rule_compares_the_grid_with_the_sm_count():
    from lab import roofline
    from lab.base import device

    mma = _mma()
    # one helper with the wgmma stage's Triton twin, whose shape rule counts the same SMs
    triton_twin = get_stage("wgmma").module("triton")
    assert mma.DEFAULT_SMS == triton_twin.DEFAULT_SMS == device.DEFAULT_SMS == 132
    assert mma.sm_count is triton_twin.sm_count is device.sm_count
    assert mma.sm_count(torch.device("cpu")) == mma.sm_count(torch.device("meta")) == 132
    res = lambda M, N, **kw: mma.config("bf16", **{**_params(), **kw}, M=M, N=N)  # noqa: E731
    assert res(BIG_M, BIG_N)["BM"] == 256  # 132 blocks: not fewer than the SMs
    assert res(BIG_M, BIG_N - 128) == SMALL["bf16"]  # 12 x 10 = 120 < 132
    assert res(BIG_M - 256, BIG_N) == SMALL["bf16"]  # 11 x 11 = 121
    assert res(BIG_M, BIG_N - 128, sms=120)["BM"] == 256  # a GPU with 120 SMs
    assert mma.launch_config(BIG_M, BIG_N - 128, "bf16", sms=120, **_params())["BM"] == 256
    # explicit values are never changed, and only the automatic ones move
    assert res(64, 64, BM=256, BN=256)["BM"] == res(64, 64, BM=256, BN=256)["BN"] == 256
    assert res(64, 64, STAGES=4) == {**SMALL["bf16"], "STAGES": 4}
    assert res(64, 64, BM=256) == EXPECTED["bf16"]  # the small row with BM=256: the same
    # a tile the small row would not narrow keeps the tuned row (tf32's small row has BK 16)
    assert mma.config("tf32", **{**_params(), "BM": 256}, M=64, N=64) == EXPECTED["tf32"]
    assert mma.config("tf32", **{**_params(), "BN": 64}, M=64, N=64) == \
        {**SMALL["tf32"], "BN": 64}
    # the grid counts the tile given: 64-row blocks make twice as many
    assert res(BIG_M // 2, BIG_N, BM=64)["BN"] == 128
    # 3xtf32's tuned 128 x 64 tile is never narrowed
    assert mma.config("3xtf32", **_params(), M=1, N=1) == EXPECTED["3xtf32"]
    # where the small row would be refused next to explicit values, the tuned tile stays:
    # BK=16 in bf16 leaves 128 x 16 A tiles 256 chunks for 128 threads: accepted; WN=128 with
    # the small row's WM=128 is a 128 x 128 warp tile, refused, so the fit rule decided already
    assert res(64, 64, BK=16) == {**SMALL["bf16"], "BK": 16}


# ------------------------------------------------------------------ explicit values


@pytest.mark.parametrize("precision", PRECISIONS)
def test_explicit_values_override_the_automatic_ones(precision):
    mma = _mma()
    explicit = _row(64, 64, 32, 32, 32, 2, 1)
    spec = "mma:" + ",".join(f"{k}={v}" for k, v in {**explicit, "group": 4}.items())
    params = _params(spec)
    assert params == {**explicit, "group": 4}
    mma.validate(**params, precision=precision)
    for M, N in ((1, 1), (64, 64), (BIG_M, BIG_N), (8192, 8192)):
        assert mma.config(precision, **params, M=M, N=N) == explicit
        assert mma.launch_config(M, N, precision, **params) == {**explicit, "group": 4}
    d = mma.defines(**params, precision=precision)
    assert (d["BM"], d["BN"], d["BK"], d["WM"], d["WN"], d["STAGES"], d["FRAGS"], d["GROUP"]) == \
        (64, 64, 32, 32, 32, 2, 1, 4)


@pytest.mark.parametrize("changes,precision,want", [
    # the tuned values fit next to these: they stay
    (dict(BM=128), "bf16", _row(128, 128, 64, 128, 32, 3, 2)),
    (dict(STAGES=4), "bf16", _row(256, 128, 64, 128, 32, 4, 2)),  # 192 KiB
    (dict(BN=32), "bf16", _row(256, 32, 64, 128, 32, 3, 2)),  # (Python only: not a registry choice)
    (dict(frags=1), "tf32", _row(256, 128, 32, 64, 64, 4, 1)),
    (dict(BK=16), "tf32", _row(256, 128, 16, 64, 64, 4, 2)),
    (dict(STAGES=4), "tf32", _row(256, 128, 32, 64, 64, 4, 2)),  # the tuned value anyway
    # refused next to these: every automatic value takes the previous fixed default
    (dict(BM=64), "bf16", _row(64, 128, 32, 64, 64, 4, 2)),  # under the 128-row warp tile
    (dict(WN=64), "fp16", _row(128, 128, 32, 64, 64, 4, 2)),  # a 128 x 64 warp tile
    (dict(BM=256, BN=256, STAGES=4), "bf16", _row(256, 256, 32, 64, 64, 4, 2)),  # 256 KiB
    (dict(BN=32), "3xtf32", _row(128, 32, 16, 64, 32, 4, 1)),  # under the 64-wide warp tile
    (dict(BN=256), "tf32", _row(128, 256, 16, 64, 64, 4, 2)),  # 256 KiB with 256 x 256 x 32
], ids=lambda x: x if isinstance(x, str) else None)
def test_the_fit_rule_keeps_variants_that_ran_before(changes, precision, want):
    mma = _mma()
    params = {**_params(), **changes}
    mma.validate(**params, precision=precision)
    assert mma.config(precision, **params) == want
    assert mma.config(precision, **params, M=8192, N=8192) == want


def test_the_fit_rule_falls_back_as_a_whole_and_only_where_needed():
    mma = _mma()
    # no automatic value left: nothing to fall back to
    full = _params("mma:BM=128,BN=128,BK=32,WM=64,WN=64,STAGES=4,frags=2")
    assert mma.config("bf16", **full) == {k: full[k] for k in NAMES}
    # PREVIOUS is what the registry defaults were: 128 x 128, 64 x 64 warps (64 x 32 in 3xtf32),
    # 4 stages, 64 bytes of k, frags 2 (1 in 3xtf32)
    assert mma.PREVIOUS == {"tf32": _row(128, 128, 16, 64, 64, 4, 2),
                            "3xtf32": _row(128, 128, 16, 64, 32, 4, 1),
                            "bf16": _row(128, 128, 32, 64, 64, 4, 2),
                            "fp16": _row(128, 128, 32, 64, 64, 4, 2)}


# -------------------------------------------------------------------------- validate


@pytest.mark.parametrize("changes,precision,words", [
    (dict(BM=96), None, "powers of two"),
    (dict(BK=24), "bf16", "powers of two"),
    (dict(STAGES=5), None, "STAGES (the cp.async ring depth) must be 0 (automatic), 2, 3 or 4"),
    (dict(frags=3), None, "frags must be 0 (automatic), 1 or 2"),
    (dict(BM=True), None, "must be an integer"),
    (dict(), "fp32", "precision must be one of"),
    # automatic values named with what they stood for (the previous defaults: tuned refused too)
    (dict(BK=64), "tf32", "mma with BM=0 (automatic: 128), BN=0 (automatic: 128), BK=64, WM=0 "
                          "(automatic: 64), WN=0 (automatic: 64), STAGES=0 (automatic: 4), "
                          "frags=0 (automatic: 2) in tf32: it needs 262144 bytes"),
    (dict(BN=32), "tf32", "WN=0 (automatic: 64)"),
    (dict(BN=32), None, "in tf32: BM must be a multiple of WM and BN a multiple of WN"),
    (dict(WN=128), "bf16", "WM=0 (automatic: 64), WN=128"),
    (dict(WN=128), "bf16", "accumulators"),
    (dict(BM=256, BN=256, WM=32, WN=32), None, "64 warps"),
    (dict(BM=64, BK=16, WM=32, WN=32), "bf16", "does not split evenly"),
    (dict(BK=8), None, "BK must be at least 16"),
])
def test_validate_refuses_in_one_sentence(changes, precision, words):
    with pytest.raises(LabError) as info:
        _mma().validate(**{**_params(), **changes}, precision=precision)
    one_sentence(str(info.value))
    assert words in str(info.value), str(info.value)


def test_validate_accepts_the_defaults_and_the_registry_refuses_other_values():
    mma = _mma()
    mma.validate(**_params())
    for prec in PRECISIONS:
        mma.validate(**_params(), precision=prec)
    assert _params("mma:BM=0,BN=0,BK=0,WM=0,WN=0,STAGES=0,frags=0") == _params()
    assert parse_variants(["mma:BM=0,STAGES=0"])[0].label == "mma"
    for spec, words in (("mma:BM=32", "takes one of 0, 64, 128, 256"),
                        ("mma:WM=16", "takes one of 0, 32, 64, 128"),
                        ("mma:STAGES=1", "takes one of 0, 2, 3, 4")):
        with pytest.raises(LabError, match=words):
            parse_variants([spec])


def test_validate_checks_what_the_automatic_values_stand_for():
    """Over the tuner's whole CUDA space in each precision: a configuration validate() accepts
    resolves, without a shape and for a small and a large problem, to concrete values the
    kernel's rules accept; one it refuses is refused in its resolved form. Without a precision,
    validate() accepts what the precision-free rules accept in every precision."""
    mma = _mma()
    space = [p for p in get_stage("mma").params if "cuda" in p.backends and p.name in NAMES]
    assert [p.name for p in space] == list(NAMES)
    for values in itertools.product(*(p.choices for p in space)):
        params = dict(zip(NAMES, values))
        oks = {}
        for prec in PRECISIONS:
            try:
                mma.validate(**params, precision=prec)
                oks[prec] = True
            except LabError:
                oks[prec] = False
            if oks[prec]:
                for shape in ({}, dict(M=64, N=64), dict(M=8192, N=8192)):
                    c = mma.config(prec, **params, **shape)
                    assert min(c.values()) > 0 and mma._refusal(c, prec) is None, (prec, params)
            else:
                assert mma._refusal(mma.config(prec, **params), prec), (prec, params)
        try:
            mma.validate(**params)
            general = True
        except LabError:
            general = False
        assert general == all(mma._general_refusal(mma.config(p, **params)) is None
                              for p in PRECISIONS), params


# ------------------------------------------------------------------ NVRTC: no spills


@cpu_only
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_automatic_default_build_is_spill_free_in_every_layout(arch, precision,
                                                                     monkeypatch):
    """The tuned row (large problems, and build() without a shape) and the small-grid row (what
    prepare() builds for a small problem), in all four layouts."""
    monkeypatch.setenv("LAB_CUDA_ARCH", arch)
    mma = _mma()
    configs = {"tuned": _params(), "small grid": mma.launch_config(64, 64, precision, **_params())}
    for name, params in configs.items():
        for layout in LAYOUTS:
            build = mma.build(**params, precision=precision, layout=layout)
            assert build.arch == arch
            assert build.spill_bytes == 0 and build.stack_frame == 0, \
                (name, precision, layout, build.log)
            assert 0 < build.registers <= 255
            # the registers of one block fit an SM (allocated per warp in units of 256)
            threads = mma.geometry(64, 64, 64, **params, precision=precision)[1][0]
            assert threads * (-(-build.registers // 8) * 8) <= 65536


# ------------------------------------------------------------ what prepare() and the row report


@pytest.mark.parametrize("precision", PRECISIONS)
def test_prepare_builds_launches_and_reports_the_resolved_configuration(precision,
                                                                        monkeypatch):
    """prepare() (its body, on CPU tensors; the launcher that needs a GPU replaced by one that
    keeps what it is given) builds and sizes the launch with the configuration resolved for the
    problem, and carries it as launch.config and as the `params` text of launch.resources."""
    from cuda_kernels._build import resources
    from lab.base.contract import Prepared
    from lab.base.describe import describe
    from lab.base.needs import CUDA

    mma = _mma()
    monkeypatch.setattr(mma, "stage_launcher", lambda build, geometry, p: Prepared(
        lambda: None, resources=resources(build, *geometry), build=build, geometry=geometry))
    for (M, N), want in (((33, 40), SMALL[precision]), ((BIG_M, BIG_N), EXPECTED[precision])):
        a, b = chk.make_inputs(M, N, 16, 0, "cpu", dtype=DTYPE[precision])
        p = describe(a, b, torch.empty((M, N), dtype=DTYPE[precision]), CUDA, precision)
        launch = mma.prepare.inner(p, **_params())
        assert launch.config == {**want, "group": 8}
        assert launch.resources["params"] == _text(launch.config)
        assert launch.resources["params"] == mma.config_text(launch.config)
        # the contract's resolve and show say the same without a GPU (CPU mode's params column)
        assert mma.OFFER.show(mma.OFFER.resolve(_params(), M, N, 16, precision, 132)) == \
            launch.resources["params"]
        defined = dict(o[2:].split("=", 1) for o in launch.build.options if "=" in o)
        assert {k: int(defined["FRAGS" if k == "frags" else k]) for k in NAMES} == want
        grid, block, smem = launch.geometry
        assert grid[0] == -(-M // want["BM"]) * -(-N // want["BN"])
        assert block[0] == (want["BM"] // want["WM"]) * (want["BN"] // want["WN"]) * 32
        assert smem == want["STAGES"] * (want["BM"] + want["BN"]) * want["BK"] * ES[precision]
        assert launch.resources["spill_bytes"] == 0
    # explicit values run as given, whatever the shape
    launch = mma.prepare.inner(p, **_params("mma:BM=128,BN=64,WM=64,WN=32,STAGES=2"))
    assert launch.resources["params"].startswith("BM=128,BN=64,")
    assert ",WM=64,WN=32,STAGES=2," in launch.resources["params"]


@pytest.fixture(scope="module")
def compare_cpu_csv(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "run.csv"
    r = run_lab("lab.compare", "--stage", "mma", "--backend", "cuda", "--precision",
                "tf32,3xtf32,bf16,fp16", "--sizes", "64,4096", "--mode", "cpu", "--csv", str(out),
                timeout=600, COLUMNS="250")
    assert r.returncode == 0, r.stderr + r.stdout
    return pd.read_csv(out)


@cpu_only
def test_compare_in_cpu_mode_compiles_every_precision_spill_free(compare_cpu_csv):
    df = compare_cpu_csv
    assert len(df) == 8 and set(df.status) == {"compiled"}, df
    assert set(df.precision) == set(PRECISIONS)
    assert (df.spill_bytes == 0).all() and (df.registers <= 255).all()


@cpu_only
def test_compare_in_cpu_mode_reports_the_resolved_configuration(compare_cpu_csv):
    """lab.compare's `params` column (CPU mode compiles the CUDA rows) carries the values the
    launch would run, never the registry's 0s, and threads, grid blocks and shared memory are
    those of that configuration."""
    mma = _mma()
    for row in compare_cpu_csv.itertuples():
        cfg = mma.launch_config(row.M, row.N, row.precision, **_params())
        assert row.params == _text(cfg), row
        grid, block, smem = mma.geometry(row.M, row.N, row.K, **cfg, precision=row.precision)
        assert (row.grid_blocks, row.threads, row.smem_dynamic) == (grid[0], block[0], smem), row
        # the build of the row is the contract's compile, what prepare() builds for these sizes
        build, geometry = mma.OFFER.compile(_params(), row.M, row.N, row.K, row.layout,
                                            row.precision)
        assert geometry == (grid, block, smem) and build.registers == row.registers, row
        want = SMALL if row.M == 64 else EXPECTED
        assert cfg == {**want[row.precision], "group": 8}


# -------------------------------------------------- the cache, the tuner's space, dry run


@pytest.mark.parametrize("key", sorted(cached_entries("cuda")))
def test_cached_entries_load_through_lookup_and_still_build(key, monkeypatch):
    """Every cached CUDA mma winner loads through lab.autotune.lookup with its explicit values,
    passes validate() in its precision, keeps them when resolved (a 0 becomes the precision's
    automatic value) and builds for sm_90 without spills, in nn as it was tuned."""
    monkeypatch.setenv("LAB_CUDA_ARCH", "sm_90")
    e = cached_entries("cuda")[key]
    M, N, K = e["shape"]
    prec = e["precision"]
    params, note = at.lookup("mma", "cuda", M, N, K, e["layout"], prec, cache=CACHE, gpu=GPU)
    assert params is not None, note
    assert {k: params[k] for k in e["params"]} == e["params"]
    mma = _mma()
    mma.validate(**params, precision=prec)
    c = mma.config(prec, **params, M=M, N=N)
    for k in NAMES:
        assert c[k] == (params[k] or mma.AUTO[prec][k]), (k, c, params)
    build = mma.build(**mma.launch_config(M, N, prec, **params), precision=prec,
                      layout=e["layout"])
    assert build.spill_bytes == 0, build.log


def test_the_tuners_space_keeps_explicit_values_and_the_automatic_ones():
    space = at.space_of(get_stage("mma"), "cuda")
    choices = {p.name: p.choices for p in space.searched}
    assert choices["BM"] == choices["BN"] == (0, 64, 128, 256)
    assert choices["BK"] == (0, 16, 32, 64)
    assert choices["WM"] == choices["WN"] == (0, 32, 64, 128)
    assert choices["STAGES"] == (0, 2, 3, 4)
    assert choices["frags"] == (0, 1, 2)
    # the search starts from the automatic defaults; nothing is pinned (the wgmma kernel, which
    # changes TF32's numerics, is its own stage now)
    assert space.default == _params()
    assert "wgmma" not in space.pinned
    (stage, restrict), = at._parse_stages("mma:BM=0|256,STAGES=0|3", ("cuda",))
    assert restrict == {"BM": (0, 256), "STAGES": (0, 3)}


@cpu_only
def test_autotune_dry_run_exits_0_and_starts_from_the_automatic_defaults():
    """The first candidates only (--max-configs): the whole CUDA space compiles for over ten
    minutes (run it by hand: python -m lab.autotune --stage mma --backend cuda --precision bf16
    --sizes 4096 --dry-run)."""
    r = run_lab("lab.autotune", "--stage", "mma", "--backend", "cuda", "--precision", "bf16",
                "--sizes", "4096", "--dry-run", "--max-configs", "3", "--jobs", "1", timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "mma cuda nn 4096x4096x4096 bf16" in r.stdout
    first = re.search(r"\n\s+1\. (BM=0,BN=0,BK=0,WM=0,WN=0,STAGES=0,frags=0,group=8): (.*)",
                      r.stdout)
    assert first, r.stdout
    assert "pruned" not in first.group(2) and "256 threads" in first.group(2), first.group(0)
