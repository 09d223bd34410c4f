"""The Solver sheet: the library's root solves (Chandrupatla's method, ``solve.solve_rising``), one iteration a row.

Each solve of ``SOLVERS`` is a block of rows: its result (a defined name the Results formulas use), the search
range, the excess at the range ends, then ``SOLVER_ITERATIONS`` rows of formulas, each the state after the row
above, the next point, the columns that evaluate the excess there, and the excess. No macros. The cached values
are the library's own: ``analysis.analyse(..., trace=...)`` records every value a solve takes
(``solve.SolveTrace``), so the sheet shows the library's iterations, not a copy of them. A solve the library does
not run (no promise, no load) leaves its rows without cached values (#N/A until the workbook is recalculated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import xlsxwriter
from xlsxwriter.utility import xl_rowcol_to_cell

from capacity.formulas.solve import MAX_ITERATIONS, SolveTrace
from capacity.formulas.solve import RTOL as RATE_RTOL
from capacity.model.serving_modes import RTOL as CHUNK_RTOL
from capacity.render.xlsx.cells import Formats, Worksheet, cached
from capacity.render.xlsx.formulas import (
    _LOAD,
    ENGINE_TTFT_SLO,
    _chunk_carrying,
    _chunk_plain,
    _chunk_rate,
    _chunk_tokens,
    _chunk_tpot,
    _chunk_ttft,
    _decode_step_at,
    _step,
    _sub,
    _tpot_closed,
    _tpot_denominators,
    _tpot_from,
    _ttft_queue,
)

#: Iterations the Solver sheet unrolls per solve: the library's cap (``solve.MAX_ITERATIONS``), so every row
#: the library can take has a formula row.
SOLVER_ITERATIONS = MAX_ITERATIONS

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
    d_mem, d_comp = _tpot_denominators(x, "prefill_gpu_s")
    return {"d_mem": d_mem, "d_comp": d_comp,
            "decode step": _tpot_from(c["d_mem"], c["d_comp"], f"*(1-{x}*prefill_gpu_s)"),
            "TTFT": _ttft_queue(x, c["decode step"]), "f": _ratio_excess(ENGINE_TTFT_SLO, c["TTFT"])}


def _ttft_bracket() -> tuple[tuple[str, Callable[[Cells], str]], ...]:
    """``slo._ttft_bracket``: bounds ``lo <= root <= up`` from two quadratics."""
    return (
        ("y", lambda c: f"MAX({ENGINE_TTFT_SLO}-prefill_s,0)"),
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
    """Longest MoE TPOT with an answer (``analysis.tpot_at_rates_s``): ``B_max / (λ A)`` within [10^4, 10^12] s."""
    return f"IF({rate}>0,MIN(MAX(batch_max/({rate}*output_tokens),1E4),1E12),1E4)"


def _tpot_top(rate: str) -> str:
    """Upper end of the MoE TPOT search (``analysis.tpot_at_rates_s``): the longest, or the pieces' closed form
    (every expert read) where that is shorter."""
    longest = _longest_tpot(rate)
    return f"IFERROR(MIN({longest},{_tpot_closed(rate, 'prefill_gpu_s')}),{longest})"


def _tpot_found(rate: str) -> str:
    """TRUE where a fixed point lies below the longest TPOT (``slo.tpot_at_rate_rows``): t_step(λ A L) <= L (1 - λ t_p)
    and decode has time left (1 - λ t_p > 0)."""
    longest = _longest_tpot(rate)
    return (f"AND({_step(f'{rate}*output_tokens*{longest}')}<={longest}*(1-{rate}*prefill_gpu_s),"
            f"(1-{rate}*prefill_gpu_s)>0)")


_TPOT_OR_1 = "IF(ISBLANK(tpot_slo_s),1,tpot_slo_s)"  # the library's stand-in promise where none is set


def _moe_rate_evaluate(x: str, c: Cells) -> dict[str, str]:
    return {"decode step": _step(f"{x}*output_tokens*{_TPOT_OR_1}"),
            "f": _sub(c["decode step"], f"{_TPOT_OR_1}*(1-{x}*prefill_gpu_s)")}


def _moe_tpot_evaluate(rate: str) -> Callable[[str, Cells], dict[str, str]]:
    def evaluate(s: str, c: Cells) -> dict[str, str]:
        return {"decode step": _step(f"{rate}*output_tokens*{s}"), "f": _sub(f"{s}*(1-{rate}*prefill_gpu_s)",
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
           "f = 1 - D / TTFT(λ), the decode step from the dense pieces)", RATE_RTOL, "MAX(ceiling_rps,0)",
           lambda s: "ISBLANK(ttft_slo_s)", ("d_mem", "d_comp", "decode step", "TTFT"), _ttft_evaluate,
           lambda answer, s: f"IF(ISBLANK(ttft_slo_s),NA(),{answer})", _ttft_bracket()),
    Solver("solver_rate_tpot_rps", "requests/s", "MoE: largest λ with t_step(λ A T) <= T (1 - λ t_p) "
           "(slo.max_rate_for_tpot_rows; f = t_step(λ A T) - T (1 - λ t_p))", RATE_RTOL,
           "MIN(1/prefill_gpu_s,MAX(ceiling_rps,0)*2+1E-9)", lambda s: "ISBLANK(tpot_slo_s)", ("decode step",),
           _moe_rate_evaluate, lambda answer, s: f"IF(ISBLANK(tpot_slo_s),NA(),{answer})"),
    Solver("solver_tpot_at_goodput_s", "s", "MoE: smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the goodput "
           "(slo.tpot_at_rate_rows; f = s (1 - λ t_p) - t_step(λ A s))", RATE_RTOL, _tpot_top("goodput_rps"),
           lambda s: f"NOT({_tpot_found('goodput_rps')})", ("decode step",),
           _moe_tpot_evaluate("goodput_rps"), lambda answer, s: f"IF({s['no target']},NA(),{answer})"),
    Solver("solver_tpot_at_load_s", "s", "MoE: smallest TPOT s with t_step(λ A s) <= s (1 - λ t_p) at the load "
           "(slo.tpot_at_rate_rows)", RATE_RTOL, _tpot_top(_LOAD),
           lambda s: f"NOT(AND({_LOAD}>0,{_tpot_found(_LOAD)}))", ("decode step",),
           _moe_tpot_evaluate(_LOAD), lambda answer, s: f"IF({s['no target']},NA(),{answer})"),
    Solver("solver_chunk_batch_tpot", "sequences", "chunked prefill: largest batch B with T(B) <= T "
           "(options.chunked; f = T(B) - T)", CHUNK_RTOL, "chunk_batch_ceiling", lambda s: "ISBLANK(tpot_slo_s)",
           _CHUNK_HELPERS, _chunk_evaluate(lambda x, c: _sub(c["tpot"], "tpot_slo_s")), lambda answer, s: answer),
    Solver("solver_chunk_batch_goodput", "sequences", "chunked prefill: largest batch B up to the TPOT's with "
           "TTFT(B) <= D (options.chunked; f = 1 - D / TTFT(B))", CHUNK_RTOL, "solver_chunk_batch_tpot",
           lambda s: "ISBLANK(ttft_slo_s)", _CHUNK_TTFT_HELPERS,
           _chunk_evaluate(lambda x, c: _ratio_excess(ENGINE_TTFT_SLO, c["ttft"])), lambda answer, s: answer),
    Solver("solver_chunk_batch_load", "sequences", "chunked prefill: the batch B the arrival rate holds, "
           "B = λ A T(B) (options.chunked; f = B - λ A T(B))", CHUNK_RTOL, "chunk_batch_ceiling",
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


def write_solver_sheet(wb: xlsxwriter.Workbook, f: Formats, traces: dict[str, SolveTrace],
                       results: dict[str, object]) -> None:
    """Each solve of ``SOLVERS`` as one block of rows, one under the other (``_write_solve``); ``traces`` and
    ``results`` (the solves' named results) from ``analysis.analyse(..., intermediates=True, trace=...)``."""
    ws = wb.add_worksheet("Solver", worksheet_class=Worksheet)
    ws.set_column(0, 0, 24)
    ws.set_column(1, 1 + len(STATE_COLUMNS) + 1 + max(len(s.helpers) for s in SOLVERS) + 1, 14)
    ws.write_string(0, 0, "The root solves the library runs row by row "
                          "(capacity/formulas/solve.py: Chandrupatla's method, "
                          "inverse quadratic interpolation or bisection inside a bracket), one iteration per row; "
                          "dense TPOT bounds use the closed form on Results.", f.section)
    row = 2
    for solver in SOLVERS:
        row = _write_solve(wb, ws, f, solver, traces[solver.name], results.get(solver.name), row) + 2


def trace_rows(trace: SolveTrace, helpers: tuple[str, ...], iterations: int = SOLVER_ITERATIONS) -> list[dict]:
    """The values of the sheet's iteration rows from a solve's trace: row 0 the state before the first iteration,
    row k the state after iteration k; each with the point the iteration visits, its columns and its excess. Once
    done a row keeps the state and its point reads 0 (as its formulas do). Empty where the solve did not run."""
    if not trace.start:
        return []
    done0 = trace.no_target or trace.start["done"] or trace.ends["at top"]["f"] <= 0
    states = [{**trace.start, "done": done0}, *trace.steps]
    rows = []
    for k in range(iterations + 1):
        state = states[min(k, len(states) - 1)]
        row = {name: state[name] for name in STATE_COLUMNS}
        done = bool(row["done"]) or k >= len(states)
        row["done"] = done or bool(row["done"])
        if k < iterations:
            point = trace.steps[k] if not done and k < len(trace.steps) else None
            row.update({"x": point["x"] if point else 0.0, "f": point["f"] if point else 0.0,
                        **{h: point[h] if point else 0.0 for h in helpers}})
        rows.append(row)
    return rows


def _write_solve(wb: xlsxwriter.Workbook, ws, f: Formats, solver: Solver, trace: SolveTrace, result: object,
                 row: int) -> int:
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
    ran = bool(trace.start) or not trace.no_target
    values: dict[str, object] = {"result": result, "answer": trace.answer, "hi": trace.hi, "no target": trace.no_target,
                                 **({**trace.bracket, "top": trace.top, "bottom": trace.bottom} if ran else {})}
    for i, label in enumerate(labels):
        ws.write_string(row + 1 + i, 0, label)
        ws.write_formula(row + 1 + i, 1, "=" + setup[label], f.value, cached(values.get(label)))
    ws.write_string(row + 1, 2, solver.unit)
    wb.define_name(solver.name, f"=Solver!{xl_rowcol_to_cell(row + 1, 1, row_abs=True, col_abs=True)}")
    for i, name in enumerate(columns):
        ws.write_string(header, i, name, f.header)

    def write_point(r: int, x: str, point: dict, guard: str | None) -> None:
        cells = row_cells(r)
        formulas = {"x": x, **solver.evaluate(cells["x"], cells)}
        for name in ("x", *solver.helpers, "f"):
            formula = formulas[name] if guard is None or name == "x" else f"IF({guard},0,{formulas[name]})"
            ws.write_formula(r, col[name], "=" + formula, f.value, cached(point.get(name)))

    for i, label in enumerate(points):
        ws.write_string(header + 1 + i, 0, label)
        write_point(header + 1 + i, {"at top": s["top"], "at bottom": s["bottom"], "at 0": "0"}[label],
                    trace.ends.get(label, {}), None)
    rows = trace_rows(trace, solver.helpers)
    for k in range(SOLVER_ITERATIONS + 1):
        values_k = rows[k] if rows else {}
        r, cells = first + k, row_cells(first + k)
        ws.write_number(r, 0, k)
        formulas = (_first_row_formulas(cells, s, bracketed) if k == 0
                    else _iteration_formulas(row_cells(r - 1), cells, solver.rtol))
        for name in STATE_COLUMNS:
            if name in formulas:
                ws.write_formula(r, col[name], "=" + formulas[name], f.value, cached(values_k.get(name)))
            else:
                ws.write_number(r, col[name], 0.5, f.value)  # t of the first row: the library starts at 1/2
        if k < SOLVER_ITERATIONS:
            write_point(r, f"IF({cells['done']},0,{cells['x1']}+{cells['t']}*({cells['x2']}-{cells['x1']}))",
                        values_k, cells["done"])
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
