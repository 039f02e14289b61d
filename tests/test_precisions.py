"""lab/base/precisions.py: one record per precision, read by the harness and the launchers.

(a) The records agree with torch (dtypes and element sizes) and with the lab's own figures.
(b) The tables the harness and launchers keep are read off the records, not written again: the
    dtypes of A, B and C, the check's thresholds, the cuBLAS rows, the peaks' derived units, the
    pages' words, the launchers' element sizes.
(c) No precision's name is written as a literal where the record holds the fact (a source scan of
    lab/: a literal "fp8" outside the registry's help text and the record is a second home).
"""

from __future__ import annotations

import re

import pytest
import torch

from helpers import ROOT
from lab import check, peaks, results, run
from lab.base import dtypes
from lab.base import contract, precisions
from lab.stages import STAGES

RECORDS = precisions.RECORDS


# ------------------------------------------------------------------------ (a) the records
@pytest.mark.parametrize("r", RECORDS, ids=lambda r: r.name)
def test_a_record_names_real_dtypes_of_the_sizes_it_says(r):
    for name, size in ((r.dtype, r.elem_bytes), (r.c_dtype, r.c_bytes)):
        assert torch.empty(0, dtype=getattr(torch, name)).element_size() == size


def test_names_are_unique_and_the_contract_offers_exactly_them():
    assert len(set(precisions.NAMES)) == len(RECORDS)
    assert contract.PRECISIONS == precisions.NAMES


@pytest.mark.parametrize("r", RECORDS, ids=lambda r: r.name)
def test_a_baseline_and_units_are_records_too(r):
    assert r.baseline in precisions.BY_NAME and r.peak_units in precisions.BY_NAME
    assert r.cublas and r.word and r.glossary


def test_an_unknown_precision_is_one_sentence():
    with pytest.raises(precisions.LabError, match="unknown precision 'fp4'; choose from fp32"):
        precisions.get("fp4")


def test_a_dtype_means_the_first_precision_with_those_operands():
    assert precisions.of_dtype("float32") == "fp32" and precisions.of_dtype("int8") is None


# ------------------------------------------------------------------------ (b) tables read off them
@pytest.mark.parametrize("r", RECORDS, ids=lambda r: r.name)
def test_the_harness_tables_are_the_records(r):
    assert dtypes.DTYPE_NAMES[r.name] == r.dtype
    assert dtypes.OUT_DTYPE_NAMES[r.name] == r.c_dtype
    assert (r.name in dtypes.SCALED) == r.scaled
    assert check.FLOOR[r.name] == r.floor and check.UNIT_ROUNDOFF[r.name] == r.unit_roundoff
    assert check.tolerance(r.name, 1 << 30) == pytest.approx(
        max(r.floor, check.RANDOM_WALK_FACTOR * r.accumulate_u * 2**15))
    assert run.CUBLAS_AT[r.name] == r.cublas
    assert results.PRECISION_WORDS[r.name] == (r.word, r.glossary)
    assert peaks.DERIVED.get(r.name, (r.name, 1)) == (r.peak_units, r.products)


@pytest.mark.parametrize("r", RECORDS, ids=lambda r: r.name)
def test_every_precision_some_stage_offers_has_a_record(r):
    offered = {p for s in STAGES for b in ("cuda", "triton") for p in s.precisions_for(b)}
    assert offered <= set(precisions.NAMES)


def test_launchers_take_element_sizes_from_the_records():
    from cuda_kernels import _tma, gemv, mma, wgmma

    for table in (_tma.ELEM_BYTES, gemv.ELEM_BYTES, mma.ELEM_BYTES, wgmma.ELEM_BYTES):
        assert table == precisions.elem_bytes(*table)
    assert _tma.C_BYTES == precisions.c_bytes(*_tma.C_BYTES)
    for table in (_tma.DEFINES, mma.DEFINES, wgmma.DEFINES):
        assert table == precisions.cuda_defines(*table)
    assert gemv.PREC_DEFINES["fp32"] == {} and gemv.PREC_DEFINES["bf16"] == {"PREC_BF16": 1}


# ------------------------------------------------------------------------ (c) no second home
# lab/ modules that may name a precision as a literal: the record itself, the registry (its help
# texts), the GPU facts (peak rates per GPU model) and the tuner's and doctor's probe choices
NAMED_ON_PURPOSE = {"precisions.py", "stages.py", "peaks.py", "doctor.py"}


def test_the_harness_writes_no_precision_table_of_its_own():
    table = re.compile(r'\{\s*"(fp32|tf32|3xtf32|bf16|fp16|fp8)"\s*:')
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "lab").rglob("*.py")
             if p.name not in NAMED_ON_PURPOSE and table.search(p.read_text())]
    assert found == []
