"""Load over a day: GPUs needed hour by hour, the peak, and what following the profile saves.

A customer says "10x more traffic at noon than at night" or gives 24 hourly rates. Each hour needs
``fleet.replicas_for(rate_h, goodput per replica, headroom)`` replicas of the scenario's layout; the day
costs the sum of those GPU-hours, against 24 hours of the peak hour's fleet when provisioning for the peak.

With only a peak factor the day is the smooth curve

    rate(h) = trough + (peak - trough) (1 + cos(2π (h - peak_hour) / 24)) / 2,   peak / trough = factor

(one maximum at ``peak_hour``, one minimum twelve hours away): an assumption to replace with measured rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from capacity.planning.fleet import replicas_for

HOURS = 24


def diurnal_rates(peak_rps: float, peak_factor: float, peak_hour: float = 12.0) -> np.ndarray:
    """24 hourly rates [requests/s] peaking at ``peak_rps`` at ``peak_hour`` with ``peak / trough = peak_factor``."""
    if not peak_rps > 0 or not peak_factor >= 1:
        raise ValueError(f"peak rate must be > 0 and the peak factor >= 1, got {peak_rps} and {peak_factor}")
    trough = peak_rps / peak_factor
    h = np.arange(HOURS, dtype=float)
    return trough + (peak_rps - trough) * (1.0 + np.cos(2.0 * math.pi * (h - peak_hour) / HOURS)) / 2.0


def check_profile(rates: ArrayLike) -> np.ndarray:
    """24 hourly rates [requests/s], each finite and >= 0; ValueError naming the first bad hour."""
    r = np.asarray(rates, dtype=float).reshape(-1)
    if r.size != HOURS:
        raise ValueError(f"a daily profile has 24 hourly rates, got {r.size}")
    bad = np.flatnonzero(~np.isfinite(r) | (r < 0))
    if bad.size:
        raise ValueError(f"hour {bad[0]}: the rate must be a number >= 0 requests/s, got {r[bad[0]]}")
    return r


@dataclass(frozen=True, slots=True)
class DailyPlan:
    """GPUs per hour for a daily profile, and the cost of following it against provisioning for the peak.

    ``hours``: one row per hour (hour, rate_rps, replicas, gpus, load_per_replica_rps). Costs need a price.
    """

    hours: pd.DataFrame
    replica_rps: float
    gpus_per_replica: int
    price_per_gpu_hour: float | None

    @property
    def peak_gpus(self) -> float:
        return float(self.hours["gpus"].max())

    @property
    def gpu_hours(self) -> float:
        """GPU-hours to follow the profile (each hour's fleet for that hour) [GPU h]."""
        return float(self.hours["gpus"].sum())

    @property
    def peak_gpu_hours(self) -> float:
        """GPU-hours to hold the peak hour's fleet all day [GPU h]."""
        return self.peak_gpus * HOURS

    @property
    def saving(self) -> float:
        """Share of the peak-provisioned GPU-hours that following the profile saves [-]."""
        return 1.0 - self.gpu_hours / self.peak_gpu_hours if self.peak_gpu_hours else 0.0

    def summary(self) -> dict[str, Any]:
        price = self.price_per_gpu_hour
        return {"replica_rps": self.replica_rps, "gpus_per_replica": self.gpus_per_replica,
                "peak_rps": float(self.hours["rate_rps"].max()), "mean_rps": float(self.hours["rate_rps"].mean()),
                "peak_gpus": self.peak_gpus, "gpu_hours_per_day": self.gpu_hours,
                "peak_gpu_hours_per_day": self.peak_gpu_hours, "saving": self.saving,
                "cost_per_day": self.gpu_hours * price if price is not None else None,
                "peak_cost_per_day": self.peak_gpu_hours * price if price is not None else None}


def plan_day(rates: ArrayLike, replica_rps: float, gpus_per_replica: int, price_per_gpu_hour: float | None = None,
             headroom: float = 0.0) -> DailyPlan:
    """Replicas and GPUs for each hour of ``rates`` [requests/s] when one replica serves ``replica_rps``."""
    r = check_profile(rates)
    if not 0 <= headroom < 1:  # NaN too: 1 would give infinite replicas, NaN replicas of NaN
        raise ValueError(f"headroom must be in [0, 1), got {headroom}")
    if not replica_rps > 0:
        raise ValueError("one replica serves no load within the promises (goodput 0): no fleet serves the day")
    replicas = replicas_for(r, replica_rps, headroom)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_replica = np.where(replicas > 0, r / replicas, 0.0)
    hours = pd.DataFrame({"hour": np.arange(HOURS), "rate_rps": r, "replicas": replicas,
                          "gpus": replicas * gpus_per_replica, "load_per_replica_rps": per_replica})
    return DailyPlan(hours, float(replica_rps), int(gpus_per_replica), price_per_gpu_hour)


def plan_scenario_day(scenario: Any, rates: ArrayLike, headroom: float = 0.0, mean_based: bool = False) -> DailyPlan:
    """``plan_day`` with the scenario's goodput per replica: at the classes' percentiles (the essays' goodput),
    or on the mean with ``mean_based`` (``goodput_rps``)."""
    from capacity.model.mix import mix_model
    from capacity.model.percentiles import percentile_goodput_rps

    mix = mix_model(scenario)
    goodput = mix.mean_goodput_rps() if mean_based else percentile_goodput_rps(mix)
    return plan_day(rates, goodput, scenario.gpu.gpus_per_replica, scenario.gpu.price_per_hour, headroom)


__all__ = ["DailyPlan", "HOURS", "check_profile", "diurnal_rates", "plan_day", "plan_scenario_day"]
