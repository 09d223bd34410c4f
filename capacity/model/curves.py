"""Curves for charts: the same formulas evaluated over a range of batch sizes or arrival rates.

Each function takes a Results object and an array, and returns a pandas DataFrame
whose columns carry their unit in the name (``_s`` seconds, ``_rps`` requests/s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas import memory
from capacity.model.analysis import StepModel, analyse, complete_inputs, running_batch, step_model
from capacity.model.scenario import Results, Scenario

if TYPE_CHECKING:  # pandas only where a curve becomes a table: the one answer's latency curve needs none
    import pandas as pd


def _model(results: Results) -> StepModel:
    return step_model(complete_inputs(results.scenario.inputs()), np.asarray(results["context_tokens"]))[0]


def decode_curve(results: Results, batches: ArrayLike) -> pd.DataFrame:
    """Decode step terms and throughput over batch sizes B [sequences].

    Columns: batch, memory_s, compute_s, step_s (max + overhead), tokens_per_s (B / step_s), and
    per_user_tokens_per_s (1 / step_s: what one user sees, which falls as the batch grows).
    """
    import pandas as pd

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


def latency_curve(scenario: Scenario, mode: str, rates: ArrayLike) -> dict[str, np.ndarray]:
    """TPOT and TTFT [s] of one replica of ``scenario`` in ``mode`` at each arrival rate of ``rates`` [requests/s]:
    ``analysis.analyse`` with the rates as its arrival rate, the very composition of the one answer's latencies at
    each replica's load (``sizing``: ``tpot_at_load_s`` and its chunked and separate-pool forms). Keys ``rate_rps``,
    ``tpot_s``, ``ttft_s``. ``load_curve`` is this curve for colocated serving with the decode batch beside it."""
    lam = np.asarray(rates, dtype=float)
    prefix = {"colocated": "", "chunked": "chunked_", "disaggregated": "disagg_", "split": "disagg_"}[mode]
    values = analyse({**scenario.inputs(), "arrival_rate": lam})
    return {"rate_rps": lam, "tpot_s": np.broadcast_to(values[f"{prefix}tpot_at_load_s"], lam.shape),
            "ttft_s": np.broadcast_to(values[f"{prefix}ttft_at_load_s"], lam.shape)}


def load_curve(results: Results, rates: ArrayLike) -> pd.DataFrame:
    """TPOT, TTFT and the decode batch of one colocated replica over arrival rates λ [requests/s].

    Columns: rate_rps, tpot_s, ttft_s (``latency_curve``: ``analyse``'s ``tpot_at_load_s`` and
    ``ttft_at_load_s`` at each rate, the very composition of the answer's latencies at a load; at the ceiling their
    limits from below, past it infinite; a rate of 0 is no load, infinite), in_flight (Little's law ``λ A TPOT``,
    at most B_max; infinite past the ceiling). So the curve passes through the results' TPOT and TTFT at the goodput
    and at the arrival rate under every engine profile.
    """
    import pandas as pd

    lam = np.asarray(rates, dtype=float)
    curve = latency_curve(results.scenario, "colocated", lam)
    tpot = np.asarray(curve["tpot_s"], dtype=float)
    with np.errstate(invalid="ignore"):
        in_flight = np.where(np.isfinite(tpot), np.minimum(lam * results.scenario.workload.output_tokens * tpot,
                                                           results["batch_max"]), np.inf)
    return pd.DataFrame({"rate_rps": lam, "tpot_s": tpot, "ttft_s": np.asarray(curve["ttft_s"], dtype=float),
                         "in_flight": in_flight})


def concurrency_curve(results: Results, tokens_per_request: ArrayLike) -> pd.DataFrame:
    """Requests that fit at once over request lengths T [tokens], with this pool: ``floor(blocks / ceil(T / bs))``.

    Columns: tokens, paged (``memory.max_requests_paged``; sliding-window layers keep only the window), batch
    (capped by max_num_seqs). Essay 000's pool of 28,672 blocks of 16 tokens holds 28,672 requests of one block
    (16 tokens) but 14 of 32K tokens.
    """
    import pandas as pd

    x = complete_inputs(results.scenario.inputs())
    t = np.asarray(tokens_per_request, dtype=float)
    paged = memory.max_requests_paged(results["pool_blocks"], t, x["block_size"], x["sliding_window"],
                                      x["local_layer_fraction"])
    return pd.DataFrame({"tokens": t, "paged": paged, "batch": running_batch(paged, x)})
