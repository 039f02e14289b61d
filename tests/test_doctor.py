"""`python -m lab.doctor`: CPU mode end to end, its JSON, one sentence of advice per failed probe,
one-sentence usage errors (exit 2), and (marked gpu) the whole doctor, calibration included, on a
GPU."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import cpu_only, run_lab
from lab import doctor


CPU_KEYS = {"gpu", "python", "torch", "triton", "cupy", "cuda_bindings", "nvidia_ml_py",
            "torch_cuda", "nvrtc", "cublas", "nvrtc_sm_90", "nvrtc_sm_90a", "triton_interpreter",
            "cxx_emulator", "ncu", "compute_sanitizer", "hbm_read_bw"}
GPU_KEYS = {"gpu", "compute_capability", "sm90a", "sm_count", "driver", "cublas", "torch_cuda",
            "nvrtc", "triton", "cupy", "cuda_bindings", "nvidia_ml_py", "clocks_locked",
            "max_sm_mhz", "power_limit", "cuda_launch", "triton_launch", "ncu",
            "compute_sanitizer", "calibration_fp32", "calibration_bf16", "hbm_read_bw"}


def run(*args, timeout=300):
    # without TRITON_INTERPRET: the doctor decides (and would flag it on a GPU)
    return run_lab("lab.doctor", *args, timeout=timeout, drop=("TRITON_INTERPRET",))


def one_sentence(message: str) -> None:
    assert message and "\n" not in message and ". " not in message.rstrip("."), message


# ------------------------------------------------------------------ CPU mode, end to end


@cpu_only
def test_cpu_mode_prints_its_table_writes_json_and_exits_0(tmp_path):
    out = tmp_path / "sub" / "doctor.json"
    r = run("--json", str(out))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "CPU mode" in r.stdout
    for label in ("NVRTC builds sm_90", "Triton interpreter", "C++ for the emulator", "ncu",
                  "compute-sanitizer", "torch", "cuda-bindings", "nvidia-ml-py"):
        assert label in r.stdout, label
    assert "Traceback" not in r.stderr
    data = json.loads(out.read_text())
    assert data["tool"] == "lab.doctor" and data["mode"] == "cpu"
    assert CPU_KEYS <= set(data["findings"]), CPU_KEYS - set(data["findings"])
    assert data["calibration"] == []
    assert data["read_bandwidth"] is None and "skipped" in data["findings"]["hbm_read_bw"]["value"]
    for f in data["findings"].values():
        assert set(f) == {"key", "label", "value", "ok", "advice", "data"}
        if f["ok"] is False:
            one_sentence(f["advice"])
    assert data["problems"] == [f["advice"] for f in data["findings"].values() if f["ok"] is False]
    assert data["findings"]["nvrtc_sm_90"]["ok"] is True  # the lab's CPU mode depends on it


@pytest.mark.parametrize("args,words", [
    (["--timeout-s", "0"], "--timeout-s must be a positive"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_usage_errors_are_one_sentence_and_exit_2(args, words):
    r = run(*args, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line


def test_a_json_path_that_is_a_folder_is_refused_before_any_probe(tmp_path):
    r = run("--json", str(tmp_path), timeout=120)
    assert r.returncode == 2 and "is a folder" in r.stderr
    assert "probing" not in r.stderr


# ------------------------------------------------------------------ failing probes: one sentence


def _fake_run(rc, output):
    calls = []

    def fake(cmd, timeout, env=None):
        calls.append(cmd)
        return rc, output

    return fake, calls


def test_ncu_without_counter_permission_says_what_to_do(monkeypatch):
    fake, calls = _fake_run(1, "==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The "
                               "user does not have permission to access NVIDIA GPU Performance "
                               "Counters on the target device 0.\n")
    monkeypatch.setattr(doctor, "find_tool", lambda name: "/opt/nsight/ncu")
    monkeypatch.setattr(doctor, "_run", fake)
    f = doctor.probe_ncu(30)
    assert f.ok is False and "ERR_NVGPUCTRPERM" in f.value
    one_sentence(f.advice)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in f.advice and "root" in f.advice
    assert calls and calls[0][0] == "/opt/nsight/ncu" and doctor.NCU_METRIC in calls[0]


def test_ncu_reading_its_counter_passes(monkeypatch):
    csv = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
           '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
           '"Metric Value"\n"0","42","python","127.0.0.1","vectorized_elementwise_kernel","1",'
           '"7","(128, 1, 1)","(1024, 1, 1)","0","9.0","Command line profiler metrics",'
           '"sm__cycles_elapsed.avg","cycle","5,412"\n')
    monkeypatch.setattr(doctor, "find_tool", lambda name: "/opt/nsight/ncu")
    monkeypatch.setattr(doctor, "_run", _fake_run(0, csv)[0])
    f = doctor.probe_ncu(30)
    assert f.ok is True and f.data[doctor.NCU_METRIC] == 5412.0


def test_missing_ncu_and_a_sanitizer_that_hangs_each_get_one_sentence(monkeypatch):
    monkeypatch.setattr(doctor, "find_tool", lambda name: None)
    f = doctor.probe_ncu(30)
    assert f.ok is False and "LAB_NCU" in f.advice
    one_sentence(f.advice)
    monkeypatch.setattr(doctor, "find_tool", lambda name: "/usr/local/cuda/bin/" + name)
    monkeypatch.setattr(doctor, "_run", _fake_run(None, "timed out after 7 s\n")[0])
    f = doctor.probe_sanitizer(7)
    assert f.ok is False and "did not finish in 7 s" in f.advice
    one_sentence(f.advice)


def test_a_broken_triton_interpreter_and_a_missing_compiler_are_explained(monkeypatch):
    monkeypatch.setattr(doctor, "_run", _fake_run(1, "Traceback (most recent call last):\n  ...\n"
                                                     "TypeError: only 0-dimensional arrays can "
                                                     "be converted. See numpy 2.4.\n")[0])
    f = doctor.probe_triton_interpreter(30)
    assert f.ok is False and "only 0-dimensional arrays" in f.advice and "numpy" in f.advice
    one_sentence(f.advice)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    f = doctor.probe_cxx(30)
    assert f.ok is False and "g++" in f.advice
    one_sentence(f.advice)


def test_a_slow_calibration_is_flagged_with_advice_and_exit_1(monkeypatch, capsys):
    cal = {"precision": "fp32", "size": 4096, "tflops": 30.0, "peak_tflops": 66.9,
           "pct_of_peak": 44.8, "floor_pct": 60.0, "sm_mhz_mean": 1980.0, "throttle": "",
           "flagged": True}
    f = doctor.calibration_finding(cal)
    assert f.ok is False and "45%" in f.advice and "60%" in f.advice
    one_sentence(f.advice)
    good = doctor.calibration_finding({**cal, "tflops": 51.7, "pct_of_peak": 77.3,
                                       "flagged": False})
    assert good.ok is True and "77%" in good.value
    # the command: the advice is printed under the table, and the exit status is 1
    monkeypatch.setattr(doctor, "collect_findings", lambda *a, **k: [
        doctor.Finding("gpu", "GPU", "NVIDIA H100 80GB HBM3"), f])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert doctor.main(["--skip-calibration"]) == 1
    out = capsys.readouterr().out
    assert "What to do:" in out and "60%" in out


def test_a_lowered_power_limit_is_a_problem_but_the_default_is_not(monkeypatch):
    class FakeNvml:
        NVML_CLOCK_SM = 1
        NVML_CLOCK_GRAPHICS = 0
        NVML_PSTATE_0 = 0
        limit = 500_000

        def nvmlDeviceGetApplicationsClock(self, h, kind):
            return 1980

        nvmlDeviceGetDefaultApplicationsClock = nvmlDeviceGetApplicationsClock

        def nvmlDeviceGetMinMaxClockOfPState(self, h, kind, state):
            return 345, 1980

        def nvmlDeviceGetEnforcedPowerLimit(self, h):
            return self.limit

        def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
            return 700_000

    from lab import clocks

    nvml = FakeNvml()
    monkeypatch.setattr(doctor, "_nvml", lambda: nvml)
    monkeypatch.setattr(clocks, "handle", lambda *a: object())
    monkeypatch.setattr(clocks, "read", lambda h: {"sm_mhz": 345.0, "mask": 0x1})
    monkeypatch.setattr(clocks, "max_sm_mhz", lambda h=None: 1980.0)
    found = {f.key: f for f in doctor.clocks_and_power()}
    assert found["clocks_locked"].value.startswith("no")
    assert found["power_limit"].ok is False and "700" in found["power_limit"].advice
    one_sentence(found["power_limit"].advice)
    nvml.limit = 700_000
    found = {f.key: f for f in doctor.clocks_and_power()}
    assert found["power_limit"].ok is None and found["power_limit"].value.startswith("700 W")


def test_render_lists_each_problem_once_under_the_table():
    from rich.console import Console

    console = Console(record=True, width=100)
    doctor.render("cpu", [doctor.Finding("nvrtc", "NVRTC", "13.0"),
                          doctor.Finding("ncu", "ncu reads counters", "probe failed", False,
                                         "do this one thing")], console)
    text = console.export_text()
    assert text.count("do this one thing") == 1 and "What to do:" in text


# ------------------------------------------------------------------ GPU: the whole doctor


@pytest.mark.gpu
def test_the_doctor_runs_to_the_end_on_a_gpu(tmp_path):
    out = tmp_path / "doctor.json"
    r = run("--json", str(out), "--timeout-s", "180", timeout=900)
    data = json.loads(out.read_text())
    flagged = [c for c in data["calibration"] if c["flagged"]]
    assert r.returncode == (1 if flagged else 0), r.stdout + r.stderr
    assert data["mode"] == "gpu" and "GPU mode" in r.stdout
    assert GPU_KEYS <= set(data["findings"]), GPU_KEYS - set(data["findings"])
    assert [c["precision"] for c in data["calibration"]] == ["fp32", "bf16"]
    for c in data["calibration"]:
        assert c["tflops"] > 0 and c["median_ms"] > 0
    assert data["read_bandwidth"]["tbps"] > 0.5  # any HBM GPU of the last years
    assert data["findings"]["cuda_launch"]["ok"] and data["findings"]["triton_launch"]["ok"]
    for f in data["findings"].values():
        if f["ok"] is False:
            one_sentence(f["advice"])
