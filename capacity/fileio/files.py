"""Safe file input and output.

Input: ``read_text_limited`` reads a regular file of bounded size (``safe_load.read_bytes``: devices, FIFOs and
oversized files are refused before any read).

Output: ``write_atomic`` writes a temporary file beside the target, then renames it over the target (no partial
files), and never does what an ordinary write could not: a read-only file or a symlink loop is refused, an
existing file keeps its mode, owner and group (a new one gets 0666 less the umask; ``mkstemp`` alone would leave
0600), and a file with other hard links, or one whose owner this process cannot give, is written in place once
the output is complete. A symlink is followed deliberately: its target is written and the link stays. A target
that exists but is not a regular file (``/dev/stdout``, a FIFO) is written in place, never replaced. The
temporary file is removed on any failure, on Ctrl-C and on every signal of ``CLEANUP_SIGNALS`` (SIGHUP, SIGQUIT,
SIGTERM, SIGUSR1, SIGUSR2, SIGALRM).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
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


#: Signals whose default action ends the process, caught while a temporary file exists so that it is removed:
#: a closed terminal (SIGHUP), Ctrl-\\ (SIGQUIT), ``kill`` (SIGTERM), SIGUSR1/2 and SIGALRM. Ctrl-C raises
#: KeyboardInterrupt already; SIGKILL cannot be caught.
CLEANUP_SIGNALS = ("SIGHUP", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM")


class Interrupted(KeyboardInterrupt):
    """A signal ended the work (``signum``); raised like Ctrl-C's KeyboardInterrupt so ``finally`` clauses run."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While writing, each of ``CLEANUP_SIGNALS`` still at its default action raises ``Interrupted`` (a signal
    the user's shell ignores, as ``nohup`` does for SIGHUP, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    import signal  # here, not at the top: only writing files needs it

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous: dict[int, object] = {}
    for name in CLEANUP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) == signal.SIG_DFL:
            previous[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_output``); ScenarioError naming the path if it cannot be
    written."""
    with atomic_output(path) as fh:
        fh.write(data)


def _keeps_owner(info: os.stat_result) -> bool:
    """Whether a file this process creates can carry ``info``'s owner and group (``fchown`` would succeed)."""
    if os.geteuid() == 0:
        return True
    return info.st_uid == os.geteuid() and (info.st_gid == os.getegid() or info.st_gid in os.getgroups())


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to stream into, for output too large to hold (``write_atomic`` writes through it).

    What an ordinary ``open(path, "w")`` would refuse is refused (a read-only file, a directory, a symlink loop),
    with one line naming the path. A regular file is written beside the target and renamed onto it only when the
    block completes (removed on any error or signal, ``CLEANUP_SIGNALS``), keeping the target's mode, owner and
    group; a target that renaming would change (hard links it shares, an owner or group this process cannot
    give) is written in place once the whole output is ready, as ``cp`` does. Symlinks are followed (the target
    is written, the link stays); a FIFO or terminal is written in place. ScenarioError naming the path if it
    cannot be written."""
    shown = clean_line(str(path), 120)
    try:
        os.stat(path)  # follows links: a loop is ELOOP here, as it would be for open()
    except FileNotFoundError:
        pass  # a new file, or a link to one
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot write {shown}: {getattr(exc, 'strerror', None) or exc}") from None
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
    in_place = False
    if existing is not None:
        try:  # what an ordinary open for writing would refuse (read-only, ACLs, a read-only mount), refused
            os.close(os.open(target, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)))
        except OSError as exc:
            raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
        in_place = existing.st_nlink > 1 or not _keeps_owner(existing)
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    tmp: str | None = None
    with _signals_raise():
        try:
            try:
                try:
                    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
                except OSError:
                    if not in_place:
                        raise
                    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp")
                fh = os.fdopen(fd, "wb")
                os.fchmod(fh.fileno(), mode)
                if existing is not None and not in_place:
                    os.fchown(fh.fileno(), existing.st_uid, existing.st_gid)
            except OSError as exc:
                raise ScenarioError(f"cannot write {shown}: {exc.strerror or exc}") from None
            try:
                with fh:
                    yield fh
                if in_place:  # the whole output is ready: copy it into the file itself (same inode, links, owner)
                    with open(tmp, "rb") as src, open(target, "r+b") as dst:
                        dst.truncate(0)
                        shutil.copyfileobj(src, dst, 1 << 20)
                    os.unlink(tmp)
                else:
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
