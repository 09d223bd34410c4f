"""Parquet written one row group at a time with the footer spooled (issue 17: a 100M-row sweep to Parquet in the
same peak memory as 1M rows). The file is the one ``pyarrow.parquet.ParquetWriter`` writes for the same batches,
byte for byte; what the writer holds in memory does not grow with the row groups."""

from __future__ import annotations

import gc
import io
import tracemalloc
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from capacity import load_scenario  # noqa: E402
from capacity.fileio import parquet_stream  # noqa: E402
from capacity.fileio.parquet_stream import ParquetStream  # noqa: E402
from capacity.planning.sweep import arrow_schema, make_grid, record_batches, run_to, sweep_meta  # noqa: E402

ESSAY001 = Path(__file__).resolve().parents[2] / "scenarios" / "essay-001-sale-day.yaml"
# Invalid rows (nulls, a `problem` dictionary that changes between batches), whole and fractional inputs.
SPECS = ["serving.memory_utilization=0.1:0.95:7", "slo.tpot=20ms:200ms:5", "workload.prompt_tokens=1000:40000:3"]


def _batches(chunk_rows: int) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    scenario = load_scenario(ESSAY001)
    grid = make_grid(scenario, SPECS)
    schema = arrow_schema(grid, sweep_meta(scenario, SPECS, "2026-01-01"))
    return schema, list(record_batches(grid, schema, chunk_rows=chunk_rows))


class _Null(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return len(memoryview(data))


def _pyarrow(schema: pa.Schema, batches: list[pa.RecordBatch], row_group_size=None, **options) -> bytes:
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, schema, **options) as writer:
        for batch in batches:
            writer.write_batch(batch, row_group_size)
    return buffer.getvalue()


def _ours(schema: pa.Schema, batches: list[pa.RecordBatch], row_group_size=None, **options) -> bytes:
    buffer = io.BytesIO()
    with ParquetStream(buffer, schema, row_group_size, **options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return buffer.getvalue()


@pytest.mark.parametrize("chunk_rows", [1_000, 40, 3])
def test_bytes_equal_pyarrows_writer(chunk_rows):
    """1 row group, 3 (a one-byte list header), 35 (a longer header, offsets of several varint bytes)."""
    schema, batches = _batches(chunk_rows)
    ours = _ours(schema, batches)
    assert ours == _pyarrow(schema, batches)
    meta = pq.ParquetFile(io.BytesIO(ours)).metadata
    assert meta.num_row_groups == len(batches) and meta.num_rows == 105
    assert pq.read_table(io.BytesIO(ours)).equals(pa.Table.from_batches(batches, schema))


def test_options_reach_every_row_group():
    schema, batches = _batches(40)
    options = {"compression": "zstd", "write_statistics": False, "use_dictionary": False}
    ours = _ours(schema, batches, **options)
    assert ours == _pyarrow(schema, batches, **options)
    column = pq.ParquetFile(io.BytesIO(ours)).metadata.row_group(2).column(0)
    assert column.compression == "ZSTD" and not column.is_stats_set


def test_batches_of_several_row_groups():
    """Batches of 40, 40 and 25 rows in groups of up to 16 rows (16 + 16 + 8, twice, then 16 + 9): 8 row groups,
    cut where pyarrow's writer cuts them."""
    schema, batches = _batches(40)
    ours = _ours(schema, batches, row_group_size=16)
    assert ours == _pyarrow(schema, batches, row_group_size=16)
    assert pq.ParquetFile(io.BytesIO(ours)).metadata.num_row_groups == 8


def test_empty_file_equals_pyarrows():
    schema, _ = _batches(1_000)
    assert _ours(schema, []) == _pyarrow(schema, [])


def test_row_groups_spilled_to_a_file_give_the_same_bytes(monkeypatch):
    monkeypatch.setattr(parquet_stream, "SPOOL_MEMORY_BYTES", 100)
    schema, batches = _batches(10)
    assert _ours(schema, batches) == _pyarrow(schema, batches)


def test_memory_held_does_not_grow_with_row_groups(monkeypatch):
    """Python allocations alive after 20 and after 120 more row groups (metadata spooled to a file): the same
    within 16 kB. pyarrow's own writer (C++ memory, not traced) holds ~870 B per column chunk until it closes; here
    each group's writer is closed and dropped, so that memory goes too (benchmarks/bench_sweep.py --rows 16000000
    shows the peak)."""
    monkeypatch.setattr(parquet_stream, "SPOOL_MEMORY_BYTES", 1)
    schema, batches = _batches(1_000)
    batch = batches[0].slice(0, 4)
    writer = ParquetStream(_Null(), schema)
    held = []
    tracemalloc.start()
    try:
        for count in (20, 120):
            while writer.row_groups < count:
                writer.write_batch(batch)
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        writer.spool.close()
    assert held[1] - held[0] < 16_000, held


def test_sweep_parquet_is_pyarrows_file():
    """``capacity sweep --format parquet`` writes the bytes pyarrow's writer wrote for the same chunks."""
    scenario = load_scenario(ESSAY001)
    grid = make_grid(scenario, SPECS)
    schema = arrow_schema(grid, sweep_meta(scenario, SPECS, "2026-01-01"))
    buffer = io.BytesIO()
    run_to(scenario, SPECS, "parquet", buffer, date="2026-01-01", progress=False, chunk_rows=16)
    assert buffer.getvalue() == _pyarrow(schema, list(record_batches(grid, schema, chunk_rows=16)))


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (1, b"\x02"), (-1, b"\x01"), (150, b"\xac\x02"),
                                            (-(2**63), b"\xff" * 9 + b"\x01")])
def test_zigzag_varints(value, encoded):
    """Thrift compact integers: zigzag (0, -1, 1 -> 0, 1, 2), then 7 bits a byte, low first (300 -> ac 02)."""
    assert parquet_stream._signed_bytes(value) == encoded
    assert parquet_stream._signed(encoded, 0) == value


def test_row_group_offsets_moved_and_ordinal_set():
    """A RowGroup written by hand in the compact protocol: columns (one ColumnChunk: file_offset 0 = unset, meta_data
    with data_page_offset 100 and dictionary_page_offset 4), num_rows 7, file_offset 4, ordinal 0. Moved by 1000
    as the 3rd group: offsets 1100, 1004 and 1004, file_offset 0 kept, ordinal 2."""
    meta = bytes([0x96]) + parquet_stream._signed_bytes(100) + bytes([0x26]) + parquet_stream._signed_bytes(4)
    chunk = bytes([0x26, 0x00, 0x1C]) + meta + b"\x00" + b"\x00"
    group = (bytes([0x19, 0x1C]) + chunk + bytes([0x26]) + parquet_stream._signed_bytes(7) + bytes([0x26])
             + parquet_stream._signed_bytes(4) + bytes([0x24, 0x00]) + b"\x00")
    moved, rows, end = parquet_stream._moved_row_group(b"junk" + group, 4, 1000, 2)
    assert rows == 7 and end == 4 + len(group)
    fields = {f[0]: f for f in parquet_stream._fields(moved, 0)}
    assert parquet_stream._signed(moved, fields[5][2]) == 1004 and parquet_stream._signed(moved, fields[7][2]) == 2
    _, _, at = parquet_stream._list_header(moved, fields[1][2])
    chunk_fields = {f[0]: f for f in parquet_stream._fields(moved, at)}
    assert parquet_stream._signed(moved, chunk_fields[2][2]) == 0
    meta_fields = {f[0]: f for f in parquet_stream._fields(moved, chunk_fields[3][2])}
    assert parquet_stream._signed(moved, meta_fields[9][2]) == 1100
    assert parquet_stream._signed(moved, meta_fields[11][2]) == 1004
