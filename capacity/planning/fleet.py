"""Fleet sizing: GPUs, replicas and cost for a target load, across GPU types, parallel layouts and serving modes.

The question before a sale (issue 7): how many GPUs for this traffic, at this promise, at what cost? For a
target load ``λ_t`` (requests/s, or tokens/day: ``λ_t = tokens_per_day / 86,400 / (P + A)``), a peak factor
(a sale day: 10) and headroom h, the design load is ``D = λ_t x peak`` and each option needs

    replicas = ceil(D / (λ_r (1 - h)))          (λ_r: one replica's goodput in that mode)

* ``colocated``: the plain engine, ``λ_r = goodput_rps`` (prefills pause decoding).
* ``chunked``: chunked prefill, ``λ_r = chunked_goodput_rps``.
* ``disaggregated``: ``ceil(D / (λ_d (1 - h)))`` decode replicas and ``ceil(D / (λ_p (1 - h)))`` prefill
  replicas (``disagg_decode_rps``, ``disagg_prefill_rps``).

GPUs = replicas x GPUs per replica; cost per hour = GPUs x price per GPU-hour. Latency at the design load
is each mode's TPOT and TTFT with the load spread evenly (``D / replicas`` per replica).

Cost per million tokens splits the GPU-hour between input and output tokens by the GPU time each phase
takes at the design load: a replica at load λ spends ``λ t_p`` of its time prefilling (the prompt's share,
valued at its standalone prefill for chunked prefill too) and the rest decoding or idle (the answer's
share). Separate pools split exactly: prefill GPUs to input tokens, decode GPUs to output tokens.

    input  $/M = cost_per_hour x f_in       / (D P 3600) x 1e6
    output $/M = cost_per_hour x (1 - f_in) / (D A 3600) x 1e6

``cost_per_million_tokens`` is the fleet's whole cost over the output tokens of the target (not the peak) load, the
one meaning it has everywhere (``slo.cost_per_million_tokens``): what the fleet, sized for the peak and kept all day,
costs per output token of the usual traffic; ``cost_per_million_all_tokens`` divides by prompt + output tokens.
The table is ``sizing.size_options`` (the answer's own composition) as a DataFrame, ranked in the answer's order.

Essay 001's GPU at 100 requests/s under TPOT <= 50 ms: goodput 5.897 requests/s, ceil(100 / 5.897) = 17 GPUs.

A load of concurrent users (``users``, a closed loop) divides the design users by the users one replica holds within
the promises (``analysis.users_keeping_promises``), colocated serving only (``sizing.size_user_options``); the
columns ``users_per_replica`` and ``replica_users`` say how many.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from capacity.inputs.specs import FLEET_MODES as MODES
from capacity.inputs.specs import FLEET_TENSOR_PARALLEL as TENSOR_PARALLEL
from capacity.model.analysis import INPUTS
from capacity.model.scenario import Results
from capacity.planning.sizing import (
    check_plan,
    compared_layouts,
    order,
    promise_goodput,
    replicas_for,
    size_options,
    size_user_options,
)

if TYPE_CHECKING:  # imported by the functions that build tables: a search's pruning needs none
    import pandas as pd

SECONDS_PER_DAY = 86_400.0

#: Columns of ``fleet_options``, in order.
COLUMNS = ["gpu", "tensor_parallel", "mode", "gpus_per_replica", "replicas", "prefill_replicas", "decode_replicas",
           "gpus", "price_per_gpu_hour", "cost_per_hour", "replica_rps", "load_per_replica_rps", "tpot_at_design_s",
           "ttft_at_design_s", "input_share", "cost_per_million_input_tokens", "cost_per_million_output_tokens",
           "cost_per_million_tokens", "cost_per_million_all_tokens", "goodput_limit", "meets_slo", "rank", "pareto",
           "problem", "users_per_replica", "replica_users", "attention_data_parallel", "expert_parallel",
           "prefill_gpu", "prefill_tensor_parallel", "prefill_attention_data_parallel", "prefill_expert_parallel",
           "prefill_gpus_per_replica", "prefill_price_per_gpu_hour"]


@dataclass(frozen=True, slots=True)
class FleetSize:
    """Replicas [-], GPUs [-], cost per hour [$/h] and the per-replica load [requests/s] they serve."""

    replicas: int
    gpus: int
    cost_per_hour: float | None
    design_load_rps: float
    load_per_replica_rps: float


def target_rps(requests_per_s: float | None = None, tokens_per_day: float | None = None,
               prompt_tokens: float = 0.0, output_tokens: float = 0.0) -> float:
    """The target load in requests/s, given directly or as (input + output) tokens per day.

    ``tokens_per_day / 86,400 / (P + A)``: a billion tokens a day of 1,000-token prompts and 300-token
    answers is 1e9 / 86,400 / 1,300 = 8.90 requests/s.
    """
    if (requests_per_s is None) == (tokens_per_day is None):
        raise ValueError("give the target load as requests/s or as tokens/day, not both or neither")
    if requests_per_s is not None:
        if requests_per_s < 0:
            raise ValueError(f"target load must be >= 0 requests/s, got {requests_per_s}")
        return float(requests_per_s)
    assert tokens_per_day is not None
    if tokens_per_day < 0 or prompt_tokens + output_tokens <= 0:
        raise ValueError("tokens/day must be >= 0 and a request must hold tokens")
    return tokens_per_day / SECONDS_PER_DAY / (prompt_tokens + output_tokens)


def tokens_per_day(requests_per_s: float, prompt_tokens: float, output_tokens: float) -> float:
    """(Input + output) tokens per day of a load in requests/s: ``requests_per_s x 86,400 x (P + A)``.

    The inverse of ``target_rps``' tokens/day form (8.90 requests/s of 1,000 + 300 tokens is 1e9 tokens/day).
    """
    return requests_per_s * SECONDS_PER_DAY * (prompt_tokens + output_tokens)


def fleet_for_load(results: Results, target_rps: float, peak_factor: float = 1.0, headroom: float = 0.0) -> FleetSize:
    """Replicas for ``target_rps * peak_factor`` with ``headroom`` spare: ``ceil(load / (goodput * (1 - headroom)))``.

    GPUs = replicas x gpus per replica; cost = GPUs x price per GPU-hour. ValueError when no load meets the promise.
    """
    check_plan(target_rps, peak_factor, headroom)
    goodput = results["goodput_rps"]
    if goodput <= 0:
        raise ValueError("this scenario serves no load within its promises (goodput 0)")
    design = target_rps * peak_factor
    replicas = int(replicas_for(design, goodput, headroom))
    gpus = replicas * results.scenario.gpu.gpus_per_replica
    price = results.scenario.gpu.price_per_hour
    return FleetSize(replicas=replicas, gpus=gpus, cost_per_hour=gpus * price if price is not None else None,
                     design_load_rps=design, load_per_replica_rps=design / replicas if replicas else 0.0)


def layouts(scenario: Mapping[str, Any], gpus: Iterable[str] | None = None,
            tensor_parallel: Iterable[int] = TENSOR_PARALLEL, modes: Iterable[str] = MODES,
            prefill_gpus: Iterable[str] | None = None, decode_gpus: Iterable[str] | None = None,
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Flat inputs of the scenario on each GPU type and tensor-parallel size that holds the model.

    ``gpus``: catalog names (their own figures and prices; the scenario's pipeline stages kept; the scenario's own
    GPU keeps its figures and price), or None for the scenario's own GPU (``sizing.compared_layouts``, MoE models also
    with attention data and expert parallel sizes; where ``modes`` has ``split``, each split pool's own layouts,
    ``prefill_gpus`` / ``decode_gpus``). Returns (inputs, skipped): one row per layout with ``gpu``,
    ``tensor_parallel``, ``role`` (``sizing.ROLES``) and ``stated_pool`` (``prefill`` / ``decode`` for the stated
    split pools, else '') columns, and the layouts that do not build with the reason in ``problem``. Scenarios sized
    per class (a percentile promise or workload classes) carry ``promise_goodput_rps``, a colocated replica's goodput
    at the promises' percentile (``sizing.promise_goodput``).
    """
    import pandas as pd

    lay = compared_layouts(scenario, modes, tensor_parallel, gpus, prefill_gpus, decode_gpus)
    stated = dict(zip(lay.pair, ("prefill", "decode"), strict=True)) if lay.pair else {}
    rows = []
    for i, ((label, tp, s), role) in enumerate(zip(lay.built, lay.roles, strict=True)):
        row = {"gpu": label, "tensor_parallel": tp, "role": role, "stated_pool": stated.get(i, ""), **s.inputs()}
        promised = promise_goodput(s)
        if promised is not None:
            row["promise_goodput_rps"] = promised.rate_rps
        rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(lay.skipped, columns=["gpu", "tensor_parallel", "problem"])


def size_layouts(inputs: pd.DataFrame, design_rps: float, headroom: float = 0.0, modes: Iterable[str] = MODES,
                 target: float | None = None, users: bool = False) -> pd.DataFrame:
    """GPUs, cost and latency at the design load for every row of ``inputs`` (``layouts``) and serving mode:
    ``sizing.size_options`` as a table. ``target`` (requests/s, default the design load) is the load the costs per
    token are taken at. ``users``: the design load and target are users in flight (a closed loop,
    ``sizing.size_user_options``: colocated serving only). A split's ``gpu`` and ``tensor_parallel`` are its decode
    pool's, ``prefill_*`` its prefill pool's."""
    import pandas as pd

    if inputs.empty:
        return pd.DataFrame(columns=COLUMNS)
    x = {key: inputs[key].to_numpy(dtype=float) for key in INPUTS}
    promise = (inputs["promise_goodput_rps"].to_numpy(dtype=float) if "promise_goodput_rps" in inputs else None)
    if users:
        values = size_user_options(x, design_rps, headroom, target)
        values.pop("served_rps"), values.pop("binding")
    else:
        roles = inputs["role"].tolist() if "role" in inputs else None
        stated = inputs["stated_pool"].tolist() if "stated_pool" in inputs else []
        pairs = [(stated.index("prefill"), stated.index("decode"))] if "prefill" in stated else []
        values = size_options(x, design_rps, headroom, modes, target, promise, roles=roles, pairs=pairs)
    layout = values.pop("layout")
    prefill = np.asarray(values.pop("prefill_layout", np.full(len(layout), -1)), dtype=int)
    has = prefill >= 0
    at = np.where(has, prefill, 0)

    def pick(column: str, source: str | None = None) -> np.ndarray:
        data = inputs[source or column].to_numpy()
        return np.where(has, data[at], None if data.dtype == object else np.nan)

    table = pd.DataFrame({"gpu": inputs["gpu"].to_numpy()[layout],
                          "tensor_parallel": inputs["tensor_parallel"].to_numpy()[layout], **values,
                          "attention_data_parallel": inputs["attention_data_parallel"].to_numpy()[layout],
                          "expert_parallel": inputs["expert_parallel"].to_numpy()[layout],
                          "prefill_gpu": pick("gpu"), "prefill_tensor_parallel": pick("tensor_parallel"),
                          "prefill_attention_data_parallel": pick("attention_data_parallel"),
                          "prefill_expert_parallel": pick("expert_parallel")})
    return table


def layout_text(row: Mapping[str, Any]) -> tuple[str, str]:
    """(GPU, layout) of a fleet row in short: ``('h200', 'TP2')``, an MoE layout ``('gb200', 'TP1xDP4 EP4')``, split
    pools ``('l40s/h200', 'P TP1 / D TP2')`` (the prefill pool's first)."""
    def one(tp: Any, dp: Any, ep: Any) -> str:
        def whole(v: Any) -> int:
            return int(v) if isinstance(v, (int, float)) and math.isfinite(v) else 1

        words = f"TP{whole(tp)}" + (f"xDP{whole(dp)}" if whole(dp) > 1 else "")
        return words + (f" EP{whole(ep)}" if whole(ep) > 1 else "")

    gpu = str(row["gpu"])
    decode = one(row["tensor_parallel"], row.get("attention_data_parallel"), row.get("expert_parallel"))
    if row.get("mode") != "split":
        return gpu, decode
    prefill = one(row.get("prefill_tensor_parallel"), row.get("prefill_attention_data_parallel"),
                  row.get("prefill_expert_parallel"))
    return f"{row.get('prefill_gpu')}/{gpu}", f"P {prefill} / D {decode}"


def rank(table: pd.DataFrame) -> pd.DataFrame:
    """Options that keep the promises, cheapest first (ties: lower TPOT, then fewer GPUs), ranked 1, 2, ...

    Options that miss a promise keep rank NaN and follow, by cost (``sizing.order``, the answer's order).
    """
    cost = table["cost_per_hour"].to_numpy(float)
    gpus = table["gpus"].to_numpy(float)
    ranked = order(table["meets_slo"].to_numpy(bool), np.where(np.isfinite(cost), cost, gpus),
                   table["tpot_at_design_s"].to_numpy(float), gpus)
    out = table.iloc[ranked].reset_index(drop=True)
    ok = out["meets_slo"].to_numpy(bool)
    out["rank"] = np.where(ok, np.cumsum(ok), np.nan)
    return out


def pareto_front(table: pd.DataFrame, cost: str = "cost_per_hour", latency: str = "tpot_at_design_s") -> pd.Series:
    """Whether each row is on the cost/latency Pareto front: no other row is at most as costly and at most
    as slow, and strictly better in one. Rows with a non-finite cost or latency are never on it."""
    import pandas as pd

    c, t = table[cost].to_numpy(float), table[latency].to_numpy(float)
    finite = np.isfinite(c) & np.isfinite(t)
    front = np.zeros(len(table), dtype=bool)
    order = np.lexsort((t, c))  # by cost, then latency
    best = math.inf
    for i in order:
        if finite[i] and t[i] < best:
            front[i], best = True, t[i]
    return pd.Series(front, index=table.index)


def fleet_options(scenario: Mapping[str, Any], target: float | None = None, tokens_per_day: float | None = None,
                  peak_factor: float = 1.0, headroom: float = 0.0, gpus: Iterable[str] | None = None,
                  tensor_parallel: Iterable[int] = TENSOR_PARALLEL, modes: Iterable[str] = MODES,
                  users: float | None = None, prefill_gpus: Iterable[str] | None = None,
                  decode_gpus: Iterable[str] | None = None) -> pd.DataFrame:
    """Every (GPU, tensor parallel, serving mode) option for a target load, ranked, with the Pareto front.

    ``split`` among ``modes`` adds split pools, each pool on its own GPU type and layout (``sizing.split_rows``: each
    decode layout with the cheapest prefill pool; a scenario's ``pools`` section gives each pool's GPU, else
    ``prefill_gpus`` / ``decode_gpus``, else the layouts of ``gpus``).

    ``scenario`` is a scenario mapping (YAML as loaded); its promises and workload shape apply to every
    option. ``target`` in requests/s or ``tokens_per_day`` (input + output); design load = target x peak.
    ``pareto`` marks the cost/TPOT Pareto front among the options that keep the promises. Columns:
    ``COLUMNS``; layouts that do not hold the model are listed at the end with the reason in ``problem``.
    """
    import pandas as pd

    workload = scenario.get("workload") or {}
    if users is not None:  # a closed loop: users in flight (the scenario's think time applies)
        if target is not None or tokens_per_day is not None:
            raise ValueError("give the target load as requests/s, tokens/day or concurrent users, only one")
        base = float(users)
        closed = {**scenario, "workload": {**{k: v for k, v in workload.items() if k != "arrival_rate"},
                                           "concurrency": max(1, round(base))}}
    else:
        base = target_rps(target, tokens_per_day, float(workload.get("prompt_tokens", 0) or 0),
                          float(workload.get("output_tokens", 0) or 0))
        closed = {**scenario, "workload": {k: v for k, v in workload.items() if k not in ("concurrency", "think_time")}}
    check_plan(base, peak_factor, headroom)
    inputs, skipped = layouts(closed, gpus, tensor_parallel, modes, prefill_gpus, decode_gpus)
    table = rank(size_layouts(inputs, base * peak_factor, headroom, modes, target=base, users=users is not None))
    table["pareto"] = pareto_front(table.where(table["meets_slo"]))
    skipped = skipped.assign(mode="", meets_slo=False, pareto=False)
    if not skipped.empty:
        table = pd.concat([table, skipped], ignore_index=True)
    return table.reindex(columns=COLUMNS)


__all__ = ["COLUMNS", "MODES", "FleetSize", "fleet_for_load", "fleet_options", "layout_text", "layouts", "pareto_front",
           "rank",
           "replicas_for", "size_layouts", "target_rps", "tokens_per_day"]
