"""``capacity calibrate SCENARIO.yaml BENCH.csv [--fit ...] [--save NAME] [--profiles FILE]``: the options, the
fit (``capacity.planning.calibration``) and the report it prints."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError, clean_line
from capacity.inputs.profiles import profile_from_fit, save_profile
from capacity.model.scenario import read_scenario_mapping
from capacity.planning.calibration import (
    ALL_FACTORS,
    FACTORS,
    LATENCY,
    calibrate_rows,
    describe,
    format_report,
    read_measurements,
)


def add_calibrate_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capacity calibrate SCENARIO.yaml BENCH.csv [--fit ...] [--save NAME] [--profiles FILE]``."""
    p = subparsers.add_parser("calibrate", help="fit the efficiency factors, step overhead and request latency to "
                                                "benchmark points")
    p.add_argument("scenario", type=options.path,
                   help="scenario YAML naming the model, the catalog GPU and the serving settings")
    p.add_argument("benchmark", nargs="+", type=options.path,
                   help="measured points: a benchmark CSV, vllm bench serve --save-result JSON or a scrape of vLLM's "
                        "/metrics (told apart by content; see docs/fidelity.md)")
    p.add_argument("--since", metavar="SCRAPE", type=options.path,
                   help="an earlier /metrics scrape: only what changed since it counts (the benchmark window)")
    p.add_argument("--fit", type=options.choice_list(ALL_FACTORS), default=None,
                   help=f"comma-separated factors to fit, of {','.join(ALL_FACTORS)} (default {','.join(FACTORS)}, "
                        f"and {LATENCY} where a point is a TTFT behind a load: the time outside the engine's "
                        f"passes)")
    p.add_argument("--save", metavar="NAME", type=options.name,
                   help="save the identified factors as a profile of this name")
    p.add_argument("--profiles", metavar="FILE", type=options.path,
                   help="profile catalog (default ~/.config/capacity/profiles.yaml)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    return p


def run_calibrate(args: argparse.Namespace) -> str:
    """Run ``capacity calibrate``; returns the report text. ScenarioError on bad input."""
    mapping = read_scenario_mapping(args.scenario)
    if not isinstance(mapping, Mapping):
        raise ScenarioError(f"{args.scenario} must hold a scenario mapping")
    wanted = None if args.fit is None else tuple(args.fit)  # None: calibration.default_fit of the points
    paths = [args.benchmark] if isinstance(args.benchmark, str) else list(args.benchmark)
    since = getattr(args, "since", None)
    rows, notes = read_measurements(paths, since)
    observations, before, after = calibrate_rows(mapping, rows, ", ".join(map(str, paths)), fit=wanted)
    notes = [clean_line(n) for n in notes]
    saved = ""
    if args.save:
        profile = profile_from_fit(observations[0].scenario, after, source=", ".join(map(str, paths)))
        where = save_profile(args.save, profile, args.profiles)
        saved += f"saved profile {clean_line(repr(args.save), 80)} for GPU {profile['gpu']} in {where}\n"
    if args.format == "json":
        return json.dumps({**describe(after), "default_mape_percent": before.mape, "input_notes": notes},
                          indent=2) + "\n" + saved
    return format_report(observations, before, after) + "".join(f"note: {n}\n" for n in notes) + saved
