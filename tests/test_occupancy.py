"""lab/occupancy.py against hand-worked cases (CPU only).

Every expected number is worked out in the comment above its test, with the sm_90 (H100) limits:
64 warps, 32 blocks, 65536 registers and 228 KiB = 233472 B of shared memory per SM, registers
allocated per warp in units of 256, warps-by-registers rounded down to a multiple of 4, shared
memory allocated per block as (bytes + 1024 reserved) rounded up to 128.
"""

from types import SimpleNamespace

import pytest

from helpers import HAS_GPU, one_line_error, run_lab
from lab.occupancy import SM89, SM90, DeviceLimits, from_properties, from_resources, occupancy


def expect(found, **fields):
    """Each named attribute of `found` (an Occupancy or DeviceLimits) equals its value; every
    mismatch is listed in the one failure."""
    assert {name: getattr(found, name) for name in fields} == fields


def test_sm90_limits():
    expect(SM90, max_warps_per_sm=64, max_blocks_per_sm=32, regs_per_sm=65536,
           max_regs_per_thread=255, reg_alloc_unit=256, smem_per_sm=233472,
           smem_per_block_max=232448, smem_alloc_unit=128, reserved_smem_per_block=1024,
           warp_size=32, warp_alloc_granularity=4)


# tiled:tile=32 (a 32x32 block): 1024 threads, 32 registers, 8 KiB static smem.
#   warps/block     = 1024 / 32                     = 32
#   by warps        = floor(64 / 32)                = 2
#   regs/warp       = 32 * 32 = 1024 (a multiple of 256, no rounding)
#   warps by regs   = floor(65536 / 1024) = 64 -> multiple of 4: 64;  by regs = floor(64 / 32) = 2
#   smem allocated  = 8192 + 1024 = 9216 (= 72 * 128);  by smem = floor(233472 / 9216) = 25
#   by blocks       = 32
#   blocks/SM = min(2, 2, 25, 32) = 2 -> 64 active warps -> 64/64 = 100%.
# Warps and registers tie at 2, so the limiter is "warps+registers": 32 registers is exactly the
# budget (65536 / 2048 threads); with a 33rd register the block count halves (next test).
def test_32x32_block_32_regs_is_full_occupancy():
    occ = occupancy(1024, 32, 8192)
    expect(occ, warps_per_block=32, blocks_by_warps=2, regs_per_warp=1024, blocks_by_regs=2,
           smem_allocated_per_block=9216, blocks_by_smem=25, blocks_by_blocks=32, blocks_per_sm=2,
           active_warps=64, occupancy=1.0, limiter="warps+registers")
    assert str(occ) == "2 blocks/SM, 64/64 warps (100.0%), limited by warps+registers"


# The same block with 40 registers:
#   regs/warp       = 40 * 32 = 1280 (= 5 * 256, no rounding)
#   warps by regs   = floor(65536 / 1280) = floor(51.2) = 51 -> multiple of 4: 48
#   by regs         = floor(48 / 32) = 1;  by warps 2, by smem 25, by blocks 32
#   blocks/SM = 1 -> 32 active warps -> 32/64 = 50%, limited by registers.
def test_32x32_block_40_regs_is_register_limited():
    expect(occupancy(1024, 40, 8192), regs_per_warp=1280, blocks_by_regs=1, blocks_per_sm=1,
           active_warps=32, occupancy=0.5, limiter="registers")


# 33 registers: 33 * 32 = 1056 registers a warp, rounded up to the 256 unit -> 1280, the same
# allocation as 40 registers: floor(65536 / 1280) = 51 -> 48 warps -> 1 block -> 50%.
def test_register_allocation_unit_rounds_up():
    expect(occupancy(1024, 33, 8192), regs_per_warp=1280, blocks_by_regs=1, occupancy=0.5)


# Where the 4-warp granularity matters: 64 threads (2 warps), 40 registers.
#   regs/warp = 1280;  floor(65536 / 1280) = 51 warps -> rounded down to a multiple of 4: 48
#   by regs = floor(48 / 2) = 24  (without the rounding it would be floor(51 / 2) = 25)
#   by warps = floor(64 / 2) = 32;  smem 0 -> no limit;  by blocks 32
#   blocks/SM = 24 -> 48 warps -> 48/64 = 75%, limited by registers.
def test_warp_allocation_granularity():
    expect(occupancy(64, 40, 0), blocks_by_regs=24, blocks_by_smem=None, blocks_per_sm=24,
           active_warps=48, occupancy=0.75, limiter="registers")


# tiled:tile=8: 8x8 = 64 threads (2 warps), 32 registers, 2*8*8*4 = 512 B smem.
#   by warps  = floor(64 / 2) = 32
#   by regs   = regs/warp 1024 -> 64 warps -> floor(64 / 2) = 32
#   by smem   = 512 + 1024 = 1536 (= 12 * 128) -> floor(233472 / 1536) = 152
#   by blocks = 32
#   blocks/SM = 32 -> 64 warps -> 100%; warps, registers and the 32-block limit all tie.
# Full occupancy, but only just: each block is 2 warps, so the 32-block cap is already binding.
def test_8x8_tiles_hit_the_block_limit():
    expect(occupancy(64, 32, 512), blocks_by_warps=32, blocks_by_regs=32, blocks_by_smem=152,
           blocks_by_blocks=32, blocks_per_sm=32, occupancy=1.0, limiter="warps+registers+blocks")


# A one-warp block (32 threads), 32 registers, 1 KiB smem: the block limit alone.
#   by warps = 64;  by regs = 64 warps / 1 = 64;  by smem = 1024 + 1024 = 2048 -> 233472 / 2048 = 114
#   by blocks = 32 -> blocks/SM = 32 -> 32 warps -> 32/64 = 50%, limited by blocks.
# (A 4x4 tile, 16 threads, still occupies one whole warp: the same answer.)
@pytest.mark.parametrize("threads", [32, 16])
def test_one_warp_blocks_are_block_limited(threads):
    expect(occupancy(threads, 32, 1024), warps_per_block=1, blocks_by_warps=64, blocks_by_regs=64,
           blocks_by_smem=114, blocks_per_sm=32, occupancy=0.5, limiter="blocks")


# Shared-memory limited: 256 threads (8 warps), 32 registers, 100 KiB = 102400 B of smem.
#   by warps  = floor(64 / 8) = 8
#   by regs   = 64 warps by registers -> floor(64 / 8) = 8
#   by smem   = 102400 + 1024 = 103424 (= 808 * 128) -> floor(233472 / 103424) = 2
#   by blocks = 32
#   blocks/SM = 2 -> 16 warps -> 16/64 = 25%, limited by shared memory.
def test_smem_limited():
    expect(occupancy(256, 32, 100 * 1024), smem_allocated_per_block=103424, blocks_by_smem=2,
           blocks_per_sm=2, active_warps=16, occupancy=0.25, limiter="shared memory")


# Shared-memory rounding: 1 byte -> 1 + 1024 = 1025 -> rounded up to 1152 (9 * 128).
def test_smem_allocation_unit_rounds_up():
    assert occupancy(128, 32, 1).smem_allocated_per_block == 1152


# 227 KiB (the per-block maximum) + 1 KiB reserved = 228 KiB = the whole SM: exactly 1 block.
def test_largest_smem_block_fits_once():
    expect(occupancy(128, 32, 227 * 1024), blocks_by_smem=1, blocks_per_sm=1,
           limiter="shared memory")


# RTX 4090-like limits (sm_89: 48 warps, 24 blocks, 64K registers, 100 KiB smem per SM) for the
# 32x32 block with 32 registers and 8 KiB:
#   by warps  = floor(48 / 32) = 1
#   by regs   = 64 warps by registers -> floor(64 / 32) = 2
#   by smem   = 9216 allocated -> floor(102400 / 9216) = 11
#   by blocks = 24
#   blocks/SM = 1 -> 32 warps -> 32/48 = 66.7%, limited by warps (half a block's worth of warp
#   slots, 16, stays empty: 1024-thread blocks fit a 1536-thread SM only once).
def test_32x32_block_on_sm89():
    sm89 = DeviceLimits("rtx4090-like", max_warps_per_sm=48, max_blocks_per_sm=24,
                        regs_per_sm=65536, smem_per_sm=100 * 1024, smem_per_block_max=99 * 1024)
    for limits in (sm89, SM89):
        occ = occupancy(1024, 32, 8192, limits)
        expect(occ, blocks_by_warps=1, blocks_by_regs=2, blocks_by_smem=11, blocks_by_blocks=24,
               blocks_per_sm=1, active_warps=32, occupancy=pytest.approx(2 / 3), limiter="warps")
        assert f"{100 * occ.occupancy:.1f}" == "66.7"


# tiled_rect default on sm_90: 8x32 = 256 threads (8 warps), 32 registers, (8*32 + 32*32)*4 = 5120 B.
#   by warps = 8;  by regs = 64 / 8 = 8;  by smem = 5120 + 1024 = 6144 -> 233472 / 6144 = 38;  32
#   blocks/SM = 8 -> 64 warps -> 100%, warps+registers.
def test_rect_8x32_default():
    expect(occupancy(256, 32, 5120), blocks_by_smem=38, blocks_per_sm=8, occupancy=1.0,
           limiter="warps+registers")


# A block that cannot launch at all: 1024 threads x 72 registers = 72*32 = 2304 a warp,
# 2304 * 32 warps = 73728 > 65536 registers per block -> 0 blocks ("too many resources
# requested for launch"); occupancy 0, limited by registers. 64 registers just fit:
# 2048 * 32 = 65536 -> 32 warps by registers -> 1 block -> 50%.
def test_block_that_cannot_get_its_registers():
    expect(occupancy(1024, 72, 0), blocks_by_regs=0, blocks_per_sm=0, occupancy=0.0,
           limiter="registers")
    expect(occupancy(1024, 64, 0), blocks_by_regs=1, occupancy=0.5)


# 0 registers / 0 bytes: no register / shared-memory limit (None); warps and blocks decide.
def test_zero_registers_and_smem_mean_no_limit():
    # blocks_per_sm: floor(64 / 4 warps)
    expect(occupancy(128, 0, 0), blocks_by_regs=None, blocks_by_smem=None, blocks_per_sm=16,
           limiter="warps")


@pytest.mark.parametrize("args,fragment", [
    ((1025, 32, 0), "threads_per_block is 1025"),
    ((0, 32, 0), "threads_per_block is 0"),
    ((256, 256, 0), "registers_per_thread is 256"),
    ((256, -1, 0), "registers_per_thread is -1"),
    ((256, 32, 227 * 1024 + 1), "smem_per_block is 232449"),
    ((256, 32, -4), "smem_per_block is -4"),
    ((256.0, 32, 0), "must be an integer"),
])
def test_invalid_inputs_raise(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        occupancy(*args)


def test_from_resources_adds_static_and_dynamic_smem():
    res = {"registers": 32, "smem_static": 4096, "smem_dynamic": 4096, "threads": 1024,
           "spill_bytes": 0, "grid_blocks": 1}
    assert from_resources(res) == occupancy(1024, 32, 8192)


# from_properties: CuPy's cudaDeviceProp dict wins, torch fills the gaps, SM90 the rest.
def test_from_properties_a100_like():
    cupy_props = {"major": 8, "minor": 0, "maxThreadsPerMultiProcessor": 2048,
                  "maxBlocksPerMultiProcessor": 32, "regsPerMultiprocessor": 65536,
                  "sharedMemPerMultiprocessor": 167936, "sharedMemPerBlockOptin": 166912,
                  "reservedSharedMemPerBlock": 1024, "warpSize": 32, "maxThreadsPerBlock": 1024,
                  "regsPerBlock": 65536}
    lim = from_properties(cupy_props)
    expect(lim, name="sm_80", max_warps_per_sm=64, smem_per_sm=167936, smem_per_block_max=166912)
    # 256 threads, 100 KiB: 103424 allocated -> floor(167936 / 103424) = 1 block on an A100
    assert occupancy(256, 32, 100 * 1024, lim).blocks_per_sm == 1


def test_from_properties_torch_only_falls_back_to_sm90():
    torch_props = SimpleNamespace(major=8, minor=9, max_threads_per_multi_processor=1536,
                                  warp_size=32, shared_memory_per_multiprocessor=102400)
    # torch reports neither the blocks per SM nor the registers: SM90's
    expect(from_properties(None, torch_props), name="sm_89", max_warps_per_sm=48,
           smem_per_sm=102400, max_blocks_per_sm=SM90.max_blocks_per_sm,
           regs_per_sm=SM90.regs_per_sm)


# ------------------------------------------------- cross-check against NVIDIA's cuda_occupancy.h
#
# cuda_occupancy.h (shipped with the CUDA toolkit and with Triton's wheel) is the host-side code
# behind cudaOccupancyMaxActiveBlocksPerMultiprocessor. It needs no GPU: compile it with the host
# compiler, feed it the same device properties (default carveout, 1 KiB reserved, no clusters) and
# compare blocks per SM on random configurations. Skipped without a C++ compiler or the header.

_OCC_MAIN = r"""
#include <cstdio>
#include "cuda_occupancy.h"
int main() {
    int maj, mnr, tpsm, smsm, optin, T, R, S;
    while (scanf("%d %d %d %d %d %d %d %d", &maj, &mnr, &tpsm, &smsm, &optin, &T, &R, &S) == 8) {
        cudaOccDeviceProp p;
        p.computeMajor = maj; p.computeMinor = mnr; p.maxThreadsPerBlock = 1024;
        p.maxThreadsPerMultiprocessor = tpsm; p.regsPerBlock = 65536;
        p.regsPerMultiprocessor = 65536; p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024;
        p.sharedMemPerMultiprocessor = smsm; p.numSms = 100; p.sharedMemPerBlockOptin = optin;
        p.reservedSharedMemPerBlock = 1024;
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 1024; a.numRegs = R; a.sharedSizeBytes = 0;
        a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        a.maxDynamicSharedSizeBytes = optin;
        cudaOccDeviceState s;
        cudaOccResult r;
        int err = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, T, S);
        printf("%d %d\n", err, r.activeBlocksPerMultiprocessor);
    }
    return 0;
}
"""


def _occupancy_header_dir():
    import glob
    import importlib.util
    import os
    from pathlib import Path

    dirs = [os.path.join(os.environ[v], "include") for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)]
    dirs += sorted(glob.glob("/usr/local/cuda*/include"), reverse=True)
    spec = importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        dirs += [str(Path(p) / "backends" / "nvidia" / "include")
                 for p in spec.submodule_search_locations]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "cuda_occupancy.h"))), None)


def test_matches_cuda_occupancy_h(tmp_path):
    import random
    import shutil
    import subprocess

    from lab.occupancy import SM80

    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    include = _occupancy_header_dir()
    if cxx is None or include is None:
        pytest.skip("needs a C++ compiler and cuda_occupancy.h")
    src, exe = tmp_path / "occ.cpp", tmp_path / "occ"
    src.write_text(_OCC_MAIN)
    subprocess.run([cxx, "-O1", f"-I{include}", str(src), "-o", str(exe)], check=True,
                   capture_output=True)
    arch = {SM90: (9, 0), SM89: (8, 9), SM80: (8, 0)}
    rng = random.Random(0)
    cases = []
    for _ in range(3000):
        d = rng.choice(list(arch))
        threads = rng.choice([rng.randint(1, 1024), 32 * rng.randint(1, 32)])
        regs = rng.randint(1, 255)
        smem = rng.choice([0, rng.randint(1, d.smem_per_block_max),
                           1024 * rng.randint(0, d.smem_per_block_max // 1024)])
        cases.append((d, threads, regs, smem))
    text = "\n".join(f"{arch[d][0]} {arch[d][1]} {d.max_threads_per_sm} {d.smem_per_sm} "
                     f"{d.smem_per_block_max} {t} {r} {s}" for d, t, r, s in cases)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True,
                         check=True).stdout.split()
    for (d, t, r, s), (err, blocks) in zip(cases, zip(out[::2], out[1::2])):
        assert err == "0", (d.name, t, r, s)
        assert occupancy(t, r, s, d).blocks_per_sm == int(blocks), (d.name, t, r, s)


# ------------------------------------------------------------------------------------------ CLI


def _occupancy_cli(*args):
    return run_lab("lab.occupancy", *args, timeout=120)


def test_cli_prints_the_limits():
    r = _occupancy_cli("1024", "32", "16384")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("sm_90: 1024 threads (32 warps), 32 regs")
    assert "2 blocks/SM, 64/64 warps (100.0%), limited by warps+registers" in r.stdout


@pytest.mark.parametrize("args,words", [
    (["abc", "32"], "argument threads: invalid int value: 'abc'"),
    ([], "the following arguments are required: threads, registers"),
    (["256", "32", "--arch", "sm_70"], "invalid choice: 'sm_70'"),
    (["2000", "32"], "threads_per_block is 2000"),
    (["256", "300"], "registers_per_thread is 300"),
])
def test_cli_errors_are_one_sentence_and_exit_2(args, words):
    one_line_error(_occupancy_cli(*args), words)


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_cli_arch_device_without_a_gpu_says_so():
    one_line_error(_occupancy_cli("--arch", "device", "256", "32"), "no CUDA GPU", "--arch sm_90")


@pytest.mark.gpu
def test_cli_arch_device_on_a_gpu_reads_it():
    r = _occupancy_cli("--arch", "device", "256", "32")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("sm_")
