"""cuda_kernels/common.cuh: the pieces several stages share, each with one home.

(a) The defaults every register-tiling stage shares (MIN_BLOCKS, and the float4 stages'
    alignment switches VEC_A, VEC_B, VEC_C) are defined in common.cuh and in no file that
    includes it, and no such file defines its own copy of the layout arithmetic common.cuh holds (the tile
    coordinates A_TILE_AT / B_TILE_AT, the k-step advance a_step / b_step).
(b) The helpers themselves, compiled with g++ on tests/cuda_emulator.py's prelude, in all four
    layouts: ScalarWalk visits every element of a tile once, consecutive threads on consecutive
    addresses; load_scalars copies a tile with zero fill past the operand's edge (and with no
    test where none is asked for); A_TILE_AT / B_TILE_AT place the tiles of A and B along the
    operands' lines; copy_ktile picks the FULL copy exactly where the block is inside C and the
    k-tile inside K (or where the caller knows it), hands the B tile AElems elements after the A
    tile, and advances both loaders by a_step / b_step.
The stages' own tests (test_regtile, test_bank_conflicts, test_warptiling, test_double_buffered,
test_mma) run the kernels built on these helpers against a float64 reference.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import ROOT

KERNELS = ROOT / "cuda_kernels"
# the kernel files built on common.cuh (all but wgmma.cu, which has its own wgmma_ops.cuh)
STAGE_FILES = sorted(p for p in KERNELS.glob("*.cu") if '#include "common.cuh"' in p.read_text())


# ------------------------------------------------------------------------ (a) one home each

SHARED_DEFAULTS = ("MIN_BLOCKS", "VEC_A", "VEC_B", "VEC_C")


def test_the_stage_files_exist():
    names = {p.name for p in STAGE_FILES}
    assert {"blocktile_1d.cu", "vectorized.cu", "double_buffered.cu", "mma.cu"} <= names


@pytest.mark.parametrize("name", SHARED_DEFAULTS)
def test_shared_defaults_are_defined_in_common_cuh_only(name):
    define = re.compile(rf"^\s*#\s*define\s+{name}\b", re.M)
    assert len(define.findall((KERNELS / "common.cuh").read_text())) == 1
    for path in STAGE_FILES:
        assert not define.search(path.read_text()), f"{path.name} defines {name} again"


@pytest.mark.parametrize("pattern", [
    r"TRANS_A \? \(?k0\)? : m0, TRANS_A \? K : M",        # A's tile coordinates (A_TILE_AT)
    r"A_KMAJOR \? m0 : \(?k0\)?, A_KMAJOR \? M : K",       # the same, spelled by A_KMAJOR
    r"TRANS_B \? n0 : \(?k0\)?, TRANS_B \? N : K",         # B's (B_TILE_AT)
    r"\+= TRANS_A \? BK \* lda : BK",                      # the k-step advance (a_step)
    r"\+= TRANS_B \? BK : BK \* ldb",                      # (b_step)
])
def test_layout_arithmetic_is_not_written_again_in_a_stage(pattern):
    for path in STAGE_FILES:
        assert not re.search(pattern, path.read_text()), f"{path.name} repeats {pattern!r}"


# ------------------------------------------------------------------------ (b) the helpers

MAIN = r"""
#include <cstdio>
#include <vector>
static long failures = 0;
#define EXPECT(cond) do { if (!(cond)) { ++failures; \
    std::printf("FAILED line %d: %s\n", __LINE__, #cond); } } while (0)

// ScalarWalk of a Rows x Cols tile by Threads threads, Loads elements each
template <int Rows, int Cols, bool Trans, int Threads>
void check_walk() {
    using W = ScalarWalk<Rows, Cols, Trans>;
    std::vector<int> seen(Rows * Cols, 0);
    for (int e = 0; e < Rows * Cols; ++e) {
        const int r = W::row(e), c = W::col(e);
        EXPECT(r >= 0 && r < Rows && c >= 0 && c < Cols);
        if (r >= 0 && r < Rows && c >= 0 && c < Cols) ++seen[r * Cols + c];
        // element p of a thread is the thread's element plus the walk of p * Threads
        const int tid = e % Threads, p = e / Threads;
        EXPECT(r == W::row(tid) + W::row(p * Threads));
        EXPECT(c == W::col(tid) + W::col(p * Threads));
        // consecutive elements lie next to each other in memory (coalesced), within a line
        if ((e + 1) % (Trans ? Rows : Cols) != 0) {
            const int r1 = W::row(e + 1), c1 = W::col(e + 1);
            EXPECT(Trans ? (c1 == c && r1 == r + 1) : (r1 == r && c1 == c + 1));
        }
    }
    for (int i = 0; i < Rows * Cols; ++i) EXPECT(seen[i] == 1);
}

// load_scalars: a Rows x Cols tile at (r0, c0) of an R x C operand stored with leading
// dimension ld (row-major, or column-major where Trans), by Threads threads
template <int Rows, int Cols, bool Trans, int Threads, bool Test>
void check_load(int R, int C, int r0, int c0) {
    using W = ScalarWalk<Rows, Cols, Trans>;
    const int ld = (Trans ? R : C) + 3;  // a gap after each line
    std::vector<float> x((Trans ? C : R) * ld, -1.0f);
    auto at = [&](int r, int c) -> float& { return Trans ? x[c * ld + r] : x[r * ld + c]; };
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) at(r, c) = 1000.0f * r + c;
    float tile[Rows][Cols];
    for (int i = 0; i < Rows; ++i)
        for (int j = 0; j < Cols; ++j) tile[i][j] = -7.0f;
    for (int tid = 0; tid < Threads; ++tid) {
        const int r = W::row(tid), c = W::col(tid);
        const float* ptr = &at(r0 + r, c0 + c);
        load_scalars<Rows * Cols / Threads, Threads, W, Trans, Test, Test>(tile, ptr, ld, r, c,
                                                                           r0, R, c0, C);
    }
    for (int i = 0; i < Rows; ++i)
        for (int j = 0; j < Cols; ++j) {
            const bool in = r0 + i < R && c0 + j < C;
            EXPECT(tile[i][j] == (in ? 1000.0f * (r0 + i) + (c0 + j) : 0.0f));
        }
}

// a tile loader that records what copy_ktile asks of it
struct Recorder {
    int calls = 0, full = -1, x0 = -1, xlim = -1, y0 = -1, ylim = -1, ld = -1, moved = 0;
    const float* dst = nullptr;
    template <bool FULL>
    void copy(const float* d, int l, int a, int b, int c, int e) {
        ++calls, full = FULL, dst = d, ld = l, x0 = a, xlim = b, y0 = c, ylim = e;
    }
    void advance(int step) { moved += step; }
};

int main() {
    check_walk<64, 8, TRANS_A, 512>();   // blocktile_1d's B tile shape, A's layout
    check_walk<8, 64, TRANS_B, 256>();
    check_walk<128, 8, TRANS_A, 256>();  // blocktile_2d's A tile
    check_walk<8, 128, TRANS_B, 256>();
    check_load<16, 8, TRANS_A, 32, true>(37, 21, 32, 16);   // across both edges
    check_load<16, 8, TRANS_A, 32, true>(37, 21, 0, 0);     // inside
    check_load<16, 8, TRANS_A, 32, false>(37, 21, 16, 8);   // inside, no test compiled in
    check_load<8, 16, TRANS_B, 64, true>(13, 40, 8, 32);

    // A_TILE_AT / B_TILE_AT: (first line, lines, first element along a line, line length)
    {
        const int m0 = 64, n0 = 128, M = 100, N = 200, K = 300, k0 = 32;
        const int a[4] = {A_TILE_AT(k0)}, b[4] = {B_TILE_AT(k0)};
        const int a_rows[4] = {m0, M, k0, K}, a_cols[4] = {k0, K, m0, M};
        const int b_rows[4] = {k0, K, n0, N}, b_cols[4] = {n0, N, k0, K};
        for (int i = 0; i < 4; ++i) {
            EXPECT(a[i] == (TRANS_A ? a_cols[i] : a_rows[i]));
            EXPECT(b[i] == (TRANS_B ? b_cols[i] : b_rows[i]));
        }
    }

    // copy_ktile: FULL where inside && k0 + 16 <= K (or Known); B tile 100 elements on
    {
        float ring[400];
        const int m0 = 0, n0 = 0, M = 64, N = 64, lda = 48, ldb = 80;
        struct Case { bool known, inside; int k0, K; bool full; };
        const Case cases[] = {{false, true, 0, 40, true}, {false, true, 32, 40, false},
                              {false, true, 16, 32, true}, {false, false, 0, 40, false},
                              {true, false, 32, 40, true}};
        for (const Case& t : cases) {
            Recorder la, lb;
            if (t.known)
                copy_ktile<16, 100, true>(la, lb, ring, t.inside, m0, n0, t.k0, M, N, t.K, lda, ldb);
            else
                copy_ktile<16, 100>(la, lb, ring, t.inside, m0, n0, t.k0, M, N, t.K, lda, ldb);
            EXPECT(la.calls == 1 && lb.calls == 1);
            EXPECT(la.full == int(t.full) && lb.full == int(t.full));
            EXPECT(la.dst == ring && lb.dst == ring + 100);
            EXPECT(la.ld == lda && lb.ld == ldb);
            EXPECT(la.x0 == (TRANS_A ? t.k0 : m0) && la.ylim == (TRANS_A ? M : t.K));
            EXPECT(lb.x0 == (TRANS_B ? n0 : t.k0) && lb.ylim == (TRANS_B ? t.K : N));
            EXPECT(la.moved == a_step<16>(lda) && lb.moved == b_step<16>(ldb));
            EXPECT(la.moved == (TRANS_A ? 16 * lda : 16) && lb.moved == (TRANS_B ? 16 : 16 * ldb));
        }
    }
    std::printf("failures %ld\n", failures);
    return failures != 0;
}
"""


@pytest.fixture(scope="module")
def helper_programs(tmp_path_factory):
    """{layout: executable}: MAIN compiled against common.cuh in each layout."""
    import cuda_emulator as ce

    return ce.common_cuh_programs(tmp_path_factory.mktemp("common_cuh"), "helpers", MAIN,
                                  {layout: ce.layout_defines(layout)
                                   for layout in ("nn", "nt", "tn", "tt")})


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_the_shared_helpers_do_what_they_say(helper_programs, layout):
    out = subprocess.run([str(helper_programs[layout])], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "failures 0" in out.stdout, out.stdout + out.stderr
