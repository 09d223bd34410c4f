"""``capacity search SCENARIO.yaml [--gpus ...] [--tp ...] [--workers N | --cluster ADDRESS]``: the options,
the run on local processes or a Dask cluster (``capacity.planning.search``) and the table it prints."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError
from capacity.inputs.specs import FLEET_TENSOR_PARALLEL as TENSOR_PARALLEL
from capacity.planning.search import (
    DEFAULT_REQUESTS,
    EVENT_LOOPS,
    MAX_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    RESULT_TIMEOUT_S,
    SearchResult,
    Setting,
    executor_for,
    grid_size,
    search,
    settings_grid,
)

#: Largest tensor-parallel size tried.
MAX_TP = 1024
#: Most settings one search simulates (the product of the lists, plus the separate-pools settings), checked before
#: any work: each setting needs several simulations; the default grid has 60 per GPU type.
MAX_SETTINGS = 1_000
#: Most values per list option, most GPU types, and the largest batch cap and token budget tried.
MAX_VALUES, MAX_GPU_TYPES, MAX_SEQS, MAX_TOKENS = 64, 32, 1_000_000, 100_000_000


def add_search_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capacity search SCENARIO.yaml [--gpus ...] [--tp ...] [--workers N | --cluster ADDRESS]``."""
    p = subparsers.add_parser("search", help="simulate engine settings to find the cheapest that keeps the promises")
    p.add_argument("scenario", type=options.path,
                   help="scenario YAML: model, workload, slo promises, and a simulation block")
    p.add_argument("--gpus", type=options.names(MAX_GPU_TYPES, "catalog GPU names"),
                   help="comma-separated catalog GPU names (default: the scenario's GPU)")
    p.add_argument("--tp", type=options.whole_list(1, MAX_TP, 16), default=",".join(map(str, TENSOR_PARALLEL)),
                   help="tensor-parallel sizes (default 1,2,4,8)")
    p.add_argument("--max-num-seqs", type=options.whole_list(1, MAX_SEQS, MAX_VALUES, none=True),
                   default=",".join(map(str, MAX_NUM_SEQS)),
                   help="batch caps to try, 'none' for no cap (default 64,128,256)")
    p.add_argument("--max-batched-tokens", type=options.whole_list(1, MAX_TOKENS, MAX_VALUES),
                   default=",".join(map(str, MAX_BATCHED_TOKENS)),
                   help="token budgets of one iteration (default 2048,8192)")
    p.add_argument("--chunked", choices=["both", "on", "off"], default="both", help="chunked prefill (default both)")
    p.add_argument("--separate-pools", choices=["both", "on", "off"], default="both",
                   help="also (both) or only (on) settings split into prefill and decode replicas (default both)")
    p.add_argument("--split", choices=["auto", "on", "off"], default="auto",
                   help="also split pools, each on its own GPU type and layout: every prefill layout (--prefill-gpus "
                        "x --prefill-tp) with every decode layout (--gpus x --tp); auto: on where the scenario has a "
                        "pools section")
    p.add_argument("--prefill-gpus", type=options.names(MAX_GPU_TYPES, "catalog GPU names"),
                   help="split pools: the prefill pool's catalog GPUs (default: the pools section's prefill GPU, "
                        "else --gpus)")
    p.add_argument("--prefill-tp", type=options.whole_list(1, MAX_TP, 16),
                   help="split pools: the prefill pool's tensor-parallel sizes (default: --tp)")
    p.add_argument("--percentile", type=options.number(0, 100, open_low=True), default=99.0,
                   help="percentile the promises hold at, in (0, 100] (default 99)")
    p.add_argument("--rate", type=options.number(0, 1e9, open_low=True, unit="requests/s"),
                   help="arrival rate in requests/s (default: the scenario's)")
    p.add_argument("--requests", type=options.whole(1, 10**9), help=f"requests per simulation (default: the "
                                                                     f"scenario's, else {DEFAULT_REQUESTS})")
    p.add_argument("--workers", type=options.whole(1, 256), default=min(os.cpu_count() or 1, 256),
                   help="local worker processes, 1 to 256 (default: the CPUs)")
    p.add_argument("--cluster", metavar="ADDRESS", type=options.address,
                   help="run on this Dask scheduler (tcp://host:8786) instead")
    p.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                   help="simulator loop: auto (the compiled loop where it is cached and supports the engine), "
                        "compiled, or python (the reference); the results are the same")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    return p


def run_search(args: argparse.Namespace) -> str:
    """What ``capacity search`` prints."""
    from capacity.model.scenario import read_yaml

    path = Path(args.scenario)
    raw = read_yaml(path)
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{path}: a scenario must be a mapping")
    gpus: list[str | None] = list(args.gpus) if args.gpus else [None]  # names, duplicates dropped (options.names)
    chunked = {"both": [False, True], "on": [True], "off": [False]}[args.chunked]
    pools = {"both": [False, True], "on": [True], "off": [False]}[args.separate_pools]
    prefill_gpus, prefill_tp = _split_layouts(raw, args, gpus)
    moe = _moe_layouts(raw, list(dict.fromkeys([*args.tp, *prefill_tp])))
    per_tp = (sum(len(v) for v in moe.values()) / len(moe)) if moe else 1.0
    count = grid_size(len(gpus), len(args.tp), len(args.max_num_seqs), len(args.max_batched_tokens), len(chunked),
                      pools, len(prefill_gpus) * len(prefill_tp), per_tp)
    if count > MAX_SETTINGS:
        raise ScenarioError(f"the search grid has {count:,} settings ({len(gpus)} GPU type(s) x {len(args.tp)} "
                            f"--tp x {len(args.max_num_seqs)} --max-num-seqs x {len(args.max_batched_tokens)} "
                            f"--max-batched-tokens x --chunked {args.chunked}, --separate-pools "
                            f"{args.separate_pools}, --split {args.split}, MoE layouts); the limit is "
                            f"{MAX_SETTINGS:,}: search a coarser grid first")
    settings = settings_grid(gpus, args.tp, args.max_num_seqs, args.max_batched_tokens, chunked, pools, moe,
                             prefill_gpus, prefill_tp)
    overrides = {"requests": args.requests} if args.requests else {}
    from capacity.model.scenario import Scenario
    from capacity.simulator.config import config_from_scenario

    config_from_scenario(Scenario.from_dict(raw), **overrides)  # a bad file is refused before any worker starts
    executor, owner = executor_for(args.workers, args.cluster, args.event_loop)
    try:
        result = search(raw, settings, args.percentile, args.rate, executor, str(path.parent), overrides,
                        workers=args.workers if not args.cluster else len(owner.scheduler_info()["workers"]),
                        event_loop=args.event_loop, result_timeout_s=RESULT_TIMEOUT_S if args.cluster else None)
    finally:
        if owner is not None:
            owner.close() if args.cluster else owner.shutdown()
    if args.format == "json":
        return json.dumps(result.to_json_dict(), indent=1, default=_json_default) + "\n"
    return render_search_table(result)


def _split_layouts(raw: Mapping[str, Any], args: argparse.Namespace, gpus: list[str | None]
                   ) -> tuple[list[str | None], list[int]]:
    """(prefill GPU types, prefill TP sizes) of the split-pool settings (``--split``); ([], []) for none. A pools
    section's prefill GPU is the default prefill GPU (and its count among the sizes)."""
    pools = raw.get("pools") if isinstance(raw.get("pools"), Mapping) else None
    if args.split == "off" or (args.split == "auto" and pools is None):
        return [], []
    prefill = (pools or {}).get("prefill") if isinstance((pools or {}).get("prefill"), Mapping) else {}
    gpu = prefill.get("gpu") if isinstance(prefill.get("gpu"), Mapping) else {}
    names: list[str | None] = list(args.prefill_gpus) if args.prefill_gpus else (
        [str(gpu["name"])] if gpu.get("name") else gpus)
    sizes = list(args.prefill_tp) if args.prefill_tp else list(args.tp)
    count = gpu.get("count")
    if not args.prefill_tp and isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_TP:
        sizes = list(dict.fromkeys([count, *sizes]))
    return names, sizes


def _moe_layouts(raw: Mapping[str, Any], sizes: list[int]) -> dict[int, list[tuple[int, int]]] | None:
    """Per TP size, the attention data and expert parallel sizes a mixture-of-experts model tries
    (``sizing.moe_parallel_sizes`` within the largest size); None for a dense model (or one that does not build)."""
    from capacity.model.scenario import Scenario
    from capacity.planning.sizing import moe_parallel_sizes

    try:
        model = Scenario.from_dict({k: v for k, v in raw.items() if k not in ("pools", "simulation")}).model
    except ScenarioError:
        return None
    if not model.experts > model.experts_per_token > 0:
        return None
    budget = max(sizes)
    return {tp: moe_parallel_sizes(tp, budget) for tp in sizes}


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def render_search_table(result: SearchResult) -> str:
    """The cheapest configuration, the Pareto front, every setting's fewest replicas, and what was pruned."""
    p = f"p{result.percentile:g}"
    lines = [f"search at {result.rate_rps:g} requests/s, promises at the {p}: {len(result.runs)} simulations in "
             f"{result.wall_s:.1f} s on {result.workers} worker(s); ranked by {result.objective}", ""]
    best = result.cheapest
    if best is None:
        lines.append("no setting kept the promises")
    else:
        lines.append(f"cheapest: {_describe(best, p)}")
    lines += ["", f"{'':2}{'gpu':<14}{'tp':>3}{'seqs':>6}{'budget':>7}{'chunk':>6}{'repl':>9}{'gpus':>5}{'$/h':>9}"
              f"{p + ' ttft':>12}{p + ' tpot':>12}"]
    for row in result.best:
        cost = "-" if row["cost_per_hour"] is None else f"{row['cost_per_hour']:.2f}"
        pools = row.get("separate_pools")
        replicas = _replicas_text(row)
        gpu = row["gpu"] or "scenario"
        if row.get("prefill_tensor_parallel"):
            gpu = f"{row.get('prefill_gpu') or 'scenario'}x{row['prefill_tensor_parallel']}/{gpu}"
        lines.append(f"{'*' if row['pareto'] else ' ':2}{gpu:<14}{row['tensor_parallel']:>3}"
                     f"{row['max_num_seqs'] or '-':>6}{'-' if pools else row['max_batched_tokens']:>7}"
                     f"{'-' if pools else 'on' if row['chunked_prefill'] else 'off':>6}{replicas:>9}{row['gpus']:>5}"
                     f"{cost:>9}{row['ttft_s'] * 1e3:>10.1f}ms{row['tpot_s'] * 1e3:>10.1f}ms")
    lines.append("(* on the Pareto front of cost and the two percentiles; P+D: prefill + decode replicas; "
                 "gpu PxT/D: split pools, the prefill pool on P x T, the decode pool on D)")
    if result.pruned:
        lines += ["", "pruned:"]
        lines += [f"  {Setting(**{k: r[k] for k in Setting.__slots__}).label()}: {r['reason']}" for r in result.pruned]
    return "\n".join(lines) + "\n"


def _replicas_text(row: Mapping[str, Any]) -> str:
    """``N``, or ``P+D`` for separate pools."""
    if row.get("separate_pools"):
        return f"{row['prefill_replicas']}+{row['replicas'] - row['prefill_replicas']}"
    return str(row["replicas"])


def _describe(row: Mapping[str, Any], p: str) -> str:
    cost = "" if row["cost_per_hour"] is None else f", ${row['cost_per_hour']:.2f}/h"
    if row.get("prefill_tensor_parallel"):
        prefill_gpu = row.get("prefill_gpu") or "scenario GPU"
        engine = (f"{_replicas_text(row)} prefill + decode replicas: prefill on ({prefill_gpu} "
                  f"x{row['prefill_tensor_parallel']}), decode on ({row['gpu'] or 'scenario GPU'} "
                  f"x{row['tensor_parallel']}), max_num_seqs {row['max_num_seqs'] or 'none'}")
    elif row.get("separate_pools"):
        engine = (f"{_replicas_text(row)} prefill + decode replicas of ({row['gpu'] or 'scenario GPU'} "
                  f"x{row['tensor_parallel']}), max_num_seqs {row['max_num_seqs'] or 'none'}")
    else:
        engine = (f"{row['replicas']} x ({row['gpu'] or 'scenario GPU'} x{row['tensor_parallel']}), max_num_seqs "
                  f"{row['max_num_seqs'] or 'none'}, max_batched_tokens {row['max_batched_tokens']}, chunked prefill "
                  f"{'on' if row['chunked_prefill'] else 'off'}")
    return (f"{engine}: {row['gpus']} GPUs{cost}; {p} TTFT {row['ttft_s'] * 1e3:.1f} ms, {p} TPOT "
            f"{row['tpot_s'] * 1e3:.1f} ms")
