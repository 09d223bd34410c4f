"""Speculative decoding on a scenario (issue 29): ``serving.speculative`` and what it does to TPOT by batch.

    serving:
      speculative: {method: mtp, draft_tokens: 3, acceptance_rate: 0.7}       # eagle, mtp, ngram
      speculative: {method: draft, draft_tokens: 4, acceptance_rate: 0.8, draft_params: 1e9, draft_weights: "2 GB"}

Speculation is part of the scenario's step model (``analysis.StepModel``, docs/model.md "Speculative decoding"):
every decode step is then one iteration per token it yields, so the ceiling, the goodput, the TPOT at a load, the
cost, the fleet (``planning.fleet``) and the simulator (``simulator.speculative``) follow it. One iteration at a
decode batch ``B``:

* verification: the target's pass over ``B`` sequences of ``v = γ + 1`` tokens (more for a tree,
  ``verify_tokens``): the weights once, each sequence's KV, the arithmetic and all-reduce of ``B v`` tokens;
* ``γ`` drafter passes: ``draft``: the draft model's weights and ``B 2 N_d`` FLOPs, and the engine's overhead;
  ``eagle`` / ``mtp``: ``draft_layers / L`` of the target's plain pass (one extra decoder layer by default);
  ``ngram``: nothing (a lookup on the CPU);
* the iteration's bytes and FLOPs on the roofline (``formulas.speculative.iteration_terms``), over E tokens.

``evaluate`` reports the expected tokens per iteration, TPOT with and without speculation at one sequence and at the
largest batch, their ratio (speedup), the largest batch where speculation still pays (break-even), and the draft
model's weights per GPU (taken from the KV pool: ``draft``, or ``eagle``/``mtp`` with ``draft_weights`` given).
Not modelled: the drafter's own KV cache, a lower acceptance at long contexts or large batches, the lookahead
slots each sequence reserves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from capacity.inputs.speculative import METHODS, check_speculative

#: Results of a scenario with ``serving.speculative``: name -> (unit, meaning).
SPEC_RESULTS: dict[str, tuple[str, str]] = {
    "spec_expected_tokens_per_step": ("tokens", "tokens one verification pass yields, (1 - a^(g+1)) / (1 - a)"),
    "spec_tpot_single_s": ("s", "TPOT of one sequence with speculation"),
    "spec_tpot_plain_single_s": ("s", "TPOT of one sequence without"),
    "spec_speedup_single": ("x", "plain TPOT over speculative TPOT, one sequence"),
    "spec_tpot_at_batch_max_s": ("s", "TPOT with speculation at the largest batch"),
    "spec_speedup_at_batch_max": ("x", "plain TPOT over speculative TPOT at that batch"),
    "spec_breakeven_batch": ("sequences", "largest decode batch where speculation still lowers TPOT (0: never)"),
    "spec_draft_weight_bytes_per_gpu": ("B", "drafter weights each GPU holds beside the target's"),
}


def evaluate(scenario: Any, results: Any) -> dict[str, float]:
    """``SPEC_RESULTS`` of a scenario with ``serving.speculative`` ({} without) [base units]: the scenario's own
    ``StepModel`` (speculating, ``analysis.StepModel.decode_terms``) against the same model with speculation off,
    at every decode batch up to the largest."""
    spec = scenario.serving.speculative
    if not spec:
        return {}
    from dataclasses import replace

    from capacity.model.analysis import complete_inputs, draft_bytes_per_gpu, step_model

    x = complete_inputs(scenario.inputs())
    model, _ = step_model(x, x["prompt_tokens"] + x["output_tokens"] / 2.0)
    plain_model = replace(model, speculative=False)
    batch_max = max(int(results["batch_max"]), 1)
    batches = np.arange(1, batch_max + 1, dtype=float)
    tpot = model.step_s(batches)
    plain = plain_model.step_s(batches)
    pays = np.flatnonzero(tpot < plain)
    return {
        "spec_expected_tokens_per_step": float(spec["expected_tokens"]),
        "spec_tpot_single_s": float(tpot[0]), "spec_tpot_plain_single_s": float(plain[0]),
        "spec_speedup_single": float(plain[0] / tpot[0]),
        "spec_tpot_at_batch_max_s": float(tpot[-1]), "spec_speedup_at_batch_max": float(plain[-1] / tpot[-1]),
        "spec_breakeven_batch": float(batches[pays[-1]]) if pays.size else 0.0,
        "spec_draft_weight_bytes_per_gpu": float(draft_bytes_per_gpu(x)),
    }


__all__ = ["METHODS", "SPEC_RESULTS", "check_speculative", "evaluate"]
