"""The sizing report as an XLSX workbook whose results are live Excel formulas.

Sheets: ``Report`` (name, version, date, binding resource, assumptions, notes), ``Inputs``
(one row per ``analysis.INPUTS`` key; the value cell carries a defined name equal to the
key, in base units; a blank cell means an unset option: no limit, no promise, no price),
``Results`` (one row per ``analysis.RESULTS`` key: a formula over the input names, its
cell named after the key, plus named intermediate cells) and ``Solver`` (the bisections
the library runs for MoE models, unrolled into 100 rows of formulas each; no macros).
Edit an input in Excel or LibreOffice and every result recomputes. Cached values are
the library's, so readers that do not calculate see the same numbers. Undefined or
unbounded results (the library's inf/NaN, JSON null) are ``#N/A``.

The formulas mirror ``analysis.analyse`` term by term (same operations in the same order),
so a spreadsheet engine reproduces the library to rounding; counts use the library's
rounding-tolerant floor ``MAX(0,INT(x+1E-9*MAX(ABS(x),1)))``. Dense models take the
goodput in closed form (``slo.max_rate_for_tpot_rps``): ``MIN_i (T-a_i)/(T*t_p+m_i*A*T)``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xlsxwriter
from xlsxwriter.utility import xl_rowcol_to_cell

from . import analysis
from .analysis import RESULTS
from .files import write_atomic
from .formatting import SECTIONS
from .report import Report, Value, flat_inputs, unset_inputs

NA = "#N/A"
#: Bisection steps the library takes (``slo._bisect``); the Solver sheet unrolls the same number.
BISECTION_STEPS = 100
#: Upper end of the TPOT bisection [s] (``slo.tpot_at_rate_general``).
LONGEST_TPOT_S = 1e4


# --- formula builders: each returns an Excel expression over defined names -----------------------------------

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


def _tpot_closed(rate: str) -> str:
    """``slo.tpot_at_rate_s``: ``max_i a_i / (1 - λ t_p - λ A m_i)``, #N/A when decode cannot keep up."""
    d_mem = f"(1-{rate}*prefill_s-{rate}*output_tokens*step_slope_memory_s)"
    d_comp = f"(1-{rate}*prefill_s-{rate}*output_tokens*step_slope_compute_s)"
    return (f"IF(OR({d_mem}<=0,{d_comp}<=0),NA(),"
            f"MAX(0,step_intercept_memory_s/{d_mem},step_intercept_compute_s/{d_comp}))")


def _ttft_at(rate: str) -> str:
    """``slo.ttft_at_rate_s``: prefill plus the M/D/1 wait ``t_p ρ / (2 (1 - ρ))``, ρ = λ / ceiling."""
    rho = f"({rate}/ceiling_rps)"
    return f"IF(ceiling_rps>0,IF({rho}<1,prefill_s+prefill_s*{rho}/(2*(1-{rho})),NA()),NA())"


def _rate_piece(a: str, m: str) -> str:
    """One piece of ``slo.max_rate_for_tpot_rps``: ``(T - a_i) / (T t_p + m_i A T)``."""
    return f"(tpot_slo_s-{a})/(tpot_slo_s*prefill_s+{m}*output_tokens*tpot_slo_s)"


def _cost(rate: str) -> str:
    """``slo.cost_per_million_tokens`` for one replica: ``price gpus / (λ A 3600) 1e6``; #N/A without price or rate."""
    return (f"IF(OR(ISBLANK(price_per_hour),{rate}*output_tokens*3600<=0),NA(),"
            f"price_per_hour*gpus_per_replica/({rate}*output_tokens*3600)*1E6)")


_DECODE_PER_REQUEST = "output_tokens*decode_step_s/batch_max"

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
    "prefill_tokens": "prompt_tokens-shared_blocks*block_size",
    "decode_memory_s": _decode_memory("batch_max"),
    "decode_compute_s": _decode_compute("batch_max"),
    "allreduce_per_step_s": "step_comm_fixed_s+batch_max*step_comm_per_token_s",
    "decode_step_s": "MAX(decode_memory_s,decode_compute_s)+allreduce_per_step_s+step_overhead_total_s",
    "decode_bound": 'IF(decode_compute_s>decode_memory_s,"compute","memory")',
    "weight_bytes_read_per_step": f"{_weights_read('batch_max')}*gpu_count",
    "prefill_s": (f"MAX({_weights_read('prefill_tokens')}/bandwidth,prefill_tokens*2*(active_params/gpu_count)/flops)"
                  f"+step_overhead_total_s+step_comm_fixed_s+prefill_tokens*step_comm_per_token_s"),
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
    "max_rate_for_ttft_rps": ("IF(ISBLANK(ttft_slo_s),NA(),ceiling_rps*2*(MAX(ttft_slo_s-prefill_s,0)/prefill_s)"
                              "/(1+2*(MAX(ttft_slo_s-prefill_s,0)/prefill_s)))"),
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
    "ttft_at_goodput_s": _ttft_at("goodput_rps"),
    "capacity_given_up": "IF(ceiling_rps>0,1-goodput_rps/ceiling_rps,0)",
    "output_tokens_per_s_at_goodput": "goodput_rps*output_tokens",
    "goodput_per_gpu_rps": "goodput_rps/gpus_per_replica",
    "fleet_goodput_rps": "goodput_rps*replicas",
    # Load: an arrival rate of 0 or blank means none
    "load_fraction": "IF(AND(N(arrival_rate)>0,ceiling_rps>0),arrival_rate/ceiling_rps,NA())",
    "tpot_at_load_s": ("IF(N(arrival_rate)>0,IF(moe_model,solver_tpot_at_load_s,"
                       f"{_tpot_closed('arrival_rate')}),NA())"),
    "ttft_at_load_s": f"IF(N(arrival_rate)>0,{_ttft_at('arrival_rate')},NA())",
    # Cost
    "cost_per_million_tokens": _cost("goodput_rps"),
    "cost_per_million_tokens_at_ceiling": _cost("ceiling_rps"),
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
}


# --- the Solver sheet: bisections for MoE models, unrolled ---------------------------------------------------

#: One bisection: (result name, unit, meaning, lower end, upper end, condition on x, keep ok: True = largest x
#: with ok(x), False = largest x with not ok(x), result formula given (ok at the lower end, final lo)).
SOLVERS: list[tuple[str, str, str, str, str, Callable[[str], str], bool, Callable[[str, str], str]]] = [
    ("solver_rate_tpot_rps", "requests/s", "MoE: largest λ with t_step(λ A T) <= T (1 - λ t_p)", "0",
     "MIN(1/prefill_s,MAX(ceiling_rps,0)*2+1E-9)",
     lambda x: f"{_step(f'{x}*output_tokens*tpot_slo_s')}<=tpot_slo_s*(1-{x}*prefill_s)", True,
     lambda ok0, lo: f"IF({ok0},{lo},0)"),
    ("solver_tpot_at_goodput_s", "s", "MoE: smallest TPOT with t_step(λ A TPOT) <= TPOT (1 - λ t_p) at the goodput",
     "0", str(LONGEST_TPOT_S),
     lambda s: f"{_step(f'goodput_rps*output_tokens*{s}')}<={s}*(1-goodput_rps*prefill_s)", False,
     lambda _, lo: (f"IF(AND({_step(f'goodput_rps*output_tokens*{LONGEST_TPOT_S}')}<={LONGEST_TPOT_S}"
                    f"*(1-goodput_rps*prefill_s),1-goodput_rps*prefill_s>0),{lo},NA())")),
    ("solver_tpot_at_load_s", "s", "MoE: smallest TPOT with t_step(λ A TPOT) <= TPOT (1 - λ t_p) at the load",
     "0", str(LONGEST_TPOT_S),
     lambda s: f"{_step(f'N(arrival_rate)*output_tokens*{s}')}<={s}*(1-N(arrival_rate)*prefill_s)", False,
     lambda _, lo: (f"IF(AND({_step(f'N(arrival_rate)*output_tokens*{LONGEST_TPOT_S}')}<={LONGEST_TPOT_S}"
                    f"*(1-N(arrival_rate)*prefill_s),1-N(arrival_rate)*prefill_s>0),{lo},NA())")),
]


def _bisection_trace(ok: Callable[[float], bool], lo: float, hi: float, keep_ok: bool) -> list[tuple]:
    """The Solver sheet's rows (lo, hi, mid, ok(mid)) as the library's ``slo._bisect`` walks them."""
    rows = []
    for _ in range(BISECTION_STEPS + 1):
        mid = 0.5 * (lo + hi)
        good = ok(mid)
        rows.append((lo, hi, mid, good))
        move = good if keep_ok else not good
        lo, hi = (mid, hi) if move else (lo, mid)
    return rows


def solver_traces(report: Report) -> dict[str, tuple[Value | bool, list[tuple]]]:
    """Cached values of the Solver sheet: each bisection's result and rows, from the library's step time."""
    x = {k: np.asarray(v) for k, v in flat_inputs(report.scenario).items()}
    v = report.results.values
    model, _ = analysis.step_model(x, np.asarray(v["context_tokens"]))
    step = lambda b: float(model.step_s(b))  # noqa: E731
    tp, a_tokens, t = v["prefill_s"], x["output_tokens"].item(), x["tpot_slo_s"].item()
    t = t if math.isfinite(t) else 0.0
    traces: dict[str, tuple[Value | bool, list[tuple]]] = {}
    rows = _bisection_trace(lambda lam: step(lam * a_tokens * t) <= t * (1 - lam * tp), 0.0,
                            min(1 / tp, max(v["ceiling_rps"], 0) * 2 + 1e-9), True)
    traces["solver_rate_tpot_rps"] = (rows[-1][0] if step(0.0) <= t else 0.0, rows)
    for name, lam in (("solver_tpot_at_goodput_s", v["goodput_rps"]),
                      ("solver_tpot_at_load_s", report.scenario.workload.arrival_rate or 0.0)):
        share = 1 - lam * tp
        rows = _bisection_trace(lambda s, lam=lam, share=share: step(lam * a_tokens * s) <= s * share, 0.0,
                                LONGEST_TPOT_S, False)
        found = step(lam * a_tokens * LONGEST_TPOT_S) <= LONGEST_TPOT_S * share and share > 0
        traces[name] = (rows[-1][0] if found else None, rows)
    return traces


def intermediate_values(report: Report) -> dict[str, Value | bool]:
    """The library's values of the named intermediate and Solver result cells (the cached values stored)."""
    v = report.results.values
    x = flat_inputs(report.scenario)
    arrays = {k: np.asarray(val) for k, val in x.items()}
    model, _ = analysis.step_model(arrays, np.asarray(v["context_tokens"]))
    (a_mem, m_mem), (a_comp, m_comp) = model.pieces()
    tp, pp, bs = x["gpu_count"], x["pipeline_parallel"], x["block_size"]
    ring = 2.0 * (tp - 1) / tp if tp > 1 and x["hidden_size"] > 0 else 0.0
    moe = bool(model.moe)
    window_blocks = math.ceil(x["sliding_window"] / bs) if math.isfinite(x["sliding_window"]) else math.inf
    f = x["local_layer_fraction"]
    values: dict[str, Value | bool] = {
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
    }
    values.update({name: result for name, (result, _) in solver_traces(report).items()})
    return values


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

def _cached(value: Value | bool) -> float | str | bool:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    if isinstance(value, (bool, str)):
        return value
    return float(value)


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
    ws = wb.add_worksheet("Report")
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
    ws = wb.add_worksheet("Inputs")
    _header(ws, f, (("quantity", 26), ("value", 20), ("unit", 12), ("source", 60), ("meaning", 60)))
    unset = unset_inputs(report.scenario)
    for row, q in enumerate(report.inputs, 1):
        ws.write_string(row, 0, q.key)
        if q.key in unset or q.value is None:
            ws.write_blank(row, 1, None, f.input)
        else:
            ws.write_number(row, 1, float(q.value), f.input_int if float(q.value).is_integer() else f.input)
        ws.write_string(row, 2, q.unit)
        ws.write_string(row, 3, q.source)
        ws.write_string(row, 4, q.meaning)
        wb.define_name(q.key, f"=Inputs!$B${row + 1}")


def _write_results_sheet(wb: xlsxwriter.Workbook, f: _Formats, report: Report,
                         cached: dict[str, Value | bool]) -> None:
    ws = wb.add_worksheet("Results")
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
    """Each bisection in four columns (lo, hi, mid, ok) over BISECTION_STEPS + 1 rows; results named on row 2."""
    ws = wb.add_worksheet("Solver")
    ws.write_string(0, 0, "Bisections the library runs for MoE models (dense models use the closed form on "
                          "Results); each row halves the interval of the row above.", f.section)
    traces = solver_traces(report)
    for i, (name, unit, meaning, lo0, hi0, cond, keep_ok, result) in enumerate(SOLVERS):
        c = 5 * i
        value, rows = traces[name]
        ws.set_column(c, c + 3, 14)
        first = 4
        lo_last = xl_rowcol_to_cell(first + BISECTION_STEPS, c)
        ws.write_string(1, c, name, f.section)
        ws.write_formula(2, c, "=" + result(cond(lo0), lo_last), f.value, _cached(value))
        ws.write_string(2, c + 1, unit)
        ws.write_string(2, c + 2, meaning)
        wb.define_name(name, f"=Solver!{xl_rowcol_to_cell(2, c, row_abs=True, col_abs=True)}")
        for col, title in enumerate(("lo", "hi", "mid", "ok(mid)")):
            ws.write_string(first - 1, c + col, title, f.header)
        for k, (lo, hi, mid, good) in enumerate(rows):
            r = first + k
            lo_c, hi_c, mid_c, ok_c = (xl_rowcol_to_cell(r, c + j) for j in range(4))
            if k == 0:
                ws.write_formula(r, c, "=" + lo0, f.value, lo)
                ws.write_formula(r, c + 1, "=" + hi0, f.value, hi)
            else:
                p_lo, p_hi, p_mid, p_ok = (xl_rowcol_to_cell(r - 1, c + j) for j in range(4))
                move = p_ok if keep_ok else f"NOT({p_ok})"
                ws.write_formula(r, c, f"=IF({move},{p_mid},{p_lo})", f.value, lo)
                ws.write_formula(r, c + 1, f"=IF({move},{p_hi},{p_mid})", f.value, hi)
            ws.write_formula(r, c + 2, f"=0.5*({lo_c}+{hi_c})", f.value, mid)
            ws.write_formula(r, c + 3, "=" + cond(mid_c), f.value, bool(good))


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
