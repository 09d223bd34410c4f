"""Benchmark: a million simulated requests with variable lengths and KV blocks on demand (issue 17: <= 5 s).

Essay 001's sale-day engine (``scenarios/sim-essay-001-analytic.yaml``, roofline cost model) under Poisson
arrivals below its goodput, with lognormal prompts (mean 1,000, sigma 0.6, 16-8,000 tokens) and uniform
answers (50-550 tokens), continuous batching, blocks allocated on demand (growth tracked per step, with
preemption when the pool runs dry). ``--shared-prefix TOKENS`` gives the requests a shared prefix (a system
prompt; ``--prefix-groups N`` distinct ones, each request draws one) served from the prefix cache, which both
loops run; ``--cpu-offload BYTES`` with ``--offload-bandwidth B/S`` adds a CPU tier per GPU that evicted prefix
blocks move to and load back from (KV offload, both loops too; the reload rate is printed).

Prints, on the same workload in the same run:

* the compiled event loop (``capacity/simulator/compiled.py``, numba) on all ``--requests`` requests, after a
  warm-up run in the same process (the steady time: the kernel already compiled or loaded from its cache);
* the Python event loop (the reference, ``scheduler._run_unchunked``) on the first ``--python-requests`` of the
  same requests (it takes ~20 s for a million; ``--python-requests 0`` runs it on all of them), and the compiled
  loop on that same prefix: their ratio is the speed-up on identical work; the Python time is also scaled to
  the full run (per request; the cost per request barely changes with the run's length);
* the compiled loop's start: a fresh process with an empty numba cache (import + compile + first run of 1,000
  requests) and a fresh process with that cache warm (import + load + first run); the compile time is the
  difference between the first and the steady small run.

Times are ``simulate_table`` (the workload is generated before the clock starts: the event loop plus
``metrics.collect``), wall and CPU, medians of ``--repeat`` fresh processes, interleaved. The summaries of
the two loops on the prefix must be identical (the compiled loop is bit-identical to the reference).

    python benchmarks/bench_sim_variable.py [--requests 1000000] [--python-requests 100000] [--rate 5.5] [--repeat 3]
        [--shared-prefix 0] [--prefix-groups 1] [--cpu-offload "16 GB" --offload-bandwidth "50 GB/s"]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "sim-essay-001-analytic.yaml"
SMALL = 1_000  # requests of the warm-up and start-up runs


def _setup(requests: int, rate: float, shared_prefix: int = 0, prefix_groups: int = 1,  # noqa: ANN202
           offload: tuple[str | None, str | None] = (None, None)):
    """The scenario, config and request table; ``offload``: the CPU tier's bytes and link bandwidth (None: none)."""
    sys.path.insert(0, str(ROOT))
    from capacity.model.scenario import load_scenario
    from capacity.simulator.config import config_from_scenario
    from capacity.simulator.workloads import generate

    warnings.simplefilter("ignore", RuntimeWarning)
    scenario = load_scenario(SCENARIO)
    config = config_from_scenario(
        scenario, requests=requests, rate=rate, kv_allocation="on_demand",
        prompt_tokens={"dist": "lognormal", "mean": 1000, "sigma": 0.6, "low": 16, "high": 8000},
        output_tokens={"dist": "uniform", "low": 50, "high": 550}, shared_prefix_tokens=shared_prefix,
        prefix_groups=prefix_groups, cpu_offload=offload[0], offload_bandwidth=offload[1])
    return scenario, config, generate(config)


def _timed(scenario, config, table, loop: str) -> dict:  # noqa: ANN001
    from capacity.simulator import simulate_table

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate_table(scenario, config, table, loop)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {"wall_s": wall, "cpu_s": cpu, "requests": len(table), "loop": result.event_loop,
           "summary": result.to_json_dict()}
    del result
    return out


def steady(requests: int, python_requests: int, rate: float, shared_prefix: int, prefix_groups: int,
           offload: tuple[str | None, str | None]) -> dict:
    """In one process: warm up the compiled loop, then time it on everything, and both loops on the prefix."""
    import numpy as np

    scenario, config, table = _setup(requests, rate, shared_prefix, prefix_groups, offload)
    prefix = table.take(np.arange(python_requests)) if 0 < python_requests < requests else table
    _timed(scenario, config, table.take(np.arange(min(SMALL, requests))), "compiled")  # load or compile: not timed
    return {"compiled": _timed(scenario, config, table, "compiled"),
            "python_prefix": _timed(scenario, config, prefix, "python"),
            "compiled_prefix": _timed(scenario, config, prefix, "compiled")}


def start(rate: float) -> dict:
    """In one fresh process: import + first compiled run of ``SMALL`` requests, then the same run again."""
    import numpy as np

    scenario, config, table = _setup(SMALL, rate)
    small = table.take(np.arange(SMALL))
    wall, cpu = time.perf_counter(), time.process_time()
    from capacity.simulator import compiled  # numba's import and the decorators: part of the start

    _timed(scenario, config, small, "compiled")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    again = _timed(scenario, config, small, "compiled")
    return {"first_s": wall - again["wall_s"], "first_cpu_s": cpu - again["cpu_s"], "cached": compiled.cached}


def in_fresh_process(args: list[str], env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--python-requests", type=int, default=100_000,
                        help="requests the Python loop runs (a prefix of the same workload; 0: all)")
    parser.add_argument("--rate", type=float, default=5.5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shared-prefix", type=int, default=0, help="tokens of a shared prefix (0: none)")
    parser.add_argument("--prefix-groups", type=int, default=1, help="distinct shared prefixes")
    parser.add_argument("--cpu-offload", metavar="BYTES", help='KV offload: CPU memory per GPU, e.g. "16 GB"')
    parser.add_argument("--offload-bandwidth", metavar="B/S", help='the host link for --cpu-offload, e.g. "50 GB/s"')
    parser.add_argument("--worker", choices=("steady", "start"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if bool(args.cpu_offload) != bool(args.offload_bandwidth):
        parser.error("--cpu-offload and --offload-bandwidth go together")
    offload = (args.cpu_offload, args.offload_bandwidth)
    if args.worker == "steady":
        print(json.dumps(steady(args.requests, args.python_requests, args.rate, args.shared_prefix,
                                args.prefix_groups, offload)))
        return
    if args.worker == "start":
        print(json.dumps(start(args.rate)))
        return
    n = args.requests
    runs, starts = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as cache:  # an empty numba cache: the first process compiles
            env = {"NUMBA_CACHE_DIR": cache}
            cold = in_fresh_process(["--worker", "start", "--rate", str(args.rate)], env)
            warm = in_fresh_process(["--worker", "start", "--rate", str(args.rate)], env)
            starts.append((cold, warm))
            tier = ["--cpu-offload", args.cpu_offload, "--offload-bandwidth", args.offload_bandwidth] \
                if args.cpu_offload else []
            runs.append(in_fresh_process(["--worker", "steady", "--requests", str(n), "--python-requests",
                                          str(args.python_requests), "--rate", str(args.rate), "--shared-prefix",
                                          str(args.shared_prefix), "--prefix-groups", str(args.prefix_groups),
                                          *tier], env))

    def med(key: str, field: str) -> float:
        return statistics.median(r[key][field] for r in runs)

    c_wall, c_cpu = med("compiled", "wall_s"), med("compiled", "cpu_s")
    p_wall, p_cpu = med("python_prefix", "wall_s"), med("python_prefix", "cpu_s")
    cp_wall, cp_cpu = med("compiled_prefix", "wall_s"), med("compiled_prefix", "cpu_s")
    m = runs[0]["python_prefix"]["requests"]
    s = runs[0]["compiled"]["summary"]
    shared = f"; a shared prefix of {args.shared_prefix:,} tokens ({args.prefix_groups:,} distinct), prefix-cache " \
        f"hit rate {s['prefix_cache_hit_rate']:.1%}" if args.shared_prefix else ""
    if args.cpu_offload:
        shared += f"; a CPU tier of {args.cpu_offload} over {args.offload_bandwidth}, reload rate " \
            f"{s['cpu_reload_rate']:.1%} of prompt tokens, at most {s['peak_cpu_prefixes']:,} prefixes on the CPU"
    print(f"workload: {n:,} requests, variable lengths, KV on demand{shared}; {s['decode_steps']:,} decode steps, "
          f"{s['preemptions']:,} preemptions, p99 TTFT {s['p99_ttft_s'] * 1e3:.0f} ms, mean TPOT "
          f"{s['mean_tpot_s'] * 1e3:.1f} ms (medians of {args.repeat} fresh processes)")
    print(f"compiled loop ({runs[0]['compiled']['loop']}), steady: {c_wall:.2f} s wall = {n / c_wall:,.0f} "
          f"requests/s ({c_cpu:.2f} s CPU = {n / c_cpu:,.0f} requests/s); target <= 5 s per million: "
          f"{'met' if c_wall <= 5 * n / 1e6 else 'NOT met'}")
    print(f"python loop ({runs[0]['python_prefix']['loop']}) on the first {m:,} requests: {p_wall:.2f} s wall = "
          f"{m / p_wall:,.0f} requests/s ({p_cpu:.2f} s CPU); scaled to {n:,}: {p_wall * n / m:.1f} s wall")
    print(f"compiled loop on the same {m:,} requests: {cp_wall:.3f} s wall = {m / cp_wall:,.0f} requests/s "
          f"({cp_cpu:.3f} s CPU); speed-up on identical work: {p_wall / cp_wall:.1f}x wall, {p_cpu / cp_cpu:.1f}x "
          f"CPU; {n:,} compiled vs the scaled Python: {p_wall * n / m / c_wall:.1f}x")
    same = all(r["python_prefix"]["summary"] == r["compiled_prefix"]["summary"] for r in runs)
    print(f"summaries of the two loops on the prefix: {'identical' if same else 'DIFFER'}")
    cold, cold_cpu = (statistics.median(c[k] for c, _ in starts) for k in ("first_s", "first_cpu_s"))
    warm, warm_cpu = (statistics.median(w[k] for _, w in starts) for k in ("first_s", "first_cpu_s"))
    print(f"compiled loop start (fresh process: import + first {SMALL:,}-request run, less the same run again): "
          f"with an empty cache (compiling) {cold:.1f} s wall ({cold_cpu:.1f} s CPU); with the cache written by "
          f"that process (import numba, load) {warm:.2f} s wall ({warm_cpu:.2f} s CPU); cache "
          f"{'writable' if starts[0][0]['cached'] else 'NOT writable: compiled in every process'}")


if __name__ == "__main__":
    main()
