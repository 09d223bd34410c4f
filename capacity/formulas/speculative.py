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


def speculative_tpot_s(verify_step_s: ArrayLike, draft_step_s: ArrayLike, draft_tokens: ArrayLike,
                       expected_tokens: ArrayLike) -> np.ndarray:
    """Time per output token with speculation: ``(t_verify + γ t_draft) / E`` [s].

    ``t_verify`` the target's pass over ``γ + 1`` tokens per sequence, ``t_draft`` one drafter step, ``E``
    ``expected_tokens_per_step``. Leviathan et al. 2023, section 3.4 (walltime improvement ``E / (γ c + 1)`` with
    ``c = t_draft / t_verify`` when the verify pass costs a plain step).
    """
    return (_f(verify_step_s) + _f(draft_tokens) * _f(draft_step_s)) / _f(expected_tokens)


__all__ = ["expected_tokens_per_step", "speculative_tpot_s"]
