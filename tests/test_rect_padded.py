"""CPU tests of the tiled_padded and tiled_rect stages.

- the Triton twins are correct under the interpreter on odd shapes, for every tile choice;
- the CUDA kernels compile with NVRTC (sm_90) without spills for every valid tile choice;
- tiled_rect's validate() rejects impossible tiles with one sentence, before compiling;
- tiled_padded pads only what needs padding, reports setup_ms, and its kernel has no bounds checks
  left in the machine code (no predicated global loads or stores, unlike tiled).
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from lab import check as chk
from lab.base.describe import describe
from lab.base.errors import LabError
from lab.stages import get_stage

SHAPES = [(1, 1, 1), (17, 33, 129), (65, 64, 63), (3, 130, 2)]
PADDED_TILES = (8, 16, 32)
RECT_VALID = [(r, c) for r in (4, 8, 16, 32) for c in (16, 32, 64) if c % r == 0 and r * c <= 1024]
RECT_INVALID = [(32, 16), (32, 64)]


def _run(module, M, N, K, **params):
    a, b = chk.make_inputs(M, N, K, seed=M + 3 * N + 7 * K, device="cpu")
    ref = chk.reference(a, b)
    c = torch.empty((M, N))
    launch = module.prepare(a, b, c, **params)
    result = chk.check(launch, c, ref, K)
    assert result.passed, f"{params} {M}x{N}x{K}: {result.reason}"
    return launch


def test_registry_entries():
    padded, rect = get_stage("tiled_padded"), get_stage("tiled_rect")
    assert padded.defaults()["tile"] == 32
    assert (rect.defaults()["rows"], rect.defaults()["cols"]) == (8, 32)
    for stage in (padded, rect):
        names = {p.name for p in stage.params}
        assert {"fast_math", "unroll", "num_warps", "num_stages"} <= names


def test_rect_valid_choices_are_the_registry_choices():
    rect = get_stage("tiled_rect")
    choices = {p.name: p.choices for p in rect.params}
    assert set(RECT_VALID) | set(RECT_INVALID) == {(r, c) for r in choices["rows"]
                                                   for c in choices["cols"]}


# ------------------------------------------------------------------------- Triton, interpreted


@pytest.mark.parametrize("tile", PADDED_TILES)
def test_triton_tiled_padded_odd_shapes(tile):
    from triton_kernels import tiled_padded

    for M, N, K in SHAPES:
        launch = _run(tiled_padded, M, N, K, tile=tile)
        assert isinstance(launch.setup_ms, float) and launch.setup_ms >= 0.0


@pytest.mark.parametrize("rows,cols", RECT_VALID, ids=[f"{r}x{c}" for r, c in RECT_VALID])
def test_triton_tiled_rect_odd_shapes(rows, cols):
    from triton_kernels import tiled_rect

    for M, N, K in SHAPES:
        _run(tiled_rect, M, N, K, rows=rows, cols=cols)


def test_triton_rect_fallback_k_step():
    from triton_kernels.tiled_rect import FALLBACK_MAX_ELEMENTS, k_step

    assert k_step(16, 32) == 32 and k_step(32, 32) == 32  # tl.dot: the CUDA K-tile
    assert k_step(8, 32) == 8 and k_step(8, 64) == 4 and k_step(4, 16) == 16
    for r, c in RECT_VALID:
        s = k_step(r, c)
        assert c % s == 0 and (r >= 16 or r * s * c <= FALLBACK_MAX_ELEMENTS)


# ------------------------------------------------------------------------------ padding rules


def test_padded_multiples_write_c_directly():
    from triton_kernels import tiled_padded

    launch = _run(tiled_padded, 64, 32, 96, tile=32)
    assert launch.padded_shape == (64, 32, 96)
    assert launch.setup_ms == 0.0
    assert len(launch.steps) == 1  # the bare launch: no crop in the timed call


def test_padded_helper_pads_only_what_is_needed():
    from cuda_kernels.tiled_padded import Padded

    M, N, K = 64, 33, 64  # A needs nothing; B and C need extra columns
    a, b = chk.make_inputs(M, N, K, seed=1, device="cpu", layout="tn")
    c = torch.empty((M, N))
    p = Padded(describe(a, b, c), 32)
    q = p.problem
    assert (p.Mp, p.Np, p.Kp) == (64, 64, 64) == (q.M, q.N, q.K)
    assert q.a.tensor is a and not p.pads_a and q.a.trans  # kept in its own (transposed) layout
    assert p.pads_b and q.b.tensor.shape == (64, 64) and torch.equal(q.b.tensor[:, :N], b)
    assert q.b.row_major and torch.count_nonzero(q.b.tensor[:, N:]) == 0
    assert p.pads_c and p.cpad.shape == (64, 64) and q.c.tensor is p.cpad
    assert p.setup_ms > 0.0
    # M=17 needs padding (A, C), N=32 and K=8 do not (B used as is)
    a2, b2 = chk.make_inputs(17, 32, 8, seed=2, device="cpu")
    p2 = Padded(describe(a2, b2, torch.empty((17, 32))), 8)
    assert (p2.Mp, p2.Np, p2.Kp) == (24, 32, 8)
    assert p2.pads_a and not p2.pads_b and p2.pads_c
    assert p2.problem.b.tensor is b2


def test_padded_geometry_and_resources():
    from cuda_kernels import tiled_padded

    # 1-D grid of ceil(M/TILE) * ceil(N/TILE) blocks (block_tile() orders them, as in tiled)
    assert tiled_padded.geometry(65, 33, 129, tile=32) == ((6, 1, 1), (32, 32, 1), 0)
    assert tiled_padded.geometry(64, 64, 64, tile=16) == ((16, 1, 1), (16, 16, 1), 0)


def test_cuda_padded_pads_k_to_the_stage_depth():
    """K is padded to TILE * ktile (the K depth of one barrier pair), M and N to TILE."""
    from cuda_kernels.tiled_padded import Padded

    a, b = chk.make_inputs(32, 32, 40, seed=3, device="cpu")
    p = Padded(describe(a, b, torch.empty((32, 32))), 32, 64)
    assert (p.Mp, p.Np, p.Kp) == (32, 32, 64)
    assert p.pads_a and p.pads_b and not p.pads_c


# ------------------------------------------------------------------------------ CUDA, compiled


@pytest.mark.parametrize("ktile", (1, 2, 4))
@pytest.mark.parametrize("tile", PADDED_TILES)
def test_cuda_tiled_padded_compiles_without_spills(tile, ktile):
    from cuda_kernels import tiled_padded

    b = tiled_padded.build(tile=tile, ktile=ktile)
    assert b.spill_bytes == 0 and b.stack_frame == 0
    assert b.smem_static == 2 * tile * tile * ktile * 4
    assert b.registers <= 64  # 1024-thread blocks need <= 64 for one block to launch


@pytest.mark.parametrize("rows,cols", RECT_VALID, ids=[f"{r}x{c}" for r, c in RECT_VALID])
def test_cuda_tiled_rect_compiles_without_spills(rows, cols):
    from cuda_kernels import tiled_rect

    b = tiled_rect.build(rows=rows, cols=cols)
    assert b.spill_bytes == 0 and b.stack_frame == 0
    assert b.smem_static == (rows * cols + cols * cols) * 4
    grid, block, smem = tiled_rect.geometry(100, 200, 300, rows=rows, cols=cols)
    assert block == (cols, rows, 1) and smem == 0
    assert grid == (-(-200 // cols) * -(-100 // rows), 1, 1)


def test_switches_are_accepted_and_unknown_kwargs_ignored():
    from cuda_kernels import tiled_padded, tiled_rect

    assert tiled_rect.build(rows=8, cols=32, fast_math=True, unroll=False, bogus=1).spill_bytes == 0
    assert tiled_padded.build(tile=16, fast_math=True, unroll=False, bogus=1).spill_bytes == 0


# ---------------------------------------------------------------------------------- validate()


@pytest.mark.parametrize("rows,cols,fragment", [
    (32, 16, "cols to be a multiple of rows"),
    (32, 64, "2048 threads per block"),
    (5, 32, "rows in 4, 8, 16, 32"),
    (8, 48, "cols in 16, 32, 64"),
])
def test_rect_validate_errors(rows, cols, fragment):
    from cuda_kernels import tiled_rect

    for call in (lambda: tiled_rect.validate(rows=rows, cols=cols),
                 lambda: tiled_rect.build(rows=rows, cols=cols),
                 lambda: tiled_rect.geometry(64, 64, 64, rows=rows, cols=cols)):
        with pytest.raises(LabError, match=fragment) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and message.count(". ") == 0  # one sentence


def test_rect_prepare_validates_before_anything_else():
    """Each twin's prepare() checks its own kernel's rules before it looks at the tensors (CPU
    tensors here, which the CUDA launcher would refuse only afterwards)."""
    from cuda_kernels import tiled_rect as cuda_rect
    from triton_kernels import tiled_rect as triton_rect

    a, b = chk.make_inputs(8, 8, 8, seed=0, device="cpu")
    with pytest.raises(LabError, match="multiple of rows"):
        cuda_rect.prepare(a, b, torch.empty((8, 8)), rows=32, cols=16)
    with pytest.raises(LabError, match="takes rows in 4, 8, 16, 32, not 5"):
        triton_rect.prepare(a, b, torch.empty((8, 8)), rows=5, cols=16)


# --------------------------------------------------------------------- no bounds checks in SASS


def _nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    for package in ("nvidia", "triton"):
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for candidate in Path(root).rglob("nvdisasm"):
                if os.access(candidate, os.X_OK):
                    return str(candidate)
    return None


def _predicated_global_accesses(build, tmp_path) -> int:
    tool = _nvdisasm()
    if tool is None:
        pytest.skip("nvdisasm not found")
    cubin = tmp_path / f"{build.kernel}.cubin"
    cubin.write_bytes(build.cubin)
    sass = subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    return sum(1 for line in sass.splitlines()
               if "@" in line.split(";")[0] and ("LDG" in line or "STG" in line))


def test_padded_kernel_has_no_guarded_loads_or_stores(tmp_path):
    from cuda_kernels import tiled, tiled_padded

    assert _predicated_global_accesses(tiled.build(tile=32), tmp_path) > 0
    assert _predicated_global_accesses(tiled_padded.build(tile=32), tmp_path) == 0
