"""KV-cache memory: bytes per token, the block pool, and how many requests fit.

Every function takes scalars or numpy arrays (broadcast together) and returns the
same shape. Sources: essay 000 ("How an inference server shares one GPU"),
PagedAttention (Kwon et al., SOSP 2023).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import scalar_out, select

#: Bytes per stored value for each KV-cache / weight dtype.
BYTES_PER_VALUE = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

#: Relative slack when flooring a ratio of floats to a count: 0.9 * 80 GiB is
#: 72 GiB minus a few ulps in binary floating point, which must not lose a block.
_COUNT_SLACK = 1e-9


@scalar_out
def floor_count(x: ArrayLike) -> np.ndarray:
    """floor(x) for a count computed from floats, tolerant of rounding error (relative 1e-9); never below 0.

    Excel: ``=MAX(0,INT(x+1E-9*MAX(ABS(x),1)))``.
    """
    x = np.asarray(x, dtype=float)
    return np.maximum(np.floor(x + _COUNT_SLACK * np.maximum(np.abs(x), 1.0)), 0.0)


@scalar_out
def kv_bytes_per_token(layers: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike,
                       bytes_per_value: ArrayLike) -> np.ndarray:
    """KV-cache bytes one token holds: ``2 * layers * kv_heads * head_dim * bytes_per_value`` [B].

    The 2 is one key and one value vector per layer. Excel: ``=2*layers*kv_heads*head_dim*bytes_per_value``.
    llama-3-8b in fp16: 2 * 32 * 8 * 128 * 2 = 131,072 B (essay 000).
    """
    return 2.0 * np.asarray(layers, float) * np.asarray(kv_heads, float) * np.asarray(head_dim, float) * np.asarray(
        bytes_per_value, float)


@scalar_out
def blocks_for(tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks a sequence of ``tokens`` occupies: ``ceil(tokens / block_size)`` [blocks].

    Excel: ``=CEILING(tokens/block_size,1)``. 1,800 tokens in blocks of 16 -> 113 (essay 000).
    """
    t, b = np.asarray(tokens, float), np.asarray(block_size, float)
    # Whole numbers below 2^52 over a whole block size: their quotient never rounds across a whole number, so
    # ceil(t / b) is exactly the floor division's answer, some 20x faster; other values take the floor division.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        whole = (np.abs(t) < _WHOLE) & (np.floor(t) == t) & (b >= 1.0) & (b < _WHOLE) & (np.floor(b) == b)
        if whole.all():
            return np.ceil(t / b)
        if not whole.any():
            return -(-t // b)
        return select(whole, np.ceil(t / b), -(-t // select(whole, 1.0, b)))


#: Whole numbers below this divide exactly enough for ``blocks_for``'s ceiling (2^52).
_WHOLE = 2.0**52


@scalar_out
def pool_bytes(gpu_memory_bytes: ArrayLike, memory_utilization: ArrayLike, weight_bytes: ArrayLike) -> np.ndarray:
    """KV pool left on one GPU: ``gpu_memory * memory_utilization - weight_bytes`` [B] (may be <= 0).

    Excel: ``=gpu_memory_bytes*memory_utilization-weight_bytes``. 80 GiB * 0.90 - 16 GiB = 56 GiB (essay 000).
    """
    return np.asarray(gpu_memory_bytes, float) * np.asarray(memory_utilization, float) - np.asarray(weight_bytes, float)


@scalar_out
def pool_blocks(pool_bytes: ArrayLike, block_size: ArrayLike, kv_bytes_per_token: ArrayLike) -> np.ndarray:
    """Blocks the pool holds: ``floor(pool_bytes / (block_size * kv_bytes_per_token))`` [blocks].

    56 GiB / 2 MiB = 28,672 (essay 000). The floor is ``floor_count``'s (tolerant of rounding error):
    Excel: ``=MAX(0,INT(pool_bytes/(block_size*kv_bytes_per_token)
    +1E-9*MAX(ABS(pool_bytes/(block_size*kv_bytes_per_token)),1)))``.
    """
    return floor_count(np.asarray(pool_bytes, float) / (np.asarray(block_size, float) * np.asarray(
        kv_bytes_per_token, float)))


@scalar_out
def max_requests_contiguous(pool_bytes: ArrayLike, max_model_len: ArrayLike,
                            kv_bytes_per_token: ArrayLike) -> np.ndarray:
    """Requests that fit when each reserves ``max_model_len`` tokens up front [requests].

    ``floor(pool_bytes / (max_model_len * kv_bytes_per_token))``. 56 GiB / 4 GiB = 14 (essay 000).
    Excel: ``=MAX(0,INT(pool_bytes/(max_model_len*kv_bytes_per_token)
    +1E-9*MAX(ABS(pool_bytes/(max_model_len*kv_bytes_per_token)),1)))``.
    """
    return floor_count(np.asarray(pool_bytes, float) / (np.asarray(max_model_len, float) * np.asarray(
        kv_bytes_per_token, float)))


@scalar_out
def max_requests_paged(pool_blocks: ArrayLike, tokens_per_request: ArrayLike, block_size: ArrayLike,
                       sliding_window: ArrayLike = np.inf, local_fraction: ArrayLike = 0.0,
                       blocks_per_request: ArrayLike | None = None) -> np.ndarray:
    """Requests that fit when blocks are allocated on demand: ``floor(pool_blocks / blocks_for(tokens, bs))``.

    With sliding-window layers the blocks per request are ``windowed_blocks``.
    28,672 / 113 = 253 (essay 000). Blocks are whole numbers, so a plain floor is exact.
    Excel (no sliding window): ``=INT(pool_blocks/CEILING(tokens_per_request/block_size,1))``.
    ``blocks_per_request``: ``request_blocks`` of these requests where the caller has it (the same numbers).
    """
    if blocks_per_request is None:
        blocks_per_request = request_blocks(tokens_per_request, block_size, sliding_window, local_fraction)
    return floor_count(np.asarray(pool_blocks, float) / blocks_per_request)


def request_blocks(tokens: ArrayLike, block_size: ArrayLike, sliding_window: ArrayLike = np.inf,
                   local_fraction: ArrayLike = 0.0) -> np.ndarray:
    """``windowed_blocks`` where any layer is local, else plain ``blocks_for`` (the cheaper common case)."""
    if np.any(np.asarray(local_fraction) > 0):
        return windowed_blocks(tokens, block_size, sliding_window, local_fraction)
    return blocks_for(tokens, block_size)


@scalar_out
def shared_blocks(prefix_tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks of a shared prefix that are stored once: ``floor(prefix_tokens / block_size)``.

    Only full blocks are shareable; a partly filled last prefix block stays private.
    Excel: ``=INT(prefix_tokens/block_size)``.
    """
    return np.floor(np.asarray(prefix_tokens, float) / np.asarray(block_size, float))


@scalar_out
def shared_blocks_held(prefix_tokens: ArrayLike, block_size: ArrayLike, sliding_window: ArrayLike = np.inf,
                       local_fraction: ArrayLike = 0.0) -> np.ndarray:
    """Prefix blocks held once, all layers averaged: ``(1 - f) h + f min(h, ceil(window / bs))`` [blocks] with
    ``h = shared_blocks``: local (sliding-window) layers keep at most the window of the prefix."""
    bs, f = np.asarray(block_size, float), np.asarray(local_fraction, float)
    shared = shared_blocks(prefix_tokens, bs)
    window_blocks = blocks_for(np.minimum(sliding_window, 1e18), bs)  # a finite stand-in for "no window"
    return (1.0 - f) * shared + f * np.minimum(shared, window_blocks)


@scalar_out
def private_blocks(tokens_per_request: ArrayLike, prefix_tokens: ArrayLike, block_size: ArrayLike) -> np.ndarray:
    """Blocks each request owns alone: ``blocks_for(tokens - shared_blocks * bs, bs)``.

    1,800 tokens with a 1,200-token prefix in blocks of 16: ceil(600 / 16) = 38 (essay 000).
    Excel: ``=CEILING((tokens_per_request-INT(prefix_tokens/block_size)*block_size)/block_size,1)``.
    """
    bs = np.asarray(block_size, float)
    return blocks_for(np.asarray(tokens_per_request, float) - shared_blocks(prefix_tokens, bs) * bs, bs)


@scalar_out
def max_requests_shared_prefix(pool_blocks: ArrayLike, tokens_per_request: ArrayLike, prefix_tokens: ArrayLike,
                               block_size: ArrayLike, sliding_window: ArrayLike = np.inf,
                               local_fraction: ArrayLike = 0.0, private_blocks: ArrayLike | None = None,
                               paged: ArrayLike | None = None) -> np.ndarray:
    """Requests that fit when a common prefix is stored once [requests].

    ``floor((pool_blocks - shared_blocks) / private_blocks)``. (28,672 - 75) / 38 = 752 (essay 000).
    Excel (no sliding window; never fewer than paged): ``=MAX(IF(pool_blocks>=INT(prefix_tokens/block_size),
    INT((pool_blocks-INT(prefix_tokens/block_size))/CEILING((tokens_per_request-INT(prefix_tokens/block_size)
    *block_size)/block_size,1)),0),INT(pool_blocks/CEILING(tokens_per_request/block_size,1)))``.
    Local (sliding-window) layers hold at most the window of the prefix and of each request's private
    tokens. Keeping the prefix is optional (an engine evicts unreferenced cached blocks): once local layers
    have slid past it, holding it would cost blocks and save none, so sharing never fits fewer than paging.
    ``private_blocks`` (``request_blocks`` of ``tokens - shared_blocks * bs``) and ``paged`` (``max_requests_paged``
    of these requests): where the caller has them (the same numbers), so they are not computed again.
    """
    pool = np.asarray(pool_blocks, float)
    bs = np.asarray(block_size, float)
    shared = shared_blocks(prefix_tokens, bs)
    private_tokens = np.asarray(tokens_per_request, float) - shared * bs
    local = np.asarray(local_fraction, float)
    if np.any(local > 0):
        shared = shared_blocks_held(prefix_tokens, bs, sliding_window, local)
    private = request_blocks(private_tokens, bs, sliding_window, local) if private_blocks is None else private_blocks
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = select(pool >= shared, floor_count((pool - shared) / private), 0.0)
    if paged is None:
        paged = max_requests_paged(pool, tokens_per_request, bs, sliding_window, local)
    return np.maximum(fit, paged)


@scalar_out
def weight_bytes(params: ArrayLike, bytes_per_weight: ArrayLike) -> np.ndarray:
    """Weight memory: ``params * bytes_per_weight`` [B]. 8e9 params in fp16 = 16 GB (essay 001).

    Excel: ``=params*bytes_per_weight``.
    """
    return np.asarray(params, float) * np.asarray(bytes_per_weight, float)


@scalar_out
def mla_kv_bytes_per_token(layers: ArrayLike, latent_dim: ArrayLike, bytes_per_value: ArrayLike) -> np.ndarray:
    """KV bytes per token with multi-head latent attention: ``layers * latent_dim * bytes_per_value`` [B].

    MLA (DeepSeek-V2/V3) caches one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values
    per layer, no separate K and V, so no factor 2. DeepSeek-V3: 61 x (512 + 64) x 2 B = 70,272 B in bf16.
    """
    return np.asarray(layers, float) * np.asarray(latent_dim, float) * np.asarray(bytes_per_value, float)


@scalar_out
def cached_kv_bytes_per_token(layers: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike,
                              bytes_per_value: ArrayLike, kv_latent_dim: ArrayLike = 0.0) -> np.ndarray:
    """KV bytes per token of the attention the model has [B]: the MLA latent where ``kv_latent_dim > 0``
    (``mla_kv_bytes_per_token``), else a key and a value per KV head (``kv_bytes_per_token``, MHA/GQA/MQA).

    The one place the GQA/MLA choice is made; llama-3-8b fp16: 131,072 B; DeepSeek-V3 bf16: 70,272 B.
    """
    return select(np.asarray(kv_latent_dim, float) > 0,
                    mla_kv_bytes_per_token(layers, kv_latent_dim, bytes_per_value),
                    kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value))


def stage_layers(layers: ArrayLike, pipeline_parallel: ArrayLike) -> np.ndarray:
    """Layers one pipeline stage holds (the largest stage): ``ceil(layers / pp)`` [layers]."""
    return np.ceil(np.asarray(layers, float) / np.asarray(pipeline_parallel, float))


def kv_heads_per_gpu(kv_heads: ArrayLike, tensor_parallel: ArrayLike) -> np.ndarray:
    """KV heads one tensor-parallel GPU holds: ``ceil(kv_heads / tp)`` [heads] (a head is replicated when
    there are fewer heads than GPUs)."""
    return np.ceil(np.asarray(kv_heads, float) / np.asarray(tensor_parallel, float))


@scalar_out
def kv_bytes_per_token_per_gpu(layers: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike,
                               bytes_per_value: ArrayLike, kv_latent_dim: ArrayLike, tensor_parallel: ArrayLike,
                               pipeline_parallel: ArrayLike) -> np.ndarray:
    """KV bytes per token one GPU of a replica holds [B]: ``cached_kv_bytes_per_token`` over its stage's
    ``ceil(layers / pp)`` layers and its ``ceil(kv_heads / tp)`` heads; an MLA latent is not split by tensor
    parallelism (every GPU holds it). llama-3.1-70b fp16 on 4 GPUs: 2 x 80 x 2 x 128 x 2 = 81,920 B.
    """
    return cached_kv_bytes_per_token(stage_layers(layers, pipeline_parallel),
                                     kv_heads_per_gpu(kv_heads, tensor_parallel), head_dim, bytes_per_value,
                                     kv_latent_dim)


@scalar_out
def windowed_tokens(tokens: ArrayLike, sliding_window: ArrayLike, local_fraction: ArrayLike) -> np.ndarray:
    """Tokens cached per layer on average when a share of the layers keeps only a sliding window [tokens].

    ``tokens * (1 - f) + min(tokens, window) * f`` with f the share of KV layers that are local
    (gemma-2: every other layer, f = 0.5, window 4,096; mistral-7b v0.1: all layers, f = 1).
    """
    t, f = np.asarray(tokens, float), np.asarray(local_fraction, float)
    return t * (1.0 - f) + np.minimum(t, np.asarray(sliding_window, float)) * f


@scalar_out
def windowed_blocks(tokens: ArrayLike, block_size: ArrayLike, sliding_window: ArrayLike,
                    local_fraction: ArrayLike) -> np.ndarray:
    """Blocks of ``block_size`` tokens (all layers) a request holds when local layers keep only the window.

    ``(1 - f) * blocks_for(tokens) + f * blocks_for(min(tokens, window))``; equals ``blocks_for`` without windows.
    """
    f = np.asarray(local_fraction, float)
    capped = np.minimum(np.asarray(tokens, float), np.asarray(sliding_window, float))
    return (1.0 - f) * blocks_for(tokens, block_size) + f * blocks_for(capped, block_size)


@scalar_out
def expected_distinct_experts(tokens: ArrayLike, experts: ArrayLike, experts_per_token: ArrayLike,
                              missed_share: ArrayLike | None = None) -> np.ndarray:
    """Experts a batch of ``tokens`` touches per MoE layer, routing uniform: ``E (1 - (1 - k/E)^tokens)``.

    One token touches k experts; a large batch touches all E. 0 experts means a dense model (returns 0).
    ``missed_share``: ``1 - k/E`` of these rows (``moe_read_terms``), where a caller evaluates many token counts.
    """
    e, k, b = np.asarray(experts, float), np.asarray(experts_per_token, float), np.asarray(tokens, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        missed = 1.0 - k / e if missed_share is None else missed_share
        touched = e * (1.0 - np.power(missed, np.maximum(b, 0.0)))
    moe = e > 0
    return touched if np.all(moe) else select(moe, touched, 0.0)  # no pass where every row has experts


@scalar_out
def weight_bytes_read(weight_bytes: ArrayLike, params: ArrayLike, active_params: ArrayLike, experts: ArrayLike,
                      experts_per_token: ArrayLike, tokens: ArrayLike, terms: tuple | None = None) -> np.ndarray:
    """Weight bytes one forward pass over ``tokens`` tokens reads [B].

    Dense models read all of W. For MoE with E experts, top-k routing, N total and N_a active params:
    expert params per expert p_e = (N - N_a) / (E - k), shared params N - E p_e, and a pass reads
    ``W * (N - E p_e + p_e * distinct(tokens)) / N`` where distinct is ``expected_distinct_experts``.
    ``terms``: ``moe_read_terms`` of these rows, where a caller reads them at many token counts.
    """
    w, n = np.asarray(weight_bytes, float), np.asarray(params, float)
    e, k = np.asarray(experts, float), np.asarray(experts_per_token, float)
    moe, per_expert, always, missed = moe_read_terms(n, active_params, e, k) if terms is None else terms
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (always + per_expert * expected_distinct_experts(tokens, e, k, missed)) / n
    return w * share if np.all(moe) else select(moe, w * share, w)  # no pass where every row is MoE


def moe_read_terms(params: ArrayLike, active_params: ArrayLike, experts: ArrayLike,
                   experts_per_token: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``weight_bytes_read`` needs of a model whatever the tokens: (``is_moe``, ``expert_params`` p_e [params],
    the params every pass reads ``N - E p_e`` [params], the share of experts one token misses ``1 - k/E``)."""
    n, e, k = np.asarray(params, float), np.asarray(experts, float), np.asarray(experts_per_token, float)
    per_expert = expert_params(n, active_params, e, experts_per_token)
    with np.errstate(divide="ignore", invalid="ignore"):
        missed = 1.0 - k / e
    return is_moe(e, experts_per_token), per_expert, n - e * per_expert, missed


def is_moe(experts: ArrayLike, experts_per_token: ArrayLike) -> np.ndarray:
    """Whether a model routes tokens to a subset of its experts: ``E > 0 and E > k`` (bool)."""
    e, k = np.asarray(experts, float), np.asarray(experts_per_token, float)
    return (e > 0) & (e > k)


@scalar_out
def expert_params(params: ArrayLike, active_params: ArrayLike, experts: ArrayLike,
                  experts_per_token: ArrayLike) -> np.ndarray:
    """Parameters of one routed expert: ``p_e = (N - N_a) / (E - k)`` [params]; 0 for a dense model.

    N - N_a are the routed experts a token skips, E - k of them. mixtral-8x7b: (46.7e9 - 12.9e9) / 6 = 5.6e9.
    """
    n, na = np.asarray(params, float), np.asarray(active_params, float)
    e, k = np.asarray(experts, float), np.asarray(experts_per_token, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(is_moe(e, k), (n - na) / (e - k), 0.0)


def routed_expert_params(params: ArrayLike, active_params: ArrayLike, experts: ArrayLike,
                         experts_per_token: ArrayLike) -> np.ndarray:
    """Parameters of all routed experts: ``E p_e`` with ``p_e = (N - N_a) / (E - k)`` (``expert_params``); 0 for a
    dense model [params]. DeepSeek-V3: 256 x (671.0e9 - 37.6e9) / 248 = 654e9 (58 layers x 256 x 3 x 7168 x 2048)."""
    e = np.asarray(experts, float)
    return np.where(is_moe(e, experts_per_token), e * expert_params(params, active_params, experts,
                                                                    experts_per_token), 0.0)


def dense_weight_bytes(weight_bytes: ArrayLike, params: ArrayLike, active_params: ArrayLike, experts: ArrayLike,
                       experts_per_token: ArrayLike) -> np.ndarray:
    """Weight bytes outside the routed experts (attention, dense and shared MLPs, embeddings):
    ``W_d = W (1 - E p_e / N)`` [B], the weights split in proportion to parameters (as ``weight_bytes_read``);
    ``W`` for a dense model. What attention data parallelism replicates on every rank."""
    n = np.asarray(params, float)
    return np.asarray(weight_bytes, float) * (1.0 - routed_expert_params(n, active_params, experts,
                                                                           experts_per_token) / n)


def weight_bytes_per_gpu(weight_bytes: ArrayLike, dense_bytes: ArrayLike, tensor_parallel: ArrayLike,
                         attention_data_parallel: ArrayLike, pipeline_parallel: ArrayLike) -> np.ndarray:
    """Weights one GPU holds: ``(W + (dp - 1) W_d) / (tp dp pp)`` [B].

    A stage's ``tp x dp`` GPUs split the routed experts (expert and MoE tensor parallelism: ``moe_tp x ep =
    tp x dp``) and each of the ``dp`` attention data-parallel ranks holds the rest ``W_d`` split over its ``tp``
    GPUs: ``W_d / tp + (W - W_d) / (tp dp)``. Without attention data parallelism (dp = 1) it is ``W / (tp pp)``
    (essay 000: 16 GiB on one GPU). DeepSeek-R1 at 1 B per weight (W = 671.0e9 B, W_d = 17.1e9 B outside its
    653.9e9 routed-expert weights) on tp 1 x dp 8: (671.0e9 + 7 x 17.1e9) / 8 = 98.8e9 B, where tp 8 holds
    83.9e9 B (tests/model/test_moe_parallel.py)."""
    dp = np.asarray(attention_data_parallel, float)
    gpus = np.asarray(tensor_parallel, float) * dp * np.asarray(pipeline_parallel, float)
    return (np.asarray(weight_bytes, float) + (dp - 1.0) * np.asarray(dense_bytes, float)) / gpus


def max_requests_mix(pool_blocks: float, residence: ArrayLike, tokens_per_request: ArrayLike,
                     prefix_tokens: ArrayLike, prefix_group: ArrayLike, block_size: float,
                     sliding_window: float = np.inf, local_fraction: float = 0.0) -> float:
    """Requests of a mix of shapes that fit at once, each shape holding the pool in proportion to its residence.

    ``floor((pool_blocks - Σ_g shared_g) / Σ_k r_k private_k)`` [requests], never fewer than without sharing,
    ``floor(pool_blocks / Σ_k r_k request_blocks_k)``. ``r_k`` is shape k's share of the sequences resident in
    the batch (Little's law: arrivals x time held; with a common TPOT, ``w_k A_k / Σ w A``), ``private_k`` its
    blocks outside the shared prefix (``request_blocks`` of ``tokens - shared_blocks * bs``), and each prefix
    group g (shapes with ``prefix_group >= 0``: one cached prompt prefix, a class's) stores its longest prefix's
    ``shared_blocks_held`` once. One shape: ``max_requests_shared_prefix`` exactly.
    Essay 001's GPU (427,246 blocks of 1 token) with 70% 1,000/300 and 30% 8,000/200: r = (0.778, 0.222),
    floor(427,246 / (0.778 x 1,300 + 0.222 x 8,200)) = 150.
    """
    r = np.asarray(residence, float)
    r = r / r.sum()
    tokens, prefix = np.asarray(tokens_per_request, float), np.asarray(prefix_tokens, float)
    group = np.asarray(prefix_group)
    bs, local = float(block_size), float(local_fraction)
    shared = select(group >= 0, shared_blocks(prefix, bs), 0.0)
    held = shared_blocks_held(select(group >= 0, prefix, 0.0), bs, sliding_window, local) if local > 0 else shared
    stored = sum(float(held[group == g].max()) for g in np.unique(group[group >= 0]))
    private = float(np.dot(r, request_blocks(tokens - shared * bs, bs, sliding_window, local)))
    whole = float(np.dot(r, request_blocks(tokens, bs, sliding_window, local)))
    fit = float(floor_count((pool_blocks - stored) / private)) if pool_blocks >= stored and private > 0 else 0.0
    return max(fit, float(floor_count(pool_blocks / whole)) if whole > 0 else 0.0)
