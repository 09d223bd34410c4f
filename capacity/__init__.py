"""Capacity planner for LLM serving: KV memory, roofline step times, goodput under promises, cost.

The formula functions are the procedural core (scalars or numpy arrays in, same out);
``Scenario`` composes them. Every formula, its units and source: docs/model.md; usage: the README.

The names below are imported on first use (PEP 562), so ``import capacity`` and ``capacity --version``
do not pay for numpy, pandas or the fleet code until something asks for them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module (relative to this package) that defines it.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("INPUTS", "RESULTS", "analyse"), "model.analysis"),
    "ScenarioError": "errors",
    **dict.fromkeys(("fleet_for_load", "fleet_options"), "planning.fleet"),
    "evaluate_frame": "model.frame",
    **dict.fromkeys(("blocks_for", "floor_count", "kv_bytes_per_token", "max_requests_contiguous",
                     "max_requests_paged", "max_requests_shared_prefix", "pool_blocks", "pool_bytes",
                     "private_blocks", "shared_blocks", "weight_bytes"), "formulas.memory"),
    **dict.fromkeys(("ceiling_rps", "critical_batch", "decode_compute_s", "decode_memory_s", "decode_share",
                     "decode_step_s", "gpu_time_per_request_s", "prefill_s", "single_stream_tokens_per_s",
                     "tpot_at_ceiling_s"), "formulas.roofline"),
    **dict.fromkeys(("Results", "Scenario", "load_scenario"), "model.scenario"),
    **dict.fromkeys(("cost_per_million_tokens", "goodput_rps", "in_flight", "max_rate_for_tpot_rps",
                     "max_rate_for_ttft_rps", "tpot_at_rate_s", "ttft_at_rate_s"), "formulas.slo"),
    **dict.fromkeys(("format_bytes", "format_time", "parse_quantity"), "inputs.units"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` on first use and cache the name here."""
    home = _HOMES.get(name)
    if home is None:  # a submodule (capacity.formulas.memory, capacity.simulator ...) reached as an attribute
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'capacity' has no attribute {name!r}")
        return importlib.import_module(f".{name}", __name__)
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
