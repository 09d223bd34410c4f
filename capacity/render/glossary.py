"""One glossary of the words a person reads for the names in the code (issue 30: "kv_memory", "tpot",
"max_num_seqs" in customer text).

``WORDS`` maps each code name that reaches a description, a binding resource or a reason to its words;
``in_words(text)`` replaces every such name in a sentence (whole names only, longest first). Engine flags keep
their own names where they are shown as flags (a command line must be typed as is).
"""

from __future__ import annotations

import re

#: Code name -> what a person reads.
WORDS: dict[str, str] = {
    # binding resources and limits (analysis.RESULTS goodput_limit, batch_limit, decode_bound; sizing's binding)
    "kv_memory": "KV memory", "max_num_seqs": "the running-sequence cap", "nothing_fits": "nothing fits",
    "tpot": "the TPOT promise", "ttft": "the TTFT promise", "capacity": "capacity",
    "memory": "memory bandwidth", "compute": "compute",
    # serving settings named in descriptions
    "max_model_len": "the context limit", "max_batched_tokens": "the tokens per pass",
    "memory_utilization": "memory utilisation", "block_size": "the block size", "step_overhead": "the step overhead",
    "shared_prefix_tokens": "the shared prefix", "prompt_tokens": "the prompt", "output_tokens": "the answer",
    "arrival_rate": "the arrival rate", "weight_dtype": "the weight dtype", "kv_dtype": "the KV dtype",
    "tpot_slo": "the TPOT promise", "ttft_slo": "the TTFT promise", "gpu_count": "the GPUs per replica",
    "kv_heads": "KV heads", "head_dim": "head dimension",
}
#: Values of the binding-resource results, as a person reads them on their own (a table cell, not a sentence).
VALUES: dict[str, str] = {"kv_memory": "KV memory", "max_num_seqs": "running-sequence cap", "tpot": "TPOT promise",
                          "ttft": "TTFT promise", "capacity": "capacity", "nothing_fits": "nothing fits",
                          "memory": "memory bandwidth", "compute": "compute"}

_NAMES = re.compile(r"(?<![\w.\-/])(" + "|".join(sorted((re.escape(k) for k in WORDS if "_" in k), key=len,
                                                         reverse=True)) + r")(?![\w\-/])")


#: A scenario section as a word, for paths the glossary does not name ("gpu.price_per_hour" -> "GPU price per hour").
SECTIONS = {"serving": "serving", "model": "model", "gpu": "GPU", "workload": "workload", "slo": "promise",
            "fleet": "fleet"}
#: Scenario paths whose words are not their last name's.
PATHS = {"gpu.count": "the GPUs per replica", "gpu.memory": "GPU memory", "gpu.bandwidth": "GPU bandwidth",
         "gpu.flops": "GPU FLOP/s", "model.params": "the parameters", "model.weights": "the weights",
         "slo.tpot": "the TPOT promise", "slo.ttft": "the TTFT promise"}
_PATHS = re.compile(r"(?<![\w/])(serving|model|gpu|workload|slo|fleet)\.([a-z][a-z0-9_]*)(?![\w/])")


def _path(match: re.Match) -> str:
    section, name = match.group(1), match.group(2)
    return PATHS.get(f"{section}.{name}") or WORDS.get(name) or f"{SECTIONS[section]} {name.replace('_', ' ')}"
_LOWER = re.compile(r"(?<![\w.\-/])(tpot|ttft)(?![\w\-/])")


def in_words(text: str) -> str:
    """``text`` with every code name of ``WORDS`` written in words ("capped by max_num_seqs" -> "capped by the
    running-sequence cap"), scenario paths too ("serving.memory_utilization" -> "memory utilisation"), and the
    lower-case metric names in capitals ("tpot" -> "TPOT"). Plain English words ("memory") are left as they are."""
    text = _PATHS.sub(_path, text)
    text = _NAMES.sub(lambda m: WORDS[m.group(1)], text)
    return _LOWER.sub(lambda m: m.group(1).upper(), text)


def value_in_words(value: object) -> object:
    """A binding-resource value as a person reads it ("kv_memory" -> "KV memory"); anything else unchanged."""
    return VALUES.get(value, value) if isinstance(value, str) else value


__all__ = ["PATHS", "SECTIONS", "VALUES", "WORDS", "in_words", "value_in_words"]
