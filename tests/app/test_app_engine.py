"""The serving engine and the front end before it in the app's sidebar (``serving.engine``, ``serving.front_end``).

Each is written to the one scenario mapping, so the page shows what ``capacity evaluate`` gives for the saved file
(the one answer), and a share link or a reload restores it. Left unchosen, the engine is not written: the library
takes vLLM's profile and says so as an assumption, and the selector shows vLLM.

The worked example: the chat preset (llama-3.1-8b on one H100 SXM) with TensorRT-LLM adds no request latency behind
the engine's own server (TensorRT-LLM's published Hopper points measured none) and the silicon sample's
``engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"]`` behind NVIDIA Dynamo's front end, on every TTFT.
"""

from __future__ import annotations

import pytest

from capacity.inputs import engines
from tests.app.test_app import choose, figure_tables, headline_figures, saved, show_all, start
from tests.app.test_app_power_speculation import CHAT, evaluate, headline_of_cli


def test_the_engine_unchosen_is_vllms_assumption_and_chosen_is_the_scenarios(tmp_path):
    at = choose(start(), CHAT)
    assert at.sidebar.selectbox(key="engine").value == engines.DEFAULT_ENGINE
    assert "engine" not in saved(at).get("serving", {})  # not written: the library says it assumed vLLM
    assert "front_end" not in [w.key for w in at.sidebar.selectbox]  # drawn with every input
    assumed = evaluate(saved(at), tmp_path)
    at.sidebar.selectbox(key="engine").select("tensorrt-llm").run()
    assert not at.exception and not at.error, ([e.message for e in at.exception], [e.value for e in at.error])
    data = saved(at)
    assert data["serving"]["engine"] == "tensorrt-llm"
    out = evaluate(data, tmp_path)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
    # vLLM's profile adds its fitted request latency to every TTFT; TensorRT-LLM's own server on Hopper none
    assert out["ttft_at_load_s"] < assumed["ttft_at_load_s"]


def test_the_front_end_sets_the_request_latency_and_a_link_restores_both(tmp_path):
    at = show_all(choose(start(), CHAT))
    at.sidebar.selectbox(key="engine").select("tensorrt-llm").run()
    own = evaluate(saved(at), tmp_path)
    at.sidebar.selectbox(key="front_end").select("dynamo").run()
    assert not at.exception and not at.error
    data = saved(at)
    assert (data["serving"]["engine"], data["serving"]["front_end"]) == ("tensorrt-llm", "dynamo")
    out = evaluate(data, tmp_path)
    # the same engine's TTFT at the load, later by the latency measured behind Dynamo and by nothing else
    latency = engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"]
    assert out["ttft_at_load_s"] == pytest.approx(own["ttft_at_load_s"] + latency, rel=1e-12)
    assert out["tpot_at_load_s"] == pytest.approx(own["tpot_at_load_s"], rel=1e-12)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert (params["engine"], params["front_end"]) == ("tensorrt-llm", "dynamo")
    doc = at.session_state["doc"]
    for _ in range(2):  # the link opened, then that page reloaded from its own address
        again = start(params)
        assert not again.exception and not again.error
        assert again.session_state["doc"] == doc and figure_tables(again) == figure_tables(at)
        params = {k: (v[0] if isinstance(v, list) else v) for k, v in again.query_params.items()}
    show_all(again)
    assert again.sidebar.selectbox(key="engine").value == "tensorrt-llm"
    assert again.sidebar.selectbox(key="front_end").value == "dynamo"


def test_a_hand_made_link_names_an_engine_by_its_other_names_and_refuses_unknown_ones():
    at = start({"engine": "trtllm", "front_end": "nginx"})
    assert at.session_state["doc"]["serving"]["engine"] == "tensorrt-llm"
    assert "front_end" not in at.session_state["doc"]["serving"]
    page = " ".join(str(getattr(e, "value", "")) for e in (*at.warning, *at.error, *at.info, *at.caption)).replace(
        "\\", "")
    assert "front end 'nginx' from the link is not one of engine, dynamo, none" in page
