"""The registry is the only list of stages: every entry has both backends, files and a page."""


import pytest

from helpers import ROOT
from lab.base.errors import LabError
from lab.stages import BACKENDS, STAGES, Param, Stage, get_stage, parse_variants



@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_every_stage_has_both_backends_and_a_page(stage):
    assert (ROOT / "cuda_kernels" / f"{stage.name}.cu").is_file()
    assert (ROOT / "docs" / "stages" / f"{stage.name}.md").is_file()
    for backend in BACKENDS:
        module = stage.module(backend)
        assert callable(getattr(module, "prepare", None)), f"{backend} {stage.name} has no prepare()"
    cuda = stage.module("cuda")
    assert callable(cuda.build) and callable(cuda.geometry)


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_kernel_files_open_with_a_teaching_header(stage):
    cu = (ROOT / "cuda_kernels" / f"{stage.name}.cu").read_text()
    assert cu.lstrip().startswith("//") and "Stage" in cu.split("\n", 1)[0]
    tri = (ROOT / "triton_kernels" / f"{stage.name}.py").read_text()
    assert tri.lstrip().startswith('"""') and "Triton does" in tri


def test_stage_names_are_unique_and_params_have_valid_defaults():
    names = [s.name for s in STAGES]
    assert len(names) == len(set(names))
    for s in STAGES:
        for p in s.params:
            assert p.default in p.choices, f"{s.name}.{p.name}"
            assert set(p.backends) <= set(BACKENDS)


def test_parse_variants_lists_and_parameters():
    vs = parse_variants(["naive,coalesced", "tiled:tile=16"])
    assert [v.label for v in vs] == ["naive", "coalesced", "tiled:tile=16"]
    assert vs[2].params["tile"] == 16
    # a param=value after a variant continues its parameter list
    vs = parse_variants(["tiled:tile=8,unroll=0,naive"])
    assert [v.label for v in vs] == ["tiled:tile=8,unroll=0", "naive"]
    assert vs[0].params["unroll"] is False
    # defaults written out explicitly are the same variant as the default
    assert parse_variants(["tiled:tile=32"])[0].label == "tiled"
    assert len(parse_variants(["tiled,tiled"])) == 1


def test_all_expands_to_every_stage():
    assert [v.stage for v in parse_variants(["all"])] == list(STAGES)


def test_params_for_hands_each_backend_only_its_own():
    v = parse_variants(["tiled:fast_math=1,num_warps=8"])[0]
    assert v.params_for("cuda")["fast_math"] is True and "num_warps" not in v.params_for("cuda")
    assert v.params_for("triton")["num_warps"] == 8 and "fast_math" not in v.params_for("triton")


@pytest.mark.parametrize("spec,words", [
    (["bogus"], "unknown stage 'bogus'"),
    (["tiled:tile=12"], "takes one of 8, 16, 32"),
    (["tiled:tile=abc"], "takes one of"),
    (["tiled:colour=3"], "has no parameter 'colour'"),
    (["tiled:tile"], "name=value"),
    (["tile=8"], "must follow a stage name"),
    (["all:tile=8"], "'all' takes no parameters"),
    ([""], "no stage given"),
])
def test_parse_variants_errors(spec, words):
    with pytest.raises(LabError, match=words.replace("(", r"\(")):
        parse_variants(spec)


def test_unknown_stage_error_lists_the_valid_ones():
    with pytest.raises(LabError) as info:
        get_stage("tilde")
    for s in STAGES:
        assert s.name in str(info.value)


def test_bool_param_parsing():
    p = Param("fast_math", False, (False, True), "x")
    assert p.parse("s", "1") is True and p.parse("s", "off") is False
    with pytest.raises(LabError):
        p.parse("s", "maybe")


def test_variant_label_shows_only_changed_params():
    s = Stage("x", "t", params=(Param("a", 1, (1, 2), "h"), Param("b", 3, (3, 4), "h")))
    from lab.stages import Variant
    assert Variant(s, {"a": 1, "b": 3}).label == "x"
    assert Variant(s, {"a": 2, "b": 3}).label == "x:a=2"
