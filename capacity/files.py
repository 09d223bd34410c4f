"""Safe file output: write to a temporary file beside the target, then rename (no partial files)."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import ScenarioError


def check_size(path: str | Path, limit: int, what: str = "file") -> Path:
    """``path`` as a Path after checking it exists and holds at most ``limit`` bytes; ScenarioError otherwise."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > limit:
        raise ScenarioError(f"{path} is {size:,} bytes; a {what} is limited to {limit:,} bytes")
    return path


def read_text_limited(path: str | Path, limit: int, what: str = "file", encoding: str = "utf-8") -> str:
    """The text of a file of at most ``limit`` bytes (undecodable bytes replaced); ScenarioError naming the path."""
    path = check_size(path, limit, what)
    try:
        return path.read_bytes().decode(encoding, errors="replace")
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; ScenarioError naming the path if it cannot be written."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ScenarioError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ScenarioError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to stream into, renamed onto ``path`` only when the block completes (removed on any error);
    ScenarioError naming the path if it cannot be written. ``write_atomic`` for output too large to hold."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ScenarioError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ScenarioError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def safe_filename(name: str, suffix: str, fallback: str = "sizing") -> str:
    """A download file name from free text: letters, digits, '-', '_' and '.', no path, at most 80 characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip(".-_")[:80] or fallback
    return f"{stem}{suffix}"
