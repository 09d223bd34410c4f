"""Sweeps: a scenario evaluated over a grid of inputs, in chunks, streamed into a table.

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

The grid is never held whole: ``CHUNK_ROWS`` points at a time are built from their grid indices,
evaluated (``frame.evaluate_arrays``) and handed to a pyarrow writer (CSV, Parquet) or the JSON
writer, so memory stays bounded whatever the size (about 150 MB above the interpreter for the
default chunk). Each chunk is evaluated in pieces on as many threads as the process has CPUs (``pieces``,
``threads.ordered_map``: numpy and Arrow release the GIL), put together in order, so the output is the same
bytes whatever the threads; a CSV sweep formats each piece on its thread too, and CSV text, pieces and chunks
in flight are bounded (about one chunk's results beside the chunk being written). Parquet chunks are written on
one background thread while the next chunk is evaluated (``_write_behind``: at most one write in flight, in
order). A Parquet sweep writes one row group per
chunk through ``parquet_stream.ParquetStream``, which keeps the footer's row groups in a spool rather than in
pyarrow's writer (90 KB of memory per row group there), so its peak does not grow with the rows. Arrow arrays are
built from numpy buffers, so a CSV or Parquet sweep never imports pandas. Before any work, ``check_room`` refuses
a grid too large for the disk (or, for XLSX and the in-memory ``run_sweep``, the memory) it would need.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from capacity.errors import ScenarioError, show
from capacity.fileio.csv_safe import frame_to_csv, neutralise
from capacity.inputs.specs import GPU_FIELDS, MODEL_FIELDS, SERVING_FIELDS, SLO_FIELDS, WORKLOAD_FIELDS, as_number
from capacity.inputs.units import BASE_UNIT, parse_quantity
from capacity.model import checks
from capacity.model.analysis import INPUTS, LABELS, RESULTS
from capacity.model.frame import evaluate_arrays
from capacity.model.scenario import Scenario
from capacity.render.formatting import human_number, human_unit_of
from capacity.render.report import INPUT_PATHS, flat_inputs, today_iso
from capacity.runtime.threads import default_threads, ordered_map

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: Most grid points a sweep held in memory evaluates (``run_sweep``'s DataFrame, XLSX): product of the STEPS.
MAX_ROWS = 1_000_000
#: Most grid points a streamed sweep (CSV, Parquet, JSON) evaluates; the disk check usually binds first.
STREAM_MAX_ROWS = 10_000_000_000
#: Rows an XLSX sheet holds below its header.
XLSX_MAX_ROWS = 1_048_575
#: Grid points evaluated and written at a time: 65,536 rows x ~110 float64 columns is ~60 MB of results.
CHUNK_ROWS = 65_536
#: Sweeps of at least this many rows show a progress bar on a terminal's stderr (``--progress`` forces it).
PROGRESS_MIN_ROWS = 200_000
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
                  "pipeline_parallel", "replicas", "concurrency"}
#: Results that are whole counts by construction (floors and ceilings of blocks and requests): int64 columns.
INTEGER_RESULTS = {k for k, (unit, _) in RESULTS.items() if unit in ("blocks", "requests")
                   and k not in ("goodput_in_flight", "closed_loop_batch")}  # Little's law: averages, not counts
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
        if len(parts[2].strip()) > 30 or not (parts[2].strip().isascii() and parts[2].strip().isdigit()):
            raise ValueError  # ASCII digits only: int() reads "٣" as 3
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


@dataclass(frozen=True)
class Grid:
    """The full grid of ``axes`` over a scenario, row-major in the order given; rows are built on demand."""

    scenario: Scenario
    axes: tuple[Axis, ...]
    base: dict[str, float] = field(repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def rows(self) -> int:
        return math.prod(self.shape)

    @property
    def varied(self) -> list[str]:
        return [a.input for a in self.axes]

    def inputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """Flat inputs of grid rows ``start`` to ``stop`` (default: all), from their grid indices."""
        return self.inputs_at(np.arange(start, self.rows if stop is None else stop))

    def coords(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, ...]:
        """Each grid row's index along each axis, for rows ``start`` to ``stop`` (row-major)."""
        return np.unravel_index(np.arange(start, self.rows if stop is None else stop), self.shape)

    def inputs_at(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Flat inputs of the grid rows ``index`` (flat, row-major)."""
        n = index.size
        x = {key: np.full(n, value) for key, value in self.base.items()}
        for axis, coord in zip(self.axes, np.unravel_index(index, self.shape), strict=True):
            x[axis.input] = axis.values[coord]
        if self.scenario.serving.max_model_len is None and "max_model_len" not in self.varied:
            x["max_model_len"] = x["prompt_tokens"] + x["output_tokens"]  # as Scenario.inputs() does
        return x


def make_grid(scenario: Scenario, specs: list[str]) -> Grid:
    """The grid of ``--vary`` specs (parsed and checked, nothing evaluated); ScenarioError on a bad spec."""
    if not specs:
        raise ScenarioError("sweep needs at least one --vary KEY=START:STOP:STEPS")
    axes = tuple(parse_vary(spec, scenario) for spec in specs)
    seen = [a.input for a in axes]
    if len(set(seen)) != len(seen):
        raise ScenarioError(f"--vary sets the same input twice: {', '.join(seen)}")
    return Grid(scenario, axes, flat_inputs(scenario))


def grid_inputs(scenario: Scenario, axes: list[Axis]) -> dict[str, np.ndarray]:
    """Flat inputs over the full grid of ``axes`` (one row per point, row-major in the order given)."""
    seen = [a.input for a in axes]
    if len(set(seen)) != len(seen):
        raise ScenarioError(f"--vary sets the same input twice: {', '.join(seen)}")
    grid = Grid(scenario, tuple(axes), flat_inputs(scenario))
    _refuse_in_memory(grid.rows)
    return grid.inputs()


def _refuse_in_memory(rows: int) -> None:
    if rows > MAX_ROWS:
        raise ScenarioError(f"the sweep has {rows:,} grid points; the limit is {MAX_ROWS:,} (use fewer STEPS)")


# --- why a row is invalid -------------------------------------------------------------------------------------

def row_problems(scenario: Scenario, x: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, why no engine would accept it (``checks.row_problems``, what ``Scenario.check`` runs); '' if valid."""
    return checks.row_problems(x, scenario.model.attention_heads or 0)


# --- the table, chunk by chunk, as Arrow record batches -------------------------------------------------------

def columns_of(grid: Grid) -> list[str]:
    """Column order: the varied inputs, the other inputs, every result, ``problem``."""
    return [*grid.varied, *[k for k in INPUTS if k not in grid.varied], *RESULTS, "problem"]


def arrow_schema(grid: Grid, meta: dict[str, Any] | None = None) -> pa.Schema:
    """Column types: whole-number inputs and counts int64, text dictionary-encoded, the rest float64."""
    import pyarrow as pa

    types = {**dict.fromkeys((*INTEGER_INPUTS, *INTEGER_RESULTS), pa.int64()),
             **dict.fromkeys(LABELS, pa.dictionary(pa.int8(), pa.string())),
             "problem": pa.dictionary(pa.int32(), pa.string())}
    schema = pa.schema([pa.field(name, types.get(name, pa.float64())) for name in columns_of(grid)])
    if meta is not None:
        schema = schema.with_metadata({b"capacity": json.dumps({**meta, "units": units_of(schema.names)})})
    return schema


# Arrow arrays are built from their buffers: ``pa.array`` imports pandas on its first call (0.3 s of a sweep).

def _arrow_column(values: np.ndarray, kind: pa.DataType, blank: np.ndarray | None) -> pa.Array:
    """Non-finite values (and ``blank`` rows) become nulls; int64 columns are checked whole before the cast."""
    import pyarrow as pa

    v = np.asarray(values, dtype=float)
    missing = ~np.isfinite(v) if blank is None else (blank | ~np.isfinite(v))
    if pa.types.is_integer(kind):
        v = np.where(missing, 0.0, v)
        whole = v.astype(np.int64)
        if not np.array_equal(whole, v):
            raise ValueError("a whole-number sweep column holds a fraction")  # a model bug: never write it truncated
        return _numbers(pa.int64(), whole, missing)
    return _numbers(pa.float64(), v, missing)


def _numbers(kind: pa.DataType, values: np.ndarray, missing: np.ndarray | None) -> pa.Array:
    """An Arrow array of ``kind`` holding ``values`` (1-D numpy of that type), null where ``missing``."""
    import pyarrow as pa

    data = np.ascontiguousarray(values)
    nulls = 0 if missing is None else int(np.count_nonzero(missing))
    bitmap = pa.py_buffer(np.packbits(~missing, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(kind, data.size, [bitmap, pa.py_buffer(data)], null_count=nulls)


def _strings(texts: list[str]) -> pa.Array:
    """An Arrow string array of ``texts``."""
    import pyarrow as pa

    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets),
                                                             pa.py_buffer(b"".join(encoded))])


def _dictionary_of(texts: np.ndarray) -> pa.DictionaryArray:
    """``texts`` (numpy of str) dictionary-encoded with int32 indices, the dictionary in order of first appearance."""
    import pyarrow as pa

    if texts.size and texts[0] == texts[-1] and bool(np.all(texts == texts[0])):
        labels, codes = [str(texts[0])], np.zeros(texts.size, dtype=np.int32)
    else:
        unique, first, inverse = np.unique(texts.astype(str), return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.size, dtype=np.int32)
        rank[order] = np.arange(order.size, dtype=np.int32)
        labels, codes = [str(u) for u in unique[order]], rank[inverse.reshape(-1)]
    return pa.DictionaryArray.from_arrays(_numbers(pa.int32(), codes, None), _strings(labels))


#: Fewest grid points of one piece: a chunk is evaluated (and CSV formatted) in pieces on several threads, each
#: at least this long so that numpy's per-call overhead stays small beside its array loops.
MIN_PIECE_ROWS = 8_192


def record_batches(grid: Grid, schema: pa.Schema, chunk_rows: int = CHUNK_ROWS,
                   index: np.ndarray | None = None, threads: int | None = None) -> Iterator[pa.RecordBatch]:
    """The sweep table ``chunk_rows`` grid points at a time (or the rows ``index``, one batch), as ``schema``.

    Each chunk is evaluated in pieces on ``threads`` threads (None: ``threads.default_threads()``; ``pieces``) and
    put together in order: the batches are the same whatever the threads, and at most about one chunk's results
    are in flight beside the chunk being put together.
    """
    if index is not None:
        x = grid.inputs_at(index)
        return iter([_batch(schema, x, *_evaluated(grid, x))])
    return _joined(grid, schema, chunk_rows, threads)


def _joined(grid: Grid, schema: pa.Schema, chunk_rows: int, threads: int | None) -> Iterator[pa.RecordBatch]:
    def piece(span: tuple[int, int, int]) -> tuple[bool, dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        chunk, start, stop = span
        x = grid.inputs(start, stop)
        return (stop == min((chunk + 1) * chunk_rows, grid.rows), x, *_evaluated(grid, x))

    parts: list[tuple] = []
    for part in ordered_map(piece, pieces(grid.rows, chunk_rows, threads), _threads(threads)):
        parts.append(part[1:])
        if part[0]:  # the chunk's last piece: put together, and let go of the pieces before the batch is used
            del part
            batch = _batch(schema, *_concatenated(parts))
            parts = []
            yield batch


def pieces(rows: int, chunk_rows: int, threads: int | None = None) -> list[tuple[int, int, int]]:
    """``(chunk, start, stop)`` of each piece: every chunk of ``chunk_rows`` grid points cut into as many pieces as
    threads (a power of two, each at least ``MIN_PIECE_ROWS`` points; one piece on one thread)."""
    k = 1
    while k * 2 <= _threads(threads) and chunk_rows // (k * 2) >= MIN_PIECE_ROWS:
        k *= 2
    size = -(-chunk_rows // k)
    return [(first // chunk_rows, start, min(start + size, first + chunk_rows, rows))
            for first in range(0, rows, chunk_rows) for start in range(first, min(first + chunk_rows, rows), size)]


def _threads(threads: int | None) -> int:
    return default_threads() if threads is None else max(int(threads), 1)


def _evaluated(grid: Grid, x: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(every result as full-length arrays, text results as codes; each row's problem, '' for a valid one)."""
    n = len(next(iter(x.values())))
    results = evaluate_arrays(x, max(n, 1), text=False, threads=1)
    return {key: np.broadcast_to(value, (n,)) for key, value in results.items()}, row_problems(grid.scenario, x)


def _concatenated(parts: list[tuple]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """The pieces of one chunk as one: (inputs, results, problems)."""
    if len(parts) == 1:
        return parts[0]
    joined = [{key: np.concatenate([p[i][key] for p in parts]) for key in parts[0][i]} for i in (0, 1)]
    return joined[0], joined[1], np.concatenate([p[2] for p in parts])


def _batch(schema: pa.Schema, x: dict[str, np.ndarray], results: dict[str, np.ndarray],
           problem: np.ndarray) -> pa.RecordBatch:
    """The sweep rows of inputs ``x`` (grid points), their results and problems, as a record batch of ``schema``."""
    import pyarrow as pa

    bad = problem != ""
    arrays = []
    for f in schema:
        name = f.name
        if name == "problem":
            arrays.append(_dictionary_of(problem))
        elif name in LABELS:
            codes = results[name].astype(np.int8)
            arrays.append(pa.DictionaryArray.from_arrays(_numbers(pa.int8(), codes, bad), _labels(name)))
        elif name in x:
            arrays.append(_arrow_column(x[name], f.type, None))
        else:
            arrays.append(_arrow_column(results[name], f.type, bad))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@cache
def _labels(key: str) -> pa.Array:
    """The dictionary of text result ``key`` (``analysis.LABELS``) as an Arrow string array."""
    return _strings([str(label) for label in LABELS[key]])


def run_sweep(scenario: Scenario, specs: list[str]) -> pd.DataFrame:
    """The sweep as a DataFrame (held in memory: at most ``MAX_ROWS`` points); one row per grid point.

    Whole-number columns are nullable integers, text columns strings ('' in ``problem`` for a valid row).
    """
    grid = make_grid(scenario, specs)
    _refuse_in_memory(grid.rows)
    return _frame(grid)


def units_of(columns: list[str]) -> dict[str, str]:
    """Unit of each sweep column (base units)."""
    table = {**{k: u for k, (u, _) in INPUTS.items()}, **{k: u for k, (u, _) in RESULTS.items()}}
    return {c: table.get(c, "") for c in columns}


# --- writers: batches -> a binary stream ----------------------------------------------------------------------

class Progress:
    """A one-line progress bar on a text stream (stderr): share done, rows, time spent and left."""

    def __init__(self, total: int, stream: IO[str] | None = None, every_s: float = 0.2) -> None:
        self.total, self.stream, self.every_s = total, stream or sys.stderr, every_s
        self.start = self.last = time.perf_counter()
        self.done = 0

    def update(self, rows: int) -> None:
        self.done += rows
        now = time.perf_counter()
        if now - self.last < self.every_s and self.done < self.total:
            return
        self.last = now
        share = self.done / self.total if self.total else 1.0
        spent = now - self.start
        left = spent / share - spent if share > 0 else math.inf
        bar = "#" * int(30 * share)
        self.stream.write(f"\rsweep [{bar:<30}] {share:4.0%} {self.done:,}/{self.total:,} rows, "
                          f"{spent:.1f} s, about {left:.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def human_table(table: pd.DataFrame, binary: bool = False) -> pd.DataFrame:
    """The sweep in human units, one unit per column named in its header (``pool_bytes [GB]``, ``decode_step_s
    [ms]``, ``goodput_rps [requests/s]``), values rounded to 4 significant digits (``formatting.human_number``)."""
    import pandas as pd

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


def write_sweep(grid: Grid, fmt: str, sink: IO[bytes], meta: dict[str, Any], chunk_rows: int = CHUNK_ROWS,
                progress: Progress | None = None, human: bool = False, binary: bool = False) -> int:
    """Evaluate ``grid`` chunk by chunk and write it to ``sink`` as ``fmt``; returns the rows written.

    ``human`` (csv only): each chunk in human units (``human_table``, GiB-based when ``binary``)."""
    if fmt == "xlsx":
        sink.write(to_xlsx_bytes(_frame(grid), meta))
        return grid.rows
    schema = arrow_schema(grid, meta if fmt == "parquet" else None)
    # A generator: nothing is evaluated before it is read. A Parquet sweep's writes take a core of their own (on a
    # background thread), so its chunks are evaluated on one thread fewer.
    threads = max(default_threads() - 1, 1) if fmt == "parquet" else None
    batches = record_batches(grid, schema, chunk_rows, threads=threads)
    written = 0
    if fmt == "csv" and human:
        for batch in batches:
            text = frame_to_csv(human_table(_labelled(batch.to_pandas()), binary))
            sink.write((text if not written else text.split("\n", 1)[1]).encode("utf-8"))
            written += _tick(progress, batch)
    elif fmt == "csv":
        sink.write((",".join(_csv_quote(neutralise(name)) for name in schema.names) + "\n").encode("utf-8"))

        def lines(span: tuple[int, int, int]) -> tuple[int, memoryview]:
            _, start, stop = span
            x = grid.inputs(start, stop)
            return stop - start, csv_text(_batch(schema, x, *_evaluated(grid, x)), grid.coords(start, stop))

        # Pieces formatted on several threads, written in order: the text is the same whatever the pieces.
        for rows, text in ordered_map(lines, pieces(grid.rows, chunk_rows), default_threads()):
            sink.write(text)
            written += rows
            if progress is not None:
                progress.update(rows)
    elif fmt == "parquet":
        from capacity.fileio.parquet_stream import ParquetStream

        with ParquetStream(sink, schema) as writer:  # pq.ParquetWriter's bytes, its footer not held in memory
            written = _write_behind(batches, lambda batch, _: writer.write_batch(batch), progress)
    else:
        head = json.dumps({**meta, "units": units_of(schema.names)}, indent=1)
        sink.write(head[:-2].encode("utf-8") + b',\n "rows": [')
        for batch in batches:
            rows = batch.to_pylist()
            sink.write(("," if written else "") .encode() + ",".join(
                "\n  " + json.dumps(row, default=_json_default) for row in rows).encode("utf-8"))
            written += _tick(progress, batch)
        sink.write(b"\n ]\n}\n")
    return written


def _write_behind(batches: Iterator[pa.RecordBatch], write: Callable[[pa.RecordBatch, int], None],
                  progress: Progress | None) -> int:
    """``write(batch, first row)`` for each batch on one background thread while the next batch is evaluated here
    (Arrow's writers and kernels release the GIL, so the two overlap on two cores); returns the rows written.

    One write is in flight at a time, so memory holds at most the batch being written and the one being built;
    batches are written in order, and an error in a write is raised here, at the latest after the last batch.
    """
    from concurrent.futures import ThreadPoolExecutor

    written = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-writer") as pool:
        pending: tuple[Any, pa.RecordBatch] | None = None
        for batch in _and_end(batches):
            if pending is not None:
                pending[0].result()
                written += _tick(progress, pending[1])
            pending = None if batch is None else (pool.submit(write, batch, written), batch)
    return written


def _and_end(items: Iterator[Any]) -> Iterator[Any]:
    """The items, then None."""
    yield from items
    yield None


def _csv_quote(text: str) -> str:
    """A CSV field for ``text``: quoted (quotes doubled) when it holds a delimiter, quote or line break."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\r\n') else text


def csv_text(batch: pa.RecordBatch, coords: tuple[np.ndarray, ...] = ()) -> memoryview:
    """The CSV lines of one batch (no header): numbers in Arrow's shortest round-trip form (what
    ``pyarrow.csv`` writes), nulls empty, text cells neutralised against formula injection (``report.neutralise``)
    and quoted where they hold a delimiter. Text columns are dictionary-encoded (``record_batches``).

    Each number is formatted once: a column constant over the batch is one scalar; a column that depends on one
    grid axis only (``coords``: each row's index along each axis, ``Grid.coords``) is formatted once per value of
    that axis; a column with few distinct values is formatted per distinct value. Neighbouring fields of one axis
    (and constants) are joined per axis value first, then gathered once per row; one Arrow kernel joins the fields
    of every row, and the joined buffer is the CSV text (no copy through Python strings).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    firsts = [_first_rows(c) for c in coords]
    # Fields: ("const", str), ("axis", axis, strings per axis value), ("row", strings per row).
    fields: list[tuple] = []
    for col in batch.columns:
        if pa.types.is_dictionary(col.type):
            labels = _strings([_csv_quote(neutralise(str(t))) for t in col.dictionary.to_pylist()])
            fields.append(("row", pc.take(labels, col.indices)))
            continue
        valid = _validity(col)
        bits = _bits(col, valid) if n else np.zeros(0, np.int64)
        if n and bits[0] == bits[-1] and np.all(bits == bits[0]) and (valid is None or valid.all() or not valid.any()):
            fields.append(("const", "" if valid is not None and not valid[0] else pc.cast(col[0:1], pa.string())[0]
                           .as_py()))
            continue
        axis = next((a for a, (c, first) in enumerate(zip(coords, firsts, strict=True))
                     if _depends_only_on(bits, valid, c, first)), None)
        if axis is not None:
            present = firsts[axis] >= 0
            strings = pc.cast(col.take(_numbers(pa.int64(), np.where(present, firsts[axis], 0), None)), pa.string())
            fields.append(("axis", axis, strings))
            continue
        encoded = pc.dictionary_encode(col)
        if len(encoded.dictionary) * 8 <= n:
            fields.append(("row", pc.take(pc.cast(encoded.dictionary, pa.string()), encoded.indices)))
        else:
            fields.append(("row", pc.cast(col, pa.string())))
    merged: list[tuple] = []  # neighbours of one kind (constants, one axis) joined first: fewer, longer fields
    for f in fields:
        last = merged[-1] if merged else None
        if last is None or last[0] == "row" or f[0] == "row":
            merged.append(f)
        elif last[0] == "const" and f[0] == "const":
            merged[-1] = ("const", f"{last[1]},{f[1]}")
        elif last[0] == "const":
            merged[-1] = ("axis", f[1], _join(last[1], f[2]))
        elif f[0] == "const":
            merged[-1] = ("axis", last[1], _join(last[2], f[1]))
        elif last[1] == f[1]:
            merged[-1] = ("axis", f[1], _join(last[2], f[2]))
        else:
            merged.append(f)
    if len(merged) == 1 and merged[0][0] == "const":  # every field constant: one line, repeated
        return memoryview((merged[0][1] + "\n").encode("utf-8") * n)
    parts: list[Any] = []
    for f in merged:
        if f[0] == "const":
            parts.append(_string_scalar(f[1]))
        elif f[0] == "axis":
            parts.append(pc.take(f[2], _numbers(pa.int64(), coords[f[1]].astype(np.int64), None)))
        else:
            parts.append(f[1])
    if isinstance(parts[-1], pa.Scalar):
        parts[-1] = _string_scalar(parts[-1].as_py() + "\n")
    else:
        parts[-1] = pc.binary_join_element_wise(parts[-1], _string_scalar("\n"), _string_scalar(""),
                                                null_handling="replace", null_replacement="")
    lines = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(
        *parts, _string_scalar(","), null_handling="replace", null_replacement="")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return memoryview(lines.buffers()[2])[offsets[0]:offsets[-1]]


def _string_scalar(text: str) -> pa.Scalar:
    """An Arrow string scalar (``pa.scalar`` would import pandas)."""
    return _strings([text])[0]


def _validity(col: pa.Array) -> np.ndarray | None:
    """Which values of ``col`` are not null (bool), from its bitmap; None when none is null."""
    if col.null_count == 0:
        return None
    raw = np.frombuffer(col.buffers()[0], dtype=np.uint8)
    return np.unpackbits(raw, count=col.offset + len(col), bitorder="little")[col.offset:].astype(bool)


def _bits(col: pa.Array, valid: np.ndarray | None) -> np.ndarray:
    """The 64-bit pattern of each value of a float64 or int64 column, 0 where null."""
    data = np.frombuffer(col.buffers()[1], dtype=np.int64, count=len(col), offset=col.offset * 8)
    return data if valid is None else np.where(valid, data, 0)


def _join(left: Any, right: Any) -> Any:
    """``left,right`` element-wise (strings per axis value, or one constant string); nulls as empty fields."""
    import pyarrow.compute as pc

    left, right = (_string_scalar(v) if isinstance(v, str) else v for v in (left, right))
    return pc.binary_join_element_wise(left, right, _string_scalar(","), null_handling="replace", null_replacement="")


def _first_rows(coord: np.ndarray) -> np.ndarray:
    """For each value along one axis, the first row of the batch holding it (-1: none)."""
    first = np.full(int(coord.max()) + 1 if coord.size else 0, -1, dtype=np.int64)
    first[coord[::-1]] = np.arange(coord.size - 1, -1, -1)
    return first


def _depends_only_on(bits: np.ndarray, valid: np.ndarray | None, coord: np.ndarray, first: np.ndarray) -> bool:
    """Whether every row holds the same value (bit for bit, null alike) as the first row of its axis value."""
    probe = slice(None, None, max(1, coord.size // 64))  # most columns that depend on more fail on a sample
    if not np.array_equal(bits[probe], bits[first[coord[probe]]]):
        return False
    rep = first[coord]
    if not np.array_equal(bits, bits[rep]):
        return False
    return valid is None or bool(np.array_equal(valid, valid[rep]))


def _tick(progress: Progress | None, batch: pa.RecordBatch) -> int:
    if progress is not None:
        progress.update(batch.num_rows)
    return batch.num_rows


def _frame(grid: Grid) -> pd.DataFrame:
    import pandas as pd
    import pyarrow as pa

    schema = arrow_schema(grid)
    table = pa.Table.from_batches(list(record_batches(grid, schema)), schema=schema)
    return _labelled(table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get))


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns (labels, problem) as Python strings with None for missing."""
    for name in (*LABELS, "problem"):
        if name in frame.columns:
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def to_xlsx_bytes(table: pd.DataFrame, meta: dict[str, Any]) -> bytes:
    """XLSX: a ``Sweep`` sheet (header of keys, one row per point, blank = missing), ``Units`` and ``About``."""
    import pandas as pd
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
    import pandas as pd

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



# --- refusing, before any work, what would not fit -------------------------------------------------------------

#: Bytes of memory per XLSX cell while the workbook is built in memory: measured 190 (peak RSS of a
#: 10,000-row and a 30,000-row sweep of 102 columns: 310 MB and 700 MB), with a third more for safety.
XLSX_BYTES_PER_CELL = 250
#: Bytes of file per XLSX cell: measured 3.7 (the 30,000-row sweep: 11.3 MB), doubled for safety.
XLSX_FILE_BYTES_PER_CELL = 8
#: Grid points written to estimate the bytes per row of a format.
SAMPLE_ROWS = 2_048


def estimated_bytes(grid: Grid, fmt: str) -> int:
    """Bytes the sweep's file would take: a sample of grid points spread over the grid, written as ``fmt``."""
    import pyarrow as pa

    n = min(grid.rows, SAMPLE_ROWS)
    index = np.unique(np.linspace(0, grid.rows - 1, n).astype(np.int64))
    if fmt == "xlsx":
        return grid.rows * len(columns_of(grid)) * XLSX_FILE_BYTES_PER_CELL
    schema = arrow_schema(grid)
    batch = next(record_batches(grid, schema, index=index))
    buffer = io.BytesIO()
    if fmt == "csv":
        buffer.write(csv_text(batch, np.unravel_index(index, grid.shape)))
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_batches([batch]), buffer)
    else:
        buffer.write(",".join(json.dumps(row) for row in batch.to_pylist()).encode("utf-8"))
    return math.ceil(buffer.tell() / index.size * grid.rows)


def _available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_room(grid: Grid, fmt: str, output: str | Path | None) -> None:
    """Refuse, before any work, a grid the disk (or memory, for XLSX) could not hold: ScenarioError naming
    the rows, the bytes it would need and the bytes free."""
    rows = grid.rows
    limit = MAX_ROWS_BY_FORMAT.get(fmt)
    if limit is not None and rows > limit:
        raise ScenarioError(f"the sweep has {rows:,} grid points; --format {fmt} is limited to {limit:,} rows "
                            f"(it is built in memory): use --format csv or parquet, or fewer STEPS")
    if fmt == "xlsx":
        if rows > XLSX_MAX_ROWS:
            raise ScenarioError(f"the sweep has {rows:,} grid points; an XLSX sheet holds {XLSX_MAX_ROWS:,} rows "
                                f"(use csv or parquet, or fewer STEPS)")
        need, free = rows * len(columns_of(grid)) * XLSX_BYTES_PER_CELL, _available_memory()
        if free is not None and need > free:
            raise ScenarioError(f"the sweep's {rows:,} rows need about {_gb(need)} of memory as xlsx; "
                                f"{_gb(free)} is available (use csv or parquet, or fewer STEPS)")
    elif rows > STREAM_MAX_ROWS:
        raise ScenarioError(f"the sweep has {rows:,} grid points; the limit is {STREAM_MAX_ROWS:,} (use fewer STEPS)")
    if output is None:
        return
    directory = Path(output).parent if str(Path(output).parent) else Path(".")
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return  # the write itself reports a missing directory
    need = estimated_bytes(grid, fmt)
    if need > free:
        raise ScenarioError(f"the sweep's {rows:,} rows need about {_gb(need)} as {fmt}; {directory} has "
                            f"{_gb(free)} free (use fewer STEPS{' or parquet' if fmt != 'parquet' else ''})")


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


# --- entry points -----------------------------------------------------------------------------------------------

def sweep_meta(scenario: Scenario, specs: list[str], date: str | None = None) -> dict[str, Any]:
    """What the JSON, Parquet and XLSX files say about the sweep."""
    from capacity import __version__

    return {"scenario": scenario.name, "tool_version": __version__, "date": date or today_iso(), "vary": list(specs),
            "values": "base units (B, B/s, FLOP/s, s, requests/s); blank/null = undefined, unbounded or invalid row"}


def run_to(scenario: Scenario, specs: list[str], fmt: str, sink: IO[bytes], output: str | Path | None = None,
           date: str | None = None, progress: bool | None = None, chunk_rows: int = CHUNK_ROWS,
           units: str = "base") -> int:
    """Check the grid fits (``check_room``), then evaluate and write it to ``sink`` in chunks; returns rows.

    ``progress``: None shows a bar on stderr when it is a terminal and the grid has ``PROGRESS_MIN_ROWS`` rows.
    """
    if fmt not in FORMATS:
        raise ScenarioError(f"--format {fmt!r} is not a sweep format; use one of {', '.join(FORMATS)}")
    if units not in ("base", "human") or (units == "human" and fmt != "csv"):
        raise ScenarioError(f"--units {units} is for csv output (base or human); {fmt} keeps base units")
    if fmt == "parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ScenarioError("--format parquet needs pyarrow (pip install pyarrow); use csv, xlsx or json") from None
    grid = make_grid(scenario, specs)
    check_room(grid, fmt, output)
    show = progress if progress is not None else (grid.rows >= PROGRESS_MIN_ROWS and sys.stderr.isatty())
    bar = Progress(grid.rows) if show else None
    try:
        return write_sweep(grid, fmt, sink, sweep_meta(scenario, specs, date), chunk_rows, bar,
                           human=units == "human", binary=scenario.units == "GiB")
    finally:
        if bar is not None:
            bar.close()


def sweep_bytes(scenario: Scenario, specs: list[str], fmt: str, date: str | None = None,
                units: str = "base") -> bytes:
    """Run the sweep and render it as ``fmt`` (csv, xlsx, parquet or json), in memory; ``units="human"``: csv
    with each column in its human unit (``human_table``)."""
    buffer = io.BytesIO()
    run_to(scenario, specs, fmt, buffer, date=date, progress=False, units=units)
    return buffer.getvalue()


__all__ = ["CHUNK_ROWS", "FORMATS", "MAX_ROWS", "PATHS", "Axis", "Grid", "Progress", "arrow_schema", "check_room",
           "columns_of", "estimated_bytes", "grid_inputs", "make_grid", "parse_vary",
           "pieces", "record_batches", "row_problems", "run_sweep", "run_to", "sweep_bytes", "units_of", "write_sweep"]
