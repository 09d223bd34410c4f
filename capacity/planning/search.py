"""Simulation-backed configuration search: the cheapest engine settings that keep the promises.

For a scenario (model, workload, promises, and a ``simulation:`` block that sets the request stream) and a
grid of engine settings, each a GPU type, tensor-parallel size, ``max_num_seqs``, ``max_batched_tokens`` and
chunked prefill on or off, ``search`` finds for every setting the fewest replicas whose simulated
p-th percentile TTFT and TPOT keep the scenario's promises with no request rejected or left unfinished,
and returns the cheapest (cost per hour = GPUs x price per GPU-hour) with the Pareto front of cost and the
two percentiles. With ``separate_pools`` a setting is instead split into prefill-only and decode-only replicas
(``simulation.prefill_replicas``, simulator/pools.py): each replica count tried is divided in the analytic
model's ideal ratio (``pool_split`` of ``disagg_prefill_share``), and chunked prefill and the token budget do
not apply (prompts run one by one on the prefill replicas).

The analytic model prunes before anything is simulated (``prune``):

* a setting that does not build (weights that do not fit, heads the GPUs do not divide) is dropped;
* one that no replica count could save is dropped: one sequence alone decodes slower than the TPOT promise
  (``1 / single_stream_tokens_per_s``, a bound whatever the batch) or, for fixed prompt lengths, the prefill
  alone exceeds the TTFT promise; or the analytic goodput is 0;
* ``max_num_seqs`` values at or above what the KV pool holds are one setting (the pool caps the batch);
* the replica search starts at the analytic fleet size ``ceil(rate / goodput)`` (``fleet.replicas_for``, the
  chunked goodput with chunked prefill) and never goes below ``ceil(0.8 rate / ceiling)``: a replica cannot
  serve more than its throughput ceiling (20% margin for the model's error). Separate pools start at
  ``ceil(rate / (g x disagg_goodput_per_gpu_rps))`` and never go below 2 (one replica of each pool).

The replica search per setting is a gallop then a bisection on the replica count (meeting the promises is
taken as monotone in it), each step one simulation; every simulation is a task for an executor:
``concurrent.futures.ProcessPoolExecutor`` on local processes by default, or a Dask distributed cluster
(``--cluster ADDRESS``, ``Client(address).get_executor()``) when one machine is not enough. Every simulation
uses the same seed, so settings are compared on the same requests; each reuses its setting's analytic
evaluation from the pruning (``Candidate.evaluation``, all settings evaluated in one vectorised call,
``scenario.evaluate_many``) and keeps only the per-request times it needs (``simulator.simulate_times``). A
local pool's workers start, and load the compiled loop, while the parent prunes (``start_worker``).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import itertools
import math
import queue
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from capacity.errors import ScenarioError, clean_line

#: The simulator's ``event_loop`` choices (``simulator.scheduler.EVENT_LOOPS``; not imported, to keep numpy out of
#: the command's start).
EVENT_LOOPS = ("auto", "compiled", "python")

MAX_NUM_SEQS = (64, 128, 256)
MAX_BATCHED_TOKENS = (2048, 8192)
#: Most replicas the search tries for one setting.
MAX_REPLICAS = 256
#: Requests simulated per configuration when the scenario's simulation block does not say.
DEFAULT_REQUESTS = 2000
#: Most simulations sent to a worker in one task (fewer round trips while many settings are ready).
MAX_BATCH = 8
#: Share of the analytic ceiling a replica is assumed able to exceed it by, for the lowest replica count tried.
CEILING_MARGIN = 0.2


@dataclass(frozen=True, slots=True)
class Setting:
    """Engine settings of one replica: GPU type (None: the scenario's), tensor parallel, batch cap, token
    budget of an iteration, chunked prefill; ``separate_pools``: prefill-only and decode-only replicas (chunked
    prefill off, the token budget unused). An MoE model's layout: ``attention_data_parallel`` ranks and
    ``expert_parallel`` GPUs. Split pools (``prefill_tensor_parallel`` > 0, with ``separate_pools``): the prefill
    pool on its own GPU type (``prefill_gpu``, None: the scenario's) and layout (``prefill_*``), the decode pool on
    ``gpu`` and ``tensor_parallel`` (the scenario's ``pools`` section, ``model.split_pools``)."""

    gpu: str | None
    tensor_parallel: int
    max_num_seqs: int | None
    max_batched_tokens: int
    chunked_prefill: bool
    separate_pools: bool = False
    attention_data_parallel: int = 1
    expert_parallel: int = 1
    prefill_gpu: str | None = None
    prefill_tensor_parallel: int = 0
    prefill_attention_data_parallel: int = 1
    prefill_expert_parallel: int = 1

    @property
    def split(self) -> bool:
        """Prefill and decode pools each on its own layout."""
        return self.separate_pools and self.prefill_tensor_parallel > 0

    def label(self) -> str:
        def layout(gpu: str | None, tp: int, dp: int, ep: int) -> str:
            words = f"{gpu or 'scenario GPU'} x{tp}" + (f" dp{dp}" if dp > 1 else "")
            return words + (f" ep{ep}" if ep > 1 else "")

        own = layout(self.gpu, self.tensor_parallel, self.attention_data_parallel, self.expert_parallel)
        if self.split:
            prefill = layout(self.prefill_gpu, self.prefill_tensor_parallel, self.prefill_attention_data_parallel,
                             self.prefill_expert_parallel)
            return f"split pools: prefill {prefill}, decode {own}, max_num_seqs {self.max_num_seqs or 'none'}"
        head = f"{own}, max_num_seqs {self.max_num_seqs or 'none'}, "
        if self.separate_pools:
            return head + "separate prefill and decode pools"
        return head + f"max_batched_tokens {self.max_batched_tokens}, chunked {'on' if self.chunked_prefill else 'off'}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A setting the analytic model kept: GPUs per replica, price per GPU-hour, where its replica search starts,
    and its analytic evaluation (``Scenario.evaluate()``; the simulations of every replica count reuse it)."""

    setting: Setting
    gpus_per_replica: int
    price_per_hour: float | None
    start_replicas: int
    min_replicas: int
    evaluation: Any = field(default=None, repr=False, compare=False)
    prefill_gpus_per_replica: int = 0       # split pools: GPUs of a prefill replica
    prefill_price_per_hour: float | None = None
    prefill_share: float = 0.0              # split pools: prefill replicas' ideal share, λ_d / (λ_p + λ_d)


@dataclass
class SearchResult:
    """Every simulation (``runs``), the settings pruned before simulating, the cheapest and the Pareto front."""

    runs: list[dict[str, Any]]
    pruned: list[dict[str, Any]]
    percentile: float
    rate_rps: float
    objective: str
    wall_s: float = 0.0
    workers: int = 1
    best: list[dict[str, Any]] = field(default_factory=list)  # per setting, the fewest replicas meeting

    @property
    def cheapest(self) -> dict[str, Any] | None:
        return self.best[0] if self.best else None

    @property
    def front(self) -> list[dict[str, Any]]:
        return [row for row in self.best if row["pareto"]]

    def to_json_dict(self) -> dict[str, Any]:
        return {"percentile": self.percentile, "rate_rps": self.rate_rps, "objective": self.objective,
                "cheapest": self.cheapest, "pareto_front": self.front, "settings": self.best,
                "simulations": self.runs, "pruned": self.pruned, "wall_s": self.wall_s, "workers": self.workers,
                "simulations_per_s": len(self.runs) / self.wall_s if self.wall_s > 0 else None}


# --- building a configuration ----------------------------------------------------------------------------------

def scenario_data(raw: Mapping[str, Any], setting: Setting) -> dict[str, Any]:
    """The scenario mapping of ``raw`` with the setting's GPU, tensor parallel and serving settings (an MoE layout's
    ``serving.attention_data_parallel`` and ``expert_parallel``); split pools get a ``pools`` section of the two
    layouts (their workers are the simulation's replicas), other settings none."""
    data = copy.deepcopy(dict(raw))
    data.pop("pools", None)
    base_gpu = data.get("gpu")
    base = dict(base_gpu) if isinstance(base_gpu, Mapping) else {"name": base_gpu}

    def gpu_of(name: str | None, tp: int) -> dict[str, Any]:
        gpu = dict(base) if name is None else {"name": name, "pipeline_parallel": base.get("pipeline_parallel", 1)}
        gpu.pop("replicas", None)
        gpu["count"] = int(tp)
        return gpu

    data["gpu"] = gpu_of(setting.gpu, setting.tensor_parallel)
    serving = {k: v for k, v in dict(data.get("serving") or {}).items() if k != "moe_tensor_parallel"}
    serving.pop("max_num_seqs", None)
    if setting.max_num_seqs is not None:
        serving["max_num_seqs"] = int(setting.max_num_seqs)
    serving["max_batched_tokens"] = int(setting.max_batched_tokens)
    for key, value in (("attention_data_parallel", setting.attention_data_parallel),
                       ("expert_parallel", setting.expert_parallel)):
        if value > 1:
            serving[key] = int(value)
        else:
            serving.pop(key, None)
    data["serving"] = serving
    if setting.split:
        moe = {k: int(v) for k, v in (("attention_data_parallel", setting.prefill_attention_data_parallel),
                                        ("expert_parallel", setting.prefill_expert_parallel))}
        data["pools"] = {"prefill": {"gpu": gpu_of(setting.prefill_gpu, setting.prefill_tensor_parallel),
                                     "serving": moe},
                         "decode": {}}
    simulation = dict(data.get("simulation") or {})
    simulation.pop("max_num_seqs", None)  # the setting's cap, through serving.max_num_seqs
    simulation.update({"chunked_prefill": setting.chunked_prefill, "max_batched_tokens": setting.max_batched_tokens,
                       "policy": "continuous", "replicas": 1, "prefill_replicas": 0})
    data["simulation"] = simulation
    return data


#: An MoE layout of a tensor-parallel size: (attention data parallel, expert parallel) pairs
#: (``sizing.moe_parallel_sizes``); None for a dense model: (1, 1) alone.
Layouts = Mapping[int, Sequence[tuple[int, int]]] | None


def _layouts_of(tensor_parallel: Iterable[int], moe: Layouts) -> list[tuple[int, int, int]]:
    return [(tp, dp, ep) for tp in tensor_parallel for dp, ep in ((moe or {}).get(tp) or [(1, 1)])]


def settings_grid(gpus: Sequence[str | None], tensor_parallel: Iterable[int], max_num_seqs: Iterable[int | None],
                  max_batched_tokens: Iterable[int], chunked: Iterable[bool],
                  separate_pools: Iterable[bool] = (False,), moe: Layouts = None,
                  prefill_gpus: Sequence[str | None] = (), prefill_tensor_parallel: Iterable[int] = ()
                  ) -> list[Setting]:
    """Every combination, in the order given; a separate-pools setting once per GPU, tensor parallel and batch cap
    (chunked prefill off, the first token budget: neither applies to it). ``moe``: per TP, the attention data and
    expert parallel sizes an MoE model tries (each a layout of its own). ``prefill_gpus`` and
    ``prefill_tensor_parallel`` (both given): split-pool settings too, every prefill layout with every decode
    layout and batch cap (the batch cap is the decode pool's)."""
    budgets, modes, pools = list(max_batched_tokens), list(chunked), list(separate_pools)
    tps = list(tensor_parallel)
    out: list[Setting] = []
    for gpu, (tp, dp, ep), seqs in itertools.product(gpus, _layouts_of(tps, moe), max_num_seqs):
        moe_of = {"attention_data_parallel": dp, "expert_parallel": ep}
        if False in pools:
            out += [Setting(gpu, tp, seqs, budget, mode, **moe_of) for budget, mode in itertools.product(budgets,
                                                                                                         modes)]
        if True in pools:
            out.append(Setting(gpu, tp, seqs, budgets[0], False, True, **moe_of))
    prefill_tps = list(prefill_tensor_parallel)
    if prefill_gpus and prefill_tps:
        for (p_gpu, (p_tp, p_dp, p_ep)), (gpu, (tp, dp, ep)), seqs in itertools.product(
                itertools.product(prefill_gpus, _layouts_of(prefill_tps, moe)),
                itertools.product(gpus, _layouts_of(tps, moe)), max_num_seqs):
            out.append(Setting(gpu, tp, seqs, budgets[0], False, True, dp, ep, p_gpu, p_tp, p_dp, p_ep))
    return out


def grid_size(gpus: int, tensor_parallel: int, max_num_seqs: int, max_batched_tokens: int, chunked: int,
              separate_pools: Iterable[bool] = (False,), prefill_layouts: int = 0, layouts_per_tp: float = 1.0) -> int:
    """How many settings ``settings_grid`` makes of lists of these lengths, without making them (``prefill_layouts``:
    prefill GPU types x sizes of split pools; ``layouts_per_tp``: MoE layouts per TP, on average)."""
    pools = list(separate_pools)
    per_cap = (max_batched_tokens * chunked if False in pools else 0) + (1 if True in pools else 0)
    layouts = round(gpus * tensor_parallel * layouts_per_tp)
    return layouts * max_num_seqs * per_cap + round(prefill_layouts * layouts_per_tp) * layouts * max_num_seqs


def pool_split(replicas: int, prefill_share: float) -> tuple[int, int]:
    """(prefill, decode) replicas of a fleet of ``replicas`` >= 2 split in the ratio ``prefill_share`` (the analytic
    model's ``disagg_prefill_share``): ``P = round(N share)`` kept within [1, N - 1], ``D = N - P``."""
    prefill = min(replicas - 1, max(1, round(replicas * prefill_share)))
    return prefill, replicas - prefill


# --- pruning with the analytic model ----------------------------------------------------------------------------

def prune(raw: Mapping[str, Any], settings: Sequence[Setting], rate_rps: float,
          ) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """(settings worth simulating, settings dropped with the reason): see the module docstring."""
    from capacity.model.scenario import Scenario, evaluate_many
    from capacity.planning.fleet import replicas_for
    from capacity.simulator.config import config_from_scenario

    kept: list[Candidate] = []
    dropped: list[tuple[int, dict[str, Any]]] = []  # (position in settings, row): reported in the grid's order
    built: list[tuple[int, Setting, Scenario, Any]] = []  # the settings that build, with scenario and sim config
    for i, setting in enumerate(settings):
        try:
            scenario = Scenario.from_dict(scenario_data(raw, setting))
            pools = {"prefill_replicas": 1} if setting.separate_pools else {}  # what the pools cannot simulate
            built.append((i, setting, scenario, config_from_scenario(scenario, **pools)))
        except ScenarioError as exc:
            dropped.append((i, {**asdict(setting), "reason": "; ".join(exc.problems)}))
    evaluations = evaluate_many([b[2] for b in built])  # one vectorised call, each = Scenario.evaluate()
    seen: dict[tuple, Setting] = {}
    for (i, setting, scenario, config), r in zip(built, evaluations, strict=True):
        def drop(reason: str, s: Setting = setting, i: int = i) -> None:
            dropped.append((i, {**asdict(s), "reason": reason}))

        kv_batch = int(r["max_requests_shared_prefix"])
        if kv_batch < 1:
            drop("no request fits the KV pool")
            continue
        slo = scenario.slo
        floor_tpot = 1.0 / float(r["single_stream_tokens_per_s"])
        if slo.tpot_s is not None and floor_tpot > slo.tpot_s:
            drop(f"one sequence alone decodes at {floor_tpot * 1e3:.3g} ms per token, over the TPOT promise")
            continue
        prefill_r = r
        if setting.split:  # the prefill pool's own scenario sets the prompt's time
            from capacity.model.split_pools import pool_scenarios

            pair = pool_scenarios(scenario.raw)
            prefill_r = pair.prefill.evaluate()
        fixed = config.prompt_tokens.kind == "fixed"
        if slo.ttft_s is not None and fixed and float(prefill_r["prefill_s"]) > slo.ttft_s:
            drop(f"the prefill alone takes {float(prefill_r['prefill_s']) * 1e3:.3g} ms, over the TTFT promise")
            continue
        cap = setting.max_num_seqs if setting.max_num_seqs is not None and setting.max_num_seqs < kv_batch else None
        key = (*astuple(setting)[:2], cap, *astuple(setting)[3:])  # the setting with the cap that binds
        if key in seen:
            drop(f"the KV pool holds {kv_batch} requests: same engine as max_num_seqs {seen[key].max_num_seqs}")
            continue
        seen[key] = setting
        gpus = int(r["gpus_per_replica"])
        split: dict[str, Any] = {}
        if setting.split:  # each pool at its own rate: P = ceil(rate / λ_p), D = ceil(rate / λ_d) to start with
            prefill_rps, decode_rps = float(prefill_r["disagg_prefill_rps"]), float(r["disagg_decode_rps"])
            if not (prefill_rps > 0 and decode_rps > 0):
                drop("the analytic model finds no load that keeps the promises")
                continue
            start = int(replicas_for(rate_rps, prefill_rps) + replicas_for(rate_rps, decode_rps))
            split = {"prefill_gpus_per_replica": int(prefill_r["gpus_per_replica"]),
                     "prefill_price_per_hour": pair.prefill.gpu.price_per_hour,
                     "prefill_share": decode_rps / (prefill_rps + decode_rps)}
            kept.append(Candidate(setting, gpus, scenario.gpu.price_per_hour, min(max(start, 2), MAX_REPLICAS), 2, r,
                                  **split))
            continue
        if setting.separate_pools:  # per replica of the fleet in the ideal ratio; at least one of each pool
            goodput = ceiling = float(r["disagg_goodput_per_gpu_rps"]) * gpus
        else:
            goodput = float(r["chunked_goodput_rps" if setting.chunked_prefill else "goodput_rps"])
            ceiling = float(r["chunked_ceiling_rps" if setting.chunked_prefill else "ceiling_rps"])
        if not (goodput > 0 and ceiling > 0):
            drop("the analytic model finds no load that keeps the promises")
            continue
        start = int(replicas_for(rate_rps, goodput))
        low = 2 if setting.separate_pools else max(1, math.ceil((1 - CEILING_MARGIN) * rate_rps / ceiling - 1e-9))
        kept.append(Candidate(setting, gpus, scenario.gpu.price_per_hour, min(max(start, low), MAX_REPLICAS),
                              min(low, MAX_REPLICAS), r))
    dropped.sort(key=lambda d: d[0])
    return kept, [row for _, row in dropped]


# --- one simulation (what a worker runs) ------------------------------------------------------------------------

def event_loop_for_search(event_loop: str = "auto") -> str:
    """The simulator's ``event_loop`` for the simulations of a search, in the process that runs them.

    "auto": the compiled loop ("compiled") where it imports and its compiled functions can be cached on disk
    (``compiled.cached``; or it is already loaded here). A search runs many simulations in each process: loading
    the cached kernel (about 0.6 s, once per process) is repaid within the first few simulations
    (benchmarks/bench_search.py), while the simulator's own "auto" would keep every run of under 25,000 requests
    in the Python loop. The first load after an install or a change of the kernel's source compiles it (15 s or
    more) and writes the cache; ``executor_for``'s pool lets one worker do that (``start_worker``). Where
    nothing can be cached (a read-only install), every process would compile it, so the simulator's "auto"
    decides. Features the
    compiled loop does not support still run in the Python loop (``scheduler.run_continuous``), with the same
    results either way. "compiled" and "python" are passed through.
    """
    if event_loop != "auto":
        return event_loop
    try:
        from capacity.simulator import compiled
    except ImportError:  # numba missing or broken: the simulator's "auto" runs the Python loop
        return "auto"
    return "compiled" if compiled.cached or compiled.compiled_here() else "auto"


def start_worker(event_loop: str = "auto", lock: Any = None) -> None:
    """Make this process ready to simulate: import the simulator and, where the search runs the compiled loop
    here (``event_loop_for_search``), load its kernel. The initializer of ``executor_for``'s pool, so that its
    workers load while the parent prunes. ``lock`` (a ``multiprocessing.Lock`` shared by the pool): where the
    kernel is not yet in the disk cache (a fresh install), one worker at a time holds it to load, so the first
    compiles it and writes the cache, and the others read it instead of all compiling at once. Errors are left
    to the first simulation, which meets them again and reports them."""
    try:
        from capacity import simulator  # noqa: F401

        if event_loop_for_search(event_loop) != "compiled":
            return
        from capacity.simulator import compiled

        if lock is None or compiled.compiled_here() or compiled.on_disk():
            compiled.load()
            return
        with lock:
            compiled.load()
    except Exception:  # noqa: BLE001 - see above
        pass


def simulate_candidate(raw: Mapping[str, Any], setting: Setting, replicas: int, percentile: float,
                       base_dir: str | None = None, overrides: Mapping[str, Any] | None = None,
                       event_loop: str = "auto", evaluation: Any = None,
                       prefill_share: float | None = None) -> dict[str, Any]:
    """Simulate ``replicas`` replicas of ``setting`` under the scenario's request stream; the percentiles and
    whether they keep the promises. A plain function of picklable arguments: any executor can run it.
    ``event_loop``: as ``event_loop_for_search`` resolves it (the results are the same with either loop);
    ``evaluation``: the setting's ``Scenario.evaluate()`` where the caller has it (``Candidate.evaluation``);
    ``prefill_share``: split pools' prefill share of the replicas (``Candidate.prefill_share``)."""
    import numpy as np

    from capacity.model.scenario import Scenario
    from capacity.simulator import simulate_times
    from capacity.simulator.metrics import throughput_of

    began = time.perf_counter()
    scenario = Scenario.from_dict(scenario_data(raw, setting)) if evaluation is None else evaluation.scenario
    prefill, decode = 0, int(replicas)
    if setting.split:  # the candidate's ideal share (``prune``), else the two pools' analytic rates
        if prefill_share is None:
            from capacity.model.split_pools import pool_scenarios

            pools = pool_scenarios(scenario.raw)
            p_rps = float(pools.prefill.evaluate()["disagg_prefill_rps"])
            d_rps = float(pools.decode.evaluate()["disagg_decode_rps"])
            prefill_share = d_rps / (p_rps + d_rps)
        prefill, decode = pool_split(int(replicas), prefill_share)
    elif setting.separate_pools:
        evaluation = evaluation if evaluation is not None else scenario.evaluate()
        prefill, decode = pool_split(int(replicas), float(evaluation["disagg_prefill_share"]))
    times, loop = simulate_times(scenario, base_dir=base_dir, event_loop=event_loop_for_search(event_loop),
                                 analytic=evaluation, **{**(overrides or {}), "replicas": decode,
                                                         "prefill_replicas": prefill})
    done = ~np.isnan(times["finish_s"])  # completed (metrics.books: status "completed")
    ttft = times["ttft_s"][done]
    tpot = times["tpot_s"][done]
    tpot = tpot[~np.isnan(tpot)]
    p_ttft = float(np.percentile(ttft, percentile)) if len(ttft) else math.nan
    p_tpot = float(np.percentile(tpot, percentile)) if len(tpot) else math.nan
    slo = scenario.slo
    requests = len(done)
    lost = int(requests - len(ttft))
    meets = lost == 0 and len(ttft) > 0 and (slo.ttft_s is None or p_ttft <= slo.ttft_s) and (
        slo.tpot_s is None or math.isnan(p_tpot) or p_tpot <= slo.tpot_s)
    throughput = throughput_of(times["arrival_s"], times["finish_s"][done])
    return {"replicas": int(replicas), "prefill_replicas": prefill, "ttft_s": p_ttft, "tpot_s": p_tpot,
            "requests": int(requests),
            "lost_requests": lost, "throughput_rps": throughput, "meets": bool(meets),
            "simulation_s": time.perf_counter() - began, "event_loop": loop}


def simulate_many(tasks: Sequence[tuple]) -> list[dict[str, Any]]:
    """``simulate_candidate(*task)`` for each task, in order: one executor task for several simulations."""
    return [simulate_candidate(*task) for task in tasks]


# --- the search -------------------------------------------------------------------------------------------------

class _ReplicaSearch:
    """Fewest replicas keeping the promises for one candidate: from the analytic start, gallop up (steps 1, 2,
    4, ...) while the promises are missed, then bisect between the most replicas seen failing (or the floor)
    and the fewest seen meeting."""

    def __init__(self, candidate: Candidate) -> None:
        self.c = candidate
        self.lo = candidate.min_replicas - 1  # most replicas known to fail (below the floor: assumed to)
        self.ok: int | None = None            # fewest replicas known to meet
        self.step = 1
        self.next: int | None = candidate.start_replicas

    def record(self, replicas: int, meets: bool) -> None:
        if meets:
            self.ok = replicas if self.ok is None else min(self.ok, replicas)
        else:
            self.lo = max(self.lo, replicas)
        if self.ok is None:
            self.next = None if replicas >= MAX_REPLICAS else min(max(replicas + self.step, self.lo + 1),
                                                                    MAX_REPLICAS)
            self.step *= 2
        else:
            self.next = None if self.ok - self.lo <= 1 else (self.lo + self.ok) // 2


def search(raw: Mapping[str, Any], settings: Sequence[Setting], percentile: float = 99.0,
           rate_rps: float | None = None, executor: cf.Executor | None = None, base_dir: str | None = None,
           overrides: Mapping[str, Any] | None = None, workers: int = 1, event_loop: str = "auto",
           result_timeout_s: float | None = None) -> SearchResult:
    """Prune ``settings`` with the analytic model, then simulate replica counts until each kept setting's fewest
    replicas keeping the promises at ``percentile`` is known; ``executor`` runs the simulations (None: here).
    ``event_loop``: the simulator's loop, resolved in each worker by ``event_loop_for_search``;
    ``result_timeout_s``: the longest wait for any one result (None: no deadline; a cluster gets one)."""
    from capacity.model.scenario import Scenario

    if not 0 < percentile <= 100:
        raise ScenarioError(f"--percentile must be in (0, 100], got {percentile}")
    if event_loop not in EVENT_LOOPS:
        raise ScenarioError(f"--event-loop must be one of {', '.join(EVENT_LOOPS)}, got {event_loop!r}")
    scenario = Scenario.from_dict(raw)
    if scenario.slo.tpot_s is None and scenario.slo.ttft_s is None:
        raise ScenarioError("slo: the search needs a promise to keep (slo.tpot and/or slo.ttft)")
    sim = dict(raw.get("simulation") or {})
    overrides = dict(overrides or {})
    if rate_rps is not None:
        overrides["rate"] = rate_rps
    overrides.setdefault("requests", sim.get("requests") or DEFAULT_REQUESTS)
    raw = {**raw, "simulation": {**sim, **overrides}}
    from capacity.simulator.config import config_from_scenario

    config = config_from_scenario(Scenario.from_dict(raw))
    if config.arrival in ("trace", "instant"):
        raise ScenarioError(f"simulation.arrival {config.arrival!r}: the search needs a rate (poisson, fixed, "
                            f"gamma or on_off arrivals)")
    rate = float(config.rate)
    began = time.perf_counter()
    if isinstance(executor, cf.ProcessPoolExecutor):  # start its workers now: they load while this one prunes
        for _ in range(max(1, workers)):
            executor.submit(start_worker, event_loop)
    candidates, pruned = prune(raw, settings, rate)
    searches = {c.setting: _ReplicaSearch(c) for c in candidates}
    runs: list[dict[str, Any]] = []
    first_run: dict[tuple[Setting, int], dict[str, Any]] = {}  # (setting, replicas): its first simulation

    ready = deque(s for s in searches.values() if s.next is not None)
    pending: dict[cf.Future, list[_ReplicaSearch]] = {}
    finished: queue.SimpleQueue = queue.SimpleQueue()
    # tasks in flight: one running and one queued per worker (a ProcessPoolExecutor's own count where it has one)
    slots = 2 * max(1, workers, getattr(executor, "_max_workers", 1))

    def dispatch() -> None:
        """Send the ready searches' next simulations, several to a task while many are ready (``MAX_BATCH``), so
        the parent's cost per simulation stays small beside a simulation's; one at a time near the end."""
        while ready and len(pending) < slots:
            take = 1 if executor is None else min(MAX_BATCH, max(1, -(-len(ready) // slots)))
            group = [ready.popleft() for _ in range(min(take, len(ready)))]
            tasks = [(raw, s.c.setting, s.next, percentile, base_dir, None, event_loop, s.c.evaluation,
                      s.c.prefill_share if s.c.setting.split else None) for s in group]
            if executor is None:
                future: cf.Future = cf.Future()
                future.set_result(simulate_many(tasks))
            else:
                future = executor.submit(simulate_many, tasks)
            pending[future] = group
            future.add_done_callback(finished.put)

    dispatch()
    while pending:
        try:
            future = finished.get(timeout=result_timeout_s)
        except queue.Empty:
            raise ScenarioError(f"no simulation result within {result_timeout_s:g} s: are the cluster's workers "
                                f"alive?") from None
        for s, run in zip(pending.pop(future), future.result(), strict=True):
            runs.append({**asdict(s.c.setting), **run, **_cost(s.c, run["replicas"], run["prefill_replicas"])})
            first_run.setdefault((s.c.setting, run["replicas"]), runs[-1])
            s.record(run["replicas"], run["meets"])
            if s.next is not None:
                ready.append(s)
        dispatch()
    best = []
    for s in searches.values():
        if s.ok is not None:
            best.append(dict(first_run[(s.c.setting, s.ok)]))
        else:
            pruned.append({**asdict(s.c.setting), "reason": f"no replica count up to {MAX_REPLICAS} kept the "
                           f"promises in simulation"})
    objective = "cost_per_hour" if best and all(r["cost_per_hour"] is not None for r in best) else "gpus"
    best.sort(key=lambda r: (r[objective], r["gpus"], r["tpot_s"], r["ttft_s"]))
    _mark_front(best, objective)
    return SearchResult(runs, pruned, percentile, rate, objective, time.perf_counter() - began, workers, best)


def _cost(c: Candidate, replicas: int, prefill: int = 0) -> dict[str, Any]:
    """GPUs and cost per hour of ``replicas`` replicas of a candidate; split pools: ``prefill`` of them on the
    prefill pool's layout, ``P g_p c_p + D g_d c_d``."""
    if not c.setting.split:
        gpus = c.gpus_per_replica * replicas
        return {"gpus": gpus, "price_per_gpu_hour": c.price_per_hour,
                "cost_per_hour": None if c.price_per_hour is None else gpus * c.price_per_hour}
    decode = replicas - prefill
    gpus = prefill * c.prefill_gpus_per_replica + decode * c.gpus_per_replica
    priced = c.price_per_hour is not None and c.prefill_price_per_hour is not None
    return {"gpus": gpus, "price_per_gpu_hour": c.price_per_hour,
            "cost_per_hour": prefill * c.prefill_gpus_per_replica * c.prefill_price_per_hour
            + decode * c.gpus_per_replica * c.price_per_hour if priced else None}


def _mark_front(rows: list[dict[str, Any]], objective: str) -> None:
    """``pareto``: no other row is at most as costly with percentiles at most as high, and better in one."""
    def key(r: Mapping[str, Any]) -> tuple[float, float, float]:
        return (r[objective], _finite(r["ttft_s"]), _finite(r["tpot_s"]))

    for row in rows:
        a = key(row)
        row["pareto"] = not any(all(x <= y for x, y in zip(key(o), a, strict=True)) and key(o) != a for o in rows)


def _finite(value: float) -> float:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


# --- executors --------------------------------------------------------------------------------------------------

#: Deadlines of a Dask cluster [s]: the connection and handshake, and each simulation result (a task is at most
#: ``MAX_BATCH`` simulations of a few thousand requests: seconds to minutes on one core).
CONNECT_TIMEOUT_S, RESULT_TIMEOUT_S = 10.0, 1800.0
#: Largest Dask handshake accepted [B]: a scheduler's is a few hundred bytes of msgpack.
MAX_HANDSHAKE_BYTES = 1 << 20


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    """``n`` bytes from ``sock`` before ``deadline`` (time.monotonic); fewer when the peer closes; TimeoutError."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(n - len(data), 65536))
        if not chunk:
            break
        data += chunk
    return data


def probe_scheduler(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Connect to ``address`` (``tcp://HOST:PORT``) and read the handshake a Dask scheduler sends first, within
    ``timeout_s`` in all; ScenarioError telling apart a refused connection, a silent port and a port that answers
    but is not Dask (before Dask's own client, which waits without a deadline for the handshake and reads a
    junk length header as a request to allocate exabytes). TLS addresses are only connected to."""
    shown = clean_line(address, 120)
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except TimeoutError:
        raise ScenarioError(f"--cluster {shown}: no connection within {timeout_s:g} s (is the host up, and the port "
                            f"open?)") from None
    except socket.gaierror as exc:
        raise ScenarioError(f"--cluster {shown}: cannot resolve the host ({exc.strerror or exc})") from None
    except (OSError, ValueError, OverflowError) as exc:
        raise ScenarioError(f"--cluster {shown}: cannot connect ({getattr(exc, 'strerror', None) or exc}); is a "
                            f"Dask scheduler running there?") from None
    with sock:
        if scheme != "tcp":
            return
        not_dask = f"--cluster {shown}: it answered, but not as a Dask scheduler does"
        try:
            header = _recv_exactly(sock, 16, deadline)
            if len(header) < 16:
                raise ScenarioError(f"{not_dask} (it closed the connection without a handshake)")
            total, frames = struct.unpack("<QQ", header)
            if not 16 <= total <= MAX_HANDSHAKE_BYTES or not 1 <= frames <= 64:
                raise ScenarioError(f"{not_dask} (its first bytes are not a Dask message)")
        except TimeoutError:
            raise ScenarioError(f"--cluster {shown}: connected, but nothing answered within {timeout_s:g} s: not a "
                                f"Dask scheduler, or one too busy to answer") from None
        except OSError as exc:
            raise ScenarioError(f"--cluster {shown}: the connection failed during the handshake "
                                f"({exc.strerror or exc})") from None


def _client(address: str, timeout_s: float) -> Any:
    """A Dask client of ``address`` made within ``timeout_s`` (its handshake has no deadline of its own: the
    client is made on a daemon thread, abandoned past the deadline)."""
    from distributed import Client

    made: queue.SimpleQueue = queue.SimpleQueue()

    def connect() -> None:
        try:
            made.put(Client(address, timeout=f"{timeout_s}s"))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            made.put(exc)

    threading.Thread(target=connect, daemon=True, name="dask-connect").start()
    try:
        client = made.get(timeout=timeout_s + 1.0)
    except queue.Empty:
        raise ScenarioError(f"--cluster {clean_line(address, 120)}: the Dask handshake did not finish within "
                            f"{timeout_s:g} s") from None
    if isinstance(client, BaseException):
        raise ScenarioError(f"--cluster {clean_line(address, 120)}: cannot connect to a Dask scheduler "
                            f"({clean_line(str(client), 150)})") from None
    return client


def executor_for(workers: int, cluster: str | None, event_loop: str = "auto",
                 timeout_s: float | None = None) -> tuple[cf.Executor | None, Any]:
    """(executor, what to close): none for one local worker, a process pool for several (each worker made ready
    by ``start_worker`` for ``event_loop``), a Dask cluster's executor for ``--cluster ADDRESS`` (needs
    ``pip install capacity[distributed]``), reached within ``timeout_s`` (``CONNECT_TIMEOUT_S``)."""
    if cluster:
        timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            import distributed  # noqa: F401 - only whether it is installed
        except ImportError:
            raise ScenarioError("--cluster needs Dask distributed (pip install 'capacity[distributed]')") from None
        probe_scheduler(cluster, timeout_s)
        client = _client(cluster, timeout_s)
        return client.get_executor(pure=False), client
    if workers <= 1:
        return None, None
    import multiprocessing

    pool = cf.ProcessPoolExecutor(max_workers=workers, initializer=start_worker,
                                  initargs=(event_loop, multiprocessing.get_context().Lock()))
    return pool, pool


# --- the command ------------------------------------------------------------------------------------------------

__all__ = ["CONNECT_TIMEOUT_S", "Candidate", "RESULT_TIMEOUT_S", "SearchResult", "Setting", "event_loop_for_search",
           "executor_for", "grid_size", "probe_scheduler",
           "pool_split", "prune", "scenario_data", "search", "settings_grid", "simulate_candidate",
           "simulate_many", "start_worker"]
