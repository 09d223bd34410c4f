"""The latency at a load is one composition (issue 27): ``analyse``'s ``tpot_at_load_s`` and ``ttft_at_load_s``,
``sizing.latency_curve`` (the answer's latencies at each replica's load, the Promise chart, the report's chart) and
``curves.load_curve`` (which now calls it) agree at every load, the ceiling and beyond included.

Before: ``analyse`` reported a finite TPOT at loads past the ceiling (llama-3.1-8b on one H100 at 1.05 x the
ceiling: 88 ms, where the batch exceeds what fits and the queue grows without bound), and at the ceiling itself a
TTFT of inf and the TPOT of the fixed point, where ``load_curve`` (and the goodput at the ceiling) gave their limits
from below; so a fleet whose replicas each carry exactly the ceiling read as breaking a TTFT promise it keeps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from capacity import Scenario
from capacity.model.curves import load_curve
from capacity.planning.sizing import latency_curve

ENGINES = [None, "vllm", "tensorrt-llm"]
MODELS = [("llama-3.1-8b", 1), ("mixtral-8x7b", 2)]


def _scenario(model: str, count: int, engine: str | None, slo: dict | None = None) -> Scenario:
    data = {"model": {"name": model}, "gpu": {"name": "h100-sxm", "count": count},
            "workload": {"prompt_tokens": 1000, "output_tokens": 300, "arrival_rate": 1.0},
            "slo": slo or {"tpot": "50 ms", "ttft": "2 s"}}
    if engine:
        data["serving"] = {"engine": engine}
    return Scenario.from_dict(data)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model, count", MODELS)
def test_load_curve_is_the_answers_latency_curve(model, count, engine):
    r = _scenario(model, count, engine).evaluate()
    rates = np.concatenate([np.linspace(0.05, 1.2, 24) * r["ceiling_rps"], [r["goodput_rps"], r["ceiling_rps"]]])
    curve, answer = load_curve(r, rates), latency_curve(r.scenario, "colocated", rates)
    np.testing.assert_array_equal(curve["tpot_s"].to_numpy(), answer["tpot_s"])
    np.testing.assert_array_equal(curve["ttft_s"].to_numpy(), answer["ttft_s"])
    past = rates > r["ceiling_rps"]
    assert np.isinf(curve["tpot_s"][past]).all() and np.isinf(curve["in_flight"][past]).all()
    assert np.isfinite(curve["tpot_s"][~past]).all() and (curve["in_flight"][~past] <= r["batch_max"]).all()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model, count", MODELS)
def test_no_tpot_past_the_ceiling(model, count, engine):
    s = _scenario(model, count, engine)
    ceiling = s.evaluate()["ceiling_rps"]
    past = s.with_changes(workload={"arrival_rate": 1.05 * ceiling}).evaluate()
    assert math.isinf(past["tpot_at_load_s"]) and math.isinf(past["ttft_at_load_s"])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model, count", MODELS)
def test_a_load_at_the_ceiling_reads_as_the_goodput_at_the_ceiling(model, count, engine):
    """Without binding promises the goodput is the ceiling; a load of exactly that rate has the goodput's TPOT and
    TTFT (their limits from below), not an unbounded TTFT."""
    s = _scenario(model, count, engine, {"tpot": "10 s", "ttft": "100 s"})
    r = s.evaluate()
    assert r["goodput_limit"] == "capacity"
    at = s.with_changes(workload={"arrival_rate": float(r["goodput_rps"])}).evaluate()
    assert at["tpot_at_load_s"] == pytest.approx(r["tpot_at_goodput_s"], rel=1e-12)
    assert at["ttft_at_load_s"] == pytest.approx(r["ttft_at_goodput_s"], rel=1e-12)
    assert math.isfinite(at["ttft_at_load_s"])


def test_the_workbook_recalculates_loads_at_and_past_the_ceiling_as_the_library(tmp_path):
    """The XLSX's live formulas take the same load latencies (LibreOffice recalculation; every result compared but
    the chunked solver's, which past the ceiling of a MoE model differs from the library by its tolerance, 1e-10)."""
    from tests.render.test_xlsx_libreoffice import SOFFICE, _recalculated, differences

    if SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed; .ci/run installs it")
    scenarios = {}
    for model, count in MODELS:  # under an engine profile (batched prefill): 6 workbooks, one LibreOffice run
        for engine in ("vllm",):
            s = _scenario(model, count, engine, {"tpot": "1 s", "ttft": "5 s"})
            ceiling = float(s.evaluate()["ceiling_rps"])
            for name, rate in (("half", 0.5 * ceiling), ("at", ceiling), ("past", 1.05 * ceiling)):
                scenarios[f"{model}-{engine}-{name}"] = s.with_changes(workload={"arrival_rate": rate})
    found = {key: {k: v for k, v in differences(path, report).items() if not k.startswith(("chunk", "solver_chunk"))}
             for key, (report, path) in _recalculated(scenarios, tmp_path, tmp_path / "profile").items()}
    assert {key: diff for key, diff in found.items() if diff} == {}
