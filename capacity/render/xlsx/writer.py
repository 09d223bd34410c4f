"""The workbook: Report, Inputs, Results (live formulas) and Solver sheets, and the values they cache."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import xlsxwriter

from capacity.fileio.files import write_atomic
from capacity.formulas._numeric import finite_or_none
from capacity.formulas.solve import SolveTrace
from capacity.model.analysis import INTERMEDIATES, RESULTS, analyse, complete_inputs, replica_stages
from capacity.render.formatting import SECTIONS, human_unit_of
from capacity.render.report import Report, Value, flat_inputs, unset_inputs
from capacity.render.xlsx.cells import Exact, Formats, Worksheet, cached, header, is_count
from capacity.render.xlsx.formulas import FORMULAS, WORKBOOK_INTERMEDIATES
from capacity.render.xlsx.solver import write_solver_sheet
from capacity.render.xlsx.summary import write_summary_sheet


def library_run(report: Report) -> tuple[dict[str, Value | bool], dict[str, SolveTrace]]:
    """The library's intermediates (``analysis.INTERMEDIATES``, plain values) and its solves' traces on the report's
    scenario: what the Results and Solver sheets cache."""
    traces: dict[str, SolveTrace] = {}
    inputs = flat_inputs(report.scenario)
    values = analyse(inputs, intermediates=True, trace=traces)
    values.update(workbook_intermediates(inputs))
    return {key: _plain(values[key]) for key in (*INTERMEDIATES, *WORKBOOK_INTERMEDIATES)}, traces


def workbook_intermediates(inputs: dict[str, float]) -> dict[str, np.ndarray]:
    """The ``WORKBOOK_INTERMEDIATES`` the library computes inside ``analysis._analyse`` without returning them, from
    the same stage: ``prefill_gpu_s``, the GPU time a prompt costs the others (``analysis.prefill_stage``'s
    ``gpu_s``: its share of a batched pass where prompts are batched, else the prefill)."""
    return {"prefill_gpu_s": replica_stages(inputs)[2].gpu_s}


def intermediate_values(report: Report) -> dict[str, Value | bool]:
    """The library's values of the named intermediate and Solver result cells (the cached values stored)."""
    return library_run(report)[0]


def solver_traces(report: Report) -> dict[str, SolveTrace]:
    """Every root solve as the library ran it on the report's scenario (``solve.SolveTrace``), columns included."""
    return library_run(report)[1]


def _plain(value: object) -> Value | bool:
    """A Python bool, float or None (non-finite) for a library value."""
    if value is None or isinstance(value, (bool, np.bool_, str)):
        return value if not isinstance(value, np.bool_) else bool(value)
    if np.asarray(value).dtype == bool:
        return bool(np.asarray(value).reshape(-1)[0])
    return finite_or_none(value)


def result_layout() -> list[tuple[str, list[str]]]:
    """Results sheet sections in order: the table's sections, any other result keys, then intermediates."""
    placed = [key for keys in SECTIONS.values() for key in keys]
    sections = [(name, [k for k in keys if k in RESULTS]) for name, keys in SECTIONS.items()]
    rest = [key for key in RESULTS if key not in placed]
    if rest:
        sections.append(("Other results", rest))
    sections.append(("Intermediate (named cells the formulas share)",
                     [k for k in (*INTERMEDIATES, *WORKBOOK_INTERMEDIATES) if k not in RESULTS and k in FORMULAS]))
    return sections


def _write_report_sheet(wb: xlsxwriter.Workbook, f: Formats, report: Report) -> None:
    ws = wb.add_worksheet("Report", worksheet_class=Worksheet)
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
    rows += engine_rows(report)
    rows += [(f"assumption {i}", text) for i, text in enumerate(report.assumptions, 1)]
    rows += [(f"note {i}", text) for i, text in enumerate(report.notes, 1)]
    ws.write_string(0, 0, "Sizing report", f.title)
    for r, (label, text) in enumerate(rows, 2):
        ws.write_string(r, 0, label, f.section)
        ws.write_string(r, 1, text)  # write_string: a name starting with "=" stays text, never a formula


#: Inputs sheet columns: the editable value in human units (B), its unit (C), the value in base units (F) and, hidden,
#: the human value as written (G).
INPUT_VALUE, INPUT_BASE, INPUT_WRITTEN = 1, 5, 6


def input_conversion(key: str, unit: str, binary: bool) -> tuple[str, str, float]:
    """(human unit, Excel operator and factor that turn the human value into base units, the factor): bytes x 1E9
    (GB) or x 1073741824 (GiB), B/s x 1E9 (GB/s), FLOP/s x 1E12 (TFLOP/s), seconds / 1000 (ms); per-value
    bytes and every other unit stay (x 1). Division for ms keeps "40 ms" the nearest double to 0.04 s, as the
    scenario file reads it."""
    human, factor = human_unit_of(key, unit, binary)
    if factor == 1:
        return human, "", 1.0
    if factor < 1:
        return human, f"/{round(1 / factor):d}", factor
    return human, f"*{factor:.17g}".replace("e+", "E"), factor


def input_name_formula(row: int, op: str) -> str:
    """The defined name of an input: its cell, converted to base units. An unedited cell gives the library's exact
    base value (column F); an edited one its human value converted (``op``); a blank cell stays a blank reference,
    so ``ISBLANK(name)`` still means "not set"."""
    value = f"Inputs!$B${row}"
    if not op:
        return f"={value}"
    return (f"=IF(ISBLANK({value}),{value},IF({value}=Inputs!$G${row},Inputs!$F${row},{value}{op}))")


def _write_inputs_sheet(wb: xlsxwriter.Workbook, f: Formats, report: Report) -> None:
    ws = wb.add_worksheet("Inputs", worksheet_class=Worksheet)
    header(ws, f, (("quantity", 26), ("value (edit)", 16), ("unit", 10), ("source", 50), ("meaning", 50),
                   ("value in base units", 22), ("as written", 4)))
    ws.set_column(INPUT_WRITTEN, INPUT_WRITTEN, None, None, {"hidden": True})
    unset = unset_inputs(report.scenario)
    binary = report.scenario.units == "GiB"
    for row, q in enumerate(report.inputs, 1):
        human, op, factor = input_conversion(q.key, q.unit, binary)
        ws.write_string(row, 0, q.key)
        if q.key in unset or q.value is None:
            ws.write_blank(row, INPUT_VALUE, None, f.input)
            ws.write_blank(row, INPUT_BASE, None)
        else:
            shown = Exact(q.value * round(1 / factor) if factor < 1 else q.value / factor)
            ws.write_number(row, INPUT_VALUE, shown, f.input_int if float(shown).is_integer() else f.input_number)
            ws.write_number(row, INPUT_BASE, Exact(q.value), f.count if float(q.value).is_integer() else f.value)
            if op:
                ws.write_number(row, INPUT_WRITTEN, shown)
        ws.write_string(row, 2, human)
        ws.write_string(row, 3, q.source)
        ws.write_string(row, 4, q.meaning if not op else f"{q.meaning} (in {human}; base unit {q.unit})")
        wb.define_name(q.key, input_name_formula(row + 1, op))


def to_human_formula(reference: str, key: str, unit: str, binary: bool) -> tuple[str, str]:
    """(Excel formula of ``reference`` in its human unit, that unit): ``pool_bytes/1E9`` GB, ``decode_step_s*1000``
    ms; a unit without a human form is the reference itself."""
    human, factor = human_unit_of(key, unit, binary)
    if factor == 1:
        return f"={reference}", human
    if factor < 1:
        return f"={reference}*{round(1 / factor):d}", human
    return f"={reference}/{factor:.17g}", human


def human_value(value: object, key: str, unit: str, binary: bool) -> object:
    """A library value in its human unit, as ``to_human_formula`` computes it (text, bools and None pass through)."""
    if value is None or isinstance(value, (str, bool, np.bool_)):
        return value
    number = finite_or_none(value)
    if number is None:
        return None
    factor = human_unit_of(key, unit, binary)[1]
    return number * round(1 / factor) if factor < 1 else number / factor


def unexpressed(scenario: Any) -> list[str]:
    """What of the scenario the workbook's formulas cannot express, in words; empty where they express it all.

    The formulas compose one replica of tensor (and pipeline) parallel GPUs; the MoE layouts of issue 29 (attention
    data parallel ranks, experts spread over expert-parallel ranks, a MoE tensor-parallel size of their own, an
    expert load imbalance) change the weights per GPU and add an all-to-all the formulas do not hold, and speculative
    decoding makes the decode step an iteration of verification and drafter passes per accepted token. Where any is
    used, every result is written as the library's value and the workbook says so (never a different number).
    """
    g = scenario.gpu
    serving = (scenario.raw or {}).get("serving") or {}
    reasons = []
    if getattr(g, "attention_data_parallel", 1) != 1:
        reasons.append(f"attention data parallel ({g.attention_data_parallel} ranks)")
    if getattr(g, "expert_parallel", 1) != 1:
        reasons.append(f"expert parallel ({g.expert_parallel} ranks)")
    if isinstance(serving, dict) and serving.get("moe_tensor_parallel") not in (None, g.count):
        reasons.append(f"a MoE tensor-parallel size of its own ({serving['moe_tensor_parallel']})")
    if getattr(g, "expert_load_imbalance", 1.0) != 1.0:
        reasons.append(f"an expert load imbalance of {g.expert_load_imbalance:g}")
    if getattr(scenario.serving, "speculative", None):
        reasons.append(f"speculative decoding ({scenario.serving.speculative.get('method', 'drafting')}: the decode "
                       f"step is an iteration per accepted token, capacity.model.speculative)")
    m = scenario.model
    if getattr(m, "transformer_layers", None) and m.transformer_layers != m.layers:
        reasons.append(f"per-layer fixed costs over all {m.transformer_layers} layers of a hybrid model "
                       f"({m.layers} with a KV cache)")
    return reasons


def _write_results_sheet(wb: xlsxwriter.Workbook, f: Formats, values: dict[str, Value | bool], binary: bool,
                         formulas: bool = True) -> None:
    ws = wb.add_worksheet("Results", worksheet_class=Worksheet)
    header(ws, f, (("quantity", 34), ("value", 20), ("unit", 12), ("meaning", 70), ("in human units", 16),
                   ("unit", 10)))
    row = 1
    for section, keys in result_layout():
        row += 1
        ws.write_string(row, 0, section, f.section)
        row += 1
        for key in keys:
            unit, meaning = RESULTS.get(key) or INTERMEDIATES.get(key) or WORKBOOK_INTERMEDIATES[key]
            ws.write_string(row, 0, key)
            if formulas and key in FORMULAS:
                ws.write_formula(row, 1, "=" + FORMULAS[key], f.count if is_count(key, unit) else f.value,
                                 cached(values.get(key)))
            else:  # no formula expresses it: the library's value, said to be one (never a different number)
                _write_library_value(ws, row, values.get(key), f.value)
                meaning = f"{NO_FORMULA} {meaning}"
            ws.write_string(row, 2, unit)
            ws.write_string(row, 3, meaning)
            formula, human = to_human_formula(f"B{row + 1}", key, unit, binary)
            ws.write_formula(row, 4, formula, f.count if is_count(key, unit) and human == unit else f.human,
                             cached(human_value(values.get(key), key, unit, binary)))
            ws.write_string(row, 5, human)
            wb.define_name(key, f"=Results!$B${row + 1}")
            row += 1


#: Label of a value the workbook cannot compute: written as the library's number, and the cell says so.
NO_FORMULA = "LIBRARY VALUE, NOT A FORMULA: the workbook cannot express this result, and editing inputs leaves it."


def _write_library_value(ws, row: int, value: object, style) -> None:
    value = cached(value)
    if isinstance(value, bool):
        ws.write_boolean(row, 1, value, style)
    elif isinstance(value, str):
        ws.write_string(row, 1, value, style)
    else:
        ws.write_number(row, 1, value, style)
    ws.write_comment(row, 1, NO_FORMULA)


def engine_rows(report: Report) -> list[tuple[str, str]]:
    """Report-sheet rows on the engine profile: each rule the library applies, and how the workbook takes it (a
    live formula, or an input the engine derived at export that no formula recomputes when other inputs change)."""
    s = report.scenario
    x = complete_inputs(flat_inputs(s))
    live, fixed = [], []
    if x["kv_free_fraction"] > 0:
        live.append("KV pool = kv_free_fraction x (gpu_memory_bytes - weight_bytes_per_gpu - reserved_bytes) "
                    "(engines.pool_bytes_of_free; memory_utilization is then unused)")
    if x["batched_prefill"] > 0:
        live.append("prompts batched into prefill passes of max_batched_tokens tokens: prefill_gpu_s, a prompt's "
                    "share of such a pass, sets the ceiling and the TPOT; TTFT waits for the plain prefill_s "
                    "(engines.batched_prefill_s)")
    if x["bandwidth_half_bytes"] > 0 or x["flops_half_tokens"] > 0:
        live.append("efficiency curves: every pass moves its bytes plus layers x bandwidth_half_bytes and its tokens "
                    "plus flops_half_tokens at the plateau bandwidth and flops (roofline.curve_amount)")
        fixed.append("bandwidth_half_bytes (the kernels' fixed time per layer x the peak bandwidth), bandwidth and "
                     "flops (peak x the fitted efficiency) were computed at export: editing the bandwidth leaves "
                     "bandwidth_half_bytes as it is")
    if x["reserved_bytes"] > 0 and any("activation peak" in line for line in s.serving.engine_defaults):
        fixed.append("reserved_bytes includes the activation peak the engine reserves for max_batched_tokens tokens "
                     "(engines.activation_peak_bytes, from the model's hidden and intermediate sizes, not inputs "
                     "here): editing max_batched_tokens leaves reserved_bytes as it is")
    if not s.serving.engine and not live:
        return []
    rows = [("engine", f"{s.serving.engine or 'none'}: every rule below is applied on the Results sheet")]
    rows += [(f"engine rule {i} (formula)", text) for i, text in enumerate(live, 1)]
    rows += [(f"engine input {i} (value)", text) for i, text in enumerate(fixed, 1)]
    return rows


def workbook_bytes(report: Report) -> bytes:
    """The report as XLSX bytes: Report, Inputs, Results (live formulas) and Solver sheets; Classes for a mix."""
    buffer = io.BytesIO()
    wb = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False})
    wb.set_calc_mode("auto")  # XlsxWriter also sets fullCalcOnLoad, so Excel recomputes on open
    wb.set_properties({"title": f"Sizing report: {report.name}", "comments": f"capacity {report.tool_version}"})
    formats = Formats(wb)
    intermediates, traces = library_run(report)
    values: dict[str, Value | bool] = {**{q.key: q.value for q in report.outputs}, **intermediates}
    binary = report.scenario.units == "GiB"
    reasons = unexpressed(report.scenario)
    write_summary_sheet(wb, formats, report, values, reasons)
    _write_report_sheet(wb, formats, report)
    _write_inputs_sheet(wb, formats, report)
    _write_results_sheet(wb, formats, values, binary, formulas=not reasons)
    write_solver_sheet(wb, formats, traces, values)
    from capacity.model.percentiles import sized_per_class

    if sized_per_class(report.scenario):  # a mix or a percentile promise: the per-class sizing (xlsx/classes.py)
        from capacity.render.xlsx.classes import write_classes_sheet

        write_classes_sheet(wb, formats, report)
    wb.close()
    return buffer.getvalue()


def write_xlsx(report: Report, path: str | Path) -> None:
    """Write the workbook atomically (temporary file, then rename); ScenarioError if ``path`` is not writable."""
    write_atomic(path, workbook_bytes(report))
