"""Safe file input and output.

Input: ``read_text_limited`` reads a regular file of bounded size (``safe_load.read_bytes``: devices, FIFOs and
oversized files are refused before any read).

Output: ``write_atomic`` writes a temporary file beside the target, then renames it over the target (no partial
files). The result has the permissions an ordinary write would give: an existing file keeps its mode, a new one
gets 0666 less the umask (``mkstemp`` alone would leave 0600). A symlink is followed deliberately: its target is
replaced and the link stays. A target that exists but is not a regular file (``/dev/stdout``, a FIFO) is
written in place, never replaced. The temporary file is removed on any failure, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from capacity.errors import ScenarioError, clean_line
from capacity.fileio.safe_load import read_bytes


def check_size(path: str | Path, limit: int, what: str = "file") -> Path:
    """``path`` as a Path after checking it is a regular file of at most ``limit`` bytes; ScenarioError otherwise.

    Devices report size 0, so the kind of file is checked too (``/dev/zero`` is not a small file).
    """
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise ScenarioError(f"cannot read {clean_line(str(path), 120)}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ScenarioError(f"cannot read {clean_line(str(path), 120)}: {exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ScenarioError(f"{clean_line(str(path), 120)} is not a regular file (a directory, device, FIFO or "
                            f"socket); give a {what}")
    if info.st_size > limit:
        raise ScenarioError(f"{clean_line(str(path), 120)} is {info.st_size:,} bytes; a {what} is limited to "
                            f"{limit:,} bytes")
    return path


def read_text_limited(path: str | Path, limit: int, what: str = "file", encoding: str = "utf-8") -> str:
    """The text of a regular file of at most ``limit`` bytes (undecodable bytes replaced); ScenarioError naming
    the path."""
    return read_bytes(path, limit, what).decode(encoding, errors="replace")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While writing, SIGTERM raises KeyboardInterrupt like Ctrl-C does, so ``finally`` clauses run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    import signal  # here, not at the top: only writing files needs it

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_output``); ScenarioError naming the path if it cannot be
    written."""
    with atomic_output(path) as fh:
        fh.write(data)


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to stream into, for output too large to hold (``write_atomic`` writes through it): the same
    target rules (through symlinks, a directory refused, a FIFO or terminal written in place, the mode kept),
    and a regular file is renamed onto ``path`` only when the block completes (removed on any error or
    SIGTERM). ScenarioError naming the path if it cannot be written."""
    shown = clean_line(str(path), 120)
    try:
        target = Path(os.path.realpath(path))
        existing = target.stat() if target.exists() else None
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot write {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise ScenarioError(f"cannot write {shown}: it is a directory")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        try:  # non-blocking open: a FIFO nobody reads is refused (ENXIO), not waited on
            fd = os.open(target, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
            os.set_blocking(fd, True)
        except OSError as exc:
            raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
        except OSError as exc:
            raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
        return
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    tmp: str | None = None
    with _signals_raise():
        try:
            try:
                fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
                fh = os.fdopen(fd, "wb")
                os.fchmod(fh.fileno(), mode)
            except OSError as exc:
                raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
            try:
                with fh:
                    yield fh
                os.replace(tmp, target)
                tmp = None
            except OSError as exc:
                raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def safe_filename(name: str, suffix: str, fallback: str = "sizing") -> str:
    """A download file name from free text: letters, digits, '-', '_' and '.', no path, at most 80 characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip(".-_")[:80] or fallback
    return f"{stem}{suffix}"
