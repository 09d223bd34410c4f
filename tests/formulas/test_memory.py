"""The KV-memory formulas (``capacity/formulas/memory.py``), one function at a time, against hand derivations.

Every expected value is worked out in the comment beside it from the essays' numbers or a model's config.json;
each function is also checked on a numpy array, where it must give the scalar answers element by element.
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity.formulas.memory import (
    blocks_for,
    kv_bytes_per_token,
    max_requests_contiguous,
    max_requests_paged,
    max_requests_shared_prefix,
    mla_kv_bytes_per_token,
    pool_blocks,
    pool_bytes,
    private_blocks,
    shared_blocks,
    weight_bytes,
)

GiB = 2**30


@pytest.mark.parametrize(("layers", "kv_heads", "head_dim", "bytes_per_value", "expected"), [
    (32, 8, 128, 2, 131_072),   # llama-3-8b fp16 (essay 000): 2 x 32 x 8 x 128 x 2
    (80, 8, 128, 2, 327_680),   # llama-3-70b fp16 (config.json: 80 layers, 8 KV heads, head_dim 8192/64 = 128)
    (80, 8, 128, 1, 163_840),   # the same in fp8: half
    (32, 32, 128, 2, 524_288),  # llama-2-7b (no GQA: 32 KV heads): 4x llama-3-8b
])
def test_kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value, expected):
    assert kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value) == expected


def test_mla_kv_bytes_per_token():
    # DeepSeek-V3 (config.json: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values per layer), bf16:
    # 61 x 576 x 2 = 70,272 B, one latent per layer instead of a key and a value per head
    assert mla_kv_bytes_per_token(61, 576, 2) == 70_272


@pytest.mark.parametrize(("tokens", "block_size", "expected"), [
    (1_800, 16, 113),  # essay 000: 1,500 + 300 tokens, ceil(112.5)
    (16, 16, 1), (17, 16, 2), (0, 16, 0), (1, 1, 1), (1_300, 1, 1_300),
])
def test_blocks_for(tokens, block_size, expected):
    assert blocks_for(tokens, block_size) == expected


def test_pool_bytes_and_blocks():
    # essay 000: 80 GiB x 0.90 - 16 GiB = 56 GiB; blocks of 16 tokens x 131,072 B = 2 MiB -> 56 GiB / 2 MiB = 28,672
    pool = pool_bytes(80 * GiB, 0.90, 16 * GiB)
    assert pool == pytest.approx(56 * GiB, rel=1e-15)
    assert pool_blocks(pool, 16, 131_072) == 28_672
    assert pool_bytes(16 * GiB, 0.90, 16 * GiB) < 0  # weights larger than the usable memory: no pool


def test_max_requests_contiguous():
    # essay 000: each request reserves 32,768 tokens x 131,072 B = 4 GiB -> 56 GiB / 4 GiB = 14
    assert max_requests_contiguous(56 * GiB, 32_768, 131_072) == 14


def test_max_requests_paged():
    # essay 000: 28,672 blocks / 113 blocks per request = 253.7 -> 253
    assert max_requests_paged(28_672, 1_800, 16) == 253
    # essay 001 (block size 1): 80 GB x 0.90 - 16 GB = 56e9 B = 427,246 blocks of one token; / 1,300 = 328.7 -> 328
    assert max_requests_paged(pool_blocks(0.9 * 80e9 - 16e9, 1, 131_072), 1_300, 1) == 328


def test_shared_prefix():
    # essay 000: a 1,200-token prefix = 75 full blocks stored once; each request owns ceil(600 / 16) = 38 blocks
    assert shared_blocks(1_200, 16) == 75
    assert private_blocks(1_800, 1_200, 16) == 38
    # (28,672 - 75) / 38 = 752.5 -> 752
    assert max_requests_shared_prefix(28_672, 1_800, 1_200, 16) == 752
    # a prefix that ends mid-block: only its 62 full blocks are shared (1,000 // 16), the rest is private
    assert shared_blocks(1_000, 16) == 62
    assert private_blocks(1_800, 1_000, 16) == blocks_for(1_800 - 62 * 16, 16) == 51


def test_sharing_never_fits_fewer_than_paging():
    # a prefix of 15 tokens in blocks of 16 shares nothing, so the count is the paged one
    assert max_requests_shared_prefix(28_672, 1_800, 15, 16) == max_requests_paged(28_672, 1_800, 16)


def test_weight_bytes():
    # 8e9 parameters in 2-byte weights = 16 GB (essay 001); in fp8, 8 GB
    assert weight_bytes(8e9, 2) == 16e9
    assert weight_bytes(8e9, 1) == 8e9


def test_arrays_give_the_scalar_answers_elementwise():
    tokens = np.array([1_800, 16, 17, 0])
    assert blocks_for(tokens, 16).tolist() == [blocks_for(t, 16) for t in tokens.tolist()]
    layers = np.array([32, 80])
    assert kv_bytes_per_token(layers, 8, 128, 2).tolist() == [131_072, 327_680]
