"""Separate prefill and decode pools (DistServe, Splitwise): prefill replicas run the prompts, decode ones the rest.

``simulation.prefill_replicas: P`` (0, the default: one pool) puts P prefill-only replicas in front of the
``replicas`` decode-only ones, all of the scenario's GPU setting:

* Prefill: the router (``router.assign``) sends each request to a prefill replica, which runs prompts one at a
  time in arrival order, each for ``cost.step_s(0, 0, P_i)`` (what the engine charges for the prompt prefilled
  alone), the M/D/1 queue of the analytic model (``options.prefill_pool_ttft_s``). The first token is then out
  and the KV cache moves to a decode replica in ``options.kv_transfer_s(P_i, kv, BW)``
  (``serving.kv_transfer_bandwidth``; free if unset): the handoff ``h_i``. TTFT = ``h_i - arrival``.
* Decode: the continuous-batching engine (whole-prompt admission) over requests arriving at their handoffs,
  whose prompts cost nothing to prefill (``cost_models.PrefilledCost``): a request joins when a slot and its prompt's KV
  blocks are free and decodes its other A - 1 tokens. TPOT = ``(finish - h_i) / (A - 1)``: a wait for a decode
  slot delays the second token, and counts against the TPOT as a user sees it. ``max_itl_s``: the decode
  engine's longest gap plus that wait (an upper bound on the gap from the first token to the second).

Split pools (a scenario's ``pools`` section, ``model/split_pools.py``): each pool runs on its own scenario
(``pool_engines``): the prefill pool's GPU, layout and engine set ``P_i``'s prefill time and the KV transfer (its
``serving.kv_transfer_bandwidth``), the decode pool's its KV pool, batch cap and decode steps; the replicas default to
each pool's ``workers`` (``simulation.prefill_replicas`` and ``replicas`` override them). The analytic model of the
same pools is ``split_pools.evaluate`` and the sizing's ``split`` rows (docs/simulator.md, "Split pools").

Prefix sharing, multi-turn sessions, KV offload, retries, recorded token times and static batching are
refused with a pool split (the prefill pool keeps no cache). Both event loops run the decode engines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from capacity.model import serving_modes as options
from capacity.model.scenario import Scenario
from capacity.simulator.config import SimulationConfig
from capacity.simulator.cost_models import CostModel
from capacity.simulator.metrics import SimulationResult, tpot_of
from capacity.simulator.router import assign
from capacity.simulator.workloads import RequestTable


def fifo_finish_s(arrival_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Finish times of one server taking jobs one at a time in the order given [s]: ``f_i = max(a_i, f_{i-1}) + s_i``.

    Computed in one numpy pass as ``f_i = S_i + max_{k <= i} (a_k - S_{k-1})``, ``S`` the running sum of the
    services (Lindley's recursion unrolled; equal to the loop to rounding).
    """
    total = np.cumsum(service_s)
    before = total - service_s
    return total + np.maximum.accumulate(arrival_s - before)


def prefill_service_s(cost: CostModel, prompt_tokens: np.ndarray) -> np.ndarray:
    """Each prompt prefilled alone on a prefill replica: ``cost.step_s(0, 0, P_i)`` [s], one call per length."""
    lengths, where = np.unique(prompt_tokens, return_inverse=True)
    return np.array([cost.step_s(0, 0, int(p)) for p in lengths], dtype=float)[where]


@dataclass(frozen=True, slots=True)
class Handoff:
    """The prefill pool's part of every request (in the table's order): ``replica`` (its prefill replica),
    ``start_s`` (its prefill starts), ``handoff_s`` (its first token is out and its KV cache on a decode replica)
    [s]; ``busy_s``: the prefill replicas' summed busy time [s]."""

    replica: np.ndarray
    start_s: np.ndarray
    handoff_s: np.ndarray
    busy_s: float


def handoff_s(table: RequestTable, config: SimulationConfig, cost: CostModel, kv_bytes_per_token: float,
              link_bandwidth: float) -> Handoff:
    """The prefill pool of ``config.prefill_replicas`` replicas (``router.assign``), each a FIFO server of
    ``prefill_service_s``, then the KV transfer (``options.kv_transfer_s``)."""
    service = prefill_service_s(cost, table.prompt_tokens)
    end = np.empty(len(table))
    replica = assign(table, dataclasses.replace(config, replicas=config.prefill_replicas))
    for r in range(config.prefill_replicas):
        index = np.flatnonzero(replica == r)
        end[index] = fifo_finish_s(table.arrival_s[index], service[index])
    handoff = end + options.kv_transfer_s(table.prompt_tokens, kv_bytes_per_token, link_bandwidth)
    return Handoff(replica, end - service, handoff, float(service.sum()))


def pool_engines(scenario: Scenario, analytic: Any = None) -> tuple[tuple[Scenario, Any], tuple[Scenario, Any]]:
    """((prefill scenario, its evaluation), (decode scenario, its evaluation)): each pool's own scenario where
    ``scenario`` states ``pools`` (``split_pools.pool_scenarios``), else ``scenario`` for both (``analytic``: its
    ``evaluate()`` where the caller has it)."""
    raw = scenario.raw or {}
    if isinstance(raw.get("pools"), Mapping):
        from capacity.model.split_pools import pool_scenarios

        stated = pool_scenarios(raw)
        return (stated.prefill, stated.prefill.evaluate()), (stated.decode, stated.decode.evaluate())
    analytic = analytic if analytic is not None else scenario.evaluate()
    return (scenario, analytic), (scenario, analytic)


def decode_config(config: SimulationConfig) -> SimulationConfig:
    """The decode pool's engine settings: whole-prompt admission (a prefilled prompt takes no chunks), no split, and
    no request latency: its arrivals are handoffs, not users' requests (``as_users_see`` and ``user_times`` add the
    latency to what a user sees, once)."""
    return dataclasses.replace(config, prefill_replicas=0, chunked_prefill=False, request_latency_s=0.0)


def split(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any, cost: CostModel,
          ) -> tuple[Handoff, np.ndarray, RequestTable]:
    """(the prefill pool's ``Handoff``, the decode pool's order of the requests, its request table): the decode
    pool sees each request arrive at its handoff, in the order of the handoffs."""
    kv = float(analytic["kv_bytes_per_token"])
    hand = handoff_s(table, config, cost, kv, float(scenario.inputs()["kv_transfer_bandwidth"]))
    order = np.argsort(hand.handoff_s, kind="stable")
    moved = table.take(order)
    return hand, order, dataclasses.replace(moved, arrival_s=hand.handoff_s[order])


def user_times(arrival_s: np.ndarray, handoff: np.ndarray, output_tokens: np.ndarray, finish_s: np.ndarray,
               request_latency_s: float = 0.0) -> dict[str, np.ndarray]:
    """Per-request times a user sees [s]: ``ttft_s = h - arrival + L`` (L the request latency outside the engines,
    ``analysis.delayed_ttft``), ``tpot_s`` from the handoff to the finish (``metrics.tpot_of``; NaN for one-token
    answers or requests that did not finish), ``finish_s``."""
    return {"arrival_s": arrival_s, "ttft_s": handoff - arrival_s + request_latency_s,
            "tpot_s": tpot_of(handoff, finish_s, output_tokens), "finish_s": finish_s}


def as_users_see(result: SimulationResult, config: SimulationConfig, table: RequestTable, hand: Handoff,
                 order: np.ndarray) -> SimulationResult:
    """The decode pool's result (over the requests in handoff order) as the pools' result: requests in id order,
    with their arrivals, ``queue_s`` (to the start of the prefill), TTFT, TPOT, ``max_itl_s`` and ``e2e_s`` as a
    user sees them (module docstring), and the prefill replica of each; ``config``: the simulation's own."""
    df = result.requests
    ids = order[df["request_id"].to_numpy()]
    arrival, handoff = table.arrival_s[ids], hand.handoff_s[ids]
    finish = df["finish_s"].to_numpy(dtype=float)
    wait = df["ttft_s"].to_numpy(dtype=float)  # the decode engine's TTFT: the wait for a slot (its prefill takes 0 s)
    seen = user_times(arrival, handoff, df["output_tokens"].to_numpy(), finish, config.request_latency_s)
    df = df.assign(request_id=ids, arrival_s=arrival, queue_s=hand.start_s[ids] - arrival, ttft_s=seen["ttft_s"],
                   tpot_s=seen["tpot_s"], max_itl_s=df["max_itl_s"].to_numpy(dtype=float) + wait,
                   e2e_s=finish - arrival + config.request_latency_s, prefill_replica=hand.replica[ids])
    df = df.sort_values("request_id", kind="stable").reset_index(drop=True)
    counters = {**result.counters, "prefill_busy_s": hand.busy_s}
    return dataclasses.replace(result, config=config, requests=df, counters=counters)


__all__ = ["Handoff", "as_users_see", "decode_config", "fifo_finish_s", "handoff_s", "pool_engines",
           "prefill_service_s", "split", "user_times"]
