"""Operating guidance the essays give, in the scenario's own numbers: a queue limit and what to inspect first.

Queue limit (essay 000, "Retrying makes a queue longer"): refuse work with HTTP 503 instead of letting the
queue grow, with the limit "near your target TTFT multiplied by prefill throughput":

    max_queued_tokens   = D * P / t_p      (prefill throughput in prompt tokens per second)
    max_queued_requests = floor(D / t_p)   (prompts one engine prefills within D)

with D the tightest TTFT promise, P the mean uncached prompt and t_p its mean prefill. What a limit of K
waiting requests rejects at load λ: every request the engine cannot finish (``1 - ceiling / λ`` past the
ceiling) and the arrivals that find K waiting (``rejected_share``).

What to inspect first (essay 000's closing advice and essay 002's table): TTFT rising -> arrival rate and
queue depth before prompts; TPOT rising -> batch size and KV usage; 503s -> the queue limits; the
concurrency ceiling -> KV usage and context lengths. ``inspect_first`` fills each row with the scenario's
values at a load.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import gammainc

from capacity.model.mix import MixModel, mix_model
from capacity.model.percentiles import residual_wait


def ttft_target_s(mix: MixModel, ttft_s: float | None = None) -> float:
    """The TTFT a queue limit protects [s]: ``ttft_s`` if given, else the tightest class TTFT promise."""
    if ttft_s is not None:
        return ttft_s
    promises = [c.ttft_s for c in mix.classes if c.ttft_s is not None]
    if not promises:
        raise ValueError("no TTFT promise to size a queue limit for: give slo.ttft or a target TTFT")
    return min(promises)


def queue_limits(mix: MixModel, ttft_s: float) -> dict[str, float]:
    """Recommended ``max_queued_tokens`` (D P / t_p) and ``max_queued_requests`` (floor(D / t_p)).

    Also ``prefill_tokens_per_s`` (P / t_p) [tokens/s] and ``ttft_target_s`` (D) [s].
    Essay 001 with a 2 s promise: 1,000 / 109.7 ms = 9,116 tokens/s -> 18,232 tokens, 18 requests.
    """
    tokens = float(np.dot(mix.weight, mix.prefill_tokens))
    throughput = tokens / mix.prefill_s
    return {"ttft_target_s": ttft_s, "prefill_tokens_per_s": throughput,
            "max_queued_tokens": math.floor(ttft_s * throughput),
            "max_queued_requests": math.floor(ttft_s / mix.prefill_s)}


def rejected_share(mix: MixModel, rate_rps: float, max_queued_requests: int) -> float:
    """Share of arrivals a limit of ``K = max_queued_requests`` waiting requests turns away at total load λ [-].

    The engine takes every waiting prompt into its next prefill pass, so the queue an arrival finds holds the
    arrivals since the interval in progress began: Poisson with mean λR, R distributed as the residual wait
    (``percentiles.residual_wait``: uniform on [0, s] with probability 1 - π, exponential of mean θ with
    probability π). So ``P(full) = (1 - π) (1/s) ∫_0^s P(Poisson(λr) >= K) dr + π (λθ / (1 + λθ))^K``, and past
    the ceiling the excess is refused too: ``1 - min(1, ceiling / λ) (1 - P(full))``.
    """
    if rate_rps <= 0:
        return 0.0
    served = min(1.0, mix.ceiling_rps / rate_rps)
    lam = min(rate_rps, mix.ceiling_rps * (1.0 - 1e-9))  # the load the engine keeps; the rest is refused
    busy, s, theta, _ = residual_wait(mix, lam)
    k = max(int(max_queued_requests), 0)
    if k == 0:
        return 1.0
    r = (np.arange(64) + 0.5) / 64 * s  # midpoint rule over the decode step
    during_decode = float(np.mean(gammainc(k, lam * r)))
    during_prefill = (lam * theta / (1.0 + lam * theta)) ** k
    full = (1.0 - busy) * during_decode + busy * during_prefill
    return 1.0 - served * (1.0 - full)


def _bounded(value: float, spec: str, unit: str = "") -> str:
    """``value`` formatted with its unit, or "unbounded" past the ceiling (never "inf" or "nan" in a sentence)."""
    return f"{value:{spec}}{unit}" if math.isfinite(value) else "unbounded (over the ceiling)"


def inspect_first(scenario: Any, rate_rps: float | None = None, ttft_s: float | None = None) -> pd.DataFrame:
    """The "what to inspect first" table with the scenario's numbers at load λ (default: its arrival rate,
    else 80% of the ceiling). Columns: symptom, inspect_first, mechanism, expected (the values to compare)."""
    mix = mix_model(scenario)
    lam = rate_rps if rate_rps is not None else scenario.workload.arrival_rate or 0.8 * mix.ceiling_rps
    if not 0 <= lam < math.inf:  # NaN too: "at nan requests/s" is no guidance
        raise ValueError(f"the load must be a finite number >= 0 requests/s, got {lam}")
    tpot, ttft = float(mix.tpot_s(lam)), float(mix.ttft_s(lam))
    batch = float(mix.in_flight(lam))
    wait = ttft - mix.prefill_s
    try:
        target = ttft_target_s(mix, ttft_s)
        limits = queue_limits(mix, target)
        reject = rejected_share(mix, lam, limits["max_queued_requests"])
        limit_text = (f"queue limit {limits['max_queued_requests']:,} requests / {limits['max_queued_tokens']:,} "
                      f"tokens (TTFT {target * 1e3:,.0f} ms x {limits['prefill_tokens_per_s']:,.0f} prompt tokens/s) "
                      f"rejects {reject:.1%} at {lam:,.2f} requests/s")
    except ValueError:
        limit_text = "no TTFT promise: set slo.ttft to size max_queued_requests / max_queued_tokens"
    rows = [
        ("TTFT rises", "arrival rate and queue depth, before prompts or code",
         "requests wait for the prefill passes ahead of them; the queue grows with the load, not the prompt",
         f"at {lam:,.2f} requests/s ({lam / mix.ceiling_rps:.0%} of the {mix.ceiling_rps:,.2f} ceiling): mean wait "
         f"{_bounded(wait * 1e3, ',.0f', ' ms')}, about {_bounded(lam * wait, ',.1f')} requests queued; prefill "
         f"alone {mix.prefill_s * 1e3:,.0f} ms"),
        ("TPOT rises", "batch size (running requests) and KV-cache usage",
         "more sequences per decode step and more prefills pausing them",
         f"{_bounded(batch, ',.0f')} decoding of {mix.batch_max:,.0f} that fit "
         f"({_bounded(batch / mix.batch_max, '.0%')} of KV), step "
         f"{_bounded(float(mix.decode_step_at_s(lam)) * 1e3, ',.1f', ' ms')}, mean TPOT "
         f"{_bounded(tpot * 1e3, ',.1f', ' ms')}"),
        ("503 errors", "the queue limits (max_num_queued_reqs / max_num_queued_tokens) and retries",
         "a full queue refuses work; client retries add load to the same queue", limit_text),
        ("concurrency ceiling", "KV-cache usage and context lengths",
         "active sequences' KV state fills the pool",
         f"{mix.batch_max:,.0f} conversations fit at {mix.context_tokens:,.0f} tokens of average context"),
    ]
    return pd.DataFrame(rows, columns=["symptom", "inspect_first", "mechanism", "expected"])


__all__ = ["inspect_first", "queue_limits", "rejected_share", "ttft_target_s"]
