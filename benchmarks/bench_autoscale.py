"""Benchmark: a simulated day of ten million requests with an autoscaler, against the steady simulator (issue 31).

Essay 001's engine (``scenarios/sim-essay-001-analytic.yaml``: roofline costs, KV reserved for prompt + answer,
1,000-token prompts, 300-token answers) with promises p99 TTFT <= 2 s and TPOT <= 200 ms, one GPU per replica. The
day: ``daily.diurnal_rates`` peaking at noon at ``--peak-factor`` times the night, scaled so that it holds
``--requests`` arrivals on average, with a stated burst (x2 for 10 minutes at 18:00); a 2-minute scale-up (a
benchmark setting, not a measurement) and the HPA's 5-minute scale-down window; one policy (``--policy``,
``--utilization``).

Prints the time of each phase of the day (drawing the requests, the control loop, routing, the engine simulator
over every replica's requests) and the time per million requests, against the steady simulator's: the same engine,
one replica, ``--steady-requests`` Poisson requests at 80% of its goodput (``simulate_times``, the compiled loop,
after a warm-up in the same process). Wall and CPU times; on the shared 2-vCPU machine CPU time is the figure to
compare.

    python benchmarks/bench_autoscale.py [--requests 10000000] [--steady-requests 1000000]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000_000)
    p.add_argument("--steady-requests", type=int, default=1_000_000)
    p.add_argument("--peak-factor", type=float, default=3.0)
    p.add_argument("--policy", default="queue")
    p.add_argument("--utilization", type=float, default=0.8)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    warnings.simplefilter("ignore", RuntimeWarning)
    import numpy as np
    import yaml

    from capacity.model.scenario import Scenario
    from capacity.planning.autoscaling import DaySpec, day_replica
    from capacity.planning.daily import diurnal_rates
    from capacity.simulator import simulate_times
    from capacity.simulator.autoscale import Delays, Policy, control, simulate_day
    from capacity.simulator.config import config_from_scenario
    from capacity.simulator.traffic import Burst, arrivals, day_table, per_second

    data = yaml.safe_load((ROOT / "scenarios" / "sim-essay-001-analytic.yaml").read_text())
    data["slo"] = {"tpot": "200 ms", "ttft": "2 s", "percentile": 99}
    data["fleet"] = {"modes": ["colocated"], "tensor_parallel": [1]}
    data["simulation"].pop("requests")
    scenario = Scenario.from_dict(copy.deepcopy(data))
    mean = args.requests / 86400.0
    peak = 2.0 * mean / (1.0 + 1.0 / args.peak_factor)
    day = DaySpec(tuple(diurnal_rates(peak, args.peak_factor)), bursts=(Burst(18 * 3600.0, 600.0, 2.0),))

    rep = day_replica(scenario, 2.0 * peak)
    config = config_from_scenario(rep.scenario, "auto", requests=1, rate=1.0)
    analytic = rep.scenario.evaluate()
    # warm the compiled loop (loaded from its cache, or compiled once) and the router
    simulate_times(rep.scenario, requests=30_000, rate=0.8 * rep.model.goodput_rps, event_loop="compiled")

    t = _clock()
    edges, rates = day.segments()
    table = day_table(config, arrivals(edges, rates, np.random.default_rng([0, 1])))
    counts = per_second(table.arrival_s, day.length_s)
    draw = _since(t)
    t = _clock()
    policy = Policy(kind=args.policy, target_utilization=args.utilization)
    schedule = control(counts, policy, Delays(provision_s=120.0), rep.model)
    loop = _since(t)
    t = _clock()
    result = simulate_day(rep.scenario, config, table, schedule, rep.model, day.length_s, analytic, "compiled")
    sim = _since(t)
    n = len(table)
    kept = result.kept(scenario.slo.tpot_s, scenario.slo.ttft_s)
    total_wall = draw[0] + loop[0] + sim[0]
    total_cpu = draw[1] + loop[1] + sim[1]
    print(f"day: {n:,} requests, peak {peak:.1f} requests/s x{args.peak_factor:g} over the night, a x2 burst of "
          f"10 min; policy {policy.name}; {schedule.instances} replicas started, "
          f"{int(result.paid_replicas().min())}-{int(result.paid_replicas().max())} paid; "
          f"{result.gpu_hours:,.1f} GPU-h; TTFT kept {kept['ttft'].mean():.2%}, TPOT kept {kept['tpot'].mean():.2%}")
    print(f"  draw requests {draw[0]:.2f} s wall ({draw[1]:.2f} s CPU); control loop {loop[0]:.2f} s "
          f"({loop[1]:.2f}); route + engine over every replica {sim[0]:.2f} s ({sim[1]:.2f})")
    print(f"  whole day {total_wall:.1f} s wall ({total_cpu:.1f} s CPU) = {total_wall / n * 1e6:.2f} s wall "
          f"({total_cpu / n * 1e6:.2f} s CPU) per million requests")

    t = _clock()
    steady, loop_name = simulate_times(rep.scenario, requests=args.steady_requests,
                                       rate=0.8 * rep.model.goodput_rps, event_loop="compiled")
    st = _since(t)
    m = args.steady_requests
    print(f"steady simulator ({loop_name}): {m:,} requests at {0.8 * rep.model.goodput_rps:.2f} requests/s on one "
          f"replica in {st[0]:.2f} s wall ({st[1]:.2f} s CPU) = {st[0] / m * 1e6:.2f} s wall ({st[1] / m * 1e6:.2f} s "
          f"CPU) per million requests")
    print(f"autoscaled day against steady, per request: {total_wall / n / (st[0] / m):.2f}x wall, "
          f"{total_cpu / n / (st[1] / m):.2f}x CPU")


if __name__ == "__main__":
    main()
