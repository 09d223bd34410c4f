"""KV-cache memory: bytes per token, the block pool, and how many requests fit.

Every function takes scalars or numpy arrays (broadcast together) and returns the
same shape. Sources: essay 000 ("How an inference server shares one GPU"),
PagedAttention (Kwon et al., SOSP 2023).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: Bytes per stored value for each KV-cache / weight dtype.
BYTES_PER_VALUE = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

#: Relative slack when flooring a ratio of floats to a count: 0.9 * 80 GiB is
#: 72 GiB minus a few ulps in binary floating point, which must not lose a block.
_COUNT_SLACK = 1e-9


def floor_count(x: ArrayLike) -> np.ndarray:
    """floor(x) for a count computed from floats, tolerant of rounding error (relative 1e-9); never below 0."""
    x = np.asarray(x, dtype=float)
    return np.maximum(np.floor(x + _COUNT_SLACK * np.maximum(np.abs(x), 1.0)), 0.0)


def kv_bytes_per_token(layers: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike,
                       bytes_per_value: ArrayLike) -> np.ndarray:
    """KV-cache bytes one token holds: ``2 * layers * kv_heads * head_dim * bytes_per_value`` [B].

    The 2 is one key and one value vector per layer. Excel: ``=2*layers*kv_heads*head_dim*bytes_per_value``.
    llama-3-8b in fp16: 2 * 32 * 8 * 128 * 2 = 131,072 B (essay 000).
    """
    return 2.0 * np.asarray(layers, float) * np.asarray(kv_heads, float) * np.asarray(head_dim, float) * np.asarray(
        bytes_per_value, float)


def blocks_for(tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks a sequence of ``tokens`` occupies: ``ceil(tokens / block_size)`` [blocks].

    Excel: ``=CEILING(tokens/block_size,1)``. 1,800 tokens in blocks of 16 -> 113 (essay 000).
    """
    return -(-np.asarray(tokens, float) // np.asarray(block_size, float))


def pool_bytes(gpu_memory_bytes: ArrayLike, memory_utilization: ArrayLike, weight_bytes: ArrayLike) -> np.ndarray:
    """KV pool left on one GPU: ``gpu_memory * memory_utilization - weight_bytes`` [B] (may be <= 0).

    Excel: ``=gpu_memory_bytes*memory_utilization-weight_bytes``. 80 GiB * 0.90 - 16 GiB = 56 GiB (essay 000).
    """
    return np.asarray(gpu_memory_bytes, float) * np.asarray(memory_utilization, float) - np.asarray(weight_bytes, float)


def pool_blocks(pool_bytes: ArrayLike, block_size: ArrayLike, kv_bytes_per_token: ArrayLike) -> np.ndarray:
    """Blocks the pool holds: ``floor(pool_bytes / (block_size * kv_bytes_per_token))`` [blocks].

    Excel: ``=MAX(0,FLOOR(pool_bytes/(block_size*kv_bytes_per_token),1))``. 56 GiB / 2 MiB = 28,672 (essay 000).
    """
    return floor_count(np.asarray(pool_bytes, float) / (np.asarray(block_size, float) * np.asarray(
        kv_bytes_per_token, float)))


def max_requests_contiguous(pool_bytes: ArrayLike, max_model_len: ArrayLike,
                            kv_bytes_per_token: ArrayLike) -> np.ndarray:
    """Requests that fit when each reserves ``max_model_len`` tokens up front [requests].

    ``floor(pool_bytes / (max_model_len * kv_bytes_per_token))``. 56 GiB / 4 GiB = 14 (essay 000).
    """
    return floor_count(np.asarray(pool_bytes, float) / (np.asarray(max_model_len, float) * np.asarray(
        kv_bytes_per_token, float)))


def max_requests_paged(pool_blocks: ArrayLike, tokens_per_request: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Requests that fit when blocks are allocated on demand: ``floor(pool_blocks / blocks_for(tokens, bs))``.

    Excel: ``=FLOOR(pool_blocks/CEILING(tokens/block_size,1),1)``. 28,672 / 113 = 253 (essay 000).
    """
    return floor_count(np.asarray(pool_blocks, float) / blocks_for(tokens_per_request, block_size))


def shared_blocks(prefix_tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks of a shared prefix that are stored once: ``floor(prefix_tokens / block_size)``.

    Only full blocks are shareable; a partly filled last prefix block stays private.
    """
    return np.floor(np.asarray(prefix_tokens, float) / np.asarray(block_size, float))


def private_blocks(tokens_per_request: ArrayLike, prefix_tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks each request owns alone: ``blocks_for(tokens - shared_blocks * bs, bs)``.

    1,800 tokens with a 1,200-token prefix in blocks of 16: ceil(600 / 16) = 38 (essay 000).
    """
    bs = np.asarray(block_size, float)
    return blocks_for(np.asarray(tokens_per_request, float) - shared_blocks(prefix_tokens, bs) * bs, bs)


def max_requests_shared_prefix(pool_blocks: ArrayLike, tokens_per_request: ArrayLike, prefix_tokens: ArrayLike,
                               block_size: ArrayLike) -> np.ndarray:
    """Requests that fit when a common prefix is stored once [requests].

    ``floor((pool_blocks - shared_blocks) / private_blocks)``. (28,672 - 75) / 38 = 752 (essay 000).
    Excel: ``=FLOOR((pool_blocks-FLOOR(prefix/bs,1))/CEILING((tokens-FLOOR(prefix/bs,1)*bs)/bs,1),1)``.
    """
    shared = shared_blocks(prefix_tokens, block_size)
    private = private_blocks(tokens_per_request, prefix_tokens, block_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = floor_count((np.asarray(pool_blocks, float) - shared) / private)
    return np.where(np.asarray(pool_blocks, float) >= shared, fit, 0.0)


def weight_bytes(params: ArrayLike, bytes_per_weight: ArrayLike) -> np.ndarray:
    """Weight memory: ``params * bytes_per_weight`` [B]. 8e9 params in fp16 = 16 GB (essay 001)."""
    return np.asarray(params, float) * np.asarray(bytes_per_weight, float)
