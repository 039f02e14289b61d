"""The lesson is written in the kernel (../shared/DESIGN.md rule 13) for the Triton twins of the
tensor-core stages mma and wgmma and of the side branch gemv: each kernel's body holds its
program-to-tile mapping, its pointer and mask arithmetic, the tl.load of A and B inside the K loop,
the product (tl.dot in the operands' own dtype; gemv's broadcast multiply and tl.sum) and the
tl.store of C. They used to call _common's grouped_tile, load_k_step, grouped_ranges and
padded_bounds (mma, wgmma) and split_ktiles and line_offsets (gemv); tests/test_lessons_triton.py
checks that no such helper is called, this file what each of these kernels writes in its place.

Read from the source (ast), nothing compiled or run. That the kernels compute what they computed
before is the other tests' (test_mma.py, test_wgmma.py, test_gemv.py, test_cpu_stages.py ...).
When the helpers were written out, the PTX of every rewritten kernel was compared with the former
kernel's, compiled for sm_90 without a GPU (Triton 3.9, the fake driver, line info off) from the
launches each stage's prepare() records: 398 cases (tf32, 3xtf32, bf16, fp16; nn, nt, tn, tt;
4096^3, 1025^3, 7919x6007x3001, 1000^3 and 256x384x512, EVEN_K both ways, OFFSET64 both ways,
wgmma's realign PAD and register-A paths; gemv in fp32 / bf16 / fp16 with N = 1, M = 1 and narrow
N, split-K off, on and automatic), every one byte-identical."""

from __future__ import annotations

import ast
import re

import pytest

from helpers import ROOT
from lab import lesson

pytestmark = pytest.mark.fast

KERNELS = {"mma": "matmul_mma_kernel", "wgmma": "matmul_wgmma_kernel", "gemv": "gemv_kernel"}
TENSOR_CORE = ("mma", "wgmma")
# a step of the kernel from the one it builds on, in changed code lines (lab.lesson's count):
# double_buffered -> mma 21 and mma -> wgmma 30 when they were written out
KERNEL_STEP = 40


def _source(stage: str) -> str:
    return (ROOT / "triton_kernels" / f"{stage}.py").read_text()


def _tree(stage: str) -> ast.Module:
    return ast.parse(_source(stage))


def _kernel(stage: str, name: str | None = None) -> ast.FunctionDef:
    name = name or KERNELS[stage]
    for node in _tree(stage).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"triton_kernels/{stage}.py defines no {name}")


def _calls(node: ast.AST) -> list[tuple[str, ast.Call]]:
    return [(ast.unparse(n.func), n) for n in ast.walk(node) if isinstance(n, ast.Call)]


def _loops(fn: ast.FunctionDef) -> list[ast.For]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.For)]


def _code(stage: str, name: str) -> list[str]:
    """The kernel's lines without comments, docstrings and blank lines."""
    fn = _kernel(stage, name)
    lines = _source(stage).splitlines()[fn.lineno - 1:fn.end_lineno]
    lines = [lesson._strip_py_comment(line).rstrip() for line in lines]
    return [line for line in lines if line.strip()]


def test_the_offers_name_these_kernels():
    from lab.stages import get_stage

    for stage, name in KERNELS.items():
        spec = get_stage(stage)
        offer = spec.offer("triton")
        assert offer.kernel_names(spec.defaults(), offer.precisions[0])[0] == name


@pytest.mark.parametrize("stage", TENSOR_CORE)
def test_the_k_loop_loads_a_and_b_and_multiplies_them_with_tl_dot(stage):
    loops = _loops(_kernel(stage))
    assert len(loops) == 1, f"{stage}: one K loop"
    names = [n for n, _ in _calls(loops[0])]
    assert names.count("tl.load") >= 2, f"{stage}: the loads of A and B are not in the K loop"
    dots = [c for n, c in _calls(loops[0]) if n == "tl.dot"]
    assert len(dots) == 1, f"{stage}: one tl.dot in the K loop"
    kws = {kw.arg: ast.unparse(kw.value) for kw in dots[0].keywords}
    assert kws.get("input_precision") == "INPUT_PRECISION", ast.unparse(dots[0])


@pytest.mark.parametrize("stage", TENSOR_CORE)
def test_c_is_stored_in_its_own_dtype_after_the_loop(stage):
    fn = _kernel(stage)
    stores = [c for n, c in _calls(fn) if n == "tl.store"]
    assert len(stores) == 1
    assert ast.unparse(stores[0].args[1]) == "acc.to(c_ptr.dtype.element_ty)"
    assert stores[0].lineno > _loops(fn)[0].end_lineno


@pytest.mark.parametrize("stage", TENSOR_CORE)
def test_the_grouped_order_hints_and_masks_are_written_in_the_kernel(stage):
    """The prologue grouped_tile hid: the GROUP_M order, the VEC alignment hints (the mma step's
    16-byte rule: VEC elements, 4 floats or 8 halves) and C's edge masks."""
    fn = _kernel(stage)
    assigned = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    assert {"width", "first_m", "pid_m", "pid_n", "a_ptrs", "b_ptrs", "in_m", "in_n"} <= assigned
    hints = [ast.unparse(c) for n, c in _calls(fn) if n == "tl.multiple_of"]
    assert sum(h.endswith(", VEC)") for h in hints) == 6, hints  # A, B and C, each line


def test_wgmma_writes_the_realign_bounds_and_the_register_a_path():
    """What wgmma's kernel adds to mma's: the bounds of a zero-padded copy (PAD_A / PAD_B, which
    padded_bounds hid), and for an A fed from registers the rounding (round_tf32, a wrapper of
    one instruction, cvt.rn.tf32.f32, defined in the same file) and the wait before the load."""
    fn = _kernel("wgmma")
    text = ast.unparse(fn)
    for flag in ("PAD_A and VEC_A == 't'", "PAD_A and VEC_A == 'n'", "PAD_B and VEC_B == 'n'",
                 "PAD_B and VEC_B == 't'"):
        assert flag in text, flag
    assert "round_tf32(a, REGS_A)" in text and "wgmma.wait_group" in text
    rounding = ast.unparse(_kernel("wgmma", "round_tf32"))
    assert "cvt.rn.tf32.f32" in rounding and "tl.load" not in rounding and "tl.dot" not in rounding


def test_gemv_streams_a_without_masks_and_sums_after_the_loop():
    """gemv: no tl.dot (N = 1 would waste 15 of tl.dot's 16 columns); the loads in its K loops are
    unmasked (rows past M are wrapped onto real ones), only the ragged last k-step and the store
    are masked, and the products are summed over k once, after the loop."""
    fn = _kernel("gemv")
    names = [n for n, _ in _calls(fn)]
    assert "tl.dot" not in names and names.count("tl.sum") == 2  # the N = 1 path and the other
    loops = _loops(fn)
    assert len(loops) == 2
    for loop in loops:
        loads = [c for n, c in _calls(loop) if n == "tl.load"]
        assert len(loads) == 2 and not any(c.keywords for c in loads), ast.unparse(loop)
    outside = [c for n, c in _calls(fn) if n == "tl.load"
               and not any(loop.lineno <= c.lineno <= loop.end_lineno for loop in loops)]
    assert len(outside) == 4 and all("mask" in {kw.arg for kw in c.keywords} for c in outside)
    # the k-steps of this program (split_ktiles, written out) and A's alignment hints
    text = ast.unparse(fn)
    assert "tl.cdiv(K, BLOCK_K)" in text and "split * ktiles // SPLITK" in text
    assert "tl.multiple_of(a_m, VW)" in text and "tl.multiple_of(a_k, VW)" in text


@pytest.mark.parametrize("stage", KERNELS)
def test_the_kernel_calls_only_tl_its_own_file_and_wide_strides(stage):
    """Shared code in the lesson is an instruction wrapper, index arithmetic or a piece of an
    earlier stage: here only _common's wide_strides (64-bit offsets) and the file's own
    round_tf32; every other call is triton.language's or a method of a tile."""
    tree = _tree(stage)
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    fn = _kernel(stage)
    local = {a.arg for a in fn.args.args} | {n.id for n in ast.walk(fn)
                                              if isinstance(n, ast.Name)
                                              and isinstance(n.ctx, ast.Store)}
    for name, call in _calls(fn):
        root = name.split(".")[0].split("(")[0]
        if isinstance(call.func, ast.Name):
            assert name in own | {"range"}, f"{stage} calls {name}"
        elif root == "common":
            assert name == "common.wide_strides", f"{stage} calls {name}"
        else:  # tl.<op>, or a method of a value in the kernel (a.to, split.to, ...)
            assert root == "tl" or root in local, f"{stage} calls {name}"


@pytest.mark.parametrize("stage", KERNELS)
def test_the_docstring_names_the_change_from_the_stage_it_builds_on(stage):
    doc = ast.get_docstring(_tree(stage))
    found = re.findall(r"Changed from (?:stage )?(\w+)'s twin", doc)
    assert found == [lesson.previous(stage)], (stage, found)


@pytest.mark.parametrize("stage, before", [("mma", "double_buffered"), ("wgmma", "mma")])
def test_the_kernel_step_is_a_short_diff(stage, before):
    """The tensor-core kernels read as a ladder: mma's is double_buffered's with the precision
    (dtype, tl.dot's input_precision, C's dtype) and the VEC rule; wgmma's is mma's with the
    realign bounds and the register-A path."""
    assert lesson.previous(stage) == before
    n = lesson.changed(_code(before, f"matmul_{before}_kernel"), _code(stage, KERNELS[stage]))
    assert n <= KERNEL_STEP, f"{before} -> {stage}: {n} changed kernel lines"
