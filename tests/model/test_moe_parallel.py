"""Issue 29: expert parallelism, attention data parallelism and split pools, each number derived by hand from
config.json / datasheet figures and the formulas in docs/model.md (not from the code under test)."""

from __future__ import annotations

import math

import pytest

from capacity.errors import ScenarioError
from capacity.formulas import roofline
from capacity.model.analysis import analyse
from capacity.model.scenario import Scenario, load_scenario
from capacity.model.split_pools import evaluate as evaluate_pools
from capacity.model.split_pools import pool_scenarios

#: DeepSeek-R1 from its config.json: 58 MoE layers of 256 routed experts of 3 x 7168 x 2048 weights, 8 per token.
N, N_A = 671_026_419_200, 37_552_297_472
EXPERT = 3 * 7168 * 2048
ROUTED = 58 * 256 * EXPERT                 # 653,932,771,328 params in the routed experts
DENSE = N - ROUTED                          # attention, dense layers, shared experts, embeddings

WORKLOAD = {"prompt_tokens": 1000, "output_tokens": 1000}


def deepseek(gpu: dict, serving: dict | None = None, **extra) -> Scenario:
    """DeepSeek-R1 at 1 B per weight (fp8, no scheme: every parameter 1 B) and an fp16 KV, no engine; its
    parameters as its config.json implies them (the catalog keeps the card's rounded 671B / 37B)."""
    model = {"name": "deepseek-r1", "weight_dtype": "fp8", "params": N, "active_params": N_A}
    # "no engine": the essays' convention, named ideal (a scenario naming none gets vLLM's profile)
    return Scenario.from_dict({"model": model, "gpu": gpu, "serving": {"engine": "ideal", **(serving or {})},
                               "workload": WORKLOAD, **extra})


def test_routed_experts_are_the_configs():
    assert N - N_A == 248 * 58 * EXPERT  # the 248 experts a token skips, in each of the 58 MoE layers


def test_attention_data_parallel_replicates_the_dense_weights_and_splits_the_experts():
    """tp 1 x dp 8 on H200s: each GPU holds all dense weights and 1/8 of the experts, (W + 7 W_d) / 8."""
    r = deepseek({"name": "h200", "count": 1}, {"attention_data_parallel": 8, "expert_parallel": 8}).evaluate()
    assert r["weight_bytes_per_gpu"] == pytest.approx(DENSE + ROUTED / 8, rel=1e-12)
    assert r["gpus_per_replica"] == 8
    tp8 = deepseek({"name": "h200", "count": 8}).evaluate()
    assert tp8["weight_bytes_per_gpu"] == pytest.approx(N / 8, rel=1e-12)


def test_attention_data_parallel_splits_requests_not_the_latent():
    """MLA's latent (61 x 576 values x 2 B = 70,272 B per token) is whole on every GPU of a tp group, so tp 8 holds
    one pool's requests; 8 ranks of tp 1 hold 8 pools' requests, each pool what one GPU's memory leaves."""
    memory = 143771 * 2**20  # H200 nvidia-smi total (catalog memory_usable)
    kv = 61 * 576 * 2
    blocks_per_request = math.ceil(2000 / 16)
    pool = memory * 0.9 - (DENSE + ROUTED / 8)
    per_rank = math.floor(math.floor(pool / (16 * kv)) / blocks_per_request)
    r = deepseek({"name": "h200", "count": 1}, {"attention_data_parallel": 8, "expert_parallel": 8}).evaluate()
    assert r["kv_bytes_per_token_per_gpu"] == kv
    assert r["max_requests_paged"] == 8 * per_rank
    tp8 = deepseek({"name": "h200", "count": 8}).evaluate()
    assert tp8["max_requests_paged"] == math.floor(math.floor((memory * 0.9 - N / 8) / (16 * kv))
                                                   / blocks_per_request)


def test_expert_all_to_all_on_nvlink():
    """Dispatch and combine of 8 experts' bf16 hidden vectors per token in each of 58 MoE layers, 7/8 leaving the
    GPU, 8 GPUs sending at once over NVLink 4 (900 GB/s both ways, 450 one way): 3.23 us per token."""
    s = deepseek({"name": "h200", "count": 1}, {"attention_data_parallel": 8, "expert_parallel": 8})
    values = analyse(s.inputs(), intermediates=True)
    hand = 58 * 2 * 8 * 7168 * 2 * (7 / 8) / (8 * 450e9)
    assert float(values["step_comm_per_token_s"]) == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(3.233e-6, rel=1e-3)


def test_expert_group_beyond_the_nvlink_domain_uses_the_network():
    assert roofline.expert_link_bandwidth(16, 8, 450e9, 50e9) == 50e9
    assert roofline.expert_link_bandwidth(8, 8, 450e9, 50e9) == 450e9
    assert roofline.expert_link_bandwidth(16, 8, 450e9, math.inf) == 450e9  # network unknown: NVLink (stated)


def test_load_imbalance_scales_the_busiest_gpus_arithmetic():
    """The busiest EP GPU does 1.5x the mean routed work: its arithmetic per token is N_a + 0.5 k p_e."""
    serving = {"attention_data_parallel": 8, "expert_parallel": 8}
    even = deepseek({"name": "h200", "count": 1}, serving).evaluate()
    hot = deepseek({"name": "h200", "count": 1}, {**serving, "expert_load_imbalance": 1.5}).evaluate()
    assert hot["batch_max"] == even["batch_max"]
    assert hot["decode_compute_s"] / even["decode_compute_s"] == pytest.approx((N_A + 0.5 * 8 * EXPERT * 58) / N_A,
                                                                              rel=1e-12)


def test_layouts_that_do_not_compose_are_refused():
    with pytest.raises(ScenarioError, match="must divide the GPUs of a stage"):
        deepseek({"name": "h200", "count": 4}, {"expert_parallel": 8})
    with pytest.raises(ScenarioError, match="moe_tensor_parallel"):
        deepseek({"name": "h200", "count": 8}, {"expert_parallel": 4, "moe_tensor_parallel": 1})
    with pytest.raises(ScenarioError, match="mixture-of-experts"):
        Scenario.from_dict({"model": "llama-3.1-8b", "gpu": {"name": "h200", "count": 2},
                            "serving": {"expert_parallel": 2}, "workload": WORKLOAD})


def test_attention_data_parallel_lets_tp_not_divide_the_heads():
    """DeepSeek-R1 at 12 GPUs: tp 12 is refused (128 heads), 3 ranks of tp 4 with expert parallelism 12 is not."""
    with pytest.raises(ScenarioError, match="attention heads"):
        deepseek({"name": "b200", "count": 12})
    s = deepseek({"name": "b200", "count": 4}, {"attention_data_parallel": 3, "expert_parallel": 12})
    assert s.gpu.gpus_per_replica == 12


def test_defaults_leave_every_result_as_before():
    plain = deepseek({"name": "h200", "count": 8}).evaluate().values
    stated = deepseek({"name": "h200", "count": 8}, {"attention_data_parallel": 1, "expert_parallel": 1}).evaluate()
    assert stated.values.keys() == plain.keys()
    for key, value in plain.items():
        assert stated.values[key] == value or (value != value and stated.values[key] != stated.values[key]), key


def test_split_pools_compose_essay_001():
    """Essay 001's pools: a prefill replica serves 1 / 109.7 ms = 9.12 requests/s (no TTFT promise), a decode replica
    328 / (300 x 38.0 ms) = 28.8 (its TPOT stays under 50 ms up to B_max); 3 prefill + 1 decode replicas serve
    min(3 x 9.12, 28.8) = 27.4 requests/s on 4 GPUs."""
    base = dict(load_scenario("scenarios/essay-001-sale-day.yaml").raw)
    pools = pool_scenarios({**base, "pools": {"prefill": {"workers": 3}, "decode": {"workers": 1}}})
    out = evaluate_pools(pools)
    t_prefill = max(16e9 / 2e12, 1000 * 2 * 8e9 / 150e12) + 0.003
    t_step = max((16e9 + 328 * 1150 * 131072) / 2e12, 328 * 2 * 8e9 / 150e12) + 0.003
    assert out["split_prefill_rps_per_worker"] == pytest.approx(1 / t_prefill, rel=1e-12)
    assert out["split_decode_rps_per_worker"] == pytest.approx(328 / (300 * t_step), rel=1e-12)
    assert out["split_goodput_rps"] == pytest.approx(3 / t_prefill, rel=1e-12)
    assert round(out["split_goodput_rps"], 1) == 27.4 and out["split_gpus"] == 4
    assert out["split_cost_per_million_tokens"] == pytest.approx(4 * 2.0 / (3 / t_prefill * 300 * 3600) * 1e6)


def test_split_pools_on_different_gpus():
    """A prefill pool of H100s and a decode pool of H200s: each pool is its own GPU's scenario."""
    data = {"model": "llama-3.1-8b", "gpu": {"name": "h200", "count": 1}, "workload": WORKLOAD,
            "pools": {"prefill": {"gpu": {"name": "h100-sxm"}, "workers": 2}, "decode": {"workers": 1}}}
    pools = pool_scenarios(data)
    assert pools.prefill.gpu.name == "h100-sxm" and pools.decode.gpu.name == "h200"
    alone = Scenario.from_dict({**{k: v for k, v in data.items() if k != "pools"}, "gpu": "h100-sxm"}).evaluate()
    assert evaluate_pools(pools)["split_prefill_rps_per_worker"] == alone["disagg_prefill_rps"]
    with pytest.raises(ScenarioError, match="pools.decode"):
        Scenario.from_dict({**data, "pools": {"prefill": {}, "decode": {"gpu": {"count": 3}}}})

