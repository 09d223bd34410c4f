"""The ``serving.speculative`` section validated: method, draft length, acceptance rate or length, drafter size
(issue 29; the model: ``capacity.model.speculative``, the step: ``capacity.model.analysis.StepModel``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capacity.errors import ScenarioError, show
from capacity.formulas.speculative import acceptance_rate_for_length, expected_tokens_per_step
from capacity.inputs.units import parse_quantity

METHODS = ("draft", "eagle", "mtp", "ngram")

#: Keys of ``serving.speculative``.
KEYS = ("method", "draft_tokens", "acceptance_rate", "acceptance_length", "verify_tokens", "draft_params",
        "draft_weights", "draft_layers", "draft_overhead", "verify_overhead")


def _number(spec: Mapping[str, Any], key: str, low: float, high: float, default: float | None = None) -> float:
    value = spec.get(key, default)
    if value is None:
        raise ScenarioError(f"serving.speculative.{key} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ScenarioError(f"serving.speculative.{key} must be a number in [{low:g}, {high:g}], got {show(value)}")
    return float(value)


def check_speculative(value: Any, path: str = "serving.speculative") -> dict[str, Any]:
    """The validated ``serving.speculative`` mapping; ScenarioError naming the key otherwise.

    ``method`` (draft, eagle, mtp, ngram), ``draft_tokens`` γ (drafted per step, the chain's depth), and one of
    ``acceptance_rate`` α (each drafted token accepted with probability α) or ``acceptance_length`` E (tokens one
    verification pass yields on average, the bonus token included, as vLLM and SGLang report it: 1 to γ + 1);
    optional ``verify_tokens`` (tokens per sequence the target verifies in one pass: γ + 1 for a chain, more for
    a tree), ``draft_params`` (a ``draft`` model's parameters, required there), ``draft_weights`` [B] (default
    2 B per drafter parameter; eagle/mtp: 0 unless given), ``draft_layers`` (eagle/mtp decoder layers, 1),
    ``draft_overhead`` (fixed time of one drafter pass: kernel launches, sampling; default the engine's step
    overhead for a draft model, 0 otherwise) and ``verify_overhead`` (fixed time an iteration adds: rejection
    sampling and bookkeeping; default 0).
    The result carries both ``acceptance_rate`` and ``expected_tokens`` (E), whichever was given.
    """
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{path} must be a mapping (method, draft_tokens, acceptance_rate), got {show(value)}")
    unknown = set(value) - set(KEYS)
    if unknown:
        raise ScenarioError(f"{path}.{sorted(unknown)[0]} is not a known key; allowed: {', '.join(sorted(KEYS))}")
    method = value.get("method")
    if method not in METHODS:
        raise ScenarioError(f"{path}.method must be one of {', '.join(METHODS)}, got {show(method)}")
    gamma = int(_number(value, "draft_tokens", 1, 64))
    if value.get("draft_tokens") != gamma:
        raise ScenarioError(f"{path}.draft_tokens must be a whole number, got {show(value.get('draft_tokens'))}")
    given = [k for k in ("acceptance_rate", "acceptance_length") if value.get(k) is not None]
    if len(given) != 1:
        raise ScenarioError(f"{path} needs one of acceptance_rate (0 to 1, per drafted token) or acceptance_length "
                            f"(tokens per verification pass, 1 to draft_tokens + 1), got "
                            f"{'both' if given else 'neither'}")
    if given[0] == "acceptance_rate":
        alpha = _number(value, "acceptance_rate", 0.0, 1.0)
        expected = float(expected_tokens_per_step(alpha, gamma))
    else:
        expected = _number(value, "acceptance_length", 1.0, gamma + 1.0)
        alpha = float(acceptance_rate_for_length(expected, gamma))
    out = {"method": method, "draft_tokens": gamma, "acceptance_rate": alpha, "expected_tokens": expected,
           "acceptance_given": given[0],
           "verify_tokens": _number(value, "verify_tokens", gamma + 1, 4096, gamma + 1.0),
           "draft_layers": _number(value, "draft_layers", 0, 1000, 1.0)}
    if method == "draft":
        out["draft_params"] = _number(value, "draft_params", 1.0, 1e13)
    for key in ("draft_overhead", "verify_overhead"):  # fixed times: per drafter pass, per iteration
        if value.get(key) is not None:
            out[key] = parse_quantity(value[key], "time", f"{path}.{key}")
    out["draft_weights"] = (parse_quantity(value["draft_weights"], "bytes", f"{path}.draft_weights")
                            if value.get("draft_weights") is not None else
                            2.0 * out["draft_params"] if method == "draft" else 0.0)
    return out


__all__ = ["KEYS", "METHODS", "check_speculative"]
