"""What a scenario describes: Model, Gpu, Serving, Workload and Slo, validated from YAML mappings.

Each section is a small frozen dataclass in base units. ``*_from_mapping``
functions turn one YAML section (catalog entry merged with the user's keys, the
user's keys winning) into a dataclass, collecting every problem with its field
path before raising one ScenarioError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from capacity.errors import ScenarioError, show
from capacity.formulas.memory import BYTES_PER_VALUE
from capacity.formulas.quantisation import SCHEMES, embedding_params, routed_expert_params
from capacity.formulas.quantisation import flops_key as scheme_flops_key
from capacity.formulas.quantisation import weight_bytes as scheme_weight_bytes
from capacity.inputs import catalog
from capacity.inputs.engines import ALIASES, DEFAULT_FRONT_END, ENGINES, FRONT_ENDS, IDEAL
from capacity.inputs.numbers import NUMBER
from capacity.inputs.speculative import check_speculative
from capacity.inputs.units import BASE_UNIT, parse_quantity

#: Bytes per weight by weight dtype. int4 carries one fp16 scale per group of 128
#: weights: 0.5 + 2/128 = 0.516 B ("about 0.52", essay 001).
BYTES_PER_WEIGHT = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.0 / 128}

#: Catalog FLOP/s key used for each weight dtype (W8A8 runs on 8-bit tensor cores).
FLOPS_KEY_FOR_DTYPE = {"fp8": "flops_fp8", "int8": "flops_int8"}


@dataclass(frozen=True, slots=True)
class Model:
    """A model: architecture numbers and dtypes. ``weight_bytes`` [B] is given or params x bytes/weight."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    params: float
    weight_bytes: float
    weight_dtype: str = "fp16"
    kv_dtype: str = "fp16"
    attention_heads: int | None = None
    max_position_embeddings: int | None = None
    source: str = "user"
    kv_latent_dim: int = 0                  # MLA: kv_lora_rank + qk_rope_head_dim values per layer; 0 otherwise
    sliding_window: int | None = None       # tokens kept by local layers
    local_layer_fraction: float = 0.0       # share of KV layers that are local (sliding window)
    experts: int = 0                        # routed experts per MoE layer; 0 = dense
    moe_layers: int | None = None           # layers with routed experts (the all-to-all); None: layers
    transformer_layers: int | None = None   # every layer (a hybrid's linear-attention/SSM ones too); None: layers
    experts_per_token: int = 0
    active_params: float | None = None      # params a token uses (MoE); None = params
    hidden_size: int | None = None
    intermediate_size: int | None = None    # MLP width (engine activation peak)
    vocab_size: int | None = None           # embedding rows (16-bit embeddings of a quantised checkpoint)
    tie_word_embeddings: bool = False
    quantization: str | None = None         # a quantisation.SCHEMES key; None: the weight_dtype convention
    attention_dim: int | None = None        # query heads x (q.k + v head dims), per KV layer; None: heads x 2 head_dim

    @property
    def attention_width(self) -> float:
        """Values one query token's attention multiplies per context token and KV layer, over QK^T and PV:
        ``D = heads x (d_qk + d_v)`` (``attention_dim``; a GQA model ``heads x 2 head_dim``; MLA as engines
        prefill it, ``heads x (qk_nope + qk_rope + v_head_dim)``) [values]; 0 where the heads are unknown."""
        if self.attention_dim:
            return float(self.attention_dim)
        return float(2 * self.attention_heads * self.head_dim) if self.attention_heads else 0.0

    @property
    def kv_bytes_per_value(self) -> float:
        return BYTES_PER_VALUE[self.kv_dtype]


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU type and how many form a tensor-parallel replica. Figures are peak; efficiencies scale them."""

    name: str
    memory_bytes: float
    bandwidth: float
    flops: float
    count: int = 1
    bandwidth_efficiency: float = 1.0
    flops_efficiency: float = 1.0
    price_per_hour: float | None = None
    source: str = "user"
    interconnect_bandwidth: float | None = None   # total both ways per GPU, as vendors state it [B/s]
    allreduce_latency_s: float = 0.0
    pipeline_parallel: int = 1
    replicas: int = 1
    bandwidth_half_bytes: float = 0.0   # efficiency curve (engine profiles): bytes per layer at half the plateau
    flops_half_tokens: float = 0.0      # efficiency curve (engine profiles): tokens per pass at half the plateau
    nvlink_domain: int | None = None    # GPUs one NVLink (scale-up) domain joins: 8 (HGX), 72 (NVL72); None: unknown
    # MoE layout of a replica (scenario keys serving.attention_data_parallel, serving.expert_parallel,
    # serving.expert_load_imbalance; docs/model.md "MoE parallelism"): attention ranks of ``count`` GPUs each, the
    # routed experts spread over ``expert_parallel`` of the stage's ``count x attention_data_parallel`` GPUs.
    attention_data_parallel: int = 1
    expert_parallel: int = 1
    expert_load_imbalance: float = 1.0
    network_bandwidth: float | None = None  # per GPU, one way, beyond the NVLink domain (scale-out NIC) [B/s]
    # Power (issue 29; docs/model.md "Power and energy"): board power at full load (catalog ``tdp_watts``, each
    # with its source), the electricity price and the facility's PUE (1: the boards alone).
    tdp_watts: float | None = None
    energy_price_per_kwh: float | None = None
    pue: float = 1.0
    attention_flops: float | None = None  # peak of 16-bit matmuls, where attention runs (flops_bf16); None: flops

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica: tensor x attention data x pipeline parallel."""
        return self.count * self.attention_data_parallel * self.pipeline_parallel

    @property
    def effective_bandwidth(self) -> float:
        """Bandwidth the roofline uses: peak x bandwidth_efficiency [B/s]."""
        return self.bandwidth * self.bandwidth_efficiency

    @property
    def effective_flops(self) -> float:
        """FLOP/s the roofline uses: peak x flops_efficiency [FLOP/s]."""
        return self.flops * self.flops_efficiency

    @property
    def effective_attention_flops(self) -> float:
        """FLOP/s of attention's arithmetic: the 16-bit peak (``attention_flops``, else ``flops``) x flops_efficiency
        [FLOP/s]. Engines run prefill attention in 16 bit whatever the weights' dtype (FlashAttention, FlashInfer,
        TensorRT-LLM's context FMHA by default)."""
        return (self.attention_flops or self.flops) * self.flops_efficiency


#: Engine defaults where a scenario leaves a setting out (vLLM's defaults: gpu_memory_utilization 0.90,
#: block_size 16, and the chunked-prefill token budget max_num_batched_tokens 8192 of its V1 engine).
DEFAULT_MEMORY_UTILIZATION = 0.90
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_BATCHED_TOKENS = 8192


@dataclass(frozen=True, slots=True)
class Serving:
    """Engine settings. ``max_model_len`` None means the model's context length."""

    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    block_size: int = DEFAULT_BLOCK_SIZE
    max_model_len: int | None = None
    step_overhead_s: float = 0.0
    max_num_seqs: int | None = None
    reserved_bytes: float = 0.0   # per GPU outside the KV pool: activation peak + CUDA graphs + non-torch memory
    # token budget of a chunked-prefill iteration (analytic option, docs/fleet.md)
    max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS
    kv_transfer_bandwidth: float | None = None  # prefill -> decode pool link [B/s]; None: free (docs/fleet.md)
    engine: str | None = None              # engines.ENGINES; None: the essays' convention (serving.engine: ideal)
    engine_note: str = ""                  # the engine choice the answer states (engines.engine_choice)
    engine_version: str | None = None
    kv_free_fraction: float = 0.0          # TensorRT-LLM rule: pool = fraction x (memory - weights - reserves); 0: off
    engine_defaults: tuple[str, ...] = ()  # the engine defaults applied, one line each
    batched_prefill: bool = False          # prompts share prefill passes of max_batched_tokens (engine profiles)
    kv_on_demand: bool = False             # KV blocks allocated as tokens arrive (analysis._batch_running)
    attention_arithmetic: bool = False     # prefill counts attention's FLOPs (engine profiles; the essays do not)
    speculative: dict | None = None        # serving.speculative validated (inputs.speculative); None: no speculation
    request_latency_s: float = 0.0         # a request's time outside the engine's passes, added to its TTFT [s]
    front_end: str = DEFAULT_FRONT_END     # the serving path before the engine (engines.FRONT_ENDS)


@dataclass(frozen=True, slots=True)
class Workload:
    """One request shape and the offered load: an open loop (``arrival_rate`` [requests/s]) or a closed one
    (``concurrency`` users in flight, each sending its next request ``think_time_s`` after its answer)."""

    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0
    arrival_rate: float | None = None
    concurrency: float | None = None   # users in flight (closed loop) [users]; None: an open loop or no load
    think_time_s: float = 0.0          # closed loop: a user's pause between an answer and the next request [s]
    clustering: float = 0.0            # closed loop, no think time: share of the other users arriving in my step [-]
    daily_users: float | None = None   # the arrival rate's origin where given as users a day [users]
    requests_per_user_per_day: float | None = None  # [requests/user/day]
    peak_hour_share: float | None = None  # share of a day's requests in its busiest hour [-]

    @property
    def tokens_per_request(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency promises [s]; None means no promise."""

    tpot_s: float | None = None
    ttft_s: float | None = None
    percentile: float | None = None  # e.g. 99: the promises hold for 99% of requests (capacity/model/percentiles.py)


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """How a fleet is sized for the workload's load (scenario section ``fleet``; ``capacity/planning/fleet.py``).

    Design load = load x ``peak_factor`` [-]; each replica keeps ``headroom`` [fraction, 0 to <1] of its goodput
    spare. The defaults (1, 0) size for the load as entered.
    """

    peak_factor: float = 1.0
    headroom: float = 0.0
    modes: tuple[str, ...] = ()          # serving modes the answer may choose (``FLEET_MODES``); (): every mode
    tensor_parallel: tuple[int, ...] = ()  # tensor-parallel sizes it may choose; (): 1, 2, 4, 8 and gpu.count


# --- field validators: (value, path) -> converted value, or raise ScenarioError ------------------------------

Check = Callable[[Any, str], Any]


def as_number(value: Any, path: str) -> float:
    """A finite number of plausible size from a number or numeric text; ScenarioError naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScenarioError(f"{path} must be a number, got {show(value)}")
    try:
        if isinstance(value, str) and not NUMBER.fullmatch(value.strip()) and value.strip().lower() not in (
                "nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
            raise ValueError(value)  # ASCII digits only: float() reads "١٢" as 12 and "1_000" as 1000
        number = float(value)
    except ValueError:
        hint = " (a fraction: write 0.76, not 76%)" if isinstance(value, str) and value.strip().endswith("%") else ""
        raise ScenarioError(f"{path} must be a number, got {show(value)}{hint}") from None
    except OverflowError:  # an integer beyond 1e308
        raise ScenarioError(f"{path} is implausibly large ({show(value)}); the limit is {NUMBER_MAX:g}") from None
    if not math.isfinite(number):
        raise ScenarioError(f"{path} must be finite, got {show(value)}")
    if abs(number) > NUMBER_MAX:
        raise ScenarioError(f"{path} is implausibly large ({show(value)}); the limit is {NUMBER_MAX:g}")
    return number


def positive(value: Any, path: str) -> float:
    number = as_number(value, path)
    if number <= 0:
        raise ScenarioError(f"{path} must be > 0, got {show(value)}")
    return number


def non_negative(value: Any, path: str) -> float:
    number = as_number(value, path)
    if number < 0:
        raise ScenarioError(f"{path} must be >= 0, got {show(value)}")
    return number


def _integer(value: Any, path: str, minimum: int) -> int:
    number = as_number(value, path)
    if number != int(number) or number < minimum or number > 1e15:
        raise ScenarioError(f"{path} must be a whole number >= {minimum}, got {show(value)}")
    return int(number)


def in_range(low: float, high: float, meaning: str) -> Callable[[Any, str], float]:
    """A validator of a number in ``[low, high]``: its ScenarioError names the field, the range and ``meaning``."""
    def check(value: Any, path: str) -> float:
        number = as_number(value, path)
        if not low <= number <= high:
            raise ScenarioError(f"{path} must be in [{low:g}, {high:g}] ({meaning}), got {show(value)}")
        return number
    return check


#: The busiest GPU's routed tokens over the mean (an expert load imbalance).
_at_least_one = in_range(1, 100, "the busiest GPU's routed tokens over the mean")
#: A power usage effectiveness: facility power over IT power.
_pue = in_range(1, 5, "facility power over the IT power; 1: the GPUs alone")


def positive_int(value: Any, path: str) -> int:
    return _integer(value, path, 1)


def non_negative_int(value: Any, path: str) -> int:
    return _integer(value, path, 0)


def fraction(value: Any, path: str) -> float:
    number = as_number(value, path)
    if not 0 < number <= 1:
        hint = f" (a fraction: {number:g}% is {number / 100:g})" if 5 <= number <= 100 else ""
        raise ScenarioError(f"{path} must be in (0, 1], got {show(value)}{hint}")
    return number


def share(value: Any, path: str) -> float:
    """A share in [0, 1] (0 allowed, unlike ``fraction``)."""
    number = as_number(value, path)
    if not 0 <= number <= 1:
        raise ScenarioError(f"{path} must be in [0, 1], got {show(value)}")
    return number


#: Longest name or other free text accepted [characters].
MAX_TEXT = 200


def text(value: Any, path: str) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ScenarioError(f"{path} must be text, got {show(value)}")
    if len(str(value)) > MAX_TEXT:
        raise ScenarioError(f"{path} is {len(str(value)):,} characters long; the limit is {MAX_TEXT}")
    if any("\ud800" <= ch <= "\udfff" for ch in str(value)):
        raise ScenarioError(f"{path} holds a lone surrogate, which no file can store, got {show(value)}")
    return str(value)


def dtype(value: Any, path: str) -> str:
    name = str(value).lower() if isinstance(value, str) else ""
    if name not in BYTES_PER_VALUE:
        raise ScenarioError(f"{path} {show(value)} is not a known dtype; use one of {', '.join(BYTES_PER_VALUE)}")
    return name


#: Largest value of each quantity kind that any real deployment could mean (an exabyte, 100 PB/s,
#: 100 EFLOP/s, four months); beyond it a number is a typo, not a sizing.
QUANTITY_MAX = {"bytes": 1e18, "bandwidth": 1e17, "flops": 1e20, "time": 1e7}
NUMBER_MAX = 1e18


def quantity(kind: str, allow_zero: bool = False) -> Check:
    def check(value: Any, path: str) -> float:
        number = parse_quantity(value, kind, path)
        if number < 0 or (number == 0 and not allow_zero):
            raise ScenarioError(f"{path} must be {'>= 0' if allow_zero else '> 0'}, got {show(value)}")
        if number > QUANTITY_MAX[kind]:
            raise ScenarioError(f"{path} is implausibly large ({show(value)}); the limit is {QUANTITY_MAX[kind]:g} "
                                f"{BASE_UNIT[kind]}")
        return number

    return check


def _choice(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    name = str(value).lower() if isinstance(value, str) else ""
    if name not in allowed:
        raise ScenarioError(f"{path} must be one of {', '.join(allowed)}, got {show(value)}")
    return name


#: Fields a catalog entry may carry that the analytic core does not read (yet); accepted, not checked.
_INFO = {"aliases", "source", "notes", "params_source", "hf_id", "key", "missing", "vendor", "memory_type",
         "interconnect", "price_source", "tdp_watts", "intermediate_size", "vocab_size",
         "tie_word_embeddings", "num_shared_experts", "moe_intermediate_size",
         "qk_nope_head_dim", "v_head_dim", "q_lora_rank", "flops_bf16",
         "flops_fp8", "flops_int8", "flops_fp16", "memory_usable", "form_factor",
         "flops_fp4", "efficiency_source", "architecture", "layer_types", "rope_theta", "num_attention_layers",
         "segment", "segment_source", "network"}

MODEL_FIELDS: dict[str, Check] = {
    "name": text, "layers": positive_int, "kv_heads": positive_int, "head_dim": positive_int,
    "params": positive, "weights": quantity("bytes"), "weight_dtype": dtype, "kv_dtype": dtype,
    "attention_heads": positive_int, "max_position_embeddings": positive_int,
    "attention": lambda v, p: _choice(v, p, ("gqa", "mha", "mqa", "mla")), "kv_lora_rank": positive_int,
    "qk_rope_head_dim": positive_int, "sliding_window": positive_int,
    "sliding_window_layers": lambda v, p: _choice(v, p, ("all", "alternate", "none")),
    "local_layers": non_negative_int, "num_experts": non_negative_int, "experts_per_token": non_negative_int,
    "active_params": positive, "hidden_size": positive_int, "attention_layers": positive_int,
    "first_dense_layers": non_negative_int,
    "quantization": lambda v, p: _choice(v, p, tuple(SCHEMES)),
}
GPU_FIELDS: dict[str, Check] = {
    "name": text, "memory": quantity("bytes"), "bandwidth": quantity("bandwidth"), "flops": quantity("flops"),
    "count": positive_int, "bandwidth_efficiency": fraction, "flops_efficiency": fraction,
    "price_per_hour": non_negative, "interconnect_bandwidth": quantity("bandwidth"),
    "allreduce_latency": quantity("time", allow_zero=True), "pipeline_parallel": positive_int,
    "replicas": positive_int, "nvlink_domain": positive_int, "network_bandwidth": quantity("bandwidth"),
    "tdp_watts": positive, "energy_price_per_kwh": non_negative, "pue": _pue,
    "attention_flops": quantity("flops"),
}
#: ``gpu`` keys that describe the site, not the GPU: the electricity price and the facility's PUE (issue 29). They stay
#: when a layout or a pool runs on another GPU type (``split_pools.pool_mapping``, ``sizing.layout_scenarios``).
SITE_GPU_KEYS = ("energy_price_per_kwh", "pue")
SERVING_FIELDS: dict[str, Check] = {
    "memory_utilization": fraction, "block_size": positive_int, "max_model_len": positive_int,
    "step_overhead": quantity("time", allow_zero=True), "max_num_seqs": positive_int,
    "activation_memory": quantity("bytes", allow_zero=True), "cuda_graph_memory": quantity("bytes", allow_zero=True),
    "non_torch_memory": quantity("bytes", allow_zero=True), "max_batched_tokens": positive_int,
    "kv_transfer_bandwidth": quantity("bandwidth"),
    "attention_data_parallel": positive_int, "expert_parallel": positive_int, "moe_tensor_parallel": positive_int,
    "expert_load_imbalance": _at_least_one,
    "speculative": lambda v, p: check_speculative(v, p),
    "engine": lambda v, p: ALIASES.get(str(v).lower(), _choice(v, p, ENGINES + (IDEAL,) + tuple(ALIASES))),
    "engine_version": text, "kv_cache_free_gpu_memory_fraction": fraction,
    "request_latency": quantity("time", allow_zero=True),
    "front_end": lambda v, p: _choice(v, p, FRONT_ENDS),
}
WORKLOAD_FIELDS: dict[str, Check] = {
    "prompt_tokens": positive_int, "output_tokens": positive_int, "shared_prefix_tokens": non_negative_int,
    "arrival_rate": non_negative, "concurrency": positive_int, "think_time": quantity("time", allow_zero=True),
    "daily_users": positive, "requests_per_user_per_day": positive, "peak_hour_share": fraction,
    "clustering": share,
}

#: A load given as users a day: all three keys, converted to ``arrival_rate`` (``formulas.load.peak_hour_rate_rps``).
DAILY_LOAD = ("daily_users", "requests_per_user_per_day", "peak_hour_share")


def load_problems(workload: Mapping[str, Any]) -> list[str]:
    """One load per scenario: an arrival rate (open loop) or users in flight (closed loop), not both; a think
    time only with users in flight. ``workload``: the validated ``workload`` section."""
    problems = []
    if workload.get("arrival_rate") and workload.get("concurrency"):
        problems.append(f"workload gives both arrival_rate ({workload['arrival_rate']:g} requests/s) and concurrency "
                        f"({workload['concurrency']:g} users in flight); give one load: an open loop (arrival_rate) "
                        f"or a closed loop (concurrency, with think_time)")
    daily = [key for key in DAILY_LOAD if workload.get(key)]
    if daily and len(daily) < len(DAILY_LOAD):
        missing = ", ".join(k for k in DAILY_LOAD if k not in daily)
        problems.append(f"workload gives {', '.join(daily)} but not {missing}: a load of daily users needs all three "
                        f"(users x requests a day x the peak hour's share)")
    if daily and (workload.get("arrival_rate") or workload.get("concurrency")):
        other = "arrival_rate" if workload.get("arrival_rate") else "concurrency"
        problems.append(f"workload gives daily users and {other}; give one load: requests/s, users in flight, or "
                        f"daily users")
    if workload.get("think_time") and not workload.get("concurrency"):
        problems.append("workload.think_time is a closed loop's pause between an answer and the next request; it "
                        "needs workload.concurrency (users in flight)")
    return problems
def percentile(value: Any, path: str) -> float:
    """A percentile in (0, 100): ``99`` or ``"p99"``; ScenarioError naming ``path`` otherwise."""
    raw = value[1:] if isinstance(value, str) and value.lower().startswith("p") else value
    try:
        if isinstance(raw, str) and not NUMBER.fullmatch(raw.strip()):
            raise ValueError(raw)  # ASCII digits only
        number = math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < 100:
        raise ScenarioError(f"{path} must be a percentile between 0 and 100 (e.g. 99 or p99), got {value!r}")
    return number


SLO_FIELDS: dict[str, Check] = {"tpot": quantity("time"), "ttft": quantity("time"), "percentile": percentile}


def headroom_fraction(value: Any, path: str) -> float:
    """A spare share of each replica's goodput in [0, 1); ScenarioError naming ``path`` otherwise."""
    number = as_number(value, path)
    if not 0 <= number < 1:
        hint = f" (a fraction: {number:g}% is {number / 100:g})" if 1 <= number < 100 else ""
        raise ScenarioError(f"{path} must be in [0, 1), got {show(value)}{hint}")
    return number


def _list_of(value: Any, path: str) -> list[Any]:
    items = [value] if isinstance(value, (int, float, str)) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple)) or not items or len(items) > 16:
        raise ScenarioError(f"{path} must be a value or a list of 1 to 16 values, got {show(value)}")
    return list(items)


def serving_modes(value: Any, path: str) -> tuple[str, ...]:
    """Serving modes the answer may choose, from ``FLEET_MODES``; ScenarioError naming ``path`` otherwise."""
    items = _list_of(value, path)
    bad = [item for item in items if item not in ALL_FLEET_MODES]
    if bad:
        raise ScenarioError(f"{path} must name serving modes among {', '.join(ALL_FLEET_MODES)}, got {show(bad[0])}")
    return tuple(dict.fromkeys(items))


def tensor_parallel_sizes(value: Any, path: str) -> tuple[int, ...]:
    """Tensor-parallel sizes the answer may choose, whole numbers 1 to 1,024; ScenarioError naming ``path``."""
    out = []
    for i, item in enumerate(_list_of(value, path)):
        number = as_number(item, f"{path}[{i}]")
        if not number.is_integer() or not 1 <= number <= 1024:
            raise ScenarioError(f"{path}[{i}] must be a whole number of GPUs from 1 to 1,024, got {show(item)}")
        out.append(int(number))
    return tuple(dict.fromkeys(out))


FLEET_FIELDS: dict[str, Check] = {"peak_factor": positive, "headroom": headroom_fraction, "modes": serving_modes,
                                  "tensor_parallel": tensor_parallel_sizes}

#: The layouts fleet sizing and search compare by default: serving modes, tensor-parallel sizes [GPUs].
FLEET_MODES = ("colocated", "chunked", "disaggregated")
#: Every serving mode a fleet may compare: the defaults and ``split`` (prefill and decode pools each on its own GPU
#: type and layout; compared by default where the scenario has a ``pools`` section, docs/fleet.md).
ALL_FLEET_MODES = (*FLEET_MODES, "split")
FLEET_TENSOR_PARALLEL = (1, 2, 4, 8)


def check_section(section: str, raw: Any, fields: Mapping[str, Check], extra: frozenset[str] = frozenset(),
                  problems: list[str] | None = None) -> dict[str, Any]:
    """Validate one mapping against ``fields``; append problems (unknown keys suggest close names)."""
    problems = [] if problems is None else problems
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{section} must be a mapping of keys to values, got {show(raw)}")
        return {}
    clean: dict[str, Any] = {}
    unknown = 0
    for key, value in raw.items():
        path = f"{section}.{key}"
        if not isinstance(key, str):
            problems.append(f"{section} has key {show(key)}, which is not text; keys are names like "
                            f"{next(iter(fields))}")
        elif key in fields:
            if value is None:
                continue
            try:
                clean[key] = fields[key](value, path)
            except ScenarioError as exc:
                problems.extend(exc.problems)
        elif key in extra:
            clean[key] = value
        else:
            unknown += 1
            if unknown > 20:  # no suggestions past the 20th: difflib costs, and the error shows 20 lines
                problems.append(f"{path} is not a known key")
                continue
            import difflib  # only for the error's suggestions

            close = difflib.get_close_matches(key[:100], list(fields), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; allowed: {', '.join(fields)}"
            problems.append(f"{path} is not a known key{hint}")
    return clean


def _merge_catalog(section: str, raw: Any, lookup: Callable[[object], dict[str, Any]],
                   problems: list[str]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Return (catalog entry or {}, user keys) for a section that may name a catalog entry; None on failure."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        problems.append(f"{section} must be a catalog name or a mapping, got {show(raw)}")
        return None
    entry: dict[str, Any] = {}
    if "name" in raw:
        try:
            entry = lookup(raw["name"])
        except ScenarioError as exc:
            if not any(k in raw for k in ("layers", "memory")):  # else: the user's own model/GPU, named
                problems.extend(exc.problems)
                return None
    return entry, dict(raw)


def model_from_mapping(raw: Any, problems: list[str]) -> Model | None:
    """Build the Model of a scenario's ``model:`` section (catalog name plus overrides, or explicit numbers).

    MLA models (``attention: mla``) need kv_lora_rank and qk_rope_head_dim instead of kv_heads/head_dim.
    Sliding windows apply to ``local_layers`` of the layers, or to all / every other layer as
    ``sliding_window_layers`` says. ``attention_layers`` counts only the layers that hold a KV cache
    (hybrid models with SSM layers). MoE models give num_experts, experts_per_token and active_params.
    """
    if isinstance(raw, Mapping) and "config" in raw:  # a Hugging Face config.json on disk
        from capacity.inputs.hf_config import load_config

        if not isinstance(raw["config"], str) or not raw["config"]:
            problems.append(f"model.config must be the path of a config.json file, got {show(raw['config'])}")
            return None
        try:
            entry, user = load_config(raw["config"]), {k: v for k, v in raw.items() if k != "config"}
            entry["source"] = f"config.json {raw['config']}"
        except ScenarioError as exc:
            problems.extend(f"model.config: {p}" for p in exc.problems)
            return None
    else:
        found = _merge_catalog("model", raw, catalog.model, problems)
        if found is None:
            return None
        entry, user = found
    merged = {**{k: v for k, v in entry.items() if k in MODEL_FIELDS or k in _INFO}, **user}
    f = check_section("model", merged, MODEL_FIELDS, frozenset(_INFO), problems)
    mla = f.get("attention") == "mla"
    required = ("layers", "params", "kv_lora_rank", "qk_rope_head_dim") if mla else (
        "layers", "kv_heads", "head_dim", "params")
    missing = [k for k in required if merged.get(k) is None]
    if missing:
        problems.append(f"model is missing {', '.join('model.' + k for k in missing)}")
    if any(k not in f for k in required):
        return None
    layers = f.get("attention_layers", f["layers"])
    window = f.get("sliding_window")
    if "local_layers" in f:
        local = min(f["local_layers"], layers) / layers
    else:
        local = {"all": 1.0, "alternate": 0.5, "none": 0.0}[f.get("sliding_window_layers", "all")]
    experts, top_k = f.get("num_experts", 0), f.get("experts_per_token", 0)
    if experts and not 0 < top_k <= experts:
        problems.append(f"model.experts_per_token must be in [1, num_experts = {experts}], got {top_k}")
    active = f.get("active_params")
    if active is not None and active > f["params"]:
        problems.append(f"model.active_params ({active:g}) must not exceed model.params ({f['params']:g})")
    elif active is not None and experts and 0 < top_k <= experts and active < f["params"] * top_k / experts:
        problems.append(f"model.active_params ({active:g}) must be at least params x experts_per_token / "
                        f"num_experts ({f['params'] * top_k / experts:g}): the experts alone hold that many")
    weight_dtype = f.get("weight_dtype", "fp16")
    weights = f.get("weights", f["params"] * BYTES_PER_WEIGHT[weight_dtype])
    scheme = f.get("quantization")
    if scheme and "weights" not in f:  # a scheme: 16-bit embeddings/lm_head where the shapes are known
        vocab, width = _int_or_none(f.get("vocab_size")), f.get("hidden_size")
        sixteen = embedding_params(vocab, width, bool(f.get("tie_word_embeddings"))) if vocab and width else 0.0
        if SCHEMES[scheme].experts_only and experts and active is not None and 0 < top_k < experts:
            # only the routed experts are quantised: everything else (embeddings included) stays 16 bit
            sixteen = f["params"] - float(routed_expert_params(f["params"], active, experts, top_k))
        weights = float(scheme_weight_bytes(f["params"], SCHEMES[scheme].bytes_per_weight, sixteen))
    return Model(
        name=str(f.get("name", entry.get("key", "custom model"))), layers=layers, kv_heads=f.get("kv_heads", 1),
        head_dim=f.get("head_dim", 1), params=f["params"], weight_bytes=weights, weight_dtype=weight_dtype,
        kv_dtype=f.get("kv_dtype", "fp16"), attention_heads=f.get("attention_heads"),
        max_position_embeddings=f.get("max_position_embeddings"),
        source=str(entry.get("source", "user")) if entry else "user",
        kv_latent_dim=f["kv_lora_rank"] + f["qk_rope_head_dim"] if mla else 0,
        sliding_window=window, local_layer_fraction=local if window else 0.0, experts=experts,
        experts_per_token=top_k, active_params=active, hidden_size=f.get("hidden_size"),
        intermediate_size=_int_or_none(f.get("intermediate_size")), vocab_size=_int_or_none(f.get("vocab_size")),
        tie_word_embeddings=bool(f.get("tie_word_embeddings", False)), quantization=scheme,
        moe_layers=(f["layers"] - int(f.get("first_dense_layers") or 0)) if experts else None,
        transformer_layers=f["layers"] if layers != f["layers"] else None,
        attention_dim=(f["attention_heads"] * (f["qk_nope_head_dim"] + f["qk_rope_head_dim"] + f["v_head_dim"])
                       if mla and f.get("attention_heads") and f.get("qk_nope_head_dim") and f.get("v_head_dim")
                       else None))


def _int_or_none(value: Any) -> int | None:
    """A catalog info field as a whole number, or None where absent or not a positive number."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def gpu_from_mapping(raw: Any, weight_dtype: str, problems: list[str]) -> Gpu | None:
    """Build the Gpu of a scenario's ``gpu:`` section.

    Catalog figures are peak and take the catalog's efficiency factors; a figure the
    user gives explicitly is taken as effective (efficiency 1) unless the user also
    gives its efficiency key (docs/model.md, symbols BW and F). A catalog GPU's memory is the total
    the device reports (``memory_usable``, e.g. 81,559 MiB for an "80GB" H100) where the
    catalog has that reading, else the datasheet figure.
    """
    found = _merge_catalog("gpu", raw, catalog.gpu, problems)
    if found is None:
        return None
    entry, user = found
    defaults = catalog.gpu_defaults() if entry else {}
    if entry.get("memory_usable"):  # what the device reports to the engine (nvidia-smi total), not the datasheet
        entry["memory"] = entry["memory_usable"]
    if entry and "flops" not in user:
        key = (scheme_flops_key(SCHEMES[weight_dtype], frozenset(entry)) if weight_dtype in SCHEMES
               and weight_dtype not in FLOPS_KEY_FOR_DTYPE else FLOPS_KEY_FOR_DTYPE.get(weight_dtype, "flops_bf16"))
        entry["flops"] = entry.get(key, entry.get("flops_bf16"))
    merged = {**{k: v for k, v in entry.items() if k in GPU_FIELDS or k in _INFO}, **user}
    for figure in ("bandwidth", "flops"):
        eff = f"{figure}_efficiency"
        if figure in user or not entry:
            merged.setdefault(eff, 1.0)
        else:
            merged.setdefault(eff, entry.get(eff, defaults.get(eff, 1.0)))
    f = check_section("gpu", merged, GPU_FIELDS, frozenset(_INFO), problems)
    missing = [k for k in ("memory", "bandwidth", "flops") if merged.get(k) is None]
    if missing:
        problems.append(f"gpu is missing {', '.join('gpu.' + k for k in missing)}")
    if any(k not in f for k in ("memory", "bandwidth", "flops", "bandwidth_efficiency", "flops_efficiency")):
        return None  # each invalid one is among the problems already
    return Gpu(name=str(f.get("name", entry.get("key", "custom GPU"))), memory_bytes=f["memory"],
               bandwidth=f["bandwidth"], flops=f["flops"], count=f.get("count", 1),
               bandwidth_efficiency=f["bandwidth_efficiency"], flops_efficiency=f["flops_efficiency"],
               price_per_hour=f.get("price_per_hour"), source=str(entry.get("source", "user")) if entry else "user",
               interconnect_bandwidth=f.get("interconnect_bandwidth"),
               allreduce_latency_s=f.get("allreduce_latency", 0.0), pipeline_parallel=f.get("pipeline_parallel", 1),
               replicas=f.get("replicas", 1), nvlink_domain=f.get("nvlink_domain"),
               network_bandwidth=f.get("network_bandwidth"), tdp_watts=f.get("tdp_watts"),
               energy_price_per_kwh=f.get("energy_price_per_kwh"), pue=f.get("pue", 1.0),
               attention_flops=f.get("attention_flops") or (
                   parse_quantity(entry["flops_bf16"], "flops", "gpu.flops_bf16")
                   if entry.get("flops_bf16") and "flops" not in user else None))
