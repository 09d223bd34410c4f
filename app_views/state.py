"""The sidebar's state: flat widget values in display units <-> a scenario mapping.

Widget keys are flat strings (``"memory_gb"``, ``"prompt_tokens"``) so they fit in the
URL query string. Quantities carry their unit in the scenario strings this module
builds ("80 GiB", "3 ms"); no formula lives here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capacity import catalog
from capacity.hf_config import model_from_text
from capacity.scenario import parse_yaml
from capacity.units import parse_quantity

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
CUSTOM = "custom"
DTYPES = ["bf16", "fp16", "fp8", "int8", "int4"]
KV_DTYPES = ["bf16", "fp16", "fp8", "int4"]
BLOCK_SIZES = [1, 8, 16, 32, 64, 128]

#: Every widget key with its type, for reading the URL query string back.
FIELDS: dict[str, type] = {
    "units": str, "model": str, "layers": int, "kv_heads": int, "head_dim": int, "params_b": float,
    "weights_mem": float, "weight_dtype": str, "kv_dtype": str, "gpu": str, "memory_mem": float,
    "bandwidth_tbs": float, "tflops": float, "bandwidth_efficiency": float, "flops_efficiency": float,
    "gpu_count": int, "pipeline_parallel": int, "replicas": int, "reserve_mem": float, "price_per_hour": float,
    "memory_utilization": float, "block_size": int,
    "max_model_len": int, "step_overhead_ms": float, "max_num_seqs": int, "prompt_tokens": int,
    "output_tokens": int, "shared_prefix_tokens": int, "arrival_rate": float, "tpot_ms": float, "ttft_ms": float,
}


def presets() -> dict[str, Path]:
    """Shipped scenario files by their display name, essays first."""
    found = {}
    for path in sorted(SCENARIO_DIR.glob("*.yaml"), key=lambda p: (not p.name.startswith("essay"), p.name)):
        try:
            name = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("name", path.stem)
        except yaml.YAMLError:
            continue
        found[str(name)] = path
    return found


def _bytes_in(value: Any, unit: str) -> float:
    return parse_quantity(value, "bytes") / (2**30 if unit == "GiB" else 1e9)


def state_from_scenario(data: dict[str, Any]) -> dict[str, Any]:
    """Widget values for a scenario mapping (catalog names kept, numbers in display units)."""
    units = str(data.get("units", "GB"))
    model = data.get("model") or {}
    model = {"name": model} if isinstance(model, str) else dict(model)
    gpu = data.get("gpu") or {}
    gpu = {"name": gpu} if isinstance(gpu, str) else dict(gpu)
    serving, workload, slo = data.get("serving") or {}, data.get("workload") or {}, data.get("slo") or {}
    state: dict[str, Any] = {"units": units}

    model_name = str(model.get("name", CUSTOM)).lower()
    in_catalog = model_name in catalog.models() and "layers" not in model
    entry = catalog.models()[model_name] if in_catalog else {}
    state["model"] = model_name if in_catalog else CUSTOM
    for key in ("layers", "kv_heads", "head_dim"):
        state[key] = int(model.get(key, entry.get(key, 32)))
    state["params_b"] = float(model.get("params", entry.get("params", 8e9))) / 1e9
    state["weights_mem"] = _bytes_in(model["weights"], units) if "weights" in model else 0.0
    state["weight_dtype"] = str(model.get("weight_dtype", "bf16"))
    state["kv_dtype"] = str(model.get("kv_dtype", "bf16"))

    gpu_name = str(gpu.get("name", CUSTOM)).lower()
    in_catalog = gpu_name in catalog.gpus() and "memory" not in gpu
    g_entry = catalog.gpus()[gpu_name] if in_catalog else {}
    defaults = catalog.gpu_defaults()
    state["gpu"] = gpu_name if in_catalog else CUSTOM
    state["memory_mem"] = _bytes_in(gpu.get("memory", g_entry.get("memory", "80 GB")), units)
    bandwidth = gpu.get("bandwidth", g_entry.get("bandwidth", "2 TB/s"))
    state["bandwidth_tbs"] = parse_quantity(bandwidth, "bandwidth") / 1e12
    state["tflops"] = parse_quantity(gpu.get("flops", g_entry.get("flops_bf16", "150 TFLOP/s")), "flops") / 1e12
    for eff in ("bandwidth_efficiency", "flops_efficiency"):
        state[eff] = float(gpu.get(eff, defaults.get(eff, 1.0) if in_catalog else 1.0))
    state["gpu_count"] = int(gpu.get("count", 1))
    state["pipeline_parallel"] = int(gpu.get("pipeline_parallel", 1))
    state["replicas"] = int(gpu.get("replicas", 1))
    reserves = [serving[k] for k in ("activation_memory", "cuda_graph_memory", "non_torch_memory") if serving.get(k)]
    state["reserve_mem"] = sum(_bytes_in(v, units) for v in reserves)
    state["price_per_hour"] = float(gpu.get("price_per_hour", g_entry.get("price_per_hour", 0.0)) or 0.0)

    state["memory_utilization"] = float(serving.get("memory_utilization", 0.90))
    state["block_size"] = int(serving.get("block_size", 16))
    state["max_model_len"] = int(serving.get("max_model_len", 32768))
    state["step_overhead_ms"] = parse_quantity(serving.get("step_overhead", 0), "time") * 1e3
    state["max_num_seqs"] = int(serving.get("max_num_seqs", 0) or 0)
    state["prompt_tokens"] = int(workload.get("prompt_tokens", 1000))
    state["output_tokens"] = int(workload.get("output_tokens", 300))
    state["shared_prefix_tokens"] = int(workload.get("shared_prefix_tokens", 0))
    state["arrival_rate"] = float(workload.get("arrival_rate", 0.0) or 0.0)
    state["tpot_ms"] = parse_quantity(slo["tpot"], "time") * 1e3 if slo.get("tpot") else 0.0
    state["ttft_ms"] = parse_quantity(slo["ttft"], "time") * 1e3 if slo.get("ttft") else 0.0
    return state


def scenario_from_state(state: dict[str, Any], name: str = "app scenario") -> dict[str, Any]:
    """The scenario mapping the widgets describe; zero means "not set" for the optional numbers.

    A custom model with pasted config.json text is read from it (ScenarioError if the text is not a config).
    """
    units = state["units"]
    if state["model"] == CUSTOM and state.get("config_json", "").strip():
        model = model_from_text(state["config_json"], "imported config.json")
    elif state["model"] == CUSTOM:
        model = {"name": "custom model", "layers": state["layers"], "kv_heads": state["kv_heads"],
                 "head_dim": state["head_dim"], "params": state["params_b"] * 1e9}
    else:
        model = {"name": state["model"]}
    if state["weights_mem"] > 0:
        model["weights"] = f"{state['weights_mem']} {units}"
    model.update(weight_dtype=state["weight_dtype"], kv_dtype=state["kv_dtype"])
    if state["gpu"] == CUSTOM:
        gpu: dict[str, Any] = {"name": "custom GPU", "memory": f"{state['memory_mem']} {units}",
                               "bandwidth": f"{state['bandwidth_tbs']} TB/s", "flops": f"{state['tflops']} TFLOP/s"}
    else:
        gpu = {"name": state["gpu"]}
    gpu.update(count=state["gpu_count"], bandwidth_efficiency=state["bandwidth_efficiency"],
               flops_efficiency=state["flops_efficiency"])
    if state.get("pipeline_parallel", 1) > 1:
        gpu["pipeline_parallel"] = state["pipeline_parallel"]
    if state.get("replicas", 1) > 1:
        gpu["replicas"] = state["replicas"]
    if state["price_per_hour"] > 0:
        gpu["price_per_hour"] = state["price_per_hour"]
    serving: dict[str, Any] = {"memory_utilization": state["memory_utilization"], "block_size": state["block_size"],
                               "max_model_len": state["max_model_len"],
                               "step_overhead": f"{state['step_overhead_ms']} ms"}
    if state["max_num_seqs"] > 0:
        serving["max_num_seqs"] = state["max_num_seqs"]
    if state.get("reserve_mem", 0) > 0:
        serving["activation_memory"] = f"{state['reserve_mem']} {units}"
    workload: dict[str, Any] = {"prompt_tokens": state["prompt_tokens"], "output_tokens": state["output_tokens"],
                                "shared_prefix_tokens": state["shared_prefix_tokens"]}
    if state["arrival_rate"] > 0:
        workload["arrival_rate"] = state["arrival_rate"]
    slo = {}
    if state["tpot_ms"] > 0:
        slo["tpot"] = f"{state['tpot_ms']} ms"
    if state["ttft_ms"] > 0:
        slo["ttft"] = f"{state['ttft_ms']} ms"
    data = {"name": name, "units": units, "model": model, "gpu": gpu, "serving": serving, "workload": workload}
    if slo:
        data["slo"] = slo
    return data


def state_from_query(params: dict[str, str]) -> dict[str, Any]:
    """Widget values from URL query parameters; unknown keys and unreadable values are ignored."""
    state = {}
    for key, kind in FIELDS.items():
        if key in params:
            try:
                state[key] = kind(params[key])
            except ValueError:
                continue
    return state


def load_uploaded(text: str) -> dict[str, Any]:
    """A scenario mapping from uploaded YAML text (safe loading; ScenarioError on bad YAML)."""
    data = parse_yaml(text, "uploaded scenario")
    if not isinstance(data, dict):
        from capacity.errors import ScenarioError

        raise ScenarioError("the uploaded file is not a scenario mapping (model, gpu, serving, workload, slo)")
    return data
