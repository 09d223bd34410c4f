"""The answer a salesperson reads out, and the few derived figures the app and reports show beside it.

``answer(results)`` is one sentence: what the sizing serves, at what time per token, at what price per
million output tokens, and what binds. The figures it and the app need beyond ``analysis.RESULTS``
(monthly cost, where one GPU's memory goes, paged over contiguous, the capacity the promises cost) live
here, each in one function, so the CLI, the app and the reports say the same thing.

One definition of cost per million tokens everywhere: the GPU cost of the hardware serving a load,
divided by the output tokens that load produces (``slo.cost_per_million_tokens``).
"""

from __future__ import annotations

import math

import numpy as np

from capacity.formulas import slo
from capacity.inputs.units import format_time
from capacity.model.scenario import Results, Scenario
from capacity.planning.sizing import HOURS_PER_MONTH, MODE_WORDS, Sizing, layout_label, size


def cost_per_hour(results: Results) -> float | None:
    """GPU cost of the whole sizing: ``price per GPU-hour x GPUs per replica x replicas`` [$/h]; None if no price."""
    gpu = results.scenario.gpu
    if gpu.price_per_hour is None:
        return None
    return gpu.price_per_hour * gpu.gpus_per_replica * gpu.replicas


def cost_per_month(per_hour: float | None) -> float | None:
    """A month of a cost per hour: ``per_hour x 730`` [$/month] (365 x 24 / 12 hours); None stays None."""
    return None if per_hour is None else per_hour * HOURS_PER_MONTH


def monthly_cost(results: Results) -> float | None:
    """What the sizing's GPUs cost in a month, running all the time [$/month]; None without a price."""
    return cost_per_month(cost_per_hour(results))


def cost_per_million_output_tokens(per_hour: float | None | np.ndarray, load_rps: float | np.ndarray,
                                   output_tokens: float) -> float | np.ndarray:
    """GPU cost over the output tokens a load produces: ``per_hour / (λ A 3600) x 1e6`` [$]; inf at no load.

    The headline's figure (``cost_per_million_tokens``, at the goodput) is this at one replica; a fleet sized
    for a load uses it at that load (arrays of fleets at once). NaN when no price is set.
    """
    if per_hour is None:
        return math.nan
    value = slo.cost_per_million_tokens(per_hour, 1.0, load_rps, output_tokens)
    return float(value) if np.ndim(value) == 0 else value


def memory_split(results: Results) -> dict[str, float]:
    """Where one GPU's memory goes [B]: weights, engine reserve, KV pool, and what the engine leaves free.

    The four parts add up to the GPU's memory when the weights fit: the KV pool is ``memory x utilisation -
    weights - reserve`` (essay 000), leaving ``memory x (1 - utilisation)`` free; or, where the engine sizes it from
    the memory the weights leave (TensorRT-LLM's ``free_gpu_memory_fraction`` f), ``f x (memory - weights -
    reserve)``, leaving ``(1 - f)`` of that free.
    """
    s = results.scenario
    weights, reserve = results["weight_bytes_per_gpu"], s.serving.reserved_bytes
    pool = max(results["pool_bytes"], 0.0)
    if s.serving.kv_free_fraction > 0:
        free = max(s.gpu.memory_bytes - weights - reserve - pool, 0.0)
        return {"weights": weights, "engine reserve": reserve, "KV pool": pool,
                "left free (1 - free fraction)": free}
    return {"weights": weights, "engine reserve": reserve, "KV pool": pool,
            "left free (1 - utilisation)": s.gpu.memory_bytes * (1.0 - s.serving.memory_utilization)}


def usable_bytes(results: Results) -> float:
    """Memory the engine may use on one GPU: ``memory x utilisation`` [B]."""
    s = results.scenario
    return s.gpu.memory_bytes * s.serving.memory_utilization


def paged_over_contiguous(results: Results) -> float:
    """How many times more requests paged blocks fit than contiguous reservations [x]; inf if none fit so."""
    contiguous = results["max_requests_contiguous"]
    return results["max_requests_paged"] / contiguous if contiguous > 0 else math.inf


def capacity_gap_rps(results: Results) -> float:
    """Load the promises give up: ``ceiling - goodput`` [requests/s]."""
    return results["ceiling_rps"] - results["goodput_rps"]


def per_user_tokens_per_s(tpot_s: float) -> float:
    """What one user sees at a time per output token: ``1 / TPOT`` [tokens/s]; a 50 ms promise is 20 tokens/s."""
    return 1.0 / tpot_s


def what_binds(results: Results) -> str:
    """What limits the goodput, in words: KV memory, the max_num_seqs cap, the TPOT or the TTFT promise."""
    limit = results["goodput_limit"]
    if limit == "nothing_fits" or results["batch_max"] <= 0:
        return "nothing fits in the KV memory"
    if limit == "tpot":
        return "the TPOT promise"
    if limit == "ttft":
        return "the TTFT promise"
    return "the max_num_seqs cap" if results["batch_limit"] == "max_num_seqs" else "KV memory"


def _ttft_floor_words(sizing: Sizing) -> str:
    """Where a TTFT promise is below a lone request's first token on one colocated replica, that time and its
    parts: ``: a lone request's first token takes 189.7 ms (80.0 ms outside the engine, the request latency)``
    (essay 001 with 80 ms of request latency, tests/answers/test_sentence.py)."""
    s, r = sizing.scenario, sizing.replica
    if sizing.binding_promise != "ttft" or sizing.mode != "colocated" or s.slo.ttft_s is None:
        return ""
    # At no load the TTFT at the goodput is a lone request's: its prefill and the request latency.
    latency, floor = s.serving.request_latency_s, float(r["ttft_at_goodput_s"])
    if not floor > s.slo.ttft_s:
        return ""
    outside = f" ({format_time(latency)} outside the engine, the request latency)" if latency > 0 else ""
    return f": a lone request's first token takes {format_time(floor)}{outside}"


def binds(sizing: Sizing) -> str:
    """What sets one replica's goodput in the chosen layout, in words (the binding class named)."""
    promise = sizing.binding_promise
    where = f" of the {sizing.binding_class} class" if sizing.binding_class else ""
    at = "" if sizing.goodput_basis == "mean" else f" at {sizing.goodput_basis}"
    if promise in ("tpot", "ttft"):
        return f"the {promise.upper()} promise{where}{at}"
    if promise == "nothing_fits":
        return "nothing fits in the KV memory"
    return what_binds(sizing.replica) if sizing.mode == "colocated" else "GPU capacity"


def layout_words(sizing: Sizing, replicas: int | None = None) -> str:
    """The fleet in words: ``16 x h100-sxm (2 replicas of 8 GPUs, chunked prefill)``; one replica of the scenario's
    own colocated layout stays ``4 x h100-sxm``."""
    if sizing.mode == "split" and sizing.prefill_replica is not None:
        return _split_words(sizing, replicas)
    gpu = sizing.replica.scenario.gpu
    n = sizing.replicas if replicas is None else replicas
    per = sizing.gpus_per_replica
    if not n:
        return f"{per} x {gpu.name}"
    parts = []
    if n > 1 or not sizing.stated_layout or sizing.mode != "colocated":
        if sizing.mode == "disaggregated" and sizing.prefill_replicas is not None and replicas is None:
            parts.append(f"{sizing.prefill_replicas:,} prefill + {sizing.decode_replicas:,} decode replicas of "
                         f"{per} GPU{'s' if per > 1 else ''}")
        else:
            parts.append(f"{n:,} replica{'s' if n > 1 else ''} of {per} GPU{'s' if per > 1 else ''}")
        if sizing.mode != "colocated":
            parts.append(MODE_WORDS[sizing.mode])
    inside = f" ({', '.join(parts)})" if parts else ""
    return f"{n * per:,} x {gpu.name}{inside}"


def _split_words(sizing: Sizing, replicas: int | None = None) -> str:
    """Split pools in words: ``36 GPUs in split pools: 1 prefill replica of 4 x gb200 (TP1 x DP4, EP4) and 4 decode
    replicas of 8 x gb200 (TP8, EP8)``; ``replicas`` 1: one replica of each pool."""
    assert sizing.prefill_replica is not None
    p = sizing.prefill_replicas if replicas is None else replicas
    d = sizing.decode_replicas if replicas is None else replicas
    p, d = p or 1, d or 1
    prefill, decode = sizing.prefill_replica.scenario, sizing.replica.scenario
    gpus = p * prefill.gpu.gpus_per_replica + d * decode.gpu.gpus_per_replica
    return (f"{gpus:,} GPUs in split pools: {p:,} prefill replica{'s' if p > 1 else ''} of {layout_label(prefill)} "
            f"and {d:,} decode replica{'s' if d > 1 else ''} of {layout_label(decode)}")


def promises_words(scenario: Scenario) -> str:
    """The promises in words: `` within TPOT <= 40.0 ms and TTFT <= 1.50 s for 99% of requests``."""
    o = scenario.slo
    if (scenario.raw or {}).get("workloads"):
        return " within each class's promises"
    parts = [f"{name} <= {format_time(value)}" for name, value in (("TPOT", o.tpot_s), ("TTFT", o.ttft_s))
             if value is not None]
    if not parts:
        return " (no latency promise)"
    return " within " + " and ".join(parts) + _share(scenario)


def _share(scenario: Scenario) -> str:
    return f" for {scenario.slo.percentile:g}% of requests" if scenario.slo.percentile is not None else ""


def _money(value: float) -> str:
    return f"${value:,.2f}" if value < 100 else f"${value:,.0f}"


def answer(results: Results | Sizing) -> str:
    """One sentence, rendered from the one answer (``sizing.size``).

    With a load: ``To serve 20 requests/s of 2,000-token prompts and 400-token answers within TPOT <= 40.0 ms, you
    need 16 x h100-sxm (2 replicas of 8 GPUs, chunked prefill) at about $55.84/hour ($40,763/month); each replica
    carries 10.00 requests/s at TPOT 38.6 ms and TTFT 187.3 ms; the TPOT promise sets each replica's limit of 10.13
    requests/s.`` Without one: ``4 x h100-sxm serve 4.90 req/s at 38.2 ms per token (promise <= 50.0 ms) for $1.98
    per million output tokens; KV memory is what binds.`` (every replica at its goodput; ``cost_per_million_tokens``).
    """
    z = results if isinstance(results, Sizing) else size(results.scenario, results)
    s, r = z.scenario, z.replica
    if r["batch_max"] <= 0:
        return f"{s.model.name} does not fit on {layout_words(z, 1)} with room for one request: {binds(z)}."
    if z.replica_goodput_rps <= 0:
        return (f"{layout_words(z, 1)} serve no load within the promises; {binds(z)} cannot be kept at any load"
                f"{_ttft_floor_words(z)}.")
    if z.users:
        return _users_answer(z)
    if z.load_rps:
        shape = _shape_words(s)
        if z.replicas is None:
            return (f"No layout allowed serves {z.load_rps:,.3g} requests/s{daily_words(s)} of {shape}: {binds(z)} "
                    f"limits each replica to {z.replica_goodput_rps:,.2f} requests/s.")
        design = _design_words(z, f"{z.design_load_rps:,.3g} requests/s")
        money = _money_words(z)
        at = (f"TPOT {format_time(z.tpot_at_percentile_s)} and TTFT {format_time(z.ttft_at_percentile_s)} at "
              f"{z.goodput_basis}" if z.tpot_at_percentile_s is not None else
              f"TPOT {format_time(z.tpot_at_load_s)} and TTFT {format_time(z.ttft_at_load_s)}")
        if z.mode == "split" and z.prefill_replica is not None:
            return (f"To serve {z.load_rps:,.3g} requests/s{daily_words(s)} of {shape}, you need {layout_words(z)}"
                    f"{design}{money}; {_split_loads(z)}.")
        return (f"To serve {z.load_rps:,.3g} requests/s{daily_words(s)} of {shape}, you need {layout_words(z)}"
                f"{design}{money}; each replica carries {z.load_per_replica_rps:,.2f} requests/s at {at}; {binds(z)} "
                f"sets each replica's limit of {z.replica_goodput_rps:,.2f} requests/s.")
    hw = layout_words(z)
    promise = f" (promise <= {format_time(s.slo.tpot_s)}{_share(s)})" if s.slo.tpot_s else ""
    cost = z.cost_per_million_tokens
    price = (f"for ${cost:,.2f} per million output tokens" if cost is not None and math.isfinite(cost)
             else "(no GPU price set)")
    verb = "serves" if hw.startswith("1 x ") else "serve"
    tpot = z.tpot_at_percentile_s if z.tpot_at_percentile_s is not None else z.tpot_at_load_s
    return (f"{hw} {verb} {z.served_rps:,.2f} req/s at {format_time(tpot)} per token{promise} {price}; "
            f"{binds(z)} is what binds.")


def _split_loads(z: Sizing) -> str:
    """What each pool of a split carries and what limits it: ``each prefill replica carries 20.00 requests/s at
    TTFT 32.8 ms (limit 60.35, the TTFT promise) and each decode replica 20.00 requests/s at TPOT 28.7 ms (limit
    24.04, GPU capacity)``."""
    assert z.prefill_replica is not None
    p = z.prefill_replica
    p_limit = "the TTFT promise" if z.scenario.slo.ttft_s else "GPU capacity"
    return (f"each prefill replica carries {z.prefill_load_per_replica_rps or 0:,.2f} requests/s at TTFT "
            f"{format_time(z.ttft_at_load_s)} (limit {float(p['disagg_prefill_rps']):,.2f}, {p_limit}) and each decode "
            f"replica {z.load_per_replica_rps or 0:,.2f} requests/s at TPOT {format_time(z.tpot_at_load_s)} (limit "
            f"{z.replica_goodput_rps:,.2f}, {binds(z)})")


def _shape_words(s: Scenario) -> str:
    """``1,000-token prompts and 300-token answers within TPOT <= 50.0 ms``: the requests and their promises."""
    return (f"{s.workload.prompt_tokens:,}-token prompts and {s.workload.output_tokens:,}-token answers"
            f"{promises_words(s)}")


def _design_words(z: Sizing, design: str) -> str:
    """`` (designed for 30 requests/s at peak x3, 20% headroom)``; empty without a peak factor or headroom."""
    if z.peak_factor == 1 and z.headroom == 0:
        return ""
    return f" (designed for {design} at peak x{z.peak_factor:g}{f', {z.headroom:.0%} headroom' if z.headroom else ''})"


def _money_words(z: Sizing) -> str:
    """`` at about $13.96/hour ($10,191/month)``, or that no GPU price is set."""
    if z.cost_per_hour is None:
        return " (no GPU price set, so no cost)"
    return f" at about {_money(z.cost_per_hour)}/hour ({_money(z.cost_per_month)}/month)"


def daily_words(scenario: Scenario) -> str:
    """Where a load given as daily users came from: `` (500 daily users x 20 requests a day, 10% in the peak
    hour)``; empty for a load given in requests/s."""
    w = scenario.workload
    if not w.daily_users:
        return ""
    return (f" ({w.daily_users:,.0f} daily users x {w.requests_per_user_per_day:,.3g} requests a day, "
            f"{w.peak_hour_share:.0%} in the peak hour)")


def users_words(users: float, think_time_s: float) -> str:
    """A closed loop's load in words: ``1,000 concurrent users`` and how long each thinks between answers."""
    think = f", each pausing {format_time(think_time_s)} between an answer and the next request" if think_time_s else ""
    return f"{users:,.0f} concurrent user{'s' if users != 1 else ''}{think}"


def _users_answer(z: Sizing) -> str:
    """``answer`` for a closed loop: ``To serve 1,000 concurrent users with 1,000-token prompts and 300-token
    answers within TPOT <= 50.0 ms, you need 12 x h100-sxm (12 replicas of 1 GPU) at about $24.00/hour
    ($17,520/month); each replica holds 83.3 users in flight, 5.6 requests/s at TPOT 48.1 ms and TTFT 140.2 ms;
    the TPOT promise sets each replica's limit of 89.0 users.``"""
    s = z.scenario
    who = users_words(z.users, s.workload.think_time_s)
    shape = _shape_words(s)
    limit = binds(z)
    if z.replicas is None:
        return (f"No layout allowed serves {who} with {shape}: {limit} limits each replica to "
                f"{z.replica_users or 0:,.1f} users.")
    design = _design_words(z, f"{z.design_users:,.0f} users")
    money = _money_words(z)
    return (f"To serve {who} with {shape}, you need {layout_words(z)}{design}{money}; each replica holds "
            f"{z.users_per_replica:,.1f} users in flight, {z.load_per_replica_rps:,.2f} requests/s at TPOT "
            f"{format_time(z.tpot_at_load_s)} and TTFT {format_time(z.ttft_at_load_s)}; {limit} sets each replica's "
            f"limit of {z.replica_users:,.1f} users.")


def cautions(results: Results) -> list[str]:
    """What an engine would refuse or a buyer would ask about that the numbers alone do not say.

    Today: a max model length beyond the model's context window (vLLM refuses to start with it).
    """
    s = results.scenario
    out = []
    window, length = s.model.max_position_embeddings, s.serving.max_model_len
    if window and length and length > window:
        out.append(f"max model length {length:,} tokens exceeds {s.model.name}'s context window ({window:,} tokens): "
                   "vLLM refuses to start with it")
    return out


__all__ = ["HOURS_PER_MONTH", "answer", "capacity_gap_rps", "cautions", "cost_per_hour",
           "binds", "cost_per_million_output_tokens", "cost_per_month", "layout_words", "memory_split", "monthly_cost",
           "paged_over_contiguous", "per_user_tokens_per_s", "usable_bytes", "daily_words", "users_words",
           "what_binds"]
