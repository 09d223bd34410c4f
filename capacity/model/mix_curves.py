"""Curves of a workload mix: concurrency against context, and throughput against latency with its knee.

* ``concurrency_curve``: how many conversations fit as the context per request grows (paged blocks, and with
  the scenario's shared prefix), from ``memory.max_requests_paged`` / ``max_requests_shared_prefix`` on the
  scenario's KV pool. Concurrency falls inversely with context (essay 004: 32K-token contexts cut it by an
  order of magnitude against 1K).
* ``load_curve``: for loads from a few percent of the mix's ceiling to just below it, the output tokens per
  second, decode batch, mean and p50/p99 TTFT and TPOT of every class (``percentiles.class_latency``).
* ``knee``: the load where throughput gains begin to trade against latency, taken as the maximum of
  Kleinrock's power, throughput / mean end-to-end latency (L. Kleinrock, "Power and deterministic rules of
  thumb for probabilistic problems in computer communications", ICC 1979): below it more load buys throughput
  almost free, above it every request/s costs latency faster than it adds throughput.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from capacity.formulas import memory
from capacity.model.analysis import complete_inputs
from capacity.model.mix import mix_model
from capacity.model.percentiles import class_latency


def concurrency_curve(scenario: Any, context_tokens: ArrayLike | None = None) -> pd.DataFrame:
    """Conversations that fit per replica against tokens per request [requests].

    Columns: ``context_tokens``, ``max_requests_paged``, ``max_requests_shared_prefix`` (the scenario's prefix,
    capped one token short of the context), ``kv_bytes_per_request`` [B, per GPU]. Default contexts: powers of
    two from 256 to the engine's max_model_len.
    """
    r = scenario.evaluate()
    x = complete_inputs(scenario.inputs())
    top = float(x["max_model_len"])
    tokens = np.asarray(context_tokens, float) if context_tokens is not None else \
        np.unique(np.append(2.0 ** np.arange(8, int(np.log2(top)) + 1), top))
    bs, window, local = x["block_size"], x["sliding_window"], x["local_layer_fraction"]
    blocks = r["pool_blocks"]
    # a request keeps at least one token of its own (its answer), as the engine does (simulator/engine.py)
    prefix = np.minimum(scenario.workload.shared_prefix_tokens, tokens - 1)
    return pd.DataFrame({
        "context_tokens": tokens.astype(np.int64),
        "max_requests_paged": memory.max_requests_paged(blocks, tokens, bs, window, local).astype(np.int64),
        "max_requests_shared_prefix": memory.max_requests_shared_prefix(blocks, tokens, prefix, bs, window,
                                                                        local).astype(np.int64),
        "kv_bytes_per_request": memory.request_blocks(tokens, bs, window, local) * bs * r["kv_bytes_per_token_per_gpu"],
    })


def load_curve(scenario: Any, fractions: ArrayLike | None = None) -> pd.DataFrame:
    """Throughput and latency of the mix over loads (shares of its ceiling; default 5% to 98%).

    Columns: ``rate_rps``, ``load_fraction``, ``output_tokens_per_s``, ``in_flight``, ``mean_e2e_s`` (mean
    TTFT + (A - 1) mean TPOT), ``power`` (output tokens/s per second of mean end-to-end latency), and per
    class ``<class>_{mean,p50,p99}_{ttft,tpot}_s``.
    """
    mix = mix_model(scenario)
    f = np.asarray(fractions, float) if fractions is not None else np.linspace(0.05, 0.98, 32)
    rows = []
    for fraction in f:
        lam = float(fraction * mix.ceiling_rps)
        row: dict[str, Any] = {"rate_rps": lam, "load_fraction": float(fraction),
                               "output_tokens_per_s": lam * mix.output_tokens, "in_flight": float(mix.in_flight(lam))}
        e2e = float(mix.ttft_s(lam)) + (mix.output_tokens - 1.0) * float(mix.tpot_s(lam))
        row["mean_e2e_s"] = e2e
        row["power"] = row["output_tokens_per_s"] / e2e if e2e > 0 else 0.0
        for j, c in enumerate(mix.classes):
            for key, value in class_latency(mix, j, lam, (0.5, 0.99)).items():
                row[f"{c.name}_{key}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


def knee(curve: pd.DataFrame) -> pd.Series:
    """The row of ``load_curve`` with the largest power (throughput / mean end-to-end latency)."""
    return curve.loc[curve["power"].idxmax()]


__all__ = ["concurrency_curve", "knee", "load_curve"]
