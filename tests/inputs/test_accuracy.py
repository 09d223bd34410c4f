"""The measured error an answer states for its own class (issue 28: an error band on every answer)."""

from __future__ import annotations

import yaml

from capacity import Scenario
from capacity.inputs import accuracy
from capacity.inputs.catalog import CATALOG_DIR


def _table(metric: str = "tpot"):
    return yaml.safe_load((CATALOG_DIR / accuracy.FILENAME).read_text())[metric]


def test_the_answers_own_class_is_stated():
    row = _table()["classes"]["vllm/hopper"]
    error = accuracy.expected_error("vllm", "h100-sxm")
    assert (error.mape_percent, error.rows, error.own_class) == (row["mape_percent"], row["rows"], True)
    assert error.label == "vllm on hopper"
    ttft = _table("ttft")["classes"]["vllm/hopper"]  # the same class's TTFT, stated beside (never a better one's)
    assert (error.ttft_mape_percent, error.ttft_rows) == (ttft["mape_percent"], ttft["rows"])
    assert f"TTFT {ttft['mape_percent']:.0f}% off" in error.sentence()


def test_a_class_without_rows_says_so_and_takes_the_engines_figure():
    # No SGLang row on MI300X (cdna3): the engine's figure over every family, never a better class's.
    error = accuracy.expected_error("sglang", "mi300x")
    assert error.own_class is False and error.mape_percent == _table()["classes"]["sglang"]["mape_percent"]
    assert "no measured rows for this engine on this GPU family" in error.sentence()


def test_the_essays_convention_states_no_measured_error():
    assert accuracy.expected_error(None, "h100-sxm") is None


def test_the_fleet_range_at_the_measured_error():
    # 12 GPUs at 25%: ceil(12 x 0.75) = 9 to ceil(12 x 1.25) = 15.
    assert accuracy.ExpectedError(25.0, 100, 3, "x", True).gpu_range(12) == (9, 15)


def test_every_answer_with_an_engine_carries_its_error():
    def notes(serving):
        return Scenario.from_dict({"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": serving,
                                   "workload": {"prompt_tokens": 500, "output_tokens": 200}}).evaluate().notes()
    assert any(n.startswith("expected error: TPOT") for n in notes({}))  # vLLM, assumed
    assert not any(n.startswith("expected error") for n in notes({"engine": "ideal"}))
