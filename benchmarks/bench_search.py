"""Benchmark: ``capacity search`` throughput, configurations simulated per second on 1 and N local workers.

The search (``capacity.search.search``) over a grid of engine settings for the workload of
``tests/data/search-llama-8b.yaml`` (llama-3.1-8b chat, 20 requests/s, lognormal prompts, uniform answers,
roofline cost model), with ``--requests`` requests per simulation. Each worker count runs the same search:
the analytic pruning, then the replica searches, every simulation a task; the results must agree (same
cheapest setting, same replica counts). Reported: simulations, wall time, simulations per second and the
speed-up over one worker; with Dask installed, also a Dask ``LocalCluster`` of N worker processes (the path
``--cluster ADDRESS`` takes on a real cluster).

    python benchmarks/bench_search.py [--workers 1,2,4] [--requests 2000] [--dask]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed

from capacity.scenario import read_yaml  # noqa: E402
from capacity.search import search, settings_grid  # noqa: E402

SCENARIO = ROOT / "tests" / "data" / "search-llama-8b.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default=f"1,2,{os.cpu_count()}")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--dask", action="store_true", help="also run on a Dask LocalCluster of the largest count")
    args = parser.parse_args()
    raw = read_yaml(SCENARIO)
    raw["simulation"]["requests"] = args.requests
    grid = settings_grid(["h100-sxm", "a100-80gb-sxm", "l40s", "l4"], [1, 2, 4], [64, 128, 256], [2048, 8192],
                         [False, True])
    print(f"{len(grid)} settings, {args.requests:,} requests per simulation, {os.cpu_count()} CPUs visible")
    base = None
    counts = sorted({int(w) for w in args.workers.split(",")})
    for workers in counts:
        pool = cf.ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
        start = time.perf_counter()
        result = search(raw, grid, 99.0, executor=pool, workers=workers)
        wall = time.perf_counter() - start
        if pool is not None:
            pool.shutdown()
        rate = len(result.runs) / wall
        base = base or rate
        best = result.cheapest
        print(f"{workers:3d} local worker(s): {len(result.runs)} simulations ({len(result.pruned)} settings pruned) in "
              f"{wall:6.1f} s = {rate:6.2f} simulations/s ({rate / base:4.1f}x one worker); cheapest "
              f"{best['gpu']} x{best['tensor_parallel']} x{best['replicas']} replicas, ${best['cost_per_hour']:.2f}/h")
    if args.dask:
        from distributed import Client, LocalCluster

        workers = counts[-1]
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
                Client(cl) as client:
            start = time.perf_counter()
            result = search(raw, grid, 99.0, executor=client.get_executor(pure=False), workers=workers)
            wall = time.perf_counter() - start
        print(f"{workers:3d} Dask workers:      {len(result.runs)} simulations in {wall:6.1f} s = "
              f"{len(result.runs) / wall:6.2f} simulations/s ({len(result.runs) / wall / base:4.1f}x one local worker)")


if __name__ == "__main__":
    main()
