"""Behaviour guard: every shipped scenario, and a grid of catalog models x GPUs, evaluates to pinned results.

``tests/data/pinned_results.json`` was generated from the code before the one-home refactor (issue 12) with
``python3 tests/model/test_pinned_results.py --write``. A refactor that moves a number fails here; an intentional
change of the model regenerates the file and says in its commit which values moved and why.
Numbers compare with rtol 1e-12; text results compare equal; non-finite values are stored as text.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from capacity import load_scenario
from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.model.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "tests" / "data" / "pinned_results.json"
RTOL = 1e-12

#: The grid's workload: a chat shape with both promises, a shared prefix and a load, so every result is exercised.
GRID_WORKLOAD = {"prompt_tokens": 1500, "output_tokens": 300, "shared_prefix_tokens": 500, "arrival_rate": 2.0}
GRID_SLO = {"tpot": 0.05, "ttft": 1.0}
GRID_COUNTS = (1, 4)
#: Layouts the grid misses: MLA (deepseek-v3), 8-way tensor parallel, pipeline stages, fp8 KV, a batch cap.
EXTRA = {
    "deepseek-v3-fp8/h200/8": {"model": {"name": "deepseek-v3", "weight_dtype": "fp8"},
                               "gpu": {"name": "h200", "count": 8}},
    "llama-3.1-405b-fp8/h200/8": {"model": {"name": "llama-3.1-405b", "weight_dtype": "fp8"},
                                  "gpu": {"name": "h200", "count": 8}},
    "llama-3.1-70b/h100-sxm/2x2pp": {"model": "llama-3.1-70b", "gpu": {"name": "h100-sxm", "count": 2,
                                                                       "pipeline_parallel": 2}},
    "llama-3-8b-kvfp8/a100-80gb/1-cap64": {"model": {"name": "llama-3-8b", "kv_dtype": "fp8"},
                                           "gpu": {"name": "a100-80gb", "count": 1}, "serving": {"max_num_seqs": 64}},
}


def shipped() -> dict[str, Scenario]:
    """Every scenario file under scenarios/ that ``capacity evaluate`` accepts, by file name."""
    out = {}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        try:
            out[path.name] = load_scenario(path)
        except ScenarioError:
            continue
    return out


def grid() -> dict[str, Scenario]:
    """Every catalog model on every catalog GPU at 1 and 4 GPUs where it builds (the layouts that fit), and EXTRA."""
    out = {}
    for model in sorted(catalog.models()):
        for gpu in sorted(catalog.gpus()):
            for count in GRID_COUNTS:
                data = {"model": model, "gpu": {"name": gpu, "count": count}, "workload": dict(GRID_WORKLOAD),
                        "slo": dict(GRID_SLO), "serving": {"engine": "ideal", "step_overhead": 0.002}}
                try:
                    out[f"{model}/{gpu}/{count}"] = Scenario.from_dict(data)
                except ScenarioError:
                    continue
    for name, data in EXTRA.items():
        full = {"workload": dict(GRID_WORKLOAD), "slo": dict(GRID_SLO), "serving": {"step_overhead": 0.002}, **data}
        full["serving"] = {"engine": "ideal", "step_overhead": 0.002, **data.get("serving", {})}
        out[name] = Scenario.from_dict(full)
    return out


def _encode(value: float | str) -> float | str:
    if isinstance(value, str):
        return value
    return value if math.isfinite(value) else repr(float(value))


def current() -> dict[str, dict[str, float | str]]:
    cases = {**{f"scenario:{k}": v for k, v in shipped().items()}, **{f"grid:{k}": v for k, v in grid().items()}}
    return {name: {key: _encode(val) for key, val in s.evaluate().values.items()} for name, s in cases.items()}


@pytest.fixture(scope="module")
def pinned() -> dict[str, dict[str, float | str]]:
    return json.loads(PINNED.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def now() -> dict[str, dict[str, float | str]]:
    return current()


def test_every_shipped_scenario_is_pinned(pinned, now):
    names = {k for k in now if k.startswith("scenario:")}
    assert names == {k for k in pinned if k.startswith("scenario:")}
    assert len(names) >= 10


def test_results_match_the_pinned_values(pinned, now):
    assert set(now) == set(pinned)
    moved = []
    for case, values in pinned.items():
        for key, want in values.items():
            got = now[case].get(key, "<missing>")
            if isinstance(want, str) or isinstance(got, str):
                same = got == want
            else:
                same = math.isclose(got, want, rel_tol=RTOL, abs_tol=0.0) or got == want
            if not same:
                moved.append(f"{case} {key}: pinned {want!r}, now {got!r}")
    assert not moved, f"{len(moved)} results moved:\n" + "\n".join(moved[:40])


if __name__ == "__main__" and "--write" in sys.argv:
    PINNED.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINNED}")
elif __name__ == "__main__" and "--add-new" in sys.argv:
    # New catalog entries add grid cases: pin only the cases not pinned yet, leaving every pinned value as it is
    # (the test above then still checks that the existing values did not move).
    old = json.loads(PINNED.read_text(encoding="utf-8"))
    added = {case: values for case, values in current().items() if case not in old}
    PINNED.write_text(json.dumps({**old, **added}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"added {len(added)} cases to {PINNED}")
