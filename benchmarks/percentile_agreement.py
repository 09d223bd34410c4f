"""Analytic percentiles (capacity/model/percentiles.py) against the simulator on a grid of shapes and loads.

Prints one row per shape and load: analytic and simulated p50/p90/p99 TPOT and TTFT [ms] and the worst
error up to each load, for the table in docs/workloads.md. The simulator runs the analytic model's engine
(promises.ANALYTIC_ENGINE) with 20,000 Poisson requests, seed 0, the first 20% discarded.

    python3 benchmarks/percentile_agreement.py
"""

from __future__ import annotations

from capacity import Scenario, load_scenario
from capacity.planning.simulated_percentiles import percentile_validation as validation

BASE = {
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s", "price_per_hour": 2.0},
    "serving": {"memory_utilization": 0.90, "block_size": 1, "max_model_len": 32768, "step_overhead": "3 ms"},
}
SHAPES = ((1000, 300), (500, 100), (4000, 200), (200, 500))
FRACTIONS = (0.3, 0.5, 0.7, 0.8, 0.9)


def main() -> None:
    cases = [(f"{p}/{a}", Scenario.from_dict({**BASE, "workload": {"prompt_tokens": p, "output_tokens": a}}))
             for p, a in SHAPES]
    cases.append(("mix chat+rag (H100)", load_scenario("scenarios/mix-chat-rag-h100.yaml")))
    print("| shape | class | load | metric | analytic p50 / p90 / p99 [ms] | simulated p50 / p90 / p99 [ms] | "
          "errors |")
    print("|---|---|---|---|---|---|---|")
    for label, scenario in cases:
        table = validation(scenario, FRACTIONS)
        for (fraction, klass, metric), part in table.groupby(["fraction", "class", "metric"], sort=False):
            a = " / ".join(f"{v * 1e3:,.1f}" for v in part["analytic_s"])
            s = " / ".join(f"{v * 1e3:,.1f}" for v in part["simulated_s"])
            e = " / ".join(f"{v:+.0%}" for v in part["error"])
            print(f"| {label} | {klass} | {fraction:.0%} | {metric.upper()} | {a} | {s} | {e} |", flush=True)


if __name__ == "__main__":
    main()
