"""Benchmark: the simulator's two event loops on small runs, and what one request and one replica cost in each.

Two questions, answered in one process after the compiled loop is loaded (``event_loop="compiled"`` on a
warm-up run), every time the median of ``--repeat`` runs, the two loops interleaved:

* **Small runs** (10 to 30,000 requests): ``simulate_table`` with the Python loop and with the compiled loop
  already loaded. Where the compiled loop is at least as fast even on the smallest runs, the simulator's
  "auto" rightly picks it whenever it is loaded in the process (``scheduler._compiled_loop``); the start of a
  process that has not loaded it (import numba + load the cached kernel, ``bench_sim_variable.py``: ~0.6 s) is
  what keeps small runs in Python until then.
* **Cost per request and per replica**, the figures behind ``simulator.config.work_problems``'s estimate: the
  time per request of a 20,000-request run, and the extra time per replica of 100 replicas sharing 2,000
  requests over 1 replica, for each loop.

Workloads: the app's landing preset (``scenarios/chat-llama-3.1-8b-h100.yaml``: fixed lengths, roofline cost
model, Poisson arrivals at 80% of its goodput) with its shared system prompt of 800 tokens (the prefix cache) and
without it (as in the rounds before the compiled loop had a prefix cache), and essay 001's sale-day engine with
variable lengths and KV on demand (the workload of ``bench_sim_variable.py``). Static batching always runs in
Python (a few events per batch); it is timed too, for the estimate.

    python benchmarks/bench_sim_small.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed

from capacity.model.scenario import load_scenario  # noqa: E402
from capacity.simulator import simulate_table  # noqa: E402
from capacity.simulator.config import config_from_scenario  # noqa: E402
from capacity.simulator.workloads import generate  # noqa: E402

SIZES = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000)


def workloads() -> dict:
    """name -> (scenario, config of 30,000 requests)."""
    chat = load_scenario(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml")
    rate = 0.8 * float(chat.evaluate()["goodput_rps"])
    sale = load_scenario(ROOT / "scenarios" / "sim-essay-001-analytic.yaml")
    return {
        "chat preset, its system prompt": (chat, config_from_scenario(chat, requests=SIZES[-1], rate=rate)),
        "chat preset, fixed lengths": (chat, config_from_scenario(chat, requests=SIZES[-1], rate=rate,
                                                                             shared_prefix_tokens=0)),
        "sale day, variable lengths, KV on demand": (sale, config_from_scenario(
            sale, requests=SIZES[-1], rate=5.5, kv_allocation="on_demand",
            prompt_tokens={"dist": "lognormal", "mean": 1000, "sigma": 0.6, "low": 16, "high": 8000},
            output_tokens={"dist": "uniform", "low": 50, "high": 550}))}


def timed(scenario, config, table, loop: str) -> float:  # noqa: ANN001
    gc.collect()
    start = time.perf_counter()
    result = simulate_table(scenario, config, table, loop)
    took = time.perf_counter() - start
    assert loop == "python" or config.policy == "static" or result.event_loop.startswith("compiled"), \
        result.event_loop
    return took


def median_pair(scenario, config, table, repeat: int) -> dict[str, float]:  # noqa: ANN001
    runs: dict[str, list[float]] = {"python": [], "compiled": []}
    for _ in range(repeat):
        for loop in runs:
            runs[loop].append(timed(scenario, config, table, loop))
    return {loop: statistics.median(times) for loop, times in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    cases = workloads()
    start = time.perf_counter()
    for scenario, config in cases.values():  # load the compiled loop (and its cost-model variants) once
        small = replace(config, requests=100)
        timed(scenario, small, generate(small), "compiled")
    print(f"compiled loop loaded in {time.perf_counter() - start:.2f} s (import numba, load the cached kernel)")
    for name, (scenario, config) in cases.items():
        full = generate(config)
        print(f"\n{name}: simulate_table, median of {args.repeat}, loops interleaved")
        print(f"{'requests':>9} {'python ms':>10} {'compiled ms':>12} {'python/compiled':>16}")
        for n in SIZES:
            t = median_pair(scenario, replace(config, requests=n), full.take(slice(0, n)), args.repeat)
            print(f"{n:9,d} {t['python'] * 1e3:10.2f} {t['compiled'] * 1e3:12.2f} {t['python'] / t['compiled']:15.1f}x")
        n = SIZES[-1]
        t = median_pair(scenario, config, full, max(1, args.repeat // 2))
        few = full.take(slice(0, 2_000))
        one = median_pair(scenario, replace(config, requests=2_000), few, max(1, args.repeat // 2))
        many = median_pair(scenario, replace(config, requests=2_000, replicas=100), few, max(1, args.repeat // 2))
        static = replace(config, policy="static")
        t_static = statistics.median(timed(scenario, static, full, "python") for _ in range(max(1, args.repeat // 2)))
        per_req = {loop: t[loop] / n * 1e6 for loop in t}
        per_rep = {loop: (many[loop] - one[loop]) / 99 * 1e3 for loop in t}
        print(f"per request ({n:,} requests): Python loop {per_req['python']:.1f} us, compiled "
              f"{per_req['compiled']:.2f} us ({per_req['python'] / per_req['compiled']:.1f}x); static batching "
              f"(Python) {t_static / n * 1e6:.1f} us")
        print(f"per replica (100 replicas vs 1, 2,000 requests): Python loop {per_rep['python']:.2f} ms, compiled "
              f"{per_rep['compiled']:.2f} ms")


if __name__ == "__main__":
    main()
