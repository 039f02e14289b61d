"""The Triton twins whose lesson file leaves part of the former kernel to a variant file
(triton_kernels/variants/, docs/ARCHITECTURE.md "Lessons and variants", ../shared/DESIGN.md
rule 13): tiled (the precisions other than fp32), warptiling (split-K and realign) and
double_buffered (realign).

(a) prepare() launches the lesson kernel exactly in the lesson case -- tiled: fp32; warptiling:
    the split resolves to 1 and realign is off; double_buffered: realign off -- and the variant's
    kernel (the former kernel, under the same name) everywhere else, with the meta-parameters the
    former launcher passed. Read off the launches prepare() records ('meta' tensors, nothing run).
(b) For the lesson case the lesson kernel compiles to the PTX of the former kernel, instruction for
    instruction: both compiled for sm_90 without a GPU (triton_kernels._common.FakeDriver, never
    run) from the launches their prepare() records, over layouts nn, nt, tn, tt (and a
    column-major C), aligned and unaligned lines, EVEN_K on and off, the default tile and a few
    others, num_stages 1 to 4 and 64-bit offsets; debug lines (.loc, .file, the .debug sections)
    left out and the kernel's name normalised. Slow (a compiling Triton in a subprocess, a few
    minutes on two cores); skipped where this Triton cannot compile for sm_90 without a GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from helpers import cpu_only, run_python, stage_params

# (stage, precision, (M, N, K), layout of A, B (and C: a third letter), parameter changes): the
# lesson cases compiled both ways in (b)
PTX_CASES = {
    "tiled": [
        ((96, 80, 72), "nn", dict()),
        ((96, 80, 72), "tt", dict()),
        ((100, 64, 33), "nt", dict(tile=16, num_stages=2)),
        ((40, 24, 17), "tn", dict(tile=8)),
        ((65536, 32, 32768), "nn", dict()),  # A spans 2^31 elements: 64-bit offsets
    ],
    "warptiling": [
        ((256, 256, 256), "nn", dict(splitk=1)),  # the defaults, EVEN_K, 16-byte lines
        ((255, 190, 97), "nn", dict(splitk=1)),  # no hints, a ragged k-tile
        ((256, 192, 100), "tn", dict(splitk=1)),  # A column-major (hint "t"), K % 32 = 4
        ((256, 192, 96), "ntt", dict(splitk=1, GROUP_M=1)),  # B and C column-major
        ((200, 136, 72), "tt", dict(splitk=1, BLOCK_M=64, BLOCK_N=64, num_warps=4,
                                    num_stages=2)),
        ((256, 256, 128), "nn", dict(splitk=1, BLOCK_N=64, BLOCK_K=64, num_stages=4)),
        ((192, 128, 48), "nt", dict(splitk=1, BLOCK_K=16, num_stages=1)),
        ((65536, 64, 32768), "nn", dict(splitk=1)),  # 64-bit offsets
    ],
    "double_buffered": [
        ((256, 256, 256), "nn", dict()),
        ((255, 190, 97), "nn", dict()),
        ((256, 192, 100), "tn", dict()),
        ((256, 192, 96), "ntt", dict(GROUP_M=1)),
        ((200, 136, 72), "tt", dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)),
        ((256, 256, 128), "nn", dict(BLOCK_N=64, BLOCK_K=64, num_stages=4)),
        ((65536, 64, 32768), "nn", dict()),
    ],
}


def _problem(shape, layout: str, precision: str = "fp32", device: str = "meta"):
    """The Problem of 'meta' operands of `shape` in `layout` (a letter per operand: n row-major,
    t column-major; C row-major unless a third letter says t)."""
    from lab.base.describe import describe
    from lab.base.dtypes import DTYPE_NAMES
    from lab.base.needs import TRITON

    dtype = getattr(torch, DTYPE_NAMES[precision])
    M, N, K = shape

    def operand(rows, cols, trans, dt=dtype):
        if trans:
            return torch.empty((cols, rows), device=device, dtype=dt).t()
        return torch.empty((rows, cols), device=device, dtype=dt)

    c_t = len(layout) > 2 and layout[2] == "t"
    return describe(operand(M, K, layout[0] == "t"), operand(K, N, layout[1] == "t"),
                    operand(M, N, c_t, torch.float32 if precision != "bf16" else dtype), TRITON,
                    precision)


def former_launch(stage: str, p, params: dict):
    """The launch the former launcher made for p with the registry's `params`: the variant file's
    kernel (the former kernel) with the meta-parameters the former prepare() passed."""
    import importlib

    variant = importlib.import_module(f"triton_kernels.variants.{stage}")
    if stage == "tiled":
        return variant.variant_launch(p, params["tile"], params["num_warps"],
                                      params["num_stages"])
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "realign")
    config = {k: params[k] for k in keys}
    if stage == "warptiling":
        from lab.base.device import sm_count

        config = variant.configure(p, params["splitk"], config, sm_count(p.c.tensor.device))
    return variant.variant_launch(p, config)


def recorded(fn) -> list:
    """(kernel, grid, args, meta) of each launch fn() makes, recorded, nothing compiled."""
    from lab.toolchain.triton import recording

    with recording() as calls:
        fn()
    return calls


# ------------------------------------------------------------------ (a) which kernel runs


def _launches(stage: str, shape, layout: str = "nn", precision: str = "fp32", **changes):
    import importlib

    lesson = importlib.import_module(f"triton_kernels.{stage}")
    variant = importlib.import_module(f"triton_kernels.variants.{stage}")
    params = stage_params(stage, "triton", **changes)
    p = _problem(shape, layout, precision)
    return lesson, variant, recorded(lambda: lesson.prepare.inner(p, **params))


def _fn(kernel):
    return getattr(kernel, "fn", kernel)


@pytest.mark.fast
@pytest.mark.parametrize("precision", ["fp32", "tf32", "3xtf32", "bf16", "fp16"])
def test_tiled_runs_its_lesson_in_fp32_only(precision):
    lesson, variant, calls = _launches("tiled", (64, 48, 40), "nn", precision)
    (kernel, _, _, meta), = calls
    if precision == "fp32":
        assert _fn(kernel) is _fn(lesson.matmul_tiled_kernel)
        assert "INPUT_PRECISION" not in meta and "UPCAST" not in meta
    else:
        assert _fn(kernel) is _fn(variant.matmul_tiled_kernel)
        assert meta["INPUT_PRECISION"] == {"tf32": "tf32", "3xtf32": "tf32x3"}.get(precision,
                                                                                   "ieee")
    assert _fn(kernel).__name__ == "matmul_tiled_kernel"  # one name: the OFFER's


# (shape, parameter changes, whether the lesson runs): splitk=0 resolves to 1 at 256^3 and to a
# split at 320x192x786432 (6 tiles, K long: lab/base/splitk.py)
WARPTILING_CHOICES = [
    ((256, 256, 256), dict(), True),
    ((256, 256, 256), dict(splitk=1), True),
    ((255, 190, 97), dict(splitk=1, num_stages=1), True),
    ((320, 192, 786432), dict(), False),
    ((256, 256, 256), dict(splitk=3), False),
    ((256, 256, 256), dict(splitk=1, realign=True), False),
    ((255, 190, 97), dict(splitk=1, realign=True), False),
]


@pytest.mark.fast
@pytest.mark.parametrize("shape,changes,lesson_runs", WARPTILING_CHOICES)
def test_warptiling_runs_its_lesson_unsplit_without_realign(shape, changes, lesson_runs):
    lesson, variant, calls = _launches("warptiling", shape, **changes)
    gemm = [c for c in calls if _fn(c[0]).__name__ == "matmul_warptiling_kernel"]
    assert len(gemm) == 1
    kernel, _, _, meta = gemm[0]
    if lesson_runs:
        assert len(calls) == 1 and _fn(kernel) is _fn(lesson.matmul_warptiling_kernel)
        assert not {"SPLITK", "PAD_A", "PAD_B"} & set(meta)
    else:
        assert _fn(kernel) is _fn(variant.matmul_warptiling_kernel)
        assert "SPLITK" in meta
        # the former launcher's launches, meta-parameter for meta-parameter
        p = _problem(shape, "nn")
        params = stage_params("warptiling", "triton", **changes)
        former = recorded(lambda: former_launch("warptiling", p, params))
        assert [(_fn(k).__name__, g, m) for k, g, _, m in former] == \
            [(_fn(k).__name__, g, m) for k, g, _, m in calls]


@pytest.mark.fast
@pytest.mark.parametrize("realign", [False, True])
def test_double_buffered_runs_its_lesson_without_realign(realign):
    lesson, variant, calls = _launches("double_buffered", (255, 190, 97), realign=realign)
    (kernel, _, _, meta), = [c for c in calls
                             if _fn(c[0]).__name__ == "matmul_double_buffered_kernel"]
    owner = variant if realign else lesson
    assert _fn(kernel) is _fn(owner.matmul_double_buffered_kernel)
    assert ("PAD_A" in meta) == realign  # 1025-float lines: realign copies A and B


@pytest.mark.fast
@pytest.mark.parametrize("stage", sorted(PTX_CASES))
def test_the_lesson_gets_the_former_meta_parameters(stage):
    """In the lesson case the lesson launch is the former one but for the variant's switches at
    their off values (SPLITK=1, no PAD; tiled: IEEE fp32, no upcast): same grid, same meta."""
    off = {"SPLITK": 1, "INPUT_PRECISION": "ieee", "UPCAST": False}
    for shape, layout, changes in PTX_CASES[stage]:
        params = stage_params(stage, "triton", **changes)
        p = _problem(shape, layout)
        (_, grid, args, meta), = recorded(lambda: _module(stage).prepare.inner(p, **params))
        (_, f_grid, f_args, f_meta), = recorded(lambda: former_launch(stage, p, params))
        assert grid == f_grid and len(args) == len(f_args)
        assert meta == {k: v for k, v in f_meta.items() if off.get(k, object()) != v}, \
            (stage, shape, layout)


def _module(stage: str):
    import importlib

    return importlib.import_module(f"triton_kernels.{stage}")


# the variant's switches, which its lesson kernel does not take (each is the lesson's case when off)
SWITCHES = {"tiled": ("INPUT_PRECISION", "UPCAST"), "warptiling": ("SPLITK", "PAD_A", "PAD_B"),
            "double_buffered": ("PAD_A", "PAD_B")}


@pytest.mark.fast
@pytest.mark.parametrize("stage", sorted(SWITCHES))
def test_the_lesson_kernel_takes_none_of_the_variant_switches(stage):
    import inspect

    name = f"matmul_{stage}_kernel"
    lesson = inspect.signature(_fn(getattr(_module(stage), name))).parameters
    former = inspect.signature(_fn(getattr(_variant(stage), name))).parameters
    assert not set(SWITCHES[stage]) & set(lesson)
    assert set(former) - set(lesson) == set(SWITCHES[stage])
    assert [k for k in former if k in lesson] == list(lesson)  # the same order, the rest


def _variant(stage: str):
    import importlib

    return importlib.import_module(f"triton_kernels.variants.{stage}")


# ------------------------------------------------------------------ (b) the same PTX

PTX_PROBE = r"""
import importlib, json, re, sys, warnings
sys.path.insert(0, "tests")
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from lab.toolchain.triton import FakeDriver
from helpers import stage_params
from test_lessons_triton_variants import PTX_CASES, _problem, former_launch, recorded

def normal(ptx, name):
    ptx = ptx.split("\n\t.section\t.debug", 1)[0]  # the debug sections: source lines, not code
    lines = [l for l in ptx.splitlines()
             if not l.strip().startswith((".loc", ".file", "//"))]
    return "\n".join(lines).replace(name, "KERNEL")

def compiled(launch):
    kernel, grid, args, meta = launch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = kernel.warmup(*args, grid=grid, **meta)
    name = getattr(kernel, "fn", kernel).__name__
    return normal(c.asm["ptx"], name), c.metadata.shared

stage = sys.argv[1]
lesson = importlib.import_module(f"triton_kernels.{stage}")
driver.set_active(FakeDriver(GPUTarget("cuda", 90, 32)))
out = []
for shape, layout, changes in PTX_CASES[stage]:
    params = stage_params(stage, "triton", **changes)
    p = _problem(shape, layout)
    (mine,) = recorded(lambda: lesson.prepare.inner(p, **params))
    (former,) = recorded(lambda: former_launch(stage, p, params))
    (ptx, smem), (f_ptx, f_smem) = compiled(mine), compiled(former)
    diff = [(a, b) for a, b in zip(ptx.splitlines(), f_ptx.splitlines()) if a != b][:3]
    out.append(dict(case=f"{shape} {layout} {changes}", same=ptx == f_ptx and smem == f_smem,
                    lines=len(ptx.splitlines()), former_lines=len(f_ptx.splitlines()),
                    smem=[smem, f_smem], first_diff=diff,
                    lesson=getattr(mine[0], "fn", mine[0]).__module__,
                    former=getattr(former[0], "fn", former[0]).__module__))
print(json.dumps(out))
"""


@cpu_only
@pytest.mark.parametrize("stage", sorted(PTX_CASES))
def test_the_lesson_compiles_to_the_former_ptx(stage):
    r = run_python(PTX_PROBE, stage, timeout=900, drop=("TRITON_INTERPRET",))
    if r.returncode != 0:
        if "Traceback" in r.stderr and ("ptxas" in r.stderr or "GPUTarget" in r.stderr):
            pytest.skip("this Triton cannot compile for sm_90 without a GPU: " +
                        r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == len(PTX_CASES[stage])
    for row in results:
        assert row["lesson"] == f"triton_kernels.{stage}", row
        assert row["former"] == f"triton_kernels.variants.{stage}", row
        assert row["lines"] > 100 and row["same"], row
