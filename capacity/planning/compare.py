"""The same workload across several GPUs and models, side by side."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from capacity.errors import ScenarioError
from capacity.inputs import catalog
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



#: Columns of ``compare_fleets``: the cheapest fleet of each GPU type for the load, and its power draw.
FLEET_COLUMNS = ["gpu", "tensor_parallel", "mode", "gpus", "replicas", "prefill_replicas", "decode_replicas",
                 "cost_per_hour", "cost_per_month", "cost_per_million_tokens", "tpot_at_design_s", "ttft_at_design_s",
                 "board_power_kw", "energy_mwh_per_month", "meets_slo", "chosen", "problem"]


def compare_fleets(scenario: Scenario, gpus: Iterable[str]) -> pd.DataFrame:
    """Each GPU type's cheapest fleet for the scenario's load, cheapest first: which GPU, for what the customer pays.

    Every row is the first row of that GPU in ``fleet.fleet_options`` for the scenario's load (``workload
    .arrival_rate``, or its users in flight, ``workload.concurrency``), fleet plan (peak factor, headroom) and
    allowed layouts (``sizing.allowed_layouts``), so the
    cheapest row here is ``capacity fleet``'s for the same GPU list, and the row of the scenario's own GPU is the
    answer (``sizing.size``), marked ``chosen``. ``cost_per_month = cost_per_hour x 730 h`` [$];
    ``cost_per_million_tokens``: output tokens at the entered load [$]; ``board_power_kw = gpus x tdp_watts / 1000``
    [kW] where the catalog states the board power, and ``energy_mwh_per_month = board_power_kw x 730 h / 1000``
    [MWh], an upper bound (every GPU at its full board power all month; hosts, network and cooling not counted).
    A GPU with no layout that keeps the promises shows its cheapest miss with ``meets_slo`` False; one that cannot
    hold the model at all shows the reason in ``problem``.
    """
    from capacity.planning.fleet import fleet_options
    from capacity.planning.sizing import HOURS_PER_MONTH, allowed_layouts, size

    users = scenario.workload.concurrency
    load = {"users": float(users)} if users else {"target": scenario.workload.arrival_rate}
    if not users and not scenario.workload.arrival_rate:
        raise ScenarioError("comparing fleets needs a load: set workload.arrival_rate (requests/s) or "
                            "workload.concurrency (users)")
    modes, tps = allowed_layouts(scenario)
    names = list(dict.fromkeys(gpus))
    table = fleet_options(scenario.raw, peak_factor=scenario.fleet.peak_factor, headroom=scenario.fleet.headroom,
                          gpus=names, tensor_parallel=tps, modes=modes, **load)
    first = table.drop_duplicates("gpu", keep="first").copy()
    first["cost_per_month"] = first["cost_per_hour"] * HOURS_PER_MONTH
    watts = [catalog.gpu(name).get("tdp_watts") if name in catalog.gpus() else None for name in first["gpu"]]
    first["board_power_kw"] = [g * w / 1e3 if w else float("nan") for g, w in zip(first["gpus"], watts, strict=True)]
    first["energy_mwh_per_month"] = first["board_power_kw"] * HOURS_PER_MONTH / 1e3
    answer = size(scenario)
    own = scenario.gpu.name
    first["chosen"] = [bool(answer.replicas) and gpu_matches(g, own) and int(tp) == answer.tensor_parallel
                       and m == answer.mode for g, tp, m in zip(first["gpu"], first["tensor_parallel"],
                                                                 first["mode"], strict=True)]
    keeps = first["meets_slo"].fillna(False).astype(bool)
    first = pd.concat([first[keeps].sort_values("cost_per_month", kind="stable"), first[~keeps]], ignore_index=True)
    first["meets_slo"] = first["meets_slo"].fillna(False).astype(bool)
    first["problem"] = first["problem"].fillna("")
    return first.reindex(columns=FLEET_COLUMNS)


def gpu_matches(label: Any, name: Any) -> bool:
    """Whether a fleet table's GPU label names the same catalog GPU as ``name`` (by key or alias)."""
    try:
        return str(catalog.gpu(label)["key"]).lower() == str(catalog.gpu(name)["key"]).lower()
    except (ScenarioError, KeyError, TypeError):
        return str(label).lower() == str(name).lower()


def cheaper_line(table: pd.DataFrame) -> str | None:
    """A sentence when a GPU type keeps the promises for less than the answer's choice, else None."""
    keeps = table[table["meets_slo"]]
    chosen = table[table["chosen"]]
    if keeps.empty or chosen.empty:
        return None
    best, mine = keeps.iloc[0], chosen.iloc[0]
    if not best["cost_per_month"] < mine["cost_per_month"]:
        return None
    return (f"{best['gpus']:,.0f} x {best['gpu']} (TP{best['tensor_parallel']:.0f}, {best['mode']}) keep the promises "
            f"for ${best['cost_per_month']:,.0f}/month, ${mine['cost_per_month'] - best['cost_per_month']:,.0f} less "
            f"than the answer's {mine['gpus']:,.0f} x {mine['gpu']} (${mine['cost_per_month']:,.0f}/month).")
