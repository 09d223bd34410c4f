"""Curves for charts: the same formulas evaluated over a range of batch sizes or arrival rates.

Each function takes a Results object and an array, and returns a pandas DataFrame
whose columns carry their unit in the name (``_s`` seconds, ``_rps`` requests/s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from . import roofline, slo
from .scenario import Results


def _per_gpu(results: Results) -> dict[str, float]:
    inputs = results.scenario.inputs()
    return {"weight_bytes": results["weight_bytes_per_gpu"], "kv": results["kv_bytes_per_token_per_gpu"],
            "params": results["params_per_gpu"], "bandwidth": inputs["bandwidth"], "flops": inputs["flops"],
            "overhead": inputs["step_overhead_s"], "context": results["context_tokens"]}


def decode_curve(results: Results, batches: ArrayLike) -> pd.DataFrame:
    """Decode step terms and throughput over batch sizes B [sequences].

    Columns: batch, memory_s, compute_s, step_s (max + overhead), tokens_per_s (B / step_s).
    """
    g = _per_gpu(results)
    b = np.asarray(batches, dtype=float)
    memory = roofline.decode_memory_s(g["weight_bytes"], b, g["context"], g["kv"], g["bandwidth"])
    compute = roofline.decode_compute_s(b, g["params"], g["flops"])
    step = np.maximum(memory, compute) + g["overhead"]
    return pd.DataFrame({"batch": b, "memory_s": memory, "compute_s": compute, "step_s": step,
                         "tokens_per_s": b / step})


def balance_batch(results: Results) -> float:
    """Decode batch where the compute term overtakes the memory term: ``(W/BW) / (2N/F - c kv/BW)`` [sequences].

    Infinite when each added sequence costs more bytes than arithmetic (the memory term always wins).
    """
    g = _per_gpu(results)
    slope = 2.0 * g["params"] / g["flops"] - g["context"] * g["kv"] / g["bandwidth"]
    return float(g["weight_bytes"] / g["bandwidth"] / slope) if slope > 0 else float("inf")


def load_curve(results: Results, rates: ArrayLike) -> pd.DataFrame:
    """TPOT, TTFT and the decode batch over arrival rates λ [requests/s].

    Columns: rate_rps, tpot_s (fixed point of t_step(λ A TPOT) / (1 - λ t_p)), ttft_s (t_p + M/D/1 wait),
    in_flight (λ A TPOT), with infinities where the load cannot be served.
    """
    g = _per_gpu(results)
    lam = np.asarray(rates, dtype=float)
    a_tokens = results.scenario.workload.output_tokens
    pieces = slo.step_pieces(g["weight_bytes"], g["context"], g["kv"], g["bandwidth"], g["params"], g["flops"],
                             g["overhead"])
    tpot = slo.tpot_at_rate_s(lam, results["prefill_s"], a_tokens, pieces)
    ttft = slo.ttft_at_rate_s(lam, results["prefill_s"], results["ceiling_rps"])
    batch = slo.in_flight(lam, a_tokens, tpot)
    over = (lam > results["ceiling_rps"]) | (batch > results["batch_max"])
    return pd.DataFrame({"rate_rps": lam, "tpot_s": np.where(over, np.inf, tpot), "ttft_s": ttft,
                         "in_flight": np.where(over, np.inf, batch)})
