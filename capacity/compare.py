"""The same model and workload across several GPUs, side by side."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from .errors import ScenarioError
from .scenario import Scenario

COLUMNS = ["max_requests_shared_prefix", "decode_step_s", "ceiling_rps", "goodput_rps", "goodput_limit",
           "single_stream_tokens_per_s", "cost_per_million_tokens"]


def compare_gpus(scenario: Mapping[str, Any], gpu_names: Iterable[str]) -> pd.DataFrame:
    """One row per catalog GPU (its own peak figures, efficiencies and price; the scenario's gpu.count kept).

    A GPU that cannot hold the model gets a row with the reason in ``problem`` and no numbers.
    """
    rows = []
    base_gpu = scenario.get("gpu") if isinstance(scenario.get("gpu"), Mapping) else {}
    for name in gpu_names:
        data = copy.deepcopy(dict(scenario))
        data["gpu"] = {"name": name, "count": base_gpu.get("count", 1)}
        row: dict[str, Any] = {"gpu": name}
        try:
            results = Scenario.from_dict(data).evaluate()
            row.update({key: results[key] for key in COLUMNS})
            row["problem"] = ""
        except ScenarioError as exc:
            row["problem"] = str(exc)
        rows.append(row)
    return pd.DataFrame(rows, columns=["gpu", *COLUMNS, "problem"])
