"""Sweeps: a scenario evaluated over a grid of inputs in one vectorised call, written as a table.

``--vary KEY=START:STOP:STEPS`` gives ``STEPS`` evenly spaced values from START to STOP
(inclusive). KEY is a scenario path (``serving.memory_utilization``, ``workload.prompt_tokens``,
``slo.tpot``, ``gpu.bandwidth`` ...) or a flat input name of ``analysis.INPUTS``
(``memory_utilization``, ``tpot_slo_s``, ``bandwidth`` ...). START and STOP take units where
the quantity has them (``slo.tpot=20ms:100ms:5``, ``gpu.memory=40GB:80GB:3``). Scenario paths
mean what the scenario file means: ``gpu.bandwidth`` and ``gpu.flops`` are peak figures
(scaled by the scenario's efficiencies), the flat ``bandwidth`` and ``flops`` are effective.
Token counts, layers, heads, block sizes and GPU counts are rounded to whole numbers
(repeated values dropped). Several ``--vary`` build the full grid (their product).

The table has one row per grid point: every flat input (base units), every result, and
``problem``: empty, or why no engine would accept that row (its results are then blank).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import checks
from .analysis import INPUTS, RESULTS, analyse
from .csv_safe import frame_to_csv
from .errors import ScenarioError, show
from .formatting import human_number, human_unit_of
from .report import INPUT_PATHS, flat_inputs, today_iso
from .scenario import Scenario
from .specs import GPU_FIELDS, MODEL_FIELDS, SERVING_FIELDS, SLO_FIELDS, WORKLOAD_FIELDS, as_number
from .units import BASE_UNIT, parse_quantity

#: Most grid points one sweep evaluates (product of the STEPS).
MAX_ROWS = 1_000_000
#: Most rows a JSON or XLSX sweep holds: both are built in memory (about 30 kB and 1 ms of JSON, 2 ms of XLSX per
#: row of ~100 columns, measured); CSV and Parquet take up to MAX_ROWS.
MAX_ROWS_BY_FORMAT = {"json": 20_000, "xlsx": 20_000}
FORMATS = ("csv", "xlsx", "parquet", "json")

_FIELDS = {"model": MODEL_FIELDS, "gpu": GPU_FIELDS, "serving": SERVING_FIELDS, "workload": WORKLOAD_FIELDS,
           "slo": SLO_FIELDS}
#: Scenario path -> flat input (kv_dtype is a name, not a number; engine reserves are a sum of three keys).
PATHS: dict[str, str] = {f"{sec}.{key}": flat for flat, (sec, key) in INPUT_PATHS.items()
                         if flat in INPUTS and key != "kv_dtype" and "|" not in key}
#: Flat inputs that are whole numbers.
INTEGER_INPUTS = {"layers", "kv_heads", "head_dim", "gpu_count", "block_size", "max_model_len", "max_num_seqs",
                  "prompt_tokens", "output_tokens", "shared_prefix_tokens", "experts", "experts_per_token",
                  "pipeline_parallel", "replicas"}
_KIND = {unit: kind for kind, unit in BASE_UNIT.items()}


@dataclass(frozen=True, slots=True)
class Axis:
    """One ``--vary``: the key as written, the flat input it sets, and its values in base units (effective)."""

    key: str
    input: str
    values: np.ndarray


def _resolve(key: str) -> tuple[str, str]:
    """(flat input, scenario path or '' when none checks it) for a key given either way; ScenarioError otherwise."""
    if key in PATHS:
        return PATHS[key], key
    if key in INPUTS:
        path = next((p for p, flat in PATHS.items() if flat == key), "")
        return key, path
    raise ScenarioError(f"--vary {key}: not a scenario key; use one of {', '.join(PATHS)} "
                        f"or a flat input name ({', '.join(INPUTS)})")


def parse_vary(spec: str, scenario: Scenario) -> Axis:
    """Parse ``KEY=START:STOP:STEPS`` into an Axis, checking every value as the scenario file would."""
    key, sep, rng = spec.partition("=")
    parts = rng.split(":")
    if not sep or len(parts) != 3:
        raise ScenarioError(f"--vary {spec!r} must look like KEY=START:STOP:STEPS, e.g. "
                            f"serving.memory_utilization=0.7:0.95:6")
    key = key.strip()
    flat, path = _resolve(key)
    kind = _KIND.get(INPUTS[flat][0])
    start, stop = (_number(text, kind, key) for text in parts[:2])
    try:
        if len(parts[2].strip()) > 30:
            raise ValueError
        steps = int(parts[2])
    except ValueError:
        raise ScenarioError(f"--vary {key}: STEPS must be a whole number up to {MAX_ROWS:,}, got "
                            f"{show(parts[2])}") from None
    if steps < 1 or (steps == 1 and start != stop):
        raise ScenarioError(f"--vary {key}: STEPS must be >= 2 (or 1 with START = STOP), got {steps}")
    if steps > MAX_ROWS:  # checked before the values are allocated (10^9 steps would take 8 GB)
        raise ScenarioError(f"--vary {key}: {steps:,} STEPS is over the limit of {MAX_ROWS:,} grid points")
    values = np.linspace(start, stop, steps)
    if flat in INTEGER_INPUTS:
        values = np.array(list(dict.fromkeys(np.round(values).tolist())), dtype=float)
    if path:
        section, yaml_key = path.split(".")
        check = _FIELDS[section][yaml_key]
        for value in values:
            check(int(value) if flat in INTEGER_INPUTS else float(value), path)
    elif np.any(values < 0):
        raise ScenarioError(f"--vary {key}: values must be >= 0")
    if key in ("gpu.bandwidth", "gpu.flops"):  # the scenario's peak figure: scale it like the scenario does
        g = scenario.gpu
        values = values * (g.bandwidth_efficiency if key == "gpu.bandwidth" else g.flops_efficiency)
    if key == "gpu.interconnect_bandwidth":  # vendors state both directions; the all-reduce sends one way
        values = values / 2
    return Axis(key, flat, values)


def _number(text: str, kind: str | None, key: str) -> float:
    if kind is not None:
        return parse_quantity(text.strip(), kind, f"--vary {key}")
    return as_number(text, f"--vary {key}")


def grid_inputs(scenario: Scenario, axes: list[Axis]) -> dict[str, np.ndarray]:
    """Flat inputs over the full grid of ``axes`` (one row per point, row-major in the order given)."""
    seen = [a.input for a in axes]
    if len(set(seen)) != len(seen):
        raise ScenarioError(f"--vary sets the same input twice: {', '.join(seen)}")
    rows = math.prod(len(a.values) for a in axes)
    if rows > MAX_ROWS:
        raise ScenarioError(f"the sweep has {rows:,} grid points; the limit is {MAX_ROWS:,} (use fewer STEPS)")
    mesh = np.meshgrid(*[a.values for a in axes], indexing="ij")
    base = flat_inputs(scenario)
    inputs = {key: np.full(rows, base[key]) for key in INPUTS}
    for axis, values in zip(axes, mesh, strict=True):
        inputs[axis.input] = values.ravel()
    if scenario.serving.max_model_len is None and "max_model_len" not in seen:
        inputs["max_model_len"] = inputs["prompt_tokens"] + inputs["output_tokens"]  # as Scenario.inputs() does
    return inputs


def row_problems(scenario: Scenario, x: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, why no engine would accept it (``checks.row_problems``, what ``Scenario.check`` runs); '' if valid."""
    return checks.row_problems(x, scenario.model.attention_heads or 0)


def run_sweep(scenario: Scenario, specs: list[str]) -> pd.DataFrame:
    """Evaluate ``scenario`` over the grid of ``--vary`` specs in one ``analyse`` call; one row per point."""
    if not specs:
        raise ScenarioError("sweep needs at least one --vary KEY=START:STOP:STEPS")
    axes = [parse_vary(spec, scenario) for spec in specs]
    x = grid_inputs(scenario, axes)
    results = analyse(x)
    problem = row_problems(scenario, x)
    bad = problem != ""
    columns: dict[str, Any] = {}
    varied = [a.input for a in axes]
    for key in [*varied, *[k for k in INPUTS if k not in varied]]:
        columns[key] = _column(key, x[key], INPUTS[key][0], np.zeros_like(bad))
    for key in RESULTS:
        columns[key] = _column(key, np.broadcast_to(results[key], bad.shape), RESULTS[key][0], bad)
    columns["problem"] = problem
    return pd.DataFrame(columns)


def _column(key: str, values: np.ndarray, unit: str, blank: np.ndarray) -> pd.Series:
    """Non-finite values and invalid rows become missing; whole-number quantities become nullable ints."""
    if values.dtype.kind in "US":
        return pd.Series(np.where(blank, None, values.astype(object)), dtype=object)
    v = np.where(blank | ~np.isfinite(values), np.nan, values.astype(float))
    whole = key in INTEGER_INPUTS or (unit in ("B", "blocks", "requests") and key != "goodput_in_flight")
    if whole and np.all(np.isnan(v) | (v == np.round(v))):
        return pd.Series(v).astype("Int64")
    return pd.Series(v)


def units_of(columns: list[str]) -> dict[str, str]:
    """Unit of each sweep column (base units)."""
    table = {**{k: u for k, (u, _) in INPUTS.items()}, **{k: u for k, (u, _) in RESULTS.items()}}
    return {c: table.get(c, "") for c in columns}


# --- writers: table -> bytes -----------------------------------------------------------------------------------

def human_table(table: pd.DataFrame, binary: bool = False) -> pd.DataFrame:
    """The sweep in human units, one unit per column named in its header (``pool_bytes [GB]``, ``decode_step_s
    [ms]``, ``goodput_rps [requests/s]``), values rounded to 4 significant digits (``formatting.human_number``)."""
    out = {}
    for name, unit in units_of(list(table.columns)).items():
        column = table[name]
        if unit and pd.api.types.is_numeric_dtype(column):
            human, factor = human_unit_of(name, unit, binary)
            values = column.astype(float) / factor
            column = values.map(lambda v: v if pd.isna(v) else human_number(v))
            present = column.dropna()
            if len(present) and (present == present.round()).all() and (present.abs() < 2**53).all():
                column = column.astype("Int64")
            unit = human
        out[f"{name} [{unit}]" if unit else name] = column
    return pd.DataFrame(out)


def to_csv_bytes(table: pd.DataFrame, units: str = "base", binary: bool = False) -> bytes:
    """CSV with a header of keys (units: ``units_of``); text cells neutralised against formula injection.

    ``units="human"``: the header names each column's unit and the values are in it (``human_table``)."""
    return frame_to_csv(human_table(table, binary) if units == "human" else table).encode("utf-8")


def to_json_bytes(table: pd.DataFrame, meta: dict[str, Any]) -> bytes:
    """``{..meta, "units": {column: unit}, "rows": [{column: value}]}``; missing values are null."""
    rows = table.astype(object).where(table.notna(), None).to_dict("records")
    data = {**meta, "units": units_of(list(table.columns)), "rows": rows}
    return (json.dumps(data, indent=1, default=_json_default) + "\n").encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def to_parquet_bytes(table: pd.DataFrame, meta: dict[str, Any]) -> bytes:
    """Parquet (needs pyarrow) with the units and sweep description in the schema metadata."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ScenarioError("--format parquet needs pyarrow (pip install pyarrow); use csv, xlsx or json") from None
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    extra = {b"capacity": json.dumps({**meta, "units": units_of(list(table.columns))}).encode("utf-8")}
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), **extra})
    buffer = io.BytesIO()
    pq.write_table(arrow, buffer)
    return buffer.getvalue()


def to_xlsx_bytes(table: pd.DataFrame, meta: dict[str, Any]) -> bytes:
    """XLSX: a ``Sweep`` sheet (header of keys, one row per point, blank = missing), ``Units`` and ``About``."""
    import xlsxwriter

    buffer = io.BytesIO()
    wb = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False})
    bold = wb.add_format({"bold": True})
    ws = wb.add_worksheet("Sweep")
    for col, name in enumerate(table.columns):
        ws.write_string(0, col, name, bold)
        for row, value in enumerate(table[name].tolist(), 1):
            if isinstance(value, str):
                ws.write_string(row, col, value)
            elif value is not None and value is not pd.NA and not (isinstance(value, float) and math.isnan(value)):
                ws.write_number(row, col, float(value))
    ws.freeze_panes(1, 0)
    units = wb.add_worksheet("Units")
    meanings = {**{k: m for k, (_, m) in INPUTS.items()}, **{k: m for k, (_, m) in RESULTS.items()}}
    for row, (name, unit) in enumerate([("column", "unit"), *units_of(list(table.columns)).items()]):
        units.write_string(row, 0, name, bold if row == 0 else None)
        units.write_string(row, 1, unit, bold if row == 0 else None)
        units.write_string(row, 2, "meaning" if row == 0 else meanings.get(name, "why the row is invalid, if it is"))
    add_sweep_chart(wb, table)
    about = wb.add_worksheet("About")
    for row, (name, value) in enumerate(meta.items()):
        about.write_string(row, 0, name, bold)
        about.write_string(row, 1, value if isinstance(value, str) else json.dumps(value))
    wb.close()
    return buffer.getvalue()


#: Results the sweep chart plots against the varied input, when the sweep has them.
CHART_RESULTS = ("goodput_rps", "ceiling_rps")


def varied_inputs(table: pd.DataFrame) -> list[str]:
    """Input columns that take more than one value in the sweep, in column order."""
    return [name for name in INPUTS if name in table.columns and table[name].nunique(dropna=True) > 1]


def add_sweep_chart(wb: Any, table: pd.DataFrame, max_series: int = 12) -> None:
    """A ``Chart`` sheet: goodput (and the ceiling, for a one-input sweep) against the first varied input, one
    line per value of the second varied input (up to ``max_series``). The plotted numbers are written beside the
    chart as a pivot of the Sweep sheet's rows, so the chart reads the workbook's own cells."""
    varied = varied_inputs(table)
    plotted = [key for key in CHART_RESULTS if key in table.columns]
    if not varied or not plotted or len(table) < 2:
        return
    x_key, group = varied[0], (varied[1] if len(varied) > 1 else None)
    rows = table[table.get("problem", pd.Series("", index=table.index)).fillna("") == ""]
    if group is None:
        pivot = rows.groupby(x_key)[plotted].first()
        labels = [(key, key) for key in plotted]
    else:
        values = sorted(rows[group].dropna().unique())[:max_series]
        pivot = rows[rows[group].isin(values)].pivot_table(index=x_key, columns=group, values=plotted[0],
                                                             aggfunc="first")
        labels = [(value, f"{group} = {value:g}") for value in values]
    sheet = wb.add_worksheet("Chart")
    bold = wb.add_format({"bold": True})
    sheet.write_string(0, 0, x_key, bold)
    for col, (_, label) in enumerate(labels, 1):
        sheet.write_string(0, col, label, bold)
    for row, (x, values) in enumerate(pivot.iterrows(), 1):
        sheet.write_number(row, 0, float(x))
        for col, (key, _) in enumerate(labels, 1):
            value = values.get(key)
            if value is not None and not pd.isna(value):
                sheet.write_number(row, col, float(value))
    chart = wb.add_chart({"type": "scatter", "subtype": "straight_with_markers"})
    last = len(pivot)
    for col, (_, label) in enumerate(labels, 1):
        chart.add_series({"name": label, "categories": ["Chart", 1, 0, last, 0],
                          "values": ["Chart", 1, col, last, col]})
    unit = RESULTS[plotted[0]][0]
    chart.set_title({"name": f"{plotted[0] if group else 'goodput and ceiling'} vs {x_key}"})
    chart.set_x_axis({"name": f"{x_key} [{INPUTS[x_key][0]}]"})
    chart.set_y_axis({"name": f"{plotted[0] if group else 'requests/s'} [{unit}]"})
    chart.set_size({"width": 720, "height": 420})
    sheet.insert_chart(1, len(labels) + 2, chart)


def sweep_bytes(scenario: Scenario, specs: list[str], fmt: str, date: str | None = None,
                units: str = "base") -> bytes:
    """Run the sweep and render it as ``fmt`` (csv, xlsx, parquet or json); ``units="human"``: csv only."""
    from . import __version__

    if fmt not in FORMATS:
        raise ScenarioError(f"--format {fmt!r} is not a sweep format; use one of {', '.join(FORMATS)}")
    if units not in ("base", "human") or (units == "human" and fmt != "csv"):
        raise ScenarioError(f"--units {units} is for csv output (base or human); {fmt} keeps base units")
    limit = MAX_ROWS_BY_FORMAT.get(fmt)
    if limit is not None and specs:
        rows = math.prod(len(parse_vary(spec, scenario).values) for spec in specs)
        if rows > limit:
            raise ScenarioError(f"the sweep has {rows:,} grid points; --format {fmt} is limited to {limit:,} rows "
                                f"(it is built in memory): use --format csv or parquet, or fewer STEPS")
    table = run_sweep(scenario, specs)
    meta = {"scenario": scenario.name, "tool_version": __version__, "date": date or today_iso(), "vary": list(specs),
            "values": "base units (B, B/s, FLOP/s, s, requests/s); blank/null = undefined, unbounded or invalid row"}
    if fmt == "csv":
        return to_csv_bytes(table, units, binary=scenario.units == "GiB")
    if fmt == "json":
        return to_json_bytes(table, meta)
    if fmt == "parquet":
        return to_parquet_bytes(table, meta)
    return to_xlsx_bytes(table, meta)


__all__ = ["FORMATS", "MAX_ROWS", "PATHS", "Axis", "grid_inputs", "parse_vary", "row_problems", "run_sweep",
           "sweep_bytes", "units_of"]
