"""Speculative decoding formulas (issue 29): Leviathan et al. 2023's expectation, its inverse, and the iteration's
roofline terms, derived by hand."""

from __future__ import annotations

import pytest

from capacity.formulas.speculative import acceptance_rate_for_length, expected_tokens_per_step, iteration_terms


def test_acceptance_rate_inverts_the_expected_tokens():
    """E = 2.25 with a chain of 3 (SpecDecode-Bench's Qwen3-8B on GSM8K): α = 0.6221; E(0.6221, 3) = 2.25."""
    alpha = acceptance_rate_for_length(2.25, 3)
    assert alpha == pytest.approx(0.6221, abs=1e-4)
    assert expected_tokens_per_step(alpha, 3) == pytest.approx(2.25, rel=1e-12)
    assert acceptance_rate_for_length(4.0, 3) == pytest.approx(1.0)
    assert acceptance_rate_for_length(1.0, 3) == pytest.approx(0.0, abs=1e-12)


def test_iteration_terms():
    """Essay 001 at B = 1 with one EAGLE layer of 32, γ = 3: memory 8.0655 ms x (1 + 3/32); compute of 4 tokens plus
    three drafter passes of 1/32 of a plain one; a draft model's bytes and FLOPs add γ times."""
    mem, comp, comp4 = 8.0655e-3, 0.10667e-3, 4 * 0.10667e-3
    memory, compute = iteration_terms(mem, comp, comp4, 3, 1 / 32, 0.0, 0.0)
    assert memory == pytest.approx(mem * (1 + 3 / 32))
    assert compute == pytest.approx(comp4 + 3 * comp / 32)
    memory, compute = iteration_terms(mem, comp, comp4, 4, 0.0, 1e-3, 2e-5)
    assert memory == pytest.approx(mem + 4e-3)
    assert compute == pytest.approx(comp4 + 8e-5)
