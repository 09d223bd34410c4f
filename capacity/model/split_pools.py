"""Split prefill and decode pools, each with its own GPU type, count and parallelism (issue 29).

A scenario's optional ``pools`` section states the two pools of a disaggregated deployment; each pool is the
scenario's own ``gpu`` and ``serving`` with the pool's keys over them (a ``gpu.name`` of its own replaces the GPU
entirely), and ``workers`` replicas of that layout::

    pools:
      prefill: {gpu: {name: gb200, count: 1}, serving: {attention_data_parallel: 4, expert_parallel: 4}, workers: 1}
      decode:  {gpu: {name: gb200, count: 8}, serving: {expert_parallel: 8}, workers: 4}

Each pool is then an ordinary scenario (``Scenario.from_dict``: memory, step, promises of its own layout). The
prefill pool's rate per replica is its ``disagg_prefill_rps`` (the TTFT promise, its KV transfer over
``serving.kv_transfer_bandwidth`` included), the decode pool's its ``disagg_decode_rps`` (the TPOT promise
without prefill stalls); together they serve ``options.split_pool_goodput_rps``. This module composes; the
formulas are ``serving_modes``' and ``slo``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capacity.errors import ScenarioError, show
from capacity.formulas import slo
from capacity.inputs.specs import SITE_GPU_KEYS
from capacity.model import serving_modes as options

POOL_KEYS = {"gpu", "serving", "workers"}

#: Results of a split-pool scenario: name -> (unit, meaning).
SPLIT_RESULTS: dict[str, tuple[str, str]] = {
    "split_prefill_rps_per_worker": ("requests/s", "one prefill replica: largest load keeping the TTFT promise"),
    "split_decode_rps_per_worker": ("requests/s", "one decode replica: largest load keeping the TPOT promise"),
    "split_prefill_workers": ("replicas", "prefill replicas"),
    "split_decode_workers": ("replicas", "decode replicas"),
    "split_prefill_gpus_per_worker": ("GPUs", "GPUs per prefill replica"),
    "split_decode_gpus_per_worker": ("GPUs", "GPUs per decode replica"),
    "split_gpus": ("GPUs", "GPUs of both pools"),
    "split_goodput_rps": ("requests/s", "both pools together: min(prefill total, decode total)"),
    "split_goodput_per_gpu_rps": ("requests/s", "goodput per GPU of both pools"),
    "split_kv_transfer_s": ("s", "KV cache of one prompt from the prefill to the decode pool"),
    "split_cost_per_million_tokens": ("$ per M tokens", "both pools' price per million output tokens at the goodput"),
}


@dataclass(frozen=True, slots=True)
class SplitPools:
    """The two pool scenarios and their replica counts."""

    prefill: Any   # Scenario
    decode: Any    # Scenario
    prefill_workers: int
    decode_workers: int


def _merge(base: Any, override: Any) -> Any:
    if not isinstance(override, Mapping):
        return override
    if isinstance(base, str):
        base = {"name": base}
    if not isinstance(base, Mapping) or ("name" in override and override.get("name") != base.get("name")):
        return dict(override)
    return {**base, **override}


def _workers(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or not 1 <= value <= 1e6:
        raise ScenarioError(f"{path} must be a whole number of replicas >= 1, got {show(value)}")
    return int(value)


def pool_mapping(data: Mapping[str, Any], pool: str) -> dict[str, Any]:
    """The scenario mapping of one pool (``prefill`` or ``decode``) of a mapping with a ``pools`` section: the
    scenario's own with the pool's ``gpu`` and ``serving`` over them (a ``gpu.name`` of its own replaces the GPU
    entirely, but for the site's electricity price and PUE, ``SITE_GPU_KEYS``), without the ``pools`` section; its
    ``workers`` are ``pool_workers``'."""
    spec = (data.get("pools") or {}).get(pool) or {}
    base = {k: v for k, v in data.items() if k != "pools"}
    gpu, site = _merge(base.get("gpu"), spec.get("gpu", {})), base.get("gpu")
    if isinstance(gpu, Mapping) and isinstance(site, Mapping):
        gpu = {**{k: site[k] for k in SITE_GPU_KEYS if k in site}, **gpu}
    return {**base, "gpu": gpu, "serving": _merge(base.get("serving") or {}, spec.get("serving", {}))}


def pool_scenarios(data: Mapping[str, Any]) -> SplitPools:
    """The prefill and decode pool scenarios of a mapping with a ``pools`` section; ScenarioError naming each
    problem with its pool (``pools.decode.gpu.count ...``)."""
    from capacity.model.scenario import Scenario

    pools = data.get("pools")
    if not isinstance(pools, Mapping) or set(pools) - {"prefill", "decode"} or not {"prefill", "decode"} <= set(pools):
        raise ScenarioError(f"pools must map prefill and decode to their gpu, serving and workers, got {show(pools)}")
    built, workers, problems = {}, {}, []
    for pool in ("prefill", "decode"):
        spec = pools[pool]
        if not isinstance(spec, Mapping) or set(spec) - POOL_KEYS:
            problems.append(f"pools.{pool} must be a mapping of {', '.join(sorted(POOL_KEYS))}, got {show(spec)}")
            continue
        try:
            workers[pool] = _workers(spec.get("workers", 1), f"pools.{pool}.workers")
            built[pool] = Scenario.from_dict(pool_mapping(data, pool))
        except ScenarioError as exc:
            problems.extend(f"pools.{pool}: {p}" for p in exc.problems)
    if problems:
        raise ScenarioError(*problems)
    return SplitPools(built["prefill"], built["decode"], workers["prefill"], workers["decode"])


def evaluate(pools: SplitPools) -> dict[str, float]:
    """``SPLIT_RESULTS`` of the two pools [base units]: each pool evaluated as its own scenario, composed by
    ``options.split_pool_goodput_rps``; cost from each pool's GPU price (``slo.cost_per_million_tokens``; NaN
    where a pool has no price)."""
    p, d = pools.prefill.evaluate(), pools.decode.evaluate()
    pw, dw = pools.prefill_workers, pools.decode_workers
    gp, gd = pools.prefill.gpu.gpus_per_replica, pools.decode.gpu.gpus_per_replica
    goodput = float(options.split_pool_goodput_rps(p["disagg_prefill_rps"], pw, d["disagg_decode_rps"], dw))
    gpus = pw * gp + dw * gd
    prices = [pools.prefill.gpu.price_per_hour, pools.decode.gpu.price_per_hour]
    hourly = (pw * gp * prices[0] + dw * gd * prices[1]) if None not in prices else float("nan")
    return {
        "split_prefill_rps_per_worker": float(p["disagg_prefill_rps"]),
        "split_decode_rps_per_worker": float(d["disagg_decode_rps"]),
        "split_prefill_workers": pw, "split_decode_workers": dw,
        "split_prefill_gpus_per_worker": gp, "split_decode_gpus_per_worker": gd,
        "split_gpus": gpus, "split_goodput_rps": goodput, "split_goodput_per_gpu_rps": goodput / gpus,
        "split_kv_transfer_s": float(p["kv_transfer_s"]),
        "split_cost_per_million_tokens": float(slo.cost_per_million_tokens(
            hourly, 1.0, goodput, pools.decode.workload.output_tokens)),
    }


__all__ = ["SPLIT_RESULTS", "SplitPools", "evaluate", "pool_mapping", "pool_scenarios"]
