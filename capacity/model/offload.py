"""KV offload to CPU memory: what a second tier buys in conversations kept warm, and what it costs in TTFT.

Between turns of a conversation its KV cache is idle. An engine can keep it in GPU memory (it takes blocks a
running request could use), drop it (the next turn prefills the whole history again), or move it to CPU
memory and load it back over the host link when the next turn comes (vLLM's CPU offload, LMCache, Mooncake;
essay 001, "The KV cache is the real capacity limit"). Per GPU of a tensor-parallel replica:

    sessions kept   = floor(pool_bytes / (H kv)) on the GPU, + floor(cpu_bytes / (H kv)) with offload
    reload_s        = H kv / link_bandwidth        (the history's KV back over PCIe / NVLink-C2C)
    recompute_s     = prefill of H tokens          (``StepModel.prefill_s``, the model layer's prefill)

with H the history in tokens and kv the KV bytes per token one GPU holds. A turn's TTFT gains reload_s over a
cached history, and saves recompute_s - reload_s over a dropped one. Link bandwidths are the user's input
(PCIe 5.0 x16 moves about 63 GB/s each way by its 32 GT/s lane rate; achieved rates are lower).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas import memory
from capacity.model.analysis import complete_inputs, step_model


def reload_s(tokens: ArrayLike, kv_bytes_per_token: ArrayLike, link_bandwidth: ArrayLike) -> np.ndarray:
    """Time to load ``tokens`` of KV back to the GPU: ``tokens * kv_bytes_per_token / link_bandwidth`` [s].

    Essay 001's model (131,072 B per token) with a 2,000-token history over 50 GB/s: 5.2 ms.
    """
    return np.asarray(tokens, float) * np.asarray(kv_bytes_per_token, float) / np.asarray(link_bandwidth, float)


def sessions_held(memory_bytes: ArrayLike, tokens: ArrayLike, kv_bytes_per_token: ArrayLike) -> np.ndarray:
    """Conversation histories of ``tokens`` that ``memory_bytes`` holds: ``floor(bytes / (tokens kv))`` [sessions]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return memory.floor_count(np.asarray(memory_bytes, float) / (np.asarray(tokens, float)
                                                                     * np.asarray(kv_bytes_per_token, float)))


def offload(scenario: Any, cpu_memory_bytes: float, link_bandwidth: float, history_tokens: float) -> dict[str, float]:
    """What a CPU tier of ``cpu_memory_bytes`` per GPU [B] over ``link_bandwidth`` [B/s] does for histories of
    ``history_tokens``: ``sessions_on_gpu``, ``sessions_with_offload``, ``reload_s``, ``recompute_s``,
    ``ttft_saved_s`` (recompute - reload; > 0: loading back beats prefilling again)."""
    r = scenario.evaluate()
    kv = r["kv_bytes_per_token_per_gpu"]
    model = step_model(complete_inputs(scenario.inputs()), np.asarray(r["context_tokens"]))[0]
    on_gpu = float(sessions_held(r["pool_bytes"], history_tokens, kv))
    back = float(reload_s(history_tokens, kv, link_bandwidth))
    again = float(model.prefill_s(history_tokens))
    return {"history_tokens": float(history_tokens), "sessions_on_gpu": on_gpu,
            "sessions_with_offload": on_gpu + float(sessions_held(cpu_memory_bytes, history_tokens, kv)),
            "reload_s": back, "recompute_s": again, "ttft_saved_s": again - back}


__all__ = ["offload", "reload_s", "sessions_held"]
