"""The whole analytic model as one composition of the formula functions.

``analyse(inputs)`` takes a mapping of flat inputs in base units (scalars or numpy
arrays that broadcast together) and returns every result as an array. The scalar
path (one Scenario) and the sweep path (a DataFrame of scenarios) run this same
code. Input and result names are the contract of SPEC.md; their units live in
``INPUTS`` and ``RESULTS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from . import engines, memory, options, roofline, slo

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
    # Serving options the analytic model compares (chunked prefill, prefill/decode pools).
    "max_batched_tokens": ("tokens", "token budget of one chunked-prefill iteration (decodes + prompt chunks)"),
    "kv_transfer_bandwidth": ("B/s", "link from a prefill to a decode replica for the KV cache (inf: free)"),
    # Engine profiles (capacity.engines): TensorRT-LLM sizes its pool from the memory free after the weights.
    "kv_free_fraction": ("-", "KV pool = fraction x (memory - weights - reserves) (TensorRT-LLM); 0: memory x "
                              "utilisation - weights - reserves"),
    "batched_prefill": ("-", "1: prompts share prefill passes of max_batched_tokens tokens (engine profiles); 0: one "
                             "pass per prompt"),
}

#: Values of the optional inputs when a caller leaves them out.
INPUT_DEFAULTS: dict[str, float] = {
    "kv_latent_dim": 0.0, "sliding_window": np.inf, "local_layer_fraction": 0.0, "active_params": np.nan,
    "experts": 0.0, "experts_per_token": 0.0, "pipeline_parallel": 1.0, "hidden_size": 0.0,
    "interconnect_bandwidth": np.inf, "allreduce_latency_s": 0.0, "reserved_bytes": 0.0, "replicas": 1.0,
    "max_batched_tokens": 8192.0, "kv_transfer_bandwidth": np.inf, "kv_free_fraction": 0.0,
    "batched_prefill": 0.0,
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
    all_dense: bool = False       # no row is MoE: every pass reads all weights

    @property
    def moe(self) -> np.ndarray:
        return (self.experts > 0) & (self.experts > self.experts_per_token)

    def weights_read(self, tokens: ArrayLike) -> np.ndarray:
        """Weight bytes per GPU-group read by a pass over ``tokens`` tokens [B]."""
        if self.all_dense:
            return self.weight_bytes / self.tp
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

    @cached_property
    def _table(self) -> np.ndarray:
        """Every array field, broadcast together and flattened, one row each (for ``rows``)."""
        arrays = [np.asarray(getattr(self, name), dtype=float) for name in _ARRAY_FIELDS]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        return np.stack([np.broadcast_to(a, shape).reshape(-1) for a in arrays])

    def rows(self, rows: np.ndarray) -> StepModel:
        """The model of some rows (indices into the flattened arrays of all fields broadcast together)."""
        picked = self._table[:, rows]
        return StepModel(**dict(zip(_ARRAY_FIELDS, picked, strict=True)), all_dense=self.all_dense)

    def step_rows(self, batch: ArrayLike, rows: np.ndarray) -> np.ndarray:
        """Step time of rows ``rows`` at batches ``batch`` (one per row) [s]; what the row-wise solvers call."""
        return self.rows(rows).step_s(batch)

    def prefill_s(self, prompt_tokens: ArrayLike) -> np.ndarray:
        """A prompt of P tokens passes the stages in turn: ``max(W_read(P)/BW, P 2 N_a / (tp F)) + comm + o``."""
        p = np.asarray(prompt_tokens, float)
        base = roofline.prefill_s(self.weights_read(p), p, self.active_params / self.tp, self.bandwidth, self.flops,
                                  self.overhead)
        return base + self.comm_fixed + p * self.comm_per_token

    def prefill_compute_s(self, prompt_tokens: ArrayLike) -> np.ndarray:
        """GPU time a prompt adds to a batched prefill pass: ``P (2 N_a / (tp F) + comm per token)`` [s]."""
        return slo.prefill_compute_s(prompt_tokens, self.active_params / self.tp, self.flops, self.comm_per_token)

    def pieces(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Intercept [s] and slope [s per sequence] of the two linear pieces of a dense model's step time."""
        fixed = self.overhead + self.comm_fixed
        mem = (self.weight_bytes / self.tp / self.bandwidth + fixed,
               self.context * self.kv_gpu / self.bandwidth + self.comm_per_token)
        comp = (fixed + 0.0 * mem[0], self.active_params / (self.tp * self.pp) * 2.0 / self.flops
                + self.comm_per_token + 0.0 * mem[1])
        return mem, comp


#: The array fields of ``StepModel``, in order.
_ARRAY_FIELDS = tuple(f.name for f in fields(StepModel) if f.name != "all_dense")


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
        comm_fixed=np.where(ring > 0, allreduces * x["allreduce_latency_s"], 0.0), comm_per_token=per_token,
        all_dense=not np.any((x["experts"] > 0) & (x["experts"] > x["experts_per_token"])))
    return model, kv_gpu


def ttft_at_rates_s(model: StepModel, prefill_tokens: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike,
                    output_tokens: ArrayLike, rates: ArrayLike, pieces: tuple | None = None,
                    dense_tpot_s: ArrayLike | None = None) -> np.ndarray:
    """TTFT at arrival rates λ [s]: ``slo.ttft_at_rate_s`` with the decode step at each load from the dense pieces.

    The one composition ``analyse`` (``ttft_at_goodput_s``, ``ttft_at_load_s``) and the load curves share.
    ``pieces`` and ``dense_tpot_s`` (the pieces' TPOT at ``rates``), when given, save computing them again.
    """
    lam = np.asarray(rates, dtype=float)
    if dense_tpot_s is None:
        step = slo.decode_step_at_rate_s(lam, prefill_s, output_tokens, pieces or model.pieces())
    else:
        step = slo.decode_step_from_tpot_s(lam, prefill_s, dense_tpot_s)
    return slo.ttft_at_rate_s(lam, prefill_s, ceiling_rps, model.prefill_compute_s(prefill_tokens), step,
                              output_tokens)


#: Labels of the text results, indexed by the integer codes ``analyse`` computes (faster than text arrays).
GOODPUT_LIMITS = np.array(["nothing_fits", "capacity", "tpot", "ttft"])
DECODE_BOUNDS = np.array(["memory", "compute"])
BATCH_LIMITS = np.array(["kv_memory", "max_num_seqs"])
#: The text results and their labels.
LABELS: dict[str, np.ndarray] = {"goodput_limit": GOODPUT_LIMITS, "decode_bound": DECODE_BOUNDS,
                                 "batch_limit": BATCH_LIMITS}


def analyse(inputs: Mapping[str, ArrayLike], text: bool = True) -> dict[str, np.ndarray]:
    """Evaluate the analytic model on flat inputs (see ``INPUTS``); returns every ``RESULTS`` key as an array.

    Rows of dense and MoE models are evaluated apart (dense in closed form, MoE by bisection) and put
    back in order; each row's values are the same as evaluating it alone. With ``text=False`` the text
    results (``LABELS``) come as integer codes into their label arrays (cheaper for a million rows).
    """
    x = _inputs(inputs)
    moe = (x["experts"] > 0) & (x["experts"] > x["experts_per_token"])
    shape = np.broadcast_shapes(*(v.shape for v in x.values()))
    if moe.ndim == 0 or ((not moe.any() or moe.all()) and shape == moe.shape):
        values = _analyse(x, bool(moe.any()))
    else:
        moe = np.broadcast_to(moe, shape).reshape(-1)
        flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in x.items()}
        groups = [np.flatnonzero(~moe), np.flatnonzero(moe)]
        parts = [(_analyse({k: v[rows] for k, v in flat.items()}, bool(i)), rows)
                 for i, rows in enumerate(groups) if rows.size]
        order = np.empty(moe.size, dtype=np.intp)
        order[np.concatenate([rows for _, rows in parts])] = np.arange(moe.size)
        values = {key: np.concatenate([np.broadcast_to(r[key], rows.shape) for r, rows in parts])[order].reshape(
            shape) for key in parts[0][0]}
    if text:
        for key, labels in LABELS.items():
            values[key] = labels[values[key]]
    return values


def _analyse(x: dict[str, np.ndarray], moe: bool) -> dict[str, np.ndarray]:
    """``analyse`` on rows that are all dense (``moe`` False) or all MoE."""
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
    if np.any(x["kv_free_fraction"] > 0):  # an engine that sizes the pool from the free memory (TensorRT-LLM)
        pool = np.where(x["kv_free_fraction"] > 0, engines.pool_bytes_of_free(
            x["gpu_memory_bytes"], x["kv_free_fraction"], w_gpu + x["reserved_bytes"]), pool)
    blocks = memory.pool_blocks(pool, bs, kv_gpu)
    windowed = bool(np.any(local > 0))
    per_request = memory.request_blocks(tokens, bs, window, local)
    contiguous = memory.max_requests_contiguous(
        pool, memory.windowed_tokens(x["max_model_len"], window, local) if windowed else x["max_model_len"], kv_gpu)
    paged = memory.max_requests_paged(blocks, tokens, bs, window, local)
    shared = memory.max_requests_shared_prefix(blocks, tokens, x["shared_prefix_tokens"], bs, window, local)
    shared_count = memory.shared_blocks(x["shared_prefix_tokens"], bs)
    private = memory.request_blocks(tokens - shared_count * bs, bs, window, local)
    batch = np.minimum(shared, x["max_num_seqs"])

    # A fully cached prompt still computes its last token to produce the first output (as vLLM does).
    prefill_tokens = np.maximum(x["prompt_tokens"] - shared_count * bs, 1.0)
    t_mem, t_comp, t_step = model.decode_terms(batch)
    t_prefill = model.prefill_s(prefill_tokens)
    # The GPU time a prompt costs the others: its own pass, or its share of a batched pass (engine profiles).
    t_prefill_gpu = t_prefill
    if np.any(x["batched_prefill"] > 0):
        t_prefill_gpu = np.where(x["batched_prefill"] > 0, engines.batched_prefill_s(
            model.prefill_s, prefill_tokens, x["max_batched_tokens"]), t_prefill)
    ceiling = roofline.ceiling_rps(t_prefill_gpu, t_step, batch, a_tokens)
    share = roofline.decode_share(t_prefill_gpu, t_step, batch, a_tokens)
    tpot_ceiling = roofline.tpot_at_ceiling_s(t_step, share)
    single = roofline.single_stream_tokens_per_s(x["bandwidth"], model.weights_read(1.0))

    pieces = model.pieces()
    rate_tpot, tpot_at = _tpot_solvers(model, moe, pieces, x["tpot_slo_s"], t_prefill_gpu, a_tokens, ceiling, batch)
    rate = np.where(x["arrival_rate"] > 0, x["arrival_rate"], np.nan)
    c_prefill = model.prefill_compute_s(prefill_tokens)
    rate_ttft = slo.max_rate_for_ttft_rps(x["ttft_slo_s"], t_prefill, ceiling, c_prefill, a_tokens, pieces)
    goodput = slo.goodput_rps(ceiling, rate_tpot, rate_ttft)
    def ttft_at(lam: np.ndarray, tpot: np.ndarray) -> np.ndarray:
        return ttft_at_rates_s(model, prefill_tokens, t_prefill, ceiling, a_tokens, lam, pieces,
                               None if moe else tpot)

    tpot_goodput = tpot_at(goodput)
    tpot_load = tpot_at(rate)
    ttft_goodput, ttft_load = ttft_at(goodput, tpot_goodput), ttft_at(rate, tpot_load)
    # At the ceiling the fixed point is exactly B_max; guard the 0/0 of rounding there.
    at_ceiling = goodput >= ceiling * (1 - 1e-12)
    in_flight = np.where(at_ceiling, batch, slo.in_flight(goodput, a_tokens, tpot_goodput))
    tpot_goodput = np.where(at_ceiling & (goodput > 0), tpot_ceiling, tpot_goodput)
    gpus = tp * pp
    price_replica = x["price_per_hour"] * gpus

    options = _options(x, pieces, batch, t_step, t_prefill, prefill_tokens, kv, ceiling, goodput, gpus, rate)
    with np.errstate(invalid="ignore", divide="ignore"):
        load_fraction = np.where(ceiling > 0, rate / ceiling, np.inf)
        tokens_ceiling = ceiling * a_tokens
        # Below the ceiling the goodput is the smaller promise bound, so that promise binds.
        limit = np.select([batch <= 0, at_ceiling, rate_tpot <= rate_ttft], [0, 1, 2], 3)
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
            "gpu_time_per_request_s": roofline.gpu_time_per_request_s(t_prefill_gpu, t_step, batch, a_tokens),
            "output_tokens_per_s_at_ceiling": tokens_ceiling,
            "batching_gain": tokens_ceiling / single,
            "max_rate_for_tpot_rps": rate_tpot,
            "max_rate_for_ttft_rps": rate_ttft,
            "tpot_at_goodput_s": tpot_goodput,
            "ttft_at_goodput_s": ttft_goodput,
            "capacity_given_up": np.where(ceiling > 0, 1.0 - goodput / ceiling, 0.0),
            "output_tokens_per_s_at_goodput": goodput * a_tokens,
            "tpot_at_load_s": tpot_load,
            "ttft_at_load_s": ttft_load,
            "load_fraction": load_fraction,
            "cost_per_million_tokens_at_ceiling": slo.cost_per_million_tokens(price_replica, 1.0, ceiling, a_tokens),
            "decode_bound": np.asarray(t_comp > t_mem).astype(np.intp),
            "batch_limit": np.asarray(x["max_num_seqs"] < shared).astype(np.intp),
            "goodput_limit": limit,
            **options,
        }


def _options(x: Mapping[str, np.ndarray], pieces: tuple, batch: np.ndarray, t_step: np.ndarray,
             t_prefill: np.ndarray, prefill_tokens: np.ndarray, kv: np.ndarray, ceiling: np.ndarray,
             goodput: np.ndarray, gpus: np.ndarray, rate: np.ndarray) -> dict[str, np.ndarray]:
    """Chunked prefill and prefill/decode pools on the same GPU, model and workload (``options``, docs/fleet.md)."""
    ch = options.chunked(pieces, batch, x["output_tokens"], prefill_tokens, x["max_batched_tokens"],
                         x["tpot_slo_s"], x["ttft_slo_s"], rate)
    dis = options.disaggregated(pieces, batch, t_step, t_prefill, prefill_tokens, x["output_tokens"], kv,
                                x["kv_transfer_bandwidth"], gpus, x["tpot_slo_s"], x["ttft_slo_s"], rate)
    gap = ceiling - goodput
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "chunked_ceiling_rps": ch["ceiling_rps"],
            "chunked_goodput_rps": ch["goodput_rps"],
            "chunked_tpot_at_goodput_s": ch["tpot_at_goodput_s"],
            "chunked_ttft_at_goodput_s": ch["ttft_at_goodput_s"],
            "chunked_tpot_at_load_s": ch["tpot_at_load_s"],
            "chunked_ttft_at_load_s": ch["ttft_at_load_s"],
            "chunked_win_back": np.where(gap > 0, (ch["goodput_rps"] - goodput) / gap, np.nan),
            "disagg_decode_rps": dis["decode_rps"],
            "disagg_prefill_rps": dis["prefill_rps"],
            "disagg_prefill_share": dis["prefill_share"],
            "disagg_goodput_per_gpu_rps": dis["goodput_per_gpu_rps"],
            "disagg_tpot_at_goodput_s": dis["tpot_at_goodput_s"],
            "disagg_ttft_at_goodput_s": dis["ttft_at_goodput_s"],
            "disagg_tpot_at_load_s": dis["tpot_at_load_s"],
            "disagg_ttft_at_load_s": dis["ttft_at_load_s"],
            "kv_transfer_s": dis["kv_transfer_s"],
            "disagg_win_back": np.where(gap > 0, (dis["goodput_per_gpu_rps"] * gpus - goodput) / gap, np.nan),
        }


def _tpot_solvers(model: StepModel, moe: bool, pieces: tuple, tpot_slo_s: np.ndarray, prefill_s: np.ndarray,
                  output_tokens: np.ndarray, ceiling: np.ndarray, batch: np.ndarray):
    """(largest rate meeting the TPOT promise, function rate -> TPOT): closed form for dense models, a
    row-wise root solve (Chandrupatla) on the monotone conditions where MoE makes the weight read concave."""
    if not moe:
        return (slo.max_rate_for_tpot_rps(tpot_slo_s, prefill_s, output_tokens, pieces),
                lambda lam: slo.tpot_at_rate_s(lam, prefill_s, output_tokens, pieces))
    rate = slo.max_rate_for_tpot_rows(model.step_rows, tpot_slo_s, prefill_s, output_tokens, ceiling)

    def tpot_at(lam: np.ndarray) -> np.ndarray:
        # Below the ceiling the batch fits, so TPOT is at most B_max / (λ A): search up to that (10^4 s at
        # least, 10^12 s at most: beyond, it is no answer).
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            longest = np.where(lam > 0, np.clip(batch / (lam * output_tokens), 1e4, 1e12), 1e4)
        return slo.tpot_at_rate_rows(model.step_rows, lam, prefill_s, output_tokens, longest)

    return rate, tpot_at
