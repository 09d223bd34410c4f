"""Issue 27, "No silent values": an input the user never saw must not change the answer unseen.

The landing preset (essay 000) carries a 1,200-token shared prefix, an input the sidebar hides until "Show all
inputs". After another model and GPU are chosen it still halves the GPUs a load needs, so it is named above the
views with where it came from, the preset box says the sizing moved away from the preset, and the reports give
its source as the preset, not the user.
"""

import csv
import io

from streamlit.testing.v1 import AppTest

from app_views.state import changes, departures, preset_documents, sources, with_sources
from capacity import Scenario
from capacity.render.report import report_for, to_csv
from tests.app.test_app import APP, ESSAY_000, saved, show_all

PRESET = ("preset", ESSAY_000)


def start() -> AppTest:
    """The app on essay 000's preset (the landing sizing of issue 27's walk; the app now opens on a catalog one)."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    return at.sidebar.selectbox(key="preset").select(ESSAY_000).run()


def moved(at: AppTest) -> AppTest:
    """Essay 000's preset, then another model and GPU (the issue's walk)."""
    at.sidebar.selectbox(key="model").select("llama-3.1-8b").run()
    return at.sidebar.selectbox(key="gpu").select("h100-sxm").run()


def notices(at: AppTest) -> str:
    """What the page says in its warning and info boxes, outside the sidebar (the view's area)."""
    sidebar = {id(e) for e in at.sidebar}
    return " ".join(e.value for e in [*at.warning, *at.info] if id(e) not in sidebar).replace("\\", "")


def input_sources(at: AppTest) -> dict[str, str]:
    """The CSV report's input table (key -> source) of the sizing the app evaluates."""
    state = at.session_state
    mapping = with_sources(state["doc"], state["base"], state["origin"], state["typed"])
    rows = csv.DictReader(io.StringIO(to_csv(report_for(Scenario.from_dict(mapping).evaluate()))))
    return {row["quantity"]: row["source"] for row in rows if row.get("section") == "input"}


def test_the_hidden_shared_prefix_is_named_above_the_views_after_another_model_and_gpu():
    at = moved(start())
    assert not at.exception and not at.error
    assert saved(at)["workload"]["shared_prefix_tokens"] == 1200  # kept: it is the workload's, not the model's
    shown = notices(at)
    assert "shared prefix 1,200 tokens (from the preset 'essay 000 worked example')" in shown, shown
    assert any("shared prefix" in w.value for w in at.warning if id(w) not in {id(e) for e in at.sidebar})
    assert not any("shared prefix 1,200" in c.value and "preset" in c.value for c in at.caption)  # not grey only


def test_the_preset_box_says_the_sizing_was_modified():
    at = start()
    assert not any("Modified from" in i.value for i in at.sidebar.info)  # the preset as loaded
    at = moved(at)
    at.sidebar.number_input(key="prompt_tokens").set_value(2000).run()
    box = " ".join(i.value for i in at.sidebar.info).replace("\\", "")
    assert "Modified from the preset 'essay 000 worked example': model, GPU, prompt length" in box, box


def test_reset_and_reveal_buttons_clear_the_notice():
    at = moved(start())
    at.button(key="silent_reset_shared_prefix_tokens").click().run()
    assert "shared_prefix_tokens" not in saved(at)["workload"]
    assert "shared prefix" not in notices(at)
    assert input_sources(at)["shared_prefix_tokens"] == "default"  # the report's source after the reset
    at = moved(start())
    at.button(key="silent_reveal").click().run()
    assert at.sidebar.toggle(key="more_inputs").value is True
    assert at.sidebar.number_input(key="shared_prefix_tokens").value == 1200
    at.sidebar.number_input(key="shared_prefix_tokens").set_value(1000).run()  # set on screen: the user's now
    assert "shared prefix" not in notices(at)
    assert input_sources(at)["shared_prefix_tokens"] == "user"


def test_the_report_gives_the_preset_as_the_prefix_source_not_the_user():
    at = moved(start())
    found = input_sources(at)
    assert found["shared_prefix_tokens"] == f"preset: {ESSAY_000}", found
    assert found["prompt_tokens"] == f"preset: {ESSAY_000}"
    assert found["gpu_memory_bytes"] != "user"  # the catalog's
    at.sidebar.number_input(key="prompt_tokens").set_value(2000).run()
    assert input_sources(at)["prompt_tokens"] == "user"


def test_a_shorter_prompt_than_the_hidden_prefix_resets_the_prefix_and_says_so():
    at = moved(start())
    at.sidebar.number_input(key="prompt_tokens").set_value(500).run()
    assert not at.exception and not at.error  # not "shared prefix must not exceed prompt"
    assert "shared_prefix_tokens" not in saved(at)["workload"]
    assert "shared prefix 1,200 tokens (from the preset 'essay 000 worked example') is longer than the prompt" \
        in notices(at)


def test_a_share_link_and_a_file_are_named_as_the_source():
    at = moved(start())
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    again = AppTest.from_file(APP, default_timeout=60)
    again.query_params.update(params)
    again.run()
    assert "shared prefix 1,200 tokens (from the share link)" in notices(again)
    assert input_sources(again)["shared_prefix_tokens"] == "share link"
    assert show_all(again).sidebar.number_input(key="shared_prefix_tokens").value == 1200


# ---------------------------------------------------------------- the pure functions behind them


def test_sources_name_the_origin_of_every_value_the_user_did_not_type():
    base = preset_documents()[ESSAY_000]
    doc = {**base, "workload": {**base["workload"], "prompt_tokens": 2000}}
    found = sources(doc, base, PRESET, typed={"prompt_tokens"})
    assert found["workload.shared_prefix_tokens"] == f"preset: {ESSAY_000}"
    assert "workload.prompt_tokens" not in found  # typed: the user's
    assert Scenario.from_dict(with_sources(doc, base, PRESET, set())).raw["sources"]  # the loader accepts it


def test_departures_and_changes():
    base = preset_documents()[ESSAY_000]
    assert departures(base, ["shared_prefix_tokens", "memory_utilization", "block_size"]) == ["shared_prefix_tokens"]
    assert changes(base, base) == []
    doc = {**base, "workload": {**base["workload"], "output_tokens": 10}}
    assert changes(doc, base) == ["answer length"]


# ---------------------------------------------------------------- the library's side: a value's true source


def test_a_scenarios_sources_section_and_an_engine_profile_name_their_values_in_the_report():
    from capacity.render.report import input_sources as report_sources

    data = preset_documents()["chat assistant, llama-3.1-8b on 1 x H100 SXM"]
    data["serving"] = {"engine": "vllm"}
    data["sources"] = {"workload.prompt_tokens": "preset: chat"}
    found = report_sources(Scenario.from_dict(data))
    assert found["prompt_tokens"] == "preset: chat" and found["output_tokens"] == "user"
    assert found["max_num_seqs"] == "engine profile: vllm: max_num_seqs 1024"  # was "default"
    assert found["memory_utilization"] == "engine profile: vllm: gpu_memory_utilization 0.9"


def test_a_malformed_sources_section_is_named():
    import pytest

    from capacity import ScenarioError

    data = preset_documents()[ESSAY_000]
    with pytest.raises(ScenarioError, match="sources must map field paths to text"):
        Scenario.from_dict({**data, "sources": ["preset"]})


def test_choosing_another_model_keeps_the_quantisation_scheme():
    """How the weights are stored is the serving choice, not the model's: a scheme (``model.quantization``) carries
    over to the next model chosen, as ``weight_dtype`` and ``kv_dtype`` do (before, it was dropped silently and the
    sizing went back to 16-bit weights)."""
    from app_views.state import choose

    doc = {"model": {"name": "mixtral-8x7b", "quantization": "w8a8-int8", "kv_dtype": "fp8"},
           "gpu": {"name": "mi300x", "count": 2}, "workload": {"prompt_tokens": 1000, "output_tokens": 300}}
    choose(doc, "model", "llama-3.1-8b")
    assert doc["model"] == {"name": "llama-3.1-8b", "kv_dtype": "fp8", "quantization": "w8a8-int8"}
