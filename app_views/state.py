"""The sizing state: one scenario mapping, and the sidebar widgets that show and edit it.

The mapping (``doc``) is exactly what "Save scenario" writes and ``capacity evaluate`` reads. Widgets are
views of it in the chosen display unit: switching GB/GiB converts what is shown, never what is sized,
because every quantity in the mapping carries its own unit ("16 GiB", "3 ms").

A value derived from a catalog entry (weights from parameters x dtype, the context window, the GPU's
efficiencies and price) is absent from the mapping until the user overrides it; absent means the library
takes the catalog value, so it follows the model and GPU choice. An override is present, marked in the
sidebar, and removed by "use the catalog value". A preset's overrides are the preset's: choosing another
model or GPU drops them; overrides the user typed stay. A preset's workload values (a shared prefix) stay with
a new model: they describe the traffic, not the model. None is silent (issue 27): a hidden value the user did not
set that differs from its default is named above the views with where it came from (``sources``, ``departures``),
and the reports give that origin as its source (``with_sources``); the saved file and the link stay the mapping.

The share link carries the same mapping: one URL parameter per widget (the mapping's own text, so it
round-trips exactly), ``name``, ``view``, and ``extra`` (JSON) for keys no widget shows. No formula here.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capacity.errors import ScenarioError, show
from capacity.fileio.safe_load import load_shipped, parse_json
from capacity.inputs import catalog, engines
from capacity.inputs.engines import ALIASES, DEFAULT_ENGINE, DEFAULT_FRONT_END, ENGINES, FRONT_ENDS, IDEAL
from capacity.inputs.specs import (
    DEFAULT_MEMORY_UTILIZATION,
    SITE_GPU_KEYS,
    Gpu,
    Model,
    gpu_from_mapping,
    model_from_mapping,
)
from capacity.inputs.speculative import METHODS, check_speculative
from capacity.inputs.units import parse_quantity
from capacity.model.scenario import RESERVES, Scenario, parse_yaml
from capacity.render.glossary import in_words

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
CUSTOM = "custom"
DTYPES = ["bf16", "fp16", "fp8", "int8", "int4"]
KV_DTYPES = ["bf16", "fp16", "fp8", "int4"]
BLOCK_SIZES = [1, 8, 16, 32, 64, 128]
UNITS = ["GB", "GiB"]
UNIT_BYTES = {"GB": 1e9, "GiB": 2.0**30}
#: Where a scenario says how it speculates (``serving.speculative``, ``capacity.inputs.speculative``).
SPECULATIVE = ("serving", "speculative")
#: The speculative-decoding choices: none (the section left out) or a method the library accepts.
SPEC_METHODS = ["none", *METHODS]
#: The serving engines a sizing can name (``serving.engine``): an engine profile, or the essays' convention.
ENGINE_CHOICES = [*ENGINES, IDEAL]
#: What serves the requests in front of the engine (``serving.front_end``): it sets where the request latency applies.
FRONT_END_CHOICES = list(FRONT_ENDS)
#: Longest scenario name kept (it names downloads and the link).
NAME_MAX = 120


@dataclass(frozen=True)
class Field:
    """One sidebar widget: its key (also its URL parameter), where its value lives in the scenario mapping,
    its label in the user's words, its kind and range, and whether it follows a catalog entry."""

    key: str
    path: tuple[str, ...]
    label: str
    kind: str                    # int, float, choice, text, bytes, ms, tbs, tflops, billions, percent
    lo: float | None = None
    hi: float | None = None
    follows: str | None = None   # "model" / "gpu" / "engine": absent from the mapping = the catalog's (engine's) value
    only: str | None = None      # "model" / "gpu": a widget of a custom model / GPU only
    none_at_zero: bool = False   # 0 means "not set"
    default: Any = None          # shown when the mapping leaves it out (the library's default)

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


_FIELDS = [
    Field("units", ("units",), "byte units", "choice", default="GB"),
    Field("name", ("name",), "scenario name", "text", default="my sizing"),
    Field("model", ("model", "name"), "model", "choice"),
    Field("weight_dtype", ("model", "weight_dtype"), "weight dtype", "choice", default="fp16"),
    Field("kv_dtype", ("model", "kv_dtype"), "KV dtype", "choice", default="fp16"),
    Field("layers", ("model", "layers"), "layers", "int", 1, 10_000, only="model"),
    Field("kv_heads", ("model", "kv_heads"), "KV heads", "int", 1, 10_000, only="model"),
    Field("head_dim", ("model", "head_dim"), "head dim", "int", 1, 100_000, only="model"),
    Field("params_b", ("model", "params"), "parameters (billions)", "billions", 0.001, 100_000.0, only="model"),
    Field("weights_mem", ("model", "weights"), "weights", "bytes", 0.0, 1e6, follows="model"),
    Field("gpu", ("gpu", "name"), "GPU", "choice"),
    Field("memory_mem", ("gpu", "memory"), "GPU memory", "bytes", 0.01, 1e6, only="gpu"),
    Field("bandwidth_tbs", ("gpu", "bandwidth"), "bandwidth (TB/s, peak)", "tbs", 0.001, 1000.0, only="gpu"),
    Field("tflops", ("gpu", "flops"), "FLOP/s (TFLOP/s, peak)", "tflops", 0.01, 1e6, only="gpu"),
    Field("gpu_count", ("gpu", "count"), "tensor parallel GPUs", "int", 1, 1024, default=1),
    Field("pipeline_parallel", ("gpu", "pipeline_parallel"), "pipeline stages", "int", 1, 1024, default=1),
    Field("replicas", ("gpu", "replicas"), "replicas", "int", 1, 1_000_000, default=1),
    Field("price_per_hour", ("gpu", "price_per_hour"), "price ($ per GPU-hour)", "float", 0.0, 100_000.0,
          follows="gpu"),
    # Power (issue 29): the electricity price and the facility's PUE are the site's; board power follows the GPU.
    Field("energy_price_kwh", ("gpu", "energy_price_per_kwh"), "electricity price ($ per kWh, 0 = not set)", "float",
          0.0, 100.0, none_at_zero=True, default=0.0),
    Field("pue", ("gpu", "pue"), "PUE (facility power / GPU power)", "float", 1.0, 5.0, default=1.0),
    Field("board_power_w", ("gpu", "tdp_watts"), "board power (W per GPU, 0 = unknown)", "float", 0.0, 100_000.0,
          follows="gpu"),
    Field("bandwidth_efficiency", ("gpu", "bandwidth_efficiency"), "bandwidth efficiency", "float", 0.01, 1.0,
          follows="gpu"),
    Field("flops_efficiency", ("gpu", "flops_efficiency"), "FLOP/s efficiency", "float", 0.01, 1.0, follows="gpu"),
    # The KV pool's share of memory follows the engine: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static
    # (by tensor-parallel size), or TensorRT-LLM's free_gpu_memory_fraction of the memory the weights leave free.
    Field("memory_utilization", ("serving", "memory_utilization"), "memory utilisation", "float", 0.01, 1.0,
          follows="engine"),
    Field("kv_free_fraction", ("serving", "kv_cache_free_gpu_memory_fraction"), "KV share of free memory", "float",
          0.01, 1.0, follows="engine"),
    Field("block_size", ("serving", "block_size"), "block size (tokens)", "choice", default=16),
    Field("max_model_len", ("serving", "max_model_len"), "max model length (tokens)", "int", 1, 1e9,
          follows="model"),
    # The engine profile (``serving.engine``): absent, the library takes DEFAULT_ENGINE's and says so as an assumption.
    Field("engine", ("serving", "engine"), "serving engine", "choice", default=DEFAULT_ENGINE),
    Field("front_end", ("serving", "front_end"), "front end", "choice", default=DEFAULT_FRONT_END),
    Field("step_overhead_ms", ("serving", "step_overhead"), "overhead per step (ms)", "ms", 0.0, 1e6,
          follows="engine"),
    Field("request_latency_ms", ("serving", "request_latency"), "request latency (ms)", "ms", 0.0, 1e6,
          follows="engine"),
    Field("max_num_seqs", ("serving", "max_num_seqs"), "max running sequences (0 = no cap)", "int", 0, 1e9,
          none_at_zero=True, default=0),
    Field("reserve_mem", ("serving", "activation_memory"), "engine reserve per GPU", "bytes", 0.0, 1e6, default=0.0),
    # Speculative decoding (issue 29; ``serving.speculative``): "none" leaves the section out. The mapping holds one of
    # the acceptance rate and length; the widget of the other shows what it implies (``_acceptance``).
    Field("spec_method", (*SPECULATIVE, "method"), "speculative decoding", "choice", default="none"),
    Field("spec_draft_tokens", (*SPECULATIVE, "draft_tokens"), "drafted tokens per step", "int", 1, 64, default=3),
    Field("spec_acceptance_rate", (*SPECULATIVE, "acceptance_rate"), "acceptance rate (per drafted token, 0 to 1)",
          "float", 0.0, 1.0, default=0.7),
    Field("spec_acceptance_length", (*SPECULATIVE, "acceptance_length"),
          "acceptance length (tokens per verification)", "float", 1.0, 65.0),
    Field("spec_draft_params_b", (*SPECULATIVE, "draft_params"), "drafter parameters (billions)", "billions", 0.001,
          10_000.0, default=1.0),
    Field("prompt_tokens", ("workload", "prompt_tokens"), "prompt (tokens)", "int", 1, 1e9),
    Field("output_tokens", ("workload", "output_tokens"), "answer (tokens)", "int", 1, 1e9),
    Field("shared_prefix_tokens", ("workload", "shared_prefix_tokens"), "shared prefix (tokens)", "int", 0, 1e9,
          default=0),
    Field("arrival_rate", ("workload", "arrival_rate"), "arrival rate (requests/s, 0 = not set)", "float", 0.0,
          1e9, none_at_zero=True, default=0.0),
    Field("concurrency", ("workload", "concurrency"), "concurrent users (0 = not set)", "int", 0, 1e9,
          none_at_zero=True, default=0),
    Field("think_time_s", ("workload", "think_time"), "think time between a user's requests (s)", "float", 0.0, 1e6,
          none_at_zero=True, default=0.0),
    # Users of fixed-length requests without think time fall into step (engine profiles: fitted per model class).
    Field("clustering", ("workload", "clustering"), "users in step (share of the others)", "float", 0.0, 1.0,
          follows="engine"),
    Field("daily_users", ("workload", "daily_users"), "daily active users (0 = not set)", "float", 0.0, 1e12,
          none_at_zero=True, default=0.0),
    Field("requests_per_user_per_day", ("workload", "requests_per_user_per_day"), "requests per user per day",
          "float", 0.0, 1e9, none_at_zero=True, default=0.0),
    Field("peak_hour_pct", ("workload", "peak_hour_share"), "share of a day's requests in the peak hour (%)",
          "percent", 0.0, 100.0, none_at_zero=True, default=0.0),
    Field("tpot_ms", ("slo", "tpot"), "TPOT promise (ms, 0 = none)", "ms", 0.0, 1e7, none_at_zero=True, default=0.0),
    Field("ttft_ms", ("slo", "ttft"), "TTFT promise (ms, 0 = none)", "ms", 0.0, 1e7, none_at_zero=True, default=0.0),
    Field("headroom_pct", ("fleet", "headroom"), "headroom (% spare)", "percent", 0.0, 90.0, none_at_zero=True,
          default=0.0),
    Field("peak_factor", ("fleet", "peak_factor"), "peak factor (sale day = 10)", "float", 1.0, 1000.0, default=1.0),
]
#: Every widget by key.
FIELDS: dict[str, Field] = {f.key: f for f in _FIELDS}
#: Label of every field path, for messages in the user's words ("workload.prompt_tokens" -> "prompt (tokens)").
LABELS: dict[str, str] = {f.dotted: f.label for f in _FIELDS if f.kind != "choice" or f.key in ("model", "gpu")}
LABELS.update({"gpu.count": "tensor parallel GPUs", "model.weights": "weights", "gpu.memory": "GPU memory",
               "serving.activation_memory": "engine reserve per GPU", "model.name": "model", "gpu.name": "GPU",
               "serving.speculative": "speculative decoding", "serving.speculative.method": "speculative decoding"})
#: The speculation widgets other than the method (drawn, listed and checked only while a method is chosen).
SPEC_KEYS = tuple(f.key for f in _FIELDS if f.path[:2] == SPECULATIVE and f.key != "spec_method")


# ---------------------------------------------------------------- the mapping


def _get(doc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = doc
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _delete(doc: dict[str, Any], path: tuple[str, ...]) -> None:
    node = doc
    for part in path[:-1]:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


def catalog_key(kind: str, name: Any) -> str | None:
    """The catalog key of a model or GPU name (key, alias or Hugging Face id, any case); None if unknown."""
    try:
        return (catalog.model if kind == "model" else catalog.gpu)(name)["key"]
    except ScenarioError:
        return None


def normalise(data: Mapping[str, Any]) -> dict[str, Any]:
    """A scenario mapping in the app's shape: sections as mappings, catalog names as catalog keys. Nothing dropped."""
    doc = copy.deepcopy(dict(data))
    for kind, own in (("model", "layers"), ("gpu", "memory")):
        section = doc.get(kind)
        if isinstance(section, str):
            section = {"name": section}
        if isinstance(section, Mapping):
            section = dict(section)
            key = catalog_key(kind, section.get("name")) if "name" in section and own not in section else None
            if key:
                section["name"] = key
            doc[kind] = section
    return doc


def is_custom(doc: Mapping[str, Any], kind: str) -> bool:
    """True when the model (or GPU) is not a catalog entry but the mapping's own numbers."""
    section = doc.get(kind) or {}
    name = section.get("name") if isinstance(section, Mapping) else section
    if not isinstance(section, Mapping):
        section = {}
    own = "layers" in section or "config" in section if kind == "model" else "memory" in section
    return bool(own) or name not in (catalog.models() if kind == "model" else catalog.gpus())


def resolved(doc: Mapping[str, Any]) -> tuple[Model | None, Gpu | None]:
    """The library's Model and Gpu of the mapping (catalog values filled in); None where it cannot build one."""
    problems: list[str] = []
    model = model_from_mapping(doc.get("model"), problems) if doc.get("model") is not None else None
    dtype = model.weight_dtype if model else "fp16"
    gpu = gpu_from_mapping(doc.get("gpu"), dtype, problems) if doc.get("gpu") is not None else None
    return model, gpu


# ---------------------------------------------------------------- mapping <-> widget values


def _number(value: float) -> int | float:
    """A float as the shortest text that reads back the same (16.0 -> 16)."""
    return int(value) if float(value).is_integer() and abs(value) < 1e15 else float(value)


def _reserve_bytes(doc: Mapping[str, Any]) -> float:
    """The reserves the mapping states [B]; one the library cannot read counts 0 here (the library names it)."""
    serving = doc.get("serving")
    total = 0.0
    for key in RESERVES if isinstance(serving, Mapping) else ():
        try:
            value = parse_quantity(serving[key], "bytes") if serving.get(key) else 0.0
        except (ScenarioError, ValueError, TypeError):
            value = 0.0
        total += value if math.isfinite(value) else 0.0
    return total


def to_display(field: Field, raw: Any, units: str) -> Any:
    """A mapping value as its widget shows it (bytes in ``units``, times in ms, TB/s, TFLOP/s, billions)."""
    if field.kind == "bytes":
        return parse_quantity(raw, "bytes") / UNIT_BYTES[units]
    if field.kind == "ms":
        return parse_quantity(raw, "time") * 1e3
    if field.kind == "tbs":
        return parse_quantity(raw, "bandwidth") / 1e12
    if field.kind == "tflops":
        return parse_quantity(raw, "flops") / 1e12
    if field.kind == "billions":
        return float(raw) / 1e9
    if field.kind == "percent":
        return round(float(raw) * 100.0, 10)
    if field.kind == "int":
        return int(float(raw))
    if field.kind == "float":
        return float(raw)
    if field.key == "block_size":
        return int(raw)
    return str(raw)


def to_raw(field: Field, value: Any, units: str) -> Any:
    """A widget value as the mapping stores it: quantities as text with their unit ("16 GiB", "3 ms")."""
    if field.kind == "bytes":
        return f"{_number(value)} {units}"
    if field.kind == "ms":
        return f"{_number(value)} ms"
    if field.kind == "tbs":
        return f"{_number(value)} TB/s"
    if field.kind == "tflops":
        return f"{_number(value)} TFLOP/s"
    if field.kind == "billions":
        return _number(float(value) * 1e9)
    if field.kind == "percent":
        return _number(round(float(value) / 100.0, 12))
    if field.kind == "int" or field.key == "block_size":
        return int(value)
    if field.kind == "float":
        return _number(float(value))
    return str(value)


def _tokens(value: Any) -> int:
    """A token count as written, or 1 where it is not a whole number >= 1 (the library reports that one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        return 1
    return int(value)


def _derived(field: Field, doc: Mapping[str, Any], model: Model | None, gpu: Gpu | None, units: str) -> Any:
    """What the library takes when the mapping leaves ``field`` out (a catalog or computed value)."""
    if field.key == "model":
        return CUSTOM
    if field.key == "gpu":
        return CUSTOM
    if field.key == "reserve_mem":
        return _reserve_bytes(doc) / UNIT_BYTES[units]
    if field.key == "name":
        return str(doc.get("name") or field.default)
    if field.key in ("spec_acceptance_rate", "spec_acceptance_length"):
        return _acceptance(doc, field.key)
    if model is not None:
        value = {"weights_mem": model.weight_bytes / UNIT_BYTES[units], "layers": model.layers,
                 "kv_heads": model.kv_heads, "head_dim": model.head_dim, "params_b": model.params / 1e9,
                 "weight_dtype": model.weight_dtype, "kv_dtype": model.kv_dtype}.get(field.key)
        if value is not None:
            return value
        if field.key == "max_model_len":
            if model.max_position_embeddings:
                return model.max_position_embeddings
            w = doc.get("workload")
            w = w if isinstance(w, Mapping) else {}  # a link's extra may hold anything: the library names it
            return _tokens(w.get("prompt_tokens")) + _tokens(w.get("output_tokens"))
    if field.follows == "engine":
        return engine_default(doc, field.key, model, gpu)
    if gpu is not None:
        value = {"memory_mem": gpu.memory_bytes / UNIT_BYTES[units], "bandwidth_tbs": gpu.bandwidth / 1e12,
                 "tflops": gpu.flops / 1e12, "price_per_hour": gpu.price_per_hour or 0.0,
                 "bandwidth_efficiency": gpu.bandwidth_efficiency,
                 "flops_efficiency": gpu.flops_efficiency, "board_power_w": gpu.tdp_watts or 0.0}.get(field.key)
        if value is not None:
            return value
    return field.default if field.default is not None else (0 if field.kind == "int" else 0.0)


def memory_engine(doc: Mapping[str, Any]) -> str | None:
    """The engine whose memory rule the sizing takes (``engines.engine_choice``; its other names read as it): None
    for ``ideal`` or a name the library does not know (the library names it)."""
    serving = doc.get("serving")
    named = serving.get("engine") if isinstance(serving, Mapping) else None
    engine, _ = engines.engine_choice(ALIASES.get(named, named) if isinstance(named, str) else None)
    return engine if engine in ENGINES else None


def pool_of_free(doc: Mapping[str, Any]) -> bool:
    """Whether the engine sizes its KV pool from the memory the weights leave free (TensorRT-LLM's
    ``free_gpu_memory_fraction``) rather than as a share of all memory (vLLM, SGLang, ideal)."""
    engine = memory_engine(doc)
    return engine is not None and engines.profile(engine, None, 1, 80e9, "", 4096).pool_rule == "of_free"


def free_share_in_effect(doc: Mapping[str, Any]) -> bool:
    """Whether the KV pool is a share of the memory the weights leave free: the sizing states
    ``kv_cache_free_gpu_memory_fraction``, or its engine's rule is so (TensorRT-LLM) and it states no
    ``memory_utilization`` (which, stated, replaces that rule: ``engines.apply``)."""
    serving = doc.get("serving")
    serving = serving if isinstance(serving, Mapping) else {}
    if serving.get("kv_cache_free_gpu_memory_fraction") is not None:
        return True
    return pool_of_free(doc) and serving.get("memory_utilization") is None


def engine_default(doc: Mapping[str, Any], key: str, model: Model | None, gpu: Gpu | None) -> float:
    """What the library takes for an engine-following input the mapping leaves out, read from the scenario the
    mapping makes (``Scenario.from_dict``: the engine profile's rules, one place): the memory share, the step overhead
    and the request latency [ms], the clustering share; where the mapping makes no scenario yet, the engine's memory
    share (``engine_memory_fraction``) or 0."""
    try:
        s = _scenario_of(_key(doc))
    except (ScenarioError, ValueError, TypeError):
        s = None
    if s is None:
        return engine_memory_fraction(doc, model, gpu) if key in ("memory_utilization", "kv_free_fraction") else 0.0
    free = s.serving.kv_free_fraction
    return {"memory_utilization": free if free > 0 else s.serving.memory_utilization,
            "kv_free_fraction": free if free > 0 else engine_memory_fraction(doc, model, gpu),
            "step_overhead_ms": s.serving.step_overhead_s * 1e3,
            "request_latency_ms": s.serving.request_latency_s * 1e3,
            "clustering": s.workload.clustering}[key]


@functools.lru_cache(maxsize=256)
def _scenario_of(text: str) -> Scenario:
    return Scenario.from_dict(json.loads(text))


def engine_memory_fraction(doc: Mapping[str, Any], model: Model | None, gpu: Gpu | None) -> float:
    """The KV pool's share the engine takes when the sizing leaves it out (``engines.profile``): vLLM 0.90, SGLang
    by tensor-parallel size, TensorRT-LLM 0.90 of the free memory; ``ideal`` the essays' 0.90."""
    engine = memory_engine(doc)
    if engine is None or gpu is None:
        return DEFAULT_MEMORY_UTILIZATION
    serving = doc.get("serving")
    version = serving.get("engine_version") if isinstance(serving, Mapping) else None
    context = (model.max_position_embeddings if model is not None else None) or 4096
    p = engines.profile(engine, str(version) if version else None, int(gpu.count), gpu.memory_bytes, gpu.name,
                        int(context))
    return float(p.memory_fraction)


def _acceptance(doc: Mapping[str, Any], key: str) -> float:
    """The acceptance rate (``spec_acceptance_rate``) or length the mapping's speculation gives or implies: the one
    given, else the library's conversion of the other (``check_speculative``), else of the default rate."""
    spec = _get(doc, SPECULATIVE)
    spec = spec if isinstance(spec, Mapping) else {}
    given = {k: spec[k] for k in ("acceptance_rate", "acceptance_length") if spec.get(k) is not None}
    trial = {"method": "ngram", "draft_tokens": spec.get("draft_tokens", FIELDS["spec_draft_tokens"].default),
             **(given or {"acceptance_rate": FIELDS["spec_acceptance_rate"].default})}
    try:
        checked = check_speculative(trial)
    except ScenarioError:  # the library names what is wrong with the section; the widget shows a value it takes
        return 1.0 if key == "spec_acceptance_length" else float(FIELDS[key].default)
    return float(checked["acceptance_rate" if key == "spec_acceptance_rate" else "expected_tokens"])


def speculation(doc: Mapping[str, Any]) -> str:
    """The speculative-decoding method the mapping names ("none" without the section; a method the library does not
    know as written, which it names)."""
    if _get(doc, SPECULATIVE) is None:
        return "none"
    method = _get(doc, (*SPECULATIVE, "method"))
    return "not given" if method is None else str(method)


def relevant(doc: Mapping[str, Any], key: str) -> bool:
    """Whether ``key``'s widget means anything for this sizing: the speculation details only with a method chosen,
    the drafter's size only for a draft model, the memory share by the engine's pool rule (of all memory, or of the
    memory the weights leave free)."""
    if key == "spec_draft_params_b":
        return speculation(doc) == "draft"
    if key in ("memory_utilization", "kv_free_fraction"):
        return free_share_in_effect(doc) == (key == "kv_free_fraction")
    if key == "clustering":  # a closed loop without think time (workload.clustering applies there only)
        w = doc.get("workload")
        w = w if isinstance(w, Mapping) else {}
        return bool(w.get("concurrency")) and not w.get("think_time")
    return key not in SPEC_KEYS or speculation(doc) != "none"


def stated(doc: Mapping[str, Any], key: str) -> bool:
    """Whether ``key``'s value is the mapping's own for this sizing: a relevant input, and of the two acceptances the
    one given (the other shows what it implies, so it is neither a change nor a departure of its own)."""
    if key in ("spec_acceptance_rate", "spec_acceptance_length"):
        return relevant(doc, key) and _get(doc, FIELDS[key].path) is not None
    return relevant(doc, key)


def _key(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, default=str)


def widget_values(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Every widget's value for the mapping (derived values filled in from the catalog)."""
    return dict(_widget_values(_key(doc)))


@functools.lru_cache(maxsize=256)
def _widget_values(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    units = str(doc.get("units", "GB")) if doc.get("units") in UNITS else "GB"
    model, gpu = resolved(doc)
    values: dict[str, Any] = {}
    for field in _FIELDS:
        raw = _get(doc, field.path)
        try:
            if field.key == "model":
                values[field.key] = CUSTOM if is_custom(doc, "model") else raw
            elif field.key == "gpu":
                values[field.key] = CUSTOM if is_custom(doc, "gpu") else raw
            elif field.key == "units":
                values[field.key] = units
            elif field.key == "spec_method":
                values[field.key] = speculation(doc)
            elif field.key == "reserve_mem" or raw is None:
                values[field.key] = _derived(field, doc, model, gpu, units)
            else:
                values[field.key] = to_display(field, raw, units)
        except (ScenarioError, ValueError, TypeError):
            values[field.key] = _derived(field, doc, None, None, units)
    return values


def catalog_value(doc: Mapping[str, Any], key: str) -> Any:
    """The value ``key`` would show without the user's override (the catalog's, or parameters x dtype)."""
    return _catalog_value(_key(doc), key)


@functools.lru_cache(maxsize=1024)
def _catalog_value(text: str, key: str) -> Any:
    field = FIELDS[key]
    plain = json.loads(text)
    _delete(plain, field.path)
    model, gpu = resolved(plain)
    return _derived(field, plain, model, gpu, str(plain.get("units", "GB")))


def overridden(doc: Mapping[str, Any]) -> list[str]:
    """Keys of the catalog-derived widgets the mapping overrides (shown marked, with a way back)."""
    out = []
    for field in _FIELDS:
        if field.follows and _get(doc, field.path) is not None:
            if field.key == "max_model_len" and is_custom(doc, "model"):
                continue  # a custom model has no context window to follow
            out.append(field.key)
    return out


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return a == b


def set_value(doc: dict[str, Any], key: str, value: Any) -> None:
    """Write one widget's value into the mapping (``doc`` changes in place).

    Zero means "not set" for the optional numbers; a catalog-derived value equal to the catalog's is left out,
    so it keeps following the catalog. Model and GPU choices go through ``choose``.
    """
    field = FIELDS[key]
    units = str(doc.get("units", "GB"))
    if key == "units":
        doc["units"] = str(value)
        return
    if key == "name":
        doc["name"] = str(value)[:NAME_MAX]
        return
    if key == "reserve_mem":
        for other in RESERVES:
            _delete(doc, ("serving", other))
        if float(value) > 0:
            _set(doc, field.path, to_raw(field, value, units))
        return
    if field.path[:2] == SPECULATIVE:
        _speculate(doc, key, value)
        return
    if field.none_at_zero and float(value) == 0:
        _delete(doc, field.path)
        return
    if field.follows:
        _delete(doc, field.path)
        if _close(catalog_value(doc, key), value):
            return
    _set(doc, field.path, to_raw(field, value, units))


def _prune(doc: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove the mapping at ``path`` and every section it leaves empty above it."""
    _delete(doc, path)
    for depth in range(len(path) - 1, 0, -1):
        if _get(doc, path[:depth]) == {}:
            _delete(doc, path[:depth])


def _speculate(doc: dict[str, Any], key: str, value: Any) -> None:
    """Write a speculation widget into ``serving.speculative``. A method starts the section from the shown defaults
    (drafted tokens, acceptance rate, a draft model's size) where it has none; "none" removes it. One acceptance is
    given: typing the rate removes the length, and the other way round. A drafter's size is kept for a draft model
    only (the library reads it for no other method)."""
    if key == "spec_method":
        if value == "none":
            _prune(doc, SPECULATIVE)
            return
        spec = _get(doc, SPECULATIVE)
        spec = dict(spec) if isinstance(spec, Mapping) else {}
        spec["method"] = str(value)
        spec.setdefault("draft_tokens", FIELDS["spec_draft_tokens"].default)
        if spec.get("acceptance_rate") is None and spec.get("acceptance_length") is None:
            spec["acceptance_rate"] = FIELDS["spec_acceptance_rate"].default
        if value == "draft":
            spec.setdefault("draft_params", to_raw(FIELDS["spec_draft_params_b"], FIELDS["spec_draft_params_b"].default,
                                                   "GB"))
        else:
            spec.pop("draft_params", None)
        _set(doc, SPECULATIVE, spec)
        return
    field = FIELDS[key]
    _set(doc, field.path, to_raw(field, value, str(doc.get("units", "GB"))))
    other = {"spec_acceptance_rate": "acceptance_length", "spec_acceptance_length": "acceptance_rate"}.get(key)
    if other:
        _delete(doc, (*SPECULATIVE, other))


def choose(doc: dict[str, Any], kind: str, name: str, keep: set[str] = frozenset()) -> None:
    """Choose a catalog model or GPU (or ``custom``, starting from the numbers of the current one).

    The new entry's catalog values apply: overrides of the old one are dropped unless the user typed them
    (``keep``, widget keys). A custom model or GPU starts from the one chosen before, so nothing jumps.
    """
    model, gpu = resolved(doc)
    section = dict(doc.get(kind) or {})
    units = str(doc.get("units", "GB"))
    if name == CUSTOM:
        if is_custom(doc, kind):
            return
        if kind == "model":
            entry = catalog.model(section["name"]) if model else {}
            fresh: dict[str, Any] = {k: v for k, v in entry.items() if k in _MODEL_SHAPE}
            fresh.update(name="custom model", layers=model.layers if model else 32,
                         params=model.params if model else 8e9)
            if model and model.kv_latent_dim == 0:
                fresh.update(kv_heads=model.kv_heads, head_dim=model.head_dim)
        else:
            fresh = {"name": "custom GPU"}
            if gpu:
                fresh.update(memory=f"{_number(gpu.memory_bytes / UNIT_BYTES[units])} {units}",
                             bandwidth=f"{_number(gpu.bandwidth / 1e12)} TB/s",
                             flops=f"{_number(gpu.flops / 1e12)} TFLOP/s",
                             bandwidth_efficiency=gpu.bandwidth_efficiency, flops_efficiency=gpu.flops_efficiency)
                if gpu.price_per_hour is not None:
                    fresh["price_per_hour"] = gpu.price_per_hour
                if gpu.interconnect_bandwidth:
                    fresh["interconnect_bandwidth"] = f"{_number(gpu.interconnect_bandwidth / 1e9)} GB/s"
                if gpu.tdp_watts:
                    fresh["tdp_watts"] = _number(gpu.tdp_watts)
    else:
        fresh = {"name": name}
    # How the weights and KV are stored (a dtype or a quantisation scheme) is the serving choice, not the model's:
    # it carries over to another model, as the GPU count carries over to another GPU.
    carried = ("weight_dtype", "kv_dtype", "quantization") if kind == "model" else (
        "count", "pipeline_parallel", "replicas", "allreduce_latency", *SITE_GPU_KEYS)  # the site's power stays
    for key in carried:
        if key in section and key not in fresh:
            fresh[key] = section[key]
    for field in _FIELDS:
        if field.follows == kind and field.path[0] == kind and field.key in keep and field.path[1] in section:
            fresh[field.path[1]] = section[field.path[1]]
    doc[kind] = fresh
    if kind == "model" and "max_model_len" not in keep and name != CUSTOM:
        _delete(doc, ("serving", "max_model_len"))  # the new model's context window applies
    if "name" not in keep:  # a name the user did not type names the sizing, not the preset it started from
        doc["name"] = sizing_name(doc)


def sizing_name(doc: Mapping[str, Any]) -> str:
    """``<model> on <n> x <GPU>`` (n = GPUs per replica, tensor x pipeline): the name of a sizing nobody named."""
    def named(kind: str) -> str:
        section = doc.get(kind)
        if not isinstance(section, Mapping):
            return str(section)
        if "name" in section:
            return str(section["name"])
        try:  # unnamed numbers: "8B model", "80 GiB GPU"
            return (f"{float(section['params']) / 1e9:,.3g}B model" if kind == "model" else
                    f"{section['memory']} GPU")
        except (KeyError, TypeError, ValueError):
            return f"custom {kind if kind == 'model' else 'GPU'}"

    gpu = doc.get("gpu") if isinstance(doc.get("gpu"), Mapping) else {}
    try:
        count = int(gpu.get("count", 1)) * int(gpu.get("pipeline_parallel", 1))
    except (TypeError, ValueError):
        count = 1
    return f"{named('model')} on {count:,} x {named('gpu')}"[:NAME_MAX]


def named_by_user(doc: Mapping[str, Any]) -> bool:
    """True when the mapping's name is not the one ``sizing_name`` gives (a name someone chose: keep it)."""
    return "name" in doc and str(doc["name"]) != sizing_name(doc)


#: Model keys a custom model copies from the catalog entry it starts from (architecture beyond the widgets).
_MODEL_SHAPE = ("attention_heads", "max_position_embeddings", "attention", "kv_lora_rank", "qk_rope_head_dim",
                "sliding_window", "sliding_window_layers", "local_layers", "num_experts", "experts_per_token",
                "active_params", "hidden_size", "attention_layers")


# ---------------------------------------------------------------- where each value came from (issue 27)

#: Where a sizing started: ("preset", its name), ("share link", ""), ("file", its name).
Origin = tuple[str, str]


def origin_phrase(origin: Origin) -> str:
    """The origin in a sentence: "the preset 'chat'", "the share link", "the file acme.yaml"."""
    kind, name = origin
    return {"preset": f"the preset '{name}'", "file": f"the file {name}"}.get(kind, f"the {kind}")


def origin_source(origin: Origin) -> str:
    """The origin as a report's source column gives it: "preset: chat", "share link", "file: acme.yaml"."""
    kind, name = origin
    return f"{kind}: {name}" if name else kind


def _leaves(doc: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every value of the mapping by its path (lists are one value)."""
    out: dict[tuple[str, ...], Any] = {}
    for key, value in doc.items():
        if isinstance(value, Mapping):
            out.update(_leaves(value, (*prefix, str(key))))
        else:
            out[(*prefix, str(key))] = value
    return out


def typed_paths(typed: set[str]) -> set[tuple[str, ...]]:
    """The mapping paths of the widgets the user set on screen (``typed``: widget keys)."""
    paths = {FIELDS[key].path for key in typed if key in FIELDS}
    if "reserve_mem" in typed:
        paths |= {("serving", other) for other in RESERVES}
    return paths


def sources(doc: Mapping[str, Any], base: Mapping[str, Any], origin: Origin, typed: set[str]) -> dict[str, str]:
    """Field path -> where its value came from, for the values the user did not set: those ``doc`` holds as the
    sizing it started from (``base``: a preset, a link, a file) held them. A value the user typed, chose, or changed
    another way (a new model's section) is the user's: no entry."""
    mine, then = typed_paths(typed), _leaves(base)
    return {".".join(path): origin_source(origin) for path, value in _leaves(doc).items()
            if path[0] not in ("name", "units", "description", "sources") and path not in mine
            and path in then and then[path] == value}


def with_sources(doc: Mapping[str, Any], base: Mapping[str, Any], origin: Origin, typed: set[str]) -> dict[str, Any]:
    """The mapping the app evaluates and reports: ``doc`` with its ``sources`` section (what the reports give as
    each value's source). The saved file and the link stay ``doc``: a file loaded again is that file's."""
    found = sources(doc, base, origin, typed)
    return {**doc, "sources": found} if found else dict(doc)


def default_value(doc: Mapping[str, Any], key: str) -> Any:
    """What ``key`` shows without the mapping's value: the library's default, or the catalog's (computed) value."""
    field = FIELDS[key]
    if field.default is not None and not field.follows:
        return field.default
    return catalog_value(doc, key)


def departures(doc: Mapping[str, Any], keys: Any) -> list[str]:
    """The widget keys (of ``keys``) whose value differs from its default or catalog value. A custom model's or
    GPU's own numbers have none to differ from: they are the model (GPU) itself."""
    values = widget_values(doc)
    return [key for key in keys if not FIELDS[key].only and stated(doc, key)
            and not _close(values[key], default_value(doc, key))]


def reset_to_default(doc: dict[str, Any], key: str) -> None:
    """Remove ``key``'s value from the mapping: the library's default or the catalog's value applies. Speculation
    has no library default for its details: its method goes back to none (the section removed), a detail to the
    value shown by default (the default acceptance rate for either acceptance)."""
    if key == "spec_method":
        _prune(doc, SPECULATIVE)
        return
    if key in SPEC_KEYS:
        key = "spec_acceptance_rate" if key == "spec_acceptance_length" else key
        _speculate(doc, key, FIELDS[key].default)
        return
    _delete(doc, FIELDS[key].path)
    if key == "reserve_mem":
        for other in RESERVES:
            _delete(doc, ("serving", other))


#: Short names of inputs in "modified from" lines where the widget's label would read oddly.
CHANGE_NAMES = {"prompt_tokens": "prompt length", "output_tokens": "answer length", "gpu_count": "tensor parallel",
                "params_b": "parameters", "price_per_hour": "price", "spec_draft_tokens": "drafted tokens"}


def change_name(key: str) -> str:
    field = FIELDS[key]
    return CHANGE_NAMES.get(key) or field.label.split(" (", 1)[0]


def changes(doc: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """The inputs in which ``doc`` differs from ``base`` (the preset, link or file it started from), in the user's
    words ("model", "GPU", "prompt length"). The values that follow a newly chosen model or GPU are not named."""
    now, then = widget_values(doc), widget_values(base)
    moved = {kind for kind in ("model", "gpu") if now[kind] != then[kind]}
    return [change_name(f.key) for f in _FIELDS if f.key not in ("name", "units")
            and not ({f.only, f.follows} & moved) and (stated(doc, f.key) or stated(base, f.key))
            and not _close(now[f.key], then[f.key])]


# ---------------------------------------------------------------- presets, files and links


#: The sizing the app opens on: a catalog model on a catalog GPU with a price and a load (issue 30: not the essays'
#: custom GPU without a price, which showed "no price set" as the first thing a customer saw).
LANDING = "chat-llama-3.1-8b-h100.yaml"


@functools.cache
def _shipped_scenarios() -> dict[str, tuple[Path, Any]]:
    """Shipped scenario files by their display name, the landing sizing first, then the essays: (path, parsed
    mapping), each read once."""
    found = {}
    order = lambda p: (p.name != LANDING, not p.name.startswith("essay"), p.name)  # noqa: E731
    for path in sorted(SCENARIO_DIR.glob("*.yaml"), key=order):
        try:
            data = load_shipped(path)
        except yaml.YAMLError:
            continue
        found[str((data or {}).get("name", path.stem))] = (path, data)
    return found


def presets() -> dict[str, Path]:
    """Shipped scenario files by their display name, the landing sizing first, then the essays."""
    return {name: path for name, (path, _) in _shipped_scenarios().items()}


def preset_documents() -> dict[str, dict[str, Any]]:
    """Every shipped scenario in the app's shape (``normalise``: fresh copies), by display name."""
    return {name: normalise(data) for name, (_, data) in _shipped_scenarios().items()}


def load_text(text: str, origin: str = "the uploaded file") -> dict[str, Any]:
    """A scenario mapping from YAML text (safe loading); ScenarioError in the user's words when it is not one."""
    data = parse_yaml(text, origin)
    if not isinstance(data, dict):
        raise ScenarioError(f"{origin} is not a scenario (a mapping with model, gpu, serving, workload)")
    return normalise(data)


def to_yaml(doc: Mapping[str, Any]) -> str:
    """The mapping as the YAML file "Save scenario" writes (keys in the mapping's order)."""
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True)


def _extra(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the mapping holds beyond the widgets' paths (simulation block, sliding windows, other reserves...)."""
    rest = copy.deepcopy(dict(doc))
    for field in _FIELDS:
        _prune(rest, field.path)
    return {k: v for k, v in rest.items() if not (isinstance(v, dict) and not v)}


def link_params(doc: Mapping[str, Any], view: str | None = None) -> dict[str, str]:
    """URL parameters of the mapping: each widget's mapping text, the name, the view and ``extra`` JSON."""
    params: dict[str, str] = {}
    for field in _FIELDS:
        raw = _get(doc, field.path)
        if raw is not None and not isinstance(raw, (dict, list)):
            params[field.key] = str(raw) if not isinstance(raw, float) else repr(raw)
    extra = _extra(doc)
    if extra:
        params["extra"] = json.dumps(extra, separators=(",", ":"), sort_keys=True)
    if view:
        params["view"] = view
    return params


def _from_param(field: Field, text: str, units: str) -> Any:
    """A URL parameter's value for the mapping: a plain number is in the widget's unit, else the quantity text."""
    text = text.strip()
    if field.kind in ("int", "float", "billions", "percent") or field.key == "block_size":
        number = float(text)
        whole = field.kind == "int" or field.key == "block_size"
        if not math.isfinite(number) or (whole and not number.is_integer()):
            raise ValueError(text)
        shown = number / 1e9 if field.kind == "billions" else number * 100.0 if field.kind == "percent" else number
        value: Any = int(number) if whole or (number.is_integer() and text.lstrip("-").isdigit()) else number
        # The mapping's own text when it is not the number's plain form ("8e9" stays "8e9"): exact round trips.
        return shown, value if str(value) == text or repr(value) == text else text
    if field.kind in ("bytes", "ms", "tbs", "tflops"):
        try:
            shown = float(text)
            if not math.isfinite(shown):
                raise ScenarioError(f"{field.label} must be a finite number")
            return shown, to_raw(field, shown, units)
        except ValueError:
            raw = text
            return to_display(field, raw, units), raw
    return text, text


#: What each scenario section must be for the widgets to show it (a link's ``extra`` may hold anything).
_SECTION_KINDS: dict[str, type | tuple[type, ...]] = {"model": (dict, str), "gpu": (dict, str), "serving": dict,
                                                      "workload": dict, "slo": dict, "simulation": dict}


def doc_from_link(params: Mapping[str, str], base: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The mapping a share link describes, and a message for each parameter that could not be used.

    A link the app wrote carries ``name`` and every value; it is read on its own. A hand-made link (no ``name``)
    changes ``base``. Values outside a widget's range, unknown models or GPUs and unreadable numbers are not
    applied; each gets a message naming the field and what is allowed.
    """
    problems: list[str] = []
    doc: dict[str, Any] = {} if "name" in params else copy.deepcopy(dict(base))
    if "extra" in params:
        try:  # the bounded JSON reader: no NaN, duplicate keys, deep nesting or huge integers (issue 18)
            extra = parse_json(str(params["extra"]), "the link's extra settings")
            if not isinstance(extra, dict):
                raise ScenarioError("the link's extra settings must be a JSON object")
            for key, value in extra.items():
                if isinstance(value, dict) and isinstance(doc.get(key), dict):
                    doc[key].update(value)
                else:
                    doc[key] = value
        except ScenarioError as exc:
            problems.append(f"{exc.problems[0]}; they were left out")
        for key in [k for k in doc if k in _SECTION_KINDS and not isinstance(doc[k], _SECTION_KINDS[k])]:
            problems.append(f"{key} from the link's extra settings must be "
                            f"{'a mapping or a catalog name' if key in ('model', 'gpu') else 'a mapping'}, got "
                            f"{show(doc[key])}; left out")
            doc[key] = copy.deepcopy(base.get(key)) if isinstance(base.get(key), _SECTION_KINDS[key]) else {}
    units = params.get("units", doc.get("units", "GB"))
    if units not in UNITS:
        problems.append(f"byte units {units!r} from the link is not GB or GiB; GB is used")
        units = "GB"
    doc["units"] = units
    for field in _FIELDS:
        if field.key not in params or field.key == "units":
            continue
        text = str(params[field.key])
        if field.key in ("model", "gpu"):
            key = catalog_key(field.key, text)
            if key is None and text != CUSTOM:
                known = ", ".join(catalog.models() if field.key == "model" else catalog.gpus())
                problems.append(f"{field.label} {text!r} from the link is not in the catalog (known: {known}); "
                                f"the link's {field.label} was not applied")
                continue
            if key is not None:
                section = doc.get(field.key) if isinstance(doc.get(field.key), dict) else {}
                if "name" in params:  # a link the app wrote carries the whole section (extra): keep it, name it
                    doc[field.key] = {**section, "name": key}
                elif section.get("name") != key:
                    choose(doc, field.key, key, keep=set())
            continue
        if field.key in ("weight_dtype", "kv_dtype", "block_size", "spec_method", "engine", "front_end"):
            allowed = {"weight_dtype": DTYPES, "kv_dtype": KV_DTYPES, "block_size": BLOCK_SIZES,
                       "spec_method": SPEC_METHODS, "engine": ENGINE_CHOICES,
                       "front_end": FRONT_END_CHOICES}[field.key]
            value: Any = text.lower()
            if field.key == "engine":  # the library's other names for an engine ("trtllm") name it too
                value = ALIASES.get(value, value)
            if field.key == "block_size":
                value = int(text) if text.isdigit() else text
            if value not in allowed:
                problems.append(f"{field.label} {text!r} from the link is not one of "
                                f"{', '.join(map(str, allowed))}; not applied")
                continue
            if value == "none":  # no speculative decoding: the section is left out
                _prune(doc, SPECULATIVE)
                continue
            _set(doc, field.path, value)
            continue
        if field.kind == "text":
            _set(doc, field.path, text[:NAME_MAX])
            continue
        try:
            shown, raw = _from_param(field, text, units)
        except (ValueError, ScenarioError):
            problems.append(f"{field.label} {text!r} from the link is not a number; not applied")
            continue
        if (field.lo is not None and shown < field.lo) or (field.hi is not None and shown > field.hi):
            problems.append(f"{field.label} {text} from the link is outside {field.lo:g} to {field.hi:g}; "
                            "not applied")
            continue
        if field.none_at_zero and shown == 0:
            _delete(doc, field.path)
        else:
            _set(doc, field.path, raw)
    return doc, problems


def humanise(problem: str) -> str:
    """A library message in the user's words: field paths as the sidebar names them ("workload.prompt_tokens" ->
    "prompt (tokens)"), then any other code name as the glossary writes it ("max_num_seqs" -> "the
    running-sequence cap", ``capacity.render.glossary``)."""
    for path in sorted(LABELS, key=len, reverse=True):
        problem = problem.replace(path, LABELS[path])
    return in_words(problem)


def section_of(problem: str) -> str:
    """The sidebar section a library message belongs under: model, gpu, serving, workload or slo."""
    head = problem.split(".", 1)[0].split(" ", 1)[0]
    if head == "fleet":
        return "workload"
    if head in ("model", "gpu", "serving", "workload", "slo"):
        return head
    return "gpu" if "weights" in problem or "memory" in problem else "serving"
