"""The ``serving.speculative`` section validated: method, draft length, acceptance rate, drafter size (issue 29;
the model: ``capacity.model.speculative``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capacity.errors import ScenarioError, show
from capacity.inputs.units import parse_quantity

METHODS = ("draft", "eagle", "mtp", "ngram")


def _number(spec: Mapping[str, Any], key: str, low: float, high: float, default: float | None = None) -> float:
    value = spec.get(key, default)
    if value is None:
        raise ScenarioError(f"serving.speculative.{key} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ScenarioError(f"serving.speculative.{key} must be a number in [{low:g}, {high:g}], got {show(value)}")
    return float(value)


def check_speculative(value: Any, path: str = "serving.speculative") -> dict[str, Any]:
    """The validated ``serving.speculative`` mapping (method, draft_tokens, acceptance_rate, optional draft_params,
    draft_weights [B], draft_layers); ScenarioError naming the key otherwise."""
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{path} must be a mapping (method, draft_tokens, acceptance_rate), got {show(value)}")
    allowed = {"method", "draft_tokens", "acceptance_rate", "draft_params", "draft_weights", "draft_layers"}
    unknown = set(value) - allowed
    if unknown:
        raise ScenarioError(f"{path}.{sorted(unknown)[0]} is not a known key; allowed: {', '.join(sorted(allowed))}")
    method = value.get("method")
    if method not in METHODS:
        raise ScenarioError(f"{path}.method must be one of {', '.join(METHODS)}, got {show(method)}")
    out = {"method": method, "draft_tokens": int(_number(value, "draft_tokens", 1, 64)),
           "acceptance_rate": _number(value, "acceptance_rate", 0.0, 1.0),
           "draft_layers": _number(value, "draft_layers", 0, 1000, 1.0)}
    if value.get("draft_tokens") != out["draft_tokens"]:
        raise ScenarioError(f"{path}.draft_tokens must be a whole number, got {show(value.get('draft_tokens'))}")
    if method == "draft":
        out["draft_params"] = _number(value, "draft_params", 1.0, 1e13)
    out["draft_weights"] = (parse_quantity(value["draft_weights"], "bytes", f"{path}.draft_weights")
                            if value.get("draft_weights") is not None else
                            2.0 * out["draft_params"] if method == "draft" else 0.0)
    return out



__all__ = ["METHODS", "check_speculative"]
