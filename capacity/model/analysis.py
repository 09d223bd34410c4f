"""The whole analytic model as one composition of the formula functions.

``analyse(inputs)`` takes a mapping of flat inputs in base units (scalars or numpy
arrays that broadcast together) and returns every result as an array. The scalar
path (one Scenario) and the sweep path (a DataFrame of scenarios) run this same
code. Input and result names are a contract (docs/model.md, the formula reference); their units live in
``INPUTS`` and ``RESULTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas import memory, power, roofline, slo
from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import one_value_or, select
from capacity.formulas.solve import SolveTrace, largest_rate_meeting
from capacity.formulas.speculative import iteration_terms
from capacity.inputs import engines
from capacity.inputs.specs import DEFAULT_MAX_BATCHED_TOKENS
from capacity.model import serving_modes as options

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
    # Architecture and layout beyond a dense GQA model on one tensor-parallel group (defaults: no effect).
    "kv_latent_dim": ("values", "MLA latent cached per layer, kv_lora_rank + qk_rope_head_dim (0: not MLA)"),
    "sliding_window": ("tokens", "window of the local attention layers (inf: none)"),
    "local_layer_fraction": ("-", "share of KV layers that keep only the sliding window"),
    "active_params": ("params", "parameters active per token (MoE); nan: all params"),
    "experts": ("experts", "routed experts per MoE layer (0: dense)"),
    "experts_per_token": ("experts", "routed experts each token uses (top-k)"),
    "pipeline_parallel": ("stages", "pipeline stages per replica"),
    "hidden_size": ("values", "model width, for the tensor-parallel all-reduce (0: not counted)"),
    "interconnect_bandwidth": ("B/s", "GPU-to-GPU bandwidth one way, for the all-reduce"),
    "allreduce_latency_s": ("s", "fixed time of one all-reduce"),
    "reserved_bytes": ("B", "memory per GPU the engine holds outside the KV pool (activations, CUDA graphs)"),
    "replicas": ("replicas", "data-parallel replicas"),
    # MoE parallelism (issue 29): attention data parallelism and expert parallelism inside one replica.
    "attention_data_parallel": ("ranks", "attention data-parallel ranks per replica (each tp GPUs; KV split by "
                                         "request); GPUs per replica = tp x ranks x pp"),
    "expert_parallel": ("GPUs", "expert-parallel GPUs the routed experts are spread over (1: none)"),
    "expert_load_imbalance": ("-", "busiest expert-parallel GPU's routed tokens over the mean (1: balanced)"),
    "moe_layers": ("layers", "MoE layers, for the expert all-to-all (nan: layers)"),
    "transformer_layers": ("layers", "every layer of the model (a hybrid's linear-attention/SSM layers too), for the "
                                     "fixed costs per layer: kernel floors and all-reduces (nan: layers)"),
    "nvlink_domain": ("GPUs", "GPUs one NVLink domain joins (inf: unknown, all on NVLink)"),
    "network_bandwidth": ("B/s", "per-GPU link one way beyond the NVLink domain (inf: unknown)"),
    # Serving options the analytic model compares (chunked prefill, prefill/decode pools).
    "max_batched_tokens": ("tokens", "token budget of one chunked-prefill iteration (decodes + prompt chunks)"),
    "kv_transfer_bandwidth": ("B/s", "link from a prefill to a decode replica for the KV cache (inf: free)"),
    # Engine profiles (capacity.inputs.engines): TensorRT-LLM sizes its pool from the memory free after the weights.
    "kv_free_fraction": ("-", "KV pool = fraction x (memory - weights - reserves) (TensorRT-LLM); 0: memory x "
                              "utilisation - weights - reserves"),
    "batched_prefill": ("-", "1: prompts share prefill passes of max_batched_tokens tokens (engine profiles); 0: one "
                             "pass per prompt"),
    "kv_on_demand": ("-", "1: KV blocks allocated as tokens arrive, so a closed loop's running batch is the pool at "
                          "the mean context (engine profiles); 0: each request's whole context (the essays)"),
    # Efficiency curves (engine profiles, capacity.inputs.engines.EFFICIENCY_CURVES): e(x) = e_max x / (x + x_half).
    "bandwidth_half_bytes": ("B", "bytes per layer at which a pass reaches half its plateau bandwidth (0: constant)"),
    "flops_half_tokens": ("tokens", "tokens per pass at which matmuls reach half their plateau FLOP/s (0: constant)"),
    # Attention's arithmetic in prefill (engine profiles): a causal prompt of P tokens does D x P^2 FLOPs per KV layer.
    "attention_dim": ("values", "query heads x (q.k + v head dims): attention FLOPs per query token per context "
                                "token and KV layer, over 2 (0: not counted, the essays)"),
    "attention_flops": ("FLOP/s", "FLOP/s of attention's arithmetic per GPU: the 16-bit peak x efficiency "
                                  "(nan: flops)"),
    # Closed loop (workload.concurrency): the load as users in flight instead of an arrival rate.
    "concurrency": ("users", "closed loop: users in flight per replica, each waiting for its answer (0: not set)"),
    "think_time_s": ("s", "closed loop: a user's pause between an answer and the next request"),
    "clustering": ("-", "closed loop without think time: share of the other users whose requests reach the engine in "
                        "the same step as a user's (fixed-length clients fall into step; 0: phases spread)"),
    # A request's time outside the engine's passes: HTTP front end, tokenisation, hand-off to the scheduler,
    # detokenisation and streaming of the first token; a pure delay on every TTFT (engine profiles).
    "request_latency_s": ("s", "a request's time outside the engine's passes, added to every TTFT"),
    # Speculative decoding (serving.speculative, issue 29; defaults: none). Every step below is then per accepted
    # token: one iteration (a verification pass and gamma drafter passes) over the tokens it yields, E.
    "spec_draft_tokens": ("tokens", "speculative decoding: tokens drafted per iteration, gamma (0: none)"),
    "spec_tokens_per_step": ("tokens", "speculative decoding: tokens one iteration yields per sequence, E"),
    "spec_verify_tokens": ("tokens", "speculative decoding: tokens per sequence the verification pass computes"),
    "spec_draft_fraction": ("-", "speculative decoding: an eagle/mtp drafter pass as a share of the target's pass"),
    "spec_draft_weight_bytes": ("B", "speculative decoding: a draft model's weights (held and read per pass)"),
    "spec_draft_params": ("params", "speculative decoding: a draft model's parameters (2 FLOPs per token each)"),
    "spec_draft_overhead_s": ("s", "speculative decoding: fixed time per drafter pass"),
    # Power (issue 29): board power at full load, an upper bound unless a measured draw is given.
    "board_power_watts": ("W", "board power of one GPU at full load (nan: unknown)"),
    "energy_price_per_kwh": ("$/kWh", "price of electricity (nan: not set)"),
    "pue": ("-", "power usage effectiveness: facility power over IT power (1: the boards alone)"),
}

#: Values of the optional inputs when a caller leaves them out.
INPUT_DEFAULTS: dict[str, float] = {
    "kv_latent_dim": 0.0, "sliding_window": np.inf, "local_layer_fraction": 0.0, "active_params": np.nan,
    "experts": 0.0, "experts_per_token": 0.0, "pipeline_parallel": 1.0, "hidden_size": 0.0,
    "interconnect_bandwidth": np.inf, "allreduce_latency_s": 0.0, "reserved_bytes": 0.0, "replicas": 1.0,
    "attention_data_parallel": 1.0, "expert_parallel": 1.0, "expert_load_imbalance": 1.0, "moe_layers": np.nan,
    "transformer_layers": np.nan,
    "nvlink_domain": np.inf, "network_bandwidth": np.inf,
    "max_batched_tokens": float(DEFAULT_MAX_BATCHED_TOKENS), "kv_transfer_bandwidth": np.inf,
    "kv_free_fraction": 0.0, "batched_prefill": 0.0, "kv_on_demand": 0.0, "bandwidth_half_bytes": 0.0,
    "flops_half_tokens": 0.0, "attention_dim": 0.0, "attention_flops": np.nan,
    "concurrency": 0.0, "think_time_s": 0.0, "clustering": 0.0, "request_latency_s": 0.0,
    "spec_draft_tokens": 0.0, "spec_tokens_per_step": 1.0, "spec_verify_tokens": 1.0, "spec_draft_fraction": 0.0,
    "spec_draft_weight_bytes": 0.0, "spec_draft_params": 0.0, "spec_draft_overhead_s": 0.0,
    "board_power_watts": np.nan, "energy_price_per_kwh": np.nan, "pue": 1.0,
}

#: Results: name -> (unit, meaning). The first block is the contract of ``capacity evaluate --format json``.
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
    "params_per_gpu": ("params", "active parameters each GPU multiplies per token"),
    "gpus_per_replica": ("GPUs", "tensor x pipeline parallel GPUs in one replica"),
    "allreduce_per_step_s": ("s", "tensor-parallel all-reduce time in one decode step at the largest batch"),
    "weight_bytes_read_per_step": ("B", "weight bytes one decode step at the largest batch reads (MoE: experts hit)"),
    "goodput_per_gpu_rps": ("requests/s", "goodput per GPU"),
    "fleet_goodput_rps": ("requests/s", "goodput of all data-parallel replicas"),
    "batch_max": ("requests", "largest decode batch: what fits, capped by max_num_seqs"),
    "batch_running": ("requests", "sequences a closed loop runs at once: B_max, or where KV blocks are "
                                  "allocated as tokens arrive (engine profiles) the pool at the mean context prompt "
                                  "+ answer / 2"),
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
    # Closed loop (workload.concurrency): C users in flight, X = C / (TTFT + (A - 1) TPOT + think time).
    "closed_loop_throughput_rps": ("requests/s", "closed loop: requests per second the users in flight get through"),
    "closed_loop_tokens_per_s": ("tokens/s", "closed loop: output tokens per second"),
    "closed_loop_tpot_s": ("s", "closed loop: mean time per output token at the users in flight"),
    "closed_loop_ttft_s": ("s", "closed loop: mean time to first token, waits for a slot and for prefill included"),
    "closed_loop_batch": ("requests", "closed loop: sequences decoding at once"),
    "closed_loop_slot_wait_s": ("s", "closed loop: mean wait for a running slot (users beyond what fits)"),
    "closed_loop_load_fraction": ("-", "closed loop: throughput over the ceiling"),
    "cost_per_million_tokens_at_ceiling": ("$", "cost of a million output tokens at the ceiling"),
    "decode_bound": ("", "which term sets the decode step at the largest batch: memory or compute"),
    "batch_limit": ("", "what caps the batch: kv_memory or max_num_seqs"),
    "goodput_limit": ("", "what sets the goodput: capacity, tpot, ttft or nothing_fits"),
    # Serving options (docs/fleet.md): the same GPU with chunked prefill, or split into prefill and decode pools.
    "chunked_ceiling_rps": ("requests/s", "chunked prefill: largest load the batch and the token budget sustain"),
    "chunked_goodput_rps": ("requests/s", "chunked prefill: largest load keeping every promise"),
    "chunked_tpot_at_goodput_s": ("s", "chunked prefill: TPOT (the iteration time) at its goodput"),
    "chunked_ttft_at_goodput_s": ("s", "chunked prefill: TTFT at its goodput"),
    "chunked_tpot_at_load_s": ("s", "chunked prefill: TPOT at the workload's arrival rate"),
    "chunked_ttft_at_load_s": ("s", "chunked prefill: TTFT at the workload's arrival rate"),
    "chunked_win_back": ("-", "share of the promises' capacity cost (ceiling - goodput) chunking wins back"),
    "disagg_decode_rps": ("requests/s", "decode-only replica: largest load keeping the TPOT promise and fitting"),
    "disagg_prefill_rps": ("requests/s", "prefill-only replica: largest load keeping the TTFT promise (or 1/t_p)"),
    "disagg_prefill_share": ("-", "share of the GPUs in the prefill pool at the ideal ratio"),
    "disagg_goodput_per_gpu_rps": ("requests/s", "prefill and decode pools: goodput per GPU of both pools"),
    "disagg_tpot_at_goodput_s": ("s", "decode pool: TPOT at its goodput (no prefill stalls)"),
    "disagg_ttft_at_goodput_s": ("s", "prefill pool: TTFT at its goodput, KV transfer included"),
    "disagg_tpot_at_load_s": ("s", "decode pool: TPOT of one decode replica at the workload's arrival rate"),
    "disagg_ttft_at_load_s": ("s", "prefill pool: TTFT of one prefill replica at the workload's arrival rate"),
    "kv_transfer_s": ("s", "moving one prompt's KV cache between the pools"),
    "disagg_win_back": ("-", "share of the promises' capacity cost per GPU that separate pools win back"),
    # Power (docs/model.md "Power and energy"): board power at full load, an upper bound on the draw.
    "replica_power_watts": ("W", "power of one replica: GPUs x board power x PUE (full load, an upper bound)"),
    "energy_per_million_tokens_kwh": ("kWh", "energy of a million output tokens at the goodput (full-load power)"),
    "energy_cost_per_million_tokens": ("$", "electricity cost of a million output tokens at the goodput"),
    "energy_cost_per_hour": ("$/h", "electricity cost of one replica per hour at full-load power"),
}

#: The closed-loop results (``workload.concurrency``), NaN where no concurrency is set.
CLOSED_LOOP_RESULTS = tuple(key for key in RESULTS if key.startswith("closed_loop_"))


#: Intermediates: what the results are built from, for renderers that show the working (the XLSX workbook's
#: named cells). ``analyse(..., intermediates=True)`` adds them: name -> (unit, meaning).
INTERMEDIATES: dict[str, tuple[str, str]] = {
    "tokens_per_request": ("tokens", "prompt + answer tokens one request holds"),
    "gpus_per_replica": ("GPUs", "tensor x pipeline parallel GPUs in one replica"),
    "params_per_gpu": ("params", "active parameters each GPU multiplies per token"),
    "stage_layers": ("layers", "layers per pipeline stage"),
    "moe_model": ("", "TRUE for a mixture of experts (experts > experts_per_token > 0)"),
    "expert_params": ("params", "parameters of one routed expert (all layers)"),
    "ring_factor": ("-", "ring all-reduce traffic factor 2 (tp - 1) / tp (0: no all-reduce counted)"),
    "step_comm_fixed_s": ("s", "all-reduce latency per step: 2 per layer"),
    "step_comm_per_token_s": ("s", "all-reduce transfer time per token in a step"),
    "step_overhead_total_s": ("s", "fixed overhead per step over all pipeline stages"),
    "shared_blocks_held": ("blocks", "prefix blocks held once (local layers keep at most the window)"),
    "context_per_layer_tokens": ("tokens", "cached tokens read per layer and sequence (window applied)"),
    "step_intercept_memory_s": ("s", "dense decode step, memory piece: a_mem = W / BW + o"),
    "step_slope_memory_s": ("s", "dense decode step, memory piece: m_mem = c kv / BW per sequence"),
    "step_intercept_compute_s": ("s", "dense decode step, compute piece: a_comp = o"),
    "step_slope_compute_s": ("s", "dense decode step, compute piece: m_comp = 2 N / F per sequence"),
    "goodput_at_ceiling": ("", "TRUE when the goodput reaches the throughput ceiling"),
    "prefill_compute_s": ("s", "GPU time a prompt adds to a batched prefill pass: c = P (2 N / F + comm per token)"),
    "tpot_fixed_point_at_goodput_s": ("s", "smallest fixed point TPOT = t_step(λ A TPOT) / (1 - λ t_p) at the goodput"),
    "ttft_step_fixed_at_goodput_s": ("s", "decode step at the goodput from the dense pieces' fixed point"),
    "ttft_step_at_goodput_s": ("s", "decode step at the goodput for TTFT: the pieces' (at the ceiling: limit from "
                                    "below, at most the step at B_max)"),
    "ttft_step_at_load_s": ("s", "decode step at the arrival rate (dense pieces): s = TPOT (1 - λ t_p)"),
    "chunk_batch_cap": ("sequences", "chunked prefill: batch cap min(B_max, budget - 1)"),
    "chunk_batch_ceiling": ("sequences", "chunked prefill: batch at the ceiling, the cap or the full chunk pipe"),
    "chunk_plain_ceiling_s": ("s", "chunked prefill at the ceiling's batch: iteration without a chunk d_p"),
    "chunk_extra_ceiling_s": ("s", "chunked prefill at the ceiling's batch: extra time a prompt adds x"),
    "chunk_plain_goodput_s": ("s", "chunked prefill at the goodput's batch: iteration without a chunk d_p"),
    "chunk_extra_goodput_s": ("s", "chunked prefill at the goodput's batch: extra time a prompt adds x"),
    "chunk_service_goodput_s": ("s", "chunked prefill at the goodput's batch: a prompt's chunk iterations S"),
    "chunk_load_known": ("", "TRUE when an arrival rate is set and within the chunked ceiling"),
    "chunk_plain_load_s": ("s", "chunked prefill at the load's batch: iteration without a chunk d_p"),
    "chunk_extra_load_s": ("s", "chunked prefill at the load's batch: extra time a prompt adds x"),
    "chunk_service_load_s": ("s", "chunked prefill at the load's batch: a prompt's chunk iterations S"),
    "chunk_rate_load_rps": ("requests/s", "chunked prefill: load of the load's batch, λ(B) (the arrival rate)"),
    "disagg_decode_ceiling_rps": ("requests/s", "decode-only replica at its largest batch: B_max / (A t_step)"),
    "disagg_tpot_bound_rps": ("requests/s", "decode-only replica: largest load keeping the TPOT promise alone"),
    "disagg_tpot_fixed_point_s": ("s", "decode-only replica: TPOT fixed point at its rate (t_p = 0)"),
    # The root solves (solve.largest_rate_meeting); the MoE ones are also run for dense models here.
    "solver_rate_ttft_rps": ("requests/s", "largest λ with TTFT(λ) <= D (slo.max_rate_for_ttft_rps)"),
    "solver_rate_tpot_rps": ("requests/s", "largest λ with t_step(λ A T) <= T (1 - λ t_p), solved row by row"),
    "solver_tpot_at_goodput_s": ("s", "smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the goodput"),
    "solver_tpot_at_load_s": ("s", "smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the load"),
    "solver_chunk_batch_tpot": ("sequences", "chunked prefill: largest batch B with T(B) <= T"),
    "solver_chunk_batch_goodput": ("sequences", "chunked prefill: largest batch up to the TPOT's with TTFT(B) <= D"),
    "solver_chunk_batch_load": ("sequences", "chunked prefill: the batch B the arrival rate holds, B = λ A T(B)"),
}

#: The root solves ``analyse(..., trace=...)`` records, and the values it adds at each point they visit (besides
#: the point ``x`` and the excess ``f``): name -> columns.
SOLVE_COLUMNS: dict[str, tuple[str, ...]] = {
    "solver_rate_ttft_rps": ("d_mem", "d_comp", "decode step", "TTFT"),
    "solver_rate_tpot_rps": ("decode step",),
    "solver_tpot_at_goodput_s": ("decode step",),
    "solver_tpot_at_load_s": ("decode step",),
    **{name: ("plain", "chunk", "carrying", "extra", "service", "rate", "tpot", "ttft")
       for name in ("solver_chunk_batch_tpot", "solver_chunk_batch_goodput", "solver_chunk_batch_load")},
}
SOLVES = tuple(SOLVE_COLUMNS)

#: Bytes per activation value in the tensor-parallel all-reduce (bf16 activations).
ACTIVATION_BYTES = 2.0


def complete_inputs(inputs: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """Every ``INPUTS`` key as a float array: the given values, ``INPUT_DEFAULTS`` for the optional ones left out,
    and ``active_params`` = ``params`` where it is NaN (a dense model)."""
    x = {name: np.asarray(inputs[name] if name in inputs else INPUT_DEFAULTS[name], dtype=float) for name in INPUTS}
    x["active_params"] = select(np.isnan(x["active_params"]), x["params"], x["active_params"])
    x["moe_layers"] = select(np.isnan(x["moe_layers"]), x["layers"], x["moe_layers"])
    x["transformer_layers"] = all_layers(x)
    return x


#: Kept for callers written before ``complete_inputs`` had a public name.
_inputs = complete_inputs


@dataclass(frozen=True)
class StepModel:
    """Per-GPU quantities of one replica, and the step times built from them (arrays broadcast).

    Decode: each sequence's token passes every pipeline stage, so one step reads W/tp of weights
    (MoE: the experts the batch touches), the KV of its stage's layers for every sequence, does
    2 N_a / (tp pp) FLOPs per sequence, two all-reduces per layer, and pays the overhead per stage.
    ``decode_terms`` is the one decode step; ``pieces`` and the simulator's ``RooflineCost`` take its terms.

    MoE parallelism (``step_model``): ``tensor_parallel`` is then every GPU of a stage, ``g = tp x dp`` (dp
    attention data-parallel ranks; the experts split over ``moe_tp x ep = g``); each GPU also reads its rank's
    copy of the dense weights, ``replicated_bytes = (dp - 1) W_d`` over the g GPUs; ``kv_gpu`` is per sequence
    of the replica (a rank holds 1/dp of the sequences); the busiest GPU's routed tokens are ``imbalance`` times
    the mean, adding ``imbalance_params = (imbalance - 1) k p_e`` to each token's arithmetic; the all-to-all of
    expert parallelism is in ``comm_fixed`` and ``comm_per_token`` beside the tp all-reduce.
    """

    weight_bytes: np.ndarray      # whole model [B]
    params: np.ndarray            # total [-]
    active_params: np.ndarray     # per token [-]
    experts: np.ndarray
    experts_per_token: np.ndarray
    tensor_parallel: np.ndarray   # GPUs splitting each layer [-]
    pipeline_parallel: np.ndarray  # stages [-]
    kv_gpu: np.ndarray            # KV per token held by one GPU [B]
    context: np.ndarray           # cached tokens per layer read per sequence (window applied) [tokens]
    bandwidth: np.ndarray
    flops: np.ndarray
    overhead: np.ndarray          # per step, all stages [s]
    comm_fixed: np.ndarray        # all-reduce latency per step [s]
    comm_per_token: np.ndarray    # all-reduce time per token in the step [s]
    half_bytes: np.ndarray        # bandwidth curve: bytes per pass at half the plateau, all layers [B]
    half_tokens: np.ndarray       # FLOP/s curve: tokens per pass at half the plateau [tokens]
    replicated_bytes: np.ndarray = 0.0  # dense weights the other attention-DP ranks hold again, (dp - 1) W_d [B]
    imbalance_params: np.ndarray = 0.0  # extra expert params per token on the busiest GPU, (imbalance - 1) k p_e
    # Prefill attention (``prefill_attention_s``): 2 D L_kv / (g F_attn) per query token and context token, and the
    # sliding window of the local layers.
    attention_s: np.ndarray = 0.0        # [s per token per context token]
    sliding_window: np.ndarray = np.inf  # [tokens]
    local_fraction: np.ndarray = 0.0     # share of KV layers that are local [-]
    # Speculative decoding (``speculative`` True where any row speculates): one iteration verifies ``verify_tokens``
    # per sequence and runs ``draft_passes`` drafter passes, and yields ``tokens_per_step`` tokens per sequence.
    draft_passes: np.ndarray = 0.0       # gamma [-]
    tokens_per_step: np.ndarray = 1.0    # E [tokens]
    verify_tokens: np.ndarray = 1.0      # [tokens per sequence]
    draft_fraction: np.ndarray = 0.0     # an eagle/mtp drafter pass over the target's pass, r [-]
    draft_bytes: np.ndarray = 0.0        # a draft model's weights per GPU, read per pass [B]
    draft_params: np.ndarray = 0.0       # a draft model's parameters per GPU [params]
    draft_overhead: np.ndarray = 0.0     # fixed time per drafter pass [s]
    all_dense: bool = False       # no row is MoE: every pass reads all weights
    read_terms: tuple | None = None  # memory.moe_read_terms of the rows, where computed once for many step times
    speculative: bool = False     # some row speculates (serving.speculative): the steps are per accepted token

    @property
    def moe(self) -> np.ndarray:
        return memory.is_moe(self.experts, self.experts_per_token)

    @property
    def decode_params_per_gpu(self) -> np.ndarray:
        """Active parameters one GPU multiplies per sequence in a decode step: ``N_a / (tp pp)`` [params] (with
        expert load imbalance, the busiest GPU's: ``(N_a + imbalance_params) / (tp pp)``)."""
        return (self.active_params + self.imbalance_params) / (self.tensor_parallel * self.pipeline_parallel)

    @property
    def prefill_params_per_gpu(self) -> np.ndarray:
        """Active parameters one GPU multiplies per prompt token, the stages in turn: ``N_a / tp`` [params]."""
        return (self.active_params + self.imbalance_params) / self.tensor_parallel

    def weights_read(self, tokens: ArrayLike) -> np.ndarray:
        """Weight bytes per GPU-group read by a pass over ``tokens`` tokens [B]."""
        if self.all_dense:
            return (self.weight_bytes + self.replicated_bytes) / self.tensor_parallel
        return (memory.weight_bytes_read(self.weight_bytes, self.params, self.active_params, self.experts,
                                         self.experts_per_token, tokens, self.read_terms)
                + self.replicated_bytes) / self.tensor_parallel

    def allreduce_s(self, tokens: ArrayLike) -> np.ndarray:
        """All-reduce time of a pass over ``tokens`` tokens: latency + tokens x time per token [s]."""
        return roofline.allreduce_s(self.comm_fixed, self.comm_per_token, tokens)

    def terms(self, weight_bytes: ArrayLike, batch: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(memory term, compute term) of a decode step over ``batch`` sequences reading ``weight_bytes`` [s].

        With efficiency curves (``roofline.curve_amount``) the step moves ``S + S_half`` bytes and ``B + T_half``
        tokens at the plateau figures ``bandwidth`` and ``flops``; without them (halves 0) the essays' roofline.
        """
        t_mem = roofline.decode_memory_s(roofline.curve_amount(weight_bytes, self.half_bytes), batch, self.context,
                                         self.kv_gpu, self.bandwidth)
        t_comp = roofline.decode_compute_s(roofline.curve_amount(batch, self.half_tokens), self.decode_params_per_gpu,
                                           self.flops)
        return t_mem, t_comp

    def decode_terms(self, batch: ArrayLike, read: ArrayLike | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(memory term, compute term, step time) of a decode step over ``batch`` sequences [s]: the decode step.
        ``read``: ``weights_read(batch)`` where the caller has it (the same numbers).

        With speculative decoding (``speculative``) the step is one iteration per token it yields: the
        verification pass (weights read for ``B v`` tokens, each sequence's KV, the arithmetic and all-reduce of
        ``B v`` tokens) and ``γ`` drafter passes (``speculative.iteration_terms``), ``max(memory, compute) +
        all-reduce + o + γ o_d``, all over E. The three values are then per accepted token."""
        b = _f(batch)
        if not self.speculative:
            t_mem, t_comp = self.terms(self.weights_read(b) if read is None else read, b)
            return t_mem, t_comp, roofline.pass_s(t_mem, t_comp, self.allreduce_s(b), self.overhead)
        return self._speculative_terms(b, read)

    def _speculative_terms(self, b: np.ndarray, read: ArrayLike | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``decode_terms`` of a speculative iteration, per token it yields (see there) [s]."""
        tokens = b * self.verify_tokens
        plain_read = self.weights_read(b) if read is None else read
        t_mem, t_comp = self.terms(plain_read, b)
        verify_read = plain_read if self.all_dense else self.weights_read(tokens)
        v_mem = self.terms(verify_read, b)[0]           # the weights once, each of the B sequences' KV
        v_comp = self.terms(verify_read, tokens)[1]     # the arithmetic of B v tokens
        with np.errstate(invalid="ignore"):
            memory, compute = iteration_terms(
                v_mem, t_comp, v_comp, self.draft_passes, self.draft_fraction,
                roofline.decode_memory_s(self.draft_bytes, 0.0, 0.0, 0.0, self.bandwidth),
                roofline.decode_compute_s(b, self.draft_params, self.flops))
        e = self.tokens_per_step
        step = roofline.pass_s(memory, compute, self.allreduce_s(tokens),
                               self.overhead + self.draft_passes * self.draft_overhead)
        return memory / e, compute / e, step / e

    def step_s(self, batch: ArrayLike) -> np.ndarray:
        return self.decode_terms(batch)[2]

    def rows(self, rows: np.ndarray) -> StepModel:
        """The model of some rows (indices into the flattened arrays of all fields broadcast together).

        Each field is gathered alone (a field with one value for all rows is broadcast, not gathered)."""
        shape = np.broadcast_shapes(*(np.shape(getattr(self, name)) for name in _ARRAY_FIELDS))
        # A model of one row (one scenario, its loads an array) is the same model for every row asked for.
        one = int(np.prod(shape)) <= 1
        picked = {}
        for name in _ARRAY_FIELDS:
            a = np.asarray(getattr(self, name), dtype=float)
            if one:
                picked[name] = np.broadcast_to(a.reshape(()), (np.size(rows),))
            elif a.ndim == 0:
                picked[name] = np.broadcast_to(a, np.shape(rows))
            else:
                picked[name] = (a.reshape(-1) if a.shape == shape else np.broadcast_to(a, shape).reshape(-1))[rows]
        return StepModel(**picked, all_dense=self.all_dense, speculative=self.speculative)

    def step_rows(self, batch: ArrayLike, rows: np.ndarray) -> np.ndarray:
        """Step time of rows ``rows`` at batches ``batch`` (one per row) [s]; what the row-wise solvers call."""
        return self.rows(rows).step_s(batch)

    def row_steps(self) -> tuple[Callable[..., np.ndarray], tuple[np.ndarray, ...]]:
        return self._row_steps

    @cached_property
    def _row_steps(self) -> tuple[Callable[..., np.ndarray], tuple[np.ndarray, ...]]:
        """``(step, args)`` with ``step(batch, *args)`` the step time of the rows whose ``args`` are given, for the
        row-wise solvers (``slo.*_rows``): ``args`` are every array field per row (broadcast together; a field
        with one value for every row zero-dimensional) and ``memory.moe_read_terms`` of the rows; a solver
        compacts them as rows converge, so no evaluation gathers the model again (``step_rows``) or recomputes
        what does not depend on the batch."""
        all_dense, speculative = self.all_dense, self.speculative
        shape = np.broadcast_shapes(*(np.shape(getattr(self, name)) for name in _ARRAY_FIELDS))
        # Per row, broadcast together; a field with one value for every row stays one value (not gathered or
        # computed per row by the solvers, the same arithmetic).
        table = tuple(one_value_or(field) if field.ndim == 1 else field for field in (
            np.broadcast_to(np.asarray(getattr(self, name), dtype=float), shape) for name in _ARRAY_FIELDS))
        fields = dict(zip(_ARRAY_FIELDS, table, strict=True))
        terms = memory.moe_read_terms(fields["params"], fields["active_params"], fields["experts"],
                                      fields["experts_per_token"])
        count = len(_ARRAY_FIELDS)

        def step(batch: ArrayLike, *args: np.ndarray) -> np.ndarray:
            return StepModel(*args[:count], all_dense=all_dense, read_terms=args[count:],
                             speculative=speculative).step_s(batch)

        return step, (*table, *terms)

    def prefill_s(self, tokens: ArrayLike, prompt_tokens: ArrayLike | None = None,
                  cached_tokens: ArrayLike = 0.0) -> np.ndarray:
        """A pass over T prompt tokens passes the stages in turn:
        ``max(W_read(T)/BW, T 2 N_a / (tp F) + t_attn) + o + comm``, ``t_attn`` the attention of prompts of
        ``prompt_tokens`` P uncached tokens each after ``cached_tokens`` (``prefill_attention_s``; None: one prompt,
        P = T)."""
        t = _f(tokens)
        base = roofline.prefill_s(roofline.curve_amount(self.weights_read(t), self.half_bytes),
                                  roofline.curve_amount(t, self.half_tokens), self.prefill_params_per_gpu,
                                  self.bandwidth, self.flops, self.overhead,
                                  self.prefill_attention_s(t, prompt_tokens, cached_tokens))
        return base + self.allreduce_s(t)

    def prefill_attention_s(self, tokens: ArrayLike, prompt_tokens: ArrayLike | None = None,
                            cached_tokens: ArrayLike = 0.0) -> np.ndarray:
        """Attention's arithmetic of T prompt tokens in causal prefills of prompts of P uncached tokens
        (``prompt_tokens``; None: P = T) after a cached prefix of c tokens (``cached_tokens``) [s]:
        ``roofline.attention_s`` of T query tokens over a mean context of c + P / 2 (windowed on the local layers);
        T / P prompts of ``D L (P^2 + 2 P c)`` FLOPs each. 0 under the essays' convention."""
        t = _f(tokens)
        p = t if prompt_tokens is None else _f(prompt_tokens)
        context = _f(cached_tokens) + p / 2.0
        return roofline.attention_s(t, memory.windowed_tokens(context, self.sliding_window, self.local_fraction),
                                    self.attention_s)

    def mixed_s(self, batch: ArrayLike, prefill_tokens: ArrayLike, prompt_tokens: ArrayLike | None = None,
                cached_tokens: ArrayLike = 0.0) -> np.ndarray:
        """One engine step that decodes ``batch`` sequences and prefills ``prefill_tokens`` prompt tokens in the same
        pass (chunked prefill / in-flight batching) [s]:
        ``max(t_mem(W_read(B + x), B), t_comp(B) + x 2 N_a / (tp F) + t_attn) + all-reduce(B + x) + o``, the chunk's
        attention ``t_attn`` that of x tokens of prompts of ``prompt_tokens`` P uncached tokens after
        ``cached_tokens`` (``prefill_attention_s``; None: one prompt of x tokens).

        The chunk's compute overlaps the step's weight and KV reads: the step costs the larger of the two, not a
        separate prefill pass (Agrawal et al., Sarathi-Serve, OSDI 2024; the simulator's ``RooflineCost.step_s``
        charges the same mixed step). ``prefill_tokens = 0`` is ``decode_terms``' step.
        """
        b, x = _f(batch), _f(prefill_tokens)
        t_mem, t_comp = self.terms(self.weights_read(b + x), b)
        t_comp = (t_comp + roofline.decode_compute_s(x, self.prefill_params_per_gpu, self.flops)
                  + self.prefill_attention_s(x, prompt_tokens, cached_tokens))
        return roofline.pass_s(t_mem, t_comp, self.allreduce_s(b + x), self.overhead)

    def prefill_compute_s(self, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0) -> np.ndarray:
        """GPU time a prompt of P uncached tokens after ``cached_tokens`` adds to a batched prefill pass:
        ``P (2 N_a / (tp F) + comm per token) + t_attn`` (``prefill_attention_s``) [s]."""
        return (slo.prefill_compute_s(prompt_tokens, self.prefill_params_per_gpu, self.flops, self.comm_per_token)
                + self.prefill_attention_s(prompt_tokens, None, cached_tokens))

    def pieces(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Intercept [s] and slope [s per sequence] of the two linear pieces of a dense model's step time.

        ``decode_terms`` with every weight read (MoE: all experts) is ``max(a_mem + m_mem B, a_comp + m_comp B)``:
        the intercepts are its terms at B = 0 plus the fixed costs, the slopes its terms of one sequence without
        weights plus the all-reduce per sequence.
        """
        mem0, comp0 = self.terms((self.weight_bytes + self.replicated_bytes) / self.tensor_parallel, 0.0)
        mem1, comp1 = self.terms(0.0, 1.0)
        if np.any(self.half_bytes) or np.any(self.half_tokens):  # the curves' fixed parts belong to the intercept
            mem_fixed, comp_fixed = self.terms(0.0, 0.0)
            mem1, comp1 = mem1 - mem_fixed, comp1 - comp_fixed
        fixed = self.overhead + self.comm_fixed
        if not self.speculative:
            a_mem, m_mem, a_comp, m_comp = np.broadcast_arrays(mem0 + fixed, mem1 + self.comm_per_token,
                                                               comp0 + fixed, comp1 + self.comm_per_token)
            return (a_mem, m_mem), (a_comp, m_comp)
        # Speculation (``_speculative_terms``): the iteration's terms are linear in B too, over E per token.
        g, r, v, e = self.draft_passes, self.draft_fraction, self.verify_tokens, self.tokens_per_step
        fixed = fixed + g * self.draft_overhead
        comm = v * self.comm_per_token
        draft_mem = roofline.decode_memory_s(self.draft_bytes, 0.0, 0.0, 0.0, self.bandwidth)
        draft_comp = roofline.decode_compute_s(1.0, self.draft_params, self.flops)
        a_mem, m_mem, a_comp, m_comp = np.broadcast_arrays(
            (mem0 * (1.0 + g * r) + g * draft_mem + fixed) / e, (mem1 * (1.0 + g * r) + comm) / e,
            (comp0 * (1.0 + g * r) + fixed) / e, (comp1 * (v + g * r) + g * draft_comp + comm) / e)
        return (a_mem, m_mem), (a_comp, m_comp)


#: The array fields of ``StepModel``, in order.
_ARRAY_FIELDS = tuple(f.name for f in fields(StepModel) if f.name not in ("all_dense", "read_terms", "speculative"))


def stage_gpus(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """GPUs of one pipeline stage: ``tp x dp`` (attention tensor x data parallel) [GPUs]."""
    return x["gpu_count"] * x["attention_data_parallel"]


def replica_gpus(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """GPUs of one replica: ``tp x dp x pp`` [GPUs]."""
    return stage_gpus(x) * x["pipeline_parallel"]


def dense_bytes(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """Weight bytes outside the routed experts, ``memory.dense_weight_bytes`` of the flat inputs [B]."""
    return memory.dense_weight_bytes(x["weight_bytes"], x["params"], x["active_params"], x["experts"],
                                     x["experts_per_token"])


def weights_per_gpu(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """Weights one GPU holds, ``memory.weight_bytes_per_gpu`` of the flat inputs [B]: ``W / (tp pp)`` without
    attention data parallelism."""
    if not np.any(np.asarray(x.get("attention_data_parallel", 1.0)) > 1):
        return x["weight_bytes"] / (x["gpu_count"] * x["pipeline_parallel"])
    return memory.weight_bytes_per_gpu(x["weight_bytes"], dense_bytes(x), x["gpu_count"],
                                       x["attention_data_parallel"], x["pipeline_parallel"])


def all_layers(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """Every layer of the model [layers]: ``transformer_layers`` where given (a hybrid model), else ``layers``."""
    every = np.asarray(x.get("transformer_layers", np.nan), dtype=float)
    return select(np.isnan(every), x["layers"], every)


def step_model(x: Mapping[str, np.ndarray], context_tokens: ArrayLike) -> tuple[StepModel, np.ndarray]:
    """The replica's StepModel and the KV bytes per token one GPU holds, from flat inputs (``complete_inputs``).

    With attention data parallelism (dp ranks) and expert parallelism (ep): the stage's ``g = tp x dp`` GPUs
    share each layer's work; a rank's tp all-reduce carries 1/dp of the batch; the experts' all-to-all
    (``roofline.alltoall_s_per_token``) runs on NVLink within the NVLink domain, else on the network
    (``roofline.expert_link_bandwidth``); the busiest GPU does ``expert_load_imbalance`` times the mean routed
    work. Per-layer fixed costs (the bandwidth curve's kernel floor, the tp all-reduces) count every layer,
    ``transformer_layers``: a hybrid model's linear-attention/SSM layers run kernels and all-reduces too, though only
    its ``layers`` hold a KV cache (Qwen3.5-397B-A17B: 60 layers, 15 with KV)."""
    tp, pp, dp, ep = x["gpu_count"], x["pipeline_parallel"], x["attention_data_parallel"], x["expert_parallel"]
    g, every = stage_gpus(x), all_layers(x)
    kv_gpu = memory.kv_bytes_per_token_per_gpu(x["layers"], x["kv_heads"], x["head_dim"], x["kv_bytes_per_value"],
                                               x["kv_latent_dim"], tp, pp)
    ring = roofline.ring_factor(tp, x["hidden_size"])
    link = roofline.expert_link_bandwidth(g * pp, x["nvlink_domain"], x["interconnect_bandwidth"],
                                          x["network_bandwidth"])
    routed_active = x["experts_per_token"] * memory.expert_params(x["params"], x["active_params"], x["experts"],
                                                                  x["experts_per_token"])
    model = StepModel(
        weight_bytes=x["weight_bytes"], params=x["params"], active_params=x["active_params"], experts=x["experts"],
        experts_per_token=x["experts_per_token"], tensor_parallel=g, pipeline_parallel=pp, kv_gpu=kv_gpu / dp,
        context=memory.windowed_tokens(context_tokens, x["sliding_window"], x["local_layer_fraction"]),
        bandwidth=x["bandwidth"], flops=x["flops"], overhead=x["step_overhead_s"] * pp,
        comm_fixed=(roofline.allreduce_fixed_s(every, ring, x["allreduce_latency_s"])
                    + roofline.alltoall_fixed_s(x["moe_layers"], ep, x["allreduce_latency_s"])),
        comm_per_token=(roofline.allreduce_s_per_token(every, ring, x["hidden_size"],
                                                       ACTIVATION_BYTES,
                                                       x["interconnect_bandwidth"]) / dp
                        + roofline.alltoall_s_per_token(x["moe_layers"], x["experts_per_token"], x["hidden_size"],
                                                        ACTIVATION_BYTES, ep, g, link)),
        half_bytes=every * x["bandwidth_half_bytes"], half_tokens=x["flops_half_tokens"],
        replicated_bytes=(dp - 1.0) * dense_bytes(x),
        imbalance_params=(x["expert_load_imbalance"] - 1.0) * routed_active,
        attention_s=roofline.attention_s_per_pair(x["attention_dim"], x["layers"], g,
                                                  select(np.isnan(x["attention_flops"]), x["flops"],
                                                         x["attention_flops"])),
        sliding_window=x["sliding_window"], local_fraction=x["local_layer_fraction"],
        all_dense=not np.any(memory.is_moe(x["experts"], x["experts_per_token"])),
        **speculative_fields(x))
    return model, kv_gpu


def speculative_fields(x: Mapping[str, np.ndarray]) -> dict:
    """The StepModel's speculative-decoding fields from flat inputs (none where no row speculates): the drafter's
    weights and parameters split over the stage's ``tp x dp`` GPUs."""
    gamma = x.get("spec_draft_tokens", 0.0)
    if not np.any(np.asarray(gamma) > 0):
        return {}
    g = stage_gpus(x)
    return {"draft_passes": gamma, "tokens_per_step": x["spec_tokens_per_step"],
            "verify_tokens": x["spec_verify_tokens"], "draft_fraction": x["spec_draft_fraction"],
            "draft_bytes": x["spec_draft_weight_bytes"] / g, "draft_params": x["spec_draft_params"] / g,
            "draft_overhead": x["spec_draft_overhead_s"], "speculative": True}


def draft_bytes_per_gpu(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """A draft model's weights each GPU holds beside the target's: ``W_d / (tp dp)`` [B] (0 without one)."""
    return np.asarray(x.get("spec_draft_weight_bytes", 0.0), dtype=float) / stage_gpus(x)


def kv_pool_bytes(x: Mapping[str, np.ndarray]) -> np.ndarray:
    """KV pool per GPU [B] by the engine's rule: ``memory x utilisation - weights per GPU - reserves``
    (``memory.pool_bytes``), or TensorRT-LLM's ``fraction x (memory - weights per GPU - reserves)`` where
    ``kv_free_fraction > 0`` (``engines.pool_bytes_of_free``). May be <= 0: no pool (``checks.input_problems``).

    ``x``: flat inputs (``complete_inputs``; ``gpu_memory_bytes``, ``memory_utilization``, ``weight_bytes``,
    ``gpu_count``, ``pipeline_parallel``, ``reserved_bytes`` and ``kv_free_fraction`` are read).
    """
    used = weights_per_gpu(x) + x["reserved_bytes"]
    if np.any(np.asarray(x.get("spec_draft_weight_bytes", 0.0)) > 0):  # a draft model's weights (serving.speculative)
        used = used + draft_bytes_per_gpu(x)
    pool = memory.pool_bytes(x["gpu_memory_bytes"], x["memory_utilization"], used)
    if np.any(x["kv_free_fraction"] > 0):  # an engine that sizes the pool from the free memory (TensorRT-LLM)
        pool = select(x["kv_free_fraction"] > 0,
                      engines.pool_bytes_of_free(x["gpu_memory_bytes"], x["kv_free_fraction"], used), pool)
    return pool


def running_batch(fits: ArrayLike, x: Mapping[str, np.ndarray]) -> np.ndarray:
    """Largest decode batch: the requests that fit in the pool, capped by the engine's ``max_num_seqs`` [requests]."""
    return np.minimum(fits, x["max_num_seqs"])


@dataclass(frozen=True, slots=True)
class MemoryStage:
    """The KV pool of one GPU and the requests it holds (``memory_stage``); arrays broadcast."""

    weight_bytes_per_gpu: np.ndarray        # [B]
    pool_bytes: np.ndarray                  # [B]
    pool_blocks: np.ndarray                 # [blocks]
    blocks_per_request: np.ndarray          # prompt + answer [blocks]
    max_requests_contiguous: np.ndarray     # reserving max_model_len each [requests]
    max_requests_paged: np.ndarray          # paged blocks [requests]
    shared_blocks: np.ndarray               # prefix blocks stored once [blocks]
    private_blocks: np.ndarray              # blocks each request owns alone [blocks]
    max_requests_shared_prefix: np.ndarray  # the prefix stored once [requests]
    batch_max: np.ndarray                   # what fits, capped by max_num_seqs [requests]
    batch_running: np.ndarray               # what an engine runs at once, blocks at the mean context [requests]


def memory_stage(x: Mapping[str, np.ndarray], kv_gpu: ArrayLike, tokens: ArrayLike) -> MemoryStage:
    """The pool (``kv_pool_bytes``), its blocks and the requests of ``tokens`` tokens it holds (paged, contiguous,
    with the shared prefix ``x["shared_prefix_tokens"]`` stored once), and the batch limit (``running_batch``).
    With attention data parallelism each of the dp ranks holds its own requests in its own pools: the replica
    holds dp times a rank's requests (and dp times a rank's ``max_num_seqs``).

    ``kv_gpu`` [B] KV per token one GPU holds (``step_model``); ``tokens`` [tokens] prompt + answer per request.
    """
    bs, window, local = x["block_size"], x["sliding_window"], x["local_layer_fraction"]
    pool = kv_pool_bytes(x)
    blocks = memory.pool_blocks(pool, bs, kv_gpu)
    per_request = memory.request_blocks(tokens, bs, window, local)
    longest = memory.windowed_tokens(x["max_model_len"], window, local) if np.any(local > 0) else x["max_model_len"]
    contiguous = memory.max_requests_contiguous(pool, longest, kv_gpu)
    paged = memory.max_requests_paged(blocks, tokens, bs, window, local, blocks_per_request=per_request)
    shared_count = memory.shared_blocks(x["shared_prefix_tokens"], bs)
    private = memory.request_blocks(tokens - shared_count * bs, bs, window, local)
    shared = memory.max_requests_shared_prefix(blocks, tokens, x["shared_prefix_tokens"], bs, window, local,
                                               private_blocks=private, paged=paged)
    dp = x["attention_data_parallel"]
    batch = running_batch(shared, x) * dp
    return MemoryStage(weights_per_gpu(x), pool, blocks, per_request, contiguous * dp, paged * dp, shared_count,
                       private, shared * dp, batch, _batch_running(x, blocks, batch))


def _batch_running(x: Mapping[str, np.ndarray], pool_blocks: ArrayLike, batch_max: ArrayLike) -> np.ndarray:
    """Sequences an engine runs at once under a sustained load [requests]: ``B_max`` under the essays' convention
    (``engine: ideal``, every request holding the blocks of its whole context); where the engine allocates blocks
    as tokens arrive (``x["kv_on_demand"]``: the vLLM, SGLang and TensorRT-LLM profiles, ``engines.Profile``) the
    pool at the mean context ``P + A / 2``, capped by ``max_num_seqs``.

    vLLM allocates KV blocks on demand (paged attention; Kwon et al., SOSP 2023, sec. 4.1), SGLang token by token,
    so a running sequence holds its prompt and the tokens answered so far; with the users' phases spread, a
    sequence is halfway through its answer on average. An offline wave (every request sent at once, in step) ends
    together, holding whole contexts: its batch stays ``B_max`` (``calibration``; the open loop's ceiling too).
    Measured: Kimi-K2.5 on 4 B200 (vLLM 0.17) ran 64 users of 1,024 + 8,192 tokens with a 0.23 s TTFT where the
    whole-context pool holds 42; Llama-3.1-70B fp8 on one H200 ran 32 of 1,024 + 8,192 at 0.47 s where it holds
    20, and queued at 64 (5.3 s; 36 fit at the mean context) (validation/silicon/silicon_train.csv).
    """
    mean = memory.max_requests_shared_prefix(
        pool_blocks, x["prompt_tokens"] + x["output_tokens"] / 2.0, x["shared_prefix_tokens"], x["block_size"],
        x["sliding_window"], x["local_layer_fraction"])
    running = running_batch(mean, x) * x["attention_data_parallel"]
    return select(x["kv_on_demand"] > 0, np.maximum(running, batch_max), batch_max)


@dataclass(frozen=True, slots=True)
class PrefillStage:
    """A prompt's prefill (``prefill_stage``); arrays broadcast."""

    tokens: np.ndarray      # prompt tokens prefilled (the cached prefix skipped) [tokens]
    ttft_s: np.ndarray      # its own pass, what its TTFT waits for [s]
    gpu_s: np.ndarray       # GPU time it costs the others: its pass, or its share of a batched pass [s]
    compute_s: np.ndarray   # arithmetic it adds to a batched pass, c [s]
    cached_tokens: np.ndarray | float = 0.0  # the cached prefix its tokens attend to [tokens]


def prefill_stage(model: StepModel, x: Mapping[str, np.ndarray], prompt_tokens: ArrayLike,
                  shared_blocks: ArrayLike) -> PrefillStage:
    """Prefill of prompts of ``prompt_tokens`` whose first ``shared_blocks`` blocks are cached.

    Tokens ``P = max(prompt - shared_blocks x block_size, 1)`` (a fully cached prompt still computes its last
    token to produce the first output, as vLLM does); TTFT's pass ``StepModel.prefill_s(P)``; the GPU time a
    prompt costs the decoding sequences: that pass, or where ``x["batched_prefill"]`` (engine profiles) its share
    ``t_prefill(T) P / T`` of a pass of ``T = max(max_batched_tokens, P)`` tokens (``engines.batched_prefill_s``);
    ``c = StepModel.prefill_compute_s(P)``. With no batched prefill ``gpu_s`` is ``ttft_s`` itself.
    """
    tokens = np.maximum(_f(prompt_tokens) - _f(shared_blocks) * x["block_size"], 1.0)
    cached = np.maximum(_f(prompt_tokens) - tokens, 0.0)  # the prefix's keys the prompt's tokens attend to
    t_prefill = model.prefill_s(tokens, None, cached)
    t_gpu = t_prefill
    if np.any(x["batched_prefill"] > 0):
        t_gpu = select(x["batched_prefill"] > 0, engines.batched_prefill_s(
            lambda pass_tokens: model.prefill_s(pass_tokens, tokens, cached), tokens, x["max_batched_tokens"]),
            t_prefill)
    return PrefillStage(tokens, t_prefill, t_gpu, model.prefill_compute_s(tokens, cached), cached)


def ceiling_limit(rates: ArrayLike, ceiling_rps: ArrayLike) -> np.ndarray:
    """Where a load is the ceiling itself (to rounding, 1e-12 relative; above 0, not above it) [bool]: there TPOT
    and TTFT are their limits from below (``at_ceiling``)."""
    lam, ceiling = _f(rates), _f(ceiling_rps)
    return (lam >= ceiling * (1 - 1e-12)) & (lam > 0) & (lam <= ceiling)


def at_ceiling(limit: ArrayLike, rates: ArrayLike, tpot_s: ArrayLike, step_s: ArrayLike, ttft_s: ArrayLike,
               tpot_ceiling_s: ArrayLike, prefill: PrefillStage, output_tokens: ArrayLike
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TPOT, TTFT's decode step, TTFT) [s] where ``limit`` (``ceiling_limit``): their limits from below.

    At the ceiling (docs/model.md) TPOT is the smallest fixed point, at most the TPOT at B_max (``fmin`` also
    takes the B_max value where rounding at a pole gives no fixed point), and TTFT the queue with that decode
    step (``slo.ttft_queue_s``), not the unbounded wait of loads above the ceiling. Elsewhere the values given.
    """
    tpot = select(limit, np.fmin(tpot_s, tpot_ceiling_s), tpot_s)
    step_ceiling = slo.decode_step_from_tpot_s(rates, prefill.gpu_s, tpot_ceiling_s)
    step = select(limit, np.fmin(step_s, step_ceiling), step_s)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ttft = select(limit, slo.ttft_queue_s(rates, prefill.ttft_s, prefill.compute_s, step, output_tokens), ttft_s)
    return tpot, step, ttft


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """TPOT, TTFT and the decode batch at arrival rates (``latencies_at_rates``)."""

    tpot_s: np.ndarray       # [s]
    ttft_s: np.ndarray       # [s]
    step_s: np.ndarray       # decode step TTFT waits on [s]
    in_flight: np.ndarray    # sequences decoding at once, λ A TPOT (B_max at the ceiling) [requests]


def latencies_at_rates(model: StepModel, prefill: PrefillStage, output_tokens: ArrayLike, batch_max: ArrayLike,
                       ceiling_rps: ArrayLike, rates: ArrayLike) -> LoadPoint:
    """One replica (a one-row ``model``) at arrival rates λ: what ``analyse`` gives at its goodput and its load.

    TPOT the fixed point with the GPU time a prompt costs the others (``prefill.gpu_s``, ``tpot_at_rates_s``);
    TTFT with the prompt's own pass (``prefill.ttft_s``, ``ttft_at_rates_s``) and the decode step at the load's
    batch, ``TPOT (1 - λ t_gpu)`` of the dense pieces (MoE: every expert read, as the TTFT solve takes it); at the
    ceiling their limits from below (``at_ceiling``).
    """
    lam, a_tokens, batch = _f(rates), _f(output_tokens), _f(batch_max)
    pieces = model.pieces()
    moe = bool(np.any(model.moe))
    # An MoE model is solved row by row: give the one-row model one row per rate (the row solver indexes rows).
    one_row = int(np.prod(np.broadcast_shapes(*(np.shape(getattr(model, f)) for f in _ARRAY_FIELDS)))) <= 1
    per_rate = model.rows(np.zeros(lam.size, dtype=np.intp)) if moe and lam.ndim == 1 and one_row else model
    tpot = tpot_at_rates_s(per_rate, pieces, prefill.gpu_s, a_tokens, batch, lam)
    ttft, step = ttft_at_rates_s(model, prefill.compute_s, prefill.ttft_s, ceiling_rps, a_tokens, lam, pieces,
                                 None if moe else tpot, with_step=True, prefill_gpu_s=prefill.gpu_s)
    t_step = model.decode_terms(batch)[2]
    tpot_ceiling = roofline.tpot_at_ceiling_s(t_step, roofline.decode_share(prefill.gpu_s, t_step, batch, a_tokens))
    limit = ceiling_limit(lam, ceiling_rps)
    tpot, step, ttft = at_ceiling(limit, lam, tpot, step, ttft, tpot_ceiling, prefill, a_tokens)
    in_flight = select(limit & (tpot >= tpot_ceiling), batch, slo.in_flight(lam, a_tokens, tpot))
    return LoadPoint(tpot, ttft, step, in_flight)


def closed_loop_engine_ttft_s(others_rps: ArrayLike, prefill_s: ArrayLike, prefill_compute_s: ArrayLike,
                              decode_step_s: ArrayLike, output_tokens: ArrayLike, tpot_s: ArrayLike,
                              clustered: ArrayLike, think_time_s: ArrayLike,
                              request_latency_s: ArrayLike) -> np.ndarray:
    """The engine's TTFT in a closed loop [s] (without the request latency itself or a slot wait).

    Where each request reaches the engine as another's answer ends (no think time Z, no request latency L: the
    client sends at once and nothing lies between), arrivals fall on decode-step ends: ``slo.ttft_at_step_ends_s``
    with ``n_c`` (``clustered``) others in step. Where a think time or a request latency of a step or more lies
    between an answer's end and the next request's arrival, arrivals fall at any phase of a step (the answer's way
    out, the request's way in, a pause; the simulator's clients, ``simulator/engine.py``); a latency shorter than
    the decode step s moves them that far into it, so the two forms are blended by ``w = min(1, L / s)`` (w = 1
    with a think time): the prefill queue of random arrivals of the
    other users (``slo.ttft_queue_s`` at their X (C - 1) / C, over the decode step at the load's batch: one user
    alone finds the engine idle, t_p), and without a think time the prompts of the ``n_c`` users still in step with
    mine in the same pass, ``c n_c`` (an exponential think time spreads them).
    ``others_rps`` X (C - 1) / C [requests/s], ``prefill_s`` t_p, ``prefill_compute_s`` c, ``decode_step_s`` s
    (``LoadPoint.step_s``), ``output_tokens`` A, ``tpot_s`` [s], ``clustered`` n_c [requests], ``think_time_s`` Z,
    ``request_latency_s`` L [s].
    Llama-3.1-8B on an H100 under vLLM's profile (L = 40 ms behind the engine's server), 1,000-token prompts and
    300-token answers at 30%, 60% and 90% of the ceiling: the step-end form read the simulator run closed-loop's
    TTFT -11%, -16% and -34%; this form, at L = 33 ms, +1%, +5% and -6% (tests/model/test_closed_loop.py).
    """
    z, delay = _f(think_time_s), _f(request_latency_s)
    at_ends = slo.ttft_at_step_ends_s(others_rps, prefill_s, prefill_compute_s, tpot_s, clustered)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        queue = slo.ttft_queue_s(others_rps, prefill_s, prefill_compute_s, decode_step_s, output_tokens)
        w = select(z > 0, 1.0, np.minimum(delay / np.maximum(_f(decode_step_s), 1e-12), 1.0))
    spread = queue + select(z > 0, 0.0, _f(prefill_compute_s) * _f(clustered))
    return select(w > 0, w * spread + (1.0 - w) * at_ends, at_ends)


@dataclass(frozen=True, slots=True)
class ClosedLoopPoint:
    """A replica under a closed loop of C users (``closed_loop``); arrays broadcast."""

    throughput_rps: np.ndarray  # X [requests/s]
    tpot_s: np.ndarray          # [s]
    ttft_s: np.ndarray          # slot wait + prefill queue and pass [s]
    slot_wait_s: np.ndarray     # wait for a running slot, beyond what fits [s]
    batch: np.ndarray           # sequences decoding at once, X A TPOT [requests]


def closed_loop(model: StepModel, prefill: PrefillStage, output_tokens: ArrayLike, batch_max: ArrayLike,
                ceiling_rps: ArrayLike, users: ArrayLike, think_time_s: ArrayLike = 0.0,
                trace: SolveTrace | None = None, *, clustering: ArrayLike = 0.0,
                request_latency_s: ArrayLike = 0.0) -> ClosedLoopPoint:
    """C users in flight on one replica, each sending its next request Z after its answer: the closed loop's
    throughput X and the TPOT and TTFT its users see.

    The interactive response time law of a closed queueing network (Little's law over the whole loop; Lazowska
    et al., *Quantitative System Performance*, 1984, ch. 3; the fixed point of mean value analysis, Reiser and
    Lavenberg, J. ACM 27 (1980)) with this model's own latencies at the throughput:

        X = C / (R(X) + Z),   R(X) = TTFT(X) + (A - 1) TPOT(X),   TTFT(X) = L + the engine's TTFT at X

    TPOT(X): ``latencies_at_rates``' fixed point, a user's decode paused by the prefills of the other C - 1 users
    (``t_p (C - 1) / C`` of GPU time per request: one user alone sees none). TTFT(X),
    ``closed_loop_engine_ttft_s``: with a think time or a request latency, the prefill queue of random arrivals
    (``slo.ttft_queue_s`` via ``latencies_at_rates``); with neither, each request arrives as an answer ends, at a
    decode-step end (``slo.ttft_at_step_ends_s`` at the others' ``X (C - 1) / C``); without a think time
    ``clustering`` k of the C - 1 others arrive in step with it (users of fixed-length requests fall into step) and
    share its pass.
    L (``request_latency_s``): the request's time outside the engine's passes, a pure delay in every TTFT and so in
    every cycle.

    ``X (R(X) + Z)`` rises with X, so the root is the largest ``X <= ceiling`` with ``X (R(X) + Z) <= C``
    (``solve.largest_rate_meeting``). Where even the ceiling leaves users over (``C > X_c (R(X_c) + Z)``: more
    users than running slots, ``B_max``, and the prefill queue hold), the replica runs at its ceiling with the
    TPOT there (its limit from below, ``at_ceiling``) and the excess waits for a slot: by the same law
    ``TTFT = C / X - Z - (A - 1) TPOT``, the queue's TTFT plus ``slot_wait_s``. So ``X (TTFT + (A - 1) TPOT + Z)
    = C`` holds at every answer (to the solve's 2.5e-13).

    ``model``: one replica (one row) or one row per user count; ``prefill``: ``prefill_stage``; ``output_tokens``
    A [tokens]; ``batch_max`` [requests]; ``ceiling_rps`` (``roofline.ceiling_rps``) [requests/s]; ``users`` C
    [users] (0: no closed loop, NaN latencies); ``think_time_s`` Z [s]; ``trace`` (one row): the root solve's
    ``solve.SolveTrace``. Checked against the simulator run closed-loop (``tests/model/test_closed_loop.py``).
    Example, essay 001 (B_max 328, ceiling 6.92 requests/s), 100 users, no think time: X = 6.08 requests/s,
    TPOT 54.5 ms, TTFT 144.7 ms, 99.5 decoding; the simulator run so: 6.10 requests/s, 54.6 ms, 144.2 ms.
    """
    a, b_max, ceiling, c_users, think = _f(output_tokens), _f(batch_max), _f(ceiling_rps), _f(users), _f(think_time_s)
    k_share, delay = _f(clustering), _f(request_latency_s)
    shape = np.broadcast_shapes(a.shape, b_max.shape, ceiling.shape, c_users.shape, think.shape, k_share.shape,
                                delay.shape,
                                *(np.shape(getattr(prefill, f)) for f in ("tokens", "ttft_s", "gpu_s", "compute_s")))
    rows = int(np.prod(np.broadcast_shapes(*(np.shape(getattr(model, f)) for f in _ARRAY_FIELDS))))
    index = np.zeros(shape, dtype=np.intp) if rows <= 1 else np.broadcast_to(
        np.arange(rows).reshape(np.broadcast_shapes(*(np.shape(getattr(model, f)) for f in _ARRAY_FIELDS))), shape)
    served = (c_users > 0) & (ceiling > 0) & (b_max > 0)
    hi = select(served, ceiling, 0.0)

    def at(lam, idx, p_tokens, p_ttft, p_gpu, p_compute, a_, b_, ceil_, z_, c_, k_, d_):
        """(TPOT, TTFT without a slot wait) at throughput ``lam``: the TTFT of random arrivals where users think
        (``latencies_at_rates``), of arrivals at step ends where they do not (``slo.ttft_at_step_ends_s``). A user's
        decode is paused by the other C - 1 users' prefills, not its own: their GPU time ``t_p (C - 1) / C``."""
        others = np.maximum(c_ - 1.0, 0.0) / np.maximum(c_, 1.0)
        # At the ceiling every slot runs (B_max, the limit from below): the TPOT there, however many users.
        others = select(ceiling_limit(lam, ceil_), 1.0, others)
        point = latencies_at_rates(model.rows(np.atleast_1d(idx).reshape(-1).astype(np.intp)) if rows > 1 else model,
                                   PrefillStage(p_tokens, p_ttft, p_gpu * others, p_compute), a_, b_, ceil_, lam)
        clustered = k_ * np.maximum(c_ - 1.0, 0.0)
        return point.tpot_s, closed_loop_engine_ttft_s(lam * others, p_ttft, p_compute, point.step_s, a_,
                                                       point.tpot_s, clustered, z_, d_)

    def users_in_loop(lam, *row):
        tpot, ttft = at(lam, *row)
        a_, z_, d_ = row[5], row[8], row[11]
        with np.errstate(invalid="ignore", over="ignore"):
            return select(lam > 0, lam * (ttft + d_ + (a_ - 1.0) * tpot + z_), 0.0)

    args = (index, prefill.tokens, prefill.ttft_s, prefill.gpu_s, prefill.compute_s, a, b_max, ceiling, think,
            c_users, k_share, delay)
    flat_args = tuple(np.broadcast_to(_f(v), shape).reshape(-1) for v in args)
    flat_hi = np.broadcast_to(hi, shape).reshape(-1)
    at_hi = users_in_loop(flat_hi, *flat_args)
    x = largest_rate_meeting(users_in_loop, select(served, c_users, np.inf), hi, args, ratio=False,
                             latency_at_hi=at_hi.reshape(shape), trace=trace)
    tpot, ttft_queue = (v.reshape(shape) for v in at(x.reshape(-1), *flat_args))
    with np.errstate(invalid="ignore", divide="ignore"):
        response = select(x > 0, c_users / x - think, np.nan)  # the response time law
        wait = response - ttft_queue - delay - (a - 1.0) * tpot
        # Below the ceiling the root is the law (to the solve's tolerance): nobody waits. At the ceiling (or in the
        # step where the TPOT there starts counting every slot) the users the loop leaves over wait for a slot.
        wait = select(wait > 1e-9 * np.abs(response), wait, 0.0)
        nan = ~served
        return ClosedLoopPoint(select(nan, 0.0, x), select(nan, np.nan, tpot),
                               select(nan, np.nan, ttft_queue + delay + wait),
                               select(nan, np.nan, wait), select(nan, 0.0, np.minimum(x * a * tpot, b_max)))


def closed_loop_lockstep(model: StepModel, prefill_tokens: ArrayLike, output_tokens: ArrayLike,
                         batch_max: ArrayLike, max_batched_tokens: ArrayLike, users: ArrayLike) -> ClosedLoopPoint:
    """C users in lockstep: identical requests, no think time, so they arrive, prefill, decode and finish together
    (a benchmark of fixed prompt and answer lengths started all at once), the engine's prefills pausing decode.

    Waves: the C prompts of ``P`` tokens (``prefill_tokens``, the uncached ones) are prefilled ``m = max(1,
    floor(K / P))`` to a pass of ``T_m = StepModel.prefill_s(m P)`` (K = ``max_batched_tokens``), ``n = ceil(C /
    m)`` passes, the last one of ``r = C - (n - 1) m`` prompts; then all decode ``A - 1`` steps at batch C,
    ``s = t_step(C)``, and finish together, and the next wave arrives. Per wave:

        cycle = (n - 1) T_m + T_r + (A - 1) s,    X = C / cycle
        TTFT  = [m T_m (1 + 2 + ... + (n - 1)) + r ((n - 1) T_m + T_r)] / C      (mean over the wave)
        TPOT  = (cycle - TTFT) / (A - 1)            (everyone's answer ends at the cycle's end)

    No mean-value model describes this (``closed_loop`` assumes the users' phases spread out, which answers of
    different lengths or think times bring about); here the prefill of the whole wave stands in front of the last
    prompt. The simulator run so (fixed lengths, ``arrival: closed``) agrees within 1% on essay 001
    (``tests/model/test_closed_loop.py``): 30 users, passes of 8 prompts: TTFT 2.01 s against 0.12 s once the
    phases spread. For ``C <= B_max`` (NaN beyond: the excess would wait whole waves); ``model``: one replica.
    """
    p, a, c = _f(prefill_tokens), _f(output_tokens), _f(users)
    per_pass = np.maximum(np.floor(_f(max_batched_tokens) / p), 1.0)
    passes = np.ceil(c / per_pass)
    last = c - (passes - 1.0) * per_pass
    full_s, last_s = model.prefill_s(per_pass * p, p), model.prefill_s(last * p, p)
    step = model.step_s(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        prefill_all = (passes - 1.0) * full_s + last_s
        cycle = prefill_all + (a - 1.0) * step
        ttft = (per_pass * full_s * (passes - 1.0) * passes / 2.0 + last * ((passes - 1.0) * full_s + last_s)) / c
        tpot = select(a > 1, (cycle - ttft) / (a - 1.0), np.nan)
        ok = (c >= 1) & (c <= _f(batch_max))
        return ClosedLoopPoint(select(ok, c / cycle, np.nan), select(ok, tpot, np.nan), select(ok, ttft, np.nan),
                               select(ok, 0.0, np.nan), select(ok, c, np.nan))


def replica_stages(inputs: Mapping[str, ArrayLike]) -> tuple[StepModel, MemoryStage, PrefillStage, np.ndarray]:
    """One replica's stages from flat inputs, as ``analyse`` composes them: (``step_model`` at the average context
    ``P + A / 2``, ``memory_stage``, ``prefill_stage``, the closed loop's ceiling [requests/s],
    ``closed_loop_ceiling_rps`` at ``MemoryStage.batch_running``), for callers that compose a closed loop
    (``closed_loop``, ``users_keeping_promises``), which run ``batch_running`` sequences at most."""
    x = complete_inputs(inputs)
    a_tokens = x["output_tokens"]
    model, kv_gpu = step_model(x, x["prompt_tokens"] + a_tokens / 2.0)
    mem = memory_stage(x, kv_gpu, x["prompt_tokens"] + a_tokens)
    prefill = prefill_stage(model, x, x["prompt_tokens"], mem.shared_blocks)
    return model, mem, prefill, closed_loop_ceiling_rps(model, prefill, mem.batch_running, a_tokens)


def closed_loop_ceiling_rps(model: StepModel, prefill: PrefillStage, batch_running: ArrayLike,
                            output_tokens: ArrayLike) -> np.ndarray:
    """The ceiling a closed loop runs into [requests/s]: ``roofline.ceiling_rps`` at the running batch
    (``MemoryStage.batch_running``: ``B_max`` under the essays' convention, the pool at the mean context under an
    engine profile)."""
    t_step = model.decode_terms(batch_running)[2]
    return roofline.ceiling_rps(prefill.gpu_s, t_step, batch_running, output_tokens)


def users_keeping_promises(inputs: Mapping[str, ArrayLike]) -> tuple[np.ndarray, ClosedLoopPoint]:
    """Most users in flight one replica serves with every mean promise kept and no user waiting for a slot [users],
    and the closed loop there (``closed_loop``); one value per row of flat ``inputs`` (their ``concurrency`` unused).

    ``U = max {C : TPOT(C) <= T, TTFT(C) <= D, slot wait 0}``: TPOT and TTFT rise with C, and the slot wait starts
    where the throughput reaches the ceiling, at ``C_c = X_c (TTFT(X_c) + (A - 1) TPOT(X_c) + Z)``; so U is the
    largest C in ``[0, C_c]`` with ``max(TPOT / T, TTFT / D) <= 1`` (``solve.largest_rate_meeting``; 0 where one
    user alone breaks a promise). What the sizing divides the users by, as it divides an arrival rate by the goodput.
    """
    x = complete_inputs(inputs)
    model, mem, prefill, ceiling = replica_stages(x)
    a, z, t_slo, d_slo = x["output_tokens"], x["think_time_s"], x["tpot_slo_s"], x["ttft_slo_s"]
    k_share, delay = x["clustering"], x["request_latency_s"]
    shape = np.broadcast_shapes(*(np.shape(v) for v in (a, z, t_slo, d_slo, mem.batch_running, ceiling, k_share,
                                                         delay)),
                                *(np.shape(getattr(model, f)) for f in _ARRAY_FIELDS))
    rows = np.arange(int(np.prod(shape))).reshape(shape)
    one = int(np.prod(np.broadcast_shapes(*(np.shape(getattr(model, f)) for f in _ARRAY_FIELDS)))) <= 1

    def sub(v, idx):
        return np.broadcast_to(_f(v), shape).reshape(-1)[np.atleast_1d(idx).reshape(-1).astype(np.intp)]

    def loop(users, idx):
        idx = np.atleast_1d(idx).reshape(-1).astype(np.intp)
        m = model if one else model.rows(idx)
        p = PrefillStage(*(sub(getattr(prefill, f), idx) for f in ("tokens", "ttft_s", "gpu_s", "compute_s")))
        return closed_loop(m, p, sub(a, idx), sub(mem.batch_running, idx), sub(ceiling, idx), users, sub(z, idx),
                           clustering=sub(k_share, idx), request_latency_s=sub(delay, idx))

    def worst(users, idx):
        point = loop(np.maximum(users, 1e-9), idx)  # at 0 users: the limit of a lone user's latencies
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.fmax(point.tpot_s / sub(t_slo, idx), point.ttft_s / sub(d_slo, idx))

    # Users at the ceiling with nobody waiting for a slot: the response time law at X_c (many users: others ~ 1,
    # about the running batch of them in step with each other where they cluster).
    at_ceiling = latencies_at_rates(model, prefill, a, mem.batch_running, ceiling, ceiling)
    with np.errstate(invalid="ignore"):
        clustered = k_share * np.maximum(mem.batch_running - 1.0, 0.0)
        ttft_c = closed_loop_engine_ttft_s(ceiling, prefill.ttft_s, prefill.compute_s, at_ceiling.step_s, a,
                                           at_ceiling.tpot_s, clustered, z, delay)
        top = select(ceiling > 0, ceiling * (ttft_c + delay + (a - 1.0) * at_ceiling.tpot_s + z), 0.0)
    target = select(np.isfinite(t_slo) | np.isfinite(d_slo), 1.0, np.inf)
    users = largest_rate_meeting(worst, np.broadcast_to(target, shape), np.broadcast_to(top, shape), (rows,),
                                 ratio=False)
    point = loop(users.reshape(-1), rows.reshape(-1))
    return users, ClosedLoopPoint(*(np.reshape(getattr(point, f.name), shape) for f in fields(ClosedLoopPoint)))


def ttft_at_rates_s(model: StepModel, prefill_compute_s: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike,
                    output_tokens: ArrayLike, rates: ArrayLike, pieces: tuple | None = None,
                    dense_tpot_s: ArrayLike | None = None, with_step: bool = False,
                    prefill_gpu_s: ArrayLike | None = None):
    """TTFT at arrival rates λ [s]: ``slo.ttft_at_rate_s`` with the decode step at each load from the dense pieces.

    The one composition ``analyse`` (``ttft_at_goodput_s``, ``ttft_at_load_s``), its TTFT solve
    (``slo.max_rate_for_ttft_rps``), the mix and the load curves share: the prompt waits for its own pass
    (``prefill_s``) while the decode step is the one at the load's batch, ``s = TPOT(λ) (1 - λ t_gpu) =
    t_step(λ A TPOT)``, TPOT with the GPU time a prompt costs the others (``prefill_gpu_s``, default
    ``prefill_s``: the same without batched prefill), ``prefill_compute_s`` the arithmetic c a prompt adds to a
    batched pass (``PrefillStage.compute_s``). ``pieces`` and ``dense_tpot_s`` (the pieces' TPOT at
    ``rates`` with ``prefill_gpu_s``), when given, save computing them again.
    ``with_step``: return ``(TTFT, decode step at each load)`` [s, s].
    """
    lam = np.asarray(rates, dtype=float)
    gpu_s = prefill_s if prefill_gpu_s is None else prefill_gpu_s
    if dense_tpot_s is None:
        step = slo.decode_step_at_rate_s(lam, gpu_s, output_tokens, pieces or model.pieces())
    else:
        step = slo.decode_step_from_tpot_s(lam, gpu_s, dense_tpot_s)
    ttft = slo.ttft_at_rate_s(lam, prefill_s, ceiling_rps, prefill_compute_s, step, output_tokens)
    return (ttft, step) if with_step else ttft


#: Labels of the text results, indexed by the integer codes ``analyse`` computes (faster than text arrays).
GOODPUT_LIMITS = np.array(["nothing_fits", "capacity", "tpot", "ttft"])
DECODE_BOUNDS = np.array(["memory", "compute"])
BATCH_LIMITS = np.array(["kv_memory", "max_num_seqs"])
#: The text results and their labels.
LABELS: dict[str, np.ndarray] = {"goodput_limit": GOODPUT_LIMITS, "decode_bound": DECODE_BOUNDS,
                                 "batch_limit": BATCH_LIMITS}


def analyse(inputs: Mapping[str, ArrayLike], text: bool = True, intermediates: bool = False,
            trace: dict[str, SolveTrace] | None = None) -> dict[str, np.ndarray]:
    """Evaluate the analytic model on flat inputs (see ``INPUTS``); returns every ``RESULTS`` key as an array.

    Dense rows take the closed forms; the MoE rows' TPOT solves (a weight read concave in the batch) run on
    those rows alone, compacted, written over their closed-form values, so a table mixing both runs in one
    pass (with ``intermediates``, which runs the row solves on dense rows too, the two kinds are evaluated
    apart and put back in order); each row's values are the same as evaluating it alone. With ``text=False`` the text
    results (``LABELS``) come as integer codes into their label arrays (cheaper for a million rows).
    ``intermediates``: also every ``INTERMEDIATES`` key. ``trace`` (a dict, one row only): filled with every
    root solve's ``solve.SolveTrace`` under its ``solver_*`` name, the values at each point included
    (``SOLVE_COLUMNS``), for a renderer that shows the iterations.
    """
    x = complete_inputs(inputs)
    if trace is not None:
        if any(v.size != 1 for v in x.values()):
            raise ValueError("analyse(trace=...) traces one row; give scalar inputs")
        x = {k: v.reshape(()) for k, v in x.items()}
    moe = memory.is_moe(x["experts"], x["experts_per_token"])
    shape = np.broadcast_shapes(*(v.shape for v in x.values()))
    if moe.ndim == 0 or ((not moe.any() or moe.all()) and shape == moe.shape):
        values = _analyse(x, bool(moe.any()), intermediates or trace is not None, trace)
    elif not intermediates:
        flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in x.items()}
        rows = np.flatnonzero(np.broadcast_to(moe, shape).reshape(-1))
        values = {key: np.broadcast_to(v, (flat["layers"].size,)).reshape(shape)
                  for key, v in _analyse(flat, rows).items()}
    else:
        moe = np.broadcast_to(moe, shape).reshape(-1)
        flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in x.items()}
        groups = [np.flatnonzero(~moe), np.flatnonzero(moe)]
        parts = [(_analyse({k: v[rows] for k, v in flat.items()}, bool(i), intermediates), rows)
                 for i, rows in enumerate(groups) if rows.size]
        order = np.empty(moe.size, dtype=np.intp)
        order[np.concatenate([rows for _, rows in parts])] = np.arange(moe.size)
        values = {key: np.concatenate([np.broadcast_to(r[key], rows.shape) for r, rows in parts])[order].reshape(
            shape) for key in parts[0][0]}
    if text:
        for key, labels in LABELS.items():
            values[key] = labels[values[key]]
    return values


def _analyse(x: dict[str, np.ndarray], moe: bool | np.ndarray, intermediates: bool = False,
             trace: dict[str, SolveTrace] | None = None) -> dict[str, np.ndarray]:
    """``analyse`` on rows that are all dense (``moe`` False), all MoE (True), or 1-D rows of which the MoE ones
    are the indices ``moe``: their TPOT solves run on them alone (model and inputs compacted) and are written
    over the closed form the other rows keep."""
    mixed = isinstance(moe, np.ndarray)
    every = not mixed and bool(moe)
    traces = {} if trace is None else {name: trace.setdefault(name, SolveTrace()) for name in SOLVES}
    # The request latency L is a pure delay on every TTFT (``delayed_ttft``): the engine's TTFT must keep D - L.
    delay = x["request_latency_s"]
    x = {**x, "ttft_slo_s": x["ttft_slo_s"] - delay}
    tp, pp = x["gpu_count"], x["pipeline_parallel"]
    bs, window, local = x["block_size"], x["sliding_window"], x["local_layer_fraction"]
    a_tokens = x["output_tokens"]
    tokens = x["prompt_tokens"] + a_tokens
    context = x["prompt_tokens"] + a_tokens / 2.0
    model, kv_gpu = step_model(x, context)

    kv = memory.cached_kv_bytes_per_token(x["layers"], x["kv_heads"], x["head_dim"], x["kv_bytes_per_value"],
                                          x["kv_latent_dim"])
    mem = memory_stage(x, kv_gpu, tokens)
    w_gpu, pool, blocks, batch = mem.weight_bytes_per_gpu, mem.pool_bytes, mem.pool_blocks, mem.batch_max
    shared_count, shared = mem.shared_blocks, mem.max_requests_shared_prefix

    prefill = prefill_stage(model, x, x["prompt_tokens"], shared_count)
    # TTFT waits for the prompt's own pass; the others pay its GPU time (its share of a batched pass, engines).
    prefill_tokens, t_prefill, c_prefill = prefill.tokens, prefill.ttft_s, prefill.compute_s
    t_prefill_gpu = prefill.gpu_s
    read = model.weights_read(batch)
    t_mem, t_comp, t_step = model.decode_terms(batch, read)
    ceiling = roofline.ceiling_rps(t_prefill_gpu, t_step, batch, a_tokens)
    share = roofline.decode_share(t_prefill_gpu, t_step, batch, a_tokens)
    tpot_ceiling = roofline.tpot_at_ceiling_s(t_step, share)
    single = roofline.single_stream_tokens_per_s(x["bandwidth"],
                                                 roofline.curve_amount(model.weights_read(1.0), model.half_bytes))

    pieces = model.pieces()
    # The row solves run for dense rows too where intermediates are asked for (the workbook shows them).
    rows = every or intermediates
    rate_rows = (slo.max_rate_for_tpot_rows(model.row_steps()[0], x["tpot_slo_s"], t_prefill_gpu, a_tokens, ceiling,
                                            trace=traces.get("solver_rate_tpot_rps"), step_args=model.row_steps()[1])
                 if rows else None)
    rate_tpot = rate_rows if every else slo.max_rate_for_tpot_rps(x["tpot_slo_s"], t_prefill_gpu, a_tokens, pieces)
    if mixed:
        n = rate_tpot.shape[0]
        sub = model.rows(moe)
        sub_pieces = sub.pieces()

        def pick(a: ArrayLike) -> np.ndarray:
            return np.broadcast_to(_f(a), (n,))[moe]

        rate_tpot = np.array(rate_tpot)
        rate_tpot[moe] = slo.max_rate_for_tpot_rows(sub.row_steps()[0], pick(x["tpot_slo_s"]), pick(t_prefill_gpu),
                                                    pick(a_tokens), pick(ceiling), step_args=sub.row_steps()[1])
    rate = select(x["arrival_rate"] > 0, x["arrival_rate"], np.nan)
    rate_ttft = slo.max_rate_for_ttft_rps(x["ttft_slo_s"], t_prefill, ceiling, c_prefill, a_tokens, pieces,
                                          trace=traces.get("solver_rate_ttft_rps"), prefill_gpu_s=t_prefill_gpu)
    goodput = slo.goodput_rps(ceiling, rate_tpot, rate_ttft)

    def tpot_rows(lam: np.ndarray, name: str) -> np.ndarray:
        return tpot_at_rates_s(model, pieces, t_prefill_gpu, a_tokens, batch, lam, True, traces.get(name))

    def ttft_at(lam: np.ndarray, tpot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ttft_at_rates_s(model, c_prefill, t_prefill, ceiling, a_tokens, lam, pieces,
                               None if every else tpot, with_step=True, prefill_gpu_s=t_prefill_gpu)

    rows_goodput = tpot_rows(goodput, "solver_tpot_at_goodput_s") if rows else None
    rows_load = tpot_rows(rate, "solver_tpot_at_load_s") if rows else None
    fixed_goodput = rows_goodput if every else slo.tpot_at_rate_s(goodput, t_prefill_gpu, a_tokens, pieces)
    tpot_load = rows_load if every else slo.tpot_at_rate_s(rate, t_prefill_gpu, a_tokens, pieces)
    # Every row's TTFT step comes from the dense pieces' TPOT (MoE rows too, as when evaluated alone): in a mixed
    # table that is the closed form above, before the MoE rows' own TPOT is written over it.
    (ttft_below, step_fixed), (ttft_load, step_load) = ttft_at(goodput, fixed_goodput), ttft_at(rate, tpot_load)
    if mixed:
        def moe_tpot(dense: np.ndarray, lam: np.ndarray) -> np.ndarray:
            out = np.array(np.broadcast_to(dense, (n,)))
            out[moe] = tpot_at_rates_s(sub, sub_pieces, pick(t_prefill_gpu), pick(a_tokens), pick(batch), pick(lam),
                                       True)
            return out

        fixed_goodput, tpot_load = moe_tpot(fixed_goodput, goodput), moe_tpot(tpot_load, rate)
    # At the ceiling (goodput = ceiling) TPOT and TTFT are their limits from below (at_ceiling, docs/model.md).
    goodput_at_ceiling = goodput >= ceiling * (1 - 1e-12)
    limit = ceiling_limit(goodput, ceiling)
    tpot_goodput, step_goodput, ttft_goodput = at_ceiling(limit, goodput, fixed_goodput, step_fixed, ttft_below,
                                                          tpot_ceiling, prefill, a_tokens)
    in_flight = select(limit & (tpot_goodput >= tpot_ceiling), batch,
                         slo.in_flight(goodput, a_tokens, tpot_goodput))
    # The load the same way (``latencies_at_rates``): at the ceiling the limits from below, past it no bound.
    with np.errstate(invalid="ignore"):
        tpot_load, step_load, ttft_load = at_ceiling(ceiling_limit(rate, ceiling), rate, tpot_load, step_load,
                                                     ttft_load, tpot_ceiling, prefill, a_tokens)
        tpot_load = select(rate > ceiling, np.inf, tpot_load)
    gpus = replica_gpus(x)
    price_replica = x["price_per_hour"] * gpus

    closed_ceiling = select(mem.batch_running > batch, closed_loop_ceiling_rps(model, prefill, mem.batch_running,
                                                                               a_tokens), ceiling)
    closed = _closed_loop_results(model, prefill, x, mem.batch_running, closed_ceiling,
                                  traces.get("solver_closed_loop_rps"))
    chunk_trace = None if trace is None else {}
    options, ch, dis = _options(x, pieces, batch, t_step, t_prefill, prefill_tokens, kv, ceiling, goodput, gpus, rate,
                                chunk_trace)
    with np.errstate(invalid="ignore", divide="ignore"):
        load_fraction = select(ceiling > 0, rate / ceiling, np.inf)
        tokens_ceiling = ceiling * a_tokens
        # Below the ceiling the goodput is the smaller promise bound, so that promise binds.
        limit = np.select([batch <= 0, goodput_at_ceiling, rate_tpot <= rate_ttft], [0, 1, 2], 3)
        values = {
            "kv_bytes_per_token": kv,
            "pool_bytes": pool,
            "pool_blocks": blocks,
            "blocks_per_request": mem.blocks_per_request,
            "max_requests_contiguous": mem.max_requests_contiguous,
            "max_requests_paged": mem.max_requests_paged,
            "max_requests_shared_prefix": shared,
            "decode_memory_s": t_mem,
            "decode_compute_s": t_comp,
            "decode_step_s": t_step,
            "prefill_s": t_prefill,
            "ceiling_rps": ceiling,
            "decode_share": share,
            "tpot_at_ceiling_s": tpot_ceiling,
            "goodput_rps": goodput,
            "goodput_in_flight": in_flight,
            "single_stream_tokens_per_s": single,
            "cost_per_million_tokens": slo.cost_per_million_tokens(price_replica, 1.0, goodput, a_tokens),
            "weight_bytes_per_gpu": w_gpu,
            "kv_bytes_per_token_per_gpu": kv_gpu,
            "params_per_gpu": x["active_params"] / gpus,
            "gpus_per_replica": gpus,
            "allreduce_per_step_s": model.comm_fixed + batch * model.comm_per_token,
            "weight_bytes_read_per_step": read * model.tensor_parallel,
            "goodput_per_gpu_rps": goodput / gpus,
            "fleet_goodput_rps": goodput * x["replicas"],
            "batch_max": batch,
            "batch_running": mem.batch_running,
            "context_tokens": context,
            "prefill_tokens": prefill_tokens,
            "shared_blocks": shared_count,
            "private_blocks": mem.private_blocks,
            "critical_batch": roofline.critical_batch(w_gpu * pp, model.decode_params_per_gpu,
                                                      x["bandwidth"], x["flops"]),
            "gpu_time_per_request_s": roofline.gpu_time_per_request_s(t_prefill_gpu, t_step, batch, a_tokens),
            "output_tokens_per_s_at_ceiling": tokens_ceiling,
            "batching_gain": tokens_ceiling / single,
            "max_rate_for_tpot_rps": rate_tpot,
            "max_rate_for_ttft_rps": rate_ttft,
            "tpot_at_goodput_s": tpot_goodput,
            "ttft_at_goodput_s": ttft_goodput,
            "capacity_given_up": select(ceiling > 0, 1.0 - goodput / ceiling, 0.0),
            "output_tokens_per_s_at_goodput": goodput * a_tokens,
            "tpot_at_load_s": tpot_load,
            "ttft_at_load_s": ttft_load,
            "load_fraction": load_fraction,
            "cost_per_million_tokens_at_ceiling": slo.cost_per_million_tokens(price_replica, 1.0, ceiling, a_tokens),
            "decode_bound": np.asarray(t_comp > t_mem).astype(np.intp),
            "batch_limit": np.asarray(x["max_num_seqs"] * x["attention_data_parallel"] < shared).astype(np.intp),
            "goodput_limit": limit,
            **closed,
            **options,
            **_power_results(x, gpus, goodput, a_tokens),
        }
        values.update(delayed_ttft(values, delay))
    if not intermediates:
        return values
    ring = roofline.ring_factor(tp, x["hidden_size"])
    (a_mem, m_mem), (a_comp, m_comp) = pieces
    values.update({
        "tokens_per_request": tokens, "stage_layers": memory.stage_layers(x["layers"], pp),
        "moe_model": model.moe,
        "expert_params": memory.expert_params(x["params"], x["active_params"], x["experts"], x["experts_per_token"]),
        "ring_factor": ring, "step_comm_fixed_s": model.comm_fixed, "step_comm_per_token_s": model.comm_per_token,
        "step_overhead_total_s": model.overhead,
        "shared_blocks_held": memory.shared_blocks_held(x["shared_prefix_tokens"], bs, window, local),
        "context_per_layer_tokens": model.context,
        "step_intercept_memory_s": a_mem, "step_slope_memory_s": m_mem,
        "step_intercept_compute_s": a_comp, "step_slope_compute_s": m_comp,
        "goodput_at_ceiling": goodput_at_ceiling, "prefill_compute_s": c_prefill,
        "tpot_fixed_point_at_goodput_s": fixed_goodput, "ttft_step_fixed_at_goodput_s": step_fixed,
        "ttft_step_at_goodput_s": step_goodput, "ttft_step_at_load_s": step_load,
        "chunk_batch_cap": ch["batch_cap"], "chunk_batch_ceiling": ch["batch_ceiling"],
        "chunk_plain_ceiling_s": ch["plain_ceiling_s"], "chunk_extra_ceiling_s": ch["extra_ceiling_s"],
        "chunk_plain_goodput_s": ch["plain_goodput_s"], "chunk_extra_goodput_s": ch["extra_goodput_s"],
        "chunk_service_goodput_s": ch["service_goodput_s"], "chunk_load_known": ch["load_known"],
        "chunk_plain_load_s": ch["plain_load_s"], "chunk_extra_load_s": ch["extra_load_s"],
        "chunk_service_load_s": ch["service_load_s"], "chunk_rate_load_rps": ch["rate_load_rps"],
        "disagg_decode_ceiling_rps": dis["decode_ceiling_rps"], "disagg_tpot_bound_rps": dis["tpot_bound_rps"],
        "disagg_tpot_fixed_point_s": dis["tpot_fixed_point_s"],
        "solver_rate_ttft_rps": rate_ttft, "solver_rate_tpot_rps": rate_rows,
        "solver_tpot_at_goodput_s": rows_goodput, "solver_tpot_at_load_s": rows_load,
        "solver_chunk_batch_tpot": ch["batch_tpot"], "solver_chunk_batch_goodput": ch["batch_goodput"],
        "solver_chunk_batch_load": ch["batch_load"],
    })
    if trace is not None:
        for key, name in (("batch_tpot", "solver_chunk_batch_tpot"), ("batch_goodput", "solver_chunk_batch_goodput"),
                          ("batch_load", "solver_chunk_batch_load")):
            traces[name].__dict__.update(chunk_trace[key].__dict__)
        _trace_columns(traces, model, pieces, x, t_prefill, c_prefill, prefill_tokens, goodput, rate, t_prefill_gpu)
    return values


#: The TTFT results composed from the engine's passes alone (``delayed_ttft`` adds the request latency); the closed
#: loop's ``closed_loop_ttft_s`` carries it already (``closed_loop``: it lengthens every cycle).
ENGINE_TTFT_RESULTS = ("ttft_at_goodput_s", "ttft_at_load_s", "chunked_ttft_at_goodput_s", "chunked_ttft_at_load_s",
                       "disagg_ttft_at_goodput_s", "disagg_ttft_at_load_s")


def delayed_ttft_s(engine_ttft_s: ArrayLike, request_latency_s: ArrayLike) -> np.ndarray:
    """The TTFT a user sees: the engine's TTFT plus the request latency L [s], ``TTFT = L + TTFT_engine``.

    L is the request's time outside the engine's passes (HTTP front end, tokenisation, hand-off to the scheduler,
    detokenisation and streaming of the first token; ``engines.SILICON_REQUEST_LATENCY_S``): a pure delay, so it
    moves no queue and no GPU time, and a TTFT promise D holds where the engine's TTFT keeps ``D - L`` (``analyse``
    solves so). Example: a 109.7 ms prefill behind 80 ms of latency is a 189.7 ms first token.
    """
    return _f(engine_ttft_s) + _f(request_latency_s)


def delayed_ttft(values: Mapping[str, ArrayLike], request_latency_s: ArrayLike) -> dict[str, np.ndarray]:
    """``delayed_ttft_s`` of each ``ENGINE_TTFT_RESULTS`` key in ``values`` (those keys only)."""
    return {key: delayed_ttft_s(values[key], request_latency_s) for key in ENGINE_TTFT_RESULTS if key in values}


def _power_results(x: Mapping[str, np.ndarray], gpus: np.ndarray, goodput: np.ndarray,
                   output_tokens: np.ndarray) -> dict[str, np.ndarray]:
    """The power results (``formulas.power``): one replica's full-load power, the energy and electricity cost of a
    million output tokens at the goodput, and the electricity cost per hour; NaN where the board power (or the
    price) is not known."""
    watts = power.replica_power_watts(x["board_power_watts"], gpus, x["pue"])
    with np.errstate(invalid="ignore"):
        kwh = power.energy_per_million_tokens_kwh(watts, goodput, output_tokens)
        kwh = select(np.isnan(watts), np.nan, kwh)
        return {"replica_power_watts": watts, "energy_per_million_tokens_kwh": kwh,
                "energy_cost_per_million_tokens": power.energy_cost(kwh, x["energy_price_per_kwh"]),
                "energy_cost_per_hour": power.energy_cost_per_hour(watts, x["energy_price_per_kwh"])}


def _closed_loop_results(model: StepModel, prefill: PrefillStage, x: Mapping[str, np.ndarray], batch: np.ndarray,
                         ceiling: np.ndarray, trace: SolveTrace | None = None) -> dict[str, np.ndarray]:
    """The ``closed_loop_*`` results (``closed_loop`` at ``x["concurrency"]`` users and ``x["think_time_s"]``);
    NaN where no concurrency is set (none computed when no row sets one)."""
    users = x["concurrency"]
    if not np.any(users > 0):
        nan = np.full(np.broadcast_shapes(*(np.shape(v) for v in x.values())), np.nan)
        return {key: nan for key in CLOSED_LOOP_RESULTS}
    point = closed_loop(model, prefill, x["output_tokens"], batch, ceiling, users, x["think_time_s"], trace=trace,
                        clustering=x["clustering"], request_latency_s=x["request_latency_s"])
    known = users > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        values = {
            "closed_loop_throughput_rps": point.throughput_rps,
            "closed_loop_tokens_per_s": point.throughput_rps * x["output_tokens"],
            "closed_loop_tpot_s": point.tpot_s,
            "closed_loop_ttft_s": point.ttft_s,
            "closed_loop_batch": point.batch,
            "closed_loop_slot_wait_s": point.slot_wait_s,
            "closed_loop_load_fraction": select(ceiling > 0, point.throughput_rps / ceiling, np.nan),
        }
    return {key: select(known, v, np.nan) for key, v in values.items()}


def _options(x: Mapping[str, np.ndarray], pieces: tuple, batch: np.ndarray, t_step: np.ndarray,
             t_prefill: np.ndarray, prefill_tokens: np.ndarray, kv: np.ndarray, ceiling: np.ndarray,
             goodput: np.ndarray, gpus: np.ndarray, rate: np.ndarray, trace: dict | None = None
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Chunked prefill and prefill/decode pools on the same GPU, model and workload (``options``, docs/fleet.md):
    (results, ``options.chunked``'s values, ``options.disaggregated``'s values)."""
    ch = options.chunked(pieces, batch, x["output_tokens"], prefill_tokens, x["max_batched_tokens"],
                         x["tpot_slo_s"], x["ttft_slo_s"], rate, trace)
    dis = options.disaggregated(pieces, batch, t_step, t_prefill, prefill_tokens, x["output_tokens"], kv,
                                x["kv_transfer_bandwidth"], gpus, x["tpot_slo_s"], x["ttft_slo_s"], rate)
    gap = ceiling - goodput
    with np.errstate(invalid="ignore", divide="ignore"):
        results = {
            "chunked_ceiling_rps": ch["ceiling_rps"],
            "chunked_goodput_rps": ch["goodput_rps"],
            "chunked_tpot_at_goodput_s": ch["tpot_at_goodput_s"],
            "chunked_ttft_at_goodput_s": ch["ttft_at_goodput_s"],
            "chunked_tpot_at_load_s": ch["tpot_at_load_s"],
            "chunked_ttft_at_load_s": ch["ttft_at_load_s"],
            "chunked_win_back": select(gap > 0, (ch["goodput_rps"] - goodput) / gap, np.nan),
            "disagg_decode_rps": dis["decode_rps"],
            "disagg_prefill_rps": dis["prefill_rps"],
            "disagg_prefill_share": dis["prefill_share"],
            "disagg_goodput_per_gpu_rps": dis["goodput_per_gpu_rps"],
            "disagg_tpot_at_goodput_s": dis["tpot_at_goodput_s"],
            "disagg_ttft_at_goodput_s": dis["ttft_at_goodput_s"],
            "disagg_tpot_at_load_s": dis["tpot_at_load_s"],
            "disagg_ttft_at_load_s": dis["ttft_at_load_s"],
            "kv_transfer_s": dis["kv_transfer_s"],
            "disagg_win_back": select(gap > 0, (dis["goodput_per_gpu_rps"] * gpus - goodput) / gap, np.nan),
        }
    return results, ch, dis


def tpot_at_rates_s(model: StepModel, pieces: tuple, prefill_s: ArrayLike, output_tokens: ArrayLike,
                    batch_max: ArrayLike, rates: ArrayLike, moe: bool | None = None,
                    trace: SolveTrace | None = None) -> np.ndarray:
    """TPOT at arrival rates λ, the smallest fixed point of ``TPOT = t_step(λ A TPOT) / (1 - λ t_p)`` [s].

    Dense models in closed form from the pieces (``slo.tpot_at_rate_s``); MoE row by row on the step itself
    (``slo.tpot_at_rate_rows``): below the ceiling the batch fits, so TPOT is at most ``B_max / (λ A)``, and a
    fixed point exists where one lies below that (10^4 s at least, 10^12 s at most: beyond, it is no answer). The
    search goes no higher than the pieces' closed form (every expert read: a step at least the MoE one, so a
    fixed point at least its smallest). ``moe``: whether to solve row by row (default: where any row is MoE);
    ``trace``: the row solve's ``solve.SolveTrace``.
    """
    lam = _f(rates)
    if not (bool(np.any(model.moe)) if moe is None else moe):
        return slo.tpot_at_rate_s(lam, prefill_s, output_tokens, pieces)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        longest = select(lam > 0, np.clip(_f(batch_max) / (lam * _f(output_tokens)), LONGEST_TPOT_S, 1e12),
                           LONGEST_TPOT_S)
    # One replica at many rates (the load curves): its one row of args broadcasts to every rate.
        upper = slo.tpot_at_rate_s(lam, prefill_s, output_tokens, pieces)
    step, args = model.row_steps()
    return slo.tpot_at_rate_rows(step, lam, prefill_s, output_tokens, longest, trace=trace, step_args=args,
                                 upper_s=upper)


#: Least upper end of the MoE TPOT fixed-point search [s].
LONGEST_TPOT_S = 1e4


def _trace_columns(traces: dict[str, SolveTrace], model: StepModel, pieces: tuple, x: Mapping[str, np.ndarray],
                   prefill_s: np.ndarray, prefill_compute_s: np.ndarray, prefill_tokens: np.ndarray,
                   goodput: np.ndarray, rate: np.ndarray, prefill_gpu_s: np.ndarray) -> None:
    """Add ``SOLVE_COLUMNS`` to every point of the traced solves: the model's values at each point ``x``."""
    a_tokens, tpot_slo = x["output_tokens"], x["tpot_slo_s"]
    (a_mem, m_mem), (a_comp, m_comp) = pieces

    def ttft_columns(lam: np.ndarray) -> dict[str, np.ndarray]:
        d_mem, d_comp = slo.tpot_denominators(lam, prefill_gpu_s, a_tokens, pieces)
        step = slo.decode_step_at_rate_s(lam, prefill_gpu_s, a_tokens, pieces)
        return {"d_mem": d_mem, "d_comp": d_comp, "decode step": step,
                "TTFT": slo.ttft_queue_s(lam, prefill_s, prefill_compute_s, step, a_tokens)}

    def step_at(load: np.ndarray) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
        return lambda s: {"decode step": model.step_s(load * a_tokens * s)}

    def chunk_columns(b: np.ndarray) -> dict[str, np.ndarray]:
        t = options.chunk_iteration(b, prefill_tokens, x["max_batched_tokens"], a_mem, m_mem, a_comp, m_comp)
        lam = options.chunked_rate_rps(b, a_tokens, t["plain"], t["extra"])
        tpot = options.chunked_tpot_s(b, a_tokens, t["plain"], t["extra"])
        return {**{k: t[k] for k in ("plain", "chunk", "carrying", "extra", "service")}, "rate": lam, "tpot": tpot,
                "ttft": options.chunked_ttft_s(lam, tpot, t["service"])}

    columns = {"solver_rate_ttft_rps": ttft_columns,
               "solver_rate_tpot_rps": lambda lam: step_at(lam)(select(np.isfinite(tpot_slo), tpot_slo, 1.0)),
               "solver_tpot_at_goodput_s": step_at(goodput), "solver_tpot_at_load_s": step_at(rate),
               **{name: chunk_columns for name in SOLVES if name.startswith("solver_chunk")}}
    for name, trace in traces.items():
        points = [*trace.ends.values(), *trace.steps]
        if not points:
            continue
        with np.errstate(all="ignore"):
            values = columns[name](np.array([p["x"] for p in points]))
        for i, point in enumerate(points):
            point.update({k: float(np.broadcast_to(v, (len(points),))[i]) for k, v in values.items()})

