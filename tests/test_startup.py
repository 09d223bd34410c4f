"""Start-up: each subcommand imports only what it needs (issue 17). Which modules load is checked, not time."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.cli import EXTERNAL, main

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import contextlib, io, json, sys
from capacity.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _modules_after(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, out.stderr
    return set(result["modules"])


def test_version_imports_no_numerics() -> None:
    loaded = _modules_after("--version")
    assert not loaded & {"numpy", "pandas", "plotly", "pyarrow", "yaml", "capacity.analysis", "capacity.fleet"}


def test_evaluate_imports_no_pandas_or_fleet() -> None:
    loaded = _modules_after("evaluate", "scenarios/essay-001-sale-day.yaml")
    assert "capacity.analysis" in loaded  # it did evaluate
    assert not loaded & {"pandas", "plotly", "pyarrow", "capacity.fleet", "capacity.calibration",
                         "capacity.simulator"}


def test_help_lists_external_commands_without_importing_them() -> None:
    loaded = _modules_after("--help")
    assert not loaded & {mod for _, mod, _, _ in EXTERNAL.values()}


@pytest.mark.parametrize("name", sorted(EXTERNAL))
def test_external_help_matches_module(name: str) -> None:
    """The help ``capacity --help`` shows for a lazily imported subcommand is the one its module registers."""
    help_text, module, adder, runner = EXTERNAL[name]
    sub = argparse.ArgumentParser().add_subparsers()
    getattr(importlib.import_module(module), adder)(sub)
    assert sub._choices_actions[0].help == help_text
    assert callable(getattr(importlib.import_module(module), runner))


def test_external_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fleet", "--help"])
    assert exc.value.code == 0
    assert "--target-rps" in capsys.readouterr().out
