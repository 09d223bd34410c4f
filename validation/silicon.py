"""Predict the measured deployments of ``validation/silicon/silicon_train.csv`` and report the errors.

    python validation/silicon.py [--format text|markdown|json] [--publish] [--no-fit]

Each row (NVIDIA aiconfigurator's public silicon sample, Apache-2.0; attribution in validation/silicon/README.md)
becomes a scenario built from its own setup only: the catalog model named by its Hugging Face ``model_path``, the
catalog GPU named by ``system``, the engine and its version (``serving.engine``), the precision as a quantisation
scheme, tensor parallel as ``gpu.count``, ``isl``/``osl`` as the request shape. Expert parallel and attention data
parallel go in as ``serving.expert_parallel`` / ``attention_data_parallel`` / ``moe_tensor_parallel``: where the
planner refuses the scenario, the row is counted as *not expressible* with the planner's own reason, so a row
becomes expressible by itself once the planner takes its layout.

How each metric is predicted (``capacity.planning.calibration``, the library's own step model):

* aggregated row at concurrency C: the library's closed loop at ``workload.concurrency = C``, what ``capacity
  evaluate`` answers (``closed_loop_tpot_s``, ``closed_loop_ttft_s``: ``calibration._terms_for``); one user's TTFT is
  one prefill and the request latency.
* disaggregated row: TPOT is the decode pool's step at ``decode_batch_size`` on ``decode_tp_size`` GPUs (the
  prefills run on other GPUs); TTFT (prefill pool + KV transfer + queue) is not expressible.

Scores: MAPE of the predictions with the planner's defaults for the engine (what a user gets), and
leave-one-group-out (``--no-fit`` skips it): the general rules the engine profiles ship, refitted without the group
being predicted (a group being model x GPU x engine x precision): the step overhead per engine
(``silicon_overheads``), and for TTFT the closed loop's clustering share and the request latency per engine
(``silicon_ttft_rules``). ``--fit`` prints all three as the engine profiles hold them. Nothing measured is changed.
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
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from capacity import Scenario, ScenarioError  # noqa: E402
from capacity.formulas.memory import is_moe  # noqa: E402
from capacity.formulas.quantisation import SCHEMES  # noqa: E402
from capacity.inputs import catalog, engines  # noqa: E402
from capacity.planning.calibration import Factors, Observation, fit_factors, predict  # noqa: E402
from capacity.planning.median_fit import median_overhead, weighted_median  # noqa: E402
from validation import silicon_expressible  # noqa: E402

DATA = Path(__file__).resolve().parent / "silicon" / "silicon_train.csv"
FIDELITY = ROOT / "docs" / "fidelity.md"

#: The file's ``backend`` -> the planner's ``serving.engine``.
ENGINE_OF = {"vllm": "vllm", "trtllm": "tensorrt-llm", "sglang": "sglang"}

#: ``gemm_quant_mode`` -> the planner's quantisation scheme: the data set's convention (``silicon_expressible``;
#: ``int4_wo`` is TensorRT-LLM's int4 weight-only GEMM, W4A16 in groups of 32).
SCHEME_OF = {**silicon_expressible.QUANT_SCHEME}

#: Suffixes of a Hugging Face repository name that name a checkpoint of a catalog model (not another model).
CHECKPOINT_SUFFIXES = ("-instruct", "-fp8", "-nvfp4", "-fp4", "-awq", "-gptq")

#: Concurrency bands and prompt/answer bands of the tables.
CONCURRENCY_BANDS = ((1, 1, "1"), (2, 16, "2-16"), (17, 64, "17-64"), (65, 256, "65-256"),
                     (257, math.inf, ">256"))
RATIO_BANDS = ((0.0, 1.0, "prompt <= answer"), (1.0, 8.0, "1 < prompt/answer <= 8"),
               (8.0, math.inf, "prompt/answer > 8"))


def catalog_model(model_path: str) -> str | None:
    """The catalog key of a Hugging Face ``model_path`` ("meta-llama/Llama-3.1-8B-Instruct" -> "llama-3.1-8b"):
    the repository name, lowercased, with checkpoint suffixes stripped; None when the catalog has no such model."""
    name = model_path.split("/")[-1].lower()
    while True:
        try:
            return catalog.model(name)["key"]
        except (KeyError, ValueError, ScenarioError):
            pass
        stripped = next((name[: -len(s)] for s in CHECKPOINT_SUFFIXES if name.endswith(s)), None)
        if stripped is None:
            return None
        name = stripped


def catalog_gpu(system: str) -> str | None:
    """The catalog key of a ``system`` ("h100_sxm" -> "h100-sxm", "b200_sxm" -> "b200"); None when not in it."""
    name = system.lower().replace("_", "-")
    for candidate in (name, re.sub(r"-sxm$", "", name)):
        try:
            return catalog.gpu(candidate)["key"]
        except (KeyError, ValueError, ScenarioError):
            continue
    return None


#: GPU families with FP4 tensor cores (NVIDIA Blackwell architecture technical brief: "second-generation
#: Transformer Engine [...] new FP4"); on others FP4 weights run as weight-only (dequantised to bf16 matmuls), which
#: the schemes' fallback peak (flops_bf16) already says.
FP4_FAMILIES = ("blackwell",)


def row_scheme(row: Mapping[str, Any], model: str | None) -> str | None:
    """The quantisation scheme of a row: its ``gemm_quant_mode`` (``SCHEME_OF``); ``fp4`` of a model released in
    MXFP4 (gpt-oss: the catalog's ``quantization: mxfp4``) is that scheme; no precision stated: the checkpoint's
    own 16-bit weights (bf16: Llama-3.1-8B-Instruct and Qwen3-32B are released in bf16)."""
    mode, precision = row.get("gemm_quant_mode"), row.get("precision")
    stated = [str(v) for v in (mode, precision) if isinstance(v, str)]
    if not stated:
        return "bf16"
    entry = catalog.model(model) if model else {}
    if str(precision) == "fp4" and entry.get("quantization") == "mxfp4":
        return "mxfp4"
    return SCHEME_OF.get(stated[0])


def precision_label(row: Mapping[str, Any]) -> str:
    """``fp8-block`` where the GEMMs or the experts run 128 x 128 block-scaled FP8, else ``precision``."""
    modes = {str(row.get("gemm_quant_mode")), str(row.get("moe_quant_mode"))}
    if "fp8_block" in modes:
        return "fp8-block"
    return str(row["precision"]) if isinstance(row.get("precision"), str) else "bf16"


def _band(value: float, bands: Sequence[tuple[float, float, str]]) -> str:
    return next(label for lo, hi, label in bands if lo <= value <= hi or (lo < value <= hi))


def _int(value: Any, default: int = 1) -> int:
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


@dataclass
class Row:
    """One measured row, the scenario the planner builds from it, and what was predicted."""

    raw: dict[str, Any]
    group: str
    engine: str
    family: str
    gpu: str
    model_class: str
    precision: str
    concurrency: int
    ratio: float
    scenario: Scenario | None = None
    reason: str = ""                     # why the row is not expressible ("" when it is)
    ttft_reason: str = ""                # why its TTFT is not predicted
    screened: str = ""                   # the plausibility rule that removed it ("" when kept)
    tpot_obs: Observation | None = None
    ttft_obs: Observation | None = None
    predicted: dict[str, float] = field(default_factory=dict)   # metric -> engine defaults
    logo: dict[str, float] = field(default_factory=dict)        # metric -> leave-one-group-out fit

    @property
    def disagg(self) -> bool:
        return self.raw.get("mode") == "disagg"


#: Checkpoints whose measured deployments ran an FP8 KV cache. The sample's deployments are aiconfigurator's own:
#: it infers ``kvcache_quant_mode = fp8`` for FP8, block-FP8 and NVFP4 checkpoints ("if quant_algo in ('fp8',
#: 'fp8_block', 'nvfp4') [...] overrides['kvcache_quant_mode'] = KVCacheQuantMode.fp8",
#: aic-core/src/aiconfigurator_core/sdk/models/helpers.py ``_infer_quant_modes_from_raw_config``) and passes it to
#: every engine as ``--kv-cache-dtype`` (src/aiconfigurator/generator/config/backend_config_mapping.yaml,
#: ``kv_cache_dtype``: vLLM ``kv-cache-dtype``, SGLang ``fp8_e4m3``, TensorRT-LLM ``kv_cache_config.dtype``), commit
#: 095f58a51c4ca8e61b66ec108d86f223f8d559ce. MXFP4 (gpt-oss), W4A16 and 16-bit checkpoints keep a 16-bit cache.
FP8_KV_SCHEMES = ("fp8", "nvfp4")

#: The serving path of the sample's deployments (``serving.front_end``): aiconfigurator's generated deployments start
#: NVIDIA Dynamo's front end before the engine's workers ("python3 -m dynamo.frontend ... --http-port", then
#: "python3 -m dynamo.vllm" / "dynamo.trtllm" / "dynamo.sglang": src/aiconfigurator/generator/config/
#: backend_templates/{vllm,trtllm,sglang}/run.sh.j2, commit 095f58a), and its benchmark script points aiperf at that
#: port (backend_templates/benchmark/bench_run.sh.j2). The sample does not name the path per row; this is the same
#: reading of its deployments as the KV dtype (``FP8_KV_SCHEMES``).
FRONT_END = "dynamo"


def setup_mapping(row: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(scenario mapping of the row's setup, reason it cannot be built: "" when it can).

    The layout columns are read by ``silicon_expressible`` (one home for the data set's conventions: model by its
    Hugging Face id, ``tp_size`` x ``attention_dp_size`` GPUs, ``moe_tp_size`` x ``moe_ep_size`` for the experts);
    a disaggregated row is its decode pool (``decode_*`` columns). This harness adds what scoring needs: the
    quantisation scheme (``row_scheme``), the KV cache's dtype as the deployment ran it (``FP8_KV_SCHEMES``), the
    engine version, and no fp4 row on a Blackwell GPU without a sourced FP4 peak."""
    clean = {k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
    model = catalog_model(str(row["model_path"]))
    gpu = catalog_gpu(str(row["system"]))
    reasons = []
    if model is None:
        reasons.append(f"model {row['model_path']} not in the catalog")
    if gpu is None:
        reasons.append(f"GPU {row['system']} not in the catalog")
    scheme = row_scheme(row, model)
    if scheme is None:
        reasons.append(f"quantisation {row['gemm_quant_mode']} not known")
    if reasons:
        return None, "; ".join(reasons)
    entry = catalog.gpu(gpu)
    wanted = SCHEMES[scheme].flops_key
    if wanted not in entry and engines.gpu_family(gpu) in FP4_FAMILIES and wanted == "flops_fp4":
        return None, f"{gpu} has no sourced {wanted} in the catalog ({scheme} would run on another peak)"
    pool = "decode_" if row.get("mode") == "disagg" else ""
    layout = silicon_expressible._layout(clean, pool)
    mapping = silicon_expressible.row_mapping(clean)
    mapping["model"] = {"name": model, "quantization": scheme}
    if scheme in FP8_KV_SCHEMES:
        mapping["model"]["kv_dtype"] = "fp8"
    mapping["gpu"] = {**mapping["gpu"], **layout["gpu"], "name": gpu}
    mapping["serving"] = {"engine": mapping["serving"]["engine"], "engine_version": clean["backend_version"],
                          "front_end": FRONT_END, **layout["serving"]}
    return mapping, ""


_SCENARIOS: dict[str, tuple[Scenario | None, str]] = {}


def build_scenario(mapping: dict[str, Any]) -> tuple[Scenario | None, str]:
    """The planner's scenario for a setup, or None and the planner's reason (cached by setup)."""
    key = json.dumps({k: v for k, v in mapping.items() if k != "name"}, sort_keys=True)
    if key not in _SCENARIOS:
        try:
            _SCENARIOS[key] = (Scenario.from_dict(mapping), "")
        except ScenarioError as exc:
            _SCENARIOS[key] = (None, "planner refuses: " + "; ".join(str(p) for p in exc.args)[:160])
    return _SCENARIOS[key]


def row_batch(raw: Mapping[str, Any]) -> int | None:
    """The batch per engine: ``batch_size`` (aggregated) or ``decode_batch_size`` (the decode pool) times the
    engine's attention data-parallel ranks; None where the row leaves it empty (its ``silicon_concurrency`` is the
    load generator's, which may span several engines).

    The data set states the batch per attention-DP rank: wherever ``attention_dp_size`` > 1 its
    ``silicon_concurrency`` is ``batch_size x attention_dp_size`` (x ``decode_num_workers`` for a decode pool),
    e.g. MiniMax-M2.5 on 4 x 4 B300 ranks: batch 128, concurrency 512 (validation/silicon/README.md)."""
    pool = "decode_" if raw.get("mode") == "disagg" else ""
    stated = raw.get(pool + "batch_size")
    if stated is None or (isinstance(stated, float) and math.isnan(stated)):
        return None
    return int(stated) * _int(raw.get(pool + "attention_dp_size"))


def make_row(raw: dict[str, Any]) -> Row:
    disagg = raw.get("mode") == "disagg"
    stated = row_batch(raw)
    found = re.search(r"silicon_concurrency=(\d+)", str(raw.get("silicon_data_source", "")))
    batch = stated if stated is not None else int(found.group(1)) if found else 1
    precision = precision_label(raw)
    gpu = str(raw["system"])
    model = catalog_model(str(raw["model_path"]))
    entry = catalog.model(model) if model else None
    moe = bool(entry and (entry.get("num_experts") or 0) > 1) or any(k in str(raw["model_path"]).lower() for k in (
        "deepseek", "a22b", "a17b", "oss", "kimi", "minimax", "glm"))
    row = Row(raw, group=f"{raw['model_path']} x {gpu} x {raw['backend']} x {precision}",
              engine=ENGINE_OF.get(str(raw["backend"]), str(raw["backend"])),
              family=engines.gpu_family(gpu.replace("_", "-")) or gpu, gpu=gpu,
              model_class="MoE" if moe else "dense", precision=precision, concurrency=batch,
              ratio=float(raw["isl"]) / float(raw["osl"]))
    mapping, why = setup_mapping(raw)
    if mapping is None:
        row.reason = why
        return row
    if stated is None:
        row.reason = ("batch per engine not stated (the load generator's silicon_concurrency may span several "
                      "engines)")
        return row
    scenario, why = build_scenario(mapping)
    if scenario is None:
        row.reason = why
        return row
    row.scenario = scenario
    label = str(raw["id"])
    tpot = float(raw["silicon_tpot_ms"]) * 1e-3
    if disagg:
        row.tpot_obs = Observation(scenario, "tpot_s", tpot, batch_size=batch, label=label)
        row.ttft_reason = "disaggregated: TTFT (prefill pool, KV transfer, queue) is not modelled per row"
    else:
        row.tpot_obs = Observation(scenario, "tpot_s", tpot, concurrency=batch, label=label)
        # TTFT at C users in flight: one prefill at C = 1, the closed loop's wait for a slot and for the prefill
        # above (analysis.closed_loop, through calibration's queued TTFT)
        row.ttft_obs = Observation(scenario, "ttft_s", float(raw["silicon_ttft_ms"]) * 1e-3, concurrency=batch,
                                   label=label)
    return row


def peak_bounds(row: Row) -> tuple[float, float]:
    """(shortest possible TTFT, shortest possible TPOT) [s] of the row at the GPU's datasheet peaks: one prefill
    of the prompt and one decode step of the users decoding at once, efficiencies 1, no overhead, no engine rules."""
    s = row.scenario
    assert s is not None
    raw = dict(s.raw)
    raw["serving"] = {"engine": "ideal"}
    raw["gpu"] = {**raw["gpu"], "bandwidth_efficiency": 1.0, "flops_efficiency": 1.0}
    if row.disagg:
        raw["gpu"]["count"] = _int(row.raw.get("prefill_tp_size"), raw["gpu"]["count"])
    try:
        peak = Scenario.from_dict(raw)
    except ScenarioError:
        return 0.0, 0.0
    r = peak.evaluate()
    ttft = float(r["prefill_s"])
    # The users decoding at once, by Little's law from the row's own times: each of C users decodes for A x TPOT
    # of every TTFT + A x TPOT (a disaggregated decode pool decodes all of its batch).
    a = float(row.raw["osl"])
    tpot, ttft_m = float(row.raw["silicon_tpot_ms"]), float(row.raw["silicon_ttft_ms"])
    decoding = row.concurrency if row.disagg else row.concurrency * a * tpot / (ttft_m + a * tpot)
    batch = max(1, math.floor(decoding))
    return ttft, predict(Observation(peak, "tpot_s", 1.0, batch_size=batch), Factors(1.0, 1.0, 0.0))


def screen(rows: Sequence[Row]) -> None:
    """Mark rows that are physically implausible as a sustained load (see validation/silicon/README.md)."""
    for row in rows:
        if row.scenario is None:
            continue
        ttft_min, tpot_min = peak_bounds(row)
        ttft, tpot = float(row.raw["silicon_ttft_ms"]) * 1e-3, float(row.raw["silicon_tpot_ms"]) * 1e-3
        if ttft < ttft_min:
            row.screened = (f"TTFT {ttft * 1e3:.1f} ms < prefill of {row.raw['isl']} tokens at peak "
                            f"{ttft_min * 1e3:.1f} ms")
        elif tpot < tpot_min:
            row.screened = f"TPOT {tpot * 1e3:.2f} ms < decode step at peak {tpot_min * 1e3:.2f} ms"


def load(path: Path = DATA) -> list[Row]:
    frame = pd.read_csv(path)
    return [make_row(silicon_expressible.restate_layout(r)) for r in frame.to_dict("records")]


def kept(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.scenario is not None and not r.screened]


def predict_defaults(rows: Sequence[Row]) -> None:
    """Each kept row with the planner's defaults for its engine (what a user gets)."""
    for row in kept(rows):
        for metric, obs in (("tpot", row.tpot_obs), ("ttft", row.ttft_obs)):
            if obs is None:
                continue
            try:  # users in flight: the library's closed loop (``calibration.predict``)
                row.predicted[metric] = predict(obs, Factors.of(obs.scenario))
            except ScenarioError as exc:
                row.ttft_reason = row.ttft_reason or str(exc)
            if not math.isfinite(row.predicted.get(metric, 0.0)):
                row.predicted.pop(metric)


#: What the shipped general rule (``engines.SILICON_OVERHEAD_S``) is fitted per: one step overhead per engine.
#: Tried leave-one-group-out (TPOT MAPE, docs/fidelity.md): per engine 18.9%, per engine x model class 19.5%, per
#: engine x GPU family 19.5%, per engine x family x class 19.1% (median-seeking); per engine x family by squared
#: log errors 21.0% (the rule this harness fitted before).
RULE_KEYS = ["engine"]


def rule_class(row: Row) -> tuple[str, ...]:
    """The class a general rule is fitted for: the engine by default (``RULE_KEYS``)."""
    return tuple(getattr(row, k) for k in RULE_KEYS)


def silicon_overheads(rows: Sequence[Row], exclude_group: str | None = None) -> dict[tuple[str, ...], float]:
    """The step overhead [s] per rule class (``rule_class``), fitted to the median relative TPOT error
    (``planning.median_fit.median_overhead``) on the kept rows, ``exclude_group``'s left out."""
    pool = [r for r in kept(rows) if r.tpot_obs is not None and r.group != exclude_group]
    fitted = {}
    for cls in sorted({rule_class(r) for r in pool}):
        obs = [r.tpot_obs for r in pool if rule_class(r) == cls]
        fitted[cls] = median_overhead(obs)
    return fitted


def with_ttft_rules(obs: Observation, share: float, latency_s: float) -> Observation:
    """The observation on its scenario with ``workload.clustering`` ``share`` and ``serving.request_latency``
    ``latency_s`` [s]."""
    s = obs.scenario
    return replace(obs, scenario=replace(s, workload=replace(s.workload, clustering=float(share)),
                                         serving=replace(s.serving, request_latency_s=float(latency_s))))


def _ttft_at_shares(row: Row) -> tuple[float, float] | None:
    """(closed-loop TTFT at clustering 0, at clustering 1) [s] of a kept TTFT row at C > 1, both less the request
    latency they were evaluated at (cached on the row); None where either is not finite. The TTFT is about linear in
    the share between them (the clustered prompts' compute ``c n_c``, ``analysis.closed_loop_engine_ttft_s``) and in
    the latency, a delay: evaluated at the engine profile's own latency where one applies (``latency_applies``: then
    requests reach the engine at any phase of a step, the queue of random arrivals; with none, at step ends), it
    lengthens the cycle a little more or less at the fitted value, which the harness's own predictions then take
    exactly."""
    if "ttft_shares" not in row.raw:
        obs = row.ttft_obs
        values = None
        if obs is not None and obs.concurrency and obs.concurrency > 1:
            at = profile_latency(row) or 0.0
            try:
                values = tuple(predict(with_ttft_rules(obs, k, at), Factors.of(obs.scenario)) - at
                               for k in (0.0, 1.0))
            except ScenarioError:
                values = None
        row.raw["ttft_shares"] = values if values and all(map(math.isfinite, values)) else None
    return row.raw["ttft_shares"]


def profile_latency(row: Row) -> float | None:
    """The request latency [s] the engine profile puts on the row's TTFT, or None (``engines.request_latency_for``
    behind the row's ``serving.front_end``: every row behind Dynamo, ``FRONT_END``)."""
    obs = row.ttft_obs or row.tpot_obs
    front_end = obs.scenario.serving.front_end if obs is not None else FRONT_END
    return engines.request_latency_for(row.engine, row.family, front_end)[0]


def latency_applies(row: Row) -> bool:
    """Whether the engine profile puts the silicon sample's request latency on the row's TTFT (``profile_latency``)."""
    return profile_latency(row) is not None


def share_class(row: Row) -> str:
    """The class a clustering share is fitted for (``engines.CLOSED_LOOP_CLUSTERING``): "moe" or "dense", as the
    engine profile reads the row's model (``engines.clustering_for``)."""
    m = row.ttft_obs.scenario.model if row.ttft_obs is not None else row.scenario.model
    return "moe" if bool(is_moe(m.experts, m.experts_per_token)) else "dense"


def silicon_ttft_rules(rows: Sequence[Row], exclude_group: str | None = None, sweeps: int = 60
                       ) -> tuple[dict[str, float], dict[str, float]]:
    """(the closed loop's clustering share per model class, ``engines.CLOSED_LOOP_CLUSTERING``; the request latency
    per engine [s], ``engines.SILICON_REQUEST_LATENCY_S``) minimising the mean absolute relative TTFT error of the
    kept closed-loop rows at C > 1, ``exclude_group``'s left out.

    With ``T(k, L) ~ T_0 + k s + L`` (``_ttft_at_shares``: ``s = T_1 - T_0``), ``sum_i |T_i / y_i - 1|`` is convex
    in (k per class, L per engine) and, each in turn with the others held, minimised by a weighted median
    (``planning.median_fit.weighted_median``): a class's k of its rows' ``(y - T_0 - L) / s`` with weights
    ``s / y``, L of the engine's rows' ``y - T_0 - k s`` with weights ``1 / y`` (rows whose engine profile adds no
    latency, ``latency_applies``, fit none). ``sweeps`` rounds of this coordinate descent, from k = 0 and no
    latency; each k held in [0, 1], L at 0 or above. Rows whose TTFT the share does not move (a slot wait: the
    response time law fixes it) do not move k. The class is ``share_class``'s.
    """
    data = []
    for row in kept(rows):
        if row.group == exclude_group or row.ttft_obs is None:
            continue
        shares = _ttft_at_shares(row)
        if shares is None:
            continue
        data.append((row.engine if latency_applies(row) else None, share_class(row), shares[0],
                     shares[1] - shares[0], float(row.ttft_obs.measured_time)))
    if not data:
        return {}, {}
    engine = np.array([d[0] or "" for d in data], dtype=object)
    kind = np.array([d[1] for d in data], dtype=object)
    t0, slope, y = (np.array([d[i] for d in data], dtype=float) for i in (2, 3, 4))
    names, classes = sorted({e for e in engine if e}), sorted(set(kind))
    share, latency = dict.fromkeys(classes, 0.0), dict.fromkeys(names, 0.0)
    mine = {name: engine == name for name in names}
    moves = {cls: (kind == cls) & (slope > 0) for cls in classes}
    for _ in range(sweeps):
        extra = np.array([latency.get(e, 0.0) for e in engine])
        for cls, m in moves.items():
            if m.any():
                share[cls] = min(max(weighted_median((y - t0 - extra)[m] / slope[m], slope[m] / y[m]), 0.0), 1.0)
        k = np.array([share[c] for c in kind])
        for name in names:
            m = mine[name]
            latency[name] = max(weighted_median((y - t0 - k * slope)[m], 1.0 / y[m]), 0.0)
    return share, latency


def leave_one_group_out(rows: Sequence[Row], fitted: Sequence[str] = ("step_overhead",)) -> None:
    """Predict every group with the shipped general rule refitted without it: where the engine profile takes its
    step overhead from the silicon sample (``engines.overhead_rule`` is ``"silicon"``), the overhead of the
    group's rule class (``rule_class``) fitted on the other groups (``silicon_overheads``); elsewhere (an overhead
    fitted on published points) the engine defaults, which no row fitted. ``fitted``: the factors refitted, the
    step overhead (the general rule that generalised best: refitting the plateaus too was worse out of group,
    docs/fidelity.md); other factors are refitted by ``calibration.fit_factors`` on the class's other groups."""
    pool = [r for r in kept(rows) if r.tpot_obs is not None]
    for g in sorted({r.group for r in pool}):
        inside = [r for r in pool if r.group == g]
        first = inside[0]
        start = Factors.of(first.tpot_obs.scenario)
        if engines.overhead_rule(first.engine, first.family) != "silicon":
            factors = start
        else:
            factors = start
            if "step_overhead" in fitted:  # the class's overhead without this group (every other group's if none)
                without = silicon_overheads(rows, exclude_group=g)
                overhead = without.get(rule_class(first))
                if overhead is None:
                    overhead = median_overhead([r.tpot_obs for r in pool if r.group != g])
                factors = replace(start, step_overhead_s=overhead)
            others = tuple(f for f in fitted if f != "step_overhead")
            if others:
                train = [r.tpot_obs for r in pool if r.group != g and rule_class(r) == rule_class(first)]
                try:
                    factors = fit_factors(train, start=factors, fit=others).factors
                except (ScenarioError, ValueError):
                    pass
        shares, latencies = silicon_ttft_rules(rows, exclude_group=g)  # fitted without the group
        latency = latencies.get(first.engine, 0.0) if latency_applies(first) else 0.0
        for row in inside:
            for metric, o in (("tpot", row.tpot_obs), ("ttft", row.ttft_obs)):
                if o is not None and metric in row.predicted:
                    at = (with_ttft_rules(o, shares.get(share_class(row), 0.0), latency) if metric == "ttft"
                          else o)
                    row.logo[metric] = predict(at, factors)


def fitted_overhead_table(rows: Sequence[Row]) -> str:
    """``engines.SILICON_OVERHEAD_S`` as Python, fitted on every kept row (what the engine profiles ship)."""
    lines = ["SILICON_OVERHEAD_S: dict[str, float] = {"]
    pool = [r for r in kept(rows) if r.tpot_obs is not None]
    for cls, value in silicon_overheads(rows).items():
        mine = [r for r in pool if rule_class(r) == cls]
        families = ", ".join(sorted({r.family for r in mine}))
        lines.append(f'    "{"/".join(cls)}": {value:.3e},  # {len(mine)} rows, {len({r.group for r in mine})} groups, '
                     f"{families}")
    shares, latencies = silicon_ttft_rules(rows)
    lines += ["}", "CLOSED_LOOP_CLUSTERING: dict[str, float] = {"]
    lines += [f'    "{name}": {value:.3f},' for name, value in shares.items()]
    lines += ["}", "SILICON_REQUEST_LATENCY_S: dict[str, float] = {"]
    lines += [f'    "{name}": {value:.4f},' for name, value in latencies.items()]
    return "\n".join(lines + ["}"])


def _err(pred: float, meas: float) -> float:
    return (pred / meas - 1.0) * 100.0


def measured(row: Row, metric: str) -> float:
    return float(row.raw[f"silicon_{metric}_ms"]) * 1e-3


def mape(rows: Sequence[Row], metric: str, which: str = "predicted") -> tuple[int, float]:
    errs = [abs(_err(getattr(r, which)[metric], measured(r, metric))) for r in rows if metric in getattr(r, which)]
    return len(errs), (float(np.mean(errs)) if errs else math.nan)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def class_table(rows: Sequence[Row]) -> list[list[str]]:
    """MAPE % by class: rows, TPOT (defaults, leave-one-group-out), TTFT (defaults, leave-one-group-out)."""
    ok = kept(rows)
    cuts: list[tuple[str, list[Row]]] = [("all expressible rows", ok)]
    for label, key in (("engine", lambda r: r.engine), ("GPU family", lambda r: r.family),
                       ("GPU", lambda r: r.gpu), ("model class", lambda r: r.model_class),
                       ("precision", lambda r: r.precision),
                       ("concurrency", lambda r: _band(r.concurrency, CONCURRENCY_BANDS)),
                       ("prompt/answer", lambda r: _band(r.ratio, RATIO_BANDS)),
                       ("mode", lambda r: str(r.raw.get("mode"))),
                       ("expert parallel", lambda r: "yes" if r.scenario.gpu.expert_parallel > 1 else "no"),
                       ("attention data parallel",
                        lambda r: "yes" if r.scenario.gpu.attention_data_parallel > 1 else "no")):
        for value in sorted({key(r) for r in ok}):
            cuts.append((f"{label}: {value}", [r for r in ok if key(r) == value]))
    out = []
    for label, group in cuts:
        n_tpot, tpot = mape(group, "tpot")
        _, tpot_logo = mape(group, "tpot", "logo")
        n_ttft, ttft = mape(group, "ttft")
        _, ttft_logo = mape(group, "ttft", "logo")
        out.append([label, str(len({r.group for r in group})), str(n_tpot), _pct(tpot), _pct(tpot_logo),
                    str(n_ttft), _pct(ttft), _pct(ttft_logo)])
    return out


CLASS_HEADER = ["class", "groups", "TPOT rows", "TPOT MAPE % (engine defaults)", "TPOT MAPE % (leave-one-group-out)",
                "TTFT rows", "TTFT MAPE % (engine defaults)", "TTFT MAPE % (leave-one-group-out)"]


def expressible_table(rows: Sequence[Row]) -> list[list[str]]:
    """Why rows are not expressible (or screened out), with counts."""
    counts: dict[str, int] = {}
    for r in rows:
        if r.scenario is None:
            reason = re.sub(r"\d+(\.\d+)?", "N", r.reason) if "refuses" in r.reason else r.reason
            counts["not expressible: " + reason] = counts.get("not expressible: " + reason, 0) + 1
        elif r.screened:
            counts["screened out: " + r.screened.split(" <")[0].split(" ")[0] + " below the peak bound"] = counts.get(
                "screened out: " + r.screened.split(" <")[0].split(" ")[0] + " below the peak bound", 0) + 1
    return [[k, str(v)] for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)) for r in [header, *rows])


def summary(rows: Sequence[Row], markdown: bool = True) -> str:
    ok = kept(rows)
    n_expr = sum(r.scenario is not None for r in rows)
    screened = sum(bool(r.screened) for r in rows)
    n_tpot, tpot = mape(ok, "tpot")
    _, tpot_logo = mape(ok, "tpot", "logo")
    n_ttft, ttft = mape(ok, "ttft")
    _, ttft_logo = mape(ok, "ttft", "logo")
    head = (f"**{n_expr} of {len(rows)} rows ({100 * n_expr / len(rows):.0f}%) are expressible** "
            f"({len({r.group for r in rows if r.scenario is not None})} of {len({r.group for r in rows})} groups); "
            f"the plausibility screen removes {screened}. TPOT over {n_tpot} rows: **{_pct(tpot)}%** with the engine "
            f"defaults, **{_pct(tpot_logo)}% leave-one-group-out**; TTFT (one prefill at C = 1, the closed loop's wait "
            f"above; aggregated rows) over {n_ttft} rows: "
            f"{_pct(ttft)}% / {_pct(ttft_logo)}%.")
    return "\n\n".join([head, _table(CLASS_HEADER, class_table(rows), markdown),
                        "Rows not scored, and why:", _table(["reason", "rows"], expressible_table(rows), markdown)])


def run(path: Path = DATA, fit: bool = True, factors: Sequence[str] = ("step_overhead",)) -> list[Row]:
    rows = load(path)
    screen(rows)
    predict_defaults(rows)
    if fit:
        leave_one_group_out(rows, factors)
    return rows


ACCURACY = ROOT / "capacity" / "catalogs" / "measured_accuracy.yaml"


def accuracy_yaml(rows: Sequence[Row]) -> str:
    """``capacity/catalogs/measured_accuracy.yaml``: TPOT and TTFT MAPE per engine x GPU family, per engine and
    over every row (``capacity.inputs.accuracy`` reads it), leave-one-group-out where it was run (the engine
    defaults hold one overhead per engine fitted on these rows, so the out-of-group figure is the honest one for
    a configuration not measured), else with the engine defaults."""
    ok = kept(rows)
    which = "logo" if any(r.logo for r in ok) else "predicted"

    def entry(group: Sequence[Row], metric: str) -> str | None:
        n, value = mape(group, metric, which)
        measured_groups = len({r.group for r in group if metric in getattr(r, which)})
        return f"{{mape_percent: {value:.1f}, rows: {n}, groups: {measured_groups}}}" if n else None

    lines = ["# Generated by `python validation/silicon.py --publish`; do not edit by hand.",
             "# TPOT and TTFT MAPE of the planner's engine defaults"
             + (" leave-one-group-out (each group predicted with the per-engine\n# step overhead, request latency and "
                "the clustering share fitted without it)"
                if which == "logo" else "") + " on validation/silicon/silicon_train.csv (NVIDIA",
             "# aiconfigurator's public silicon sample, github.com/ai-dynamo/aiconfigurator commit",
             "# 095f58a51c4ca8e61b66ec108d86f223f8d559ce, Apache License 2.0), rows the planner expresses; TTFT",
             "# at the rows' users in flight (closed loop, aggregated rows)."]
    keys = sorted({r.engine for r in ok} | {f"{r.engine}/{r.family}" for r in ok})
    for metric in ("tpot", "ttft"):
        lines += [f"{metric}:", f"  all: {entry(ok, metric)}", "  classes:"]
        for key in keys:
            value = entry([r for r in ok if (r.engine == key or f"{r.engine}/{r.family}" == key)], metric)
            if value:
                lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


def publish(rows: Sequence[Row], path: Path = FIDELITY) -> Path:
    """Write the summary between the ``silicon-summary`` markers of docs/fidelity.md, and the accuracy table."""
    ACCURACY.write_text(accuracy_yaml(rows), encoding="utf-8")
    start, end = MARKERS
    text = path.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise ValueError(f"{path}: the markers {start!r} ... {end!r} are missing")
    head, rest = text.split(start, 1)
    path.write_text(head + start + "\n" + summary(rows, markdown=True) + "\n" + end + rest.split(end, 1)[1],
                    encoding="utf-8")
    return path


#: The generated block of docs/fidelity.md.
MARKERS = ("<!-- silicon-summary: generated by `python validation/silicon.py --publish`; do not edit by hand -->",
           "<!-- end silicon-summary -->")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=DATA)
    ap.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    ap.add_argument("--no-fit", action="store_true", help="skip the leave-one-group-out fit")
    ap.add_argument("--publish", action="store_true", help="write the tables into docs/fidelity.md")
    ap.add_argument("--fit", action="store_true",
                    help="print engines.SILICON_OVERHEAD_S, CLOSED_LOOP_CLUSTERING and SILICON_REQUEST_LATENCY_S "
                         "fitted on every kept row, and exit")
    ap.add_argument("--factors", default="step_overhead",
                    help="the factors the leave-one-group-out rules fit (comma-separated)")
    ap.add_argument("--rule-keys", default=",".join(RULE_KEYS),
                    help="what the general rules are fitted per (engine, family, model_class)")
    args = ap.parse_args(argv)
    RULE_KEYS[:] = args.rule_keys.split(",") if isinstance(RULE_KEYS, list) else RULE_KEYS
    if args.fit:
        rows = load(args.file)
        screen(rows)
        print(fitted_overhead_table(rows))
        return 0
    rows = run(args.file, fit=not args.no_fit, factors=tuple(args.factors.split(",")))
    if args.format == "json":
        print(json.dumps([{"id": r.raw["id"], "group": r.group, "reason": r.reason, "screened": r.screened,
                           "predicted": r.predicted, "logo": r.logo} for r in rows], indent=1))
    else:
        print(summary(rows, markdown=args.format == "markdown"))
    if args.publish:
        print(f"wrote {publish(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
