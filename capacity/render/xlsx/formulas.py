"""Formula text: every result and intermediate of ``analysis`` as an Excel expression over defined names.

The formulas mirror ``analysis.analyse`` term by term (same operations in the same order), so a spreadsheet
engine reproduces the library to rounding; counts use the library's rounding-tolerant floor
``MAX(0,INT(x+1E-9*MAX(ABS(x),1)))``. Dense models take the TPOT bound in closed form
(``slo.max_rate_for_tpot_rps``): ``MIN_i (T-a_i)/(T*t_p+m_i*A*T)``. The TTFT bound, the chunked-prefill batches
and the MoE TPOT bounds have no closed form: the Solver sheet (``solver.py``) repeats the library's iterations.

LibreOffice returns 0 for the difference of two numbers within 2^-48 of each other and compares such numbers as
equal (``rtl::math::approxSub``, ``approxEqual``). Where the library's answer depends on such a difference (the
sign of a solver's excess near its root, a TPOT denominator at a piece's limit, ``1 - λ t_p`` of a prefill pool at
full load), the formulas take it exactly with ``_sub``. What is left is ``POWER`` (MoE expert reads), rounded
differently from numpy in the last bit.

Engine profiles (``engines``) are expressed too: the KV pool of an engine that sizes it from the memory free after
the weights (``kv_free_fraction``, TensorRT-LLM), the efficiency curves' fixed bytes and tokens per pass
(``bandwidth_half_bytes``, ``flops_half_tokens``), and prompts batched into prefill passes of
``max_batched_tokens`` tokens (``batched_prefill``): the GPU time a prompt costs the others, ``prefill_gpu_s``,
sets the ceiling and the TPOT, while a prompt's own TTFT waits for the plain prefill ``prefill_s``. Where the
library's formula function documents its Excel text (``Excel: ``=...````), the formula here is generated from
that text (``excel_of``), so the two cannot drift apart.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

from capacity.formulas import memory, roofline
from capacity.inputs import engines
from capacity.model.analysis import RESULTS

NA = "#N/A"
#: 1 - 2^-10: ``_sub`` subtracts two numbers this far below its first operand, exactly and far from 2^-48.
_SPLIT = "0.9990234375"

#: Named cells the workbook adds to ``analysis.INTERMEDIATES``: name -> (unit, meaning). Their cached values
#: come from the library's functions (``writer.workbook_intermediates``).
WORKBOOK_INTERMEDIATES: dict[str, tuple[str, str]] = {
    "prefill_gpu_s": ("s", "GPU time a prompt costs the others: its prefill, or with batched_prefill its share "
                           "of a pass of max(max_batched_tokens, prefill_tokens) tokens (engines.batched_prefill_s)"),
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9.E+-]+")


def excel_text(function: Callable) -> str:
    """The Excel formula a library function documents (``Excel: ``=...````, whitespace removed), without "="."""
    doc = inspect.getdoc(function) or ""
    found = re.search(r"``(=[^`]+)``", doc[doc.index("Excel"):]) if "Excel" in doc else None
    if found is None:
        raise ValueError(f"{function.__qualname__} documents no Excel formula")
    return re.sub(r"\s+", "", found.group(1))[1:]


def _closing(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _substitute(text: str, names: dict[str, str | Callable[[str], str]]) -> str:
    out, i = [], 0
    while (match := _NAME.search(text, i)) is not None:
        name, end = match.group(), match.end()
        out.append(text[i:match.start()])
        value = names.get(name)
        called = end < len(text) and text[end] == "("
        if value is None or (called and not callable(value)):
            out.append(name)
            i = end
        elif called:  # a function of the docstring (``prefill_s(T)``): its argument substituted first
            close = _closing(text, end)
            out.append(f"({value(_substitute(text[end + 1:close], names))})")
            i = close + 1
        else:
            out.append(value if _PLAIN.fullmatch(value) else f"({value})")
            i = end
    return "".join(out) + text[i:]


def excel_of(function: Callable, **names: str | Callable[[str], str]) -> str:
    """``function``'s documented Excel formula with its parameter names replaced by workbook expressions (each
    parenthesised unless a bare name or number; a callable replaces a call ``name(argument)``). Names left out stay:
    the function's parameter is then the workbook's defined name of the same name."""
    return _substitute(excel_text(function), names)


# --- formula builders: each returns an Excel expression over defined names -----------------------------------

def _sub(a: str, b: str) -> str:
    """``a - b`` as IEEE arithmetic gives it, also in LibreOffice, which rounds differences below 2^-48 of the
    operands to 0. There ``b`` is within 2^-48 of ``a``, so ``a - m`` and ``b - m`` with ``m = a (1 - 2^-10)``
    are exact (Sterbenz), and ``(a - m) - (b - m)``, at least 2^-44 of its operands, is exact and kept.
    ``a`` is a name, a cell, a number, a function call or a product (it is repeated unparenthesised)."""
    return f"IF({a}-({b})=0,({a}-{a}*{_SPLIT})-(({b})-{a}*{_SPLIT}),{a}-({b}))"


def _floor_count(x: str) -> str:
    """``memory.floor_count``: floor tolerant of rounding error, never below 0."""
    return f"MAX(0,INT({x}+1E-9*MAX(ABS({x}),1)))"


def _capped(t: str) -> str:
    """``min(t, sliding_window)``; a blank window means none."""
    return f"IF(ISBLANK(sliding_window),{t},MIN({t},sliding_window))"


def _windowed_tokens(t: str) -> str:
    """``memory.windowed_tokens``: ``t (1 - f) + min(t, window) f``."""
    return f"({t}*(1-local_layer_fraction)+{_capped(t)}*local_layer_fraction)"


def _windowed_blocks(t: str) -> str:
    """``memory.windowed_blocks``: ``(1 - f) ceil(t / bs) + f ceil(min(t, window) / bs)``."""
    return (f"((1-local_layer_fraction)*CEILING({t}/block_size,1)"
            f"+local_layer_fraction*CEILING({_capped(t)}/block_size,1))")


def _weights_read(tokens: str) -> str:
    """``StepModel.weights_read``: W (MoE: shared + experts touched by ``tokens``) per tensor-parallel GPU [B]."""
    # (1 - k/E)^t underflows to 0 in numpy; LibreOffice reports #NUM! instead, so take 0 below e^-700 explicitly.
    miss = (f"IF(MAX({tokens},0)*LN(1-experts_per_token/experts)<-700,0,"
            f"(1-experts_per_token/experts)^MAX({tokens},0))")
    touched = f"experts*(1-{miss})"
    return (f"IF(moe_model,weight_bytes*((params-experts*expert_params+expert_params*({touched}))/params),"
            f"weight_bytes)/gpu_count")


#: ``roofline.curve_amount``: the efficiency curves' fixed bytes per pass and fixed tokens (0 without an engine).
_HALF_BYTES = "layers*bandwidth_half_bytes"


def _decode_memory(b: str) -> str:
    return f"({_weights_read(b)}+{_HALF_BYTES}+{b}*context_per_layer_tokens*kv_bytes_per_token_per_gpu)/bandwidth"


def _decode_compute(b: str) -> str:
    return f"({b}+flops_half_tokens)*2*params_per_gpu/flops"


#: The cached prefix a prompt's uncached tokens attend to (``analysis.prefill_stage``) [tokens].
_CACHED = "MAX(prompt_tokens-prefill_tokens,0)"


def _prefill_attention(tokens: str, prompt: str | None = None) -> str:
    """``StepModel.prefill_attention_s``: attention's arithmetic of ``tokens`` tokens in causal prefills of prompts
    of ``prompt`` uncached tokens (None: one prompt of ``tokens``) after the cached prefix: ``roofline.attention_s``
    at the windowed mean context ``cached + prompt / 2``, ``roofline.attention_s_per_pair`` [s]."""
    per_pair = excel_of(roofline.attention_s_per_pair, gpus="gpu_count",
                        attention_flops="IF(ISBLANK(attention_flops),flops,attention_flops)")
    return excel_of(roofline.attention_s, query_tokens=tokens,
                    context_tokens=_windowed_tokens(f"({_CACHED}+({prompt or tokens})/2)"), per_pair_s=per_pair)


def _prefill(tokens: str, prompt: str | None = None) -> str:
    """``StepModel.prefill_s``: a pass over ``tokens`` tokens of prompts of ``prompt`` uncached tokens after the
    cached prefix, the stages in turn (``roofline.prefill_s`` on the efficiency curves' amounts and attention's
    arithmetic, then the all-reduce of the pass) [s]."""
    return (excel_of(roofline.prefill_s, weight_bytes=f"{_weights_read(tokens)}+{_HALF_BYTES}",
                     prompt_tokens=f"{tokens}+flops_half_tokens", params="active_params/gpu_count",
                     step_overhead_s="step_overhead_total_s", attention_s=_prefill_attention(tokens, prompt))
            + f"+(step_comm_fixed_s+{tokens}*step_comm_per_token_s)")


def _step(b: str) -> str:
    """``StepModel.step_s``: ``max(t_mem, t_comp) + all-reduce + overhead`` at batch ``b`` [s]."""
    return (f"MAX({_decode_memory(b)},{_decode_compute(b)})+(step_comm_fixed_s+{b}*step_comm_per_token_s)"
            f"+step_overhead_total_s")


def _tpot_denominators(rate: str, prefill: str = "prefill_s") -> tuple[str, str]:
    """``1 - λ t_p - λ A m_i`` of the two dense pieces (``slo.tpot_at_rate_s``), exactly (``_sub``): at a piece's
    limit it is a rounding-size number whose sign decides between a TPOT and none."""
    return tuple(_sub(f"(1-{rate}*{prefill})", f"{rate}*output_tokens*{m}")  # type: ignore[return-value]
                 for m in ("step_slope_memory_s", "step_slope_compute_s"))


def _tpot_from(d_mem: str, d_comp: str, times: str = "") -> str:
    """``slo.tpot_at_rate_s`` from the pieces' denominators: ``max(0, a_i / d_i)`` over the pieces with d_i > 0; a
    piece through the origin (a_i = 0) adds nothing down to d_i > -1e-12; #N/A (no TPOT) where another piece has
    d_i <= 0. ``times``: a factor appended to the TPOT."""
    pieces = (("step_intercept_memory_s", d_mem), ("step_intercept_compute_s", d_comp))
    none = ",".join(f"AND({d}<=0,OR({a}<>0,{d}<=-1E-12))" for a, d in pieces)
    values = ",".join(f"IF({d}>0,{a}/{d},0)" for a, d in pieces)
    return f"IF(OR({none}),NA(),MAX(0,{values}){times})"


def _tpot_closed(rate: str, prefill: str = "prefill_s", times: str = "") -> str:
    """``slo.tpot_at_rate_s`` at load ``rate``: ``max_i a_i / (1 - λ t_p - λ A m_i)``, #N/A when decode cannot keep
    up (``times``: a factor appended to the TPOT)."""
    return _tpot_from(*_tpot_denominators(rate, prefill), times)


def _decode_step_at(rate: str, prefill: str = "prefill_gpu_s") -> str:
    """``slo.decode_step_at_rate_s``: the decode step at load λ's batch, ``TPOT(λ) (1 - λ t_gpu)`` (#N/A: decode
    cannot keep up); the dense pieces, for MoE too (every expert read), with the GPU time a prompt costs the
    decoding sequences (``prefill_gpu_s``), as ``analysis.ttft_at_rates_s`` and the TTFT solve take it."""
    return _tpot_closed(rate, prefill, times=f"*(1-{rate}*{prefill})")


def _ttft_queue(rate: str, step: str) -> str:
    """``slo.ttft_queue_s``: ``t_p + (1/2 + ρ) L*`` with ``ρ = λ c``, ``L_p = f + c / (1 - ρ²)`` and
    ``L* = min(λ t_p L_p + λ A s², s + λ t_p max(0, L_p - s))`` (``λ t_p L_p`` where s = 0); #N/A where the
    queue has no bound (ρ >= 1, or no decode step s: decode cannot keep up); t_p at λ = 0."""
    rho, busy = f"({rate}*prefill_compute_s)", f"({rate}*prefill_s)"
    pass_s = f"(prefill_s-prefill_compute_s+prefill_compute_s/(1-{rho}*{rho}))"
    interval = (f"IF({step}>0,MIN({busy}*{pass_s}+{rate}*output_tokens*{step}*{step},"
                f"{step}+{busy}*MAX({pass_s}-{step},0)),{busy}*{pass_s})")
    return f"IF({rate}>0,IF(OR(ISNA({step}),{rho}>=1),NA(),prefill_s+(0.5+{rho})*{interval}),prefill_s)"


#: The TTFT the engine's passes must keep: the promise less the request latency (``analysis.delayed_ttft``).
ENGINE_TTFT_SLO = "(ttft_slo_s-request_latency_s)"


#: ``options.prefill_pool_rate_rps``' slack: the engine's TTFT budget less the prefill and the KV transfer.
_SLACK = f"{ENGINE_TTFT_SLO}-prefill_s-kv_transfer_s"


def _delayed(ttft: str) -> str:
    """``analysis.delayed_ttft``: a TTFT composed from the engine's passes plus the request latency L."""
    return f"request_latency_s+{ttft}"


def _ttft_at(rate: str, step: str) -> str:
    """``slo.ttft_at_rate_s``: the queue's TTFT below the ceiling, #N/A at and above it."""
    return f"IF({_sub(rate, 'ceiling_rps')}<0,{_ttft_queue(rate, step)},NA())"


def _rate_piece(a: str, m: str, prefill: str = "prefill_s") -> str:
    """One piece of ``slo.max_rate_for_tpot_rps``: ``(T - a_i) / (T t_p + m_i A T)``."""
    return f"(tpot_slo_s-{a})/(tpot_slo_s*{prefill}+{m}*output_tokens*tpot_slo_s)"


def _cost(rate: str) -> str:
    """``slo.cost_per_million_tokens`` for one replica: ``price gpus / (λ A 3600) 1e6``; #N/A without price or rate."""
    return (f"IF(OR(ISBLANK(price_per_hour),{rate}*output_tokens*3600<=0),NA(),"
            f"price_per_hour*gpus_per_replica/({rate}*output_tokens*3600)*1E6)")


# Chunked prefill (options.chunk_terms and friends) at batch b.

def _chunk_memory(b: str) -> str:
    return f"(step_intercept_memory_s+step_slope_memory_s*{b})"


def _chunk_tokens(b: str) -> str:
    """``k = min(P, budget - B)``: prompt tokens one iteration carries."""
    return f"MIN(prefill_tokens,max_batched_tokens-{b})"


def _chunk_plain(b: str) -> str:
    """``d_p = max(a_mem + m_mem B, a_comp + m_comp B)``: an iteration without a chunk."""
    return f"MAX({_chunk_memory(b)},step_intercept_compute_s+step_slope_compute_s*{b})"


def _chunk_carrying(b: str, k: str) -> str:
    """``d_c = max(a_mem + m_mem B, a_comp + m_comp (B + k))``: an iteration carrying a chunk of k tokens."""
    return f"MAX({_chunk_memory(b)},step_intercept_compute_s+step_slope_compute_s*({b}+{k}))"


def _chunk_extra(b: str, plain: str) -> str:
    """``x = (P / k) (d_c - d_p)``: extra time a prompt's chunks add; #N/A where no chunk fits."""
    k = _chunk_tokens(b)
    return f"IF({k}>0,prefill_tokens/{k}*{_sub(_chunk_carrying(b, k), plain)},NA())"


def _chunk_service(b: str) -> str:
    """``S = (P / k) d_c``: the prompt's chunk-carrying iterations; #N/A where no chunk fits."""
    k = _chunk_tokens(b)
    return f"IF({k}>0,prefill_tokens/{k}*{_chunk_carrying(b, k)},NA())"


def _chunk_rate(b: str, plain: str, extra: str) -> str:
    """``options.chunked_rate_rps``: ``λ = B / (A d_p + B x)``, 0 at B = 0."""
    return f"IF({b}>0,{b}/(output_tokens*{plain}+{b}*{extra}),0)"


def _chunk_tpot(b: str, plain: str, extra: str) -> str:
    """``options.chunked_tpot_s``: ``T = d_p + B x / A``."""
    return f"{plain}+{b}*{extra}/output_tokens"


def _chunk_ttft(rate: str, tpot: str, service: str) -> str:
    """``options.chunked_ttft_s``: ``T/2 + S + λ S² / (2 (1 - λ S))``; #N/A where ``λ S >= 1``."""
    idle = _sub("1", f"{rate}*{service}")
    return f"IF({idle}>0,0.5*{tpot}+{service}+{rate}*{service}*{service}/(2*{idle}),NA())"


def _pool_ttft(rate: str) -> str:
    """``options.prefill_pool_ttft_s``: ``t_p + λ t_p² / (2 (1 - λ t_p)) + t_kv``; #N/A where ``λ t_p >= 1``.

    ``1 - λ t_p`` is taken exactly (``_sub``): at λ = 1 / t_p it is 0 or 2^-53, and the library's TTFT then
    inf or a huge finite number; LibreOffice's plain subtraction would read both as 0."""
    idle = _sub("1", f"{rate}*prefill_s")
    return f"IF({idle}>0,prefill_s+{rate}*prefill_s*prefill_s/(2*{idle})+kv_transfer_s,NA())"


_DECODE_PER_REQUEST = "output_tokens*decode_step_s/batch_max"
#: Requests of the mean context (prompt + answer / 2) the pool holds, the prefix stored once, never fewer than paged
#: (``memory.max_requests_shared_prefix`` at ``context_tokens``): what ``batch_running`` caps.
_RUNNING_FITS = ("MAX(IF(pool_blocks>=shared_blocks_held,"
                 + _floor_count(f"(pool_blocks-shared_blocks_held)/"
                                f"{_windowed_blocks('(context_tokens-shared_blocks*block_size)')}") + ",0),"
                 + _floor_count(f"pool_blocks/{_windowed_blocks('context_tokens')}") + ")")

#: (batch, d_p, x) of the chunked-prefill iteration at the ceiling's, the goodput's and the load's batch.
_CHUNK_CEILING = ("chunk_batch_ceiling", "chunk_plain_ceiling_s", "chunk_extra_ceiling_s")
_CHUNK_GOODPUT = ("solver_chunk_batch_goodput", "chunk_plain_goodput_s", "chunk_extra_goodput_s")
_CHUNK_LOAD = ("solver_chunk_batch_load", "chunk_plain_load_s", "chunk_extra_load_s")
_GAP = _sub("ceiling_rps", "goodput_rps")   # the capacity the promises cost [requests/s]
_IN_FLIGHT = "goodput_rps*output_tokens*tpot_at_goodput_s"      # Little's law at the goodput [requests]
_CEILING_STEP = "tpot_at_ceiling_s*(1-goodput_rps*prefill_gpu_s)"  # the decode step behind TPOT at B_max [s]
_CEILING_STEP_LOAD = "tpot_at_ceiling_s*(1-arrival_rate*prefill_gpu_s)"  # the same at a load at the ceiling [s]
#: ``analysis.ceiling_limit`` of the load: at the ceiling to rounding, not past it.
_LOAD_AT_CEILING = "AND(arrival_rate>=ceiling_rps*(1-1E-12),arrival_rate<=ceiling_rps)"
_TPOT_FIXED_LOAD = f"IF(moe_model,solver_tpot_at_load_s,{_tpot_closed('arrival_rate', 'prefill_gpu_s')})"
_POOL_USED = "weight_bytes_per_gpu+reserved_bytes"  # what the pool rules subtract [B]
#: ``engines.batched_prefill_s``: a prompt's share of a pass of ``T = max(budget, P)`` tokens [s].
_BATCHED_PREFILL = excel_of(engines.batched_prefill_s, prefill_s=lambda t: _prefill(t, "prefill_tokens"),
                            prompt_tokens="prefill_tokens",
                            budget_tokens="max_batched_tokens")
_LOAD = "N(arrival_rate)"                   # the arrival rate, 0 when blank

#: Result (or intermediate) name -> Excel formula over the defined names, without the leading "=".
FORMULAS: dict[str, str] = {
    # Layout and architecture (analysis.step_model)
    "tokens_per_request": "prompt_tokens+output_tokens",
    "gpus_per_replica": "gpu_count*pipeline_parallel",
    "stage_layers": "CEILING(layers/pipeline_parallel,1)",
    "moe_model": "AND(experts>0,experts>experts_per_token)",
    "expert_params": "IF(moe_model,(params-active_params)/(experts-experts_per_token),0)",
    "ring_factor": "IF(AND(gpu_count>1,hidden_size>0),2*(gpu_count-1)/gpu_count,0)",
    "step_comm_fixed_s": "IF(ring_factor>0,2*layers*allreduce_latency_s,0)",
    "step_comm_per_token_s": ("IF(OR(ring_factor<=0,ISBLANK(interconnect_bandwidth)),0,"
                              "2*layers*ring_factor*hidden_size*2/interconnect_bandwidth)"),
    "step_overhead_total_s": "step_overhead_s*pipeline_parallel",
    # Memory (memory.py)
    "kv_bytes_per_token": ("IF(kv_latent_dim>0,layers*kv_latent_dim*kv_bytes_per_value,"
                           "2*layers*kv_heads*head_dim*kv_bytes_per_value)"),
    "kv_bytes_per_token_per_gpu": ("IF(kv_latent_dim>0,stage_layers*kv_latent_dim*kv_bytes_per_value,"
                                   "2*stage_layers*CEILING(kv_heads/gpu_count,1)*head_dim*kv_bytes_per_value)"),
    "weight_bytes_per_gpu": "weight_bytes/(gpu_count*pipeline_parallel)",
    "params_per_gpu": "active_params/gpus_per_replica",
    "pool_bytes": (f"IF(N(kv_free_fraction)>0,"
                   f"{excel_of(engines.pool_bytes_of_free, free_fraction='kv_free_fraction', used_bytes=_POOL_USED)},"
                   f"{excel_of(memory.pool_bytes, weight_bytes=_POOL_USED)})"),
    "pool_blocks": _floor_count("pool_bytes/(block_size*kv_bytes_per_token_per_gpu)"),
    "blocks_per_request": _windowed_blocks("tokens_per_request"),
    "shared_blocks": "INT(shared_prefix_tokens/block_size)",
    "shared_blocks_held": ("(1-local_layer_fraction)*shared_blocks+local_layer_fraction*IF(ISBLANK(sliding_window),"
                           "shared_blocks,MIN(shared_blocks,CEILING(sliding_window/block_size,1)))"),
    "private_blocks": _windowed_blocks("(tokens_per_request-shared_blocks*block_size)"),
    # Concurrency
    "max_requests_contiguous": _floor_count(f"pool_bytes/({_windowed_tokens('max_model_len')}"
                                            f"*kv_bytes_per_token_per_gpu)"),
    "max_requests_paged": _floor_count("pool_blocks/blocks_per_request"),
    "max_requests_shared_prefix": (f"IF(pool_blocks>=shared_blocks_held,"
                                   f"{_floor_count('(pool_blocks-shared_blocks_held)/private_blocks')},0)"),
    "batch_max": ("IF(ISBLANK(max_num_seqs),max_requests_shared_prefix,"
                  "MIN(max_requests_shared_prefix,max_num_seqs))"),
    # analysis._batch_running: under an engine profile the pool at the mean context (blocks allocated on demand)
    "batch_running": (f"IF(N(kv_on_demand)>0,MAX(batch_max,IF(ISBLANK(max_num_seqs),{_RUNNING_FITS},"
                      f"MIN({_RUNNING_FITS},max_num_seqs))),batch_max)"),
    "batch_limit": ('IF(ISBLANK(max_num_seqs),"kv_memory",'
                    'IF(max_num_seqs<max_requests_shared_prefix,"max_num_seqs","kv_memory"))'),
    # Roofline (roofline.py, analysis.StepModel)
    "context_tokens": "prompt_tokens+output_tokens/2",
    "context_per_layer_tokens": _windowed_tokens("context_tokens"),
    # A fully cached prompt still computes its last token to produce the first output.
    "prefill_tokens": "MAX(prompt_tokens-shared_blocks*block_size,1)",
    "decode_memory_s": _decode_memory("batch_max"),
    "decode_compute_s": _decode_compute("batch_max"),
    "allreduce_per_step_s": "step_comm_fixed_s+batch_max*step_comm_per_token_s",
    "decode_step_s": "MAX(decode_memory_s,decode_compute_s)+allreduce_per_step_s+step_overhead_total_s",
    "decode_bound": 'IF(decode_compute_s>decode_memory_s,"compute","memory")',
    "weight_bytes_read_per_step": f"{_weights_read('batch_max')}*gpu_count",
    "prefill_s": _prefill("prefill_tokens"),
    "prefill_gpu_s": f"IF(N(batched_prefill)>0,{_BATCHED_PREFILL},prefill_s)",
    "prefill_compute_s": ("prefill_tokens*(2*(active_params/gpu_count)/flops+step_comm_per_token_s)+"
                          + _prefill_attention("prefill_tokens")),
    "critical_batch": "weight_bytes/gpu_count*flops/(2*params_per_gpu*bandwidth)",
    "single_stream_tokens_per_s": f"bandwidth/({_weights_read('1')}+{_HALF_BYTES})",
    # Ceiling
    "gpu_time_per_request_s": f"IF(batch_max>0,prefill_gpu_s+{_DECODE_PER_REQUEST},NA())",
    "ceiling_rps": "IF(batch_max>0,1/gpu_time_per_request_s,0)",
    "decode_share": f"IF(batch_max>0,({_DECODE_PER_REQUEST})/(prefill_gpu_s+{_DECODE_PER_REQUEST}),0)",
    "tpot_at_ceiling_s": "IF(decode_share>0,decode_step_s/decode_share,NA())",
    "output_tokens_per_s_at_ceiling": "ceiling_rps*output_tokens",
    "batching_gain": "output_tokens_per_s_at_ceiling/single_stream_tokens_per_s",
    # Promise (slo.py): dense t_step(B) = max(a_mem + m_mem B, a_comp + m_comp B)
    "step_intercept_memory_s": (f"(weight_bytes/gpu_count+{_HALF_BYTES})/bandwidth"
                                "+(step_overhead_total_s+step_comm_fixed_s)"),
    "step_slope_memory_s": "context_per_layer_tokens*kv_bytes_per_token_per_gpu/bandwidth+step_comm_per_token_s",
    "step_intercept_compute_s": "flops_half_tokens*2*params_per_gpu/flops+step_overhead_total_s+step_comm_fixed_s",
    "step_slope_compute_s": "params_per_gpu*2/flops+step_comm_per_token_s",
    "max_rate_for_tpot_rps": (
        "IF(ISBLANK(tpot_slo_s),NA(),IF(moe_model,solver_rate_tpot_rps,MAX(0,MIN("
        f"{_rate_piece('step_intercept_memory_s', 'step_slope_memory_s', 'prefill_gpu_s')},"
        f"{_rate_piece('step_intercept_compute_s', 'step_slope_compute_s', 'prefill_gpu_s')}))))"),
    # The TTFT queue has no closed-form bound: the Solver sheet's rows find it.
    "max_rate_for_ttft_rps": "IF(ISBLANK(ttft_slo_s),NA(),solver_rate_ttft_rps)",
    "goodput_rps": ("MAX(MIN(ceiling_rps,IF(ISBLANK(tpot_slo_s),ceiling_rps,max_rate_for_tpot_rps),"
                    "IF(ISBLANK(ttft_slo_s),ceiling_rps,max_rate_for_ttft_rps)),0)"),
    "goodput_at_ceiling": "goodput_rps>=ceiling_rps*(1-1E-12)",
    "goodput_limit": ('IF(batch_max<=0,"nothing_fits",IF(goodput_at_ceiling,"capacity",'
                      'IF(ISBLANK(tpot_slo_s),"ttft",IF(ISBLANK(ttft_slo_s),"tpot",'
                      'IF(max_rate_for_tpot_rps<=max_rate_for_ttft_rps,"tpot","ttft")))))'),
    # At the ceiling TPOT and TTFT are their limits from below: the smallest fixed point (at most B_max's).
    "tpot_fixed_point_at_goodput_s": ("IF(moe_model,solver_tpot_at_goodput_s,"
                                      f"{_tpot_closed('goodput_rps', 'prefill_gpu_s')})"),
    "tpot_at_goodput_s": ("IF(AND(goodput_at_ceiling,goodput_rps>0),IF(ISNA(tpot_fixed_point_at_goodput_s),"
                          "tpot_at_ceiling_s,MIN(tpot_fixed_point_at_goodput_s,tpot_at_ceiling_s)),"
                          "tpot_fixed_point_at_goodput_s)"),
    "goodput_in_flight": (f"IF(AND(goodput_at_ceiling,goodput_rps>0),IF(tpot_at_goodput_s>=tpot_at_ceiling_s,"
                          f"batch_max,{_IN_FLIGHT}),IF(goodput_rps>0,{_IN_FLIGHT},0))"),
    "ttft_step_fixed_at_goodput_s": _decode_step_at("goodput_rps"),
    "ttft_step_at_goodput_s": ("IF(AND(goodput_at_ceiling,goodput_rps>0),IF(ISNA(ttft_step_fixed_at_goodput_s),"
                               f"{_CEILING_STEP},MIN(ttft_step_fixed_at_goodput_s,{_CEILING_STEP})),"
                               "ttft_step_fixed_at_goodput_s)"),
    "ttft_at_goodput_s": _delayed("IF(AND(goodput_at_ceiling,goodput_rps>0),"
                                  f"{_ttft_queue('goodput_rps', 'ttft_step_at_goodput_s')},"
                                  f"{_ttft_at('goodput_rps', 'ttft_step_at_goodput_s')})"),
    "capacity_given_up": f"IF(ceiling_rps>0,{_sub('1', 'goodput_rps/ceiling_rps')},0)",
    "output_tokens_per_s_at_goodput": "goodput_rps*output_tokens",
    "goodput_per_gpu_rps": "goodput_rps/gpus_per_replica",
    "fleet_goodput_rps": "goodput_rps*replicas",
    # Load: an arrival rate of 0 or blank means none
    "load_fraction": "IF(AND(N(arrival_rate)>0,ceiling_rps>0),arrival_rate/ceiling_rps,NA())",
    # As at the goodput (``analysis.at_ceiling``): a load at the ceiling takes the limits from below, past it none.
    "tpot_at_load_s": (f"IF(N(arrival_rate)>0,IF(arrival_rate>ceiling_rps,NA(),IF({_LOAD_AT_CEILING},"
                       f"IF(ISNA({_TPOT_FIXED_LOAD}),tpot_at_ceiling_s,MIN({_TPOT_FIXED_LOAD},tpot_at_ceiling_s)),"
                       f"{_TPOT_FIXED_LOAD})),NA())"),
    "ttft_step_at_load_s": (f"IF(N(arrival_rate)>0,IF({_LOAD_AT_CEILING},IF(ISNA({_decode_step_at('arrival_rate')}),"
                            f"{_CEILING_STEP_LOAD},MIN({_decode_step_at('arrival_rate')},{_CEILING_STEP_LOAD})),"
                            f"{_decode_step_at('arrival_rate')}),NA())"),
    "ttft_at_load_s": _delayed(f"IF(N(arrival_rate)>0,IF({_LOAD_AT_CEILING},"
                               f"{_ttft_queue('arrival_rate', 'ttft_step_at_load_s')},"
                               f"{_ttft_at('arrival_rate', 'ttft_step_at_load_s')}),NA())"),
    # Cost
    "cost_per_million_tokens": _cost("goodput_rps"),
    "cost_per_million_tokens_at_ceiling": _cost("ceiling_rps"),
    # Chunked prefill (options.chunked): each quantity at a batch B; the Solver sheet finds the batches.
    "chunk_batch_cap": "MAX(MIN(batch_max,max_batched_tokens-1),0)",
    "chunk_batch_ceiling": ("MIN(chunk_batch_cap,"
                            "output_tokens*MIN(1,max_batched_tokens/(output_tokens+prefill_tokens)))"),
    "chunk_plain_ceiling_s": _chunk_plain("chunk_batch_ceiling"),
    "chunk_extra_ceiling_s": _chunk_extra("chunk_batch_ceiling", "chunk_plain_ceiling_s"),
    "chunked_ceiling_rps": f"IF(chunk_batch_cap>0,{_chunk_rate(*_CHUNK_CEILING)},0)",
    "chunk_plain_goodput_s": _chunk_plain("solver_chunk_batch_goodput"),
    "chunk_extra_goodput_s": _chunk_extra("solver_chunk_batch_goodput", "chunk_plain_goodput_s"),
    "chunk_service_goodput_s": _chunk_service("solver_chunk_batch_goodput"),
    "chunked_goodput_rps": _chunk_rate(*_CHUNK_GOODPUT),
    "chunked_tpot_at_goodput_s": f"IF(solver_chunk_batch_goodput>0,{_chunk_tpot(*_CHUNK_GOODPUT)},NA())",
    "chunked_ttft_at_goodput_s": _delayed("IF(solver_chunk_batch_goodput>0,"
                                          + _chunk_ttft("chunked_goodput_rps", "chunked_tpot_at_goodput_s",
                                                        "chunk_service_goodput_s") + ",NA())"),
    "chunk_load_known": f"AND({_LOAD}>0,{_sub(_LOAD, 'chunked_ceiling_rps')}<=0)",
    "chunk_plain_load_s": _chunk_plain("solver_chunk_batch_load"),
    "chunk_extra_load_s": _chunk_extra("solver_chunk_batch_load", "chunk_plain_load_s"),
    "chunk_service_load_s": _chunk_service("solver_chunk_batch_load"),
    "chunk_rate_load_rps": _chunk_rate(*_CHUNK_LOAD),
    "chunked_tpot_at_load_s": f"IF(chunk_load_known,{_chunk_tpot(*_CHUNK_LOAD)},NA())",
    "chunked_ttft_at_load_s": _delayed("IF(chunk_load_known,"
                                       + _chunk_ttft("chunk_rate_load_rps", "chunked_tpot_at_load_s",
                                                     "chunk_service_load_s") + ",NA())"),
    "chunked_win_back": f"IF({_GAP}>0,{_sub('chunked_goodput_rps', 'goodput_rps')}/{_GAP},NA())",
    # Prefill and decode pools (options.disaggregated): closed forms.
    "disagg_decode_ceiling_rps": "IF(batch_max>0,batch_max/(output_tokens*decode_step_s),0)",
    "disagg_tpot_bound_rps": ("IF(ISBLANK(tpot_slo_s),NA(),MAX(0,MIN("
                              f"{_rate_piece('step_intercept_memory_s', 'step_slope_memory_s', '0')},"
                              f"{_rate_piece('step_intercept_compute_s', 'step_slope_compute_s', '0')})))"),
    "disagg_decode_rps": ("MAX(MIN(disagg_decode_ceiling_rps,IF(ISNA(disagg_tpot_bound_rps),"
                          "disagg_decode_ceiling_rps,disagg_tpot_bound_rps)),0)"),
    "kv_transfer_s": "IF(ISBLANK(kv_transfer_bandwidth),0,prefill_tokens*kv_bytes_per_token/kv_transfer_bandwidth)",
    "disagg_prefill_rps": (f"IF(ISBLANK(ttft_slo_s),1/prefill_s,IF(({_SLACK})>=0,"
                           f"2*({_SLACK})/(prefill_s*(prefill_s+2*({_SLACK}))),0))"),
    "disagg_goodput_per_gpu_rps": ("IF(AND(disagg_decode_rps>0,disagg_prefill_rps>0),"
                                   "1/(gpus_per_replica*(1/disagg_decode_rps+1/disagg_prefill_rps)),0)"),
    "disagg_prefill_share": ("IF(disagg_goodput_per_gpu_rps>0,"
                             "disagg_decode_rps/(disagg_decode_rps+disagg_prefill_rps),NA())"),
    "disagg_tpot_fixed_point_s": _tpot_closed("disagg_decode_rps", "0"),
    # The smallest fixed point, at most the promise where the promise sets the rate (within 1e-9).
    "disagg_tpot_at_goodput_s": ("IF(disagg_decode_rps>0,IF(IF(ISNA(disagg_tpot_bound_rps),FALSE(),"
                                 "disagg_decode_rps>=disagg_tpot_bound_rps*(1-1E-9)),IF(ISNA(disagg_tpot_fixed_point_s),"
                                 "tpot_slo_s,MIN(disagg_tpot_fixed_point_s,tpot_slo_s)),disagg_tpot_fixed_point_s),NA())"),
    "disagg_ttft_at_goodput_s": _delayed(_pool_ttft("disagg_prefill_rps")),
    "disagg_tpot_at_load_s": (f"IF(AND({_LOAD}>0,{_sub(_LOAD, 'disagg_decode_ceiling_rps')}<=0),"
                              f"{_tpot_closed('arrival_rate', '0')},NA())"),
    "disagg_ttft_at_load_s": _delayed(f"IF({_LOAD}>0,{_pool_ttft('arrival_rate')},NA())"),
    "disagg_win_back": f"IF({_GAP}>0,{_sub('disagg_goodput_per_gpu_rps*gpus_per_replica', 'goodput_rps')}/{_GAP},NA())",
    # Power (formulas.power): full board power x PUE, an upper bound; blank board power or price: not known.
    "replica_power_watts": "IF(ISBLANK(board_power_watts),NA(),board_power_watts*gpus_per_replica*pue)",
    "energy_per_million_tokens_kwh": ("IF(ISBLANK(board_power_watts),NA(),IF(goodput_rps*output_tokens<=0,NA(),"
                                      "replica_power_watts/(goodput_rps*output_tokens)*1E6/3.6E6))"),
    "energy_cost_per_million_tokens": ("IF(OR(ISBLANK(board_power_watts),ISBLANK(energy_price_per_kwh)),NA(),"
                                       "energy_per_million_tokens_kwh*energy_price_per_kwh)"),
    "energy_cost_per_hour": ("IF(OR(ISBLANK(board_power_watts),ISBLANK(energy_price_per_kwh)),NA(),"
                             "replica_power_watts/1000*energy_price_per_kwh)"),
}


#: Results the workbook writes as the library's values, labelled so (``writer.NO_FORMULA``), by design: the closed
#: loop (``analysis.closed_loop``) is a root solve whose every evaluation is the model at a load, MoE's included, which
#: the Solver sheet's unrolled iterations do not nest. Editing inputs leaves these cells as they were.
LIBRARY_VALUES = frozenset(key for key in RESULTS if key.startswith("closed_loop_"))


def missing_formulas() -> list[str]:
    """Result keys with no spreadsheet formula that should have one (empty when the workbook expresses every result
    but ``LIBRARY_VALUES``)."""
    return [key for key in RESULTS if key not in FORMULAS and key not in LIBRARY_VALUES]
