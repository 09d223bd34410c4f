"""Several replicas' results joined into the fleet's (``simulator.router.merge``), checked against each replica
simulated alone and joined by hand."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from capacity.model.scenario import load_scenario
from capacity.simulator import config_from_scenario, simulate, simulate_table
from capacity.simulator.router import assign
from capacity.simulator.workloads import request_table

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "search-llama-8b.yaml"


def _alone(scenario, config, table, replica):
    """Each replica's requests simulated as a fleet of one: (request indices, result)."""
    out = []
    for r in range(config.replicas):
        index = np.flatnonzero(replica == r)
        out.append((index, simulate_table(scenario, replace(config, replicas=1), table.take(index))))
    return out


@pytest.mark.parametrize("overrides", [{"replicas": 3}, {"replicas": 4, "router": "random", "policy": "static"},
                                       {"replicas": 2, "chunked_prefill": True, "max_queued_requests": 4,
                                        "rate": 200.0}])
def test_the_fleet_is_its_replicas_joined(overrides):
    scenario = load_scenario(SCENARIO)
    config = config_from_scenario(scenario, requests=300, **overrides)
    table = request_table(config, scenario.serving.max_model_len)
    fleet = simulate_table(scenario, config, table)
    alone = _alone(scenario, config, table, assign(table, config))
    # requests: each replica's rows under their fleet ids, a replica column, ordered by id
    parts = []
    for r, (index, result) in enumerate(alone):
        part = result.requests.copy()
        part["request_id"] = index[part["request_id"].to_numpy()]
        part["replica"] = r
        parts.append(part)
    expected = pd.concat(parts).sort_values("request_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(fleet.requests, expected, check_exact=True)
    # timeline: at each time any replica recorded, the sum of each replica's last row at or before it
    times = sorted({t for _, res in alone for t in res.timeline["time_s"]})
    assert fleet.timeline["time_s"].tolist() == times
    for column in ("running", "queued", "kv_blocks_used"):
        by_hand = []
        for t in times:
            total = 0
            for _, res in alone:
                seen = res.timeline[res.timeline["time_s"] <= t]
                total += int(seen[column].iloc[-1]) if len(seen) else 0
            by_hand.append(total)
        assert fleet.timeline[column].tolist() == by_hand, column
        assert fleet.timeline[column].dtype == np.int64
    # counters add up, except the pool (one replica's) and the peak (the busiest replica's)
    for key, value in fleet.counters.items():
        values = [res.counters[key] for _, res in alone]
        assert value == {"pool_blocks": values[0], "peak_blocks": max(values)}.get(key, sum(values)), key
    summary = fleet.summary()
    assert fleet.throughput_rps() == summary["throughput_rps"] or math.isnan(summary["throughput_rps"])


def test_an_idle_replica_changes_no_column_type():
    scenario = load_scenario(SCENARIO)
    busy = simulate(scenario, requests=8, replicas=4)
    idle = simulate(scenario, requests=3, replicas=4)  # one replica gets no request
    assert (idle.requests["replica"].to_numpy() < 3).all()
    assert dict(idle.requests.dtypes) == dict(busy.requests.dtypes)
    assert idle.requests["status"].tolist() == ["completed"] * 3
