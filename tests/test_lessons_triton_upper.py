"""The lesson is written in the kernel (../shared/DESIGN.md rule 13) for the Triton twins of the
upper stages: warptiling, double_buffered, tma_wgmma, warp_specialized (Gluon) and persistent.

Read off each module's source (ast, no compiling): the body of the kernel its OFFER names first
(the @triton.jit / @gluon.jit function; for the Gluon kernel also the partition functions it
hands to gl.warp_specialize, which Gluon requires to be functions of their own) calls the product
itself (tl.dot, or Gluon's warpgroup_mma), a load (tl.load, a descriptor's .load, or a TMA copy)
and a store (tl.store, a descriptor's .store, or a TMA store), and calls none of _common's
helpers that used to hide them (tile_product, load_k_step, ...). warptiling's split-K is a
separate, named path: it lives in the variant file (triton_kernels/variants/warptiling.py), whose
reduction kernel sits below the former kernel, every split-K line of which is under
`if SPLITK > 1`; the lesson kernel has no SPLITK at all.
"""

from __future__ import annotations

import ast

import pytest

from helpers import ROOT

STAGES = ("warptiling", "double_buffered", "tma_wgmma", "warp_specialized", "persistent")
KERNELS = {s: f"matmul_{s}_kernel" for s in STAGES}
# the helpers of triton_kernels/_common.py that hid a lesson's loads, product or pointer math
HIDDEN = {"tile_product", "load_k_step", "operand_pointers", "grouped_tile", "grouped_ranges",
          "line_offsets", "edge_masks", "k_masks", "padded_bounds", "split_ktiles", "tma_load"}
PRODUCTS = {"dot", "warpgroup_mma"}  # tl.dot; Gluon's wgmma
# Gluon's TMA copies, also through _common's wrappers of them (gl_tma_load: the copy under its
# 3.6 or 3.9 name; gl_tma_store_tile: the staging tile, fence, TMA store and wait that a tl
# descriptor's .store is)
LOADS = {"load", "_tma_load", "async_load", "async_copy_global_to_shared", "gl_tma_load"}
STORES = {"store", "_tma_store", "async_store", "async_copy_shared_to_global", "gl_tma_store_tile"}
HOPPER = ("tma_wgmma", "warp_specialized", "persistent")


def _tree(stage: str, folder: str = "triton_kernels") -> ast.Module:
    return ast.parse((ROOT / folder / f"{stage}.py").read_text())


def _jit_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)
            and any("jit" in ast.unparse(d) for d in node.decorator_list)}


def _called(node: ast.AST) -> set[str]:
    """The names of the functions and methods called in node: tl.dot -> "dot", f(...) -> "f"."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


def _partitions(kernel: ast.FunctionDef, jitted: dict) -> list[ast.FunctionDef]:
    """The functions a Gluon kernel hands to gl.warp_specialize (its partitions), if any."""
    found = []
    for call in ast.walk(kernel):
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("warp_specialize"):
            for node in ast.walk(call):
                if isinstance(node, ast.Name) and node.id in jitted and node.id != kernel.name:
                    found.append(jitted[node.id])
    return found


def _lesson_calls(stage: str) -> set[str]:
    jitted = _jit_functions(_tree(stage))
    kernel = jitted[KERNELS[stage]]
    called = _called(kernel)
    for partition in _partitions(kernel, jitted):
        called |= _called(partition)
    return called


@pytest.mark.parametrize("stage", STAGES)
def test_the_offer_names_the_kernel_checked_here(stage):
    from lab.stages import get_stage

    offer = get_stage(stage).offer("triton")
    names = offer.kernel_names(get_stage(stage).defaults(), offer.precisions[0])
    assert names[0] == KERNELS[stage]


@pytest.mark.parametrize("stage", STAGES)
def test_the_kernel_body_writes_its_loads_product_and_store(stage):
    called = _lesson_calls(stage)
    assert called & PRODUCTS, f"{stage}: no tl.dot / warpgroup_mma in the kernel"
    assert called & LOADS, f"{stage}: no load in the kernel"
    assert called & STORES, f"{stage}: no store in the kernel"


@pytest.mark.parametrize("stage", STAGES)
def test_the_kernel_calls_no_hiding_helper(stage):
    hidden = _lesson_calls(stage) & HIDDEN
    assert not hidden, f"{stage}'s kernel calls _common's {sorted(hidden)}"


def test_gluon_partitions_are_found():
    """The Gluon kernel's loads and wgmma live in its partitions: the check reads them."""
    jitted = _jit_functions(_tree("warp_specialized"))
    kernel = jitted[KERNELS["warp_specialized"]]
    names = {p.name for p in _partitions(kernel, jitted)}
    assert len(names) == 2
    assert "warpgroup_mma" not in _called(kernel)  # it is in a partition, not the kernel body


def test_warptiling_split_k_is_its_own_path():
    """Split-K is the variant file's: its former kernel first, the split-K reduction below it, and
    in that kernel every statement that reads `split` (the split-K index) is under an
    `if SPLITK > 1`; the lesson kernel names no SPLITK."""
    lesson = _jit_functions(_tree("warptiling"))["matmul_warptiling_kernel"]
    assert "SPLITK" not in ast.unparse(lesson) and "split" not in _called(lesson)
    tree = _tree("warptiling", "triton_kernels/variants")
    order = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert order.index("matmul_warptiling_kernel") < order.index("splitk_reduce_kernel")
    kernel = _jit_functions(tree)["matmul_warptiling_kernel"]

    def visit(node, guarded):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "SPLITK > 1":
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Name) and node.id == "split":
            assert guarded, f"`split` outside `if SPLITK > 1` at line {node.lineno}"
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(kernel, False)


@pytest.mark.parametrize("stage", HOPPER)
def test_the_hopper_lessons_leave_the_other_paths_to_their_variants(stage):
    from triton_kernels import _common as common
    import importlib

    lesson = importlib.import_module(f"triton_kernels.{stage}")
    variant = importlib.import_module(f"triton_kernels.variants.{stage}")
    kernel, former = getattr(lesson, KERNELS[stage]), getattr(variant, KERNELS[stage])
    assert former.fn.__name__ == kernel.fn.__name__ == KERNELS[stage]  # one name: one stage
    assert not set(common.LESSON_CASE) & set(kernel.arg_names)
    assert {"C_DESC", "C_T", "OFFSET64"} <= set(former.arg_names)
    assert kernel.arg_names[:13] == former.arg_names[:13]  # the same positional arguments
