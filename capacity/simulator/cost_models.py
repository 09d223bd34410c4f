"""Pluggable cost models: how long one engine iteration (a forward pass) takes.

An iteration runs ``B`` decoding sequences that read ``S`` context tokens in all,
plus ``Pf`` prompt tokens of prefill. Two models share one interface:

* ``TeachingCost``, the essays' teaching simulator (essay 000): a decode iteration
  costs ``18.0 ms + 0.12 ms * B``, prefill ``0.03 ms`` per prompt token.
* ``RooflineCost``, the analytic core's roofline (docs/model.md, "The decode step", essay 001):
  ``max((W + S kv) / BW, (B + Pf) 2N / F) + o``; with ``B = 0`` this is exactly
  ``roofline.prefill_s`` and with ``Pf = 0`` exactly ``roofline.decode_step_s``.

For the fast-forward the engine needs ``k`` decode steps at once while the batch
is fixed; every sequence's context then grows by one token per step, so step
``j`` reads ``S + B j`` tokens. ``decode_run_s`` sums those ``k`` steps in closed
form and ``steps_to_reach`` inverts it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from capacity.formulas import roofline
from capacity.model.analysis import complete_inputs, replica_stages, step_model
from capacity.model.scenario import Scenario
from capacity.simulator.config import SimulationConfig

_pass_s = roofline.pass_s  # one forward pass from its memory, compute and all-reduce terms (the model layer's)


class CostModel(Protocol):
    """What the engine asks of a cost model. Times in seconds, contexts in tokens."""

    name: str

    def step_s(self, batch: int, context_tokens: float, prefill_tokens: int) -> float:
        """One iteration of ``batch`` decodes reading ``context_tokens`` in all, plus ``prefill_tokens`` [s]."""
        ...

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> float:
        """``steps`` decode-only iterations, contexts growing by ``batch`` tokens per step [s]."""
        ...

    def last_step_s(self, batch: int, context_tokens: float, steps: int) -> float:
        """The longest (the last) of those iterations [s]."""
        ...

    def steps_to_reach(self, batch: int, context_tokens: float, duration_s: float) -> int:
        """Smallest ``k >= 1`` with ``decode_run_s(batch, context_tokens, k) >= duration_s`` (to rounding)."""
        ...

    def window(self, batch: int, context_tokens: float, steps: int) -> tuple[float, float, float]:
        """``(decode_run_s, first step, last step)`` of a run of ``steps`` decode steps [s], in one call."""
        ...


@dataclass(frozen=True, slots=True)
class TeachingCost:
    """Essay 000's constants: ``decode = base + per_seq * B`` [s], ``prefill = per_token * Pf`` [s].

    At B = 16: 18.0 + 0.12 * 16 = 19.92 ms; at B = 253: 48.4 ms (essay 000).
    """

    decode_base_s: float = 18.0e-3
    decode_per_seq_s: float = 0.12e-3
    prefill_per_token_s: float = 0.03e-3
    name: str = "teaching"

    def step_s(self, batch: int, context_tokens: float, prefill_tokens: int) -> float:
        return teaching_step_s(self.decode_base_s, self.decode_per_seq_s, self.prefill_per_token_s, batch,
                               prefill_tokens)

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> float:
        return teaching_window(self.decode_base_s, self.decode_per_seq_s, batch, steps)[0]

    def last_step_s(self, batch: int, context_tokens: float, steps: int) -> float:
        return teaching_window(self.decode_base_s, self.decode_per_seq_s, batch, steps)[2]

    def steps_to_reach(self, batch: int, context_tokens: float, duration_s: float) -> int:
        return teaching_steps_to_reach(self.decode_base_s, self.decode_per_seq_s, batch, duration_s)

    def window(self, batch: int, context_tokens: float, steps: int) -> tuple[float, float, float]:
        return teaching_window(self.decode_base_s, self.decode_per_seq_s, batch, steps)


# The formulas below are plain functions of numbers (no objects, no numpy arrays) so that the compiled event
# loop (``compiled.py``) compiles these very functions: the cost model's methods and the compiled loop share
# one home for every step-time formula.


def teaching_step_s(decode_base_s: float, decode_per_seq_s: float, prefill_per_token_s: float, batch: int,
                    prefill_tokens: int) -> float:
    """Essay 000's iteration: ``base + per_seq B`` (when ``B > 0``) ``+ per_token Pf`` [s]."""
    decode = decode_base_s + decode_per_seq_s * batch if batch > 0 else 0.0
    return decode + prefill_per_token_s * prefill_tokens


def teaching_window(decode_base_s: float, decode_per_seq_s: float, batch: int,
                    steps: int) -> tuple[float, float, float]:
    """``(k step, step, step)`` with ``step = base + per_seq B`` [s]: every decode step of a fixed batch is equal."""
    step = decode_base_s + decode_per_seq_s * batch
    return steps * step, step, step


def teaching_steps_to_reach(decode_base_s: float, decode_per_seq_s: float, batch: int, duration_s: float) -> int:
    """Smallest ``k >= 1`` with ``k (base + per_seq B) >= duration`` (to rounding)."""
    return max(1, math.ceil(duration_s / (decode_base_s + decode_per_seq_s * batch) - 1e-9))


def _sum_max_linear(a: float, m: float, c: float, lo: int, hi: int) -> float:
    """``sum_{j=lo}^{hi-1} max(a + m j, c)`` for ``m >= 0``: a flat run at ``c``, then an arithmetic series."""
    n = hi - lo
    if n <= 0:
        return 0.0
    if m <= 0:
        return n * (a if a > c else c)
    cross = lo if a + m * lo >= c else min(hi, max(lo, math.ceil((c - a) / m)))
    rest = hi - cross
    return (cross - lo) * c + rest * a + m * rest * (cross + hi - 1) / 2.0


@dataclass(frozen=True, slots=True)
class RooflineCost:
    """The analytic core's step model (``analysis.StepModel``) as per-iteration coefficients, per GPU.

    One iteration of ``B`` decoding sequences reading ``S`` context tokens plus ``Pf`` prompt tokens:

        max(W_read(B + Pf) / BW + kv S_w / BW, B 2N_a / (tp pp F) + Pf 2N_a / (tp F))
            + o pp + all-reduce latency + (B + Pf) all-reduce time per token

    ``weights_s = W / (tp BW)`` [s] (MoE: ``moe_weights_s(tokens)``, the experts a pass touches),
    ``kv_s_per_token = kv_gpu / BW`` [s/token], ``decode_compute_s`` [s/sequence],
    ``prefill_compute_s`` [s/token], ``fixed_s`` [s], ``comm_s_per_token`` [s/token]. Sliding-window
    layers (a share ``local_fraction`` keeps ``sliding_window`` tokens) read ``S_w = (1 - f) S + f min(S, B w)``,
    the window applied to the average context as the analytic model does. Essay 001: 8 ms, 65.5 ns,
    0.107 ms, 0.107 ms, 3 ms, 0. Efficiency curves (engine profiles): ``weights_s`` includes the bandwidth
    curve's fixed bytes and ``compute_fixed_s`` the FLOP/s curve's ``T_half`` tokens (``roofline.curve_amount``);
    ``prefill_compute_s`` includes attention's arithmetic per prompt token at the scenario's prompt length and
    cached prefix (``StepModel.prefill_attention_s``, the analytic model's mean; 0 under the essays' convention).
    """

    weights_s: float
    kv_s_per_token: float
    decode_compute_s: float
    prefill_compute_s: float
    fixed_s: float
    comm_s_per_token: float = 0.0
    sliding_window: float = math.inf
    local_fraction: float = 0.0
    moe_weights_s: Callable[[float], float] | None = None
    name: str = "roofline"
    compute_fixed_s: float = 0.0  # FLOP/s curve (engine profiles): T_half tokens' compute per pass [s]

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> RooflineCost:
        """Coefficients of the scenario's ``StepModel`` (tensor and pipeline split, MoE, all-reduce, windows)."""
        x = complete_inputs(scenario.inputs())
        model, kv_gpu = step_model(x, np.asarray(0.0))
        bw, flops, tp, pp = (float(v) for v in (model.bandwidth, model.flops, model.tensor_parallel,
                                                          model.pipeline_parallel))
        active = float(model.active_params)
        moe = None
        half_bytes, half_tokens = float(model.half_bytes), float(model.half_tokens)
        if bool(model.moe):
            moe = functools.lru_cache(maxsize=4096)(
                lambda tokens: float(roofline.curve_amount(model.weights_read(tokens), half_bytes)) / bw)
        window = float(x["sliding_window"])
        prompt = replica_stages(x)[2]  # a prompt's uncached tokens and the cached prefix they attend to
        return cls(weights_s=float(roofline.decode_memory_s(roofline.curve_amount(model.weights_read(1.0), half_bytes),
                                                            0, 0, 0, bw)),
                   compute_fixed_s=float(roofline.decode_compute_s(half_tokens, active / (tp * pp), flops)),
                   kv_s_per_token=float(roofline.decode_memory_s(0, 1, 1, kv_gpu, bw)),
                   decode_compute_s=float(roofline.decode_compute_s(1, active / (tp * pp), flops)),
                   prefill_compute_s=float(roofline.decode_compute_s(1, active / tp, flops)
                                           + model.prefill_attention_s(1.0, prompt.tokens, prompt.cached_tokens)),
                   fixed_s=float(model.overhead + model.comm_fixed), comm_s_per_token=float(model.comm_per_token),
                   sliding_window=window, local_fraction=float(x["local_layer_fraction"]) if window < math.inf
                   else 0.0, moe_weights_s=moe)

    def _weights(self, tokens: int) -> float:
        return self.moe_weights_s(tokens) if self.moe_weights_s is not None else self.weights_s

    def _windowed(self, batch: int, context_tokens: float) -> float:
        f = self.local_fraction
        if not f:
            return context_tokens
        return (1.0 - f) * context_tokens + f * min(context_tokens, batch * self.sliding_window)

    def step_s(self, batch: int, context_tokens: float, prefill_tokens: int) -> float:
        return roofline_step_s(self._weights(batch + prefill_tokens), self.kv_s_per_token,
                               self._windowed(batch, context_tokens), self.decode_compute_s, self.prefill_compute_s,
                               self.compute_fixed_s, self.comm_s_per_token, self.fixed_s, batch, prefill_tokens)

    def _pieces(self, batch: int, context_tokens: float) -> tuple[float, float, float, float, float]:
        """Memory term ``a + m j`` of decode step ``j`` before the window kink at ``j = kink``, after it
        ``a2 + m2 j``; returns (a, m, kink, a2, m2)."""
        w = self._weights(batch)
        kv = self.kv_s_per_token
        a, m = w + kv * context_tokens, kv * batch
        f = self.local_fraction
        if not f:
            return a, m, math.inf, a, m
        cap = batch * self.sliding_window  # the average context reaches the window at S + B j = B w
        a2, m2 = w + kv * ((1.0 - f) * context_tokens + f * cap), (1.0 - f) * m
        if context_tokens >= cap:
            return a2, m2, math.inf, a2, m2
        return a, m, float(math.ceil((cap - context_tokens) / batch)), a2, m2

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> float:
        """``sum_{j<k} max(mem(j), c B) + fixed + B comm``: flat compute-bound steps, then arithmetic series."""
        if steps <= 0:
            return 0.0
        a, m, kink, a2, m2 = self._pieces(batch, context_tokens)
        c = self.decode_compute_s * batch + self.compute_fixed_s
        split = int(min(kink, steps))
        return _sum_max_linear(a, m, c, 0, split) + _sum_max_linear(a2, m2, c, split, steps) + \
            steps * (self.fixed_s + self.comm_s_per_token * batch)

    def last_step_s(self, batch: int, context_tokens: float, steps: int) -> float:
        return self.step_s(batch, context_tokens + batch * (steps - 1), 0)

    def window(self, batch: int, context_tokens: float, steps: int) -> tuple[float, float, float]:
        if self.moe_weights_s is not None or self.local_fraction:
            return (self.decode_run_s(batch, context_tokens, steps), self.step_s(batch, context_tokens, 0),
                    self.step_s(batch, context_tokens + batch * (steps - 1), 0))
        return dense_window(self.weights_s, self.kv_s_per_token, self.decode_compute_s, self.compute_fixed_s,
                            self.comm_s_per_token, self.fixed_s, batch, context_tokens, steps)

    def steps_to_reach(self, batch: int, context_tokens: float, duration_s: float) -> int:
        if self.moe_weights_s is None and not self.local_fraction:  # dense, no window: no kink
            return dense_steps_to_reach(self.weights_s, self.kv_s_per_token, self.decode_compute_s,
                                        self.compute_fixed_s, self.comm_s_per_token, self.fixed_s, batch,
                                        context_tokens, duration_s)
        a, m, kink, _, _ = self._pieces(batch, context_tokens)
        c = self.decode_compute_s * batch + self.compute_fixed_s
        k = linear_steps_to_reach(a, m, c, self.fixed_s + self.comm_s_per_token * batch, duration_s)
        if k <= kink:
            return max(1, k)
        lo, hi = int(kink), max(int(kink) + 1, k)  # past the window kink steps grow slower: search
        while self.decode_run_s(batch, context_tokens, hi) < duration_s:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.decode_run_s(batch, context_tokens, mid) < duration_s else (lo, mid)
        return max(1, hi)


def roofline_step_s(weights_s: float, kv_s_per_token: float, context_read_tokens: float, decode_compute_s: float,
                    prefill_compute_s: float, compute_fixed_s: float, comm_s_per_token: float, fixed_s: float,
                    batch: int, prefill_tokens: int) -> float:
    """One iteration: ``pass_s(W + kv S_w, B c_d + Pf c_p + c_0, (B + Pf) comm, o)`` [s] (``RooflineCost``)."""
    memory = weights_s + kv_s_per_token * context_read_tokens
    compute = decode_compute_s * batch + prefill_compute_s * prefill_tokens + compute_fixed_s
    return _pass_s(float(memory), float(compute), comm_s_per_token * (batch + prefill_tokens), fixed_s)


def dense_window(weights_s: float, kv_s_per_token: float, decode_compute_s: float, compute_fixed_s: float,
                 comm_s_per_token: float, fixed_s: float, batch: int, context_tokens: float,
                 steps: int) -> tuple[float, float, float]:
    """``(decode_run_s, first step, last step)`` [s] of ``steps`` decode steps of a dense model without windows.

    ``first`` and ``last`` are ``step_s(B, S, 0)`` and ``step_s(B, S + B (k - 1), 0)``: the same pass, its terms
    (memory ``a``, compute ``c``, all-reduce) at hand, so ``pass_s`` is called on them directly; the run is
    ``k (a + e) + m k (k - 1) / 2`` when memory-bound throughout, else ``_sum_max_linear``.
    """
    kv = kv_s_per_token
    a = weights_s + kv * context_tokens
    m = kv * batch
    c = decode_compute_s * batch + compute_fixed_s
    comm = comm_s_per_token * batch
    e = fixed_s + comm
    first = _pass_s(a, c, comm, fixed_s)
    last = first if steps == 1 else _pass_s(weights_s + kv * (context_tokens + batch * (steps - 1)), c, comm, fixed_s)
    if a >= c:
        return steps * (a + e) + m * steps * (steps - 1) / 2.0, first, last
    return _sum_max_linear(a, m, c, 0, steps) + steps * e, first, last


def linear_steps_to_reach(a: float, m: float, c: float, e: float, duration_s: float) -> int:
    """Smallest ``k`` with ``sum_{j<k} (max(a + m j, c) + e) >= duration`` (to rounding; may be 0).

    Compute-bound steps ``max(0, ceil((c - a) / m))`` come first at ``c + e`` each, then ``n`` memory-bound steps
    with ``n (a + e + m flat) + m n (n - 1) / 2 >= rest``: the root of that quadratic.
    """
    if a >= c:
        flat = 0.0
    else:  # compute-bound steps come first (all of them when the memory term does not grow)
        flat = max(0.0, math.ceil((c - a) / m)) if m > 0 else math.inf
    if flat * (c + e) >= duration_s:
        k = math.ceil(duration_s / (c + e) - 1e-9)
    else:  # n steps from j = flat: n (a + e + m flat) + m n (n - 1) / 2 >= rest
        rest = duration_s - flat * (c + e)
        b = a + e + m * flat - m / 2.0
        n = (-b + math.sqrt(b * b + 2.0 * m * rest)) / m if m > 0 else rest / (a + e)
        k = int(flat + math.ceil(n - 1e-9))
    return k


def dense_steps_to_reach(weights_s: float, kv_s_per_token: float, decode_compute_s: float, compute_fixed_s: float,
                         comm_s_per_token: float, fixed_s: float, batch: int, context_tokens: float,
                         duration_s: float) -> int:
    """``steps_to_reach`` of a dense model without windows: ``max(1, linear_steps_to_reach(...))`` (no kink)."""
    kv = kv_s_per_token
    a, m = weights_s + kv * context_tokens, kv * batch
    c = decode_compute_s * batch + compute_fixed_s
    e = fixed_s + comm_s_per_token * batch
    return max(1, linear_steps_to_reach(a, m, c, e, duration_s))


@dataclass(frozen=True, slots=True)
class PrefilledCost:
    """A decode-only replica's cost model (separate pools, ``pools.py``): ``inner``'s decode steps, and prompts that
    arrive prefilled (their KV cache moved from a prefill replica), so a prefill-only iteration takes 0 s and a
    decode step carries no prompt tokens."""

    inner: CostModel
    name: str = "prefilled"

    def step_s(self, batch: int, context_tokens: float, prefill_tokens: int) -> float:
        return self.inner.step_s(batch, context_tokens, 0) if batch else 0.0

    def decode_run_s(self, batch: int, context_tokens: float, steps: int) -> float:
        return self.inner.decode_run_s(batch, context_tokens, steps)

    def last_step_s(self, batch: int, context_tokens: float, steps: int) -> float:
        return self.inner.last_step_s(batch, context_tokens, steps)

    def steps_to_reach(self, batch: int, context_tokens: float, duration_s: float) -> int:
        return self.inner.steps_to_reach(batch, context_tokens, duration_s)

    def window(self, batch: int, context_tokens: float, steps: int) -> tuple[float, float, float]:
        return self.inner.window(batch, context_tokens, steps)


def compiled_cost_problem(cost: CostModel) -> str | None:
    """Why the compiled event loop (``compiled.py``) cannot run with ``cost`` (None: it can): it has the teaching
    model and the dense roofline without sliding windows, either of them also with prompts prefilled elsewhere
    (``PrefilledCost``)."""
    if isinstance(cost, PrefilledCost):
        cost = cost.inner
    if isinstance(cost, RooflineCost):
        if cost.moe_weights_s is not None or cost.local_fraction:
            return "MoE or sliding-window cost model"
    elif not isinstance(cost, TeachingCost):
        return f"cost model {type(cost).__name__}"
    return None


def cost_model_for(scenario: Scenario, config: SimulationConfig) -> CostModel:
    """The cost model the simulation block names (``teaching`` constants may be overridden)."""
    if config.cost_model == "teaching":
        return TeachingCost(config.decode_base_s, config.decode_per_seq_s, config.prefill_per_token_s)
    if scenario.serving.speculative:  # one iteration: verification and drafter passes (simulator.speculative)
        from capacity.simulator.speculative import speculative_cost

        return speculative_cost(scenario)
    return RooflineCost.from_scenario(scenario)
