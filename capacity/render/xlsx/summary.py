"""The Summary sheet: the answer on top, then the key numbers in human units (GB or GiB, ms, requests/s, $), each a
live formula over the named results, and the fleet for the arrival rate on the Inputs sheet.

The answer's fleet (``sizing.Sizing``: the layout chosen, replicas, load per replica, latencies there, cost) is written
as the library's values; where the answer is the scenario's own layout, colocated, on the mean-based goodput without
peak factor or headroom, the live fleet cells below equal it, and otherwise the sheet says what they cannot express.
The live fleet cells mirror ``sizing.replicas_for`` for the scenario's own colocated layout:

    fleet_replicas       = MAX(1, CEILING(arrival_rate / goodput_rps - 1E-9, 1))    (#N/A without a load)
    fleet_gpus           = fleet_replicas x gpu_count x pipeline_parallel
    fleet_cost_per_hour  = fleet_gpus x price_per_hour
    fleet_cost_per_month = fleet_cost_per_hour x 730                                (``fleet_answer.HOURS_PER_MONTH``)

and carry those defined names; tests/render/test_xlsx_libreoffice.py recalculates them against the library.
"""

from __future__ import annotations

import xlsxwriter

from capacity.answers.fleet_answer import HOURS_PER_MONTH, FleetAnswer, fleet_answer
from capacity.model.analysis import RESULTS
from capacity.planning.sizing import MODE_WORDS, SIZING_RESULTS, Sizing
from capacity.render.report import Report, Value
from capacity.render.xlsx.cells import Formats, Worksheet, cached

#: (label, result key) of the key numbers, in the order shown.
KEY_NUMBERS = (
    ("Requests that fit at once", "batch_max"), ("What caps the batch", "batch_limit"),
    ("KV pool per GPU", "pool_bytes"), ("Weights per GPU", "weight_bytes_per_gpu"),
    ("Decode step at the largest batch", "decode_step_s"), ("Prefill of one prompt", "prefill_s"),
    ("Throughput ceiling (one replica)", "ceiling_rps"), ("Goodput within the promises (one replica)", "goodput_rps"),
    ("What sets the goodput", "goodput_limit"), ("TPOT at the goodput", "tpot_at_goodput_s"),
    ("TTFT at the goodput", "ttft_at_goodput_s"), ("Cost per million output tokens at the goodput",
                                                   "cost_per_million_tokens"),
    ("TPOT with the whole arrival rate on one replica", "tpot_at_load_s"),
    ("TTFT with the whole arrival rate on one replica", "ttft_at_load_s"),
)

#: (label, ``Sizing.to_dict`` key) of the answer's rows: the library's one answer, written as values.
ANSWER_ROWS = (
    ("Serving mode chosen", "sizing_mode"), ("Tensor-parallel GPUs per replica", "sizing_tensor_parallel"),
    ("Replicas", "sizing_replicas"), ("GPUs", "sizing_gpus"),
    ("Load each replica carries", "sizing_load_per_replica_rps"),
    ("Goodput of one replica", "sizing_replica_goodput_rps"), ("Goodput basis", "sizing_goodput_basis"),
    ("TPOT at each replica's load (mean)", "sizing_tpot_at_load_s"),
    ("TTFT at each replica's load (mean)", "sizing_ttft_at_load_s"),
    ("TPOT at the promise's percentile", "sizing_tpot_at_percentile_s"),
    ("TTFT at the promise's percentile", "sizing_ttft_at_percentile_s"),
    ("Price per GPU-hour", "sizing_price_per_gpu_hour"), ("Cost per hour", "sizing_cost_per_hour"),
    ("Cost per month", "sizing_cost_per_month"), ("Cost per million output tokens", "sizing_cost_per_million_tokens"),
)

#: Rows of an answer on separate pools (``disaggregated``, ``split``), after its GPUs: replicas per pool.
POOL_ROWS = (("Prefill replicas", "sizing_prefill_replicas"), ("Decode replicas", "sizing_decode_replicas"))
#: Rows of an answer on split pools (``split``: each pool on its own layout), after ``POOL_ROWS``: the decode pool's
#: GPU type, then the prefill pool's layout and price (the rows above it are the decode pool's: TP, price, load).
SPLIT_ROWS = (
    ("Decode pool: GPU type", "sizing_gpu"), ("Prefill pool: GPU type", "sizing_prefill_gpu"),
    ("Prefill pool: tensor-parallel GPUs per replica", "sizing_prefill_tensor_parallel"),
    ("Prefill pool: GPUs per replica", "sizing_prefill_gpus_per_replica"),
    ("Prefill pool: price per GPU-hour", "sizing_prefill_price_per_gpu_hour"),
    ("Prefill pool: load each replica carries", "sizing_prefill_load_per_replica_rps"),
)
#: Split pools: the answer rows that describe the decode pool alone, so named.
_DECODE_POOL = {"sizing_tensor_parallel": "Decode pool: tensor-parallel GPUs per replica",
                "sizing_load_per_replica_rps": "Decode pool: load each replica carries",
                "sizing_replica_goodput_rps": "Decode pool: goodput of one replica",
                "sizing_price_per_gpu_hour": "Decode pool: price per GPU-hour"}


def answer_rows(sizing: Sizing) -> tuple[tuple[str, str], ...]:
    """(label, ``Sizing.to_dict`` key) of the answer's rows: ``ANSWER_ROWS``, with each pool's rows after the GPUs
    where the answer is on separate pools (``POOL_ROWS``) or split pools (``SPLIT_ROWS``: the prefill pool's GPU,
    TP, GPUs per replica, price and load; the rows of the decode pool's layout named as its)."""
    split = sizing.mode == "split"
    pools = (POOL_ROWS if sizing.mode in ("disaggregated", "split") else ()) + (SPLIT_ROWS if split else ())
    rows: list[tuple[str, str]] = []
    for label, key in ANSWER_ROWS:
        rows.append((_DECODE_POOL.get(key, label) if split else label, key))
        if key == "sizing_gpus":
            rows += pools
    return tuple(rows)


#: Defined name -> (label, Excel formula, unit) of the fleet rows.
FLEET = {
    "fleet_replicas": ("Replicas for the arrival rate",
                       "IF(N(arrival_rate)<=0,NA(),IF(goodput_rps>0,MAX(1,CEILING(arrival_rate/goodput_rps-1E-9,1)),"
                       "NA()))", "replicas"),
    "fleet_gpus": ("GPUs", "fleet_replicas*gpu_count*pipeline_parallel", "GPUs"),
    "fleet_cost_per_hour": ("Cost per hour", "IF(ISBLANK(price_per_hour),NA(),fleet_gpus*price_per_hour)", "$/h"),
    "fleet_cost_per_month": ("Cost per month", f"fleet_cost_per_hour*{HOURS_PER_MONTH:g}", "$/month"),
}


def write_summary_sheet(wb: xlsxwriter.Workbook, f: Formats, report: Report, values: dict[str, Value | bool],
                        unexpressed: list[str] = ()) -> None:
    """The first sheet: title, the one-sentence answer (as of the report date), key numbers and the fleet.
    ``unexpressed``: what the formulas cannot express (``writer.unexpressed``); the sheet says it first."""
    from capacity.render.xlsx.writer import human_value, to_human_formula

    ws = wb.add_worksheet("Summary", worksheet_class=Worksheet)
    ws.set_column(0, 0, 44)
    ws.set_column(1, 1, 18)
    ws.set_column(2, 2, 12)
    ws.set_column(3, 3, 70, f.wrap)
    binary = report.scenario.units == "GiB"
    answer = fleet_answer(report.results)  # the one answer (report.sizing's, recomputed the same way)
    ws.write_string(0, 0, f"Sizing summary: {report.name}", f.title)
    if unexpressed:
        ws.write_string(1, 0, f"capacity {report.tool_version}, {report.date}. The workbook cannot express "
                              f"{'; '.join(unexpressed)}: every result is the library's value, not a formula, and "
                              "editing an input changes none of them.", f.wrap)
    else:
        ws.write_string(1, 0, f"capacity {report.tool_version}, {report.date}; edit the yellow cells on the Inputs "
                              "sheet (human units) and every number below recomputes.")
    sizing = answer.sizing
    live = sizing.stated_layout and sizing.mode == "colocated" and sizing.goodput_basis == "mean" and not (
        report.scenario.raw or {}).get("workloads") and sizing.peak_factor == 1 and sizing.headroom == 0 and (
        not unexpressed)
    if live:  # the answer is the live cells' own: its sentence is a formula of them, so an edit rewrites it
        ws.write_string(3, 0, "The answer (recomputed from the cells below)", f.section)
        formula, text = live_sentence(report, answer)
        ws.merge_range(4, 0, 4, 3, "", f.wrap)
        ws.write_formula(4, 0, formula, f.wrap, text)
    else:
        ws.write_string(3, 0, "The answer (as of the report date: the workbook cannot recompute it, see below)",
                        f.section)
        ws.merge_range(4, 0, 4, 3, answer.sentence, f.wrap)
    ws.set_row(4, 48)
    ws.write_string(6, 0, "Key numbers", f.section)
    ws.write_string(6, 1, "value", f.header)
    ws.write_string(6, 2, "unit", f.header)
    ws.write_string(6, 3, "result (Results sheet)", f.header)
    row = 7
    for label, key in KEY_NUMBERS:
        unit = RESULTS[key][0]
        formula, human = to_human_formula(key, key, unit, binary)
        value = human_value(values.get(key), key, unit, binary)
        style = f.big_text if isinstance(value, str) else (
            f.big_count if human in ("requests", "blocks") else f.big_money if human == "$" else f.big)
        ws.write_string(row, 0, label)
        ws.write_formula(row, 1, formula, style, cached(value))
        ws.write_string(row, 2, human if human != "" else "")
        ws.write_string(row, 3, key)
        row += 1
    row += 1
    ws.write_string(row, 0, "The answer's fleet (the library's sizing, as of the report date)", f.section)
    row += 1
    answer_values = sizing.to_dict()
    for label, key in answer_rows(sizing):
        value = answer_values[key]
        unit = SIZING_RESULTS[key][0]
        ws.write_string(row, 0, label)
        if isinstance(value, str):
            ws.write_string(row, 1, value, f.big_text)
        elif value is None:
            ws.write_string(row, 1, "n/a")
        elif unit == "s":
            ws.write_number(row, 1, value * 1e3, f.big)
            unit = "ms"
        else:
            ws.write_number(row, 1, value, f.big_money if unit.startswith("$") else f.big)
        ws.write_string(row, 2, unit)
        ws.write_string(row, 3, key)
        row += 1
    ws.merge_range(row, 0, row, 3, "The live formulas below size the scenario's own layout, colocated, on the "
                   "mean-based goodput, and equal the answer above. " if live else
                   "The workbook cannot express this answer (" + _why_not_live(sizing) + "): the rows above are the "
                   "library's values, and the live formulas below size the scenario's own layout, colocated, on the "
                   "mean-based goodput without peak factor or headroom, which is not the answer.", f.wrap)
    ws.set_row(row, 45)
    row += 2
    ws.write_string(row, 0, "Fleet of the scenario's own layout, colocated (live; Inputs: arrival_rate)", f.section)
    row += 1
    fleet = answer.fleet
    cached_fleet = {"fleet_replicas": fleet.replicas if fleet else None, "fleet_gpus": fleet.gpus if fleet else None,
                    "fleet_cost_per_hour": answer.cost_per_hour if fleet else None,
                    "fleet_cost_per_month": answer.cost_per_month if fleet else None}
    for name, (label, formula, unit) in FLEET.items():
        money = unit.startswith("$")
        ws.write_string(row, 0, label)
        ws.write_formula(row, 1, "=" + formula, f.big_money if money else f.big_count, cached(cached_fleet[name]))
        ws.write_string(row, 2, unit)
        wb.define_name(name, f"=Summary!$B${row + 1}")
        row += 1
    ws.activate()


def live_sentence(report: Report, answer: FleetAnswer) -> tuple[str, str]:
    """The answer's sentence as an Excel formula of the live cells (load, shape, fleet, cost, one replica's goodput)
    and its value as the workbook is written (the same words, Excel's TEXT formats as Python's: "#,##0.00" ->
    ``{:,.2f}``, "#,##0" -> ``{:,.0f}``). Used where the live fleet is the answer (``write_summary_sheet``)."""
    s = report.scenario
    gpu, per_replica = s.gpu.name, s.gpu.gpus_per_replica

    def fmt(x: float, digits: int) -> str:
        return f"{x:,.{digits}f}"

    goodput = float(report.results["goodput_rps"])
    replicas_text = '&IF(fleet_replicas=1," replica"," replicas")'
    loaded = ('"To serve "&TEXT(arrival_rate,"#,##0.00")&" requests/s of "&TEXT(prompt_tokens,"#,##0")&"-token '
              'prompts and "&TEXT(output_tokens,"#,##0")&"-token answers, you need "&TEXT(fleet_gpus,"#,##0")&'
              f'" x {gpu} ("&TEXT(fleet_replicas,"#,##0"){replicas_text}&" of {per_replica} GPU'
              f'{"" if per_replica == 1 else "s"})"&IF(ISNUMBER(fleet_cost_per_hour)," at about $"&'
              'TEXT(fleet_cost_per_hour,"#,##0.00")&"/hour ($"&TEXT(fleet_cost_per_month,"#,##0")&"/month)","")&'
              '"; one replica keeps the promises up to "&TEXT(goodput_rps,"#,##0.00")&" requests/s."')
    unloaded = (f'"One replica of {per_replica} x {gpu} keeps the promises up to "&TEXT(goodput_rps,"#,##0.00")&'
                '" requests/s; enter an arrival rate on the Inputs sheet to size the fleet."')
    formula = f"=IF(ISNUMBER(fleet_replicas),{loaded},{unloaded})"
    load = s.workload.arrival_rate
    fleet = answer.fleet
    if load and fleet is not None and goodput > 0:
        cost = (f" at about ${fmt(answer.cost_per_hour, 2)}/hour (${fmt(answer.cost_per_month, 0)}/month)"
                if answer.cost_per_hour is not None else "")
        text = (f"To serve {fmt(load, 2)} requests/s of {fmt(s.workload.prompt_tokens, 0)}-token prompts and "
                f"{fmt(s.workload.output_tokens, 0)}-token answers, you need {fmt(fleet.gpus, 0)} x {gpu} "
                f"({fmt(fleet.replicas, 0)} replica{'' if fleet.replicas == 1 else 's'} of {per_replica} GPU"
                f"{'' if per_replica == 1 else 's'}){cost}; one replica keeps the promises up to "
                f"{fmt(goodput, 2)} requests/s.")
    else:
        text = (f"One replica of {per_replica} x {gpu} keeps the promises up to {fmt(goodput, 2)} requests/s; enter "
                "an arrival rate on the Inputs sheet to size the fleet.")
    return formula, text


def _why_not_live(sizing: Sizing) -> str:
    """What of the answer the workbook's formulas do not compute, in words."""
    why = []
    if not sizing.stated_layout:
        why.append(f"it chooses TP{sizing.tensor_parallel}, another layout than the scenario's")
    if sizing.mode != "colocated":
        why.append(f"it serves with {MODE_WORDS[sizing.mode]}")
    if sizing.goodput_basis != "mean" or (sizing.scenario.raw or {}).get("workloads"):
        why.append("it keeps promises at a percentile or per workload class")
    if sizing.peak_factor != 1 or sizing.headroom != 0:
        why.append("it applies a peak factor or headroom")
    return "; ".join(why) or "it differs"
