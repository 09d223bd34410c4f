"""A plain-language verdict: which resource binds, and what would move it, with the numbers of each what-if."""

from __future__ import annotations

from dataclasses import replace

from capacity.errors import ScenarioError
from capacity.inputs.specs import BYTES_PER_WEIGHT
from capacity.model.scenario import Results, Scenario


def _try(scenario: Scenario, **sections) -> Results | None:
    try:
        return scenario.with_changes(**sections).evaluate()
    except ScenarioError:
        return None


def _gain(new: float, old: float) -> str:
    return f"+{(new / old - 1) * 100:,.0f}%" if old > 0 else "from zero"


def verdict(results: Results) -> list[str]:
    """Sentences: the binding resource first, then what-ifs that would move it, each re-evaluated."""
    s, r = results.scenario, results
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
    limit = r["goodput_limit"]
    if limit == "tpot":
        lines.append(f"The TPOT promise sets the goodput: {r['goodput_rps']:,.2f} of a possible "
                     f"{r['ceiling_rps']:,.2f} requests/s ({r['capacity_given_up'] * 100:,.0f}% of capacity given up).")
    elif limit == "ttft":
        lines.append(f"The TTFT promise sets the goodput: {r['goodput_rps']:,.2f} of a possible "
                     f"{r['ceiling_rps']:,.2f} requests/s (queueing for prefill grows near the ceiling).")
    else:
        lines.append(f"No promise binds: the goodput is the ceiling, {r['ceiling_rps']:,.2f} requests/s.")

    what_ifs = []
    if s.model.kv_dtype in ("fp16", "bf16", "fp32"):
        alt = _try(s, model={"kv_dtype": "fp8"})
        if alt:
            what_ifs.append(f"fp8 KV cache: {alt['batch_max']:,.0f} requests ({_gain(alt['batch_max'], fits)}), "
                            f"goodput {alt['goodput_rps']:,.2f} requests/s")
    if s.model.weight_dtype in ("fp16", "bf16", "fp32") and s.model.weight_bytes >= s.model.params * 1.5:
        alt = _try(s, model={"weight_dtype": "fp8", "weight_bytes": s.model.params * BYTES_PER_WEIGHT["fp8"]})
        if alt:
            what_ifs.append(f"fp8 weights: {alt['batch_max']:,.0f} requests, single stream "
                            f"{alt['single_stream_tokens_per_s']:,.0f} tokens/s, goodput {alt['goodput_rps']:,.2f} "
                            "requests/s")
    if s.workload.shared_prefix_tokens == 0 and s.workload.prompt_tokens >= 2 * s.serving.block_size:
        half = s.workload.prompt_tokens // 2
        alt = _try(s, workload={"shared_prefix_tokens": half})
        if alt:
            what_ifs.append(f"a shared {half:,}-token system prompt: {alt['batch_max']:,.0f} requests, "
                            f"goodput {alt['goodput_rps']:,.2f} requests/s")
    doubled = replace(s.gpu, count=s.gpu.count * 2)
    try:
        two = replace(s, gpu=doubled)
        two.check()
        alt = two.evaluate()
        per_gpu = alt["goodput_rps"] / doubled.count
        what_ifs.append(f"{doubled.count} GPUs per replica: goodput {alt['goodput_rps']:,.2f} requests/s "
                        f"({per_gpu:,.2f} per GPU vs {r['goodput_rps'] / s.gpu.count:,.2f} now)")
    except ScenarioError:
        pass
    if what_ifs:
        lines.append("What would move it: " + "; ".join(what_ifs) + ".")
    return lines
