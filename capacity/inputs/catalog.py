"""GPU and model catalogs: sourced YAML entries looked up by name or alias, case-insensitively."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from capacity.errors import ScenarioError
from capacity.fileio.safe_load import load_shipped

#: Where the catalogs live: package data (capacity/catalogs/, shipped in the wheel; the checkout's root-level
#: gpu_catalog.yaml and model_catalog.yaml link there), or $CAPACITY_CATALOG_DIR.
CATALOG_DIR = Path(os.environ.get("CAPACITY_CATALOG_DIR", Path(__file__).resolve().parent.parent / "catalogs"))


@functools.cache
def _document(filename: str) -> dict[str, Any]:
    """The parsed catalog file, read once per process with libyaml's safe loader where PyYAML has it (the
    pure-Python ``yaml.safe_load`` takes ~10x longer: ~60 ms for model_catalog.yaml); both load the same values."""
    path = CATALOG_DIR / filename
    try:
        return load_shipped(path) or {}
    except OSError as exc:
        raise ScenarioError(f"cannot read catalog {path}: {exc.strerror}") from None


@functools.cache
def _load(filename: str, section: str) -> dict[str, dict[str, Any]]:
    entries = _document(filename).get(section) or {}
    return {str(key).lower(): dict(value or {}, key=str(key).lower()) for key, value in entries.items()}


@functools.cache
def _aliases(filename: str, section: str) -> dict[str, str]:
    table = {}
    for key, entry in _load(filename, section).items():
        table[key] = key
        names = [*(entry.get("aliases") or []), *([entry["hf_id"]] if entry.get("hf_id") else [])]
        for alias in names:
            table.setdefault(str(alias).lower(), key)
    return table


def gpus() -> dict[str, dict[str, Any]]:
    """Every GPU entry of ``gpu_catalog.yaml``, by key."""
    return _load("gpu_catalog.yaml", "gpus")


#: Catalog ``segment`` values shown to a customer by default; the rest (``consumer`` cards, ``export`` parts) only on
#: request. An entry without a segment is a data-center part.
CUSTOMER_SEGMENTS = ("datacenter",)


def customer_gpus() -> list[str]:
    """Catalog GPU keys a customer is offered by default: data-center parts (no consumer cards, no export-only
    parts; each entry's ``segment`` and ``segment_source`` say why)."""
    return [key for key, entry in gpus().items() if entry.get("segment", "datacenter") in CUSTOMER_SEGMENTS]


def models() -> dict[str, dict[str, Any]]:
    """Every model entry of ``model_catalog.yaml``, by key."""
    return _load("model_catalog.yaml", "models")


@functools.cache
def gpu_defaults() -> dict[str, Any]:
    """The catalog's default efficiency factors and their source."""
    return dict(_document("gpu_catalog.yaml").get("defaults") or {})


def _lookup(kind: str, name: object, filename: str, section: str) -> dict[str, Any]:
    aliases = _aliases(filename, section)
    key = aliases.get(str(name).strip().lower())
    if key is None:
        import difflib  # only for the error's suggestions

        close = difflib.get_close_matches(str(name).lower(), list(aliases), n=3, cutoff=0.5)
        known = ", ".join(sorted(_load(filename, section)))
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {known}"
        raise ScenarioError(f"{kind}.name {name!r} is not in {filename}{hint}")
    return dict(_load(filename, section)[key])


def gpu(name: object) -> dict[str, Any]:
    """The catalog entry of GPU ``name`` (key or alias, any case); ScenarioError with close matches if unknown."""
    return _lookup("gpu", name, "gpu_catalog.yaml", "gpus")


def model(name: object) -> dict[str, Any]:
    """The catalog entry of model ``name`` (key, alias or Hugging Face id, any case)."""
    return _lookup("model", name, "model_catalog.yaml", "models")
