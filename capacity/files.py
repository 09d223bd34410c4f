"""Safe file output: write to a temporary file beside the target, then rename (no partial files)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from .errors import ScenarioError


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


def safe_filename(name: str, suffix: str, fallback: str = "sizing") -> str:
    """A download file name from free text: letters, digits, '-', '_' and '.', no path, at most 80 characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip(".-_")[:80] or fallback
    return f"{stem}{suffix}"
