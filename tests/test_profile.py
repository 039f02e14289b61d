"""lab.profile on the CPU: ncu CSV parsing, metric mapping, roofline arithmetic, SASS instruction
mix, --sass/--ptx, the ncu command line, and one-sentence CLI errors.

THE NCU FIXTURE IS SYNTHETIC. tests/data/ncu_synthetic.csv was written by hand in the exact layout
of `ncu --csv --page raw` (header row of column names, a units row, one row per kernel); its
numbers are made up to be easy to check by hand and are NOT measurements. Its units are the
scaled ones ncu prints without `--print-units base` ("usecond", "Mbyte", "cycle/nsecond"), to
exercise the unit handling. A real recording from the H100 goes to tests/data/ncu_tiled_4096.csv
(`python -m lab.profile --stage tiled --backend cuda --size 4096 --no-cublas --reports DIR`, then
`ncu --import DIR/tiled-cuda.ncu-rep --csv --page raw --print-units base > that file`);
`test_real_recording_*` run on it when it is there. To point the exact-value tests at another
file, change SYNTHETIC and the EXPECTED numbers below.
"""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import ROOT, run_lab
from lab import ncu as N
from lab import roofline as R
from lab.base.errors import LabError

DATA = ROOT / "tests" / "data"
SYNTHETIC = DATA / "ncu_synthetic.csv"  # hand-made, see the module docstring
REAL = DATA / "ncu_tiled_4096.csv"  # a raw ncu recording on the H100, when present
HAS_GPU = torch.cuda.is_available()

# What the synthetic file says, worked out by hand (M = N = K = 4096).
FLOPS_4096 = 2 * 4096**3  # 137,438,953,472
EXPECTED = {
    "matmul_tiled": dict(duration_ms=12.5, sm_clock_ghz=1.75, dram_bytes=1.3e9,
                         gld_spr=4.0, gst_spr=4.0, stalls=["mio_throttle", "barrier",
                                                           "short_scoreboard"],
                         bound="compute"),
    "matmul_naive": dict(duration_ms=250.0, sm_clock_ghz=1.98, dram_bytes=30_067.11e6,
                         gld_spr=16.0, gst_spr=32.0, stalls=["long_scoreboard", "lg_throttle",
                                                             "no_instruction"],
                         bound="memory"),
}


def run_cli(*args, timeout=300, env_extra=None, drop=()):
    return run_lab("lab.profile", *args, timeout=timeout, drop=drop, **(env_extra or {}))


def notes(stderr: str) -> list[str]:
    """The notes on stderr, each as one line again: a note is wrapped to the terminal's width,
    its continuation lines indented by two spaces."""
    out: list[str] = []
    for line in stderr.strip().splitlines():
        if line.startswith("  ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


@pytest.fixture(scope="module")
def kernels():
    return {k.kernel: k for k in N.parse_raw_csv(SYNTHETIC.read_text())}


# ------------------------------------------------------------------------------ CSV parsing


def test_synthetic_fixture_parses_into_one_record_per_kernel(kernels):
    assert list(kernels) == ["matmul_tiled", "matmul_naive"]
    k = kernels["matmul_tiled"]
    assert (k.id, k.block, k.grid, k.cc) == ("0", "(32, 32, 1)", "(128, 128, 1)", "9.0")
    assert k.units["gpu__time_duration.sum"] == "usecond"
    assert k.units["dram__bytes_read.sum"] == "Mbyte"


def test_values_lose_thousands_separators_and_come_in_base_units(kernels):
    k = kernels["matmul_tiled"]
    assert k.get("gpu__time_duration.sum") == pytest.approx(12_500e-6)  # "12,500.00" usecond
    assert k.get("dram__bytes_read.sum") == pytest.approx(1.2e9)  # "1,200.00" Mbyte
    assert k.get("sm__cycles_elapsed.avg.per_second") == pytest.approx(1.75e9)  # cycle/nsecond
    assert k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") == 1_073_741_824
    assert k.get("lts__t_sector_hit_rate.pct") == pytest.approx(88.4)  # % stays %


def test_na_becomes_none(kernels):
    assert kernels["matmul_naive"].get(
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum") is None


@pytest.mark.parametrize("text,unit,expected", [
    ("1,234.5", "usecond", 1.2345e-3),
    ("5", "msecond", 5e-3),
    ("3,000", "nsecond", 3e-6),
    ("2", "second", 2.0),
    ("2", "Kbyte", 2e3),
    ("1.5", "Gbyte/second", 1.5e9),
    ("1.98", "cycle/nsecond", 1.98e9),
    ("1,980", "Mhz", 1.98e9),
    ("12.5", "%", 12.5),
    ("7", "", 7.0),
    ("n/a", "%", None),
    ("", "byte", None),
])
def test_parse_value_units(text, unit, expected):
    got = N.parse_value(text, unit)
    assert got == (None if expected is None else pytest.approx(expected))


def test_parser_skips_profiler_chatter_around_the_table():
    text = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
            "lab.profile target: tiled cuda 64x64x64: launched 1 + 1 times\n"
            + SYNTHETIC.read_text()
            + "==PROF== Disconnected from process 4242\n")
    assert [k.kernel for k in N.parse_raw_csv(text)] == ["matmul_tiled", "matmul_naive"]


def test_parser_without_a_table_is_a_lab_error():
    with pytest.raises(LabError, match="no CSV table"):
        N.parse_raw_csv("==WARNING== No kernels were profiled.\n")


# ----------------------------------------------------------------------------- mapping


def test_every_table_metric_is_a_column_of_the_fixture(kernels):
    cols = set(kernels["matmul_tiled"].values)
    assert set(N.metric_list()) <= cols
    assert not any(m.startswith("regex:") for m in N.metric_list())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_summarize_maps_raw_metrics_to_columns(kernels, name):
    exp = EXPECTED[name]
    s = N.kernel_columns(kernels[name], 4096, 4096, 4096, R.DEFAULT_PEAKS)
    assert s["kernel"] == name
    assert s["duration_ms"] == pytest.approx(exp["duration_ms"])
    assert s["sm_clock_ghz"] == pytest.approx(exp["sm_clock_ghz"])
    assert s["dram_bytes"] == pytest.approx(exp["dram_bytes"])
    assert s["gld_sectors_per_request"] == pytest.approx(exp["gld_spr"])
    assert s["gst_sectors_per_request"] == pytest.approx(exp["gst_spr"])
    assert [s["stall_1"], s["stall_2"], s["stall_3"]] == exp["stalls"]  # 'selected' left out
    assert s["flops"] == FLOPS_4096
    assert s["intensity"] == pytest.approx(FLOPS_4096 / exp["dram_bytes"])
    assert s["achieved_tflops"] == pytest.approx(FLOPS_4096 / (exp["duration_ms"] * 1e-3) / 1e12)
    assert s["bound"] == exp["bound"]


def test_roofline_position_of_the_synthetic_kernels(kernels):
    peaks = R.Peaks(66.9e12, 3.0e12, "test")
    tiled = N.kernel_columns(kernels["matmul_tiled"], 4096, 4096, 4096, peaks)
    # 137.44 GFLOP in 12.5 ms = 10.995 TFLOP/s; intensity 105.7 > ridge 22.3: roof = 66.9
    assert tiled["pct_of_roof"] == pytest.approx(100 * 10.99512 / 66.9, rel=1e-4)
    naive = N.kernel_columns(kernels["matmul_naive"], 4096, 4096, 4096, peaks)
    # 137.44 GFLOP / 30.067 GB = 4.571 FLOP/byte: roof 13.713 TFLOP/s; achieved 0.54976
    assert naive["attainable_tflops"] == pytest.approx(13.7133, rel=1e-4)
    assert naive["pct_of_roof"] == pytest.approx(100 * 0.549756 / 13.7133, rel=1e-4)


def test_missing_metrics_become_na_not_errors(kernels):
    k = kernels["matmul_tiled"]
    values = {m: v for m, v in k.values.items() if m != "dram__bytes_write.sum"}
    partial = N.NcuKernel(k.id, k.kernel, k.block, k.grid, k.cc, values, k.units)
    s = N.kernel_columns(partial, 4096, 4096, 4096, R.DEFAULT_PEAKS)
    assert s["dram_bytes"] is None and s["intensity"] is None and s["bound"] is None
    assert s["duration_ms"] == pytest.approx(12.5)


@pytest.mark.skipif(not REAL.exists(), reason="no real ncu recording in tests/data yet")
def test_real_recording_has_every_column_and_sane_values():
    ks = N.parse_raw_csv(REAL.read_text())
    assert len(ks) == 1 and ks[0].kernel == "matmul_tiled"
    missing = [m for m in N.metric_list() if m not in ks[0].values]
    assert not missing, f"ncu did not report {missing}"
    s = N.kernel_columns(ks[0], 4096, 4096, 4096, R.DEFAULT_PEAKS)
    # the recording (H100, 2026-11-22) says gpu__time_duration.sum = 14,518,272 ns (unit "ns")
    # and dram__bytes_read.sum + dram__bytes_write.sum = 604,428,544 + 67,526,656 bytes
    assert s["duration_ms"] == pytest.approx(14.518272)
    assert s["dram_bytes"] == pytest.approx(604_428_544 + 67_526_656)
    assert 0 < s["occupancy_achieved_pct"] <= 100
    assert s["gld_sectors_per_request"] >= 1


# ------------------------------------------------------------------------------ roofline


def test_h100_anchor_peak_is_66_9_tflops():
    assert R.fp32_peak(132, 1.98e9) == pytest.approx(66.90e12, rel=1e-3)
    assert R.DEFAULT_PEAKS.flops == pytest.approx(66.90e12, rel=1e-3)
    assert R.DEFAULT_PEAKS.bw == 3.0e12


def test_ridge_point():
    assert R.ridge_point(66.9e12, 3.0e12) == pytest.approx(22.3)
    assert R.ridge_point(100.0, 4.0) == 25.0
    with pytest.raises(ValueError):
        R.ridge_point(0, 1)


def test_attainable_is_the_lower_roof():
    assert R.attainable(10.0, 66.9e12, 3.0e12) == pytest.approx(30e12)  # under the slope
    assert R.attainable(100.0, 66.9e12, 3.0e12) == 66.9e12  # flat roof
    assert R.attainable(22.3, 66.9e12, 3.0e12) == pytest.approx(66.9e12)  # ridge
    assert R.attainable(math.inf, 66.9e12, 3.0e12) == 66.9e12
    with pytest.raises(ValueError):
        R.attainable(-1.0, 1.0, 1.0)


def test_classify():
    assert R.classify(10.0, 15e12, 66.9e12, 3.0e12) == ("memory", pytest.approx(50.0))
    assert R.classify(100.0, 33.45e12, 66.9e12, 3.0e12) == ("compute", pytest.approx(50.0))
    assert R.classify(25.0, 100.0, 100.0, 4.0)[0] == "compute"  # at the ridge
    bound, pct = R.classify(4.0, 8.0, 100.0, 4.0)  # roof 16 at intensity 4
    assert (bound, pct) == ("memory", 50.0)


def test_fmt_number():
    assert [N.fmt_number(x) for x in (4_563_402_752, 16_777_216, 1_000, 999.4, 0, None)] == \
        ["4.56G", "16.8M", "1k", "999", "0", "n/a"]


def test_intensity():
    assert R.intensity(1000.0, 10.0) == 100.0
    assert R.intensity(1000.0, 0.0) == math.inf


# ------------------------------------------------------------------------ instruction mix

SNIPPET = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0040*/                   HFMA2.MMA R13, -RZ, RZ, 0, 0 ;
        /*0100*/              @!P0 LDG.E.CONSTANT R4, desc[UR4][R2.64] ;
        /*0110*/               @P1 LDG.E.64 R6, desc[UR4][R8.64] ;
        /*0120*/                   LDG.E.128.CONSTANT R8, desc[UR4][R10.64] ;
        /*0130*/                   LDG.E.128 R12, desc[UR4][R14.64] ;
        /*0140*/                   STS [R0], R4 ;
        /*0150*/                   STS.128 [R0+0x10], R8 ;
        /*0160*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0170*/                   LDS R5, [R2] ;
        /*0180*/                   LDS.64 R6, [R2+0x8] ;
        /*0190*/                   LDS.U.128 R8, [R2+0x10] ;
        /*01a0*/                   FFMA R13, R5, R6, R13 ;
        /*01b0*/                   FFMA.FTZ R13, R7, R8, R13 ;
        /*01c0*/              @!PT FFMA R13, R9, R10, R13 ;
        /*01d0*/                   HMMA.16816.F32 R20, R4, R8, R20 ;
        /*01e0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*01f0*/                   STG.E desc[UR4][R2.64], R13 ;
        /*0200*/                   EXIT ;
        /*0210*/                   NOP;
        /*0220*/                   BRA 0x210;
"""


def test_instruction_mix_on_a_hand_written_snippet():
    mix = N.mix_counts(SNIPPET)
    assert mix["FFMA"] == 3
    assert (mix["LDG.E"], mix["LDG.E.64"], mix["LDG.E.128"]) == (1, 1, 2)
    assert (mix["LDS"], mix["LDS.64"], mix["LDS.128"]) == (1, 1, 1)
    assert (mix["STS"], mix["STG"], mix["BAR"]) == (2, 1, 2)
    assert mix["HMMA"] == 1  # HFMA2.MMA is not an HMMA
    assert mix["total"] == 20  # NOP excluded
    line = N.format_mix(mix)
    assert "FFMA 3" in line and "LDG.E.128 2" in line and "HMMA 1" in line


def test_clean_sass_drops_the_encodings():
    raw = ("        /*0000*/                   LDC R1, c[0x0][0x28] ;   /* 0x00000a00ff017b82 */\n"
           "                                                            /* 0x000ff00000000800 */\n")
    assert N.clean_sass(raw).strip() == "/*0000*/                   LDC R1, c[0x0][0x28] ;"


@pytest.fixture(scope="module")
def stage_sass():
    from lab.stages import BY_NAME, Variant

    def sass(name):
        stage = BY_NAME[name]
        build = stage.module("cuda").build(**Variant(stage, stage.defaults()).params_for("cuda"))
        return N.sass_of_cubin(build.cubin)
    return sass


def test_instruction_mix_of_the_real_tiled_cubin(stage_sass):
    """NVRTC builds tiled for sm_90 here; its inner loop is FFMAs fed from shared memory."""
    text = stage_sass("tiled")
    assert "matmul_tiled" in text
    mix = N.mix_counts(text)
    assert mix["FFMA"] >= 32  # TILE=32, unrolled: at least one FFMA per k
    assert mix["LDS"] + mix["LDS.64"] + mix["LDS.128"] > 0
    assert mix["STS"] >= 2  # one tile element of A and one of B per thread
    assert mix["BAR"] >= 2  # the two __syncthreads
    assert mix["STG"] >= 1


def test_naive_has_no_shared_memory_traffic_and_tiled_does(stage_sass):
    naive = N.mix_counts(stage_sass("naive"))
    tiled = N.mix_counts(stage_sass("tiled"))
    assert naive["LDS"] + naive["LDS.64"] + naive["LDS.128"] + naive["STS"] == 0
    assert naive["FFMA"] > 0 and naive["LDG.E"] > 0
    # tiled loads each global element once per block, then reuses it from shared memory
    assert tiled["LDG.E"] + tiled["LDG.E.64"] + tiled["LDG.E.128"] < tiled["FFMA"]


def test_find_tool_finds_the_pip_cuobjdump():
    assert N.find_tool("cuobjdump") is not None
    assert N.find_tool("surely-not-a-cuda-tool") is None


# ---------------------------------------------------------------------------- PTX helper


def test_ptx_of_the_tiled_build_names_the_kernel():
    from cuda_kernels import tiled
    from lab.toolchain.ptx import ptx, ptx_of, ptx_options

    build = tiled.build()
    text = ptx(build)
    assert ".entry matmul_tiled" in text and "fma.rn.f32" in text and "bar.sync" in text
    assert "-arch=compute_90" in ptx_options(build.options) or build.arch != "sm_90"
    assert not any(o.startswith("-Xptxas") for o in ptx_options(build.options))
    assert ".entry matmul_tiled" in ptx_of("tiled.cu", "matmul_tiled", {"TILE": 16})


# -------------------------------------------------------------------------- ncu command line


def test_ncu_command_profiles_one_launch_without_touching_clocks():
    cmd = N.ncu_command("ncu", ["python3", "-m", "lab.profile"], "matmul_tiled",
                        N.metric_list(), report="/tmp/x.ncu-rep")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--kernel-name") + 1] == "matmul_tiled"
    assert cmd[cmd.index("--nvtx-include") + 1] == f"{N.NVTX_RANGE}/"
    assert "--set" not in cmd and "--section" not in cmd  # only the metrics we need
    assert cmd[cmd.index("--metrics") + 1].split(",") == N.metric_list()
    assert cmd[-3:] == ["python3", "-m", "lab.profile"]
    skip = N.ncu_command("ncu", ["t"], "k", ["m"], nvtx=False, launch_skip=1)
    assert "--nvtx" not in skip and skip[skip.index("--launch-skip") + 1] == "1"
    assert "--csv" in skip and skip[skip.index("--page") + 1] == "raw"


def test_unknown_metric_messages_are_recognised():
    req = ["sm__maximum_warps_per_active_cycle_pct", "dram__bytes_read.sum", "gpu__time_duration.sum"]
    out = ("==PROF== Connected to process 1\n"
           "==ERROR== Failed to find metric sm__maximum_warps_per_active_cycle_pct\n"
           "==ERROR== Failed to find metric regex:^dram__bytes_read(\\.(sum|avg))?$\n")
    assert N.unknown_metrics(out, req) == ["sm__maximum_warps_per_active_cycle_pct",
                                           "dram__bytes_read.sum"]
    assert N.unknown_metrics("all good", req) == []


def test_kernel_names_come_from_the_offer():
    from lab.profiling.targets import kernel_filter, kernel_names
    from lab.stages import BY_NAME, Variant

    stage = BY_NAME["tiled"]
    assert kernel_names(Variant(stage, stage.defaults()), "triton") == ("matmul_tiled_kernel",)
    split = BY_NAME["warptiling"]
    two = Variant(split, {**split.defaults(), "splitk": 4})
    assert kernel_filter(two, "cuda") == "regex:^(matmul_warptiling|splitk_reduce)$"
    assert kernel_filter(two, "triton") == "regex:^(matmul_warptiling_kernel|splitk_reduce_kernel)"
    v = Variant(stage, stage.defaults())
    assert kernel_filter(v, "triton") == "regex:^matmul_tiled_kernel"
    assert kernel_filter(v, "cuda") == "matmul_tiled"


def test_dry_run_prints_the_ncu_command_lines():
    r = run_cli("--stage", "tiled", "--size", "4096", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("ncu ", "/"))]
    profile = [ln for ln in lines if "--metrics" in ln]
    assert len(profile) == 3  # cuBLAS, tiled cuda, tiled triton
    for ln in profile:
        assert "--clock-control none" in ln and "--launch-count 1" in ln
        assert "--_target" in ln and "--size 4096x4096x4096" in ln
    assert any("--kernel-name matmul_tiled " in ln and "--_target cuda" in ln for ln in profile)
    assert any("regex:^matmul_tiled_kernel" in ln and "--_target triton" in ln for ln in profile)
    assert any("--_target cublas" in ln and "nvjet" in ln for ln in profile)
    assert sum("--import" in ln for ln in lines) == 3
    r = run_cli("--stage", "tiled", "--backend", "cuda", "--no-cublas", "--filter", "skip",
                "--dry-run")
    assert r.returncode == 0 and "cublas" not in r.stdout and "--launch-skip 1" in r.stdout


# ------------------------------------------------------------------------------------ output


def test_render_and_csv_from_the_fixture(kernels, tmp_path):
    import pandas as pd
    from rich.console import Console

    from lab.profiling.ncu_table import render, write_csv
    from lab.shapes import Shape

    rows = []
    for k in kernels.values():
        s = N.kernel_columns(k, 4096, 4096, 4096, R.DEFAULT_PEAKS)
        rows.append({"stage": k.kernel.split("_")[1], "backend": "cuda", "params": "",
                     "M": 4096, "N": 4096, "K": 4096, **s, "_values": k.values})
    buf = io.StringIO()
    render(rows, Shape(4096, 4096, 4096), R.DEFAULT_PEAKS, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "mio_throttle 40.5" in text and "memory, " in text and "compute, " in text
    path = write_csv(rows, tmp_path / "p.csv", R.DEFAULT_PEAKS)
    df = pd.read_csv(path)
    assert len(df) == 2 and list(df.kernel) == ["matmul_tiled", "matmul_naive"]
    assert df.duration_ms.tolist() == pytest.approx([12.5, 250.0])
    assert "ncu:gpu__time_duration.sum" in df.columns and "ridge_flop_per_byte" in df.columns


# ------------------------------------------------------------------------- listings (CPU)


def test_sass_of_a_cuda_stage_works_without_a_gpu():
    r = run_cli("--stage", "tiled", "--sass", "--backend", "cuda")
    assert r.returncode == 0, r.stderr
    assert "SASS: tiled cuda matmul_tiled" in r.stdout and "FFMA" in r.stdout
    last = r.stdout.strip().splitlines()[-1]  # the mix sits under the listing (`| tail` shows it)
    assert last.startswith("// instruction mix") and "FFMA " in last and "LDS" in last


def test_ptx_of_a_cuda_stage_works_without_a_gpu():
    r = run_cli("--stage", "naive,tiled:tile=16", "--ptx", "--backend", "cuda")
    assert r.returncode == 0, r.stderr
    assert ".entry matmul_naive" in r.stdout and ".entry matmul_tiled" in r.stdout
    assert "PTX mix" in r.stdout


def test_sass_csv_writes_the_instruction_mix_one_row_per_kernel(tmp_path):
    import pandas as pd

    from cuda_kernels import tiled

    out = tmp_path / "mix.csv"
    r = run_cli("--stage", "naive,tiled", "--sass", "--backend", "cuda", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("// instruction mix")  # still last
    assert r.stderr.strip() == f"wrote {out}"
    df = pd.read_csv(out)
    assert df.stage.tolist() == ["naive", "tiled"] and df.kernel.tolist() == ["matmul_naive",
                                                                              "matmul_tiled"]
    assert df.precision.tolist() == ["fp32", "fp32"]  # the default precision, said per row
    mixes = [ln for ln in r.stdout.splitlines() if ln.startswith("// instruction mix")]
    for (_, row), line in zip(df.iterrows(), mixes):  # the CSV says what the listing says
        assert f"FFMA {row['sass:FFMA']}," in line and f"; {row['sass:total']} instructions" in line
    build = tiled.build()
    row = df.iloc[1]
    assert (row.registers, row.smem_static, row.threads) == (build.registers, build.smem_static,
                                                             1024)
    assert not any(c.startswith("ptx:") for c in df.columns)


def test_ptx_csv_writes_the_ptx_mix(tmp_path):
    import pandas as pd

    out = tmp_path / "ptx.csv"
    r = run_cli("--stage", "tiled", "--ptx", "--backend", "cuda", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    assert len(df) == 1 and df["ptx:fma.rn.f32"].iloc[0] > 0 and df["ptx:bar.sync"].iloc[0] == 2
    assert not any(c.startswith("sass:") for c in df.columns)


def test_sass_and_ptx_together_print_both_listings_per_kernel():
    r = run_cli("--stage", "naive,tiled", "--sass", "--ptx", "--backend", "cuda")
    assert r.returncode == 0, r.stderr
    heads = [ln.split(":")[0] for ln in r.stdout.splitlines() if ln.startswith("// =====")]
    assert heads == ["// ===== PTX", "// ===== SASS"] * 2
    assert r.stdout.count("// PTX mix") == 2 and r.stdout.count("// instruction mix") == 2


@pytest.mark.parametrize("args,flags", [
    (["--sass", "--dry-run"], "--dry-run"),
    (["--ptx", "--dry-run"], "--dry-run"),
    (["--sass", "--ptx", "--dry-run"], "--dry-run"),
    (["--sass", "--reports", "REPORTS"], "--reports"),
    (["--ptx", "--peak-bw", "2", "--filter", "skip"], "--filter, --peak-bw"),
])
def test_listings_refuse_profiling_options(tmp_path, args, flags):
    args = [str(tmp_path / "r") if a == "REPORTS" else a for a in args]
    out = tmp_path / "x.csv"
    r = run_cli("--stage", "tiled", "--backend", "cuda", "--csv", str(out), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"drop {flags}" in lines[0]
    assert not out.exists() and not (tmp_path / "r").exists()


def test_triton_sass_compiles_for_sm90_or_says_why_not():
    """Nice-to-have: Triton compiled for sm_90 with no GPU. Either it works, or it fails with one
    sentence (exit 2) that says a GPU is needed."""
    r = run_cli("--stage", "tiled", "--sass", "--backend", "triton", "--size", "256",
                drop=("TRITON_INTERPRET",))
    if r.returncode == 0:
        assert "matmul_tiled_kernel" in r.stdout and "FFMA" in r.stdout
        assert r.stdout.strip().splitlines()[-1].startswith("// instruction mix")
    else:
        assert r.returncode == 2 and "Traceback" not in r.stderr and "GPU" in r.stderr


# ------------------------------------------------------------------------------ CLI errors


@pytest.mark.parametrize("args,words", [
    (["--stage", "bogus"], "unknown stage 'bogus'"),
    (["--stage", "tiled", "--size", "0"], "positive"),
    (["--stage", "tiled", "--size", "12x"], "MxNxK"),
    (["--stage", "tiled", "--size", "64,128"], "one shape"),
    (["--stage", "tiled", "--backend", "opencl"], "unknown backend opencl"),
    (["--stage", "tiled", "--bogus"], "unrecognized arguments"),
])
def test_usage_errors_are_one_line_and_exit_2(args, words):
    r = run_cli(*args, "--dry-run")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0]


def test_dry_run_refuses_csv(tmp_path):
    """--dry-run profiles nothing, so a --csv beside it would silently write nothing."""
    out = tmp_path / "p.csv"
    r = run_cli("--stage", "tiled", "--dry-run", "--csv", str(out))
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --dry-run") and "drop --csv" in lines[0]
    assert not out.exists()


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU fallback")
def test_profiling_without_a_gpu_says_so_and_shows_the_static_view():
    """The README's example, from a plain shell (no TRITON_INTERPRET): one line saying why nothing
    is profiled, then both kernels compiled for sm_90 with their resources and instruction mix."""
    r = run_cli("--stage", "tiled", "--size", "4096", drop=("TRITON_INTERPRET",),
                env_extra={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = notes(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("note: ") and "Nsight Compute" in lines[0] and "GPU" in lines[0]
    assert "Traceback" not in r.stderr
    # the note (about 180 characters) is wrapped to the terminal at spaces, never mid-word
    raw = r.stderr.strip().splitlines()
    assert len(raw) > 1 and all(len(line) <= 80 for line in raw)
    assert lines[0].endswith("below is the static view instead: each kernel compiled for sm_90, "
                             "never run")
    out = r.stdout
    assert "Static view" in out and "matmul_tiled " in out and "matmul_tiled_kernel" in out
    assert "SASS FFMA" in out and "theoretical occupancy" in out and "sm_90" in out
    assert "cuBLAS has no static view" in out


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU fallback")
def test_profiling_without_a_gpu_writes_the_mix_csv(tmp_path):
    import pandas as pd

    out = tmp_path / "sub" / "static.csv"
    r = run_cli("--stage", "naive,tiled", "--size", "4096", "--csv", str(out),
                drop=("TRITON_INTERPRET",))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    df = pd.read_csv(out)
    assert list(zip(df.stage, df.backend)) == [("naive", "cuda"), ("naive", "triton"),
                                               ("tiled", "cuda"), ("tiled", "triton")]
    assert (df["sass:FFMA"] > 0).all() and (df["sass:total"] > df["sass:FFMA"]).all()
    assert not any(c.startswith("ptx:") for c in df.columns)
    tiled = df[(df.stage == "tiled") & (df.backend == "cuda")].iloc[0]
    assert tiled.kernel == "matmul_tiled" and tiled.threads == 1024 and tiled.M == 4096
    assert tiled["sass:BAR"] >= 2 and tiled.occupancy_pct > 0
    naive = df[(df.stage == "naive") & (df.backend == "cuda")].iloc[0]
    assert naive["sass:LDS"] + naive["sass:STS"] == 0


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU fallback")
def test_profiling_without_a_gpu_under_the_interpreter_shows_cuda_and_says_why_not_triton(tmp_path):
    out = tmp_path / "static.csv"
    r = run_cli("--stage", "tiled", "--size", "256", "--csv", str(out),
                env_extra={"TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr
    lines = notes(r.stderr)
    assert len(lines) == 2 and "Nsight Compute" in lines[0]
    assert "TRITON_INTERPRET=1" in lines[1] and "unset it" in lines[1]
    assert "matmul_tiled" in r.stdout and "matmul_tiled_kernel" not in r.stdout
    import pandas as pd

    assert pd.read_csv(out).backend.tolist() == ["cuda"]


def test_gpu_without_ncu_is_still_one_sentence(monkeypatch, capsys):
    """With a GPU but no ncu the command refuses, as before (the static view is for no GPU)."""
    import lab.profile as P
    from lab.profiling import ncu_run

    monkeypatch.setattr(ncu_run, "require_gpu", lambda: None)
    monkeypatch.setenv("LAB_NCU", "/nonexistent/ncu")
    assert P.main(["--stage", "tiled", "--backend", "cuda", "--no-cublas"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ncu was not found")


def test_static_view_is_taken_when_torch_sees_no_gpu(monkeypatch, capsys, tmp_path):
    """In process: require_gpu raising NoGpu leads to the static view, never to ncu."""
    import lab.profile as P
    from lab.profiling import ncu_run

    def no_gpu():
        raise ncu_run.NoGpu("no GPU")

    def no_ncu(*a, **k):
        raise AssertionError("ncu must not run without a GPU")

    monkeypatch.setattr(ncu_run, "require_gpu", no_gpu)
    monkeypatch.setattr(ncu_run, "profile_all", no_ncu)
    out = tmp_path / "s.csv"
    assert P.main(["--stage", "tiled", "--backend", "cuda", "--size", "64", "--csv",
                   str(out)]) == 0
    captured = capsys.readouterr()
    assert "Nsight Compute" in captured.err and "matmul_tiled" in captured.out
    assert out.exists()


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_target_without_a_gpu_says_so():
    r = run_cli("--_target", "cuda", "--stage", "tiled", "--size", "64")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "GPU" in r.stderr


def test_ncu_missing_is_one_sentence(monkeypatch):
    monkeypatch.setenv("LAB_NCU", "/nonexistent/ncu")
    with pytest.raises(LabError, match="ncu was not found"):
        N.require_tool("ncu", "profiling needs it")


# --------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_target_launches_and_checks_on_the_gpu():
    r = run_cli("--_target", "cuda", "--stage", "tiled", "--size", "129x67x95", "--check")
    assert r.returncode == 0, r.stderr
    assert "checked" in r.stderr


@pytest.mark.gpu
@pytest.mark.skipif(N.find_tool("ncu") is None, reason="ncu not found")
def test_profile_tiled_on_the_gpu(tmp_path):
    out = tmp_path / "prof.csv"
    r = run_cli("--stage", "tiled", "--backend", "cuda", "--size", "512", "--csv", str(out),
                timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    import pandas as pd

    df = pd.read_csv(out)
    assert set(df.backend) == {"cublas", "cuda"}
    tiled = df[df.backend == "cuda"].iloc[0]
    assert tiled.kernel == "matmul_tiled" and tiled.duration_ms > 0 and tiled.dram_bytes > 0


# ------------------------------------------------- the ncu orchestration, with a stand-in ncu


class FakeNcu:
    """Stands in for ncu in lab.profiling.ncu_run._run: scripted answers to the profiling call, the
    synthetic fixture for `ncu --import`. Records every command."""

    def __init__(self, answers):
        self.answers = list(answers)  # per profiling call: (returncode, output, write_report)
        self.calls = []

    def __call__(self, cmd, timeout):
        self.calls.append(cmd)
        if "--import" in cmd:
            return subprocess.CompletedProcess(cmd, 0, SYNTHETIC.read_text(), "")
        rc, output, write = self.answers.pop(0) if self.answers else (0, "==PROF== ok", True)
        if write:
            Path(cmd[cmd.index("--export") + 1]).write_bytes(b"report")
        return subprocess.CompletedProcess(cmd, rc, "", output)


@pytest.fixture
def fake_ncu(monkeypatch):
    from lab.profiling import ncu_run

    def install(*answers):
        fake = FakeNcu(answers)
        monkeypatch.setattr(ncu_run, "_run", fake)
        monkeypatch.setattr(ncu_run, "require_gpu", lambda: None)
        monkeypatch.setattr(N, "require_tool", lambda name, why: f"/fake/{name}")
        return fake
    return install


def _profile(*argv):
    from lab.profile import main

    return main(["--peak-tflops", "66.9", *argv])


def test_profile_drops_unknown_metrics_retries_and_writes_csv(fake_ncu, tmp_path, capsys):
    import pandas as pd

    fake = fake_ncu((1, "==ERROR== Failed to find metric sm__maximum_warps_per_active_cycle_pct\n",
                     False))
    out = tmp_path / "p.csv"
    assert _profile("--stage", "tiled", "--backend", "cuda", "--no-cublas", "--csv", str(out)) == 0
    profiles = [c for c in fake.calls if "--metrics" in c]
    assert len(profiles) == 2  # rejected once, then rerun without the unknown metric
    assert "sm__maximum_warps_per_active_cycle_pct" in profiles[0][profiles[0].index("--metrics") + 1]
    assert "sm__maximum_warps_per_active_cycle_pct" not in profiles[1][profiles[1].index("--metrics") + 1]
    for c in profiles:
        assert c[c.index("--clock-control") + 1] == "none"
    captured = capsys.readouterr()
    assert "matmul_tiled" in captured.out and "mio_throttle" in captured.out
    assert "does not know sm__maximum_warps_per_active_cycle_pct" in captured.err
    df = pd.read_csv(out)
    assert df.stage.tolist() == ["tiled"] and df.duration_ms.tolist() == pytest.approx([12.5])


def test_profile_reports_a_kernel_ncu_did_not_find_and_goes_on(fake_ncu, capsys):
    fake_ncu((0, "==PROF== Disconnected\n==WARNING== No kernels were profiled.\n", False))
    assert _profile("--stage", "tiled", "--backend", "cuda,triton", "--no-cublas") == 1
    captured = capsys.readouterr()
    assert "No kernels were profiled" in captured.err and "tiled cuda" in captured.err
    assert "matmul_tiled" in captured.out  # the Triton kernel (fake answer) was still shown


def test_profile_reports_a_failed_check(fake_ncu, capsys):
    from lab.profiling.targets import CHECK_FAILED

    fake_ncu((1, f"{CHECK_FAILED}: tiled cuda 4096x4096x4096: 12 of 16777216 elements are NaN\n",
              True))
    assert _profile("--stage", "tiled", "--backend", "cuda", "--no-cublas") == 1
    err = capsys.readouterr().err
    assert "elements are NaN; fix the kernel before profiling it" in err


def test_ncu_failure_shows_its_last_lines_and_exits_2(fake_ncu, capsys):
    fake_ncu((255, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                   "NVIDIA GPU Performance Counters\n", False))
    assert _profile("--stage", "tiled", "--backend", "cuda", "--no-cublas") == 2
    err = capsys.readouterr().err
    assert "\nerror: ncu failed (exit status 255) on tiled cuda" in err and "ERR_NVGPUCTRPERM" in err
    assert "Traceback" not in err


def test_ptx_mix_counts_vector_and_scalar_loads_apart():
    from lab.profiling.listings import ptx_mix

    ptx = ("\t@%p2 ld.global.v4.b32 { %r30, %r31, %r32, %r33 }, [ %rd7 + 0 ];\n"
           "\tld.global.nc.f32 \t%f210, [%rd1];\n"
           "\t@!%p1 ld.global.nc.f32 \t%f211, [%rd9];\n"
           "\tld.shared.f32 \t%f1, [%r1];\n"
           "\tfma.rn.f32 \t%f3, %f1, %f2, %f3;\n"
           "\tbar.sync \t0;\n")
    line = ptx_mix(ptx)
    assert "ld.global (scalar) 2" in line and "ld.global.v4 1" in line
    assert "fma.rn.f32 1" in line and "ld.shared 1" in line and "bar.sync 1" in line


def test_triton_kernel_names_include_a_program_shared_with_an_earlier_stage():
    from lab.profiling.targets import kernel_names
    from lab.stages import BY_NAME, Variant

    stage = BY_NAME["gemv"]  # its split-K sum is warptiling's splitk_reduce_kernel
    names = kernel_names(Variant(stage, stage.defaults()), "triton")
    assert "splitk_reduce_kernel" in names and len(names) == 2


# ---------------------------------------------------------------------------- --precision


def test_precision_bf16_builds_the_mma_variant_whose_sass_has_hmma():
    """--precision bf16 builds mma's bf16 variant (-DPREC_BF16): bf16 HMMAs, no FFMA."""
    r = run_cli("--stage", "mma", "--backend", "cuda", "--precision", "bf16", "--sass")
    assert r.returncode == 0, r.stderr
    assert "SASS: mma cuda matmul_mma (sm_90, NVRTC, bf16)" in r.stdout
    assert "HMMA.16816.F32.BF16" in r.stdout and "TF32" not in r.stdout
    mix = N.mix_counts(r.stdout)
    assert mix["HMMA"] > 0 and mix["FFMA"] == 0
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("// instruction mix") and f"HMMA {mix['HMMA']}" in last


def test_precision_tf32_builds_the_tf32_variant():
    r = run_cli("--stage", "mma", "--backend", "cuda", "--precision", "tf32", "--sass")
    assert r.returncode == 0, r.stderr
    assert "HMMA.1688.F32.TF32" in r.stdout and "BF16" not in r.stdout


def test_precision_mix_csv_has_a_precision_column(tmp_path):
    import pandas as pd

    out = tmp_path / "mix.csv"
    r = run_cli("--stage", "mma", "--backend", "cuda", "--precision", "fp16", "--sass", "--csv",
                str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    assert df.precision.tolist() == ["fp16"] and df.kernel.tolist() == ["matmul_mma"]
    assert df["sass:HMMA"].iloc[0] > 0 and df["sass:FFMA"].iloc[0] == 0
    assert list(df.columns[:4]) == ["stage", "backend", "precision", "params"]


@pytest.mark.parametrize("args,words", [
    (["--stage", "vectorized", "--backend", "cuda", "--precision", "tf32", "--sass"],
     "stage vectorized computes in none of the precisions asked for (tf32); it offers cuda: fp32"),
    (["--stage", "vectorized", "--backend", "cuda", "--precision", "tf32", "--dry-run"],
     "it offers cuda: fp32"),
    (["--stage", "tiled", "--backend", "cuda", "--precision", "bf16", "--ptx"],
     "it offers cuda: fp32"),
    (["--stage", "mma", "--backend", "cuda", "--sass"],  # fp32, the default
     "it offers cuda: tf32, 3xtf32, bf16, fp16"),
    (["--stage", "mma", "--precision", "fp32", "--dry-run"],
     "cuda: tf32, 3xtf32, bf16, fp16; triton: tf32, 3xtf32, bf16, fp16"),
])
def test_a_stage_that_does_not_compute_in_the_precision_is_refused_in_one_sentence(args, words):
    r = run_cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines


@pytest.mark.parametrize("args,words", [
    (["--stage", "tiled", "--precision", "fp64", "--dry-run"],
     "unknown precision 'fp64'; choose from fp32, tf32, 3xtf32, bf16, fp16"),
    (["--stage", "tiled", "--precision", "fp64", "--sass"], "unknown precision 'fp64'"),
    (["--stage", "tiled", "--precision", "bf16,fp16", "--dry-run"],
     "--precision takes one precision per run"),
    (["--_target", "cuda", "--stage", "tiled", "--precision", "half"], "unknown precision 'half'"),
])
def test_an_unknown_precision_is_refused_in_one_sentence(args, words):
    r = run_cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines


def _profile_lines(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if "--metrics" in ln]


def test_dry_run_passes_the_precision_to_every_child():
    r = run_cli("--stage", "mma", "--size", "4096", "--precision", "bf16", "--dry-run")
    assert r.returncode == 0, r.stderr
    profile = _profile_lines(r.stdout)
    assert len(profile) == 3  # cuBLAS, mma cuda, mma triton
    for ln in profile:
        assert "--precision bf16" in ln and "--size 4096x4096x4096" in ln
    assert any("--_target cublas" in ln for ln in profile)
    # mma launches mma.sync only (Hopper's wgmma is stage wgmma): one kernel, named exactly
    assert any("--kernel-name matmul_mma " in ln and "--_target cuda" in ln
               for ln in profile), profile
    assert r.stderr == ""  # nothing skipped
    wgmma = _profile_lines(run_cli("--stage", "wgmma", "--backend", "cuda", "--precision", "bf16",
                                   "--no-cublas", "--dry-run").stdout)
    assert len(wgmma) == 1 and "--kernel-name matmul_wgmma " in wgmma[0], wgmma
    default = run_cli("--stage", "tiled", "--backend", "cuda", "--dry-run")
    assert default.returncode == 0, default.stderr
    assert all("--precision fp32" in ln for ln in _profile_lines(default.stdout))


def test_the_child_reads_the_precision_target_argv_passes():
    import argparse

    from lab.profile import build_parser
    from lab.profiling.targets import target_argv
    from lab.shapes import Shape

    args = argparse.Namespace(seed=3, filter="nvtx", precision="3xtf32")
    argv = target_argv("cuda", "mma:BM=64", Shape(128, 64, 32), args)
    assert argv[argv.index("--precision") + 1] == "3xtf32"
    child = build_parser().parse_args(argv[3:])
    assert (child.target, child.precision, child.stage, child.seed) == ("cuda", "3xtf32",
                                                                         ["mma:BM=64"], 3)


def test_stages_without_the_precision_are_skipped_with_one_line():
    """As lab.compare: with --stage all, a stage x backend that does not compute in the precision
    is skipped and named in one line; an explicitly named stage that does on another backend only
    runs there."""
    r = run_cli("--stage", "all", "--backend", "cuda", "--precision", "bf16", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = notes(r.stderr)  # one note, wrapped to the terminal's width
    assert len(lines) == 1 and lines[0].startswith("note: skipped (the stage does not compute "
                                                   "in that precision): naive cuda bf16, ")
    assert "vectorized cuda bf16" in lines[0] and "mma" not in lines[0]
    profile = _profile_lines(r.stdout)
    from lab.stages import STAGES

    bf16 = [s.name for s in STAGES if "bf16" in s.precisions_for("cuda")]  # mma, wgmma, ...
    assert {"mma", "wgmma"} <= set(bf16)
    targets = [ln.split("--_target ")[1].split()[0] for ln in profile]
    assert targets == ["cublas"] + ["cuda"] * len(bf16)
    assert [ln.split("--stage ")[1].split()[0] for ln in profile[1:]] == bf16
    r = run_cli("--stage", "tiled,mma", "--precision", "bf16", "--dry-run", "--no-cublas")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("note: skipped (the stage does not compute in that precision): "
                                "tiled cuda bf16")
    targets = [(ln.split("--_target ")[1].split()[0], ln.split("--stage ")[1].split()[0])
               for ln in _profile_lines(r.stdout)]
    assert targets == [("triton", "tiled"), ("cuda", "mma"), ("triton", "mma")]


def test_triton_compiles_in_the_precision_or_says_why_not():
    """Nice-to-have, as test_triton_sass_compiles_for_sm90_or_says_why_not: the Triton mma kernel
    compiled for sm_90 with bf16 operands issues tensor-core instructions."""
    r = run_cli("--stage", "mma", "--sass", "--backend", "triton", "--size", "256", "--precision",
                "bf16", drop=("TRITON_INTERPRET",))
    if r.returncode == 0:
        assert "matmul_mma_kernel" in r.stdout and "bf16)" in r.stdout
        mix = N.mix_counts(r.stdout)
        assert mix["HMMA"] + mix["HGMMA"] > 0 and mix["FFMA"] == 0
    else:
        assert r.returncode == 2 and "Traceback" not in r.stderr and "GPU" in r.stderr


@pytest.mark.parametrize("stage,precision,dtype,input_precision", [
    ("tiled", "fp32", "float32", "ieee"),
    ("tiled", "tf32", "float32", "tf32"),
    ("vectorized", "3xtf32", "float32", "tf32x3"),
    ("mma", "bf16", "bfloat16", "ieee"),
    ("mma", "fp16", "float16", "ieee"),
])
def test_triton_compile_gets_the_precision_dtype_and_dot_meta(stage, precision, dtype,
                                                              input_precision):
    """What the Triton listings compile (triton_launch, before JITFunction.warmup): operands in
    the precision's dtype and the precision's tl.dot meta (triton_kernels._common.dot_meta)."""
    from lab.profiling.triton_capture import triton_launch
    from lab.shapes import Shape
    from lab.stages import BY_NAME, Variant

    spec = BY_NAME[stage]
    captured = triton_launch(Variant(spec, spec.defaults()), Shape(64, 48, 32), precision)
    a, b, c = captured["args"][:3]
    assert {str(t.dtype) for t in (a, b, c)} == {f"torch.{dtype}"}
    assert (tuple(a.shape), tuple(b.shape), tuple(c.shape)) == ((64, 32), (32, 48), (64, 48))
    if "INPUT_PRECISION" in captured["meta"]:
        assert captured["meta"]["INPUT_PRECISION"] == input_precision
    else:  # an fp32 lesson kernel writes its one precision in its tl.dot
        import inspect

        assert f'input_precision="{input_precision}"' in inspect.getsource(captured["kernel"].fn)


H100 = 132 * 1.98e9  # SMs x clock of the H100 anchors


@pytest.mark.parametrize("precision,tflops,label", [
    ("fp32", 132 * 128 * 2 * 1.98e9 / 1e12, "H100 SXM anchors: 132 SMs x 128 x 2"),
    ("tf32", H100 * 2048 / 1e12, "(tf32 tensor-core)"),
    ("3xtf32", H100 * 2048 / 3 / 1e12, "(3xtf32 (TF32 tensor-core peak / 3))"),
    ("bf16", H100 * 4096 / 1e12, "(bf16 tensor-core)"),
    ("fp16", H100 * 4096 / 1e12, "(fp16 tensor-core)"),
])
def test_the_roofline_peak_follows_the_precision(monkeypatch, precision, tflops, label):
    import argparse

    from lab.profiling import roof

    monkeypatch.setattr(roof, "_device", lambda: None)  # the H100 anchors, GPU or not
    monkeypatch.setattr(R, "device_peaks", lambda bw=None: None)
    args = argparse.Namespace(peak_bw=3.0, peak_tflops=None, precision=precision)
    peaks = roof.peaks_for(args)
    assert peaks.flops / 1e12 == pytest.approx(tflops, rel=1e-9)
    assert peaks.bw == 3.0e12 and label in peaks.source
    if precision != "fp32":  # lab.plot reads the GPU's name off "<name>: <n> SMs x "
        assert peaks.source.startswith("H100 SXM anchors: 132 SMs x ")
    given = roof.peaks_for(argparse.Namespace(peak_bw=3.0, peak_tflops=500.0, precision=precision))
    assert given.flops == 500e12 and given.source.startswith(roof.roof_label(precision))


def test_profiling_in_a_precision_uses_its_peak_and_writes_it(fake_ncu, monkeypatch, tmp_path,
                                                               capsys):
    """The ncu path with --precision bf16 (a stand-in ncu): the child gets --precision bf16, the
    roofline is the bf16 tensor-core roof, and the CSV says bf16 on every row."""
    import pandas as pd

    import lab.profile as P
    from lab.profiling import roof

    monkeypatch.setattr(roof, "_device", lambda: None)
    fake = fake_ncu()
    out = tmp_path / "p.csv"
    assert P.main(["--stage", "mma", "--backend", "cuda", "--precision", "bf16", "--csv",
                   str(out)]) == 0
    profiles = [c for c in fake.calls if "--metrics" in c]
    assert len(profiles) == 2  # cuBLAS and mma cuda
    for c in profiles:
        assert c[c.index("--precision") + 1] == "bf16"
    text = capsys.readouterr().out
    assert "4096x4096x4096 bf16" in text and "bf16 tensor-core compute roof" in text
    df = pd.read_csv(out)
    assert df.precision.tolist() == ["bf16", "bf16"] and df.backend.tolist() == ["cublas", "cuda"]
    assert df.peak_tflops.tolist() == pytest.approx([H100 * 4096 / 1e12] * 2)
    assert (df.peaks_source.str.contains("bf16 tensor-core")).all()


@pytest.mark.gpu
@pytest.mark.parametrize("target,precision", [("cuda", "bf16"), ("triton", "fp16"),
                                              ("cublas", "tf32"), ("cuda", "3xtf32")])
def test_target_launches_and_checks_in_a_precision_on_the_gpu(target, precision):
    stage = [] if target == "cublas" else ["--stage", "mma"]
    r = run_cli("--_target", target, *stage, "--size", "129x67x96", "--precision", precision,
                "--check")
    assert r.returncode == 0, r.stderr
    assert f"{target} {precision} 129x67x96" in r.stderr and "checked" in r.stderr


# ------------------------------------------------------- lab/profiling/: one module per concern

# lab/profiling/'s modules in the order lab/profiling/__init__.py lists them: each imports only
# earlier ones; lab/profile.py (the command) imports them, and none of them imports it back.
PROFILING_LAYERS = ("targets", "roof", "ncu_table", "child", "ncu_run", "triton_capture",
                    "listings", "static")


def _lab_imports(path: Path) -> set[str]:
    """The lab modules a file imports anywhere in it (module level or inside a function)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m == "lab.profile" or m.startswith(("lab.profile.",
                                                                       "lab.profiling."))}


def test_the_profiling_modules_import_only_the_ones_listed_before_them():
    folder = ROOT / "lab" / "profiling"
    assert sorted(PROFILING_LAYERS) == sorted(f.stem for f in folder.glob("*.py")
                                              if f.stem != "__init__")
    listed = [ln.split()[0] for ln in (folder / "__init__.py").read_text().splitlines()
              if ln.startswith("    ") and ln.split()[0].endswith(".py")]
    assert listed == [f"{m}.py" for m in PROFILING_LAYERS]
    names = [f"lab.profiling.{m}" for m in PROFILING_LAYERS]
    upward = {}
    for i, m in enumerate(PROFILING_LAYERS):
        imported = _lab_imports(folder / f"{m}.py")
        assert "lab.profile" not in imported, f"{m}.py imports the command lab.profile"
        later = sorted(t for t in imported if t in names[i:])
        if later:
            upward[m] = later
    assert upward == {}
    assert _lab_imports(folder / "__init__.py") == set()  # the package imports none of them
    command = _lab_imports(ROOT / "lab" / "profile.py")
    assert {"lab.profiling.child", "lab.profiling.ncu_run", "lab.profiling.static"} <= command


def test_names_imported_from_lab_profile_are_still_there():
    """Every `from lab.profile import ...` in the tests and scripts names something lab.profile
    holds, and the re-exported names are the very objects of lab/profiling/."""
    import re

    import lab.profile as P
    from lab.profiling import listings, targets, triton_capture

    files = [*(ROOT / "tests").glob("*.py"), *(ROOT / "scripts").rglob("*.py"),
             *(ROOT / "scripts").rglob("*.sh")]
    imported = set()
    for f in files:
        text = f.read_text()
        for names in re.findall(r"from lab\.profile import ([\w, ]+)", text):
            imported |= {n.strip() for n in names.split(",") if n.strip()}
        for alias in re.findall(r"from lab import profile as (\w+)", text):
            imported |= set(re.findall(rf"\b{alias}\.(\w+)", text))
    assert {"kernel_filter", "triton_launch", "compile_listing", "main"} <= imported
    assert sorted(n for n in imported if not hasattr(P, n)) == []
    assert P.kernel_filter is targets.kernel_filter and P.CHECK_FAILED == targets.CHECK_FAILED
    assert P.triton_launch is triton_capture.triton_launch
    assert P.compile_listing is listings.compile_listing
    assert set(P.__all__) <= set(dir(P))


def test_the_child_command_is_still_python_m_lab_profile(tmp_path):
    """The child ncu runs is `python -m lab.profile --_target ...` from the repository root
    (targets.REPO, the folder above lab/), with that root first on PYTHONPATH."""
    import argparse

    from lab.profiling import ncu_run, targets
    from lab.shapes import Shape

    assert targets.REPO == ROOT.resolve() and (targets.REPO / "lab" / "profile.py").exists()
    args = argparse.Namespace(seed=0, filter="skip", precision="fp32")
    argv = targets.target_argv("cublas", None, Shape(64, 64, 64), args)
    assert argv[1:5] == ["-m", "lab.profile", "--_target", "cublas"] and "--no-nvtx" in argv
    env = ncu_run._child_env()
    assert env["PYTHONPATH"].split(":")[0] == str(targets.REPO)
    assert "TRITON_INTERPRET" not in env
