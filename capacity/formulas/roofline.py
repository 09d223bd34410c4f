"""Roofline step times: a decode step or a prefill lasts as long as the slower of
moving bytes and doing arithmetic, plus a fixed per-step overhead.

Symbols (all per GPU of a tensor-parallel replica): W weight bytes [B], N params
[-] (2N FLOPs per token), BW memory bandwidth [B/s], F FLOP/s, o overhead [s],
B sequences in the decode batch, c average context per sequence [tokens].
Source: essay 001 ("Serving many users at once", "The math").
Every function takes scalars or numpy arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import scalar_out, select


@scalar_out
def decode_memory_s(weight_bytes: ArrayLike, batch: ArrayLike, context_tokens: ArrayLike,
                    kv_bytes_per_token: ArrayLike, bandwidth: ArrayLike) -> np.ndarray:
    """Memory term of a decode step: ``(W + B * c * kv_bytes_per_token) / BW`` [s].

    Excel: ``=(weight_bytes+batch*context_tokens*kv_bytes_per_token)/bandwidth``.
    Essay 001: (16 GB + 328 * 1,150 * 131,072 B) / 2 TB/s = 32.7 ms.
    """
    return (_f(weight_bytes) + _f(batch) * _f(context_tokens) * _f(kv_bytes_per_token)) / _f(bandwidth)


@scalar_out
def decode_compute_s(batch: ArrayLike, params: ArrayLike, flops: ArrayLike) -> np.ndarray:
    """Compute term of a decode step: ``B * 2N / F`` [s]. Essay 001: 328 * 16 GFLOP / 150 TFLOP/s = 35.0 ms.

    Excel: ``=batch*2*params/flops``.
    """
    return _f(batch) * 2.0 * _f(params) / _f(flops)


def curve_amount(amount: ArrayLike, half_amount: ArrayLike) -> np.ndarray:
    """What a pass moving ``amount`` costs, in units moved at the plateau efficiency: ``x + x_half`` [bytes or tokens].

    The efficiency curve of one pass is ``e(x) = e_max x / (x + x_half)`` (``efficiency_at``): a kernel has a
    fixed cost worth ``x_half`` units at full speed, so a pass moving ``x`` takes ``(x + x_half) / (e_max peak)``.
    x = bytes per step per GPU for bandwidth (x_half = layers x bytes per layer), tokens per pass for FLOP/s.
    ``x_half = 0`` is the constant efficiency of the essays (``e = e_max``), and returns ``x`` unchanged.
    Fitted on our H200 (docs/gpu-measurements.md): bf16 matmuls ``0.69 T / (T + 90)``; see capacity.inputs.engines.
    """
    return _f(amount) + _f(half_amount)


def efficiency_at(amount: ArrayLike, plateau: ArrayLike, half_amount: ArrayLike) -> np.ndarray:
    """Efficiency of a pass moving ``amount`` (bytes or tokens): ``e(x) = e_max x / (x + x_half)`` [-].

    The share of the datasheet peak the roofline uses for that pass (``curve_amount`` is its time form).
    H200 bf16 matmuls, e_max 0.69, T_half 90 tokens: 0.69 x 512 / 602 = 0.59 at 512 tokens per pass.
    """
    x = _f(amount)
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(x > 0, _f(plateau) * x / curve_amount(x, half_amount), select(_f(half_amount) > 0, 0.0,
                                                                                         _f(plateau)))


@scalar_out
def decode_step_s(weight_bytes: ArrayLike, batch: ArrayLike, context_tokens: ArrayLike,
                  kv_bytes_per_token: ArrayLike, bandwidth: ArrayLike, params: ArrayLike, flops: ArrayLike,
                  step_overhead_s: ArrayLike) -> np.ndarray:
    """One decode iteration: ``max(t_mem, t_compute) + o`` [s]. Essay 001: max(32.7, 35.0) + 3 = 38.0 ms.

    Excel: ``=MAX((weight_bytes+batch*context_tokens*kv_bytes_per_token)/bandwidth,batch*2*params/flops)
    +step_overhead_s``.
    """
    return pass_s(decode_memory_s(weight_bytes, batch, context_tokens, kv_bytes_per_token, bandwidth),
                  decode_compute_s(batch, params, flops), 0.0, _f(step_overhead_s))


def pass_s(memory_s: ArrayLike, compute_s: ArrayLike, allreduce_s: ArrayLike, overhead_s: ArrayLike) -> np.ndarray:
    """One forward pass: ``max(t_mem, t_compute) + all-reduce + o`` [s] (the roofline plus the fixed costs).

    Essay 001 (one GPU, no all-reduce): max(32.7, 35.0) + 0 + 3 = 38.0 ms. Python floats stay floats (the
    simulator calls this once per engine iteration); arrays broadcast.
    """
    if type(memory_s) is float and type(compute_s) is float:
        return (memory_s if memory_s > compute_s else compute_s) + allreduce_s + overhead_s  # type: ignore[return-value]
    return np.maximum(memory_s, compute_s) + allreduce_s + overhead_s


def ring_factor(tensor_parallel: ArrayLike, hidden_size: ArrayLike) -> np.ndarray:
    """Traffic factor of a ring all-reduce over tp GPUs: ``2 (tp - 1) / tp`` [-]; 0 where nothing is counted
    (one GPU, or no hidden size given). Each GPU sends and receives (tp - 1)/tp of the data twice (reduce-scatter,
    all-gather); Patarasuk and Yuan, J. Parallel Distrib. Comput. 69 (2009). tp = 4: 1.5."""
    tp = _f(tensor_parallel)
    return select((tp > 1) & (_f(hidden_size) > 0), 2.0 * (tp - 1) / tp, 0.0)


def allreduces_per_pass(layers: ArrayLike) -> np.ndarray:
    """Tensor-parallel all-reduces in one forward pass: 2 per layer (after attention and after the MLP) [-];
    Megatron-LM (Shoeybi et al. 2019, section 3)."""
    return 2.0 * _f(layers)


def allreduce_fixed_s(layers: ArrayLike, ring: ArrayLike, latency_s: ArrayLike) -> np.ndarray:
    """All-reduce latency of one pass: ``2 layers x latency`` where a ring is counted, else 0 [s]."""
    return select(_f(ring) > 0, allreduces_per_pass(layers) * _f(latency_s), 0.0)


def allreduce_s_per_token(layers: ArrayLike, ring: ArrayLike, hidden_size: ArrayLike, activation_bytes: ArrayLike,
                          link_bandwidth: ArrayLike) -> np.ndarray:
    """All-reduce transfer time per token in a pass: ``2 layers x ring x hidden x bytes / BW_link`` [s].

    llama-3.1-70b on 4 GPUs (bf16 activations, 450 GB/s one way): 160 x 1.5 x 8,192 x 2 B / 450 GB/s = 8.7 us.
    """
    ring = _f(ring)
    with np.errstate(invalid="ignore"):
        return select(ring > 0, allreduces_per_pass(layers) * ring * _f(hidden_size) * _f(activation_bytes)
                        / _f(link_bandwidth), 0.0)


def alltoall_s_per_token(moe_layers: ArrayLike, experts_per_token: ArrayLike, hidden_size: ArrayLike,
                         activation_bytes: ArrayLike, expert_parallel: ArrayLike, gpus: ArrayLike,
                         link_bandwidth: ArrayLike) -> np.ndarray:
    """Expert-parallel all-to-all time per token of a pass, on one GPU: ``2 L_moe k H a (ep - 1) / (ep g BW)`` [s].

    Each MoE layer dispatches every token's hidden vector (H values of a bytes) to the ranks of its k experts and
    combines the k results back (2 transfers); (ep - 1)/ep of them leave the GPU, and the g GPUs of a stage send
    their share of the batch's tokens at once over their own links (one way, ``BW``). 0 without expert
    parallelism (ep <= 1) or without a hidden size. DeepEP's normal/low-latency kernels (DeepSeek-V3 report, section
    3.2: dispatch then combine per MoE layer). DeepSeek-V3 on ep 8, 8 GPUs, bf16, 450 GB/s one way: 58 x 2 x 8 x
    7168 x 2 x 7/8 / (8 x 450e9) = 3.2 us per token. Each token's load on the busiest GPU: ``expert_load_imbalance``
    (``StepModel``), not this transfer.
    """
    ep = _f(expert_parallel)
    with np.errstate(invalid="ignore", divide="ignore"):
        per = (2.0 * _f(moe_layers) * _f(experts_per_token) * _f(hidden_size) * _f(activation_bytes)
               * (ep - 1.0) / ep / (_f(gpus) * _f(link_bandwidth)))
    return select((ep > 1) & (_f(hidden_size) > 0), per, 0.0)


def alltoall_fixed_s(moe_layers: ArrayLike, expert_parallel: ArrayLike, latency_s: ArrayLike) -> np.ndarray:
    """All-to-all latency of one pass: ``2 L_moe x latency`` (dispatch and combine per MoE layer) where ep > 1 [s]."""
    return select(_f(expert_parallel) > 1, 2.0 * _f(moe_layers) * _f(latency_s), 0.0)


def expert_link_bandwidth(gpus: ArrayLike, nvlink_domain: ArrayLike, interconnect_bandwidth: ArrayLike,
                          network_bandwidth: ArrayLike) -> np.ndarray:
    """The link an expert-parallel group's all-to-all runs on, one way per GPU [B/s]: the NVLink interconnect where
    the group's ``gpus`` fit in one NVLink domain (8 on HGX, 72 on NVL72), else the scale-out network where it is
    known (GB300: ConnectX-8, 100 GB/s), else the interconnect (an optimistic bound, stated on the answer)."""
    crosses = (_f(gpus) > _f(nvlink_domain)) & np.isfinite(_f(network_bandwidth))
    return select(crosses, network_bandwidth, interconnect_bandwidth)


def allreduce_s(fixed_s: ArrayLike, per_token_s: ArrayLike, tokens: ArrayLike) -> np.ndarray:
    """All-reduce time of a pass over ``tokens`` tokens: ``latency + tokens x time per token`` [s]."""
    return _f(fixed_s) + _f(tokens) * _f(per_token_s)


@scalar_out
def prefill_s(weight_bytes: ArrayLike, prompt_tokens: ArrayLike, params: ArrayLike, bandwidth: ArrayLike,
              flops: ArrayLike, step_overhead_s: ArrayLike, attention_s: ArrayLike = 0.0) -> np.ndarray:
    """Prefill of P uncached prompt tokens, run alone: ``max(W / BW, P * 2N / F + t_attn) + o`` [s].

    ``attention_s``: attention's arithmetic (``attention_s``; 0 under the essays' convention).
    Excel: ``=MAX(weight_bytes/bandwidth,prompt_tokens*2*params/flops+attention_s)+step_overhead_s``.
    Essay 001: max(8 ms, 1,000 * 16 GFLOP / 150 TFLOP/s) + 3 ms = 109.7 ms.
    """
    return np.maximum(_f(weight_bytes) / _f(bandwidth),
                      _f(prompt_tokens) * 2.0 * _f(params) / _f(flops) + _f(attention_s)) + _f(step_overhead_s)


def attention_s_per_pair(attention_dim: ArrayLike, layers: ArrayLike, gpus: ArrayLike,
                         attention_flops: ArrayLike) -> np.ndarray:
    """Time of attention's arithmetic per query token and context token on one GPU: ``2 D L / (g F_attn)`` [s].

    One query token over c context tokens multiplies QK^T (``heads x d_qk`` values per context token, 2 FLOPs each)
    and PV (``heads x d_v``) in every KV layer: ``2 D c`` FLOPs a layer with ``D = heads x (d_qk + d_v)``; the g
    GPUs of a stage split the heads. A causal prompt of P tokens (mean context P / 2) then does ``D L P^2`` FLOPs,
    FlashAttention's count (``4 P^2 heads d / 2`` a layer; Dao, FlashAttention-2, 2023, sec. 4.1). Llama-3.1-8B
    (D = 32 heads x 2 x 128, 32 layers), 8,192 tokens: 8,192 x 32 x 8,192^2 = 17.6 TFLOP beside the weights'
    2 x 8.03e9 x 8,192 = 131.6 TFLOP (+13%); DeepSeek-R1 (MLA, D = 128 x (192 + 128), 61 layers): 168 TFLOP beside
    2 x 37e9 x 8,192 = 606 TFLOP, and at the 16-bit peak, not the fp8 one.
    Excel: ``=2*attention_dim*layers/(gpus*attention_flops)``.
    """
    return 2.0 * _f(attention_dim) * _f(layers) / (_f(gpus) * _f(attention_flops))


def attention_s(query_tokens: ArrayLike, context_tokens: ArrayLike, per_pair_s: ArrayLike) -> np.ndarray:
    """Attention's arithmetic of ``query_tokens`` tokens over a mean ``context_tokens`` each: ``T c a`` [s], with
    ``a = attention_s_per_pair``. Excel: ``=query_tokens*context_tokens*per_pair_s``."""
    return _f(query_tokens) * _f(context_tokens) * _f(per_pair_s)


@scalar_out
def gpu_time_per_request_s(prefill_s: ArrayLike, decode_step_s: ArrayLike, batch: ArrayLike,
                           output_tokens: ArrayLike) -> np.ndarray:
    """GPU time one request costs at batch B: ``t_prefill + A * t_step(B) / B`` [s]. Essay 001: 144.4 ms.

    Excel: ``=prefill_s+output_tokens*decode_step_s/batch``.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f(prefill_s) + _f(output_tokens) * _f(decode_step_s) / _f(batch)


@scalar_out
def ceiling_rps(prefill_s: ArrayLike, decode_step_s: ArrayLike, batch: ArrayLike,
                output_tokens: ArrayLike) -> np.ndarray:
    """Throughput ceiling: ``1 / (t_prefill + A * t_step(B_max) / B_max)`` [requests/s]; 0 when nothing fits.

    Excel: ``=IF(batch>0,1/(prefill_s+output_tokens*decode_step_s/batch),0)``. Essay 001: 6.9 requests/s.
    """
    per_request = gpu_time_per_request_s(prefill_s, decode_step_s, batch, output_tokens)
    with np.errstate(divide="ignore"):
        return select(_f(batch) > 0, 1.0 / per_request, 0.0)


@scalar_out
def decode_share(prefill_s: ArrayLike, decode_step_s: ArrayLike, batch: ArrayLike,
                 output_tokens: ArrayLike) -> np.ndarray:
    """Share of GPU time spent decoding at the ceiling: ``(A t_step / B) / per_request`` [-]. Essay 001: 0.24.

    Excel: ``=IF(batch>0,(output_tokens*decode_step_s/batch)/(prefill_s+output_tokens*decode_step_s/batch),0)``.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        decode = _f(output_tokens) * _f(decode_step_s) / _f(batch)
        share = decode / (_f(prefill_s) + decode)
    return select(_f(batch) > 0, share, 0.0)


@scalar_out
def tpot_at_ceiling_s(decode_step_s: ArrayLike, decode_share: ArrayLike) -> np.ndarray:
    """Time per output token users see at the ceiling: ``t_step(B_max) / decode_share`` [s].

    Essay 001: 38.0 ms / 0.24 = 158 ms. Infinite when nothing fits (decode_share 0).
    Excel (#N/A for infinite): ``=IF(decode_share>0,decode_step_s/decode_share,NA())``.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(_f(decode_share) > 0, _f(decode_step_s) / _f(decode_share), np.inf)


@scalar_out
def single_stream_tokens_per_s(bandwidth: ArrayLike, weight_bytes: ArrayLike) -> np.ndarray:
    """Upper bound for one stream: ``BW / W`` [tokens/s]. Essay 001: 2 TB/s / 16 GB = 125 tokens/s.

    Excel: ``=bandwidth/weight_bytes``.
    """
    return _f(bandwidth) / _f(weight_bytes)


@scalar_out
def critical_batch(weight_bytes: ArrayLike, params: ArrayLike, bandwidth: ArrayLike, flops: ArrayLike) -> np.ndarray:
    """Tokens per step where reading the weights and the arithmetic take equal time: ``W F / (2 N BW)`` [tokens].

    For 2-byte weights this is F / BW: 150 TFLOP/s / 2 TB/s = 75 tokens (essay 001). KV reads are ignored.
    Excel: ``=weight_bytes*flops/(2*params*bandwidth)``.
    """
    return _f(weight_bytes) * _f(flops) / (2.0 * _f(params) * _f(bandwidth))
