"""Run the CUDA kernels on the CPU: g++ against a small emulation of CUDA's thread model.

No GPU here, but the .cu files are plain C++ apart from a few CUDA keywords. EMULATOR below
defines those keywords and runs one std::thread per CUDA thread (std::barrier for __syncthreads,
static locals for __shared__, one block after another), so g++ can compile each kernel and check
C against a float64 reference: the index math, the bounds tests and zero fill, the GROUP block
order, the VEC variants and the operand layouts. AddressSanitizer catches a load outside A or B,
UBSan a float4 access that is not 16-byte aligned (the emulated float4 is alignas(16) like
CUDA's). A, B and C live in buffers with gaps (a leading dimension larger than the matrix) that
hold NaN: a kernel that reads a gap gets NaN into C, one that writes a gap or past C is counted.

A kernel is compiled with exactly the -D defines its NVRTC build used (read off Build.options), so
what runs here is what runs on the GPU.

    run(build, grid, block, M, N, K, lda, ldb, ldc) -> (ok, output)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "cuda_kernels"

EMULATOR = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
using std::max;
using std::min;
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local Dim3 threadIdx, blockIdx;
std::barrier<>* g_barrier = nullptr;
inline void __syncthreads() { g_barrier->arrive_and_wait(); }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#include KERNEL_FILE

// argv: M N K lda ldb ldc grid_x grid_y block_x block_y
int main(int argc, char** argv) {
    if (argc != 11) { std::fprintf(stderr, "usage: M N K lda ldb ldc gx gy bx by\n"); return 2; }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldc = atoi(argv[6]);
    const unsigned gx = atoi(argv[7]), gy = atoi(argv[8]), bx = atoi(argv[9]), by = atoi(argv[10]);
    std::mt19937 gen(M * 131 + N * 7 + K);
    std::normal_distribution<float> normal;
    // Storage: A is M x K (TRANS_A: its transpose is stored, K x M), with leading dimension lda.
    const size_t a_lines = TRANS_A ? K : M, b_lines = TRANS_B ? N : K;
    std::vector<float> A(a_lines * lda, NAN), B(b_lines * ldb, NAN), C(size_t(M) * ldc, NAN);
    auto a_at = [&](int i, int k) -> float& { return A[TRANS_A ? size_t(k) * lda + i : size_t(i) * lda + k]; };
    auto b_at = [&](int k, int j) -> float& { return B[TRANS_B ? size_t(j) * ldb + k : size_t(k) * ldb + j]; };
    for (int i = 0; i < M; ++i) for (int k = 0; k < K; ++k) a_at(i, k) = normal(gen);
    for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) b_at(k, j) = normal(gen);
    for (unsigned bid = 0; bid < gx * gy; ++bid) {
        std::barrier<> bar(bx * by);
        g_barrier = &bar;
        std::vector<std::thread> team;
        for (unsigned t = 0; t < bx * by; ++t)
            team.emplace_back([&, t] {
                threadIdx = {t % bx, t / bx, 0};
                blockIdx = {bid % gx, bid / gx, 0};
                KERNEL_NAME(A.data(), B.data(), C.data(), M, N, K, lda, ldb, ldc);
            });
        for (auto& th : team) th.join();
    }
    double num = 0, den = 0;
    long bad = 0, gaps = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < ldc; ++j) {
            const double c = C[size_t(i) * ldc + j];
            if (j >= N) { gaps += !std::isnan(c); continue; }
            double ref = 0;
            for (int k = 0; k < K; ++k) ref += double(a_at(i, k)) * b_at(k, j);
            if (!std::isfinite(c)) { ++bad; continue; }
            num += (c - ref) * (c - ref);
            den += ref * ref;
        }
    const double rel = std::sqrt(num / (den > 0 ? den : 1));
    std::printf("%dx%dx%d lda=%d ldb=%d ldc=%d rel_err=%.2e non-finite=%ld gap-writes=%ld\n", M, N,
                K, lda, ldb, ldc, rel, bad, gaps);
    return bad == 0 && gaps == 0 && rel < 1e-5 ? 0 : 1;
}
"""


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("clang++")


def defines_of(build) -> dict[str, str]:
    """The -DNAME=value defines of an NVRTC build."""
    out = {}
    for opt in build.options:
        if opt.startswith("-D"):
            name, _, value = opt[2:].partition("=")
            out[name] = value
    return out


class Emulator:
    """Compiles kernels against EMULATOR (cached per build) and runs them."""

    def __init__(self, root: Path):
        self.cxx = compiler()
        self.root = root
        (root / "emulator.cpp").write_text(EMULATOR)
        self.exes: dict = {}

    def start(self, build):
        """Start compiling `build`'s kernel in the background (call before run() to overlap)."""
        key = (build.source, build.kernel, tuple(sorted(defines_of(build).items())))
        if key in self.exes:
            return key
        exe = self.root / f"{build.kernel}_{len(self.exes)}"
        cmd = [self.cxx, "-std=c++20", "-O1", "-g", "-pthread", "-Wno-unknown-pragmas",
               "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{KERNELS}",
               f'-DKERNEL_FILE="{KERNELS / build.source}"', f"-DKERNEL_NAME={build.kernel}",
               *(f"-D{k}={v}" for k, v in defines_of(build).items()),
               str(self.root / "emulator.cpp"), "-o", str(exe)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.exes[key] = (exe, proc, None)
        return key

    def executable(self, build) -> Path:
        key = self.start(build)
        exe, proc, err = self.exes[key]
        if proc is not None:
            _, err = proc.communicate()
            self.exes[key] = (exe, None, err if proc.returncode else "")
        if err:
            raise AssertionError(f"{self.cxx} could not compile {build.source} for the emulator:\n"
                                 + err[-3000:])
        return exe

    def run(self, build, grid, block, M, N, K, lda, ldb, ldc) -> tuple[bool, str]:
        exe = self.executable(build)
        gx = int(grid[0])
        gy = int(grid[1]) * int(grid[2] if len(grid) > 2 else 1)
        bx, by = int(block[0]), int(block[1]) * int(block[2] if len(block) > 2 else 1)
        args = [M, N, K, lda, ldb, ldc, gx, gy, bx, by]
        out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                             timeout=300)
        return out.returncode == 0, (out.stdout + out.stderr)[-3000:]
