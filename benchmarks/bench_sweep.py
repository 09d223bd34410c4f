"""Benchmark: ``capacity sweep`` of a million-point grid to CSV and Parquet, end to end, and its peak memory.

Each run is the real command in a fresh process (``python -m capacity sweep ...``), timed from start to
exit, its peak resident memory read from the kernel (``os.wait4``); runs are interleaved (csv, parquet,
csv, ...) and medians reported. Beside them, in this process, the pieces on the same grid:

* evaluation alone (``sweep.record_batches``: the grid built from its indices, evaluated, as Arrow batches);
* CSV formatting: ours (``sweep.csv_text``: each number formatted once, rows joined by Arrow) against
  ``pyarrow.csv.CSVWriter`` on the same batches (the floor this replaces; parsed values are identical,
  ``tests/planning/test_sweep_stream.py``);
* the old path for reference, on a 100,000-row slice (``--baseline``): the whole grid in one DataFrame and
  ``DataFrame.to_csv``, scaled to the full grid.

    python benchmarks/bench_sweep.py [--steps 1000 | --rows N] [--repeat 3] [--baseline] [--progress]

Targets (issue 17): a 1,000,000-row sweep to CSV <= 10 s end to end, to Parquet <= 3 s, peak <= 500 MB.
A 100,000,000-row sweep keeps the same peak: the grid is never held whole (65,536 rows at a time, the next
evaluated while the last is written), and the Parquet footer's row groups wait in a spool, not in pyarrow's writer
(``capacity/fileio/parquet_stream.py``: pyarrow held 90 KB per row group, 1.35 MB per million rows, and copied it at
close); only its time grows, linearly. To show it:

    python benchmarks/bench_sweep.py --rows 100000000 --formats parquet --repeat 1 --no-pieces --progress

(``--progress``: the command's progress bar on stderr; the file, about 8 bytes a row as Parquet, is written to
the temporary directory, ``--out-dir`` elsewhere, and removed after its size is read.)
"""

from __future__ import annotations

import argparse
import io
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's capacity, also when another copy is installed
SCENARIO = ROOT / "scenarios" / "essay-001-sale-day.yaml"


def vary(steps: int) -> list[str]:
    return [f"serving.memory_utilization=0.5:0.95:{steps}", f"slo.tpot=20ms:200ms:{steps}"]


def run_cli(fmt: str, steps: int, out_dir: str, progress: bool = False) -> tuple[float, float, int, float]:
    """(wall s, peak RSS MB, file bytes, CPU s) of one ``capacity sweep`` in a fresh process."""
    out = Path(out_dir) / f"sweep.{fmt}"
    args = [sys.executable, "-m", "capacity", "sweep", str(SCENARIO)]
    for spec in vary(steps):
        args += ["--vary", spec]
    args += ["-o", str(out), "--progress" if progress else "--no-progress"]
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"capacity sweep failed with status {status}")
    size = out.stat().st_size
    out.unlink()
    return wall, usage.ru_maxrss / 1024, size, usage.ru_utime + usage.ru_stime


def pieces(steps: int) -> None:
    import pyarrow.csv as pacsv

    from capacity.model.scenario import load_scenario
    from capacity.planning.sweep import arrow_schema, csv_text, make_grid, record_batches

    grid = make_grid(load_scenario(SCENARIO), vary(steps))
    schema = arrow_schema(grid)
    start = time.perf_counter()
    batches = list(record_batches(grid, schema))
    evaluate = time.perf_counter() - start
    start = time.perf_counter()
    done = 0
    for b in batches:
        csv_text(b, grid.coords(done, done + b.num_rows))
        done += b.num_rows
    ours = time.perf_counter() - start
    start = time.perf_counter()
    with pacsv.CSVWriter(io.BytesIO(), schema) as writer:
        for b in batches:
            writer.write_batch(b)
    theirs = time.perf_counter() - start
    rows = grid.rows
    print(f"in process, {rows:,} rows: evaluation {evaluate:.2f} s ({rows / evaluate:,.0f} rows/s); CSV formatting "
          f"ours {ours:.2f} s, pyarrow.csv.CSVWriter {theirs:.2f} s ({theirs / ours:.1f}x ours)")


def baseline(steps: int) -> None:
    """The pre-streaming path on a 100,000-row slice: one DataFrame, ``DataFrame.to_csv``; scaled up."""
    import pandas as pd

    from capacity.model.frame import evaluate_arrays
    from capacity.model.scenario import load_scenario
    from capacity.planning.sweep import make_grid

    grid = make_grid(load_scenario(SCENARIO), vary(steps))
    n = min(grid.rows, 100_000)
    start = time.perf_counter()
    x = grid.inputs(0, n)
    results = evaluate_arrays(x)
    frame = pd.DataFrame({**x, **{k: v for k, v in results.items()}})
    frame.to_csv(index=False).encode("utf-8")
    wall = time.perf_counter() - start
    print(f"old path (one DataFrame, to_csv) on {n:,} rows: {wall:.2f} s -> {wall * grid.rows / n:.1f} s "
          f"scaled to {grid.rows:,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="STEPS of each of the two axes (rows = steps^2)")
    parser.add_argument("--rows", type=int, default=None,
                        help="at least this many rows (sets --steps to the ceiling of its square root)")
    parser.add_argument("--progress", action="store_true", help="show each run's progress bar on stderr")
    parser.add_argument("--out-dir", default=None, help="where the files are written (default: a temporary folder)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default="csv,parquet")
    parser.add_argument("--baseline", action="store_true", help="also time the old DataFrame.to_csv path")
    parser.add_argument("--no-pieces", action="store_true", help="skip the in-process breakdown")
    args = parser.parse_args()
    formats = args.formats.split(",")
    if args.rows is not None:
        args.steps = math.isqrt(max(args.rows, 1) - 1) + 1
    rows = args.steps**2
    print(f"machine: {os.cpu_count()} CPUs visible, Python {sys.version.split()[0]}; grid {args.steps} x "
          f"{args.steps} = {rows:,} rows")
    results: dict[str, list[tuple[float, float, int, float]]] = {f: [] for f in formats}
    with tempfile.TemporaryDirectory(dir=args.out_dir) as out_dir:
        for _ in range(args.repeat):
            for fmt in formats:
                results[fmt].append(run_cli(fmt, args.steps, out_dir, args.progress))
    targets = {"csv": 10.0 * rows / 1e6, "parquet": 3.0 * rows / 1e6}
    for fmt, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        each = ", ".join(f"{r[0]:.2f}" for r in runs)
        cpu = statistics.median(r[3] for r in runs)
        print(f"capacity sweep -> {fmt:8s} median {wall:6.2f} s end to end, {cpu:6.2f} s CPU (runs {each}), "
              f"peak RSS {peak:,.0f} MB, file {runs[0][2] / 1e6:,.1f} MB; {rows / wall:,.0f} rows/s "
              f"({wall / rows * 1e6:.2f} s per million); target "
              f"<= {targets.get(fmt, float('nan')):g} s and <= 500 MB: "
              f"{'met' if wall <= targets.get(fmt, 0) and peak <= 500 else 'NOT met'}")
    if not args.no_pieces:
        pieces(args.steps)
    if args.baseline:
        baseline(args.steps)


if __name__ == "__main__":
    main()
