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

from . import slo
from .scenario import Results
from .units import format_time

#: Hours in an average month: 365 x 24 / 12 [h].
HOURS_PER_MONTH = 730.0


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
    """Where one GPU's memory goes [B]: weights, engine reserve, KV pool, and ``memory x (1 - utilisation)`` left free.

    The four parts add up to the GPU's memory when the weights fit (the KV pool is ``memory x utilisation -
    weights - reserve``, essay 000).
    """
    s = results.scenario
    return {"weights": results["weight_bytes_per_gpu"], "engine reserve": s.serving.reserved_bytes,
            "KV pool": max(results["pool_bytes"], 0.0),
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


def hardware(results: Results) -> str:
    """The hardware in words: ``4 x h100-sxm``, or ``3 replicas of 4 x h100-sxm (12 GPUs)``."""
    gpu = results.scenario.gpu
    one = f"{gpu.gpus_per_replica} x {gpu.name}"
    if gpu.replicas > 1:
        return f"{gpu.replicas:,} replicas of {one} ({gpu.gpus_per_replica * gpu.replicas:,} GPUs)"
    return one


def answer(results: Results) -> str:
    """One sentence: ``4 x h100-sxm serve 4.90 req/s at 38.2 ms per token (promise <= 50 ms) for $1.98 per
    million output tokens; KV memory is what binds.``

    The rate is the goodput of every replica together; the time per token is ``tpot_at_goodput_s``; the cost
    is ``cost_per_million_tokens`` (the same for any number of identical replicas).
    """
    r, s = results, results.scenario
    hw = hardware(r)
    binds = what_binds(r)
    if r["batch_max"] <= 0:
        return f"{s.model.name} does not fit on {hw} with room for one request: {binds}."
    if r["goodput_rps"] <= 0:
        return f"{hw} serve no load within the promises; {binds} cannot be kept at any load."
    promise = f" (promise <= {format_time(s.slo.tpot_s)})" if s.slo.tpot_s else ""
    cost = r["cost_per_million_tokens"]
    price = (f"for ${cost:,.2f} per million output tokens" if s.gpu.price_per_hour is not None and math.isfinite(cost)
             else "(no GPU price set)")
    verb = "serves" if hw.startswith("1 x ") else "serve"
    return (f"{hw} {verb} {r['fleet_goodput_rps']:,.2f} req/s at {format_time(r['tpot_at_goodput_s'])} per token"
            f"{promise} {price}; {binds} is what binds.")


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
           "cost_per_million_output_tokens", "cost_per_month", "hardware", "memory_split", "monthly_cost",
           "paged_over_contiguous", "per_user_tokens_per_s", "usable_bytes", "what_binds"]
