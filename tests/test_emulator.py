"""The CPU emulator's thread model (tests/cuda_emulator.py): what it must still catch.

The emulator runs a block's CUDA threads as fibers on one OS thread, switching at __syncthreads().
These tests pin down what that model promises:

(a) a missing barrier is caught whichever side of it runs first: a kernel where one thread writes
    shared memory and the others read it without a barrier fails with the writer as the first
    thread and with the writer as the last one (the fibers run forward in one block or phase and
    in reverse in the next), and tiled.cu with either of its two __syncthreads() removed fails,
    while the same copy with both passes;
(b) a barrier that some threads of a block reach while others have returned (or reach once more
    than the rest) aborts with a message naming the block, instead of hanging or skipping it;
(c) threadIdx, blockIdx and the cp.async state are each CUDA thread's own across barriers, and a
    kernel that does everything right passes under AddressSanitizer (no false positive from the
    stack switches);
(d) AddressSanitizer still sees an access past a local array on a fiber's stack, past a
    __shared__ array and past the dynamic shared memory, and a runaway recursion hits the guard
    page below the fiber's stack and fails loudly.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "cuda_kernels"

# A few tiny kernels, one per mode (argv[1]), on the emulator's prelude. 64 threads per block.
PROBES = r'''
#include <string>
constexpr unsigned T = 64;
static long mismatches = 0;
static bool with_barrier = false;

// thread `writer` of each block stores a value in shared memory, every thread reads it
__global__ void broadcast(unsigned writer) {
    __shared__ float value;
    if (threadIdx.x == writer) value = blockIdx.x + 1.0f;
    if (with_barrier) __syncthreads();
    if (value != blockIdx.x + 1.0f) ++mismatches;
    __syncthreads();  // nobody writes the next block's value before all have read this one
}

// block 1: threads 16.. return before the barrier the others wait at
__global__ void diverge() {
    if (!(blockIdx.x == 1 && threadIdx.x >= 16)) __syncthreads();
}

// block 2: thread 5 calls __syncthreads() once more than the rest
__global__ void extra_barrier() {
    __syncthreads();
    if (blockIdx.x == 2 && threadIdx.x == 5) __syncthreads();
}

// every thread's indices and cp.async state survive the switches at barriers
__global__ void state(const float* src) {
    __shared__ __align__(16) float dst[T];
    const Dim3 t = threadIdx, b = blockIdx;
    const unsigned me = threadIdx.y * 16 + threadIdx.x, n = me % 4;  // blocks of 16 x 4
    for (unsigned i = 0; i < n; ++i) lab_cp_async_commit();
    lab_cp_async(&dst[me], &src[me], 4, 4);  // a copy in group n
    lab_cp_async_commit();
    for (int round = 0; round < 3; ++round) {
        __syncthreads();
        if (threadIdx.x != t.x || threadIdx.y != t.y || blockIdx.x != b.x || blockIdx.y != b.y)
            ++mismatches;
        if (lab_groups != long(n) + 1 || lab_copies.size() != 1) ++mismatches;
        if (dst[me] == dst[me]) ++mismatches;  // not landed: still NaN
    }
    lab_cp_async_wait(0);
    if (dst[me] != src[me] || !lab_copies.empty()) ++mismatches;
    __syncthreads();
}

// one thread writes one element past a local array (after a barrier: on a resumed fiber)
__global__ void stack_oob(int at) {
    int local[8];
    int* volatile hidden = local;  // out of UBSan's object-size sight: ASan's shadow must see it
    int* p = hidden;
    __syncthreads();
    for (int i = 0; i < 8; ++i) p[i] = i;
    if (threadIdx.x == 3) p[at] = 1;
    if (p[7] != 7) ++mismatches;
}

// one thread reads one element past a __shared__ array, or past the dynamic shared memory
__global__ void shared_oob(int at, bool dynamic) {
    __shared__ float tile[T];
    float* volatile hidden = dynamic ? reinterpret_cast<float*>(lab_dynamic_smem) : tile;
    float* p = hidden;
    p[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 7 && p[at] != 1.0f) ++mismatches;
}

// recursion deeper than any stack
__attribute__((noinline)) long deep(long n) {
    volatile char pad[512];
    pad[0] = char(n);
    return n == 0 ? 0 : deep(n - 1) + pad[0];
}
__global__ void overflow(long n) {
    __syncthreads();
    if (threadIdx.x == 9 && deep(n) == 42) ++mismatches;
}

int main(int argc, char** argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: mode [barrier]\n"); return 2; }
    const std::string mode = argv[1];
    with_barrier = argc > 2;
    std::vector<float> src(T);
    for (unsigned i = 0; i < T; ++i) src[i] = 0.5f * i;
    volatile int past = 8, past_shared = T;  // out of the compiler's sight
    if (mode == "switching") { std::printf("switching: %s\n", lab_fiber_switching()); return 0; }
    if (mode == "broadcast-first") lab_run_grid(2, 1, T, 1, 0, [] { broadcast(0); });
    else if (mode == "broadcast-last") lab_run_grid(2, 1, T, 1, 0, [] { broadcast(T - 1); });
    else if (mode == "diverge") lab_run_grid(3, 1, T, 1, 0, [] { diverge(); });
    else if (mode == "extra-barrier") lab_run_grid(3, 1, T, 1, 0, [] { extra_barrier(); });
    else if (mode == "state") lab_run_grid(2, 3, 16, T / 16, 0, [&] { state(src.data()); });
    else if (mode == "stack-oob") lab_run_grid(1, 1, T, 1, 0, [&] { stack_oob(past); });
    else if (mode == "shared-oob")
        lab_run_grid(1, 1, T, 1, 0, [&] { shared_oob(past_shared, false); });
    else if (mode == "dynamic-oob")
        lab_run_grid(1, 1, T, 1, 4 * T, [&] { shared_oob(past_shared, true); });
    else if (mode == "overflow") lab_run_grid(1, 1, T, 1, 0, [] { overflow(1L << 30); });
    else { std::fprintf(stderr, "unknown mode %s\n", mode.c_str()); return 2; }
    std::printf("%s: %ld mismatches\n", mode.c_str(), mismatches);
    return mismatches ? 1 : 0;
}
'''

# tiled.cu's two barriers, and the planted defects: each one removed
TILED_SYNC_LOAD = "        }\n        __syncthreads();\n        INNER_UNROLL"
TILED_SYNC_READ = "        __syncthreads();  // nobody may overwrite the tiles"
TILED_VARIANTS = {
    "both-barriers": lambda s: s,
    "no-barrier-after-the-loads":
        lambda s: s.replace(TILED_SYNC_LOAD, "        }\n        INNER_UNROLL"),
    "no-barrier-after-the-reads": lambda s: s.replace(TILED_SYNC_READ, "        // (removed)"),
}
TILE = 8
TILED_DEFINES = {"TILE": TILE, "KTILE": 2 * TILE, "GROUP": 2, "TRANS_A": 0, "TRANS_B": 0,
                 "UNROLL": 1, "KERNEL_NAME": "matmul_tiled"}


@pytest.fixture(scope="module")
def exes(tmp_path_factory):
    """{'probes': exe, tiled variant: exe}: every g++ build started at once."""
    import cuda_emulator as ce

    if ce.compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    root = tmp_path_factory.mktemp("emulator")
    (root / "probes.cpp").write_text(ce.prelude() + PROBES)
    futures = {"probes": ce.compile_async(root / "probes.cpp", root / "probes")}
    (root / "emulator.cpp").write_text(ce.EMULATOR)
    text = (KERNELS / "tiled.cu").read_text()
    assert TILED_SYNC_LOAD in text and TILED_SYNC_READ in text, "tiled.cu's barriers moved"
    for name, change in TILED_VARIANTS.items():
        source = root / f"tiled_{name}.cu"  # common.cuh comes from -I cuda_kernels
        source.write_text(change(text))
        futures[name] = ce.compile_async(root / "emulator.cpp", root / f"tiled_{name}",
                                         {**TILED_DEFINES, "KERNEL_FILE": f'"{source}"'})
    return {name: f.result() for name, f in futures.items()}


def _run(exe, *args) -> tuple[int, str]:
    out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


# ------------------------------------------------------------------ (a) missing barriers


@pytest.mark.parametrize("writer", ["first", "last"])
def test_a_read_without_a_barrier_after_the_write_fails_whichever_thread_writes(exes, writer):
    rc, out = _run(exes["probes"], f"broadcast-{writer}")
    assert rc == 1 and re.search(r": [1-9]\d* mismatches", out), out
    rc, out = _run(exes["probes"], f"broadcast-{writer}", "barrier")
    assert rc == 0 and ": 0 mismatches" in out, out


def _tiled(exes, variant, M, N, K):
    gx = -(-M // TILE) * -(-N // TILE)
    return _run(exes[variant], M, N, K, K + 1, N + 3, N + 2, gx, 1, TILE, TILE)


@pytest.mark.parametrize("shape", [(37, 45, 70), (16, 16, 48)], ids=lambda s: "x".join(map(str, s)))
def test_tiled_with_both_barriers_passes(exes, shape):
    rc, out = _tiled(exes, "both-barriers", *shape)
    assert rc == 0 and "non-finite=0 gap-writes=0" in out, out


@pytest.mark.parametrize("variant", ["no-barrier-after-the-loads", "no-barrier-after-the-reads"])
@pytest.mark.parametrize("shape", [(37, 45, 70), (16, 16, 48)], ids=lambda s: "x".join(map(str, s)))
def test_tiled_without_one_of_its_barriers_fails(exes, variant, shape):
    rc, out = _tiled(exes, variant, *shape)
    assert rc == 1, out
    err = float(re.search(r"rel_err=(\S+)", out).group(1))
    assert err > 1e-3, out  # wrong values, not rounding


# ------------------------------------------------------------------ (b) barriers not all reach


@pytest.mark.parametrize("mode,block,waiting,returned", [("diverge", 1, 16, 48),
                                                          ("extra-barrier", 2, 1, 63)])
def test_a_barrier_some_threads_never_reach_aborts_naming_the_block(exes, mode, block, waiting,
                                                                   returned):
    rc, out = _run(exes["probes"], mode)
    assert rc != 0, out
    assert f"block ({block}, 0): {waiting} of its 64 threads wait at __syncthreads()" in out, out
    assert f"while {returned} have returned" in out, out


# ------------------------------------------------------------------ (c) per-thread state


def test_each_thread_keeps_its_indices_and_cp_async_state_across_barriers(exes):
    rc, out = _run(exes["probes"], "state")
    assert rc == 0 and "state: 0 mismatches" in out, out
    assert "ERROR: AddressSanitizer" not in out


# ------------------------------------------------------------------ (d) ASan and the guard page


@pytest.mark.parametrize("mode,finding", [("stack-oob", "stack-buffer-overflow"),
                                          ("shared-oob", "global-buffer-overflow"),
                                          ("dynamic-oob", "heap-buffer-overflow")])
def test_address_sanitizer_sees_out_of_bounds_accesses_on_fibers(exes, mode, finding):
    if mode == "stack-oob" and "switching: asm" not in _run(exes["probes"], "switching")[1]:
        pytest.skip("the fibers switch with swapcontext here (not x86-64, or a CET shadow stack "
                    "is on), whose ASan interceptor clears the redzones of a suspended stack")
    rc, out = _run(exes["probes"], mode)
    assert rc != 0, out
    assert f"ERROR: AddressSanitizer: {finding}" in out, out
    kernel = "stack_oob" if mode == "stack-oob" else "shared_oob"
    assert f"in {kernel}(" in out, out  # the report's stack names the kernel


def test_a_runaway_recursion_hits_the_guard_page(exes):
    rc, out = _run(exes["probes"], "overflow")
    assert rc != 0, out
    assert "ERROR: AddressSanitizer: stack-overflow" in out, out
