"""Tests of stage bank_conflicts (cuda_kernels/bank_conflicts.cu, its launcher and Triton twin).

(a) The bank model, the CPU evidence for the stage. The kernel's index formulas are mirrored in
    Python (which word of shared memory each lane of each warp touches, for every shared store and
    load of one k-step), and a warp-wide access is scored as the hardware serves it: 32 banks of
    4 bytes, word w in bank w % 32; lanes that touch the same word share it (broadcast); the
    access takes as many wavefronts as the busiest bank has distinct words, and at least
    ceil(distinct words / 32) (a 128-bit access of 32 distinct float4 needs 4). Conflicts =
    wavefronts - that minimum. For every valid parameter set and layout: pad and swizzle are
    conflict-free everywhere; none (vectorized's layout) only at BK = 8 (2-way at 16, 4-way at
    32, on the scattering store); raw is AW-way there (AW = BK/4). Every 128-bit access is
    16-byte aligned. The totals per k-step and at 2048^3 are the page's predictions.
(b) The mirror is the kernel: a g++ build of bank_conflicts.cu (the emulator's CUDA keywords, the
    build's own -D defines) prints as_off / bs_off for every element and checks the split form
    ATile::off(k, x0, x1) == off(k, x0 + x1) that the kernel's accesses use; they must equal the
    Python formulas, be one-to-one and fit the static arrays (smem_bytes == ptxas's figure).
(c) Every fix, run by the CPU emulator (tests/cuda_emulator.py, ASan + UBSan) on odd shapes in
    all four layouts, plus BK = 16 / 32 and scalar-load variants.
(d) Builds: each fix's default build is spill-free with 2 blocks of 256 threads per SM; the
    k-loop is vectorized's (512 FFMA, 32 LDS.128, no local memory); validate() refuses in one
    sentence.
(e) The Triton twin: correct under the interpreter; its shared layouts, as its header describes
    them, read off Triton's compiled TTGIR for sm_90 (a subprocess without TRITON_INTERPRET).
(f) On a GPU (`pytest -m gpu`): every fix at BK = 8 and 32 in every layout matches torch.matmul.
(a) runs anywhere, (b)-(e) in CPU mode only (as the other stage test files), (f) on a GPU only.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from helpers import (LAYOUTS, cpu_only, fresh_build, line_widths, new_emulator, padded_ld,
                     run_python, stage_params)
from lab import check as chk
from lab.base.errors import LabError
from lab.stages import get_stage, parse_variants

# The bank model (a) runs anywhere; (b)-(e) are CPU-mode tests (sm_90 builds without a GPU, the
# g++ emulator, the Triton interpreter), as in the other stage test files; (f) needs a GPU.

FIXES = ("none", "pad", "swizzle", "raw")


def _params(backend: str = "cuda", **changes):
    return stage_params("bank_conflicts", backend, **changes)


# ------------------------------------------------------------------ (a) the bank model


@dataclass(frozen=True)
class Tile:
    """bank_conflicts.cu's Tile<W, SCATTER, NONE_PAD>: a BK-row tile of W-float rows."""

    W: int
    BK: int
    fix: str
    scatter: bool
    none_pad: int

    @property
    def LD(self) -> int:
        return self.W + (self.none_pad if self.fix == "none" else 0)

    @property
    def GPAD(self) -> int:
        return 128 // self.BK if self.fix == "pad" and self.scatter else 0

    @property
    def SWZ(self) -> int:
        return 128 // self.BK if self.fix == "swizzle" and self.scatter else 0

    @property
    def size(self) -> int:
        return self.BK * self.LD + (self.BK // 4) * self.GPAD

    def off(self, k, x):
        """Word offset of element (k, x); k and x may be numpy arrays."""
        return k * self.LD + (k >> 2) * self.GPAD + (x ^ ((k >> 2) * self.SWZ))


@dataclass(frozen=True)
class Config:
    BM: int = 128
    BN: int = 128
    BK: int = 8
    TM: int = 8
    TN: int = 8

    @property
    def threads(self) -> int:
        return (self.BM // self.TM) * (self.BN // self.TN)

    def tiles(self, fix: str, layout: str) -> tuple[Tile, Tile]:
        trans_b = layout[1] == "t"
        return (Tile(self.BM, self.BK, fix, layout[0] == "n", 4),
                Tile(self.BN, self.BK, fix, trans_b, 4 if trans_b else 0))


def accesses(cfg: Config, fix: str, layout: str):
    """Every shared instruction of one k-step: (kind, tile, words) with words an int array
    [threads, n] (n = 1 for STS, 4 for STS.128 / LDS.128: the float4's 4 words), thread tid in
    row tid. The loader and fragment index math is bank_conflicts.cu's, line for line."""
    a_tile, b_tile = cfg.tiles(fix, layout)
    T = cfg.threads
    tid = np.arange(T)
    vec = np.arange(4)
    out = []
    a_chunks = cfg.BM * cfg.BK // 4 // T
    b_chunks = cfg.BK * cfg.BN // 4 // T
    for p in range(a_chunks):
        if layout[0] == "t":  # STS.128 along m into row c of As
            AW = cfg.BM // 4
            r = 4 * (tid % AW) + 4 * (p * T % AW)
            c = tid // AW + p * T // AW
            out.append(("st", "A", a_tile.off(c, r)[:, None] + vec))
        else:  # the scatter: 4 STS, As(c + j, r)
            AW = cfg.BK // 4
            r = tid // AW + p * T // AW
            c = 4 * (tid % AW) + 4 * (p * T % AW)
            out += [("st", "A", a_tile.off(c + j, r)[:, None]) for j in range(4)]
    for p in range(b_chunks):
        if layout[1] == "t":  # the scatter: 4 STS, Bs(r + j, c)
            BW = cfg.BK // 4
            r = 4 * (tid % BW) + 4 * (p * T % BW)
            c = tid // BW + p * T // BW
            out += [("st", "B", b_tile.off(r + j, c)[:, None]) for j in range(4)]
        else:  # STS.128 along n into row r of Bs
            BW = cfg.BN // 4
            r = tid // BW + p * T // BW
            c = 4 * (tid % BW) + 4 * (p * T % BW)
            out.append(("st", "B", b_tile.off(r, c)[:, None] + vec))
    TROWS, TCOLS = cfg.BM // cfg.TM, cfg.BN // cfg.TN
    tr, tc = tid // TCOLS, tid % TCOLS
    for k in range(cfg.BK):
        out += [("ld", "A", a_tile.off(np.full(T, k), g * 4 * TROWS + 4 * tr)[:, None] + vec)
                for g in range(cfg.TM // 4)]
        out += [("ld", "B", b_tile.off(np.full(T, k), g * 4 * TCOLS + 4 * tc)[:, None] + vec)
                for g in range(cfg.TN // 4)]
    return out


def score(words: np.ndarray, group: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(wavefronts, minimum wavefronts) of one instruction, per warp; words [threads, n].

    group = 32: the whole warp is served together (lanes that share a word share it). group = 8:
    the stricter reading for 128-bit accesses, 4 quarter-warps served one after another, sharing
    only within a quarter; the two agree on every 32-bit access and on every access whose quarters
    touch disjoint words, and the fixes must be conflict-free under both."""
    parts = words.shape[0] // group
    w = np.sort(words.reshape(parts, -1), axis=1)
    new = np.ones_like(w, dtype=bool)
    new[:, 1:] = w[:, 1:] != w[:, :-1]  # distinct words only (a shared word is a broadcast)
    cell = (np.arange(parts)[:, None] * 32 + w % 32)[new]
    per_bank = np.bincount(cell, minlength=parts * 32).reshape(parts, 32)
    wf, least = per_bank.max(axis=1), -(-new.sum(axis=1) // 32)
    per_warp = 32 // group
    return wf.reshape(-1, per_warp).sum(axis=1), least.reshape(-1, per_warp).sum(axis=1)


def summary(cfg: Config, fix: str, layout: str) -> dict:
    """Per k-step of one block: wavefronts and conflicts of stores and loads (whole-warp model;
    "_q": 128-bit accesses per quarter warp), the worst conflict degree of the scattering stores
    and of everything else, and misaligned float4s."""
    tot = {"st_wf": 0, "st_conf": 0, "ld_wf": 0, "ld_conf": 0, "st_wf_q": 0, "st_conf_q": 0,
           "ld_wf_q": 0, "ld_conf_q": 0, "scatter_way": 1, "other_way": 1, "misaligned": 0}
    for kind, _tile, words in accesses(cfg, fix, layout):
        wf, ideal = score(words)
        tot[f"{kind}_wf"] += int(wf.sum())
        tot[f"{kind}_conf"] += int((wf - ideal).sum())
        way = int((wf // ideal).max())
        key = "scatter_way" if words.shape[1] == 1 else "other_way"
        tot[key] = max(tot[key], way)
        wf_q, ideal_q = score(words, 8 if words.shape[1] == 4 else 32)
        tot[f"{kind}_wf_q"] += int(wf_q.sum())
        tot[f"{kind}_conf_q"] += int((wf_q - ideal_q).sum())
        if words.shape[1] == 4:
            tot["misaligned"] += int((words[:, 0] % 4 != 0).sum())
    return tot


def valid_configs() -> list[Config]:
    from cuda_kernels.bank_conflicts import validate

    found = []
    for BM, BN, BK, TM, TN in itertools.product((32, 64, 128), (32, 64, 128), (8, 16, 32),
                                                (4, 8), (4, 8)):
        try:
            validate(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN)
        except LabError:
            continue
        found.append(Config(BM, BN, BK, TM, TN))
    return found


@pytest.fixture(scope="module")
def model():
    """summary() of every valid parameter set x fix x layout (about 10 s)."""
    return {(cfg, fix, layout): summary(cfg, fix, layout)
            for cfg in valid_configs() for fix in FIXES for layout in LAYOUTS}


def test_the_model_scores_textbook_patterns():
    lanes = np.arange(32)
    assert score(lanes[:, None])[0][0] == 1                  # 32 consecutive words
    assert score((lanes * 32)[:, None])[0][0] == 32          # one column of a 32-wide tile
    assert score((lanes * 33)[:, None])[0][0] == 1           # ... padded by one
    assert score(np.zeros((32, 1), int))[0][0] == 1          # broadcast
    f4 = (4 * lanes)[:, None] + np.arange(4)
    assert tuple(x[0] for x in score(f4)) == (4, 4)          # LDS.128 of 512 contiguous bytes
    column = (32 * lanes)[:, None] + np.arange(4)            # float4s 128 bytes apart: 8-way
    assert tuple(x[0] for x in score(column)) == (32, 4)
    halves = (4 * (lanes // 16))[:, None] + np.arange(4)     # the default A fragment read
    assert tuple(x[0] for x in score(halves)) == (1, 1)
    # per quarter warp: the same verdicts (no conflict / 8-way), at 4 passes per 128-bit access
    assert tuple(x[0] for x in score(f4, 8)) == (4, 4)
    assert tuple(x[0] for x in score(halves, 8)) == (4, 4)
    assert tuple(x[0] for x in score(column, 8)) == (32, 4)


def test_there_are_many_valid_configurations():
    assert len(valid_configs()) >= 40


@pytest.mark.parametrize("fix", ("pad", "swizzle"))
def test_pad_and_swizzle_are_conflict_free_everywhere(model, fix):
    bad = [(cfg, layout, s) for (cfg, f, layout), s in model.items() if f == fix
           and (s["st_conf"] or s["ld_conf"] or s["st_conf_q"] or s["ld_conf_q"]
                or s["misaligned"])]
    assert not bad, f"{fix}: {len(bad)} conflicted or misaligned cases, e.g. {bad[:3]}"


def _unfixed(model, fix: str) -> list:
    """The cases of `fix` ("none": vectorized's padding, or "raw": no padding at all) as
    (cfg, layout, summary), each checked for what no fix changes: the fragment loads are
    conflict-free, the operand that is not scattered stores one way, nothing is misaligned."""
    cases = [(cfg, layout, s) for (cfg, f, layout), s in model.items() if f == fix]
    assert cases, fix
    for cfg, layout, s in cases:
        assert s["ld_conf"] == s["ld_conf_q"] == 0 and s["other_way"] == 1, (cfg, layout, s)
        assert s["misaligned"] == 0, (cfg, layout, s)
    return cases


def test_none_is_vectorized_padding_conflict_free_only_at_bk8(model):
    for cfg, layout, s in _unfixed(model, "none"):
        scatters = layout != "tn"  # tn: A along m, B along n, both STS.128: nothing to fix
        expected = max(1, cfg.BK // 8) if scatters else 1   # 16*i mod 32: AW/2 groups collide
        assert s["scatter_way"] == expected, (cfg, layout, s)
        assert (s["st_conf"] > 0) == (expected > 1)


def test_raw_conflicts_aw_ways_on_the_scatter_only(model):
    for cfg, layout, s in _unfixed(model, "raw"):
        assert s["scatter_way"] == (cfg.BK // 4 if layout != "tn" else 1), (cfg, layout, s)


def test_layouts_without_a_scatter_need_no_fix(model):
    for (cfg, fix, layout), s in model.items():
        if layout == "tn":
            assert s["st_conf"] == s["ld_conf"] == s["st_conf_q"] == s["ld_conf_q"] == 0, s


# The page's prediction (docs/stages/bank_conflicts.md): per warp per k-step at the default tile
# (128 x 128, 8 x 8 per thread, 8 warps), layout nn, and the totals at 2048^3 (256 blocks of 8
# warps; 2048/BK k-steps): (store wavefronts, store conflicts, load wavefronts, load conflicts).
PER_WARP_KSTEP = {
    (8, "none"): (8, 0, 48, 0), (8, "pad"): (8, 0, 48, 0), (8, "swizzle"): (8, 0, 48, 0),
    (8, "raw"): (12, 4, 48, 0),
    (16, "none"): (24, 8, 96, 0), (16, "pad"): (16, 0, 96, 0), (16, "swizzle"): (16, 0, 96, 0),
    (16, "raw"): (40, 24, 96, 0),
    (32, "none"): (80, 48, 192, 0), (32, "pad"): (32, 0, 192, 0),
    (32, "swizzle"): (32, 0, 192, 0), (32, "raw"): (144, 112, 192, 0),
}
AT_2048_STORE_CONFLICTS = {
    (8, "none"): 0, (8, "pad"): 0, (8, "swizzle"): 0, (8, "raw"): 2_097_152,
    (16, "none"): 2_097_152, (16, "pad"): 0, (16, "swizzle"): 0, (16, "raw"): 6_291_456,
    (32, "none"): 6_291_456, (32, "pad"): 0, (32, "swizzle"): 0, (32, "raw"): 14_680_064,
}


@pytest.mark.parametrize("BK,fix", sorted(PER_WARP_KSTEP))
def test_the_pages_counts_per_warp_and_at_2048(BK, fix):
    s = summary(Config(BK=BK), fix, "nn")
    warps = Config().threads // 32
    got = tuple(s[key] // warps for key in ("st_wf", "st_conf", "ld_wf", "ld_conf"))
    assert got == PER_WARP_KSTEP[BK, fix]
    warp_ksteps = (2048 // 128) ** 2 * warps * (2048 // BK)
    assert s["st_conf"] // warps * warp_ksteps == AT_2048_STORE_CONFLICTS[BK, fix]


# ------------------------------------------------- (b) the Python formulas are the kernel's

OFFSETS_MAIN = r"""
#include <cstdio>
int main() {
    long bad_split = 0;
    for (int k = 0; k < BK; ++k)
        for (int m = 0; m < BM; ++m) std::printf("%d\n", as_off(k, m));
    for (int k = 0; k < BK; ++k)
        for (int n = 0; n < BN; ++n) std::printf("%d\n", bs_off(k, n));
    // the split form the kernel's accesses use: off(k, x0, x1) == off(k, x0 + x1)
    const int x1s[] = {0, 4, 16, 32, 64, 96};
    for (int k = 0; k < BK; ++k)
        for (int x1 : x1s)
            for (int x0 = 0; x0 + x1 < BM || x0 + x1 < BN; ++x0) {
                if (x0 + x1 < BM) bad_split += ATile::off(k, x0, x1) != ATile::off(k, x0 + x1);
                if (x0 + x1 < BN) bad_split += BTile::off(k, x0, x1) != BTile::off(k, x0 + x1);
            }
    std::printf("split %ld sizes %d %d\n", bad_split, ATile::SIZE, BTile::SIZE);
    return 0;
}
"""
OFFSET_CASES = [(Config(BK=bk), fix, layout) for fix in FIXES for bk in (8, 16, 32)
                for layout in ("nt", "tn")] + [
    (Config(BM=64, BN=32, BK=16, TM=4, TN=4), fix, "nt") for fix in FIXES]


@pytest.fixture(scope="module")
def offsets_of(tmp_path_factory):
    """{case: (as_off, bs_off, split mismatches, array sizes, build)}: g++ builds of the .cu."""
    import concurrent.futures

    from cuda_emulator import compile_async, compiler, defines_of, prelude

    from cuda_kernels import bank_conflicts

    cxx = compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or clang++)")
    root = tmp_path_factory.mktemp("bank_offsets")
    main = root / "offsets.cpp"
    main.write_text(prelude() + '#include "variants/bank_conflicts.cu"\n' + OFFSETS_MAIN)

    def one(i, case):
        cfg, fix, layout = case
        build = bank_conflicts.build(BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, TM=cfg.TM, TN=cfg.TN,
                                     fix=fix, layout=layout)
        exe = compile_async(main, root / f"offsets_{i}", defines_of(build), flags=("-O0",))
        lines = subprocess.run([str(exe.result())], check=True, capture_output=True,
                               text=True).stdout.split("\n")
        na, nb = cfg.BK * cfg.BM, cfg.BK * cfg.BN
        tail = lines[na + nb].split()
        return (np.array(lines[:na], int).reshape(cfg.BK, cfg.BM),
                np.array(lines[na:na + nb], int).reshape(cfg.BK, cfg.BN), int(tail[1]),
                (int(tail[3]), int(tail[4])), build)

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda ic: one(*ic), enumerate(OFFSET_CASES)))
    return dict(zip(OFFSET_CASES, results))


@cpu_only
@pytest.mark.parametrize("case", OFFSET_CASES, ids=lambda c: f"{c[1]}-{c[2]}-{c[0]}")
def test_the_kernels_offsets_are_the_models(offsets_of, case):
    from cuda_kernels.bank_conflicts import smem_bytes

    cfg, fix, layout = case
    a_off, b_off, bad_split, sizes, build = offsets_of[case]
    a_tile, b_tile = cfg.tiles(fix, layout)
    k = np.arange(cfg.BK)[:, None]
    assert (a_off == a_tile.off(k, np.arange(cfg.BM)[None, :])).all()
    assert (b_off == b_tile.off(k, np.arange(cfg.BN)[None, :])).all()
    assert bad_split == 0
    assert sizes == (a_tile.size, b_tile.size)
    for off, size in ((a_off, a_tile.size), (b_off, b_tile.size)):  # one-to-one, in the array
        assert len(np.unique(off)) == off.size and off.min() >= 0 and off.max() < size
    smem = smem_bytes(BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, fix=fix, layout=layout)
    assert smem == 4 * (a_tile.size + b_tile.size) == build.smem_static


# ------------------------------------------------------ (c) every fix, emulated on the CPU

EMU_SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2), (130, 67, 33), (129, 257, 17)]
EMU_KERNELS = [dict(fix=fix) for fix in FIXES] + [
    dict(fix=fix, BK=bk, **tile) for fix in ("pad", "swizzle")
    for bk, tile in ((16, dict(BM=64, TN=4)), (32, dict(BN=64, TM=4)))]
EMU_CASES = [(params, layout) for params in EMU_KERNELS for layout in LAYOUTS
             if "BK" not in params or layout in ("nn", "nt")]
SCALAR_CASES = [(dict(fix=fix, BK=16), layout) for fix in ("pad", "swizzle")
                for layout in ("nt", "tt")]  # VEC_A = VEC_B = VEC_C = 0: leading dims odd


_ld = padded_ld


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    import concurrent.futures

    from cuda_kernels import bank_conflicts

    emulator = new_emulator(tmp_path_factory, "bank_emulator")

    def build(case, vec):
        params, layout = case
        return bank_conflicts.build(**{**_params(), **params}, layout=layout, vec_a=vec,
                                    vec_b=vec, vec_c=vec)

    cases = [(c, True) for c in EMU_CASES] + [(c, False) for c in SCALAR_CASES]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        builds = list(pool.map(lambda cv: build(*cv), cases))
    for b in builds:  # g++ in the background, all at once (they queue on the cores)
        emulator.start(b)
    return emulator, {(str(c[0]), c[1], vec): b for (c, vec), b in zip(cases, builds)}


def _emulate(emulated, params, layout, vec: bool):
    from cuda_kernels import bank_conflicts

    emulator, builds = emulated
    build = builds[str(params), layout, vec]
    assert build.spill_bytes == 0
    full = {**_params(), **params}
    for M, N, K in EMU_SHAPES:
        widths = line_widths(M, N, K, layout)
        lda, ldb, ldc = (_ld(w, vec) for w in widths)
        grid, block, _ = bank_conflicts.geometry(M, N, K, **full)
        ok, out = emulator.run(build, grid, block, M, N, K, lda, ldb, ldc)
        assert ok, f"{params} {layout} {M}x{N}x{K} lda={lda} ldb={ldb} ldc={ldc}:\n{out}"


@cpu_only
@pytest.mark.parametrize("params,layout", EMU_CASES, ids=str)
def test_each_fix_emulated_on_odd_shapes(emulated, params, layout):
    _emulate(emulated, params, layout, vec=True)


@cpu_only
@pytest.mark.parametrize("params,layout", SCALAR_CASES, ids=str)
def test_scalar_variants_emulated(emulated, params, layout):
    _emulate(emulated, params, layout, vec=False)


# ------------------------------------------------------------------------- (d) builds


@pytest.fixture(scope="module")
def default_builds():
    from cuda_kernels import bank_conflicts

    return {fix: bank_conflicts.build(**_params(fix=fix)) for fix in FIXES}


@cpu_only
@pytest.mark.parametrize("fix", FIXES)
def test_each_fix_default_build_is_spill_free_at_two_blocks_per_sm(default_builds, fix):
    build = default_builds[fix]
    assert build.arch == "sm_90"
    assert build.spill_bytes == 0 and build.stack_frame == 0
    assert 0 < build.registers <= 128                     # 2 blocks of 256 threads per SM
    assert "-DMIN_BLOCKS=2" in build.options
    assert f"-DFIX={('none', 'pad', 'swizzle', 'raw').index(fix)}" in build.options


@cpu_only
@pytest.mark.parametrize("changes", [dict(BK=16), dict(BK=32), dict(BK=16, layout="nt"),
                                     dict(BK=32, layout="tt"),
                                     dict(BM=64, BN=64, BK=16, TM=4, TN=4)], ids=str)
@pytest.mark.parametrize("fix", ("pad", "swizzle"))
def test_the_fixes_keep_two_blocks_per_sm_at_larger_bk(fix, changes):
    from cuda_kernels import bank_conflicts

    changes = dict(changes)
    layout = changes.pop("layout", "nn")
    build = bank_conflicts.build(**_params(fix=fix, **changes), layout=layout)
    assert build.spill_bytes == 0
    threads = bank_conflicts.threads(**_params(**changes))
    assert build.registers * threads * 2 <= 65536, f"{build.registers} registers"


@cpu_only
def test_the_k_loop_is_vectorized_s_in_every_fix(default_builds):
    from lab.toolchain import sass as _sass

    if _sass.find_tool("cuobjdump") is None and _sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")
    from cuda_kernels import vectorized

    def mix_of(build):
        text = _sass.sass(build)
        return _sass.instruction_mix(text), text

    def differs(mix, base):
        return any(mix.get(op, 0) != base.get(op, 0) for op in ("FFMA", "LDS.128", "LDS", "STS"))

    base_build = vectorized.build()
    base, _ = mix_of(base_build)
    if base.get("LDS", 0) or base.get("LDS.128") != 32:  # ptxas on a busy machine: once more
        base, _ = mix_of(fresh_build(base_build))
    for fix, build in default_builds.items():
        mix, text = mix_of(build)
        if differs(mix, base):  # the same: a fresh compile before the verdict
            mix, text = mix_of(fresh_build(build))
        for op in ("FFMA", "LDS.128", "LDS", "STS"):
            assert mix.get(op, 0) == base.get(op, 0), f"{fix}: {op} {mix.get(op)} vs {base.get(op)}"
        assert mix["FFMA"] == 512 and mix["LDS.128"] == 32 and mix.get("LDS", 0) == 0
        assert "LDL" not in text and "STL" not in text


@pytest.mark.parametrize("changes,words", [
    (dict(fix="tiled"), "fix must be one of"),
    (dict(BM=32, BN=32, TM=8, TN=8), "threads"),
    (dict(BM=64, BN=32, TM=4, TN=4), "B tile"),
], ids=str)
@cpu_only
def test_validate_refuses_in_one_sentence(changes, words):
    from cuda_kernels import bank_conflicts

    with pytest.raises(LabError) as err:
        bank_conflicts.validate(**{**_params(), **changes})
    assert words in str(err.value) and "\n" not in str(err.value)


@cpu_only
def test_an_unknown_fix_is_a_usage_error_on_the_command_line():
    with pytest.raises(LabError, match="fix of stage bank_conflicts takes one of"):
        parse_variants(["bank_conflicts:fix=xor"])


@cpu_only
def test_smem_bytes_per_fix_and_layout():
    from cuda_kernels.bank_conflicts import smem_bytes

    assert smem_bytes(fix="none") == 8320                 # vectorized's 8.1 KiB
    assert smem_bytes(fix="none", layout="nt") == 8448    # + Bs rows padded, as vectorized
    assert smem_bytes(fix="pad") == 8320 and smem_bytes(fix="pad", layout="nt") == 8448
    assert smem_bytes(fix="swizzle") == smem_bytes(fix="raw") == 8192
    assert smem_bytes(fix="pad", BK=32) == 4 * (32 * 256 + 32)


# -------------------------------------------------------------------- (e) the Triton twin


@cpu_only
@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 129), (65, 64, 63), (130, 67, 33)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("changes", [{}, dict(BM=32, BN=32, BK=16, num_warps=4)], ids=str)
def test_triton_twin_is_correct_under_the_interpreter(shape, changes):
    M, N, K = shape
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 5 * K, device="cpu")
    c = torch.empty((M, N))
    launch = get_stage("bank_conflicts").module("triton").prepare(a, b, c,
                                                                 **_params("triton", **changes))
    result = chk.check(launch, c, chk.reference(a, b), K)
    assert result.passed, result.reason


@cpu_only
def test_encodings_parses_a_ttgir_listing():
    from triton_kernels.bank_conflicts import encodings

    ttgir = "\n".join([
        "#blocked2 = #ttg.blocked<{sizePerThread = [4, 4], threadsPerWarp = [1, 32], "
        "warpsPerCTA = [8, 1], order = [1, 0]}>",
        "#shared = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}>",
        "    %a = ttg.local_alloc %x : (tensor<128x16xf32, #blocked>) -> "
        "!ttg.memdesc<128x16xf32, #shared, #smem>",
        "    %b = ttg.local_load %a : !ttg.memdesc<128x16xf32, #shared, #smem> -> "
        "tensor<128x16xf32, #ttg.dot_op<{opIdx = 0, parent = #blocked2}>>",
    ])
    enc = encodings(ttgir)
    assert enc["shared"] == {"#shared": "#ttg.swizzled_shared<{vec = 1, perPhase = 1, "
                                        "maxPhase = 1, order = [1, 0]}>"}
    assert enc["tiles"] == [("128x16", enc["shared"]["#shared"])]
    assert enc["dot_parent"] == ["#ttg.blocked<{sizePerThread = [4, 4], threadsPerWarp = [1, "
                                 "32], warpsPerCTA = [8, 1], order = [1, 0]}>"]


TWIN_LAYOUTS = r"""
import json
from triton_kernels.bank_conflicts import shared_layouts
print(json.dumps({lay: shared_layouts(lay) for lay in ("nn", "nt")}))
"""


@cpu_only
def test_triton_twin_shared_layouts_are_what_its_header_says():
    """The header's account of what Triton does instead, checked on this Triton's compiler (for
    sm_90, never run): no swizzle (maxPhase = 1), tiles in their global order, and a dot layout
    with the 32 lanes of a warp along N. If a Triton release changes this, the header and
    docs/stages/bank_conflicts.md must say what it does now."""
    run = run_python(TWIN_LAYOUTS, timeout=600, drop=("TRITON_INTERPRET",))
    if run.returncode != 0:
        pytest.skip(f"Triton could not compile for sm_90 here: {run.stderr.strip()[-300:]}")
    import json

    found = json.loads(run.stdout.strip().splitlines()[-1])
    for layout, enc in found.items():
        assert enc["shared"], layout
        for e in enc["shared"].values():
            assert "maxPhase = 1" in e and "vec = 1" in e, (layout, e)   # not swizzled
        assert all("threadsPerWarp = [1, 32]" in p for p in enc["dot_parent"]), enc["dot_parent"]
        orders = {shape: e.split("order = ")[1] for shape, e in enc["tiles"]}
        assert orders["128x16"].startswith("[1, 0]")                  # A: k-contiguous (n)
        assert orders["16x128"].startswith("[1, 0]" if layout == "nn" else "[0, 1]")  # B


# ------------------------------------------------------------------- (f) on a GPU

GPU_SHAPES = [(1, 1, 1), (3, 130, 2), (65, 64, 63), (1000, 1500, 257), (256, 384, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fix", FIXES)
def test_each_fix_matches_torch_on_the_gpu(fix, layout):
    """Every fix, at BK = 8 and 32, in every layout (the registry's GPU tests run the default)."""
    module = get_stage("bank_conflicts").module("cuda")
    for BK in (8, 32):
        params = _params(fix=fix, BK=BK)
        for M, N, K in GPU_SHAPES:
            a, b = chk.make_inputs(M, N, K, seed=M + N + K, device="cuda", layout=layout)
            c = torch.empty((M, N), device="cuda")
            result = chk.check(module.prepare(a, b, c, **params), c, chk.reference(a, b), K)
            assert result.passed, f"fix={fix} BK={BK} {layout} {M}x{N}x{K}: {result.reason}"
