"""What every view gets: the sizing's results, its mapping, display units and the shared planning settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity.model.scenario import Results
from capacity.planning.sizing import Sizing


@dataclass(frozen=True, slots=True)
class Context:
    """One rerun's sizing as the views render it (no view computes a number of its own)."""

    results: Results
    doc: dict[str, Any]        # the scenario mapping: what is saved, linked and evaluated
    scenario_json: str         # the same, as canonical JSON (the cache key of every cached computation)
    unit: str                  # "GB" or "GiB": how bytes are shown
    headroom: float            # spare capacity every fleet is sized with [fraction]
    peak_factor: float         # design load over the entered load [-]
    sizing: Sizing = None  # type: ignore[assignment]  # the one answer (``capacity.planning.sizing.size``) every view renders its fleet figures from

    @property
    def binary(self) -> bool:
        return self.unit == "GiB"

    @property
    def load_rps(self) -> float | None:
        """The entered arrival rate [requests/s]; None when not set."""
        return self.results.scenario.workload.arrival_rate or None
