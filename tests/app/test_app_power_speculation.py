"""Issue 29's settings in the app's sidebar: the electricity price, the PUE and the board power (under GPU), and
speculative decoding (under Serving engine: a method, drafted tokens, the acceptance as a rate or as tokens per
verification, and a draft model's size). Each is written to the one scenario mapping, so the page shows what
``capacity evaluate`` gives for the saved file (the one answer), and a share link or a reload restores it.

The worked example: the chat preset (llama-3.1-8b on one H100 SXM, 700 W board power, 10 requests/s) at $0.12 per
kWh and PUE 1.3 draws 0.7 kW x 1.3 = 0.91 kW, 664.3 kWh a month (x 730 h), $80 of electricity beside $2,548 of GPU
time. With EAGLE drafting 4 tokens accepted at 0.75 each, one verification yields (1 - 0.75^5) / (1 - 0.75) = 3.05
tokens, and TPOT at the load drops.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app_views.cost import money
from capacity.inputs.speculative import check_speculative
from capacity.render.formatting import format_value
from tests.app.test_app import choose, figure_tables, headline_figures, saved, show_all, start

ROOT = Path(__file__).resolve().parents[2]
CHAT = "chat assistant, llama-3.1-8b on 1 x H100 SXM"


def evaluate(data: dict, tmp_path: Path) -> dict:
    """``capacity evaluate FILE --format json`` of the scenario the app saves (base units)."""
    path = tmp_path / "saved.yaml"
    path.write_text(yaml.safe_dump(data))
    out = subprocess.run([sys.executable, "-m", "capacity", "evaluate", str(path), "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout)


def powered_and_speculating():
    """The chat preset with every input shown, $0.12 per kWh at PUE 1.3, and EAGLE drafting 4 tokens at 0.75."""
    at = show_all(choose(start(), CHAT))
    at.sidebar.number_input(key="energy_price_kwh").set_value(0.12).run()
    at.sidebar.number_input(key="pue").set_value(1.3).run()
    at.sidebar.selectbox(key="spec_method").select("eagle").run()
    at.sidebar.number_input(key="spec_draft_tokens").set_value(4).run()
    at.sidebar.number_input(key="spec_acceptance_rate").set_value(0.75).run()
    assert not at.exception and not at.error, ([e.message for e in at.exception], [e.value for e in at.error])
    return at


def headline_of_cli(out: dict) -> dict[str, str]:
    """The headline figures the app shows for ``capacity evaluate``'s answer (the same formats)."""
    return {"Goodput under promises": f"{out['sizing_replica_goodput_rps']:,.2f} req/s",
            "TPOT at your load": format_value("tpot_at_load_s", out["sizing_tpot_at_load_s"]),
            "$ per M output tokens": money(out["sizing_cost_per_million_tokens"], 3),
            "Monthly cost": money(out["sizing_cost_per_month"], 0)}


def test_the_new_settings_are_the_scenarios_and_the_page_shows_what_capacity_evaluate_gives(tmp_path):
    at = powered_and_speculating()
    data = saved(at)
    assert data["gpu"]["energy_price_per_kwh"] == 0.12 and data["gpu"]["pue"] == 1.3
    assert "tdp_watts" not in data["gpu"]  # the catalog's 700 W, followed
    assert data["serving"]["speculative"] == {"method": "eagle", "draft_tokens": 4, "acceptance_rate": 0.75}
    out = evaluate(data, tmp_path)
    # the worked example's numbers
    assert out["sizing_power_kw"] == pytest.approx(0.7 * 1.3, rel=1e-12)
    assert out["sizing_energy_cost_per_month"] == pytest.approx(0.7 * 1.3 * 730 * 0.12, rel=1e-12)
    assert out["spec_expected_tokens_per_step"] == pytest.approx((1 - 0.75**5) / (1 - 0.75), rel=1e-12)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
    at.button_group(key="view").set_value("Cost").run()
    cost = figure_tables(at)
    assert cost["Fleet power"] == format_value("sizing_power_kw", out["sizing_power_kw"]) == "0.91 kW"
    assert cost["Energy per month"] == f"{out['sizing_energy_kwh_per_month']:,.0f} kWh" == "664 kWh"
    assert cost["Electricity per month"] == money(out["sizing_energy_cost_per_month"], 0) == "$80"
    assert cost["Tokens per verification"] == f"{out['spec_expected_tokens_per_step']:,.2f}" == "3.05"
    assert cost["TPOT, one sequence"] == format_value("spec_tpot_single_s", out["spec_tpot_single_s"])
    at.button_group(key="view").set_value("Summary").run()
    summary = " ".join(block.value for block in at.markdown).replace("\\", "")
    electricity = format_value("sizing_energy_cost_per_month", out["sizing_energy_cost_per_month"])
    assert "| Fleet power | 0.91 kW |" in summary and f"| Electricity per month | {electricity} |" in summary
    assert electricity == "$79.72/month"
    assert f"| Speculative decoding | eagle: {out['spec_expected_tokens_per_step']:,.2f} tokens |" in summary
    # speculation is in the answer: without it, TPOT at the load is another number
    at.sidebar.selectbox(key="spec_method").select("none").run()
    assert "speculative" not in saved(at).get("serving", {})
    plain = evaluate(saved(at), tmp_path)
    assert plain["sizing_tpot_at_load_s"] > out["sizing_tpot_at_load_s"]
    assert headline_figures(at)["TPOT at your load"] == format_value("tpot_at_load_s", plain["sizing_tpot_at_load_s"])


def test_a_share_link_and_a_reload_restore_every_new_setting():
    at = powered_and_speculating()
    at.sidebar.number_input(key="board_power_w").set_value(650.0).run()
    at.sidebar.number_input(key="spec_acceptance_length").set_value(2.9).run()
    at.button_group(key="view").set_value("Cost").run()
    doc = at.session_state["doc"]
    assert doc["gpu"]["tdp_watts"] == 650
    assert doc["serving"]["speculative"] == {"method": "eagle", "draft_tokens": 4, "acceptance_length": 2.9}
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert (params["energy_price_kwh"], params["pue"], params["board_power_w"]) == ("0.12", "1.3", "650")
    assert (params["spec_method"], params["spec_draft_tokens"], params["spec_acceptance_length"]) == ("eagle", "4",
                                                                                                      "2.9")
    assert "spec_acceptance_rate" not in params  # one acceptance is given; the other is what it implies
    for _ in range(2):  # the link opened, then that page reloaded from its own address
        again = start(params)
        assert not again.exception and not again.error
        assert again.session_state["doc"] == doc and again.session_state["view"] == "Cost"
        assert figure_tables(again) == figure_tables(at)
        params = {k: (v[0] if isinstance(v, list) else v) for k, v in again.query_params.items()}
    show_all(again)
    shown = {key: again.sidebar.number_input(key=key).value for key in
             ("energy_price_kwh", "pue", "board_power_w", "spec_draft_tokens", "spec_acceptance_length")}
    assert shown == {"energy_price_kwh": 0.12, "pue": 1.3, "board_power_w": 650.0, "spec_draft_tokens": 4,
                     "spec_acceptance_length": 2.9}
    assert again.sidebar.selectbox(key="spec_method").value == "eagle"
    # the implied rate, solved by the library from 2.9 tokens per verification of 4 drafted
    implied = check_speculative({"method": "eagle", "draft_tokens": 4, "acceptance_length": 2.9})["acceptance_rate"]
    assert again.sidebar.number_input(key="spec_acceptance_rate").value == pytest.approx(implied, rel=1e-12)


def test_acceptance_is_one_number_a_draft_model_has_a_size_and_another_gpu_keeps_the_sites_power():
    at = powered_and_speculating()
    at.sidebar.number_input(key="spec_acceptance_length").set_value(3.2).run()
    assert saved(at)["serving"]["speculative"] == {"method": "eagle", "draft_tokens": 4, "acceptance_length": 3.2}
    at.sidebar.number_input(key="spec_acceptance_rate").set_value(0.6).run()
    assert saved(at)["serving"]["speculative"] == {"method": "eagle", "draft_tokens": 4, "acceptance_rate": 0.6}
    assert "spec_draft_params_b" not in [w.key for w in at.sidebar.number_input]  # no drafter size for EAGLE
    at.sidebar.selectbox(key="spec_method").select("draft").run()
    assert at.sidebar.number_input(key="spec_draft_params_b").value == 1.0
    at.sidebar.number_input(key="spec_draft_params_b").set_value(0.5).run()
    assert not at.exception and not at.error
    spec = saved(at)["serving"]["speculative"]
    assert spec == {"method": "draft", "draft_tokens": 4, "acceptance_rate": 0.6, "draft_params": 500_000_000}
    at.sidebar.selectbox(key="spec_method").select("mtp").run()
    assert "draft_params" not in saved(at)["serving"]["speculative"]  # the library reads it for a draft model only
    # another GPU: the site's price and PUE stay, and its own board power (a typed one stays, as a typed price does,
    # marked with the way back to the new GPU's catalog value)
    at.sidebar.selectbox(key="gpu").select("l40s").run()
    assert saved(at)["gpu"] == {"name": "l40s", "count": 1, "energy_price_per_kwh": 0.12, "pue": 1.3}
    assert at.sidebar.number_input(key="board_power_w").value == 350.0
    at.sidebar.number_input(key="board_power_w").set_value(300.0).run()
    at.sidebar.selectbox(key="gpu").select("h100-sxm").run()
    assert saved(at)["gpu"]["tdp_watts"] == 300
    assert any("your value" in c.value and "700 W" in c.value for c in at.sidebar.caption)
    at.sidebar.button(key="reset_board_power_w").click().run()
    assert "tdp_watts" not in saved(at)["gpu"] and at.sidebar.number_input(key="board_power_w").value == 700.0
    assert not at.exception and not at.error


def test_hidden_they_are_listed_with_their_units_and_named_where_a_file_set_them():
    at = powered_and_speculating()
    at.sidebar.toggle(key="more_inputs").set_value(False).run()
    hidden = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    for text in ("electricity $0.120 per kWh", "PUE 1.30", "board power 700 W", "speculative decoding: EAGLE head",
                 "4 drafted tokens per step", "acceptance rate 0.750 per token", "3.051 tokens per verification"):
        assert text in hidden, text
    assert "drafter" not in hidden
    # a link that sets them: the page names each value the user did not set (issue 27), with a way back
    at2 = start({"name": "from a link", **{k: (v[0] if isinstance(v, list) else v)
                                            for k, v in at.query_params.items() if k != "name"}})
    notice = " ".join(i.value for i in [*at2.info, *at2.warning]).replace("\\", "")
    assert "electricity $0.120 per kWh" in notice and "speculative decoding: EAGLE head" in notice
    at2.button(key="silent_reset_spec_method").click().run()
    assert "speculative" not in saved(at2).get("serving", {}) and not at2.exception


@pytest.mark.parametrize("spec", [
    {"method": "eagle", "draft_tokens": 3, "acceptance_rate": 0.7},
    {"method": "mtp", "draft_tokens": 2, "acceptance_length": 2.4, "verify_tokens": 6, "draft_layers": 2},
    {"method": "draft", "draft_tokens": 5, "acceptance_rate": 0.8, "draft_params": 1e9, "draft_weights": "2 GB",
     "draft_overhead": "1 ms"},
    {"method": "ngram", "draft_tokens": 4, "acceptance_rate": 0.5},
])
def test_links_and_files_carry_speculation_and_power_exactly(spec):
    """Every widget's value is a URL parameter in the mapping's own text, the keys no widget shows (verify_tokens,
    draft_weights, ...) ride in ``extra``: a link and a saved file give back the same mapping."""
    from app_views.state import doc_from_link, link_params, load_text, normalise, to_yaml

    for serving in ({"speculative": spec}, {"step_overhead": "2 ms", "speculative": spec}):
        doc = normalise({"name": "site", "units": "GB", "model": {"name": "llama-3.1-8b"},
                         "gpu": {"name": "h100-sxm", "energy_price_per_kwh": 0.08, "pue": 1.25, "tdp_watts": 600},
                         "serving": serving, "workload": {"prompt_tokens": 1000, "output_tokens": 200}})
        params = link_params(doc, "Cost")
        assert params["spec_method"] == spec["method"] and params["pue"] == "1.25"
        back, problems = doc_from_link(params, {})
        assert problems == [] and back == doc
        assert load_text(to_yaml(doc)) == doc


def test_a_hand_made_link_turns_speculation_off_or_names_an_unknown_method():
    from app_views.state import doc_from_link

    base = {"name": "x", "serving": {"speculative": {"method": "eagle", "draft_tokens": 3, "acceptance_rate": 0.7}}}
    off, problems = doc_from_link({"spec_method": "none"}, base)
    assert problems == [] and "serving" not in off
    kept, problems = doc_from_link({"spec_method": "medusa", "pue": "7"}, base)
    assert kept["serving"] == base["serving"] and "pue" not in kept.get("gpu", {})
    assert any("speculative decoding 'medusa'" in p and "eagle" in p for p in problems)
    assert any("PUE" in p and "outside 1 to 5" in p for p in problems)


@pytest.mark.parametrize("params", [
    {"extra": '{"serving": {"speculative": 5}}'},
    {"extra": '{"serving": {"speculative": {"method": "medusa", "draft_tokens": 3, "acceptance_rate": 0.7}}}'},
    {"spec_method": "eagle", "spec_acceptance_rate": "0.7", "spec_acceptance_length": "2"},
    {"spec_draft_tokens": "abc", "energy_price_kwh": "-1", "board_power_w": "nan"},
])
def test_bad_speculation_or_power_in_a_link_gives_messages_in_the_sidebars_words(params):
    at = start(params)
    assert not at.exception, [e.message for e in at.exception]
    shown = " ".join(e.value for e in [*at.error, *at.warning]).replace("\\", "")
    assert "serving.speculative" not in shown and "Traceback" not in shown
    assert "speculative decoding" in shown or "drafted tokens" in shown or "electricity" in shown, shown
    show_all(at)
    assert not at.exception, [e.message for e in at.exception]


def test_split_pools_chosen_in_the_fleet_view_price_both_pools_electricity(tmp_path):
    """Prefill on L40S (350 W), decode on H100 SXM (700 W), $0.12 per kWh at PUE 1.3 for the site: the Cost view's
    electricity is the one answer's, both pools at the site's price (a pool on another GPU used to drop it)."""
    from tests.app.test_app_split_pools import split_app

    at = split_app()
    show_all(at)
    at.sidebar.number_input(key="energy_price_kwh").set_value(0.12).run()
    at.sidebar.number_input(key="pue").set_value(1.3).run()
    data = saved(at)
    assert data["pools"]["prefill"]["gpu"] == {"name": "l40s", "count": 1} and data["gpu"]["pue"] == 1.3
    out = evaluate(data, tmp_path)
    assert (out["sizing_mode"], out["sizing_prefill_gpu"]) == ("split", "l40s")
    watts = (out["sizing_prefill_replicas"] * 350 + out["sizing_decode_replicas"] * 700) * 1.3
    assert out["sizing_energy_cost_per_month"] == pytest.approx(watts / 1e3 * 730 * 0.12, rel=1e-12)
    at.button_group(key="view").set_value("Cost").run()
    cost = figure_tables(at)
    assert cost["Electricity per month"] == money(out["sizing_energy_cost_per_month"], 0)
    assert cost["Fleet power"] == format_value("sizing_power_kw", out["sizing_power_kw"])
