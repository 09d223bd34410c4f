"""The one-sentence answer and the figures beside it, on essay 001's worked example (numbers by hand)."""

from pathlib import Path

import pytest
import yaml

from capacity import Scenario
from capacity.answers.sentence import (
    HOURS_PER_MONTH,
    answer,
    capacity_gap_rps,
    cost_per_million_output_tokens,
    memory_split,
    monthly_cost,
    paged_over_contiguous,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def essay(name: str, **changes) -> Scenario:
    data = yaml.safe_load((SCENARIOS / name).read_text())
    for section, values in changes.items():
        data[section] = {**(data.get(section) or {}), **values}
    return Scenario.from_dict(data)


def test_essay_001_answer_reads_out_goodput_tpot_cost_and_the_binding_promise():
    r = essay("essay-001-sale-day.yaml").evaluate()
    # Essay 001: 5.90 requests/s under TPOT <= 50 ms; $2/h over 5.897 x 300 tokens/s = $0.314 per million.
    text = answer(r)
    assert text.startswith("1 x custom GPU serves 5.90 req/s at 50.0 ms per token (promise <= 50.0 ms)")
    assert "for $0.31 per million output tokens" in text
    assert text.endswith("the TPOT promise is what binds.")
    assert cost_per_million_output_tokens(2.0, r["goodput_rps"], 300) == pytest.approx(r["cost_per_million_tokens"])
    assert cost_per_million_output_tokens(2.0, 5.897, 300) == pytest.approx(2.0 / (5.897 * 300 * 3600) * 1e6)


def test_monthly_cost_is_price_times_gpus_times_730_hours():
    r = essay("essay-001-sale-day.yaml", gpu={"count": 2, "replicas": 3}).evaluate()
    assert HOURS_PER_MONTH == 365 * 24 / 12
    assert monthly_cost(r) == pytest.approx(2.0 * 6 * 730)
    assert answer(r).startswith("6 x custom GPU (3 replicas of 2 GPUs) serve")


def test_no_price_means_no_cost_and_kv_memory_binds_without_promises():
    r = essay("essay-000-paging.yaml").evaluate()
    assert monthly_cost(r) is None
    assert answer(r).endswith("(no GPU price set); KV memory is what binds.")


def test_memory_split_adds_up_to_the_gpu_and_matches_essay_000():
    r = essay("essay-000-paging.yaml").evaluate()
    parts = memory_split(r)
    # Essay 000: 80 GiB x 0.90 - 16 GiB = 56 GiB pool, 8 GiB left free.
    assert parts["KV pool"] == 56 * 2**30 and parts["weights"] == 16 * 2**30
    assert parts["left free (1 - utilisation)"] == pytest.approx(8 * 2**30)
    assert sum(parts.values()) == pytest.approx(80 * 2**30)
    # Essay 000: 253 requests paged vs 14 contiguous (32K reserved each).
    assert paged_over_contiguous(r) == pytest.approx(253 / 14)


def test_capacity_gap_is_ceiling_minus_goodput():
    r = essay("essay-001-sale-day.yaml").evaluate()
    assert capacity_gap_rps(r) == pytest.approx(r["ceiling_rps"] - r["goodput_rps"])
    assert capacity_gap_rps(r) > 0


def test_nothing_fits_says_so():
    r = essay("essay-001-sale-day.yaml", serving={"memory_utilization": 0.201}).evaluate()
    assert r["batch_max"] == 0
    assert "does not fit" in answer(r)


def test_concurrency_falls_with_context_length_as_essay_000_counts():
    from capacity.model.curves import concurrency_curve, decode_curve

    r = essay("essay-000-paging.yaml").evaluate()
    curve = concurrency_curve(r, [1024, 1800, 32768])
    # 28,672 blocks of 16 tokens: 1K-token requests take 64 blocks (448 fit), 1,800 take 113 (253), 32K take 2,048 (14).
    assert list(curve["paged"]) == [28_672 // 64, 253, 14]
    knee = decode_curve(r, [1, 64])
    assert knee["per_user_tokens_per_s"].iloc[0] == pytest.approx(1 / knee["step_s"].iloc[0])
    assert knee["per_user_tokens_per_s"].iloc[1] < knee["per_user_tokens_per_s"].iloc[0]
    assert knee["tokens_per_s"].iloc[1] > knee["tokens_per_s"].iloc[0]


def test_a_max_model_length_beyond_the_context_window_is_flagged():
    from capacity.answers.sentence import cautions

    data = yaml.safe_load((SCENARIOS / "chat-llama-3.1-8b-h100.yaml").read_text())
    data["model"] = {"name": "llama-3-8b"}  # an 8,192-token context window (config.json max_position_embeddings)
    assert cautions(Scenario.from_dict(data).evaluate()) == []
    data["serving"]["max_model_len"] = 32_768
    data["workload"] = {"prompt_tokens": 1000, "output_tokens": 200}
    (line,) = cautions(Scenario.from_dict(data).evaluate())
    assert "32,768" in line and "8,192" in line


def test_load_curve_of_an_moe_model_matches_tpot_at_load():
    # The Promise view's curve for mixtral (MoE, solved row by row) at the workload's 3 requests/s is the
    # library's tpot_at_load_s; a curve of many rates on the one-row model used to fail with an IndexError.
    import numpy as np

    from capacity.model.curves import load_curve

    r = essay("long-context-mixtral-h200.yaml").evaluate()
    curve = load_curve(r, np.array([0.5, 3.0, 5.0]))
    assert curve["tpot_s"].iloc[1] == pytest.approx(r["tpot_at_load_s"], rel=1e-9)
    assert curve["tpot_s"].is_monotonic_increasing


def test_a_ttft_promise_below_a_lone_request_says_what_the_first_token_takes():
    """Essay 001 (prefill 109.7 ms by hand) with 80 ms of request latency and a 150 ms TTFT promise: a lone request's
    first token takes 189.7 ms, so no load keeps the promise, and the answer says why; at 250 ms it is kept."""
    text = answer(essay("essay-001-sale-day.yaml", serving={"request_latency": "80 ms"},
                        slo={"ttft": "150 ms"}).evaluate())
    assert text.endswith("the TTFT promise cannot be kept at any load: a lone request's first token takes 189.7 ms "
                         "(80.0 ms outside the engine, the request latency).")
    kept = answer(essay("essay-001-sale-day.yaml", serving={"request_latency": "80 ms"},
                        slo={"ttft": "250 ms"}).evaluate())
    assert "cannot be kept" not in kept


def test_memory_split_under_tensorrt_llms_rule_adds_up_to_the_gpu():
    # TensorRT-LLM: the pool is free_gpu_memory_fraction (0.9) of what the weights and reserves leave, and the rest
    # of that is what stays free; the four parts are the GPU's memory (not memory x (1 - utilisation) on top)
    from capacity import Scenario

    r = Scenario.from_dict({"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": {"engine": "tensorrt-llm"},
                            "workload": {"prompt_tokens": 1000, "output_tokens": 200}}).evaluate()
    parts = memory_split(r)
    memory = r.scenario.gpu.memory_bytes
    left = memory - parts["weights"] - parts["engine reserve"]
    assert parts["KV pool"] == pytest.approx(0.9 * left, rel=1e-12)
    assert parts["left free (1 - free fraction)"] == pytest.approx(0.1 * left, rel=1e-9)
    assert sum(parts.values()) == pytest.approx(memory, rel=1e-12)
