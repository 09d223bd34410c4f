"""Speculative decoding in the simulator (``serving.speculative``, issue 29): iterations that emit accepted tokens.

An engine iteration of a speculating replica is one verification pass and ``γ`` drafter passes; its cost is the
analytic model's iteration (``analysis.StepModel``: ``speculative_cost`` turns the scenario's step model into the
roofline coefficients of one iteration, not divided by E). Each decoding sequence emits, per iteration, the tokens
it had accepted: ``1 + min(G, γ)`` with ``P(G >= k) = α^k`` (each drafted token accepted with probability α until
the first rejection, plus the target's own token; Leviathan et al. 2023, section 3.1), drawn for each request from
the simulation's seed. A request of A tokens (its first from the prefill) thus decodes in ``n`` iterations, the
first ``n`` with ``X_1 + ... + X_n >= A - 1``; the engine runs it as ``1 + n`` steps (``iteration_table``) and its
metrics are read back in tokens (``metrics.books`` with the request's own A: TPOT ``(finish - first token) /
(A - 1)``, output tokens/s of A tokens).

Approximations, stated: the KV pool counts a decoding request's iterations, not its accepted tokens (it holds
``prompt + n`` slots, not ``prompt + A``), and an iteration reads the context of those slots: use it where KV
memory does not bind (the analytic model's ``batch_max`` is far from the batch the load holds); the verification
all-reduce is counted for one token per sequence (exact on one GPU).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from capacity.formulas import roofline
from capacity.simulator.workloads import RequestTable


def accepted_per_iteration(rng: np.random.Generator, alpha: float, gamma: int, size: int) -> np.ndarray:
    """Tokens each of ``size`` iterations emits for one sequence: ``1 + min(G, γ)``, ``G`` the drafted tokens accepted
    before the first rejection (``P(G >= k) = α^k``) [tokens]; mean ``(1 - α^(γ+1)) / (1 - α)``."""
    if alpha >= 1.0:
        return np.full(size, gamma + 1, dtype=np.int64)
    if alpha <= 0.0:
        return np.ones(size, dtype=np.int64)
    accepted = rng.geometric(1.0 - alpha, size) - 1  # successes before the first failure
    return 1 + np.minimum(accepted, gamma)


def iterations_for(rng: np.random.Generator, alpha: float, gamma: int, decode_tokens: int) -> int:
    """Iterations a sequence needs to emit ``decode_tokens`` tokens (the last one may emit more than it needs)."""
    if decode_tokens <= 0:
        return 0
    expected = (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha) if alpha < 1 else gamma + 1.0
    done, steps = 0, 0
    while True:  # draws in blocks of about the expected count, then what is left
        size = max(8, int(math.ceil((decode_tokens - done) / expected * 1.2)) + 4)
        tokens = np.cumsum(accepted_per_iteration(rng, alpha, gamma, size)) + done
        hit = int(np.searchsorted(tokens, decode_tokens, side="left"))
        if hit < size:
            return steps + hit + 1
        done, steps = int(tokens[-1]), steps + size


def iteration_table(table: RequestTable, spec: dict[str, Any], seed: int) -> RequestTable:
    """``table`` with each request's answer as the engine runs it: ``1 + n`` steps (the prefill's token, then
    ``n`` iterations for the other A - 1 tokens, ``iterations_for``), drawn from ``seed``."""
    rng = np.random.default_rng([int(seed), 29])
    alpha, gamma = float(spec["acceptance_rate"]), int(spec["draft_tokens"])
    steps = np.array([1 + iterations_for(rng, alpha, gamma, int(a) - 1) for a in table.output_tokens], dtype=np.int64)
    return replace(table, output_tokens=steps.astype(table.output_tokens.dtype))


def speculative_cost(scenario: Any) -> Any:
    """The scenario's ``RooflineCost`` for one speculative iteration (per iteration, not per token): the memory term
    ``(W + kv S)(1 + γ r) + γ W_d`` over BW, the compute ``B (v + γ r) 2 N_a / F + B γ 2 N_d / F`` (and the FLOP/s
    curve's fixed part ``(1 + γ r)`` times), the fixed costs ``o + γ o_d``; prefill as without speculation
    (``StepModel._speculative_terms``, the same terms)."""
    from capacity.model.analysis import complete_inputs, step_model
    from capacity.simulator.cost_models import RooflineCost

    base = RooflineCost.from_scenario(scenario)
    x = complete_inputs(scenario.inputs())
    model, _ = step_model(x, np.asarray(0.0))
    g, r, v = float(model.draft_passes), float(model.draft_fraction), float(model.verify_tokens)
    bw, flops = float(model.bandwidth), float(model.flops)
    grow = 1.0 + g * r
    draft_mem = float(roofline.decode_memory_s(model.draft_bytes, 0.0, 0.0, 0.0, bw))
    draft_comp = float(roofline.decode_compute_s(1.0, model.draft_params, flops))
    moe = base.moe_weights_s
    return replace(
        base, name="roofline-speculative",
        weights_s=base.weights_s * grow + g * draft_mem, kv_s_per_token=base.kv_s_per_token * grow,
        decode_compute_s=base.decode_compute_s * (v + g * r) + g * draft_comp,
        compute_fixed_s=base.compute_fixed_s * grow,
        fixed_s=base.fixed_s + g * float(model.draft_overhead),
        moe_weights_s=None if moe is None else (lambda tokens: moe(tokens) * grow + g * draft_mem))


__all__ = ["accepted_per_iteration", "iteration_table", "iterations_for", "speculative_cost"]
