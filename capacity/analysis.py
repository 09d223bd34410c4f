"""The whole analytic model as one composition of the formula functions.

``analyse(inputs)`` takes a mapping of flat inputs in base units (scalars or numpy
arrays that broadcast together) and returns every result as an array. The scalar
path (one Scenario) and the sweep path (a DataFrame of scenarios) run this same
code. Input and result names are the contract of SPEC.md; their units live in
``INPUTS`` and ``RESULTS``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from . import memory, roofline, slo

#: Flat inputs: name -> (unit, meaning). ``inf`` means "not set" for the optional ones.
INPUTS: dict[str, tuple[str, str]] = {
    "layers": ("layers", "transformer layers holding a KV cache"),
    "kv_heads": ("heads", "key/value heads per layer"),
    "head_dim": ("values", "width of one head"),
    "kv_bytes_per_value": ("B", "bytes per cached key/value element (fp16 2, fp8 1, int4 0.5)"),
    "params": ("params", "parameters used per token (2 FLOPs each)"),
    "weight_bytes": ("B", "weight memory of the whole model"),
    "gpu_memory_bytes": ("B", "memory of one GPU"),
    "bandwidth": ("B/s", "effective memory bandwidth of one GPU"),
    "flops": ("FLOP/s", "effective FLOP/s of one GPU"),
    "gpu_count": ("GPUs", "tensor-parallel GPUs per replica"),
    "price_per_hour": ("$/h", "price of one GPU per hour (assumption)"),
    "memory_utilization": ("-", "share of GPU memory the engine may use"),
    "block_size": ("tokens", "tokens per KV block"),
    "max_model_len": ("tokens", "longest sequence the engine accepts (contiguous reservation)"),
    "step_overhead_s": ("s", "fixed time per forward pass"),
    "max_num_seqs": ("requests", "cap on the running batch (inf: none)"),
    "prompt_tokens": ("tokens", "prompt length"),
    "output_tokens": ("tokens", "answer length"),
    "shared_prefix_tokens": ("tokens", "prefix common to every request"),
    "arrival_rate": ("requests/s", "offered load (inf or 0: not set)"),
    "tpot_slo_s": ("s", "TPOT promise (inf: none)"),
    "ttft_slo_s": ("s", "TTFT promise (inf: none)"),
}

#: Results: name -> (unit, meaning). The first block is SPEC's contract.
RESULTS: dict[str, tuple[str, str]] = {
    "kv_bytes_per_token": ("B", "KV cache per token, whole model"),
    "pool_bytes": ("B", "KV pool per GPU: memory x utilisation - weights per GPU"),
    "pool_blocks": ("blocks", "KV blocks in the pool"),
    "blocks_per_request": ("blocks", "blocks one request holds (prompt + answer)"),
    "max_requests_contiguous": ("requests", "requests that fit reserving max_model_len each"),
    "max_requests_paged": ("requests", "requests that fit with paged blocks"),
    "max_requests_shared_prefix": ("requests", "requests that fit with the prefix stored once"),
    "decode_memory_s": ("s", "decode step at the largest batch: memory term"),
    "decode_compute_s": ("s", "decode step at the largest batch: compute term"),
    "decode_step_s": ("s", "decode step at the largest batch, with overhead"),
    "prefill_s": ("s", "prefill of the uncached prompt tokens"),
    "ceiling_rps": ("requests/s", "throughput ceiling at the largest batch"),
    "decode_share": ("-", "share of GPU time spent decoding at the ceiling"),
    "tpot_at_ceiling_s": ("s", "time per output token users see at the ceiling"),
    "goodput_rps": ("requests/s", "largest load that keeps every promise"),
    "goodput_in_flight": ("requests", "conversations decoding at once at the goodput"),
    "single_stream_tokens_per_s": ("tokens/s", "one stream's upper bound: bandwidth / weights"),
    "cost_per_million_tokens": ("$", "cost of a million output tokens at the goodput"),
    # Beyond the contract: what the app and reports explain with.
    "weight_bytes_per_gpu": ("B", "weights held by one GPU"),
    "kv_bytes_per_token_per_gpu": ("B", "KV cache per token held by one GPU"),
    "params_per_gpu": ("params", "parameters each GPU multiplies per token"),
    "batch_max": ("requests", "largest decode batch: what fits, capped by max_num_seqs"),
    "context_tokens": ("tokens", "average context of a decoding sequence: prompt + answer / 2"),
    "prefill_tokens": ("tokens", "prompt tokens prefilled (the cached prefix is skipped)"),
    "shared_blocks": ("blocks", "prefix blocks stored once"),
    "private_blocks": ("blocks", "blocks each request owns alone"),
    "critical_batch": ("tokens", "tokens per step where weight reads and arithmetic balance"),
    "gpu_time_per_request_s": ("s", "GPU time one request costs at the ceiling"),
    "output_tokens_per_s_at_ceiling": ("tokens/s", "output tokens per second at the ceiling"),
    "batching_gain": ("x", "output tokens/s at the ceiling over the single-stream bound"),
    "max_rate_for_tpot_rps": ("requests/s", "largest load meeting the TPOT promise alone"),
    "max_rate_for_ttft_rps": ("requests/s", "largest load meeting the TTFT promise alone"),
    "tpot_at_goodput_s": ("s", "TPOT at the goodput"),
    "ttft_at_goodput_s": ("s", "TTFT at the goodput"),
    "capacity_given_up": ("-", "share of the ceiling the promises give up"),
    "output_tokens_per_s_at_goodput": ("tokens/s", "output tokens per second at the goodput"),
    "tpot_at_load_s": ("s", "TPOT at the workload's arrival rate"),
    "ttft_at_load_s": ("s", "TTFT at the workload's arrival rate"),
    "load_fraction": ("-", "arrival rate over the ceiling"),
    "cost_per_million_tokens_at_ceiling": ("$", "cost of a million output tokens at the ceiling"),
    "decode_bound": ("", "which term sets the decode step at the largest batch: memory or compute"),
    "batch_limit": ("", "what caps the batch: kv_memory or max_num_seqs"),
    "goodput_limit": ("", "what sets the goodput: capacity, tpot, ttft or nothing_fits"),
}


def analyse(inputs: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """Evaluate the analytic model on flat inputs (see ``INPUTS``); returns every ``RESULTS`` key as an array."""
    x = {name: np.asarray(inputs[name], dtype=float) for name in INPUTS}
    tp = x["gpu_count"]
    bs = x["block_size"]
    a_tokens = x["output_tokens"]
    tokens = x["prompt_tokens"] + a_tokens

    kv = memory.kv_bytes_per_token(x["layers"], x["kv_heads"], x["head_dim"], x["kv_bytes_per_value"])
    # Tensor parallel splits KV heads over GPUs; with fewer heads than GPUs each GPU keeps a replica.
    kv_gpu = memory.kv_bytes_per_token(x["layers"], np.ceil(x["kv_heads"] / tp), x["head_dim"],
                                       x["kv_bytes_per_value"])
    w_gpu = x["weight_bytes"] / tp
    params_gpu = x["params"] / tp

    pool = memory.pool_bytes(x["gpu_memory_bytes"], x["memory_utilization"], w_gpu)
    blocks = memory.pool_blocks(pool, bs, kv_gpu)
    contiguous = memory.max_requests_contiguous(pool, x["max_model_len"], kv_gpu)
    paged = memory.max_requests_paged(blocks, tokens, bs)
    shared = memory.max_requests_shared_prefix(blocks, tokens, x["shared_prefix_tokens"], bs)
    batch = np.minimum(shared, x["max_num_seqs"])

    context = x["prompt_tokens"] + a_tokens / 2.0
    prefill_tokens = x["prompt_tokens"] - memory.shared_blocks(x["shared_prefix_tokens"], bs) * bs
    bw, fl, o = x["bandwidth"], x["flops"], x["step_overhead_s"]

    t_mem = roofline.decode_memory_s(w_gpu, batch, context, kv_gpu, bw)
    t_comp = roofline.decode_compute_s(batch, params_gpu, fl)
    t_step = np.maximum(t_mem, t_comp) + o
    t_prefill = roofline.prefill_s(w_gpu, prefill_tokens, params_gpu, bw, fl, o)
    ceiling = roofline.ceiling_rps(t_prefill, t_step, batch, a_tokens)
    share = roofline.decode_share(t_prefill, t_step, batch, a_tokens)
    single = roofline.single_stream_tokens_per_s(bw, w_gpu)

    pieces = slo.step_pieces(w_gpu, context, kv_gpu, bw, params_gpu, fl, o)
    rate_tpot = slo.max_rate_for_tpot_rps(x["tpot_slo_s"], t_prefill, a_tokens, pieces)
    rate_ttft = slo.max_rate_for_ttft_rps(x["ttft_slo_s"], t_prefill, ceiling)
    goodput = slo.goodput_rps(ceiling, rate_tpot, rate_ttft)
    tpot_goodput = slo.tpot_at_rate_s(goodput, t_prefill, a_tokens, pieces)
    # At the ceiling the fixed point is exactly B_max; guard the 0/0 of rounding there.
    at_ceiling = goodput >= ceiling * (1 - 1e-12)
    in_flight = np.where(at_ceiling, batch, slo.in_flight(goodput, a_tokens, tpot_goodput))
    tpot_goodput = np.where(at_ceiling & (goodput > 0), roofline.tpot_at_ceiling_s(t_step, share), tpot_goodput)

    rate = np.where(x["arrival_rate"] > 0, x["arrival_rate"], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        load_fraction = np.where(ceiling > 0, rate / ceiling, np.inf)
        tokens_ceiling = ceiling * a_tokens
        # Below the ceiling the goodput is the smaller promise bound, so that promise binds.
        goodput_limit = np.select([batch <= 0, at_ceiling, rate_tpot <= rate_ttft],
                                  ["nothing_fits", "capacity", "tpot"], "ttft")
        return {
            "kv_bytes_per_token": kv,
            "pool_bytes": pool,
            "pool_blocks": blocks,
            "blocks_per_request": memory.blocks_for(tokens, bs),
            "max_requests_contiguous": contiguous,
            "max_requests_paged": paged,
            "max_requests_shared_prefix": shared,
            "decode_memory_s": t_mem,
            "decode_compute_s": t_comp,
            "decode_step_s": t_step,
            "prefill_s": t_prefill,
            "ceiling_rps": ceiling,
            "decode_share": share,
            "tpot_at_ceiling_s": roofline.tpot_at_ceiling_s(t_step, share),
            "goodput_rps": goodput,
            "goodput_in_flight": in_flight,
            "single_stream_tokens_per_s": single,
            "cost_per_million_tokens": slo.cost_per_million_tokens(x["price_per_hour"], tp, goodput, a_tokens),
            "weight_bytes_per_gpu": w_gpu,
            "kv_bytes_per_token_per_gpu": kv_gpu,
            "params_per_gpu": params_gpu,
            "batch_max": batch,
            "context_tokens": context,
            "prefill_tokens": prefill_tokens,
            "shared_blocks": memory.shared_blocks(x["shared_prefix_tokens"], bs),
            "private_blocks": memory.private_blocks(tokens, x["shared_prefix_tokens"], bs),
            "critical_batch": roofline.critical_batch(w_gpu, params_gpu, bw, fl),
            "gpu_time_per_request_s": roofline.gpu_time_per_request_s(t_prefill, t_step, batch, a_tokens),
            "output_tokens_per_s_at_ceiling": tokens_ceiling,
            "batching_gain": tokens_ceiling / single,
            "max_rate_for_tpot_rps": rate_tpot,
            "max_rate_for_ttft_rps": rate_ttft,
            "tpot_at_goodput_s": tpot_goodput,
            "ttft_at_goodput_s": slo.ttft_at_rate_s(goodput, t_prefill, ceiling),
            "capacity_given_up": np.where(ceiling > 0, 1.0 - goodput / ceiling, 0.0),
            "output_tokens_per_s_at_goodput": goodput * a_tokens,
            "tpot_at_load_s": slo.tpot_at_rate_s(rate, t_prefill, a_tokens, pieces),
            "ttft_at_load_s": slo.ttft_at_rate_s(rate, t_prefill, ceiling),
            "load_fraction": load_fraction,
            "cost_per_million_tokens_at_ceiling": slo.cost_per_million_tokens(x["price_per_hour"], tp, ceiling,
                                                                             a_tokens),
            "decode_bound": np.where(t_comp > t_mem, "compute", "memory"),
            "batch_limit": np.where(x["max_num_seqs"] < shared, "max_num_seqs", "kv_memory"),
            "goodput_limit": goodput_limit,
        }
