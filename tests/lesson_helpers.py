"""What the lesson tests share (tests/test_lessons_*.py): reading a lesson file without its
comments, the names common.cuh defines, and the check that a lesson's build is its variant's build
of the same case, instruction for instruction (docs/ARCHITECTURE.md, "Lessons and variants")."""

from __future__ import annotations

import concurrent.futures
import importlib
import re

import pytest

from helpers import ROOT, build_cache_off, fresh_build

KERNELS = ROOT / "cuda_kernels"


def cuda_module(stage: str):
    """The CUDA launcher of `stage` (cuda_kernels/<stage>.py)."""
    return importlib.import_module(f"cuda_kernels.{stage}")


def without_comments(text: str) -> str:
    """C++ source without its comments."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def common_names() -> set[str]:
    """Every name common.cuh defines: macros, types, structs, free functions."""
    text = without_comments((KERNELS / "common.cuh").read_text())
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    names |= set(re.findall(r"\bstruct\s+(\w+)", text))
    names |= set(re.findall(r"\btypedef\b[^;]*?(\w+)\s*;", text))
    for line in text.splitlines():  # free functions (a struct's static members are its own)
        m = re.search(r"__forceinline__\s+[\w:<>&*\s]*?\b(\w+)\s*\(", line)
        if m and not line.lstrip().startswith("static"):
            names.add(m.group(1))
    return names


def require_disassembler() -> None:
    from lab.toolchain import sass

    if sass.find_tool("cuobjdump") is None and sass.find_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump or nvdisasm (pip install nvidia-cuda-cuobjdump)")


def sass_listing(build) -> list[str]:
    """The build's SASS instructions, without addresses and encodings."""
    from lab.toolchain import sass

    out = []
    for line in sass.sass(build).splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", line)
        if m:
            out.append(m.group(1))
    return out


def resources(build) -> tuple:
    """Registers, spills, stack and static shared memory of a build."""
    return (build.registers, build.spill_bytes, build.stack_frame, build.smem_static)


def variant_build(lesson):
    """The variant file of `lesson`'s stage compiled with the lesson build's own options."""
    from lab.toolchain import nvrtc

    return nvrtc._compile(f"variants/{lesson.source}", lesson.kernel, lesson.options, lesson.arch)


def lesson_and_variant_builds(cases, build_of, jobs: int = 2) -> dict:
    """{index: (lesson build, variant build)} for each case, `build_of(case)` giving the lesson's
    build (compiled `jobs` at a time: NVRTC processes share the CPU with other test runs)."""
    require_disassembler()

    def both(case):
        lesson = build_of(case)
        return lesson, variant_build(lesson)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return dict(enumerate(pool.map(both, cases)))


def fresh_lesson_and_variant(build_of, case):
    """`build_of(case)` and its variant compiled again past the process's memo and the on-disk
    build cache. A stage that picks __launch_bounds__ by trying builds until one does not spill
    (cuda_kernels/_build.py spill_free_build) can settle on a cap where a busy machine's ptxas
    happened not to spill; the fresh lesson makes that choice again, and the variant follows it."""
    from lab.toolchain import nvrtc

    with build_cache_off():
        nvrtc._compile.cache_clear()
        lesson = build_of(case)
        return lesson, variant_build(lesson)


def assert_same_sass(lesson, variant, label, rebuild=None) -> None:
    """The two builds are the same machine code: SASS without addresses and encodings, and the
    same registers, spills, stack and shared memory. ptxas can schedule one source differently on
    a busy machine (tests/helpers.py fresh_build): a mismatch is compiled again, both files, up to
    twice, before the verdict; `rebuild()`, where given, builds the pair again from the start
    (fresh_lesson_and_variant: the lesson's register cap chosen again)."""
    for attempt in range(3):
        if attempt:
            lesson, variant = (rebuild() if rebuild else
                               (fresh_build(lesson), fresh_build(variant)))
        a, b = sass_listing(lesson), sass_listing(variant)
        if a == b and resources(lesson) == resources(variant):
            return
    assert resources(lesson) == resources(variant), (label, resources(lesson), resources(variant))
    first = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert a == b, (f"{label}: {len(a)} vs {len(b)} instructions, first difference at {first}: "
                    f"{a[first:first + 3]} vs {b[first:first + 3]}")


def aligned_ld(width: int) -> int:
    """A leading dimension past `width` (its gap holds NaN) that is a multiple of 4 floats."""
    return (width // 4 + 1) * 4
