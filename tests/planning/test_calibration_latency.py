"""Calibration's fourth factor, the request latency L (``serving.request_latency``): a delay on every TTFT.

The "measurements" are the library's own numbers on scenarios carrying known factors and a known latency
(``Scenario.evaluate``: decode steps at a static batch, TTFT of one user and of users in flight
``closed_loop_ttft_s``, TTFT at a request rate ``ttft_at_load_s``); the fit sees scenarios at the defaults (no
latency) and must find all four from the numbers. Without the latency as a parameter the same points cannot be
fitted exactly: a fixed delay is no efficiency.
"""

from dataclasses import replace

import pytest

from capacity import Scenario
from capacity.inputs.profiles import apply_profile, profile_from_fit
from capacity.planning.calibration import (
    ALL_FACTORS,
    FACTORS,
    LATENCY,
    Factors,
    Observation,
    default_fit,
    describe,
    fit_factors,
    format_report,
    predict,
)

TRUE = Factors(bandwidth_efficiency=0.72, flops_efficiency=0.55, step_overhead_s=0.004, request_latency_s=0.05)
LLAMA_8B = {"name": "llama-3.1-8b"}


def mapping(prompt=1024, output=256, batch=None, truth=None, **workload):
    gpu = {"name": "h100-sxm", "count": 1}
    serving = {"engine": "ideal", "max_model_len": 16384, **({"max_num_seqs": batch} if batch else {})}
    if truth:
        gpu.update(bandwidth_efficiency=truth.bandwidth_efficiency, flops_efficiency=truth.flops_efficiency)
        serving.update(step_overhead=truth.step_overhead_s, request_latency=truth.request_latency_s)
    return {"model": LLAMA_8B, "gpu": gpu, "serving": serving,
            "workload": {"prompt_tokens": prompt, "output_tokens": output, **workload}}


def library(key, truth=TRUE, **kw):
    load = {k: kw.pop(k) for k in ("concurrency", "arrival_rate") if k in kw}
    return float(Scenario.from_dict(mapping(truth=truth, **kw, **load)).evaluate()[key])


@pytest.fixture(scope="module")
def points():
    out = []
    for b in (1, 16, 128):
        out.append(Observation(Scenario.from_dict(mapping()), "step_time_s", library("decode_step_s", batch=b),
                               batch_size=b))
    for p in (256, 4096):  # one user: prefill + L
        out.append(Observation(Scenario.from_dict(mapping(prompt=p)), "ttft_s",
                               library("closed_loop_ttft_s", prompt=p, concurrency=1), concurrency=1))
    for c in (8, 32):  # users in flight: the closed loop's queue + L
        out.append(Observation(Scenario.from_dict(mapping()), "ttft_s", library("closed_loop_ttft_s", concurrency=c),
                               concurrency=c))
    out.append(Observation(Scenario.from_dict(mapping()), "ttft_s", library("ttft_at_load_s", arrival_rate=2.0),
                           request_rate=2.0))
    return out


def test_the_library_ttft_carries_the_latency_the_points_were_made_with():
    # The independent statement of what L is: one user's TTFT is the prefill plus L, to rounding.
    without = library("closed_loop_ttft_s", truth=replace(TRUE, request_latency_s=0.0), concurrency=1)
    assert library("closed_loop_ttft_s", concurrency=1) == pytest.approx(without + 0.05, rel=1e-9)


def test_prediction_at_the_true_factors_is_each_point(points):
    for o in points:
        assert predict(o, TRUE) == pytest.approx(o.value, rel=1e-6), o.label or o.metric


def test_exact_points_give_back_all_four_factors(points):
    fit = fit_factors(points, fit=ALL_FACTORS)
    assert fit.held == {} and fit.converged
    assert fit.factors.bandwidth_efficiency == pytest.approx(0.72, rel=1e-5)
    assert fit.factors.flops_efficiency == pytest.approx(0.55, rel=1e-5)
    assert fit.factors.step_overhead_s == pytest.approx(0.004, rel=1e-5)
    assert fit.factors.request_latency_s == pytest.approx(0.05, rel=1e-5)
    assert fit.mape < 1e-3
    assert describe(fit)["factors"][LATENCY] == pytest.approx(0.05, rel=1e-5)
    assert "request_latency" in format_report(points, fit, fit) and "50.000 ms" in format_report(points, fit, fit)


def test_without_the_latency_the_delay_is_misread_as_arithmetic(points):
    # The scenarios carry no latency: three factors cannot reproduce a fixed 50 ms on every TTFT.
    three = fit_factors(points, fit=FACTORS)
    four = fit_factors(points, fit=ALL_FACTORS)
    assert three.factors.request_latency_s is None and LATENCY not in three.fitted
    assert three.mape > 10 * max(four.mape, 1e-3)


def test_the_latency_is_fitted_by_default_only_where_a_point_pays_it(points):
    assert default_fit(points) == ALL_FACTORS
    assert default_fit([o for o in points if o.metric != "ttft_s"]) == FACTORS
    static = [Observation(o.scenario, "ttft_s", o.value, batch_size=1) for o in points[:1]]
    assert default_fit(static) == FACTORS  # a static batch's TTFT is the engine's pass alone


def test_no_ttft_leaves_the_latency_unidentified():
    steps = [Observation(Scenario.from_dict(mapping()), "step_time_s", library("decode_step_s", batch=b),
                         batch_size=b) for b in (1, 16, 128)]
    fit = fit_factors(steps, fit=ALL_FACTORS)
    assert LATENCY in fit.held and "no point is a TTFT" in fit.held[LATENCY]
    assert fit.factors.request_latency_s == 0.0  # the scenarios' own (none), held


def test_a_saved_profile_reproduces_the_fit_with_its_latency(points):
    fit = fit_factors(points, fit=ALL_FACTORS)
    profile = profile_from_fit(points[0].scenario, fit, source="test")
    assert profile["request_latency"] == pytest.approx(0.05, rel=1e-5)
    for o, predicted in zip(points, fit.predicted, strict=True):
        data = apply_profile(dict(o.scenario.raw), profile)
        assert data["serving"]["request_latency"] == profile["request_latency"]
        again = replace(o, scenario=Scenario.from_dict(data))
        assert predict(again, Factors.of(again.scenario)) == pytest.approx(float(predicted), rel=1e-5)
