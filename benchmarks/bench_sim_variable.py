"""Benchmark: a million simulated requests with variable lengths and KV blocks on demand (issue 17: <= 5 s).

Essay 001's sale-day engine (``scenarios/sim-essay-001-analytic.yaml``, roofline cost model) under Poisson
arrivals below its goodput, with lognormal prompts (mean 1,000, sigma 0.6, 16-8,000 tokens) and uniform
answers (50-550 tokens), continuous batching, blocks allocated on demand (growth tracked per step, with
preemption when the pool runs dry). Prints the wall and CPU time of ``simulate_table`` (the workload is
generated before the clock starts), requests per second, decode steps and the engine's iterations per request.

``--baseline DIR`` also runs the same workload with the ``capacity`` package of another checkout (e.g. main
before a change), each side in its own fresh process, the two interleaved ``--repeat`` times, and prints both
medians, the speed-up and whether the summaries agree. On a shared machine the CPU time is the steadier figure.

    python benchmarks/bench_sim_variable.py [--requests 1000000] [--rate 5.5] [--repeat 1] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "sim-essay-001-analytic.yaml"


def measure(code: Path, requests: int, rate: float) -> dict[str, float | dict]:
    """One timed run with the ``capacity`` package under ``code``: wall and CPU seconds, and the summary."""
    sys.path.insert(0, str(code))  # that checkout's capacity, also when another copy is installed
    from capacity.scenario import load_scenario
    from capacity.simulator import simulate_table
    from capacity.simulator.config import config_from_scenario
    from capacity.simulator.workloads import generate

    warnings.simplefilter("ignore", RuntimeWarning)
    scenario = load_scenario(SCENARIO)
    config = config_from_scenario(
        scenario, requests=requests, rate=rate, kv_allocation="on_demand",
        prompt_tokens={"dist": "lognormal", "mean": 1000, "sigma": 0.6, "low": 16, "high": 8000},
        output_tokens={"dist": "uniform", "low": 50, "high": 550})
    table = generate(config)
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate_table(scenario, config, table)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "summary": result.to_json_dict()}


def in_fresh_process(code: Path, requests: int, rate: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--code", str(code), "--requests", str(requests), "--rate",
                          str(rate), "--json"], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=5.5)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout whose capacity package to compare with")
    parser.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.code, args.requests, args.rate)))
        return
    sides = {"this checkout": ROOT, **({f"baseline {args.baseline}": args.baseline} if args.baseline else {})}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, code in sides.items():
            runs[name].append(in_fresh_process(code, args.requests, args.rate))
    n = args.requests
    medians = {}
    for name, rs in runs.items():
        wall, cpu = statistics.median(r["wall_s"] for r in rs), statistics.median(r["cpu_s"] for r in rs)
        medians[name] = (wall, cpu)
        s = rs[0]["summary"]
        print(f"{name}: {n:,} requests (variable lengths, KV on demand) in {wall:.2f} s wall = {n / wall:,.0f} "
              f"requests/s ({cpu:.2f} s CPU = {n / cpu:,.0f} requests/s); {s['decode_steps']:,} decode steps, "
              f"{s['preemptions']:,} preemptions, p99 TTFT {s['p99_ttft_s'] * 1e3:.0f} ms, mean TPOT "
              f"{s['mean_tpot_s'] * 1e3:.1f} ms; target <= 5 s per million: "
              f"{'met' if wall <= 5 * n / 1e6 else 'NOT met'}")
    if args.baseline:
        (wall, cpu), (base_wall, base_cpu) = medians.values()
        same = all(r["summary"] == runs["this checkout"][0]["summary"] for rs in runs.values() for r in rs)
        print(f"speed-up over the baseline: {base_wall / wall:.2f}x wall, {base_cpu / cpu:.2f}x CPU "
              f"(medians of {args.repeat} interleaved run(s) each); summaries {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
