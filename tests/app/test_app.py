"""The Streamlit app through AppTest: one sizing state, the numbers the library gives for it, in every view."""

import re
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.state import doc_from_link, link_params, load_text, normalise, presets, to_yaml
from app_views.views import VIEWS
from capacity import Scenario
from capacity.inputs import catalog

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
PRESETS = presets()
ESSAY_000 = "essay 000 worked example"
ESSAY_001 = "essay 001 sale-day napkin"


def start(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if params:
        at.query_params.update(params)
    return at.run()


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells as shown: outer pipes and bold dropped, backslash escapes undone."""
    return [re.sub(r"\\(.)", r"\1", cell.strip()).removeprefix("**").removesuffix("**")
            for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def headline_figures(at: AppTest) -> dict[str, str]:
    """The headline's figures as shown (label -> value), read from its table (app_views/figures.py)."""
    for block in at.markdown:
        rows = block.value.splitlines()
        if rows and rows[0].startswith("| GPUs |"):
            return dict(zip(_cells(rows[0]), _cells(rows[2]), strict=True))
    return {}


def figure_tables(at: AppTest) -> dict[str, str]:
    """Every figures table on the page (the headline's and a view's, app_views/figures.py): label -> value."""
    shown: dict[str, str] = {}
    for block in at.markdown:
        rows = block.value.splitlines()
        if len(rows) == 4 and rows[1].startswith("|---") and rows[2].startswith("| **"):
            shown.update(zip(_cells(rows[0]), _cells(rows[2]), strict=True))
    return shown


def metrics(at: AppTest) -> dict[str, str]:
    """Every figure on the page: the headline's, the open view's figures table and ``st.metric`` values."""
    return {**figure_tables(at), **{m.label: m.value for m in at.metric}}


def in_view(at: AppTest, view: str) -> dict[str, str]:
    """The metrics shown with ``view`` open (headline numbers included)."""
    return metrics(at.button_group(key="view").set_value(view).run())


def show_all(at: AppTest) -> AppTest:
    """Turn on "Show all inputs": the rarely changed inputs are drawn only then (app_views/sidebar.py)."""
    return at.sidebar.toggle(key="more_inputs").set_value(True).run()


def choose(at: AppTest, preset: str) -> AppTest:
    return at.sidebar.selectbox(key="preset").select(preset).run()


def saved(at: AppTest) -> dict:
    """The scenario the app would save, read back as `capacity evaluate` reads a file."""
    return yaml.safe_load(to_yaml(at.session_state["doc"]))


def headline_of(results) -> dict[str, str]:
    # The headline renders the one answer: one replica of the layout it chooses (the stated one without a load).
    from capacity.planning.sizing import mode_rates, size

    z = size(results.scenario, results)
    return {"Requests that fit": f"{z.replica['batch_max']:,.0f}",
            "Ceiling": f"{mode_rates(z.replica, z.mode)[0]:,.2f} req/s",
            "Goodput under promises": f"{z.replica_goodput_rps:,.2f} req/s"}


def assert_headline(at: AppTest, results) -> None:
    shown = metrics(at)
    for label, value in headline_of(results).items():
        assert shown[label] == value, label


def preset_data(name: str) -> dict:
    return yaml.safe_load(PRESETS[name].read_text())


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_renders_the_library_numbers_in_every_view(preset):
    at = choose(start(), preset)
    assert not at.exception, at.exception
    assert not at.error
    for view in VIEWS:
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, (view, at.exception, [e.value for e in at.error])
    assert_headline(at, Scenario.from_dict(preset_data(preset)).evaluate())


def test_essay_001_preset_shows_the_essay_numbers():
    at = choose(start(), ESSAY_001)
    shown = {**in_view(at, "Roofline"), **in_view(at, "Promise")}
    assert shown["Requests that fit"] == "328"
    assert shown["Memory term"] == "32.7 ms" and shown["Compute term"] == "35.0 ms"
    assert shown["Prefill"] == "109.7 ms"
    assert shown["Ceiling"] == "6.92 req/s"
    assert shown["Goodput under promises"] == "5.90 req/s"
    assert shown["In flight at goodput"] == "88"
    assert shown["TPOT at the ceiling"] == "157.9 ms"
    assert shown["Single stream"] == "125 tokens/s"
    # $2/h over 5.897 requests/s x 300 tokens = $0.314 per million output tokens; 730 h x $2 = $1,460 a month.
    assert shown["$ per M output tokens"] == "$0.314"
    assert shown["Monthly cost"] == "$1,460"


def test_headline_starts_with_the_one_sentence_answer():
    at = choose(start(), ESSAY_001)
    first = at.markdown[0].value
    assert first.startswith("#### 1 x custom GPU serves 5\\.90 req\\/s at 50\\.0 ms per token")
    assert "the TPOT promise is what binds" in first


def test_essay_000_preset_shows_the_essay_numbers():
    at = choose(start(), ESSAY_000)
    shown = in_view(at, "Memory")
    assert shown["Requests that fit"] == "752"
    assert shown["KV pool per GPU"] == "56.00 GiB"
    assert shown["Blocks per request"] == "113"
    assert shown["Paged vs contiguous"] == "18.1x"  # 253 / 14


def test_landing_preset_then_a_catalog_model_gpu_and_tp_gives_the_cli_numbers_for_that_choice():
    # Issue 13: from the landing preset, llama-3-70b on 4 x h100-sxm kept the preset's 16 GiB weights and 1.0
    # efficiencies (1,457 requests, 35.3 req/s); the catalog choice gives 835 and 20.3.
    at = choose(start(), ESSAY_000)
    at.sidebar.selectbox(key="model").select("llama-3-70b").run()
    at.sidebar.selectbox(key="gpu").select("h100-sxm").run()
    at.sidebar.number_input(key="gpu_count").set_value(4).run()
    assert not at.exception and not at.error
    essay = preset_data(ESSAY_000)
    catalog_choice = {"model": {"name": "llama-3-70b", "kv_dtype": "fp16"}, "gpu": {"name": "h100-sxm", "count": 4},
                      "serving": {k: v for k, v in essay["serving"].items() if k != "max_model_len"},
                      "workload": essay["workload"]}
    expected = Scenario.from_dict(catalog_choice).evaluate()
    assert expected["batch_max"] == 835 and f"{expected['ceiling_rps']:.1f}" == "20.3"
    assert_headline(at, expected)
    assert_headline(at, Scenario.from_dict(saved(at)).evaluate())
    assert "weights" not in saved(at)["model"] and "bandwidth_efficiency" not in saved(at)["gpu"]
    # The price and the efficiencies shown are the catalog's.
    show_all(at)
    assert at.sidebar.number_input(key="price_per_hour").value == pytest.approx(3.49)
    assert at.sidebar.slider(key="bandwidth_efficiency").value == pytest.approx(0.6)


def test_switching_gpu_takes_the_new_gpus_price():
    at = choose(start(), "chat assistant, llama-3.1-8b on 1 x H100 SXM")
    at.sidebar.selectbox(key="gpu").select("l40s").run()
    from capacity.inputs import catalog

    price = catalog.gpus()["l40s"]["price_per_hour"]
    show_all(at)
    assert at.sidebar.number_input(key="price_per_hour").value == pytest.approx(price)
    assert_headline(at, Scenario.from_dict(saved(at)).evaluate())


def test_an_override_is_marked_and_the_catalog_value_comes_back():
    at = choose(start(), "chat assistant, llama-3.1-8b on 1 x H100 SXM")
    show_all(at)
    at.sidebar.number_input(key="price_per_hour").set_value(2.0).run()
    assert saved(at)["gpu"]["price_per_hour"] == 2.0
    assert any("your value" in c.value and "3\\.49" in c.value for c in at.sidebar.caption)
    at.sidebar.button(key="reset_price_per_hour").click().run()
    assert "price_per_hour" not in saved(at)["gpu"]
    assert at.sidebar.number_input(key="price_per_hour").value == pytest.approx(3.49)
    # A value the user typed stays when the GPU changes; the preset's own do not.
    at.sidebar.number_input(key="price_per_hour").set_value(2.5).run()
    at.sidebar.selectbox(key="gpu").select("h200").run()
    assert saved(at)["gpu"]["price_per_hour"] == 2.5


def test_the_context_window_follows_the_model_and_a_longer_one_is_flagged():
    at = start()
    at.sidebar.selectbox(key="model").select("llama-3-8b").run()
    show_all(at)
    assert at.sidebar.number_input(key="max_model_len").value == 8192  # llama-3-8b's context window
    at.sidebar.number_input(key="max_model_len").set_value(32768).run()
    assert any("context window" in w.value for w in at.warning)


def test_unit_switch_changes_what_is_shown_never_the_sizing():
    # Issue 13: the "Byte units" switch changed essay 000 from 752 to 700 requests.
    at = choose(start(), ESSAY_000)
    before = saved(at)
    assert metrics(at)["Requests that fit"] == "752"
    at.sidebar.radio(key="units").set_value("GB").run()
    assert metrics(at)["Requests that fit"] == "752"
    show_all(at)
    assert at.sidebar.number_input(key="weights_mem").value == pytest.approx(16 * 2**30 / 1e9)
    assert in_view(at, "Memory")["KV pool per GPU"] == "60.13 GB"  # 56 GiB
    after = saved(at)
    assert after["model"] == before["model"] and after["gpu"] == before["gpu"]
    at.sidebar.radio(key="units").set_value("GiB").run()
    assert saved(at) == before


def test_memory_utilisation_slider_changes_concurrency_as_the_library_predicts():
    at = choose(start(), ESSAY_000)
    show_all(at)
    at = at.sidebar.slider(key="memory_utilization").set_value(0.70).run()
    # Essay 000: at 0.70 the pool is 40 GiB = 20,480 blocks; with the 1,200-token prefix,
    # (20,480 - 75) // 38 = 536 requests (paged alone would be 181).
    assert metrics(at)["Requests that fit"] == f"{(20_480 - 75) // 38:,}"
    assert in_view(at, "Memory")["KV pool per GPU"] == "40.00 GiB"


def test_tpot_promise_change_moves_goodput():
    at = choose(start(), ESSAY_001)
    at = at.sidebar.number_input(key="tpot_ms").set_value(80.0).run()
    expected = Scenario.from_dict({**preset_data(ESSAY_001), "slo": {"tpot": "80 ms"}}).evaluate()
    assert metrics(at)["Goodput under promises"] == f"{expected['goodput_rps']:,.2f} req/s"


def test_impossible_values_show_a_message_in_the_users_words():
    at = choose(start(), ESSAY_001)
    show_all(at)
    at = at.sidebar.number_input(key="weights_mem").set_value(90.0).run()
    assert not at.exception
    assert any("do not fit in the usable memory" in e.value for e in at.error)
    at = at.sidebar.number_input(key="weights_mem").set_value(16.0).run()
    at = at.sidebar.number_input(key="shared_prefix_tokens").set_value(5000).run()
    assert not at.exception
    texts = [e.value for e in at.sidebar.error]
    assert any("shared prefix \\(tokens\\)" in t and "prompt \\(tokens\\)" in t for t in texts), texts
    assert not any("workload." in t for t in texts)


def test_presets_round_trip_through_yaml_and_links_exactly():
    for name, path in PRESETS.items():
        doc = normalise(yaml.safe_load(path.read_text()))
        assert load_text(to_yaml(doc)) == doc, name
        for view in VIEWS:
            back, problems = doc_from_link(link_params(doc, view), {})
            assert problems == [] and back == doc, (name, view)


def test_a_shared_link_restores_the_sizing_and_the_view():
    at = choose(start(), "RAG, llama-3.1-70b fp8 on 4 x H100 SXM")
    at.sidebar.number_input(key="prompt_tokens").set_value(2000).run()
    at.sidebar.text_input(key="name").input("ACME RAG pilot").run()
    at.button_group(key="view").set_value("Promise").run()
    link = at.query_params
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in link.items()}
    assert params["view"] == "Promise" and params["name"] == "ACME RAG pilot"
    again = start(params)
    assert not again.exception and not again.error
    assert again.session_state["doc"] == at.session_state["doc"]
    assert again.session_state["view"] == "Promise"
    assert metrics(again) == metrics(at)


def test_link_values_out_of_range_or_unknown_get_an_inline_message_naming_the_field():
    at = start({"memory_utilization": "5", "model": "abc", "view": "Nope"})
    assert not at.exception
    texts = " ".join(w.value for w in at.warning)
    assert "memory utilisation" in texts and "outside" in texts
    assert "abc" in texts and "not in the catalog" in texts
    assert "Nope" in texts
    landing = Scenario.from_dict(preset_data(next(iter(PRESETS)))).evaluate()
    assert_headline(at, landing)  # the landing sizing, unchanged, not another model


def test_malformed_config_json_gives_an_inline_message():
    at = choose(start(), ESSAY_000)
    show_all(at)
    at.sidebar.text_area(key="config_json").input('{"num_hidden_layers": ').run()
    assert not at.exception
    assert any("config\\.json" in e.value for e in at.sidebar.error)
    at.sidebar.text_area(key="config_json").input('{"num_hidden_layers": 2}').run()
    assert any("config\\.json is missing" in e.value for e in at.sidebar.error)
    assert not at.exception


def test_pasted_config_json_sizes_the_imported_model():
    path = ROOT / "tests" / "data" / "configs" / "gemma-2-9b.json"
    at = choose(start(), ESSAY_001)
    at.sidebar.selectbox(key="model").select("custom").run()
    show_all(at)  # essay 001's model is custom already: the model box did not change, so nothing opened by itself
    at.sidebar.text_area(key="config_json").input(path.read_text()).run()
    assert not at.exception and not at.error
    data = preset_data(ESSAY_001)
    data["model"] = {"config": str(path), "weight_dtype": "fp16", "kv_dtype": "fp16"}
    assert_headline(at, Scenario.from_dict(data).evaluate())
    assert_headline(at, Scenario.from_dict(saved(at)).evaluate())


def test_scenario_names_and_messages_are_escaped():
    evil = "![x](http://example.invalid/pixel.png) <img src=x> $x$"
    at = start()
    at.sidebar.text_input(key="name").input(evil).run()
    shown = " ".join([c.value for c in at.caption] + [m.value for m in at.markdown])
    # Every Markdown character is escaped: no image link, no raw HTML, no LaTeX.
    assert not re.search(r"(?<!\\)(!\[|<img|\$x)", shown)
    assert "\\!\\[x\\]\\(http" in shown


def test_pipeline_stages_split_the_weights():
    at = choose(start(), "RAG, llama-3.1-70b fp8 on 4 x H100 SXM")
    show_all(at)
    at = at.sidebar.number_input(key="pipeline_parallel").set_value(2).run()
    data = preset_data("RAG, llama-3.1-70b fp8 on 4 x H100 SXM")
    data["gpu"]["pipeline_parallel"] = 2
    assert_headline(at, Scenario.from_dict(data).evaluate())


def test_compare_table_has_readable_headers_and_units():
    at = choose(start(), ESSAY_001)
    at.button_group(key="view").set_value("Compare").run()
    table = at.table[0].value
    assert "goodput (req/s)" in table.columns and "$ per M output tokens" in table.columns
    assert not any("_" in c for c in table.columns)


def test_all_numbers_view_describes_every_result():
    from capacity.model.analysis import RESULTS

    at = choose(start(), ESSAY_001)
    at.button_group(key="view").set_value("All numbers").run()
    table = at.dataframe[0].value
    assert set(table["quantity"]) == set(RESULTS)
    assert (table["meaning"].str.len() > 0).all()


def test_report_download_buttons_are_named_after_the_scenario():
    at = choose(start(), ESSAY_001)
    at.sidebar.text_input(key="name").input("ACME chat").run()
    buttons = {b.proto.label: b for b in at.get("download_button")}
    assert {"Report (CSV)", "Report (XLSX, live formulas)", "Report (JSON)", "Save scenario (YAML)"} <= set(buttons)
    assert saved(at)["name"] == "ACME chat"


def test_cost_and_fleet_size_for_the_entered_load_with_one_headroom():
    from capacity.planning.fleet import fleet_options
    from capacity.planning.sizing import size

    at = choose(start(), "chat assistant, llama-3.1-8b on 1 x H100 SXM")  # 10 requests/s entered
    at.sidebar.number_input(key="arrival_rate").set_value(60.0).run()
    show_all(at)
    at.sidebar.number_input(key="headroom_pct").set_value(30.0).run()
    data = saved(at)
    z = size(Scenario.from_dict(data))
    shown = in_view(at, "Cost")
    # One answer (issue 27): the Cost view's replicas and the Fleet view's cheapest are the headline's sizing.
    assert shown["Replicas for your load"] == f"{z.replicas:,}"
    assert metrics(at)["GPUs"] == f"{z.gpus:,}"
    shown = in_view(at, "Fleet")
    table = fleet_options(data, target=60.0, headroom=0.30)
    best = table[table["meets_slo"]].iloc[0]
    assert shown["Cheapest that keeps the promises"] == f"{best['gpus']:,.0f} GPUs" == f"{z.gpus:,} GPUs"


def test_simulator_view_runs_the_presets_simulation_block():
    from capacity.inputs.units import format_time
    from capacity.simulator import simulate

    name = "chunked prefill against long prompts (teaching cost model)"
    at = choose(start(), name)
    at.button_group(key="view").set_value("Simulator").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="sim_cost_model").value == "teaching"
    assert at.number_input(key="sim_requests").value == 200
    assert at.toggle(key="sim_chunked_prefill").value is True
    shown = at.dataframe[0].value.set_index("quantity")
    scenario = Scenario.from_dict(preset_data(name))
    for policy in ("static", "continuous"):
        summary = simulate(scenario, policy=policy).summary()
        assert shown.loc["mean TTFT", policy] == format_time(summary["mean_ttft_s"])
        assert shown.loc["output tokens/s", policy] == f"{summary['output_tokens_per_s']:,.2f} tokens/s"


def test_simulator_queue_limit_counts_503s():
    at = choose(start(), ESSAY_001)
    at.button_group(key="view").set_value("Simulator").run()
    at.selectbox(key="sim_arrival_label").select("all at once (instant)").run()
    at.number_input(key="sim_requests").set_value(100).run()
    at.number_input(key="sim_max_queued_requests").set_value(10).run()
    assert not at.exception and not at.error
    shown = at.dataframe[0].value.set_index("quantity")
    assert int(shown.loc["rejected (503)", "continuous"].replace(",", "")) > 0


def test_the_ttft_promise_sits_at_its_value_on_the_log_axis():
    # Issue 13: with a 200 ms TTFT promise the log axis ran from 1e-9 to 1e219 (the label was placed at 10^200).
    import numpy as np
    import pandas as pd

    from app_views.charts import load_chart

    curve = pd.DataFrame({"rate_rps": [0.0, 1.0], "tpot_s": [0.02, 0.03], "ttft_s": [0.1, 0.3]})
    figure = load_chart(curve, 2.0, 1.5, 50.0, 200.0, 1.0)
    line = next(s for s in figure["layout"]["shapes"] if s.get("yref") == "y2")
    label = next(a for a in figure["layout"]["annotations"] if a.get("yref") == "y2")
    assert line["y0"] == 200.0 and label["y"] == np.log10(200.0)
    assert figure["layout"]["yaxis2"]["type"] == "log"


def test_a_new_model_or_gpu_renames_the_sizing_unless_the_user_named_it():
    # Issue 13: downloads and links were named after the landing preset after the model and GPU changed.
    at = start()
    preset_name = at.session_state["doc"]["name"]
    at.sidebar.selectbox(key="model").select("llama-3-70b").run()
    at.sidebar.selectbox(key="gpu").select("h100-sxm").run()
    assert saved(at)["name"] == "llama-3-70b on 1 x h100-sxm" != preset_name
    at.sidebar.text_input(key="name").input("ACME pilot").run()
    at.sidebar.selectbox(key="gpu").select("h200").run()
    assert saved(at)["name"] == "ACME pilot"


def test_a_shared_link_does_not_claim_to_be_the_first_preset():
    # Issue 13 (left from the last session): after a share link (or an upload) the preset box still named the
    # landing preset, while the sizing was the link's. It says where the sizing came from; the sizing is kept.
    link = {"model": "llama-3-70b", "gpu": "h100-sxm", "gpu_count": "4", "prompt_tokens": "2000"}
    at = start(link)
    box = at.sidebar.selectbox(key="preset")
    assert box.value not in PRESETS and box.value == "loaded from the share link", box.value
    assert box.options[-1] == box.value and list(box.options[:-1]) == list(PRESETS)
    data = saved(at)
    assert data["model"]["name"] == "llama-3-70b" and data["workload"]["prompt_tokens"] == 2000
    assert_headline(at, Scenario.from_dict(data).evaluate())
    # Choosing a preset afterwards loads it, and the loaded entry goes (the sizing it named is no longer shown).
    at = choose(at, ESSAY_001)
    assert at.sidebar.selectbox(key="preset").value == ESSAY_001
    assert list(at.sidebar.selectbox(key="preset").options) == list(PRESETS)
    assert_headline(at, Scenario.from_dict(preset_data(ESSAY_001)).evaluate())


def test_a_link_holding_only_the_view_keeps_the_landing_preset_named():
    at = start({"view": "Memory"})
    assert at.sidebar.selectbox(key="preset").value == next(iter(PRESETS))


def test_the_landing_sizing_is_a_catalog_model_on_a_priced_catalog_gpu_with_a_load():
    # Issue 30: the page opened on the essays' custom GPU with no price ("no price set", "$ per M n/a").
    at = start()
    doc = saved(at)
    assert doc["model"]["name"] in catalog.models() and doc["gpu"]["name"] in catalog.gpus()
    assert Scenario.from_dict(doc).gpu.price_per_hour and doc["workload"]["arrival_rate"] > 0
    figures = headline_figures(at)
    assert figures["Monthly cost"].startswith("$") and "n/a" not in figures["$ per M output tokens"]


def test_the_landing_page_needs_no_chart_or_metric_code_before_its_first_number():
    # Issue 13 (speed): the first number waited for plotly.js (4.7 MB, the Memory view's charts) and for
    # st.metric's code, both fetched after the sidebar widgets'. The landing view is text, the headline a table.
    at = start()
    assert at.button_group(key="view").value == "Summary"
    assert not at.get("plotly_chart") and not at.metric and not at.dataframe
    landing = Scenario.from_dict(preset_data(next(iter(PRESETS)))).evaluate()
    assert headline_figures(at)["Requests that fit"] == headline_of(landing)["Requests that fit"]
    summary = " ".join(m.value for m in at.markdown)
    assert "What binds and what would move it" in summary


def test_the_verdict_outside_summary_is_evaluated_and_drawn_only_when_opened():
    # Rerun speed (issue 13): the collapsed verdict box re-evaluated its what-ifs and sent its lines on every rerun.
    at = choose(start(), ESSAY_000)
    at.button_group(key="view").set_value("Memory").run()
    assert at.expander[0].label == "Verdict: what binds and what would move it"
    assert not any("KV memory binds" in m.value for m in at.markdown)
    at.session_state["verdict_open"] = True  # the box opened (its state is the expander's key)
    at.run()
    assert any("KV memory binds: the pool holds 752 requests" in m.value.replace("\\", "") for m in at.markdown)


def test_hidden_inputs_keep_their_values_across_reruns_and_are_saved():
    # The rarely changed inputs are drawn only with "Show all inputs" on; hidden, they are not lost.
    at = show_all(choose(start(), "chat assistant, llama-3.1-8b on 1 x H100 SXM"))
    at.sidebar.number_input(key="price_per_hour").set_value(2.0).run()
    at.sidebar.slider(key="memory_utilization").set_value(0.8).run()
    at.sidebar.number_input(key="headroom_pct").set_value(20.0).run()
    at.sidebar.toggle(key="more_inputs").set_value(False).run()
    for prompt in (1000, 1700):  # reruns without the inputs drawn
        at.sidebar.number_input(key="prompt_tokens").set_value(prompt).run()
    assert not at.exception and not at.error
    assert "price_per_hour" not in [n.key for n in at.sidebar.number_input]
    data = saved(at)
    assert data["gpu"]["price_per_hour"] == 2.0 and data["serving"]["memory_utilization"] == 0.8
    assert data["fleet"]["headroom"] == 0.2 and data["workload"]["prompt_tokens"] == 1700
    assert "  price_per_hour: 2\n" in to_yaml(at.session_state["doc"])  # the saved file
    assert_headline(at, Scenario.from_dict(data).evaluate())
    # Listed with their units, the override marked with its way back to the catalog's $3.49.
    hidden = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    assert "✎ $2.00 per GPU-hour" in hidden and "memory utilisation 0.80" in hidden and "headroom 20%" in hidden
    assert any("price ($ per GPU-hour): your value" in c.value.replace("\\", "") and "3.49" in c.value.replace("\\", "")
               for c in at.sidebar.caption)
    at.sidebar.button(key="reset_price_per_hour").click().run()
    assert "price_per_hour" not in saved(at)["gpu"]
    show_all(at)
    assert at.sidebar.number_input(key="price_per_hour").value == pytest.approx(3.49)
    assert at.sidebar.slider(key="memory_utilization").value == pytest.approx(0.8)
    assert at.sidebar.number_input(key="headroom_pct").value == 20.0
