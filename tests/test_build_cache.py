"""The on-disk build cache (lab/toolchain/cache.py): what goes into a key, that a hit compiles
nothing, that LAB_BUILD_CACHE moves or turns it off, and that the emulator's g++ builds share it.

Every test points the cache at its own temporary folder, so none depends on what an earlier run
left behind. The kernels compiled here are a few lines long (well under a second each)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lab.toolchain import cache as _cache
from lab.toolchain import nvrtc as _build

TESTS = Path(__file__).resolve().parent

KERNEL = r'''
#include "tiny_header.cuh"
extern "C" __global__ void tiny(float* x) { x[threadIdx.x] = SCALE * x[threadIdx.x]; }
'''


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(_cache.ENV, str(folder))
    return folder


def _tiny_source(tmp_path: Path, scale: str = "2.0f") -> Path:
    (tmp_path / "tiny_header.cuh").write_text(f"#define SCALE {scale}\n")
    src = tmp_path / "tiny.cu"
    src.write_text(KERNEL)
    return src


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(_cache.ENV, str(tmp_path / "here"))
    assert _cache.root() == tmp_path / "here"
    for off in ("off", "OFF", "0", ""):
        monkeypatch.setenv(_cache.ENV, off)
        assert _cache.root() is None and _cache.entry_folder("nvrtc", "ab" * 32) is None
    monkeypatch.delenv(_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.root() == tmp_path / "xdg" / "matmul-kernel-lab"


def test_a_key_covers_every_included_header(tmp_path):
    src = _tiny_source(tmp_path)
    names = [name for name, _ in _cache.source_closure(src, ())]
    assert names == ["tiny.cu", "tiny_header.cuh"]
    before = _cache.digest(*_cache.closure_parts(src))
    (tmp_path / "tiny_header.cuh").write_text("#define SCALE 3.0f\n")  # only the header changes
    assert _cache.digest(*_cache.closure_parts(src)) != before
    # the parts are length-prefixed: moving a boundary changes the key
    assert _cache.digest("ab", "c") != _cache.digest("a", "bc")


def test_a_stage_key_follows_common_cuh():
    names = {name for name, _ in _cache.source_closure(_build.KERNEL_DIR / "tiled.cu",
                                                        (_build.KERNEL_DIR,))}
    assert {"tiled.cu", "common.cuh"} <= names


def test_store_is_atomic_and_a_second_store_keeps_the_first(cache):
    key = _cache.digest("x")
    folder = _cache.store("nvrtc", key, {"cubin": b"one", "log": b"log one"})
    assert folder is not None and folder.parent.parent.parent == cache
    assert _cache.store("nvrtc", key, {"cubin": b"two", "log": b"log two"}) == folder
    assert _cache.load("nvrtc", key, ("cubin", "log")) == {"cubin": b"one", "log": b"log one"}
    assert _cache.load("nvrtc", _cache.digest("y"), ("cubin",)) is None
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def _counting_nvrtc(monkeypatch) -> list:
    """Count NVRTC's compile calls (the expensive part) while leaving everything else real."""
    real = _build._nvrtc()
    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def nvrtcCompileProgram(self, *args):
            calls.append(args)
            return real.nvrtcCompileProgram(*args)

    monkeypatch.setattr(_build, "_nvrtc", lambda: Counting())
    return calls


def test_a_second_compile_is_a_hit_with_the_ptxas_report(cache, tmp_path, monkeypatch):
    calls = _counting_nvrtc(monkeypatch)
    src = _tiny_source(tmp_path)
    options = _build.nvrtc_options({}, "sm_90", (f"-I{tmp_path}",))
    cubin, log = _build.nvrtc_compile(str(src), options)
    assert len(calls) == 1 and "Used" in log and "registers" in log
    again = _build.nvrtc_compile(str(src), options)
    assert len(calls) == 1, "the second compile of the same source ran NVRTC again"
    assert again == (cubin, log)
    assert _build.parse_ptxas_log(again[1], "tiny")["registers"] > 0
    # an edit to the header is a miss
    (tmp_path / "tiny_header.cuh").write_text("#define SCALE 3.0f\n")
    _build.nvrtc_compile(str(src), options)
    assert len(calls) == 2
    # so is another option
    _build.nvrtc_compile(str(src), _build.nvrtc_options({"X": 1}, "sm_90", (f"-I{tmp_path}",)))
    assert len(calls) == 3


def test_another_nvrtc_release_is_a_miss(cache, tmp_path, monkeypatch):
    """nvrtcVersion says 13.0 for every 13.0.x; the key also holds the loaded library's size."""
    release = _build.nvrtc_release()
    assert release.startswith("%d.%d" % _build.nvrtc_version())
    if sys.platform.startswith("linux"):
        assert "libnvrtc.so" in release
    calls = _counting_nvrtc(monkeypatch)
    src = _tiny_source(tmp_path)
    options = _build.nvrtc_options({}, "sm_90", (f"-I{tmp_path}",))
    _build.nvrtc_compile(str(src), options)
    monkeypatch.setattr(_build, "nvrtc_release", lambda: release + " another build")
    _build.nvrtc_compile(str(src), options)
    assert len(calls) == 2
    monkeypatch.setattr(_build, "nvrtc_release", lambda: release)
    _build.nvrtc_compile(str(src), options)
    assert len(calls) == 2


def test_with_the_cache_off_every_compile_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(_cache.ENV, "off")
    calls = _counting_nvrtc(monkeypatch)
    src = _tiny_source(tmp_path)
    options = _build.nvrtc_options({}, "sm_90", (f"-I{tmp_path}",))
    _build.nvrtc_compile(str(src), options)
    _build.nvrtc_compile(str(src), options)
    assert len(calls) == 2
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_folder_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(_cache.ENV, str(blocker / "cache"))
    src = _tiny_source(tmp_path)
    options = _build.nvrtc_options({}, "sm_90", (f"-I{tmp_path}",))
    cubin, log = _build.nvrtc_compile(str(src), options)
    assert cubin and "registers" in log


def test_emulator_builds_are_cached_by_preprocessed_content(cache, tmp_path, monkeypatch):
    sys.path.insert(0, str(TESTS))
    import cuda_emulator as ce

    if ce.compiler() is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "value.h").write_text("#define VALUE 7\n")
    main = tmp_path / "main.cpp"
    main.write_text('#include "value.h"\nint main() { return VALUE == WANT ? 0 : 1; }\n')
    runs = []
    real_run = ce.subprocess.run

    def counting_run(cmd, *args, **kwargs):
        if "-o" in cmd:
            runs.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(ce.subprocess, "run", counting_run)
    flags = ("-O0",)
    first = ce.compile_async(main, tmp_path / "a", {"WANT": 7}, flags=flags, include=tmp_path)
    exe = first.result()
    assert len(runs) == 1 and cache in exe.parents
    assert real_run([str(exe)]).returncode == 0
    # the same build under another output name, from another folder: a hit
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "main.cpp").write_text(main.read_text())
    (other / "value.h").write_text("#define VALUE 7\n")
    hit = ce.compile_async(other / "main.cpp", other / "b", {"WANT": 7}, flags=flags,
                           include=other).result()
    assert len(runs) == 1 and hit == exe
    # a changed header or define is a miss
    (other / "value.h").write_text("#define VALUE 8\n")
    ce.compile_async(other / "main.cpp", other / "c", {"WANT": 8}, flags=flags,
                     include=other).result()
    assert len(runs) == 2
    # a compile error is an AssertionError with the compiler's words
    (other / "value.h").write_text("#define VALUE (\n")
    with pytest.raises(AssertionError, match="could not"):
        ce.compile_async(other / "main.cpp", other / "d", {"WANT": 8}, flags=flags,
                         include=other).result()
