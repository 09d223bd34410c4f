"""A discrete-event simulator of one LLM serving engine: batching policy, paged KV pool, prefix cache.

``simulate(scenario, **overrides)`` runs the scenario's ``simulation:`` block (keys may
be overridden, e.g. ``simulate(s, policy="static", rate=12)``) over the KV pool the
analytic core computes (``pool_blocks`` of ``serving.block_size`` tokens) and returns a
SimulationResult: ``.summary()``, ``.requests`` (one row per request) and ``.timeline``.

Layout: ``config`` (the simulation block), ``workloads`` (arrivals and lengths),
``cost_models`` (teaching and roofline), ``allocator`` (blocks, prefix cache),
``entities``, ``engine`` (books), ``scheduler`` (policies), ``metrics`` (results),
``router`` (replicas), ``command`` (``capacity simulate``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from capacity.model.scenario import Scenario
from capacity.runtime import budget
from capacity.simulator.config import SimulationConfig, config_from_scenario
from capacity.simulator.cost_models import CostModel, PrefilledCost, RooflineCost, TeachingCost, cost_model_for
from capacity.simulator.engine import Engine
from capacity.simulator.metrics import Books, SimulationResult, books, request_times, result_of
from capacity.simulator.router import assign, merge, subset
from capacity.simulator.scheduler import run_continuous, run_static
from capacity.simulator.workloads import RequestTable, request_table

#: Running sequences when neither the simulation block nor serving.max_num_seqs caps them (the pool does).
UNLIMITED = 1 << 40


def simulate(scenario: Scenario, base_dir: str | Path | None = None, event_loop: str = "auto",
             analytic: Any = None, **overrides: Any) -> SimulationResult:
    """Simulate ``scenario``'s engine under its simulation block (``overrides`` win); ScenarioError on bad input.

    ``base_dir`` resolves a relative ``trace`` path (the CLI passes the scenario file's folder). ``event_loop``:
    "auto" (the compiled loop where it applies) or "python" (the reference loop); ``result.event_loop`` says
    which ran. ``analytic``: ``scenario.evaluate()`` where the caller has it already (a search simulates one
    engine at many replica counts).
    """
    config = config_from_scenario(scenario, event_loop, **overrides)
    table = request_table(config, scenario.serving.max_model_len, base_dir)
    if config.retries:
        from capacity.simulator.retries import simulate_retries

        return simulate_retries(scenario, config, table)
    return simulate_table(scenario, config, table, event_loop, analytic)


def simulate_table(scenario: Scenario, config: SimulationConfig, table: RequestTable,
                   event_loop: str = "auto", analytic: Any = None) -> SimulationResult:
    """Simulate an explicit request table (what ``simulate`` does after building the workload).

    With ``config.replicas > 1`` a router splits the requests over identical replicas (``router.py``); with
    ``config.prefill_replicas`` they are the decode pool behind a prefill pool (``pools.py``).
    ``event_loop``, ``analytic``: as in ``simulate``.
    """
    if config.prefill_replicas:
        return _simulate_pools(scenario, config, table, analytic, event_loop)
    return _replicas_result(scenario, config, table, analytic, event_loop)


def _replicas_result(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any,
                     event_loop: str, cost: CostModel | None = None) -> SimulationResult:
    """``config.replicas`` engines behind the router over ``table`` as one SimulationResult (``cost``: their
    cost model where the caller sets it)."""
    if config.replicas > 1:
        return merge(list(_each_replica(scenario, config, table, analytic, event_loop, cost=cost)), scenario,
                     config)
    b = _simulate_one(scenario, config, table, analytic, event_loop, cost)
    return result_of(b, scenario, config)


def _simulate_pools(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any,
                    event_loop: str, times_only: bool = False) -> SimulationResult | tuple[dict[str, np.ndarray], str]:
    """Separate prefill and decode pools (``pools.py``): the prefill pool's handoffs, then the decode pool's
    engines; the requests in id order with the times a user sees (or, ``times_only``, those times alone).
    A scenario with a ``pools`` section runs each pool on its own scenario (``pools.pool_engines``: the prefill
    pool's GPU and layout set the prompts' times and the KV transfer, the decode pool's its KV pool, batch and
    steps)."""
    from capacity.simulator import pools

    (prefill, p_analytic), (decode, d_analytic) = pools.pool_engines(scenario, analytic)
    cost = cost_model_for(prefill, config)
    hand, order, moved = pools.split(prefill, config, table, p_analytic, cost)
    d_cost = cost if decode is prefill else cost_model_for(decode, config)
    decode_config, prefilled = pools.decode_config(config), PrefilledCost(d_cost)
    if times_only:
        times, loop = _replicas_times(decode, decode_config, moved, d_analytic, event_loop, prefilled)
        finish = np.empty(len(table))
        finish[order] = times["finish_s"]
        return pools.user_times(table.arrival_s, hand.handoff_s, table.output_tokens, finish,
                                config.request_latency_s), loop
    result = _replicas_result(decode, decode_config, moved, d_analytic, event_loop, prefilled)
    return pools.as_users_see(result, config, table, hand, order)


def simulate_times(scenario: Scenario, base_dir: str | Path | None = None, event_loop: str = "auto",
                   analytic: Any = None, **overrides: Any) -> tuple[dict[str, np.ndarray], str]:
    """``simulate``'s per-request times alone (``metrics.request_times``: arrival, TTFT, TPOT, finish [s], every
    request in id order, the same values as ``simulate(...).requests``' columns) and which event loop ran,
    without the books, DataFrames and timeline a SimulationResult carries: what a search needs of each run.
    A simulation block with retries runs ``simulate`` and reads its columns."""
    config = config_from_scenario(scenario, event_loop, **overrides)
    if config.retries:
        result = simulate(scenario, base_dir, event_loop, analytic, **overrides)
        df = result.requests
        times = {k: df[k].to_numpy(dtype=float) for k in ("arrival_s", "ttft_s", "tpot_s", "finish_s")}
        times["finish_s"] = np.where(df["status"].to_numpy() == "completed", times["finish_s"], np.nan)
        return times, result.event_loop
    table = request_table(config, scenario.serving.max_model_len, base_dir)
    if config.prefill_replicas:
        return _simulate_pools(scenario, config, table, analytic, event_loop, times_only=True)
    return _replicas_times(scenario, config, table, analytic, event_loop)


def _replicas_times(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any,
                    event_loop: str, cost: CostModel | None = None) -> tuple[dict[str, np.ndarray], str]:
    """``simulate_times`` of ``config.replicas`` engines behind the router over ``table``."""
    if config.replicas == 1:
        return _simulate_one(scenario, config, table, analytic, event_loop, cost, times_only=True)
    parts = list(_each_replica(scenario, config, table, analytic, event_loop, times_only=True, cost=cost))
    order = np.argsort(np.concatenate([index for index, _ in parts]), kind="stable")  # as router.merge orders them
    return {k: np.concatenate([t[k] for _, (t, _) in parts])[order] for k in parts[0][1][0]}, parts[0][1][1]


def _each_replica(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any,
                  event_loop: str, times_only: bool = False, cost: CostModel | None = None,
                  ) -> Iterator[tuple[np.ndarray, Any]]:
    """(request indices, ``_simulate_one``'s books or times) of each of ``config.replicas`` replicas behind the
    router (``router.assign``); ``cost``: their cost model (None: the simulation block's)."""
    replica = assign(table, config)
    # the replicas are identical: one analytic evaluation and one cost model serve them all
    analytic = analytic if analytic is not None else scenario.evaluate()
    cost = cost or cost_model_for(scenario, config)
    for r in range(config.replicas):
        budget.check()
        index = np.flatnonzero(replica == r)
        yield index, _simulate_one(scenario, config, subset(table, index), analytic, event_loop, cost, times_only)


def _simulate_one(scenario: Scenario, config: SimulationConfig, table: RequestTable, analytic: Any = None,
                  event_loop: str = "auto", cost: CostModel | None = None, times_only: bool = False,
                  ) -> Books | tuple[dict[str, np.ndarray], str]:
    """One replica's engine over ``table`` (``analytic``: ``scenario.evaluate()``, ``cost``: its cost model,
    when the caller has them); its books, or with ``times_only`` (``request_times``, the loop that ran)."""
    if analytic is None:
        analytic = scenario.evaluate()
    pool_blocks = int(analytic["pool_blocks"])
    batch_max = max(1, int(analytic["batch_max"]))
    if config.policy == "static":
        slots = config.batch_size or config.max_num_seqs or batch_max
        offered = slots
    else:
        slots = config.max_num_seqs or UNLIMITED
        offered = config.max_num_seqs or batch_max
    tokens_table = table
    if scenario.serving.speculative and config.cost_model != "teaching":  # iterations that emit accepted tokens
        from capacity.simulator.speculative import iteration_table

        table = iteration_table(table, scenario.serving.speculative, config.seed)
    engine = Engine(table, config, cost or cost_model_for(scenario, config), pool_blocks, scenario.serving.block_size,
                    scenario.serving.max_model_len, slots, offered)
    if config.cpu_offload_bytes:
        from capacity.formulas import memory
        from capacity.model.offload import reload_s

        kv = float(analytic["kv_bytes_per_token_per_gpu"])
        bs = scenario.serving.block_size
        engine.enable_offload(int(memory.pool_blocks(config.cpu_offload_bytes, bs, kv)),
                              float(reload_s(bs, kv, config.offload_bandwidth)))
    if config.policy == "static":
        run_static(engine)
    else:
        run_continuous(engine, event_loop)
    engine.alloc.check()
    if engine.alloc.used:
        raise RuntimeError(f"{engine.alloc.used} KV blocks still held after every request left")
    table = tokens_table  # metrics in tokens: each request's own answer length (speculation ran iterations)
    if engine.closed:  # the arrivals the clients made (the table's are placeholders)
        table = replace(table, arrival_s=np.asarray(engine.arrival, dtype=float))
    if times_only:
        return request_times(engine, table), engine.event_loop
    return books(engine, table, config)


__all__ = ["CostModel", "RooflineCost", "SimulationConfig", "SimulationResult", "TeachingCost", "config_from_scenario",
           "simulate", "simulate_table",
           "simulate_times"]
