"""Fleet sizing: replicas and GPUs for a target load at the promised goodput, and what they cost."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .scenario import Results


@dataclass(frozen=True, slots=True)
class FleetSize:
    """Replicas [-], GPUs [-], cost per hour [$/h] and the per-replica load [requests/s] they serve."""

    replicas: int
    gpus: int
    cost_per_hour: float | None
    design_load_rps: float
    load_per_replica_rps: float


def fleet_for_load(results: Results, target_rps: float, peak_factor: float = 1.0, headroom: float = 0.0) -> FleetSize:
    """Replicas for ``target_rps * peak_factor`` with ``headroom`` spare: ``ceil(load / (goodput * (1 - headroom)))``.

    GPUs = replicas x gpu.count; cost = GPUs x price per GPU-hour. ValueError when no load meets the promise.
    """
    if target_rps < 0 or peak_factor <= 0 or not 0 <= headroom < 1:
        raise ValueError("target load must be >= 0, peak factor > 0 and headroom in [0, 1)")
    goodput = results["goodput_rps"]
    if goodput <= 0:
        raise ValueError("this scenario serves no load within its promises (goodput 0)")
    design = target_rps * peak_factor
    replicas = max(1, math.ceil(design / (goodput * (1 - headroom)) - 1e-9)) if design > 0 else 0
    gpus = replicas * results.scenario.gpu.count
    price = results.scenario.gpu.price_per_hour
    return FleetSize(replicas=replicas, gpus=gpus, cost_per_hour=gpus * price if price is not None else None,
                     design_load_rps=design, load_per_replica_rps=design / replicas if replicas else 0.0)
