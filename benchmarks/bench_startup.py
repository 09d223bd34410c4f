"""Benchmark: start-up of the ``capacity`` command (issue 17: ``capacity evaluate`` under 150 ms of import).

Each case runs in a fresh interpreter, interleaved (case 1, 2, 3, 1, 2, 3, ...) so a busy machine slows all
alike; medians are reported. Cases:

* ``python -c pass``: the interpreter alone (the floor every command pays);
* ``import numpy``: what any numeric command pays at least;
* ``capacity --version``: the CLI's own start-up (no numpy, no pandas);
* ``import for evaluate``: every module ``capacity evaluate`` imports, without evaluating (the import cost);
* ``capacity evaluate``: the whole command on essay 001 (import + load + evaluate + print).

The import cost is ``import for evaluate`` minus ``python -c pass``. Bytecode caching is switched on for
the runs (``PYTHONDONTWRITEBYTECODE`` removed, one warm-up run first), as in any installed copy: without
the ``.pyc`` files every start compiles the package's source again (~120 ms here).

    python benchmarks/bench_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "essay-001-sale-day.yaml"
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import numpy": [sys.executable, "-c", "import numpy"],
    "capacity --version": [sys.executable, "-m", "capacity", "--version"],
    "import for evaluate": [sys.executable, "-c", "import capacity.cli, capacity.scenario, capacity.formatting"],
    "capacity evaluate": [sys.executable, "-m", "capacity", "evaluate", str(SCENARIO)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for run in range(args.repeat + 1):
        for name, cmd in CASES.items():
            start = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=env)
            if run:  # the first round writes the bytecode caches
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    for name, ms in med.items():
        print(f"{name:22s} median {ms:7.1f} ms   (min {min(times[name]) * 1e3:6.1f} ms, {args.repeat} runs)")
    imports = med["import for evaluate"] - med["python -c pass"]
    numpy = med["import numpy"] - med["python -c pass"]
    print(f"import cost of capacity evaluate: {imports:.1f} ms (numpy alone {numpy:.1f} ms); target <= 150 ms: "
          f"{'met' if imports <= 150 else 'NOT met'}")
    print(f"capacity --version over the bare interpreter: {med['capacity --version'] - med['python -c pass']:.1f} ms")


if __name__ == "__main__":
    main()
