"""The sizing as a serving engine's own settings: vLLM, TensorRT-LLM (``trtllm-serve``) and SGLang flags.

A sizing is only as good as the engine that runs it: an engine left at its own defaults caps the batch
below what fits (vLLM and TensorRT-LLM cap running requests at 256 by default), sizes its KV pool from
another memory fraction, or stores the KV cache in another dtype. ``engine_settings(results, engine)``
turns one evaluated scenario into the flags that make the engine hold the pool, the batch, the context
and the parallel layout the planner assumed, each with the scenario setting it comes from.

Flag names are checked against each engine's documentation:

* vLLM engine arguments, https://docs.vllm.ai/en/latest/models/engine_args.html (``vllm serve``):
  ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--gpu-memory-utilization``,
  ``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--kv-cache-dtype {auto,fp8,...}``,
  ``--block-size {8,16,32}``, ``--enable-prefix-caching``, ``--quantization fp8``, ``--dtype``.
* TensorRT-LLM ``trtllm-serve``, https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html:
  ``--tp_size``, ``--pp_size``, ``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``,
  ``--kv_cache_free_gpu_memory_fraction`` ("Free GPU memory fraction reserved for KV Cache, after allocating
  model weights and buffers"); the KV dtype and block reuse go in ``--extra_llm_api_options FILE.yaml``
  as ``kv_cache_config`` (``KvCacheConfig``: ``free_gpu_memory_fraction``, ``dtype``, ``enable_block_reuse``,
  https://nvidia.github.io/TensorRT-LLM/llm-api/reference/KvCacheConfig.html).
* SGLang server arguments, https://docs.sglang.io/advanced_features/server_arguments.html
  (``python -m sglang.launch_server``): ``--tp-size``, ``--pp-size``, ``--mem-fraction-static`` (the share of
  GPU memory for static allocation: model weights and the KV cache pool), ``--max-running-requests``,
  ``--chunked-prefill-size``, ``--context-length``, ``--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3}``,
  ``--page-size``.

MoE parallelism (issue 29) as each engine states it:

* vLLM, https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment/: ``--data-parallel-size`` for the
  attention data-parallel ranks and ``--enable-expert-parallel`` ("The EP size is automatically calculated":
  tp x dp, so only ep = tp x dp is a vLLM layout; otherwise a note says so).
* SGLang, https://docs.sglang.io/cookbook/base/reference/server_arguments: ``--enable-dp-attention`` ("DP for
  attention, TP for FFN") with ``--dp-size`` ranks inside ``--tp-size`` = all tp x dp GPUs (DeepSeek-V3.2's README:
  ``--tp 8 --dp 8 --enable-dp-attention``), and ``--ep-size``.
* TensorRT-LLM, https://nvidia.github.io/TensorRT-LLM/features/parallel-strategy.html: ``enable_attention_dp:
  true`` in the options file with ``--tp_size`` = all GPUs of the stage (attention then runs tp 1 per rank, so a
  plan of dp ranks of tp > 1 is no TensorRT-LLM layout; a note says so), and ``--ep_size``.

Engines differ in what their memory fraction means, so the fraction is converted, not copied:

    vLLM   gpu_memory_utilization            = memory_utilization                       (the planner's own meaning)
    SGLang mem_fraction_static               = (weight_bytes_per_gpu + pool_bytes) / gpu_memory_bytes
    TRT    kv_cache_free_gpu_memory_fraction = pool_bytes / (gpu_memory_bytes - weight_bytes_per_gpu - reserved)

Each gives the engine the planner's KV pool. Essay 001 (80 GB, utilisation 0.9, 16 GB weights): vLLM 0.9,
SGLang (16 + 56) / 80 = 0.9, TensorRT-LLM 56 / 64 = 0.875.

The serving layout is the sizing's chosen one (``sizing_settings(sizing)``: ``sizing.size`` picks the TP and the
serving mode among those the scenario allows, which may differ from the stated ``gpu.count``), not the stated one:

    colocated      prefills pause decoding: chunked prefill off (vLLM ``--no-enable-chunked-prefill``, SGLang
                   ``--chunked-prefill-size -1``, TensorRT-LLM ``enable_chunked_prefill: false``)
    chunked        chunked prefill on with the token budget ``serving.max_batched_tokens``
    disaggregated  two commands, a prefill pool and a decode pool, each with its replicas (vLLM
                   ``--kv-transfer-config`` with the NIXL connector, SGLang ``--disaggregation-mode prefill|decode``,
                   TensorRT-LLM ``cache_transceiver_config`` behind ``trtllm-serve disaggregated``)

Flags for the mode: vLLM ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill`` and ``--kv-transfer-config``
(https://docs.vllm.ai/en/latest/features/disagg_prefill.html), SGLang ``--disaggregation-mode``
(https://docs.sglang.io/advanced_features/pd_disaggregation.html), TensorRT-LLM ``enable_chunked_prefill`` and
``cache_transceiver_config`` of the LLM API options
(https://nvidia.github.io/TensorRT-LLM/advanced/disaggregated-service.html).

A new engine is one function ``(results, plan) -> EngineSettings`` added to ``ENGINES``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from capacity.formulas.quantisation import SCHEMES
from capacity.model.scenario import Results

#: Where each engine's flags are documented (cited in the report next to the flags).
DOCS = {
    "vllm": "https://docs.vllm.ai/en/latest/models/engine_args.html",
    "tensorrt-llm": "https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html",
    "sglang": "https://docs.sglang.io/advanced_features/server_arguments.html",
}


@dataclass(frozen=True, slots=True)
class EngineFlag:
    """One command-line flag: ``flag`` (e.g. ``--max-num-seqs``), its ``value`` ('' for a switch), the scenario
    setting or result it comes from (``source``) and why it is set (``why``)."""

    flag: str
    value: str
    source: str
    why: str = ""

    def tokens(self) -> list[str]:
        return [self.flag] if self.value == "" else [self.flag, self.value]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """An engine's launch command for one sizing: program, flags, an optional options file and notes."""

    engine: str
    program: str
    flags: tuple[EngineFlag, ...]
    docs: str
    config_file: dict[str, Any] = field(default_factory=dict)   # TensorRT-LLM --extra_llm_api_options YAML
    config_flag: str = ""
    notes: tuple[str, ...] = ()
    mode: str = "colocated"      # serving mode: colocated, chunked or disaggregated (sizing.MODE_WORDS)
    role: str = ""               # separate pools: "prefill" or "decode"; "" for one pool
    replicas: int | None = None  # replicas that run this command (None: not sized for a load)
    tensor_parallel: int = 1     # tensor-parallel GPUs per replica of the layout
    gpu: str = ""                # the GPU type (named in the layout line of split pools, each on its own)

    @property
    def title(self) -> str:
        """``vllm``, ``vllm: prefill pool`` ...: the engine, and the pool where the layout has two."""
        return f"{self.engine}: {self.role} pool" if self.role else self.engine

    @property
    def layout_line(self) -> str:
        """What the command serves: replicas, TP and mode, e.g. ``3 replicas of TP8, chunked prefill``."""
        tp = self.tensor_parallel
        count = f"{self.replicas:,} replica{'s' if self.replicas != 1 else ''} of " if self.replicas else ""
        where = f"{self.gpu} " if self.mode == "split" and self.gpu else ""
        return f"{count}{where}TP{tp}, {_MODE_WORDS[self.mode]}" + (f" ({self.role} pool)" if self.role else "")

    def command(self, model_id: str, config_path: str = "extra_llm_api_options.yaml", multiline: bool = False) -> str:
        """The launch command for a POSIX shell (arguments quoted); ``multiline``: one flag per line, ending `` \\``."""
        groups = [[*shlex.split(self.program), model_id], *(flag.tokens() for flag in self.flags)]
        if self.config_file and self.config_flag:
            groups.append([self.config_flag, config_path])
        parts = [" ".join(shlex.quote(word) for word in group) for group in groups]
        return " \\\n    ".join(parts) if multiline else " ".join(parts)

    def config_yaml(self) -> str:
        """The options file's text ('' when the engine needs none)."""
        return yaml.safe_dump(self.config_file, sort_keys=False) if self.config_file else ""

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "program": self.program, "docs": self.docs, "mode": self.mode,
                "role": self.role, "replicas": self.replicas,
                "flags": [{"flag": f.flag, "value": f.value, "source": f.source, "why": f.why} for f in self.flags],
                "config_file": self.config_file, "notes": list(self.notes)}


# --- the memory fractions -----------------------------------------------------------------------------------------

def mem_fraction_static(weight_bytes_per_gpu: float, pool_bytes: float, gpu_memory_bytes: float) -> float:
    """SGLang ``--mem-fraction-static`` that yields the planner's pool: ``(W_gpu + pool) / M`` [-].

    SGLang sizes weights plus the KV pool as this share of the GPU's memory; activations live outside it,
    as the planner's reserves live outside its pool. Essay 001: (16 GB + 56 GB) / 80 GB = 0.9.
    """
    return (weight_bytes_per_gpu + pool_bytes) / gpu_memory_bytes


def kv_cache_free_gpu_memory_fraction(pool_bytes: float, gpu_memory_bytes: float, weight_bytes_per_gpu: float,
                                      reserved_bytes: float = 0.0) -> float:
    """TensorRT-LLM ``free_gpu_memory_fraction`` that yields the planner's pool: ``pool / (M - W_gpu - R)`` [-].

    TensorRT-LLM gives the KV cache this share of the memory left after weights and buffers (R, the
    planner's engine reserves). Essay 001: 56 GB / (80 - 16) GB = 0.875. Capped at 1.
    """
    free = gpu_memory_bytes - weight_bytes_per_gpu - reserved_bytes
    return min(1.0, pool_bytes / free) if free > 0 else 0.0


def _fraction(value: float) -> str:
    """A memory fraction rounded DOWN to 3 decimals: rounding up would promise the engine memory the plan lacks."""
    return f"{math.floor(value * 1000 + 1e-9) / 1000:.3f}"


#: Words for the serving modes (as ``sizing.MODE_WORDS``, kept here so this module needs no sizing import).
_MODE_WORDS = {"colocated": "prefill and decode on the same GPUs", "chunked": "chunked prefill",
               "disaggregated": "separate prefill and decode pools",
               "split": "separate prefill and decode pools, each on its own layout"}


#: Modes of two pools, each started with its own command (a split: each on its own layout).
_POOLED = ("disaggregated", "split")


# --- shared settings ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Plan:
    """The numbers every engine needs, read once from the results."""

    tp: int
    pp: int
    batch: int
    max_model_len: int
    batched_tokens: int
    kv_dtype: str
    weight_dtype: str
    block_size: int
    shared_prefix: bool
    notes: tuple[str, ...]
    mode: str = "colocated"
    role: str = ""
    replicas: int | None = None

    @property
    def chunked(self) -> bool:
        """Whether the engine runs chunked prefill: in the chunked mode, and in a separate prefill pool (which only
        prefills, in passes of the token budget)."""
        return self.mode == "chunked" or self.role == "prefill"


@dataclass(frozen=True, slots=True)
class _Moe:
    dp: int   # attention data-parallel ranks
    ep: int   # expert-parallel GPUs
    tp: int   # attention tensor-parallel GPUs per rank


def _moe(results: Results) -> _Moe:
    g = results.scenario.gpu
    return _Moe(dp=g.attention_data_parallel, ep=g.expert_parallel, tp=g.count)


def _plan(results: Results, mode: str = "colocated", role: str = "", replicas: int | None = None) -> _Plan:
    s = results.scenario
    batch = int(results["batch_max"])
    notes = []
    if batch <= 0:
        notes.append("nothing fits in the KV pool: no setting of these flags serves this scenario")
    if s.serving.max_num_seqs is None and batch > 0:
        notes.append(f"the running-request cap is the {batch:,} requests that fit in the KV pool; left at the "
                     "engine's default, the cap could bind before the memory does and the plan would not hold")
    max_len = s.serving.max_model_len if s.serving.max_model_len is not None else s.workload.tokens_per_request
    # A quantisation scheme names the weights' format (fp8, int4, fp4, ...); model.weight_dtype is then the 16-bit
    # convention it replaces, and printing it as --dtype would serve 16-bit weights.
    weights = SCHEMES[s.model.quantization].storage_dtype if s.model.quantization else s.model.weight_dtype
    return _Plan(tp=s.gpu.count, pp=s.gpu.pipeline_parallel, batch=max(batch, 1), max_model_len=int(max_len),
                 batched_tokens=int(s.serving.max_batched_tokens), kv_dtype=s.model.kv_dtype,
                 weight_dtype=weights, block_size=s.serving.block_size,
                 shared_prefix=s.workload.shared_prefix_tokens > 0, notes=tuple(notes), mode=mode, role=role,
                 replicas=replicas)


def _parallel(plan: _Plan, tp_flag: str, pp_flag: str) -> list[EngineFlag]:
    flags = [EngineFlag(tp_flag, str(plan.tp), "sizing.tensor_parallel",
                        "tensor-parallel GPUs per replica of the sizing's layout")]
    if plan.pp > 1:
        flags.append(EngineFlag(pp_flag, str(plan.pp), "gpu.pipeline_parallel", "pipeline stages per replica"))
    return flags


# --- vLLM ---------------------------------------------------------------------------------------------------------

_VLLM_KV = {"fp16": "auto", "bf16": "auto", "fp32": "auto", "fp8": "fp8"}
_VLLM_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def vllm_settings(results: Results, plan: _Plan | None = None) -> EngineSettings:
    """``vllm serve`` flags for the sizing (docs: ``DOCS['vllm']``)."""
    s, plan = results.scenario, plan or _plan(results)
    notes = list(plan.notes)
    flags = _parallel(plan, "--tensor-parallel-size", "--pipeline-parallel-size")
    moe = _moe(results)
    if moe.dp > 1:
        flags.append(EngineFlag("--data-parallel-size", str(moe.dp), "serving.attention_data_parallel",
                                "attention data-parallel ranks, each its own requests and KV cache"))
    if moe.ep > 1:
        flags.append(EngineFlag("--enable-expert-parallel", "", "serving.expert_parallel",
                                f"experts spread over tp x dp = {moe.tp * moe.dp} GPUs"))
        if moe.ep != moe.tp * moe.dp:
            notes.append(f"vLLM's expert parallelism spans tp x dp = {moe.tp * moe.dp} GPUs; the plan's "
                         f"serving.expert_parallel {moe.ep} (with MoE tensor parallelism) is not a vLLM layout")
    flags += [
        EngineFlag("--gpu-memory-utilization", _fraction(s.serving.memory_utilization), "serving.memory_utilization",
                   "share of GPU memory for weights, activations and the KV pool (the planner's meaning)"),
        EngineFlag("--max-model-len", str(plan.max_model_len), "serving.max_model_len", "longest request accepted"),
        EngineFlag("--max-num-seqs", str(max(plan.batch // moe.dp, 1)), "batch_max",
                   "running requests: the batch the plan assumes" + (f", per data-parallel rank (/ {moe.dp})"
                                                                     if moe.dp > 1 else "")),
    ]
    if plan.chunked:
        flags += [EngineFlag("--enable-chunked-prefill", "", "sizing.mode",
                             "chunked prefill: prompts split into the step's token budget"),
                  EngineFlag("--max-num-batched-tokens", str(plan.batched_tokens), "serving.max_batched_tokens",
                             "token budget of one scheduler step (chunked prefill)")]
    else:
        flags += [EngineFlag("--no-enable-chunked-prefill", "", "sizing.mode",
                             "prefills pause decoding, as the sizing's layout assumes"),
                  EngineFlag("--max-num-batched-tokens", str(max(plan.batched_tokens, plan.max_model_len)),
                             "serving.max_batched_tokens",
                             "tokens of one step; without chunking vLLM needs at least max-model-len")]
    if plan.mode in _POOLED:
        flags.append(EngineFlag("--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
                                "sizing.mode", f"separate pools: this {plan.role} pool sends or receives the KV cache"))
        notes.append("separate pools: a router sends each request to a prefill replica, then to a decode replica "
                     "(vLLM's disaggregated prefill proxy, https://docs.vllm.ai/en/latest/features/disagg_prefill.html)")
    if plan.kv_dtype in _VLLM_KV:
        flags.append(EngineFlag("--kv-cache-dtype", _VLLM_KV[plan.kv_dtype], "model.kv_dtype",
                                "auto = the model's dtype" if _VLLM_KV[plan.kv_dtype] == "auto" else "fp8 KV cache"))
    else:
        notes.append(f"vLLM has no --kv-cache-dtype for {plan.kv_dtype}; the sizing assumes a {plan.kv_dtype} KV cache")
    if plan.weight_dtype in _VLLM_DTYPE:
        flags.append(EngineFlag("--dtype", _VLLM_DTYPE[plan.weight_dtype], "model.weight_dtype", "weight dtype"))
    elif plan.weight_dtype == "fp8":
        flags.append(EngineFlag("--quantization", "fp8", "model.weight_dtype",
                                "fp8 weights (or serve an fp8 checkpoint, which needs no flag)"))
    else:
        notes.append(f"{plan.weight_dtype} weights: serve a checkpoint quantised to {plan.weight_dtype} "
                     "(e.g. AWQ or GPTQ); vLLM reads the method from it")
    if plan.block_size in (8, 16, 32):
        flags.append(EngineFlag("--block-size", str(plan.block_size), "serving.block_size", "tokens per KV block"))
    else:
        notes.append(f"serving.block_size {plan.block_size} is not a vLLM --block-size (8, 16 or 32): the engine's "
                     "pool holds a few requests fewer or more than the plan")
    if plan.shared_prefix:
        flags.append(EngineFlag("--enable-prefix-caching", "", "workload.shared_prefix_tokens",
                                "store the shared prefix once"))
    spec = _speculative(results, plan, notes)
    if spec:
        config = {"method": _VLLM_SPEC[spec["method"]], "num_speculative_tokens": spec["draft_tokens"]}
        if spec["method"] == "ngram":
            config.update(prompt_lookup_max=4, prompt_lookup_min=2)
        elif spec["method"] != "mtp":
            config["model"] = DRAFT_PLACEHOLDER
        flags.append(EngineFlag("--speculative-config", json.dumps(config), "serving.speculative",
                                f"speculative decoding: {spec['draft_tokens']} drafted tokens per step "
                                f"({SPEC_DOCS['vllm']})"))
        notes += _spec_notes(spec)
    return EngineSettings("vllm", "vllm serve", tuple(flags), DOCS["vllm"], notes=tuple(notes), mode=plan.mode,
                          role=plan.role, replicas=plan.replicas, tensor_parallel=plan.tp)


# --- TensorRT-LLM -------------------------------------------------------------------------------------------------

_TRT_KV = {"fp16": "auto", "bf16": "auto", "fp32": "auto", "fp8": "fp8", "int8": "int8"}


def tensorrt_llm_settings(results: Results, plan: _Plan | None = None) -> EngineSettings:
    """``trtllm-serve`` flags and its ``--extra_llm_api_options`` file (docs: ``DOCS['tensorrt-llm']``)."""
    s, plan = results.scenario, plan or _plan(results)
    notes = list(plan.notes)
    fraction = _fraction(kv_cache_free_gpu_memory_fraction(results["pool_bytes"], s.gpu.memory_bytes,
                                                           results["weight_bytes_per_gpu"], s.serving.reserved_bytes))
    flags = _parallel(plan, "--tp_size", "--pp_size")
    moe = _moe(results)
    extra: dict[str, Any] = {}
    if moe.dp > 1:
        flags[0] = EngineFlag("--tp_size", str(moe.tp * moe.dp), "gpu.count x serving.attention_data_parallel",
                              "all GPUs of a stage; attention runs data parallel over them")
        extra["enable_attention_dp"] = True
        if moe.tp > 1:
            notes.append(f"TensorRT-LLM's attention data parallelism runs attention on one GPU per rank; the plan's "
                         f"{moe.dp} ranks of {moe.tp} GPUs are not a TensorRT-LLM layout")
    if moe.ep > 1:
        flags.append(EngineFlag("--ep_size", str(moe.ep), "serving.expert_parallel", "expert-parallel GPUs"))
    flags += [
        EngineFlag("--max_batch_size", str(max(plan.batch // moe.dp, 1)), "batch_max",
                   "running requests: the batch the plan assumes" + (f", per attention rank (/ {moe.dp})"
                                                                     if moe.dp > 1 else "")),
        EngineFlag("--max_num_tokens", str(plan.batched_tokens), "serving.max_batched_tokens",
                   "batched input tokens per iteration"),
        EngineFlag("--max_seq_len", str(plan.max_model_len), "serving.max_model_len", "prompt + output per request"),
        EngineFlag("--kv_cache_free_gpu_memory_fraction", fraction, "pool_bytes",
                   "KV pool / (GPU memory - weights - reserves): the planner's pool"),
    ]
    kv_config: dict[str, Any] = {"free_gpu_memory_fraction": float(fraction), "enable_block_reuse": plan.shared_prefix}
    if plan.kv_dtype in _TRT_KV:
        kv_config["dtype"] = _TRT_KV[plan.kv_dtype]
    else:
        notes.append(f"TensorRT-LLM has no KV cache dtype for {plan.kv_dtype}; the sizing assumes one")
    if plan.weight_dtype not in ("fp16", "bf16", "fp32"):
        notes.append(f"{plan.weight_dtype} weights: serve a checkpoint quantised with TensorRT Model Optimizer")
    config: dict[str, Any] = {"kv_cache_config": kv_config, "enable_chunked_prefill": plan.chunked}
    spec = _speculative(results, plan, notes)
    if spec:
        spec_config: dict[str, Any] = {"decoding_type": _TRT_SPEC[spec["method"]]}
        if spec["method"] == "mtp":
            spec_config["num_nextn_predict_layers"] = spec["draft_tokens"]
        else:
            spec_config["max_draft_len"] = spec["draft_tokens"]
        if spec["method"] == "ngram":
            spec_config["max_matching_ngram_size"] = 4
        elif spec["method"] in ("eagle", "draft"):
            spec_config["speculative_model_dir"] = DRAFT_PLACEHOLDER
        config["speculative_config"] = spec_config
        notes += _spec_notes(spec) + [f"speculative decoding: speculative_config in the options file "
                                      f"({SPEC_DOCS['tensorrt-llm']})"]
    if plan.mode in _POOLED:
        config["cache_transceiver_config"] = {"backend": "DEFAULT"}
        notes.append("separate pools: start each pool's servers with these options and route between them with "
                     "trtllm-serve disaggregated -c disagg_config.yaml "
                     "(https://nvidia.github.io/TensorRT-LLM/advanced/disaggregated-service.html)")
    return EngineSettings("tensorrt-llm", "trtllm-serve", tuple(flags), DOCS["tensorrt-llm"],
                          config_file={**extra, **config}, config_flag="--extra_llm_api_options",
                          notes=tuple(notes), mode=plan.mode, role=plan.role, replicas=plan.replicas,
                          tensor_parallel=plan.tp)


# --- SGLang -------------------------------------------------------------------------------------------------------

_SGLANG_KV = {"fp16": "auto", "bf16": "auto", "fp32": "auto", "fp8": "fp8_e4m3"}


def sglang_settings(results: Results, plan: _Plan | None = None) -> EngineSettings:
    """``python -m sglang.launch_server`` flags (docs: ``DOCS['sglang']``)."""
    s, plan = results.scenario, plan or _plan(results)
    notes = list(plan.notes)
    fraction = mem_fraction_static(results["weight_bytes_per_gpu"], results["pool_bytes"], s.gpu.memory_bytes)
    flags = _parallel(plan, "--tp-size", "--pp-size")
    moe = _moe(results)
    if moe.dp > 1:
        flags[0] = EngineFlag("--tp-size", str(moe.tp * moe.dp), "gpu.count x serving.attention_data_parallel",
                              "all GPUs of a stage (the FFN's tensor parallelism)")
        flags += [EngineFlag("--dp-size", str(moe.dp), "serving.attention_data_parallel", "attention ranks"),
                  EngineFlag("--enable-dp-attention", "", "serving.attention_data_parallel",
                             "attention data parallel, each rank its own requests and KV cache")]
    if moe.ep > 1:
        flags.append(EngineFlag("--ep-size", str(moe.ep), "serving.expert_parallel", "expert-parallel GPUs"))
    flags += [
        EngineFlag("--mem-fraction-static", _fraction(fraction), "pool_bytes",
                   "(weights + KV pool) / GPU memory: the planner's pool"),
        EngineFlag("--max-running-requests", str(plan.batch), "batch_max", "the batch the plan assumes"),
        (EngineFlag("--chunked-prefill-size", str(plan.batched_tokens), "serving.max_batched_tokens",
                    "prompt tokens per prefill chunk") if plan.chunked else
         EngineFlag("--chunked-prefill-size", "-1", "sizing.mode",
                    "chunked prefill off: prefills pause decoding, as the sizing's layout assumes")),
        EngineFlag("--context-length", str(plan.max_model_len), "serving.max_model_len", "longest request accepted"),
        EngineFlag("--page-size", str(plan.block_size), "serving.block_size", "tokens per KV page"),
    ]
    if plan.kv_dtype in _SGLANG_KV:
        flags.append(EngineFlag("--kv-cache-dtype", _SGLANG_KV[plan.kv_dtype], "model.kv_dtype",
                                "auto = the model's dtype" if _SGLANG_KV[plan.kv_dtype] == "auto" else "fp8 KV cache"))
    else:
        notes.append(f"SGLang has no --kv-cache-dtype for {plan.kv_dtype}; the sizing assumes a {plan.kv_dtype} KV "
                     "cache")
    if plan.weight_dtype == "fp8":
        flags.append(EngineFlag("--quantization", "fp8", "model.weight_dtype",
                                "fp8 weights (or serve an fp8 checkpoint, which needs no flag)"))
    if plan.mode in _POOLED:
        flags.append(EngineFlag("--disaggregation-mode", plan.role, "sizing.mode",
                                f"separate pools: this is the {plan.role} pool"))
        notes.append("separate pools: route between them with SGLang's mini load balancer "
                     "(https://docs.sglang.io/advanced_features/pd_disaggregation.html)")
    if not plan.shared_prefix:
        notes.append("SGLang's radix prefix cache is on by default; the plan counts no shared prefix")
    spec = _speculative(results, plan, notes)
    if spec:
        why = f"speculative decoding ({SPEC_DOCS['sglang']})"
        flags += [EngineFlag("--speculative-algorithm", _SGLANG_SPEC[spec["method"]], "serving.speculative.method",
                             why),
                  EngineFlag("--speculative-num-steps", str(spec["draft_tokens"]), "serving.speculative.draft_tokens",
                             "drafting depth: tokens drafted per step"),
                  EngineFlag("--speculative-eagle-topk", "1" if spec["verify_tokens"] <= spec["draft_tokens"] + 1
                             else "4", "serving.speculative.verify_tokens",
                             "1: a chain, as the plan's verification of draft_tokens + 1 tokens"),
                  EngineFlag("--speculative-num-draft-tokens", str(int(spec["verify_tokens"])),
                             "serving.speculative.verify_tokens", "tokens verified per step and sequence")]
        if spec["method"] in ("eagle", "draft"):
            flags.append(EngineFlag("--speculative-draft-model-path", DRAFT_PLACEHOLDER,
                                    "serving.speculative.method", "the drafter's checkpoint (replace)"))
        notes += _spec_notes(spec)
    return EngineSettings("sglang", "python -m sglang.launch_server --model-path", tuple(flags), DOCS["sglang"],
                          notes=tuple(notes), mode=plan.mode, role=plan.role, replicas=plan.replicas,
                          tensor_parallel=plan.tp)


# --- speculative decoding (serving.speculative) --------------------------------------------------------------------

#: The drafter's checkpoint in a command: the planner knows its size, not its name.
DRAFT_PLACEHOLDER = "DRAFT_MODEL_PATH"
#: Where each engine documents its speculative-decoding settings.
SPEC_DOCS = {
    "vllm": "https://docs.vllm.ai/en/latest/features/spec_decode.html",
    "tensorrt-llm": "https://nvidia.github.io/TensorRT-LLM/advanced/speculative-decoding.html",
    "sglang": "https://docs.sglang.io/advanced_features/speculative_decoding.html",
}
#: serving.speculative.method -> each engine's name for it (vLLM ``method``, TensorRT-LLM ``decoding_type``,
#: SGLang ``--speculative-algorithm``; SGLang runs MTP heads through its EAGLE path, a draft model as STANDALONE).
_VLLM_SPEC = {"eagle": "eagle3", "mtp": "mtp", "ngram": "ngram", "draft": "draft_model"}
_TRT_SPEC = {"eagle": "Eagle", "mtp": "MTP", "ngram": "NGram", "draft": "DraftTarget"}
_SGLANG_SPEC = {"eagle": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM", "draft": "STANDALONE"}


def _speculative(results: Results, plan: _Plan, notes: list[str]) -> dict[str, Any] | None:
    """``serving.speculative`` where this command decodes, else None: a separate prefill pool only runs the prompts
    (a prefill yields one token, drafted and verified nowhere), so speculation is the decode pool's alone and the
    prefill pool's command gets none of its flags (``notes`` says so)."""
    spec = results.scenario.serving.speculative
    if spec and plan.role == "prefill":
        notes.append(f"speculative decoding ({spec['method']}) runs in the decode pool only: this prefill pool gets "
                     "none of its flags")
        return None
    return spec or None


def _spec_notes(spec: dict[str, Any]) -> list[str]:
    """What the speculative flags assume: the acceptance the plan used, and the drafter's checkpoint to fill in."""
    out = [f"speculative decoding ({spec['method']}): the plan assumes {spec['expected_tokens']:.2f} tokens per "
           f"verification (acceptance rate {spec['acceptance_rate']:.2f} per drafted token); check the engine's "
           f"logged acceptance against it"]
    if spec["method"] in ("eagle", "draft"):
        out.append(f"replace {DRAFT_PLACEHOLDER} with the drafter's checkpoint (an EAGLE head or a small model of the "
                   f"same tokenizer)")
    return out


#: Engine name -> settings builder ``(results, plan) -> EngineSettings``. Add an engine here.
ENGINES: dict[str, Callable[[Results, _Plan], EngineSettings]] = {
    "vllm": vllm_settings, "tensorrt-llm": tensorrt_llm_settings, "sglang": sglang_settings}


def scenario_engine(results: Results) -> str:
    """The engine the scenario names (``serving.engine`` where the scenario has one), else vLLM."""
    name = getattr(results.scenario.serving, "engine", None)
    return str(name) if name in ENGINES else "vllm"


def engine_settings(results: Results, engine: str | None = None, mode: str = "colocated", role: str = "",
                    replicas: int | None = None) -> EngineSettings:
    """One replica of ``results``' layout in serving ``mode`` (``role``: its pool, for separate pools) as
    ``engine``'s flags (None: the scenario's engine, else vLLM). ``sizing_settings`` gives the sizing's layout."""
    name = engine or scenario_engine(results)
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {name!r}")
    if mode not in _MODE_WORDS:
        raise ValueError(f"mode must be one of {', '.join(_MODE_WORDS)}, got {mode!r}")
    return replace(ENGINES[name](results, _plan(results, mode, role, replicas)), gpu=results.scenario.gpu.name)


def sizing_settings(sizing: Any, engine: str | None = None) -> tuple[EngineSettings, ...]:
    """The one answer's layout (``sizing.Sizing``) as ``engine``'s launch commands: its chosen TP, serving mode and
    replicas, one replica being ``sizing.replica`` (the chosen layout's scenario). Separate pools give two commands,
    the prefill pool's (``prefill_replicas``) then the decode pool's (``decode_replicas``); split pools the same, each
    from its own pool's scenario (``sizing.prefill_replica``, ``sizing.replica``: its GPU, TP, DP/EP, memory
    fraction and batch); other modes one (``replicas``). Never the stated layout where the sizing chose another."""
    replica = sizing.replica
    if sizing.mode == "split" and sizing.prefill_replica is not None:  # each pool its own GPU type and layout
        return (engine_settings(sizing.prefill_replica, engine, "split", "prefill", sizing.prefill_replicas),
                engine_settings(replica, engine, "split", "decode", sizing.decode_replicas))
    if sizing.mode == "disaggregated":
        return (engine_settings(replica, engine, "disaggregated", "prefill", sizing.prefill_replicas),
                engine_settings(replica, engine, "disaggregated", "decode", sizing.decode_replicas))
    return (engine_settings(replica, engine, sizing.mode, "", sizing.replicas),)


def model_id(results: Results) -> str:
    """The Hugging Face id of the scenario's catalog model, else its name: the engine's model argument."""
    from capacity.errors import ScenarioError
    from capacity.inputs import catalog

    try:
        return str(catalog.model(results.scenario.model.name).get("hf_id") or results.scenario.model.name)
    except ScenarioError:
        return results.scenario.model.name


def render_text(settings: EngineSettings, model: str) -> str:
    """The command, one flag per line with its source, the options file and the notes: for the CLI."""
    lines = [f"# {settings.title}: flags from the capacity sizing ({settings.docs})",
             f"# layout: {settings.layout_line}", settings.command(model), ""]
    width = max((len(" ".join(f.tokens())) for f in settings.flags), default=0)
    for f in settings.flags:
        lines.append(f"#   {' '.join(f.tokens()):<{width}}  <- {f.source}: {f.why}")
    if settings.config_file:
        lines += ["", f"# {settings.config_flag} extra_llm_api_options.yaml:"]
        lines += [f"#   {line}" for line in settings.config_yaml().splitlines()]
    lines += [f"# note: {note}" for note in settings.notes]
    return "\n".join(lines) + "\n"


__all__ = ["DOCS", "ENGINES", "EngineFlag", "EngineSettings", "engine_settings", "kv_cache_free_gpu_memory_fraction",
           "mem_fraction_static", "model_id", "render_text", "scenario_engine", "sglang_settings", "sizing_settings",
           "tensorrt_llm_settings", "vllm_settings"]
