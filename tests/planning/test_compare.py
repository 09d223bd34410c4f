"""Compare by what the customer pays (issue 30): each GPU type's cheapest fleet for the load, the answer's marked,
equal to ``capacity fleet`` for the same load and GPU list, and the customer-facing GPU list."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from capacity.cli import main
from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.model.scenario import Scenario, load_scenario
from capacity.planning.compare import cheaper_line, compare_fleets
from capacity.planning.sizing import HOURS_PER_MONTH, size

ROOT = Path(__file__).resolve().parents[2]
RAG = ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml"
GPUS = ["h100-sxm", "h200", "a100-80gb", "l40s", "mi300x"]


@pytest.fixture(scope="module")
def table():
    return compare_fleets(load_scenario(RAG), GPUS)


def test_cheapest_row_is_capacity_fleets(table, capsys):
    """The first row equals the cheapest option of ``capacity fleet`` for the same load, plan and GPU list."""
    scenario = load_scenario(RAG)
    assert main(["fleet", str(RAG), "--target-rps", str(scenario.workload.arrival_rate), "--gpus", ",".join(GPUS),
                 "--format", "json"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    options = fleet["options"] if isinstance(fleet, dict) else fleet
    best = next(o for o in options if o["meets_slo"])
    first = table.iloc[0]
    assert (first["gpu"], int(first["tensor_parallel"]), first["mode"]) == (best["gpu"], best["tensor_parallel"],
                                                                             best["mode"])
    assert first["gpus"] == best["gpus"] and first["cost_per_hour"] == pytest.approx(best["cost_per_hour"], rel=1e-12)


def test_rows_are_sorted_by_monthly_cost_and_one_per_gpu(table):
    keeps = table[table["meets_slo"]]
    assert list(keeps["cost_per_month"]) == sorted(keeps["cost_per_month"])
    assert sorted(table["gpu"]) == sorted(GPUS)
    assert (table["cost_per_month"] == table["cost_per_hour"] * HOURS_PER_MONTH).all()


def test_the_answers_row_is_marked_with_the_answers_fleet(table):
    answer = size(load_scenario(RAG))
    chosen = table[table["chosen"]]
    assert len(chosen) == 1
    row = chosen.iloc[0]
    assert row["gpu"] == "h100-sxm" and int(row["tensor_parallel"]) == answer.tensor_parallel
    assert row["mode"] == answer.mode and row["gpus"] == answer.gpus
    assert row["cost_per_month"] == pytest.approx(answer.cost_per_month, rel=1e-12)


def test_board_power_is_gpus_times_the_catalogs_watts(table):
    for _, row in table.iterrows():
        watts = catalog.gpu(row["gpu"]).get("tdp_watts")
        if watts and math.isfinite(row["gpus"]):
            assert row["board_power_kw"] == pytest.approx(row["gpus"] * watts / 1e3, rel=1e-12)
            assert row["energy_mwh_per_month"] == pytest.approx(row["board_power_kw"] * 730 / 1e3, rel=1e-12)


def test_a_cheaper_gpu_is_said_in_words(table):
    keeps, chosen = table[table["meets_slo"]], table[table["chosen"]].iloc[0]
    line = cheaper_line(table)
    if keeps.iloc[0]["cost_per_month"] < chosen["cost_per_month"]:
        saving = chosen["cost_per_month"] - keeps.iloc[0]["cost_per_month"]
        assert line is not None and f"${saving:,.0f} less" in line and keeps.iloc[0]["gpu"] in line
    else:
        assert line is None
    alone = compare_fleets(load_scenario(RAG), ["h100-sxm"])
    assert cheaper_line(alone) is None  # the answer's own GPU alone: nothing cheaper to say


def test_customer_gpus_leave_out_consumer_and_export_parts():
    shown = catalog.customer_gpus()
    assert "h100-sxm" in shown and "mi300x" in shown
    for key in ("rtx-4090", "rtx-5090", "h20"):
        entry = catalog.gpu(key)
        assert key not in shown and entry["segment"] in ("consumer", "export") and entry["segment_source"]


def test_no_load_is_a_clear_error():
    raw = load_scenario(RAG).raw
    workload = {k: v for k, v in raw["workload"].items() if k != "arrival_rate"}
    unloaded = Scenario.from_dict({**raw, "workload": workload})
    with pytest.raises(ScenarioError, match="arrival_rate"):
        compare_fleets(unloaded, ["h100-sxm"])
