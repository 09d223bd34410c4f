"""Speculative decoding on a scenario (issue 29): ``serving.speculative`` and what it does to TPOT by batch.

    serving:
      speculative: {method: mtp, draft_tokens: 3, acceptance_rate: 0.7}       # eagle, mtp, ngram
      speculative: {method: draft, draft_tokens: 4, acceptance_rate: 0.8, draft_params: 1e9, draft_weights: "2 GB"}

The composition (``evaluate``) takes the scenario's own ``StepModel`` (``model.analysis``) at decode batches ``B``:

* verification: the target's pass over ``B`` sequences of ``γ + 1`` tokens: the memory term of a plain step at
  ``B`` (weights once, each sequence's KV), the compute term and all-reduce of ``B (γ + 1)`` tokens;
* one drafter step: ``draft``: ``max(W_d / (tp BW), B 2 N_d / (tp F)) + o`` (its own KV not counted);
  ``eagle`` / ``mtp``: ``draft_layers / L`` of the target's plain pass (one extra decoder layer by default);
  ``ngram``: 0 (a lookup on the CPU);
* TPOT ``formulas.speculative.speculative_tpot_s``, against the plain step ``t_step(B)``.

Results: the expected tokens per step, TPOT with and without speculation at one sequence and at the plain
engine's largest batch, their ratio (speedup), the largest batch where speculation still pays (break-even),
and the draft weights per GPU taken from the KV pool (``draft`` with ``draft_weights``; ``eagle``/``mtp`` with
``draft_weights`` where given, else 0, said in a note). Not modelled: the drafter's KV cache, a lower acceptance
at long contexts, the pool the draft weights take back from the largest batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from capacity.formulas import roofline
from capacity.formulas.speculative import expected_tokens_per_step, speculative_tpot_s
from capacity.inputs.speculative import METHODS, check_speculative

#: Results of a scenario with ``serving.speculative``: name -> (unit, meaning).
SPEC_RESULTS: dict[str, tuple[str, str]] = {
    "spec_expected_tokens_per_step": ("tokens", "tokens one verification pass yields, (1 - a^(g+1)) / (1 - a)"),
    "spec_tpot_single_s": ("s", "TPOT of one sequence with speculation"),
    "spec_tpot_plain_single_s": ("s", "TPOT of one sequence without"),
    "spec_speedup_single": ("x", "plain TPOT over speculative TPOT, one sequence"),
    "spec_tpot_at_batch_max_s": ("s", "TPOT with speculation at the plain engine's largest batch"),
    "spec_speedup_at_batch_max": ("x", "plain TPOT over speculative TPOT at that batch"),
    "spec_breakeven_batch": ("sequences", "largest decode batch where speculation still lowers TPOT (0: never)"),
    "spec_draft_weight_bytes_per_gpu": ("B", "drafter weights each GPU holds beside the target's"),
}


def evaluate(scenario: Any, results: Any) -> dict[str, float]:
    """``SPEC_RESULTS`` of a scenario with ``serving.speculative`` ({} without) [base units]."""
    raw = scenario.raw.get("serving") or {}
    if not isinstance(raw, Mapping) or raw.get("speculative") is None:
        return {}
    spec = check_speculative(raw["speculative"])
    from capacity.model.analysis import complete_inputs, step_model

    x = complete_inputs(scenario.inputs())
    context = x["prompt_tokens"] + x["output_tokens"] / 2.0
    model, _ = step_model(x, context)
    gamma, alpha = spec["draft_tokens"], spec["acceptance_rate"]
    expected = float(expected_tokens_per_step(alpha, gamma))
    batch_max = max(int(results["batch_max"]), 1)
    batches = np.arange(1, batch_max + 1, dtype=float)
    read = model.weights_read(batches)
    t_mem, t_comp, plain = model.decode_terms(batches, read)
    verify_comp = model.terms(read, batches * (gamma + 1))[1]
    verify = roofline.pass_s(t_mem, verify_comp, model.allreduce_s(batches * (gamma + 1)), model.overhead)
    tp = scenario.gpu.count * scenario.gpu.attention_data_parallel
    if spec["method"] == "ngram":
        draft = np.zeros_like(batches)
    elif spec["method"] == "draft":
        draft = roofline.pass_s(spec["draft_weights"] / tp / scenario.gpu.effective_bandwidth,
                                batches * 2.0 * spec["draft_params"] / (tp * scenario.gpu.effective_flops),
                                0.0, model.overhead)
    else:  # eagle / mtp: draft_layers extra decoder layers of the target per drafted token
        draft = spec["draft_layers"] / (scenario.model.transformer_layers or scenario.model.layers) * np.maximum(
            t_mem, t_comp)
    tpot = speculative_tpot_s(verify, draft, gamma, expected)
    pays = np.flatnonzero(tpot < plain)
    return {
        "spec_expected_tokens_per_step": expected,
        "spec_tpot_single_s": float(tpot[0]), "spec_tpot_plain_single_s": float(plain[0]),
        "spec_speedup_single": float(plain[0] / tpot[0]),
        "spec_tpot_at_batch_max_s": float(tpot[-1]), "spec_speedup_at_batch_max": float(plain[-1] / tpot[-1]),
        "spec_breakeven_batch": float(batches[pays[-1]]) if pays.size else 0.0,
        "spec_draft_weight_bytes_per_gpu": spec["draft_weights"] / tp,
    }


__all__ = ["METHODS", "SPEC_RESULTS", "check_speculative", "evaluate"]
