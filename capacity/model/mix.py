"""Workload classes: a mix of request shapes with their own shares, prefix hit rates and promises.

A customer's traffic is rarely one shape: "70% chat (1K in / 300 out, TPOT 50 ms at p99), 30% RAG
(8K in / 200 out, TTFT 2 s), 80% of prompts share a 1,500-token system prompt". A scenario says so in a
``workloads:`` list (docs/workloads.md)::

    workloads:
      - {name: chat, share: 0.7, prompt_tokens: 1000, output_tokens: 300,
         shared_prefix_tokens: 500, prefix_hit_rate: 0.8, slo: {tpot: "50 ms", percentile: 99}}
      - {name: rag, share: 0.3, prompt_tokens: {dist: lognormal, mean: 8000, sigma: 0.4}, output_tokens: 200,
         slo: {ttft: "2 s", percentile: 90}}

Lengths are a number or a distribution (the simulator's ``{dist: fixed|uniform|lognormal, ...}``). A
request of a class carries the class's shared prefix with probability ``prefix_hit_rate`` (a cached prompt
prefix: prefill skips its full blocks and the blocks are stored once); the others prefill the whole prompt.

The analytic model of a mix (``MixModel``) splits every class into *shapes*: equiprobable points of its
length distributions, each with a prefix hit or miss. All classes share one engine, so they share its
decode steps and the prefill passes that pause them: the load model of ``slo`` applies to the mix with

    t_p = sum_k w_k t_p,k          (mean prefill per arrival, w_k the share of arrivals of shape k; the decoding
                                    sequences pay its GPU time, a share of a batched pass under an engine profile)
    A   = sum_k w_k A_k            (mean answer)
    c   = sum_k w_k A_k (P_k + A_k / 2) / A     (context of a decoding sequence, weighted by decode time)

and the step pieces of ``analysis.step_model`` at that context. The engine's rules come from the single-shape
model's stages (``analysis.kv_pool_bytes``, ``running_batch``, ``prefill_stage``), never composed here again. The
batch limit is what the KV pool holds when
each shape's share of the resident sequences is its share of decode time, ``r_k = w_k A_k / A`` (Little's
law with a common TPOT), each holding its reserved ``P_k + A_k`` tokens outside its class's shared prefix,
which is stored once (``memory.max_requests_mix``). MoE models solve TPOT bounds on the MoE step itself
(``slo.max_rate_for_tpot_rows``), as the single-shape model does. With one class of one shape, every number
is exactly the single-shape model's (tests/model/test_mix.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from capacity.errors import ScenarioError
from capacity.formulas import memory, roofline, slo
from capacity.inputs.lengths import LengthDist, length_dist, prefix_problem
from capacity.inputs.specs import SLO_FIELDS, check_section, in_range, non_negative_int, positive, text
from capacity.model.analysis import (
    StepModel,
    complete_inputs,
    delayed_ttft_s,
    kv_pool_bytes,
    prefill_stage,
    running_batch,
    step_model,
    tpot_at_rates_s,
)

CLASS_KEYS = ("name", "share", "prompt_tokens", "output_tokens", "shared_prefix_tokens", "prefix_hit_rate", "slo")

#: A class's token lengths: the one length type the simulator draws from too (``lengths.LengthDist``).
Lengths = LengthDist


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One class of requests: its share of arrivals, lengths, shared prefix and hit rate, and promises [s]."""

    name: str
    share: float
    prompt: Lengths
    output: Lengths
    shared_prefix_tokens: int = 0
    prefix_hit_rate: float = 1.0
    tpot_s: float | None = None
    ttft_s: float | None = None
    percentile: float | None = None   # 99 means the promise holds for 99% of requests; None: on the mean


#: Most workload classes a scenario may hold: the answer sizes each class at every layout it considers, so a
#: report's time grows with the count (500 classes took 89 s); real mixes have a handful.
MAX_CLASSES = 32


def parse_classes(raw: Any, default_slo: Mapping[str, Any] | None = None) -> tuple[WorkloadClass, ...]:
    """Validate a ``workloads:`` list; one ScenarioError naming every bad field (``workloads[1].share``).

    Shares are normalised to sum 1; a class without ``slo`` takes the scenario's ``slo`` section.
    """
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise ScenarioError(f"workloads must be a non-empty list of classes, got {raw!r:.80}")
    if len(raw) > MAX_CLASSES:  # each class is sized at every layout of the answer: refused before any work
        raise ScenarioError(f"workloads has {len(raw):,} classes, over the limit of {MAX_CLASSES} (merge classes of "
                            f"similar shape and promise)")
    problems: list[str] = []
    classes = []
    for i, item in enumerate(raw):
        path = f"workloads[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{path} must be a mapping (name, share, prompt_tokens, ...), got {item!r:.60}")
            continue
        for key in item:
            if key not in CLASS_KEYS:
                problems.append(f"{path}.{key} is not a known key; allowed: {', '.join(CLASS_KEYS)}")
        got: dict[str, Any] = {}
        checks = {"name": text, "share": _share, "prompt_tokens": length_dist, "output_tokens": length_dist,
                  "shared_prefix_tokens": non_negative_int, "prefix_hit_rate": _hit_rate}
        for key, check in checks.items():
            if item.get(key) is None:
                continue
            try:
                got[key] = check(item[key], f"{path}.{key}")
            except ScenarioError as exc:
                problems.extend(exc.problems)
        for key in ("prompt_tokens", "output_tokens"):
            if item.get(key) is None:
                problems.append(f"{path}.{key} is missing")
        promise = item.get("slo", default_slo)
        o = check_section(f"{path}.slo", promise, SLO_FIELDS, problems=problems)
        too_long = prefix_problem(got.get("shared_prefix_tokens", 0), got["prompt_tokens"],
                                  f"{path}.shared_prefix_tokens") if "prompt_tokens" in got else None
        if too_long:
            problems.append(too_long)
        if "prompt_tokens" in got and "output_tokens" in got:
            classes.append(WorkloadClass(
                name=got.get("name", f"class {i + 1}"), share=got.get("share", 1.0), prompt=got["prompt_tokens"],
                output=got["output_tokens"], shared_prefix_tokens=got.get("shared_prefix_tokens", 0),
                prefix_hit_rate=got.get("prefix_hit_rate", 1.0), tpot_s=o.get("tpot"), ttft_s=o.get("ttft"),
                percentile=o.get("percentile")))
    names = [c.name for c in classes]
    for name in {n for n in names if names.count(n) > 1}:
        problems.append(f"workloads: the class name {name!r} is used twice; names must differ")
    if problems:
        raise ScenarioError(*problems)
    total = sum(c.share for c in classes)
    return tuple(WorkloadClass(c.name, c.share / total, c.prompt, c.output, c.shared_prefix_tokens,
                               c.prefix_hit_rate, c.tpot_s, c.ttft_s, c.percentile) for c in classes)


def _share(value: Any, path: str) -> float:
    return positive(value, path)


#: The share of a class's requests whose prompt starts with the shared prefix.
_hit_rate = in_range(0, 1, "the share of requests whose prompt starts with the shared prefix")


def classes_of(scenario: Any) -> tuple[WorkloadClass, ...]:
    """The scenario's workload classes: its ``workloads:`` list, else one class of its single shape.

    The single class has the workload's fixed lengths, a hit rate of 1 (every request shares the prefix,
    as the single-shape model assumes) and the scenario's promises (``slo.percentile`` if given).
    """
    raw = scenario.raw.get("workloads") if scenario.raw else None
    if raw is not None:
        return parse_classes(raw, scenario.raw.get("slo"))
    w, o = scenario.workload, scenario.slo
    return (WorkloadClass("all", 1.0, Lengths("fixed", w.prompt_tokens), Lengths("fixed", w.output_tokens),
                          w.shared_prefix_tokens, 1.0, o.tpot_s, o.ttft_s, o.percentile),)


def mean_shape(classes: Sequence[WorkloadClass]) -> dict[str, int]:
    """The one shape a single-shape evaluation of a mix uses: share-weighted mean prompt and answer [tokens]."""
    prompt = sum(c.share * float(c.prompt.points().mean()) for c in classes)
    output = sum(c.share * float(c.output.points().mean()) for c in classes)
    return {"prompt_tokens": max(1, round(prompt)), "output_tokens": max(1, round(output))}


@dataclass(frozen=True)
class MixModel:
    """The analytic model of a mix on one engine; arrays are per shape (``klass`` says whose).

    ``weight`` [-] share of arrivals, ``prompt``/``output`` [tokens], ``prefill_tokens`` (uncached) [tokens],
    ``prefill_s`` and ``prefill_compute_s`` [s] per shape; the rest are the mix's mean quantities. ``prefill_s``
    is the prompts' own passes (what TTFT waits for), ``prefill_gpu_s`` the GPU time they cost the decoding
    sequences (TPOT, the ceiling; ``analysis.prefill_stage``): the same without batched prefill.
    """

    classes: tuple[WorkloadClass, ...]
    klass: np.ndarray
    weight: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    prefill_tokens: np.ndarray
    shape_prefill_s: np.ndarray
    shape_prefill_compute_s: np.ndarray
    model: StepModel
    batch_max: float
    prefill_s: float          # t_p, mean prefill per arrival [s]
    prefill_compute_s: float  # c, mean arithmetic a prompt adds to a batched pass [s]
    output_tokens: float      # A, mean answer [tokens]
    context_tokens: float     # average context of a decoding sequence [tokens]
    decode_step_s: float      # at batch_max [s]
    ceiling_rps: float
    prefill_gpu_s: float      # mean GPU time a prompt costs the decoding sequences (batched prefill: its share) [s]
    shape_prefill_gpu_s: np.ndarray | None = None  # that GPU time per shape [s] (None: ``shape_prefill_s``)
    request_latency_s: float = 0.0  # L, a pure delay on every TTFT (``analysis.delayed_ttft``) [s]

    @cached_property
    def pieces(self) -> tuple:
        """The decode step's linear pieces ``((a_mem, m_mem), (a_comp, m_comp))`` (``StepModel.pieces``)."""
        return self.model.pieces()

    def pieces_at(self, rate_rps: float) -> tuple:
        """Linear pieces ``(a_i, m_i)`` of the decode step around the batch at total load λ [s, s per sequence].

        Dense: the step's own pieces (exact). MoE: the weight read is concave in the batch (the experts a batch
        touches), so the step itself is linearised at the mean batch ``B̄ = λ A TPOT``: the chord to ``B̄ + 1``,
        ``m = t_step(B̄ + 1) - t_step(B̄)``, ``a = t_step(B̄) - m B̄`` (one piece).
        """
        if not bool(np.any(self.model.moe)):
            return self.pieces
        batch = float(self.in_flight(rate_rps)) if rate_rps > 0 else 0.0
        batch = batch if math.isfinite(batch) else self.batch_max
        step, after = (float(self.model.step_s(b)) for b in (max(batch, 1.0), max(batch, 1.0) + 1.0))
        return ((step - (after - step) * max(batch, 1.0), after - step),)

    def class_rows(self, j: int) -> np.ndarray:
        return np.flatnonzero(self.klass == j)

    # --- the mean model at a load -------------------------------------------------------------------

    def tpot_s(self, rate_rps: Any) -> np.ndarray:
        """Mean TPOT at total load λ, the same for every class: ``analysis.tpot_at_rates_s`` on the mix [s]."""
        lam = np.asarray(rate_rps, float)
        tpot = tpot_at_rates_s(self.model, self.pieces, self.prefill_gpu_s, self.output_tokens, self.batch_max, lam)
        return np.where(lam < self.ceiling_rps, tpot, np.inf)

    def decode_step_at_s(self, rate_rps: Any) -> np.ndarray:
        """Decode step TTFT waits on at load λ: the step at the load's batch, ``TPOT(λ) (1 - λ t_gpu)`` [s] of the
        dense pieces with the prompts' GPU time (MoE: every expert read), as ``analysis.ttft_at_rates_s`` takes it
        (``slo.decode_step_at_rate_s``); inf at or past the ceiling."""
        lam = np.asarray(rate_rps, float)
        step = slo.decode_step_at_rate_s(lam, self.prefill_gpu_s, self.output_tokens, self.pieces)
        return np.where(lam < self.ceiling_rps, step, np.inf)

    def ttft_s(self, rate_rps: Any) -> np.ndarray:
        """Mean TTFT of an average arrival at load λ [s]: the engine's (``engine_ttft_s``) plus the request latency L
        (``analysis.delayed_ttft_s``: a pure delay)."""
        return delayed_ttft_s(self.engine_ttft_s(rate_rps), self.request_latency_s)

    def engine_ttft_s(self, rate_rps: Any) -> np.ndarray:
        """Mean TTFT of an average arrival at load λ in the engine's passes [s]: ``t_p`` plus the wait of
        ``slo.ttft_at_rate_s``.

        Prefills of mixed sizes make the pass in progress longer (length-biased), so the arrivals are given to
        the TTFT model as their equivalent stream of equal prompts with the same mean and variance of work:
        ``f λ`` prompts per second of ``β = Σ w t² / Σ w t`` each, ``f = t_p / β`` (one shape: ``f = 1``, the
        single-shape model exactly).
        """
        lam = np.asarray(rate_rps, float)
        f, beta = self.work_stream()
        ttft = slo.ttft_at_rate_s(f * lam, beta, f * self.ceiling_rps, self.prefill_compute_s / f,
                                  self.decode_step_at_s(lam), self.output_tokens / f)
        return ttft - beta + self.prefill_s

    def work_stream(self, gpu: bool = False) -> tuple[float, float]:
        """(count factor ``f = (Σ w t)² / Σ w t²`` [-], size ``β = Σ w t² / Σ w t`` [s]) of the prefill work per
        arrival: a Poisson stream of ``f λ`` prompts of ``β`` seconds has the mix's mean and variance of work.

        ``t``: the prompts' own passes (what TTFT queues behind), or with ``gpu`` the GPU time each costs the
        decoding sequences (``analysis.prefill_stage``; under an engine profile its share of a batched pass), the
        work that pauses decoding and so spreads TPOT (``percentiles``): ``f β`` is then the mean model's
        ``prefill_gpu_s``."""
        t = self.shape_prefill_gpu_s if gpu and self.shape_prefill_gpu_s is not None else self.shape_prefill_s
        w = self.weight
        first, second = float(np.dot(w, t)), float(np.dot(w, t * t))
        return first * first / second, second / first

    def class_ttft_s(self, j: int, rate_rps: Any) -> np.ndarray:
        """Mean TTFT of class j: the common wait plus its own prefill, ``TTFT(λ) - t_p + t_p,j`` [s]."""
        return self.ttft_s(rate_rps) - self.prefill_s + self.class_prefill_s(j)

    def class_prefill_s(self, j: int) -> float:
        """Mean prefill of class j's requests (hits and misses, all lengths) [s]."""
        rows = self.class_rows(j)
        return float(np.dot(self.weight[rows], self.shape_prefill_s[rows]) / self.weight[rows].sum())

    def in_flight(self, rate_rps: Any) -> np.ndarray:
        """Sequences decoding at once, ``λ A TPOT(λ)`` (``slo.in_flight``) [requests]."""
        return slo.in_flight(rate_rps, self.output_tokens, self.tpot_s(rate_rps))

    def max_rate_for_tpot_rps(self, tpot_s: float) -> float:
        """Largest total load whose mean TPOT is at most ``tpot_s`` [requests/s]: ``slo.max_rate_for_tpot_rps``
        on the step's pieces, or for a MoE model ``slo.max_rate_for_tpot_rows`` on the MoE step itself (the
        experts a batch touches), as ``analysis`` solves a single shape."""
        if bool(np.any(self.model.moe)):
            return float(slo.max_rate_for_tpot_rows(self.model.step_rows, tpot_s, self.prefill_gpu_s,
                                                    self.output_tokens, self.ceiling_rps))
        return float(slo.max_rate_for_tpot_rps(tpot_s, self.prefill_gpu_s, self.output_tokens, self.pieces))

    def mean_goodput_rps(self, j: int | None = None) -> float:
        """Largest total load whose *mean* TPOT and TTFT keep class j's promises (all classes if None).

        ``slo.max_rate_for_tpot_rps`` and ``slo.max_rate_for_ttft_rps`` on the mix (class j's TTFT target less
        the difference between its prefill and the mean prefill), capped by the ceiling (``slo.goodput_rps``).
        """
        if j is None:
            return min(self.mean_goodput_rps(k) for k in range(len(self.classes)))
        c = self.classes[j]
        tpot = self.max_rate_for_tpot_rps(c.tpot_s if c.tpot_s is not None else math.inf)
        f, beta = self.work_stream()
        # The engine's TTFT keeps the promise less the request latency (``analysis.delayed_ttft``).
        target = (c.ttft_s - self.request_latency_s - self.class_prefill_s(j) + beta if c.ttft_s is not None
                  else math.inf)
        ttft = slo.max_rate_for_ttft_rps(target, beta, f * self.ceiling_rps, self.prefill_compute_s / f,
                                         self.output_tokens / f, self.pieces,
                                         prefill_gpu_s=self.prefill_gpu_s / f) / f
        return float(slo.goodput_rps(self.ceiling_rps, tpot, ttft))


def mix_model(scenario: Any, classes: Sequence[WorkloadClass] | None = None) -> MixModel:
    """Compose the model layer's functions for a mix on ``scenario``'s model, GPU and serving settings."""
    classes = tuple(classes if classes is not None else classes_of(scenario))
    x = complete_inputs(scenario.inputs())
    bs = float(x["block_size"])
    rows: list[tuple[int, float, float, float, float]] = []  # class, weight, prompt, output, prefix tokens
    for j, c in enumerate(classes):
        prompts, outputs = c.prompt.points(), c.output.points()
        for p in prompts:
            for a in outputs:
                w = c.share / (len(prompts) * len(outputs))
                prefix = float(min(c.shared_prefix_tokens, p))
                if c.prefix_hit_rate > 0 and prefix > 0:
                    rows.append((j, w * c.prefix_hit_rate, p, a, prefix))
                if c.prefix_hit_rate < 1 or prefix == 0:
                    rows.append((j, w * (1.0 - c.prefix_hit_rate if prefix > 0 else 1.0), p, a, 0.0))
    table = np.array([r for r in rows if r[1] > 0], dtype=float)
    klass, weight, prompt, output, prefix = table.T
    weight = weight / weight.sum()
    decode_time = weight * output / np.dot(weight, output)
    context = float(np.dot(decode_time, prompt + output / 2.0))
    model, kv_gpu = step_model(x, np.asarray(context))
    # The single-shape model's stages (analysis): the engine's pool rule, its batch cap and its prefill passes.
    blocks = memory.pool_blocks(kv_pool_bytes(x), bs, kv_gpu)
    fits = memory.max_requests_mix(float(blocks), decode_time, prompt + output, prefix,
                                   np.where(prefix > 0, klass, -1), bs, float(x["sliding_window"]),
                                   float(x["local_layer_fraction"]))
    batch = float(running_batch(fits, x))
    prefill = prefill_stage(model, x, prompt, memory.shared_blocks(prefix, bs))
    t_prefill, t_gpu, c_prefill = (np.broadcast_to(np.asarray(t, float), prompt.shape)
                                   for t in (prefill.ttft_s, prefill.gpu_s, prefill.compute_s))
    t_p, a_mean = float(np.dot(weight, t_prefill)), float(np.dot(weight, output))
    t_p_gpu = float(np.dot(weight, t_gpu))
    t_step = float(model.decode_terms(batch)[2])
    ceiling = float(roofline.ceiling_rps(t_p_gpu, t_step, batch, a_mean))
    return MixModel(classes, klass.astype(int), weight, prompt, output, prefill.tokens, t_prefill, c_prefill, model,
                    batch, t_p, float(np.dot(weight, c_prefill)), a_mean, context, t_step, ceiling, t_p_gpu,
                    np.array(t_gpu), float(x["request_latency_s"]))


__all__ = ["Lengths", "MixModel", "WorkloadClass", "classes_of", "mean_shape", "mix_model", "parse_classes"]
