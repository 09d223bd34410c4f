"""Efficiency curves of the engine profiles: e(x) = e_max x / (x + x_half), fitted on our H200 measurements,
applied only with an engine profile, and shown where a prediction used them."""

import json
from pathlib import Path

import numpy as np
import pytest

from capacity import Scenario
from capacity.answers.verdict import verdict
from capacity.formulas import roofline
from capacity.inputs import engines
from capacity.model.analysis import complete_inputs, step_model
from capacity.simulator.cost_models import RooflineCost

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
H200_BW, H200_BF16 = 4.8e12, 989e12  # datasheet peaks the measurements are shares of (docs/gpu-measurements.md)


def _scenario(serving: dict, gpu: dict | None = None, model: str = "llama-3.1-8b") -> Scenario:
    return Scenario.from_dict({"model": {"name": model}, "gpu": gpu or {"name": "h200"}, "serving": serving,
                               "workload": {"prompt_tokens": 1000, "output_tokens": 200}})


def test_flops_curve_is_the_fit_of_the_h200_matmuls():
    # Products above the ridge point (T >= 256 tokens): time = (T + T_half) x 2 k n / (e_max x 989 TFLOP/s).
    rows = [r for r in json.loads((RESULTS / "h200-microbench-2026-11-30.json").read_text())["matmul_bf16"]
            if r["m"] >= 256]
    e_max, half, mape = engines.fit_efficiency_curve([r["m"] for r in rows], [r["seconds"] for r in rows],
                                                     [2.0 * r["k"] * r["n"] / H200_BF16 for r in rows])
    assert len(rows) == 42 and mape < 4.0  # 6 shapes x 7 sizes
    assert engines.FLOPS_HALF_TOKENS == pytest.approx(half, abs=0.05)
    assert 0.68 < e_max < 0.70  # docs/gpu-measurements.md: "climbs to about 0.70 from ~1,000 tokens on"


def test_bandwidth_curve_is_the_fit_of_the_h200_decode_steps():
    # Memory-bound whole steps (batch <= 32): time = (S + 32 layers x S_half) / (e_max x 4.8 TB/s).
    data = json.loads((RESULTS / "h200-decode-step-2026-11-30.json").read_text())
    steps = [d for d in data["decode"] if d["batch"] <= 32]
    moved = [data["weight_bytes"] + d["batch"] * d["context"] * data["kv_bytes_per_token"] for d in steps]
    e_max, half, mape = engines.fit_efficiency_curve(moved, [d["seconds"] for d in steps], 1.0 / H200_BW)
    assert len(steps) == 6 and mape < 2.0
    assert engines.LAYER_HALF_S == pytest.approx(half / 32 / H200_BW, abs=0.05e-6)
    assert 0.82 < e_max < 0.84
    # the H200's half-bytes per layer: 30.2 us x 4.8 TB/s = 145 MB
    assert engines.efficiency_curves(H200_BW) == pytest.approx((144.96e6, 56.5))


def test_efficiency_at_by_hand():
    assert float(roofline.efficiency_at(512, 0.69, 90)) == pytest.approx(0.69 * 512 / 602)
    assert float(roofline.efficiency_at(512, 0.69, 0)) == 0.69  # no curve: the constant
    assert float(roofline.efficiency_at(0, 0.69, 90)) == 0.0
    assert float(roofline.curve_amount(512, 0)) == 512


def test_ideal_no_curve_and_explicit_efficiency_no_curve():
    ideal = {"engine": "ideal"}
    assert _scenario(ideal).gpu.bandwidth_half_bytes == 0 == _scenario(ideal).gpu.flops_half_tokens
    explicit = _scenario({"engine": "vllm"}, {"name": "h200", "bandwidth_efficiency": 0.7})
    assert explicit.gpu.bandwidth_half_bytes == 0 == explicit.gpu.flops_half_tokens
    assert _scenario(ideal).evaluate().efficiency_line() == ""
    # No engine named: vLLM's profile, curves included (the realistic default).
    assert _scenario({}).gpu.flops_half_tokens == _scenario({"engine": "vllm"}).gpu.flops_half_tokens > 0


def test_engine_decode_step_and_prefill_by_hand():
    # llama-3.1-8b (32 layers) bf16 on one H200, vLLM: hopper plateaus, curves of engines.efficiency_curves.
    s = _scenario({"engine": "vllm", "max_num_seqs": 64})
    bw_max, fl_max, _ = engines.FITTED_EFFICIENCY["hopper"]
    overhead = engines.SILICON_OVERHEAD_S["vllm"]  # no published vLLM point on hopper: the silicon fit
    half_bytes, half_tokens = 30.2e-6 * 4.8e12, 56.5
    assert (s.gpu.bandwidth_half_bytes, s.gpu.flops_half_tokens) == pytest.approx((half_bytes, half_tokens))
    r = s.evaluate()
    m = s.model
    kv_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, 2 B
    step_bytes = m.weight_bytes + 64 * r["context_tokens"] * kv_token
    t_mem = (step_bytes + 32 * half_bytes) / (4.8e12 * bw_max)
    t_comp = (64 + half_tokens) * 2 * m.params / (s.gpu.flops * fl_max)
    assert r["decode_memory_s"] == pytest.approx(t_mem, rel=1e-9)
    assert r["decode_compute_s"] == pytest.approx(t_comp, rel=1e-9)
    assert r["decode_step_s"] == pytest.approx(max(t_mem, t_comp) + overhead, rel=1e-9)
    # the time form is the efficiency form: t_mem = S / (peak x e(S)), t_comp = B 2N / (peak x e(B))
    e_bw = roofline.efficiency_at(step_bytes, bw_max, 32 * half_bytes)
    assert t_mem == pytest.approx(step_bytes / (4.8e12 * e_bw))
    assert t_comp == pytest.approx(64 * 2 * m.params / (s.gpu.flops * roofline.efficiency_at(64, fl_max, half_tokens)))
    # attention's arithmetic: 32 heads x (128 + 128) values per query and context token, 32 layers, 1,000 tokens at
    # a mean context of 500, at the bf16 peak (the weights are bf16 too) x the plateau
    attention = 1000 * 500 * 2 * (32 * 256) * 32 / (s.gpu.flops * fl_max)
    prefill = max((m.weight_bytes + 32 * half_bytes) / (4.8e12 * bw_max),
                  (1000 + half_tokens) * 2 * m.params / (s.gpu.flops * fl_max) + attention) + overhead
    assert r["prefill_s"] == pytest.approx(prefill, rel=1e-9)
    # the verdict and the notes show the efficiency used, which is e(S) at this step
    line = r.efficiency_line()
    assert f"bandwidth {float(e_bw):.2f} of peak" in line and line in r.notes()
    assert any(v.startswith("Efficiency used") for v in verdict(r))


def test_pieces_and_simulator_follow_the_curves():
    for serving, gpu, model in (({"engine": "vllm"}, {"name": "h200"}, "llama-3.1-8b"),
                                ({"engine": "tensorrt-llm"}, {"name": "h100-sxm", "count": 4}, "llama-3.1-70b"),
                                ({"engine": "sglang"}, {"name": "a100-80gb", "count": 2}, "mixtral-8x7b")):
        s = _scenario(serving, gpu, model)
        r = s.evaluate()
        x = complete_inputs(s.inputs())
        model_, _ = step_model(x, np.asarray(r["context_tokens"]))
        (a_mem, m_mem), (a_comp, m_comp) = model_.pieces()
        if not bool(model_.moe):  # pieces are the dense step as two lines in the batch
            for b in (1.0, 37.0, float(r["batch_max"])):
                assert float(model_.step_s(b)) == pytest.approx(max(a_mem + m_mem * b, a_comp + m_comp * b), rel=1e-9)
        cost = RooflineCost.from_scenario(s)
        batch = int(r["batch_max"])
        assert cost.step_s(batch, batch * r["context_tokens"], 0) == pytest.approx(r["decode_step_s"], rel=1e-9)
        assert cost.step_s(0, 0, int(r["prefill_tokens"])) == pytest.approx(r["prefill_s"], rel=1e-9)
