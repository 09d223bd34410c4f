"""Benchmark: the million-scenario call against the floor of its arithmetic, measured in the same run.

The project's time is ``capacity.model.frame.evaluate_frame`` (DataFrame in, every result out) and
``capacity.model.frame.evaluate_arrays`` (arrays in and out) on the million of ``bench_million.scenarios``
(the 16 catalog models on the 9 catalog GPUs, tensor parallel 1-8, random lengths, loads and promises).

The floor (``floor_goodput`` below, written here on purpose as the baseline) computes only what the
goodput needs, in one pass over all rows: KV bytes, pool, blocks and the batch, the decode step and the
prefill, the ceiling, the TPOT bound (closed form for dense rows; for MoE rows Chandrupatla's method on the
compacted MoE rows) and the TTFT bound (Chandrupatla with compaction), through the same formula functions,
with no chunking, no serving options, no other results and no conversions. It must agree with the
project's goodput to 1e-11 (relative); the ratio of the times is what the rest of the table costs.
The floor is timed three ways: on all rows at once, in the slices ``evaluate_arrays`` uses (``frame.CHUNK_ROWS``,
whose temporaries stay in the CPU cache), the fairer floor where slicing pays, and in those slices on as many
threads as ``evaluate_arrays`` uses by default (``threads.default_threads()``, the CPUs of this process), the floor
for its wall time. ``evaluate_arrays`` is timed on one thread and on its default threads.

    python benchmarks/bench_floor.py [--rows 1000000] [--repeat 5]

Target (issue 17): the million with exact goodput in one call <= 1 s and within 3x of the floor. Runs
alternate (floor, arrays, frame, floor, ...) and medians are reported, so a busy machine slows all alike.
The floor is the goodput alone: the project's call also solves the serving options and the TPOT and TTFT at the
goodput and at the load (five more root solves) and writes 65 result columns, about 0.52 GB of fresh pages per
million where the floor writes 8 MB. The kernel zeroes fresh pages (and, for numpy's huge-page advice, may compact
memory first) in system time, which the CPU column includes and prints apart: 0.04-1 s per call on a shared VM.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_million import scenarios  # noqa: E402

from capacity.formulas import memory, roofline, slo  # noqa: E402
from capacity.model.analysis import complete_inputs, step_model  # noqa: E402
from capacity.model.frame import CHUNK_ROWS, evaluate_arrays, evaluate_frame, frame_inputs  # noqa: E402
from capacity.runtime.threads import default_threads, ordered_map  # noqa: E402


def floor_goodput(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Goodput of every row [requests/s]: the chain of ``analysis._analyse`` up to ``goodput_rps``, nothing else."""
    x = complete_inputs(inputs)
    bs, window, local = x["block_size"], x["sliding_window"], x["local_layer_fraction"]
    a_tokens = x["output_tokens"]
    tokens = x["prompt_tokens"] + a_tokens
    model, kv_gpu = step_model(x, x["prompt_tokens"] + a_tokens / 2.0)
    w_gpu = x["weight_bytes"] / (x["gpu_count"] * x["pipeline_parallel"])
    pool = memory.pool_bytes(x["gpu_memory_bytes"], x["memory_utilization"], w_gpu + x["reserved_bytes"])
    blocks = memory.pool_blocks(pool, bs, kv_gpu)
    shared = memory.max_requests_shared_prefix(blocks, tokens, x["shared_prefix_tokens"], bs, window, local)
    batch = np.minimum(shared, x["max_num_seqs"])
    prefill_tokens = np.maximum(x["prompt_tokens"] - memory.shared_blocks(x["shared_prefix_tokens"], bs) * bs, 1.0)
    t_step = model.step_s(batch)
    t_prefill = model.prefill_s(prefill_tokens)
    ceiling = roofline.ceiling_rps(t_prefill, t_step, batch, a_tokens)
    pieces = model.pieces()
    rate_tpot = slo.max_rate_for_tpot_rps(x["tpot_slo_s"], t_prefill, a_tokens, pieces)
    moe = np.flatnonzero(model.moe)
    if moe.size:
        # The MoE step on per-row args the solver compacts (``row_steps``, as ``analyse`` solves): ``step_rows``
        # would gather the model again at every evaluation, about 0.2 s more on the million.
        step, step_args = model.rows(moe).row_steps()
        rate_tpot[moe] = slo.max_rate_for_tpot_rows(step, x["tpot_slo_s"][moe], t_prefill[moe], a_tokens[moe],
                                                    ceiling[moe], step_args=step_args)
    rate_ttft = slo.max_rate_for_ttft_rps(x["ttft_slo_s"], t_prefill, ceiling, model.prefill_compute_s(prefill_tokens),
                                          a_tokens, pieces)
    return slo.goodput_rps(ceiling, rate_tpot, rate_ttft)


def floor_sliced(inputs: dict[str, np.ndarray], rows: int = CHUNK_ROWS, threads: int = 1) -> np.ndarray:
    """``floor_goodput`` in slices of ``rows`` rows (as ``evaluate_arrays`` slices) on ``threads`` threads
    [requests/s]."""
    n = len(next(iter(inputs.values())))
    return np.concatenate(list(ordered_map(lambda i: floor_goodput({k: v[i:i + rows] for k, v in inputs.items()}),
                                           range(0, n, rows), threads)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    df = scenarios(args.rows)
    x = frame_inputs(df)
    moe = (df["experts"] > 0).to_numpy()
    print(f"scenarios: {len(df):,} ({moe.mean():.0%} MoE)")
    first_start = time.perf_counter()
    frame = evaluate_frame(df)
    first = time.perf_counter() - first_start
    floor = floor_goodput(x)
    ours = frame["goodput_rps"].to_numpy()
    rel = np.abs(floor - ours) / np.maximum(np.abs(ours), 1e-300)
    worst = float(np.nanmax(np.where(floor == ours, 0.0, rel)))
    print(f"floor agrees with evaluate_frame's goodput: worst relative difference {worst:.1e} "
          f"({'ok' if worst <= 1e-11 else 'NOT within 1e-11'})")
    sliced = floor_sliced(x)
    print(f"floor in slices equals the floor on all rows: {'yes' if np.array_equal(sliced, floor) else 'NO'}")
    threads = default_threads()
    calls = {"floor (goodput only)": lambda: floor_goodput(x), "floor in slices": lambda: floor_sliced(x),
             f"floor, {threads} threads": lambda: floor_sliced(x, threads=threads),
             "evaluate_arrays 1 thread": lambda: evaluate_arrays(x, threads=1),
             "evaluate_arrays": lambda: evaluate_arrays(x), "evaluate_frame": lambda: evaluate_frame(df)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    system: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeat):
        for name, call in calls.items():
            start, start_cpu, start_sys = time.perf_counter(), time.process_time(), os.times().system
            call()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            system[name].append(os.times().system - start_sys)
    med = {name: statistics.median(t) for name, t in times.items()}
    med_cpu = {name: statistics.median(t) for name, t in cpu.items()}
    med_sys = {name: statistics.median(t) for name, t in system.items()}
    base, base_cpu = med["floor (goodput only)"], med_cpu["floor (goodput only)"]
    # CPU time (this process, user + system) is what a busy machine inflates least: its ratio is the stable one.
    for name, t in med.items():
        print(f"{name:24s} median {t:6.3f} s wall ({args.rows / t:11,.0f} rows/s) {t / base:5.2f}x the floor; "
              f"{med_cpu[name]:6.3f} s CPU {med_cpu[name] / base_cpu:5.2f}x the floor (system {med_sys[name]:.2f} s)")
    sliced_cpu = med_cpu["floor in slices"]
    one = "evaluate_arrays 1 thread"
    print(f"evaluate_arrays on 1 thread against the floor in slices: {med[one] / med['floor in slices']:.2f}x wall, "
          f"{med_cpu[one] / sliced_cpu:.2f}x CPU")
    print(f"evaluate_arrays on {threads} threads against the floor on {threads} threads: "
          f"{med['evaluate_arrays'] / med[f'floor, {threads} threads']:.2f}x wall")
    print(f"first call of evaluate_frame (cold): {first:.3f} s")
    floor_cpu = min(base_cpu, sliced_cpu)
    verdict = med["evaluate_frame"] <= 1.0 * args.rows / 1e6 and med_cpu["evaluate_frame"] <= 3 * floor_cpu
    print(f"target: <= 1 s per million and within 3x of the (faster) floor: {'met' if verdict else 'NOT met'}")


if __name__ == "__main__":
    main()
