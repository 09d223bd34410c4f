"""validation/silicon.py: the measured rows as scenarios (issue 28), each rule the harness states checked on a row."""

from __future__ import annotations

import math

import pytest

from validation import silicon

ROW = {"id": "r", "silicon_data_source": "x; silicon_concurrency=16", "backend": "vllm", "backend_version": "0.11.0",
       "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "precision": "fp8", "mode": "agg",
       "isl": 1000, "osl": 500, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": 16.0,
       "tp_size": 1.0, "pp_size": 1.0, "attention_dp_size": 1.0, "moe_tp_size": 1.0, "moe_ep_size": 1.0,
       "silicon_ttft_ms": 60.0, "silicon_tpot_ms": 9.0}


def test_catalog_names_from_the_data_set():
    assert silicon.catalog_model("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"  # -Instruct: a checkpoint
    assert silicon.catalog_model("Qwen/Qwen3-235B-A22B-FP8") == "qwen3-235b-a22b"
    assert silicon.catalog_gpu("h100_sxm") == "h100-sxm" and silicon.catalog_gpu("b200_sxm") == "b200"
    assert silicon.catalog_model("nobody/No-Such-Model-1B") is None


def test_precision_labels_and_schemes():
    assert silicon.precision_label({**ROW, "moe_quant_mode": "fp8_block"}) == "fp8-block"  # block-scaled FP8 apart
    unstated = {**ROW, "precision": math.nan, "gemm_quant_mode": math.nan, "moe_quant_mode": math.nan}
    assert silicon.row_scheme(unstated, "llama-3.1-8b") == "bf16" and silicon.precision_label(unstated) == "bf16"
    assert silicon.row_scheme({**ROW, "precision": "fp4", "gemm_quant_mode": "nvfp4"}, "gpt-oss-120b") == "mxfp4"


def test_a_row_becomes_a_scenario_and_a_prediction():
    row = silicon.make_row(dict(ROW))
    assert row.reason == "" and row.scenario is not None
    s = row.scenario
    assert (s.serving.engine, s.gpu.name, s.model.quantization, s.workload.prompt_tokens) == ("vllm", "h100-sxm",
                                                                                             "fp8", 1000)
    silicon.predict_defaults([row])
    assert 1e-3 < row.predicted["tpot"] < 0.1
    # TTFT at 16 users: the closed loop's (analysis.closed_loop), at least one prefill of the prompt
    prefill = float(s.evaluate()["prefill_s"])
    assert row.predicted["ttft"] >= prefill * (1 - 1e-9)


def test_a_row_without_its_batch_per_engine_is_not_scored():
    row = silicon.make_row({**ROW, "batch_size": math.nan})
    assert row.scenario is None and row.reason.startswith("batch per engine not stated")


@pytest.mark.parametrize("tpot_ms, kept", [(9.0, True), (0.5, False)])
def test_the_plausibility_screen(tpot_ms, kept):
    # One H100 reads Llama-3.1-8B's 8 GB of fp8 weights in no less than 2.4 ms at its 3.35 TB/s peak: a TPOT of
    # 0.5 ms is not a sustained decode step.
    row = silicon.make_row({**ROW, "silicon_tpot_ms": tpot_ms})
    silicon.screen([row])
    assert (row.screened == "") is kept


def test_the_shipped_silicon_overheads_are_the_harness_fit():
    """``engines.SILICON_OVERHEAD_S`` is what ``validation/silicon.py --fit`` fits on the data set (one overhead
    per engine, ``median_fit.median_overhead`` over its kept rows), to the table's four digits; and the rule it
    ships is the rule the leave-one-group-out column refits."""
    from capacity.inputs import engines

    rows = silicon.load()
    silicon.screen(rows)
    fitted = silicon.silicon_overheads(rows)
    assert {cls[0] for cls in fitted} == set(engines.SILICON_OVERHEAD_S)
    for (engine,), value in fitted.items():
        assert engines.SILICON_OVERHEAD_S[engine] == pytest.approx(value, rel=1e-3, abs=1e-9), engine
    assert silicon.RULE_KEYS == ["engine"]


def _ttft_rows(cases, **raw):
    """Rows of ``ROW`` whose closed-loop TTFT at clustering 0 and 1 is given (``_ttft_at_shares``' cache) and whose
    measured TTFT is ``y``: one group each."""
    import dataclasses

    rows = []
    for i, (t0, slope, y) in enumerate(cases):
        row = silicon.make_row({**ROW, **raw, "id": f"r{i}"})
        row.group = f"g{i}"
        row.ttft_obs = dataclasses.replace(row.ttft_obs, value=y)
        row.raw["ttft_shares"] = (t0, t0 + slope)
        rows.append(row)
    return rows


def test_the_ttft_rules_recover_a_share_and_a_latency_by_hand():
    """Rows built as T_0 + 0.2 s + 50 ms exactly, with slopes that differ: the coordinate descent of weighted
    medians finds k = 0.2 and L = 50 ms (every error 0, the unique minimum); a group left out changes nothing."""
    cases = [(t0, s, t0 + 0.2 * s + 0.05) for t0, s in ((0.1, 0.5), (0.2, 1.0), (0.15, 2.0), (0.3, 4.0), (0.05, 0.2))]
    rows = _ttft_rows(cases)
    share, latency = silicon.silicon_ttft_rules(rows)
    assert share == {"dense": pytest.approx(0.2, abs=1e-12)} and latency == {"vllm": pytest.approx(0.05, abs=1e-12)}
    assert silicon.silicon_ttft_rules(rows, exclude_group="g3")[0] == {"dense": pytest.approx(0.2, abs=1e-12)}


def test_each_model_class_fits_its_own_share():
    """Dense rows built with k = 0.1 and MoE rows (gpt-oss-120b, the same engine) with k = 0.3, one latency of 40 ms
    for both: the descent recovers each class's share and the one latency (every error 0)."""
    dense = _ttft_rows([(t0, s, t0 + 0.1 * s + 0.04) for t0, s in ((0.1, 0.5), (0.2, 1.0), (0.15, 2.0))])
    moe = _ttft_rows([(t0, s, t0 + 0.3 * s + 0.04) for t0, s in ((0.12, 0.4), (0.3, 1.5), (0.2, 3.0))],
                     model_path="openai/gpt-oss-120b", system="h200_sxm", precision="fp4", gemm_quant_mode="nvfp4",
                     moe_quant_mode="nvfp4", tp_size=2.0)
    for i, row in enumerate(moe):
        row.group = f"m{i}"
    assert [silicon.share_class(r) for r in dense + moe] == ["dense"] * 3 + ["moe"] * 3
    share, latency = silicon.silicon_ttft_rules(dense + moe)
    assert share == {"dense": pytest.approx(0.1, abs=1e-12), "moe": pytest.approx(0.3, abs=1e-12)}
    assert latency == {"vllm": pytest.approx(0.04, abs=1e-12)}


def test_rows_behind_dynamo_fit_a_latency_and_others_none():
    """Every row is served behind Dynamo's front end (``silicon.FRONT_END``), so TensorRT-LLM on Hopper, whose own
    server keeps the published family fit and adds no latency, fits one too: rows built as T_0 + 0.3 s give k = 0.3
    and L = 0 (every error 0). The same rows behind the engine's own server fit the share alone."""
    import dataclasses

    rows = _ttft_rows([(0.1, 1.0, 0.4), (0.2, 2.0, 0.8), (0.1, 0.5, 0.25)], backend="trtllm",
                      backend_version="1.0.0")
    assert rows[0].ttft_obs.scenario.serving.front_end == silicon.FRONT_END == "dynamo"
    assert silicon.latency_applies(rows[0])
    share, latency = silicon.silicon_ttft_rules(rows)
    assert share == {"dense": pytest.approx(0.3, abs=1e-12)}
    assert latency == {"tensorrt-llm": pytest.approx(0.0, abs=1e-12)}
    for row in rows:
        s = row.ttft_obs.scenario
        row.ttft_obs = dataclasses.replace(row.ttft_obs, scenario=dataclasses.replace(
            s, serving=dataclasses.replace(s.serving, front_end="engine")))
    assert not silicon.latency_applies(rows[0])
    assert silicon.silicon_ttft_rules(rows) == ({"dense": pytest.approx(0.3, abs=1e-12)}, {})


def test_the_shipped_ttft_rules_are_the_harness_fit():
    """``engines.CLOSED_LOOP_CLUSTERING`` and ``engines.SILICON_REQUEST_LATENCY_S`` are what ``validation/silicon.py
    --fit`` fits on the data set (two closed-loop evaluations of every TTFT row), to the digits shipped."""
    from capacity.inputs import engines

    rows = silicon.load()
    silicon.screen(rows)
    share, latency = silicon.silicon_ttft_rules(rows)
    assert set(share) == set(engines.CLOSED_LOOP_CLUSTERING) == {"dense", "moe"}
    for cls, value in share.items():
        assert engines.CLOSED_LOOP_CLUSTERING[cls] == pytest.approx(value, abs=5e-4), cls
    assert set(latency) == set(engines.SILICON_REQUEST_LATENCY_S)
    for engine, value in latency.items():
        assert engines.SILICON_REQUEST_LATENCY_S[engine] == pytest.approx(value, abs=5e-5), engine
