"""The XLSX report: named input cells, live formulas named after the result keys, cached values equal the library's.

These tests read the file with openpyxl and need no spreadsheet engine; test_xlsx_libreoffice.py recalculates it.
"""

import io
import math
from dataclasses import replace

import openpyxl
import pytest
from test_report import SCENARIO_IDS, all_scenarios

from capacity import INPUTS, RESULTS
from capacity.report import report_for
from capacity.xlsx import (
    FORMULAS,
    INTERMEDIATES,
    SOLVERS,
    intermediate_values,
    missing_formulas,
    workbook_bytes,
    write_xlsx,
)

SPEC_KEYS = ("kv_bytes_per_token pool_bytes pool_blocks blocks_per_request max_requests_contiguous max_requests_paged "
             "max_requests_shared_prefix decode_memory_s decode_compute_s decode_step_s prefill_s ceiling_rps "
             "decode_share tpot_at_ceiling_s goodput_rps goodput_in_flight single_stream_tokens_per_s "
             "cost_per_million_tokens").split()


def named_cells(wb: openpyxl.Workbook) -> dict[str, openpyxl.cell.Cell]:
    """Each workbook-level defined name -> the one cell it refers to."""
    cells = {}
    for name, defined in wb.defined_names.items():
        sheet, ref = defined.attr_text.split("!")
        cells[name] = wb[sheet.strip("'")][ref.replace("$", "")]
    return cells


def matches(got: object, want: object) -> bool:
    """A spreadsheet value equals the library's: numbers to 1e-12, undefined/unbounded (inf, NaN) as #N/A."""
    if isinstance(want, (str, bool)):
        return got == want
    if want is None or not math.isfinite(want):
        return got == "#N/A"
    return isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=1e-12,
                                                                                        abs_tol=1e-15)


def library_values(report) -> dict[str, object]:
    return {**report.results.values, **intermediate_values(report)}


#: Every named formula cell: results, intermediates and the Solver sheet's results.
NAMED_FORMULAS = [*FORMULAS, *(solver[0] for solver in SOLVERS)]


def test_every_result_has_a_live_formula():
    assert missing_formulas() == []
    assert set(SPEC_KEYS) <= set(FORMULAS)


@pytest.fixture(scope="module")
def essay001_book():
    report = report_for(all_scenarios()["essay-001-sale-day"])
    return report, openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)))


def test_inputs_carry_defined_names_in_base_units(essay001_book):
    _, wb = essay001_book
    cells = named_cells(wb)
    for key in INPUTS:
        assert cells[key].parent.title == "Inputs"
        assert cells[key].offset(column=-1).value == key and cells[key].offset(column=1).value == INPUTS[key][0]
    assert cells["gpu_memory_bytes"].value == 80e9  # "80 GB", decimal
    assert cells["tpot_slo_s"].value == 0.05 and cells["step_overhead_s"].value == 0.003
    assert cells["ttft_slo_s"].value is None and cells["max_num_seqs"].value is None  # unset: blank


def test_results_are_formulas_over_the_names(essay001_book):
    _, wb = essay001_book
    cells = named_cells(wb)
    for key in [*RESULTS, *INTERMEDIATES]:
        assert cells[key].parent.title == "Results"
        assert cells[key].value == "=" + FORMULAS[key]
    assert cells["kv_bytes_per_token"].value == ("=IF(kv_latent_dim>0,layers*kv_latent_dim*kv_bytes_per_value,"
                                                 "2*layers*kv_heads*head_dim*kv_bytes_per_value)")  # MLA or not


@pytest.mark.parametrize("key", SCENARIO_IDS)
def test_cached_values_equal_the_library(key):
    report = report_for(all_scenarios()[key])
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)), data_only=True)
    cells = named_cells(wb)
    want = library_values(report)
    wrong = {k: (cells[k].value, want[k]) for k in NAMED_FORMULAS if not matches(cells[k].value, want[k])}
    assert wrong == {}


def test_essay_000_cached_numbers_are_the_essays():
    report = report_for(all_scenarios()["essay-000-paging"])
    cells = named_cells(openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)), data_only=True))
    assert cells["pool_bytes"].value == 56 * 2**30 and cells["gpu_memory_bytes"].value == 80 * 2**30  # GiB
    assert (cells["pool_blocks"].value, cells["max_requests_contiguous"].value, cells["max_requests_paged"].value,
            cells["max_requests_shared_prefix"].value) == (28_672, 14, 253, 752)
    assert cells["cost_per_million_tokens"].value == "#N/A"  # no price in the essay


def test_report_sheet_and_injection_in_the_name_stays_text():
    scenario = replace(all_scenarios()["essay-001-sale-day"], name='=HYPERLINK("http://evil.example","x")')
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario))))
    sheet = wb["Report"]
    name_cell = next(row[1] for row in sheet.iter_rows() if row[0].value == "scenario")
    assert name_cell.data_type == "s" and name_cell.value.startswith("=HYPERLINK")  # a string cell, not a formula
    labels = [row[0].value for row in sheet.iter_rows()]
    assert {"tool", "date", "binding resource", "assumption 1"} <= set(labels)
    assert wb.sheetnames == ["Report", "Inputs", "Results", "Solver"]


def test_unwritable_path_raises_and_leaves_nothing(tmp_path):
    report = report_for(all_scenarios()["essay-001-sale-day"])
    with pytest.raises(ValueError, match="cannot write"):
        write_xlsx(report, tmp_path / "missing" / "out.xlsx")
    assert list(tmp_path.iterdir()) == []
    write_xlsx(report, tmp_path / "out.xlsx")
    assert [p.name for p in tmp_path.iterdir()] == ["out.xlsx"]
