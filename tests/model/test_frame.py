"""evaluate_frame: a DataFrame of scenarios in, every result out, equal to the scalar path row by row."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capacity import RESULTS, Scenario, ScenarioError, load_scenario
from capacity.inputs import catalog
from capacity.model.analysis import INPUT_DEFAULTS, INPUTS
from capacity.model.frame import evaluate_frame, frame_inputs

MODELS = sorted(catalog.models())
GPUS = sorted(catalog.gpus())


@st.composite
def scenario_dicts(draw):
    """A catalog model on a catalog GPU (or essay 001's explicit numbers), with random serving and load."""
    prompt = draw(st.integers(1, 20_000))
    output = draw(st.integers(1, 4_000))
    model = draw(st.one_of(st.sampled_from(MODELS).map(lambda m: {"name": m}),
                           st.just({"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9,
                                    "weights": "16 GB"})))
    gpu = draw(st.one_of(
        st.builds(lambda g, tp: {"name": g, "count": tp}, st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8])),
        st.just({"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s", "price_per_hour": 2.0})))
    serving = {"memory_utilization": draw(st.floats(0.5, 0.95)), "block_size": draw(st.sampled_from([1, 16, 32])),
               "max_model_len": prompt + output + draw(st.integers(0, 10_000)),
               "step_overhead": f"{draw(st.floats(0, 10)):.3f} ms",
               "max_batched_tokens": draw(st.sampled_from([256, 2048, 8192]))}
    if draw(st.booleans()):
        serving["max_num_seqs"] = draw(st.sampled_from([8, 64, 256]))
    if draw(st.booleans()):
        serving["kv_transfer_bandwidth"] = "50 GB/s"
    workload = {"prompt_tokens": prompt, "output_tokens": output,
                "shared_prefix_tokens": draw(st.integers(0, prompt)), "arrival_rate": draw(st.sampled_from(
                    [0, 0.5, 3.0, 20.0]))}
    slo = {}
    if draw(st.booleans()):
        slo["tpot"] = draw(st.sampled_from(["20 ms", "50 ms", "150 ms"]))
    if draw(st.booleans()):
        slo["ttft"] = draw(st.sampled_from(["300 ms", "1 s", "5 s"]))
    return {"model": model, "gpu": gpu, "serving": serving, "workload": workload, "slo": slo}


def same(scalar, frame_value) -> bool:
    if isinstance(scalar, str):
        return scalar == str(frame_value)
    if math.isnan(scalar):
        return math.isnan(frame_value)
    return scalar == pytest.approx(frame_value, rel=1e-12, abs=0.0) or scalar == frame_value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scenario_dicts(), min_size=1, max_size=8))
def test_the_frame_equals_the_scalar_path(dicts):
    scenarios = []
    for data in dicts:
        try:
            scenarios.append(Scenario.from_dict(data))
        except ScenarioError:
            continue
    if not scenarios:
        return
    frame = evaluate_frame(pd.DataFrame([s.inputs() for s in scenarios]), chunk_rows=3)  # slices, mixed MoE
    for i, scenario in enumerate(scenarios):
        alone = scenario.evaluate()
        wrong = {key: (alone[key], frame[key].iloc[i]) for key in RESULTS if not same(alone[key], frame[key].iloc[i])}
        assert wrong == {}, scenario.raw


def test_columns_are_every_result_in_order_with_the_index_kept():
    row = load_scenario("scenarios/essay-001-sale-day.yaml").inputs()
    out = evaluate_frame(pd.DataFrame([row, row], index=["a", "b"]))
    assert list(out.columns) == list(RESULTS) and list(out.index) == ["a", "b"]
    assert out["goodput_limit"].tolist() == ["tpot", "tpot"]
    assert out["goodput_rps"].iloc[0] == pytest.approx(5.8967, abs=1e-4)


def test_optional_columns_take_their_defaults_and_empty_cells_mean_unset():
    row = load_scenario("scenarios/essay-001-sale-day.yaml").inputs()
    bare = {k: v for k, v in row.items() if k not in INPUT_DEFAULTS}
    full = evaluate_frame(pd.DataFrame([row]))
    out = evaluate_frame(pd.DataFrame([bare]))
    assert out["goodput_rps"].iloc[0] == full["goodput_rps"].iloc[0]
    # NaN in a promise column means no promise, as inf does in the scalar path.
    unset = evaluate_frame(pd.DataFrame([{**row, "tpot_slo_s": np.nan, "max_num_seqs": None}]))
    assert unset["goodput_limit"].iloc[0] == "capacity"
    assert unset["goodput_rps"].iloc[0] == pytest.approx(full["ceiling_rps"].iloc[0])


def test_missing_required_columns_are_named():
    with pytest.raises(ValueError, match="layers.*prompt_tokens|prompt_tokens"):
        frame_inputs(pd.DataFrame([{"kv_heads": 8}]))
    assert set(frame_inputs(pd.DataFrame([{k: 1.0 for k in INPUTS}]))) == set(INPUTS)


def test_moe_load_curve_of_one_scenario_solves_every_rate():
    """One MoE scenario's TPOT over many loads: the row solves index rates, not rows of the one-row model."""
    import numpy as np

    from capacity import load_scenario
    from capacity.model.curves import load_curve

    results = load_scenario("scenarios/long-context-mixtral-h200.yaml").evaluate()
    rates = np.linspace(0.0, results["ceiling_rps"] * 0.9, 7)[1:]
    curve = load_curve(results, rates)
    single = [float(load_curve(results, [lam])["tpot_s"].iloc[0]) for lam in rates]
    assert np.isfinite(curve["tpot_s"]).all()
    assert curve["tpot_s"].tolist() == single  # each load as if alone
