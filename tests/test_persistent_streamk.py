"""persistent's stream-K (the STREAMK knob: cuda_kernels/variants/persistent.cu's STREAMK build
and cuda_kernels/splitk_reduce.cu's STREAMK reduction), for layers whose tiles do not divide
evenly among the SMs.

CPU: the build compiles for sm_90a in bf16, fp16 and fp8 without spills, stores whole tiles
through TMA stores (from registers with STORE=2) and parts into the workspace; the grid is one
block per SM, never more than the k-iterations; the kernel's arithmetic, written out here in Python as the kernel and the reduction
do it, gives every k-tile of every tile to exactly one block, numbers each tile's parts 0, 1, ...
in the order the reduction adds them, agrees with the reduction on which tiles have one part, and
streamk_parts() is the most parts a tile has; STREAMK is refused in one sentence beside a
precision whose sum is not the plain accumulators, SPLITK or CLUSTER=2; it is never the lesson;
the launch (kernels mocked) passes the workspace and the reduction its grid, k-tiles and blocks,
and leaves the reduction out where every tile is whole.

GPU (marked `gpu`; sm_90 only): every layout at edge sizes and at model shapes whose tiles do
not divide evenly among the SMs, against the float64 reference; a column-major C and a C with an
odd leading dimension; two calls give the same bits.
"""

from __future__ import annotations

import re

import pytest
import torch

from helpers import (C_DTYPE as OUT, LAYOUTS, check_scaled, check_sliced_operands,
                     gpu_operands, mock_tma_launches, needs_hopper,
                     one_sentence as _one_sentence, zero_problem as _problem)
from lab.base.errors import LabError
from lab.toolchain.sass import sass

import cuda_kernels._tma as tma
from cuda_kernels import persistent, warptiling
from cuda_kernels.persistent import STAGE

PRECISIONS = ("bf16", "fp16", "fp8")


# ------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("precision", PRECISIONS)
def test_streamk_build_stores_whole_tiles_by_tma_and_parts_into_the_workspace(precision):
    layout = "nt" if precision == "fp8" else "tn"
    build, (grid, block, smem) = persistent.OFFER.compile({"STREAMK": 1}, 256, 22016, 4096,
                                                          layout, precision)
    opts = " ".join(build.options)
    assert "-DSTREAMK=1" in opts and "-DTMA_STORE=1" in opts and "-DCLUSTER=1" in opts
    assert "variants" in build.source and build.spill_bytes == 0
    text = sass(build)
    assert re.search(r"[HQ]GMMA\.64x256", text) and "UTMALDG" in text
    assert "UTMASTG" in text, "whole tiles through TMA stores"
    assert re.search(r"STG\.E\.64", text), "the workspace: 8-byte stores of accumulator pairs"
    assert grid[0] == 132 and block[0] == 384  # one block per SM
    assert smem == 4 * (128 + 256) * 128 + 1024 + 2 * 16384  # C's staging for the TMA stores
    # STORE=2: whole tiles from registers
    build, _ = persistent.OFFER.compile({"STREAMK": 1, "STORE": 2}, 256, 22016, 4096, layout,
                                        precision)
    assert "-DTMA_STORE=0" in " ".join(build.options) and "UTMASTG" not in sass(build)
    assert build.spill_bytes == 0


def test_grid_is_never_more_than_the_k_iterations():
    # 64 x 64 x 64 in bf16: one tile of one k-tile, so one block
    _, (grid, _, _) = persistent.OFFER.compile({"STREAMK": 1}, 64, 64, 64, "nt", "bf16")
    assert grid[0] == 1
    # 200 x 300 x 640 in fp8: 2 x 2 tiles of 5 k-tiles = 20 k-iterations, 20 blocks
    assert tma.streamk_work(200, 300, 640, 128, 256, "fp8") == 20
    _, (grid, _, _) = persistent.OFFER.compile({"STREAMK": 1}, 200, 300, 640, "nt", "fp8")
    assert grid[0] == 20


def _kernel_walk(tiles: int, kt: int, blocks: int):
    """The kernel's walk as variants/persistent.cu's STREAMK WALK, NEXT_TILE and UNIT compute it:
    {tile: [(part j, first k-tile, end k-tile, block)]}, whole tiles as part 0 of 0 .. kt."""
    dp = tiles // blocks * blocks
    work = (tiles - dp) * kt
    gs = min(work, blocks)
    parts: dict[int, list] = {}
    for me in range(blocks):
        x0 = me * work // gs if me < gs else 0
        x1 = (me + 1) * work // gs if me < gs else 0
        sk0 = dp + x0 // kt if me < gs else tiles
        end = dp + (x1 - 1) // kt + 1 if me < gs else tiles
        t = me if me < dp else sk0
        while t < end:
            tk = (t - dp) * kt
            k0 = 0 if t < dp or x0 <= tk else x0 - tk
            k1 = kt if t < dp or x1 - tk >= kt else x1 - tk
            whole = k0 == 0 and k1 == kt
            j = 0 if whole else me - ((tk + 1) * gs - 1) // work
            parts.setdefault(t, []).append((j, k0, k1, me))
            t = (t + blocks if t + blocks < dp else sk0) if t < dp else t + 1
    return parts


def _reduce_parts(t: int, tiles: int, kt: int, blocks: int) -> int:
    """The parts splitk_reduce.cu's STREAMK build counts for the tile at walk place t."""
    dp = tiles // blocks * blocks
    if t < dp:
        return 1
    work = (tiles - dp) * kt
    gs = min(work, blocks)
    x = (t - dp) * kt
    return ((x + kt) * gs - 1) // work - ((x + 1) * gs - 1) // work + 1


@pytest.mark.parametrize("tiles,kt,blocks", [(172, 64, 132), (72, 128, 132), (40, 64, 132),
                                             (1, 1, 1), (3, 7, 20), (132, 64, 132),
                                             (300, 3, 132), (5, 100, 7), (133, 64, 132),
                                             (265, 2, 132)])
def test_every_k_tile_is_one_blocks_and_parts_are_numbered_as_the_reduction_adds_them(
        tiles, kt, blocks):
    work = tiles * kt
    parts = _kernel_walk(tiles, kt, blocks)
    dp = tiles // blocks * blocks
    assert all(len(parts[t]) == 1 for t in range(dp)), "the full rounds' tiles are whole"
    assert sorted(parts) == list(range(tiles))
    for t, ps in parts.items():
        ps.sort()
        assert [j for j, *_ in ps] == list(range(len(ps))), "parts 0, 1, ... in order"
        ks = [(k0, k1) for _, k0, k1, _ in ps]
        assert ks[0][0] == 0 and ks[-1][1] == kt and all(k0 < k1 for k0, k1 in ks)
        assert all(a[1] == b[0] for a, b in zip(ks, ks[1:])), "the k-tiles once each, in order"
        assert _reduce_parts(t, tiles, kt, blocks) == len(ps)
    # every block gets floor or ceil of work / blocks k-iterations (a block past the ranges, when
    # the last tiles have fewer k-iterations than there are blocks, at most one tile's fewer)
    per = [sum(k1 - k0 for ps in parts.values() for _, k0, k1, i in ps if i == b)
           for b in range(blocks)]
    assert max(per) - min(per) <= (1 if (tiles - dp) * kt >= blocks else kt)
    assert sum(per) == work
    M, N, K = 128 * tiles, 256, 64 * kt  # bf16: k-tiles of 64, a column of `tiles` tiles
    assert tma.streamk_parts(M, N, K, 128, 256, blocks, 8, "bf16") == \
        max(len(ps) for ps in parts.values())


@pytest.mark.parametrize("precision", ("tf32", "3xtf32", "fp8_row", "fp8_block"))
def test_streamk_is_refused_in_one_sentence_where_the_sum_is_not_plain(precision):
    with pytest.raises(LabError) as e:
        persistent.OFFER.validate({"STREAMK": 1}, precision)
    assert "stream-K runs bf16, fp16, fp8" in str(e.value) and precision in str(e.value)
    _one_sentence(str(e.value))
    persistent.OFFER.validate({"STREAMK": 0}, precision)


def test_streamk_takes_neither_splitk_nor_clusters_and_is_never_the_lesson():
    for params in ({"STREAMK": 1, "SPLITK": 2}, {"STREAMK": 1, "CLUSTER": 2}):
        with pytest.raises(LabError) as e:
            persistent.OFFER.validate(params, "bf16")
        assert "takes neither SPLITK nor CLUSTER=2" in str(e.value)
        _one_sentence(str(e.value))
    assert STAGE.resolve({"STREAMK": 1}, 256, 22016, 4096, "bf16", 132)["CLUSTER"] == 1
    d = {"CLUSTER": 1, "TMA_STORE": 0, "CONSUMERS": 2}
    assert persistent.lesson_case(d, "nn")
    assert not persistent.lesson_case({**d, "STREAMK": 1}, "nn")
    assert persistent.OFFER.kernels({"STREAMK": 1}, "bf16") == ("matmul_persistent",
                                                                 "splitk_reduce")
    # STREAMK=0 adds no define: the automatic row's build is the one it always was
    b0 = STAGE.build("bf16", "nt", 8, {**STAGE.defaults_for("bf16"), "CLUSTER": 1})
    b1 = STAGE.build("bf16", "nt", 8, {**STAGE.defaults_for("bf16"), "CLUSTER": 1, "STREAMK": 0})
    assert b0.options == b1.options and "STREAMK" not in " ".join(b0.options)


def test_streamk_reduction_reads_only_a_tiles_parts():
    red = warptiling.build_reduce(3, True, out="bf16", streamk=(128, 256, 8))
    opts = " ".join(red.options)
    assert all(d in opts for d in ("-DSTREAMK=1", "-DTBM=128", "-DTBN=256", "-DGROUP=8",
                                   "-DSPLITK=3", "-DOUT_BF16=1"))
    text = sass(red)
    assert len(re.findall(r"LDG\.E\.128", text)) == 3 and "F2FP" in text
    assert red.spill_bytes == 0


@pytest.mark.parametrize("precision", PRECISIONS)
def test_launch_passes_the_workspace_and_the_reduction_its_walk(precision, monkeypatch):
    import numpy as np

    seen, reduced = mock_tma_launches(monkeypatch, tma)
    monkeypatch.setattr(tma, "sm_count", lambda *a: 132)
    M, N, K = 256, 22016, 4096  # 2 x 86 = 172 tiles of 128 x 256 on 132 SMs
    p = _problem(M, N, K, "nt", precision)
    kt = K // (128 // tma.ELEM_BYTES[precision])
    out = STAGE.launch(p, precision, c=STAGE.config(precision, STREAMK=1))
    assert out.extra["streamk"] and len(out.steps) == 2  # the kernel, then the reduction
    parts = tma.streamk_parts(M, N, K, 128, 256, 132, 8, precision)
    # 132 tiles whole, the other 40 tiles' 40 x kt k-iterations in 132 ranges
    assert out.extra["splits"] == parts == max(len(p) for p in _kernel_walk(172, kt, 132).values())
    assert parts > 2
    work, ldw, splits = seen["args"][-3:]
    assert int(ldw) == 22016 and int(splits) == parts
    assert work.dtype == torch.float32 and work.numel() == parts * M * 22016
    assert seen["grid"][0] == 132
    r = reduced["args"]
    assert r[0] is work and r[1] is p.c.tensor
    assert [int(x) for x in r[6:]] == [2, 86, kt, 132]
    assert "-DSTREAMK=1" in " ".join(reduced["build"].options)
    # 132 tiles of one k-tile each on 132 SMs: every tile whole, no reduction, no workspace
    reduced.clear()
    p = _problem(128 * 132, 256, 64, "nt", "bf16")
    out = STAGE.launch(p, "bf16", c=STAGE.config("bf16", STREAMK=1))
    assert out.extra["splits"] == 1 and len(out.steps) == 1 and not reduced
    assert seen["args"][-3].numel() == 1 and isinstance(seen["args"][-2], np.int64)


def test_one_long_tile_is_cut_over_every_block_and_its_sum_builds(monkeypatch):
    """96 x 72 x (2^17 + 384): one tile, 2,054 k-tiles in 132 ranges; the reduction adds 132
    parts (a build of SPLITK=132 without spills: the GPU test's case)."""
    seen, reduced = mock_tma_launches(monkeypatch, tma)
    p = _problem(96, 72, 2 ** 17 + 384, "tn", "bf16")
    out = STAGE.launch(p, "bf16", c=STAGE.config("bf16", STREAMK=1))
    assert out.extra["splits"] == 132 and seen["grid"][0] == 132
    walk = _kernel_walk(1, (2 ** 17 + 384) // 64, 132)
    assert max(len(parts) for parts in walk.values()) == 132
    build = reduced["build"]
    assert "-DSPLITK=132" in build.options and build.spill_bytes == 0


# The split-K reduction (cuda_kernels/splitk_reduce.cu) run by the CUDA emulator
# (tests/cuda_emulator.py): argv M N ldw ldc grid_m grid_n KT G parts rgx rbx W-file C-file; W is
# `parts` slabs of M x ldw floats, C comes back M x ldc in C's type (all bits set where the
# reduction wrote nothing: a NaN in float, bf16 and half).
REDUCE_MAIN = r"""
int main(int argc, char** argv) {
    if (argc != 14) { std::fprintf(stderr, "usage\n"); return 2; }
    const int M = atoi(argv[1]), N = atoi(argv[2]), ldw = atoi(argv[3]), ldc = atoi(argv[4]);
    const int grid_m = atoi(argv[5]), grid_n = atoi(argv[6]), KT = atoi(argv[7]), G = atoi(argv[8]);
    const int parts = atoi(argv[9]);
    const unsigned rgx = atoi(argv[10]), rbx = atoi(argv[11]);
    std::vector<float> W(size_t(parts) * M * ldw);
    std::vector<out_t> C(size_t(M) * ldc);
    std::memset(C.data(), 0xff, C.size() * sizeof(out_t));
    FILE* in = std::fopen(argv[12], "rb");
    if (!in || std::fread(W.data(), sizeof(float), W.size(), in) != W.size()) return 3;
    std::fclose(in);
    lab_run_grid(rgx, 1, rbx, 1, 0, [&] {
#if STREAMK
        splitk_reduce(W.data(), C.data(), M, N, ldw, ldc, grid_m, grid_n, KT, G);
#else
        (void)grid_m; (void)grid_n; (void)KT; (void)G;
        splitk_reduce(W.data(), C.data(), M, N, ldw, ldc);
#endif
    });
    FILE* out = std::fopen(argv[13], "wb");
    if (!out || std::fwrite(C.data(), sizeof(out_t), C.size(), out) != C.size()) return 4;
    std::fclose(out);
    return 0;
}
"""

# (C's type, stream-K, TBM, TBN, GROUP, M, N, KT, G, VEC_C). Stream-K: one cut tile after two
# rounds; four cut tiles; fewer tiles than blocks (every tile cut); two tiles cut about 30 ways and
# one tile cut 132 ways (more parts than RBATCH: the batched sum); C with an odd leading
# dimension, stored one element at a time; bf16 and fp16 C (8-byte stores of four rounded sums).
# Split-K (stream-K 0: G is the split, every element the sum of G slabs) in the three types.
# And a C of one row (stream-K) and of one element (split-K).
REDUCE_CASES = [
    ("fp32", 1, 16, 32, 2, 40, 70, 10, 4, 1),
    ("fp32", 1, 16, 32, 2, 40, 70, 7, 5, 1),
    ("fp32", 1, 16, 32, 3, 50, 100, 30, 50, 1),
    ("fp32", 1, 16, 32, 8, 16, 60, 40, 60, 1),
    ("fp32", 1, 128, 256, 8, 96, 72, 2054, 132, 1),
    ("fp32", 1, 16, 32, 2, 37, 61, 9, 7, 0),
    ("bf16", 1, 16, 32, 2, 40, 70, 7, 5, 1),
    ("bf16", 1, 16, 32, 8, 16, 60, 40, 60, 0),
    ("fp16", 1, 16, 32, 3, 50, 100, 30, 50, 1),
    ("fp32", 0, 0, 0, 0, 33, 70, 0, 3, 1),
    ("bf16", 0, 0, 0, 0, 33, 70, 0, 16, 1),
    ("fp16", 0, 0, 0, 0, 20, 37, 0, 5, 0),
    ("fp32", 1, 16, 32, 2, 1, 5, 7, 3, 0),
    ("bf16", 0, 0, 0, 0, 1, 1, 0, 4, 0),
]
OUT_DEFINE = {"fp32": {}, "bf16": {"OUT_BF16": 1}, "fp16": {"OUT_F16": 1}}


def _tile_of(t: int, grid_m: int, grid_n: int, group: int) -> tuple[int, int]:
    """The main kernel's tile at walk place t (variants/persistent.cu tile_of): GROUP tile-rows
    walked together, down the rows first."""
    width = group * grid_n
    first_m = t // width * group
    rows = min(grid_m - first_m, group)
    return first_m + (t % width) % rows, (t % width) // rows


def _rounded(acc, out: str):
    """fp32 sums as C's bits: rounded to nearest even (torch's and numpy's conversions)."""
    import numpy as np

    if out == "bf16":
        return torch.from_numpy(acc).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if out == "fp16":
        return acc.astype(np.float16).view(np.uint16)
    return acc.view(np.uint32)


@pytest.mark.parametrize("case", range(len(REDUCE_CASES)),
                         ids=["-".join(map(str, c)) for c in REDUCE_CASES])
def test_reduction_emulated_on_the_cpu(case, tmp_path):
    """Stream-K: C of every cut tile is its parts added in the order 0, 1, ... in fp32, bit for
    bit, from the parts the main kernel's walk gives each tile (_kernel_walk); whole tiles and C's
    padding are left alone. Split-K: every element is its G slabs added in order. A 16-bit C is
    that sum rounded to nearest even."""
    import subprocess

    import numpy as np
    from cuda_emulator import KERNELS, compile_async, compiler, program

    if compiler() is None:
        pytest.skip("no C++ compiler (g++ or clang++) to emulate the CUDA kernels")
    out, streamk, tbm, tbn, group, M, N, kt, blocks, vec = REDUCE_CASES[case]
    ldw = warptiling.workspace_ld(N)
    ldc = ldw if vec else N + 3
    bits = np.uint32 if out == "fp32" else np.uint16
    want = np.full((M, ldc), np.iinfo(bits).max, dtype=bits)
    rng = np.random.default_rng(case)
    if streamk:
        grid_m, grid_n = -(-M // tbm), -(-N // tbn)
        walk = _kernel_walk(grid_m * grid_n, kt, blocks)
        parts = max(len(ps) for ps in walk.values())
        w = rng.standard_normal((parts, M, ldw)).astype(np.float32)
        for t, ps in walk.items():
            if len(ps) < 2:
                continue  # stored by the main kernel
            bm, bn = _tile_of(t, grid_m, grid_n, group)
            rows = slice(bm * tbm, min(M, (bm + 1) * tbm))
            cols = slice(bn * tbn, min(N, (bn + 1) * tbn))
            acc = w[0, rows, cols].copy()
            for j in range(1, len(ps)):  # fp32, in order
                acc += w[j, rows, cols]
            want[rows, cols] = _rounded(acc, out)
        defines = {"STREAMK": 1, "TBM": tbm, "TBN": tbn, "GROUP": group}
    else:
        grid_m = grid_n = 0
        parts = blocks
        w = rng.standard_normal((parts, M, ldw)).astype(np.float32)
        acc = w[0, :, :N].copy()
        for j in range(1, parts):
            acc += w[j, :, :N]
        want[:, :N] = _rounded(acc, out)
        defines = {}
    assert parts > 1
    (grid, block, _) = warptiling.reduce_geometry(M, N)
    (tmp_path / "reduce.cpp").write_text(program(REDUCE_MAIN, "REDUCE_FILE"))
    exe = compile_async(tmp_path / "reduce.cpp", tmp_path / "reduce", {
        "REDUCE_FILE": f'"{KERNELS / "splitk_reduce.cu"}"', "SPLITK": parts,
        "RTHREADS": block[0], "VEC_C": vec, **defines, **OUT_DEFINE[out]}).result()
    w.tofile(tmp_path / "w.bin")
    args = [M, N, ldw, ldc, grid_m, grid_n, kt, blocks, parts, grid[0], block[0],
            tmp_path / "w.bin", tmp_path / "c.bin"]
    run = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    c = np.fromfile(tmp_path / "c.bin", dtype=bits).reshape(M, ldc)
    assert np.array_equal(c, want)
    assert (c[:, :N] != np.iinfo(bits).max).any() and (c[:, N:] == np.iinfo(bits).max).all()


# ------------------------------------------------------------------------------ GPU
gpu = pytest.mark.gpu


@gpu
@needs_hopper
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_streamk_at_edge_sizes(precision, layout):
    for M, N, K in ((333, 257, 1029), (129, 520, 5000), (64, 8, 8), (1, 1, 300),
                    (256, 2304, 4096), (1000, 1300, 777)):
        a, b, scales = gpu_operands(M, N, K, layout, precision)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
        persistent.prepare(a, b, c, precision=precision, STREAMK=1, **scales)()
        check_scaled(c, a, b, precision, scales)


@gpu
@needs_hopper
@pytest.mark.parametrize("precision", PRECISIONS)
def test_streamk_on_wave_quantized_layers_gives_the_same_bits_twice(precision):
    # 256 x 22016 x 4096: 172 tiles on 132 SMs; 1024 x 2304 x 2048: 72; a C column-major and a C
    # with an odd leading dimension
    for M, N, K in ((256, 22016, 4096), (1024, 2304, 2048)):
        a, b, scales = gpu_operands(M, N, K, "nt", precision, seed=3)
        dt = OUT[precision]
        for c in (torch.full((M, N), float("nan"), device="cuda", dtype=dt),
                  torch.full((N, M), float("nan"), device="cuda", dtype=dt).t(),
                  torch.full((M, N + 5), float("nan"), device="cuda", dtype=dt)[:, 3:N + 3]):
            run = persistent.prepare(a, b, c, precision=precision, STREAMK=1, **scales)
            run()
            check_scaled(c, a, b, precision, scales)
            first = c.clone()
            c.fill_(float("nan"))
            run()
            assert torch.equal(c.view(torch.int16), first.view(torch.int16)), "not reproducible"


@gpu
@needs_hopper
@pytest.mark.parametrize("precision", PRECISIONS)
def test_streamk_on_sliced_operands_and_a_k_past_2_to_the_17(precision):
    """Operands that are views into larger tensors, at an aligned offset (read in place by TMA)
    and at an odd one (copied by the plan), into a C view at a column offset (2 tiles of 128 x
    256, their k-tiles cut over fewer blocks than the SMs); and a K of 2^17 + 384 in one tile,
    whose k-tiles are cut over all 132 blocks (132 parts added by the reduction)."""
    check_sliced_operands(persistent.prepare, precision, STREAMK=1)
    M, N, K = 96, 72, 2 ** 17 + 384
    a, b, scales = gpu_operands(M, N, K, "tn", precision, seed=12)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[precision])
    run = persistent.prepare(a, b, c, precision=precision, STREAMK=1, **scales)
    assert run.extra["splits"] == 132
    run()
    check_scaled(c, a, b, precision, scales)
