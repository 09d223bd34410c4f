"""Engine profiles: what vLLM, TensorRT-LLM and SGLang do by default, each constant with its source.

``serving.engine`` (and ``serving.engine_version`` where a default changed between versions) fills every
serving setting the scenario leaves out with the engine's own default; an explicit scenario value always
wins, and ``engine_defaults`` (a tuple of lines) says which defaults were applied. Without an engine nothing
changes: the essays' convention (no reserves, no overhead, no batch cap) holds.

What a profile sets:

* **the KV-pool rule.** vLLM: ``gpu_memory_utilization x total - weights - activation peak - non-torch``
  (vllm/v1/worker/gpu_worker.py ``determine_available_memory``: requested memory minus the profiled peak
  of a dummy forward pass of ``max_num_batched_tokens`` tokens). TensorRT-LLM: ``free_gpu_memory_fraction x
  (total - weights - runtime buffers)`` ("fraction of free memory after loading the model", KvCacheConfig,
  default 0.9). SGLang: ``mem_fraction_static x total - weights`` (weights and KV pool share the static
  fraction; activations and CUDA graphs live in the rest).
* **batch limits.** vLLM ``max_num_seqs`` / ``max_num_batched_tokens`` (``EngineArgs.get_batch_defaults``:
  1024 / 8192 on GPUs of >= 70 GiB other than A100, else 256 / 2048, for ``vllm serve``; V0, before 0.8:
  256 and ``max(max_model_len, 2048)`` without chunked prefill). TensorRT-LLM ``max_batch_size`` 2048,
  ``max_num_tokens`` 8192 (``BuildConfig``). SGLang: no fixed cap (``max_running_requests`` is derived
  from the pool), ``chunked_prefill_size`` 8192.
* **the activation peak** that vLLM profiles and TensorRT-LLM reserves for runtime buffers, from
  ``max_num_batched_tokens`` and the model's shapes (``activation_peak_bytes``).
* **a step overhead and an all-reduce latency** (``ALLREDUCE_LATENCY_S``): the step overhead by
  ``overhead_rule``, in order the family's fit on the engine's published points (``FITTED_EFFICIENCY``), the
  engine's fit on the silicon sample's measured deployments (``SILICON_OVERHEAD_S``, Hopper and Blackwell), the
  published points' pooled fit, or the engine's sourced ``STEP_OVERHEAD_S``.
* **TensorRT-LLM: an FP8 checkpoint's KV cache is FP8** unless the scenario says otherwise ("If you specify
  FP8 quantization, the KV cache will automatically be set to FP8 as well!", TensorRT-LLM perf-overview.md).
* **quantisation schemes**: a plain ``weight_dtype`` is read as the scheme engines load (``quantisation``),
  with 16-bit embeddings and lm_head.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas import roofline

ENGINES = ("vllm", "tensorrt-llm", "sglang")

#: ``serving.engine: ideal``: the essays' idealised conventions (no engine reserves, overhead or batch cap beyond
#: those the scenario states, efficiencies as given), under which every essay number is exact.
IDEAL = "ideal"

#: The engine whose profile a scenario that names none gets, stated on the answer as an assumption. vLLM: "the
#: most-deployed open-source OpenAI-compatible chat-completions server in 2026" and "the default benchmark
#: target" (https://spotinference.com/research/vllm-engine); the customer benchmark this planner reads first is
#: ``vllm bench serve`` (docs/fidelity.md, calibrate).
DEFAULT_ENGINE = "vllm"
DEFAULT_ENGINE_SOURCE = ("the most-deployed open-source serving engine in 2026 "
                         "(https://spotinference.com/research/vllm-engine)")


def engine_choice(named: str | None) -> tuple[str | None, str]:
    """(the engine whose profile applies, None for ``ideal``; the line the answer states about that choice).

    No engine named: ``DEFAULT_ENGINE``, an assumption the answer states. ``ideal``: no profile, the essays'
    conventions. A named engine: itself, no line.
    """
    if named is None:
        return DEFAULT_ENGINE, (f"assumption: no serving.engine named, so {DEFAULT_ENGINE}'s profile applies "
                                f"({DEFAULT_ENGINE_SOURCE}); name serving.engine: ideal for the essays' conventions")
    if named == IDEAL:
        return None, ("serving.engine: ideal: the essays' conventions (no engine reserves, overhead or batch cap "
                      "beyond those the scenario states; efficiencies as given)")
    return named, ""
ALIASES = {"trt-llm": "tensorrt-llm", "trtllm": "tensorrt-llm", "tensorrt_llm": "tensorrt-llm", "nim": "tensorrt-llm"}

GiB = 1024.0 ** 3

#: Bytes per activation value (bf16/fp16 activations in every engine).
ACTIVATION_VALUE_BYTES = 2.0

#: Fixed time of one forward pass beyond the roofline [s]: scheduling, input preparation, sampling and the
#: detokenising/streaming loop, per engine step. Source: the vLLM v0.6.0 profile of Llama-3-8B on one H100
#: ("The HTTP API server takes 33% of the total execution time. 29% of the total execution time is spent on
#: scheduling [...]" before the fix; https://blog.vllm.ai/2024/09/05/perf-update.html), which v0.6 and V1 hide
#: partly behind the GPU (async output processing, multi-step). See docs/fidelity.md for how it compares with
#: batch-1 measurements.
STEP_OVERHEAD_S = {"vllm": 2.0e-3, "tensorrt-llm": 1.0e-3, "sglang": 1.5e-3}

#: Fixed time of one tensor-parallel all-reduce of a decode step's small message [s]. nccl-tests
#: all_reduce_perf on an 8-GPU NVLink/NVSwitch node: 12.49 us at 4-8 B, 16.4 us at 1 KiB, 16.7 us at 4 KiB
#: (https://github.com/deepseek-ai/DeepEP/issues/303, H20 node, NVLink 4 as on H100/H200). Engines' custom
#: all-reduce kernels (vLLM custom_all_reduce, TensorRT-LLM's AllReduce plugin) run under that; the NCCL
#: small-message figure is the one measured.
ALLREDUCE_LATENCY_S = 12.5e-6


#: FLOP/s efficiency curve ``e(T) = e_max T / (T + T_half)`` of a pass over T tokens: T_half [tokens], fitted
#: (``fit_efficiency_curve``) on our H200 bf16 matrix products above the ridge point (T >= 256 tokens; below it
#: a product is a weight read and the memory term decides): Llama-3-8B/70B shapes, 42 products, e_max 0.693,
#: T_half 56.5, MAPE 3.0% (benchmarks/results/h200-microbench-2026-11-30.json, docs/gpu-measurements.md). The
#: only GPU with such data: every family takes it; e_max is fitted per family (``FITTED_EFFICIENCY``).
FLOPS_HALF_TOKENS = 56.5

#: Bandwidth efficiency curve ``e(S) = e_max S / (S + S_half)`` of a step moving S bytes per GPU, with
#: ``S_half = layers x LAYER_HALF_S x peak bandwidth``: each layer's kernels (about 11, a few microseconds each)
#: cost a fixed time, worth LAYER_HALF_S seconds of reading at the datasheet peak. Fitted on our H200's whole
#: Llama-3-8B-shaped decode steps at batch <= 32 (memory-bound; 6 steps): ``t = (S + 4.64 GB) / (0.832 x 4.8
#: TB/s)``, 4.64 GB / 32 layers / 4.8 TB/s = 30.2 us, MAPE 1.2% (a fixed 1.16 ms per step;
#: benchmarks/results/h200-decode-step-2026-11-30.json). Kernel floors are times, so the time is carried to
#: other GPUs; the family's fitted e_max stays its own.
LAYER_HALF_S = 30.2e-6


def fit_efficiency_curve(amounts: ArrayLike, seconds: ArrayLike, seconds_per_unit_at_peak: ArrayLike
                         ) -> tuple[float, float, float]:
    """(e_max, x_half, MAPE %) of ``t = (x + x_half) t_unit / e_max`` fitted to measured pass times.

    The curve ``e(x) = e_max x / (x + x_half)`` is linear in time: ``t = a x + b`` with ``a = t_unit / e_max``
    and ``b = a x_half``; least squares on the relative errors ``(a x + b) / t - 1``. ``t_unit`` is the time of
    one unit (byte, token) at the datasheet peak [s], so ``e_max`` is a share of that peak.
    """
    x, t = np.asarray(amounts, float), np.asarray(seconds, float)
    unit = np.broadcast_to(np.asarray(seconds_per_unit_at_peak, float), x.shape)
    design = np.stack([x * unit, unit], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    predicted = (a * x + b) * unit
    return float(1.0 / a), float(b / a), float(np.mean(np.abs(predicted / t - 1.0)) * 100.0)


def efficiency_curves(peak_bandwidth: float) -> tuple[float, float]:
    """(bytes per layer at half the plateau bandwidth [B], tokens per pass at half the plateau FLOP/s [tokens]):
    ``LAYER_HALF_S x BW_peak`` and ``FLOPS_HALF_TOKENS`` (the curves of ``roofline.efficiency_at``).
    H200, 4.8 TB/s: 30.2 us x 4.8 TB/s = 145 MB per layer."""
    return LAYER_HALF_S * peak_bandwidth, FLOPS_HALF_TOKENS


def small_pass_half_tokens(half_tokens: ArrayLike, weight_read_bytes: ArrayLike, half_bytes_total: ArrayLike,
                           params_per_gpu: ArrayLike, bandwidth_plateau: ArrayLike, flops_plateau: ArrayLike
                           ) -> np.ndarray:
    """The FLOP/s curve's half-plateau tokens, capped so that a pass too small to be compute-bound is not [tokens]:
    ``min(T_half, t_w F_e / (2 N_gpu))`` with ``t_w = (W_read(1) + L S_half) / BW_e`` the step's weight read.

    The curve ``e(T) = e_max T / (T + T_half)`` was fitted above the ridge point (T >= 256 tokens); its time form
    charges a pass ``(T + T_half) 2 N / (e_max F)``, whose fixed part ``T_half 2 N / (e_max F)`` stands for the
    matmuls' fixed cost. At T -> 0 a matrix product is a weight read (a GEMV), which the memory term charges, so that
    fixed part can never exceed the weight read: on a low-FLOP GPU (H20: 148 TFLOP/s bf16 against 4.0 TB/s) the
    uncapped curve made one token per pass compute-bound, and bf16, fp8 and AWQ weights predicted the same step
    (issue 28). ``BW_e``, ``F_e``: the family's fitted plateaus times the peaks (constants, not the scenario's
    factors, so a calibrated profile applied later keeps the same curve). H200 bf16, Llama-3.1-8B: the cap is
    ~190 tokens, above 56.5: no change where the curve was measured.
    """
    t_w = (np.asarray(weight_read_bytes, float) + np.asarray(half_bytes_total, float)) / np.asarray(
        bandwidth_plateau, float)
    ridge = t_w * np.asarray(flops_plateau, float) / (2.0 * np.asarray(params_per_gpu, float))
    return np.minimum(np.asarray(half_tokens, float), ridge)


def efficiencies_used(bandwidth_plateau: float, flops_plateau: float, half_bytes_per_layer: float,
                      half_tokens: float, layers: float, decode_memory_s: float, effective_bandwidth: float,
                      decode_tokens: float, prefill_tokens: float) -> tuple[float, float, float, float]:
    """(bytes per step per GPU [B], bandwidth efficiency at the decode step, FLOP/s efficiency at the decode step,
    at the prefill) [-] on the curves of ``roofline.efficiency_at``.

    The step's bytes come back from its memory term: ``t_mem x BW_eff = S + layers x S_half``
    (``roofline.curve_amount``), so the efficiency shown is the one the prediction used.
    """
    half_total = layers * half_bytes_per_layer
    step_bytes = max(decode_memory_s * effective_bandwidth - half_total, 0.0)
    return (step_bytes, float(roofline.efficiency_at(step_bytes, bandwidth_plateau, half_total)),
            float(roofline.efficiency_at(decode_tokens, flops_plateau, half_tokens)),
            float(roofline.efficiency_at(prefill_tokens, flops_plateau, half_tokens)))


#: GPU families: name fragments (lowercase) -> family. Efficiencies are fitted per family, where data exist.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("gh200", "hopper"), ("h200", "hopper"), ("h100", "hopper"), ("h800", "hopper"), ("h20", "hopper"),
    ("gb200", "blackwell"), ("b200", "blackwell"), ("b300", "blackwell"), ("5090", "blackwell"),
    ("a100", "ampere"), ("a10", "ampere"), ("a800", "ampere"), ("l40", "ada"), ("l4", "ada"), ("4090", "ada"),
    ("mi300", "cdna3"), ("mi325", "cdna3"), ("mi355", "cdna4"),
)


def gpu_family(name: str) -> str | None:
    """The family of a GPU by its catalog key or name ("h100-sxm" -> "hopper"); None when unknown."""
    low = name.lower()
    for fragment, family in FAMILIES:
        if fragment in low:
            return family
    return None


#: Bandwidth and FLOP/s efficiency plateaus e_max [-] (of the curves above) and step overhead [s] per GPU family,
#: fitted (log-error least squares, ``capacity.planning.calibration.fit_factors``) on the published timing points of
#: validation/measurements.yaml with the engine profiles and curves applied (``python validation/validate.py
#: --fit`` prints this table). A family's own overhead is fitted only from points of >= 2 sources; otherwise
#: it is the "all" row's (validate.fit_families). A family without points takes the "all" row, fitted on
#: every point pooled.
FITTED_EFFICIENCY: dict[str, tuple[float, float, float]] = {
    "ada": (0.633, 0.354, 5.27e-04),  # 6 points, 1 sources, in-sample MAPE 28.4%
    "ampere": (0.763, 0.591, 2.89e-03),  # 11 points, 2 sources, in-sample MAPE 14.4%
    "cdna3": (1.000, 0.180, 1.06e-02),  # 12 points, 2 sources, in-sample MAPE 9.7%
    "hopper": (0.788, 0.431, 6.46e-04),  # 54 points, 4 sources, in-sample MAPE 16.1%
    "all": (0.735, 0.401, 5.27e-04),  # 83 points, 6 sources, in-sample MAPE 28.6%
}


#: The engines whose published points fitted each row of ``FITTED_EFFICIENCY`` (validation/measurements.yaml:
#: every hopper, ada and ampere timing point ran TensorRT-LLM or NIM, every cdna3 point vLLM-ROCm). A step
#: overhead is the engine's own scheduling and launch loop, so a family's fitted overhead applies only to those
#: engines (issue 28: SGLang on MI300X was charged the 10.6 ms fitted on vLLM-ROCm points; Llama-4 Maverick
#: batch 1 measured 5.95 ms per step).
FITTED_OVERHEAD_ENGINES: dict[str, tuple[str, ...]] = {
    "ada": ("tensorrt-llm",), "ampere": ("tensorrt-llm",), "cdna3": ("vllm",), "hopper": ("tensorrt-llm",),
    "all": ("tensorrt-llm", "vllm"),
}


#: Step overhead per engine [s] fitted on the measured deployments of NVIDIA's silicon sample
#: (validation/silicon/silicon_train.csv, 2,701 TPOT rows; ``python validation/silicon.py --fit`` prints this
#: table): the overhead minimising the mean absolute relative TPOT error of every row of the engine
#: (``planning.median_fit.median_overhead``: a weighted median, which outlying groups cannot drag), the
#: efficiencies held at ``FITTED_EFFICIENCY``'s; a row at C users is the library's closed loop
#: (``analysis.closed_loop``, what ``capacity evaluate`` answers). Leave-one-group-out it predicts each group at
#: 19.0% (the
#: overhead fitted without the group), where the published points' overheads gave 19.4%. It applies to the
#: families the sample holds the engine on (``SILICON_FAMILIES``) and where no published point of the engine
#: fitted the family's own (TensorRT-LLM on Hopper keeps its 0.436 ms).
SILICON_OVERHEAD_S: dict[str, float] = {
    "sglang": 2.628e-03,  # 773 rows, 20 groups, Hopper and Blackwell
    "tensorrt-llm": 0.000e+00,  # 1171 rows, 20 groups, Hopper and Blackwell (at its bound: the rows ask for less)
    "vllm": 9.501e-04,  # 757 rows, 15 groups, Hopper and Blackwell
}

#: The GPU families the silicon sample measured each engine on (where ``SILICON_OVERHEAD_S`` applies).
SILICON_FAMILIES: dict[str, tuple[str, ...]] = {
    "sglang": ("blackwell", "hopper"), "tensorrt-llm": ("blackwell", "hopper"), "vllm": ("blackwell", "hopper"),
}


#: Closed loop without think time: the share of the other users whose requests reach the engine in the same step as
#: a user's (``slo.ttft_at_step_ends_s``), per model class (``clustering_for``). Benchmarks of fixed prompt and answer
#: lengths (``vllm bench serve --max-concurrency``, aiperf, GenAI-Perf: every row of NVIDIA's silicon sample) start
#: their users together and equal answers keep them in step; engines' timing jitter spreads them part of the way.
#: Fitted on the sample's closed-loop TTFT rows together with ``SILICON_REQUEST_LATENCY_S`` (``python
#: validation/silicon.py --fit``, ``silicon.silicon_ttft_rules``: with the latencies held, the weighted median of the
#: share each row of the class asks for, weights its TTFT's slope in the share over the TTFT, the mean absolute
#: relative error's minimiser). One share per model class, not per engine: the MoE rows ask for about three times
#: the dense rows' share on every engine (their clustered prompts cost more than the roofline's arithmetic, c, says:
#: grouped expert matmuls and token routing; the step model does not hold that cost; counting attention's
#: arithmetic in prefill took the MoE share from 0.214 to 0.163, the dense one from 0.057 to 0.053; reading a
#: request latency as putting arrivals at any phase of a step, 0.159 and 0.045), and one share for
#: both classes was 7 points worse leave-one-group-out (51.4% against 44.3% TTFT MAPE, docs/fidelity.md); per engine
#: and class was no better than per class.
CLOSED_LOOP_CLUSTERING: dict[str, float] = {
    "dense": 0.045,
    "moe": 0.159,
}


def clustering_for(moe: bool) -> float:
    """The engine profiles' closed-loop clustering share for a model class (``CLOSED_LOOP_CLUSTERING``) [-]."""
    return CLOSED_LOOP_CLUSTERING["moe" if moe else "dense"]


#: A request's time outside the engine's passes [s] (``serving.request_latency``; ``analysis.delayed_ttft``): the
#: HTTP front end, tokenisation, the hand-off to the scheduler, detokenisation and streaming of the first token, a
#: pure delay on every TTFT; in a closed loop it also puts each next request's arrival at any phase of a decode step
#: (the queue of random arrivals, ``analysis.closed_loop_engine_ttft_s``, as the simulator's clients arrive).
#: Fitted per engine on the silicon sample's closed-loop TTFT rows together with
#: ``CLOSED_LOOP_CLUSTERING`` (``python validation/silicon.py --fit``: the weighted medians of a coordinate descent on
#: the mean absolute relative error, ``silicon.silicon_ttft_rules``). What the measured deployments' serving path
#: adds: at 4 users the sample's first tokens come 0.1-0.3 s after one prefill on every SGLang model, 0.05-0.2 s on
#: TensorRT-LLM and vLLM MoE models (docs/fidelity.md). The sample's deployments are aiconfigurator's, behind NVIDIA
#: Dynamo's front end (``FRONT_ENDS``; the harness states ``serving.front_end: dynamo``), so the fit is that path's,
#: on every family. Behind the engine's own server (the default) it is added too, except where the engine's own
#: published points fitted the family (``FITTED_OVERHEAD_ENGINES``: TensorRT-LLM on Hopper, Ada and Ampere through
#: Triton, 23 ms for Llama-3.1-8B's first token at 2 requests/s): those points measured no such path
#: (``request_latency_for``).
SILICON_REQUEST_LATENCY_S: dict[str, float] = {
    "sglang": 0.2510,
    "tensorrt-llm": 0.0588,
    "vllm": 0.0330,
}


#: The serving path in front of the engine's passes (``serving.front_end``), which sets the request latency an engine
#: profile adds (``request_latency_for``): "engine", the engine's own server (the default); "dynamo", NVIDIA Dynamo's
#: front end before the engine's workers, as aiconfigurator's generated deployments run (its generator starts
#: ``python3 -m dynamo.frontend`` before every worker:
#: src/aiconfigurator/generator/config/backend_templates/*/run.sh.j2, commit
#: 095f58a51c4ca8e61b66ec108d86f223f8d559ce), which ``validation/silicon.py`` states for every row of the silicon
#: sample; "none", in process, no server (trtllm-bench, an offline ``LLM`` object).
FRONT_ENDS = ("engine", "dynamo", "none")
#: The front end a scenario that names none has: the engine's own server.
DEFAULT_FRONT_END = FRONT_ENDS[0]


def request_latency_for(engine: str, family: str | None, front_end: str = DEFAULT_FRONT_END
                        ) -> tuple[float | None, str]:
    """(request latency [s] or None, where it comes from) for an engine on a GPU family behind ``front_end``
    (``FRONT_ENDS``): none in process; behind Dynamo the engine's fit on the silicon sample on every family (a
    serving path does not depend on the GPU); behind the engine's own server none where the engine's published
    points fitted the family's step (``overhead_rule`` "published": they measured the engine without such a path),
    else the silicon fit; none for an engine the sample does not hold."""
    key = ALIASES.get(engine, engine)
    if front_end == "none":
        return None, "in process, no server"
    if front_end != "dynamo" and overhead_rule(key, family) == "published":
        return None, f"{key}'s published points on {family} measured none"
    if key in SILICON_REQUEST_LATENCY_S:
        return SILICON_REQUEST_LATENCY_S[key], f"fitted on the silicon sample's {key} rows"
    return None, f"no measured {key} serving path"


def overhead_rule(engine: str, family: str | None) -> str:
    """Which rule sets an engine's step overhead on a GPU family (``step_overhead_for``, in this order):
    ``"published"`` (the family's fit on the published points of that engine), ``"silicon"``
    (``SILICON_OVERHEAD_S``), ``"pooled"`` (the published points' pooled fit) or ``"sourced"``
    (``STEP_OVERHEAD_S``)."""
    key = ALIASES.get(engine, engine)
    if family in FITTED_EFFICIENCY and key in FITTED_OVERHEAD_ENGINES.get(family, ()):
        return "published"
    if family in SILICON_FAMILIES.get(key, ()) and key in SILICON_OVERHEAD_S:
        return "silicon"
    if key in FITTED_OVERHEAD_ENGINES.get("all", ()):
        return "pooled"
    return "sourced"


def step_overhead_for(engine: str, family: str | None) -> tuple[float, str]:
    """(step overhead [s], where it comes from) for an engine on a GPU family (``overhead_rule``): the family's
    fitted overhead where that engine's published points fitted it; else the engine's fit on the silicon sample
    where the sample holds the engine on that family; else the pooled fit ("all") where the engine has published
    points; else the engine's own sourced ``STEP_OVERHEAD_S`` (the documented fallback: no measured pair)."""
    key = ALIASES.get(engine, engine)
    rule = overhead_rule(key, family)
    if rule == "published":
        return FITTED_EFFICIENCY[str(family)][2], f"fitted, {family}"
    if rule == "silicon":
        return SILICON_OVERHEAD_S[key], f"fitted on the silicon sample's {key} rows"
    if rule == "pooled":
        return FITTED_EFFICIENCY["all"][2], f"fitted, pooled: no {key} points on {family or 'this GPU'}"
    return STEP_OVERHEAD_S[key], f"{key}'s sourced default: no fitted {key} points"


@dataclass(frozen=True, slots=True)
class Profile:
    """One engine version's defaults (see the module docstring); None where the engine has no such default."""

    engine: str
    version: str
    pool_rule: str                    # "of_total" (vLLM, SGLang) or "of_free" (TensorRT-LLM)
    memory_fraction: float            # gpu_memory_utilization / free_gpu_memory_fraction / mem_fraction_static
    max_num_seqs: int | None
    max_batched_tokens: int
    reserves_activation: bool         # the activation peak is held out of the pool
    fp8_kv_with_fp8_weights: bool
    block_size: int
    kv_on_demand: bool                # KV blocks allocated as tokens arrive (analysis._batch_running)
    sources: Mapping[str, str]


def _version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(p) for p in re.findall(r"\d+", str(version))[:3])


def _sglang_fraction(tp: int) -> float:
    """SGLang's mem_fraction_static default by tensor-parallel size (ServerArgs.__post_init__, v0.4)."""
    for size, frac in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= size:
            return frac
    return 0.88


VLLM_SOURCE = ("vllm/engine/arg_utils.py get_batch_defaults (commit 99d7eb5): 'if device_memory >= 70 * GiB_bytes "
               "and \"a100\" not in device_name: [...] UsageContext.OPENAI_API_SERVER: 8192 [...] 1024' "
               "else 2048 / 256; gpu_memory_utilization default 0.9")
TRTLLM_SOURCE = ("tensorrt_llm/builder.py BuildConfig: 'max_batch_size: int = 2048', 'max_num_tokens: int = 8192'; "
                 "KvCacheConfig 'free_gpu_memory_fraction ... = 0.9' (https://nvidia.github.io/TensorRT-LLM/"
                 "llm-api/reference/KvCacheConfig.html)")
SGLANG_SOURCE = ("sglang python/sglang/srt/server_args.py ServerArgs.__post_init__ (v0.4): mem_fraction_static "
                 "0.88 (tp 1), 0.87 (tp >= 2), 0.85 (tp >= 4), 0.81 (tp >= 8), 0.79 (tp >= 16); chunked_prefill_size "
                 "8192 (2048 under 25 GB)")


PAGED_SOURCE = ("PagedAttention (Kwon et al., SOSP 2023, sec. 4.1: vLLM 'allocates [...] physical blocks on "
                "demand'); SGLang's token-level pool (RadixAttention, Zheng et al., 2024) grows token by token")
TRTLLM_SCHEDULER_SOURCE = ("TensorRT-LLM's paged KV cache manager (blocks of tokens_per_block). Its default capacity "
                           "policy GUARANTEED_NO_EVICT plans for whole lengths, yet in the 1,098 measured TensorRT-LLM "
                           "closed-loop rows of validation/silicon/silicon_train.csv (versions 0.7-1.2) the engine ran "
                           "users beyond the whole-context pool (TTFT MAPE 158% reserving whole contexts, 91% at the "
                           "mean context): the rule follows the measurements")


def profile(engine: str, version: str | None, tp: int, gpu_memory_bytes: float, gpu_name: str,
            max_model_len: int) -> Profile:
    """The defaults of ``engine`` (at ``version``; the newest rules when None) on this GPU and layout."""
    key = ALIASES.get(engine, engine)
    v = _version_tuple(version)
    if key == "vllm":
        big = gpu_memory_bytes >= 70 * GiB and "a100" not in gpu_name.lower()
        if v and v < (0, 8):  # V0 engine: no chunked prefill by default up to 32k context
            chunked = max_model_len > 32768
            return Profile(key, version or "", "of_total", 0.9, 256,
                           512 if chunked else max(max_model_len, 2048), True, False, 16, True,
                           {"batch": "vLLM V0 SchedulerConfig: max_num_seqs 256; max_num_batched_tokens = "
                                     "max(max_model_len, 2048) without chunked prefill (on by default only above "
                                     "32k context, then 512)", "pool": VLLM_SOURCE})
        return Profile(key, version or "", "of_total", 0.9, 1024 if big else 256, 8192 if big else 2048, True,
                       False, 16, True, {"batch": VLLM_SOURCE, "pool": VLLM_SOURCE, "blocks": PAGED_SOURCE})
    if key == "tensorrt-llm":
        return Profile(key, version or "", "of_free", 0.9, 2048, 8192, True, True, 32, True,
                       {"batch": TRTLLM_SOURCE, "pool": TRTLLM_SOURCE, "blocks": TRTLLM_SCHEDULER_SOURCE})
    if key == "sglang":
        small = gpu_memory_bytes < 25e9
        return Profile(key, version or "", "of_total", _sglang_fraction(tp), None, 2048 if small else 8192, False,
                       False, 1, True, {"batch": SGLANG_SOURCE, "pool": SGLANG_SOURCE, "blocks": PAGED_SOURCE})
    raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")


def activation_peak_bytes(tokens: ArrayLike, hidden_size: ArrayLike, intermediate_size: ArrayLike,
                          tp: ArrayLike) -> np.ndarray:
    """Activation peak of a forward pass over ``tokens`` tokens on one GPU: ``T x 2 B x (3 I / tp + 3 H)`` [B].

    At the MLP, the tensors alive at once are the gate/up projection's output (2 I / tp values per token), the
    activated product (I / tp) and three hidden-size buffers (residual, normed input, layer output; H each),
    in bf16. It is the peak vLLM's profile run measures: Llama-3.1-8B (H 4,096, I 14,336) at 20,000 and
    29,000 batched tokens gives 2.06 and 2.99 GiB, where vLLM logged 2.07 and 2.99 GiB (peak_torch_memory
    - weights, https://github.com/vllm-project/vllm/issues/10517).
    """
    t = np.asarray(tokens, float)
    return t * ACTIVATION_VALUE_BYTES * (3.0 * np.asarray(intermediate_size, float) / np.asarray(tp, float)
                                          + 3.0 * np.asarray(hidden_size, float))


def pool_bytes_of_free(gpu_memory_bytes: ArrayLike, free_fraction: ArrayLike, used_bytes: ArrayLike) -> np.ndarray:
    """TensorRT-LLM's KV pool: ``fraction x (memory - weights - runtime buffers)`` [B] (may be <= 0).

    KvCacheConfig.free_gpu_memory_fraction: "fraction of free memory after loading the model" (default 0.9).
    80 GiB, 0.9, 16 GiB used: 0.9 x 64 GiB = 57.6 GiB, where the of-total rule gives 56 GiB.
    Excel: ``=free_fraction*(gpu_memory_bytes-used_bytes)``.
    """
    return np.asarray(free_fraction, float) * (np.asarray(gpu_memory_bytes, float) - np.asarray(used_bytes, float))


def batched_prefill_s(prefill_s: Callable[[np.ndarray], np.ndarray], prompt_tokens: ArrayLike,
                      budget_tokens: ArrayLike) -> np.ndarray:
    """GPU time one prompt costs when the engine packs prompts into passes of ``T`` tokens [s]:
    ``t_prefill(T) x P / T`` with ``T = max(budget, P)``.

    Continuous-batching engines run the prompts waiting together, up to the token budget of one pass
    (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size), so a pass's
    weight read and fixed costs are shared by its prompts; one prompt alone pays them in full.
    Excel (``prefill_s(T)`` the prefill of a pass over T tokens, written out): ``=prefill_s(MAX(budget_tokens,
    prompt_tokens))*prompt_tokens/MAX(budget_tokens,prompt_tokens)``.
    """
    p = np.asarray(prompt_tokens, float)
    t = np.maximum(np.asarray(budget_tokens, float), p)
    return prefill_s(t) * p / t


def apply(serving: Mapping[str, Any], engine: str, version: str | None, *, tp: int, gpu_memory_bytes: float,
          gpu_name: str, max_model_len: int, hidden_size: int | None, intermediate_size: int | None,
          peak_bandwidth: float | None = None, expert_parallel: int = 1,
          closed_loop: bool = False, moe: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Serving values the engine supplies for keys absent from ``serving``, and one line per default applied.

    ``expert_parallel`` > 1: the experts' all-to-all pays the collective latency too (``roofline.alltoall_fixed_s``),
    so the latency is set wherever the GPUs exchange activations, tensor parallel or not (attention data parallel
    ranks of one GPU each, tp 1, dispatch and combine at every MoE layer as much as tp 8 does).

    Keys returned: memory_utilization or kv_cache_free_gpu_memory_fraction, max_num_seqs, max_batched_tokens,
    block_size, step_overhead_s, allreduce_latency_s, activation_bytes, request_latency_s
    (``request_latency_for``), clustering (``clustering_for`` the model class, ``moe``: a mixture-of-experts model;
    stated where ``closed_loop``: the scenario is one without think time). The caller merges them under the
    user's keys.
    """
    p = profile(engine, version, tp, gpu_memory_bytes, gpu_name, max_model_len)
    name = f"{p.engine}{' ' + p.version if p.version else ''}"
    out: dict[str, Any] = {}
    lines: list[str] = []

    def put(key: str, value: Any, line: str) -> None:
        out[key] = value
        lines.append(f"{name}: {line}")

    if p.pool_rule == "of_free":
        if "kv_cache_free_gpu_memory_fraction" not in serving and "memory_utilization" not in serving:
            put("kv_cache_free_gpu_memory_fraction", p.memory_fraction,
                f"KV pool = {p.memory_fraction:g} x (memory - weights - runtime buffers) (free_gpu_memory_fraction)")
    elif "memory_utilization" not in serving:
        what = "mem_fraction_static" if p.engine == "sglang" else "gpu_memory_utilization"
        put("memory_utilization", p.memory_fraction, f"{what} {p.memory_fraction:g}")
    if p.max_num_seqs is not None and "max_num_seqs" not in serving:
        put("max_num_seqs", p.max_num_seqs, f"max_num_seqs {p.max_num_seqs}"
            + (" (max_batch_size)" if p.engine == "tensorrt-llm" else ""))
    tokens = serving.get("max_batched_tokens", p.max_batched_tokens)
    if "max_batched_tokens" not in serving:
        put("max_batched_tokens", p.max_batched_tokens, f"max_num_batched_tokens {p.max_batched_tokens}")
    if "block_size" not in serving:
        put("block_size", p.block_size, f"block size {p.block_size} tokens")
    put("batched_prefill", 1.0, f"prompts batched into prefill passes of {tokens} tokens")
    out["attention_arithmetic"] = True
    lines.append(f"{name}: prefill counts attention's arithmetic, heads x (q.k + v dims) x P^2 FLOPs a KV layer "
                 f"at the 16-bit peak (the essays count the weights' 2 N per token only)")
    if p.kv_on_demand:
        put("kv_on_demand", 1.0, "KV blocks allocated as tokens arrive: under load the pool holds the running batch at "
                                 "the mean context, prompt + answer / 2")
    family = gpu_family(gpu_name)
    fitted = FITTED_EFFICIENCY.get(family or "") or FITTED_EFFICIENCY.get("all")
    family = family if family in FITTED_EFFICIENCY else "pooled over the families with data"
    if "step_overhead" not in serving:
        o, why = step_overhead_for(p.engine, gpu_family(gpu_name)) if fitted else (STEP_OVERHEAD_S[p.engine], "")
        put("step_overhead_s", o, f"step overhead {o * 1e3:.3g} ms" + (f" ({why})" if why else ""))
    plateaus_given = bool(serving.get("_plateaus_given"))  # a calibrated profile fitted under these curves
    if fitted and (plateaus_given or not serving.get("_explicit_efficiency")):
        if not plateaus_given:
            put("bandwidth_efficiency", fitted[0], f"bandwidth efficiency {fitted[0]:.3f} (fitted, {family})")
            put("flops_efficiency", fitted[1], f"FLOP/s efficiency {fitted[1]:.3f} (fitted, {family})")
        out["curve_plateaus"] = (fitted[0], fitted[1])  # what small_pass_half_tokens caps the curve with
        if peak_bandwidth:
            half_bytes, half_tokens = efficiency_curves(peak_bandwidth)
            put("bandwidth_half_bytes", half_bytes,
                f"bandwidth efficiency curve e(S) = {fitted[0]:.3f} S / (S + layers x {half_bytes / 1e6:.0f} MB), "
                f"S the bytes per step per GPU ({LAYER_HALF_S * 1e6:.1f} us of peak bandwidth per layer, H200 "
                f"decode steps)")
            put("flops_half_tokens", half_tokens,
                f"FLOP/s efficiency curve e(T) = {fitted[1]:.3f} T / (T + {half_tokens:g}), T the tokens per pass "
                f"(H200 bf16 matmuls)")
    latency, why = request_latency_for(p.engine, gpu_family(gpu_name), serving.get("front_end", DEFAULT_FRONT_END))
    if latency and "request_latency" not in serving:
        put("request_latency_s", latency, f"request latency {latency * 1e3:.3g} ms on every TTFT: the serving path "
                                          f"outside the engine's passes ({why}); serving.request_latency sets it")
    out["clustering"] = share = clustering_for(moe)
    if closed_loop:
        lines.append(f"{name}: closed loop without think time: {share:.1%} of the other users' requests arrive in "
                     f"the same step (fixed-length users fall into step; fitted on the silicon sample's "
                     f"{'MoE' if moe else 'dense'} models); workload.clustering sets it")
    if (tp > 1 or expert_parallel > 1) and "allreduce_latency" not in serving:
        what = "all-reduce" if tp > 1 else "collective (the experts' all-to-all)"
        put("allreduce_latency_s", ALLREDUCE_LATENCY_S, f"{what} latency {ALLREDUCE_LATENCY_S * 1e6:g} us")
    if p.reserves_activation and "activation_memory" not in serving:
        if hidden_size and intermediate_size:
            act = float(activation_peak_bytes(tokens, hidden_size, intermediate_size, tp))
            put("activation_bytes", act, f"activation peak {act / GiB:.2f} GiB ({tokens} tokens x 2 B x "
                                         f"(3 x {intermediate_size}/{tp} + 3 x {hidden_size}))")
        else:
            lines.append(f"{name}: activation peak not reserved (the model gives no hidden/intermediate size)")
    return out, lines
