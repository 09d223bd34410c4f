"""The same workload across several GPUs and models, side by side."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from capacity.errors import ScenarioError
from capacity.model.scenario import Scenario

COLUMNS = ["max_requests_shared_prefix", "decode_step_s", "ceiling_rps", "goodput_rps", "goodput_limit",
           "single_stream_tokens_per_s", "cost_per_million_tokens"]


def compare(scenario: Mapping[str, Any], gpus: Iterable[str] = (), models: Iterable[str] = ()) -> pd.DataFrame:
    """One row per (model, GPU) pair from the catalogs; an empty list keeps the scenario's own model or GPU.

    Each catalog GPU brings its peak figures, efficiencies and price (the scenario's gpu.count is kept);
    each catalog model keeps the scenario's weight and KV dtypes. A pair that cannot be served (weights
    too large, heads not divisible) gets a row with the reason in ``problem`` and no numbers.
    """
    base_gpu = scenario.get("gpu") if isinstance(scenario.get("gpu"), Mapping) else {}
    base_model = scenario.get("model") if isinstance(scenario.get("model"), Mapping) else {}
    gpu_list = list(gpus) or [None]
    model_list = list(models) or [None]
    rows = []
    for model, gpu in itertools.product(model_list, gpu_list):
        data = copy.deepcopy(dict(scenario))
        if gpu is not None:
            data["gpu"] = {"name": gpu, "count": base_gpu.get("count", 1)}
        if model is not None:
            data["model"] = {"name": model, **{k: base_model[k] for k in ("weight_dtype", "kv_dtype")
                                               if k in base_model}}
        row: dict[str, Any] = {"model": model or str(base_model.get("name", "scenario model")),
                               "gpu": gpu or str(base_gpu.get("name", "scenario GPU"))}
        try:
            results = Scenario.from_dict(data).evaluate()
            row.update({key: results[key] for key in COLUMNS})
            row["problem"] = ""
        except ScenarioError as exc:
            row["problem"] = str(exc)
        rows.append(row)
    return pd.DataFrame(rows, columns=["model", "gpu", *COLUMNS, "problem"])

