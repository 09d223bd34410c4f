"""The XLSX report: named input cells, live formulas named after the result keys, cached values equal the library's.

These tests read the file with openpyxl and need no spreadsheet engine; test_xlsx_libreoffice.py recalculates it.
"""

import functools
import io
import math
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import openpyxl
import pytest
import yaml
from xlsxwriter.worksheet import Worksheet

from capacity import INPUTS, RESULTS, Scenario
from capacity.model import analysis
from capacity.model import serving_modes as options
from capacity.render.report import flat_inputs, report_for
from capacity.render.xlsx import (
    FORMULAS,
    INTERMEDIATES,
    SOLVER_ITERATIONS,
    SOLVERS,
    intermediate_values,
    missing_formulas,
    solver_traces,
    trace_rows,
    workbook_bytes,
    write_xlsx,
)
from capacity.render.xlsx import cells as xlsx_cells
from capacity.render.xlsx.formulas import LIBRARY_VALUES
from tests.render.test_report import SCENARIO_IDS, all_scenarios

ROOT = Path(__file__).resolve().parents[2]
SPEC_KEYS = ("kv_bytes_per_token pool_bytes pool_blocks blocks_per_request max_requests_contiguous max_requests_paged "
             "max_requests_shared_prefix decode_memory_s decode_compute_s decode_step_s prefill_s ceiling_rps "
             "decode_share tpot_at_ceiling_s goodput_rps goodput_in_flight single_stream_tokens_per_s "
             "cost_per_million_tokens").split()


def named_cells(wb: openpyxl.Workbook) -> dict[str, openpyxl.cell.Cell]:
    """Each workbook-level defined name -> the one cell it refers to; for an input whose name converts human units to
    base units (``=IF(ISBLANK(Inputs!$B$7),...,Inputs!$B$7*1000000000)``), the editable human-unit cell."""
    cells = {}
    for name, defined in wb.defined_names.items():
        sheet, ref = re.search(r"'?(\w+)'?!(\$[A-Z]+\$\d+)", defined.attr_text).groups()
        cells[name] = wb[sheet][ref.replace("$", "")]
    return cells


def base_cells(wb: openpyxl.Workbook) -> dict[str, openpyxl.cell.Cell]:
    """Each input -> its cell in base units (the Inputs sheet's "value in base units" column, the library's value)."""
    sheet = wb["Inputs"]
    return {row[0].value: row[5] for row in sheet.iter_rows(min_row=2) if row[0].value in INPUTS}


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


def test_inputs_are_edited_in_human_units_and_named_in_base_units(essay001_book):
    _, wb = essay001_book
    cells, base = named_cells(wb), base_cells(wb)
    human = {"s": "ms", "B": "GB", "B/s": "GB/s", "FLOP/s": "TFLOP/s"}  # essay 001 is in decimal GB
    for key, (unit, _) in INPUTS.items():
        assert cells[key].parent.title == "Inputs"
        assert cells[key].offset(column=-1).value == key
        assert cells[key].offset(column=1).value == (unit if key == "kv_bytes_per_value" else human.get(unit, unit))
    assert cells["gpu_memory_bytes"].value == 80 and base["gpu_memory_bytes"].value == 80e9  # "80 GB", decimal
    assert cells["tpot_slo_s"].value == 50 and base["tpot_slo_s"].value == 0.05  # "50 ms"
    assert cells["step_overhead_s"].value == 3 and cells["bandwidth"].value == 2000 and cells["flops"].value == 150
    assert cells["ttft_slo_s"].value is None and cells["max_num_seqs"].value is None  # unset: blank
    assert wb.defined_names["gpu_memory_bytes"].attr_text == (
        "IF(ISBLANK(Inputs!$B$8),Inputs!$B$8,IF(Inputs!$B$8=Inputs!$G$8,Inputs!$F$8,Inputs!$B$8*1000000000))")
    assert wb.defined_names["tpot_slo_s"].attr_text.endswith("Inputs!$B$22/1000))")
    assert wb.defined_names["prompt_tokens"].attr_text == "Inputs!$B$18"  # tokens: no conversion


def test_results_are_formulas_over_the_names(essay001_book):
    _, wb = essay001_book
    cells = named_cells(wb)
    for key in [*RESULTS, *INTERMEDIATES]:
        solved = key in {solver.name for solver in SOLVERS}  # a root solve's result, on the Solver sheet
        assert cells[key].parent.title == ("Solver" if solved else "Results")
        if key in LIBRARY_VALUES:  # written as the library's value, labelled so (the closed loop)
            assert not str(cells[key].value).startswith("=")
            continue
        assert solved or cells[key].value == "=" + FORMULAS[key]
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
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)), data_only=True)
    cells = named_cells(wb)
    assert cells["pool_bytes"].value == 56 * 2**30 and base_cells(wb)["gpu_memory_bytes"].value == 80 * 2**30
    assert cells["gpu_memory_bytes"].value == 80 and cells["gpu_memory_bytes"].offset(column=1).value == "GiB"
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
    assert wb.sheetnames == ["Summary", "Report", "Inputs", "Results", "Solver"]


def test_unwritable_path_raises_and_leaves_nothing(tmp_path):
    report = report_for(all_scenarios()["essay-001-sale-day"])
    with pytest.raises(ValueError, match="cannot write"):
        write_xlsx(report, tmp_path / "missing" / "out.xlsx")
    assert list(tmp_path.iterdir()) == []
    write_xlsx(report, tmp_path / "out.xlsx")
    assert [p.name for p in tmp_path.iterdir()] == ["out.xlsx"]


# --- the Solver sheet: the library's root solves, one iteration per row ------------------------------------------

#: Scenarios that work the Solver sheet beyond test_report's: the TTFT promise binding a dense and a MoE model with
#: the serving options set (a small chunked-prefill budget, a KV link, a load), and a compute piece through the
#: origin (no step overhead), whose TPOT at the ceiling hangs on the sign of a rounding-size denominator.
# Each built to reach one solver case under the essays' convention (engine: ideal).
SOLVER_SCENARIOS = {
    "ttft-binds-options": """
name: TTFT promise binds; chunked budget 1024, KV link 50 GB/s
model: {layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "16 GB", kv_dtype: fp16}
gpu: {memory: "80 GB", bandwidth: "2 TB/s", flops: "150 TFLOP/s", price_per_hour: 2.0}
serving: {engine: ideal, memory_utilization: 0.90, block_size: 16, max_model_len: 8192, step_overhead: "3 ms",
          max_batched_tokens: 1024, kv_transfer_bandwidth: "50 GB/s"}
workload: {prompt_tokens: 3000, output_tokens: 200, arrival_rate: 2.5}
slo: {tpot: "80 ms", ttft: "600 ms"}
""",
    "moe-ttft-binds-options": """
name: mixtral-8x7b on 2 x H200, TTFT binds; chunked budget 2048, KV link 25 GB/s
model: {name: mixtral-8x7b, weight_dtype: bf16, kv_dtype: bf16}
gpu: {name: h200, count: 2}
serving: {engine: ideal, memory_utilization: 0.92, block_size: 16, max_model_len: 32768, step_overhead: "3 ms",
          max_batched_tokens: 2048, kv_transfer_bandwidth: "25 GB/s"}
workload: {prompt_tokens: 6000, output_tokens: 300, arrival_rate: 1.5}
slo: {tpot: "100 ms", ttft: "200 ms"}
""",
    "ttft-binds-request-latency": """
name: TTFT promise binds with 80 ms of request latency outside the engine
model: {layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "16 GB", kv_dtype: fp16}
gpu: {memory: "80 GB", bandwidth: "2 TB/s", flops: "150 TFLOP/s", price_per_hour: 2.0}
serving: {engine: ideal, memory_utilization: 0.90, block_size: 16, max_model_len: 8192, step_overhead: "3 ms",
          max_batched_tokens: 1024, kv_transfer_bandwidth: "50 GB/s", request_latency: "80 ms"}
workload: {prompt_tokens: 3000, output_tokens: 200, arrival_rate: 2.5}
slo: {tpot: "80 ms", ttft: "600 ms"}
""",
    "zero-overhead-at-ceiling": """
name: no step overhead, the compute piece through the origin at the ceiling
units: GiB
model: {layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "16 GiB", kv_dtype: fp16}
gpu: {memory: "80 GiB", bandwidth: "2 TB/s", flops: "150 TFLOP/s"}
serving: {engine: ideal, memory_utilization: 0.90, block_size: 16, max_model_len: 32768, step_overhead: "0 ms"}
workload: {prompt_tokens: 200, output_tokens: 1000, shared_prefix_tokens: 200, arrival_rate: 5}
slo: {tpot: "80 ms", ttft: "3 s"}
""",
}


def random_variants(count: int, seed: int) -> dict[str, Scenario]:
    """Scenarios varied at random (promises, load, budget, link, overhead, cap, request shape): inputs that need all
    17 digits, and solves that end anywhere in their range."""
    rng = random.Random(seed)
    base = all_scenarios()
    found: dict[str, Scenario] = {}
    while len(found) < count:
        key = rng.choice(sorted(base))
        s = base[key]
        prompt, output = rng.choice([1, 200, 1000, 2500, rng.randrange(2, 6000)]), rng.choice([50, 300, 1000])
        try:
            changed = s.with_changes(
                serving={"memory_utilization": rng.uniform(0.6, 0.95),
                         "max_batched_tokens": rng.choice([256, 1024, 8192, rng.randrange(64, 16384)]),
                         "kv_transfer_bandwidth": rng.choice([None, rng.uniform(1e9, 1e11)]),
                         "max_model_len": max(s.serving.max_model_len or 0, prompt + output),
                         "step_overhead_s": rng.choice([s.serving.step_overhead_s, 0.0, rng.uniform(0, 0.01)]),
                         "max_num_seqs": rng.choice([s.serving.max_num_seqs, rng.randrange(1, 300)])},
                workload={"prompt_tokens": prompt, "output_tokens": output,
                          "arrival_rate": rng.choice([None, rng.uniform(0.05, 15)]),
                          "shared_prefix_tokens": min(s.workload.shared_prefix_tokens, prompt)},
                slo={"tpot_s": rng.choice([None, rng.uniform(0.01, 0.15)]),
                     "ttft_s": rng.choice([None, rng.uniform(0.1, 5), rng.uniform(0.01, 0.5)])})
        except ValueError:
            continue
        found[f"random-{seed}-{len(found)}-{key}"] = changed
    return found


@functools.cache
def solver_scenarios() -> dict[str, Scenario]:
    """``SOLVER_SCENARIOS`` and ten random variants of the shipped and extra scenarios."""
    found = {key: Scenario.from_dict(yaml.safe_load(text)) for key, text in SOLVER_SCENARIOS.items()}
    found.update(random_variants(10, seed=2026))
    return found


SOLVER_IDS = list(solver_scenarios())


def test_solver_scenarios_reach_their_cases():
    values = {key: s.evaluate().values for key, s in solver_scenarios().items()}
    assert values["ttft-binds-options"]["goodput_limit"] == "ttft"
    assert values["moe-ttft-binds-options"]["goodput_limit"] == "ttft"
    assert values["ttft-binds-request-latency"]["goodput_limit"] == "ttft"
    for key in ("ttft-binds-options", "moe-ttft-binds-options", "ttft-binds-request-latency"):
        assert 0 < values[key]["chunked_goodput_rps"] and math.isfinite(values[key]["chunked_ttft_at_load_s"])
        assert values[key]["kv_transfer_s"] > 0 and math.isfinite(values[key]["disagg_ttft_at_load_s"])
    zero = values["zero-overhead-at-ceiling"]
    # At the ceiling TTFT is its limit from below (issue 12), finite and within the 3 s promise.
    assert zero["goodput_limit"] == "capacity" and 0 < zero["ttft_at_goodput_s"] <= 3.0
    assert any(flat_inputs(s)[k] != float(f"{flat_inputs(s)[k]:.16g}") for s in solver_scenarios().values()
               for k in INPUTS if math.isfinite(flat_inputs(s)[k]))  # some input needs all 17 digits


@pytest.mark.parametrize("key", SOLVER_IDS)
def test_solver_scenarios_cached_values_equal_the_library(key):
    report = report_for(solver_scenarios()[key])
    cells = named_cells(openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)), data_only=True))
    want = library_values(report)
    assert {k: (cells[k].value, want[k]) for k in NAMED_FORMULAS if not matches(cells[k].value, want[k])} == {}


@pytest.mark.parametrize("key", [*SCENARIO_IDS, *SOLVER_IDS])
def test_solver_rows_are_the_library_traces(key):
    """The Solver sheet's rows are the library's own solves (``analyse(..., trace=...)``): every solve that runs
    ends within the rows unrolled (the library's own cap), its answer is the library's result, and the rows the
    sheet caches end in the state the library stopped in."""
    scenario = {**all_scenarios(), **solver_scenarios()}[key]
    report = report_for(scenario)
    v, x = report.results.values, flat_inputs(scenario)
    traces, named = solver_traces(report), intermediate_values(report)
    for name, trace in traces.items():
        if trace.no_target:
            assert trace.steps == []
            continue
        assert len(trace.steps) <= SOLVER_ITERATIONS and (not trace.steps or trace.steps[-1]["done"])
        rows = trace_rows(trace, next(s.helpers for s in SOLVERS if s.name == name))
        assert len(rows) == SOLVER_ITERATIONS + 1 and rows[-1]["done"]
        if trace.steps:
            assert rows[-1]["x1"] == trace.steps[-1]["x1"] and rows[-1]["x2"] == trace.steps[-1]["x2"]
    assert named["solver_rate_ttft_rps"] == (v["max_rate_for_ttft_rps"] if math.isfinite(x["ttft_slo_s"]) else None)
    if named["moe_model"]:
        assert named["solver_rate_tpot_rps"] == (v["max_rate_for_tpot_rps"] if math.isfinite(x["tpot_slo_s"])
                                                 else None)
        load = named["solver_tpot_at_load_s"]
        past = (x["arrival_rate"] or 0) > v["ceiling_rps"]  # past the ceiling no TPOT (tests/model/test_latency_curve)
        assert (math.inf if past or load is None else load) == v["tpot_at_load_s"]
    terms = (v["prefill_tokens"], x["max_batched_tokens"], *(np.asarray(p) for piece in
                                                                 _pieces(report) for p in piece))
    batch = named["solver_chunk_batch_goodput"]
    plain, extra, _ = options.chunk_terms(batch, *terms)
    rate = options.chunked_rate_rps(batch, x["output_tokens"], plain, extra)
    assert float(rate) == v["chunked_goodput_rps"]
    if math.isfinite(v["chunked_tpot_at_load_s"]):
        batch = named["solver_chunk_batch_load"]
        plain, extra, _ = options.chunk_terms(batch, *terms)
        assert float(options.chunked_tpot_s(batch, x["output_tokens"], plain, extra)) == v["chunked_tpot_at_load_s"]


def _pieces(report):
    arrays = {k: np.asarray(value) for k, value in flat_inputs(report.scenario).items()}
    return analysis.step_model(arrays, np.asarray(report.results.values["context_tokens"]))[0].pieces()


def test_inputs_are_written_to_the_last_bit():
    """xlsxwriter writes numbers with 16 digits; the inputs carry all 17 (0.1 + 0.2 stays 0.30000000000000004)."""
    scenario = all_scenarios()["essay-001-sale-day"].with_changes(workload={"arrival_rate": 0.1 + 0.2})
    report = report_for(scenario)
    cells = named_cells(openpyxl.load_workbook(io.BytesIO(workbook_bytes(report))))
    assert cells["arrival_rate"].value == 0.30000000000000004
    for s in [s for key, s in solver_scenarios().items() if key.startswith("random-")][:4]:
        cells = base_cells(openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(s)))))
        assert all(cells[k].value == value for k, value in flat_inputs(s).items() if math.isfinite(value)
                   and not (k in ("arrival_rate", "concurrency", "think_time_s") and value == 0))  # unset: blank


def test_fast_formula_path_writes_what_xlsxwriter_would(monkeypatch):
    """The workbook skips xlsxwriter's scan for Excel 365 functions where a formula calls none; every formula comes
    out as xlsxwriter's own preparation would write it."""
    fast, seen = xlsx_cells.Worksheet._prepare_formula, []

    def checked(self, formula, expand_future_functions=False):
        got = fast(self, formula, expand_future_functions)
        assert got == Worksheet._prepare_formula(self, formula, expand_future_functions), formula
        seen.append(formula)
        return got

    monkeypatch.setattr(xlsx_cells.Worksheet, "_prepare_formula", checked)
    workbook_bytes(report_for(solver_scenarios()["moe-ttft-binds-options"]))
    assert len(seen) > 5000


def _answer_rows(data: dict) -> dict[str, tuple[str, object, str]]:
    """The Summary sheet's answer rows of ``data``'s workbook: ``sizing_*`` key -> (label, value, unit)."""
    book = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(Scenario.from_dict(data)))))
    return {r[3]: (r[0], r[1], r[2]) for r in book["Summary"].iter_rows(values_only=True)
            if len(r) > 3 and isinstance(r[3], str) and r[3].startswith("sizing_")}


def test_summary_names_the_prefill_pool_of_a_split_answer():
    """The chat preset at 40 requests/s on split pools: 3 L40S prefill replicas ($1.09/GPU-hour, 13.3 requests/s
    each) feed 1 H100 SXM decode replica ($3.49). Before, the Summary's fixed rows said "1 GPU per replica at $3.49"
    and the prefill pool's GPU, TP and price were nowhere on it; now each is a row, the library's value."""
    from capacity.planning.sizing import size

    data = yaml.safe_load((ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").read_text())
    data["workload"]["arrival_rate"] = 40
    data["pools"] = {"prefill": {"gpu": {"name": "l40s", "count": 1}}, "decode": {"gpu": {"name": "h100-sxm"}}}
    z = size(Scenario.from_dict(data)).to_dict()
    assert (z["sizing_mode"], z["sizing_prefill_gpu"], z["sizing_gpu"]) == ("split", "l40s", "h100-sxm")
    rows = _answer_rows(data)
    shown = {key: rows[key][:2] for key in rows if "prefill" in key or key in ("sizing_gpu", "sizing_decode_replicas")}
    assert shown == {"sizing_gpu": ("Decode pool: GPU type", "h100-sxm"),
                     "sizing_prefill_replicas": ("Prefill replicas", z["sizing_prefill_replicas"]),
                     "sizing_decode_replicas": ("Decode replicas", z["sizing_decode_replicas"]),
                     "sizing_prefill_gpu": ("Prefill pool: GPU type", "l40s"),
                     "sizing_prefill_tensor_parallel": ("Prefill pool: tensor-parallel GPUs per replica",
                                                        z["sizing_prefill_tensor_parallel"]),
                     "sizing_prefill_gpus_per_replica": ("Prefill pool: GPUs per replica",
                                                         z["sizing_prefill_gpus_per_replica"]),
                     "sizing_prefill_price_per_gpu_hour": ("Prefill pool: price per GPU-hour", 1.09),
                     "sizing_prefill_load_per_replica_rps": ("Prefill pool: load each replica carries",
                                                             pytest.approx(40 / 3, rel=1e-12))}
    assert rows["sizing_prefill_price_per_gpu_hour"][2] == "$/h" and rows["sizing_prefill_replicas"][1] == 3
    # the rows of the decode pool's layout say so; the fleet's totals (both pools) do not
    assert rows["sizing_price_per_gpu_hour"][:2] == ("Decode pool: price per GPU-hour", 3.49)
    assert rows["sizing_tensor_parallel"][0] == "Decode pool: tensor-parallel GPUs per replica"
    assert rows["sizing_gpus"] == ("GPUs", z["sizing_gpus"], "GPUs") and z["sizing_gpus"] == 4
    assert rows["sizing_cost_per_hour"][1] == pytest.approx(3 * 1.09 + 3.49, rel=1e-12) == z["sizing_cost_per_hour"]
    keys = list(rows)
    assert keys.index("sizing_gpus") < keys.index("sizing_prefill_gpu") < keys.index("sizing_load_per_replica_rps")


def test_summary_has_no_pool_rows_for_one_pool():
    data = yaml.safe_load((ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").read_text())
    rows = _answer_rows(data)
    assert rows["sizing_mode"][1] != "split" and not [key for key in rows if "prefill" in key or "decode" in key]
    assert rows["sizing_price_per_gpu_hour"][0] == "Price per GPU-hour"
