"""One composition, one place: the mix model and the load curve under every engine profile.

``analysis`` composes the model in named stages (``kv_pool_bytes``, ``memory_stage``, ``prefill_stage``,
``latencies_at_rates_s``); ``mix.mix_model`` and ``curves.load_curve`` call the same stages, so the engine
rules (TensorRT-LLM's KV pool of the free memory, prompts sharing prefill passes of max_batched_tokens) reach
them too. Worked example, llama-3.1-8b on one H100 SXM under TensorRT-LLM, 1,000-token prompts and 300-token
answers: the pool is 0.9 x (memory - weights - reserves), so the batch is 358 where memory x 0.9 - weights
gives 348; a prompt costs the others its share of a 2,048-token pass, so the ceiling is 16.02 requests/s, not
the 15.42 of one pass per prompt; and the Promise chart's TPOT at the goodput is the headline's 50 ms.
"""

import numpy as np
import pytest

from capacity import Scenario
from capacity.model.curves import load_curve
from capacity.model.mix import mix_model

ENGINES = [None, "vllm", "tensorrt-llm", "sglang"]  # None: the ideal engine (no profile)
SETUPS = {
    "llama-3.1-8b on h100-sxm": ("llama-3.1-8b", "h100-sxm", 1, {"prompt_tokens": 1000, "output_tokens": 300}),
    "llama-3-70b on 4 x h100-sxm": ("llama-3-70b", "h100-sxm", 4,
                                    {"prompt_tokens": 2000, "output_tokens": 200, "shared_prefix_tokens": 500}),
    "mixtral-8x7b on h200": ("mixtral-8x7b", "h200", 1, {"prompt_tokens": 1000, "output_tokens": 300}),
}
PROMISES = {"tpot and ttft": {"tpot": "50 ms", "ttft": "2 s"}, "none (capacity)": None}


def scenario(setup: str, engine: str | None, promise: str = "tpot and ttft") -> Scenario:
    model, gpu, count, workload = SETUPS[setup]
    data = {"model": model, "gpu": {"name": gpu, "count": count}, "serving": {"engine": engine} if engine else {},
            "workload": {**workload, "arrival_rate": 1.0}}
    if PROMISES[promise] is not None:
        data["slo"] = PROMISES[promise]
    return Scenario.from_dict(data)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("promise", PROMISES)
def test_one_class_mix_is_the_single_shape_model(setup, engine, promise):
    s = scenario(setup, engine, promise)
    r = s.evaluate()
    mix = mix_model(s)
    assert mix.batch_max == r["batch_max"]
    assert mix.ceiling_rps == pytest.approx(r["ceiling_rps"], rel=1e-12)
    assert mix.mean_goodput_rps() == pytest.approx(r["goodput_rps"], rel=1e-9)
    if not mix.model.moe.any():  # dense: the mean TPOT and TTFT at the arrival rate are the scenario's too
        assert float(mix.tpot_s(1.0)) == pytest.approx(r["tpot_at_load_s"], rel=1e-12)
        assert float(mix.class_ttft_s(0, 1.0)) == pytest.approx(r["ttft_at_load_s"], rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("promise", PROMISES)
def test_load_curve_passes_through_the_goodput_and_the_load(setup, engine, promise):
    r = scenario(setup, engine, promise).evaluate()
    curve = load_curve(r, np.array([r["goodput_rps"], 1.0]))
    assert curve["tpot_s"].iloc[0] == pytest.approx(r["tpot_at_goodput_s"], rel=1e-6)
    assert curve["ttft_s"].iloc[0] == pytest.approx(r["ttft_at_goodput_s"], rel=1e-6)
    assert curve["tpot_s"].iloc[1] == pytest.approx(r["tpot_at_load_s"], rel=1e-6)
    assert curve["ttft_s"].iloc[1] == pytest.approx(r["ttft_at_load_s"], rel=1e-6)


def test_tensorrt_llm_pool_and_batched_prefill_reach_the_mix():
    """The worked example of the module doc: the TensorRT-LLM rules reach the mix model and the chart."""
    s = scenario("llama-3.1-8b on h100-sxm", "tensorrt-llm")
    r = s.evaluate()
    mix = mix_model(s)
    assert (mix.batch_max, r["batch_max"]) == (358, 358)
    assert round(mix.ceiling_rps, 2) == round(r["ceiling_rps"], 2) == 16.02
    assert mix.prefill_gpu_s < mix.prefill_s  # a prompt's share of a batched pass, against its pass alone
    curve = load_curve(r, [r["goodput_rps"]])
    assert curve["tpot_s"].iloc[0] * 1e3 == pytest.approx(50.0, rel=1e-9)
