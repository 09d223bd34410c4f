"""Benchmark: the whole analytic model on 1,000,000 scenarios in one call, against the scalar path in a loop.

The million varies model (every catalog model: dense, GQA, MLA, sliding windows, MoE), GPU (every
catalog GPU, tensor parallel 1/2/4/8), prompt and answer lengths, shared prefix, memory utilisation,
batch cap, arrival rate and the TPOT/TTFT promises. It prints:

* the wall and CPU time of ``capacity.model.frame.evaluate_frame`` on the million (every result, one call),
  scenarios per second, and the same for the dense rows alone (closed forms) and the MoE rows alone
  (bisection);
* the scalar path, ``analyse`` on one scenario's scalars and ``Scenario.evaluate``, timed in a loop on a
  sample, and the speed-up of the vectorised call per scenario;
* that the sample's vectorised values equal the scalar ones;
* the app's full recompute after a slider change: ``Scenario.from_dict`` + ``evaluate`` + the curves of
  ``capacity/model/curves.py`` (decode curve, balance batch, load curve over 300 rates).

    python benchmarks/bench_million.py [--rows N] [--sample N] [--repeat N]

Targets (issue 7): the million under 1 s on one core, at least 100x the scalar loop, the app recompute
well under 50 ms. numpy runs single-threaded here (no BLAS in these formulas).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import numpy as np
import pandas as pd

from capacity import Scenario, ScenarioError, analyse
from capacity.inputs import catalog
from capacity.model.analysis import RESULTS
from capacity.model.curves import balance_batch, decode_curve, load_curve
from capacity.model.frame import evaluate_frame

#: Tensor-parallel sizes tried for every model and GPU.
TP_SIZES = (1, 2, 4, 8)


def base_rows() -> pd.DataFrame:
    """Flat inputs of every catalog (model, GPU, tensor parallel) that fits, at default serving settings."""
    rows = []
    for model in catalog.models():
        for gpu in catalog.gpus():
            for tp in TP_SIZES:
                data = {"model": {"name": model}, "gpu": {"name": gpu, "count": tp},
                        "serving": {"step_overhead": "2 ms", "max_model_len": 32768},
                        "workload": {"prompt_tokens": 1000, "output_tokens": 300}}
                try:
                    rows.append(Scenario.from_dict(data).inputs())
                except ScenarioError:
                    continue
    return pd.DataFrame(rows)


def scenarios(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` scenarios: a random catalog layout each, with random lengths, utilisation, load and promises."""
    rng = np.random.default_rng(seed)
    base = base_rows()
    df = base.iloc[rng.integers(0, len(base), n)].reset_index(drop=True)
    prompt = np.round(np.exp(rng.uniform(np.log(50), np.log(16_000), n)))
    output = np.round(np.exp(rng.uniform(np.log(20), np.log(4_000), n)))
    df["prompt_tokens"], df["output_tokens"] = prompt, output
    df["shared_prefix_tokens"] = np.floor(prompt * rng.choice([0.0, 0.0, 0.25, 0.5], n))
    df["max_model_len"] = np.maximum(df["max_model_len"], prompt + output)
    df["memory_utilization"] = rng.uniform(0.80, 0.95, n)
    df["block_size"] = rng.choice([16.0, 32.0], n)
    df["max_num_seqs"] = rng.choice([np.inf, 256.0, 1024.0], n)
    df["arrival_rate"] = rng.choice([0.0, 1.0, 5.0, 20.0], n)
    df["tpot_slo_s"] = rng.choice([np.inf, 0.03, 0.05, 0.1], n)
    df["ttft_slo_s"] = rng.choice([np.inf, 0.5, 1.0, 3.0], n)
    df["price_per_hour"] = rng.uniform(1.0, 6.0, n)
    return df


def timed(func, repeat: int) -> tuple[float, float, object]:
    """(best wall time, its CPU time, last result) of ``repeat`` calls."""
    best = (math.inf, math.inf)
    result = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = func()
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best[0], best[1], result


def same(a: object, b: object) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return bool(np.isclose(float(a), float(b), rtol=1e-12, atol=0.0, equal_nan=True))


def app_recompute_ms(repeat: int = 50) -> tuple[float, float]:
    """Median and p90 [ms] of from_dict + evaluate + the curves, the utilisation nudged each time (no cache)."""
    data = {"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm", "count": 1},
            "serving": {"memory_utilization": 0.90, "block_size": 16, "max_model_len": 8192, "step_overhead": "2 ms"},
            "workload": {"prompt_tokens": 1200, "output_tokens": 250, "shared_prefix_tokens": 800,
                         "arrival_rate": 10},
            "slo": {"tpot": "50 ms", "ttft": "1 s"}}
    times = []
    for i in range(repeat):
        data["serving"]["memory_utilization"] = 0.85 + 0.001 * i
        start = time.perf_counter()
        results = Scenario.from_dict(data).evaluate()
        decode_curve(results, np.unique(np.geomspace(1, max(results["batch_max"], 1), 200).round()))
        balance_batch(results)
        if results["ceiling_rps"] > 0:
            load_curve(results, np.linspace(0, results["ceiling_rps"] * 0.999, 300))
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=2_000, help="scenarios timed on the scalar path")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of the million (best is reported)")
    args = parser.parse_args()

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible, "
          f"Python {platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}")
    df = scenarios(args.rows)
    moe = (df["experts"] > 0).to_numpy()
    print(f"scenarios: {len(df):,} ({moe.mean():.0%} MoE), {len(RESULTS)} results each")

    wall, cpu, out = timed(lambda: evaluate_frame(df), args.repeat)
    print(f"evaluate_frame, all rows:  {wall:7.3f} s wall  {cpu:7.3f} s CPU  {len(df) / wall:12,.0f} scenarios/s")
    for name, rows in (("dense rows", ~moe), ("MoE rows", moe)):
        part = df[rows].reset_index(drop=True)
        if len(part):
            w, c, _ = timed(lambda part=part: evaluate_frame(part), args.repeat)
            print(f"evaluate_frame, {name:10s} {w:7.3f} s wall  {c:7.3f} s CPU  {len(part) / w:12,.0f} scenarios/s")

    rng = np.random.default_rng(1)
    sample = df.iloc[rng.choice(len(df), size=min(args.sample, len(df)), replace=False)]
    records = sample.to_dict("records")
    start = time.perf_counter()
    scalar = [analyse(record) for record in records]
    per_scalar = (time.perf_counter() - start) / len(records)
    print(f"scalar analyse loop:       {per_scalar * 1e3:7.3f} ms per scenario ({len(records):,} sampled)")
    print(f"speed-up of one call over the loop: {per_scalar / (wall / len(df)):,.0f}x")

    scenario = Scenario.from_dict({"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm"},
                                   "workload": {"prompt_tokens": 1000, "output_tokens": 300},
                                   "slo": {"tpot": "50 ms", "ttft": "1 s"}})
    loops = 300
    start = time.perf_counter()
    for _ in range(loops):
        scenario.evaluate()
    per_evaluate = (time.perf_counter() - start) / loops
    print(f"Scenario.evaluate loop:    {per_evaluate * 1e3:7.3f} ms per scenario "
          f"(speed-up {per_evaluate / (wall / len(df)):,.0f}x)")

    frame = out.loc[sample.index]
    wrong = sum(not same(row[key], frame.iloc[i][key]) for i, row in enumerate(scalar) for key in RESULTS)
    print(f"sample agrees with the scalar path: {'yes' if wrong == 0 else f'NO ({wrong} values differ)'}")

    median, p90 = app_recompute_ms()
    print(f"app full recompute (from_dict + evaluate + curves): median {median:.1f} ms, p90 {p90:.1f} ms")
    print(f"targets: million under 1 s {'met' if wall < 1 else 'NOT met'}; >= 100x the scalar loop "
          f"{'met' if per_scalar / (wall / len(df)) >= 100 else 'NOT met'}; app recompute under 50 ms "
          f"{'met' if median < 50 else 'NOT met'}")


if __name__ == "__main__":
    main()
