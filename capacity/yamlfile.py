"""YAML files: safe loading, size-limited, one-line errors (scenario files, the profile catalog)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ScenarioError
from .files import read_text_limited

#: Largest scenario (or profile catalog) file read [bytes]; a scenario is a few hundred bytes.
MAX_SCENARIO_BYTES = 1_000_000


def read_yaml(path: str | Path, limit: int = MAX_SCENARIO_BYTES) -> Any:
    """Safe-load a YAML file no larger than ``limit`` bytes; ScenarioError with the reason otherwise."""
    return parse_yaml(read_text_limited(path, limit, "scenario file"), str(path))


def parse_yaml(text_: str, origin: str = "scenario") -> Any:
    """Safe-load YAML text; a syntax error becomes a one-line ScenarioError with the line number."""
    try:
        return yaml.safe_load(text_)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{origin} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{origin} is nested too deeply to be a scenario") from None


__all__ = ["MAX_SCENARIO_BYTES", "parse_yaml", "read_yaml"]
