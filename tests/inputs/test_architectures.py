"""Real architectures and layouts: MLA, sliding windows, MoE, weight dtypes, tensor/pipeline parallel,
engine reserves, and config.json import. Each expected value is derived by hand in its comment."""

import json
from pathlib import Path

import pytest

from capacity import Scenario, ScenarioError
from capacity.formulas.memory import expected_distinct_experts
from capacity.inputs.hf_config import load_config, model_from_text, param_counts

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
GPU = {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "300 TFLOP/s"}


def evaluate(model, gpu=None, serving=None, workload=None, slo=None):
    # hand derivations under the essays' conventions (engine: ideal: no activation reserve, no batch cap)
    data = {"model": model, "gpu": gpu or GPU, "serving": {"engine": "ideal", **(serving or {"max_model_len": 32768})},
            "workload": workload or {"prompt_tokens": 1000, "output_tokens": 300}}
    if slo:
        data["slo"] = slo
    return Scenario.from_dict(data).evaluate()


# --- config.json import: parameter counts against the published sizes -----------------------------------

@pytest.mark.parametrize("name, total, active", [
    ("llama-3-8b", 8_030_261_248, 8_030_261_248),        # HF safetensors metadata: 8.03B
    ("gemma-2-9b", 9_241_705_984, 9_241_705_984),        # 9.24B, tied embeddings
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),    # Mistral AI: 46.7B total, 12.9B active
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704),    # Qwen: 30.5B total, 3.3B active
])
def test_param_count_from_config(name, total, active):
    assert param_counts(json.loads((CONFIGS / f"{name}.json").read_text())) == (total, active)


def test_deepseek_v3_param_count_is_671b_without_the_mtp_layer():
    total, active = param_counts(json.loads((CONFIGS / "deepseek-v3.json").read_text()))
    assert round(total / 1e9) == 671 and round(active / 1e9) == 38  # DeepSeek: 671B total, 37B activated


def _llama4_counts(moe_layers: int, experts: int) -> tuple[int, int]:
    """Llama 4 text by hand (H 5120, 40 query and 8 KV heads of 128, vocabulary 202,048, untied): attention
    Q and O 5120 x 5120 each, K and V 5120 x 1024 each; two RMS norms; dense layers a gated MLP 16,384 wide
    (intermediate_size_mlp); MoE layers a router 5120 x E, one shared expert and E routed ones 8,192 wide."""
    h = 5120
    attention_and_norms = 2 * h * h + 2 * h * 1024 + 2 * h
    dense, expert = 3 * h * 16384, 3 * h * 8192
    moe_fixed = h * experts + expert  # router and the shared expert, read for every token
    ends = 2 * 202048 * h + h         # embeddings, lm_head, final norm
    base = 48 * attention_and_norms + (48 - moe_layers) * dense + moe_layers * moe_fixed + ends
    return base + moe_layers * experts * expert, base + moe_layers * expert  # top-1


def test_llama_4_maverick_moe_on_every_other_layer_is_400b():
    # interleave_moe_layer_step 2: 24 MoE layers of 128 experts; Meta's card: 400B total, 17B active.
    config = json.loads((CONFIGS / "llama-4-maverick.json").read_text())
    total, active = param_counts(config)
    assert (total, active) == _llama4_counts(moe_layers=24, experts=128)
    assert round(total / 1e9) == 401 and round(active / 1e9) == 17


def test_llama_4_scout_and_its_chunked_attention():
    # every layer MoE with 16 experts: 107.8B text parameters (Meta's 109B counts the vision encoder too), 17B active;
    # chunks of 8,192 tokens on 3 of every 4 layers (the RoPE layers), global attention on the other 12.
    text = (CONFIGS / "llama-4-scout.json").read_text()
    assert param_counts(json.loads(text)) == _llama4_counts(moe_layers=48, experts=16)
    model = model_from_text(text, "scout")
    assert (model["sliding_window"], model["local_layers"], model["num_experts"]) == (8192, 36, 16)


def test_config_missing_fields_are_named():
    with pytest.raises(ScenarioError, match="missing num_attention_heads, hidden_size"):
        model_from_text('{"num_hidden_layers": 32}')
    with pytest.raises(ScenarioError, match="not valid JSON at line 1"):
        model_from_text("{oops")


def test_scenario_can_name_a_config_file():
    r = evaluate({"config": str(CONFIGS / "llama-3-8b.json"), "weight_dtype": "bf16"})
    assert r.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert r.weight_bytes_per_gpu == pytest.approx(8_030_261_248 * 2)


# --- KV per token by attention kind -------------------------------------------------------------------------

def test_deepseek_v3_mla_caches_576_values_per_layer():
    model = load_config(CONFIGS / "deepseek-v3.json")
    r = evaluate({**model, "weights": "1 GB"}, gpu={**GPU, "memory": "141 GB"})
    # (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes = 1,152 B per layer; x 61 layers = 70,272 B.
    assert r.kv_bytes_per_token == 61 * 1152 == 70_272


def test_mla_latent_is_replicated_over_tensor_parallel_gpus():
    model = {**load_config(CONFIGS / "deepseek-v3.json"), "weight_dtype": "fp8"}
    r = evaluate(model, gpu={**GPU, "memory": "141 GB", "count": 8})
    assert r.kv_bytes_per_token_per_gpu == r.kv_bytes_per_token == 70_272


def test_gemma_2_9b_beyond_its_window_holds_only_4096_tokens_in_local_layers():
    model = load_config(CONFIGS / "gemma-2-9b.json")
    # 2 x 42 x 8 x 256 x 2 B = 344,064 B per token over all layers; half the layers are local (window 4,096).
    # An 8,000-token request: 21 global layers hold 8,000 tokens, 21 local layers 4,096 -> blocks of 16:
    # 0.5 x 500 + 0.5 x 256 = 378 full-model blocks.
    r = evaluate(model, serving={"max_model_len": 8192}, workload={"prompt_tokens": 7000, "output_tokens": 1000})
    assert r.kv_bytes_per_token == 344_064
    assert r.blocks_per_request == 378
    pool_blocks = (80e9 * 0.9 - 9_241_705_984 * 2) // (16 * 344_064)
    assert r.pool_blocks == pool_blocks
    assert r.max_requests_paged == pool_blocks // 378
    # A short request is inside the window: no saving.
    short = evaluate(model, serving={"max_model_len": 8192}, workload={"prompt_tokens": 1000, "output_tokens": 300})
    assert short.blocks_per_request == 82  # ceil(1300 / 16)


def test_hybrid_model_counts_only_attention_layers():
    dense = evaluate({"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9})
    hybrid = evaluate({"layers": 32, "attention_layers": 4, "kv_heads": 8, "head_dim": 128, "params": 8e9})
    assert hybrid.kv_bytes_per_token == dense.kv_bytes_per_token / 8 == 2 * 4 * 8 * 128 * 2


# --- weights by dtype ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, bytes_per_weight", [("bf16", 2), ("fp16", 2), ("fp8", 1), ("int8", 1),
                                                     ("int4", 0.5 + 2 / 128)])
def test_weight_bytes_follow_the_dtype(dtype, bytes_per_weight):
    r = evaluate({"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weight_dtype": dtype})
    assert r.weight_bytes_per_gpu == pytest.approx(8e9 * bytes_per_weight)


# --- MoE ---------------------------------------------------------------------------------------------------

def test_expected_distinct_experts():
    # One token touches k experts; two tokens 8 (1 - (6/8)^2) = 3.5 of 8 with top-2.
    assert expected_distinct_experts([1, 2, 1000], 8, 2).tolist() == pytest.approx([2.0, 3.5, 8.0])


def test_mixtral_reads_only_the_experts_a_small_batch_touches():
    model = {**load_config(CONFIGS / "mixtral-8x7b.json"), "weight_dtype": "bf16"}
    r = evaluate(model, gpu={"memory": "141 GB", "bandwidth": "4.8 TB/s", "flops": "989 TFLOP/s", "count": 2})
    # Memory holds all 46.7B params; one token reads the shared part plus 2 of 8 experts = the 12.88B active.
    assert r.weight_bytes_per_gpu == pytest.approx(46_702_792_704 * 2 / 2)
    assert r.single_stream_tokens_per_s == pytest.approx(4.8e12 / (12_879_925_248 * 2 / 2))
    # Compute counts active params only: 2 x 12.88e9 FLOPs per token over 2 GPUs.
    assert r.decode_compute_s == pytest.approx(r.batch_max * 2 * 12_879_925_248 / (2 * 989e12))
    # At its largest batch every expert is hit: the whole model is read.
    assert r.weight_bytes_read_per_step == pytest.approx(46_702_792_704 * 2, rel=1e-6)


def test_moe_goodput_meets_the_promise_exactly():
    model = {**load_config(CONFIGS / "qwen3-30b-a3b.json"), "weight_dtype": "bf16"}
    r = evaluate(model, gpu={"memory": "80 GB", "bandwidth": "3.35 TB/s", "flops": "989 TFLOP/s"},
                 workload={"prompt_tokens": 1000, "output_tokens": 300}, slo={"tpot": "20 ms"})
    assert r.goodput_limit == "tpot"
    assert r.tpot_at_goodput_s == pytest.approx(0.020, rel=1e-6)
    # and the rate is the largest: 0.1% more load breaks the promise
    from capacity.model.analysis import complete_inputs, step_model
    x = complete_inputs(r.scenario.inputs())
    model = step_model(x, r.context_tokens)[0]
    lam = r.goodput_rps * 1.001
    assert model.step_s(lam * 300 * 0.020) > 0.020 * (1 - lam * r.prefill_s)


# --- tensor and pipeline parallel ------------------------------------------------------------------------------

@pytest.mark.parametrize("tp, kv_heads_per_gpu", [(2, 4), (4, 2), (8, 1)])
def test_llama_3_70b_over_2_4_8_gpus(tp, kv_heads_per_gpu):
    model = {"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70.55e9, "attention_heads": 64}
    r = evaluate(model, gpu={**GPU, "count": tp})
    weights = 70.55e9 * 2 / tp
    kv_gpu = 2 * 80 * kv_heads_per_gpu * 128 * 2
    blocks = (80e9 * 0.9 - weights) // (16 * kv_gpu)
    assert r.weight_bytes_per_gpu == pytest.approx(weights)
    assert r.kv_bytes_per_token_per_gpu == kv_gpu
    assert (r.pool_blocks, r.max_requests_paged) == (blocks, blocks // 82)


def test_kv_heads_are_replicated_when_fewer_than_gpus():
    model = {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "attention_heads": 32}
    r = evaluate(model, gpu={**GPU, "count": 16})
    assert r.kv_bytes_per_token_per_gpu == 2 * 32 * 1 * 128 * 2  # one head per GPU, not half a head


def test_tensor_parallel_must_divide_the_heads():
    with pytest.raises(ScenarioError, match="must divide the model's 64 attention heads"):
        evaluate({"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70e9, "attention_heads": 64},
                 gpu={**GPU, "count": 3})


def test_allreduce_cost_per_step():
    # 80 layers x 2 all-reduces, ring factor 2 (4-1)/4 = 1.5, 8,192 x 2 B per token, 450 GB/s one way
    # (900 GB/s both ways): 160 x 1.5 x 16,384 / 450e9 = 8.738 us per token in the step.
    model = {"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70e9, "hidden_size": 8192}
    r = evaluate(model, gpu={**GPU, "count": 4, "interconnect_bandwidth": "900 GB/s"})
    per_token = 160 * 1.5 * 8192 * 2 / 450e9
    assert r.allreduce_per_step_s == pytest.approx(r.batch_max * per_token)
    free = evaluate(model, gpu={**GPU, "count": 4})
    assert r.decode_step_s - free.decode_step_s == pytest.approx(r.batch_max * per_token)


def test_pipeline_parallel_splits_weights_and_layers():
    model = {"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70e9}
    r = evaluate(model, gpu={**GPU, "count": 2, "pipeline_parallel": 2, "price_per_hour": 2.0})
    assert r.gpus_per_replica == 4
    assert r.weight_bytes_per_gpu == pytest.approx(140e9 / 4)
    assert r.kv_bytes_per_token_per_gpu == 2 * 40 * 4 * 128 * 2  # 40 layers per stage, 4 KV heads per GPU
    # Cost counts all 4 GPUs of the replica.
    assert r.cost_per_million_tokens == pytest.approx(8.0 / (r.goodput_rps * 300 * 3600) * 1e6)


def test_replicas_multiply_throughput():
    model = {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9}
    r = evaluate(model, gpu={**GPU, "replicas": 3})
    assert r.fleet_goodput_rps == pytest.approx(3 * r.goodput_rps)


# --- engine-faithful memory ---------------------------------------------------------------------------------------

def test_engine_reserves_come_out_of_the_pool():
    model = {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9}
    plain = evaluate(model)
    reserved = evaluate(model, serving={"max_model_len": 32768, "activation_memory": "1.5 GiB",
                                        "cuda_graph_memory": "0.5 GiB", "non_torch_memory": "0.25 GiB"})
    assert plain.pool_bytes - reserved.pool_bytes == pytest.approx(2.25 * 2**30)


def test_catalog_models_with_new_architectures_evaluate():
    for name in ("deepseek-v3", "gemma-2-9b", "mixtral-8x7b", "qwen3-30b-a3b", "mistral-7b"):
        gpu = {"name": "h200", "count": 8 if name == "deepseek-v3" else 1}
        r = Scenario.from_dict({"model": {"name": name, "weight_dtype": "fp8"}, "gpu": gpu,
                                "serving": {"max_model_len": 8192},
                                "workload": {"prompt_tokens": 2000, "output_tokens": 500}}).evaluate()
        assert r.batch_max > 0 and r.ceiling_rps > 0, name


def test_moe_load_curve_is_the_tpot_analyse_solves():
    """The app's load curve and ``analyse`` share one TPOT solve (analysis.tpot_at_rates_s): for a MoE model the
    curve at a rate is the scenario's TPOT at that arrival rate, to the last bit."""
    import numpy as np

    from capacity.model.curves import load_curve

    s = Scenario.from_dict({"model": "mixtral-8x7b", "gpu": {"name": "h200", "count": 2},
                            "workload": {"prompt_tokens": 1000, "output_tokens": 300}})
    r = s.evaluate()
    rates = np.array([0.3, 0.5, 0.8]) * r["ceiling_rps"]
    curve = load_curve(r, rates)
    for rate, tpot in zip(rates, curve["tpot_s"], strict=True):
        assert tpot == s.with_changes(workload={"arrival_rate": float(rate)}).evaluate()["tpot_at_load_s"]
