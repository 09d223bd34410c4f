"""The one answer: a scenario's sizing, computed once, that every surface renders.

``size(scenario)`` turns a scenario (its load, promises at their stated percentile, workload classes, fleet
section and price) into a ``Sizing``: the serving layout chosen, replicas and GPUs, the load each replica carries
and the latencies at that load, what binds, and the cost from one price. The app's headline and views, the customer
report, the XLSX Summary, ``capacity evaluate|fleet|report|flags`` render this object; none recomputes a part of it.

The layout. Among the serving modes (``colocated``: prefills pause decoding; ``chunked``: chunked prefill;
``disaggregated``: separate prefill and decode pools) and tensor-parallel sizes the scenario allows (``fleet.modes``
and ``fleet.tensor_parallel``; by default every mode, and TP 1, 2, 4, 8 and the scenario's own ``gpu.count``), on the
scenario's GPU, the answer is the cheapest option that keeps every promise at the design load ``D = λ x peak``
(ties: lower TPOT, then fewer GPUs; ``order``). Each option needs

    replicas = ceil(D / (λ_r (1 - h)))                         (``replicas_for``; λ_r: one replica's goodput)

and carries ``D / replicas`` requests/s per replica; separate pools need ``ceil(D / (λ_d (1 - h)))`` decode and
``ceil(D / (λ_p (1 - h)))`` prefill replicas. Without a load the answer is the scenario's own layout (its TP, the
first mode it allows) and its stated replicas.

Promises at a percentile. A promise kept by p% of requests (``slo.percentile``) or a mix of workload classes sizes a
colocated replica on ``percentiles.percentile_goodput_rps`` (the largest load at which each class keeps its promises
at its percentile), not on the mean model's goodput; the latencies at the load are then those at the binding class's
percentile. The percentile model is the colocated engine's, so chunked and separate-pool options are not offered for
such scenarios (a reason says so).

Cost, from one price: ``gpu.price_per_hour`` (the scenario's, else the catalog's; ``price_source`` says which)

    cost per hour = GPUs x price;   per month = x 730 h
    cost per million output tokens = cost per hour / (λ A 3600) x 1e6          (``slo.cost_per_million_tokens``)

at the target load λ (not the peak: the fleet sized for the peak runs all day); without a load at the goodput of the
replicas, which is the per-replica results' ``cost_per_million_tokens``. ``cost_per_million_all_tokens`` divides by
prompt and output tokens, ``(P + A)``.

Essay 001's GPU (TPOT <= 50 ms, $2/GPU-hour) at 100 requests/s, colocated only: goodput 5.897 requests/s,
ceil(100 / 5.897) = 17 GPUs, $34/hour, $24,820/month.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from capacity.errors import ScenarioError
from capacity.formulas import power, slo
from capacity.inputs import catalog
from capacity.inputs.specs import ALL_FLEET_MODES as ALL_MODES
from capacity.inputs.specs import FLEET_MODES as MODES
from capacity.inputs.specs import FLEET_TENSOR_PARALLEL as TENSOR_PARALLEL
from capacity.inputs.specs import SITE_GPU_KEYS
from capacity.model.analysis import analyse, delayed_ttft_s
from capacity.model.curves import latency_curve
from capacity.model.scenario import Results, Scenario
from capacity.model.serving_modes import decode_pool_ceiling_rps, prefill_pool_ttft_s

#: Hours in an average month: 365 x 24 / 12 [h].
HOURS_PER_MONTH = 730.0

#: How ``Results.notes`` starts the note of a load one replica cannot carry.
OVERLOAD_NOTE = "the arrival rate exceeds what the GPU can decode"

#: Words for the serving modes.
MODE_WORDS = {"colocated": "prefill and decode on the same GPUs", "chunked": "chunked prefill",
              "disaggregated": "separate prefill and decode pools",
              "split": "separate prefill and decode pools, each on its own layout"}


def replicas_for(design_rps: float | np.ndarray, replica_rps: float | np.ndarray,
                 headroom: float = 0.0) -> np.ndarray:
    """Replicas for a design load: ``ceil(D / (λ_r (1 - h)))`` [-]; 0 for no load, inf where ``λ_r`` is 0.

    A hair (1e-9) is taken off before rounding up so that an exact multiple is not rounded to one more.
    Essay 001: ceil(100 / 5.897) = 17.
    """
    d, r = np.asarray(design_rps, float), np.asarray(replica_rps, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.ceil(d / (r * (1.0 - headroom)) - 1e-9)
    return np.where(d <= 0, 0.0, np.where(r > 0, np.maximum(need, 1.0), np.inf))


def check_plan(target: float, peak_factor: float, headroom: float) -> None:
    """ValueError unless the load is finite and >= 0, the peak factor finite and > 0, headroom in [0, 1)."""
    if not (math.isfinite(target) and target >= 0 and math.isfinite(peak_factor) and peak_factor > 0
            and 0 <= headroom < 1):
        raise ValueError("target load must be >= 0, peak factor > 0 and headroom in [0, 1)")


# --- layouts: the scenario on other tensor-parallel sizes ---------------------------------------------------------

#: Attention data-parallel ranks the layouts of a mixture-of-experts model try beside tensor parallelism [ranks].
ATTENTION_DATA_PARALLEL = (1, 2, 4, 8)


def moe_parallel_sizes(tensor_parallel: int, budget: int, stated: tuple[int, int] = (1, 1)
                       ) -> list[tuple[int, int]]:
    """(attention data parallel, expert parallel) pairs one tensor-parallel size of an MoE model is tried with.

    ``dp`` from ``ATTENTION_DATA_PARALLEL`` (and the stated one) while the replica's ``tp x dp`` GPUs stay within
    ``budget`` (the largest GPU count the layouts try); ``ep`` 1 (every GPU holds every expert, split by tensor
    parallelism) or ``tp x dp`` (each GPU its share of the experts, as vLLM's ``--enable-expert-parallel`` and
    SGLang's DeepSeek deployments run them), and the stated ``ep`` where it divides ``tp x dp``. The stated pair
    first; the scenario checks (``checks.input_problems``) refuse what the model does not allow.
    """
    dp0, ep0 = stated
    out = [(dp0, ep0)]
    for dp in dict.fromkeys((dp0, *ATTENTION_DATA_PARALLEL)):
        stage = tensor_parallel * dp
        if stage > budget and dp != dp0:
            continue
        for ep in dict.fromkeys((ep0, 1, stage)):
            if stage % ep == 0 and (dp, ep) not in out:
                out.append((dp, ep))
    return out


def _is_moe(scenario: Scenario) -> bool:
    m = scenario.model
    return m.experts > m.experts_per_token > 0


def layout_scenarios(mapping: Mapping[str, Any], gpus: Iterable[str] | None = None,
                     tensor_parallel: Iterable[int] = TENSOR_PARALLEL, vary_moe: bool = True
                     ) -> tuple[list[tuple[str, int, Scenario]], list[dict[str, Any]]]:
    """The scenario on each GPU type and tensor-parallel size: ``([(gpu label, tp, Scenario)], skipped)``.

    ``gpus``: catalog names, or None for the scenario's own GPU. A named GPU that is the scenario's own (by catalog
    key or alias) keeps the scenario's figures and price: one price for the same GPUs. Other names take their catalog
    figures and price, the scenario's pipeline stages and the site's electricity price and PUE (``SITE_GPU_KEYS``)
    kept. ``skipped`` lists the layouts that do not build, with the
    reason in ``problem``.

    A mixture-of-experts model (``vary_moe``) is also tried at each tensor-parallel size with the attention
    data-parallel and expert-parallel sizes of ``moe_parallel_sizes`` (``serving.attention_data_parallel``,
    ``serving.expert_parallel``; a layout's GPUs are ``tp x dp x pp``), within the largest GPU count tried: the
    model's heads need not divide a data-parallel layout's GPUs. The stated sizes come first at each TP; a variant
    the model does not allow is left out without a reason (the stated one's reason stands for its TP).
    """
    base_gpu = mapping.get("gpu")
    base = dict(base_gpu) if isinstance(base_gpu, Mapping) else {"name": base_gpu}
    own = _catalog_key(base.get("name"))
    names = [None] if gpus is None else list(gpus)
    sizes = list(dict.fromkeys(int(t) for t in tensor_parallel))
    serving = mapping.get("serving") if isinstance(mapping.get("serving"), Mapping) else {}
    stated = (_whole(serving.get("attention_data_parallel")), _whole(serving.get("expert_parallel")))
    budget = max([*sizes, int(base.get("count", 1)) * stated[0] if isinstance(base.get("count", 1), int) else 1])
    built, skipped = [], []
    for name in names:
        same = name is None or (own is not None and _catalog_key(name) == own)
        label = name or str(base.get("name") or "scenario GPU")
        for tp in sizes:
            data = copy.deepcopy(dict(mapping))
            gpu = dict(base) if same else {"name": name, "pipeline_parallel": base.get("pipeline_parallel", 1),
                                           **{k: base[k] for k in SITE_GPU_KEYS if k in base}}
            gpu.pop("replicas", None)
            gpu["count"] = tp
            data["gpu"] = gpu
            problem, moe = None, False
            try:
                first = Scenario.from_dict(data)
                built.append((label, tp, first))
                moe = _is_moe(first)
            except ScenarioError as exc:
                problem = "; ".join(exc.problems)
                moe = vary_moe and _moe_mapping(data)
            if vary_moe and moe:
                variants = _moe_variants(data, tp, budget, stated)
                built += [(label, tp, v) for v in variants]
                if variants:
                    problem = None
            if problem is not None:
                skipped.append({"gpu": label, "tensor_parallel": tp, "problem": problem})
    return built, skipped


def _whole(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def _moe_mapping(data: Mapping[str, Any]) -> bool:
    """Whether a scenario mapping (one that may not build) names a mixture-of-experts model."""
    from capacity.inputs.specs import model_from_mapping

    if data.get("model") is None:
        return False
    problems: list[str] = []
    try:
        model = model_from_mapping(data["model"], problems)
    except (ScenarioError, TypeError, ValueError):
        return False
    return model is not None and not problems and model.experts > model.experts_per_token > 0


def _moe_variants(data: Mapping[str, Any], tp: int, budget: int, stated: tuple[int, int]) -> list[Scenario]:
    """The mapping at ``tp`` with each other (dp, ep) of ``moe_parallel_sizes`` that builds."""
    out = []
    for dp, ep in moe_parallel_sizes(tp, budget, stated)[1:]:
        variant = copy.deepcopy(dict(data))
        serving = {k: v for k, v in dict(variant.get("serving") or {}).items() if k != "moe_tensor_parallel"}
        serving["attention_data_parallel"], serving["expert_parallel"] = dp, ep
        variant["serving"] = serving
        try:
            out.append(Scenario.from_dict(variant))
        except ScenarioError:
            continue
    return out


def _catalog_key(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    try:
        return str(catalog.gpu(name).get("key") or name).lower()
    except ScenarioError:
        return None


# --- one replica's goodput at the promises' percentile -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PromiseGoodput:
    """One colocated replica's goodput at the promises' percentile [requests/s], and what binds it."""

    rate_rps: float
    basis: str            # "p99", "p90", ... or "mean" (classes without a percentile)
    binding_class: str | None
    binding_promise: str  # tpot, ttft, capacity or nothing_fits


def sized_per_class(scenario: Scenario) -> bool:
    """Whether a scenario is sized per class: it lists ``workloads:`` classes or names a percentile promise."""
    raw = scenario.raw or {}
    return raw.get("workloads") is not None or scenario.slo.percentile is not None


def scenario_key(scenario: Scenario) -> str:
    """A text that tells scenarios apart: the frozen Scenario's fields and the mapping it was read from (which holds
    the workload classes)."""
    import json  # here, not at the top: ``capacity evaluate`` (table) loads no json (tests/cli/test_startup.py)

    return repr(scenario) + json.dumps(scenario.raw or {}, sort_keys=True, default=str)


#: ``promise_goodput`` of recent scenarios (``scenario_key``), so that the answer, ``capacity
#: fleet`` and the report's fleet chart, which size the same layouts, solve each percentile goodput once (its
#: bisection on quantiles is the slowest part of a sizing).
_PROMISED: dict[str, PromiseGoodput] = {}
_PROMISED_MAX = 512
_PROMISED_LOCK = threading.Lock()


def promise_goodput(scenario: Scenario) -> PromiseGoodput | None:
    """``percentiles.percentile_goodput_rps`` of the scenario's mix and its binding class; None for a single shape
    with promises on the mean (``analysis``' goodput is then the answer). Remembered per scenario (``_PROMISED``)."""
    if not sized_per_class(scenario):
        return None
    key = scenario_key(scenario)
    with _PROMISED_LOCK:
        found = _PROMISED.get(key)
    if found is None:
        found = _promise_goodput(scenario)
        with _PROMISED_LOCK:
            if len(_PROMISED) >= _PROMISED_MAX:
                _PROMISED.pop(next(iter(_PROMISED)))
            _PROMISED[key] = found
    return found


def _promise_goodput(scenario: Scenario) -> PromiseGoodput:
    from capacity.model.mix import mix_model
    from capacity.model.percentiles import percentile_goodput_rps

    mix = mix_model(scenario)
    rates = [percentile_goodput_rps(mix, j) for j in range(len(mix.classes))]
    j = int(np.argmin(rates))
    c = mix.classes[j]
    rate = float(rates[j])
    basis = f"p{c.percentile:g}" if c.percentile is not None else "mean"
    if mix.batch_max <= 0:
        promise = "nothing_fits"
    elif rate >= mix.ceiling_rps * (1 - 1e-9) or (c.tpot_s is None and c.ttft_s is None):
        promise = "capacity"
    else:
        promise = _binding_promise(mix, j, rate, c)
    return PromiseGoodput(rate, basis, c.name if len(mix.classes) > 1 or scenario.raw.get("workloads") else None,
                          promise)


def _binding_promise(mix: Any, j: int, rate: float, c: Any) -> str:
    """The promise of class j closest to its limit at ``rate``: the larger latency over promise."""
    from capacity.model.percentiles import class_latency

    p = (c.percentile or 50.0) / 100.0
    at = class_latency(mix, j, rate, (p,)) if c.percentile is not None else class_latency(mix, j, rate, ())
    key = f"p{100 * p:g}" if c.percentile is not None else "mean"
    ratios = {name: at[f"{key}_{name}_s"] / promise for name, promise in (("tpot", c.tpot_s), ("ttft", c.ttft_s))
              if promise}
    return max(ratios, key=ratios.get) if ratios else "capacity"


def latency_at_percentile(scenario: Scenario, rate_rps: float, class_name: str | None) -> dict[str, float]:
    """TPOT and TTFT [s] of one replica at ``rate_rps``, at the (binding) class's percentile."""
    from capacity.model.mix import mix_model
    from capacity.model.percentiles import class_latency

    mix = mix_model(scenario)
    names = [c.name for c in mix.classes]
    j = names.index(class_name) if class_name in names else 0
    c = mix.classes[j]
    if c.percentile is None:
        at = class_latency(mix, j, rate_rps, ())
        return {"tpot_s": at["mean_tpot_s"], "ttft_s": at["mean_ttft_s"]}
    p = c.percentile / 100.0
    at = class_latency(mix, j, rate_rps, (p,))
    return {"tpot_s": at[f"p{100 * p:g}_tpot_s"], "ttft_s": at[f"p{100 * p:g}_ttft_s"]}


# --- every option of a set of layouts at a design load (numpy; the fleet table is this as a DataFrame) -------------

def stack(rows: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Flat inputs of many scenarios (``Scenario.inputs``) as one array per input."""
    return {key: np.array([r[key] for r in rows], dtype=float) for key in rows[0]}


def _option_rows(x: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int, np.ndarray, np.ndarray,
                                                         np.ndarray, np.ndarray]:
    """The options' results (``analyse``), their count, and per option: GPUs per replica, price per GPU-hour [$/h],
    prompt and output tokens."""
    r = analyse(x, text=False)
    n = int(np.size(r["goodput_rps"]))

    def rows(values: np.ndarray) -> np.ndarray:
        return np.broadcast_to(values, (n,)).astype(float)

    return r, n, rows(r["gpus_per_replica"]), rows(x["price_per_hour"]), rows(x["prompt_tokens"]), rows(
        x["output_tokens"])


#: Layout roles (``size_options``' ``roles``): which rows a layout gives. ``all``: every mode, and either pool of a
#: split; ``aggregated``: the one-pool modes and same-layout pools; ``prefill`` / ``decode``: that pool of a split.
ROLES = ("all", "aggregated", "prefill", "decode")


def size_options(x: Mapping[str, np.ndarray], design_rps: float, headroom: float = 0.0,
                 modes: Iterable[str] = MODES, target: float | None = None,
                 promise_rps: np.ndarray | None = None, roles: Iterable[str] | None = None,
                 pairs: Iterable[tuple[int, int]] = ()) -> dict[str, np.ndarray]:
    """Replicas, GPUs, cost and latency at the design load for every layout row of ``x`` and serving mode.

    ``x``: flat inputs (``stack``), one row per layout. Rows come mode by mode, the layouts in order within each.
    ``target`` (requests/s, default the design load) is the load the costs per token are taken at.
    ``promise_rps``: per layout, a colocated replica's goodput at the promises' percentile (``promise_goodput``);
    where given (finite), the colocated rows use it and the other modes are not offered.
    ``roles``: per layout, one of ``ROLES`` (default ``all``): the one-pool modes and ``disaggregated`` size the
    layouts of role ``all`` or ``aggregated``; ``split`` pairs a prefill pool (role ``all`` or ``prefill``) with a
    decode pool (role ``all`` or ``decode``), each its own layout (``split_rows``); ``pairs``: (prefill, decode)
    layout pairs ``split`` also sizes (the scenario's stated pools).
    ``pools``: the ``disaggregated`` rows of every layout; ``decode_rps``: each layout's decode replica rate
    (``disagg_decode_rps``), a split's ``replica_rps``; ``offered``: layouts whose pools are modelled (not sized at
    a percentile).
    Keys: ``fleet.COLUMNS`` less the text labels, plus ``layout`` (the row of ``x``; a split's decode pool),
    ``prefill_layout`` (a split's prefill pool; the layout itself for ``disaggregated``, -1 for one pool) and ``mode``.
    """
    modes = list(modes)
    unknown = set(modes) - set(ALL_MODES)
    if unknown:
        raise ValueError(f"unknown serving modes {sorted(unknown)}; use {', '.join(ALL_MODES)}")
    target = design_rps if target is None else target
    r, n, g, price, p_tokens, a_tokens = _option_rows(x)
    percentile = (np.zeros(n, bool) if promise_rps is None
                  else np.isfinite(np.broadcast_to(np.asarray(promise_rps, float), (n,))))
    role = np.full(n, "all", dtype=object) if roles is None else np.asarray(list(roles), dtype=object)
    aggregated = np.isin(role, ("all", "aggregated"))
    parts = []
    pools: dict[str, np.ndarray] | None = None
    for mode in modes:
        if mode == "split":
            pools = pools if pools is not None else _mode_rows("disaggregated", x, r, n, g, price, p_tokens,
                                                               a_tokens, design_rps, headroom, target, promise_rps,
                                                               percentile)
            parts.append(split_rows(pools, np.broadcast_to(r["disagg_decode_rps"], (n,)), ~percentile, x, role,
                                    design_rps, target, p_tokens, a_tokens, list(pairs),
                                    skip_same="disaggregated" in modes))
            continue
        out = _mode_rows(mode, x, r, n, g, price, p_tokens, a_tokens, design_rps, headroom, target, promise_rps,
                         percentile)
        if mode == "disaggregated":
            pools = out
        parts.append(out if aggregated.all() else {k: np.asarray(v)[aggregated] for k, v in out.items()})
    return {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in parts[0]}


def _mode_rows(mode: str, x: Mapping[str, np.ndarray], r: Mapping[str, np.ndarray], n: int, g: np.ndarray,
               price: np.ndarray, p_tokens: np.ndarray, a_tokens: np.ndarray, design_rps: float, headroom: float,
               target: float, promise_rps: np.ndarray | None, percentile: np.ndarray) -> dict[str, np.ndarray]:
    """``size_options``' rows of one one-pool mode or same-layout pools, one per layout of ``x``."""
    out: dict[str, np.ndarray] = {"layout": np.arange(n), "mode": np.full(n, mode, dtype=object),
                                  "gpus_per_replica": g, "price_per_gpu_hour": price}
    if mode == "disaggregated":
        decode = replicas_for(design_rps, r["disagg_decode_rps"], headroom)
        prefill = replicas_for(design_rps, r["disagg_prefill_rps"], headroom)
        out["replicas"], out["prefill_replicas"], out["decode_replicas"] = decode + prefill, prefill, decode
        out["replica_rps"] = np.broadcast_to(r["disagg_goodput_per_gpu_rps"] * g, (n,))
        out["goodput_limit"] = np.full(n, "pools", dtype=object)
        out["prefill_layout"] = np.arange(n)
        out["prefill_gpus_per_replica"], out["prefill_price_per_gpu_hour"] = g, price
    else:
        if mode == "colocated":
            rate = np.broadcast_to(r["goodput_rps"], (n,)).astype(float)
            if promise_rps is not None:
                rate = np.where(percentile, np.broadcast_to(np.asarray(promise_rps, float), (n,)), rate)
            limit = np.asarray(["nothing_fits", "capacity", "tpot", "ttft"], dtype=object)[
                np.broadcast_to(r["goodput_limit"], (n,))]
        else:
            rate = np.broadcast_to(r["chunked_goodput_rps"], (n,)).astype(float)
            limit = np.full(n, "chunked", dtype=object)
        out["replicas"] = replicas_for(design_rps, rate, headroom)
        out["prefill_replicas"] = out["decode_replicas"] = np.full(n, np.nan)
        out["replica_rps"], out["goodput_limit"] = rate, limit
        out["prefill_layout"] = np.full(n, -1)
        out["prefill_gpus_per_replica"] = out["prefill_price_per_gpu_hour"] = np.full(n, np.nan)
    out["gpus"] = out["replicas"] * g
    out["cost_per_hour"] = out["gpus"] * price
    return _at_design(out, x, r, mode, design_rps, target, p_tokens, a_tokens, n,
                      percentile if mode != "colocated" else np.zeros(n, bool))


def split_rows(pools: Mapping[str, np.ndarray], decode_rps: np.ndarray, offered: np.ndarray,
               x: Mapping[str, np.ndarray], role: np.ndarray, design: float,
               target: float, p_tokens: np.ndarray, a_tokens: np.ndarray, pairs: list[tuple[int, int]] = (),
               skip_same: bool = False) -> dict[str, np.ndarray]:
    """Split pools, each on its own layout: for every decode layout, the cheapest prefill pool of any prefill
    layout (and each of ``pairs``), from ``pools`` (the ``disaggregated`` rows of every layout, one per layout).

    The two pools carry the whole design load D each, so they are sized apart (DistServe, OSDI 2024, section 3):
    layout i's prefill pool needs ``P_i = ceil(D / (λ_p,i (1 - h)))`` replicas of g_i GPUs and keeps TTFT_i (its M/D/1
    queue at D / P_i, KV transfer included); layout j's decode pool ``D_j = ceil(D / (λ_d,j (1 - h)))`` of g_j GPUs,
    keeping TPOT_j at D / D_j. A split costs ``P_i g_i c_i + D_j g_j c_j`` per hour (c: each layout's price per
    GPU-hour) and keeps the promises where TTFT_i and TPOT_j do. Its cheapest prefill pool is the same for every
    decode pool (``order``: keeps the TTFT promise, cost, TTFT, GPUs), so pairing each decode layout with it holds
    the cheapest split of all ``n_p x n_d`` pairs in ``n_d`` rows. ``skip_same``: leave out a pair of one layout
    with itself (the ``disaggregated`` row says it). ``input_share``: the prefill pool's share of the cost (of the
    GPUs without a price).
    """
    n = len(role)
    prefill_ok_role = np.isin(role, ("all", "prefill"))
    decode_ok_role = np.isin(role, ("all", "decode"))
    g, price = np.asarray(pools["gpus_per_replica"], float), np.asarray(pools["price_per_gpu_hour"], float)
    p_rep, d_rep = np.asarray(pools["prefill_replicas"], float), np.asarray(pools["decode_replicas"], float)
    ttft, tpot = np.asarray(pools["ttft_at_design_s"], float), np.asarray(pools["tpot_at_design_s"], float)
    ttft_slo = np.broadcast_to(x["ttft_slo_s"], (n,)).astype(float)
    tpot_slo = np.broadcast_to(x["tpot_slo_s"], (n,)).astype(float)
    p_gpus, d_gpus = p_rep * g, d_rep * g
    p_cost, d_cost = p_gpus * price, d_gpus * price
    p_ok = offered & np.isfinite(p_rep) & (p_rep > 0) & (ttft <= ttft_slo)
    d_ok = offered & np.isfinite(d_rep) & (d_rep > 0) & (tpot <= tpot_slo)
    prefill_rows, decode_rows = np.flatnonzero(prefill_ok_role), np.flatnonzero(decode_ok_role)
    chosen: list[tuple[int, int]] = []
    if len(prefill_rows) and len(decode_rows):
        key = np.where(np.isfinite(p_cost), p_cost, p_gpus)
        best = int(prefill_rows[order(p_ok[prefill_rows], key[prefill_rows], ttft[prefill_rows],
                                      p_gpus[prefill_rows])[0]])
        chosen = [(best, int(j)) for j in decode_rows if not (skip_same and int(j) == best)]
    for pair in pairs:
        if tuple(pair) not in chosen:
            chosen.append((int(pair[0]), int(pair[1])))
    i = np.asarray([c[0] for c in chosen], dtype=int)
    j = np.asarray([c[1] for c in chosen], dtype=int)
    m = len(chosen)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = p_cost[i] + d_cost[j]
        gpus = p_gpus[i] + d_gpus[j]
        f_in = np.where(np.isfinite(cost), p_cost[i] / cost, p_gpus[i] / gpus)
        p_tok, a_tok = np.broadcast_to(p_tokens, (n,))[j], np.broadcast_to(a_tokens, (n,))[j]
        feasible = np.isfinite(p_rep[i] + d_rep[j]) & (p_rep[i] > 0) & (d_rep[j] > 0) & offered[i] & offered[j]
        return {
            "layout": j, "mode": np.full(m, "split", dtype=object), "gpus_per_replica": g[j],
            "price_per_gpu_hour": price[j], "replicas": p_rep[i] + d_rep[j], "prefill_replicas": p_rep[i],
            "decode_replicas": d_rep[j], "replica_rps": np.asarray(decode_rps, float)[j],
            "goodput_limit": np.full(m, "pools", dtype=object), "prefill_layout": i,
            "prefill_gpus_per_replica": g[i], "prefill_price_per_gpu_hour": price[i], "gpus": gpus,
            "cost_per_hour": cost, "load_per_replica_rps": design / d_rep[j], "tpot_at_design_s": tpot[j],
            "ttft_at_design_s": ttft[i], "input_share": f_in,
            "cost_per_million_input_tokens": cost * f_in / (design * p_tok * 3600.0) * 1e6,
            "cost_per_million_output_tokens": cost * (1 - f_in) / (design * a_tok * 3600.0) * 1e6,
            "cost_per_million_tokens": slo.cost_per_million_tokens(cost, 1.0, target, a_tok),
            "cost_per_million_all_tokens": cost / (target * (p_tok + a_tok) * 3600.0) * 1e6,
            "meets_slo": feasible & p_ok[i] & d_ok[j],
            "problem": np.where(~(offered[i] & offered[j]), "percentile promises are modelled for colocated serving "
                                "only", np.where(feasible, "", "serves no load within the promises")).astype(object),
        }


def size_user_options(x: Mapping[str, np.ndarray], design_users: float, headroom: float = 0.0,
                      target_users: float | None = None) -> dict[str, np.ndarray]:
    """``size_options`` for a closed loop of users in flight (``workload.concurrency``): colocated serving only.

    Each layout row of ``x`` holds ``U_r`` users per replica (``analysis.users_keeping_promises``: every mean promise
    kept, nobody waiting for a slot), so it needs ``replicas = ceil(C_design / (U_r (1 - h)))`` (``replicas_for``) and
    carries ``C_design / replicas`` users per replica, at the closed loop's throughput, TPOT and TTFT
    (``analysis.closed_loop``). Costs per token are taken at the throughput of ``target_users`` (default the design
    users) spread over the same replicas. Keys: those of ``size_options``, ``replica_rps`` and
    ``load_per_replica_rps`` being throughputs [requests/s], plus ``replica_users`` (U_r) and ``users_per_replica``.
    """
    from capacity.model.analysis import closed_loop, replica_stages, users_keeping_promises

    target_users = design_users if target_users is None else target_users
    r, n, g, price, p_tokens, a_tokens = _option_rows(x)
    capacity, best = users_keeping_promises(x)
    capacity = np.broadcast_to(capacity, (n,)).astype(float)
    replicas = replicas_for(design_users, capacity, headroom)
    model, mem, prefill, ceiling = replica_stages(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        per, per_target = design_users / replicas, target_users / replicas

        def at(users: np.ndarray):
            return closed_loop(model, prefill, x["output_tokens"], mem.batch_running, ceiling,
                               np.where(np.isfinite(users), users, 0.0), x["think_time_s"],
                               clustering=x["clustering"], request_latency_s=x["request_latency_s"])

        design_point, target_point = at(per), at(per_target)
        served = replicas * np.broadcast_to(target_point.throughput_rps, (n,))  # throughput of the target users
        f_in = np.minimum(np.broadcast_to(design_point.throughput_rps, (n,)) * np.broadcast_to(r["prefill_s"], (n,)),
                          1.0)
        cost = replicas * g * price
        out: dict[str, np.ndarray] = {
            "layout": np.arange(n), "mode": np.full(n, "colocated", dtype=object), "gpus_per_replica": g,
            "price_per_gpu_hour": price, "replicas": replicas, "prefill_replicas": np.full(n, np.nan),
            "decode_replicas": np.full(n, np.nan), "replica_rps": np.broadcast_to(best.throughput_rps, (n,)),
            "goodput_limit": np.asarray(["nothing_fits", "capacity", "tpot", "ttft"], dtype=object)[
                np.broadcast_to(r["goodput_limit"], (n,))],
            "gpus": replicas * g, "cost_per_hour": cost,
            "load_per_replica_rps": np.broadcast_to(design_point.throughput_rps, (n,)),
            "tpot_at_design_s": np.broadcast_to(design_point.tpot_s, (n,)),
            "ttft_at_design_s": np.broadcast_to(design_point.ttft_s, (n,)), "input_share": f_in,
            "cost_per_million_input_tokens": cost * f_in / (served * p_tokens * 3600.0) * 1e6,
            "cost_per_million_output_tokens": cost * (1 - f_in) / (served * a_tokens * 3600.0) * 1e6,
            "cost_per_million_tokens": slo.cost_per_million_tokens(cost, 1.0, served, a_tokens),
            "cost_per_million_all_tokens": cost / (served * (p_tokens + a_tokens) * 3600.0) * 1e6,
            "replica_users": capacity, "users_per_replica": per, "served_rps": served,
        }
        # What sets U_r: the promise nearest its limit there, or the slot limit (the ceiling) with promises to spare.
        tpot_ratio = np.broadcast_to(best.tpot_s / x["tpot_slo_s"], (n,))
        ttft_ratio = np.broadcast_to(best.ttft_s / x["ttft_slo_s"], (n,))
        at_limit = np.fmax(tpot_ratio, ttft_ratio) >= 1 - 1e-6
        out["binding"] = np.where(capacity <= 0, out["goodput_limit"], np.where(
            at_limit, np.where(tpot_ratio >= ttft_ratio, "tpot", "ttft"), "capacity")).astype(object)
        out["binding"] = np.where(np.broadcast_to(mem.batch_max, (n,)) <= 0, "nothing_fits", out["binding"])
    feasible = np.isfinite(replicas) & (replicas > 0)
    tpot_slo = np.broadcast_to(x["tpot_slo_s"], (n,)).astype(float)
    ttft_slo = np.broadcast_to(x["ttft_slo_s"], (n,)).astype(float)
    # Users are spread evenly, at most U_r per replica: within the promises to rounding.
    slack = 1 + 1e-9
    out["meets_slo"] = feasible & (out["tpot_at_design_s"] <= tpot_slo * slack) & \
        (out["ttft_at_design_s"] <= ttft_slo * slack)
    out["problem"] = np.where(feasible, "", "serves no users within the promises").astype(object)
    return out


def _at_design(out: dict[str, np.ndarray], x: Mapping[str, np.ndarray], r: Mapping[str, np.ndarray], mode: str,
               design: float, target: float, p_tokens: np.ndarray, a_tokens: np.ndarray, n: int,
               not_offered: np.ndarray) -> dict[str, np.ndarray]:
    """Latency and cost per token with the design load spread over the replicas of ``out``."""
    def at(load: np.ndarray) -> dict[str, np.ndarray]:
        return analyse({**x, "arrival_rate": np.where(np.isfinite(load), load, 0.0)}, text=False)

    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "disaggregated":
            per_decode = design / out["decode_replicas"]
            per_prefill = design / out["prefill_replicas"]
            tpot = np.broadcast_to(at(per_decode)["disagg_tpot_at_load_s"], (n,))
            ttft = np.broadcast_to(delayed_ttft_s(prefill_pool_ttft_s(per_prefill, r["prefill_s"], r["kv_transfer_s"]),
                                                  x["request_latency_s"]), (n,))
            f_in = out["prefill_replicas"] / out["replicas"]
            out["load_per_replica_rps"] = per_decode
        else:
            per = design / out["replicas"]
            values = at(per)
            prefix = "" if mode == "colocated" else "chunked_"
            tpot = np.broadcast_to(values[f"{prefix}tpot_at_load_s"], (n,))
            ttft = np.broadcast_to(values[f"{prefix}ttft_at_load_s"], (n,))
            f_in = np.minimum(per * np.broadcast_to(r["prefill_s"], (n,)), 1.0)
            out["load_per_replica_rps"] = per
        cost = out["cost_per_hour"]
        out["tpot_at_design_s"], out["ttft_at_design_s"], out["input_share"] = tpot, ttft, f_in
        out["cost_per_million_input_tokens"] = cost * f_in / (design * p_tokens * 3600.0) * 1e6
        out["cost_per_million_output_tokens"] = cost * (1 - f_in) / (design * a_tokens * 3600.0) * 1e6
        out["cost_per_million_tokens"] = slo.cost_per_million_tokens(cost, 1.0, target, a_tokens)
        out["cost_per_million_all_tokens"] = cost / (target * (p_tokens + a_tokens) * 3600.0) * 1e6
    tpot_slo = np.broadcast_to(x["tpot_slo_s"], (n,)).astype(float)
    ttft_slo = np.broadcast_to(x["ttft_slo_s"], (n,)).astype(float)
    feasible = np.isfinite(out["replicas"]) & (out["replicas"] > 0) & ~not_offered
    # A colocated replica sized at a percentile keeps its promises at that percentile: its mean latencies are below.
    out["meets_slo"] = feasible & (tpot <= tpot_slo) & (ttft <= ttft_slo)
    out["problem"] = np.where(not_offered, "percentile promises are modelled for colocated serving only",
                              np.where(feasible, "", "serves no load within the promises")).astype(object)
    return out


def order(meets: np.ndarray, cost: np.ndarray, tpot: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """Row order of options: those that keep the promises first, cheapest first (no price: fewest GPUs), then lower
    TPOT, then fewer GPUs; the rest after, by the same keys. Stable: equal options keep their order."""
    return np.lexsort((np.asarray(gpus, float), np.asarray(tpot, float), np.asarray(cost, float),
                       ~np.asarray(meets, bool)))


def mode_rates(replica: Results, mode: str) -> tuple[float, float]:
    """(ceiling, goodput) of one replica in ``mode`` [requests/s] (the decode replica's for separate pools)."""
    if mode == "chunked":
        return float(replica["chunked_ceiling_rps"]), float(replica["chunked_goodput_rps"])
    if mode in ("disaggregated", "split"):
        ceiling = decode_pool_ceiling_rps(replica["batch_max"], replica["decode_step_s"],
                                          replica.scenario.workload.output_tokens)
        return float(ceiling), float(replica["disagg_decode_rps"])
    return float(replica["ceiling_rps"]), float(replica["goodput_rps"])


# --- the answer -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizing:
    """The one answer for a scenario. Times [s], loads [requests/s], money [$]; None where it does not apply.

    ``scenario`` and ``results``: as stated (one replica of the scenario's own layout). ``replica``: the chosen
    layout's scenario evaluated at the load one replica carries (``load_per_replica_rps``), or at the scenario's own
    arrival rate without a load. ``options``: every option compared (``size_options``), ``chosen`` its row.
    """

    scenario: Scenario
    results: Results
    replica: Results
    mode: str
    tensor_parallel: int
    gpus_per_replica: int
    stated_layout: bool          # the chosen layout is the scenario's own (its TP, first mode allowed)
    load_rps: float | None       # the target load (workload.arrival_rate)
    design_load_rps: float | None
    peak_factor: float
    headroom: float
    replica_goodput_rps: float   # one replica's goodput in the chosen layout, at the promises' percentile
    goodput_basis: str           # "mean", or the percentile a promise holds at ("p99")
    replicas: int | None         # None: no layout serves the load within the promises
    prefill_replicas: int | None
    decode_replicas: int | None
    gpus: int | None
    load_per_replica_rps: float | None
    tpot_at_load_s: float        # mean TPOT at the load per replica (at the goodput without a load)
    ttft_at_load_s: float
    tpot_at_percentile_s: float | None  # at the binding class's percentile, where a percentile is promised
    ttft_at_percentile_s: float | None
    binding_promise: str         # what sets one replica's goodput: tpot, ttft, capacity, nothing_fits
    binding_class: str | None
    keeps_promises: bool
    price_per_gpu_hour: float | None
    price_source: str
    cost_per_hour: float | None
    cost_per_month: float | None
    cost_per_million_tokens: float | None      # output tokens, at the target load (without: at the goodput)
    cost_per_million_all_tokens: float | None  # prompt + output tokens
    reasons: tuple[str, ...] = ()
    options: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    chosen: int = 0
    stated_option: int | None = None  # row of ``options`` of the scenario's own layout in the chosen mode
    users: float | None = None           # closed loop: target users in flight (workload.concurrency)
    design_users: float | None = None    # users the fleet is sized for: target x peak factor
    users_per_replica: float | None = None  # design users each replica holds
    replica_users: float | None = None   # most users one replica holds within the promises, no slot wait
    # Power (docs/model.md "Power and energy"): every GPU at its full board power all month, an upper bound.
    power_kw: float | None = None              # fleet: GPUs x board power x PUE [kW]
    energy_kwh_per_month: float | None = None  # x 730 h
    energy_cost_per_month: float | None = None  # x $/kWh
    energy_per_million_tokens_kwh: float | None = None  # at the target load (without one: at the goodput)
    energy_cost_per_million_tokens: float | None = None
    gpu: str = ""                        # GPU type of the chosen layout (a split: the decode pool's)
    attention_data_parallel: int = 1     # attention data-parallel ranks per replica chosen (MoE)
    expert_parallel: int = 1             # expert-parallel GPUs per replica chosen (MoE)
    # A split (``mode == "split"``): the prefill pool's layout; ``replica`` is then the decode pool's
    prefill_replica: Results | None = field(default=None, repr=False)  # one prefill replica at its load
    prefill_gpu: str | None = None
    prefill_tensor_parallel: int | None = None
    prefill_gpus_per_replica: int | None = None
    prefill_attention_data_parallel: int | None = None
    prefill_expert_parallel: int | None = None
    prefill_price_per_gpu_hour: float | None = None
    prefill_load_per_replica_rps: float | None = None
    split_goodput_rps: float | None = None  # without a load: the stated pools' goodput, min(P λ_p, D λ_d)

    @property
    def served_rps(self) -> float:
        """Requests/s the answer serves: the load, or without one every replica at its goodput (the stated split
        pools: their goodput)."""
        if self.load_rps:
            return self.load_rps
        if self.split_goodput_rps is not None:
            return self.split_goodput_rps
        return self.replica_goodput_rps * (self.replicas or 0)

    @property
    def stated_load_per_replica_rps(self) -> float | None:
        """Load one replica of the scenario's own layout carries when that layout serves the load in the chosen mode
        (its fleet sized the same way) [requests/s]; None without a load or where it serves none."""
        i = self.stated_option
        if not self.load_rps or i is None or not np.isfinite(self.options["load_per_replica_rps"][i]):
            return None
        return float(self.options["load_per_replica_rps"][i])

    def notes(self) -> list[str]:
        """The per-replica results' notes, less the one-replica overload note where the fleet carries the load,
        then the answer's reasons."""
        carried = self.replicas is not None and self.load_rps
        notes = [n for n in self.results.notes() if not (carried and n.startswith(OVERLOAD_NOTE))]
        if carried and any(n.startswith(OVERLOAD_NOTE) for n in self.results.notes()):
            notes.append(f"one replica of the stated layout cannot carry {self.load_rps:,.3g} requests/s alone; the "
                         f"answer spreads the load over {self.replicas:,} replicas of {self.gpus_per_replica} GPUs, "
                         f"{self.load_per_replica_rps:,.3g} requests/s each")
        return [*notes, *self.reasons]

    def to_dict(self) -> dict[str, Any]:
        """The answer's ``sizing_*`` results (``SIZING_RESULTS``) in base units; None where undefined."""
        values = {"sizing_mode": self.mode, "sizing_tensor_parallel": self.tensor_parallel,
                  "sizing_gpus_per_replica": self.gpus_per_replica, "sizing_replicas": self.replicas,
                  "sizing_prefill_replicas": self.prefill_replicas, "sizing_decode_replicas": self.decode_replicas,
                  "sizing_gpus": self.gpus, "sizing_load_rps": self.load_rps,
                  "sizing_design_load_rps": self.design_load_rps,
                  "sizing_load_per_replica_rps": self.load_per_replica_rps,
                  "sizing_replica_goodput_rps": self.replica_goodput_rps, "sizing_goodput_basis": self.goodput_basis,
                  "sizing_tpot_at_load_s": self.tpot_at_load_s, "sizing_ttft_at_load_s": self.ttft_at_load_s,
                  "sizing_tpot_at_percentile_s": self.tpot_at_percentile_s,
                  "sizing_ttft_at_percentile_s": self.ttft_at_percentile_s,
                  "sizing_binding_promise": self.binding_promise, "sizing_binding_class": self.binding_class,
                  "sizing_keeps_promises": self.keeps_promises, "sizing_price_per_gpu_hour": self.price_per_gpu_hour,
                  "sizing_price_source": self.price_source, "sizing_cost_per_hour": self.cost_per_hour,
                  "sizing_cost_per_month": self.cost_per_month,
                  "sizing_cost_per_million_tokens": self.cost_per_million_tokens,
                  "sizing_cost_per_million_all_tokens": self.cost_per_million_all_tokens,
                  "sizing_users": self.users, "sizing_design_users": self.design_users,
                  "sizing_users_per_replica": self.users_per_replica, "sizing_replica_users": self.replica_users,
                  "sizing_power_kw": self.power_kw, "sizing_energy_kwh_per_month": self.energy_kwh_per_month,
                  "sizing_energy_cost_per_month": self.energy_cost_per_month,
                  "sizing_energy_per_million_tokens_kwh": self.energy_per_million_tokens_kwh,
                  "sizing_energy_cost_per_million_tokens": self.energy_cost_per_million_tokens,
                  "sizing_gpu": self.gpu, "sizing_attention_data_parallel": self.attention_data_parallel,
                  "sizing_expert_parallel": self.expert_parallel, "sizing_prefill_gpu": self.prefill_gpu,
                  "sizing_prefill_tensor_parallel": self.prefill_tensor_parallel,
                  "sizing_prefill_gpus_per_replica": self.prefill_gpus_per_replica,
                  "sizing_prefill_attention_data_parallel": self.prefill_attention_data_parallel,
                  "sizing_prefill_expert_parallel": self.prefill_expert_parallel,
                  "sizing_prefill_price_per_gpu_hour": self.prefill_price_per_gpu_hour,
                  "sizing_prefill_load_per_replica_rps": self.prefill_load_per_replica_rps}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}


#: The answer's results: name -> (unit, meaning); ``capacity evaluate`` prints them after ``analysis.RESULTS``.
SIZING_RESULTS: dict[str, tuple[str, str]] = {
    "sizing_mode": ("", "serving mode chosen: colocated, chunked, disaggregated or split (pools on their own "
                        "layouts)"),
    "sizing_tensor_parallel": ("GPUs", "tensor-parallel GPUs per replica chosen"),
    "sizing_gpus_per_replica": ("GPUs", "GPUs per replica chosen (tensor x pipeline parallel)"),
    "sizing_replicas": ("replicas", "replicas the load needs (without a load: as stated)"),
    "sizing_prefill_replicas": ("replicas", "separate pools: prefill replicas"),
    "sizing_decode_replicas": ("replicas", "separate pools: decode replicas"),
    "sizing_gpus": ("GPUs", "GPUs of the fleet: replicas x GPUs per replica"),
    "sizing_load_rps": ("requests/s", "target load (workload.arrival_rate; a closed loop: its users' throughput)"),
    "sizing_design_load_rps": ("requests/s", "load the fleet is sized for: target x peak factor"),
    "sizing_load_per_replica_rps": ("requests/s", "load each replica carries (decode replica for separate pools)"),
    "sizing_replica_goodput_rps": ("requests/s", "one replica's goodput in the chosen layout, at the promises' "
                                                 "percentile"),
    "sizing_goodput_basis": ("", "what the goodput keeps: promises on the mean, or at a percentile (p99)"),
    "sizing_tpot_at_load_s": ("s", "mean TPOT at each replica's load (without a load: at the goodput)"),
    "sizing_ttft_at_load_s": ("s", "mean TTFT at each replica's load (without a load: at the goodput)"),
    "sizing_tpot_at_percentile_s": ("s", "TPOT at the promise's percentile at each replica's load"),
    "sizing_ttft_at_percentile_s": ("s", "TTFT at the promise's percentile at each replica's load"),
    "sizing_binding_promise": ("", "what sets one replica's goodput: tpot, ttft, capacity, pools or nothing_fits"),
    "sizing_binding_class": ("", "the workload class whose promise binds"),
    "sizing_keeps_promises": ("", "whether the fleet keeps every promise at the design load"),
    "sizing_price_per_gpu_hour": ("$/h", "the one price per GPU-hour every cost uses"),
    "sizing_price_source": ("", "where the price comes from: scenario or catalog (with its source)"),
    "sizing_cost_per_hour": ("$/h", "GPU cost of the fleet per hour"),
    "sizing_cost_per_month": ("$/month", "GPU cost of the fleet per month (730 h)"),
    "sizing_cost_per_million_tokens": ("$", "fleet cost of a million output tokens at the target load"),
    "sizing_cost_per_million_all_tokens": ("$", "fleet cost of a million prompt + output tokens at the target load"),
    "sizing_users": ("users", "closed loop: concurrent users, the target load (workload.concurrency)"),
    "sizing_design_users": ("users", "closed loop: users the fleet is sized for: target x peak factor"),
    "sizing_users_per_replica": ("users", "closed loop: users in flight each replica holds at the design load"),
    "sizing_replica_users": ("users", "closed loop: most users one replica holds within the promises, none waiting "
                                      "for a slot"),
    "sizing_power_kw": ("kW", "power of the fleet: GPUs x board power x PUE (full load, an upper bound)"),
    "sizing_energy_kwh_per_month": ("kWh", "energy of the fleet per month at full-load power (730 h)"),
    "sizing_energy_cost_per_month": ("$/month", "electricity cost of the fleet per month, beside its GPU cost"),
    "sizing_energy_per_million_tokens_kwh": ("kWh", "fleet energy of a million output tokens at the target load"),
    "sizing_energy_cost_per_million_tokens": ("$", "electricity cost of a million output tokens at the target load"),
    "sizing_gpu": ("", "GPU type of the layout chosen (split pools: the decode pool's)"),
    "sizing_attention_data_parallel": ("ranks", "attention data-parallel ranks per replica chosen (MoE; 1: none)"),
    "sizing_expert_parallel": ("GPUs", "expert-parallel GPUs per replica chosen (MoE; 1: none)"),
    "sizing_prefill_gpu": ("", "split pools: the prefill pool's GPU type"),
    "sizing_prefill_tensor_parallel": ("GPUs", "split pools: tensor-parallel GPUs per prefill replica"),
    "sizing_prefill_gpus_per_replica": ("GPUs", "split pools: GPUs per prefill replica"),
    "sizing_prefill_attention_data_parallel": ("ranks", "split pools: attention data-parallel ranks per prefill "
                                                        "replica"),
    "sizing_prefill_expert_parallel": ("GPUs", "split pools: expert-parallel GPUs per prefill replica"),
    "sizing_prefill_price_per_gpu_hour": ("$/h", "split pools: the prefill pool's price per GPU-hour"),
    "sizing_prefill_load_per_replica_rps": ("requests/s", "split pools: load each prefill replica carries"),
}


def price_source(scenario: Scenario) -> str:
    """Where the price per GPU-hour comes from: ``scenario``, ``catalog (<its source>)`` or ``none``."""
    if scenario.gpu.price_per_hour is None:
        return "none"
    raw_gpu = (scenario.raw or {}).get("gpu")
    if isinstance(raw_gpu, Mapping) and raw_gpu.get("price_per_hour") is not None:
        return "scenario"
    try:
        source = catalog.gpu(scenario.gpu.name).get("price_source")
    except ScenarioError:
        source = None
    return f"catalog ({source})" if source else "catalog"


def allowed_layouts(scenario: Scenario) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Serving modes and tensor-parallel sizes the scenario allows (``layouts_allowed`` of its ``fleet`` section,
    ``gpu.count``, whether it is sized per class and whether it states ``pools``)."""
    return layouts_allowed(scenario.fleet.modes, scenario.fleet.tensor_parallel, scenario.gpu.count,
                           sized_per_class(scenario), has_pools(scenario.raw))


def has_pools(mapping: Mapping[str, Any] | None) -> bool:
    """Whether a scenario mapping states split pools (a ``pools`` section, ``model.split_pools``)."""
    return isinstance(mapping, Mapping) and isinstance(mapping.get("pools"), Mapping)


def layouts_allowed(modes: Iterable[str] = (), tensor_parallel: Iterable[int] = (), gpu_count: int = 1,
                    per_class: bool = False, pools: bool = False) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Serving modes and tensor-parallel sizes a scenario allows: its ``fleet.modes`` and ``fleet.tensor_parallel``,
    by default every mode and TP 1, 2, 4, 8 and its own ``gpu.count`` (its own first). A scenario that states split
    pools (``pools``) also allows ``split``, first: its stated pools are its own layout. A scenario sized per class
    (``per_class``: percentile promises or workload classes) is sized on colocated serving, which is then allowed
    whatever ``fleet.modes`` says (``size`` gives the reason). The answer, ``capacity fleet`` and the report's fleet
    chart all compare these."""
    modes = tuple(modes) or (("split", *MODES) if pools else MODES)
    if per_class and "colocated" not in modes:
        modes = ("colocated", *modes)
    tps = tuple(tensor_parallel) or tuple(dict.fromkeys((int(gpu_count), *TENSOR_PARALLEL)))
    return modes, tps


def _own_index(built: list[tuple[str, int, Scenario]], scenario: Scenario) -> int | None:
    """The layout of ``built`` that is ``scenario``'s own: its TP, attention data and expert parallel sizes."""
    g = scenario.gpu
    return next((i for i, (_, tp, s) in enumerate(built) if tp == g.count and
                 (s.gpu.attention_data_parallel, s.gpu.expert_parallel) == (g.attention_data_parallel,
                                                                             g.expert_parallel)), None)


@dataclass(frozen=True, slots=True)
class Layouts:
    """The layouts a sizing or a fleet compares (``compared_layouts``): ``built`` (gpu label, TP, Scenario), each
    one's ``size_options`` role, the stated split pools (``pair``: prefill and decode layout) and what did not build
    (``skipped``: gpu, tensor_parallel, problem)."""

    built: list[tuple[str, int, Scenario]]
    roles: list[str]
    pair: tuple[int, int] | None
    skipped: list[dict[str, Any]]

    @property
    def scenarios(self) -> list[Scenario]:
        return [s for _, _, s in self.built]


def compared_layouts(mapping: Mapping[str, Any], modes: Iterable[str], tps: Iterable[int],
                     gpus: Iterable[str] | None = None, prefill_gpus: Iterable[str] | None = None,
                     decode_gpus: Iterable[str] | None = None) -> Layouts:
    """Every layout the answer (``size``) and ``capacity fleet`` compare for a scenario mapping.

    The scenario on each of ``gpus`` (None: its own) and TP of ``tps`` (``layout_scenarios``, MoE variants
    included). Where ``split`` is among ``modes``: a scenario with a ``pools`` section also gets each pool's own
    layouts (``split_pools.pool_mapping``: its GPU, or each of ``prefill_gpus`` / ``decode_gpus``, on the pool's
    own TP and ``tps``; roles ``prefill`` / ``decode``; its stated pools are ``pair``), and the scenario's own layouts
    serve the one-pool modes only (role ``aggregated``). Without ``pools`` a split pairs any two layouts (role
    ``all``), and ``prefill_gpus`` / ``decode_gpus`` add the scenario on those GPUs for that pool alone.
    """
    tps = tuple(dict.fromkeys(int(t) for t in tps))
    modes = tuple(modes)
    pooled = has_pools(mapping)
    plain = {k: v for k, v in mapping.items() if k != "pools"}
    built, skipped = layout_scenarios(plain, gpus, tps)
    split = "split" in modes
    roles = ["aggregated" if pooled and split else "all"] * len(built)
    pair = None
    if split and pooled:
        from capacity.model.split_pools import pool_mapping, pool_scenarios

        stated = pool_scenarios(mapping)
        ends = []
        for pool, own, names in (("prefill", stated.prefill, prefill_gpus), ("decode", stated.decode, decode_gpus)):
            part, _ = layout_scenarios(pool_mapping(mapping, pool), names, dict.fromkeys((own.gpu.count, *tps)))
            at = _own_index(part, own) if names is None else None
            if at is None:
                part.insert(0, (own.gpu.name, own.gpu.count, own))
                at = 0
            ends.append(len(built) + at)
            built += part
            roles += [pool] * len(part)
        pair = (ends[0], ends[1])
    elif split:
        for pool, names in (("prefill", prefill_gpus), ("decode", decode_gpus)):
            if names is not None:
                part, _ = layout_scenarios(plain, names, tps)
                built += part
                roles += [pool] * len(part)
    return Layouts(built, roles, pair, skipped)


def _layouts(scenario: Scenario, modes: tuple[str, ...], tps: tuple[int, ...], every: bool
             ) -> tuple[Layouts, int]:
    """``compared_layouts`` of the scenario (``every``: with a load; without one, or for a scenario built in code,
    its own layout and stated pools alone) and the index of its own layout."""
    mapping = dict(scenario.raw) if scenario.raw else None
    if every and mapping is not None:
        lay = compared_layouts(mapping, modes, tps)
    else:
        built: list[tuple[str, int, Scenario]] = [(scenario.gpu.name, scenario.gpu.count, scenario)]
        roles, pair = ["all"], None
        if mapping is not None and has_pools(mapping) and "split" in modes:
            from capacity.model.split_pools import pool_scenarios

            stated = pool_scenarios(mapping)
            built += [(stated.prefill.gpu.name, stated.prefill.gpu.count, stated.prefill),
                      (stated.decode.gpu.name, stated.decode.gpu.count, stated.decode)]
            roles, pair = ["aggregated", "prefill", "decode"], (1, 2)
        lay = Layouts(built, roles, pair, [])
    own = _own_index([b for b, r in zip(lay.built, lay.roles, strict=True) if r in ("all", "aggregated")], scenario)
    if own is None:  # the scenario's own TP is not among those allowed: still shown as the stated option
        lay.built.insert(0, (scenario.gpu.name, scenario.gpu.count, scenario))
        lay.roles.insert(0, "aggregated" if lay.pair else "all")
        lay = Layouts(lay.built, lay.roles, (lay.pair[0] + 1, lay.pair[1] + 1) if lay.pair else None, lay.skipped)
        own = 0
    return lay, own


def size(scenario: Scenario, results: Results | None = None) -> Sizing:
    """The sizing of ``scenario`` (module docstring): layout, fleet, latencies at the load, cost, reasons."""
    results = results if results is not None else scenario.evaluate()
    modes, tps = allowed_layouts(scenario)
    if scenario.workload.concurrency:
        return _size_users(scenario, results, modes, tps)
    load = scenario.workload.arrival_rate or None
    peak, headroom = scenario.fleet.peak_factor, scenario.fleet.headroom
    # Without a load (or a scenario built in code) the scenario's own layout
    lay, own = _layouts(scenario, modes, tps, bool(load))
    scenarios, skipped = lay.scenarios, lay.skipped
    promised = [promise_goodput(s) for s in scenarios]
    per_class = promised[0] is not None
    reasons: list[str] = []
    if per_class and set(modes) - {"colocated"}:
        reasons.append("promises at a percentile (or workload classes) are sized on colocated serving, where the "
                       "percentile model holds; chunked prefill and separate pools are not offered")
    x = stack([s.inputs() for s in scenarios])
    promise_rps = np.array([p.rate_rps if p else np.nan for p in promised]) if per_class else None
    design = (load or 0.0) * peak
    pairs = [lay.pair] if lay.pair else []
    if load:
        check_plan(load, peak, headroom)
        opts = size_options(x, design, headroom, modes, target=load, promise_rps=promise_rps, roles=lay.roles,
                            pairs=pairs)
        # Options not offered (percentile promises on chunked or pooled serving) never meet the promises.
        ranked = order(opts["meets_slo"], _cost_key(opts), opts["tpot_at_design_s"], opts["gpus"])
        chosen = int(ranked[0])
        keeps = bool(opts["meets_slo"][chosen])
    else:
        opts = size_options(x, 0.0, headroom, modes[:1], promise_rps=promise_rps, roles=lay.roles, pairs=pairs)
        chosen = own if modes[0] != "split" or lay.pair is None else next(
            i for i in range(len(opts["mode"])) if (int(opts["prefill_layout"][i]), int(opts["layout"][i])) == lay.pair)
        keeps = True
    layout = int(opts["layout"][chosen])
    mode = str(opts["mode"][chosen])
    if mode == "split":
        stated_at = lay.pair
        stated_option = next((i for i in range(len(opts["mode"])) if opts["mode"][i] == "split" and
                              (int(opts["prefill_layout"][i]), int(opts["layout"][i])) == stated_at), None)
        is_stated = (int(opts["prefill_layout"][chosen]), layout) == stated_at
        prefill = scenarios[int(opts["prefill_layout"][chosen])]
    else:
        stated_option = next((i for i in range(len(opts["mode"])) if int(opts["layout"][i]) == own
                              and opts["mode"][i] == mode), None)
        is_stated, prefill = layout == own, None
    return _answer(scenario, results, scenarios[layout], mode, promised[layout], opts, chosen,
                   keeps, load, design, peak, headroom, tuple(reasons), is_stated, stated_option, skipped,
                   prefill)


def _size_users(scenario: Scenario, results: Results, modes: tuple[str, ...], tps: tuple[int, ...]) -> Sizing:
    """``size`` for a closed loop (``workload.concurrency`` users in flight): each layout holds
    ``analysis.users_keeping_promises`` users per replica (``size_user_options``), colocated serving only."""
    users = float(scenario.workload.concurrency)
    peak, headroom = scenario.fleet.peak_factor, scenario.fleet.headroom
    check_plan(users, peak, headroom)
    mapping = {k: v for k, v in scenario.raw.items() if k != "pools"} if scenario.raw else None
    built, skipped = layout_scenarios(mapping, None, tps) if mapping is not None else (
        [(scenario.gpu.name, scenario.gpu.count, scenario)], [])
    own = next((i for i, (_, tp, _) in enumerate(built) if tp == scenario.gpu.count), None)
    if own is None:
        built.insert(0, (scenario.gpu.name, scenario.gpu.count, scenario))
        own = 0
    scenarios = [s for _, _, s in built]
    reasons = []
    if set(modes) - {"colocated"}:
        reasons.append("a closed loop of users in flight is modelled for colocated serving (prefills pause decoding); "
                       "chunked prefill and separate pools are not offered")
    if sized_per_class(scenario):
        reasons.append("a closed loop is sized on mean latencies: percentile promises and workload classes are not "
                       "modelled for it")
    design = users * peak
    opts = size_user_options(stack([s.inputs() for s in scenarios]), design, headroom, target_users=users)
    ranked = order(opts["meets_slo"], _cost_key(opts), opts["tpot_at_design_s"], opts["gpus"])
    chosen = int(ranked[0])
    keeps = bool(opts["meets_slo"][chosen])
    layout = int(opts["layout"][chosen])
    served = float(opts["served_rps"][chosen]) if keeps else None
    design_rps = float(opts["load_per_replica_rps"][chosen] * opts["replicas"][chosen]) if keeps else 0.0
    z = _answer(scenario, results, scenarios[layout], "colocated", None, opts, chosen, keeps, served or None,
                design_rps, peak, headroom, tuple(reasons), layout == own, own, skipped)
    return replace(z, users=users, design_users=design, binding_promise=str(opts["binding"][chosen]),
                   users_per_replica=float(opts["users_per_replica"][chosen]) if keeps else None,
                   replica_users=float(opts["replica_users"][chosen]))


def _cost_key(opts: Mapping[str, np.ndarray]) -> np.ndarray:
    """Cost per hour where a price is set, else GPUs (the same order for one price)."""
    cost = opts["cost_per_hour"]
    return np.where(np.isfinite(cost), cost, opts["gpus"])


def _answer(scenario: Scenario, results: Results, chosen_scenario: Scenario, mode: str,
            promised: PromiseGoodput | None, opts: dict[str, np.ndarray], chosen: int, keeps: bool,
            load: float | None, design: float, peak: float, headroom: float, reasons: tuple[str, ...],
            stated: bool, stated_option: int | None, skipped: list[dict[str, Any]],
            prefill_scenario: Scenario | None = None) -> Sizing:
    g = chosen_scenario.gpu
    row = {key: value[chosen] for key, value in opts.items()}
    replica_rps = float(row["replica_rps"])
    price = g.price_per_hour
    reasons_list = list(reasons)
    pools = mode in ("disaggregated", "split")
    split = _SplitAnswer.of(scenario, prefill_scenario) if mode == "split" else None
    if load:
        served = keeps and math.isfinite(float(row["replicas"]))
        replicas = int(row["replicas"]) if served else None
        per_replica = float(row["load_per_replica_rps"]) if served else None
        prefill = int(row["prefill_replicas"]) if served and pools else None
        decode = int(row["decode_replicas"]) if served and pools else None
        if not served:
            reasons_list.append("no layout allowed serves the load within the promises")
    elif split is not None:  # without a load: the stated pools
        replicas, per_replica, prefill, decode = split.workers[0] + split.workers[1], None, *split.workers
    else:
        replicas, per_replica, prefill, decode = g.replicas, None, None, None
    if split is not None:
        assert prefill_scenario is not None
        gp = prefill_scenario.gpu
        gpus = (int(row["gpus"]) if load else prefill * gp.gpus_per_replica + decode * g.gpus_per_replica) \
            if replicas is not None else None
    else:
        gpus = replicas * g.gpus_per_replica if replicas is not None else None
    # One replica of the chosen layout at the load it carries (the decode replica's, for separate pools).
    at = per_replica if per_replica is not None else (scenario.workload.arrival_rate or None)
    split_goodput = None
    if split is not None and not load:  # the stated pools at their goodput, each replica at its share
        split_goodput = split.goodput_rps
        at = split_goodput / decode
    replica = replace(chosen_scenario, workload=replace(chosen_scenario.workload, arrival_rate=at)).evaluate()
    prefill_replica = None
    if split is not None:
        assert prefill_scenario is not None
        p_at = (design / prefill if prefill else None) if load else split_goodput / prefill
        prefill_replica = replace(prefill_scenario, workload=replace(prefill_scenario.workload,
                                                                     arrival_rate=p_at)).evaluate()
    prefix = {"colocated": "", "chunked": "chunked_", "disaggregated": "disagg_", "split": "disagg_"}[mode]
    if per_replica is not None:
        tpot, ttft = float(row["tpot_at_design_s"]), float(row["ttft_at_design_s"])
    elif prefill_replica is not None:
        tpot, ttft = float(replica["disagg_tpot_at_load_s"]), float(prefill_replica["disagg_ttft_at_load_s"])
    else:
        tpot, ttft = float(replica[f"{prefix}tpot_at_goodput_s"]), float(replica[f"{prefix}ttft_at_goodput_s"])
    tpot_p = ttft_p = None
    if promised is not None and promised.basis != "mean":
        rate = per_replica if per_replica is not None else replica_rps
        if rate > 0:
            p = latency_at_percentile(chosen_scenario, rate, promised.binding_class)
            tpot_p, ttft_p = p["tpot_s"], p["ttft_s"]
    binding = promised.binding_promise if promised is not None else _binding(replica, mode)
    if split_goodput is not None and decode and split_goodput < decode * replica_rps * (1 - 1e-9):
        binding = "ttft" if scenario.slo.ttft_s else "capacity"  # the stated prefill pool binds the pools
    if split is not None:
        cost_hour = (float(row["cost_per_hour"]) if load else split.cost_per_hour(prefill, decode)) \
            if gpus is not None else None
        cost_hour = cost_hour if cost_hour is not None and math.isfinite(cost_hour) else None
    else:
        cost_hour = gpus * price if price is not None and gpus is not None else None
    a, p_tokens = scenario.workload.output_tokens, scenario.workload.prompt_tokens
    served_rps = load if load else (split_goodput if split_goodput is not None else
                                    (replica_rps * replicas if replicas else 0.0))
    per_m = per_m_all = None
    if cost_hour is not None and served_rps > 0:
        per_m = float(slo.cost_per_million_tokens(cost_hour, 1.0, served_rps, a))
        per_m_all = cost_hour / (served_rps * (p_tokens + a) * 3600.0) * 1e6
    if not stated:
        if split is not None:
            assert prefill_scenario is not None
            reasons_list.append(f"the cheapest split that keeps the promises is a prefill pool of "
                                f"{layout_label(prefill_scenario)} and a decode pool of "
                                f"{layout_label(chosen_scenario)}; the stated pools are among the options compared")
        else:
            reasons_list.append(f"the cheapest layout that keeps the promises is {_tp_words(chosen_scenario)} "
                                f"({MODE_WORDS[mode]}); the scenario's own {_tp_words(scenario)} is among the options "
                                f"compared")
    for item in skipped:
        reasons_list.append(f"TP{item['tensor_parallel']} not offered: {item['problem']}")
    gp = prefill_scenario.gpu if prefill_scenario is not None else None
    if gp is not None:
        energy = _split_energy(gp, prefill * gp.gpus_per_replica if prefill is not None else None, g,
                               decode * g.gpus_per_replica if decode is not None else None, served_rps, a)
    else:
        energy = fleet_energy(g, gpus, served_rps, a)
    return Sizing(
        scenario=scenario, results=results, replica=replica, mode=mode, tensor_parallel=g.count,
        gpus_per_replica=g.gpus_per_replica, stated_layout=stated, load_rps=load,
        design_load_rps=design if load else None, peak_factor=peak, headroom=headroom,
        replica_goodput_rps=replica_rps, goodput_basis=promised.basis if promised else "mean", replicas=replicas,
        prefill_replicas=prefill, decode_replicas=decode, gpus=gpus, load_per_replica_rps=per_replica,
        tpot_at_load_s=tpot, ttft_at_load_s=ttft, tpot_at_percentile_s=tpot_p, ttft_at_percentile_s=ttft_p,
        binding_promise=binding, binding_class=promised.binding_class if promised else None, keeps_promises=keeps,
        price_per_gpu_hour=price, price_source=price_source(chosen_scenario), cost_per_hour=cost_hour,
        cost_per_month=cost_hour * HOURS_PER_MONTH if cost_hour is not None else None,
        cost_per_million_tokens=per_m, cost_per_million_all_tokens=per_m_all, reasons=tuple(reasons_list),
        options=opts, chosen=chosen, stated_option=stated_option,
        gpu=g.name, attention_data_parallel=g.attention_data_parallel, expert_parallel=g.expert_parallel,
        prefill_replica=prefill_replica, prefill_gpu=gp.name if gp else None,
        prefill_tensor_parallel=gp.count if gp else None,
        prefill_gpus_per_replica=gp.gpus_per_replica if gp else None,
        prefill_attention_data_parallel=gp.attention_data_parallel if gp else None,
        prefill_expert_parallel=gp.expert_parallel if gp else None,
        prefill_price_per_gpu_hour=gp.price_per_hour if gp else None,
        prefill_load_per_replica_rps=(design / prefill if load and prefill else None) if split is not None else None,
        split_goodput_rps=split_goodput, **energy)


def layout_label(scenario: Scenario) -> str:
    """One replica's layout in short: ``4 x h100-sxm (TP4)``, ``8 x gb200 (TP2 x DP4, EP8)``."""
    g = scenario.gpu
    return f"{g.gpus_per_replica} x {g.name} ({_tp_words(scenario)})"


def _tp_words(scenario: Scenario) -> str:
    """``TP4``, or with MoE parallelism ``TP2 x DP4, EP8``."""
    g = scenario.gpu
    words = f"TP{g.count}" + (f" x DP{g.attention_data_parallel}" if g.attention_data_parallel > 1 else "")
    return words + (f", EP{g.expert_parallel}" if g.expert_parallel > 1 else "")


@dataclass(frozen=True, slots=True)
class _SplitAnswer:
    """The stated pools of a split answer: their workers, goodput and price (``model.split_pools``)."""

    workers: tuple[int, int]
    goodput_rps: float
    prices: tuple[float | None, float | None]
    gpus: tuple[int, int]

    @classmethod
    def of(cls, scenario: Scenario, prefill: Scenario | None) -> _SplitAnswer:
        from capacity.model.split_pools import evaluate, pool_scenarios

        if not has_pools(scenario.raw):  # a split chosen for a scenario without a pools section: one of each
            return cls((1, 1), math.nan, (None, None), (1, 1))
        stated = pool_scenarios(scenario.raw)
        out = evaluate(stated)
        return cls((stated.prefill_workers, stated.decode_workers), float(out["split_goodput_rps"]),
                   (stated.prefill.gpu.price_per_hour, stated.decode.gpu.price_per_hour),
                   (stated.prefill.gpu.gpus_per_replica, stated.decode.gpu.gpus_per_replica))

    def cost_per_hour(self, prefill: int, decode: int) -> float | None:
        """``P g_p c_p + D g_d c_d`` [$/h]; None where a pool has no price."""
        if None in self.prices:
            return None
        return prefill * self.gpus[0] * self.prices[0] + decode * self.gpus[1] * self.prices[1]


def fleet_energy(gpu: Any, gpus: int | None, served_rps: float, output_tokens: float) -> dict[str, float | None]:
    """The fleet's power, energy and electricity cost (``formulas.power``) for ``Sizing``: every GPU at its full
    board power all month (an upper bound: hosts, network and idle time below the limit not separated), times the
    PUE; the cost where ``gpu.energy_price_per_kwh`` is set; {} where the board power is not known."""
    if not gpu.tdp_watts or gpus is None:
        return {}
    watts = float(power.replica_power_watts(gpu.tdp_watts, gpus, gpu.pue))
    kwh_month = watts / 1e3 * HOURS_PER_MONTH
    price = gpu.energy_price_per_kwh
    per_m = float(power.energy_per_million_tokens_kwh(watts, served_rps, output_tokens)) if served_rps > 0 else None
    return {"power_kw": watts / 1e3, "energy_kwh_per_month": kwh_month,
            "energy_cost_per_month": kwh_month * price if price is not None else None,
            "energy_per_million_tokens_kwh": per_m,
            "energy_cost_per_million_tokens": per_m * price if price is not None and per_m is not None else None}


def _split_energy(prefill_gpu: Any, prefill_gpus: int | None, decode_gpu: Any, decode_gpus: int | None,
                  served_rps: float, output_tokens: float) -> dict[str, float | None]:
    """``fleet_energy`` of split pools: each pool's GPUs at their own board power and PUE, summed; {} where either
    board power is not known."""
    parts = [fleet_energy(prefill_gpu, prefill_gpus, served_rps, output_tokens),
             fleet_energy(decode_gpu, decode_gpus, served_rps, output_tokens)]
    if not all(parts):
        return {}
    return {k: (parts[0][k] + parts[1][k] if parts[0][k] is not None and parts[1][k] is not None else None)
            for k in parts[0]}


def _binding(replica: Results, mode: str) -> str:
    """What sets one replica's goodput in ``mode``: a promise, capacity, or nothing fits."""
    if replica["batch_max"] <= 0:
        return "nothing_fits"
    if mode == "colocated":
        return str(replica["goodput_limit"])
    s = replica.scenario.slo
    if mode == "chunked":
        if replica["chunked_goodput_rps"] >= replica["chunked_ceiling_rps"] * (1 - 1e-9):
            return "capacity"
        tpot = replica["chunked_tpot_at_goodput_s"] / s.tpot_s if s.tpot_s else 0.0
        ttft = replica["chunked_ttft_at_goodput_s"] / s.ttft_s if s.ttft_s else 0.0
        return "tpot" if tpot >= ttft else "ttft"
    ceiling = decode_pool_ceiling_rps(replica["batch_max"], replica["decode_step_s"],
                                      replica.scenario.workload.output_tokens)
    decode_bound = replica["disagg_decode_rps"] < float(ceiling) * (1 - 1e-9)
    if mode == "split":  # the decode pool's limit (the prefill pool's is its own: the TTFT promise or capacity)
        return "tpot" if decode_bound else "capacity"
    return "tpot" if decode_bound else ("ttft" if s.ttft_s else "capacity")


__all__ = ["ALL_MODES", "ATTENTION_DATA_PARALLEL", "HOURS_PER_MONTH", "Layouts", "MODES", "MODE_WORDS", "ROLES",
           "SIZING_RESULTS", "PromiseGoodput", "Sizing", "TENSOR_PARALLEL", "allowed_layouts", "check_plan",
           "compared_layouts", "has_pools", "latency_at_percentile", "latency_curve", "layout_label",
           "layout_scenarios", "layouts_allowed", "mode_rates", "moe_parallel_sizes", "order", "price_source",
           "promise_goodput", "replicas_for", "size", "size_options", "sized_per_class", "split_rows", "stack"]
