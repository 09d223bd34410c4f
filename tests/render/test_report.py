"""Sizing reports: one model as JSON and CSV with units and sources; JSON round-trips, CSV resists injection."""

import csv
import io
import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from capacity import INPUTS, RESULTS, Scenario, __version__, load_scenario
from capacity.cli import main
from capacity.planning.sizing import SIZING_RESULTS
from capacity.render.report import (
    build_report,
    csv_cell,
    neutralise,
    report_for,
    scenario_from_report_json,
    to_csv,
    to_json,
    to_json_dict,
)
from tests.shared_inputs import NOTHING_FITS, promise_too_tight

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

#: Scenarios beyond the shipped presets, chosen to reach every branch of the results: a TTFT-bound catalog model
#: with tensor parallelism, a batch capped by max_num_seqs in binary units, nothing fitting, a TPOT promise no
#: load can keep, MLA + MoE + all-reduce + replicas, and a sliding window + pipeline stages + engine reserves.
#: Kept here (not in scenarios/) so they do not become presets of the app.
EXTRA_SCENARIOS = {
    "mla-moe-deepseek-v3": """
name: deepseek-v3 fp8 on 8 x H200, 3 replicas
model: {name: deepseek-v3, weight_dtype: fp8, kv_dtype: bf16}
gpu: {name: h200, count: 8, replicas: 3}
serving: {memory_utilization: 0.92, block_size: 64, max_model_len: 16384, step_overhead: "5 ms"}
workload: {prompt_tokens: 3000, output_tokens: 600, shared_prefix_tokens: 1000, arrival_rate: 2}
slo: {tpot: "60 ms", ttft: "3 s"}
""",
    "window-pipeline-gemma-2": """
name: gemma-2-9b, 2 pipeline stages on L40S, prompts past the window
model: {name: gemma-2-9b, weight_dtype: bf16, kv_dtype: fp8}
gpu: {name: l40s, count: 1, pipeline_parallel: 2}
serving: {memory_utilization: 0.90, block_size: 16, max_model_len: 8192, step_overhead: "3 ms", max_num_seqs: 48,
          activation_memory: "1.5 GB", engine: ideal}
workload: {prompt_tokens: 6000, output_tokens: 400, shared_prefix_tokens: 2000, arrival_rate: 1}
slo: {tpot: "70 ms"}
""",
    "ttft-bound-70b": """
name: long prompts, llama-3-70b fp8 on 2 x H100 SXM
model: {name: llama-3-70b, weight_dtype: fp8, kv_dtype: fp8}
gpu: {name: h100-sxm, count: 2}
serving: {memory_utilization: 0.90, block_size: 16, max_model_len: 8192, step_overhead: "4 ms"}
workload: {prompt_tokens: 6000, output_tokens: 200, arrival_rate: 1.5}
slo: {tpot: "80 ms", ttft: "700 ms"}
""",
    "capped-batch": """
name: capped batch, explicit 8B model on 48 GiB
units: GiB
model: {name: my-8b, layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "15 GiB", kv_dtype: fp16}
gpu: {name: my-gpu, memory: "48 GiB", bandwidth: "0.9 TB/s", flops: "120 TFLOP/s", price_per_hour: 1.2}
serving: {memory_utilization: 0.92, block_size: 32, max_model_len: 4096, step_overhead: "2.5 ms", max_num_seqs: 64}
workload: {prompt_tokens: 700, output_tokens: 350, shared_prefix_tokens: 100, arrival_rate: 4}
slo: {tpot: "60 ms", ttft: "2 s"}
""",
    "nothing-fits": NOTHING_FITS,
    "promise-too-tight": promise_too_tight(),
}


def all_scenarios() -> dict[str, Scenario]:
    """Every shipped scenario file plus the extra ones above, by a short id."""
    found = {path.stem: load_scenario(path) for path in sorted(SCENARIOS.glob("*.yaml"))}
    found.update({key: Scenario.from_dict(yaml.safe_load(text)) for key, text in EXTRA_SCENARIOS.items()})
    return found


SCENARIO_IDS = list(all_scenarios())




def test_extra_scenarios_reach_every_binding():
    binds = {key: report_for(s).binding for key, s in all_scenarios().items()}
    assert binds["ttft-bound-70b"]["resource"] == "ttft_slo"
    assert binds["capped-batch"]["batch_limit"] == "max_num_seqs"
    assert binds["nothing-fits"]["resource"] == "kv_memory" and binds["nothing-fits"]["goodput_limit"] == "nothing_fits"
    assert binds["promise-too-tight"]["resource"] == "tpot_slo"
    assert binds["essay-000-paging"]["goodput_limit"] == "capacity"


class TestReportModel:
    def test_every_input_and_result_with_its_unit(self, essay001):
        report = build_report(essay001.evaluate(), date="2025-01-02")
        assert [q.key for q in report.inputs] == list(INPUTS)
        # The results of one replica as stated, then the one answer's (issue 27).
        assert [q.key for q in report.outputs] == [*RESULTS, *SIZING_RESULTS]
        assert all(q.unit == INPUTS[q.key][0] for q in report.inputs)
        assert all(q.unit == {**RESULTS, **SIZING_RESULTS}[q.key][0] for q in report.outputs)
        assert report.tool_version == __version__ and report.date == "2025-01-02"
        assert report.name == "essay 001 sale-day napkin"

    def test_essay_001_binding_is_the_tpot_promise_on_a_compute_bound_step(self, essay001):
        # 5.9 requests/s under TPOT <= 50 ms versus a 6.9 ceiling; at 328 the step is 35.0 ms compute > 32.7 memory
        binding = build_report(essay001.evaluate()).binding
        assert binding["resource"] == "tpot_slo"
        assert (binding["decode_bound"], binding["batch_limit"]) == ("compute", "kv_memory")
        assert "TPOT promise" in binding["summary"] and "328" in binding["summary"]

    def test_sources_name_the_catalog_or_the_user(self):
        s = load_scenario(SCENARIOS / "chat-llama-3.1-8b-h100.yaml")
        sources = {q.key: q.source for q in build_report(s.evaluate()).inputs}
        assert sources["layers"] == s.model.source and "huggingface.co" in sources["layers"]
        assert sources["gpu_memory_bytes"] == s.gpu.source
        assert sources["weight_bytes"].startswith("derived: params x 2 B")  # bf16 weights from the catalog params
        assert sources["memory_utilization"] == sources["prompt_tokens"] == "user"
        # no engine named: vLLM's profile sets the cap, and the report says where it came from
        assert sources["max_num_seqs"] == "engine profile: vllm: max_num_seqs 1024"

    def test_defaults_and_unset_options_say_so(self, essay000):
        report = build_report(essay000.evaluate())
        by_key = {q.key: q for q in report.inputs}
        assert by_key["gpu_count"].source == "default"
        for key in ("tpot_slo_s", "ttft_slo_s", "arrival_rate", "max_num_seqs", "price_per_hour"):
            assert by_key[key].value is None and by_key[key].source == "not set"

    def test_assumptions_state_units_overhead_and_efficiency(self, essay000):
        text = " | ".join(build_report(essay000.evaluate()).assumptions)
        assert "GiB (binary, 1 GiB = 2^30 B)" in text
        assert "0 ms per forward pass" in text
        assert "taken as effective (efficiency 1)" in text
        catalog = load_scenario(SCENARIOS / "chat-llama-3.1-8b-h100.yaml")
        # vLLM's profile (no engine named): the hopper plateau of engines.FITTED_EFFICIENCY
        plateau = catalog.gpu.bandwidth_efficiency
        assert f"x efficiency {plateau:g}" in " | ".join(build_report(catalog.evaluate()).assumptions)


class TestJson:
    def test_spec_keys_at_top_level_in_base_units(self, essay000):
        data = json.loads(to_json(report_for(essay000)))
        # essay 000, in binary units: 80 GiB x 0.9 - 16 GiB = 56 GiB = 28,672 blocks of 16 x 131,072 B
        assert data["pool_bytes"] == 56 * 2**30
        assert data["pool_blocks"] == 28_672 and data["max_requests_shared_prefix"] == 752
        assert data["result_units"]["pool_bytes"] == "B"
        assert data["inputs"]["gpu_memory_bytes"] == {"value": 80 * 2**30, "unit": "B", "source": "user"}
        assert data["scenario"]["units"] == "GiB" and data["scenario"]["gpu"]["memory"] == 80 * 2**30

    def test_keys_are_stable(self, essay001):
        data = to_json_dict(report_for(essay001, date="2025-01-02"))
        fixed = ["name", *RESULTS, *SIZING_RESULTS, "notes", "result_units", "inputs", "binding", "assumptions",
                 "tool_version", "date",
                 "scenario"]
        assert list(data) == fixed

    def test_undefined_results_are_null_not_infinity(self):
        text = to_json(report_for(all_scenarios()["nothing-fits"]))
        assert "Infinity" not in text and "NaN" not in text
        data = json.loads(text)
        assert data["max_requests_paged"] == 0 and data["tpot_at_ceiling_s"] is None
        assert data["cost_per_million_tokens"] is None

    @pytest.mark.parametrize("key", SCENARIO_IDS)
    def test_round_trip_gives_back_the_same_scenario(self, key):
        scenario = all_scenarios()[key]
        back = scenario_from_report_json(to_json(report_for(scenario)))
        assert back == scenario
        assert back.inputs() == scenario.inputs() or _same_with_nan(back.inputs(), scenario.inputs())
        assert back.evaluate().to_dict() == scenario.evaluate().to_dict()

    def test_round_trip_of_a_changed_scenario(self, essay001):
        changed = essay001.with_changes(serving={"memory_utilization": 0.8}, slo={"tpot_s": 0.07})
        assert scenario_from_report_json(to_json(report_for(changed))) == changed

    def test_round_trip_keeps_binary_units(self, essay000):
        back = scenario_from_report_json(json.loads(to_json(report_for(essay000))))
        assert back.units == "GiB" and back.gpu.memory_bytes == 80 * 2**30 and back.model.weight_bytes == 16 * 2**30

    def test_a_json_without_scenario_is_a_clear_error(self):
        with pytest.raises(ValueError, match="no 'scenario' object"):
            scenario_from_report_json('{"name": "x"}')
        with pytest.raises(ValueError, match="not valid JSON"):
            scenario_from_report_json("{")


def _same_with_nan(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


class TestCsv:
    def test_long_format_readable_by_pandas(self, essay001):
        frame = pd.read_csv(io.StringIO(to_csv(report_for(essay001))))
        assert list(frame.columns) == ["section", "quantity", "value", "unit", "source"]
        results = frame[frame.section == "result"].set_index("quantity")
        assert set(results.index) == set(RESULTS) | set(SIZING_RESULTS)
        assert float(results.loc["max_requests_paged", "value"]) == 328  # essay 001
        assert float(results.loc["pool_bytes", "value"]) == 56e9 and results.loc["pool_bytes", "unit"] == "B"
        inputs = frame[frame.section == "input"].set_index("quantity")
        assert float(inputs.loc["gpu_memory_bytes", "value"]) == 80e9  # "80 GB" is decimal

    def test_values_are_exact_and_units_unambiguous(self, essay000):
        rows = {(r["section"], r["quantity"]): r for r in _csv_rows(to_csv(report_for(essay000)))}
        assert rows["result", "pool_bytes"]["value"] == str(56 * 2**30) and rows["result", "pool_bytes"]["unit"] == "B"
        assert rows["input", "gpu_memory_bytes"]["value"] == str(80 * 2**30)
        assert rows["report", "byte_units"]["value"] == "GiB"
        value = float(rows["result", "decode_memory_s"]["value"])
        assert value == essay000.evaluate().decode_memory_s  # repr: no digits lost

    def test_injection_in_the_scenario_name_is_neutralised(self, essay001, tmp_path):
        attacks = ['=HYPERLINK("http://evil.example","click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
                   "\tTAB", "\rCR"]
        for attack in attacks:
            text = to_csv(report_for(_renamed(essay001, attack)))
            name_row = next(r for r in _csv_rows(text) if r["quantity"] == "name")
            assert name_row["value"] == "'" + attack  # OWASP: a leading quote makes the cell text
            cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
            assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for cell in cells)

    def test_numbers_stay_numbers(self):
        assert csv_cell(-3.5) == "-3.5" and csv_cell(253.0) == 253 and csv_cell(float("inf")) == ""
        assert csv_cell("-3.5") == "'-3.5"  # text that looks like a formula is text
        assert neutralise("essay 001") == "essay 001"

    def test_units_row_says_decimal_for_gb_scenarios(self, essay001):
        rows = {(r["section"], r["quantity"]): r for r in _csv_rows(to_csv(report_for(essay001)))}
        assert rows["report", "byte_units"]["value"] == "GB"
        assert "GB = 1e9 B" in rows["report", "byte_units"]["source"]


def _renamed(scenario: Scenario, name: str) -> Scenario:
    return replace(scenario, name=name)


class TestCommandLine:
    @pytest.mark.parametrize("fmt", ["json", "csv", "xlsx"])
    def test_evaluate_writes_each_format(self, tmp_path, fmt):
        out = tmp_path / f"report.{fmt}"
        assert main(["evaluate", str(SCENARIOS / "essay-001-sale-day.yaml"), "--format", fmt, "-o", str(out)]) == 0
        data = out.read_bytes()
        assert data.startswith(b"PK" if fmt == "xlsx" else b"{" if fmt == "json" else b"section,")

    def test_csv_to_stdout(self, capsys):
        assert main(["evaluate", str(SCENARIOS / "essay-001-sale-day.yaml"), "--format", "csv"]) == 0
        assert capsys.readouterr().out.startswith("section,quantity,value,unit,source")

    def test_xlsx_needs_an_output_file(self, capsys):
        assert main(["evaluate", str(SCENARIOS / "essay-001-sale-day.yaml"), "--format", "xlsx"]) == 2
        err = capsys.readouterr().err
        assert err.strip() == "capacity: error: --format xlsx writes a binary workbook: give -o FILE.xlsx"

    @pytest.mark.parametrize("fmt", ["json", "csv", "xlsx"])
    def test_unwritable_output_is_a_clear_error_with_no_partial_file(self, tmp_path, capsys, fmt):
        target = tmp_path / "no-such-dir" / f"out.{fmt}"
        assert main(["evaluate", str(SCENARIOS / "essay-000-paging.yaml"), "--format", fmt, "-o", str(target)]) == 2
        assert f"cannot write {target}" in capsys.readouterr().err
        assert not target.parent.exists()
        (tmp_path / "taken").mkdir()  # a directory where the file should go
        assert main(["evaluate", str(SCENARIOS / "essay-000-paging.yaml"), "--format", fmt, "-o",
                     str(tmp_path / "taken")]) == 2
        assert list(tmp_path.iterdir()) == [tmp_path / "taken"] and list((tmp_path / "taken").iterdir()) == []
