"""A Parquet file written one row group at a time in memory flat in the number of row groups.

Why: ``pyarrow.parquet.ParquetWriter`` keeps every row group's metadata as Thrift objects until the file closes,
about 870 bytes per column chunk whatever the options (statistics, dictionary or compression off change nothing):
90 KB per row group of a 106-column sweep, 1.35 MB per million rows at 65,536 rows a group, and closing copies it
once more (Arrow's ``FileMetaDataBuilder::Finish`` copies the row-group list) beside the serialized footer. A
100M-row sweep held ~140 MB of it by the end, twice that while closing: 412 MB peak against 219 MB at 1M rows.
Buffered row groups (several batches in one group, C++ ``FileWriter::WriteRecordBatch``) would bound the count,
but pyarrow does not expose them (apache/arrow#36280), and a group made of several batches would hold their rows
in memory.

How: each batch is written by a fresh ``ParquetWriter`` of the same schema and options into the sink (its
leading ``PAR1`` dropped); its footer, the ``FileMetaData`` of its row group(s), is caught at close. The row
groups' Thrift bytes are cut out of it, their file offsets moved by where they landed in the sink, and appended to a
spool (memory up to ``SPOOL_MEMORY_BYTES``, then a temporary file): 12.5 KB per group instead of 90 KB in memory
twice. ``close`` writes the footer: the first group's ``FileMetaData`` with ``num_rows`` the total and the
spooled row groups as its list, then its length and ``PAR1``. The bytes are those ``ParquetWriter`` writes for the
same batches (``tests/fileio/test_parquet_stream.py`` checks byte equality).

The Thrift compact protocol (field headers, varints, lists, structs) is read only as far as the offsets need:
https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md; field ids from
https://github.com/apache/parquet-format/blob/master/src/main/thrift/parquet.thrift.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

MAGIC = b"PAR1"
#: Spooled row-group metadata stays in memory up to this many bytes (about 80 groups of 106 columns), then a file.
SPOOL_MEMORY_BYTES = 2**20

# Thrift compact types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# parquet.thrift field ids read here (FileMetaData, RowGroup, ColumnChunk, ColumnMetaData).
_FILE_META_NUM_ROWS, _FILE_META_ROW_GROUPS = 3, 4
_ROW_GROUP_COLUMNS, _ROW_GROUP_NUM_ROWS, _ROW_GROUP_FILE_OFFSET, _ROW_GROUP_ORDINAL = 1, 3, 5, 7
_CHUNK_OFFSETS = {2, 4, 6}  # ColumnChunk: file_offset (0 when unset), offset_index_offset, column_index_offset
_CHUNK_META_DATA = 3
_META_OFFSETS = {9, 10, 11, 14}  # ColumnMetaData: data_page, index_page, dictionary_page, bloom_filter offsets


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """(unsigned LEB128 varint at ``pos``, position after it)."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _signed(buf: bytes, pos: int) -> int:
    """The zigzag-encoded integer (i16, i32, i64) at ``pos``."""
    u, _ = _uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1)


def _signed_bytes(value: int) -> bytes:
    return _uvarint_bytes((value << 1) ^ (value >> 63))


def _skip(buf: bytes, pos: int, kind: int, element: bool = False) -> int:
    """Position after the value of compact type ``kind`` at ``pos`` (``element``: in a list, where a bool is a byte)."""
    if kind in (_I32, _I64, _I16):
        while buf[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == _BINARY:
        size, pos = _uvarint(buf, pos)
        return pos + size
    if kind == _STRUCT:
        return _scan(buf, pos, {})
    if kind in (_LIST, _SET):
        size, element_kind, pos = _list_header(buf, pos)
        for _ in range(size):
            pos = _skip(buf, pos, element_kind, element=True)
        return pos
    if kind in (_BOOL_TRUE, _BOOL_FALSE):
        return pos + 1 if element else pos
    if kind == _BYTE:
        return pos + 1
    if kind == _DOUBLE:
        return pos + 8
    if kind == _MAP:
        size, pos = _uvarint(buf, pos)
        if size:
            kinds = buf[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(buf, pos, kinds >> 4, element=True)
                pos = _skip(buf, pos, kinds & 0x0F, element=True)
        return pos
    raise ValueError(f"Parquet footer: unknown Thrift compact type {kind} at byte {pos}")


def _list_header(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(element count, element type, position of the first element) of the list header at ``pos``."""
    head = buf[pos]
    size, kind, pos = head >> 4, head & 0x0F, pos + 1
    if size == 15:
        size, pos = _uvarint(buf, pos)
    return size, kind, pos


def _list_header_bytes(size: int, kind: int) -> bytes:
    return bytes([(size << 4) | kind]) if size < 15 else bytes([0xF0 | kind]) + _uvarint_bytes(size)


Handler = Callable[[bytes, int, int], int]


def _scan(buf: bytes, pos: int, handlers: dict[int, Handler]) -> int:
    """Read the struct at ``pos``: ``handlers[field id](buf, value start, type)`` returns the value's end; fields
    without a handler are skipped. Returns the position after the struct."""
    field_id = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return pos
        kind, delta = head & 0x0F, head >> 4
        if delta:
            field_id += delta
        else:
            u, pos = _uvarint(buf, pos)
            field_id = (u >> 1) ^ -(u & 1)
        handler = handlers.get(field_id)
        pos = handler(buf, pos, kind) if handler is not None else _skip(buf, pos, kind)


def _fields(buf: bytes, pos: int) -> list[tuple[int, int, int, int]]:
    """The fields (ids 1-15) of the struct at ``pos`` as (field id, type, value start, value end)."""
    out: list[tuple[int, int, int, int]] = []

    def note(field_id: int) -> Handler:
        return lambda b, start, kind: out.append((field_id, kind, start, end := _skip(b, start, kind))) or end

    _scan(buf, pos, {field_id: note(field_id) for field_id in range(1, 16)})
    return out


def _moved_row_group(buf: bytes, pos: int, shift: int, ordinal: int) -> tuple[bytes, int, int]:
    """(The RowGroup struct at ``pos`` with every file offset in it moved by ``shift`` bytes and its ordinal, where
    a writer sets one (with encryption; an i16, cast as Arrow casts it), set to ``ordinal``; its row count; the
    position after it)."""
    edits: list[tuple[int, int, bytes]] = []
    rows = [0]

    def move(b: bytes, start: int, kind: int) -> int:
        end = _skip(b, start, kind)
        if kind == _I64:
            edits.append((start, end, _signed_bytes(_signed(b, start) + shift)))
        return end

    def move_set(b: bytes, start: int, kind: int) -> int:  # ColumnChunk.file_offset is 0 when not set
        return move(b, start, kind) if b[start] != 0 else start + 1

    def number(b: bytes, start: int, kind: int) -> int:
        end = _skip(b, start, kind)
        edits.append((start, end, _signed_bytes((ordinal + 2**15) % 2**16 - 2**15)))
        return end

    def count(b: bytes, start: int, kind: int) -> int:
        rows[0] = _signed(b, start)
        return _skip(b, start, kind)

    meta = dict.fromkeys(_META_OFFSETS, move)
    chunk = {**dict.fromkeys(_CHUNK_OFFSETS, move_set), _CHUNK_META_DATA: lambda b, start, _: _scan(b, start, meta)}

    def columns(b: bytes, start: int, kind: int) -> int:
        size, _, at = _list_header(b, start)
        for _ in range(size):
            at = _scan(b, at, chunk)
        return at

    end = _scan(buf, pos, {_ROW_GROUP_COLUMNS: columns, _ROW_GROUP_NUM_ROWS: count, _ROW_GROUP_FILE_OFFSET: move,
                           _ROW_GROUP_ORDINAL: number})
    out = bytearray()
    at = pos
    for start, stop, new in edits:  # in order: fields are read front to back
        out += buf[at:start]
        out += new
        at = stop
    out += buf[at:end]
    return bytes(out), rows[0], end


class _Forward(io.RawIOBase):
    """What one batch's ParquetWriter writes: the leading magic dropped, then passed to ``sink`` until ``held``
    is set (at close), after which it is kept there (the rest of the data and the footer)."""

    def __init__(self, sink: IO[bytes]) -> None:
        super().__init__()
        self.sink = sink
        self.head = b""  # the magic
        self.passed = 0  # bytes passed to the sink
        self.held: bytearray | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if len(self.head) < len(MAGIC):
            take = len(MAGIC) - len(self.head)
            self.head += bytes(view[:take])
            view = view[take:]
        if self.held is not None:
            self.held += view
        elif len(view):
            self.sink.write(view)
            self.passed += len(view)
        return size


class ParquetStream:
    """A Parquet file in ``sink``, one row group per ``write_batch`` (more where the batch has more rows than
    ``row_group_size``, as ``ParquetWriter.write_batch``); the footer's row groups wait in a spool.

    ``options``: ``pyarrow.parquet.ParquetWriter`` options, the same for every batch.
    """

    def __init__(self, sink: IO[bytes], schema: pa.Schema, row_group_size: int | None = None,
                 **options: Any) -> None:
        self.sink, self.schema, self.row_group_size, self.options = sink, schema, row_group_size, options
        self.sink.write(MAGIC)
        self.position = len(MAGIC)
        self.row_groups = self.rows = 0
        self.first_footer: bytes | None = None
        self.prefix = b""  # the first footer up to the end of its schema (field 2)
        self.spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)

    def _one(self, batch: pa.RecordBatch | None) -> bytes:
        """Write ``batch`` (None: nothing) through a fresh ParquetWriter; its footer (FileMetaData bytes)."""
        import pyarrow.parquet as pq

        part = _Forward(self.sink)
        writer = pq.ParquetWriter(part, self.schema, **self.options)
        if batch is not None:
            writer.write_batch(batch, self.row_group_size)
        part.held = bytearray()
        writer.close()
        tail = part.held
        if part.head != MAGIC or tail[-4:] != MAGIC:
            raise ValueError("pyarrow wrote a Parquet file this writer does not recognise")
        size = int.from_bytes(tail[-8:-4], "little")
        data = len(tail) - 8 - size
        self.sink.write(tail[:data])
        part.passed += data
        self.position += part.passed
        return bytes(tail[data:-8])

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` as one row group (or more, see the class)."""
        start = self.position
        footer = self._one(batch)
        count, at = self._row_groups_at(footer)
        for _ in range(count):
            # The writer's offsets count from its own start, where its magic was: 4 bytes before ``start`` here.
            group, rows, at = _moved_row_group(footer, at, start - len(MAGIC), self.row_groups)
            self.spool.write(group)
            self.row_groups += 1
            self.rows += rows
        if self.first_footer is None:
            self.first_footer = footer

    def _row_groups_at(self, footer: bytes) -> tuple[int, int]:
        """(how many row groups, where the first starts) in a FileMetaData. Version and schema (fields 1, 2) are
        the same bytes in every batch's footer: past them, num_rows (i64, header 0x16), row_groups (list, 0x19)."""
        if self.first_footer is not None and footer.startswith(self.prefix):
            at = len(self.prefix)
            if footer[at] == 0x16:
                at = _skip(footer, at + 1, _I64)
                if footer[at] == 0x19:
                    count, kind, first = _list_header(footer, at + 1)
                    if kind == _STRUCT:
                        return count, first
        fields = {f[0]: f for f in _fields(footer, 0)}
        count, kind, first = _list_header(footer, fields[_FILE_META_ROW_GROUPS][2])
        if count and kind != _STRUCT:
            raise ValueError(f"Parquet footer: row groups of Thrift type {kind}")
        if self.first_footer is None:
            self.prefix = footer[:fields[2][3]]
        return count, first

    def close(self) -> None:
        """Write the footer: the first group's FileMetaData holding every row group, its length, the magic."""
        footer = self.first_footer if self.first_footer is not None else self._one(None)
        fields = {f[0]: f for f in _fields(footer, 0)}
        _, _, rows_start, rows_stop = fields[_FILE_META_NUM_ROWS]
        _, _, groups_start, groups_stop = fields[_FILE_META_ROW_GROUPS]
        head = (footer[:rows_start] + _signed_bytes(self.rows) + footer[rows_stop:groups_start]
                + _list_header_bytes(self.row_groups, _STRUCT))
        tail = footer[groups_stop:]
        length = len(head) + self.spool.tell() + len(tail)
        self.sink.write(head)
        self.spool.seek(0)
        while piece := self.spool.read(2**20):
            self.sink.write(piece)
        self.spool.close()
        self.sink.write(tail)
        self.sink.write(length.to_bytes(4, "little") + MAGIC)

    def __enter__(self) -> ParquetStream:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.spool.close()
