"""Invariants of the analytic model over random valid inputs (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity import RESULTS, analyse, blocks_for

NUMERIC = [k for k in RESULTS if RESULTS[k][0] not in ("",)]


@st.composite
def inputs(draw):
    prompt = draw(st.integers(1, 32_000))
    output = draw(st.integers(1, 8_000))
    block = draw(st.sampled_from([1, 8, 16, 32]))
    params = draw(st.floats(5e8, 4e11))
    return {
        "layers": draw(st.integers(1, 128)), "kv_heads": draw(st.sampled_from([1, 2, 4, 8, 16, 32])),
        "head_dim": draw(st.sampled_from([64, 96, 128, 256])),
        "kv_bytes_per_value": draw(st.sampled_from([0.5, 1.0, 2.0])), "params": params,
        "weight_bytes": params * draw(st.sampled_from([0.516, 1.0, 2.0])),
        "gpu_memory_bytes": draw(st.floats(16e9, 300e9)), "bandwidth": draw(st.floats(2e11, 1e13)),
        "flops": draw(st.floats(5e13, 5e15)), "gpu_count": draw(st.sampled_from([1, 2, 4, 8])),
        "price_per_hour": draw(st.floats(0.1, 20)), "memory_utilization": draw(st.floats(0.3, 1.0)),
        "block_size": block,
        "max_model_len": prompt + output + draw(st.integers(0, 100_000)),
        "step_overhead_s": draw(st.floats(0, 0.02)),
        "max_num_seqs": draw(st.sampled_from([np.inf, 8, 64, 256, 1024])),
        "prompt_tokens": prompt, "output_tokens": output,
        "shared_prefix_tokens": draw(st.integers(0, prompt)),
        "arrival_rate": draw(st.floats(0, 50)),
        "tpot_slo_s": draw(st.sampled_from([np.inf, 0.005, 0.02, 0.05, 0.2])),
        "ttft_slo_s": draw(st.sampled_from([np.inf, 0.1, 0.5, 2.0, 10.0])),
        **draw(architecture(params)),
    }


@st.composite
def architecture(draw, params):
    """Optional MLA, sliding windows, MoE, pipeline stages, all-reduce and reserves."""
    experts = draw(st.sampled_from([0, 0, 8, 64]))
    top_k = draw(st.integers(1, 8)) if experts else 0
    return {
        "kv_latent_dim": draw(st.sampled_from([0, 0, 576])),
        "sliding_window": draw(st.sampled_from([np.inf, 1024, 4096])),
        "local_layer_fraction": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "experts": experts, "experts_per_token": top_k,
        # Consistent MoE: the k active experts are at most the active params (shared part >= 0).
        "active_params": params * (top_k / experts + (1 - top_k / experts) * draw(st.floats(0.0, 0.3)))
        if experts else params,
        "pipeline_parallel": draw(st.sampled_from([1, 1, 2])),
        "hidden_size": draw(st.sampled_from([0, 4096])),
        "interconnect_bandwidth": draw(st.sampled_from([np.inf, 4.5e11, 3.2e10])),
        "allreduce_latency_s": draw(st.sampled_from([0.0, 1e-5])),
        "reserved_bytes": draw(st.sampled_from([0.0, 2e9])),
    }


def fits(x, r):
    return r["pool_bytes"] > 0


@settings(max_examples=300, deadline=None)
@given(inputs())
def test_sharing_never_fits_fewer_than_paging_which_never_fits_fewer_than_contiguous(x):
    r = analyse(x)
    assert r["max_requests_shared_prefix"] >= r["max_requests_paged"]
    # Paging beats a contiguous reservation once max_model_len covers the request's block-rounded length.
    tokens = x["prompt_tokens"] + x["output_tokens"]
    if x["max_model_len"] >= blocks_for(tokens, x["block_size"]) * x["block_size"]:
        assert r["max_requests_paged"] >= r["max_requests_contiguous"]


@settings(max_examples=300, deadline=None)
@given(inputs())
def test_results_are_finite_and_goodput_within_ceiling(x):
    r = analyse(x)
    if not fits(x, r):
        return
    for key in ("kv_bytes_per_token", "pool_blocks", "max_requests_paged", "decode_step_s", "prefill_s",
                "ceiling_rps", "goodput_rps", "goodput_in_flight", "single_stream_tokens_per_s"):
        assert np.isfinite(r[key]), key
    assert 0 <= r["goodput_rps"] <= r["ceiling_rps"] * (1 + 1e-12)
    assert r["goodput_in_flight"] <= r["batch_max"] * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(inputs(), st.floats(1.0, 3.0))
def test_more_memory_or_bandwidth_or_fewer_weight_bytes_never_hurt(x, factor):
    base = analyse(x)
    for key, scaled in (("gpu_memory_bytes", factor), ("bandwidth", factor), ("weight_bytes", 1 / factor)):
        better = analyse({**x, key: x[key] * scaled})
        for result in ("max_requests_paged", "max_requests_shared_prefix", "goodput_rps", "ceiling_rps"):
            assert better[result] >= base[result] * (1 - 1e-9), (key, result)


@settings(max_examples=300, deadline=None)
@given(inputs(), st.floats(0.1, 1.0), st.floats(0.1, 1.0))
def test_a_tighter_promise_never_raises_goodput(x, tpot_factor, ttft_factor):
    loose = {**x, "tpot_slo_s": 0.1, "ttft_slo_s": 5.0}
    tight = {**x, "tpot_slo_s": 0.1 * tpot_factor, "ttft_slo_s": 5.0 * ttft_factor}
    assert analyse(tight)["goodput_rps"] <= analyse(loose)["goodput_rps"] * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(inputs(), min_size=2, max_size=6))
def test_the_array_path_equals_the_scalar_path(rows):
    columns = {key: np.array([row[key] for row in rows], dtype=float) for key in rows[0]}
    together = analyse(columns)
    for i, row in enumerate(rows):
        alone = analyse(row)
        for key in RESULTS:
            a, b = alone[key], together[key][i]
            if RESULTS[key][0] == "":
                assert a == b, key
            else:
                np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=key)
