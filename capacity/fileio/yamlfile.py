"""YAML files: bounded safe loading (``safe_load``), size-limited, one-line errors (scenario files, the profile
catalog)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capacity.fileio import safe_load
from capacity.fileio.files import read_text_limited

#: Largest scenario (or profile catalog) file read [bytes]; a scenario is a few hundred bytes.
MAX_SCENARIO_BYTES = 1_000_000


def read_yaml(path: str | Path, limit: int = MAX_SCENARIO_BYTES) -> Any:
    """Safe-load a regular YAML file no larger than ``limit`` bytes, bounded as ``safe_load.parse_yaml`` says
    (alias budget, depth, duplicate keys, integer length, surrogates); ScenarioError with the reason otherwise."""
    return parse_yaml(read_text_limited(path, limit, "scenario file"), str(path))


def parse_yaml(text_: str, origin: str = "scenario") -> Any:
    """Safe-load YAML text through ``safe_load.parse_yaml``: every problem is a one-line ScenarioError."""
    return safe_load.parse_yaml(text_, origin)


__all__ = ["MAX_SCENARIO_BYTES", "parse_yaml", "read_yaml"]
