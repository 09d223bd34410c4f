"""A Scenario composes Model, Gpu, Serving, Workload and Slo; ``evaluate()`` returns Results.

Scenario files are YAML (safe loading only). A section may name a catalog entry
(``gpu: h100-sxm`` or ``gpu: {name: h100-sxm, count: 2}``) or give every number;
explicit keys override catalog values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from capacity.errors import ScenarioError, show
from capacity.fileio.yamlfile import MAX_SCENARIO_BYTES, parse_yaml, read_yaml
from capacity.formulas._numeric import finite_or_none
from capacity.formulas.load import peak_hour_rate_rps
from capacity.formulas.memory import is_moe, weight_bytes_read
from capacity.formulas.quantisation import SCHEME_FOR_DTYPE, SCHEMES, embedding_params
from capacity.formulas.quantisation import weight_bytes as scheme_weight_bytes
from capacity.inputs import engines
from capacity.inputs.accuracy import expected_error
from capacity.inputs.engines import ALIASES
from capacity.inputs.profiles import PROFILE_PLATEAUS, resolve_profile
from capacity.inputs.specs import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_BATCHED_TOKENS,
    DEFAULT_MEMORY_UTILIZATION,
    FLEET_FIELDS,
    SERVING_FIELDS,
    SLO_FIELDS,
    WORKLOAD_FIELDS,
    FleetPlan,
    Gpu,
    Model,
    Serving,
    Slo,
    Workload,
    check_section,
    gpu_from_mapping,
    load_problems,
    model_from_mapping,
    text,
)
from capacity.model.analysis import INPUT_DEFAULTS, INPUTS, RESULTS, analyse
from capacity.model.checks import input_problems

#: Serving keys for memory an engine holds outside the KV pool, per GPU (summed).
RESERVES = ("activation_memory", "cuda_graph_memory", "non_torch_memory")

TOP_LEVEL = {"name", "description", "model", "gpu", "serving", "workload", "slo", "units", "simulation", "workloads",
             "fleet", "sources", "pools"}


def declared_sources(data: Mapping[str, Any], problems: list[str] | None = None) -> dict[str, str]:
    """The optional ``sources`` section: field path -> where its value came from, when not the user who wrote the
    file ({"workload.shared_prefix_tokens": "preset: essay 000 worked example"}). Reports show it as the value's
    source; a malformed section is a problem (``problems``) and reads as empty."""
    found = data.get("sources")
    if found is None:
        return {}
    if not isinstance(found, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        if problems is not None:
            problems.append("sources must map field paths to text (workload.shared_prefix_tokens: preset: chat), "
                            f"got {show(found)}")
        return {}
    return dict(found)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything one sizing needs. ``units`` is how bytes are shown: 'GB' (decimal) or 'GiB' (binary)."""

    model: Model
    gpu: Gpu
    serving: Serving
    workload: Workload
    slo: Slo = field(default_factory=Slo)
    name: str = "scenario"
    units: str = "GB"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    fleet: FleetPlan = field(default_factory=FleetPlan)  # peak factor and headroom a fleet is sized with

    @classmethod
    def from_dict(cls, data: Any) -> Scenario:
        """Validate a scenario mapping; raise one ScenarioError listing every problem with its field path."""
        if not isinstance(data, Mapping):
            raise ScenarioError(f"a scenario must be a mapping with model, gpu, serving, workload; got {data!r:.80}")
        problems: list[str] = []
        if isinstance(data.get("gpu"), Mapping) and data["gpu"].get("profile"):
            problems.append(f"gpu.profile {data['gpu']['profile']!r} names a calibrated profile: read the scenario "
                            f"with load_scenario (or apply profiles.resolve_profile to the mapping) first")
        for key in data:
            if key not in TOP_LEVEL:
                problems.append(f"{key} is not a known scenario section; allowed: {', '.join(sorted(TOP_LEVEL))}")
        declared_sources(data, problems)
        classes = _workload_classes(data, problems)
        for required in ("model", "gpu", "workload"):
            if data.get(required) is None and not (required == "workload" and classes):
                problems.append(f"{required} is missing")
        model = model_from_mapping(data["model"], problems) if data.get("model") is not None else None
        s = check_section("serving", data.get("serving"), SERVING_FIELDS, problems=problems)
        engine_lines: list[str] = []
        engine, engine_note = engines.engine_choice(s.get("engine"))
        if engine != s.get("engine"):
            s = {k: v for k, v in s.items() if k != "engine"} | ({"engine": engine} if engine else {})
        if model is not None and s.get("engine"):
            model, engine_lines = _engine_model(model, data["model"], s["engine"], s.get("engine_version"))
        weight_dtype = (model.quantization or model.weight_dtype) if model else "fp16"
        gpu = gpu_from_mapping(data["gpu"], weight_dtype, problems) if data.get("gpu") is not None else None
        w = check_section("workload", data.get("workload"), WORKLOAD_FIELDS, problems=problems)
        if classes:  # a mix: the single-shape results use its mean shape (capacity/model/mix.py)
            from capacity.model.mix import mean_shape

            w = {**mean_shape(classes), **w}
        problems += load_problems(w)
        o = check_section("slo", data.get("slo"), SLO_FIELDS, problems=problems)
        f = check_section("fleet", data.get("fleet"), FLEET_FIELDS, problems=problems)
        name = data.get("name", "scenario")
        units = str(data.get("units", "GB"))
        if units not in ("GB", "GiB"):
            problems.append(f"units must be GB or GiB, got {units!r}")
        for key in ("prompt_tokens", "output_tokens"):
            if data.get("workload") is not None and key not in w and f"workload.{key}" not in " ".join(problems):
                problems.append(f"workload.{key} is missing")
        if problems:
            raise ScenarioError(*problems)
        assert model is not None and gpu is not None
        e: dict[str, Any] = {}  # what the engine profile supplies for the keys the scenario leaves out
        gpu = _moe_layout(gpu, s, model)
        if s.get("engine"):
            gpu, e, lines = _engine_serving(s, data, model, gpu, w)
            engine_lines += lines
        serving = Serving(memory_utilization=s.get("memory_utilization",
                                                   e.get("memory_utilization", DEFAULT_MEMORY_UTILIZATION)),
                          block_size=s.get("block_size", e.get("block_size", DEFAULT_BLOCK_SIZE)),
                          max_model_len=s.get("max_model_len", model.max_position_embeddings),
                          step_overhead_s=s.get("step_overhead", e.get("step_overhead_s", 0.0)),
                          max_num_seqs=s.get("max_num_seqs", e.get("max_num_seqs")),
                          reserved_bytes=sum(s.get(k, 0.0) for k in RESERVES) + e.get("activation_bytes", 0.0),
                          max_batched_tokens=s.get("max_batched_tokens",
                                                   e.get("max_batched_tokens", DEFAULT_MAX_BATCHED_TOKENS)),
                          kv_transfer_bandwidth=s.get("kv_transfer_bandwidth"), engine=s.get("engine"),
                          engine_version=s.get("engine_version"),
                          kv_free_fraction=s.get("kv_cache_free_gpu_memory_fraction",
                                                 e.get("kv_cache_free_gpu_memory_fraction", 0.0)),
                          engine_defaults=tuple(engine_lines), batched_prefill=bool(e.get("batched_prefill")),
                          kv_on_demand=bool(e.get("kv_on_demand")),
                          attention_arithmetic=bool(e.get("attention_arithmetic")),
                          engine_note=engine_note, speculative=s.get("speculative"),
                          request_latency_s=s.get("request_latency", e.get("request_latency_s", 0.0)),
                          front_end=s.get("front_end", engines.DEFAULT_FRONT_END))
        rate = w.get("arrival_rate")
        if w.get("daily_users"):  # users a day, converted to the busiest hour's arrival rate
            rate = float(peak_hour_rate_rps(w["daily_users"], w["requests_per_user_per_day"], w["peak_hour_share"]))
        workload = Workload(prompt_tokens=w["prompt_tokens"], output_tokens=w["output_tokens"],
                            shared_prefix_tokens=w.get("shared_prefix_tokens", 0), arrival_rate=rate,
                            concurrency=w.get("concurrency"), think_time_s=w.get("think_time", 0.0),
                            clustering=w.get("clustering", e.get("clustering", 0.0)),
                            daily_users=w.get("daily_users"),
                            requests_per_user_per_day=w.get("requests_per_user_per_day"),
                            peak_hour_share=w.get("peak_hour_share"))
        scenario = cls(model=model, gpu=gpu, serving=serving, workload=workload,
                       slo=Slo(tpot_s=o.get("tpot"), ttft_s=o.get("ttft"), percentile=o.get("percentile")),
                       name=text(name, "name"), units=units,
                       raw=dict(data), fleet=FleetPlan(**f))
        scenario.check()
        if data.get("pools") is not None:  # each pool must be a scenario of its own (capacity/split_pools.py)
            from capacity.model.split_pools import pool_scenarios

            pool_scenarios(data)
        return scenario

    def check(self) -> None:
        """Cross-field checks: what no engine would accept for this model, GPU and workload (``checks``)."""
        problems = input_problems(self.inputs(), self.model.attention_heads or 0)
        if problems:
            raise ScenarioError(*problems[0])

    def inputs(self) -> dict[str, float]:
        """The flat inputs of ``analysis.INPUTS`` in base units; ``inf`` marks an unset option."""
        m, g, s, w, o = self.model, self.gpu, self.serving, self.workload, self.slo
        inf = math.inf
        return {
            "layers": m.layers, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
            "kv_bytes_per_value": m.kv_bytes_per_value, "params": m.params, "weight_bytes": m.weight_bytes,
            "gpu_memory_bytes": g.memory_bytes, "bandwidth": g.effective_bandwidth, "flops": g.effective_flops,
            "gpu_count": g.count, "price_per_hour": g.price_per_hour if g.price_per_hour is not None else math.nan,
            "memory_utilization": s.memory_utilization, "block_size": s.block_size,
            "max_model_len": s.max_model_len if s.max_model_len is not None else w.tokens_per_request,
            "step_overhead_s": s.step_overhead_s,
            "max_num_seqs": s.max_num_seqs if s.max_num_seqs is not None else inf,
            "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
            "shared_prefix_tokens": w.shared_prefix_tokens,
            "arrival_rate": w.arrival_rate if w.arrival_rate else 0.0,
            "concurrency": w.concurrency if w.concurrency else 0.0, "think_time_s": w.think_time_s,
            "clustering": w.clustering, "request_latency_s": s.request_latency_s,
            "tpot_slo_s": o.tpot_s if o.tpot_s is not None else inf,
            "ttft_slo_s": o.ttft_s if o.ttft_s is not None else inf,
            "kv_latent_dim": m.kv_latent_dim,
            "sliding_window": m.sliding_window if m.sliding_window else inf,
            "local_layer_fraction": m.local_layer_fraction,
            "active_params": m.active_params if m.active_params is not None else m.params,
            "experts": m.experts, "experts_per_token": m.experts_per_token,
            "pipeline_parallel": g.pipeline_parallel, "hidden_size": m.hidden_size or 0,
            # Vendors state interconnect bandwidth both ways together; a ring all-reduce sends one way.
            "interconnect_bandwidth": g.interconnect_bandwidth / 2 if g.interconnect_bandwidth else inf,
            "allreduce_latency_s": g.allreduce_latency_s, "reserved_bytes": s.reserved_bytes,
            "max_batched_tokens": s.max_batched_tokens,
            "kv_transfer_bandwidth": s.kv_transfer_bandwidth if s.kv_transfer_bandwidth else inf,
            "replicas": g.replicas, "kv_free_fraction": s.kv_free_fraction,
            "batched_prefill": float(s.batched_prefill), "kv_on_demand": float(s.kv_on_demand),
            "bandwidth_half_bytes": g.bandwidth_half_bytes, "flops_half_tokens": g.flops_half_tokens,
            "attention_data_parallel": g.attention_data_parallel, "expert_parallel": g.expert_parallel,
            "expert_load_imbalance": g.expert_load_imbalance,
            "moe_layers": m.moe_layers if m.moe_layers else math.nan,
            "transformer_layers": m.transformer_layers if m.transformer_layers else math.nan,
            "nvlink_domain": g.nvlink_domain or inf, "network_bandwidth": g.network_bandwidth or inf,
            **speculative_inputs(s.speculative, m.transformer_layers or m.layers, s.step_overhead_s),
            "board_power_watts": g.tdp_watts if g.tdp_watts else math.nan,
            "energy_price_per_kwh": g.energy_price_per_kwh if g.energy_price_per_kwh is not None else math.nan,
            "pue": g.pue,
            "attention_dim": m.attention_width if s.attention_arithmetic else 0.0,
            "attention_flops": g.effective_attention_flops,
        }

    def evaluate(self) -> Results:
        """Run the analytic model on this scenario."""
        values = analyse(self.inputs())
        return Results(self, {key: _scalar(v) for key, v in values.items()})

    def with_changes(self, **sections: Mapping[str, Any]) -> Scenario:
        """A copy with some dataclass fields replaced, e.g. ``with_changes(workload={'prompt_tokens': 2000})``."""
        parts = {name: replace(getattr(self, name), **changes) for name, changes in sections.items()}
        new = replace(self, **parts)
        new.check()
        return new


def speculative_inputs(spec: Mapping[str, Any] | None, layers: int, step_overhead_s: float) -> dict[str, float]:
    """The flat ``spec_*`` inputs of a validated ``serving.speculative`` (``inputs.speculative``); their defaults
    (no speculation) without one.

    eagle/mtp: a drafter pass is ``draft_layers / layers`` of the target's (``layers``: every layer, a hybrid's too;
    one decoder layer by default), no fixed cost of its own; draft: the model's weights and parameters, and the
    engine's per-pass overhead; ngram: nothing on the GPU."""
    if not spec:
        return {key: INPUT_DEFAULTS[key] for key in INPUTS if key.startswith("spec_")}
    method = spec["method"]
    return {"spec_draft_tokens": float(spec["draft_tokens"]), "spec_tokens_per_step": spec["expected_tokens"],
            "spec_verify_tokens": spec["verify_tokens"],
            "spec_draft_fraction": spec["draft_layers"] / layers if method in ("eagle", "mtp") else 0.0,
            "spec_draft_weight_bytes": spec["draft_weights"],
            "spec_draft_params": spec.get("draft_params", 0.0) if method == "draft" else 0.0,
            # gamma passes of o_d plus the iteration's own o_v: gamma (o_d + o_v / gamma)
            "spec_draft_overhead_s": spec.get("draft_overhead", step_overhead_s if method == "draft" else 0.0)
            + spec.get("verify_overhead", 0.0) / spec["draft_tokens"]}


def _moe_layout(gpu: Gpu, s: Mapping[str, Any], model: Model) -> Gpu:
    """The GPU layout with the serving section's MoE parallelism: ``attention_data_parallel`` ranks of gpu.count
    GPUs, ``expert_parallel`` GPUs for the routed experts (``moe_tensor_parallel``, where given, must be the rest:
    moe_tp x ep = tp x dp), ``expert_load_imbalance``. ScenarioError where the sizes do not compose."""
    dp, ep = s.get("attention_data_parallel", 1), s.get("expert_parallel", 1)
    stage = gpu.count * dp
    if "moe_tensor_parallel" in s and s["moe_tensor_parallel"] * ep != stage:
        raise ScenarioError(f"serving.moe_tensor_parallel ({s['moe_tensor_parallel']}) x serving.expert_parallel "
                            f"({ep}) must equal the GPUs of a stage, gpu.count x serving.attention_data_parallel "
                            f"= {stage}")
    if dp == 1 and ep == 1 and "expert_load_imbalance" not in s:
        return gpu
    return replace(gpu, attention_data_parallel=dp, expert_parallel=ep,
                   expert_load_imbalance=s.get("expert_load_imbalance", 1.0))


def _engine_model(model: Model, raw: Any, engine: str, version: str | None) -> tuple[Model, list[str]]:
    """The model as the engine loads it: a plain weight_dtype read as its quantisation scheme (16-bit embeddings
    and lm_head) unless the scenario states weights or a scheme; TensorRT-LLM's FP8 KV cache for FP8 weights."""
    user = raw if isinstance(raw, Mapping) else {}
    lines: list[str] = []
    name = f"{engine}{' ' + version if version else ''}"
    if model.quantization is None and "weights" not in user and model.weight_dtype in SCHEME_FOR_DTYPE:
        scheme = SCHEMES[SCHEME_FOR_DTYPE[model.weight_dtype]]
        sixteen = (embedding_params(model.vocab_size, model.hidden_size, model.tie_word_embeddings)
                   if model.vocab_size and model.hidden_size else 0.0)
        weights = float(scheme_weight_bytes(model.params, scheme.bytes_per_weight, sixteen))
        if scheme.key not in ("bf16", "fp16") or sixteen:
            if scheme.key not in ("bf16", "fp16"):
                lines.append(f"{name}: {model.weight_dtype} weights read as the {scheme.key} scheme "
                             f"({scheme.bytes_per_weight:.4g} B per weight, embeddings and lm_head in 16 bit: "
                             f"{weights / 1e9:.2f} GB)")
            model = replace(model, weight_bytes=weights, quantization=scheme.key)
    if (ALIASES.get(engine, engine) == "tensorrt-llm" and "kv_dtype" not in user
            and (model.quantization or model.weight_dtype) in ("fp8",) and model.kv_dtype not in ("fp8", "int8")):
        model = replace(model, kv_dtype="fp8")
        lines.append(f"{name}: FP8 weights with an FP8 KV cache (TensorRT-LLM sets the KV cache to FP8 with FP8 "
                     f"quantization)")
    return model, lines


def _engine_serving(s: Mapping[str, Any], data: Mapping[str, Any], model: Model, gpu: Gpu,
                    w: Mapping[str, Any]) -> tuple[Gpu, dict[str, Any], list[str]]:
    """The GPU with the engine's fitted efficiencies and all-reduce latency, and the serving values the engine
    profile supplies for the keys the scenario leaves out (``engines.apply``)."""
    gpu_keys = data["gpu"] if isinstance(data["gpu"], Mapping) else {}
    explicit = not gpu.source or gpu.source == "user" or any(
        k in gpu_keys for k in ("bandwidth", "flops", "bandwidth_efficiency", "flops_efficiency", "profile"))
    # A calibrated profile fitted under the engine's curves gives plateaus: the curves stay (profiles.apply_profile).
    plateaus = str(gpu_keys.get("efficiency_source", "")).startswith(PROFILE_PLATEAUS)
    given = {**s, **({"allreduce_latency": 1} if "allreduce_latency" in gpu_keys else {}),
             **({"_explicit_efficiency": True} if explicit else {}),
             **({"_plateaus_given": True} if plateaus else {})}
    max_len = s.get("max_model_len", model.max_position_embeddings) or (w["prompt_tokens"] + w["output_tokens"])
    e, lines = engines.apply(given, s["engine"], s.get("engine_version"), tp=gpu.count,
                             gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, max_model_len=max_len,
                             hidden_size=model.hidden_size, intermediate_size=model.intermediate_size,
                             peak_bandwidth=gpu.bandwidth, expert_parallel=gpu.expert_parallel,
                             closed_loop=bool(w.get("concurrency")) and not w.get("think_time")
                             and "clustering" not in w,
                             moe=bool(is_moe(model.experts, model.experts_per_token)))
    if "allreduce_latency_s" in e:
        gpu = replace(gpu, allreduce_latency_s=e["allreduce_latency_s"])
    if "bandwidth_efficiency" in e:  # fitted for the GPU's family (engines.FITTED_EFFICIENCY)
        gpu = replace(gpu, bandwidth_efficiency=e["bandwidth_efficiency"], flops_efficiency=e["flops_efficiency"])
    elif plateaus and "curve_plateaus" in e:  # a profile's plateaus; the family's where it identified none
        gpu = replace(gpu, **{k: v for k, v in zip(("bandwidth_efficiency", "flops_efficiency"), e["curve_plateaus"],
                                                   strict=True) if k not in gpu_keys})
    if "bandwidth_half_bytes" in e:  # the efficiency curves (engines.efficiency_curves)
        tp, pp = gpu.count, gpu.pipeline_parallel
        active = model.active_params if model.active_params is not None else model.params
        read = float(weight_bytes_read(model.weight_bytes, model.params, active, model.experts,
                                       model.experts_per_token, 1.0)) / tp
        half_tokens = float(engines.small_pass_half_tokens(
            e["flops_half_tokens"], read, (model.transformer_layers or model.layers) * e["bandwidth_half_bytes"],
            active / (tp * pp),
            e["curve_plateaus"][0] * gpu.bandwidth, e["curve_plateaus"][1] * gpu.flops))
        if half_tokens < e["flops_half_tokens"]:
            lines.append(f"{s['engine']}: FLOP/s curve's half point {half_tokens:.1f} tokens, not "
                         f"{e['flops_half_tokens']:g}: a pass is not compute-bound below the weight read "
                         f"(engines.small_pass_half_tokens)")
        gpu = replace(gpu, bandwidth_half_bytes=e["bandwidth_half_bytes"], flops_half_tokens=half_tokens)
    return gpu, e, lines


def _workload_classes(data: Mapping[str, Any], problems: list[str]) -> tuple:
    """The ``workloads:`` classes of a scenario mapping (empty without one); problems appended, not raised."""
    if data.get("workloads") is None:
        return ()
    from capacity.model.mix import parse_classes

    try:
        return parse_classes(data["workloads"], data.get("slo") if isinstance(data.get("slo"), Mapping) else None)
    except ScenarioError as exc:
        problems.extend(exc.problems)
        return ()


def evaluate_many(scenarios: Sequence[Scenario]) -> list[Results]:
    """``Scenario.evaluate()`` of each scenario from one vectorised ``analyse`` call: their ``inputs()`` stacked
    into one float array per input (``analysis.complete_inputs`` reads every input as a float either way), the
    results split back per scenario. Each equals the scalar evaluation bit for bit (``analyse`` evaluates every
    row as it would alone; tests/model/test_scenario.py)."""
    if not scenarios:
        return []
    rows = [s.inputs() for s in scenarios]
    values = analyse({key: np.array([row[key] for row in rows], dtype=float) for key in rows[0]})
    columns = {key: v.tolist() for key, v in values.items()}  # Python floats and str, as ``_scalar`` gives
    return [Results(s, {key: (c[i] if isinstance(c[i], str) else float(c[i])) for key, c in columns.items()})
            for i, s in enumerate(scenarios)]


def _scalar(value: np.ndarray) -> float | str:
    item = np.asarray(value).item()
    return item if isinstance(item, str) else float(item)


@dataclass(frozen=True, slots=True)
class Results:
    """Every quantity of ``analysis.RESULTS`` for one scenario, in base units."""

    scenario: Scenario
    values: dict[str, float | str]

    def __getitem__(self, key: str) -> float | str:
        return self.values[key]

    def __getattr__(self, key: str) -> float | str:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_dict(self) -> dict[str, float | int | str | None]:
        """JSON-safe results: counts as ints, infinite or undefined values as None (see ``notes()``)."""
        out: dict[str, float | int | str | None] = {}
        for key, value in self.values.items():
            if isinstance(value, str):
                out[key] = value
            elif finite_or_none(value) is None:
                out[key] = None
            elif RESULTS[key][0] in ("blocks", "requests") and key != "goodput_in_flight":
                out[key] = int(value)
            else:
                out[key] = value
        out["notes"] = self.notes()
        return out

    def efficiency_line(self) -> str:
        """The efficiencies the prediction used on the engine profile's curves ("" without curves)."""
        g, v = self.scenario.gpu, self.values
        if not (g.bandwidth_half_bytes or g.flops_half_tokens) or not v["batch_max"] > 0:
            return ""
        step_bytes, bw, fl_decode, fl_prefill = engines.efficiencies_used(
            g.bandwidth_efficiency, g.flops_efficiency, g.bandwidth_half_bytes, g.flops_half_tokens,
            self.scenario.model.transformer_layers or self.scenario.model.layers, float(v["decode_memory_s"]),
            g.effective_bandwidth, float(v["batch_max"]),
            float(v["prefill_tokens"]))
        return (f"efficiency used (engine curves): bandwidth {bw:.2f} of peak at the decode step "
                f"({step_bytes / 1e9:,.2f} GB per GPU, plateau {g.bandwidth_efficiency:.3f}); FLOP/s {fl_decode:.2f} "
                f"at the decode step ({v['batch_max']:,.0f} tokens) and {fl_prefill:.2f} at the prefill "
                f"({v['prefill_tokens']:,.0f} tokens), plateau {g.flops_efficiency:.3f}")

    def notes(self) -> list[str]:
        """Plain-language reasons for every result that is zero, undefined or limited."""
        v, notes = self.values, []
        s = self.scenario.serving
        if s.engine_note:
            notes.append(s.engine_note)
        if s.engine_defaults:
            notes.append("engine defaults applied: " + "; ".join(s.engine_defaults))
        line = self.efficiency_line()
        if line:
            notes.append(line)
        if v["batch_max"] <= 0:
            notes.append("no request fits in the KV pool: nothing can be served")
        elif (s.max_num_seqs is not None and s.max_num_seqs > v["max_requests_shared_prefix"]
              and not any(line.split(": ", 1)[-1].startswith("max_num_seqs") for line in s.engine_defaults)):
            notes.append(f"serving.max_num_seqs ({s.max_num_seqs}) does not fit in the KV pool: only "
                         f"{v['max_requests_shared_prefix']:,.0f} sequences of this request shape fit, and throughput "
                         f"uses that batch")
        limit = v["goodput_limit"]
        if v["goodput_rps"] <= 0 and limit == "tpot":
            alone = 1.0 / v["single_stream_tokens_per_s"] + self.scenario.serving.step_overhead_s
            notes.append(f"goodput is 0: no load meets the TPOT promise of {self.scenario.slo.tpot_s * 1e3:g} ms; "
                         f"one sequence alone already needs {alone * 1e3:,.1f} ms per token")
        elif v["goodput_rps"] <= 0 and limit == "ttft":
            notes.append(f"goodput is 0: the prefill alone ({v['prefill_s'] * 1e3:,.1f} ms) exceeds the TTFT "
                         f"promise of {self.scenario.slo.ttft_s * 1e3:g} ms")
        if self.scenario.gpu.price_per_hour is None:
            notes.append("cost is not computed: no gpu.price_per_hour")
        elif not math.isfinite(v["cost_per_million_tokens"]):
            notes.append("cost per million tokens is undefined: the goodput is 0")
        error = expected_error(s.engine, self.scenario.gpu.name)  # the answer's class in the measured table
        if error is not None:
            notes.append(error.sentence())
        w = self.scenario.workload
        if w.daily_users:
            notes.append(f"load: {w.daily_users:,.0f} daily users x {w.requests_per_user_per_day:,.3g} requests a day, "
                         f"{w.peak_hour_share:.0%} of them in the peak hour = {w.arrival_rate:,.3g} requests/s "
                         f"(the arrival rate sized for)")
        if self.scenario.workload.concurrency:
            if v["closed_loop_slot_wait_s"] > 0:
                notes.append(f"{self.scenario.workload.concurrency:,} users in flight are more than one replica runs "
                             f"at once: each waits {v['closed_loop_slot_wait_s']:,.3g} s on average for a slot")
        elif not self.scenario.workload.arrival_rate:
            notes.append("no workload.arrival_rate: latencies at load are not computed")
        elif not math.isfinite(v["tpot_at_load_s"]):
            notes.append("the arrival rate exceeds what the GPU can decode: the queue grows without bound")
        return notes


def read_scenario_mapping(path: str | Path, profiles: str | Path | None = None) -> Any:
    """A scenario file as a mapping, with the calibrated profile it names in ``gpu.profile`` applied (the profile
    catalog ``profiles``, default ``profiles.default_path()``): what ``Scenario.from_dict`` reads."""
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        return data
    return resolve_profile(data, profiles)


def load_scenario(path: str | Path, profiles: str | Path | None = None) -> Scenario:
    """Read and validate a scenario YAML file (safe loading, size-limited; ``read_scenario_mapping``)."""
    return Scenario.from_dict(read_scenario_mapping(path, profiles))


__all__ = ["INPUTS", "RESULTS", "MAX_SCENARIO_BYTES", "Results", "Scenario", "evaluate_many", "load_scenario",
           "parse_yaml", "read_scenario_mapping", "read_yaml"]
