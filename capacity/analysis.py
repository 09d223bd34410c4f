"""The whole analytic model as one composition of the formula functions.

``analyse(inputs)`` takes a mapping of flat inputs in base units (scalars or numpy
arrays that broadcast together) and returns every result as an array. The scalar
path (one Scenario) and the sweep path (a DataFrame of scenarios) run this same
code. Input and result names are the contract of SPEC.md; their units live in
``INPUTS`` and ``RESULTS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
}

#: Values of the optional inputs when a caller leaves them out.
INPUT_DEFAULTS: dict[str, float] = {
    "kv_latent_dim": 0.0, "sliding_window": np.inf, "local_layer_fraction": 0.0, "active_params": np.nan,
    "experts": 0.0, "experts_per_token": 0.0, "pipeline_parallel": 1.0, "hidden_size": 0.0,
    "interconnect_bandwidth": np.inf, "allreduce_latency_s": 0.0, "reserved_bytes": 0.0, "replicas": 1.0,
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
    "params_per_gpu": ("params", "active parameters each GPU multiplies per token"),
    "gpus_per_replica": ("GPUs", "tensor x pipeline parallel GPUs in one replica"),
    "allreduce_per_step_s": ("s", "tensor-parallel all-reduce time in one decode step at the largest batch"),
    "weight_bytes_read_per_step": ("B", "weight bytes one decode step at the largest batch reads (MoE: experts hit)"),
    "goodput_per_gpu_rps": ("requests/s", "goodput per GPU"),
    "fleet_goodput_rps": ("requests/s", "goodput of all data-parallel replicas"),
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


#: Bytes per activation value in the tensor-parallel all-reduce (bf16 activations).
ACTIVATION_BYTES = 2.0


def _inputs(inputs: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    x = {name: np.asarray(inputs[name] if name in inputs else INPUT_DEFAULTS[name], dtype=float) for name in INPUTS}
    x["active_params"] = np.where(np.isnan(x["active_params"]), x["params"], x["active_params"])
    return x


@dataclass(frozen=True)
class StepModel:
    """Per-GPU quantities of one replica, and the step times built from them (arrays broadcast).

    Decode: each sequence's token passes every pipeline stage, so one step reads W/tp of weights
    (MoE: the experts the batch touches), the KV of its stage's layers for every sequence, does
    2 N_a / (tp pp) FLOPs per sequence, two all-reduces per layer, and pays the overhead per stage.
    """

    weight_bytes: np.ndarray      # whole model [B]
    params: np.ndarray            # total [-]
    active_params: np.ndarray     # per token [-]
    experts: np.ndarray
    experts_per_token: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    kv_gpu: np.ndarray            # KV per token held by one GPU [B]
    context: np.ndarray           # cached tokens per layer read per sequence (window applied) [tokens]
    bandwidth: np.ndarray
    flops: np.ndarray
    overhead: np.ndarray          # per step, all stages [s]
    comm_fixed: np.ndarray        # all-reduce latency per step [s]
    comm_per_token: np.ndarray    # all-reduce time per token in the step [s]

    @property
    def moe(self) -> np.ndarray:
        return (self.experts > 0) & (self.experts > self.experts_per_token)

    def weights_read(self, tokens: ArrayLike) -> np.ndarray:
        """Weight bytes per GPU-group read by a pass over ``tokens`` tokens [B]."""
        return memory.weight_bytes_read(self.weight_bytes, self.params, self.active_params, self.experts,
                                        self.experts_per_token, tokens) / self.tp

    def decode_terms(self, batch: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(memory term, compute term, step time) of a decode step over ``batch`` sequences [s]."""
        b = np.asarray(batch, float)
        t_mem = roofline.decode_memory_s(self.weights_read(b), b, self.context, self.kv_gpu, self.bandwidth)
        t_comp = roofline.decode_compute_s(b, self.active_params / (self.tp * self.pp), self.flops)
        comm = self.comm_fixed + b * self.comm_per_token
        return t_mem, t_comp, np.maximum(t_mem, t_comp) + comm + self.overhead

    def step_s(self, batch: ArrayLike) -> np.ndarray:
        return self.decode_terms(batch)[2]

    def prefill_s(self, prompt_tokens: ArrayLike) -> np.ndarray:
        """A prompt of P tokens passes the stages in turn: ``max(W_read(P)/BW, P 2 N_a / (tp F)) + comm + o``."""
        p = np.asarray(prompt_tokens, float)
        base = roofline.prefill_s(self.weights_read(p), p, self.active_params / self.tp, self.bandwidth, self.flops,
                                  self.overhead)
        return base + self.comm_fixed + p * self.comm_per_token

    def pieces(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Intercept [s] and slope [s per sequence] of the two linear pieces of a dense model's step time."""
        fixed = self.overhead + self.comm_fixed
        mem = (self.weight_bytes / self.tp / self.bandwidth + fixed,
               self.context * self.kv_gpu / self.bandwidth + self.comm_per_token)
        comp = (fixed + 0.0 * mem[0], self.active_params / (self.tp * self.pp) * 2.0 / self.flops
                + self.comm_per_token + 0.0 * mem[1])
        return mem, comp


def step_model(x: Mapping[str, np.ndarray], context_tokens: np.ndarray) -> tuple[StepModel, np.ndarray]:
    """The replica's StepModel and the KV bytes per token one GPU holds, from flat inputs."""
    tp, pp = x["gpu_count"], x["pipeline_parallel"]
    stage_layers = np.ceil(x["layers"] / pp)
    mla = x["kv_latent_dim"] > 0
    # Tensor parallel splits KV heads over GPUs (a replica each when heads < GPUs); an MLA latent is replicated.
    kv_gpu = np.where(mla, memory.mla_kv_bytes_per_token(stage_layers, x["kv_latent_dim"], x["kv_bytes_per_value"]),
                      memory.kv_bytes_per_token(stage_layers, np.ceil(x["kv_heads"] / tp), x["head_dim"],
                                                x["kv_bytes_per_value"]))
    ring = np.where((tp > 1) & (x["hidden_size"] > 0), 2.0 * (tp - 1) / tp, 0.0)
    allreduces = 2.0 * x["layers"]  # after attention and after the MLP, in every layer
    with np.errstate(invalid="ignore"):
        per_token = np.where(ring > 0, allreduces * ring * x["hidden_size"] * ACTIVATION_BYTES
                             / x["interconnect_bandwidth"], 0.0)
    model = StepModel(
        weight_bytes=x["weight_bytes"], params=x["params"], active_params=x["active_params"], experts=x["experts"],
        experts_per_token=x["experts_per_token"], tp=tp, pp=pp, kv_gpu=kv_gpu,
        context=memory.windowed_tokens(context_tokens, x["sliding_window"], x["local_layer_fraction"]),
        bandwidth=x["bandwidth"], flops=x["flops"], overhead=x["step_overhead_s"] * pp,
        comm_fixed=np.where(ring > 0, allreduces * x["allreduce_latency_s"], 0.0), comm_per_token=per_token)
    return model, kv_gpu


def analyse(inputs: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """Evaluate the analytic model on flat inputs (see ``INPUTS``); returns every ``RESULTS`` key as an array."""
    x = _inputs(inputs)
    tp, pp = x["gpu_count"], x["pipeline_parallel"]
    bs, window, local = x["block_size"], x["sliding_window"], x["local_layer_fraction"]
    a_tokens = x["output_tokens"]
    tokens = x["prompt_tokens"] + a_tokens
    context = x["prompt_tokens"] + a_tokens / 2.0
    model, kv_gpu = step_model(x, context)

    kv = np.where(x["kv_latent_dim"] > 0,
                  memory.mla_kv_bytes_per_token(x["layers"], x["kv_latent_dim"], x["kv_bytes_per_value"]),
                  memory.kv_bytes_per_token(x["layers"], x["kv_heads"], x["head_dim"], x["kv_bytes_per_value"]))
    w_gpu = x["weight_bytes"] / (tp * pp)
    pool = memory.pool_bytes(x["gpu_memory_bytes"], x["memory_utilization"], w_gpu + x["reserved_bytes"])
    blocks = memory.pool_blocks(pool, bs, kv_gpu)
    per_request = memory.windowed_blocks(tokens, bs, window, local)
    contiguous = memory.max_requests_contiguous(pool, memory.windowed_tokens(x["max_model_len"], window, local),
                                                kv_gpu)
    paged = memory.floor_count(blocks / per_request)
    # With local layers, a request's private tokens beyond the window are not held by those layers.
    shared_count = memory.shared_blocks(x["shared_prefix_tokens"], bs)
    private_tokens = tokens - shared_count * bs
    window_blocks = memory.blocks_for(np.minimum(window, 1e18), bs)  # a finite stand-in for "no window"
    shared_held = (1.0 - local) * shared_count + local * np.minimum(shared_count, window_blocks)
    private = memory.windowed_blocks(private_tokens, bs, window, local)
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = np.where(blocks >= shared_held, memory.floor_count((blocks - shared_held) / private), 0.0)
    # Keeping the prefix is optional (an engine evicts unreferenced cached blocks): once local layers have
    # slid past the prefix, holding it would cost blocks and save none, so sharing never fits fewer.
    shared = np.maximum(shared, paged)
    batch = np.minimum(shared, x["max_num_seqs"])

    # A fully cached prompt still computes its last token to produce the first output (as vLLM does).
    prefill_tokens = np.maximum(x["prompt_tokens"] - shared_count * bs, 1.0)
    t_mem, t_comp, t_step = model.decode_terms(batch)
    t_prefill = model.prefill_s(prefill_tokens)
    ceiling = roofline.ceiling_rps(t_prefill, t_step, batch, a_tokens)
    share = roofline.decode_share(t_prefill, t_step, batch, a_tokens)
    single = roofline.single_stream_tokens_per_s(x["bandwidth"], model.weights_read(1.0))

    rate_tpot, tpot_at = _tpot_solvers(model, x["tpot_slo_s"], t_prefill, a_tokens, ceiling)
    rate_ttft = slo.max_rate_for_ttft_rps(x["ttft_slo_s"], t_prefill, ceiling)
    goodput = slo.goodput_rps(ceiling, rate_tpot, rate_ttft)
    tpot_goodput = tpot_at(goodput)
    # At the ceiling the fixed point is exactly B_max; guard the 0/0 of rounding there.
    at_ceiling = goodput >= ceiling * (1 - 1e-12)
    in_flight = np.where(at_ceiling, batch, slo.in_flight(goodput, a_tokens, tpot_goodput))
    tpot_goodput = np.where(at_ceiling & (goodput > 0), roofline.tpot_at_ceiling_s(t_step, share), tpot_goodput)
    gpus = tp * pp
    price_replica = x["price_per_hour"] * gpus

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
            "blocks_per_request": per_request,
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
            "cost_per_million_tokens": slo.cost_per_million_tokens(price_replica, 1.0, goodput, a_tokens),
            "weight_bytes_per_gpu": w_gpu,
            "kv_bytes_per_token_per_gpu": kv_gpu,
            "params_per_gpu": x["active_params"] / gpus,
            "gpus_per_replica": gpus,
            "allreduce_per_step_s": model.comm_fixed + batch * model.comm_per_token,
            "weight_bytes_read_per_step": model.weights_read(batch) * tp,
            "goodput_per_gpu_rps": goodput / gpus,
            "fleet_goodput_rps": goodput * x["replicas"],
            "batch_max": batch,
            "context_tokens": context,
            "prefill_tokens": prefill_tokens,
            "shared_blocks": shared_count,
            "private_blocks": private,
            "critical_batch": roofline.critical_batch(x["weight_bytes"] / tp, x["active_params"] / (tp * pp),
                                                      x["bandwidth"], x["flops"]),
            "gpu_time_per_request_s": roofline.gpu_time_per_request_s(t_prefill, t_step, batch, a_tokens),
            "output_tokens_per_s_at_ceiling": tokens_ceiling,
            "batching_gain": tokens_ceiling / single,
            "max_rate_for_tpot_rps": rate_tpot,
            "max_rate_for_ttft_rps": rate_ttft,
            "tpot_at_goodput_s": tpot_goodput,
            "ttft_at_goodput_s": slo.ttft_at_rate_s(goodput, t_prefill, ceiling),
            "capacity_given_up": np.where(ceiling > 0, 1.0 - goodput / ceiling, 0.0),
            "output_tokens_per_s_at_goodput": goodput * a_tokens,
            "tpot_at_load_s": tpot_at(rate),
            "ttft_at_load_s": slo.ttft_at_rate_s(rate, t_prefill, ceiling),
            "load_fraction": load_fraction,
            "cost_per_million_tokens_at_ceiling": slo.cost_per_million_tokens(price_replica, 1.0, ceiling, a_tokens),
            "decode_bound": np.where(t_comp > t_mem, "compute", "memory"),
            "batch_limit": np.where(x["max_num_seqs"] < shared, "max_num_seqs", "kv_memory"),
            "goodput_limit": goodput_limit,
        }


def _tpot_solvers(model: StepModel, tpot_slo_s: np.ndarray, prefill_s: np.ndarray, output_tokens: np.ndarray,
                  ceiling: np.ndarray):
    """(largest rate meeting the TPOT promise, function rate -> TPOT): closed form for dense models,
    bisection on the monotone conditions where MoE makes the weight read concave in the batch."""
    pieces = model.pieces()
    rate = slo.max_rate_for_tpot_rps(tpot_slo_s, prefill_s, output_tokens, pieces)
    moe = model.moe
    if not np.any(moe):
        return rate, lambda lam: slo.tpot_at_rate_s(lam, prefill_s, output_tokens, pieces)
    general = slo.max_rate_for_tpot_general(model.step_s, tpot_slo_s, prefill_s, output_tokens, ceiling)
    rate = np.where(moe, general, rate)

    def tpot_at(lam):
        closed = slo.tpot_at_rate_s(lam, prefill_s, output_tokens, pieces)
        return np.where(moe, slo.tpot_at_rate_general(model.step_s, lam, prefill_s, output_tokens), closed)

    return rate, tpot_at
