"""The customer report: every shipped scenario renders, and every number it shows is the library's.

The HTML carries each key number as ``data-key`` / ``data-value`` (exact, base units). The test reads them back
with the standard library's HTML parser and compares them with ``Scenario.evaluate()``, and the fleet figures
with a sizing done by hand here: replicas = ceil(load / goodput), $/month = $/hour x 8,760 / 12.
"""

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from capacity import Scenario, load_scenario
from capacity.answers.fleet_answer import cost_per_month, fleet_answer
from capacity.cli import main
from capacity.planning.sizing import size
from capacity.render.customer_report import FIDELITY, customer_report_html, human_input
from capacity.render.report import flat_inputs, unset_inputs
from tests.shared_inputs import NOTHING_FITS, promise_too_tight

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))

#: Edge cases beyond the presets: nothing fits, and a promise no load keeps (no fleet, no charts of a load).
EDGE = {
    "nothing-fits": NOTHING_FITS,
    "promise-too-tight": promise_too_tight(", arrival_rate: 3"),
}


class _Numbers(HTMLParser):
    """Collect ``data-key`` -> ``data-value`` and the tags and attributes that would load something."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.loads: list[str] = []
        self.scripts_with_src = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-key" in a and "data-value" in a:
            self.values[a["data-key"]] = a["data-value"]
        if tag in ("link", "img", "iframe") or (tag == "script" and a.get("src")):
            self.loads.append(f"{tag} {a}")


def parse(document: str) -> _Numbers:
    parser = _Numbers()
    parser.feed(document)
    return parser


def same(shown: str, expected) -> bool:
    """The data-value equals the library's value exactly (text, or the float it writes with repr)."""
    if isinstance(expected, str):
        return shown == expected
    if expected is None:
        return shown == ""
    expected = float(expected)
    if math.isnan(expected):
        return shown == "nan"
    return float(shown) == expected


@pytest.fixture(scope="module", params=[p.stem for p in SHIPPED] + list(EDGE))
def rendered(request):
    name = request.param
    scenario = (load_scenario(ROOT / "scenarios" / f"{name}.yaml") if name not in EDGE
                else Scenario.from_dict(yaml.safe_load(EDGE[name])))
    results = scenario.evaluate()
    return results, customer_report_html(results, date="2026-11-30")


def test_every_result_shown_is_the_library_value(rendered):
    results, document = rendered
    numbers = parse(document).values
    shown = {key.split(":", 1)[1]: value for key, value in numbers.items() if key.startswith("result:")}
    assert {"goodput_rps", "batch_max", "pool_bytes", "ceiling_rps", "decode_step_s"} <= set(shown)
    for key, value in shown.items():
        assert same(value, results[key]), (key, value, results[key])


def test_every_input_shown_is_the_scenario_value(rendered):
    results, document = rendered
    values, unset = flat_inputs(results.scenario), unset_inputs(results.scenario)
    shown = {k.split(":", 1)[1]: v for k, v in parse(document).values.items() if k.startswith("input:")}
    assert {"gpu_memory_bytes", "prompt_tokens", "output_tokens", "memory_utilization"} <= set(shown)
    for key, value in shown.items():
        assert same(value, None if key in unset else values[key]), key


def test_fleet_matches_a_sizing_by_hand(rendered):
    """replicas = ceil(λ / goodput) for the layout the answer chose (prefill and decode pools each so), GPUs =
    replicas x GPUs per replica, $/h = GPUs x price, $/month = x 730, $ per million output tokens = $/h / (λ A 3600)
    x 1e6: derived here from one replica's rates, not read from the answer's fleet."""
    results, document = rendered
    s, numbers = results.scenario, parse(document).values
    z = size(s, results)
    load = s.workload.arrival_rate
    if not load or z.replicas is None:
        assert "fleet:gpus" not in numbers
        return
    r = z.replica
    if z.mode == "disaggregated":
        replicas = (math.ceil(load / r["disagg_decode_rps"] - 1e-9) + math.ceil(load / r["disagg_prefill_rps"] - 1e-9))
    else:
        goodput = z.replica_goodput_rps if z.mode == "colocated" else r["chunked_goodput_rps"]
        replicas = math.ceil(load / goodput - 1e-9)
    gpus = replicas * z.gpus_per_replica
    assert int(numbers["fleet:replicas"]) == replicas
    assert int(numbers["fleet:gpus"]) == gpus
    assert float(numbers["fleet:load_rps"]) == load
    if s.gpu.price_per_hour is None:
        assert "fleet:cost_per_hour" not in numbers
        return
    per_hour = gpus * s.gpu.price_per_hour
    assert float(numbers["fleet:cost_per_hour"]) == pytest.approx(per_hour, rel=1e-12)
    assert float(numbers["fleet:cost_per_month"]) == pytest.approx(per_hour * 8760 / 12, rel=1e-12)
    per_million = per_hour / (load * s.workload.output_tokens * 3600) * 1e6
    assert float(numbers["fleet:cost_per_million_output_tokens"]) == pytest.approx(per_million, rel=1e-12)
    assert f"{gpus:,} x " in document  # the sentence names the fleet


def test_engine_flags_carry_the_sizing(rendered):
    """The flags are the answer's layout (``sizing.size``: its TP and batch, which may differ from the stated
    layout's), one set per pool where it chose separate prefill and decode pools. An MoE layout with attention
    data parallelism (the layout search tries it, issue 29) caps vLLM's and TensorRT-LLM's batch per rank."""
    from capacity.planning.sizing import size

    results, document = rendered
    s, numbers = results.scenario, parse(document).values
    z = size(s, results)
    pools = ["/prefill", "/decode"] if z.mode in ("disaggregated", "split") else [""]
    batch = max(int(z.replica["batch_max"]), 1)
    per_rank = max(batch // z.attention_data_parallel, 1)
    for pool in pools:
        assert int(numbers[f"flag:vllm{pool}:--tensor-parallel-size"]) == z.tensor_parallel
        assert float(numbers[f"flag:vllm{pool}:--gpu-memory-utilization"]) == pytest.approx(
            s.serving.memory_utilization, abs=1e-3)
        assert int(numbers[f"flag:vllm{pool}:--max-num-seqs"]) == per_rank
        assert int(numbers[f"flag:sglang{pool}:--max-running-requests"]) == batch
        assert int(numbers[f"flag:tensorrt-llm{pool}:--max_batch_size"]) == per_rank
        assert (f"flag:vllm{pool}:--enable-chunked-prefill" in numbers) == (z.mode == "chunked" or pool == "/prefill")


def test_self_contained_and_escaped(rendered):
    results, document = rendered
    parser = parse(document)
    assert parser.loads == []  # no CDN, no stylesheet, no image: the file works offline
    assert "Plotly.newPlot" in document and "plotly.js v" in document
    assert document.count('class="chart"') >= 2
    assert "How sure we are" in document and f"{FIDELITY['mape_percent']}%" in document
    assert results.scenario.name.replace("&", "&amp;").replace("<", "&lt;") in document


def test_hostile_names_are_escaped():
    data = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
    data["name"] = '<script>alert("x")</script>'
    data["gpu"]["name"] = "</script><img src=x onerror=alert(1)>"
    document = customer_report_html(Scenario.from_dict(data).evaluate())
    assert '<script>alert("x")' not in document and "<img src=x" not in document
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in document
    assert parse(document).loads == []


def test_answer_sentence_for_essay_001_at_100_requests_per_second():
    """Essay 001 (sale day): goodput 5.897 requests/s under TPOT <= 50 ms, so 100 requests/s need
    ceil(100 / 5.897) = 17 GPUs at $2/h: $34/h, $24,820 a month."""
    data = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
    data["fleet"] = {"modes": ["colocated"], "tensor_parallel": [1]}  # the essay's layout, stated
    results = Scenario.from_dict(data).evaluate()
    found = fleet_answer(results, 100.0)
    assert found.fleet.gpus == 17 and found.fleet.replicas == 17
    assert found.cost_per_hour == pytest.approx(34.0)
    assert found.cost_per_month == pytest.approx(24_820.0)
    assert "17 x custom GPU" in found.sentence and "$34.00/hour" in found.sentence
    assert "$24,820/month" in found.sentence and "TPOT promise" in found.sentence
    assert cost_per_month(2.0) == pytest.approx(1460.0)


def test_fidelity_figures_are_the_documented_ones():
    """The report cites the MAPE figures of docs/fidelity.md; if the document changes, this fails."""
    for doc in (ROOT / "docs" / "fidelity.md", ROOT / "README.md"):
        text = doc.read_text(encoding="utf-8")
        paragraph = text[text.index("**In one paragraph.**"):][:1500]
        assert f"**{FIDELITY['mape_percent']}%**" in paragraph, doc
        assert f"predicts {FIDELITY['points']} published timing points" in paragraph
        assert (f"latency {FIDELITY['latency_mape_percent']}%, single stream {FIDELITY['single_stream_mape_percent']}%"
                f", throughput {FIDELITY['throughput_mape_percent']}%") in paragraph
        assert f"median error is {FIDELITY['median_percent']}%" in paragraph
        assert f"{FIDELITY['within_20_percent']} of the {FIDELITY['points']} are within 20%" in paragraph
        assert f"**{FIDELITY['measurements']} published measurements**" in text
        assert f"{FIDELITY['engine_points']} of {FIDELITY['measurements']}" in text
        assert f"**{FIDELITY['engine_mape_percent']}%**" in text
        assert f"{FIDELITY['engine_loso_mape_percent']}% leave-one-source-out" in text
        assert f"{FIDELITY['no_engine_mape_percent']}%" in text
        assert f"first {FIDELITY['first_measurements']} points" in text


def test_inputs_in_human_units():
    assert human_input(80e9, "B", False) == "80 GB"
    assert human_input(80 * 2**30, "B", True) == "80 GiB"
    assert human_input(0.003, "s", False) == "3 ms"
    assert human_input(3.35e12 * 0.6, "B/s", False) == "2,010 GB/s"
    assert human_input(8030261248, "params", False) == "8,030,261,248 params"
    assert human_input(math.inf, "s", False) == "not set"


def test_cli_writes_the_report_and_flags(tmp_path, capsys):
    out = tmp_path / "sizing.html"
    assert main(["report", str(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml"), "-o", str(out),
                 "--arrival-rate", "40"]) == 0
    numbers = parse(out.read_text(encoding="utf-8")).values
    results = load_scenario(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").with_changes(
        workload={"arrival_rate": 40.0}).evaluate()
    assert int(numbers["fleet:replicas"]) == size(results.scenario).replicas
    assert main(["flags", str(ROOT / "scenarios" / "essay-001-sale-day.yaml"), "--engine", "all",
                 "--format", "json"]) == 0
    engines = json.loads(capsys.readouterr().out)
    assert [e["engine"] for e in engines] == ["vllm", "tensorrt-llm", "sglang"]
    assert re.search(r"--kv_cache_free_gpu_memory_fraction 0\.875\b", engines[1]["command"])
    assert main(["report", str(ROOT / "scenarios" / "essay-001-sale-day.yaml"), "--format", "pdf"]) == 2
    assert "give -o FILE.pdf" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused by the option's reader
        main(["report", str(ROOT / "scenarios" / "essay-001-sale-day.yaml"), "--arrival-rate", "-1"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("name", ["long-context-mixtral-h200", "chat-llama-3.1-8b-h100"])
def test_load_chart_curve_passes_through_the_library_point(name):
    """The latency chart's curve (``curves.load_curve``) at the scenario's arrival rate is the library's
    ``tpot_at_load_s`` and ``ttft_at_load_s``; for a mixture-of-experts model too, whose TPOT is a row-wise
    solve (a one-scenario model solved at many rates raised IndexError before)."""
    import numpy as np

    from capacity.model.curves import load_curve

    results = load_scenario(ROOT / "scenarios" / f"{name}.yaml").evaluate()
    rate = results.scenario.workload.arrival_rate
    curve = load_curve(results, np.array([0.5 * rate, rate, 1.5 * rate]))
    assert curve["tpot_s"].iloc[1] == pytest.approx(results["tpot_at_load_s"], rel=1e-9)
    assert curve["ttft_s"].iloc[1] == pytest.approx(results["ttft_at_load_s"], rel=1e-9)
    assert curve["tpot_s"].is_monotonic_increasing
