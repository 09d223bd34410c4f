"""A way forward instead of an error: the smallest changes that let a sizing which cannot be served be served.

When the weights do not fit beside a KV pool, or not one request fits in it, the planner tries more tensor-parallel
GPUs of the same type (2, 4, 8), 8-bit weights, an 8-bit KV cache, a data-center GPU with more memory, and each
tensor-parallel size with 8-bit weights or on a larger GPU. Each candidate is the scenario with those fields
changed, evaluated by the model itself; those that serve at least one request are returned, fewest GPUs first,
then cheapest per hour. Nothing is estimated here: a way forward is only offered once it has been evaluated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.model.scenario import Scenario

#: Tensor-parallel sizes tried on the same GPU type.
TENSOR_PARALLEL = (2, 4, 8)
#: Dtypes whose 8-bit form is tried (weights and KV cache).
SIXTEEN_BIT = ("fp16", "bf16", "float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class WayForward:
    """One change that makes the sizing servable: each scenario ``(section, key)`` of ``changes`` set to its value,
    in words ``label``."""

    label: str
    changes: tuple[tuple[tuple[str, str], Any], ...]
    gpus_per_replica: int
    requests_fit: float         # requests that fit at once in one replica after the change
    cost_per_hour: float | None  # one replica [$/h]; None without a price


def needs_a_way(mapping: Mapping[str, Any]) -> bool:
    """Whether the scenario cannot be served as stated: it does not evaluate, or not one request fits."""
    try:
        return not Scenario.from_dict(dict(mapping)).evaluate()["batch_max"] >= 1
    except ScenarioError:
        return True


def ways_forward(mapping: Mapping[str, Any], limit: int = 4) -> list[WayForward]:
    """Up to ``limit`` evaluated changes that serve the scenario, fewest GPUs first; empty when it is served or
    nothing tried helps."""
    if not needs_a_way(mapping):
        return []
    base = copy.deepcopy(dict(mapping))
    gpu = base.get("gpu") if isinstance(base.get("gpu"), Mapping) else {"name": base.get("gpu")}
    model = base.get("model") if isinstance(base.get("model"), Mapping) else {"name": base.get("model")}
    count = int(gpu.get("count", 1) or 1)
    gpu_label = str(gpu.get("name") or "GPU")
    tps = [tp for tp in TENSOR_PARALLEL if tp > count]
    eight_bit = str(model.get("weight_dtype", "fp16")).lower() in SIXTEEN_BIT
    own_memory = _memory(gpu.get("name"))
    bigger = sorted((key for key in catalog.customer_gpus()
                     if own_memory is not None and (_memory(key) or 0.0) > own_memory),
                    key=lambda key: (_memory(key), catalog.gpu(key).get("price_per_hour") or float("inf")))
    tried: list[tuple[str, tuple[tuple[tuple[str, str], Any], ...]]] = []
    for tp in tps:
        tried.append((f"tensor parallel {tp} ({tp} x {gpu_label})", ((("gpu", "count"), tp),)))
    if eight_bit:
        tried.append(("8-bit weights (fp8)", ((("model", "weight_dtype"), "fp8"),)))
    if str(model.get("kv_dtype", "fp16")).lower() in SIXTEEN_BIT:
        tried.append(("8-bit KV cache (fp8)", ((("model", "kv_dtype"), "fp8"),)))
    for key in bigger:
        tried.append((f"{key} ({catalog.gpu(key).get('memory')} per GPU)", ((("gpu", "name"), key),)))
    for tp in tps:
        if eight_bit:
            tried.append((f"tensor parallel {tp} with 8-bit weights",
                          ((("gpu", "count"), tp), (("model", "weight_dtype"), "fp8"))))
        for key in bigger:
            tried.append((f"{tp} x {key}", ((("gpu", "name"), key), (("gpu", "count"), tp))))
    found = []
    for label, changes in tried:
        data = copy.deepcopy(base)
        for (part, key), value in changes:
            section = data.get(part) if isinstance(data.get(part), Mapping) else {"name": data.get(part)}
            data[part] = {**section, key: value}
        try:
            results = Scenario.from_dict(data).evaluate()
        except ScenarioError:
            continue
        if not results["batch_max"] >= 1:
            continue
        s = results.scenario
        price = s.gpu.price_per_hour
        found.append(WayForward(label, changes, s.gpu.gpus_per_replica, float(results["batch_max"]),
                                None if price is None else price * s.gpu.gpus_per_replica))
    found.sort(key=lambda w: (w.gpus_per_replica, w.cost_per_hour if w.cost_per_hour is not None else float("inf")))
    return found[:limit]


def _memory(name: Any) -> float | None:
    """A catalog GPU's memory [B], or None when ``name`` is not a catalog GPU."""
    if not isinstance(name, str):
        return None
    try:
        from capacity.inputs.units import parse_quantity

        return float(parse_quantity(catalog.gpu(name)["memory"], "bytes"))
    except (ScenarioError, KeyError, ValueError, TypeError):
        return None


__all__ = ["WayForward", "needs_a_way", "ways_forward"]
