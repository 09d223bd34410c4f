"""The sizing report as an XLSX workbook whose results are live Excel formulas.

Sheets: ``Report`` (name, version, date, binding resource, assumptions, notes), ``Inputs`` (one row per
``analysis.INPUTS`` key; the value cell carries a defined name equal to the key, in base units; a blank cell means
an unset option: no limit, no promise, no price), ``Results`` (one row per ``analysis.RESULTS`` key and per
``analysis.INTERMEDIATES`` and ``formulas.WORKBOOK_INTERMEDIATES`` key: a formula over the input names, its cell
named after the key) and ``Solver`` (the root solves the library runs, Chandrupatla's method as in
``solve.solve_rising``, unrolled into ``SOLVER_ITERATIONS`` rows of formulas each; no macros). Edit an input in
Excel or LibreOffice and every result recomputes. Cached values are the library's (``analysis.analyse(...,
intermediates=True, trace=...)``), so readers that do not calculate see the same numbers. Undefined or unbounded
results (the library's inf/NaN, JSON null) are ``#N/A``. Inputs are written with 17 significant digits, so the
formulas start from the library's numbers to the last bit.

The package splits the job: ``formulas`` (the Excel text of every result and intermediate), ``solver`` (the
Solver sheet: solve formulas, and the rows of the library's traces), ``cells`` (exact numbers, cached values,
formats) and ``writer`` (the sheets and the workbook). The writer maps the library's results, intermediates and
traces to cells; it computes nothing of the model itself.
"""

from capacity.model.analysis import INTERMEDIATES
from capacity.render.xlsx.formulas import FORMULAS, WORKBOOK_INTERMEDIATES, excel_of, missing_formulas
from capacity.render.xlsx.solver import SOLVER_ITERATIONS, SOLVERS, STATE_COLUMNS, Solver, trace_rows
from capacity.render.xlsx.writer import (
           intermediate_values,
           library_run,
           result_layout,
           solver_traces,
           workbook_bytes,
           write_xlsx,
)

__all__ = ["FORMULAS", "INTERMEDIATES", "SOLVERS", "SOLVER_ITERATIONS", "STATE_COLUMNS", "Solver",
           "WORKBOOK_INTERMEDIATES", "excel_of",
           "intermediate_values", "library_run", "missing_formulas", "result_layout", "solver_traces", "trace_rows",
           "workbook_bytes", "write_xlsx"]
