"""Curves for charts: the same formulas evaluated over a range of batch sizes or arrival rates.

Each function takes a Results object and an array, and returns a pandas DataFrame
whose columns carry their unit in the name (``_s`` seconds, ``_rps`` requests/s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from capacity.formulas import memory
from capacity.model.analysis import (
    StepModel,
    complete_inputs,
    latencies_at_rates,
    prefill_stage,
    running_batch,
    step_model,
)
from capacity.model.scenario import Results


def _model(results: Results) -> StepModel:
    return step_model(complete_inputs(results.scenario.inputs()), np.asarray(results["context_tokens"]))[0]


def decode_curve(results: Results, batches: ArrayLike) -> pd.DataFrame:
    """Decode step terms and throughput over batch sizes B [sequences].

    Columns: batch, memory_s, compute_s, step_s (max + overhead), tokens_per_s (B / step_s), and
    per_user_tokens_per_s (1 / step_s: what one user sees, which falls as the batch grows).
    """
    b = np.asarray(batches, dtype=float)
    memory, compute, step = _model(results).decode_terms(b)
    return pd.DataFrame({"batch": b, "memory_s": memory, "compute_s": compute, "step_s": step,
                         "tokens_per_s": b / step, "per_user_tokens_per_s": 1.0 / step})


def balance_batch(results: Results) -> float:
    """Decode batch where the compute term overtakes the memory term: ``(W/BW) / (2N/F - c kv/BW)`` [sequences].

    For MoE the weight term is taken at all experts (the large-batch limit).

    Infinite when each added sequence costs more bytes than arithmetic (the memory term always wins).
    """
    (a_mem, m_mem), (a_comp, m_comp) = _model(results).pieces()
    slope = m_comp - m_mem
    return float((a_mem - a_comp) / slope) if slope > 0 else float("inf")


def load_curve(results: Results, rates: ArrayLike) -> pd.DataFrame:
    """TPOT, TTFT and the decode batch over arrival rates λ [requests/s].

    Columns: rate_rps, tpot_s (fixed point of t_step(λ A TPOT) / (1 - λ t_p)), ttft_s (``slo.ttft_at_rate_s``),
    in_flight (λ A TPOT), with infinities where the load cannot be served. The stages ``analyse`` composes
    (``analysis.prefill_stage``, ``analysis.latencies_at_rates``), so the curve passes through the results'
    TPOT and TTFT at the goodput and at the arrival rate under every engine profile.
    """
    x = complete_inputs(results.scenario.inputs())
    model = step_model(x, np.asarray(results["context_tokens"]))[0]
    lam = np.asarray(rates, dtype=float)
    a_tokens = results.scenario.workload.output_tokens
    prefill = prefill_stage(model, x, x["prompt_tokens"], results["shared_blocks"])
    at = latencies_at_rates(model, prefill, a_tokens, results["batch_max"], results["ceiling_rps"], lam)
    over = (lam > results["ceiling_rps"]) | (at.in_flight > results["batch_max"])
    return pd.DataFrame({"rate_rps": lam, "tpot_s": np.where(over, np.inf, at.tpot_s), "ttft_s": at.ttft_s,
                         "in_flight": np.where(over, np.inf, at.in_flight)})


def concurrency_curve(results: Results, tokens_per_request: ArrayLike) -> pd.DataFrame:
    """Requests that fit at once over request lengths T [tokens], with this pool: ``floor(blocks / ceil(T / bs))``.

    Columns: tokens, paged (``memory.max_requests_paged``; sliding-window layers keep only the window), batch
    (capped by max_num_seqs). Essay 000's pool of 28,672 blocks of 16 tokens holds 28,672 requests of one block
    (16 tokens) but 14 of 32K tokens.
    """
    x = complete_inputs(results.scenario.inputs())
    t = np.asarray(tokens_per_request, dtype=float)
    paged = memory.max_requests_paged(results["pool_blocks"], t, x["block_size"], x["sliding_window"],
                                      x["local_layer_fraction"])
    return pd.DataFrame({"tokens": t, "paged": paged, "batch": running_batch(paged, x)})
