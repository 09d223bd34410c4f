"""Issue 29: speculative decoding, derived by hand from Leviathan et al. 2023 (equation 1) and essay 001's roofline
(16 GB of weights, 8e9 parameters, 2 TB/s, 150 TFLOP/s, 3 ms per pass, 1,150 tokens of context, 131,072 B of KV per
token, 328 sequences fit)."""

from __future__ import annotations

import math

import pytest

from capacity.errors import ScenarioError
from capacity.formulas.speculative import expected_tokens_per_step, speculative_tpot_s
from capacity.model.scenario import Scenario, load_scenario
from capacity.model.speculative import evaluate


def test_expected_tokens_per_step():
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # 3.3616
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert speculative_tpot_s(0.05, 0.002, 4, 2.5) == pytest.approx((0.05 + 4 * 0.002) / 2.5)


def _essay(spec: dict) -> Scenario:
    raw = dict(load_scenario("scenarios/essay-001-sale-day.yaml").raw)
    return Scenario.from_dict({**raw, "serving": {**raw["serving"], "speculative": spec}})


def _plain(b: float) -> float:
    return max((16e9 + b * 1150 * 131072) / 2e12, b * 2 * 8e9 / 150e12) + 0.003


def _verify(b: float, gamma: int) -> float:
    return max((16e9 + b * 1150 * 131072) / 2e12, b * (gamma + 1) * 2 * 8e9 / 150e12) + 0.003


def test_ngram_speculation_on_essay_001_pays_alone_and_stops_paying_at_large_batches():
    """n-gram drafting costs no GPU time: one sequence gets E = 3.36 tokens per 11.08 ms pass (3.29 ms a token
    instead of 11.08); at the 328 sequences that fit, verifying 5 tokens each is compute-bound (177.9 ms a pass,
    52.9 ms a token against the plain 38.0 ms): speculation stops paying after B = 121."""
    s = _essay({"method": "ngram", "draft_tokens": 4, "acceptance_rate": 0.8})
    out = evaluate(s, s.evaluate())
    e = (1 - 0.8 ** 5) / 0.2
    assert out["spec_tpot_plain_single_s"] == pytest.approx(_plain(1), rel=1e-12)
    assert out["spec_tpot_single_s"] == pytest.approx(_verify(1, 4) / e, rel=1e-12)
    assert out["spec_tpot_at_batch_max_s"] == pytest.approx(_verify(328, 4) / e, rel=1e-12)
    assert out["spec_speedup_at_batch_max"] < 1
    breakeven = max(b for b in range(1, 329) if _verify(b, 4) / e < _plain(b))
    assert out["spec_breakeven_batch"] == breakeven == 121


def test_a_draft_model_costs_its_own_steps_and_memory():
    """A 1B-parameter drafter in bf16 (2 GB): each of its 4 steps at one sequence reads 2 GB (1 ms) + 3 ms."""
    s = _essay({"method": "draft", "draft_tokens": 4, "acceptance_rate": 0.8, "draft_params": 1e9})
    out = evaluate(s, s.evaluate())
    e = (1 - 0.8 ** 5) / 0.2
    draft_step = max(2e9 / 2e12, 2 * 1e9 / 150e12) + 0.003
    assert out["spec_tpot_single_s"] == pytest.approx((_verify(1, 4) + 4 * draft_step) / e, rel=1e-12)
    assert out["spec_draft_weight_bytes_per_gpu"] == 2e9
    assert not math.isnan(out["spec_breakeven_batch"])


def test_bad_speculative_settings_are_refused():
    with pytest.raises(ScenarioError, match="acceptance_rate"):
        _essay({"method": "mtp", "draft_tokens": 2, "acceptance_rate": 1.5})
    with pytest.raises(ScenarioError, match="method"):
        _essay({"method": "medusa", "draft_tokens": 2, "acceptance_rate": 0.5})
    with pytest.raises(ScenarioError, match="draft_params"):
        _essay({"method": "draft", "draft_tokens": 2, "acceptance_rate": 0.5})


def test_speculation_is_in_the_goodput_and_the_closed_form_pieces_match_the_step():
    """Under TPOT <= 50 ms n-gram speculation (γ 4, α 0.8) raises essay 001's goodput (5.897 -> 6.245 requests/s) and
    lowers its cost, while the ceiling falls (6.92 -> 6.33: at 328 sequences verification is compute-bound); the
    dense closed form's two pieces give the step itself at every batch."""
    plain = load_scenario("scenarios/essay-001-sale-day.yaml")
    s = _essay({"method": "ngram", "draft_tokens": 4, "acceptance_rate": 0.8})
    r, p = s.evaluate(), plain.evaluate()
    assert r["goodput_rps"] > p["goodput_rps"] and r["cost_per_million_tokens"] < p["cost_per_million_tokens"]
    assert r["ceiling_rps"] < p["ceiling_rps"]
    assert r["tpot_at_goodput_s"] == pytest.approx(0.05, rel=1e-9)
    e = (1 - 0.8 ** 5) / 0.2
    assert r["decode_step_s"] == pytest.approx(_verify(328, 4) / e, rel=1e-12)
    from capacity.model.analysis import complete_inputs, step_model

    x = complete_inputs(s.inputs())
    model, _ = step_model(x, x["prompt_tokens"] + x["output_tokens"] / 2.0)
    (a_mem, m_mem), (a_comp, m_comp) = model.pieces()
    for b in (1.0, 50.0, 121.0, 328.0):
        assert max(a_mem + m_mem * b, a_comp + m_comp * b) == pytest.approx(float(model.step_s(b)), rel=1e-12)


def test_acceptance_length_and_drafter_overheads():
    """E given directly (2.5 tokens, γ 3): α by inversion; 0.7 ms per drafter pass and 1.2 ms per iteration add
    3 x 0.7 + 1.2 = 3.3 ms to one sequence's iteration."""
    base = {"method": "eagle", "draft_tokens": 3, "acceptance_length": 2.5}
    s0 = _essay(base)
    s1 = _essay({**base, "draft_overhead": "0.7 ms", "verify_overhead": "1.2 ms"})
    assert s0.serving.speculative["expected_tokens"] == 2.5
    t0 = evaluate(s0, s0.evaluate())["spec_tpot_single_s"]
    t1 = evaluate(s1, s1.evaluate())["spec_tpot_single_s"]
    assert (t1 - t0) * 2.5 == pytest.approx(3.3e-3, rel=1e-9)
    with pytest.raises(ScenarioError, match="acceptance_rate"):
        _essay({"method": "eagle", "draft_tokens": 3})


def test_a_draft_model_takes_its_weights_from_the_kv_pool():
    """2 GB of drafter weights on an 80 GB GPU at 0.9: the pool falls from 56 GB to 54 GB."""
    plain = load_scenario("scenarios/essay-001-sale-day.yaml").evaluate()
    s = _essay({"method": "draft", "draft_tokens": 4, "acceptance_rate": 0.8, "draft_params": 1e9})
    assert s.evaluate()["pool_bytes"] == pytest.approx(plain["pool_bytes"] - 2e9)
