"""Bad input to the simulator gets one clear line naming the field or the file and line; good traces run.

Trace files: missing columns, negative lengths, times out of order and requests longer than
max_model_len are ScenarioErrors naming the line; the simulation block's errors name the
field path. ``capacity simulate`` exits 2 with one line per problem.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from capacity import Scenario, ScenarioError
from capacity.simulator import simulate

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

BASE = {
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
    "serving": {"block_size": 16, "max_model_len": 4096, "step_overhead": "3 ms"},
    "workload": {"prompt_tokens": 500, "output_tokens": 100, "arrival_rate": 2},
}


def scenario(**simulation) -> Scenario:
    return Scenario.from_dict({**BASE, "simulation": simulation})


def trace_error(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        simulate(scenario(arrival="trace", trace=str(path)))
    return str(info.value)


@pytest.mark.parametrize("name, text, expected", [
    ("t.csv", "arrival_s,prompt_tokens\n0,10\n", "t.csv line 1: missing column(s) output_tokens"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,-3,5\n", "t.csv line 3: prompt_tokens must be a "
                                                                          "whole number >= 1, got '-3'"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,2.5\n", "line 3: output_tokens must be a whole"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n2,10,5\n1,10,5\n",
     "t.csv line 4: arrival_s 1 is earlier than line 3's 2; a trace must be in arrival order"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,4000,200\n",
     "t.csv line 3: prompt_tokens + output_tokens = 4,200 exceeds serving.max_model_len (4,096)"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,ten,5\n", "line 2: prompt_tokens must be a whole number"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,5,a,20\n",
     "line 2: prefix_tokens (20) exceeds prompt_tokens (10)"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n", "t.csv: the trace has no requests"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1, "prompt_tokens": 10}\n',
     "t.jsonl line 2: missing output_tokens"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n{oops\n', "t.jsonl line 2: not valid JSON"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": -1, "output_tokens": 5}\n',
     "t.jsonl line 1: prompt_tokens must be a whole number >= 1, got -1"),
])
def test_bad_traces_name_the_line(tmp_path, name, text, expected):
    assert expected in trace_error(tmp_path, name, text)


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match="simulation.trace: cannot read .*nope.csv"):
        simulate(scenario(arrival="trace", trace=str(tmp_path / "nope.csv")))


def test_trace_replays_arrivals_lengths_prefixes_and_priorities(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,priority\n"
                                    "100.0,300,20,sys,256,0\n100.5,300,1,sys,256,1\n101.0,40,3,,,0\n",
                                    encoding="utf-8")
    result = simulate(scenario(arrival="trace", trace="t.csv", cost_model="teaching"), base_dir=tmp_path)
    df = result.requests
    assert df["arrival_s"].tolist() == [0.0, 0.5, 1.0]  # times relative to the first line
    assert df["output_tokens"].tolist() == [20, 1, 3] and (df["status"] == "completed").all()
    assert df.loc[1, "tpot_s"] != df.loc[1, "tpot_s"]  # one-token answer: no TPOT (NaN)
    # the second request finds the 16 full blocks of prefix 'sys' cached: 256 of its 300 tokens
    assert result.summary()["prefix_cache_hit_rate"] == pytest.approx(256 / (300 + 300 + 40))


@pytest.mark.parametrize("simulation, expected", [
    ({"policy": "x"}, "simulation.policy must be one of static, continuous, got 'x'"),
    ({"cost_model": "gpu"}, "simulation.cost_model must be one of teaching, roofline, got 'gpu'"),
    ({"polcy": "static"}, "simulation.polcy is not a known key; did you mean policy?"),
    ({"requests": 0}, "simulation.requests must be a whole number >= 1, got 0"),
    ({"rate": -1}, "simulation.rate must be > 0, got -1"),
    ({"arrival": "trace"}, "simulation.trace is missing"),
    ({"prompt_tokens": {"dist": "uniform", "low": 10, "high": 5}}, "simulation.prompt_tokens.high (5) must be >= "
                                                                   "simulation.prompt_tokens.low (10)"),
    ({"output_tokens": {"dist": "normal"}}, "simulation.output_tokens.dist must be one of fixed, uniform, lognormal"),
    ({"chunked_prefill": "yes"}, "simulation.chunked_prefill must be true or false, got 'yes'"),
    ({"priorities": [0, 1], "priority_weights": [1]}, "simulation.priority_weights has 1 entries"),
    ({"shared_prefix_tokens": 900}, "simulation.shared_prefix_tokens (900) must not exceed the longest prompt"),
    ({"decode_base": "18 parsecs"}, "simulation.decode_base has unit 'parsecs'"),
])
def test_bad_simulation_block_names_the_field(simulation, expected):
    with pytest.raises(ScenarioError) as info:
        simulate(scenario(**simulation))
    assert expected in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ScenarioError) as info:
        simulate(scenario(policy="x", requests=-2))
    assert len(info.value.problems) == 2


def test_rate_defaults_to_the_workload_and_must_exist():
    no_rate = {**BASE, "workload": {"prompt_tokens": 500, "output_tokens": 100}}
    with pytest.raises(ScenarioError, match="simulation.rate is missing"):
        simulate(Scenario.from_dict(no_rate))
    assert simulate(Scenario.from_dict(no_rate), arrival="instant", requests=3).summary()["requests_completed"] == 3


def test_teaching_constants_can_be_overridden():
    s = scenario(cost_model="teaching", arrival="instant", requests=1, decode_base="10 ms", decode_per_seq="0 ms",
                 prefill_per_token="0.01 ms")
    row = simulate(s).requests.iloc[0]  # 500-token prefill then 99 decode steps of 10 ms
    # plus the default engine's request latency outside the engine, on the first token and so on the answer
    latency = s.serving.request_latency_s
    assert latency > 0
    assert row["ttft_s"] == pytest.approx(5e-3 + latency) and row["e2e_s"] == pytest.approx(5e-3 + 99 * 10e-3 + latency)
    none = simulate(s.with_changes(serving={"request_latency_s": 0.0})).requests.iloc[0]
    assert none["ttft_s"] == pytest.approx(5e-3) and none["e2e_s"] == pytest.approx(5e-3 + 99 * 10e-3)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "capacity", "simulate", *args], capture_output=True, text=True)


def test_cli_prints_the_summary_as_json(scenario_dir):
    result = run_cli(str(scenario_dir / "sim-essay-000-continuous.yaml"))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["requests_submitted"] == 40 and summary["policy"] == "continuous"
    for key in ("mean_ttft_s", "p99_ttft_s", "p99_tpot_s", "max_itl_s", "throughput_rps", "output_tokens_per_s",
                "padding_slot_steps", "slot_utilization", "preemptions", "prefix_cache_hit_rate"):
        assert key in summary


def test_cli_csv_has_one_row_per_request_and_set_overrides(scenario_dir, tmp_path):
    out = tmp_path / "rows.csv"
    result = run_cli(str(scenario_dir / "sim-essay-000-static.yaml"), "--format", "csv", "-o", str(out),
                     "--set", "requests=12", "--set", "policy=continuous")
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith("request_id,arrival_s,prompt_tokens,output_tokens") and len(lines) == 13


@pytest.mark.parametrize("args, expected", [
    (["--set", "policy=x"], "capacity: error: simulation.policy must be one of static, continuous, got 'x'"),
    (["--set", "policy"], "capacity: error: --set 'policy' must look like KEY=VALUE"),
])
def test_cli_bad_input_exits_2_with_one_line(scenario_dir, args, expected):
    result = run_cli(str(scenario_dir / "sim-essay-000-static.yaml"), *args)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(expected)
