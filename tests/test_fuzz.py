"""1,200 malformed scenarios through `capacity evaluate`: each exits 2 with one line per problem, no traceback.

Each case starts from a valid scenario and applies one mutation that makes it invalid for sure: a
required key removed, a number replaced by garbage (wrong type, wrong unit, negative, zero, NaN,
infinity, huge, unicode), an unknown key, or a section that is not a mapping.
"""

import random
import subprocess
import sys

import pytest
import yaml

from capacity.cli import main

VALID = {
    "name": "fuzz base",
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB", "kv_dtype": "fp16"},
    "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s", "price_per_hour": 2.0},
    "serving": {"memory_utilization": 0.9, "block_size": 16, "max_model_len": 8192, "step_overhead": "3 ms"},
    "workload": {"prompt_tokens": 1000, "output_tokens": 300, "shared_prefix_tokens": 0},
    "slo": {"tpot": "50 ms", "ttft": "2 s"},
}
REQUIRED = [("model", "layers"), ("model", "kv_heads"), ("model", "head_dim"), ("model", "params"),
            ("gpu", "memory"), ("gpu", "bandwidth"), ("gpu", "flops"), ("workload", "prompt_tokens"),
            ("workload", "output_tokens")]
#: Values no field accepts.
GARBAGE = ["", "lots", "80 parsecs", "ΩΩΩ 80 GB", "💥", [], [1, 2], {"a": 1}, True, False, -1, -1e9, float("nan"),
           float("inf"), float("-inf"), "1e400 GB", "NaN", "-5 ms", "80 GB/s/s", "80e", "\x00", "∞", 10**30]


def mutate(rng: random.Random) -> dict:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in VALID.items()}
    kind = rng.randrange(5)
    if kind == 0:
        section, key = rng.choice(REQUIRED)
        del data[section][key]
    elif kind == 1:
        section = rng.choice(["model", "gpu", "serving", "workload", "slo"])
        key = rng.choice([k for k in data[section] if k not in ("name", "kv_dtype", "price_per_hour")])
        value = rng.choice(GARBAGE)
        if key in ("shared_prefix_tokens",) and value is False:
            value = -1  # False would read as a valid 0 for a count elsewhere; keep it garbage
        data[section][key] = value
    elif kind == 2:
        section = rng.choice(["model", "gpu", "serving", "workload", "slo"])
        data[section]["".join(rng.choice("abcxyzé_") for _ in range(rng.randint(1, 12))) + "_unknown"] = 1
    elif kind == 3:
        data[rng.choice(["model", "gpu", "workload"])] = rng.choice([42, [1, 2], "no-such-catalog-entry-ü", True])
    else:
        data["serving"]["memory_utilization"] = rng.choice([0, 1.5, -0.2, 2, 1e300])
    return data


def test_a_thousand_malformed_scenarios_each_get_exit_2_and_clear_lines(tmp_path, capsys):
    rng = random.Random(20261130)
    path = tmp_path / "fuzz.yaml"
    checked = 0
    for i in range(1200):
        data = mutate(rng)
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
        code = main(["evaluate", str(path), "--format", "json"])
        out, err = capsys.readouterr()
        assert code == 2, (i, data, out[:200], err)
        lines = err.strip().splitlines()
        assert lines and all(line.startswith("capacity: error: ") and len(line) < 400 for line in lines), (i, err)
        assert "Traceback" not in err and out == ""
        checked += 1
    assert checked == 1200


def test_garbage_files_are_rejected_without_traceback(tmp_path, capsys):
    cases = {"binary.yaml": bytes(range(256)), "empty.yaml": b"", "list.yaml": b"- 1\n- 2\n",
             "tabs.yaml": b"model:\n\t- x\n", "deep.yaml": b"[" * 5000, "alias.yaml": b"a: &x [*x]\n"}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert main(["evaluate", str(path)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("capacity: error: ") and "Traceback" not in err, (name, err)


def test_an_oversized_file_is_refused(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * 2_000_000 + b"\n")
    assert main(["evaluate", str(path)]) == 2
    assert "limited to 1,000,000 bytes" in capsys.readouterr().err


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_console_script_path_gives_the_same_answer(tmp_path, seed):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(mutate(random.Random(seed)), allow_unicode=True), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "capacity", "evaluate", str(path)], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
