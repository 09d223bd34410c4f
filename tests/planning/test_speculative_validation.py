"""Issue 29: the speculative step against published measurements with a stated acceptance length and draft length
(``validation/speculative.yaml``): within 15%."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("spec_validation", ROOT / "validation" / "speculative.py")
validation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(validation)


def test_every_published_speculative_point_is_within_15_percent():
    rows = validation.rows()
    assert len(rows) >= 2
    for row in rows:
        assert abs(row["error_pct"]) <= 15.0, row


def test_speculation_shrinks_the_fleet_where_it_pays():
    """Llama-3.1-8B on H100 under vLLM's profile, 200 requests/s at TPOT <= 20 ms: an EAGLE drafter (γ 3, 2.5 tokens
    a step) keeps the promise on fewer GPUs than the plain engine."""
    from capacity.model.scenario import Scenario
    from capacity.planning.sizing import size

    raw = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": {"engine": "vllm"},
           "workload": {"prompt_tokens": 1000, "output_tokens": 300, "arrival_rate": 200}, "slo": {"tpot": "20 ms"}}
    plain = size(Scenario.from_dict(raw))
    spec = size(Scenario.from_dict({**raw, "serving": {"engine": "vllm", "speculative": {
        "method": "eagle", "draft_tokens": 3, "acceptance_length": 2.5}}}))
    assert spec.gpus < plain.gpus
    assert spec.cost_per_month < plain.cost_per_month


def test_the_answer_prices_power():
    """8B on H100 (700 W board power) with electricity at $0.12/kWh and PUE 1.3: each GPU costs
    0.7 kW x 1.3 x 730 h x $0.12 = $79.72 a month of electricity."""
    from capacity.model.scenario import Scenario
    from capacity.planning.sizing import size

    z = size(Scenario.from_dict({"model": "llama-3.1-8b", "gpu": {"name": "h100-sxm", "energy_price_per_kwh": 0.12,
                                                                  "pue": 1.3},
                                 "serving": {"engine": "vllm"}, "workload": {"prompt_tokens": 1000,
                                                                             "output_tokens": 300, "arrival_rate": 50},
                                 "slo": {"tpot": "50 ms"}}))
    assert z.energy_kwh_per_month == pytest.approx(z.gpus * 0.7 * 1.3 * 730)
    assert z.energy_cost_per_month == pytest.approx(z.gpus * 79.716)
    assert z.to_dict()["sizing_energy_cost_per_month"] == z.energy_cost_per_month
