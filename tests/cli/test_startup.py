"""Start-up: each subcommand imports only what it needs (issue 17). Which modules load is checked, not time."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from capacity.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import contextlib, io, sys
from capacity.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
modules = sorted(sys.modules)
import json  # after the list: the command itself need not import json
print(json.dumps({"status": status, "modules": modules}))
"""


def _modules_after(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, out.stderr
    return set(result["modules"])


def test_version_imports_no_numerics() -> None:
    loaded = _modules_after("--version")
    assert not loaded & {"numpy", "pandas", "plotly", "pyarrow", "yaml", "capacity.model.analysis",
                         "capacity.planning.fleet"}


def test_evaluate_imports_no_pandas_or_fleet() -> None:
    loaded = _modules_after("evaluate", "scenarios/essay-001-sale-day.yaml")
    assert "capacity.model.analysis" in loaded  # it did evaluate
    assert not loaded & {"pandas", "plotly", "pyarrow", "capacity.planning.fleet", "capacity.planning.calibration",
                         "capacity.simulator"}


#: Imported by no part of ``capacity evaluate`` (table) that runs on valid input: the other formats and
#: subcommands, and the standard modules needed only for JSON input, error suggestions or writing files.
NOT_FOR_EVALUATE = {"capacity.render.report", "capacity.render.xlsx", "capacity.planning.sweep", "capacity.model.frame",
                    "capacity.planning.search",
                    "capacity.cli.fleet_command", "capacity.cli.report_command", "capacity.cli.curve_command",
                    "capacity.cli.search_command", "capacity.cli.sweep_command", "capacity.cli.calibrate_command",
                    "capacity.cli.simulate_command",
                    "capacity.render.customer_report", "json", "difflib", "signal"}


@pytest.mark.parametrize("scenario", ["scenarios/essay-001-sale-day.yaml", "scenarios/chat-llama-3.1-8b-h100.yaml"])
def test_evaluate_imports_only_what_it_needs(scenario: str) -> None:
    """The table path of ``capacity evaluate`` (inline model, and catalog model and GPU) leaves the others alone."""
    loaded = _modules_after("evaluate", scenario)
    assert {"capacity.model.analysis", "capacity.render.formatting"} <= loaded  # it did evaluate and print the table
    assert not loaded & NOT_FOR_EVALUATE


def test_catalog_read_once_with_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each catalog file is parsed once per process, by libyaml's loader (the pure-Python one is ~10x slower),
    to the same values the pure-Python safe loader gives."""
    import yaml

    from capacity.fileio import safe_load
    from capacity.inputs import catalog

    if not hasattr(yaml, "CSafeLoader"):  # PyYAML's wheels carry libyaml; a source build may not
        pytest.skip("PyYAML without libyaml: the catalogs are read with the pure-Python loader")
    parsed: list[str] = []

    class Counting(yaml.CSafeLoader):
        def __init__(self, stream: object) -> None:
            parsed.append(getattr(stream, "name", "?"))
            super().__init__(stream)

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the pure-Python YAML loader was used for a catalog")

    caches = (catalog._document, catalog._load, catalog._aliases, catalog.gpu_defaults)
    for cached in caches:
        cached.cache_clear()
    assert safe_load.SAFE_LOADER is yaml.CSafeLoader  # the loader the package's shipped files are read with
    monkeypatch.setattr(safe_load, "SAFE_LOADER", Counting)
    monkeypatch.setattr(yaml, "SafeLoader", type("Refused", (), {"__init__": refuse}))
    monkeypatch.setattr(yaml, "safe_load", refuse)
    try:
        gpu, model, defaults = catalog.gpu("h100-sxm"), catalog.model("llama-3.1-8b"), catalog.gpu_defaults()
        catalog.gpus(), catalog.models(), catalog.gpu("H100-SXM")
        assert sorted(Path(name).name for name in parsed) == ["gpu_catalog.yaml", "model_catalog.yaml"]
        monkeypatch.undo()
        for name, section, entry in (("gpu_catalog.yaml", "gpus", gpu), ("model_catalog.yaml", "models", model)):
            with open(catalog.CATALOG_DIR / name, encoding="utf-8") as fh:
                pure = yaml.safe_load(fh)
            assert {k: v for k, v in entry.items() if k != "key"} == pure[section][entry["key"]]
            if section == "gpus":
                assert defaults == pure["defaults"]
    finally:
        for cached in caches:
            cached.cache_clear()


BLAS_PROBE = """
import os, sys
from capacity.cli import main
status = main(sys.argv[1:])
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1  # Linux: ours + BLAS's
print(os.environ.get("OPENBLAS_NUM_THREADS"), "numpy" in sys.modules, status, threads)
"""


@pytest.mark.parametrize(("user", "expected"), [({}, "1"), ({"OPENBLAS_NUM_THREADS": "3"}, "3"),
                                                ({"OMP_NUM_THREADS": "4"}, "None")])
def test_cli_starts_openblas_with_one_thread_unless_told(user: dict[str, str], expected: str) -> None:
    """The CLI loads OpenBLAS without its thread pool (no command's arithmetic uses BLAS threads; starting them
    costs ~40-60 ms of CPU in ``import numpy``) unless the user chose a thread count."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")} | user
    out = subprocess.run([sys.executable, "-c", BLAS_PROBE, "evaluate", "scenarios/essay-001-sale-day.yaml"],
                         cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    blas, numpy_loaded, status, threads = out.stdout.strip().splitlines()[-1].split()
    assert (blas, numpy_loaded, status) == (expected, "True", "0")
    if not user:
        assert threads == "1"  # numpy loaded and no BLAS thread started


def test_help_lists_every_command_without_importing_them() -> None:
    loaded = _modules_after("--help")
    assert not loaded & {mod for _, mod, _, _ in COMMANDS.values()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_help_matches_module(name: str) -> None:
    """The help ``capacity --help`` shows for a lazily imported subcommand is the one its module registers."""
    help_text, module, adder, runner = COMMANDS[name]
    sub = argparse.ArgumentParser().add_subparsers()
    getattr(importlib.import_module(module), adder)(sub)
    assert sub._choices_actions[0].help == help_text
    assert callable(getattr(importlib.import_module(module), runner))


def test_external_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fleet", "--help"])
    assert exc.value.code == 0
    assert "--target-rps" in capsys.readouterr().out


SEARCH_PROBE = """
import sys
from capacity.model.scenario import read_yaml
from capacity.planning.search import search, settings_grid
raw = read_yaml("tests/data/search-llama-8b.yaml")
raw["simulation"]["requests"] = 200
result = search(raw, settings_grid(["h100-sxm"], [1], [64], [2048], [False]), 99.0)
print(len(result.runs), "pandas" in sys.modules, "capacity.simulator" in sys.modules)
"""


def test_search_simulations_import_no_pandas() -> None:
    """A search prunes and simulates without pandas (0.15-0.3 s of import in each worker process and, with one
    worker, in the search's own): the simulations keep per-request times in arrays, and the fleet's replica count
    and the simulator's books need no DataFrame."""
    out = subprocess.run([sys.executable, "-c", SEARCH_PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    runs, pandas_loaded, simulated = out.stdout.strip().splitlines()[-1].split()
    assert int(runs) >= 1 and simulated == "True"
    assert pandas_loaded == "False"
