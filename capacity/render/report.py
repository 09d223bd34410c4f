"""One sizing report, rendered as JSON or CSV (``xlsx.py`` renders the same report as a workbook).

A ``Report`` holds the scenario name, every flat input of ``analysis.INPUTS`` with its
value in base units, unit and source (a catalog citation, "user", the scenario's own
``sources`` entry such as "preset: chat", "engine profile: vllm: ...", "default" or
"derived"), every result of ``analysis.RESULTS`` with value and unit, the binding
resource, the assumptions, the tool version and the date. Values stay in base units
(bytes, seconds, requests/s) in every export; ``units`` (GB or GiB) only says how the
app and table show bytes, so no export can confuse GB with GiB.
"""

from __future__ import annotations

import copy
import csv
import datetime as _dt
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from capacity.errors import ScenarioError
from capacity.fileio.csv_safe import neutralise
from capacity.formulas._numeric import finite_or_none
from capacity.inputs import catalog
from capacity.inputs.engines import IDEAL
from capacity.inputs.specs import (
    BYTES_PER_WEIGHT,
    GPU_FIELDS,
    MODEL_FIELDS,
    SERVING_FIELDS,
    SLO_FIELDS,
    WORKLOAD_FIELDS,
)
from capacity.model.analysis import INPUT_DEFAULTS, INPUTS, RESULTS
from capacity.model.scenario import Results, Scenario, declared_sources
from capacity.planning.sizing import SIZING_RESULTS, Sizing, size
from capacity.render.formatting import human_number, human_unit_of

Value = float | str | None


@dataclass(frozen=True, slots=True)
class Quantity:
    """One input or result: ``value`` in base units (None: not set or undefined), its unit and where it came from."""

    key: str
    value: Value
    unit: str
    meaning: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a sizing report shows; ``results`` keeps the library's Results for exact cached values."""

    name: str
    inputs: tuple[Quantity, ...]
    outputs: tuple[Quantity, ...]
    binding: dict[str, str]
    assumptions: tuple[str, ...]
    notes: tuple[str, ...]
    tool_version: str
    date: str
    results: Results
    sizing: Sizing | None = None  # the one answer (``sizing.size``); its ``sizing_*`` values are among ``outputs``

    @property
    def scenario(self) -> Scenario:
        return self.results.scenario


# --- building the report -------------------------------------------------------------------------------------

#: Flat input -> (scenario section, YAML key) it is read from.
INPUT_PATHS: dict[str, tuple[str, str]] = {
    "layers": ("model", "layers"), "kv_heads": ("model", "kv_heads"), "head_dim": ("model", "head_dim"),
    "kv_bytes_per_value": ("model", "kv_dtype"), "params": ("model", "params"), "weight_bytes": ("model", "weights"),
    "gpu_memory_bytes": ("gpu", "memory"), "bandwidth": ("gpu", "bandwidth"), "flops": ("gpu", "flops"),
    "gpu_count": ("gpu", "count"), "price_per_hour": ("gpu", "price_per_hour"),
    "memory_utilization": ("serving", "memory_utilization"), "block_size": ("serving", "block_size"),
    "max_model_len": ("serving", "max_model_len"), "step_overhead_s": ("serving", "step_overhead"),
    "max_num_seqs": ("serving", "max_num_seqs"), "prompt_tokens": ("workload", "prompt_tokens"),
    "output_tokens": ("workload", "output_tokens"), "shared_prefix_tokens": ("workload", "shared_prefix_tokens"),
    "arrival_rate": ("workload", "arrival_rate"), "tpot_slo_s": ("slo", "tpot"), "ttft_slo_s": ("slo", "ttft"),
    "concurrency": ("workload", "concurrency"), "think_time_s": ("workload", "think_time"),
    "sliding_window": ("model", "sliding_window"), "experts": ("model", "num_experts"),
    "experts_per_token": ("model", "experts_per_token"), "active_params": ("model", "active_params"),
    "hidden_size": ("model", "hidden_size"), "interconnect_bandwidth": ("gpu", "interconnect_bandwidth"),
    "allreduce_latency_s": ("gpu", "allreduce_latency"), "pipeline_parallel": ("gpu", "pipeline_parallel"),
    "replicas": ("gpu", "replicas"),
    "attention_data_parallel": ("serving", "attention_data_parallel"),
    "expert_parallel": ("serving", "expert_parallel"),
    "expert_load_imbalance": ("serving", "expert_load_imbalance"), "nvlink_domain": ("gpu", "nvlink_domain"),
    "network_bandwidth": ("gpu", "network_bandwidth"),
    "reserved_bytes": ("serving", "activation_memory|cuda_graph_memory|non_torch_memory"),  # their sum
}


def flat_inputs(scenario: Scenario) -> dict[str, float]:
    """Every ``analysis.INPUTS`` value of the scenario in base units; optional ones it omits take their defaults."""
    values = scenario.inputs()
    return {key: float(values.get(key, INPUT_DEFAULTS.get(key, math.nan))) for key in INPUTS}


def unset_inputs(scenario: Scenario) -> set[str]:
    """Inputs the scenario leaves unset: non-finite in the library (inf: no limit, NaN: no value) and an arrival
    rate of 0. Every export writes them blank; the workbook's formulas read a blank cell the same way."""
    unset = {key for key, value in flat_inputs(scenario).items() if not math.isfinite(value)}
    return (unset | ({"arrival_rate"} if not scenario.workload.arrival_rate else set())
            | ({"concurrency", "think_time_s"} if not scenario.workload.concurrency else set()))


#: Section of the inputs derived from several scenario keys (MLA latent, share of local layers), for their source.
_SECTION_OF_NEW = {"kv_latent_dim": "model", "local_layer_fraction": "model"}


def _given(raw: Mapping[str, Any], section: str, key: str) -> bool:
    block = raw.get(section)
    block = {"name": block} if isinstance(block, str) else block
    return isinstance(block, Mapping) and any(block.get(k) is not None for k in key.split("|"))


def _declared(raw: Mapping[str, Any], section: str, key: str) -> str | None:
    """The scenario's own ``sources`` entry for a value it gives (a preset's, a share link's), if any."""
    declared = declared_sources(raw)
    return next((declared[f"{section}.{k}"] for k in key.split("|") if f"{section}.{k}" in declared), None)


def input_sources(scenario: Scenario) -> dict[str, str]:
    """Where each flat input came from: "user" (or the scenario's ``sources`` entry for it, such as "preset: chat"),
    a catalog citation, "default", "derived: ..." or "not set"."""
    raw, m, g = scenario.raw, scenario.model, scenario.gpu
    unset, values = unset_inputs(scenario), flat_inputs(scenario)
    sources: dict[str, str] = {}
    for key in INPUTS:
        section, yaml_key = INPUT_PATHS.get(key) or (_SECTION_OF_NEW.get(key, "serving"), key)
        citation = {"model": m.source, "gpu": g.source}.get(section, "user")
        if key in unset:
            sources[key] = "not set"
        elif not raw or _given(raw, section, yaml_key):
            sources[key] = _declared(raw, section, yaml_key) or "user"
        elif key == "weight_bytes":
            sources[key] = f"derived: params x {BYTES_PER_WEIGHT[m.weight_dtype]:g} B per weight ({m.weight_dtype})"
        elif key == "max_model_len":
            sources[key] = (f"model max_position_embeddings ({m.source})" if m.max_position_embeddings
                            else "default: prompt + output tokens")
        elif key == "price_per_hour":
            sources[key] = _price_source(g.name) or citation
        elif _engine_line(scenario, key):
            sources[key] = f"engine profile: {_engine_line(scenario, key)}"
        elif key in INPUT_DEFAULTS and values[key] == INPUT_DEFAULTS[key]:
            sources[key] = "default"  # an extension input left at the value that changes nothing
        elif citation != "user":
            sources[key] = citation
        else:
            sources[key] = "default"
    return sources


def _entry_source(scenario: Scenario, kind: str) -> str:
    """Where the model (or GPU) came from: its catalog citation, else the scenario's ``sources`` entry for its
    name or its own numbers (a preset's custom model), else "user"."""
    source = scenario.model.source if kind == "model" else scenario.gpu.source
    if source != "user":
        return source
    return _declared(scenario.raw, kind, "name|layers" if kind == "model" else "name|memory") or source


#: Flat input -> how the engine profile's line for it begins (``engines.apply``), after "<engine>: ".
_ENGINE_LINES = {"memory_utilization": ("gpu_memory_utilization", "mem_fraction_static", "KV pool ="),
                 "max_num_seqs": ("max_num_seqs",), "block_size": ("block size",),
                 "step_overhead_s": ("step overhead",), "reserved_bytes": ("activation peak ",),
                 "allreduce_latency_s": ("all-reduce latency",)}


def _engine_line(scenario: Scenario, key: str) -> str | None:
    """The engine profile's line for a value it supplied ("vllm: max_num_seqs 1024"), or None."""
    for line in scenario.serving.engine_defaults:
        said = line.split(": ", 1)[-1]
        if said.startswith(_ENGINE_LINES.get(key, ())) and "not reserved" not in said:
            return line
    return None


def _price_source(gpu_name: str) -> str | None:
    try:
        found = catalog.gpu(gpu_name).get("price_source")
    except ScenarioError:
        return None
    return " ".join(str(found).split()) if found else None


def binding(results: Results) -> dict[str, str]:
    """What limits the sizing: ``resource`` (kv_memory, max_num_seqs, tpot_slo or ttft_slo) and a sentence.

    Below the ceiling a promise binds; at the ceiling the batch cap binds (throughput grows with the batch,
    since A t_step(B) / B falls with B), and ``decode_bound`` says which roofline term sets the step.
    """
    v = results.values
    goodput, batch, decode = str(v["goodput_limit"]), str(v["batch_limit"]), str(v["decode_bound"])
    resource = {"tpot": "tpot_slo", "ttft": "ttft_slo", "nothing_fits": "kv_memory"}.get(goodput, batch)
    if goodput == "nothing_fits":
        summary = "KV memory: no request fits in the pool"
    else:
        limit = {"tpot": "the TPOT promise", "ttft": "the TTFT promise", "capacity": "GPU capacity"}[goodput]
        cap = "KV memory" if batch == "kv_memory" else "serving.max_num_seqs"
        summary = (f"goodput {v['goodput_rps']:.3g} requests/s is set by {limit}; the batch is capped by {cap} at "
                   f"{v['batch_max']:,.0f}, where the decode step is {decode}-bound")
    return {"resource": resource, "goodput_limit": goodput, "batch_limit": batch, "decode_bound": decode,
            "summary": summary}


def _human(value: float, unit: str, binary: bool = False) -> str:
    """A base-unit value as a person reads it: 4.5e11 B/s -> "450 GB/s" (``formatting.to_human``)."""
    from capacity.render.formatting import to_human

    number, name = to_human(float(value), unit, binary)
    return f"{number:,.4g} {name}"


def _count(n: float, noun: str) -> str:
    """``1 replica``, ``2 replicas``: a count with its noun in the right number."""
    return f"{n:,.0f} {noun}{'' if n == 1 else 's'}"


def assumptions(scenario: Scenario) -> list[str]:
    """The modelling assumptions behind the numbers: units, overhead, efficiencies, cost model, price."""
    g, s = scenario.gpu, scenario.serving
    units = ("GiB (binary, 1 GiB = 2^30 B)" if scenario.units == "GiB" else "GB (decimal, 1 GB = 1e9 B)")
    binary = scenario.units == "GiB"
    out = [f"all values in base units (B, B/s, FLOP/s, s, requests/s); bytes are shown as {units}",
           f"fixed overhead of {s.step_overhead_s * 1e3:g} ms per forward pass (the step overhead)"]
    for figure, peak, eff, unit in (("bandwidth", g.bandwidth, g.bandwidth_efficiency, "B/s"),
                                    ("FLOP/s", g.flops, g.flops_efficiency, "FLOP/s")):
        if eff != 1.0:
            out.append(f"GPU {figure}: peak {_human(peak, unit)} x efficiency {eff:g} = {_human(peak * eff, unit)} "
                       f"effective ({'catalog defaults, gpu_catalog.yaml' if g.source != 'user' else 'user'})")
        else:
            out.append(f"GPU {figure} {_human(peak, unit)} is taken as effective (efficiency 1)")
    x = flat_inputs(scenario)
    out += ["roofline cost model: decode step = max(weights + KV reads / bandwidth, 2 N B / FLOP/s) + all-reduce "
            "+ overhead; prefill runs alone (no chunked prefill)",
            "goodput: exact solve of TPOT(λ) = t_step(λ A TPOT) / (1 - λ t_prefill) (closed form for dense models, "
            "a root solve for MoE); TTFT = the wait for the next batched prefill pass + that pass (a queue model "
            "validated against the simulator within 10% up to 80% of the ceiling; it reads low near the ceiling)",
            f"layout: {_count(g.count, 'tensor-parallel GPU')} x {_count(x.get('pipeline_parallel', 1), 'stage')} "
            f"per replica, {_count(x.get('replicas', 1), 'replica')}; weights, parameters and KV heads split "
            f"evenly; cost counts every GPU of a replica"]
    if g.count > 1 and math.isfinite(x.get("interconnect_bandwidth", math.inf)) and x.get("hidden_size", 0) > 0:
        out.append(f"all-reduce over {_human(x['interconnect_bandwidth'], 'B/s')} one way: the vendor's figure counts "
                   f"both directions and is halved")
    if x.get("reserved_bytes", 0) > 0:
        out.append(f"{_human(x['reserved_bytes'], 'B', binary)} per GPU held outside the KV pool (engine reserves)")
    if g.price_per_hour is not None:
        out.append(f"GPU price {g.price_per_hour:g} per GPU-hour is an assumption; replace it with your own")
    return out


def today_iso() -> str:
    """Today's date (UTC), ISO 8601: the report date."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def build_report(results: Results, date: str | None = None, sizing: Sizing | None = None) -> Report:
    """Compose the report of one evaluated scenario and its answer (``sizing``, computed when not given); ``date``
    (ISO) defaults to today (UTC)."""
    from capacity import __version__  # read at call time: the package sets it after importing its modules

    scenario = results.scenario
    values, unset, sources = flat_inputs(scenario), unset_inputs(scenario), input_sources(scenario)
    inputs = tuple(Quantity(key, None if key in unset else float(values[key]), unit, meaning, sources[key])
                   for key, (unit, meaning) in INPUTS.items())
    outputs = tuple(Quantity(key, results.values[key], unit, meaning) for key, (unit, meaning) in RESULTS.items()
                    if key in results.values)
    answer = sizing if sizing is not None else size(scenario, results)
    outputs += tuple(Quantity(key, ("yes" if value else "no") if isinstance(value, bool) else value, unit, meaning)
                     for (key, value), (unit, meaning) in zip(answer.to_dict().items(), SIZING_RESULTS.values(),
                                                              strict=True))
    return Report(name=scenario.name, inputs=inputs, outputs=outputs, binding=binding(results),
                  assumptions=tuple(assumptions(scenario)), notes=tuple(answer.notes()), tool_version=__version__,
                  date=date or today_iso(), results=results, sizing=answer)


# --- JSON: the scenario and every result, round-trips back into a Scenario ---------------------------------------

def _json_value(value: Value) -> float | int | str | None:
    if isinstance(value, str) or value is None:
        return value
    number = finite_or_none(value)
    if number is None:
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


#: Dataclass field -> scenario-file key where the two differ (the file says "80 GB", the dataclass holds bytes).
_FILE_KEYS = {"weight_bytes": "weights", "memory_bytes": "memory", "step_overhead_s": "step_overhead",
              "tpot_s": "tpot", "ttft_s": "ttft", "allreduce_latency_s": "allreduce_latency"}
_SECTION_FIELDS = {"model": MODEL_FIELDS, "gpu": GPU_FIELDS, "serving": SERVING_FIELDS,
                   "workload": WORKLOAD_FIELDS, "slo": SLO_FIELDS}


def scenario_mapping(scenario: Scenario) -> dict[str, Any]:
    """The scenario with every number explicit in base units; ``Scenario.from_dict`` reads it back unchanged.
    With an engine profile: the sections as the user wrote them (the profile derives the rest the same way).

    Each section lists every dataclass field the scenario file accepts under the same name (None as null, which
    keeps a catalog entry's value from filling the gap on the way back), plus the keys the user wrote that the
    dataclass holds in another form (e.g. ``activation_memory`` summed into ``reserved_bytes``). Other top-level
    sections pass through as written (tests/render/test_report.py reads every shipped scenario back from it).
    """
    data: dict[str, Any] = {"name": scenario.name, "units": scenario.units}
    if scenario.serving.engine:
        # An engine profile (named, or vLLM's by default) derives its values from what the user wrote, and says
        # which it applied: the sections as written read back to the same scenario, notes and curves included
        # (every number explicit would turn the profile's plateaus into given efficiencies).
        return {**data, **{k: copy.deepcopy(v) for k, v in scenario.raw.items() if k not in ("name", "units")}}
    for section, accepted in _SECTION_FIELDS.items():
        part = getattr(scenario, section)
        explicit = {_FILE_KEYS.get(f.name, f.name): getattr(part, f.name) for f in fields(part)
                    if _FILE_KEYS.get(f.name, f.name) in accepted}
        written = scenario.raw.get(section)
        written = {"name": written} if isinstance(written, str) else dict(written or {})
        data[section] = {**{k: v for k, v in written.items() if k not in explicit}, **explicit}
    data["serving"]["engine"] = IDEAL  # no engine profile is the essays' convention, which a file names as ideal
    for key, value in scenario.raw.items():
        if key not in data:
            data[key] = value
    return data


def to_json_dict(report: Report) -> dict[str, Any]:
    """Stable keys: ``name``, every result key at the top level (the ``evaluate --format json`` contract,
    docs/model.md), ``notes``, ``result_units``, ``inputs`` (value, unit, source), ``binding``, ``assumptions``,
    ``tool_version``, ``date`` and ``scenario`` (explicit, base units). Infinite or undefined values are null."""
    data: dict[str, Any] = {"name": report.name}
    data.update({q.key: _json_value(q.value) for q in report.outputs})
    if report.sizing is not None:  # the answer's own values: yes/no as JSON booleans
        data.update(report.sizing.to_dict())
    data["notes"] = list(report.notes)
    data["result_units"] = {q.key: q.unit for q in report.outputs}
    data["inputs"] = {q.key: {"value": _json_value(q.value), "unit": q.unit, "source": q.source}
                      for q in report.inputs}
    data["binding"] = dict(report.binding)
    data["assumptions"] = list(report.assumptions)
    data["tool_version"] = report.tool_version
    data["date"] = report.date
    data["scenario"] = scenario_mapping(report.scenario)
    return data


def to_json(report: Report) -> str:
    """The report as one indented JSON object (see ``to_json_dict``)."""
    return json.dumps(to_json_dict(report), indent=2, ensure_ascii=False, default=str) + "\n"


def scenario_from_report_json(data: str | bytes | Mapping[str, Any]) -> Scenario:
    """Read a report's JSON (text or parsed) back into the Scenario it describes."""
    if isinstance(data, (str, bytes)):
        from capacity.fileio.safe_load import parse_json

        data = parse_json(data, "report JSON")
    if not isinstance(data, Mapping) or not isinstance(data.get("scenario"), Mapping):
        raise ScenarioError("report JSON has no 'scenario' object; write it with capacity evaluate --format json")
    return Scenario.from_dict(dict(data["scenario"]))


# --- CSV: long format (section, quantity, value, unit, source) ---------------------------------------------------

CSV_COLUMNS = ("section", "quantity", "value", "unit", "source")


def csv_cell(value: Value) -> str | float | int:
    """A CSV cell: numbers stay numbers (exact repr), non-finite or missing become blank, text is neutralised."""
    if value is None:
        return ""
    if isinstance(value, str):
        return neutralise(value)
    number = finite_or_none(value)
    if number is None:
        return ""
    return int(number) if number.is_integer() and abs(number) < 2**53 else repr(number)


def csv_rows(report: Report) -> list[tuple[str, str, Value, str, str]]:
    """The report as long-format rows: (section, quantity, value, unit, source)."""
    s = report.scenario
    rows: list[tuple[str, str, Value, str, str]] = [
        ("report", "name", report.name, "", ""), ("report", "tool_version", report.tool_version, "", ""),
        ("report", "date", report.date, "", ""),
        ("report", "byte_units", s.units, "", "GiB = 2^30 B, GB = 1e9 B; values below are in B"),
        ("report", "model", s.model.name, "", _entry_source(s, "model")),
        ("report", "gpu", s.gpu.name, "", _entry_source(s, "gpu"))]
    rows += [("input", q.key, q.value, q.unit, q.source) for q in report.inputs]
    rows += [("result", q.key, q.value, q.unit, "") for q in report.outputs]
    rows += [("binding", key, value, "", "") for key, value in report.binding.items()]
    rows += [("assumption", str(i), text, "", "") for i, text in enumerate(report.assumptions, 1)]
    rows += [("note", str(i), text, "", "") for i, text in enumerate(report.notes, 1)]
    return rows


def human_rows(report: Report) -> list[tuple[str, str, Value, str, str]]:
    """``csv_rows`` in human units: bytes in GB or GiB (the scenario's ``units``), seconds in ms, B/s in GB/s,
    FLOP/s in TFLOP/s, each value rounded to 4 significant digits (whole numbers kept whole); the unit column
    says which. Per-token and per-value bytes stay in B."""
    binary = report.scenario.units == "GiB"
    out: list[tuple[str, str, Value, str, str]] = []
    for section, quantity, value, unit, source in csv_rows(report):
        if section == "report" and quantity == "byte_units":
            source = "GiB = 2^30 B, GB = 1e9 B; values below in human units (see the unit column), 4 digits"
        elif section in ("input", "result") and isinstance(value, float) and math.isfinite(value):
            name, factor = human_unit_of(quantity, unit, binary)
            value, unit = human_number(value / factor), name
        out.append((section, quantity, value, unit, source))
    return out


def to_csv(report: Report, units: str = "base") -> str:
    """The report as CSV, readable by pandas and Excel as is (UTF-8, header row, CRLF per RFC 4180).

    ``units``: "base" (B, s, B/s, full precision: for machines) or "human" (``human_rows``: for people)."""
    if units not in ("base", "human"):
        raise ScenarioError(f"units must be base or human, got {units!r}")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for section, quantity, value, unit, source in (csv_rows(report) if units == "base" else human_rows(report)):
        writer.writerow([section, neutralise(quantity), csv_cell(value), neutralise(unit), neutralise(source)])
    return buffer.getvalue()


def report_for(scenario_or_results: Scenario | Results, date: str | None = None) -> Report:
    """Convenience for the app and CLI: evaluate a Scenario if needed, then build its report."""
    results = (scenario_or_results.evaluate() if isinstance(scenario_or_results, Scenario)
               else scenario_or_results)
    return build_report(results, date)


__all__ = ["Quantity", "Report", "assumptions", "binding", "build_report", "csv_rows", "flat_inputs", "human_rows",
           "neutralise", "report_for", "scenario_from_report_json", "scenario_mapping", "to_csv", "to_json",
           "to_json_dict", "today_iso", "unset_inputs"]
