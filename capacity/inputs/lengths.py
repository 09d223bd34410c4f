"""Token-length distributions: one type and one parser for the workload classes and the simulator.

A length is a number (``300``) or a distribution: ``{dist: fixed, value: 300}``, ``{dist: uniform, low: 50,
high: 400}`` (whole numbers in [low, high]), ``{dist: lognormal, mean: 300, sigma: 0.8, low: 1, high: 4096}``
(arithmetic mean ``mean``, log-space ``sigma``, rounded and clipped to [low, high]). The simulator draws from
it (``simulator.workloads.lengths``); the analytic mix model (``mix.py``) takes its equiprobable points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from capacity.errors import ScenarioError, show
from capacity.inputs.specs import non_negative, positive, positive_int

DISTRIBUTIONS = ("fixed", "uniform", "lognormal")
#: Equiprobable points that stand for a length distribution in the analytic model.
LENGTH_POINTS = 8


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution: fixed ``value``; uniform integers in [low, high]; lognormal of arithmetic
    ``mean`` and log-space ``sigma``, rounded and clipped to [low, high]."""

    kind: str
    value: int = 0
    low: int = 1
    high: int = 1
    mean: float = 0.0
    sigma: float = 0.0

    @property
    def maximum(self) -> float:
        """The longest length the distribution gives [tokens]."""
        return float(self.value if self.kind == "fixed" else self.high)

    def points(self, n: int = LENGTH_POINTS) -> np.ndarray:
        """``n`` equiprobable lengths [tokens]: the distribution's quantiles at ``(i + 1/2) / n`` (one if fixed).

        Lognormal: ``clip(rint(exp(mu + sigma Φ⁻¹(u))), low, high)`` with ``mu = ln(mean) - sigma² / 2``.
        """
        if self.kind == "fixed":
            return np.array([float(self.value)])
        u = (np.arange(n) + 0.5) / n
        if self.kind == "uniform":
            return np.floor(self.low + u * (self.high - self.low + 1))
        from scipy.special import ndtri  # here: scipy takes ~0.1 s to import, and most runs draw no lognormal

        mu = math.log(self.mean) - self.sigma**2 / 2.0
        return np.clip(np.rint(np.exp(mu + self.sigma * ndtri(u))), self.low, self.high)


def length_dist(value: Any, path: str) -> LengthDist:
    """``300`` or ``{dist: fixed, value: 300}``, ``{dist: uniform, low: 50, high: 400}``,
    ``{dist: lognormal, mean: 300, sigma: 0.8, low: 1, high: 4096}`` [tokens]; ScenarioError naming ``path``."""
    if not isinstance(value, Mapping):
        return LengthDist("fixed", value=positive_int(value, path))
    unknown = set(value) - {"dist", "value", "low", "high", "mean", "sigma"}
    if unknown:
        raise ScenarioError(f"{path}.{sorted(unknown)[0]} is not a known key; allowed: dist, value, low, high, "
                            f"mean, sigma")
    kind = value.get("dist", "fixed")
    if kind not in DISTRIBUTIONS:
        raise ScenarioError(f"{path}.dist must be one of {', '.join(DISTRIBUTIONS)}, got {show(kind)}")
    if kind == "fixed":
        return LengthDist("fixed", value=positive_int(value.get("value"), f"{path}.value"))
    if kind == "uniform":
        low = positive_int(value.get("low"), f"{path}.low")
        high = positive_int(value.get("high"), f"{path}.high")
        if high < low:
            raise ScenarioError(f"{path}.high ({high}) must be >= {path}.low ({low})")
        return LengthDist("uniform", low=low, high=high)
    mean = positive(value.get("mean"), f"{path}.mean")
    sigma = non_negative(value.get("sigma", 0.5), f"{path}.sigma")
    low = positive_int(value.get("low", 1), f"{path}.low")
    high = positive_int(value.get("high", 1_000_000), f"{path}.high")
    if high < low:
        raise ScenarioError(f"{path}.high ({high}) must be >= {path}.low ({low})")
    return LengthDist("lognormal", low=low, high=high, mean=mean, sigma=sigma)


def prefix_problem(prefix_tokens: int, prompt: LengthDist, path: str) -> str | None:
    """The problem with a shared prefix longer than the longest prompt (``path`` names the prefix field), or None."""
    if prefix_tokens > prompt.maximum:
        return f"{path} ({prefix_tokens}) must not exceed the longest prompt ({prompt.maximum:g} tokens)"
    return None


__all__ = ["DISTRIBUTIONS", "LENGTH_POINTS", "LengthDist", "length_dist", "prefix_problem"]
