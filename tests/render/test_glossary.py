"""One glossary for the words a person reads (issue 30): no code name in the customer report's prose."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from capacity.model.scenario import load_scenario
from capacity.render.glossary import WORDS, in_words, value_in_words

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "words"), [
    ("largest decode batch: what fits, capped by max_num_seqs",
     "largest decode batch: what fits, capped by the running-sequence cap"),
    ("what caps the batch: kv_memory or max_num_seqs", "what caps the batch: KV memory or the running-sequence cap"),
    ("what sets the goodput: capacity, tpot, ttft or nothing_fits",
     "what sets the goodput: capacity, TPOT, TTFT or nothing fits"),
    ("serving.memory_utilization default 0.9", "memory utilisation default 0.9"),
    ("gpu.count and gpu.price_per_hour", "the GPUs per replica and GPU price per hour"),
    ("see https://docs.vllm.ai/en/latest/models/engine_args.html", "see https://docs.vllm.ai/en/latest/models/"
                                                                   "engine_args.html"),  # a link stays a link
])
def test_code_names_become_words(text, words):
    assert in_words(text) == words


def test_binding_values_read_as_words():
    assert value_in_words("kv_memory") == "KV memory" and value_in_words("tpot") == "TPOT promise"
    assert value_in_words(3.5) == 3.5


def _prose(document: str) -> str:
    """The report's visible prose: scripts, styles, code, commands and links left out."""
    for tag in ("script", "style", "pre", "code", "a"):
        document = re.sub(rf"<{tag}\b.*?</{tag}>", " ", document, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", document))


@pytest.mark.parametrize("name", ["rag-llama-3.1-70b-4xh100.yaml", "chat-llama-3.1-8b-h100.yaml",
                                  "mix-chat-rag-h100.yaml"])
def test_the_customer_report_prose_has_no_code_names_or_base_unit_exponents(name):
    from capacity.render.customer_report import customer_report_html

    prose = _prose(customer_report_html(load_scenario(ROOT / "scenarios" / name).evaluate()))
    leaked = {w for w in WORDS if "_" in w and re.search(rf"(?<![\w.\-/]){re.escape(w)}(?![\w\-/])", prose)}
    assert not leaked, leaked
    assert not re.search(r"\d\.?\d*e[+-]\d+ B", prose)  # "4.5e+11 B/s" is "450 GB/s"
    assert not re.search(r"\b(GPU|replica|stage)\(s\)", prose)
