"""The Streamlit app through AppTest: every preset renders, sliders move numbers as the library predicts."""

from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.state import presets, scenario_from_state, state_from_scenario
from capacity import Scenario

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PRESETS = presets()


def start() -> AppTest:
    return AppTest.from_file(APP, default_timeout=60).run()


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def in_view(at: AppTest, view: str) -> dict[str, str]:
    """The metrics shown with ``view`` open (headline numbers included)."""
    return metrics(at.button_group(key="view").set_value(view).run())


def choose(at: AppTest, preset: str) -> AppTest:
    return at.sidebar.selectbox(key="preset").select(preset).run()


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_renders_the_library_numbers(preset):
    at = choose(start(), preset)
    assert not at.exception, at.exception
    assert not at.error
    for view in ("Memory", "Roofline", "Promise", "Cost", "Fleet", "Compare", "Simulator", "All numbers"):
        at.button_group(key="view").set_value(view).run()
        assert not at.exception and not at.error, (view, at.exception)
    expected = Scenario.from_dict(yaml.safe_load(PRESETS[preset].read_text())).evaluate()
    shown = metrics(at)
    assert shown["Requests that fit"] == f"{expected['batch_max']:,.0f}"
    assert shown["Ceiling"] == f"{expected['ceiling_rps']:,.2f} req/s"
    assert shown["Goodput under promises"] == f"{expected['goodput_rps']:,.2f} req/s"


def test_essay_001_preset_shows_the_essay_numbers():
    at = choose(start(), "essay 001 sale-day napkin")
    shown = {**in_view(at, "Roofline"), **in_view(at, "Promise")}
    assert shown["Requests that fit"] == "328"
    assert shown["Decode step at that batch"] == "38.0 ms"
    assert shown["Memory term"] == "32.7 ms" and shown["Compute term"] == "35.0 ms"
    assert shown["Prefill"] == "109.7 ms"
    assert shown["Ceiling"] == "6.92 req/s"
    assert shown["Goodput under promises"] == "5.90 req/s"
    assert shown["In flight at goodput"] == "88"
    assert shown["TPOT at the ceiling"] == "157.9 ms"
    assert shown["Single stream"] == "125 tokens/s"


def test_essay_000_preset_shows_the_essay_numbers():
    at = choose(start(), "essay 000 worked example")
    shown = in_view(at, "Memory")
    assert shown["Requests that fit"] == "752"
    assert shown["KV pool per GPU"] == "56.00 GiB"
    assert shown["Blocks per request"] == "113"
    assert shown["Paged vs contiguous"] == "18.1x"  # 253 / 14


def test_memory_utilisation_slider_changes_concurrency_as_the_library_predicts():
    at = choose(start(), "essay 000 worked example")
    at = at.sidebar.slider(key="memory_utilization").set_value(0.70).run()
    # Essay 000: at 0.70 the pool is 40 GiB = 20,480 blocks; with the 1,200-token prefix,
    # (20,480 - 75) // 38 = 536 requests (paged alone would be 181).
    assert metrics(at)["Requests that fit"] == f"{(20_480 - 75) // 38:,}"
    assert in_view(at, "Memory")["KV pool per GPU"] == "40.00 GiB"


def test_tpot_promise_change_moves_goodput():
    at = choose(start(), "essay 001 sale-day napkin")
    at = at.sidebar.number_input(key="tpot_ms").set_value(80.0).run()
    expected = Scenario.from_dict({**yaml.safe_load(PRESETS["essay 001 sale-day napkin"].read_text()),
                                   "slo": {"tpot": "80 ms"}}).evaluate()
    assert metrics(at)["Goodput under promises"] == f"{expected['goodput_rps']:,.2f} req/s"


def test_impossible_values_show_a_message_not_an_exception():
    at = choose(start(), "essay 001 sale-day napkin")
    at = at.sidebar.number_input(key="weights_mem").set_value(90.0).run()
    assert not at.exception
    assert any("do not fit in the usable memory" in e.value for e in at.error)
    at = at.sidebar.number_input(key="weights_mem").set_value(16.0).run()
    at = at.sidebar.number_input(key="shared_prefix_tokens").set_value(5000).run()
    assert any("shared_prefix_tokens" in e.value for e in at.error)
    assert not at.exception


def test_state_round_trips_through_the_scenario_mapping():
    for path in PRESETS.values():
        data = yaml.safe_load(path.read_text())
        rebuilt = scenario_from_state(state_from_scenario(data))
        a, b = Scenario.from_dict(rebuilt).evaluate(), Scenario.from_dict(data).evaluate()
        for key in ("pool_blocks", "batch_max", "ceiling_rps", "goodput_rps"):
            assert a[key] == pytest.approx(b[key], rel=1e-9), (path.name, key)


def test_a_shared_link_restores_the_sizing():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"prompt_tokens": "2000", "output_tokens": "500", "model": "llama-3-8b",
                            "gpu": "h100-sxm", "units": "GB", "weights_mem": "0", "block_size": "16"})
    at.run()
    assert not at.exception
    assert at.sidebar.number_input(key="prompt_tokens").value == 2000
    assert "llama-3-8b" in at.caption[0].value.lower() or "llama 3 8b" in at.caption[0].value.lower()


def test_problems_show_next_to_the_inputs_they_name():
    at = choose(start(), "essay 001 sale-day napkin")
    at = at.sidebar.number_input(key="shared_prefix_tokens").set_value(5000).run()
    assert any("workload.shared_prefix_tokens" in e.value for e in at.sidebar.error)


def test_pasted_config_json_sizes_the_imported_model():
    config = (Path(__file__).resolve().parent / "data" / "configs" / "gemma-2-9b.json").read_text()
    at = choose(start(), "essay 001 sale-day napkin")
    at = at.sidebar.number_input(key="weights_mem").set_value(0.0).run()
    at = at.sidebar.text_area(key="config_json").input(config).run()
    assert not at.exception and not at.error
    data = {**yaml.safe_load(PRESETS["essay 001 sale-day napkin"].read_text())}
    data["model"] = {"config": str(Path(__file__).resolve().parent / "data" / "configs" / "gemma-2-9b.json"),
                     "weight_dtype": "bf16", "kv_dtype": "bf16"}
    expected = Scenario.from_dict(data).evaluate()
    assert metrics(at)["Requests that fit"] == f"{expected['batch_max']:,.0f}"
    at = at.sidebar.text_area(key="config_json").input('{"num_hidden_layers": 2}').run()
    assert any("config.json is missing" in e.value for e in at.sidebar.error)
    assert not at.exception


def test_pipeline_stages_split_the_weights():
    at = choose(start(), "RAG, llama-3.1-70b fp8 on 4 x H100 SXM")
    at = at.sidebar.number_input(key="pipeline_parallel").set_value(2).run()
    data = yaml.safe_load(PRESETS["RAG, llama-3.1-70b fp8 on 4 x H100 SXM"].read_text())
    data["gpu"]["pipeline_parallel"] = 2
    expected = Scenario.from_dict(data).evaluate()
    assert metrics(at)["Requests that fit"] == f"{expected['batch_max']:,.0f}"


def test_compare_across_gpus_and_models():
    from capacity.compare import compare

    data = yaml.safe_load(PRESETS["essay 001 sale-day napkin"].read_text())
    table = compare(data, gpus=["h100-sxm", "l4"], models=["llama-3.1-8b", "llama-3.1-70b"])
    assert len(table) == 4
    row = table[(table.model == "llama-3.1-8b") & (table.gpu == "h100-sxm")].iloc[0]
    alone = Scenario.from_dict({**data, "model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm", "count": 1}})
    assert row.goodput_rps == pytest.approx(alone.evaluate()["goodput_rps"])
    # 70B in 16-bit (141 GB) cannot fit one 24 GB L4: a reason, not numbers.
    big = table[(table.model == "llama-3.1-70b") & (table.gpu == "l4")].iloc[0]
    assert "do not fit" in big.problem


def test_report_download_buttons_are_offered():
    at = choose(start(), "essay 001 sale-day napkin")
    labels = [button.proto.label for button in at.get("download_button")]
    assert {"Report (CSV)", "Report (XLSX, live formulas)", "Report (JSON)", "Save scenario (YAML)"} <= set(labels)


def test_simulator_view_shows_static_and_continuous_as_the_library_simulates():
    from capacity.simulator import simulate
    from capacity.units import format_time

    at = choose(start(), "essay 001 sale-day napkin")
    at.button_group(key="view").set_value("Simulator").run()
    at.number_input(key="sim_requests").set_value(200).run()
    at.number_input(key="sim_rate").set_value(4.0).run()
    assert not at.exception and not at.error
    shown = at.dataframe[0].value.set_index("quantity")
    scenario = Scenario.from_dict(yaml.safe_load(PRESETS["essay 001 sale-day napkin"].read_text()))
    for policy in ("static", "continuous"):
        summary = simulate(scenario, policy=policy, requests=200, rate=4.0, seed=0, cost_model="roofline",
                           chunked_prefill=False, arrival="poisson").summary()
        assert shown.loc["mean TTFT", policy] == format_time(summary["mean_ttft_s"])
        assert shown.loc["throughput", policy] == f"{summary['throughput_rps']:,.2f} requests/s"


def test_fleet_view_ranks_the_options_the_library_ranks():
    from capacity.fleet import fleet_options

    at = choose(start(), "essay 001 sale-day napkin")
    at.button_group(key="view").set_value("Fleet").run()
    assert not at.exception and not at.error
    data = yaml.safe_load(PRESETS["essay 001 sale-day napkin"].read_text())
    table = fleet_options(data, target=10.0)
    best = table[table["meets_slo"]].iloc[0]
    assert metrics(at)["Cheapest that keeps the promises"] == f"{best['gpus']:,.0f} GPUs"
