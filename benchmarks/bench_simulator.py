"""Benchmark: the event-driven simulator against a naive loop that advances one iteration at a time.

    python3 benchmarks/bench_simulator.py [--requests 1000000] [--naive-requests 20000] [--rate 5.5]

Workload: essay 001's sale day (scenarios/sim-essay-001-analytic.yaml: llama-3-8b-like model,
1,000-token prompts, 300-token answers, roofline cost model), Poisson arrivals below the goodput.
The event-driven engine skips ahead over runs of decode steps in which the batch does not change; the naive
loop (tests/simulator_reference.py: the baseline, which the tests also check the engine against) visits every
iteration and every sequence. Both run the same smaller workload, so their results must agree, and the ratio
of their wall times is the speed-up of the fast-forward. Both are Python: the event-driven engine runs its
Python loop (``event_loop="python"``, the reference); the compiled loop is measured in
``bench_sim_variable.py``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed
sys.path.insert(1, str(ROOT / "tests"))  # the step-by-step reference loop the tests check the engine against

from capacity.model.scenario import load_scenario  # noqa: E402
from capacity.simulator import RooflineCost, simulate_table  # noqa: E402
from capacity.simulator.config import config_from_scenario  # noqa: E402
from capacity.simulator.workloads import generate  # noqa: E402
from tests.simulator_reference import naive_continuous  # noqa: E402

SCENARIO = ROOT / "scenarios" / "sim-essay-001-analytic.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests in the large event-driven run")
    parser.add_argument("--naive-requests", type=int, default=20_000, help="requests in the naive comparison")
    parser.add_argument("--rate", type=float, default=5.5, help="Poisson arrival rate [requests/s]")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    scenario = load_scenario(SCENARIO)
    analytic = scenario.evaluate()
    print(f"scenario: {scenario.name}; ceiling {analytic['ceiling_rps']:.2f} req/s, "
          f"goodput {analytic['goodput_rps']:.2f} req/s; Poisson at {args.rate} req/s")

    config = config_from_scenario(scenario, requests=args.requests, rate=args.rate)
    table = generate(config)
    start = time.perf_counter()
    result = simulate_table(scenario, config, table, "python")
    wall = time.perf_counter() - start
    summary = result.summary()
    print(f"event-driven: {args.requests:,} requests in {wall:.2f} s wall = {args.requests / wall:,.0f} requests/s "
          f"({summary['makespan_s'] / 3600:.1f} h simulated, {summary['decode_steps']:,} decode steps, "
          f"mean TPOT {summary['mean_tpot_s'] * 1e3:.1f} ms)")

    small = config_from_scenario(scenario, requests=args.naive_requests, rate=args.rate)
    small_table = generate(small)
    start = time.perf_counter()
    fast = simulate_table(scenario, small, small_table, "python")
    fast_wall = time.perf_counter() - start
    start = time.perf_counter()
    first, finish, _ = naive_continuous(small_table, RooflineCost.from_scenario(scenario), math.inf,
                                        int(analytic["pool_blocks"]), scenario.serving.block_size,
                                        small.max_batched_tokens)
    naive_wall = time.perf_counter() - start
    df = fast.requests
    gap = max(np.max(np.abs(df["ttft_s"] + df["arrival_s"] - first)), np.max(np.abs(df["finish_s"] - finish)))
    print(f"same {args.naive_requests:,} requests: event-driven {fast_wall:.2f} s, naive step-by-step "
          f"{naive_wall:.2f} s; speed-up {naive_wall / fast_wall:.1f}x; largest difference in token times "
          f"{gap:.2e} s")


if __name__ == "__main__":
    main()
