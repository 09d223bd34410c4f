"""CSV of a sweep batch: a column that depends on one grid axis is formatted once per axis value (issue 17).

``sweep.csv_text(batch, coords)`` must write exactly the bytes it writes without ``coords`` (every column
formatted on its own), whatever mix of constant, one-axis, two-axis, null and signed-zero columns the batch holds.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from capacity.planning.sweep import csv_text


def test_axis_columns_write_the_same_bytes_as_plain_formatting():
    shape = (7, 5)
    coords = np.unravel_index(np.arange(3, 33), shape)  # a batch starting mid-grid: some axis values missing
    i, j = coords
    n = i.size
    columns = {
        "const": pa.array(np.full(n, 2.5)),
        "by_i": pa.array(0.1 * i + 1.0),
        "by_j_int": pa.array((j * 3).astype(np.int64)),
        "by_i_null": pa.array(np.where(i == 2, 0.0, i / 3.0), mask=i == 2),
        "by_both": pa.array(i * 10.0 + j / 7.0),
        "signed_zero": pa.array(np.where(j == 1, -0.0, 0.0)),
        "zero_mixed": pa.array(np.where((i + j) % 2 == 0, -0.0, 0.0)),  # equal as floats, not as text
        "all_null": pa.array(np.zeros(n), mask=np.ones(n, dtype=bool)),
        "label": pa.DictionaryArray.from_arrays(pa.array((j % 2).astype(np.int8)), pa.array(["=x", "b,c"])),
        "by_i_last": pa.array(i * 1.5),
    }
    batch = pa.RecordBatch.from_pydict(columns)
    assert bytes(csv_text(batch, coords)) == bytes(csv_text(batch))
    first, second = bytes(csv_text(batch, coords)).split(b"\n")[:2]
    # Rows 3 and 4 of the grid: (i, j) = (0, 3) and (0, 4); 3/7 and 4/7 in shortest round-trip form.
    assert first.decode() == '2.5,1,9,0,0.42857142857142855,0,0,,"b,c",0'
    assert second.decode() == "2.5,1,12,0,0.5714285714285714,0,-0,,'=x,0"


def test_one_axis_batch_of_constants_and_axis_columns_only():
    coords = (np.repeat(np.arange(4), 3), np.tile(np.arange(3), 4))
    batch = pa.RecordBatch.from_pydict({"a": pa.array(np.full(12, 1.0)), "b": pa.array(coords[1] * 2.0)})
    assert bytes(csv_text(batch, coords)) == bytes(csv_text(batch)) == b"1,0\n1,2\n1,4\n" * 4
