"""Run the CUDA kernels on the CPU: g++ against a small emulation of CUDA's thread model.

No GPU here, but the .cu files are plain C++ apart from a few CUDA keywords. EMULATOR below defines
those keywords and runs each block's CUDA threads as fibers on one OS thread (thread model below;
static locals for __shared__, one block after another), so g++ can compile each kernel and check C
against a float64 reference: the index math, the bounds tests and zero fill, the GROUP block order,
the VEC variants and the operand layouts. AddressSanitizer catches a load outside A or B, UBSan a
float4 access that is not 16-byte aligned (the emulated float4 is alignas(16) like CUDA's). A, B
and C live in buffers with gaps (a leading dimension larger than the matrix) that hold NaN: a
kernel that reads a gap gets NaN into C, one that writes a gap or past C is counted.

Thread model: lab_run_grid(gx, gy, bx, by, smem, body) runs the blocks one after another, and a
block's bx * by CUDA threads as fibers on the calling OS thread, each with its own 1 MiB stack
(mmap'd, with a PROT_NONE guard page below it, so an overflow faults). A fiber runs until it
reaches __syncthreads(), then the next one runs: a barrier is a stack switch (a few instructions
on x86-64, ucontext's swapcontext elsewhere or where a CET shadow stack is on), not a wait of
hundreds of OS threads on 2 cores. threadIdx, blockIdx and the cp.async state are the running
fiber's. The fibers run in order up to one barrier and in reverse order up to the next, and every
other block starts in reverse, so a read of shared memory that lacks the barrier after the write
it needs runs before that write somewhere, whichever thread writes. A barrier that some threads
of a block reach while others have returned aborts with a message naming the block, instead of
hanging. AddressSanitizer is told of every switch (__sanitizer_start_switch_fiber /
__sanitizer_finish_switch_fiber), so it checks each fiber's stack as its own: no false positive,
and an access past a local array is still caught. tests/test_emulator.py holds these promises.

A kernel is compiled with exactly the -D defines its NVRTC build used (read off Build.options), so
what runs here is what runs on the GPU.

Dynamic shared memory: `extern __shared__ T name[];` is rewritten (in a copy of the source) into
a pointer to one buffer per block, allocated with exactly the bytes the launch asks for (run's
smem_dynamic, else the kernel's own DYNAMIC_SMEM_BYTES macro if it defines one, else 0) and
filled with NaN, so ASan catches an access past it and a read of a never-written element puts NaN
into C.

cp.async: a kernel's plain C++ fallback (its `#ifdef __CUDA_ARCH__` else-branch) calls
lab_cp_async(dst, src, bytes, src_bytes), lab_cp_async_commit() and lab_cp_async_wait(n). They
keep PTX's semantics with the latest legal timing: a copy fills its destination with NaN when it is
issued and lands (src_bytes from src, the rest zeros) only when a wait_group covers its group, so
reading a tile before waiting for it, waiting for too few groups, or refilling a buffer that other
threads still read, puts NaN into C. Copies must be 4, 8 or 16 bytes, aligned to their size on
both sides (as on the GPU), and src_bytes at most the copy size.

    run(build, grid, block, M, N, K, lda, ldb, ldc, smem_dynamic=None) -> (ok, output)

A test that brings its own main() (split-K's two kernels, say) writes it with program(main,
files...): the prelude, its kernel files, OPERANDS (LabOperands: A and B seeded from the shape,
NaN in the gaps, and the float64 reference; LabCheck: a result's error, non-finite values and
writes into its gaps; EMULATOR's own main() uses both), then its main().

Every g++ build of the tests goes through `compile_async` (this module's Emulator, and the tests
with a main() of their own): at most as many compiles run at once as there are cores, and each
executable is kept in the on-disk build cache (lab/toolchain/cache.py) under a key made of the
compiler's version, its flags and the preprocessed source (so every header and define counts, and
no path does). A second test run, or a second test file building the same kernel, compiles nothing.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "cuda_kernels"
sys.path.insert(0, str(KERNELS.parent))
from lab.toolchain import cache as _cache  # noqa: E402

# The flags of the emulated kernels: AddressSanitizer and UBSan, stop at the first finding.
SANITIZE = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
# g++ builds run on this pool: at most one per core (an unbounded start of every build at once
# put 35 g++ processes on 2 cores).
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1),
                                              thread_name_prefix="g++")

# The operands every emulated program multiplies, placed after the kernel's source (which sets
# TRANS_A and TRANS_B): EMULATOR's main() and the tests' own main()s (see program()) use it.
OPERANDS = r"""
// A is M x K (TRANS_A: its transpose is stored, K x M) with leading dimension lda, B is K x N
// (TRANS_B: stored N x K) with ldb; normal random values seeded by the shape, NaN in the gaps.
struct LabOperands {
    const int M, N, K, lda, ldb;
    std::vector<float> A, B;
    LabOperands(int m, int n, int k, int lda_, int ldb_)
        : M(m), N(n), K(k), lda(lda_), ldb(ldb_), A(size_t(TRANS_A ? k : m) * lda_, NAN),
          B(size_t(TRANS_B ? n : k) * ldb_, NAN) {
        std::mt19937 gen(M * 131 + N * 7 + K);
        std::normal_distribution<float> normal;
        for (int i = 0; i < M; ++i) for (int kk = 0; kk < K; ++kk) a(i, kk) = normal(gen);
        for (int kk = 0; kk < K; ++kk) for (int j = 0; j < N; ++j) b(kk, j) = normal(gen);
    }
    float& a(int i, int k) { return A[TRANS_A ? size_t(k) * lda + i : size_t(i) * lda + k]; }
    float& b(int k, int j) { return B[TRANS_B ? size_t(j) * ldb + k : size_t(k) * ldb + j]; }
    // the reference: C(i, j) summed over k0 <= k < k1 in float64
    double ref(int i, int j, int k0, int k1) {
        double sum = 0;
        for (int k = k0; k < k1; ++k) sum += double(a(i, k)) * b(k, j);
        return sum;
    }
};
// A result (C, or a split-K workspace slab) checked one stored element at a time: a column
// j >= N is in the gap between rows and must keep its NaN; ref() is the element's reference.
struct LabCheck {
    long bad = 0, gaps = 0;   // non-finite results; writes into the gaps
    double num = 0, den = 0;  // the sums of the relative Frobenius error
    template <class Ref> void add(float c, int j, int N, Ref ref) {
        if (j >= N) { gaps += !std::isnan(c); return; }
        const double r = ref();
        if (!std::isfinite(c)) { ++bad; return; }
        num += (c - r) * (c - r);
        den += r * r;
    }
    double rel() const { return std::sqrt(num / (den > 0 ? den : 1)); }
};
"""

EMULATOR = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>
using std::max;
using std::min;
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
// The running CUDA thread's indices; set by the block's scheduler each time it resumes a fiber.
thread_local Dim3 threadIdx, blockIdx;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
struct alignas(8) uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
// Dynamic shared memory of the running block (extern __shared__ arrays point here).
unsigned char* lab_dynamic_smem = nullptr;
// cp.async: copies land when a wait_group covers their group (see the module docstring). The
// running CUDA thread's copies and group count; the scheduler swaps them with the fiber's own.
struct LabCopy { unsigned char* dst; const unsigned char* src; int bytes, src_bytes; long group; };
thread_local std::vector<LabCopy> lab_copies;
thread_local long lab_groups = 0;  // groups this thread has committed
inline void lab_cp_async(void* dst, const void* src, int bytes, int src_bytes) {
    if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes < 0 || src_bytes > bytes) {
        std::fprintf(stderr, "cp.async of %d bytes with src-size %d\n", bytes, src_bytes);
        std::abort();
    }
    if (reinterpret_cast<std::uintptr_t>(dst) % bytes || reinterpret_cast<std::uintptr_t>(src) % bytes) {
        std::fprintf(stderr, "misaligned %d-byte cp.async: dst %p src %p\n", bytes, dst, src);
        std::abort();
    }
    const float nan = NAN;  // undefined until waited for
    for (int i = 0; i < bytes; i += 4) std::memcpy(static_cast<unsigned char*>(dst) + i, &nan, 4);
    lab_copies.push_back({static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src),
                          bytes, src_bytes, lab_groups});
}
inline void lab_cp_async_commit() { ++lab_groups; }
inline void lab_cp_async_wait(int n) {  // all but the newest n committed groups are complete
    std::vector<LabCopy> pending;
    for (const LabCopy& c : lab_copies) {
        if (c.group < lab_groups - n) {
            if (c.src_bytes) std::memcpy(c.dst, c.src, c.src_bytes);
            std::memset(c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
        } else {
            pending.push_back(c);
        }
    }
    lab_copies.swap(pending);
}
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

// ---- The thread model: a block's CUDA threads are fibers on the calling OS thread.
// Each fiber has its own stack (mmap'd, with a PROT_NONE guard page below it, so an overflow
// faults). A scheduler on the caller's stack resumes the fibers one at a time; a fiber runs until
// it reaches __syncthreads() (or returns), then switches back. One pass over the block is one
// barrier phase: after it every thread waits at the barrier (next phase) or has returned (the
// block is done); a mix of both aborts, naming the block. The order of the pass alternates,
// forward then reverse, with the phase and the block, so a read of shared memory that lacks the
// barrier after the write it needs runs before that write in some block, whichever thread writes.
#if defined(__SANITIZE_ADDRESS__)
#define LAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LAB_ASAN 1
#endif
#endif
#ifdef LAB_ASAN
#include <sanitizer/common_interface_defs.h>
#define LAB_NO_ASAN __attribute__((no_sanitize_address))
#else
#define LAB_NO_ASAN
#endif
#include <ucontext.h>
// x86-64 switches stacks with the few instructions of lab_fiber_switch: no system call, and no
// ASan interceptor (ASan's swapcontext wipes the shadow of the stack it enters, and with it the
// redzones of the frames suspended there). Elsewhere, where the CPU's shadow stack (Intel CET) is
// on, or with -DLAB_FIBER_UCONTEXT, ucontext's swapcontext switches.
#if defined(__x86_64__) && defined(__ELF__) && !defined(LAB_FIBER_UCONTEXT)
#define LAB_FIBER_ASM 1
extern "C" void lab_fiber_switch(void** save_sp, void* to_sp);
asm(R"(
    .pushsection .text
    .p2align 4
    .type lab_fiber_switch, @function
lab_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size lab_fiber_switch, .-lab_fiber_switch
    .popsection
)");
inline bool lab_shadow_stack_on() {  // rdsspq: a no-op (ssp stays 0) unless a shadow stack is on
    unsigned long long ssp = 0;
    asm volatile(".byte 0xf3, 0x48, 0x0f, 0x1e, 0xc8" : "+a"(ssp));
    return ssp != 0;
}
#endif

struct LabFiber {
    unsigned char* stack = nullptr;  // lowest address of the usable stack
    void* sp = nullptr;              // saved stack pointer (lab_fiber_switch)
    ucontext_t uc;                   // saved context (swapcontext)
    Dim3 tid;
    std::vector<LabCopy> copies;     // its cp.async state while it is switched out
    long groups = 0;
    enum State { READY, AT_BARRIER, DONE } state = READY;
    void* fake_stack = nullptr;      // ASan's fake stack of the fiber while it is switched out
};
struct LabBlockRun {
    std::vector<LabFiber> fibers;
    unsigned char* map = nullptr;
    size_t map_bytes = 0, stack_bytes = 0;
    bool asm_switch = false;
    LabFiber* cur = nullptr;
    void (*call)(void*) = nullptr;  // the kernel call, type-erased
    void* ctx = nullptr;
    void* main_sp = nullptr;        // the scheduler's context
    ucontext_t main_uc;
    const void* main_bottom = nullptr;  // the scheduler's stack (for ASan)
    size_t main_size = 0;
    void* main_fake = nullptr;
};
thread_local LabBlockRun* lab_block_run = nullptr;
// Stack of each emulated thread. The largest kernel frames (mma.cu at its biggest warp tiles)
// use under 10 KiB under ASan; the rest is room for ASan's and UBSan's reports. Pages are
// committed only when touched.
#ifndef LAB_FIBER_STACK
#define LAB_FIBER_STACK (1024 * 1024)
#endif
inline const char* lab_fiber_switching() {  // how the fibers of lab_run_grid switch
#ifdef LAB_FIBER_ASM
    if (!lab_shadow_stack_on()) return "asm";
#endif
    return "ucontext";
}

inline void lab_switch(LabBlockRun* run, void** save_sp, ucontext_t* save_uc, void* to_sp,
                       ucontext_t* to_uc) {
#ifdef LAB_FIBER_ASM
    if (run->asm_switch) {
        lab_fiber_switch(save_sp, to_sp);
        return;
    }
#endif
    swapcontext(save_uc, to_uc);
}
// Leave the running fiber for the scheduler (state: why); back when the scheduler resumes it.
inline void lab_fiber_leave(LabBlockRun* run, LabFiber* f, LabFiber::State state) {
    f->state = state;
#ifdef LAB_ASAN
    // a fiber that has returned is never resumed: ASan may free its fake stack
    __sanitizer_start_switch_fiber(state == LabFiber::DONE ? nullptr : &f->fake_stack,
                                   run->main_bottom, run->main_size);
#endif
    lab_switch(run, &f->sp, &f->uc, run->main_sp, &run->main_uc);
#ifdef LAB_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}
// Where a fiber starts. It never returns: its last act is to leave for the scheduler for good.
LAB_NO_ASAN __attribute__((noinline)) void lab_fiber_body(LabBlockRun* run) { run->call(run->ctx); }
[[noreturn]] LAB_NO_ASAN void lab_fiber_start() {
    LabBlockRun* run = lab_block_run;
#ifdef LAB_ASAN
    // learns the bounds of the stack it came from: the scheduler's
    __sanitizer_finish_switch_fiber(nullptr, &run->main_bottom, &run->main_size);
#endif
    lab_fiber_body(run);
    lab_fiber_leave(run, run->cur, LabFiber::DONE);
    std::fprintf(stderr, "lab_run_grid: a CUDA thread that had returned was resumed\n");
    std::abort();
}
// (Re)start fiber f at the top of its stack, with its thread index and no cp.async state.
inline void lab_fiber_init(LabBlockRun* run, LabFiber& f) {
    unsigned char* top = f.stack + run->stack_bytes;
    if (run->asm_switch) {
        // the stack as lab_fiber_switch leaves it: mxcsr and x87 control word, r15..r12, rbx, rbp
        // (0), the return address (lab_fiber_start, entered as if called: a null return address
        // above it ends the stack for unwinders)
        void** p = reinterpret_cast<void**>(top);
        *--p = nullptr;
        *--p = reinterpret_cast<void*>(&lab_fiber_start);
        for (int i = 0; i < 6; ++i) *--p = nullptr;
        unsigned mxcsr = 0;
        unsigned short fpucw = 0;
#ifdef LAB_FIBER_ASM
        asm volatile("stmxcsr %0" : "=m"(mxcsr));
        asm volatile("fnstcw %0" : "=m"(fpucw));
#endif
        --p;
        std::memcpy(p, &mxcsr, 4);
        std::memcpy(reinterpret_cast<unsigned char*>(p) + 4, &fpucw, 2);
        f.sp = p;
    } else {
        getcontext(&f.uc);
        f.uc.uc_stack.ss_sp = f.stack;
        f.uc.uc_stack.ss_size = run->stack_bytes;
        f.uc.uc_link = nullptr;
        makecontext(&f.uc, lab_fiber_start, 0);
    }
    f.state = LabFiber::READY;
    f.fake_stack = nullptr;
    f.copies.clear();
    f.groups = 0;
}
// Run fiber f (as the CUDA thread it is) until it reaches a barrier or returns.
inline void lab_fiber_resume(LabBlockRun* run, LabFiber& f) {
    run->cur = &f;
    threadIdx = f.tid;
    lab_copies.swap(f.copies);
    lab_groups = f.groups;
#ifdef LAB_ASAN
    __sanitizer_start_switch_fiber(&run->main_fake, f.stack, run->stack_bytes);
#endif
    lab_switch(run, &run->main_sp, &run->main_uc, f.sp, &f.uc);
#ifdef LAB_ASAN
    __sanitizer_finish_switch_fiber(run->main_fake, nullptr, nullptr);
#endif
    lab_copies.swap(f.copies);
    f.groups = lab_groups;
    run->cur = nullptr;
}
inline void __syncthreads() {
    LabBlockRun* run = lab_block_run;
    if (!run || !run->cur) {
        std::fprintf(stderr, "__syncthreads() outside lab_run_grid\n");
        std::abort();
    }
    lab_fiber_leave(run, run->cur, LabFiber::AT_BARRIER);
}
// __shfl_xor_sync: the partner lane's value (linear thread index xor lane_mask, within the warp)
// through a block-wide array between two barriers. Every thread of the block must call it
// together, as gemv.cu's warp sums do (a block where some threads have returned aborts at the
// first barrier, as for __syncthreads()).
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    static std::vector<float> lanes;
    LabBlockRun* run = lab_block_run;
    if (!run || !run->cur) {
        std::fprintf(stderr, "__shfl_xor_sync() outside lab_run_grid\n");
        std::abort();
    }
    const size_t t = size_t(run->cur - run->fibers.data());
    const size_t partner = t ^ size_t(lane_mask & 31);
    if (lanes.size() < run->fibers.size()) lanes.resize(run->fibers.size());
    lanes[t] = v;
    __syncthreads();
    const float r = partner < run->fibers.size() ? lanes[partner] : v;
    __syncthreads();
    return r;
}
template <typename Body>
void lab_fiber_call(void* body) { (*static_cast<Body*>(body))(); }

// A launch on the CPU: the blocks of a gx x gy grid one after another, each a team of bx x by
// CUDA threads (fibers, above) that share `smem` bytes of dynamic shared memory, NaN until
// written. `body` is what every thread runs: the kernel call with its arguments.
template <typename Body>
void lab_run_grid(unsigned gx, unsigned gy, unsigned bx, unsigned by, long smem, Body body) {
    const unsigned threads = bx * by, blocks = gx * gy;
    if (threads == 0 || blocks == 0) return;
    if (lab_block_run) {
        std::fprintf(stderr, "lab_run_grid called from inside a kernel\n");
        std::abort();
    }
    LabBlockRun run;
    run.call = &lab_fiber_call<Body>;
    run.ctx = &body;
    run.asm_switch = std::strcmp(lab_fiber_switching(), "asm") == 0;
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    run.stack_bytes = (size_t(LAB_FIBER_STACK) + page - 1) / page * page;
    const size_t slot = page + run.stack_bytes;  // guard page, stack
    run.map_bytes = slot * threads;
    void* map = mmap(nullptr, run.map_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        std::fprintf(stderr, "lab_run_grid: cannot map %zu bytes of stacks\n", run.map_bytes);
        std::abort();
    }
    run.map = static_cast<unsigned char*>(map);
    run.fibers.resize(threads);
    for (unsigned t = 0; t < threads; ++t) {
        if (mprotect(run.map + t * slot, page, PROT_NONE)) {
            std::fprintf(stderr, "lab_run_grid: cannot protect a stack's guard page\n");
            std::abort();
        }
        run.fibers[t].stack = run.map + t * slot + page;
        run.fibers[t].tid = {t % bx, t / bx, 0};
    }
    std::unique_ptr<float4[]> dynamic(new float4[(smem + 15) / 16]);
    lab_dynamic_smem = reinterpret_cast<unsigned char*>(dynamic.get());
    lab_block_run = &run;
    for (unsigned bid = 0; bid < blocks; ++bid) {
        for (long i = 0; i < (smem + 15) / 16; ++i) dynamic[i] = {NAN, NAN, NAN, NAN};
        blockIdx = {bid % gx, bid / gx, 0};
        for (LabFiber& f : run.fibers) lab_fiber_init(&run, f);
        for (unsigned phase = 0;; ++phase) {
            const bool reverse = (bid + phase) % 2;
            unsigned waiting = 0, done = 0;
            for (unsigned i = 0; i < threads; ++i) {
                LabFiber& f = run.fibers[reverse ? threads - 1 - i : i];
                lab_fiber_resume(&run, f);
                ++(f.state == LabFiber::DONE ? done : waiting);
            }
            if (done == threads) break;
            if (waiting != threads) {
                std::fprintf(stderr, "lab_run_grid: block (%u, %u): %u of its %u threads wait at "
                             "__syncthreads() (barrier %u) while %u have returned: every thread "
                             "of a block must reach each barrier\n", blockIdx.x, blockIdx.y,
                             waiting, threads, phase + 1, done);
                std::abort();
            }
        }
    }
    lab_block_run = nullptr;
    lab_dynamic_smem = nullptr;
    munmap(run.map, run.map_bytes);
}
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#include KERNEL_FILE
""" + OPERANDS + r"""
// argv: M N K lda ldb ldc grid_x grid_y block_x block_y [dynamic_smem_bytes]
int main(int argc, char** argv) {
    if (argc != 11 && argc != 12) {
        std::fprintf(stderr, "usage: M N K lda ldb ldc gx gy bx by [smem]\n");
        return 2;
    }
#ifdef DYNAMIC_SMEM_BYTES
    const long kernel_smem = DYNAMIC_SMEM_BYTES;
#else
    const long kernel_smem = 0;
#endif
    const long smem = argc == 12 ? atol(argv[11]) : kernel_smem;
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const int lda = atoi(argv[4]), ldb = atoi(argv[5]), ldc = atoi(argv[6]);
    const unsigned gx = atoi(argv[7]), gy = atoi(argv[8]), bx = atoi(argv[9]), by = atoi(argv[10]);
    LabOperands ops(M, N, K, lda, ldb);
    std::vector<float> C(size_t(M) * ldc, NAN);
    // exactly `smem` bytes of dynamic shared memory (16-byte units, 16-byte aligned)
    lab_run_grid(gx, gy, bx, by, smem,
                 [&] { KERNEL_NAME(ops.A.data(), ops.B.data(), C.data(), M, N, K, lda, ldb, ldc); });
    LabCheck check;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < ldc; ++j)
            check.add(C[size_t(i) * ldc + j], j, N, [&] { return ops.ref(i, j, 0, K); });
    const double rel = check.rel();
    std::printf("%dx%dx%d lda=%d ldb=%d ldc=%d rel_err=%.2e non-finite=%ld gap-writes=%ld "
                "dynamic_smem=%ld kernel_smem=%ld\n", M, N, K, lda, ldb, ldc, rel, check.bad,
                check.gaps, smem, kernel_smem);
    return check.bad == 0 && check.gaps == 0 && rel < 1e-5 ? 0 : 1;
}
"""


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("clang++")


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    cxx = compiler()
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout if cxx else ""


def compile_async(main: Path, exe: Path, defines: dict | None = None, flags=SANITIZE,
                  include: Path = KERNELS) -> concurrent.futures.Future:
    """Compile `main` (a .cpp that may #include KERNEL_FILE and other files named by `defines`)
    into an executable, on the shared pool; the future's result is the executable's path (in the
    build cache when it is on, else `exe`). A failed compile raises AssertionError with g++'s log.
    """
    cxx = compiler()
    cmd = [cxx, "-std=c++20", "-pthread", "-Wno-unknown-pragmas", *flags, f"-I{include}",
           *(f"-D{k}={v}" for k, v in (defines or {}).items())]

    def job() -> Path:
        pre = subprocess.run([*cmd, "-E", "-P", str(main)], capture_output=True)
        if pre.returncode:
            raise AssertionError(f"{cxx} could not preprocess {main}:\n"
                                 + pre.stderr.decode(errors="replace")[-3000:])
        key = _cache.digest("g++", compiler_version(), *flags, pre.stdout)
        folder = _cache.entry_folder("emulator", key)
        if folder is not None and (folder / "exe").is_file():
            return folder / "exe"
        out = subprocess.run([*cmd, str(main), "-o", str(exe)], capture_output=True, text=True)
        if out.returncode:
            raise AssertionError(f"{cxx} could not compile {main.name} with "
                                 f"{' '.join(cmd[4:])}:\n" + out.stderr[-3000:])
        folder = _cache.store("emulator", key, {"exe": exe.read_bytes()}, executable=("exe",))
        return folder / "exe" if folder is not None else exe

    return _POOL.submit(job)


def prelude() -> str:
    """EMULATOR up to its `#include KERNEL_FILE`: for tests that bring their own main()."""
    head, sep, _ = EMULATOR.partition("#include KERNEL_FILE")
    assert sep, "EMULATOR has no '#include KERNEL_FILE' to cut at"
    return head


def common_cuh_programs(root: Path, name: str, main: str, variants: dict) -> dict:
    """{key: executable} for a test's own main() compiled against common.cuh (after prelude())
    once per entry of `variants` ({key: -D defines}), in parallel on the shared pool; the test
    is skipped where there is no C++ compiler."""
    if compiler() is None:
        import pytest

        pytest.skip("no C++ compiler (g++ or clang++) to compile common.cuh on the CPU")
    source = root / f"{name}.cpp"
    source.write_text(prelude() + '#include "common.cuh"\n' + main)
    futures = {key: compile_async(source, root / f"{name}_{i}", defines)
               for i, (key, defines) in enumerate(variants.items())}
    return {key: f.result() for key, f in futures.items()}


def layout_defines(layout: str) -> dict:
    """TRANS_A / TRANS_B of a BLAS layout name ('nn', 'nt', 'tn', 'tt') as -D values."""
    return {"TRANS_A": int(layout[0] == "t"), "TRANS_B": int(layout[1] == "t")}


def program(main: str, *files: str) -> str:
    """A test's own emulated program: prelude(), an `#include` of each of `files` (macro names
    such as KERNEL_FILE, set by compile_async's defines, or quoted paths), OPERANDS, then `main`,
    which builds its operands as `LabOperands ops(M, N, K, lda, ldb)`."""
    return prelude() + "".join(f"#include {f}\n" for f in files) + OPERANDS + main


_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s*)?(\w+)\s+(\w+)\s*\[\s*\]\s*;")


def emulated_source(path: Path) -> str | None:
    """The kernel source with each `extern __shared__ T name[];` turned into a pointer to the
    block's dynamic shared memory (same line numbers), or None when it declares none."""
    text = path.read_text()
    if not _EXTERN_SHARED.search(text):
        return None
    body = _EXTERN_SHARED.sub(r"\1* \2 = reinterpret_cast<\1*>(lab_dynamic_smem);", text)
    return f'#line 1 "{path}"\n' + body


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
        source = KERNELS / build.source
        rewritten = emulated_source(source)
        if rewritten is not None:  # dynamic shared memory: compile a rewritten copy
            source = self.root / f"{exe.name}_{Path(build.source).name}"
            source.write_text(rewritten)
        defines = {"KERNEL_FILE": f'"{source}"', "KERNEL_NAME": build.kernel,
                   **defines_of(build)}
        self.exes[key] = compile_async(self.root / "emulator.cpp", exe, defines)
        return key

    def executable(self, build) -> Path:
        return self.exes[self.start(build)].result()

    def run(self, build, grid, block, M, N, K, lda, ldb, ldc,
            smem_dynamic: int | None = None) -> tuple[bool, str]:
        """Run the kernel on one problem. smem_dynamic: the launch's dynamic shared memory in
        bytes (None: the kernel's DYNAMIC_SMEM_BYTES, or 0)."""
        exe = self.executable(build)
        gx = int(grid[0])
        gy = int(grid[1]) * int(grid[2] if len(grid) > 2 else 1)
        bx, by = int(block[0]), int(block[1]) * int(block[2] if len(block) > 2 else 1)
        args = [M, N, K, lda, ldb, ldc, gx, gy, bx, by]
        if smem_dynamic is not None:
            args.append(int(smem_dynamic))
        out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                             timeout=300)
        return out.returncode == 0, (out.stdout + out.stderr)[-3000:]
