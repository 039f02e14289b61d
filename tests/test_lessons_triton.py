"""The Triton twins of the fp32 ladder, of the tensor-core stages mma and wgmma and of gemv write
their lesson out (DESIGN.md rule 13, "the lesson lives in the lesson file"): each twin's kernel,
the first one its OFFER names, is a @triton.jit function of its own file whose body holds the
program-to-tile mapping, the pointer arithmetic, the tl.load of A and B, the product (tl.dot, or
the broadcast multiply and sum of a tile under tl.dot's 16) and the tl.store of C, as the Triton
tutorial (03-matrix-multiplication) writes them. Shared
@triton.jit helpers are left for what is not the lesson: the 64-bit strides (wide_strides).

Read from the source (ast), nothing compiled or run. That the kernels compute the same as before
is the other tests' (tests/test_cpu_stages.py, test_layouts.py, test_offsets64.py ...); that the
rewrite compiled to the same PTX was checked when it was made (sm_90, fake driver), and for the
twins whose lesson leaves part of the former kernel to triton_kernels/variants/ (tiled,
warptiling, double_buffered) tests/test_lessons_triton_variants.py checks it on every run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]

# stage -> whether its kernel multiplies tiles with tl.dot (a tile of 16 or more); naive and
# coalesced add outer products of vectors, with no tile to multiply
LESSONS = {
    "naive": False,
    "coalesced": False,
    "tiled": True,
    "tiled_padded": True,
    "tiled_rect": True,
    "blocktile_1d": True,
    "blocktile_2d": True,
    "vectorized": True,
    "bank_conflicts": True,
    "warptiling": True,
    "double_buffered": True,
    "mma": True,
    "wgmma": True,
    "gemv": False,  # a broadcast multiply and tl.sum (tests/test_lessons_triton_side.py)
}
# the stages whose K loop loads without masks: tiled_padded (padded operands), warptiling and gemv
# (rows and columns wrapped at C's edges; gemv's in tests/test_lessons_triton_side.py)
UNMASKED = ("tiled_padded", "warptiling", "gemv")
# the stages whose product has a path for tiles under 16 (a broadcast multiply and tl.sum)
NARROW = ("tiled", "tiled_padded", "tiled_rect")
# _common's @triton.jit pieces a lesson kernel may call: none of them loads, multiplies or stores
ALLOWED_HELPERS = {"wide_strides"}
# the pieces that hid a lesson's loads and product (and its pointer and mask arithmetic)
HIDDEN = {"masked_tile", "tile_product", "load_k_step", "operand_pointers", "grouped_tile",
          "grouped_ranges", "line_offsets", "edge_masks", "k_masks", "block_range",
          "column_blocks_fastest", "padded_bounds", "split_ktiles"}


def _offer_kernel(tree: ast.Module, stage: str) -> str:
    """The first kernel name of the module's `OFFER = Offer(..., kernels=(...))`."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "OFFER"
                                                 for t in node.targets)):
            for kw in node.value.keywords:
                if kw.arg == "kernels" and isinstance(kw.value, ast.Tuple):
                    return ast.literal_eval(kw.value)[0]
                if kw.arg == "kernels":  # kernels(params, precision): the names it declares
                    return _declared_kernel(stage)
    raise AssertionError(f"triton_kernels/{stage}.py has no OFFER with kernels=")


def _declared_kernel(stage: str) -> str:
    """The first kernel the stage's Triton OFFER declares for its registry defaults."""
    from lab.stages import get_stage

    offer = get_stage(stage).offer("triton")
    return offer.kernel_names(get_stage(stage).defaults(), offer.precisions[0])[0]


def _kernel(stage: str) -> ast.FunctionDef:
    path = ROOT / "triton_kernels" / f"{stage}.py"
    tree = ast.parse(path.read_text())
    name = _offer_kernel(tree, stage)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            assert any("jit" in ast.unparse(d) for d in node.decorator_list), name
            return node
    raise AssertionError(f"{stage}'s kernel {name} is not defined in triton_kernels/{stage}.py "
                         f"(imported from another stage, its lesson is not in its file)")


def _calls(fn: ast.FunctionDef) -> list[tuple[str, ast.Call]]:
    """(dotted name, call) of every call in fn's body: 'tl.load', 'common.wide_strides', ..."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            out.append((ast.unparse(node.func), node))
    return out


@pytest.mark.parametrize("stage", sorted(LESSONS))
def test_the_kernel_writes_its_loads_product_and_store(stage):
    fn = _kernel(stage)
    names = [n for n, _ in _calls(fn)]
    assert names.count("tl.load") >= 2, f"{stage}: the loads of A and B are not in the kernel"
    assert "tl.store" in names, f"{stage}: the store of C is not in the kernel"
    assert "tl.program_id" in names, f"{stage}: the program-to-tile mapping is not in the kernel"
    if LESSONS[stage]:
        assert "tl.dot" in names, f"{stage}: tl.dot is not in the kernel"
    if stage in NARROW:
        assert "tl.sum" in names, f"{stage}: the broadcast product of narrow tiles is elsewhere"


@pytest.mark.parametrize("stage", sorted(LESSONS))
def test_the_kernel_calls_no_helper_that_hides_its_lesson(stage):
    fn = _kernel(stage)
    helpers = {n.split(".")[-1] for n, _ in _calls(fn)
               if n.startswith(("common.", "_common.")) or n.split(".")[-1] in HIDDEN}
    assert not helpers & HIDDEN, f"{stage} calls {sorted(helpers & HIDDEN)}"
    assert helpers <= ALLOWED_HELPERS, f"{stage} calls {sorted(helpers - ALLOWED_HELPERS)}"


@pytest.mark.parametrize("stage", sorted(s for s in LESSONS if s not in UNMASKED))
def test_the_loads_and_the_store_are_masked(stage):
    """Every stage but tiled_padded (whose lesson is the padding that removes them),
    warptiling (test_warptiling_masks_only_its_ragged_k_tile_and_its_store) and gemv
    (tests/test_lessons_triton_side.py) masks its loads at the edges (zero fill) and its store."""
    for name, call in _calls(_kernel(stage)):
        if name in ("tl.load", "tl.store"):
            kws = {kw.arg for kw in call.keywords}
            assert "mask" in kws, f"{stage}: {ast.unparse(call)} has no mask"
            if name == "tl.load":
                assert "other" in kws, f"{stage}: {ast.unparse(call)} has no zero fill"


def test_tiled_padded_loads_and_stores_without_masks():
    for name, call in _calls(_kernel("tiled_padded")):
        if name in ("tl.load", "tl.store"):
            assert "mask" not in {kw.arg for kw in call.keywords}, ast.unparse(call)


def test_warptiling_masks_only_its_ragged_k_tile_and_its_store():
    """warptiling's K loop loads without masks (rows and columns wrapped at C's edges); the one
    masked k-tile after the loop (K % BLOCK_K) and the store are masked."""
    fn = _kernel("warptiling")
    loop = next(node for node in ast.walk(fn) if isinstance(node, ast.For))
    in_loop = {id(call) for call in ast.walk(loop) if isinstance(call, ast.Call)}
    loads = [(id(call) in in_loop, {kw.arg for kw in call.keywords})
             for name, call in _calls(fn) if name == "tl.load"]
    assert [kws for inside, kws in loads if inside] == [set(), set()]
    assert [kws for inside, kws in loads if not inside] == [{"mask", "other"}] * 2
    (store,) = [call for name, call in _calls(fn) if name == "tl.store"]
    assert "mask" in {kw.arg for kw in store.keywords}
