"""Workload classes: one class is the single-shape model exactly; hit rates, shares and promises per class.

The mix model (capacity/model/mix.py) composes the model layer's functions over shapes; with one class of one
fixed shape and a 100% prefix hit rate it must give the single-shape model's numbers to rounding.
"""

import math

import pytest

from capacity import Scenario, ScenarioError, load_scenario
from capacity.model.mix import Lengths, classes_of, mix_model
from tests.shared_inputs import ESSAY_001_HARDWARE as ESSAY_001


def mixed(workloads, slo=None, **extra):
    data = {**ESSAY_001, "workloads": workloads, **extra}
    if slo is not None:
        data["slo"] = slo
    return Scenario.from_dict(data)


@pytest.mark.parametrize("name", ["essay-001-sale-day.yaml", "essay-000-paging.yaml",
                                  "rag-llama-3.1-70b-4xh100.yaml", "chat-llama-3.1-8b-h100.yaml"])
def test_one_class_is_the_single_shape_model(scenario_dir, name):
    scenario = load_scenario(scenario_dir / name)
    r = scenario.evaluate()
    mix = mix_model(scenario)
    assert mix.batch_max == r["batch_max"]
    assert mix.ceiling_rps == pytest.approx(r["ceiling_rps"], rel=1e-12)
    assert mix.mean_goodput_rps() == pytest.approx(r["goodput_rps"], rel=1e-9)
    rate = 0.7 * r["ceiling_rps"]
    at = scenario.with_changes(workload={"arrival_rate": rate}).evaluate()
    assert float(mix.tpot_s(rate)) == pytest.approx(at["tpot_at_load_s"], rel=1e-12)
    assert float(mix.class_ttft_s(0, rate)) == pytest.approx(at["ttft_at_load_s"], rel=1e-12)


def test_a_percentile_leaves_every_existing_result_unchanged(essay001):
    raw = {**essay001.raw, "slo": {"tpot": "50 ms", "percentile": 99}}
    with_percentile = Scenario.from_dict(raw).evaluate()
    assert with_percentile.to_dict() == essay001.evaluate().to_dict()  # NaN as None, so equal compares
    assert round(with_percentile["goodput_rps"], 1) == 5.9  # goodput_rps stays the mean-based contract


def test_two_classes_of_the_same_shape_are_one_class():
    shape = {"prompt_tokens": 1000, "output_tokens": 300}
    one = mix_model(mixed([shape]))
    two = mix_model(mixed([{**shape, "name": "a", "share": 3}, {**shape, "name": "b", "share": 1}]))
    assert [c.share for c in two.classes] == [0.75, 0.25]
    assert two.ceiling_rps == pytest.approx(one.ceiling_rps, rel=1e-12)
    assert two.batch_max == one.batch_max == 328


def test_prefix_hit_rate_moves_between_no_prefix_and_the_shared_prefix():
    shape = {"prompt_tokens": 1000, "output_tokens": 300, "shared_prefix_tokens": 600}
    hits = [mix_model(mixed([{**shape, "prefix_hit_rate": h}])) for h in (0.0, 0.5, 0.8, 1.0)]
    none = mix_model(mixed([{"prompt_tokens": 1000, "output_tokens": 300}]))
    full = Scenario.from_dict({**ESSAY_001, "workload": shape}).evaluate()
    assert hits[0].prefill_s == none.prefill_s and hits[0].batch_max == none.batch_max
    assert hits[-1].prefill_s == pytest.approx(full["prefill_s"]) and hits[-1].batch_max == full["batch_max"]
    # Mean prefill by hand at 50%: half compute 1,000 tokens, half 400: 3 ms + 0.5 (106.7 + 42.7) ms.
    assert hits[1].prefill_s == pytest.approx(0.003 + 0.5 * (1000 + 400) * 16e9 / 150e12, rel=1e-12)
    ceilings = [h.ceiling_rps for h in hits]
    assert ceilings == sorted(ceilings)  # more hits, less prefill, more requests/s


def test_mixed_mean_quantities_by_hand():
    mix = mix_model(mixed([{"name": "chat", "share": 0.7, "prompt_tokens": 1000, "output_tokens": 300},
                           {"name": "rag", "share": 0.3, "prompt_tokens": 8000, "output_tokens": 200}]))
    t_chat, t_rag = 0.003 + 1000 * 16e9 / 150e12, 0.003 + 8000 * 16e9 / 150e12
    assert mix.prefill_s == pytest.approx(0.7 * t_chat + 0.3 * t_rag, rel=1e-12)
    assert mix.output_tokens == pytest.approx(0.7 * 300 + 0.3 * 200)
    # decode-time weights 210 : 60 of the two classes' contexts 1,150 and 8,100 tokens
    assert mix.context_tokens == pytest.approx((210 * 1150 + 60 * 8100) / 270)
    # batch limit: the pool (56e9 B / 131,072 B = 427,246 blocks of one token) over the expected reserved
    # tokens of a resident sequence; residence shares by decode time, 210 : 60 of 1,300 and 8,200 tokens
    blocks = math.floor(56e9 / 131072)
    assert mix.batch_max == math.floor(blocks / ((210 * 1300 + 60 * 8200) / 270)) == 150
    assert mix.class_prefill_s(1) == pytest.approx(t_rag)


def test_batch_limit_stores_a_class_prefix_once():
    """Half of chat shares a 600-token prefix: the pool holds it once, and the hits' 700 private tokens."""
    mix = mix_model(mixed([{"name": "chat", "share": 0.7, "prompt_tokens": 1000, "output_tokens": 300,
                            "shared_prefix_tokens": 600, "prefix_hit_rate": 0.5},
                           {"name": "rag", "share": 0.3, "prompt_tokens": 8000, "output_tokens": 200}]))
    blocks = math.floor(56e9 / 131072)
    resident = (105 * 700 + 105 * 1300 + 60 * 8200) / 270  # decode-time shares 105 : 105 : 60 of 270
    assert mix.batch_max == math.floor((blocks - 600) / resident) == 164
    # the harmonic mean of what each shape fits alone counts the prefix as if each shape paid for it apart
    alone = [math.floor((blocks - 600) / 700), math.floor(blocks / 1300), math.floor(blocks / 8200)]
    assert math.floor(1 / (105 / 270 / alone[0] + 105 / 270 / alone[1] + 60 / 270 / alone[2])) != mix.batch_max


def test_moe_mix_bounds_tpot_on_the_moe_step(scenario_dir):
    """A tight TPOT promise keeps a mixtral batch small, where the experts a batch touches are few: the mix's
    mean-based goodput is the single-shape model's (its MoE solve), not the all-experts (dense) pieces'."""
    from capacity.formulas import slo

    scenario = load_scenario(scenario_dir / "long-context-mixtral-h200.yaml").with_changes(
        slo={"tpot_s": 0.02}, workload={"prompt_tokens": 500})
    mix = mix_model(scenario)
    assert mix.mean_goodput_rps() == pytest.approx(scenario.evaluate()["goodput_rps"], rel=1e-9)
    dense = float(slo.max_rate_for_tpot_rps(0.02, mix.prefill_s, mix.output_tokens, mix.pieces))
    assert mix.mean_goodput_rps() > 1.1 * dense
    # the percentile model linearises the MoE step at the mean batch: the chord through it
    lam = 0.5 * mix.mean_goodput_rps()
    (a, m), = mix.pieces_at(lam)
    b = float(mix.in_flight(lam))
    assert a + m * b == pytest.approx(float(mix.model.step_s(b)), rel=1e-12)
    assert a + m * (b + 1) == pytest.approx(float(mix.model.step_s(b + 1)), rel=1e-12)


def test_lengths_as_distributions_keep_their_mean():
    points = Lengths("lognormal", mean=1000, sigma=0.5, low=1, high=100_000).points()
    assert len(points) == 8 and points.mean() == pytest.approx(1000, rel=0.05)
    assert list(Lengths("uniform", low=1, high=8).points()) == [1, 2, 3, 4, 5, 6, 7, 8]
    mix = mix_model(mixed([{"prompt_tokens": {"dist": "uniform", "low": 500, "high": 1500}, "output_tokens": 300}]))
    assert mix.prefill_s == pytest.approx(0.003 + 1000 * 16e9 / 150e12, rel=1e-3)


def test_a_mix_scenario_has_a_mean_shape_and_its_classes(scenario_dir):
    scenario = load_scenario(scenario_dir / "mix-chat-rag-h100.yaml")
    assert scenario.workload.prompt_tokens == round(0.7 * 1000 + 0.3 * 8000)
    assert scenario.workload.output_tokens == round(0.7 * 300 + 0.3 * 200)
    chat, rag = classes_of(scenario)
    assert (chat.tpot_s, chat.percentile, chat.prefix_hit_rate) == (0.05, 99, 0.8)
    assert (rag.ttft_s, rag.percentile, rag.tpot_s) == (2.0, 90, None)


@pytest.mark.parametrize("workloads, message", [
    ([{"prompt_tokens": 100}], "workloads[0].output_tokens is missing"),
    ([{"prompt_tokens": 100, "output_tokens": 10, "share": -1}], "workloads[0].share must be > 0"),
    ([{"prompt_tokens": 100, "output_tokens": 10, "prefix_hit_rate": 1.5}], "workloads[0].prefix_hit_rate must be in"),
    ([{"prompt_tokens": 100, "output_tokens": 10, "shared_prefix_tokens": 200}],
     "workloads[0].shared_prefix_tokens (200) must not exceed the longest prompt"),
    ([{"prompt_tokens": 100, "output_tokens": 10, "slo": {"tpot": "50 ms", "percentile": 100}}],
     "workloads[0].slo.percentile must be a percentile between 0 and 100"),
    ([{"prompt_tokens": 100, "output_tokens": 10, "shares": 1}], "workloads[0].shares is not a known key"),
    ([{"name": "a", "prompt_tokens": 1, "output_tokens": 1}, {"name": "a", "prompt_tokens": 1, "output_tokens": 1}],
     "the class name 'a' is used twice"),
    ("chat", "workloads must be a non-empty list"),
])
def test_bad_classes_name_the_field(workloads, message):
    with pytest.raises(ScenarioError) as err:
        mixed(workloads)
    assert any(message in p for p in err.value.problems), err.value.problems


def test_scenario_percentile_is_checked():
    with pytest.raises(ScenarioError, match="slo.percentile must be a percentile"):
        Scenario.from_dict({**ESSAY_001, "workload": {"prompt_tokens": 10, "output_tokens": 10},
                            "slo": {"percentile": "p0"}})
    ok = Scenario.from_dict({**ESSAY_001, "workload": {"prompt_tokens": 10, "output_tokens": 10},
                             "slo": {"tpot": "50 ms", "percentile": "p99.9"}})
    assert ok.slo.percentile == 99.9
