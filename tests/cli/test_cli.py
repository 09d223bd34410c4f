"""The command line: readable output with units, and one clear line per problem on bad input (exit 2)."""

import json
import subprocess
import sys

import pytest

from capacity import ScenarioError, parse_quantity
from capacity.cli import main

GOOD = """
model: {layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "16 GB"}
gpu: {memory: "80 GB", bandwidth: "2 TB/s", flops: "150 TFLOP/s"}
workload: {prompt_tokens: 1000, output_tokens: 300}
serving: {max_model_len: 4096}
"""


def run(tmp_path, text, *args):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "capacity", "evaluate", str(path), *args],
                          capture_output=True, text=True)


def test_table_shows_units(tmp_path):
    out = run(tmp_path, GOOD).stdout
    assert "56.00 GB" in out and "325 requests" in out  # 26,702 blocks // 82 and "ms" in out and "requests/s" in out


@pytest.mark.parametrize("text, expected", [
    (GOOD.replace('"80 GB"', '"-80 GB"'), "gpu.memory must be > 0"),
    (GOOD.replace('"80 GB"', '"80 parsecs"'), "gpu.memory has unit 'parsecs'"),
    (GOOD.replace("serving: {max_model_len: 4096}", "serving: {max_model_len: 4096, memory_utilization: 1.3}"),
     "serving.memory_utilization must be in (0, 1], got 1.3"),
    (GOOD + "serving: {memory_utilization: 0.8}\n", "the key 'serving' appears twice in one mapping"),
    (GOOD.replace("serving: {max_model_len: 4096}", "serving: {memory_utilization: 0}"),
     "serving.memory_utilization must be in (0, 1], got 0"),
    (GOOD.replace('"16 GB"', '"90 GB"'), "do not fit in the usable memory"),
    (GOOD.replace("layers: 32", "layers: -1"), "model.layers must be a whole number >= 1, got -1"),
    (GOOD.replace("layers: 32", "layers: 3.5"), "model.layers must be a whole number >= 1, got 3.5"),
    (GOOD.replace("prompt_tokens: 1000", "prompt_tokens: lots"), "workload.prompt_tokens must be a number"),
    (GOOD.replace("serving: {max_model_len: 4096}", "serving: {max_model_len: 512}"),
     "serving.max_model_len (512) is shorter than one request"),
    (GOOD + "slo: {tpot: 50}\nsolo: 1\n", "solo is not a known scenario section"),
    (GOOD.replace("kv_heads: 8,", "kv_heads: 8, kv_dtype: fp7,"), "model.kv_dtype 'fp7' is not a known dtype"),
    (GOOD.replace("bandwidth:", "bandwith:"), "gpu.bandwith is not a known key; did you mean bandwidth?"),
    ("model: [unclosed\n", "is not valid YAML at line"),
    ("just text", "a scenario must be a mapping"),
    ("model: {name: llama-3-8c}\ngpu: {name: h100-sxm}\nworkload: {prompt_tokens: 1, output_tokens: 1}\n",
     "did you mean"),
    ("model: {name: llama-3-8b}\ngpu: {name: h101}\nworkload: {prompt_tokens: 1, output_tokens: 1}\n",
     "gpu.name 'h101' is not in gpu_catalog.yaml"),
])
def test_bad_input_exits_2_with_one_line_naming_the_field(tmp_path, text, expected):
    result = run(tmp_path, text)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert all(line.startswith("capacity: error: ") for line in result.stderr.splitlines())


def test_every_problem_is_reported_at_once(tmp_path):
    text = GOOD.replace("layers: 32", "layers: 0").replace('"2 TB/s"', '"2 TB"').replace(
        "serving: {max_model_len: 4096}", "serving: {max_model_len: 4096, block_size: 0}")
    lines = run(tmp_path, text).stderr.splitlines()
    assert len(lines) == 3


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_unwritable_output_leaves_no_partial_file(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    assert main(["evaluate", str(path), "-o", str(tmp_path / "missing-dir" / "out.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--format", "json", "-o", str(tmp_path / "out.json")]) == 0
    assert (tmp_path / "out.json").read_text().startswith("{")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("text, kind, value", [
    ("80 GiB", "bytes", 80 * 2**30), ("80 GB", "bytes", 80e9), ("80GB", "bytes", 80e9), (80e9, "bytes", 80e9),
    ("512 MiB", "bytes", 2**29), ("2 TB/s", "bandwidth", 2e12), ("3.35 TB/s", "bandwidth", 3.35e12),
    ("900 GB/s", "bandwidth", 9e11), ("150 TFLOP/s", "flops", 1.5e14), ("1.979 PFLOP/s", "flops", 1.979e15),
    ("3 ms", "time", 0.003), ("2 s", "time", 2.0), ("250 us", "time", 2.5e-4), ("1e-3 s", "time", 1e-3),
])
def test_units_parse_to_base_units(text, kind, value):
    assert parse_quantity(text, kind) == pytest.approx(value)


@pytest.mark.parametrize("text, kind", [("80 GB/s", "bytes"), ("2 TB", "bandwidth"), ("3 ms", "bytes"),
                                        ("fast", "time"), ("1e400 GB", "bytes"), (True, "bytes"), ([], "time")])
def test_wrong_units_are_rejected(text, kind):
    with pytest.raises(ScenarioError):
        parse_quantity(text, kind, "field")


def test_a_scenario_can_name_a_calibrated_profile(tmp_path, monkeypatch, capsys):
    from capacity import Scenario
    from capacity.inputs.profiles import resolve_profile, save_profile

    monkeypatch.setenv("CAPACITY_PROFILES", str(tmp_path / "profiles.yaml"))
    save_profile("lab-h100", {"gpu": "h100-sxm", "bandwidth_efficiency": 0.5, "flops_efficiency": 0.4,
                              "step_overhead": "4 ms"})
    base = {"model": "llama-3.1-8b", "workload": {"prompt_tokens": 1000, "output_tokens": 200},
            "serving": {"max_model_len": 8192}}
    named = {**base, "gpu": {"name": "h100-sxm", "profile": "lab-h100"}}
    with pytest.raises(ScenarioError, match="gpu.profile 'lab-h100' names a calibrated profile"):
        Scenario.from_dict(named)  # the profile catalog is read where scenarios are loaded, not here
    profiled = Scenario.from_dict(resolve_profile(named))
    assert profiled.gpu.effective_bandwidth == 3.35e12 * 0.5
    assert profiled.gpu.effective_flops == 989.5e12 * 0.4
    assert profiled.serving.step_overhead_s == 0.004
    # The scenario's own keys win over the profile's.
    own = Scenario.from_dict(resolve_profile({**base, "gpu": {"name": "h100-sxm", "profile": "lab-h100",
                                                              "bandwidth_efficiency": 0.7}}))
    assert own.gpu.bandwidth_efficiency == 0.7
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3.1-8b\ngpu: {name: h100-sxm, profile: nope}\n"
                    "workload: {prompt_tokens: 10, output_tokens: 10}\n")
    assert main(["evaluate", str(path)]) == 2
    assert "nope" in capsys.readouterr().err
    path.write_text("model: llama-3.1-8b\ngpu: {name: h100-sxm, profile: lab-h100}\nserving: {max_model_len: 8192}\n"
                    "workload: {prompt_tokens: 1000, output_tokens: 200}\n")
    assert main(["evaluate", str(path), "--format", "json"]) == 0  # capacity evaluate reads the profile catalog
    assert json.loads(capsys.readouterr().out)["decode_step_s"] > 0
