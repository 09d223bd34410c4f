"""``capacity sweep SCENARIO.yaml --vary KEY=START:STOP:STEPS ... [--format csv|xlsx|parquet|json] [-o FILE]``.

The sweep is streamed into the output (``capacity.planning.sweep.run_to``), written beside it and renamed when
complete, or to standard output.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError

#: Table formats of a sweep; xlsx and parquet are binary and need ``-o``.
SWEEP_FORMATS = ("csv", "xlsx", "parquet", "json")
#: Errors of writing standard output (full disk or device, quota, file size limit, closed pipe, I/O error).
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EPIPE, errno.EIO}


def add_sweep_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capacity sweep``."""
    p = subparsers.add_parser("sweep", help="evaluate a scenario over a grid of inputs and write a table")
    p.add_argument("scenario", type=options.path, help="scenario YAML file")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=START:STOP:STEPS", required=True,
                   help="a scenario key (serving.memory_utilization, workload.prompt_tokens, slo.tpot, ...) or flat "
                        "input name, with STEPS even values from START to STOP; repeat for a grid")
    p.add_argument("--format", choices=SWEEP_FORMATS, help="table format (default: from the -o suffix, else csv)")
    p.add_argument("-o", "--output", type=options.path, help="write to this file (required for xlsx and parquet)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: on a terminal, for sweeps of 200,000 rows or more)")
    p.add_argument("--units", choices=["base", "human"], default="base",
                   help="csv only: base (default) or human (each header names its unit: pool_bytes [GB], ...)")
    return p


def run_sweep_command(args: argparse.Namespace) -> None:
    """Stream the sweep into the output or standard output; returns None (nothing left to write)."""
    from capacity.fileio.files import atomic_output
    from capacity.model.scenario import load_scenario
    from capacity.planning.sweep import run_to

    suffix = (args.output or "").rsplit(".", 1)[-1].lower() if args.output and "." in args.output else ""
    fmt = args.format or (suffix if suffix in SWEEP_FORMATS else "csv")
    if fmt in ("xlsx", "parquet") and not args.output:
        raise ScenarioError(f"--format {fmt} writes a binary file: give -o FILE.{fmt}")
    scenario = load_scenario(args.scenario)
    if args.output is None:
        try:
            sys.stdout.flush()
            run_to(scenario, args.vary, fmt, sys.stdout.buffer, progress=args.progress, units=args.units)
            sys.stdout.flush()
        except OSError as exc:
            if exc.errno not in _OUTPUT_ERRNOS:
                raise
            from capacity.cli import OutputFailed

            raise OutputFailed from exc
        return None
    with atomic_output(args.output) as sink:
        run_to(scenario, args.vary, fmt, sink, output=args.output, progress=args.progress, units=args.units)
    return None


__all__ = ["SWEEP_FORMATS", "add_sweep_command", "run_sweep_command"]
