"""One TTFT composition under engine profiles (issue 27): the decode step TTFT waits on is the step at the load's
batch, ``s = t_step(λ A TPOT) = TPOT(λ) (1 - λ t_gpu)``, for dense and MoE models, in the goodput's TTFT solve, the
TTFT at the goodput and at the load, and the mix.

With an engine profile a prompt costs the decoding sequences its share of a batched prefill pass (``t_gpu``,
``analysis.prefill_stage``), less than its own pass (``t_p``). Before, three compositions disagreed: the dense TTFT
took ``TPOT_gpu (1 - λ t_p)``, the MoE TTFT and the TTFT goodput solve ``TPOT_p (1 - λ t_p)`` (the unbatched
prefill), and the ceiling's step ``TPOT (1 - λ t_gpu)``. So where the TTFT promise bound, the TTFT at the goodput
was not the promise (llama-3-70b on 4 x H100 under vLLM, TTFT <= 600 ms: 599.70 ms at the goodput).
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity import Scenario
from capacity.model.analysis import analyse, complete_inputs, prefill_stage, step_model
from capacity.model.mix import mix_model

ENGINES = ["vllm", "tensorrt-llm", "sglang"]


def _scenario(model: str, count: int, engine: str | None, ttft: str, prompt: int = 3000) -> Scenario:
    data = {"model": {"name": model}, "gpu": {"name": "h100-sxm", "count": count},
            "workload": {"prompt_tokens": prompt, "output_tokens": 300, "arrival_rate": 1.0},
            "slo": {"tpot": "200 ms", "ttft": ttft}}
    if engine:
        data["serving"] = {"engine": engine}
    return Scenario.from_dict(data)


@pytest.mark.parametrize("engine, ttft", [(None, "600 ms"), *((e, t) for e in ENGINES for t in ("600 ms", "1 s"))])
def test_a_binding_ttft_promise_is_met_exactly_at_the_goodput(engine, ttft):
    """The TTFT at the goodput is the promise, the engine profile's request latency included (a pure delay:
    the engine's TTFT keeps the promise less it, ``analysis.delayed_ttft``)."""
    r = _scenario("llama-3-70b", 4, engine, ttft).evaluate()
    assert r["goodput_limit"] == "ttft"  # the case: the TTFT promise binds below the ceiling
    promise = r.scenario.slo.ttft_s
    assert r["ttft_at_goodput_s"] == pytest.approx(promise, rel=1e-6)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_promise_inside_the_request_latency_and_one_prefill_is_kept_at_no_load(engine):
    """TTFT >= L + t_p at any load: a promise below that serves nothing, and says so (the TTFT binds)."""
    s = _scenario("llama-3-70b", 4, engine, "1 s")
    floor = s.serving.request_latency_s + float(s.evaluate()["prefill_s"])
    r = _scenario("llama-3-70b", 4, engine, f"{floor * 0.95 * 1e3:.1f} ms").evaluate()
    assert float(r["goodput_rps"]) == 0.0 and r["goodput_limit"] == "ttft"
    assert float(r["ttft_at_goodput_s"]) == pytest.approx(floor, rel=1e-9)  # a lone request's TTFT


def _step_at_batch(s: Scenario, lam: float) -> tuple[float, float]:
    """(the TTFT step analyse reports at λ, the step at that load's batch t_step(λ A TPOT) from the step model)."""
    x = complete_inputs(s.with_changes(workload={"arrival_rate": lam}).inputs())
    v = analyse(x, intermediates=True)
    r = s.evaluate()
    model, _ = step_model(x, np.asarray(r["context_tokens"]))
    prefill = prefill_stage(model, x, x["prompt_tokens"], r["shared_blocks"])
    pieces = model.pieces()
    # the dense pieces' TPOT fixed point with the prompts' GPU time, solved here by iteration
    tpot = 0.0
    for _ in range(200):
        tpot = max(a + m * lam * 300 * tpot for a, m in pieces) / (1 - lam * float(prefill.gpu_s))
    return float(v["ttft_step_at_load_s"]), max(a + m * lam * 300 * tpot for a, m in pieces)


@pytest.mark.parametrize("engine", [None, *ENGINES])
@pytest.mark.parametrize("model, count", [("llama-3.1-8b", 1), ("mixtral-8x7b", 2)])
def test_the_ttft_step_is_the_step_at_the_loads_batch(engine, model, count):
    """Dense and MoE alike (the MoE step on the dense pieces, every expert read, as the TTFT solve takes it)."""
    s = _scenario(model, count, engine, "2 s", prompt=1000)
    lam = 0.5 * s.evaluate()["ceiling_rps"]
    reported, expected = _step_at_batch(s, lam)
    assert reported == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("engine", [None, *ENGINES])
@pytest.mark.parametrize("model, count", [("llama-3-70b", 4), ("mixtral-8x7b", 2)])
def test_one_class_mix_has_the_single_shapes_ttft(engine, model, count):
    s = _scenario(model, count, engine, "600 ms")
    r = s.evaluate()
    mix = mix_model(s)
    assert float(mix.class_ttft_s(0, 1.0)) == pytest.approx(r["ttft_at_load_s"], rel=1e-9)
    assert mix.mean_goodput_rps() == pytest.approx(r["goodput_rps"], rel=1e-9)


# --- percentile TPOT: the work that pauses decoding is each prompt's GPU time ----------------------------------

PERCENTILE_CASES = [("llama-3.1-8b", 1, 1000, 300), ("llama-3-70b", 4, 2000, 200), ("llama-3.1-8b", 1, 200, 100),
                    ("mixtral-8x7b", 2, 1000, 300)]


@pytest.mark.parametrize("engine", [None, *ENGINES])
@pytest.mark.parametrize("model, count, prompt, output", PERCENTILE_CASES)
def test_percentile_tpot_interruptions_are_the_mean_models(engine, model, count, prompt, output):
    """The percentile model's prefill work per arrival (``f β``) is the mean model's ``prefill_gpu_s``, and its
    median TPOT stays by the mean model's (within 4%: the Poisson count of long prefills is lumpy; 1.2% without a
    profile), at 30% and 70% of the ceiling.

    Before: the TPOT distribution took each prompt's own pass as the work that pauses decoding, so under vLLM with
    200-token prompts its median was 1.43 x the mean model's TPOT at 70% of the ceiling (1.002 x without a profile).
    """
    from capacity.model.percentiles import class_latency

    data = {"model": {"name": model}, "gpu": {"name": "h100-sxm", "count": count},
            "workload": {"prompt_tokens": prompt, "output_tokens": output, "arrival_rate": 1.0},
            "slo": {"tpot": "100 ms"}}
    if engine:
        data["serving"] = {"engine": engine}
    mix = mix_model(Scenario.from_dict(data))
    f, beta = mix.work_stream(gpu=True)
    assert f * beta == pytest.approx(mix.prefill_gpu_s, rel=1e-12)
    for share in (0.3, 0.7):
        at = class_latency(mix, 0, share * mix.ceiling_rps, (0.5,))
        assert at["p50_tpot_s"] == pytest.approx(at["mean_tpot_s"], rel=0.04)
