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


def test_the_memory_share_follows_the_engines_rule(tmp_path):
    # vLLM: gpu_memory_utilization 0.90 of all memory; SGLang on 2 GPUs: mem_fraction_static 0.87
    # (engines._sglang_fraction, ServerArgs v0.4); TensorRT-LLM: free_gpu_memory_fraction 0.90 of the memory the
    # weights leave free, a slider of its own (its pool is not a share of all memory)
    at = show_all(choose(start(), CHAT))
    sliders = {w.key: w.value for w in at.sidebar.slider}
    assert sliders["memory_utilization"] == pytest.approx(0.90) and "kv_free_fraction" not in sliders

    def marks() -> str:
        return " ".join(c.value.replace("\\", "") for c in at.sidebar.caption)

    at.sidebar.selectbox(key="engine").select("sglang").run()
    at.sidebar.number_input(key="gpu_count").set_value(2).run()
    assert not at.exception and not at.error
    # the preset states vLLM's 0.90: kept as its own value, marked beside SGLang's default, with the way back
    assert saved(at)["serving"]["memory_utilization"] == 0.9
    assert "the engine's default is 0.87" in marks()
    at.sidebar.button(key="reset_memory_utilization").click().run()
    assert {w.key: w.value for w in at.sidebar.slider}["memory_utilization"] == pytest.approx(0.87)
    assert "memory_utilization" not in saved(at).get("serving", {})  # the engine's default: not written
    # TensorRT-LLM with a memory utilisation stated: that share of all memory applies (engines.apply), shown as such
    at.sidebar.slider(key="memory_utilization").set_value(0.85).run()
    at.sidebar.selectbox(key="engine").select("tensorrt-llm").run()
    sliders = {w.key: w.value for w in at.sidebar.slider}
    assert sliders["memory_utilization"] == pytest.approx(0.85) and "kv_free_fraction" not in sliders
    assert "the engine's default is 0.90 of the memory the weights leave free" in marks()
    # back to the engine's rule: its own slider, at its default
    at.sidebar.button(key="reset_memory_utilization").click().run()
    sliders = {w.key: w.value for w in at.sidebar.slider}
    assert sliders["kv_free_fraction"] == pytest.approx(0.90) and "memory_utilization" not in sliders
    at.sidebar.slider(key="kv_free_fraction").set_value(0.8).run()
    assert not at.exception and not at.error
    data = saved(at)
    assert data["serving"]["kv_cache_free_gpu_memory_fraction"] == pytest.approx(0.8)
    assert "memory_utilization" not in data["serving"]
    out = evaluate(data, tmp_path)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
    # the pool by TensorRT-LLM's rule at 0.8: 0.8 x (memory - weights - reserves) per GPU
    default = evaluate({**data, "serving": {k: v for k, v in data["serving"].items()
                                            if k != "kv_cache_free_gpu_memory_fraction"}}, tmp_path)
    assert out["pool_bytes"] == pytest.approx(default["pool_bytes"] * 0.8 / 0.9, rel=1e-9)
    assert "the engine's default is 0.90" in marks()
    at.sidebar.button(key="reset_kv_free_fraction").click().run()
    assert "kv_cache_free_gpu_memory_fraction" not in saved(at)["serving"]
    assert {w.key: w.value for w in at.sidebar.slider}["kv_free_fraction"] == pytest.approx(0.90)


def test_step_overhead_request_latency_and_clustering_show_what_the_library_takes(tmp_path):
    # Each follows the engine until typed: the value shown is the one the library applies (engines.apply, read back
    # from the scenario the sizing makes), the typed one is saved and evaluated, and the way back removes it.
    at = show_all(choose(start(), CHAT))

    def value(key: str) -> float:
        return next(w.value for w in [*at.sidebar.number_input, *at.sidebar.slider] if w.key == key)

    def marks() -> str:
        return " ".join(c.value.replace("\\", "") for c in at.sidebar.caption)

    # vLLM on Hopper behind its own server: the silicon fit (no published vLLM point fitted Hopper)
    assert value("request_latency_ms") == pytest.approx(engines.SILICON_REQUEST_LATENCY_S["vllm"] * 1e3)
    # the preset states a 2 ms step overhead: kept, marked beside vLLM's fitted one
    assert value("step_overhead_ms") == pytest.approx(2.0)
    assert f"the engine's default is {engines.SILICON_OVERHEAD_S['vllm'] * 1e3:,.4g} ms" in marks()
    # TensorRT-LLM on Hopper behind its own server: none (Triton's published points); behind Dynamo its fit
    at.sidebar.selectbox(key="engine").select("tensorrt-llm").run()
    assert value("request_latency_ms") == 0.0
    at.sidebar.selectbox(key="front_end").select("dynamo").run()
    assert value("request_latency_ms") == pytest.approx(engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"] * 1e3)
    assert "request_latency" not in saved(at)["serving"]  # the engine's default: not written
    own = evaluate(saved(at), tmp_path)
    at.sidebar.number_input(key="request_latency_ms").set_value(100.0).run()
    assert not at.exception and not at.error
    data = saved(at)
    assert data["serving"]["request_latency"] == "100 ms"
    out = evaluate(data, tmp_path)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
    latency = engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"]
    assert out["ttft_at_load_s"] == pytest.approx(own["ttft_at_load_s"] - latency + 0.1, rel=1e-9)
    at.sidebar.button(key="reset_request_latency_ms").click().run()
    assert "request_latency" not in saved(at)["serving"]
    # clustering: drawn for concurrent users without think time, at the dense models' fitted share
    assert "clustering" not in [w.key for w in at.sidebar.slider]
    at.sidebar.number_input(key="concurrency").set_value(64).run()
    assert value("clustering") == pytest.approx(engines.CLOSED_LOOP_CLUSTERING["dense"])
    at.sidebar.slider(key="clustering").set_value(0.0).run()
    assert not at.exception and not at.error
    data = saved(at)
    assert data["workload"]["clustering"] == 0.0
    out = evaluate(data, tmp_path)
    shown = headline_figures(at)
    assert {label: shown[label] for label in headline_of_cli(out)} == headline_of_cli(out)
