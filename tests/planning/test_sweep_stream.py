"""Streamed sweeps (issue 17): chunked evaluation and writing change no value; text is neutralised; grids
too large for the disk or memory are refused before any work; a progress bar on request."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pa = pytest.importorskip("pyarrow")
pacsv = pytest.importorskip("pyarrow.csv")
pq = pytest.importorskip("pyarrow.parquet")

from capacity import RESULTS, load_scenario  # noqa: E402
from capacity.cli import main  # noqa: E402
from capacity.errors import ScenarioError  # noqa: E402
from capacity.planning import sweep as sweep_module  # noqa: E402
from capacity.planning.sweep import (  # noqa: E402
    arrow_schema,
    check_room,
    csv_text,
    make_grid,
    record_batches,
    run_sweep,
    run_to,
    sweep_bytes,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
ESSAY001 = SCENARIOS / "essay-001-sale-day.yaml"
MIXTRAL = SCENARIOS / "long-context-mixtral-h200.yaml"
# Invalid rows (prompt longer than max_model_len, weights that do not fit), whole and fractional inputs.
SPECS = ["serving.memory_utilization=0.1:0.95:7", "slo.tpot=20ms:200ms:5", "workload.prompt_tokens=1000:40000:3"]


def _stream(path: Path, specs: list[str], fmt: str, chunk_rows: int) -> bytes:
    buffer = io.BytesIO()
    run_to(load_scenario(path), specs, fmt, buffer, date="2026-01-01", progress=False, chunk_rows=chunk_rows)
    return buffer.getvalue()


@pytest.mark.parametrize("path", [ESSAY001, MIXTRAL])
def test_csv_parses_to_the_same_values_as_pyarrows_writer_and_the_frame(path):
    """Our CSV formatting (each number once, rows joined by Arrow) against pyarrow.csv on the same batches."""
    scenario = load_scenario(path)
    grid = make_grid(scenario, SPECS)
    schema = arrow_schema(grid)
    reference = io.BytesIO()
    with pacsv.CSVWriter(reference, schema) as writer:
        for batch in record_batches(grid, schema, chunk_rows=16):
            writer.write_batch(batch)
    ours = pd.read_csv(io.BytesIO(_stream(path, SPECS, "csv", 16)), keep_default_na=False, na_values=[""])
    theirs = pd.read_csv(io.BytesIO(reference.getvalue()), keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(ours, theirs)
    frame = run_sweep(scenario, SPECS)
    assert list(ours.columns) == list(frame.columns)
    for key in RESULTS:
        a, b = ours[key].to_numpy(), frame[key].to_numpy()
        if ours[key].dtype.kind == "f":
            assert np.array_equal(a.astype(float), pd.to_numeric(frame[key]).to_numpy(float), equal_nan=True), key
        else:
            assert [x if isinstance(x, str) else None for x in a] == [x if isinstance(x, str) else None for x in b]


def test_chunk_size_changes_no_byte_and_no_parquet_value():
    assert _stream(ESSAY001, SPECS, "csv", 7) == _stream(ESSAY001, SPECS, "csv", 65_536)
    assert _stream(ESSAY001, SPECS, "json", 7) == _stream(ESSAY001, SPECS, "json", 65_536)
    small = pq.read_table(io.BytesIO(_stream(ESSAY001, SPECS, "parquet", 7)))
    whole = pq.read_table(io.BytesIO(_stream(ESSAY001, SPECS, "parquet", 65_536)))
    assert small.schema == whole.schema
    assert small.to_pylist() == whole.to_pylist()  # dictionaries differ per chunk; the values do not


def test_every_cell_is_a_number_or_blank_except_the_text_columns():
    table = pd.read_csv(io.BytesIO(sweep_bytes(load_scenario(ESSAY001), SPECS, "csv")))
    text = {"decode_bound", "batch_limit", "goodput_limit", "problem"}
    for name in table.columns:
        if name not in text:
            assert table[name].dtype.kind in "fi", name
    assert not np.isinf(table.select_dtypes("number").to_numpy()).any()  # non-finite values are blank
    invalid = table["problem"].notna()
    assert invalid.any() and table.loc[invalid, "goodput_rps"].isna().all()


def test_csv_neutralises_and_quotes_text_cells():
    """A text cell a spreadsheet would run as a formula gets a leading quote; delimiters are quoted."""
    texts = ["=HYPERLINK(\"http://x\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "plain", "a,b"]
    batch = pa.RecordBatch.from_arrays(
        [pa.DictionaryArray.from_arrays(pa.array(np.arange(len(texts), dtype=np.int8)), pa.array(texts)),
         pa.array([1.5] * len(texts))], names=["problem", "x"])
    rows = list(csv.reader(io.StringIO(bytes(csv_text(batch)).decode("utf-8"), newline="")))
    assert [r[0] for r in rows] == ["'" + t for t in texts[:6]] + ["plain", "a,b"]
    assert all(r[1] == "1.5" for r in rows)


def test_constant_batch_is_one_repeated_line():
    batch = pa.RecordBatch.from_arrays([pa.array([2.0, 2.0, 2.0]), pa.array([None, None, None], pa.float64())],
                                       names=["a", "b"])
    assert bytes(csv_text(batch)) == b"2,\n" * 3


def test_a_grid_too_large_for_the_disk_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    calls = []
    real = sweep_module.write_sweep
    monkeypatch.setattr(sweep_module, "write_sweep", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(sweep_module.shutil, "disk_usage", lambda path: type("U", (), {"free": 10_000})())
    out = tmp_path / "big.csv"
    assert main(["sweep", str(ESSAY001), "--vary", "memory_utilization=0.5:0.9:100",
                 "--vary", "prompt_tokens=100:1000:100", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the sweep's 10,000 rows need about" in err and "has 0.0 MB free" in err
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_disk_estimate_is_close_to_the_file_written(tmp_path):
    scenario = load_scenario(ESSAY001)
    specs = ["memory_utilization=0.5:0.9:40", "slo.tpot=20ms:200ms:50"]
    grid = make_grid(scenario, specs)
    for fmt in ("csv", "parquet", "json"):
        size = len(sweep_bytes(scenario, specs, fmt))
        estimate = sweep_module.estimated_bytes(grid, fmt)
        # csv and json: the sample's rows are as long as the others (within 10%); parquet compresses a small
        # sample less than the whole file, so its estimate is high, never low.
        assert 0.9 * size <= estimate <= (1.1 if fmt != "parquet" else 20) * size, fmt


def test_xlsx_beyond_a_sheet_or_the_memory_is_refused(monkeypatch):
    scenario = load_scenario(ESSAY001)
    big = make_grid(scenario, ["memory_utilization=0.5:0.9:1100", "prompt_tokens=100:2000:1000"])
    with pytest.raises(ScenarioError, match="--format xlsx is limited to 20,000 rows"):
        check_room(big, "xlsx", None)  # the in-memory formats' row limit binds first
    monkeypatch.setattr(sweep_module, "MAX_ROWS_BY_FORMAT", {})
    with pytest.raises(ScenarioError, match="an XLSX sheet holds 1,048,575 rows"):
        check_room(big, "xlsx", None)
    monkeypatch.setattr(sweep_module, "_available_memory", lambda: 1_000_000)
    small = make_grid(scenario, ["memory_utilization=0.5:0.9:100"])
    with pytest.raises(ScenarioError, match=r"need about .* of memory as xlsx; 1.0 MB is available"):
        check_room(small, "xlsx", None)


def test_stream_row_limit(monkeypatch):
    monkeypatch.setattr(sweep_module, "STREAM_MAX_ROWS", 99)
    with pytest.raises(ScenarioError, match="the sweep has 100 grid points; the limit is 99"):
        check_room(make_grid(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:100"]), "csv", None)


def test_progress_bar_on_stderr(capsys):
    buffer = io.BytesIO()
    rows = run_to(load_scenario(ESSAY001), ["memory_utilization=0.5:0.9:30"], "csv", buffer, progress=True,
                  chunk_rows=8)
    err = capsys.readouterr().err
    assert rows == 30 and "100%" in err and "30/30 rows" in err and err.endswith("\n")
    assert capsys.readouterr().out == ""  # nothing on stdout: the table went to the sink


def test_cli_streams_csv_to_stdout_with_one_header(capsys):
    assert main(["sweep", str(ESSAY001), "--vary", "memory_utilization=0.5:0.9:5", "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(io.StringIO(out))
    assert len(table) == 5 and out.count("memory_utilization,") == 1
    assert math.isclose(table["memory_utilization"].iloc[-1], 0.9)


def test_writes_behind_the_evaluation_keep_order_and_raise_the_writers_error():
    batches = [pa.RecordBatch.from_pydict({"a": [float(i)] * (i + 1)}) for i in range(5)]
    seen: list[tuple[int, float]] = []
    written = sweep_module._write_behind(iter(batches), lambda b, start: seen.append((start, b.column(0)[0].as_py())),
                                         None)
    assert written == 15 and seen == [(0, 0.0), (1, 1.0), (3, 2.0), (6, 3.0), (10, 4.0)]

    def fail(batch, start):
        if start > 0:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        sweep_module._write_behind(iter(batches), fail, None)


def test_a_sweep_imports_no_pandas():
    """pyarrow imports pandas (0.3 s) to convert lists and Python scalars; the sweep builds Arrow arrays from
    numpy buffers instead, so a CSV or Parquet sweep in a fresh process never loads it."""
    import subprocess
    import sys

    code = ("import sys; from capacity.cli import main\n"
            "for fmt in ('csv', 'parquet'):\n"
            f"    sys.argv = ['capacity', 'sweep', {str(ESSAY001)!r}, '--vary',"
            " 'serving.memory_utilization=0.1:0.95:7', '--vary', 'workload.prompt_tokens=1000:40000:3',"
            " '--format', fmt]\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e.code\n"
            "print('pandas' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=SCENARIOS.parent)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False"
