"""Calibrated profiles: fitted efficiency factors saved beside the GPU in a user catalog.

A profile is what ``capacity calibrate --save NAME`` learned about one GPU (with one engine, model and
weight dtype): the factors the points identified, how well they fit, and where the points came from.
Profiles live in one YAML file, by default ``$CAPACITY_PROFILES``, else
``$XDG_CONFIG_HOME/capacity/profiles.yaml``, else ``~/.config/capacity/profiles.yaml``:

    profiles:
      my-h100-vllm:
        gpu: h100-sxm                  # catalog key the factors scale (peak figures)
        bandwidth_efficiency: 0.71     # only the factors the points identified
        flops_efficiency: 0.48
        step_overhead: 0.0021          # [s]
        request_latency: 0.045         # [s], where the points held TTFTs behind a load (calibrate fits it then)
        fit: {points: 12, mape_percent: 3.1, source: bench.csv, model: llama-3.1-8b, weight_dtype: fp8, ...}

A scenario uses one with ``gpu: {name: h100-sxm, profile: my-h100-vllm}`` once ``resolve_profile`` has run
(or ``apply_profile(mapping, profile)`` directly): the profile fills ``gpu.bandwidth_efficiency``,
``gpu.flops_efficiency``, ``serving.step_overhead`` and ``serving.request_latency`` where the scenario does not set
them itself.
"""

from __future__ import annotations

import copy
import datetime as _dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from capacity.errors import ScenarioError
from capacity.fileio.files import write_atomic
from capacity.fileio.yamlfile import read_yaml
from capacity.inputs import catalog

#: Profile keys that set scenario values: profile key -> (scenario section, key).
APPLIED = {"bandwidth_efficiency": ("gpu", "bandwidth_efficiency"), "flops_efficiency": ("gpu", "flops_efficiency"),
           "step_overhead": ("serving", "step_overhead"), "request_latency": ("serving", "request_latency")}


#: ``gpu.efficiency_source`` that apply_profile writes for a profile fitted under an engine's efficiency curves:
#: its efficiencies are the curves' plateaus, so the engine profile keeps the curves (a saved fit reproduces itself).
PROFILE_PLATEAUS = "calibrated profile: plateaus under the engine's efficiency curves"


def default_path() -> Path:
    """Where profiles are kept unless a path is given (see the module docstring)."""
    if os.environ.get("CAPACITY_PROFILES"):
        return Path(os.environ["CAPACITY_PROFILES"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "capacity" / "profiles.yaml"


def load_profiles(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Every profile in the catalog file, by name ({} when the file does not exist yet)."""
    path = Path(path) if path else default_path()
    if not path.exists():
        return {}
    data = read_yaml(path)
    profiles = (data or {}).get("profiles") if isinstance(data, Mapping) else None
    if profiles is None:
        return {}
    if not isinstance(profiles, Mapping):
        raise ScenarioError(f"{path}: 'profiles' must be a mapping of names to profiles")
    return {str(k): dict(v or {}) for k, v in profiles.items()}


def get_profile(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """One profile by name; ScenarioError listing the known names if absent."""
    profiles = load_profiles(path)
    if name not in profiles:
        known = ", ".join(sorted(profiles)) or "none yet (run capacity calibrate --save NAME)"
        raise ScenarioError(f"gpu.profile {name!r} is not in {path or default_path()}; known: {known}")
    return profiles[name]


def save_profile(name: str, profile: Mapping[str, Any], path: str | Path | None = None) -> Path:
    """Add or replace profile ``name`` in the catalog file (created with its folder); returns the file's path."""
    if not name or not str(name).strip():
        raise ScenarioError("a profile needs a name")
    path = Path(path) if path else default_path()
    profiles = load_profiles(path)
    profiles[str(name)] = dict(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    text = "# Calibrated profiles written by `capacity calibrate --save`.\n" + yaml.safe_dump(
        {"profiles": profiles}, sort_keys=False)
    write_atomic(path, text.encode("utf-8"))
    return path


def profile_from_fit(scenario: Any, fit: Any, source: str = "") -> dict[str, Any]:
    """A profile mapping from a calibration ``Fit`` on ``scenario``: identified factors only, plus provenance."""
    values = {"bandwidth_efficiency": fit.factors.bandwidth_efficiency,
              "flops_efficiency": fit.factors.flops_efficiency, "step_overhead": fit.factors.step_overhead_s}
    if fit.factors.request_latency_s is not None and "request_latency" in fit.fitted:
        values["request_latency"] = fit.factors.request_latency_s
    raw_gpu = scenario.raw.get("gpu") if scenario.raw else None
    gpu_name = raw_gpu if isinstance(raw_gpu, str) else (raw_gpu or {}).get("name", scenario.gpu.name)
    profile: dict[str, Any] = {"gpu": _gpu_key(gpu_name)}
    # six significant digits: an overhead of a few ms rounded to 6 decimals (1 us) moved the fit's predictions 2e-5
    profile.update({k: float(f"{float(v):.6g}") for k, v in values.items() if fit.identified(k)})
    profile["not_identified"] = {k: fit.held[k] for k in values if k in fit.held}
    if scenario.gpu.bandwidth_half_bytes or scenario.gpu.flops_half_tokens:
        profile["curves"] = True  # fitted under the engine profile's efficiency curves: the factors are plateaus
    profile["fit"] = {
        "points": int(len(fit.measured)), "mape_percent": round(fit.mape, 3),
        "rmse_percent": round(fit.rmse_percent, 3),
        "source": source, "model": scenario.model.name, "weight_dtype": scenario.model.weight_dtype,
        "kv_dtype": scenario.model.kv_dtype, "tensor_parallel": scenario.gpu.count,
        "peak_bandwidth": scenario.gpu.bandwidth, "peak_flops": scenario.gpu.flops,
        "date": _dt.date.today().isoformat(),
    }
    return profile


def _gpu_key(name: Any) -> str:
    try:
        return str(catalog.gpu(name)["key"])
    except ScenarioError:
        return str(name)


def apply_profile(scenario_mapping: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the scenario mapping with the profile's factors filled in where the scenario leaves them unset.

    The profile's factors scale catalog peak figures, so the scenario's GPU must be the profile's GPU and
    must not give its own ``bandwidth`` or ``flops`` (those are taken as effective figures).
    """
    data = copy.deepcopy(dict(scenario_mapping))
    gpu = data.get("gpu")
    gpu = {"name": gpu} if isinstance(gpu, str) else dict(gpu or {})
    gpu.pop("profile", None)
    want = profile.get("gpu")
    have = _gpu_key(gpu.get("name")) if gpu.get("name") is not None else None
    if want and have != _gpu_key(want):
        raise ScenarioError(f"the profile was calibrated on GPU {want!r}, but the scenario's gpu is {have!r}")
    explicit = [k for k in ("bandwidth", "flops") if k in gpu]
    if explicit:
        raise ScenarioError(f"gpu.{' and gpu.'.join(explicit)} given explicitly: a profile scales the catalog's "
                            f"peak figures; remove them or the profile")
    if profile.get("curves") and not any(k in gpu for k in ("bandwidth_efficiency", "flops_efficiency")):
        gpu["efficiency_source"] = f"{PROFILE_PLATEAUS} ({profile.get('fit', {}).get('source') or 'calibrate'})"
    data["gpu"] = gpu
    for key, (section, field) in APPLIED.items():
        if key in profile:
            part = dict(data.get(section) or {})
            part.setdefault(field, profile[key])
            data[section] = part
    return data


def resolve_profile(scenario_mapping: Mapping[str, Any], path: str | Path | None = None) -> dict[str, Any]:
    """Apply the profile a scenario names in ``gpu.profile`` (unchanged copy when it names none)."""
    gpu = scenario_mapping.get("gpu")
    if not isinstance(gpu, Mapping) or not gpu.get("profile"):
        return copy.deepcopy(dict(scenario_mapping))
    return apply_profile(scenario_mapping, get_profile(str(gpu["profile"]), path))
