"""Benchmark: ``capacity search`` throughput, configurations simulated per second on 1 and N local workers.

The search (``capacity.planning.search.search``) over a grid of engine settings for the workload of
``tests/data/search-llama-8b.yaml`` (llama-3.1-8b chat, 20 requests/s, lognormal prompts, uniform answers,
roofline cost model), with ``--requests`` requests per simulation. Each worker count runs the same search
with the simulator's Python loop (``--event-loop python``, the baseline; ``--loops auto`` leaves it out) and
with the search's default (``auto``: the compiled loop, loaded once per worker process from its disk cache),
interleaved. Two figures per count:

* end to end (``cold``): each run in a fresh process as ``capacity search`` runs, its pool made by
  ``search.executor_for`` as the command makes it (workers start, and load the kernel, while the parent
  prunes); the search's wall time, and the process's from before its imports of the project;
* warm: the same search run twice on one executor (one process with one worker), the second run's wall time:
  what an analyst calling ``search(..., executor=...)`` repeatedly gets.

The results must agree: the same simulations, replica counts and percentiles, whatever the loop and the
worker count. Reported: simulations, wall time, simulations per second, the ratio to the Python loop on one
worker (where it ran), the scaling of N workers against one (the warm one split into N x the share of the
workers' time spent simulating x how fast one simulation runs beside N - 1 others against alone), the CPU time
of all the search's processes (end to end; steadier than wall time on a shared machine), each the median of
``--rounds`` rounds.
``--against ROOT``: also another checkout's benchmark (e.g. ``main``'s, through its own ``--child``), its
compiled-loop search run end to end interleaved with this one's, with the ratio. With Dask installed
(``--dask``), also a Dask ``LocalCluster`` of N worker processes (the path ``--cluster ADDRESS`` takes).

Before the rounds, one process makes sure the compiled loop is in the disk cache (compiling it the first time
takes 15 s or more; the time is printed), and the same for ``--against``'s checkout.

    python benchmarks/bench_search.py [--workers 1,2] [--requests 2000] [--rounds 3] [--loops python,auto]
                                      [--against ../main] [--dask]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()  # before the project's imports: the end-to-end figure counts them

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed

from capacity.model.scenario import read_yaml  # noqa: E402
from capacity.planning.search import executor_for, search, settings_grid  # noqa: E402

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
    """One search in this process (a fresh one): wall time (the search's, and from before the project's imports),
    CPU time of all its processes, simulations, the loops that ran, the digest."""
    raw = _raw(requests)
    start, cpu = time.perf_counter(), time.process_time()
    pool, owner = executor_for(workers, None, loop)
    result = search(raw, _grid(), 99.0, executor=pool, workers=workers, event_loop=loop)
    wall = time.perf_counter() - start
    process = time.perf_counter() - STARTED
    if owner is not None:
        owner.shutdown()
    cpu = time.process_time() - cpu + _children_cpu_s()
    return {**_about(result), "wall_s": wall, "process_s": process, "cpu_s": cpu}


def warm(workers: int, loop: str, requests: int) -> dict:
    """The same search twice on one executor (or, for one worker, in this process): the second run's wall."""
    raw = _raw(requests)
    pool, owner = executor_for(workers, None, loop)
    first = search(raw, _grid(), 99.0, executor=pool, workers=workers, event_loop=loop)
    start = time.perf_counter()
    result = search(raw, _grid(), 99.0, executor=pool, workers=workers, event_loop=loop)
    wall = time.perf_counter() - start
    if owner is not None:
        owner.shutdown()
    assert digest(first) == digest(result)
    return {**_about(result), "wall_s": wall}


def _about(result) -> dict:
    best = result.cheapest
    return {"simulations": len(result.runs), "pruned": len(result.pruned), "digest": digest(result),
            "simulation_s": sum(r["simulation_s"] for r in result.runs),
            "loops": sorted({r["event_loop"].split(" ")[0] for r in result.runs}),
            "cheapest": f"{best['gpu']} x{best['tensor_parallel']} x{best['replicas']} replicas, "
                        f"${best['cost_per_hour']:.2f}/h"}


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the pool's workers, once shut down)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(*args: str, root: Path = ROOT) -> dict:
    """Run ``root``'s copy of this benchmark with ``args`` in a fresh process; its JSON line."""
    script = root / "benchmarks" / "bench_search.py"
    out = subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True, text=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_cache() -> dict:
    """Load (or, the first time, compile) the compiled loop in a process of its own: seconds it took."""
    from capacity.model.scenario import Scenario
    from capacity.planning.search import Setting, scenario_data
    from capacity.simulator import simulate

    start = time.perf_counter()
    scenario = Scenario.from_dict(scenario_data(_raw(100), Setting(None, 1, 64, 2048, True)))
    loop = simulate(scenario, event_loop="compiled").event_loop
    return {"seconds": time.perf_counter() - start, "loop": loop}


def _median(rs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def _busy(rs: list[dict], workers: int) -> float:
    """Share of the workers' wall time spent simulating (median over runs): what the search's own dispatch, its
    waits and its tail leave to the simulations."""
    return statistics.median(r["simulation_s"] / (workers * r["wall_s"]) for r in rs)


def _per_simulation_ms(rs: list[dict]) -> float:
    """Mean time of one simulation [ms] (median over runs): slower with more workers where they share a core's
    caches, memory bandwidth or clock, which the search's code does not decide."""
    return statistics.median(1e3 * r["simulation_s"] / r["simulations"] for r in rs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", default=",".join(LOOPS), help="event loops to run (default python,auto)")
    parser.add_argument("--against", type=Path, help="another checkout (its root) to run interleaved, end to end")
    parser.add_argument("--dask", action="store_true", help="also run on a Dask LocalCluster of the largest count")
    parser.add_argument("--child", nargs=2, metavar=("WORKERS", "LOOP"), help=argparse.SUPPRESS)
    parser.add_argument("--warm-child", nargs=2, metavar=("WORKERS", "LOOP"), help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(int(args.child[0]), args.child[1], args.requests)))
        return
    if args.warm_child:
        print(json.dumps(warm(int(args.warm_child[0]), args.warm_child[1], args.requests)))
        return
    if args.warm:
        print(json.dumps(warm_cache()))
        return
    counts = sorted({int(w) for w in args.workers.split(",")})
    loops = [loop for loop in LOOPS if loop in args.loops.split(",")]
    print(f"{len(_grid())} settings, {args.requests:,} requests per simulation, {os.cpu_count()} CPUs visible, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for root in [ROOT] + ([args.against.resolve()] if args.against else []):
        w = _child("--warm", root=root)
        print(f"{root}: compiled loop {w['loop']}; loading (or compiling, the first time) it took "
              f"{w['seconds']:.1f} s in a fresh process")
    runs: dict[tuple, list[dict]] = {}
    n = ["--requests", str(args.requests)]
    for _ in range(args.rounds):  # interleaved: every kind of run once per round
        for workers in counts:
            if args.against:
                runs.setdefault(("against", workers), []).append(
                    _child("--child", str(workers), "auto", *n, root=args.against.resolve()))
            for loop in loops:
                runs.setdefault(("cold", workers, loop), []).append(_child("--child", str(workers), loop, *n))
                runs.setdefault(("warm", workers, loop), []).append(_child("--warm-child", str(workers), loop, *n))
    digests = {r["digest"] for rs in runs.values() for r in rs}
    sims = {r["simulations"] for rs in runs.values() for r in rs}
    base = None
    for workers in counts:
        for loop in loops:
            rs = runs[("cold", workers, loop)]
            wall, cpu, rate = _median(rs, "wall_s"), _median(rs, "cpu_s"), rs[0]["simulations"] / _median(rs, "wall_s")
            base = base or rate
            warm_runs = runs[("warm", workers, loop)]
            warm_rate = rs[0]["simulations"] / _median(warm_runs, "wall_s")
            print(f"{workers:3d} local worker(s), --event-loop {loop:<6} (ran: {'+'.join(rs[0]['loops'])}): "
                  f"{rs[0]['simulations']} simulations ({rs[0]['pruned']} settings pruned); end to end "
                  f"{wall:5.2f} s (process {_median(rs, 'process_s'):5.2f} s) = {rate:6.2f} simulations/s "
                  f"({rate / base:4.1f}x the first line), {cpu:5.2f} s of CPU in all processes; warm "
                  f"{warm_rate:6.2f} simulations/s ({_busy(warm_runs, workers):.0%} busy, "
                  f"{_per_simulation_ms(warm_runs):.1f} ms per simulation); cheapest {rs[0]['cheapest']}")
    for loop in loops:
        if len(counts) > 1:
            one_, top = counts[0], counts[-1]

            def rate(kind: str, w: int, lp: str = loop) -> float:
                rs = runs[(kind, w, lp)]
                return rs[0]["simulations"] / _median(rs, "wall_s")

            w1, wn = runs[("warm", one_, loop)], runs[("warm", top, loop)]
            print(f"--event-loop {loop}: {top} workers against {one_}: end to end "
                  f"{rate('cold', top) / rate('cold', one_):.2f}x, warm {rate('warm', top) / rate('warm', one_):.2f}x "
                  f"= {top / one_:g} x busy share {_busy(wn, top) / _busy(w1, one_):.2f} x speed of a simulation "
                  f"{_per_simulation_ms(w1) / _per_simulation_ms(wn):.2f}")
    if args.against:
        for workers in counts:
            old, new = runs[("against", workers)], runs[("cold", workers, "auto")] if "auto" in loops else None
            line = (f"{args.against} ({workers} worker(s), --event-loop auto, end to end): "
                    f"{_median(old, 'wall_s'):5.2f} s = {old[0]['simulations'] / _median(old, 'wall_s'):6.2f} "
                    f"simulations/s, {_median(old, 'cpu_s'):5.2f} s of CPU")
            if new:
                line += (f"; this checkout {_median(old, 'wall_s') / _median(new, 'wall_s'):.2f}x faster, "
                         f"{_median(old, 'cpu_s') / _median(new, 'cpu_s'):.2f}x less CPU")
            print(line)
    print(f"results identical across loops, worker counts{' and checkouts' if args.against else ''}: "
          f"{len(digests) == 1 and len(sims) == 1} (digests {sorted(digests)})")
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
