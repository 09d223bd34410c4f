"""1,200 malformed scenarios through `capacity evaluate`: each exits 2 with one line per problem, no traceback;
then 150 hostile files through every subcommand, each in a child process under time and memory limits.

Each of the 1,200 cases starts from a valid scenario and applies one mutation that makes it invalid for sure: a
required key removed, a number replaced by garbage (wrong type, wrong unit, negative, zero, NaN,
infinity, huge, unicode), an unknown key, or a section that is not a mapping. The hostile files add what no YAML
dump produces: alias bombs, recursive aliases, huge integers, lone surrogates, duplicate keys, deep nesting,
control characters in keys and thousands of unknown keys (``tests/cli/test_hostile.py`` has the named cases).
"""

import json
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


# --- hostile mutations through every subcommand, each in a child process under time and memory limits --------

#: Text-level mutations no YAML dump produces: each makes the file invalid for every subcommand.
def _bomb(levels: int) -> str:
    lines = ["  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "description:\n" + "\n".join(lines) + "\n"


HOSTILE = [
    lambda t, r: t + _bomb(r.randint(6, 12)),                                             # alias bomb
    lambda t, r: t.replace("block_size: 16", "block_size: " + "9" * r.randint(31, 3000)),  # huge integer
    lambda t, r: t.replace('"fuzz base"', f'"fuzz \\ud{r.choice("89ab")}00 base"'),       # lone surrogate
    lambda t, r: t + r.choice(["model", "gpu", "serving", "workload", "slo"]) + ": {}\n",  # duplicate key
    lambda t, r: t + "description: " + "[" * r.randint(40, 400) + "]" * r.randint(0, 400) + "\n",  # deep
    lambda t, r: t.replace("serving:\n", "serving:\n  " + json.dumps("k" + "".join(        # control characters
        r.choice("\n\r\t\x1b\x7f\u202e\u2028ab") for _ in range(8))) + ": 1\n"),
    lambda t, r: t + "".join(f"unknown_{i}: {'v' * r.randint(1, 50)}\n" for i in range(r.randint(25, 3000))),
    lambda t, r: t.replace("serving:\n", "serving: &s\n  loop: *s\n"),                   # recursive alias
]


def hostile_text(rng: random.Random) -> str:
    text = yaml.safe_dump(VALID, allow_unicode=True, sort_keys=False)
    text = text.replace("name: fuzz base", 'name: "fuzz base"')
    return HOSTILE[rng.randrange(len(HOSTILE))](text, rng)


def test_hostile_mutations_through_every_subcommand_under_limits(tmp_path):
    """150 hostile files, each through one subcommand in a forked child (1 GiB beyond its size, 10 s CPU):
    exit 2, at most 21 printable lines of at most 400 characters, under a second of CPU."""
    from tests.limits import run_forked

    rng = random.Random(18)
    bench = tmp_path / "bench.csv"
    bench.write_text("prompt_tokens,output_tokens,batch_size,tpot_ms\n1000,300,1,9.5\n1000,300,8,10.5\n")
    commands = [["evaluate", "{}", "--format", "json"], ["simulate", "{}"],
                ["sweep", "{}", "--vary", "workload.prompt_tokens=100:2000:5"],
                ["fleet", "{}", "--target-rps", "5"], ["calibrate", "{}", str(bench)],
                ["search", "{}", "--tp", "1", "--max-num-seqs", "64", "--chunked", "off", "--requests", "50",
                 "--workers", "1"]]
    for i in range(150):
        path = tmp_path / f"h{i}.yaml"
        path.write_text(hostile_text(rng), encoding="utf-8")
        argv = [str(path) if a == "{}" else a for a in commands[i % len(commands)]]
        outcome = run_forked(argv)
        assert outcome.code == 2, (i, argv, outcome.describe())
        lines = outcome.stderr.splitlines()
        assert 1 <= len(lines) <= 21, (i, outcome.describe())
        assert all(line.startswith("capacity: error: ") and len(line) < 400 and line.isprintable()
                   for line in lines), (i, outcome.describe())
        assert outcome.stdout == "" and outcome.cpu_s < 1.0, (i, outcome.describe())
