"""Percentile promises (p50/p99 TTFT and TPOT) from the simulator, where the closed form gives only means.

The analytic model (``analysis``, ``slo``) is the fast path: mean TTFT and TPOT at a load, and the goodput
that keeps mean-value promises. A promise on a percentile ("99% of users see their first token within
2 s") needs the distribution, which the discrete-event simulator provides (``capacity.simulator``):

* ``simulated_latency(scenario, rate)``: steady-state mean/p50/p90/p99 TTFT and TPOT at one Poisson load,
  requests of the scenario's shape, KV reserved for prompt + answer as the analytic model counts it,
  the roofline cost model, the first ``warmup`` share of the arrivals discarded.
* ``percentile_goodput(scenario, ...)``: the largest load whose simulated percentiles keep the promises,
  by bisection on the rate with common random numbers (the same seed at every rate).
* ``percentile_validation(scenario, fractions)``: analytic per-class quantiles against the simulator's;
* ``ttft_validation(scenario, fractions)``: the analytic TTFT against the simulated mean at shares of
  the ceiling (docs/fleet.md shows the table for essay 001).

Each simulation of 20,000 requests takes about a second; these functions are for reports and checks,
not for sweeps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from capacity.model.scenario import Scenario

#: Simulation settings that make the simulator's engine the analytic model's: continuous batching,
#: prefills that pause decoding, KV reserved for prompt + answer at admission, the roofline cost model.
ANALYTIC_ENGINE: dict[str, Any] = {"policy": "continuous", "cost_model": "roofline", "kv_allocation": "reserve",
                                   "arrival": "poisson", "chunked_prefill": False}

#: Summary columns of ``simulated_latency``.
STATS = ("mean", "p50", "p90", "p99")


def simulated_latency(scenario: Scenario, rate: float, requests: int = 20_000, seed: int = 0,
                      warmup: float = 0.2, **overrides: Any) -> dict[str, float]:
    """Steady-state TTFT and TPOT statistics [s] of the simulated engine at ``rate`` [requests/s].

    Keys ``{mean,p50,p90,p99}_{ttft,tpot}_s`` over the completed requests that arrived after the first
    ``warmup`` share of the run, plus ``requests`` (how many were counted) and ``rate_rps``.
    ``overrides`` go to ``simulate`` (e.g. ``chunked_prefill=True``).
    """
    from capacity.simulator import simulate  # the simulator imports this package's scenario module

    settings = {**ANALYTIC_ENGINE, "requests": requests, "seed": seed, "rate": rate, **overrides}
    frame = simulate(scenario, **settings).requests
    steady = frame[(frame["status"] == "completed") & (frame["arrival_s"] >= warmup * frame["arrival_s"].max())]
    out: dict[str, float] = {"rate_rps": float(rate), "requests": float(len(steady))}
    for name in ("ttft", "tpot"):
        values = steady[f"{name}_s"].to_numpy(dtype=float)
        values = values[~np.isnan(values)]
        for stat in STATS:
            if not len(values):
                out[f"{stat}_{name}_s"] = math.nan
            elif stat == "mean":
                out[f"{stat}_{name}_s"] = float(values.mean())
            else:
                out[f"{stat}_{name}_s"] = float(np.percentile(values, float(stat[1:])))
    return out


def keeps(stats: dict[str, float], ttft_s: float | None, tpot_s: float | None, percentile: str) -> bool:
    """Whether simulated ``stats`` keep ``percentile`` (e.g. ``"p99"``) TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``."""
    ok = True
    if ttft_s is not None:
        ok &= stats[f"{percentile}_ttft_s"] <= ttft_s
    if tpot_s is not None:
        ok &= stats[f"{percentile}_tpot_s"] <= tpot_s
    return bool(ok)


def percentile_goodput(scenario: Scenario, ttft_s: float | None = None, tpot_s: float | None = None,
                       percentile: str = "p99", steps: int = 8, requests: int = 20_000, seed: int = 0,
                       **overrides: Any) -> dict[str, Any]:
    """Largest load [requests/s] whose simulated ``percentile`` TTFT and TPOT keep the promises.

    Bisection on the rate over (0, ceiling] for ``steps`` halvings (2^-8 of the ceiling by default), the
    same seed at every rate so the comparison is between loads, not random streams. Returns
    ``goodput_rps``, its ``stats`` (``simulated_latency``) and the analytic ``mean_goodput_rps`` for the same
    promises on means, so a report can show what the tail costs.
    """
    if ttft_s is None and tpot_s is None:
        raise ValueError("give a TTFT or a TPOT promise (seconds)")
    ceiling = float(scenario.evaluate()["ceiling_rps"])
    lo, hi = 0.0, ceiling
    best: dict[str, float] | None = None
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        stats = simulated_latency(scenario, mid, requests, seed, **overrides)
        if keeps(stats, ttft_s, tpot_s, percentile):
            lo, best = mid, stats
        else:
            hi = mid
    means = scenario.with_changes(slo={"ttft_s": ttft_s, "tpot_s": tpot_s}).evaluate()
    return {"goodput_rps": lo, "percentile": percentile, "stats": best, "ceiling_rps": ceiling,
            "mean_goodput_rps": float(means["goodput_rps"])}


def ttft_validation(scenario: Scenario, fractions: tuple[float, ...] = (0.5, 0.8, 0.95), requests: int = 40_000,
                    seeds: tuple[int, ...] = (0,)) -> pd.DataFrame:
    """Analytic TTFT (``ttft_at_load_s``) against the simulated steady-state mean at shares of the ceiling.

    One row per fraction: rate_rps, analytic_ttft_s, simulated mean/p50/p99 TTFT (mean over ``seeds``),
    error (analytic / simulated - 1), and the same for TPOT.
    """
    ceiling = float(scenario.evaluate()["ceiling_rps"])
    rows = []
    for fraction in fractions:
        rate = fraction * ceiling
        analytic = scenario.with_changes(workload={"arrival_rate": rate}).evaluate()
        runs = [simulated_latency(scenario, rate, requests, seed) for seed in seeds]
        sim = {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}
        rows.append({"fraction": fraction, "rate_rps": rate, "analytic_ttft_s": analytic["ttft_at_load_s"],
                     "simulated_ttft_s": sim["mean_ttft_s"], "p50_ttft_s": sim["p50_ttft_s"],
                     "p99_ttft_s": sim["p99_ttft_s"], "ttft_error": analytic["ttft_at_load_s"] / sim["mean_ttft_s"] - 1,
                     "analytic_tpot_s": analytic["tpot_at_load_s"], "simulated_tpot_s": sim["mean_tpot_s"],
                     "tpot_error": analytic["tpot_at_load_s"] / sim["mean_tpot_s"] - 1})
    return pd.DataFrame(rows)


def closed_loop_validation(scenario: Scenario, fractions: tuple[float, ...] = (0.3, 0.6, 0.9),
                           think_time_s: float = 0.0, requests: int = 8_000, seed: int = 0, warmup: float = 0.3,
                           output_spread: float = 0.5) -> pd.DataFrame:
    """The closed-loop model (``analysis.closed_loop``) against the simulator run closed-loop, at users in flight
    whose predicted throughput is each share of the ceiling.

    The simulator runs the analytic model's engine (``ANALYTIC_ENGINE``) with ``arrival: closed``: C clients, each
    sending its next request an exponential think time of mean ``think_time_s`` after its answer. Answers are
    uniform within ``A (1 +- output_spread)`` (mean A): with every answer the same length and no think time the
    clients stay in lockstep (they arrive, prefill and finish together, like static batching), which no mean-value
    model describes. Requests that arrived in the first ``warmup`` share of the run are not counted. One row per
    fraction: users, analytic and simulated throughput, TTFT and TPOT (means), and the errors (analytic /
    simulated - 1).
    """
    from capacity.model.analysis import closed_loop, replica_stages
    from capacity.simulator import simulate

    inputs = {**scenario.inputs(), "think_time_s": think_time_s}
    model, mem, prefill, ceiling = replica_stages(inputs)
    a = scenario.workload.output_tokens
    grid = np.arange(1, int(2 * float(mem.batch_running)) + 1, dtype=float)
    # Spread answers: no clustering; the request latency as the simulator takes it (outside the engine).
    curve = closed_loop(model, prefill, a, mem.batch_running, ceiling, grid, think_time_s,
                        request_latency_s=inputs["request_latency_s"])
    low, high = max(1, round(a * (1 - output_spread))), round(a * (1 + output_spread))
    rows = []
    for fraction in fractions:
        i = int(np.argmin(np.abs(curve.throughput_rps / float(ceiling) - fraction)))
        users = int(grid[i])
        frame = simulate(scenario, **{**ANALYTIC_ENGINE, "arrival": "closed"}, concurrency=users,
                         client_think_time=think_time_s, requests=requests, seed=seed,
                         output_tokens={"dist": "uniform", "low": low, "high": high}).requests
        done = frame[frame["status"] == "completed"]
        steady = done[done["arrival_s"] >= warmup * done["arrival_s"].max()]
        throughput = (len(steady) - 1) / (steady["finish_s"].max() - steady["finish_s"].min())
        row = {"fraction": float(curve.throughput_rps[i] / ceiling), "users": users, "think_time_s": think_time_s}
        for name, model_value, sim_value in (("throughput_rps", curve.throughput_rps[i], throughput),
                                             ("ttft_s", curve.ttft_s[i], steady["ttft_s"].mean()),
                                             ("tpot_s", curve.tpot_s[i], steady["tpot_s"].mean())):
            row[f"analytic_{name}"], row[f"simulated_{name}"] = float(model_value), float(sim_value)
            row[f"{name.split('_')[0]}_error"] = float(model_value) / float(sim_value) - 1
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["ANALYTIC_ENGINE", "closed_loop_validation", "keeps", "percentile_goodput", "simulated_latency",
           "ttft_validation"]


def percentile_validation(scenario: Any, fractions: tuple[float, ...] = (0.5, 0.8), requests: int = 20_000,
                          seed: int = 0, warmup: float = 0.2) -> pd.DataFrame:
    """Analytic quantiles against the simulator's, per class, at shares of the mix's ceiling.

    The simulator runs the analytic model's engine (``ANALYTIC_ENGINE``: continuous batching,
    prefills that pause decoding, KV reserved, roofline costs, Poisson arrivals) on the scenario's classes.
    One row per (fraction, class, metric, quantile): ``analytic_s``, ``simulated_s``, ``error`` (analytic /
    simulated - 1).
    """
    from capacity.model.mix import mix_model
    from capacity.model.percentiles import class_latency
    from capacity.simulator import simulate

    mix = mix_model(scenario)
    rows = []
    for fraction in fractions:
        rate = fraction * mix.ceiling_rps
        sim = simulate(scenario, **{**ANALYTIC_ENGINE, "requests": requests, "seed": seed, "rate": rate})
        table = sim.class_summary(warmup).set_index("workload_class")
        for j, c in enumerate(mix.classes):
            ours = class_latency(mix, j, rate)
            theirs = table.loc[c.name if c.name in table.index else "all"]
            for key, value in ours.items():
                if key.startswith("mean"):
                    continue
                rows.append({"fraction": fraction, "rate_rps": rate, "class": c.name, "metric": key[-6:-2],
                             "quantile": key.split("_")[0], "analytic_s": value, "simulated_s": theirs[key],
                             "error": value / theirs[key] - 1.0})
    return pd.DataFrame(rows)
