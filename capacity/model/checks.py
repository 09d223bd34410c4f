"""Cross-field checks on flat inputs: what no engine would accept for this model, GPU and workload.

One validation for every path: ``Scenario.check`` (one scenario, ``capacity evaluate``), the sweep (a grid of
rows, ``capacity sweep``) and the app call ``input_problems`` on the same flat inputs (``analysis.INPUTS``,
base units; scalars or arrays that broadcast). The memory check is the KV pool itself
(``analysis.kv_pool_bytes``: memory x utilisation - weights per GPU - engine reserves, or TensorRT-LLM's
fraction of the memory the weights and reserves leave free), so a row is rejected exactly where the model would
have no pool.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from capacity.model.analysis import kv_pool_bytes, weights_per_gpu


def _n(value: float) -> str:
    """A count or quantity as written in a scenario file: 1200, not 1200.0."""
    return f"{int(value)}" if float(value).is_integer() and abs(value) < 2**53 else f"{value:g}"


def input_problems(inputs: Mapping[str, ArrayLike], attention_heads: int = 0) -> dict[int, list[str]]:
    """Row index (into the inputs broadcast together and flattened) -> every problem of that row, for the rows
    that have one; ``{}`` when all rows are valid. ``attention_heads`` (0: unknown) must be a multiple of the
    tensor-parallel GPUs. Each problem is one line naming the field, the value and what is allowed.
    """
    keys = ("shared_prefix_tokens", "prompt_tokens", "output_tokens", "max_model_len", "gpu_count",
            "pipeline_parallel", "weight_bytes", "gpu_memory_bytes", "memory_utilization", "reserved_bytes",
            "kv_free_fraction", "attention_data_parallel", "expert_parallel", "params", "active_params", "experts",
            "experts_per_token")
    defaults = {"pipeline_parallel": 1.0, "reserved_bytes": 0.0, "kv_free_fraction": 0.0,
                "attention_data_parallel": 1.0, "expert_parallel": 1.0, "params": 1.0, "active_params": np.nan,
                "experts": 0.0, "experts_per_token": 0.0}
    arrays = np.broadcast_arrays(*(np.asarray(inputs.get(k, defaults.get(k)), dtype=float) for k in keys))
    x = {k: a.reshape(-1) for k, a in zip(keys, arrays, strict=True)}
    tokens = x["prompt_tokens"] + x["output_tokens"]
    x["active_params"] = np.where(np.isnan(x["active_params"]), x["params"], x["active_params"])
    weights_gpu = weights_per_gpu(x)
    pool = kv_pool_bytes(x)  # the model's own pool rule, the engine's included
    tp = x["gpu_count"]
    ep, stage = x["expert_parallel"], x["gpu_count"] * x["attention_data_parallel"]
    moe = (x["experts"] > x["experts_per_token"]) & (x["experts_per_token"] > 0)
    checks = [
        ((ep > 1) & ~moe,
         lambda i: f"serving.expert_parallel ({_n(ep[i])}) needs a mixture-of-experts model (model.num_experts)"),
        ((ep > 1) & moe & ((np.mod(stage, ep) != 0) | (ep > x["experts"])),
         lambda i: f"serving.expert_parallel ({_n(ep[i])}) must divide the GPUs of a stage, gpu.count x "
                   f"serving.attention_data_parallel = {_n(stage[i])}, and not exceed the "
                   f"{_n(x['experts'][i])} experts"),
        (x["shared_prefix_tokens"] > x["prompt_tokens"],
         lambda i: f"workload.shared_prefix_tokens ({_n(x['shared_prefix_tokens'][i])}) must not exceed "
                   f"workload.prompt_tokens ({_n(x['prompt_tokens'][i])})"),
        (x["max_model_len"] < tokens,
         lambda i: f"serving.max_model_len ({_n(x['max_model_len'][i])}) is shorter than one request "
                   f"(prompt + output = {_n(tokens[i])} tokens)"),
        ((tp > 1) & (np.mod(attention_heads, tp) != 0) if attention_heads else np.zeros(tp.shape, dtype=bool),
         lambda i: f"gpu.count ({_n(tp[i])}) must divide the model's {attention_heads} attention heads "
                   f"for tensor parallelism"),
        (~(np.asarray(pool) > 0),
         lambda i: f"the weights ({weights_gpu[i] / 1e9:,.2f} GB per GPU) do not fit in the usable memory "
                   f"({(x['gpu_memory_bytes'][i] * x['memory_utilization'][i] - x['reserved_bytes'][i]) / 1e9:,.2f} GB"
                   f" = gpu.memory x serving.memory_utilization {x['memory_utilization'][i]:g}"
                   f"{' - reserves' if x['reserved_bytes'][i] else ''}): no room for a KV pool; use more GPUs "
                   f"(gpu.count), a smaller weight_dtype or a larger GPU"),
    ]
    out: dict[int, list[str]] = {}
    for mask, message in checks:
        for i in np.flatnonzero(mask):
            out.setdefault(int(i), []).append(message(i))
    return dict(sorted(out.items()))


def row_problems(inputs: Mapping[str, ArrayLike], attention_heads: int = 0) -> np.ndarray:
    """Per row, every problem joined with '; ' ('' for a valid row): ``input_problems`` as a column [text]."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in inputs.values()))
    out = np.full(int(np.prod(shape)) if shape else 1, "", dtype=object)
    for i, problems in input_problems(inputs, attention_heads).items():
        out[i] = "; ".join(problems)
    return out


__all__ = ["input_problems", "row_problems"]
