"""`capacity sweep`: a grid of scenarios evaluated in one vectorised call, each row equal to the scalar path."""

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from capacity import RESULTS, load_scenario
from capacity.cli import main
from capacity.inputs import engines
from capacity.model import frame as frame_module
from capacity.planning import sweep as sweep_module
from capacity.planning.sweep import parse_vary, run_sweep, sweep_bytes

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
ESSAY000 = SCENARIOS / "essay-000-paging.yaml"
ESSAY001 = SCENARIOS / "essay-001-sale-day.yaml"
CHAT = SCENARIOS / "chat-llama-3.1-8b-h100.yaml"


def same(a, b) -> bool:
    if isinstance(b, str):
        return a == b
    if b is None or not math.isfinite(b):
        return a is None or a is pd.NA or (isinstance(a, float) and math.isnan(a))
    return math.isclose(float(a), b, rel_tol=1e-12, abs_tol=1e-15)


def test_essay_000_utilisation_sweep_gives_the_essays_counts():
    table = run_sweep(load_scenario(ESSAY000), ["serving.memory_utilization=0.7:0.9:3"])
    assert table["memory_utilization"].tolist() == pytest.approx([0.7, 0.8, 0.9])
    assert table["max_requests_paged"].tolist() == [181, 217, 253]  # essay 000: 181 at 0.70, 253 at 0.90
    # 217 by hand: floor((80 x 0.8 - 16) GiB / 2 MiB) = 24,576 blocks; // 113 blocks per request = 217
    assert table["pool_blocks"].tolist()[1] == 24_576


def test_every_row_equals_the_scalar_scenario():
    scenario = load_scenario(ESSAY001)
    table = run_sweep(scenario, ["serving.memory_utilization=0.6:0.95:3", "slo.tpot=30ms:90ms:4",
                                 "workload.prompt_tokens=500:2000:2"])
    assert len(table) == 3 * 4 * 2
    for row in table.to_dict("records"):
        changed = scenario.with_changes(serving={"memory_utilization": row["memory_utilization"]},
                                        slo={"tpot_s": row["tpot_slo_s"]},
                                        workload={"prompt_tokens": int(row["prompt_tokens"])})
        expected = changed.evaluate().values
        assert {k: (row[k], expected[k]) for k in RESULTS if not same(row[k], expected[k])} == {}


def test_analyse_runs_once_per_chunk_of_the_grid(monkeypatch):
    calls = []
    real = frame_module.analyse
    # Rows of the slice: inputs constant over it come as scalars (frame.evaluate_arrays), the varied ones as arrays.
    monkeypatch.setattr(frame_module, "analyse", lambda x, text=True: calls.append(
        np.broadcast_shapes(*(np.shape(v) for v in x.values()))[0]) or real(x, text))
    run_sweep(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:5", "prompt_tokens=100:1000:10"])
    assert calls == [50]
    calls.clear()
    data = sweep_bytes(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:5", "prompt_tokens=100:1000:10"], "csv")
    streamed = io.BytesIO()
    sweep_module.run_to(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:5", "prompt_tokens=100:1000:10"], "csv",
                        streamed, chunk_rows=16, progress=False)
    # the grid is never evaluated whole (chunks may run on several threads, so in any order); no byte changes
    assert calls[0] == 50 and sorted(calls[1:]) == [2, 16, 16, 16]
    assert streamed.getvalue() == data


def test_scenario_paths_and_flat_names_agree():
    scenario = load_scenario(ESSAY001)
    dotted = run_sweep(scenario, ["serving.step_overhead=1ms:5ms:3"])
    flat = run_sweep(scenario, ["step_overhead_s=0.001:0.005:3"])
    pd.testing.assert_frame_equal(dotted, flat)
    assert dotted["step_overhead_s"].tolist() == pytest.approx([0.001, 0.003, 0.005])


def test_gpu_bandwidth_path_is_peak_and_takes_the_scenarios_efficiency():
    # h100-sxm: 3.35 TB/s peak x the scenario's efficiency (no engine named: vLLM's profile, the hopper plateau)
    scenario = load_scenario(CHAT)
    e = scenario.gpu.bandwidth_efficiency
    assert e == engines.FITTED_EFFICIENCY["hopper"][0]
    axis = parse_vary("gpu.bandwidth=3.35TB/s:4.8TB/s:2", scenario)
    assert axis.input == "bandwidth"
    assert axis.values.tolist() == pytest.approx([3.35e12 * e, 4.8e12 * e])
    assert parse_vary("bandwidth=2.01e12:2.01e12:1", scenario).values.tolist() == [2.01e12]  # flat: effective


def test_units_in_ranges_never_confuse_gb_and_gib():
    scenario = load_scenario(ESSAY000)
    assert parse_vary("gpu.memory=40GiB:80GiB:2", scenario).values.tolist() == [40 * 2**30, 80 * 2**30]
    assert parse_vary("gpu.memory=40GB:80GB:2", scenario).values.tolist() == [40e9, 80e9]


def test_token_counts_are_whole_numbers():
    axis = parse_vary("workload.prompt_tokens=1000:1001:5", load_scenario(ESSAY001))
    assert axis.values.tolist() == [1000, 1001]


def test_rows_no_engine_would_accept_are_marked_and_blank():
    table = run_sweep(load_scenario(ESSAY001), ["workload.prompt_tokens=1000:40000:2"])
    assert table["problem"].tolist() == ["", "serving.max_model_len (32768) is shorter than one request "
                                             "(prompt + output = 40300 tokens)"]
    assert table.loc[0, "max_requests_paged"] == 328 and pd.isna(table.loc[1, "max_requests_paged"])
    table = run_sweep(load_scenario(ESSAY001), ["serving.memory_utilization=0.1:0.9:2"])
    assert "the weights (16.00 GB per GPU) do not fit in the usable memory (8.00 GB" in table["problem"][0]  # 0.1 x 80


@pytest.mark.parametrize("spec, message", [
    ("serving.memory_utilization=0.5:1.2:3", "serving.memory_utilization must be in (0, 1], got 1.2"),
    ("serving.memory_utilisation=0.5:0.9:3", "not a scenario key"),
    ("serving.memory_utilization=0.5:0.9", "must look like KEY=START:STOP:STEPS"),
    ("serving.memory_utilization=0.5:0.9:x", "STEPS must be a whole number"),
    ("serving.memory_utilization=0.5:0.9:1", "STEPS must be >= 2"),
    ("gpu.memory=40 parsecs:80GB:2", "not a bytes unit"),
    ("workload.prompt_tokens=0:100:3", "workload.prompt_tokens must be a whole number >= 1"),
])
def test_bad_vary_is_one_clear_line_and_exit_2(tmp_path, capsys, spec, message):
    out = tmp_path / "out.csv"
    assert main(["sweep", str(ESSAY001), "--vary", spec, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("capacity: error: ")
    assert not out.exists()


def test_too_many_grid_points_is_refused(monkeypatch):
    monkeypatch.setattr(sweep_module, "MAX_ROWS", 100)
    with pytest.raises(ValueError, match="the sweep has 121 grid points; the limit is 100"):
        run_sweep(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:11", "prompt_tokens=100:1100:11"])


def test_the_same_input_twice_is_refused():
    with pytest.raises(ValueError, match="same input twice"):
        run_sweep(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:2", "serving.memory_utilization=0.6:0.9:2"])


SPECS = ["--vary", "serving.memory_utilization=0.7:0.9:3", "--vary", "slo.tpot=40ms:60ms:3"]


@pytest.mark.parametrize("suffix", ["csv", "json", "xlsx", "parquet"])
def test_cli_writes_each_format_readably(tmp_path, suffix):
    out = tmp_path / f"sweep.{suffix}"
    assert main(["sweep", str(ESSAY001), *SPECS, "-o", str(out)]) == 0  # format from the suffix
    if suffix == "csv":
        table = pd.read_csv(out)
    elif suffix == "json":
        data = json.loads(out.read_text())
        assert data["units"]["pool_bytes"] == "B" and data["units"]["tpot_slo_s"] == "s"
        assert data["vary"] == ["serving.memory_utilization=0.7:0.9:3", "slo.tpot=40ms:60ms:3"]
        table = pd.DataFrame(data["rows"])
    elif suffix == "xlsx":
        table = pd.read_excel(out, sheet_name="Sweep")
        units = pd.read_excel(out, sheet_name="Units").set_index("column")["unit"]
        assert units["pool_bytes"] == "B"
    else:
        pyarrow = pytest.importorskip("pyarrow.parquet")
        meta = json.loads(pyarrow.read_schema(out).metadata[b"capacity"])
        assert meta["units"]["goodput_rps"] == "requests/s"
        table = pd.read_parquet(out)
    assert len(table) == 9 and list(table.columns[:2]) == ["memory_utilization", "tpot_slo_s"]
    assert table["max_requests_paged"].tolist()[-3:] == [328, 328, 328]  # essay 001 at 0.90
    assert table["pool_bytes"].tolist()[-1] == 56e9  # decimal bytes, base units
    row = table[np.isclose(table["memory_utilization"], 0.9) & np.isclose(table["tpot_slo_s"], 0.05)]
    assert round(float(row["goodput_rps"].iloc[0]), 1) == 5.9  # essay 001: 5.9 requests/s under TPOT <= 50 ms


def test_cli_csv_to_stdout_and_binary_formats_need_a_file(capsys):
    assert main(["sweep", str(ESSAY001), *SPECS]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(frame) == 9
    assert main(["sweep", str(ESSAY001), *SPECS, "--format", "xlsx"]) == 2
    assert "give -o FILE.xlsx" in capsys.readouterr().err


def test_cli_unwritable_output_leaves_no_partial_file(tmp_path, capsys):
    target = tmp_path / "missing" / "sweep.xlsx"
    assert main(["sweep", str(ESSAY001), *SPECS, "-o", str(target)]) == 2
    assert f"cannot write {target}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_sweep_needs_a_vary(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(ESSAY001)])
    assert exit_.value.code == 2 and "--vary" in capsys.readouterr().err


def test_json_rows_use_null_for_undefined():
    data = json.loads(sweep_bytes(load_scenario(ESSAY000), ["memory_utilization=0.8:0.9:2"], "json"))
    assert all(row["cost_per_million_tokens"] is None for row in data["rows"])  # essay 000 has no price
    assert "Infinity" not in json.dumps(data) and "NaN" not in json.dumps(data)


def test_engine_reserves_and_pipeline_stages_count_in_the_sweep_as_in_evaluate():
    """Issue 12: with 40 GB of activation reserve, llama-3-8b (16.06 GB of fp16 weights) on an H100 SXM (85.52 GB
    as the device reports it) has no KV pool below utilisation (16.06 + 40) / 85.52 = 0.656; ``evaluate``
    rejects those rows, so the sweep must mark them (it used to ignore reserves and pipeline stages)."""
    data = {"name": "reserve", "model": {"name": "llama-3-8b", "weight_dtype": "fp16"},
            "gpu": {"name": "h100-sxm", "count": 1}, "serving": {"activation_memory": "40 GB"},
            "workload": {"prompt_tokens": 1000, "output_tokens": 300}}
    from capacity import Scenario, ScenarioError

    table = run_sweep(Scenario.from_dict(data), ["serving.memory_utilization=0.5:0.9:5"])
    for util, problem, pool in zip(table["memory_utilization"], table["problem"], table["pool_bytes"], strict=True):
        try:
            Scenario.from_dict({**data, "serving": {**data["serving"], "memory_utilization": float(util)}})
            accepted = True
        except ScenarioError:
            accepted = False
        assert (problem == "") == accepted, (util, problem)
        assert accepted == (util > 0.656)  # by hand: (16.06 GB + 40 GB) / 85.52 GB = 0.656
        assert pd.isna(pool) or pool > 0
    # Two pipeline stages halve the weights per GPU: (8.03 + 40) / 85.52 = 0.562 is then the edge.
    staged = {**data, "gpu": {"name": "h100-sxm", "count": 1, "pipeline_parallel": 2}}
    table = run_sweep(Scenario.from_dict(staged), ["serving.memory_utilization=0.5:0.9:5"])
    assert [p == "" for p in table["problem"]] == [False, True, True, True, True]
