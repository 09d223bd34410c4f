"""Property: after any sequence of sidebar edits, the headline is `capacity evaluate` of the scenario the app saves.

AppTest drives the real script; hypothesis draws the edit sequences (a bounded number of examples, so the test
runs in well under a minute). An edit the library refuses must show as a message, never as other numbers.
"""

import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from app_views.state import presets, to_yaml
from capacity import Scenario, ScenarioError
from tests.app.test_app import headline_figures

APP = str(Path(__file__).resolve().parents[2] / "app.py")
MODELS = ["llama-3-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-7b", "custom"]
GPUS = ["h100-sxm", "a100-80gb", "l40s", "h200", "custom"]

EDITS = st.one_of(
    st.tuples(st.just("preset"), st.sampled_from(sorted(presets()))),
    st.tuples(st.just("model"), st.sampled_from(MODELS)),
    st.tuples(st.just("gpu"), st.sampled_from(GPUS)),
    st.tuples(st.just("gpu_count"), st.sampled_from([1, 2, 4, 8])),
    st.tuples(st.just("units"), st.sampled_from(["GB", "GiB"])),
    st.tuples(st.just("weight_dtype"), st.sampled_from(["bf16", "fp8", "int4"])),
    st.tuples(st.just("memory_utilization"), st.sampled_from([0.5, 0.8, 0.9, 0.95])),
    st.tuples(st.just("prompt_tokens"), st.integers(100, 6000)),
    st.tuples(st.just("output_tokens"), st.integers(50, 1000)),
    st.tuples(st.just("tpot_ms"), st.sampled_from([0.0, 30.0, 50.0, 120.0])),
    st.tuples(st.just("price_per_hour"), st.sampled_from([0.0, 1.25, 4.0])),
    st.tuples(st.just("weights_mem"), st.sampled_from([0.0, 10.0, 30.0])),
    st.tuples(st.just("arrival_rate"), st.sampled_from([0.0, 3.0, 40.0])),
    st.tuples(st.just("more_inputs"), st.booleans()),  # "Show all inputs": hiding inputs must lose nothing
    # issue 29: power and speculative decoding
    st.tuples(st.just("energy_price_kwh"), st.sampled_from([0.0, 0.15])),
    st.tuples(st.just("pue"), st.sampled_from([1.0, 1.4])),
    st.tuples(st.just("spec_method"), st.sampled_from(["none", "eagle", "mtp", "ngram", "draft"])),
    st.tuples(st.just("spec_acceptance_rate"), st.sampled_from([0.5, 0.85])),
    st.tuples(st.just("spec_acceptance_length"), st.sampled_from([1.5, 3.0])),
)
#: Inputs drawn only with "Show all inputs" on (app_views/sidebar.py ON_DEMAND).
ON_DEMAND = {"memory_utilization", "price_per_hour", "weights_mem", "energy_price_kwh", "pue", "spec_method",
             "spec_acceptance_rate", "spec_acceptance_length"}


def apply(at: AppTest, edit: tuple) -> None:
    key, value = edit
    sb = at.sidebar
    if key in ON_DEMAND and not sb.toggle(key="more_inputs").value:
        sb.toggle(key="more_inputs").set_value(True).run()
        sb = at.sidebar  # the element tree of the run that drew them
    if key.startswith("spec_acceptance") and key not in [w.key for w in sb.number_input]:
        sb.selectbox(key="spec_method").select("eagle").run()  # the acceptance is drawn with a method chosen
        sb = at.sidebar
    if key == "more_inputs":
        sb.toggle(key=key).set_value(value).run()
    elif key in ("preset", "model", "gpu", "weight_dtype", "spec_method"):
        sb.selectbox(key=key).select(value).run()
    elif key == "units":
        sb.radio(key=key).set_value(value).run()
    elif key == "memory_utilization":
        sb.slider(key=key).set_value(value).run()
    else:
        sb.number_input(key=key).set_value(value).run()


#: Examples per run (raise APP_PROPERTY_EXAMPLES for a longer hunt; 15 runs in about 25 s).
EXAMPLES = int(os.environ.get("APP_PROPERTY_EXAMPLES", "15"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EDITS, min_size=1, max_size=4))
def test_after_any_edits_the_headline_is_the_cli_evaluation_of_the_saved_scenario(edits):
    at = AppTest.from_file(APP, default_timeout=60).run()
    for edit in edits:
        apply(at, edit)
        assert not at.exception, (edit, at.exception)
    data = yaml.safe_load(to_yaml(at.session_state["doc"]))
    try:
        expected = Scenario.from_dict(data).evaluate()
    except ScenarioError:
        assert at.error, "the library refuses the saved scenario but the app showed numbers"
        return
    assert not at.error, [e.value for e in at.error]
    shown = headline_figures(at)
    from tests.app.test_app import headline_of  # the headline renders the one answer (capacity.planning.sizing)

    for label, value in headline_of(expected).items():
        assert shown[label] == value, label
