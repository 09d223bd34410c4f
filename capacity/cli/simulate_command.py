"""What ``capacity simulate SCENARIO.yaml [--format json|csv] [-o FILE] [--set KEY=VALUE ...]`` prints.

JSON prints the summary (base units: seconds, requests/s, tokens/s); CSV prints one row
per request. ``--set`` overrides a key of the scenario's ``simulation:`` block; the value
is read as YAML (``--set rate=12``, ``--set policy=static``,
``--set "output_tokens={dist: uniform, low: 20, high: 300}"``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capacity.cli import options
from capacity.errors import ScenarioError, show
from capacity.fileio.csv_safe import frame_to_csv
from capacity.fileio.safe_load import parse_yaml
from capacity.model.scenario import Scenario, load_scenario

if TYPE_CHECKING:
    from capacity.simulator import SimulationResult


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["rate=12", "policy=static"]`` -> ``{"rate": 12, "policy": "static"}`` (values read as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"--set {show(item)} must look like KEY=VALUE, e.g. --set rate=12")
        if key.strip() in out:
            raise ScenarioError(f"--set {show(key.strip())} is given twice; keep one")
        out[key.strip()] = parse_yaml(value, f"--set {key.strip()}", max_nodes=1_000)  # bounded, as files are
    return out


def render(result: SimulationResult, fmt: str) -> str:
    """The summary as a JSON object, or the per-request rows as CSV."""
    if fmt == "csv":
        return frame_to_csv(result.requests, float_format="%.6g")
    return json.dumps({"name": result.scenario.name, **result.to_json_dict()}, indent=2) + "\n"


def add_simulate_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capacity simulate``."""
    p = subparsers.add_parser("simulate", help="simulate the scenario's serving engine request by request")
    p.add_argument("scenario", type=options.path, help="scenario YAML file (its simulation: block sets the run)")
    p.add_argument("--format", choices=["json", "csv"], default="json",
                   help="json (default): the summary in base units; csv: one row per request")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the simulation block, e.g. --set policy=static --set rate=12")
    return p


def run_simulate(args: argparse.Namespace) -> str:
    """What ``capacity simulate`` prints; ScenarioError for anything the user can fix."""
    return run(args, load_scenario(Path(args.scenario)))


def run(args: argparse.Namespace, scenario: Scenario) -> str:
    """What ``capacity simulate`` prints for ``scenario`` (``args.scenario``, loaded and checked by the CLI
    before this module's imports); ScenarioError for anything the user can fix."""
    from capacity.simulator import simulate  # after the file is read: a bad file is refused before ~0.9 s of imports

    path = Path(args.scenario)
    result = simulate(scenario, base_dir=path.parent, **parse_overrides(args.set))
    return render(result, args.format)
