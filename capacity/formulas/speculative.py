"""Speculative decoding: a cheap drafter proposes ``γ`` tokens, the target model verifies them in one pass.

Leviathan, Kalman and Matias, *Fast Inference from Transformers via Speculative Decoding*, ICML 2023: with each
drafted token accepted with probability ``α`` (independently), one verification pass yields on average

    E = (1 - α^(γ+1)) / (1 - α)            tokens (γ + 1 when α = 1)          (their equation 1)

and a step costs the target's pass over ``γ + 1`` tokens per sequence plus ``γ`` drafter steps. The target's pass
reads its weights once whatever the token count (the memory term is that of a plain step) but multiplies
``γ + 1`` times the tokens (the compute term), which is why it stops paying at large batches, where a step is
compute-bound. Drafters: a separate small model (``draft``), extra heads or layers of the target (``eagle``,
``mtp``: DeepSeek-V3's multi-token prediction module), or n-gram lookup in the prompt (``ngram``, no GPU cost).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import select


def expected_tokens_per_step(acceptance_rate: ArrayLike, draft_tokens: ArrayLike) -> np.ndarray:
    """Tokens one verification pass yields: ``(1 - α^(γ+1)) / (1 - α)``, ``γ + 1`` at α = 1 [tokens].

    Leviathan et al. 2023, equation 1. α = 0.8, γ = 4: (1 - 0.8^5) / 0.2 = 3.36 tokens.
    """
    a, g = _f(acceptance_rate), _f(draft_tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(a < 1.0, (1.0 - a ** (g + 1.0)) / (1.0 - a), g + 1.0)


def acceptance_rate_for_length(expected_tokens: ArrayLike, draft_tokens: ArrayLike) -> np.ndarray:
    """The per-token acceptance rate α whose ``expected_tokens_per_step(α, γ)`` is ``E`` [-] (the inverse).

    Engines report the mean acceptance length E (vLLM ``1 + accepted / drafts``, SGLang ``avg_spec_accept_length``);
    E rises with α from 1 (α = 0) to γ + 1 (α = 1), so 60 bisection steps find α to 1e-18. E = 2.25, γ = 3 (a
    chain of three, SpecDecode-Bench's Qwen3-8B on GSM8K): α = 0.6221.
    """
    e, g = np.broadcast_arrays(_f(expected_tokens), _f(draft_tokens))
    lo, hi = np.zeros(e.shape), np.ones(e.shape)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        below = expected_tokens_per_step(mid, g) < e
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out = (lo + hi) / 2.0
    return out if out.ndim else float(out)


def speculative_tpot_s(verify_step_s: ArrayLike, draft_step_s: ArrayLike, draft_tokens: ArrayLike,
                       expected_tokens: ArrayLike) -> np.ndarray:
    """Time per output token with speculation: ``(t_verify + γ t_draft) / E`` [s].

    ``t_verify`` the target's pass over ``γ + 1`` tokens per sequence, ``t_draft`` one drafter step, ``E``
    ``expected_tokens_per_step``. Leviathan et al. 2023, section 3.4 (walltime improvement ``E / (γ c + 1)`` with
    ``c = t_draft / t_verify`` when the verify pass costs a plain step).
    """
    return (_f(verify_step_s) + _f(draft_tokens) * _f(draft_step_s)) / _f(expected_tokens)


def iteration_terms(memory_s: ArrayLike, compute_s: ArrayLike, verify_compute_s: ArrayLike,
                    draft_tokens: ArrayLike, draft_fraction: ArrayLike, draft_memory_s: ArrayLike,
                    draft_compute_s: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(memory term, compute term) of one speculative iteration, the verification pass and ``γ`` drafter passes
    together [s]:

        memory  = t_mem (1 + γ r) + γ W_d / BW
        compute = t_comp(B (γ + 1)) + γ (r t_comp(B) + B 2 N_d / F)

    ``memory_s``, ``compute_s``: the target's plain decode terms at B (``t_mem``, ``t_comp(B)``); ``verify_compute_s``:
    its compute term over the verified tokens; ``draft_fraction`` r: an eagle/mtp drafter pass as a share of the
    target's pass (its layers over the target's, ``draft_layers / L``; 0 for a separate model or n-gram);
    ``draft_memory_s`` ``W_d / (tp BW)`` and ``draft_compute_s`` ``B 2 N_d / (tp F)``: a separate draft model's pass.
    The iteration is then ``max(memory, compute) + all-reduce + o + γ o_d`` (``roofline.pass_s``): the roofline of
    the iteration's bytes and FLOPs together, which is a drafter pass's own ``max`` added to the verification's
    wherever both sit on the same side of the ridge (at most the smaller term of the drafter lower otherwise).
    """
    g, r = _f(draft_tokens), _f(draft_fraction)
    memory = _f(memory_s) * (1.0 + g * r) + g * _f(draft_memory_s)
    compute = _f(verify_compute_s) + g * (r * _f(compute_s) + _f(draft_compute_s))
    return memory, compute


__all__ = ["acceptance_rate_for_length", "expected_tokens_per_step", "iteration_terms", "speculative_tpot_s"]
