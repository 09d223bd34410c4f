"""Predict every published measurement of ``validation/measurements.yaml`` and report the errors.

    python validation/validate.py [--file FILE] [--format text|markdown|json] [--no-loo]

Each point becomes a scenario built from its own setup (catalog GPU and model, tensor parallel, dtypes,
input/output tokens, load) with the DEFAULT settings everywhere else: the catalog's peak figures times
its default efficiencies (bandwidth 0.6, FLOP/s 0.76), no step overhead, memory utilisation 0.90, block
size 16, no engine reserves. How each metric is predicted is ``capacity.planning.calibration``'s docstring;
memory points: ``gpu_blocks = pool_blocks`` and ``max_concurrency = pool_blocks x block_size /
max_model_len`` (vLLM's kv_cache_utils). A point the planner cannot express is listed as skipped with
the reason. Then a leave-one-out calibration: each timing point is predicted with the factors fitted on
the other points of its GPU (and, second, on the other points of every GPU).

Nothing measured is changed; a value in ms is only converted to seconds for the arithmetic and shown in
its published unit.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from capacity import Scenario, ScenarioError  # noqa: E402
from capacity.inputs import catalog, engines  # noqa: E402
from capacity.inputs.hf_config import model_from_config  # noqa: E402
from capacity.planning.calibration import (  # noqa: E402
    FACTORS,
    Factors,
    Fit,
    Observation,
    batch_fits,
    fit_factors,
    predict,
    terms_for,
)

MEASUREMENTS = Path(__file__).resolve().parent / "measurements.yaml"

#: The file's GPU keys -> (catalog key, why that entry). Memory points only read the GPU's memory.
GPU_MAP: dict[str, tuple[str, str]] = {
    "h100-sxm": ("h100-sxm", "catalog key"),
    "h200": ("h200", "catalog key"),
    "a100-80gb": ("a100-80gb", "catalog key"),
    "l40s": ("l40s", "catalog key"),
    "mi300x": ("mi300x", "catalog key"),
    "b200": ("b200", "catalog key"),
    "h100": ("h100-sxm", "mapping: 'H100 80G', variant not stated; the SXM part (the PCIe card has 2.0 "
                         "instead of 3.35 TB/s, so decode would be ~40% slower)"),
    "a100": ("a100-80gb", "mapping: 'A100', memory size not stated; the catalog alias 'a100' is the 80 GB SXM "
                          "part (a static batch of 60 x 2,176 fp16 tokens needs 68 GB of KV: not a 40 GB card)"),
    "a100-80gb-pcie": ("a100-80gb", "mapping: A100 80GB PCIe; same 80 GB as the SXM entry (memory metric only)"),
}

#: GPUs outside the catalog, with numbers their point's own source states. bandwidth and flops are
#: placeholders: memory metrics never read them (tests/planning/test_validation.py checks that).
EXPLICIT_GPUS: dict[str, tuple[dict[str, Any], str]] = {
    "rtx-3090": ({"name": "rtx-3090 (from its log)", "memory": "23.58 GiB", "bandwidth": "1 TB/s",
                  "flops": "1 TFLOP/s"},
                 "explicit: total_gpu_memory=23.58GiB from the point's vLLM log; bandwidth/FLOP/s unused"),
}

#: Llama-2-70B is not in the model catalog. Its shape as TensorRT-LLM's performance.md builds it
#: (n_layer 80, n_head 64, n_kv_head 8, n_embd 8192, inter_size 28672, vocab 32000; quoted in the notes of
#: trtllm05-llama2-70b-h100-fp8-tp4-bs1-ttft-2048), as a config.json; parameters counted by hf_config.
LLAMA2_70B_CONFIG = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                     "hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 32000,
                     "max_position_embeddings": 4096, "tie_word_embeddings": False}
EXPLICIT_MODELS = {"llama-2-70b": (model_from_config(LLAMA2_70B_CONFIG, "llama-2-70b"),
                                   "explicit: Llama-2-70B shape from TensorRT-LLM performance.md's build command")}
MODEL_FOR_POINT = {pid: "llama-2-70b" for pid in (
    "trtllm05-llama2-70b-h100-fp8-tp4-bs1-ttft-2048", "vllm-pr2031-llama2-70b-4xa100-80gb-tp4-blocks",
    "mlperf41-llama2-70b-8xh100-trt-offline", "mlperf41-llama2-70b-8xmi300x-vllm-offline",
    "mlperf41-llama2-70b-1xmi300x-vllm-offline")}

#: Setup the planner derives for one point, with the derivation (never a measured number).
DERIVED: dict[str, tuple[dict[str, Any], str]] = {
    "oci-mi300x-llama31-405b-fp8-bs1": ({"tensor_parallel": 8}, "derived: one instance on all eight GPUs -> TP 8"),
    "oci-mi300x-llama31-405b-fp8-bs64": ({"tensor_parallel": 8}, "derived: one instance on all eight GPUs -> TP 8"),
    **{f"oci-mi300x-llama31-405b-fp8-{tail}": ({"tensor_parallel": 8},
                                               "derived: one instance on all eight GPUs -> TP 8")
       for tail in ("bs8", "bs32", "bs128", "bs256", "offline-128-128", "offline-128-2048")},
    "trtllm061-llama2-7b-h100-fp8-bs112-128-2048": (
        {"kv_dtype": "fp8"}, "derived: 112 x 2,176 tokens of fp16 KV need 128 GB, fp8 64 GB: only an 8-bit KV "
                             "cache fits an 80 GB GPU"),
}

#: Engine reserves the points' own vLLM log states (issue #10517, one comment, same model and GPU for both runs):
#: activation = peak_torch_memory - weights ("Loading model weights took 14.9888 GB"; vLLM divides by 2^30, so
#: GiB), plus non_torch_memory. Used only in the second memory column, "with the log's reserves".
_AT_20K = {"activation_memory": "2.0712 GiB", "non_torch_memory": "0.35 GiB"}  # 17.06 - 14.9888 GiB; 0.35 GiB
_AT_29K = {"activation_memory": "2.9912 GiB", "non_torch_memory": "0.35 GiB"}  # 17.98 - 14.9888 GiB; 0.35 GiB
LOGGED_RESERVES: dict[str, dict[str, str]] = {
    "vllm-issue10517-llama31-8b-rtx3090-20k-blocks": _AT_20K,
    "vllm-issue10517-llama31-8b-rtx3090-20k-maxconc": _AT_20K,
    "vllm-issue10517-llama31-8b-rtx3090-29k-blocks": _AT_29K,
}

#: vLLM's defaults where a memory point does not state them (vLLM EngineArgs).
VLLM_DEFAULTS = {"gpu_memory_utilization": 0.9, "block_size": 16}

#: Published metric -> (planner metric, factor to base units, unit shown).
METRIC_MAP = {"output_tokens_per_s": ("output_tokens_per_s", 1.0, "tok/s"),
              "tokens_per_s_single_stream": ("output_tokens_per_s", 1.0, "tok/s"),
              "itl_ms": ("tpot_s", 1e-3, "ms"), "ttft_ms": ("ttft_s", 1e-3, "ms"),
              "gpu_blocks": ("gpu_blocks", 1.0, "blocks"), "max_concurrency": ("max_concurrency", 1.0, "x")}
MEMORY_METRICS = ("gpu_blocks", "max_concurrency")


@dataclass
class Case:
    """One point: its scenario and observation, or the reason it is skipped; then its predictions."""

    point: dict[str, Any]
    gpu: str = ""
    model: str = ""
    skip: str = ""
    setup_notes: list[str] = field(default_factory=list)
    observation: Observation | None = None
    scenario: Scenario | None = None
    reserves: dict[str, str] = field(default_factory=dict)
    reserves_scenario: Scenario | None = None
    predicted: float = math.nan
    predicted_reserves: float = math.nan
    engine: str = ""                      # engine profile applied ("" where the source names none)
    engine_note: str = ""
    plain_scenario: Scenario | None = None
    plain_observation: Observation | None = None
    plain: float = math.nan               # prediction without the engine profile (the essays' convention)
    batch_note: str = ""                  # a stated static batch that does not fit
    loso: float = math.nan                # leave-one-source-out prediction (per-family factors of other sources)
    loso_note: str = ""
    loo_gpu: float = math.nan
    loo_all: float = math.nan
    loo_note: str = ""
    implied: str = ""

    @property
    def id(self) -> str:
        return str(self.point["id"])

    @property
    def measured(self) -> float:
        return float(self.point["value"])

    @property
    def is_memory(self) -> bool:
        return self.point["metric"] in MEMORY_METRICS

    @property
    def scale(self) -> float:
        return METRIC_MAP[self.point["metric"]][1]


#: Settings a source states for all its points (quoted in those points' notes), by id prefix.
SOURCE_SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "trtllm017-": ({"kv_cache_free_gpu_memory_fraction": 0.95},
                   "stated: 'In majority of cases, we also use a higher KV cache percentage by setting "
                   "--kv_cache_free_gpu_mem_fraction 0.95'"),
    "trtllm10-": ({"kv_cache_free_gpu_memory_fraction": 0.95},
                  "stated: 'In many cases, we also use ... --kv_cache_free_gpu_mem_fraction 0.95'"),
}


def engine_of(point: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(engine profile key, version, why) from the point's ``engine`` text; ("", None, "") where none is named.

    ``engine_profile``/``engine_version`` fields, where a point has them, win. NIM and the MLPerf NVIDIA harness
    run TensorRT-LLM engines (mapping). vLLM versions: the number printed, else 'V0 engine' -> 0.6 (the V0 rules),
    'V1 engine' -> 0.8, 'Dec 2023' -> 0.2, 'PyTorch 2.4.0' -> 0.6; none stated -> the newest rules.
    """
    if point.get("engine_profile"):
        return str(point["engine_profile"]), point.get("engine_version"), "stated in the point"
    text_ = str(point.get("engine") or "")
    low = text_.lower()
    if "sglang" in low:
        found = re.search(r"sglang\D{0,3}(\d+\.\d+(?:\.\d+)?)", low)
        return "sglang", found.group(1) if found else None, "engine named by the source"
    if "vllm" in low:
        found = re.search(r"vllm\D{0,3}(\d+\.\d+(?:\.\d+)?)", low)
        if found:
            return "vllm", found.group(1), "engine and version named by the source"
        for marker, version in (("v0 engine", "0.6"), ("v1 engine", "0.8"), ("dec 2023", "0.2"),
                                ("pytorch 2.4.0", "0.6")):  # vLLM 0.6.0-0.6.3 pin torch 2.4.0
            if marker in low:
                return "vllm", version, f"mapping: '{marker}' -> vLLM {version} rules"
        return "vllm", None, "engine named, version not: the newest rules"
    if "tensorrt" in low or "nim" in low or "trt" in low:
        found = re.search(r"tensorrt-llm\D{0,3}(\d+\.\d+(?:\.\d+)?)", low)
        why = "engine named by the source" if "tensorrt-llm" in low else "mapping: NIM, MLPerf harness run TRT-LLM"
        return "tensorrt-llm", found.group(1) if found else None, why
    return "", None, ""


def _rate(value: Any) -> float | None:
    if value is None:
        return None
    return math.inf if str(value).strip().lower() in ("inf", "infinity") else float(value)


def blockers(point: Mapping[str, Any]) -> list[str]:
    """Every reason the planner cannot express the point (empty when it can)."""
    pid, metric = point["id"], point["metric"]
    derived = DERIVED.get(pid, ({}, ""))[0]
    gpu = point.get("gpu")
    out = []
    if metric not in METRIC_MAP:
        out.append(f"metric {metric!r} is not one the planner predicts")
    if point.get("weight_dtype") == "fp4":
        out.append("fp4 weights: the planner has no fp4 weight dtype (nor B200 fp4 FLOP/s in the catalog)")
    if gpu is None:
        out.append("GPU type not stated by the source, so the memory (and speed) behind the number is unknown")
    elif gpu not in GPU_MAP and not (gpu in EXPLICIT_GPUS and metric in MEMORY_METRICS):
        out.append(f"GPU {gpu!r} is not in the catalog and its source gives no speed figures")
    if not (MODEL_FOR_POINT.get(pid) or point.get("catalog_model")):
        out.append(f"model {point.get('model')!r} is not in the catalog and the source does not state its shape")
    if derived.get("tensor_parallel", point.get("tensor_parallel")) is None:
        out.append("tensor-parallel layout not stated")
    if metric not in MEMORY_METRICS and (point.get("input_tokens") is None or point.get("output_tokens") is None):
        out.append("input/output lengths not stated (dataset-driven), so no request shape to predict")
    return out


def build(point: dict[str, Any]) -> Case:
    """The point's scenario with default settings, or every reason the planner cannot express it."""
    case = Case(point)
    pid, metric = point["id"], point["metric"]
    reasons = blockers(point)
    if reasons:
        case.skip = "; ".join(reasons)
        return case
    derived, why = DERIVED.get(pid, ({}, ""))
    if why:
        case.setup_notes.append(why)
    gpu_key = point["gpu"]
    if gpu_key in GPU_MAP:
        name, why = GPU_MAP[gpu_key]
        gpu: dict[str, Any] = {"name": name}
        case.gpu = name
        if why.startswith("mapping"):
            case.setup_notes.append(f"{gpu_key} -> {case.gpu}: {why}")
    else:
        gpu, why = dict(EXPLICIT_GPUS[gpu_key][0]), EXPLICIT_GPUS[gpu_key][1]
        case.gpu = gpu_key
        case.setup_notes.append(why)
    model_key = MODEL_FOR_POINT.get(pid) or point["catalog_model"]
    if model_key in EXPLICIT_MODELS:
        model, why = dict(EXPLICIT_MODELS[model_key][0]), EXPLICIT_MODELS[model_key][1]
        case.setup_notes.append(why)
    else:
        model = {"name": model_key}
    case.model = model_key
    for key in ("weight_dtype", "kv_dtype"):
        if derived.get(key, point.get(key)):
            model[key] = derived.get(key, point.get(key))
    tp = int(derived.get("tensor_parallel", point.get("tensor_parallel")))
    gpu.update(count=tp, replicas=max(int(point.get("gpu_count", tp)) // tp, 1))
    serving: dict[str, Any] = {}
    if metric in MEMORY_METRICS:
        serving["memory_utilization"] = point.get("gpu_memory_utilization", VLLM_DEFAULTS["gpu_memory_utilization"])
        serving["block_size"] = VLLM_DEFAULTS["block_size"]
        if "gpu_memory_utilization" not in point:
            case.setup_notes.append("gpu_memory_utilization not stated: vLLM's default 0.9")
        if point.get("max_model_len"):
            serving["max_model_len"] = point["max_model_len"]
        workload = {"prompt_tokens": 1, "output_tokens": 1}  # memory metrics do not depend on the request
    else:
        workload = {"prompt_tokens": point["input_tokens"], "output_tokens": point["output_tokens"]}
    if point.get("max_num_seqs"):
        serving["max_num_seqs"] = int(point["max_num_seqs"])
    data = {"name": pid, "model": model, "gpu": gpu, "serving": serving, "workload": workload}
    engine, version, why = engine_of(point)
    engine_serving = dict(serving)
    if engine:
        engine_serving.update(engine=engine, **({"engine_version": version} if version else {}))
        case.engine, case.engine_note = engine, why
        for prefix, (settings, said) in SOURCE_SETTINGS.items():
            if pid.startswith(prefix):
                engine_serving.update(settings)
                case.setup_notes.append(said)
    try:
        # The essays' convention (serving.engine: ideal); a scenario naming no engine would get vLLM's profile.
        case.plain_scenario = Scenario.from_dict({**data, "serving": {"engine": "ideal", **serving}})
        case.scenario = Scenario.from_dict({**data, "serving": engine_serving})
    except ScenarioError as exc:
        case.skip = f"not a valid scenario: {exc}"
        return case
    if metric in MEMORY_METRICS:
        case.reserves = LOGGED_RESERVES.get(pid, {})
        if case.reserves:
            case.reserves_scenario = Scenario.from_dict({**data, "serving": {**serving, **case.reserves}})
        return case
    planner_metric, scale, _ = METRIC_MAP[metric]
    bs = point.get("batch_size")
    for attr, scenario in (("observation", case.scenario), ("plain_observation", case.plain_scenario)):
        setattr(case, attr, Observation(scenario, planner_metric, float(point["value"]) * scale,
                                        batch_size=int(bs) if bs else None, concurrency=point.get("concurrency"),
                                        request_rate=_rate(point.get("request_rate")), replicas=gpu["replicas"],
                                        label=pid))
    if not batch_fits(case.observation):
        fits = case.scenario.evaluate()["max_requests_shared_prefix"]
        case.batch_note = f"stated batch {bs} does not fit the KV pool ({fits:.0f} do): predicted at {fits:.0f}"
    return case


def memory_prediction(scenario: Scenario, metric: str) -> float:
    """gpu_blocks = pool_blocks; max_concurrency = pool_blocks x block_size / max_model_len (vLLM)."""
    blocks = float(scenario.evaluate()["pool_blocks"])
    if metric == "gpu_blocks":
        return blocks
    return blocks * scenario.serving.block_size / scenario.serving.max_model_len


def predict_all(cases: Sequence[Case]) -> None:
    """Fill each case's default prediction (in the published unit); a failure becomes a skip with its reason."""
    for case in cases:
        if case.skip:
            continue
        try:
            if case.is_memory:
                case.predicted = memory_prediction(case.scenario, case.point["metric"])
                case.plain = memory_prediction(case.plain_scenario, case.point["metric"])
                if case.reserves:
                    case.predicted_reserves = memory_prediction(case.reserves_scenario, case.point["metric"])
            else:
                case.predicted = predict(case.observation, Factors.of(case.scenario)) / case.scale
                case.plain = predict(case.plain_observation, Factors.of(case.plain_scenario)) / case.scale
                case.implied = implied_factor(case)
        except ScenarioError as exc:
            case.skip = str(exc)
        if not case.skip and not math.isfinite(case.predicted):
            case.skip = "the planner predicts no finite value for this setup"


def leave_one_out(cases: Sequence[Case]) -> dict[str, Fit]:
    """LOO predictions per timing case (same GPU, then all GPUs); returns the in-sample fit of each GPU."""
    timing = [c for c in cases if not c.skip and not c.is_memory]
    for case in timing:
        start = Factors.of(case.scenario)
        same = [c.observation for c in timing if c is not case and c.gpu == case.gpu]
        every = [c.observation for c in timing if c is not case]
        for attr, train in (("loo_gpu", same), ("loo_all", every)):
            if not train:
                setattr(case, attr, case.predicted)
                case.loo_note = "no other point on this GPU: default factors"
                continue
            fitted = fit_factors(train, start)
            setattr(case, attr, predict(case.observation, fitted.factors) / case.scale)
    per_gpu = {}
    for gpu in sorted({c.gpu for c in timing}):
        obs = [c.observation for c in timing if c.gpu == gpu]
        per_gpu[gpu] = fit_factors(obs, Factors.of(obs[0].scenario))
    return per_gpu


def source_of(case: Case) -> str:
    """The publication a point comes from (its source URL without a fragment): the unit left out in LOSO."""
    return str(case.point.get("source", "")).split("#")[0]


def family_of(case: Case) -> str:
    return engines.gpu_family(case.gpu) or case.gpu


def default_factors(case: Case) -> Factors:
    """What the planner assumes without fitted data: the catalog's efficiencies and the engine's overhead."""
    defaults = catalog.gpu_defaults()
    return Factors(float(defaults["bandwidth_efficiency"]), float(defaults["flops_efficiency"]),
                   engines.STEP_OVERHEAD_S[case.engine])


#: Sources a GPU family's points must come from before its own step overhead is fitted (``fit_families``).
MIN_SOURCES_FOR_OVERHEAD = 2


def fit_families(cases: Sequence[Case], exclude_source: str | None = None,
                 families: set[str] | None = None) -> dict[str, Fit]:
    """Bandwidth efficiency, FLOP/s efficiency and step overhead fitted per GPU family on the timing points with
    an engine profile (``exclude_source``'s points left out); "all" pools every family.

    The rule: a family's own step overhead needs points from at least ``MIN_SOURCES_FOR_OVERHEAD`` sources; with
    fewer, its efficiencies are fitted with the overhead held at the pooled fit's. One publication's points
    share one setup (often throughput only), and there the overhead and the efficiencies trade off freely: AMD's
    four MI300X throughput points alone give a 47 ms step overhead, where OCI's batch-1 run on the same GPUs
    needs a few. ``families``: fit only these; None: every family.
    """
    groups: dict[str, list[Case]] = {}
    for c in cases:
        if not c.skip and not c.is_memory and c.engine and source_of(c) != exclude_source:
            groups.setdefault(family_of(c), []).append(c)
    wanted = set(groups) if families is None else families & set(groups)
    every = [c for group in groups.values() for c in group]
    if not every:
        return {}
    pooled = fit_factors([c.observation for c in every], default_factors(every[0]))  # what a family without points gets
    fits = {}
    for fam, group in sorted(groups.items()):
        if fam not in wanted:
            continue
        if len({source_of(c) for c in group}) >= MIN_SOURCES_FOR_OVERHEAD:
            fits[fam] = fit_factors([c.observation for c in group], default_factors(group[0]))
        else:
            start = replace(default_factors(group[0]), step_overhead_s=pooled.factors.step_overhead_s)
            fits[fam] = fit_factors([c.observation for c in group], start, fit=FACTORS[:2])
    fits["all"] = pooled
    return fits


def leave_one_source_out(cases: Sequence[Case]) -> None:
    """Each timing point predicted with the per-family factors fitted on every other source (``loso``)."""
    timing = [c for c in cases if not c.skip and not c.is_memory and c.engine]
    for source in sorted({source_of(c) for c in timing}):
        mine = [c for c in timing if source_of(c) == source]
        fits = fit_families(cases, exclude_source=source, families={family_of(c) for c in mine})
        for case in mine:
            fit = fits.get(family_of(case))
            case.loso_note = "" if fit else "no other source on this GPU family: the pooled fit of the others"
            fit = fit or fits.get("all")
            factors = fit.factors if fit else default_factors(case)
            case.loso = predict(case.observation, factors) / case.scale


def fitted_table(cases: Sequence[Case]) -> str:
    """``engines.FITTED_EFFICIENCY`` as Python, from every source (what the engine profiles ship)."""
    lines = ["FITTED_EFFICIENCY: dict[str, tuple[float, float, float]] = {"]
    for fam, fit in fit_families(cases).items():
        f = fit.factors
        n_src = len({source_of(c) for c in cases if not c.skip and not c.is_memory and c.engine
                     and fam in (family_of(c), "all")})
        lines.append(f'    "{fam}": ({f.bandwidth_efficiency:.3f}, {f.flops_efficiency:.3f}, {f.step_overhead_s:.2e}),'
                     f"  # {len(fit.measured)} points, {n_src} sources, in-sample MAPE {fit.mape:.1f}%")
    return "\n".join(lines + ["}"])


def implied_factor(case: Case) -> str:
    """The one efficiency that reproduces the point with the other at its default: bandwidth where the
    point's time is mostly memory-bound at the defaults, FLOP/s where it is mostly compute-bound; '>1' where
    even the datasheet peak falls short (the error is then not an efficiency)."""
    start = Factors.of(case.scenario)
    terms = terms_for(case.observation, start)
    u, v = start.theta()[:2]
    memory_bound = terms.memory * u >= terms.compute * v
    mostly_memory = np.sum(terms.memory[memory_bound] * u) >= np.sum(terms.compute[~memory_bound] * v)
    name, short = ("bandwidth_efficiency", "bw") if mostly_memory else ("flops_efficiency", "fl")
    fit = fit_factors([case.observation], start, fit=(name,))
    if not fit.identified(name):
        return "-"
    value = getattr(fit.factors, name)
    return f"{short} >1" if value >= 1 - 1e-9 and abs(fit.errors[0]) > 1e-6 else f"{short} {value:.2f}"


#: Device memory an H100-80G reports to vLLM: "total_gpu_memory (79.22GiB)" (vllm-pr12126 point's log);
#: the catalog's "80 GB" is 5.1 GB less.
H100_DEVICE_MEMORY = "79.22 GiB"
#: TensorRT-LLM's KV pool is a fraction of the memory left after the weights ("--kv_cache_free_gpu_mem_fraction
#: 0.95", the trtllm017 points' source), not a fraction of the whole GPU as in vLLM and the planner.
TRTLLM_FREE_FRACTION = 0.95

#: Explanations tried on a point: one named change at a time, added up (none is applied to the main tables).
WHAT_IF: dict[str, tuple[str, ...]] = {
    "trtllm017-llama31-70b-h100-fp8-tp1-128-128": ("device memory", "TRT-LLM pool"),
    "trtllm10-llama31-8b-fp8-h100-tp1-1000-1000": ("device memory", "TRT-LLM pool", "fp8 KV"),
    "trtllm10-llama33-70b-fp8-h100-tp2-1000-1000": ("device memory", "TRT-LLM pool", "fp8 KV"),
    "nim180-llama33-70b-2xh100-fp8-5000-500-c250-throughput": ("device memory", "fp8 KV"),
}


def _changed(case: Case, change: str, raw: dict[str, Any]) -> dict[str, Any]:
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    if change == "device memory":
        raw["gpu"]["memory"] = H100_DEVICE_MEMORY
    elif change == "TRT-LLM pool":  # pool = f (M - W): the utilisation that gives it is (f M + (1 - f) W) / M
        s = Scenario.from_dict(raw)
        m, w = s.gpu.memory_bytes, s.model.weight_bytes / s.gpu.gpus_per_replica
        raw.setdefault("serving", {})["memory_utilization"] = (TRTLLM_FREE_FRACTION * m + (1 - TRTLLM_FREE_FRACTION)
                                                                * w) / m
    elif change == "fp8 KV":
        raw["model"]["kv_dtype"] = "fp8"
    return raw


def what_if(cases: Sequence[Case]) -> list[list[str]]:
    """Rows (id, change added, batch that fits, predicted, error %) for the changes of ``WHAT_IF``."""
    rows = []
    for case in cases:
        if case.id not in WHAT_IF or case.skip:
            continue
        raw, unit = dict(case.scenario.raw), METRIC_MAP[case.point["metric"]][2]
        steps = [("default", raw)]
        for change in WHAT_IF[case.id]:
            raw = _changed(case, change, raw)
            steps.append((f"+ {change}", raw))
        for label, data in steps:
            s = Scenario.from_dict(data)
            obs = replace(case.observation, scenario=s)
            value = predict(obs, Factors.of(s)) / case.scale
            rows.append([case.id, label, f"{s.evaluate()['batch_max']:.0f}", _fmt(value, unit),
                         f"{_err(value, case.measured):+.1f}"])
    return rows


def loo_variants(cases: Sequence[Case]) -> list[list[str]]:
    """Leave-one-out MAPE for each set of fitted factors and each training scope (slow: about a minute)."""
    timing = [c for c in cases if not c.skip and not c.is_memory]
    sets = [FACTORS, FACTORS[:2], FACTORS[:1]]
    rows = []
    for fitted in sets:
        row = [", ".join(fitted)]
        for scope in ("gpu", "all"):
            errors = []
            for case in timing:
                train = [c.observation for c in timing if c is not case and (scope == "all" or c.gpu == case.gpu)]
                value = case.predicted
                if train:
                    fit = fit_factors(train, Factors.of(case.scenario), fit=fitted)
                    value = predict(case.observation, fit.factors) / case.scale
                errors.append(abs(_err(value, case.measured)))
            row.append(f"{np.mean(errors):.1f}")
        rows.append(row)
    return rows


def _err(pred: float, meas: float) -> float:
    return (pred / meas - 1.0) * 100.0


def mape(cases: Sequence[Case], attr: str = "predicted") -> float:
    errors = [abs(_err(getattr(c, attr), c.measured)) for c in cases]
    return float(np.mean(errors)) if errors else math.nan


def run(path: Path = MEASUREMENTS, loo: bool = True) -> tuple[list[Case], dict[str, Fit]]:
    """Build, predict and (optionally) leave-one-out every point of the file."""
    points = yaml.safe_load(path.read_text(encoding="utf-8"))["points"]
    cases = [build(p) for p in points]
    predict_all(cases)
    if loo:
        leave_one_source_out(cases)
    return cases, (leave_one_out(cases) if loo else {})


# --- output -----------------------------------------------------------------------------------------------------

def _fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "-"
    if unit in ("tok/s", "blocks"):
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header)] + [fmt.format(*r) for r in rows])


def _unit(case: Case) -> str:
    return METRIC_MAP[case.point["metric"]][2]


def report(cases: Sequence[Case], per_gpu: Mapping[str, Fit], markdown: bool = False,
           variants: Sequence[Sequence[str]] = ()) -> str:
    """Every table: timing points, leave-one-out, memory points, what-ifs, per-GPU factors, skipped, mappings."""
    timing = [c for c in cases if not c.skip and not c.is_memory]
    memory = [c for c in cases if not c.skip and c.is_memory]
    out = []
    if timing and not math.isnan(timing[0].loso):
        out.append("Summary: MAPE by class. 'no engine' is the essays' convention (catalog efficiencies 0.6 / 0.76, "
                   "no overhead, no reserves, no batch cap); 'engine profile' applies the engine each source names "
                   "(capacity.inputs.engines, with the per-family fitted efficiencies); 'leave-one-source-out' refits "
                   "those "
                   "efficiencies without the source being predicted.\n")
        out.append(summary(cases, markdown))
        rows = [[c.id, c.engine, family_of(c), _kind(c), _fmt(c.measured, _unit(c)), _fmt(c.predicted, _unit(c)),
                 f"{_err(c.predicted, c.measured):+.1f}", _fmt(loso_value(c), _unit(c)),
                 f"{_err(loso_value(c), c.measured):+.1f}", "; ".join(x for x in (c.batch_note, c.loso_note) if x)]
                for c in cases if not c.skip and c.engine]
        out.append("\nEvery point with its engine profile, and left out of the fit (leave-one-source-out):\n")
        out.append(_table(["id", "engine", "GPU family", "kind", "measured", "engine profile", "error %",
                           "LOSO", "error %", "note"], rows, markdown))
        out.append("")
    out += ["Timing points with the default settings (catalog peak x bandwidth_efficiency 0.6 / flops_efficiency "
           "0.76, step_overhead 0, memory_utilization 0.9, no reserves). 'implied' is the one efficiency that "
           "reproduces the point with the other at its default (bw: memory-bound, fl: compute-bound).\n"]
    rows = [[c.id, c.gpu, c.model, c.point["metric"], _fmt(c.predicted, _unit(c)), _fmt(c.measured, _unit(c)),
             f"{_err(c.predicted, c.measured):+.1f}", c.implied] for c in timing]
    out.append(_table(["id", "GPU", "model", "metric", "predicted", "measured", "error %", "implied"], rows,
                      markdown))
    kinds = sorted({c.point["kind"] for c in timing})
    out.append(f"\nMAPE {mape(timing):.1f}% over {len(timing)} timing points; by kind: " + "; ".join(
        f"{k} {mape([c for c in timing if c.point['kind'] == k]):.1f}% ({sum(c.point['kind'] == k for c in timing)})"
        for k in kinds))
    if timing and not math.isnan(timing[0].loo_gpu):
        out.append("\nLeave-one-out calibration: each point predicted with the three factors fitted on the other "
                   "points of its GPU, and on the other points of every GPU:\n")
        rows = [[c.id, c.gpu, _fmt(c.measured, _unit(c)), _fmt(c.predicted, _unit(c)),
                 f"{_err(c.predicted, c.measured):+.1f}", _fmt(c.loo_gpu, _unit(c)),
                 f"{_err(c.loo_gpu, c.measured):+.1f}", _fmt(c.loo_all, _unit(c)),
                 f"{_err(c.loo_all, c.measured):+.1f}", c.loo_note] for c in timing]
        out.append(_table(["id", "GPU", "measured", "default", "error %", "LOO same GPU", "error %",
                           "LOO all GPUs", "error %", "note"], rows, markdown))
        out.append(f"\nMAPE: default {mape(timing):.1f}%, leave-one-out same GPU {mape(timing, 'loo_gpu'):.1f}%, "
                   f"all GPUs {mape(timing, 'loo_all'):.1f}%")
    if variants:
        out.append("\nLeave-one-out MAPE % by the factors fitted (the others at their defaults):\n")
        out.append(_table(["factors fitted", "same GPU", "all GPUs"], variants, markdown))
    out.append("\nvLLM '# GPU blocks' and 'Maximum concurrency' (memory utilisation as stated, block size 16); "
               "the second prediction also takes out the reserves the point's own log states:\n")
    rows = [[c.id, c.gpu, c.model, c.point["metric"], _fmt(c.predicted, _unit(c)),
             _fmt(c.measured, _unit(c)), f"{_err(c.predicted, c.measured):+.1f}",
             _fmt(c.predicted_reserves, _unit(c)) if c.reserves else "-",
             f"{_err(c.predicted_reserves, c.measured):+.1f}" if c.reserves else "-"] for c in memory]
    out.append(_table(["id", "GPU", "model", "metric", "predicted", "vLLM logged", "error %",
                       "predicted with log's reserves", "error %"], rows, markdown))
    out.append(f"\nMAPE {mape(memory):.1f}% over {len(memory)} memory points with the default (no reserves)")
    rows = what_if(cases)
    if rows:
        out.append(f"\nWhat-if, one documented change at a time (not applied above): device memory = "
                   f"{H100_DEVICE_MEMORY} (an H100-80G's total in a vLLM log), TRT-LLM pool = "
                   f"{TRTLLM_FREE_FRACTION} x (memory - weights), fp8 KV = an 8-bit KV cache:\n")
        out.append(_table(["id", "change", "batch that fits", "predicted", "error %"], rows, markdown))
    if per_gpu:
        rows = []
        for gpu, fit in per_gpu.items():
            values = (fit.factors.bandwidth_efficiency, fit.factors.flops_efficiency, fit.factors.step_overhead_s * 1e3)
            shown = [f"{v:.3f}" if fit.identified(n) else "not identified" for n, v in zip(FACTORS, values,
                                                                                           strict=True)]
            notes = "; ".join(f"{k}: {v}" for k, v in fit.notes.items())
            rows.append([gpu, str(len(fit.measured)), *shown, f"{fit.mape:.1f}", notes])
        out.append("\nFactors fitted on all timing points of each GPU (in-sample):\n")
        out.append(_table(["GPU", "points", "bandwidth_efficiency", "flops_efficiency", "step_overhead ms",
                           "MAPE %", "notes"], rows, markdown))
    rows = [[c.id, c.point["metric"], c.skip] for c in cases if c.skip]
    out.append(f"\nSkipped ({len(rows)} of {len(cases)} points):\n")
    out.append(_table(["id", "metric", "reason"], rows, markdown))
    rows = [[c.id, "; ".join(c.setup_notes)] for c in cases if c.setup_notes and not c.skip]
    if rows:
        out.append("\nSetup mappings and derivations:\n")
        out.append(_table(["id", "mapping"], rows, markdown))
    return "\n".join(out) + "\n"


def _kind(case: Case) -> str:
    """The point class: throughput, TTFT, TPOT/ITL, single stream, or memory (KV blocks, concurrency)."""
    metric, kind = case.point["metric"], case.point["kind"]
    if case.is_memory:
        return "memory"
    if kind == "single_stream" or metric == "tokens_per_s_single_stream":
        return "single stream"
    return {"ttft_ms": "TTFT", "itl_ms": "TPOT/ITL"}.get(metric, "throughput")


def loso_value(case: Case) -> float:
    """The leave-one-source-out prediction; memory points fit nothing, so theirs is the engine prediction."""
    return case.predicted if case.is_memory or math.isnan(case.loso) else case.loso


def summary_rows(cases: Sequence[Case]) -> list[list[str]]:
    """MAPE rows (class, points, sources, no engine, engine profile, leave-one-source-out) overall, by engine,
    GPU family, kind and (engine, kind)."""
    done = [c for c in cases if not c.skip and c.engine]

    def row(label: str, group: Sequence[Case]) -> list[str]:
        plain = float(np.mean([abs(_err(c.plain, c.measured)) for c in group]))
        loso = float(np.mean([abs(_err(loso_value(c), c.measured)) for c in group]))
        return [label, str(len(group)), str(len({source_of(c) for c in group})), f"{plain:.1f}",
                f"{mape(group):.1f}", f"{loso:.1f}"]

    rows = [row("all points", done), row("timing points", [c for c in done if not c.is_memory])]
    for title, key in (("engine", lambda c: c.engine), ("GPU family", family_of), ("kind", _kind),
                       ("engine, kind", lambda c: f"{c.engine}, {_kind(c)}")):
        for value in sorted({key(c) for c in done}):
            rows.append([f"{title}: {value}", *row("", [c for c in done if key(c) == value])[1:]])
    return rows


def summary(cases: Sequence[Case], markdown: bool = True) -> str:
    """The fidelity table (README, docs/fidelity.md): MAPE % by class with and without the engine profiles."""
    header = ["class", "points", "sources", "no engine MAPE %", "engine profile MAPE %",
              "leave-one-source-out MAPE %"]
    return _table(header, summary_rows(cases), markdown)


#: Files whose generated blocks ``--publish`` rewrites (between the markers of ``_markers``).
PUBLISHED = (ROOT / "README.md", ROOT / "docs" / "fidelity.md")


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- {name}: generated by `python validation/validate.py --publish`; do not edit by hand -->",
            f"<!-- end {name} -->")


def class_mapes(cases: Sequence[Case]) -> dict[tuple[str, str], float]:
    """Leave-one-source-out MAPE % of every (engine, kind) class with an engine profile."""
    done = [c for c in cases if not c.skip and c.engine]
    return {(e, k): float(np.mean([abs(_err(loso_value(c), c.measured)) for c in done
                                   if (c.engine, _kind(c)) == (e, k)]))
            for e, k in sorted({(c.engine, _kind(c)) for c in done})}


def headline(cases: Sequence[Case]) -> str:
    """The fidelity sentence of the README and docs/fidelity.md, from the cases' predictions."""
    done = [c for c in cases if not c.skip and c.engine]
    loso = float(np.mean([abs(_err(loso_value(c), c.measured)) for c in done]))
    plain = float(np.mean([abs(_err(c.plain, c.measured)) for c in done]))
    worst = max(class_mapes(cases).items(), key=lambda kv: kv[1])
    return (f"**With an engine profile** (`serving.engine: vllm | tensorrt-llm | sglang`; sourced memory rules, "
            f"batch caps, activation peak, batched prefill, all-reduce latency; bandwidth and FLOP/s efficiency "
            f"curves whose plateaus and the step overhead are fitted per GPU family), the planner predicts "
            f"**{len(done)} of {len(cases)} published points** with a MAPE of **{mape(done):.1f}%**, and "
            f"**{loso:.1f}% leave-one-source-out** (each publication predicted with efficiencies fitted on the "
            f"others); without one (the essays' convention) the same points are {plain:.1f}% off. The worst class "
            f"(engine, kind) out of sample is {worst[0][0]}, {worst[0][1]} at {worst[1]:.1f}%. By class (MAPE %):")


def family_table(cases: Sequence[Case]) -> str:
    """``engines.FITTED_EFFICIENCY`` with the curves, as the markdown table of docs/fidelity.md."""
    timing = [c for c in cases if not c.skip and not c.is_memory and c.engine]
    rows = []
    for fam, (bw, fl, over) in engines.FITTED_EFFICIENCY.items():
        mine = [c for c in timing if fam in (family_of(c), "all")]
        gpus = ", ".join(sorted({c.gpu for c in mine})) if fam != "all" else "families without points"
        rows.append([f"{fam} ({gpus})", f"{bw:.3f}" + (" (at its bound)" if bw >= 0.9995 else ""),
                     f"{fl:.3f}", f"{over * 1e3:.2f} ms", f"{len(mine)} ({len({source_of(c) for c in mine})})"])
    half = f"layers x {engines.LAYER_HALF_S * 1e6:.1f} us x peak bandwidth"
    return (_table(["family", "bandwidth plateau e_max", "FLOP/s plateau e_max", "step overhead",
                    "points (sources)"], rows, True)
            + f"\n\nCurves (every family): bandwidth `e(S) = e_max S / (S + {half})`, S the bytes a step moves per "
            f"GPU; FLOP/s `e(T) = e_max T / (T + {engines.FLOPS_HALF_TOKENS:g})`, T the tokens per pass.")


def published_blocks(cases: Sequence[Case]) -> dict[str, str]:
    """Generated block name -> its markdown."""
    return {"fidelity-summary": headline(cases) + "\n\n" + summary(cases),
            "fidelity-families": family_table(cases)}


def render(text: str, blocks: Mapping[str, str]) -> str:
    """``text`` with every generated block it holds replaced by its new content."""
    for name, body in blocks.items():
        start, end = _markers(name)
        while start in text:
            head, rest = text.split(start, 1)
            if end not in rest:
                raise ValueError(f"{name}: start marker without '{end}'")
            text = head + start + "\n" + body + "\n" + end + rest.split(end, 1)[1]
            break
    return text


def publish(cases: Sequence[Case], paths: Sequence[Path] = PUBLISHED) -> list[Path]:
    """Rewrite the generated blocks of ``paths``; returns the files changed."""
    blocks, changed = published_blocks(cases), []
    for path in paths:
        old = path.read_text(encoding="utf-8")
        new = render(old, blocks)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def as_json(cases: Sequence[Case]) -> str:
    return json.dumps([{"id": c.id, "metric": c.point["metric"], "measured": c.measured,
                        "predicted": None if c.skip else c.predicted, "skipped": c.skip or None,
                        "loo_gpu": None if math.isnan(c.loo_gpu) else c.loo_gpu,
                        "loo_all": None if math.isnan(c.loo_all) else c.loo_all} for c in cases], indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=MEASUREMENTS, help="measurements YAML")
    parser.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    parser.add_argument("--no-loo", action="store_true", help="skip the leave-one-out calibration")
    parser.add_argument("--summary", action="store_true", help="print only the MAPE summary table (markdown)")
    parser.add_argument("--fit", action="store_true",
                        help="print engines.FITTED_EFFICIENCY fitted on every source, and exit")
    parser.add_argument("--publish", action="store_true",
                        help="rewrite the generated fidelity blocks of README.md and docs/fidelity.md, and exit")
    parser.add_argument("--loo-variants", action="store_true",
                        help="also leave-one-out with fewer fitted factors (about a minute more)")
    args = parser.parse_args(argv)
    quick = args.fit or args.publish or args.summary  # what they print needs no per-GPU leave-one-out
    cases, per_gpu = run(args.file, loo=not args.no_loo and not quick)
    if (args.publish or args.summary) and not args.no_loo:
        leave_one_source_out(cases)
    if args.fit:
        sys.stdout.write(fitted_table(cases) + "\n")
        return 0
    if args.publish:
        for path in publish(cases):
            sys.stdout.write(f"rewrote {path.relative_to(ROOT)}\n")
        return 0
    if args.summary:
        sys.stdout.write(summary(cases) + "\n")
        return 0
    if args.format == "json":
        sys.stdout.write(as_json(cases) + "\n")
        return 0
    variants = loo_variants(cases) if args.loo_variants else ()
    sys.stdout.write(report(cases, per_gpu, args.format == "markdown", variants))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
