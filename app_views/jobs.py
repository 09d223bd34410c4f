"""The app's heavy work as plain functions of JSON text and numbers, run on the server's worker pool
(``app_views.server.run_heavy``).

Each returns what its view draws and nothing more, so that what comes back from a worker, is cached and is sent to
the browser stays small whatever the size of the run: the summaries, the timelines, the request-time distributions
as counts in bins (not 100,000 simulated requests per policy, 26 MB a run), a day's plan in 15-minute bins.
No Streamlit here: a worker process imports this module to run a job.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from capacity.errors import ScenarioError
from capacity.runtime.budget import BudgetExceeded

#: Batching policies the Simulator view runs side by side.
POLICIES = ("static", "continuous")
#: Bins of each request-time distribution the Simulator view draws.
HISTOGRAM_BINS = 40


#: A tiny sizing a worker simulates once at its start: the compiled loop's first call materialises the kernel
#: (about 0.2 s and 75 MB, once per process), which the first user's job should not wait for.
WARM_UP = {"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm"},
           "workload": {"prompt_tokens": 100, "output_tokens": 10}}


def start_worker() -> None:
    """A worker's start: import the simulator, load its compiled loop (about a second; compiled once per
    installation) and run it once on ``WARM_UP``, so that every job, the first included, runs in it at full speed.
    A worker may wait for this, unlike a session's thread (``scheduler.load_compiled_loop`` loads it in the
    background there). Where numba is missing or fails, the Python loop gives the same results."""
    try:
        from capacity import Scenario
        from capacity.simulator import compiled, simulate

        compiled.load()
        simulate(Scenario.from_dict(WARM_UP), policy="continuous", requests=20, rate=1.0)
    except Exception:  # noqa: BLE001 - the jobs run in the Python loop, and meet any real error themselves
        pass


def histogram(values: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Counts of the finite values [s] in ``bins`` equal bins over their own range, with the bin edges in ms (each
    policy binned over its own range, as the chart's own binning did): ``{"edges_ms": [bins + 1], "counts": [bins]}``,
    both empty where no value is finite."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)] * 1e3
    if finite.size == 0:
        return {"edges_ms": [], "counts": []}
    lo, hi = float(finite.min()), float(finite.max())
    if hi <= lo:  # one value: one bin around it
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    return {"edges_ms": edges.tolist(), "counts": np.histogram(finite, bins=edges)[0].tolist()}


def policies_for(scenario: Any) -> tuple[str, ...]:
    """The policies the view compares: both, but continuous batching alone for separate prefill and decode pools
    (``pools:``), which the simulator runs only under continuous batching (``simulator.config.pool_problems``)."""
    return ("continuous",) if (scenario.raw or {}).get("pools") else POLICIES


def simulate_pair(scenario_json: str, settings_json: str) -> dict[str, Any] | str:
    """Simulate the sizing under both batching policies (``policies_for``) with the view's settings; what the
    Simulator view draws, or the error text of a sizing or setting the simulator refuses.

    ``{"summaries": {policy: summary}, "timelines": {policy: {time_s, running, kv_blocks_used}}, "waiting":
    {policy: {time_s, waiting}}, "histograms": {"ttft_s" | "tpot_s": {policy: histogram()}}}``. A run past its budget
    raises ``BudgetExceeded`` (not an answer to cache).
    """
    from capacity import Scenario
    from capacity.simulator import simulate
    from capacity.simulator.metrics import waiting_timeline

    try:
        scenario = Scenario.from_dict(json.loads(scenario_json))
        settings = json.loads(settings_json)
        runs = {policy: simulate(scenario, policy=policy, **settings) for policy in policies_for(scenario)}
    except BudgetExceeded:
        raise
    except ScenarioError as exc:
        return "; ".join(exc.problems)
    out: dict[str, Any] = {"summaries": {}, "timelines": {}, "waiting": {}, "histograms": {}}
    for policy, run in runs.items():
        out["summaries"][policy] = run.summary()
        out["timelines"][policy] = {k: run.timeline[k].to_numpy() for k in ("time_s", "running", "kv_blocks_used")}
        waiting = waiting_timeline(run.requests)
        out["waiting"][policy] = {k: waiting[k].to_numpy() for k in ("time_s", "waiting")}
    for column in ("ttft_s", "tpot_s"):
        out["histograms"][column] = {p: histogram(run.requests[column].to_numpy(dtype=float))
                                     for p, run in runs.items()}
    return out


def plan_day(scenario_json: str, peak_rps: float, peak_factor: float, burst: tuple[float, float, float],
             delays: tuple[float, float, float, float], price_ratio: float,
             policies: list[tuple[str, float]]) -> dict[str, Any]:
    """The Autoscaling view's day: ``plan_autoscaling`` rows, summary and the answer's (or the first policy's) day
    in 15-minute bins, for the view's peak, night factor, burst (hour, minutes, factor) and delays (provisioning
    [s], weight-load bandwidth [B/s, 0: none], warm-up [s], scale-down [s])."""
    from capacity.model.scenario import Scenario
    from capacity.planning.autoscaling import DaySpec, plan_autoscaling
    from capacity.planning.daily import diurnal_rates
    from capacity.simulator.autoscale import Delays, Policy
    from capacity.simulator.traffic import Burst

    scenario = Scenario.from_dict(json.loads(scenario_json))
    hour, minutes, factor = burst
    bursts = (Burst(hour * 3600.0, minutes * 60.0, factor),) if minutes > 0 and factor != 1 else ()
    day = DaySpec(tuple(float(r) for r in diurnal_rates(peak_rps, peak_factor)), bursts=bursts)
    provision, bandwidth, warmup, scale_down = delays
    plan = plan_autoscaling(scenario, day, Delays(provision_s=provision, load_bandwidth=bandwidth or None,
                                                  warmup_s=warmup, scale_down_s=scale_down),
                            [Policy(kind, target) for kind, target in policies], price_ratio)
    shown = plan.outcomes[plan.chosen if plan.chosen is not None else 0]
    slo = scenario.slo
    timeline = shown.day.timeline(900.0, slo.tpot_s, slo.ttft_s)
    return {"rows": plan.rows(), "summary": plan.summary(), "shown": shown.name,
            "timeline": {k: np.asarray(v).tolist() for k, v in timeline.items()}}


__all__ = ["HISTOGRAM_BINS", "POLICIES", "WARM_UP", "histogram", "plan_day", "policies_for", "simulate_pair",
           "start_worker"]
