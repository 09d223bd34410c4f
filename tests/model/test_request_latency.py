"""The request latency L (``serving.request_latency``): a request's time outside the engine's passes, a pure delay on
every TTFT (``analysis.delayed_ttft``).

Checked as the definition states it: every TTFT a surface shows moves by exactly L while nothing the engine does
moves (no TTFT promise); a TTFT promise D with L is the promise D - L without it (goodput, each serving mode's
bound, the mix's mean and percentile goodputs); the closed loop counts L in every cycle (the response time law, and
one user by hand); the simulator adds it to the TTFT it reports and to a closed-loop client's cycle.
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity import Scenario, ScenarioError
from capacity.inputs import engines
from capacity.model.analysis import ENGINE_TTFT_RESULTS, closed_loop, replica_stages
from capacity.model.mix import mix_model
from capacity.model.percentiles import class_latency, percentile_goodput_rps
from capacity.simulator import simulate
from tests.shared_inputs import ESSAY_001

L = 0.08  # [s]

BASE = {  # tests/render/test_xlsx.py's "ttft-binds-options": every serving mode has a TTFT
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB", "kv_dtype": "fp16"},
    "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
    "serving": {"engine": "ideal", "memory_utilization": 0.9, "block_size": 16, "max_model_len": 8192,
                "step_overhead": "3 ms", "max_batched_tokens": 1024, "kv_transfer_bandwidth": "50 GB/s"},
    "workload": {"prompt_tokens": 3000, "output_tokens": 200, "arrival_rate": 2.5},
}


def scenario(latency_s: float = 0.0, ttft: float | None = None, **workload) -> Scenario:
    slo = {"tpot": "80 ms", **({"ttft": f"{ttft * 1e3:.6f} ms"} if ttft is not None else {})}
    return Scenario.from_dict({**BASE, "serving": {**BASE["serving"], "request_latency": f"{latency_s * 1e3:g} ms"},
                               "workload": {**BASE["workload"], **workload}, "slo": slo})


def test_every_ttft_moves_by_the_latency_and_nothing_else_does():
    without, with_ = scenario().evaluate().values, scenario(L).evaluate().values
    finite = [key for key in ENGINE_TTFT_RESULTS if np.isfinite(without[key])]
    assert len(finite) == 5  # all but the prefill pool's TTFT at its utmost rate (no promise: 1 / t_p, unbounded)
    for key in ENGINE_TTFT_RESULTS:
        assert with_[key] == pytest.approx(without[key] + L, rel=0, abs=1e-12), key
    for key in ("goodput_rps", "tpot_at_goodput_s", "ceiling_rps", "chunked_goodput_rps", "disagg_goodput_per_gpu_rps",
                "prefill_s", "tpot_at_load_s"):
        assert with_[key] == without[key], key


def test_a_promise_with_latency_is_the_promise_less_it_without():
    """D with L is D - L without it: the engine's TTFT keeps D - L, so every bound and goodput is the same and
    every TTFT at a goodput is L more (the promise itself where it binds)."""
    d = 0.6
    a, b = scenario(L, ttft=d).evaluate().values, scenario(0.0, ttft=d - L).evaluate().values
    assert a["goodput_limit"] == "ttft"
    for key in ("max_rate_for_ttft_rps", "goodput_rps", "chunked_goodput_rps", "disagg_prefill_rps",
                "disagg_goodput_per_gpu_rps"):
        assert a[key] == pytest.approx(b[key], rel=1e-12), key
    for key in ("ttft_at_goodput_s", "chunked_ttft_at_goodput_s", "disagg_ttft_at_goodput_s"):
        assert a[key] == pytest.approx(b[key] + L, rel=1e-12), key
    assert a["ttft_at_goodput_s"] == pytest.approx(d, rel=1e-6)  # where the promise binds, TTFT is the promise


def test_the_closed_loop_counts_the_latency_in_every_cycle():
    """One user by hand (essay 001): TTFT = t_p + L, X = 1 / (t_p + L + 299 TPOT); and the response time law with
    the latency inside the TTFT at every user count."""
    s = Scenario.from_dict(ESSAY_001)
    model, mem, prefill, ceiling = replica_stages(s.inputs())
    t_p = 1000 * 16e9 / 150e12 + 0.003
    one = closed_loop(model, prefill, 300, mem.batch_max, ceiling, 1.0, request_latency_s=L)
    assert float(one.ttft_s) == pytest.approx(t_p + L, rel=1e-12)
    assert float(one.throughput_rps) == pytest.approx(1 / (t_p + L + 299 * float(one.tpot_s)), rel=1e-9)
    users = np.array([1.0, 10.0, 60.0, 200.0, 800.0])
    point = closed_loop(model, prefill, 300, mem.batch_max, ceiling, users, request_latency_s=L)
    assert np.allclose(point.throughput_rps * (point.ttft_s + 299 * point.tpot_s), users, rtol=1e-9)
    spread = closed_loop(model, prefill, 300, mem.batch_max, ceiling, users)
    assert np.all(point.throughput_rps <= spread.throughput_rps)


def test_the_mix_and_its_percentiles_shift_by_the_latency():
    mix0, mix1 = mix_model(scenario()), mix_model(scenario(L))
    lam = 0.5 * mix0.ceiling_rps
    a, b = class_latency(mix0, 0, lam, (0.5, 0.99)), class_latency(mix1, 0, lam, (0.5, 0.99))
    for key in ("mean_ttft_s", "p50_ttft_s", "p99_ttft_s"):
        assert b[key] == pytest.approx(a[key] + L, rel=1e-9), key
    for key in ("mean_tpot_s", "p99_tpot_s"):
        assert b[key] == a[key], key
    d = 1.0
    with_ = mix_model(Scenario.from_dict({**scenario(L).raw, "slo": {"ttft": "1 s", "percentile": 99}}))
    less = mix_model(Scenario.from_dict({**scenario(0.0).raw, "slo": {"ttft": f"{(d - L) * 1e3:g} ms",
                                                                       "percentile": 99}}))
    assert percentile_goodput_rps(with_) == pytest.approx(percentile_goodput_rps(less), rel=1e-6)
    assert with_.mean_goodput_rps() == pytest.approx(less.mean_goodput_rps(), rel=1e-12)


def test_the_simulator_reports_the_latency_and_a_client_waits_it():
    """Teaching costs, one request: its TTFT is the prefill plus L. One closed-loop client with no think time: each
    request reaches the engine L after the previous answer ended there."""
    base = {**ESSAY_001, "serving": {**ESSAY_001["serving"], "request_latency": f"{L * 1e3:g} ms"}}
    s = Scenario.from_dict(base)
    one = simulate(s, cost_model="teaching", arrival="instant", requests=1, decode_base="10 ms",
                   decode_per_seq="0 ms", prefill_per_token="0.01 ms").requests.iloc[0]
    assert one["ttft_s"] == pytest.approx(1000 * 0.01e-3 + L)
    own = Scenario.from_dict({**base, "simulation": {"request_latency": "20 ms"}})  # the simulation's own figure
    assert simulate(own, cost_model="teaching", arrival="instant", requests=1, decode_base="10 ms",
                    decode_per_seq="0 ms", prefill_per_token="0.01 ms").requests.iloc[0]["ttft_s"] == pytest.approx(
        1000 * 0.01e-3 + 0.02)
    loop = simulate(s, cost_model="teaching", arrival="closed", concurrency=1, requests=4, decode_base="10 ms",
                    decode_per_seq="0 ms", prefill_per_token="0.01 ms").requests.sort_values("arrival_s")
    gaps = loop["arrival_s"].to_numpy()[1:] - loop["finish_s"].to_numpy()[:-1]
    assert np.allclose(gaps, L, atol=1e-12)


def test_engine_profiles_add_the_fitted_latency_except_where_published_points_fit_the_family():
    assert engines.request_latency_for("tensorrt-llm", "hopper")[0] is None  # Triton points: 23 ms first tokens
    for engine in engines.ENGINES:
        assert engines.request_latency_for(engine, "blackwell")[0] == engines.SILICON_REQUEST_LATENCY_S[engine]
    vllm = Scenario.from_dict({**ESSAY_001, "serving": {"engine": "vllm"}, "gpu": {"name": "h100-sxm"}})
    assert vllm.serving.request_latency_s == engines.SILICON_REQUEST_LATENCY_S["vllm"]
    assert any("request latency" in line for line in vllm.serving.engine_defaults)
    mine = Scenario.from_dict({**ESSAY_001, "serving": {"engine": "vllm", "request_latency": "5 ms"},
                               "gpu": {"name": "h100-sxm"}})
    assert mine.serving.request_latency_s == pytest.approx(0.005)
    trt = Scenario.from_dict({**ESSAY_001, "serving": {"engine": "tensorrt-llm"}, "gpu": {"name": "h100-sxm"}})
    assert trt.serving.request_latency_s == 0.0
    assert Scenario.from_dict(ESSAY_001).serving.request_latency_s == 0.0  # the essays' convention: none


def test_the_front_end_sets_where_the_fitted_latency_applies():
    """``serving.front_end``: behind Dynamo (the silicon sample's path) the fit applies on every family, TensorRT-LLM
    on Hopper too; in process (``none``) nothing is added; the engine's own server (the default) keeps the published
    points' rule; a stated latency wins over every path; an unknown path is refused with the choices."""
    trt = {**ESSAY_001, "gpu": {"name": "h100-sxm"}}
    assert engines.request_latency_for("tensorrt-llm", "hopper", "dynamo")[0] == engines.SILICON_REQUEST_LATENCY_S[
        "tensorrt-llm"]
    for front_end, expected in (("dynamo", engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"]), ("none", 0.0),
                                ("engine", 0.0)):
        s = Scenario.from_dict({**trt, "serving": {"engine": "tensorrt-llm", "front_end": front_end}})
        assert s.serving.request_latency_s == expected and s.serving.front_end == front_end
    blackwell = Scenario.from_dict({**ESSAY_001, "gpu": {"name": "b200"},
                                    "serving": {"engine": "sglang", "front_end": "none"}})
    assert blackwell.serving.request_latency_s == 0.0
    mine = Scenario.from_dict({**trt, "serving": {"engine": "tensorrt-llm", "front_end": "none",
                                                  "request_latency": "7 ms"}})
    assert mine.serving.request_latency_s == pytest.approx(0.007)
    with pytest.raises(ScenarioError, match="serving.front_end must be one of engine, dynamo, none"):
        Scenario.from_dict({**trt, "serving": {"engine": "vllm", "front_end": "nginx"}})
