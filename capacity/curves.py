"""Curves for charts: the same formulas evaluated over a range of batch sizes or arrival rates.

Each function takes a Results object and an array, and returns a pandas DataFrame
whose columns carry their unit in the name (``_s`` seconds, ``_rps`` requests/s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from . import slo
from .analysis import StepModel, complete_inputs, step_model, tpot_at_rates_s, ttft_at_rates_s
from .scenario import Results


def _model(results: Results) -> StepModel:
    return step_model(complete_inputs(results.scenario.inputs()), np.asarray(results["context_tokens"]))[0]


def decode_curve(results: Results, batches: ArrayLike) -> pd.DataFrame:
    """Decode step terms and throughput over batch sizes B [sequences].

    Columns: batch, memory_s, compute_s, step_s (max + overhead), tokens_per_s (B / step_s).
    """
    b = np.asarray(batches, dtype=float)
    memory, compute, step = _model(results).decode_terms(b)
    return pd.DataFrame({"batch": b, "memory_s": memory, "compute_s": compute, "step_s": step,
                         "tokens_per_s": b / step})


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
    in_flight (λ A TPOT), with infinities where the load cannot be served.
    """
    model = _model(results)
    lam = np.asarray(rates, dtype=float)
    a_tokens = results.scenario.workload.output_tokens
    tpot = tpot_at_rates_s(model, model.pieces(), results["prefill_s"], a_tokens, results["batch_max"], lam)
    ttft = ttft_at_rates_s(model, results["prefill_tokens"], results["prefill_s"], results["ceiling_rps"], a_tokens,
                           lam)
    batch = slo.in_flight(lam, a_tokens, tpot)
    over = (lam > results["ceiling_rps"]) | (batch > results["batch_max"])
    return pd.DataFrame({"rate_rps": lam, "tpot_s": np.where(over, np.inf, tpot), "ttft_s": ttft,
                         "in_flight": np.where(over, np.inf, batch)})
