"""The XLSX workbook under each engine profile: recalculated by LibreOffice, every result equals the library's.

Engine profiles (capacity/inputs/engines.py) change the model, not only its inputs: TensorRT-LLM sizes the KV pool as a
fraction of the memory left after the weights and reserves (``kv_free_fraction``), every engine packs prompts into
prefill passes of ``max_batched_tokens`` tokens (``batched_prefill``: a prompt costs the others its share of a
pass, while its own TTFT is the plain prefill), and fitted efficiency curves add fixed bytes and tokens to every
pass. Issue 27: essay 001 with ``engine: tensorrt-llm`` (its memory utilisation left to the engine) recalculated
to a 56.0 GB pool, 328 requests and 5.897 requests/s where the library says 57.6 GB, 338 and 6.017, because
the workbook's formulas knew none of the first two rules.

Essay 001 runs under each profile (``ideal`` is no engine: the essays' convention), and three catalog scenarios
under one each: a dense 8B on an H100 (TensorRT-LLM, promises on TPOT and TTFT, a load), a 70B on four H100s
(SGLang: tensor-parallel all-reduce) and Mixtral 8x7B on an H200 (vLLM: the MoE solves). The recalculations are
skipped where ``soffice`` is absent, as tests/render/test_xlsx_libreoffice.py is; the checks of the formula text and of
the workbook's own intermediates run everywhere.
"""

import copy
import io
import math
from pathlib import Path

import openpyxl
import pytest
import yaml

from capacity import Scenario
from capacity.formulas import memory, roofline
from capacity.inputs import engines
from capacity.render.report import report_for
from capacity.render.xlsx import FORMULAS, intermediate_values, workbook_bytes
from capacity.render.xlsx import formulas as xlsx_formulas
from capacity.render.xlsx import writer as xlsx_writer
from tests.render.test_xlsx import named_cells
from tests.render.test_xlsx_libreoffice import SOFFICE, _recalculated, differences, recalculate

needs_soffice = pytest.mark.skipif(SOFFICE is None,
                                   reason="LibreOffice (soffice) is not installed; .ci/run installs it")

ESSAY_001 = yaml.safe_load((Path(__file__).parents[2] / "scenarios" / "essay-001-sale-day.yaml").read_text())
PROFILES = ("ideal", "vllm", "tensorrt-llm", "sglang")
#: The cells issue 27 names: what a reader of the workbook looks at first.
KEY_CELLS = ("pool_bytes", "pool_blocks", "batch_max", "decode_step_s", "prefill_s", "ceiling_rps", "goodput_rps",
             "tpot_at_goodput_s", "ttft_at_goodput_s", "cost_per_million_tokens")


def essay_001_under(engine: str) -> Scenario:
    """Essay 001 with ``serving.engine`` set and its memory utilisation left to the engine (``ideal``: no engine)."""
    data = copy.deepcopy(ESSAY_001)
    del data["serving"]["memory_utilization"]
    if engine != "ideal":
        data["serving"]["engine"] = engine
    return Scenario.from_dict(data)


CATALOG = {
    "llama-3.1-8b-h100-tensorrt-llm": {
        "model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm"}, "serving": {"engine": "tensorrt-llm"},
        "workload": {"prompt_tokens": 1500, "output_tokens": 250, "arrival_rate": 6.0},
        "slo": {"tpot": "40 ms", "ttft": "400 ms"}},
    "llama-3.1-70b-4xh100-sglang": {
        "model": {"name": "llama-3.1-70b"}, "gpu": {"name": "h100-sxm", "count": 4}, "serving": {"engine": "sglang"},
        "workload": {"prompt_tokens": 2000, "output_tokens": 400}, "slo": {"tpot": "60 ms", "ttft": "1 s"}},
    "mixtral-8x7b-h200-vllm": {
        "model": {"name": "mixtral-8x7b"}, "gpu": {"name": "h200"}, "serving": {"engine": "vllm"},
        "workload": {"prompt_tokens": 1000, "output_tokens": 300, "arrival_rate": 3.0}, "slo": {"tpot": "50 ms"}},
}


def scenarios() -> dict[str, Scenario]:
    found = {f"essay-001-{engine}": essay_001_under(engine) for engine in PROFILES}
    found.update({key: Scenario.from_dict({"name": key, **data}) for key, data in CATALOG.items()})
    return found


@pytest.fixture(scope="module")
def recalculated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xlsx-engines")
    return _recalculated(scenarios(), folder, folder / "profile")


@needs_soffice
@pytest.mark.parametrize("key", list(scenarios()))
def test_libreoffice_recalculates_engine_profiles_as_the_library(recalculated, key):
    report, path = recalculated[key]
    assert differences(path, report) == {}
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    for name in KEY_CELLS:  # issue 27's cells, to the library's last digits
        assert cells[name].value == pytest.approx(report.results[name], rel=1e-12), name


@needs_soffice
def test_issue_27_essay_001_under_tensorrt_llm(recalculated):
    """The issue's numbers: 0.9 x (80 - 16) GB = 57.6 GB of pool, 338 requests of 1,300 tokens x 131,072 B, and the
    goodput of prompts batched into 8,192-token passes (6.017 requests/s; one pass per prompt gives 5.897)."""
    _, path = recalculated["essay-001-tensorrt-llm"]
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    assert cells["pool_bytes"].value == pytest.approx(57.6e9, rel=1e-12)
    assert cells["batch_max"].value == 338
    assert round(cells["goodput_rps"].value, 3) == 6.017
    _, path = recalculated["essay-001-ideal"]  # no engine: the essay's own numbers
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    assert (cells["pool_bytes"].value, cells["batch_max"].value) == (56e9, 328)
    assert round(cells["goodput_rps"].value, 3) == 5.897


def test_engine_rules_the_workbook_takes_from_the_export_are_said_on_the_report_sheet():
    """Inputs an engine derives from other inputs at export (the activation peak from max_batched_tokens, the
    efficiency curves' fixed bytes from the peak bandwidth) are plain values: the Report sheet says so."""
    report = report_for(scenarios()["llama-3.1-8b-h100-tensorrt-llm"])
    sheet = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)))["Report"]
    text = " ".join(str(c.value) for row in sheet.iter_rows() for c in row if c.value)
    assert "reserved_bytes" in text and "max_batched_tokens" in text and "bandwidth_half_bytes" in text


#: Edits of the engine's inputs on the Inputs sheet: (scenario id, kv_free_fraction, max_batched_tokens,
#: batched_prefill). The pool, the batch and the prefill share follow; reserved_bytes stays (a value at export).
ENGINE_EDITS = [
    ("essay-001-tensorrt-llm", 0.8, 2048, 1),
    ("essay-001-vllm", 0.85, 512, 1),  # vLLM sizes the pool of total memory; a free fraction switches the rule
    ("llama-3.1-8b-h100-tensorrt-llm", 0.95, 16384, 0),  # one pass per prompt again
    ("mixtral-8x7b-h200-vllm", 0, 4096, 1),  # MoE: the TPOT solves with the prompts' share of a pass
]


@needs_soffice
def test_edited_engine_inputs_recalculate_as_the_library_on_the_changed_scenario(tmp_path):
    files, expected = [], {}
    for key, fraction, budget, batched in ENGINE_EDITS:
        scenario = scenarios()[key]
        wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario))))
        cells = named_cells(wb)
        cells["kv_free_fraction"].value, cells["max_batched_tokens"].value = fraction, budget
        cells["batched_prefill"].value = batched
        path = tmp_path / f"engine-{key}.xlsx"
        wb.save(path)
        expected[path.name] = report_for(scenario.with_changes(serving={
            "kv_free_fraction": fraction, "max_batched_tokens": budget, "batched_prefill": bool(batched)}))
        files.append(path)
    converted = recalculate(files, tmp_path / "out", tmp_path / "profile")
    for name, report in expected.items():
        assert differences(converted[name], report) == {}, name


def test_engine_formulas_are_generated_from_the_library_docstrings():
    """The pool rules and the batched prefill are the Excel text the library's functions document, with their
    parameters replaced by the workbook's cells: one definition, not a copy."""
    used = "weight_bytes_per_gpu+reserved_bytes"
    assert xlsx_formulas.excel_text(engines.pool_bytes_of_free) == "free_fraction*(gpu_memory_bytes-used_bytes)"
    assert FORMULAS["pool_bytes"] == (f"IF(N(kv_free_fraction)>0,kv_free_fraction*(gpu_memory_bytes-({used})),"
                                      f"gpu_memory_bytes*memory_utilization-({used}))")
    assert xlsx_formulas.excel_text(memory.pool_bytes) in FORMULAS["pool_bytes"].replace(f"({used})", "weight_bytes")
    assert FORMULAS["prefill_s"].startswith("MAX((") and "step_overhead_total_s" in FORMULAS["prefill_s"]
    budget = "MAX(max_batched_tokens,prefill_tokens)"
    assert FORMULAS["prefill_gpu_s"].endswith(f")*prefill_tokens/{budget},prefill_s)")
    assert FORMULAS["prefill_gpu_s"].count(f"{budget}+flops_half_tokens") == 1
    assert xlsx_formulas.excel_of(roofline.prefill_s, prompt_tokens="P+1", params="n") == (
        "MAX(weight_bytes/bandwidth,(P+1)*2*n/flops+attention_s)+step_overhead_s")
    with pytest.raises(ValueError, match="no Excel formula"):
        xlsx_formulas.excel_text(engines.activation_peak_bytes)


@pytest.mark.parametrize("key", list(scenarios()))
def test_prefill_gpu_s_is_the_share_the_library_charges_each_request(key):
    """The workbook's ``prefill_gpu_s`` (its cached value, from the library's functions) rebuilds the library's
    GPU time per request exactly: ``t_gpu + A t_step / B_max``."""
    report = report_for(scenarios()[key])
    values, results = intermediate_values(report), report.results
    rebuilt = roofline.gpu_time_per_request_s(values["prefill_gpu_s"], results["decode_step_s"],
                                              results["batch_max"], report.scenario.workload.output_tokens)
    assert float(rebuilt) == results["gpu_time_per_request_s"]
    batched = report.scenario.serving.batched_prefill
    assert (values["prefill_gpu_s"] < results["prefill_s"]) if batched else (
        values["prefill_gpu_s"] == results["prefill_s"])


def test_a_result_without_a_formula_is_the_library_value_and_says_so(monkeypatch):
    """Never a silently different number: a result the workbook cannot express is the library's value, labelled."""
    monkeypatch.delitem(FORMULAS, "goodput_rps")
    report = report_for(scenarios()["essay-001-tensorrt-llm"])
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)))
    cell = named_cells(wb)["goodput_rps"]
    assert math.isclose(cell.value, report.results["goodput_rps"], rel_tol=1e-15)
    assert cell.comment.text == xlsx_writer.NO_FORMULA
    assert wb["Results"].cell(cell.row, 4).value.startswith(xlsx_writer.NO_FORMULA)


def test_speculative_decoding_is_the_library_value_and_says_so():
    """Speculative decoding (issue 29) makes the decode step an iteration per accepted token, which the formulas do
    not hold: every result is the library's value, labelled, never a workbook recomputation without the drafter."""
    raw = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": {"engine": "vllm", "speculative": {
        "method": "eagle", "draft_tokens": 3, "acceptance_length": 2.5}},
           "workload": {"prompt_tokens": 1000, "output_tokens": 300, "arrival_rate": 10}, "slo": {"tpot": "20 ms"}}
    scenario = Scenario.from_dict(raw)
    assert any("speculative decoding" in reason for reason in xlsx_writer.unexpressed(scenario))
    report = report_for(scenario)
    cells = named_cells(openpyxl.load_workbook(io.BytesIO(workbook_bytes(report))))
    for key in ("goodput_rps", "tpot_at_load_s", "ceiling_rps"):
        assert math.isclose(cells[key].value, report.results[key], rel_tol=1e-12), key
        assert cells[key].comment.text == xlsx_writer.NO_FORMULA
