"""Benchmark: ``calibration.fit_factors`` on n measured points, and how its time grows with n.

The points are decode-step times of Llama 3.1 8B on one H100 at n distinct batch sizes (every point its own
compute/memory ratio: the worst case, n + 1 intervals to solve) plus prefill times, generated with known
factors (0.7, 0.5, 3 ms) and 10% log-normal noise. Printed: the fit time at each n and the factor by which
the time grows when n grows tenfold (at most 10 for a fit linear in the points; the previous solver rebuilt
an n-row design for every interval it could not prune, up to n of them, so up to 100; ``--baseline`` runs it
from git history on small n for comparison).

Measured 2026-12-01 on the shared 2-core machine (load ~8): 100 / 1,000 / 10,000 points in 0.39 / 0.74 /
3.75 s (x1.9 and x5.1 per tenfold); the previous solver 0.52 / 0.44 / 1.42 s at 30 / 100 / 300 points against
0.32 / 0.28 / 0.64 s now.

    python benchmarks/bench_calibrate.py [--sizes 100,1000,10000] [--baseline]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capacity import Scenario  # noqa: E402
from capacity.planning import calibration  # noqa: E402

#: The last commit with the interval-by-interval solver (quadratic in the points).
BASELINE_COMMIT = "a22d354"


def points(module, n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": {"max_model_len": 16384}}
    decode = Scenario.from_dict({**base, "workload": {"prompt_tokens": 1024, "output_tokens": 256}})
    prefill = Scenario.from_dict({**base, "workload": {"prompt_tokens": 2048, "output_tokens": 1}})
    truth = module.Factors(0.7, 0.5, 0.003)
    out = []
    for i in range(n):
        o = (module.Observation(prefill, "ttft_s", 1.0, concurrency=1) if i % 10 == 9 else
             module.Observation(decode, "step_time_s", 1.0, batch_size=1 + i))
        value = module.predict(o, truth) * float(np.exp(rng.normal(0.0, 0.1)))
        out.append(module.Observation(o.scenario, o.metric, value, batch_size=o.batch_size,
                                      concurrency=o.concurrency))
    return out


def timed(module, n: int) -> float:
    obs = points(module, n)
    start = time.perf_counter()
    module.fit_factors(obs)
    return time.perf_counter() - start


def baseline_module():
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{BASELINE_COMMIT}:capacity/planning/calibration.py"],
                            capture_output=True, text=True, check=True).stdout
    path = Path("/tmp/capacity_calibration_baseline.py")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("capacity._calibration_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--baseline", action="store_true", help="also time the previous solver (up to 300 points)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    previous = None
    print(f"{'points':>8} {'fit [s]':>9} {'x time per 10x points':>22}")
    for n in sizes:
        t = timed(calibration, n)
        ratio = "" if previous is None else f"{(t / previous[1]) ** (1 / np.log10(n / previous[0])):.1f}"
        print(f"{n:>8,} {t:>9.2f} {ratio:>22}")
        previous = (n, t)
    if args.baseline:
        old = baseline_module()
        print("baseline (interval by interval, commit " + BASELINE_COMMIT + "):")
        for n in [s for s in (30, 100, 300) if s <= 300]:
            t_old, t_new = timed(old, n), timed(calibration, n)
            print(f"{n:>8,} {t_old:>9.2f} s before, {t_new:.2f} s now: {t_old / t_new:.1f}x")


if __name__ == "__main__":
    main()
