"""The ``simulation:`` block of a scenario, validated into a SimulationConfig.

Every problem names its field path (``simulation.policy must be one of static,
continuous, got 'x'``) and all problems are raised together as one ScenarioError.
Keys are flat so that ``simulate(scenario, rate=12)`` can override any of them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capacity.errors import ScenarioError, show
from capacity.inputs.lengths import LengthDist, length_dist, prefix_problem
from capacity.inputs.specs import DEFAULT_MAX_BATCHED_TOKENS, non_negative, positive, positive_int
from capacity.inputs.units import parse_quantity
from capacity.model.scenario import Scenario
from capacity.runtime import budget

if TYPE_CHECKING:
    from capacity.simulator.cost_models import CostModel

POLICIES = ("static", "continuous")
COST_MODELS = ("teaching", "roofline")
ARRIVALS = ("poisson", "fixed", "gamma", "on_off", "instant", "trace", "closed")
KV_ALLOCATIONS = ("on_demand", "reserve")
ROUTERS = ("round_robin", "random", "prefix_affinity")


#: Plausibility limits, checked before anything is allocated: a run of a million requests takes about half a
#: minute in the Python loop, a few seconds in the compiled one, and 600 MB.
MAX_REQUESTS = 1_000_000
MAX_REPLICAS = 1_000
#: Largest KV block [tokens] the simulator takes: it keeps one counter per token position of a block (vLLM's
#: blocks hold 16 to 256 tokens).
MAX_BLOCK_SIZE = 65_536
#: Most priority levels, and most tokens a run records one by one (``record_tokens``).
MAX_PRIORITIES = 1_000
MAX_RECORDED_TOKENS = 20_000_000
#: Refuse a run estimated to need more than this [s] or [B].
MAX_ESTIMATED_S, MAX_ESTIMATED_BYTES = 300.0, 4e9
_B_PER_REQUEST, _B_PER_TOKEN = 600.0, 24.0
#: Estimated time per simulated request [s] in the Python loop and in the compiled loop, and per replica [s].
#: Measured on one core of the shared 2-vCPU machine (benchmarks/bench_sim_small.py, 30,000 requests, medians):
#: Python 30-35 us per request, compiled 2.6-3.0 us (bench_sim_variable.py, 1M requests on the quiet machine:
#: Python 21.8 us, compiled 2.87 us); the compiled figure keeps the Python figure's margin (30 / 21.8 = 1.4x).
#: A replica adds 0.7-1.1 ms in either loop (100 replicas vs 1 over 2,000 requests); 2 ms keeps a margin.
_S_PER_REQUEST, _S_PER_REQUEST_COMPILED, _S_PER_REPLICA = 30e-6, 4e-6, 2e-3


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """Validated simulation settings in base units (seconds, tokens, requests/s)."""

    policy: str = "continuous"
    cost_model: str = "roofline"
    requests: int | None = None
    seed: int = 0
    arrival: str = "poisson"
    rate: float = 0.0
    burstiness: float = 2.0
    on_s: float = 1.0
    off_s: float = 1.0
    trace: str | None = None
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 1))
    output_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 1))
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    priorities: tuple[int, ...] = (0,)
    priority_weights: tuple[float, ...] | None = None
    max_num_seqs: int | None = None
    batch_size: int | None = None
    kv_allocation: str = "on_demand"
    watermark: float = 0.01
    prefix_caching: bool = True
    chunked_prefill: bool = False
    max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS
    max_queued_requests: int | None = None
    max_queued_tokens: int | None = None
    decode_base_s: float = 18.0e-3
    decode_per_seq_s: float = 0.12e-3
    prefill_per_token_s: float = 0.03e-3
    replicas: int = 1
    router: str = "round_robin"
    record_tokens: bool = False
    classes: tuple = ()  # the scenario's workload classes (capacity/model/mix.py), when its lengths are not overridden
    retries: int = 0  # client retries of a rejected or timed-out request (simulator/retries.py)
    retry_backoff_s: float = 0.0  # wait before the first retry; doubles with each further attempt
    retry_timeout_s: float | None = None  # a client that sees no first token by then sends the request again
    turns: int = 1  # requests per multi-turn session (1: independent requests; simulator/workloads.py)
    think_time_s: float = 10.0  # mean gap between a session's turns (exponential) [s]
    turn_tokens: LengthDist | None = None  # new user tokens of each later turn; None: the prompt distribution
    cpu_offload_bytes: float = 0.0  # KV offload: CPU memory per GPU for evicted prefix blocks [B]; 0: none
    offload_bandwidth: float = 0.0  # host link the blocks load back over [B/s] (allocator.py, offload.py)
    prefill_replicas: int = 0  # separate pools: prefill-only replicas before the ``replicas`` decode ones (pools.py)
    concurrency: int = 0  # closed loop (``arrival: closed``): clients in flight, each waits for its answer; 0: open
    client_think_s: float = 0.0  # closed loop: a client's mean pause between an answer and its next request [s]
    client_think: str = "exponential"  # closed loop: think times exponential of that mean, or "fixed"
    request_latency_s: float = 0.0  # a request's time outside the engine (serving.request_latency): on its TTFT [s]


def _choice(options: tuple[str, ...]) -> Callable[[Any, str], str]:
    def check(value: Any, path: str) -> str:
        if value not in options:
            raise ScenarioError(f"{path} must be one of {', '.join(options)}, got {show(value)}")
        return str(value)

    return check


def _flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(f"{path} must be true or false, got {show(value)}")
    return value


def _count(value: Any, path: str) -> int:
    number = non_negative(value, path)
    if number != int(number):
        raise ScenarioError(f"{path} must be a whole number >= 0, got {show(value)}")
    return int(number)


def _time(value: Any, path: str) -> float:
    seconds = parse_quantity(value, "time", path)
    if seconds < 0:
        raise ScenarioError(f"{path} must be >= 0, got {show(value)}")
    return seconds


def _quantity(kind: str) -> Callable[[Any, str], float]:
    def check(value: Any, path: str) -> float:
        number = parse_quantity(value, kind, path)
        if not number > 0 or not math.isfinite(number):
            raise ScenarioError(f"{path} must be > 0 and finite, got {show(value)}")
        return number

    return check


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{path} must be a file path, got {show(value)}")
    return value


def _fraction(value: Any, path: str) -> float:
    number = non_negative(value, path)
    if number >= 1:
        raise ScenarioError(f"{path} must be in [0, 1), got {show(value)}")
    return number


def _int_list(value: Any, path: str) -> tuple[int, ...]:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ScenarioError(f"{path} must be a list of whole numbers, got {show(value)}")
    if len(value) > MAX_PRIORITIES:
        raise ScenarioError(f"{path} has {len(value):,} entries; the limit is {MAX_PRIORITIES:,}")
    out = []
    for i, item in enumerate(value):
        if (isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item)
                or not float(item).is_integer() or abs(item) > 1e9):
            raise ScenarioError(f"{path}[{i}] must be a whole number in [-1e9, 1e9], got {show(item)}")
        out.append(int(item))
    return tuple(out)


def _weights(value: Any, path: str) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ScenarioError(f"{path} must be a list of weights, got {show(value)}")
    if len(value) > MAX_PRIORITIES:
        raise ScenarioError(f"{path} has {len(value):,} entries; the limit is {MAX_PRIORITIES:,}")
    weights = tuple(non_negative(w, f"{path}[{i}]") for i, w in enumerate(value))
    if sum(weights) <= 0:
        raise ScenarioError(f"{path} must have a positive sum, got {show(value)}")
    return weights


#: simulation key -> (validator, SimulationConfig field)
FIELDS: dict[str, tuple[Callable[[Any, str], Any], str]] = {
    "policy": (_choice(POLICIES), "policy"),
    "cost_model": (_choice(COST_MODELS), "cost_model"),
    "requests": (positive_int, "requests"),
    "seed": (_count, "seed"),
    "arrival": (_choice(ARRIVALS), "arrival"),
    "rate": (positive, "rate"),
    "burstiness": (positive, "burstiness"),
    "on": (_time, "on_s"),
    "off": (_time, "off_s"),
    "trace": (_text, "trace"),
    "prompt_tokens": (length_dist, "prompt_tokens"),
    "output_tokens": (length_dist, "output_tokens"),
    "shared_prefix_tokens": (_count, "shared_prefix_tokens"),
    "prefix_groups": (positive_int, "prefix_groups"),
    "priorities": (_int_list, "priorities"),
    "priority_weights": (_weights, "priority_weights"),
    "max_num_seqs": (positive_int, "max_num_seqs"),
    "batch_size": (positive_int, "batch_size"),
    "kv_allocation": (_choice(KV_ALLOCATIONS), "kv_allocation"),
    "watermark": (_fraction, "watermark"),
    "prefix_caching": (_flag, "prefix_caching"),
    "chunked_prefill": (_flag, "chunked_prefill"),
    "max_batched_tokens": (positive_int, "max_batched_tokens"),
    "max_queued_requests": (_count, "max_queued_requests"),
    "max_queued_tokens": (_count, "max_queued_tokens"),
    "decode_base": (_time, "decode_base_s"),
    "decode_per_seq": (_time, "decode_per_seq_s"),
    "prefill_per_token": (_time, "prefill_per_token_s"),
    "replicas": (positive_int, "replicas"),
    "router": (_choice(ROUTERS), "router"),
    "record_tokens": (_flag, "record_tokens"),
    "retries": (_count, "retries"),
    "retry_backoff": (_time, "retry_backoff_s"),
    "retry_timeout": (_time, "retry_timeout_s"),
    "turns": (positive_int, "turns"),
    "think_time": (_time, "think_time_s"),
    "turn_tokens": (length_dist, "turn_tokens"),
    "cpu_offload": (_quantity("bytes"), "cpu_offload_bytes"),
    "offload_bandwidth": (_quantity("bandwidth"), "offload_bandwidth"),
    "prefill_replicas": (_count, "prefill_replicas"),
    "concurrency": (positive_int, "concurrency"),
    "client_think_time": (_time, "client_think_s"),
    "client_think": (_choice(("exponential", "fixed")), "client_think"),
    "request_latency": (_time, "request_latency_s"),
}


def config_from_scenario(scenario: Scenario, event_loop: str = "auto", **overrides: Any) -> SimulationConfig:
    """Validate ``scenario.raw['simulation']`` merged with ``overrides``; defaults come from the scenario.

    Lengths default to ``workload.prompt_tokens`` / ``output_tokens``, the rate to
    ``workload.arrival_rate``, the prefix to ``workload.shared_prefix_tokens``,
    ``max_num_seqs`` to ``serving.max_num_seqs``. Raises one ScenarioError listing every problem.
    ``event_loop``: the loop ``simulate`` is asked for (``scheduler.EVENT_LOOPS``), for the time estimate.
    """
    raw = scenario.raw.get("simulation") if scenario.raw else None
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"simulation must be a mapping of keys to values, got {show(raw)}")
    merged = {**raw, **{k: v for k, v in overrides.items()}}
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in merged.items():
        path = f"simulation.{key}"
        if key not in FIELDS:
            close = difflib.get_close_matches(str(key), list(FIELDS), n=1)
            problems.append(f"{path} is not a known key" + (f"; did you mean {close[0]}?" if close else
                                                            f"; allowed: {', '.join(FIELDS)}"))
            continue
        if value is None:
            continue
        check, name = FIELDS[key]
        try:
            values[name] = check(value, path)
        except ScenarioError as exc:
            problems.extend(exc.problems)
    w, s = scenario.workload, scenario.serving
    pools = scenario.raw.get("pools") if scenario.raw else None
    if isinstance(pools, Mapping) and not problems:  # split pools: each pool's workers, unless the block says
        values.setdefault("prefill_replicas", int((pools.get("prefill") or {}).get("workers", 1)))
        values.setdefault("replicas", int((pools.get("decode") or {}).get("workers", 1)))
    values.setdefault("prompt_tokens", LengthDist("fixed", value=w.prompt_tokens))
    values.setdefault("output_tokens", LengthDist("fixed", value=w.output_tokens))
    explicit_prefix = "shared_prefix_tokens" in values
    values.setdefault("shared_prefix_tokens", w.shared_prefix_tokens)  # capped at each request's prompt
    if s.max_num_seqs is not None:
        values.setdefault("max_num_seqs", s.max_num_seqs)
    values.setdefault("request_latency_s", float(s.request_latency_s))
    if values.get("concurrency") and "arrival" not in values:
        values["arrival"] = "closed"
    if values.get("arrival") is None and not w.arrival_rate and w.concurrency:  # the workload's closed loop
        values["arrival"] = "closed"
    arrival = values.get("arrival", "poisson")
    if arrival == "closed":
        values.setdefault("concurrency", w.concurrency or 0)
        values.setdefault("client_think_s", float(w.think_time_s))
        problems += closed_loop_problems(values)
    if "rate" not in values and w.arrival_rate:
        values["rate"] = float(w.arrival_rate)
    if arrival in ("poisson", "fixed", "gamma", "on_off") and not values.get("rate"):
        problems.append(f"simulation.rate is missing: arrival {arrival!r} needs a rate in requests/s "
                        f"(or set workload.arrival_rate)")
    if arrival == "trace" and "trace" not in values:
        problems.append("simulation.trace is missing: arrival 'trace' needs the path of a CSV or JSONL file")
    if arrival == "on_off" and values.get("on_s", 1.0) <= 0:
        problems.append("simulation.on must be > 0 for arrival 'on_off'")
    weights = values.get("priority_weights")
    if weights is not None and len(weights) != len(values.get("priorities", (0,))):
        problems.append(f"simulation.priority_weights has {len(weights)} entries but simulation.priorities has "
                        f"{len(values.get('priorities', (0,)))}")
    if values.get("cpu_offload_bytes") and not values.get("offload_bandwidth"):
        problems.append("simulation.offload_bandwidth is missing: cpu_offload needs the host link's bandwidth "
                        "(e.g. \"50 GB/s\" for PCIe 5.0 x16)")
    problems += pool_problems(values)
    prompt = values["prompt_tokens"]
    too_long = prefix_problem(values["shared_prefix_tokens"], prompt, "simulation.shared_prefix_tokens")
    if explicit_prefix and too_long:
        problems.append(too_long)
    if not problems:
        found = work_problems(values, scenario.serving.block_size)
        if found and event_loop != "python" and compiled_loop_runs(values, scenario):  # the compiled loop's estimate
            found = work_problems(values, scenario.serving.block_size, compiled=True)  # is the smaller one
        problems += found
    if problems:
        raise ScenarioError(*problems)
    if scenario.raw and scenario.raw.get("workloads") is not None and not {"prompt_tokens", "output_tokens",
                                                                          "shared_prefix_tokens"} & set(merged):
        from capacity.model.mix import classes_of

        values["classes"] = classes_of(scenario)
    return SimulationConfig(**values)


def pool_problems(values: Mapping[str, Any]) -> list[str]:
    """What separate prefill and decode pools (``prefill_replicas``, ``pools.py``) cannot simulate with."""
    if not values.get("prefill_replicas"):
        return []
    refused = [(values.get("policy", "continuous") != "continuous", "policy static"),
               (bool(values.get("shared_prefix_tokens")), "shared_prefix_tokens (the prefill pool keeps no cache)"),
               (values.get("turns", 1) > 1, "multi-turn sessions (turns)"),
               (bool(values.get("cpu_offload_bytes")), "cpu_offload"),
               (bool(values.get("retries")), "retries"),
               (bool(values.get("record_tokens")), "record_tokens")]
    problems = [f"simulation.prefill_replicas (separate pools) cannot be simulated with {what}"
                for bad, what in refused if bad]
    if values["prefill_replicas"] > MAX_REPLICAS:
        problems.append(f"simulation.prefill_replicas ({values['prefill_replicas']:,}) is over the limit of "
                        f"{MAX_REPLICAS:,}")
    return problems


def closed_loop_problems(values: Mapping[str, Any]) -> list[str]:
    """What a closed loop (``arrival: closed``: ``concurrency`` clients, each sending its next request
    ``client_think_time`` after its answer) cannot be simulated with."""
    if not values.get("concurrency"):
        return ["simulation.concurrency is missing: arrival 'closed' needs the number of clients in flight "
                "(or set workload.concurrency)"]
    refused = [(values.get("policy", "continuous") != "continuous", "policy static"),
               (values.get("replicas", 1) > 1, "replicas (give each replica its own clients: concurrency per replica)"),
               (bool(values.get("prefill_replicas")), "prefill_replicas"),
               (values.get("turns", 1) > 1, "multi-turn sessions (turns)"),
               (bool(values.get("retries")), "retries")]
    return [f"simulation.arrival 'closed' (a closed loop) cannot be simulated with {what}"
            for bad, what in refused if bad]


def compiled_loop_problem(policy: str, record_tokens: bool, cost: CostModel) -> str | None:
    """Why the compiled event loop (``compiled.py``) cannot run a simulation with these settings (None: it can).

    The one home of what that loop runs, read by ``compiled.unsupported`` on an engine and by
    ``compiled_loop_runs`` before one is built (this module never imports numba). ``cost``: the cost model
    (``cost_models.compiled_cost_problem``). KV offload (a CPU tier) runs in both loops.
    """
    if policy != "continuous":
        return f"policy {policy}"
    if record_tokens:
        return "record_tokens"
    from capacity.simulator.cost_models import compiled_cost_problem

    return compiled_cost_problem(cost)


def compiled_loop_runs(values: Mapping[str, Any], scenario: Scenario) -> bool:
    """Whether the run of these settings will go through the compiled loop with no start-up time: its kernel is
    loaded in this process (``scheduler.compiled_loop_loaded``: "auto" then picks it, budget or not) and it
    supports the settings (``compiled_loop_problem``)."""
    from capacity.simulator.scheduler import compiled_loop_loaded

    if not compiled_loop_loaded() or values.get("arrival") == "closed":  # a closed loop runs in Python
        return False
    from capacity.simulator.cost_models import cost_model_for

    cost = cost_model_for(scenario, SimulationConfig(cost_model=values.get("cost_model", "roofline")))
    return compiled_loop_problem(values.get("policy", "continuous"), bool(values.get("record_tokens")), cost) is None


def work_problems(values: Mapping[str, Any], block_size: int, compiled: bool = False) -> list[str]:
    """Why a run would not finish in bounded time and memory, found before anything is allocated.

    Estimate: ``requests x 30 us (compiled loop: 4 us) + replicas x 2 ms`` [s] and ``requests x 600 B (+ 24 B
    per recorded token)``; the time limit is ``MAX_ESTIMATED_S`` or the time left in an active
    ``budget.time_budget``, the smaller. ``compiled``: the run goes through the compiled loop
    (``compiled_loop_runs``).
    """
    from capacity.simulator.workloads import DEFAULT_REQUESTS

    problems = []
    requests = values.get("requests") or DEFAULT_REQUESTS
    replicas = values.get("replicas", 1) + values.get("prefill_replicas", 0)
    if requests > MAX_REQUESTS:
        problems.append(f"simulation.requests ({requests:,}) is over the limit of {MAX_REQUESTS:,} requests per run")
    if replicas > MAX_REPLICAS:
        problems.append(f"simulation.replicas ({replicas:,}) is over the limit of {MAX_REPLICAS:,}")
    if block_size > MAX_BLOCK_SIZE:
        problems.append(f"serving.block_size ({block_size:,} tokens) is over the simulator's limit of "
                        f"{MAX_BLOCK_SIZE:,} tokens (engines use 16 to 256)")
    if values.get("prefix_groups", 1) > MAX_REQUESTS:
        problems.append(f"simulation.prefix_groups ({values['prefix_groups']:,}) is over the limit of "
                        f"{MAX_REQUESTS:,}")
    if problems:
        return problems
    recorded = requests * values["output_tokens"].maximum if values.get("record_tokens") else 0
    if recorded > MAX_RECORDED_TOKENS:
        return [f"simulation.record_tokens would record up to {recorded:,.0f} token times (requests x longest "
                f"output); the limit is {MAX_RECORDED_TOKENS:,}: record fewer requests or turn it off"]
    seconds = requests * (_S_PER_REQUEST_COMPILED if compiled else _S_PER_REQUEST) + replicas * _S_PER_REPLICA
    memory = requests * _B_PER_REQUEST + recorded * _B_PER_TOKEN
    max_s = budget.limit_s(MAX_ESTIMATED_S)  # the app's time budget, when one is active, is the tighter limit
    if seconds > max_s or memory > MAX_ESTIMATED_BYTES:
        if max_s < MAX_ESTIMATED_S and seconds <= MAX_ESTIMATED_S and memory <= MAX_ESTIMATED_BYTES:
            # Within the run's own limits, over what is left of the caller's time budget: name the budget, and where
            # earlier work in the same request spent most of it (the app's simulation pair), say so rather than
            # "the limit is 0.0 s".
            left, total = max(max_s, 0.0), budget.active_seconds()
            if left >= 0.9 * total:
                return [f"the simulation would take about {seconds:,.1f} s; the limit is {left:,.1f} s (this "
                        f"request's time budget): simulate fewer requests or replicas"]
            return [f"the simulation would take about {seconds:,.1f} s, and {left:,.1f} s of this request's time "
                    f"budget of {total:g} s are left (the work before it in the same request used the rest): run it "
                    f"alone, or simulate fewer requests or replicas"]
        return [f"the simulation would take about {seconds:,.1f} s and {memory / 1e9:,.1f} GB; the limits are "
                f"{MAX_ESTIMATED_S:,.1f} s and {MAX_ESTIMATED_BYTES / 1e9:,.0f} GB: simulate fewer requests or "
                f"replicas"]
    return []
