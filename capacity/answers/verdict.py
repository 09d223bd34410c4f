"""A plain-language verdict: which resource binds, and what would move it, with the numbers of each what-if.

``verdict(sizing)`` speaks of the one answer's layout (``sizing.size``): one replica of the chosen TP in the chosen
serving mode (``Sizing.replica``), its goodput at the promises' percentile (``Sizing.replica_goodput_rps``), and
what-ifs re-evaluated on that layout and mode (a doubled TP is the chosen TP doubled). ``verdict(results)`` speaks
of the results' own layout, colocated (a scenario sized in code without the answer).
"""

from __future__ import annotations

from dataclasses import replace

from capacity.errors import ScenarioError
from capacity.inputs.specs import BYTES_PER_WEIGHT
from capacity.model.scenario import Results, Scenario
from capacity.planning.sizing import MODE_WORDS, Sizing, mode_rates, promise_goodput, sized_per_class


def _try(scenario: Scenario, **sections) -> Results | None:
    try:
        return scenario.with_changes(**sections).evaluate()
    except ScenarioError:
        return None


def _goodput(results: Results, mode: str) -> float:
    """One replica's goodput in ``mode`` [requests/s], as the answer counts it: at the promises' percentile where
    the scenario is sized per class (``sizing.promise_goodput``), else the mode's mean-based goodput."""
    if mode == "colocated" and sized_per_class(results.scenario):
        found = promise_goodput(results.scenario)
        if found is not None:
            return found.rate_rps
    return mode_rates(results, mode)[1]


def _gain(new: float, old: float) -> str:
    return f"+{(new / old - 1) * 100:,.0f}%" if old > 0 else "from zero"


def verdict(answer: Sizing | Results) -> list[str]:
    """Sentences: the binding resource first, then what-ifs that would move it, each re-evaluated on the answer's
    layout and serving mode (a ``Sizing``), or on the results' own layout, colocated (``Results``)."""
    if isinstance(answer, Sizing):
        r, mode, limit = answer.replica, answer.mode, answer.binding_promise
        goodput = answer.replica_goodput_rps
    else:
        r, mode, limit = answer, "colocated", str(answer["goodput_limit"])
        goodput = _goodput(answer, mode)
    s = r.scenario
    lines: list[str] = []
    fits = r["batch_max"]
    if fits <= 0:
        return [f"Nothing fits: one request needs {r['blocks_per_request']:,.0f} blocks and the pool holds "
                f"{r['pool_blocks']:,.0f}. Use a larger GPU, more GPUs, or fewer bytes per weight."]
    if r["batch_limit"] == "max_num_seqs":
        lines.append(f"The batch is capped by max_num_seqs at {fits:,.0f}, below the "
                     f"{r['max_requests_shared_prefix']:,.0f} requests the KV pool could hold: raise max_num_seqs "
                     "to use the memory.")
    else:
        lines.append(f"KV memory binds: the pool holds {fits:,.0f} requests of {s.workload.tokens_per_request:,} "
                     f"tokens at once.")
    lines.append(f"At that batch a decode step is {r['decode_bound']}-bound "
                 f"({r['decode_memory_s'] * 1e3:,.1f} ms of memory traffic vs {r['decode_compute_s'] * 1e3:,.1f} ms "
                 f"of arithmetic); prefill takes {(1 - r['decode_share']) * 100:,.0f}% of the GPU's time at the "
                 "ceiling.")
    if r.efficiency_line():
        lines.append(r.efficiency_line()[0].upper() + r.efficiency_line()[1:] + ".")
    ceiling = mode_rates(r, mode)[0]
    layout = f"TP{s.gpu.count}, {MODE_WORDS[mode]}"
    if limit == "tpot":
        given_up = 1 - goodput / ceiling if ceiling > 0 else 0.0
        lines.append(f"The TPOT promise sets the goodput of one replica ({layout}): {goodput:,.2f} of a possible "
                     f"{ceiling:,.2f} requests/s ({given_up * 100:,.0f}% of capacity given up).")
    elif limit == "ttft":
        lines.append(f"The TTFT promise sets the goodput of one replica ({layout}): {goodput:,.2f} of a possible "
                     f"{ceiling:,.2f} requests/s (queueing for prefill grows near the ceiling).")
    else:
        lines.append(f"No promise binds one replica ({layout}): the goodput is the ceiling, {ceiling:,.2f} "
                     "requests/s.")

    what_ifs = []
    if s.model.kv_dtype in ("fp16", "bf16", "fp32"):
        alt = _try(s, model={"kv_dtype": "fp8"})
        if alt:
            what_ifs.append(f"fp8 KV cache: {alt['batch_max']:,.0f} requests ({_gain(alt['batch_max'], fits)}), "
                            f"goodput {_goodput(alt, mode):,.2f} requests/s")
    if s.model.weight_dtype in ("fp16", "bf16", "fp32") and s.model.weight_bytes >= s.model.params * 1.5:
        alt = _try(s, model={"weight_dtype": "fp8", "weight_bytes": s.model.params * BYTES_PER_WEIGHT["fp8"]})
        if alt:
            what_ifs.append(f"fp8 weights: {alt['batch_max']:,.0f} requests, single stream "
                            f"{alt['single_stream_tokens_per_s']:,.0f} tokens/s, goodput {_goodput(alt, mode):,.2f} "
                            "requests/s")
    if s.workload.shared_prefix_tokens == 0 and s.workload.prompt_tokens >= 2 * s.serving.block_size:
        half = s.workload.prompt_tokens // 2
        alt = _try(s, workload={"shared_prefix_tokens": half})
        if alt:
            what_ifs.append(f"a shared {half:,}-token system prompt: {alt['batch_max']:,.0f} requests, "
                            f"goodput {_goodput(alt, mode):,.2f} requests/s")
    doubled = replace(s.gpu, count=s.gpu.count * 2)
    try:
        two = replace(s, gpu=doubled)
        two.check()
        alt = two.evaluate()
        alt_goodput = _goodput(alt, mode)
        what_ifs.append(f"{doubled.count} GPUs per replica: goodput {alt_goodput:,.2f} requests/s "
                        f"({alt_goodput / doubled.count:,.2f} per GPU vs {goodput / s.gpu.count:,.2f} now)")
    except ScenarioError:
        pass
    if what_ifs:
        lines.append("What would move it: " + "; ".join(what_ifs) + ".")
    return lines
