"""The sizing report as an XLSX workbook whose results are live Excel formulas.

Sheets: ``Report`` (name, version, date, binding resource, assumptions, notes), ``Inputs``
(one row per ``analysis.INPUTS`` key; the value cell carries a defined name equal to the
key, in base units; a blank cell means an unset option: no limit, no promise, no price),
``Results`` (one row per ``analysis.RESULTS`` key: a formula over the input names, its
cell named after the key, plus named intermediate cells) and ``Solver`` (the root solves
the library runs row by row, Chandrupatla's method as in ``solve.solve_rising``, unrolled
into ``SOLVER_ITERATIONS`` rows of formulas each; no macros). Edit an input in Excel or
LibreOffice and every result recomputes. Cached values are the library's, so readers that
do not calculate see the same numbers. Undefined or unbounded results (the library's
inf/NaN, JSON null) are ``#N/A``.

The formulas mirror ``analysis.analyse`` term by term (same operations in the same order),
so a spreadsheet engine reproduces the library to rounding; counts use the library's
rounding-tolerant floor ``MAX(0,INT(x+1E-9*MAX(ABS(x),1)))``. Dense models take the TPOT
bound in closed form (``slo.max_rate_for_tpot_rps``): ``MIN_i (T-a_i)/(T*t_p+m_i*A*T)``.
The TTFT bound (a degree-6 polynomial in λ on each piece), the chunked-prefill batches and
the MoE TPOT bounds have no closed form; the Solver sheet repeats the library's iterations
one row each, so its answers are the library's, not merely within the library's tolerance
of the root (1e-9 for the chunked batches).

LibreOffice returns 0 for the difference of two numbers within 2^-48 of each other and
compares such numbers as equal (``rtl::math::approxSub``, ``approxEqual``). Where the
library's answer depends on such a difference (the sign of a solver's excess near its
root, a TPOT denominator at a piece's limit, ``1 - λ t_p`` of a prefill pool at full load),
the formulas take it exactly with ``_sub``. Inputs are written with 17 significant digits
(``_Exact``), so the formulas start from the library's numbers to the last bit. What is left
is ``POWER`` (MoE expert reads), rounded differently from numpy in the last bit.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xlsxwriter
from xlsxwriter.utility import xl_rowcol_to_cell
from xlsxwriter.worksheet import Worksheet

from . import analysis, options, slo
from .analysis import RESULTS
from .files import write_atomic
from .formatting import SECTIONS
from .report import Report, Value, flat_inputs, unset_inputs

NA = "#N/A"
#: Iterations of Chandrupatla's method the Solver sheet unrolls per solve: the library's cap
#: (``solve.solve_rising(iterations=100)``), so every row the library can take has a formula row.
SOLVER_ITERATIONS = 100
#: Least upper end of the MoE TPOT fixed-point search [s] (``analysis._tpot_solvers``).
LONGEST_TPOT_S = 1e4
#: 1 - 2^-10: ``_sub`` subtracts two numbers this far below its first operand, exactly and far from 2^-48.
_SPLIT = "0.9990234375"


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


def _decode_memory(b: str) -> str:
    return f"({_weights_read(b)}+{b}*context_per_layer_tokens*kv_bytes_per_token_per_gpu)/bandwidth"


def _decode_compute(b: str) -> str:
    return f"{b}*2*params_per_gpu/flops"


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


def _decode_step_at(rate: str) -> str:
    """``slo.decode_step_at_rate_s``: the decode step at load λ, ``TPOT(λ) (1 - λ t_p)`` (#N/A: decode cannot keep
    up); the dense pieces, for MoE too (every expert read)."""
    return _tpot_closed(rate, times=f"*(1-{rate}*prefill_s)")


def _ttft_queue(rate: str, step: str) -> str:
    """``slo.ttft_queue_s``: ``t_p + (1/2 + ρ) L*`` with ``ρ = λ c``, ``L_p = f + c / (1 - ρ²)`` and
    ``L* = min(λ t_p L_p + λ A s², s + λ t_p max(0, L_p - s))`` (``λ t_p L_p`` where s = 0); #N/A where the
    queue has no bound (ρ >= 1, or no decode step s: decode cannot keep up); t_p at λ = 0."""
    rho, busy = f"({rate}*prefill_compute_s)", f"({rate}*prefill_s)"
    pass_s = f"(prefill_s-prefill_compute_s+prefill_compute_s/(1-{rho}*{rho}))"
    interval = (f"IF({step}>0,MIN({busy}*{pass_s}+{rate}*output_tokens*{step}*{step},"
                f"{step}+{busy}*MAX({pass_s}-{step},0)),{busy}*{pass_s})")
    return f"IF({rate}>0,IF(OR(ISNA({step}),{rho}>=1),NA(),prefill_s+(0.5+{rho})*{interval}),prefill_s)"


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
#: (batch, d_p, x) of the chunked-prefill iteration at the ceiling's, the goodput's and the load's batch.
_CHUNK_CEILING = ("chunk_batch_ceiling", "chunk_plain_ceiling_s", "chunk_extra_ceiling_s")
_CHUNK_GOODPUT = ("solver_chunk_batch_goodput", "chunk_plain_goodput_s", "chunk_extra_goodput_s")
_CHUNK_LOAD = ("solver_chunk_batch_load", "chunk_plain_load_s", "chunk_extra_load_s")
_GAP = _sub("ceiling_rps", "goodput_rps")   # the capacity the promises cost [requests/s]
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
    "pool_bytes": "gpu_memory_bytes*memory_utilization-(weight_bytes_per_gpu+reserved_bytes)",
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
    "prefill_s": (f"MAX({_weights_read('prefill_tokens')}/bandwidth,prefill_tokens*2*(active_params/gpu_count)/flops)"
                  f"+step_overhead_total_s+step_comm_fixed_s+prefill_tokens*step_comm_per_token_s"),
    "prefill_compute_s": "prefill_tokens*(2*(active_params/gpu_count)/flops+step_comm_per_token_s)",
    "critical_batch": "weight_bytes/gpu_count*flops/(2*params_per_gpu*bandwidth)",
    "single_stream_tokens_per_s": f"bandwidth/({_weights_read('1')})",
    # Ceiling
    "gpu_time_per_request_s": f"IF(batch_max>0,prefill_s+{_DECODE_PER_REQUEST},NA())",
    "ceiling_rps": "IF(batch_max>0,1/gpu_time_per_request_s,0)",
    "decode_share": f"IF(batch_max>0,({_DECODE_PER_REQUEST})/(prefill_s+{_DECODE_PER_REQUEST}),0)",
    "tpot_at_ceiling_s": "IF(decode_share>0,decode_step_s/decode_share,NA())",
    "output_tokens_per_s_at_ceiling": "ceiling_rps*output_tokens",
    "batching_gain": "output_tokens_per_s_at_ceiling/single_stream_tokens_per_s",
    # Promise (slo.py): dense t_step(B) = max(a_mem + m_mem B, a_comp + m_comp B)
    "step_intercept_memory_s": "weight_bytes/gpu_count/bandwidth+(step_overhead_total_s+step_comm_fixed_s)",
    "step_slope_memory_s": "context_per_layer_tokens*kv_bytes_per_token_per_gpu/bandwidth+step_comm_per_token_s",
    "step_intercept_compute_s": "step_overhead_total_s+step_comm_fixed_s",
    "step_slope_compute_s": "params_per_gpu*2/flops+step_comm_per_token_s",
    "max_rate_for_tpot_rps": (
        "IF(ISBLANK(tpot_slo_s),NA(),IF(moe_model,solver_rate_tpot_rps,MAX(0,MIN("
        f"{_rate_piece('step_intercept_memory_s', 'step_slope_memory_s')},"
        f"{_rate_piece('step_intercept_compute_s', 'step_slope_compute_s')}))))"),
    # The TTFT queue has no closed-form bound: the Solver sheet's rows find it.
    "max_rate_for_ttft_rps": "IF(ISBLANK(ttft_slo_s),NA(),solver_rate_ttft_rps)",
    "goodput_rps": ("MAX(MIN(ceiling_rps,IF(ISBLANK(tpot_slo_s),ceiling_rps,max_rate_for_tpot_rps),"
                    "IF(ISBLANK(ttft_slo_s),ceiling_rps,max_rate_for_ttft_rps)),0)"),
    "goodput_at_ceiling": "goodput_rps>=ceiling_rps*(1-1E-12)",
    "goodput_limit": ('IF(batch_max<=0,"nothing_fits",IF(goodput_at_ceiling,"capacity",'
                      'IF(ISBLANK(tpot_slo_s),"ttft",IF(ISBLANK(ttft_slo_s),"tpot",'
                      'IF(max_rate_for_tpot_rps<=max_rate_for_ttft_rps,"tpot","ttft")))))'),
    "tpot_at_goodput_s": ("IF(AND(goodput_at_ceiling,goodput_rps>0),tpot_at_ceiling_s,"
                          f"IF(moe_model,solver_tpot_at_goodput_s,{_tpot_closed('goodput_rps')}))"),
    "goodput_in_flight": ("IF(goodput_at_ceiling,batch_max,"
                          "IF(goodput_rps>0,goodput_rps*output_tokens*tpot_at_goodput_s,0))"),
    "ttft_step_at_goodput_s": _decode_step_at("goodput_rps"),
    "ttft_at_goodput_s": _ttft_at("goodput_rps", "ttft_step_at_goodput_s"),
    "capacity_given_up": f"IF(ceiling_rps>0,{_sub('1', 'goodput_rps/ceiling_rps')},0)",
    "output_tokens_per_s_at_goodput": "goodput_rps*output_tokens",
    "goodput_per_gpu_rps": "goodput_rps/gpus_per_replica",
    "fleet_goodput_rps": "goodput_rps*replicas",
    # Load: an arrival rate of 0 or blank means none
    "load_fraction": "IF(AND(N(arrival_rate)>0,ceiling_rps>0),arrival_rate/ceiling_rps,NA())",
    "tpot_at_load_s": ("IF(N(arrival_rate)>0,IF(moe_model,solver_tpot_at_load_s,"
                       f"{_tpot_closed('arrival_rate')}),NA())"),
    "ttft_step_at_load_s": f"IF(N(arrival_rate)>0,{_decode_step_at('arrival_rate')},NA())",
    "ttft_at_load_s": f"IF(N(arrival_rate)>0,{_ttft_at('arrival_rate', 'ttft_step_at_load_s')},NA())",
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
    "chunked_ttft_at_goodput_s": ("IF(solver_chunk_batch_goodput>0,"
                                  + _chunk_ttft("chunked_goodput_rps", "chunked_tpot_at_goodput_s",
                                                "chunk_service_goodput_s") + ",NA())"),
    "chunk_load_known": f"AND({_LOAD}>0,{_sub(_LOAD, 'chunked_ceiling_rps')}<=0)",
    "chunk_plain_load_s": _chunk_plain("solver_chunk_batch_load"),
    "chunk_extra_load_s": _chunk_extra("solver_chunk_batch_load", "chunk_plain_load_s"),
    "chunk_service_load_s": _chunk_service("solver_chunk_batch_load"),
    "chunk_rate_load_rps": _chunk_rate(*_CHUNK_LOAD),
    "chunked_tpot_at_load_s": f"IF(chunk_load_known,{_chunk_tpot(*_CHUNK_LOAD)},NA())",
    "chunked_ttft_at_load_s": ("IF(chunk_load_known,"
                               + _chunk_ttft("chunk_rate_load_rps", "chunked_tpot_at_load_s", "chunk_service_load_s")
                               + ",NA())"),
    "chunked_win_back": f"IF({_GAP}>0,{_sub('chunked_goodput_rps', 'goodput_rps')}/{_GAP},NA())",
    # Prefill and decode pools (options.disaggregated): closed forms.
    "disagg_decode_ceiling_rps": "IF(batch_max>0,batch_max/(output_tokens*decode_step_s),0)",
    "disagg_tpot_bound_rps": ("IF(ISBLANK(tpot_slo_s),NA(),MAX(0,MIN("
                              f"{_rate_piece('step_intercept_memory_s', 'step_slope_memory_s', '0')},"
                              f"{_rate_piece('step_intercept_compute_s', 'step_slope_compute_s', '0')})))"),
    "disagg_decode_rps": ("MAX(MIN(disagg_decode_ceiling_rps,IF(ISNA(disagg_tpot_bound_rps),"
                          "disagg_decode_ceiling_rps,disagg_tpot_bound_rps)),0)"),
    "kv_transfer_s": "IF(ISBLANK(kv_transfer_bandwidth),0,prefill_tokens*kv_bytes_per_token/kv_transfer_bandwidth)",
    "disagg_prefill_rps": ("IF(ISBLANK(ttft_slo_s),1/prefill_s,IF((ttft_slo_s-prefill_s-kv_transfer_s)>=0,"
                           "2*(ttft_slo_s-prefill_s-kv_transfer_s)/(prefill_s*(prefill_s+2*(ttft_slo_s-prefill_s"
                           "-kv_transfer_s))),0))"),
    "disagg_goodput_per_gpu_rps": ("IF(AND(disagg_decode_rps>0,disagg_prefill_rps>0),"
                                   "1/(gpus_per_replica*(1/disagg_decode_rps+1/disagg_prefill_rps)),0)"),
    "disagg_prefill_share": ("IF(disagg_goodput_per_gpu_rps>0,"
                             "disagg_decode_rps/(disagg_decode_rps+disagg_prefill_rps),NA())"),
    "disagg_tpot_fixed_point_s": _tpot_closed("disagg_decode_rps", "0"),
    # The smallest fixed point, at most the promise where the promise sets the rate (within 1e-9).
    "disagg_tpot_at_goodput_s": ("IF(disagg_decode_rps>0,IF(IF(ISNA(disagg_tpot_bound_rps),FALSE(),"
                                 "disagg_decode_rps>=disagg_tpot_bound_rps*(1-1E-9)),IF(ISNA(disagg_tpot_fixed_point_s),"
                                 "tpot_slo_s,MIN(disagg_tpot_fixed_point_s,tpot_slo_s)),disagg_tpot_fixed_point_s),NA())"),
    "disagg_ttft_at_goodput_s": _pool_ttft("disagg_prefill_rps"),
    "disagg_tpot_at_load_s": (f"IF(AND({_LOAD}>0,{_sub(_LOAD, 'disagg_decode_ceiling_rps')}<=0),"
                              f"{_tpot_closed('arrival_rate', '0')},NA())"),
    "disagg_ttft_at_load_s": f"IF({_LOAD}>0,{_pool_ttft('arrival_rate')},NA())",
    "disagg_win_back": f"IF({_GAP}>0,{_sub('disagg_goodput_per_gpu_rps*gpus_per_replica', 'goodput_rps')}/{_GAP},NA())",
}

#: Named intermediate cells that are not library results: name -> (unit, meaning).
INTERMEDIATES: dict[str, tuple[str, str]] = {
    "tokens_per_request": ("tokens", "prompt + answer tokens one request holds"),
    "gpus_per_replica": ("GPUs", "tensor x pipeline parallel GPUs in one replica"),
    "params_per_gpu": ("params", "active parameters each GPU multiplies per token"),
    "stage_layers": ("layers", "layers per pipeline stage"),
    "moe_model": ("", "TRUE for a mixture of experts (experts > experts_per_token > 0)"),
    "expert_params": ("params", "parameters of one routed expert (all layers)"),
    "ring_factor": ("-", "ring all-reduce traffic factor 2 (tp - 1) / tp (0: no all-reduce counted)"),
    "step_comm_fixed_s": ("s", "all-reduce latency per step: 2 per layer"),
    "step_comm_per_token_s": ("s", "all-reduce transfer time per token in a step"),
    "step_overhead_total_s": ("s", "fixed overhead per step over all pipeline stages"),
    "shared_blocks_held": ("blocks", "prefix blocks held once (local layers keep at most the window)"),
    "context_per_layer_tokens": ("tokens", "cached tokens read per layer and sequence (window applied)"),
    "step_intercept_memory_s": ("s", "dense decode step, memory piece: a_mem = W / BW + o"),
    "step_slope_memory_s": ("s", "dense decode step, memory piece: m_mem = c kv / BW per sequence"),
    "step_intercept_compute_s": ("s", "dense decode step, compute piece: a_comp = o"),
    "step_slope_compute_s": ("s", "dense decode step, compute piece: m_comp = 2 N / F per sequence"),
    "goodput_at_ceiling": ("", "TRUE when the goodput reaches the throughput ceiling"),
    "prefill_compute_s": ("s", "GPU time a prompt adds to a batched prefill pass: c = P (2 N / F + comm per token)"),
    "ttft_step_at_goodput_s": ("s", "decode step at the goodput (dense pieces): s = TPOT (1 - λ t_p)"),
    "ttft_step_at_load_s": ("s", "decode step at the arrival rate (dense pieces): s = TPOT (1 - λ t_p)"),
    "chunk_batch_cap": ("sequences", "chunked prefill: batch cap min(B_max, budget - 1)"),
    "chunk_batch_ceiling": ("sequences", "chunked prefill: batch at the ceiling, the cap or the full chunk pipe"),
    "chunk_plain_ceiling_s": ("s", "chunked prefill at the ceiling's batch: iteration without a chunk d_p"),
    "chunk_extra_ceiling_s": ("s", "chunked prefill at the ceiling's batch: extra time a prompt adds x"),
    "chunk_plain_goodput_s": ("s", "chunked prefill at the goodput's batch: iteration without a chunk d_p"),
    "chunk_extra_goodput_s": ("s", "chunked prefill at the goodput's batch: extra time a prompt adds x"),
    "chunk_service_goodput_s": ("s", "chunked prefill at the goodput's batch: a prompt's chunk iterations S"),
    "chunk_load_known": ("", "TRUE when an arrival rate is set and within the chunked ceiling"),
    "chunk_plain_load_s": ("s", "chunked prefill at the load's batch: iteration without a chunk d_p"),
    "chunk_extra_load_s": ("s", "chunked prefill at the load's batch: extra time a prompt adds x"),
    "chunk_service_load_s": ("s", "chunked prefill at the load's batch: a prompt's chunk iterations S"),
    "chunk_rate_load_rps": ("requests/s", "chunked prefill: load of the load's batch, λ(B) (the arrival rate)"),
    "disagg_decode_ceiling_rps": ("requests/s", "decode-only replica at its largest batch: B_max / (A t_step)"),
    "disagg_tpot_bound_rps": ("requests/s", "decode-only replica: largest load keeping the TPOT promise alone"),
    "disagg_tpot_fixed_point_s": ("s", "decode-only replica: TPOT fixed point at its rate (t_p = 0)"),
}


# --- the Solver sheet: the library's root solves (Chandrupatla's method), unrolled ----------------------------

Cells = dict[str, str]


class Solver(NamedTuple):
    """One of the library's root solves, unrolled on the Solver sheet.

    The largest x in [0, hi] with ``f(x) <= 0`` for an excess f rising in x, found as ``solve.largest_rate_meeting``
    and ``solve.solve_rising`` find it: the end hi where ``f(hi) <= 0``, 0 where ``f(lower end) > 0``, else
    Chandrupatla's iterations until the bracket is narrower than ``rtol`` times its upper end (or f = 0), the
    answer being the bracket end with ``f <= 0``. ``no_target`` is TRUE where the library does not search
    (no promise, no load) and takes hi.
    """

    name: str                                            # defined name of the result cell
    unit: str
    meaning: str
    rtol: float                                          # the library's relative tolerance
    hi: str                                              # the library's upper end of the search
    no_target: Callable[[Cells], str]                    # setup cells -> TRUE where the library takes hi
    helpers: tuple[str, ...]                             # columns that evaluate f(x), left of f
    evaluate: Callable[[str, Cells], dict[str, str]]     # (x cell, this row's cells) -> helper and "f" formulas
    result: Callable[[str, Cells], str]                  # (answer cell, setup cells) -> the named result
    bracket: tuple[tuple[str, Callable[[Cells], str]], ...] = ()  # rows ending in "lo" and "up" (narrow the search)


def _ratio_excess(target: str, latency: str) -> str:
    """The library's ``1 - target / latency`` (``ratio=True``): 1 where the latency has no bound (#N/A)."""
    return f"IF(ISNA({latency}),1,{_sub('1', f'{target}/{latency}')})"


def _ttft_evaluate(x: str, c: Cells) -> dict[str, str]:
    d_mem, d_comp = _tpot_denominators(x)
    return {"d_mem": d_mem, "d_comp": d_comp, "decode step": _tpot_from(c["d_mem"], c["d_comp"], f"*(1-{x}*prefill_s)"),
            "TTFT": _ttft_queue(x, c["decode step"]), "f": _ratio_excess("ttft_slo_s", c["TTFT"])}


def _ttft_bracket() -> tuple[tuple[str, Callable[[Cells], str]], ...]:
    """``slo._ttft_bracket``: bounds ``lo <= root <= up`` from two quadratics."""
    return (
        ("y", lambda c: "MAX(ttft_slo_s-prefill_s,0)"),
        ("b_up", lambda c: "0.5*prefill_s*prefill_s"),
        ("up", lambda c: (f"2*{c['y']}/({c['b_up']}+SQRT({c['b_up']}*{c['b_up']}"
                          f"+4*prefill_compute_s*prefill_s*prefill_s*{c['y']}))")),
        ("decode step at up", lambda c: _decode_step_at(c["up"])),
        ("rho at up", lambda c: f"{c['up']}*prefill_compute_s"),
        ("prefill pass at up", lambda c: (f"prefill_s-prefill_compute_s+prefill_compute_s"
                                          f"/(1-{c['rho at up']}*{c['rho at up']})")),
        ("a_lo", lambda c: f"prefill_compute_s*prefill_s*{c['prefill pass at up']}"),
        ("b_lo", lambda c: f"0.5*prefill_s*{c['prefill pass at up']}+prefill_compute_s*{c['decode step at up']}"),
        ("c_lo", lambda c: f"{c['y']}-0.5*{c['decode step at up']}"),
        ("lo root", lambda c: f"2*{c['c_lo']}/({c['b_lo']}+SQRT({c['b_lo']}*{c['b_lo']}+4*{c['a_lo']}*{c['c_lo']}))"),
        ("lo", lambda c: (f"IFERROR(IF(AND({c['c_lo']}>0,{c['rho at up']}<1,{_sub(c['lo root'], c['up'])}<0),"
                          f"{c['lo root']},0),0)")),
    )


def _longest_tpot(rate: str) -> str:
    """Upper end of the MoE TPOT search (``analysis._tpot_solvers``): ``B_max / (λ A)`` within [10^4, 10^12] s."""
    return f"IF({rate}>0,MIN(MAX(batch_max/({rate}*output_tokens),1E4),1E12),1E4)"


_TPOT_OR_1 = "IF(ISBLANK(tpot_slo_s),1,tpot_slo_s)"  # the library's stand-in promise where none is set


def _moe_rate_evaluate(x: str, c: Cells) -> dict[str, str]:
    return {"decode step": _step(f"{x}*output_tokens*{_TPOT_OR_1}"),
            "f": _sub(c["decode step"], f"{_TPOT_OR_1}*(1-{x}*prefill_s)")}


def _moe_tpot_evaluate(rate: str) -> Callable[[str, Cells], dict[str, str]]:
    def evaluate(s: str, c: Cells) -> dict[str, str]:
        return {"decode step": _step(f"{rate}*output_tokens*{s}"), "f": _sub(f"{s}*(1-{rate}*prefill_s)",
                                                                              c["decode step"])}
    return evaluate


#: Columns that evaluate the chunked-prefill terms at batch x (the TTFT solve needs all; the others stop at tpot).
_CHUNK_HELPERS = ("plain", "chunk", "carrying", "extra", "tpot")
_CHUNK_TTFT_HELPERS = ("plain", "chunk", "carrying", "extra", "service", "rate", "tpot", "ttft")


def _chunk_evaluate(excess: Callable[[str, Cells], str]) -> Callable[[str, Cells], dict[str, str]]:
    """``options.chunk_terms`` and the chunked rate, TPOT and TTFT at batch x, then ``excess``."""
    def evaluate(x: str, c: Cells) -> dict[str, str]:
        k = c["chunk"]
        builders = {"plain": lambda: _chunk_plain(x), "chunk": lambda: _chunk_tokens(x),
                    "carrying": lambda: _chunk_carrying(x, k),
                    "extra": lambda: f"IF({k}>0,prefill_tokens/{k}*{_sub(c['carrying'], c['plain'])},NA())",
                    "service": lambda: f"IF({k}>0,prefill_tokens/{k}*{c['carrying']},NA())",
                    "rate": lambda: _chunk_rate(x, c["plain"], c["extra"]),
                    "tpot": lambda: _chunk_tpot(x, c["plain"], c["extra"]),
                    "ttft": lambda: _chunk_ttft(c["rate"], c["tpot"], c["service"])}
        return {**{name: build() for name, build in builders.items() if name in c}, "f": excess(x, c)}
    return evaluate


#: The library's root solves, in the order they depend on each other.
SOLVERS: list[Solver] = [
    Solver("solver_rate_ttft_rps", "requests/s", "largest λ with TTFT(λ) <= D (slo.max_rate_for_ttft_rps; "
           "f = 1 - D / TTFT(λ), the decode step from the dense pieces)", 2.5e-13, "MAX(ceiling_rps,0)",
           lambda s: "ISBLANK(ttft_slo_s)", ("d_mem", "d_comp", "decode step", "TTFT"), _ttft_evaluate,
           lambda answer, s: f"IF(ISBLANK(ttft_slo_s),NA(),{answer})", _ttft_bracket()),
    Solver("solver_rate_tpot_rps", "requests/s", "MoE: largest λ with t_step(λ A T) <= T (1 - λ t_p) "
           "(slo.max_rate_for_tpot_rows; f = t_step(λ A T) - T (1 - λ t_p))", 2.5e-13,
           "MIN(1/prefill_s,MAX(ceiling_rps,0)*2+1E-9)", lambda s: "ISBLANK(tpot_slo_s)", ("decode step",),
           _moe_rate_evaluate, lambda answer, s: f"IF(ISBLANK(tpot_slo_s),NA(),{answer})"),
    Solver("solver_tpot_at_goodput_s", "s", "MoE: smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the goodput "
           "(slo.tpot_at_rate_rows; f = s (1 - λ t_p) - t_step(λ A s))", 2.5e-13, _longest_tpot("goodput_rps"),
           lambda s: f"NOT(AND({s['f at top']}>=0,(1-goodput_rps*prefill_s)>0))", ("decode step",),
           _moe_tpot_evaluate("goodput_rps"), lambda answer, s: f"IF({s['no target']},NA(),{answer})"),
    Solver("solver_tpot_at_load_s", "s", "MoE: smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the load "
           "(slo.tpot_at_rate_rows)", 2.5e-13, _longest_tpot(_LOAD),
           lambda s: f"NOT(AND({_LOAD}>0,{s['f at top']}>=0,(1-{_LOAD}*prefill_s)>0))", ("decode step",),
           _moe_tpot_evaluate(_LOAD), lambda answer, s: f"IF({s['no target']},NA(),{answer})"),
    Solver("solver_chunk_batch_tpot", "sequences", "chunked prefill: largest batch B with T(B) <= T "
           "(options.chunked; f = T(B) - T)", options.RTOL, "chunk_batch_ceiling", lambda s: "ISBLANK(tpot_slo_s)",
           _CHUNK_HELPERS, _chunk_evaluate(lambda x, c: _sub(c["tpot"], "tpot_slo_s")), lambda answer, s: answer),
    Solver("solver_chunk_batch_goodput", "sequences", "chunked prefill: largest batch B up to the TPOT's with "
           "TTFT(B) <= D (options.chunked; f = 1 - D / TTFT(B))", options.RTOL, "solver_chunk_batch_tpot",
           lambda s: "ISBLANK(ttft_slo_s)", _CHUNK_TTFT_HELPERS,
           _chunk_evaluate(lambda x, c: _ratio_excess("ttft_slo_s", c["ttft"])), lambda answer, s: answer),
    Solver("solver_chunk_batch_load", "sequences", "chunked prefill: the batch B the arrival rate holds, "
           "B = λ A T(B) (options.chunked; f = B - λ A T(B))", options.RTOL, "chunk_batch_ceiling",
           lambda s: "NOT(chunk_load_known)", _CHUNK_HELPERS,
           _chunk_evaluate(lambda x, c: _sub(x, f"IF(chunk_load_known,arrival_rate,0)*output_tokens*{c['tpot']}")),
           lambda answer, s: answer),
]

#: Columns of an iteration row: Chandrupatla's state after the previous row (the bracket x1, x2 with f(x1), f(x2);
#: x3 the point dropped last; done once the bracket is narrow enough or f = 0), the step t to the next point,
#: that point x, the columns that evaluate f there, and f.
STATE_COLUMNS = ("x1", "f1", "x2", "f2", "x3", "f3", "done", "t")


def _iteration_formulas(p: Cells, r: Cells, rtol: float) -> dict[str, str]:
    """Row r from row p (``solve.solve_rising``, one point per row): kept once done; else the new point x
    replaces the bracket end whose f has its sign, done when ``|x2 - x1| <= rtol max(x1, x2)`` or f(x) = 0."""
    same = f"(({p['f']}<=0)=({p['f1']}<=0))"

    def keep(col: str, new: str) -> str:
        return f"IF({p['done']},{p[col]},{new})"

    tol = f"{repr(rtol).upper()}*MAX({r['x1']},{r['x2']})"
    return {
        "x1": keep("x1", p["x"]), "f1": keep("f1", p["f"]),
        "x2": keep("x2", f"IF({same},{p['x2']},{p['x1']})"), "f2": keep("f2", f"IF({same},{p['f2']},{p['f1']})"),
        "x3": keep("x3", f"IF({same},{p['x1']},{p['x2']})"), "f3": keep("f3", f"IF({same},{p['f1']},{p['f2']})"),
        "done": f"IF({p['done']},TRUE(),OR(ABS({r['x2']}-{r['x1']})<={tol},{p['f']}=0))",
        "t": _t_formula(r, tol),
    }


def _t_formula(r: Cells, tol: str) -> str:
    """Chandrupatla's step t from x1 toward x2: inverse quadratic interpolation where ``1 - √(1 - ξ) < φ < √ξ``
    (``ξ = (x1 - x2) / (x3 - x2)``, ``φ = (f1 - f2) / (f3 - f2)``), else bisection (1/2), kept ``tol / 2`` inside
    the bracket; 1/2 where a term is undefined. Plain subtraction is exact here: the points lie at least tol / 2
    apart, and f values within 2^-48 of each other only take φ out of (0, 1)."""
    x1, f1, x2, f2, x3, f3 = (r[k] for k in ("x1", "f1", "x2", "f2", "x3", "f3"))
    xi, phi = f"(({x1}-{x2})/({x3}-{x2}))", f"(({f1}-{f2})/({f3}-{f2}))"
    iqi = f"AND(1-SQRT(1-{xi})<{phi},{phi}<SQRT({xi}))"
    t_iqi = f"{f1}/({f2}-{f1})*{f3}/({f2}-{f3})+({x3}-{x1})/({x2}-{x1})*{f1}/({f3}-{f1})*{f2}/({f3}-{f2})"
    least = f"0.5*{tol}/ABS({x2}-{x1})"
    return f"IFERROR(MIN(MAX(IF({iqi},{t_iqi},0.5),{least}),1-{least}),0.5)"


# --- the same iterations in Python: the Solver sheet's cached values -------------------------------------------

class _Numeric(NamedTuple):
    """One solve as the library computes it, for the Solver sheet's cached values."""

    hi: float
    no_target: Callable[[float], bool]                           # f at the top -> no search (the answer is hi)
    evaluate: Callable[[float], tuple[dict[str, float], float]]  # x -> (helper values, the library's excess)
    result: Callable[[float, bool], float | None]                # (answer, no target) -> the named result
    bracket: Callable[[], dict[str, float]] | None = None        # values of the bracket rows, "lo" and "up" last


class SolverTrace(NamedTuple):
    """A solve's cells: result, setup (label -> value), evaluation rows (label -> (x, helpers, f)), iterations."""

    result: float | None
    setup: dict[str, object]
    evaluations: dict[str, tuple[float, dict[str, float], float]]
    rows: list[dict[str, object]]


def _f64(x) -> np.float64:
    return np.float64(np.asarray(x, dtype=float).reshape(-1)[0]) if np.ndim(x) else np.float64(x)


def _unroll(num: _Numeric, helpers: tuple[str, ...], rtol: float, iterations: int = SOLVER_ITERATIONS
            ) -> SolverTrace:
    """``solve.largest_rate_meeting`` then ``solve.solve_rising`` for one row, every intermediate value kept."""
    with np.errstate(all="ignore"):
        hi = _f64(num.hi)
        setup: dict[str, object] = {"hi": hi}
        if num.bracket is not None:
            setup.update(num.bracket())
            top, lo = np.minimum(_f64(setup["up"]), hi), np.minimum(_f64(setup["lo"]), hi)
        else:
            top, lo = hi, np.float64(0.0)
        setup.update({"top": top, "bottom": lo})
        points = {"at top": top, "at bottom": lo, **({"at 0": np.float64(0.0)} if num.bracket is not None else {})}
        evaluations = {label: (x, *num.evaluate(x)) for label, x in points.items()}
        f_top, f_lo = evaluations["at top"][2], evaluations["at bottom"][2]
        no_target = num.no_target(f_top)
        setup["no target"] = no_target
        if num.bracket is not None and f_lo > 0:
            x1, f1 = np.float64(0.0), evaluations["at 0"][2]
        else:
            x1, f1 = lo, f_lo
        row = {"x1": x1, "f1": f1, "x2": top, "f2": f_top, "x3": top, "f3": f_top,
               "done": bool(no_target or f_top <= 0 or f1 > 0),
               "answer": hi if no_target else (top if f_top <= 0 else np.float64(0.0)), "t": np.float64(0.5)}
        row.update(_bracket_values(row, rtol))
        rows = [_with_point(row, num, helpers)]
        for k in range(iterations):
            rows.append(_next_row(rows[-1], rtol))
            if k < iterations - 1:
                rows[-1] = _with_point(rows[-1], num, helpers)
        last = rows[-1]
        # The sheet's answer: once done a row keeps x1, its f and x2, so the library's pick at the row where it
        # stopped (x1 where f(x1) = 0 or <= 0, else x2) is the last row's; without a search, hi, top or 0.
        answer = (hi if no_target else top if f_top <= 0 else np.float64(0.0) if f1 > 0
                  else last["x1"] if last["f1"] <= 0 else last["x2"])
        setup["answer"] = answer
        return SolverTrace(num.result(answer, no_target), setup, evaluations, rows)


def _bracket_values(r: dict, rtol: float) -> dict:
    return {"width": np.abs(r["x2"] - r["x1"]), "tol": rtol * np.maximum(r["x1"], r["x2"])}


def _next_row(p: dict, rtol: float) -> dict:
    if p["done"]:
        r = {k: p[k] for k in ("x1", "f1", "x2", "f2", "x3", "f3", "answer")}
        r.update(_bracket_values(r, rtol))
        r["done"] = True
    else:
        same = (p["f"] <= 0) == (p["f1"] <= 0)
        r = {"x1": p["x"], "f1": p["f"],
             "x2": p["x2"] if same else p["x1"], "f2": p["f2"] if same else p["f1"],
             "x3": p["x1"] if same else p["x2"], "f3": p["f1"] if same else p["f2"]}
        r.update(_bracket_values(r, rtol))
        r["done"] = bool(r["width"] <= r["tol"] or p["f"] == 0)
        r["answer"] = (r["x1"] if p["f"] == 0 or r["f1"] <= 0 else r["x2"]) if r["done"] else np.float64(0.0)
    x1, f1, x2, f2, x3, f3 = (r[k] for k in ("x1", "f1", "x2", "f2", "x3", "f3"))
    r["xi"], r["phi"] = (x1 - x2) / (x3 - x2), (f1 - f2) / (f3 - f2)
    r["iqi"] = bool((1.0 - np.sqrt(1.0 - r["xi"]) < r["phi"]) & (r["phi"] < np.sqrt(r["xi"])))
    r["t_iqi"] = f1 / (f2 - f1) * f3 / (f2 - f3) + (x3 - x1) / (x2 - x1) * f1 / (f3 - f1) * f2 / (f3 - f2)
    r["least"] = 0.5 * r["tol"] / r["width"]
    t = np.clip(r["t_iqi"] if r["iqi"] else np.float64(0.5), r["least"], 1.0 - r["least"])
    r["t"] = t if np.isfinite(t) else np.float64(0.5)
    return r


def _with_point(r: dict, num: _Numeric, names: tuple[str, ...]) -> dict:
    """The row's next point ``x1 + t (x2 - x1)`` and its excess (0 in every column once done, as the sheet)."""
    if r["done"]:
        return {**r, "x": np.float64(0.0), **{k: np.float64(0.0) for k in names}, "f": np.float64(0.0)}
    x = r["x1"] + r["t"] * (r["x2"] - r["x1"])
    helpers, f = num.evaluate(x)
    return {**r, "x": x, **helpers, "f": f}


def solver_traces(report: Report) -> dict[str, SolverTrace]:
    """Every solve of ``SOLVERS`` as the library runs it on the report's scenario: the Solver sheet's cached values."""
    x = flat_inputs(report.scenario)
    v = report.results.values
    model, _ = analysis.step_model({k: np.asarray(val) for k, val in x.items()}, np.asarray(v["context_tokens"]))
    pieces = model.pieces()
    (a_mem, m_mem), (a_comp, m_comp) = pieces
    tp, a_tok, p_tok, budget = v["prefill_s"], x["output_tokens"], v["prefill_tokens"], x["max_batched_tokens"]
    c = _f64(model.prefill_compute_s(p_tok))
    d, t = x["ttft_slo_s"], x["tpot_slo_s"]
    d0, t0 = (d if math.isfinite(d) else 0.0), (t if math.isfinite(t) else 0.0)  # a blank cell reads as 0
    load = report.scenario.workload.arrival_rate or 0.0

    def ttft_evaluate(lam):
        step = slo.decode_step_at_rate_s(lam, tp, a_tok, pieces)
        latency = slo._ttft_of_rate(lam, tp, c, a_tok, a_mem, m_mem, a_comp, m_comp)
        share = 1.0 - lam * tp
        return ({"d_mem": share - lam * a_tok * m_mem, "d_comp": share - lam * a_tok * m_comp,
                 "decode step": _f64(step), "TTFT": _f64(slo.ttft_queue_s(lam, tp, c, step, a_tok))},
                _f64(1.0 - d0 / latency))

    def ttft_bracket():
        y = np.maximum(d0 - tp, 0.0)
        b_up = 0.5 * tp * tp
        up = 2.0 * y / (b_up + np.sqrt(b_up * b_up + 4.0 * c * tp * tp * y))
        step = _f64(slo.decode_step_at_rate_s(up, tp, a_tok, pieces))
        rho = up * c
        longest = tp - c + c / (1.0 - rho * rho)
        a_lo, b_lo, c_lo = c * tp * longest, 0.5 * tp * longest + c * step, y - 0.5 * step
        lo_root = 2.0 * c_lo / (b_lo + np.sqrt(b_lo * b_lo + 4.0 * a_lo * c_lo))
        lo = lo_root if (c_lo > 0) & (rho < 1.0) & (lo_root < up) else np.float64(0.0)
        return {"y": y, "b_up": b_up, "up": up, "decode step at up": step, "rho at up": rho,
                "prefill pass at up": longest, "a_lo": a_lo, "b_lo": b_lo, "c_lo": c_lo, "lo root": lo_root, "lo": lo}

    t1 = t if math.isfinite(t) else 1.0

    def moe_rate_evaluate(lam):
        step = _f64(model.step_s(lam * a_tok * t1))
        return {"decode step": step}, step - t1 * (1.0 - lam * tp)

    def moe_tpot(lam: float, known: bool) -> tuple[Callable, Callable]:
        share = 1.0 - lam * tp

        def evaluate(s):
            step = _f64(model.step_s(lam * a_tok * s))
            return {"decode step": step}, s * share - step
        return evaluate, lambda f_top: not (known and f_top >= 0 and share > 0)

    args = (a_tok, p_tok, budget, a_mem, m_mem, a_comp, m_comp)

    def chunk_evaluate(excess):
        def evaluate(b):
            memory = a_mem + m_mem * b
            plain, extra, service = options.chunk_terms(b, p_tok, budget, a_mem, m_mem, a_comp, m_comp)
            chunk = np.minimum(p_tok, budget - b)
            rate = options.chunked_rate_rps(b, a_tok, plain, extra)
            tpot = options.chunked_tpot_s(b, a_tok, plain, extra)
            values = {"memory": memory, "plain": plain, "chunk": chunk,
                      "carrying": np.maximum(memory, a_comp + m_comp * (b + chunk)), "extra": extra,
                      "service": service, "rate": rate, "tpot": tpot,
                      "ttft": options.chunked_ttft_s(rate, tpot, service)}
            return {k: _f64(val) for k, val in values.items()}, _f64(excess(b))
        return evaluate

    cap = max(min(v["batch_max"], budget - 1.0), 0.0)
    b_ceiling = _f64(np.minimum(cap, options.pipe_full_batch(a_tok, p_tok, budget)))
    ceiling_plain, ceiling_extra, _ = options.chunk_terms(b_ceiling, *args[1:])
    known = load > 0 and load <= options.chunked_rate_rps(b_ceiling, a_tok, ceiling_plain, ceiling_extra)
    traces: dict[str, SolverTrace] = {}

    def run(name: str, num: _Numeric) -> float | None:
        solver = next(s for s in SOLVERS if s.name == name)
        traces[name] = _unroll(num, solver.helpers, solver.rtol)
        return traces[name].result

    with np.errstate(all="ignore"):
        run("solver_rate_ttft_rps", _Numeric(max(v["ceiling_rps"], 0.0), lambda f: not math.isfinite(d),
                                             ttft_evaluate, lambda a, no: None if no else a, ttft_bracket))
        run("solver_rate_tpot_rps", _Numeric(_f64(np.minimum(1.0 / tp, max(v["ceiling_rps"], 0.0) * 2.0 + 1e-9)),
                                             lambda f: not math.isfinite(t), moe_rate_evaluate,
                                             lambda a, no: None if no else a))
        for name, lam, lam_known in (("solver_tpot_at_goodput_s", v["goodput_rps"], True),
                                     ("solver_tpot_at_load_s", load, load > 0)):
            evaluate, no_target = moe_tpot(lam, lam_known)
            longest = (np.clip(v["batch_max"] / (lam * a_tok), LONGEST_TPOT_S, 1e12) if lam > 0
                       else np.float64(LONGEST_TPOT_S))
            run(name, _Numeric(longest, no_target, evaluate, lambda a, no: None if no else a))
        b_tpot = run("solver_chunk_batch_tpot", _Numeric(
            b_ceiling, lambda f: not math.isfinite(t),
            chunk_evaluate(lambda b: options._tpot_of_batch(b, *args) - t0), lambda a, no: a))
        run("solver_chunk_batch_goodput", _Numeric(
            b_tpot, lambda f: not math.isfinite(d),
            chunk_evaluate(lambda b: 1.0 - d0 / options._ttft_of_batch(b, *args)), lambda a, no: a))
        run("solver_chunk_batch_load", _Numeric(
            b_ceiling, lambda f: not known,
            chunk_evaluate(lambda b: options._batch_gap(b, load if known else 0.0, *args) - 0.0), lambda a, no: a))
    return traces


def intermediate_values(report: Report) -> dict[str, Value | bool]:
    """The library's values of the named intermediate and Solver result cells (the cached values stored)."""
    v = report.results.values
    x = flat_inputs(report.scenario)
    arrays = {k: np.asarray(val) for k, val in x.items()}
    model, _ = analysis.step_model(arrays, np.asarray(v["context_tokens"]))
    pieces = model.pieces()
    (a_mem, m_mem), (a_comp, m_comp) = pieces
    tp, pp, bs = x["gpu_count"], x["pipeline_parallel"], x["block_size"]
    ring = 2.0 * (tp - 1) / tp if tp > 1 and x["hidden_size"] > 0 else 0.0
    moe = bool(model.moe)
    window_blocks = math.ceil(x["sliding_window"] / bs) if math.isfinite(x["sliding_window"]) else math.inf
    f = x["local_layer_fraction"]
    t_p, a_tok, p_tok, budget = v["prefill_s"], x["output_tokens"], v["prefill_tokens"], x["max_batched_tokens"]
    load = report.scenario.workload.arrival_rate or 0.0
    traces = solver_traces(report)
    terms = (p_tok, budget, a_mem, m_mem, a_comp, m_comp)
    cap = max(min(v["batch_max"], budget - 1.0), 0.0)
    b_ceiling = float(np.minimum(cap, options.pipe_full_batch(a_tok, p_tok, budget)))
    plain_c, extra_c, _ = options.chunk_terms(b_ceiling, *terms)
    b_goodput, b_load = traces["solver_chunk_batch_goodput"].result, traces["solver_chunk_batch_load"].result
    plain_g, extra_g, service_g = options.chunk_terms(b_goodput, *terms)
    plain_l, extra_l, service_l = options.chunk_terms(b_load, *terms)
    decode_ceiling = options.decode_pool_ceiling_rps(v["batch_max"], v["decode_step_s"], a_tok)
    tpot_bound = slo.max_rate_for_tpot_rps(x["tpot_slo_s"], 0.0, a_tok, pieces)
    values: dict[str, object] = {
        "tokens_per_request": x["prompt_tokens"] + x["output_tokens"], "gpus_per_replica": tp * pp,
        "params_per_gpu": x["active_params"] / (tp * pp), "stage_layers": float(math.ceil(x["layers"] / pp)),
        "moe_model": moe,
        "expert_params": (x["params"] - x["active_params"]) / (x["experts"] - x["experts_per_token"]) if moe else 0.0,
        "ring_factor": ring, "step_comm_fixed_s": float(model.comm_fixed),
        "step_comm_per_token_s": float(model.comm_per_token), "step_overhead_total_s": float(model.overhead),
        "shared_blocks_held": (1 - f) * v["shared_blocks"] + f * min(v["shared_blocks"], window_blocks),
        "context_per_layer_tokens": float(model.context),
        "step_intercept_memory_s": float(a_mem), "step_slope_memory_s": float(m_mem),
        "step_intercept_compute_s": float(a_comp), "step_slope_compute_s": float(m_comp),
        "goodput_at_ceiling": bool(v["goodput_rps"] >= v["ceiling_rps"] * (1 - 1e-12)),
        "prefill_compute_s": model.prefill_compute_s(p_tok),
        "ttft_step_at_goodput_s": slo.decode_step_at_rate_s(v["goodput_rps"], t_p, a_tok, pieces),
        "ttft_step_at_load_s": slo.decode_step_at_rate_s(load, t_p, a_tok, pieces) if load > 0 else None,
        "chunk_batch_cap": cap, "chunk_batch_ceiling": b_ceiling,
        "chunk_plain_ceiling_s": plain_c, "chunk_extra_ceiling_s": extra_c,
        "chunk_plain_goodput_s": plain_g, "chunk_extra_goodput_s": extra_g, "chunk_service_goodput_s": service_g,
        "chunk_load_known": bool(0 < load <= options.chunked_rate_rps(b_ceiling, a_tok, plain_c, extra_c)),
        "chunk_plain_load_s": plain_l, "chunk_extra_load_s": extra_l, "chunk_service_load_s": service_l,
        "chunk_rate_load_rps": options.chunked_rate_rps(b_load, a_tok, plain_l, extra_l),
        "disagg_decode_ceiling_rps": decode_ceiling,
        "disagg_tpot_bound_rps": tpot_bound,
        "disagg_tpot_fixed_point_s": slo.tpot_at_rate_s(v["disagg_decode_rps"], 0.0, a_tok, pieces),
    }
    values.update({name: trace.result for name, trace in traces.items()})
    return {k: _plain(val) for k, val in values.items()}


def _plain(value: object) -> Value | bool:
    """A Python bool, float or None (non-finite) for a library value."""
    if value is None or isinstance(value, (bool, np.bool_, str)):
        return value if not isinstance(value, np.bool_) else bool(value)
    number = float(np.asarray(value, dtype=float).reshape(-1)[0])
    return number if math.isfinite(number) else None


def result_layout() -> list[tuple[str, list[str]]]:
    """Results sheet sections in order: the table's sections, any other result keys, then intermediates."""
    placed = [key for keys in SECTIONS.values() for key in keys]
    sections = [(name, [k for k in keys if k in RESULTS]) for name, keys in SECTIONS.items()]
    rest = [key for key in RESULTS if key not in placed]
    if rest:
        sections.append(("Other results", rest))
    sections.append(("Intermediate (named cells the formulas share)", [k for k in INTERMEDIATES if k not in RESULTS]))
    return sections


# --- writing -------------------------------------------------------------------------------------------------

class _Exact(float):
    """A float that xlsxwriter writes in full. It writes numbers with ``%.16G``, which does not give back every
    double (0.1 + 0.2 reads back as 0.3); the inputs must be the library's to the last bit, and LibreOffice and
    Excel read 17 significant digits exactly."""

    def __format__(self, spec: str) -> str:
        return repr(float(self)) if spec.upper().endswith("G") else super().__format__(spec)


#: Functions the formulas use: none is one of the Excel 365 functions xlsxwriter rewrites (``_xlfn.``).
_FUNCTIONS = frozenset("ABS AND CEILING FALSE IF IFERROR INT ISBLANK ISNA LN MAX MIN N NA NOT OR SQRT TRUE".split())
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\(")


class _Worksheet(Worksheet):
    """xlsxwriter's worksheet, skipping its ~30 regular-expression passes for Excel 365 functions on formulas that
    call none (the Solver sheet has some 9,000 formulas; the passes took 70% of the time to write a workbook).
    tests/test_xlsx.py checks that xlsxwriter's own preparation leaves every formula written the same."""

    def _prepare_formula(self, formula: str, expand_future_functions: bool = False) -> str:
        if formula.startswith("=") and not formula.endswith("}") and _FUNCTIONS.issuperset(_CALL.findall(formula)):
            return formula[1:]
        return super()._prepare_formula(formula, expand_future_functions)


def _cached(value: object) -> float | str | bool:
    """A cell's cached value: numbers as floats, non-finite and None as #N/A."""
    if isinstance(value, np.bool_):
        value = bool(value)
    if value is None:
        return NA
    if isinstance(value, (bool, str)):
        return value
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else NA


class _Formats:
    def __init__(self, wb: xlsxwriter.Workbook) -> None:
        self.title = wb.add_format({"bold": True, "font_size": 14})
        self.header = wb.add_format({"bold": True, "bottom": 1, "bg_color": "#DDDDDD"})
        self.section = wb.add_format({"bold": True, "italic": True})
        self.input = wb.add_format({"bg_color": "#FFF2CC", "border": 1, "border_color": "#BFBFBF"})
        self.input_int = wb.add_format({"bg_color": "#FFF2CC", "border": 1, "border_color": "#BFBFBF",
                                        "num_format": "#,##0"})
        self.value = wb.add_format({})
        self.count = wb.add_format({"num_format": "#,##0"})
        self.wrap = wb.add_format({"text_wrap": True, "valign": "top"})


def _is_count(key: str, unit: str) -> bool:
    return unit in ("B", "blocks") or (unit == "requests" and key != "goodput_in_flight")


def _header(ws, f: _Formats, columns: tuple[tuple[str, int], ...]) -> None:
    for col, (title, width) in enumerate(columns):
        ws.write_string(0, col, title, f.header)
        ws.set_column(col, col, width)
    ws.freeze_panes(1, 0)


def _write_report_sheet(wb: xlsxwriter.Workbook, f: _Formats, report: Report) -> None:
    ws = wb.add_worksheet("Report", worksheet_class=_Worksheet)
    ws.set_column(0, 0, 22)
    ws.set_column(1, 1, 110, f.wrap)
    s = report.scenario
    units = "GiB (binary, 2^30 B)" if s.units == "GiB" else "GB (decimal, 1e9 B)"
    rows: list[tuple[str, str]] = [
        ("scenario", report.name), ("model", f"{s.model.name} ({s.model.source})"),
        ("gpu", f"{s.gpu.count} x {s.gpu.name} ({s.gpu.source})"), ("tool", f"capacity {report.tool_version}"),
        ("date", report.date), ("byte units", f"values in B (base units); the app shows bytes as {units}"),
        ("binding resource", report.binding["resource"]), ("binding", report.binding["summary"]),
        ("how to use", "Edit the yellow cells on the Inputs sheet (blank = not set); every value on the Results "
                       "sheet is a live formula over the named inputs. #N/A = undefined or unbounded.")]
    rows += [(f"assumption {i}", text) for i, text in enumerate(report.assumptions, 1)]
    rows += [(f"note {i}", text) for i, text in enumerate(report.notes, 1)]
    ws.write_string(0, 0, "Sizing report", f.title)
    for r, (label, text) in enumerate(rows, 2):
        ws.write_string(r, 0, label, f.section)
        ws.write_string(r, 1, text)  # write_string: a name starting with "=" stays text, never a formula


def _write_inputs_sheet(wb: xlsxwriter.Workbook, f: _Formats, report: Report) -> None:
    ws = wb.add_worksheet("Inputs", worksheet_class=_Worksheet)
    _header(ws, f, (("quantity", 26), ("value", 20), ("unit", 12), ("source", 60), ("meaning", 60)))
    unset = unset_inputs(report.scenario)
    for row, q in enumerate(report.inputs, 1):
        ws.write_string(row, 0, q.key)
        if q.key in unset or q.value is None:
            ws.write_blank(row, 1, None, f.input)
        else:
            ws.write_number(row, 1, _Exact(q.value), f.input_int if float(q.value).is_integer() else f.input)
        ws.write_string(row, 2, q.unit)
        ws.write_string(row, 3, q.source)
        ws.write_string(row, 4, q.meaning)
        wb.define_name(q.key, f"=Inputs!$B${row + 1}")


def _write_results_sheet(wb: xlsxwriter.Workbook, f: _Formats, report: Report,
                         cached: dict[str, Value | bool]) -> None:
    ws = wb.add_worksheet("Results", worksheet_class=_Worksheet)
    _header(ws, f, (("quantity", 34), ("value", 20), ("unit", 12), ("meaning", 70)))
    row = 1
    for section, keys in result_layout():
        row += 1
        ws.write_string(row, 0, section, f.section)
        row += 1
        for key in keys:
            if key not in FORMULAS:
                continue  # a result this workbook cannot express yet; its value is in the JSON and CSV
            unit, meaning = RESULTS.get(key) or INTERMEDIATES[key]
            ws.write_string(row, 0, key)
            ws.write_formula(row, 1, "=" + FORMULAS[key], f.count if _is_count(key, unit) else f.value,
                             _cached(cached.get(key)))
            ws.write_string(row, 2, unit)
            ws.write_string(row, 3, meaning)
            wb.define_name(key, f"=Results!$B${row + 1}")
            row += 1


def _write_solver_sheet(wb: xlsxwriter.Workbook, f: _Formats, report: Report) -> None:
    """Each solve of ``SOLVERS`` as one block of rows, one under the other (``_write_solve``)."""
    ws = wb.add_worksheet("Solver", worksheet_class=_Worksheet)
    ws.set_column(0, 0, 24)
    ws.set_column(1, 1 + len(STATE_COLUMNS) + 1 + max(len(s.helpers) for s in SOLVERS) + 1, 14)
    ws.write_string(0, 0, "The root solves the library runs row by row (capacity/solve.py: Chandrupatla's method, "
                          "inverse quadratic interpolation or bisection inside a bracket), one iteration per row; "
                          "dense TPOT bounds use the closed form on Results.", f.section)
    traces = solver_traces(report)
    row = 2
    for solver in SOLVERS:
        row = _write_solve(wb, ws, f, solver, traces[solver.name], row) + 2


def _write_solve(wb: xlsxwriter.Workbook, ws, f: _Formats, solver: Solver, trace: SolverTrace, row: int) -> int:
    """One solve: result (named), answer, search range (and bracket), f at the range ends, then the iterations: the
    state after the previous row, the next point x, the columns that evaluate f(x), and f. Returns the last row."""
    def cell(r: int, c: int) -> str:
        return xl_rowcol_to_cell(r, c)

    ws.write_string(row, 0, solver.name, f.section)
    ws.write_string(row, 1, solver.meaning)
    labels = ["result", "answer", "hi", *(label for label, _ in solver.bracket), "top", "bottom", "no target"]
    s: Cells = {label: cell(row + 1 + i, 1) for i, label in enumerate(labels)}
    header = row + 1 + len(labels)
    columns = ["row", *STATE_COLUMNS, "x", *solver.helpers, "f"]
    col = {name: i for i, name in enumerate(columns)}
    bracketed = bool(solver.bracket)
    points = ["at top", "at bottom", *(["at 0"] if bracketed else [])]
    first = header + 1 + len(points)
    last = first + SOLVER_ITERATIONS

    def row_cells(r: int) -> Cells:
        return {name: cell(r, i) for i, name in enumerate(columns)}

    for i, label in enumerate(points):
        s[f"f {label}"] = cell(header + 1 + i, col["f"])
    start, end = row_cells(first), row_cells(last)
    setup = {"result": solver.result(s["answer"], s), "hi": solver.hi,
             "answer": (f"IF({s['no target']},{s['hi']},IF({s['f at top']}<=0,{s['top']},IF({start['f1']}>0,0,"
                        f"IF({end['f1']}<=0,{end['x1']},{end['x2']}))))"),
             **{label: build(s) for label, build in solver.bracket},
             "top": f"MIN({s['up']},{s['hi']})" if bracketed else s["hi"],
             "bottom": f"MIN({s['lo']},{s['hi']})" if bracketed else "0",
             "no target": solver.no_target(s)}
    cached = {"result": trace.result, **trace.setup}
    for i, label in enumerate(labels):
        ws.write_string(row + 1 + i, 0, label)
        ws.write_formula(row + 1 + i, 1, "=" + setup[label], f.value, _cached(cached.get(label)))
    ws.write_string(row + 1, 2, solver.unit)
    wb.define_name(solver.name, f"=Solver!{xl_rowcol_to_cell(row + 1, 1, row_abs=True, col_abs=True)}")
    for i, name in enumerate(columns):
        ws.write_string(header, i, name, f.header)

    def write_point(r: int, x: str, values: dict, guard: str | None) -> None:
        cells = row_cells(r)
        formulas = {"x": x, **solver.evaluate(cells["x"], cells)}
        for name in ("x", *solver.helpers, "f"):
            formula = formulas[name] if guard is None or name == "x" else f"IF({guard},0,{formulas[name]})"
            ws.write_formula(r, col[name], "=" + formula, f.value, _cached(values.get(name)))

    for i, label in enumerate(points):
        ws.write_string(header + 1 + i, 0, label)
        x, helpers, fx = trace.evaluations[label]
        write_point(header + 1 + i, {"at top": s["top"], "at bottom": s["bottom"], "at 0": "0"}[label],
                    {"x": x, **helpers, "f": fx}, None)
    for k, values in enumerate(trace.rows):
        r, cells = first + k, row_cells(first + k)
        ws.write_number(r, 0, k)
        formulas = (_first_row_formulas(cells, s, bracketed) if k == 0
                    else _iteration_formulas(row_cells(r - 1), cells, solver.rtol))
        for name in STATE_COLUMNS:
            if name in formulas:
                ws.write_formula(r, col[name], "=" + formulas[name], f.value, _cached(values[name]))
            else:
                ws.write_number(r, col[name], float(values[name]), f.value)
        if k < SOLVER_ITERATIONS:
            write_point(r, f"IF({cells['done']},0,{cells['x1']}+{cells['t']}*({cells['x2']}-{cells['x1']}))",
                        values, cells["done"])
    return last


def _first_row_formulas(r: Cells, s: Cells, bracketed: bool) -> dict[str, str]:
    """The state before the first iteration (``solve.solve_rising``): the bracket [bottom, top], from 0 where the
    bracket's lower bound misses; done where there is no target, f(top) <= 0 (answer top) or f(bottom) > 0
    (answer 0). t = 1/2 is a number."""
    missed = f"{s['f at bottom']}>0"
    x1, f1 = ((f"IF({missed},0,{s['bottom']})", f"IF({missed},{s['f at 0']},{s['f at bottom']})") if bracketed
              else (s["bottom"], s["f at bottom"]))
    return {"x1": x1, "f1": f1, "x2": s["top"], "f2": s["f at top"], "x3": r["x2"], "f3": r["f2"],
            "done": f"IF({s['no target']},TRUE(),OR({s['f at top']}<=0,{r['f1']}>0))"}


def workbook_bytes(report: Report) -> bytes:
    """The report as XLSX bytes: Report, Inputs, Results (live formulas) and Solver sheets."""
    buffer = io.BytesIO()
    wb = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False})
    wb.set_calc_mode("auto")  # XlsxWriter also sets fullCalcOnLoad, so Excel recomputes on open
    wb.set_properties({"title": f"Sizing report: {report.name}", "comments": f"capacity {report.tool_version}"})
    formats = _Formats(wb)
    cached: dict[str, Value | bool] = {**{q.key: q.value for q in report.outputs}, **intermediate_values(report)}
    _write_report_sheet(wb, formats, report)
    _write_inputs_sheet(wb, formats, report)
    _write_results_sheet(wb, formats, report, cached)
    _write_solver_sheet(wb, formats, report)
    wb.close()
    return buffer.getvalue()


def write_xlsx(report: Report, path: str | Path) -> None:
    """Write the workbook atomically (temporary file, then rename); ScenarioError if ``path`` is not writable."""
    write_atomic(path, workbook_bytes(report))


def missing_formulas() -> list[str]:
    """Result keys with no spreadsheet formula (empty when the workbook expresses every result)."""
    return [key for key in RESULTS if key not in FORMULAS]


__all__ = ["FORMULAS", "INTERMEDIATES", "SOLVERS", "intermediate_values", "missing_formulas",
           "result_layout", "solver_traces", "workbook_bytes", "write_xlsx"]
