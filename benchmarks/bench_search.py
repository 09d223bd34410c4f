"""Benchmark: ``capacity search`` throughput, configurations simulated per second on 1 and N local workers.

The search (``capacity.search.search``) over a grid of engine settings for the workload of
``tests/data/search-llama-8b.yaml`` (llama-3.1-8b chat, 20 requests/s, lognormal prompts, uniform answers,
roofline cost model), with ``--requests`` requests per simulation. Each worker count runs the same search
with the simulator's Python loop (``--event-loop python``, the baseline) and with the search's default
(``auto``: the compiled loop, loaded once per worker process from its disk cache), interleaved, each run in a
fresh process as ``capacity search`` runs (its parent never loads numba; the pool's workers do, at their first
simulation). The results must agree: the same simulations, replica counts and percentiles, whatever the loop
and the worker count. Reported: simulations, wall time, simulations per second, the ratio to the Python loop
on one worker, the CPU time of all the search's processes (steadier than wall time on a shared machine), each
the median of ``--rounds`` rounds. With Dask installed (``--dask``), also a Dask
``LocalCluster`` of N worker processes (the path ``--cluster ADDRESS`` takes on a real cluster).

Before the rounds, one process makes sure the compiled loop is in the disk cache (compiling it the first time
takes 15 s or more; the time is printed).

    python benchmarks/bench_search.py [--workers 1,2] [--requests 2000] [--rounds 3] [--dask]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed

from capacity.scenario import read_yaml  # noqa: E402
from capacity.search import search, settings_grid  # noqa: E402

SCENARIO = ROOT / "tests" / "data" / "search-llama-8b.yaml"
LOOPS = ("python", "auto")


def _grid() -> list:
    return settings_grid(["h100-sxm", "a100-80gb-sxm", "l40s", "l4"], [1, 2, 4], [64, 128, 256], [2048, 8192],
                         [False, True])


def _raw(requests: int) -> dict:
    raw = read_yaml(SCENARIO)
    raw["simulation"]["requests"] = requests
    return raw


def digest(result) -> str:
    """What must not depend on the loop or the workers: every simulation's outcome, in a fixed order."""
    keys = ("gpu", "tensor_parallel", "max_num_seqs", "max_batched_tokens", "chunked_prefill", "replicas", "ttft_s",
            "tpot_s", "requests", "lost_requests", "throughput_rps", "meets")
    rows = sorted(json.dumps([r[k] for k in keys]) for r in result.runs)
    best = [json.dumps([r[k] for k in keys]) for r in result.best]
    return hashlib.sha256(json.dumps([rows, best]).encode()).hexdigest()[:16]


def one(workers: int, loop: str, requests: int) -> dict:
    """One search in this process (a fresh one): wall time, simulations, the loops that ran, the digest."""
    raw = _raw(requests)
    pool = cf.ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
    start, cpu = time.perf_counter(), time.process_time()
    result = search(raw, _grid(), 99.0, executor=pool, workers=workers, event_loop=loop)
    wall = time.perf_counter() - start
    if pool is not None:
        pool.shutdown()
    cpu = time.process_time() - cpu + _children_cpu_s()
    best = result.cheapest
    return {"wall_s": wall, "cpu_s": cpu, "simulations": len(result.runs), "pruned": len(result.pruned),
            "digest": digest(result),
            "loops": sorted({r["event_loop"].split(" ")[0] for r in result.runs}),
            "cheapest": f"{best['gpu']} x{best['tensor_parallel']} x{best['replicas']} replicas, "
                        f"${best['cost_per_hour']:.2f}/h"}


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the pool's workers, once shut down)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_cache() -> dict:
    """Load (or, the first time, compile) the compiled loop in a process of its own: seconds it took."""
    from capacity.scenario import Scenario
    from capacity.search import Setting, scenario_data
    from capacity.simulator import simulate

    start = time.perf_counter()
    scenario = Scenario.from_dict(scenario_data(_raw(100), Setting(None, 1, 64, 2048, True)))
    loop = simulate(scenario, event_loop="compiled").event_loop
    return {"seconds": time.perf_counter() - start, "loop": loop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dask", action="store_true", help="also run on a Dask LocalCluster of the largest count")
    parser.add_argument("--child", nargs=2, metavar=("WORKERS", "LOOP"), help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(int(args.child[0]), args.child[1], args.requests)))
        return
    if args.warm:
        print(json.dumps(warm_cache()))
        return
    counts = sorted({int(w) for w in args.workers.split(",")})
    print(f"{len(_grid())} settings, {args.requests:,} requests per simulation, {os.cpu_count()} CPUs visible")
    warm = _child("--warm")
    print(f"compiled loop: {warm['loop']}; loading (or compiling, the first time) it took {warm['seconds']:.1f} s "
          f"in a fresh process")
    runs: dict[tuple[int, str], list[dict]] = {}
    for _ in range(args.rounds):
        for workers in counts:
            for loop in LOOPS:
                runs.setdefault((workers, loop), []).append(
                    _child("--child", str(workers), loop, "--requests", str(args.requests)))
    digests = {r["digest"] for rs in runs.values() for r in rs}
    sims = {r["simulations"] for rs in runs.values() for r in rs}
    base = base_cpu = None
    for workers in counts:
        for loop in LOOPS:
            rs = runs[(workers, loop)]
            wall = statistics.median(r["wall_s"] for r in rs)
            cpu = statistics.median(r["cpu_s"] for r in rs)
            rate = rs[0]["simulations"] / wall
            base = base or rate
            base_cpu = base_cpu or cpu
            print(f"{workers:3d} local worker(s), --event-loop {loop:<6} (ran: {'+'.join(rs[0]['loops'])}): "
                  f"{rs[0]['simulations']} simulations ({rs[0]['pruned']} settings pruned) in {wall:6.2f} s "
                  f"(median of {len(rs)}) = {rate:6.2f} simulations/s ({rate / base:4.1f}x the Python loop on one "
                  f"worker); {cpu:6.2f} s of CPU in all processes ({base_cpu / cpu:4.1f}x less); cheapest "
                  f"{rs[0]['cheapest']}")
    print(f"results identical across loops and worker counts: {len(digests) == 1 and len(sims) == 1} "
          f"(digests {sorted(digests)})")
    if args.dask:
        from distributed import Client, LocalCluster

        workers = counts[-1]
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
                Client(cl) as client:
            start = time.perf_counter()
            result = search(_raw(args.requests), _grid(), 99.0, executor=client.get_executor(pure=False),
                            workers=workers)
            wall = time.perf_counter() - start
        print(f"{workers:3d} Dask workers:      {len(result.runs)} simulations in {wall:6.1f} s = "
              f"{len(result.runs) / wall:6.2f} simulations/s ({len(result.runs) / wall / base:4.1f}x the Python "
              f"loop on one local worker); same results: {digest(result) in digests}")


if __name__ == "__main__":
    main()
