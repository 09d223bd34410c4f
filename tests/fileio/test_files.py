"""The atomic writer refuses what an ordinary write could not and keeps what an ordinary write keeps (issue 32):
before, it replaced a read-only (0444) file, gave an existing file a new owner, split hard links, replaced a
symlink loop, and left its temporary file behind on SIGHUP, SIGQUIT or SIGUSR1."""

from __future__ import annotations

import os
import signal
import stat

import pytest

from capacity.errors import ScenarioError
from capacity.fileio import files


def _ordinary_write_works(path) -> bool:
    try:
        with open(path, "r+b"):
            return True
    except OSError:
        return False


def test_a_read_only_file_is_written_only_where_open_could(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    target.chmod(0o444)
    if _ordinary_write_works(target):  # root: an ordinary write succeeds, and so does this one, keeping the mode
        files.write_atomic(target, b"new")
        assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o444
    else:
        with pytest.raises(ScenarioError, match="Permission denied"):
            files.write_atomic(target, b"new")
        assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_read_only_folder_keeps_its_file_when_open_would_refuse(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "out.json").write_text("old")
    (folder / "out.json").chmod(0o444)
    folder.chmod(0o555)
    try:
        if _ordinary_write_works(folder / "out.json"):
            pytest.skip("running as root: every open succeeds")
        with pytest.raises(ScenarioError):
            files.write_atomic(folder / "out.json", b"new")
        assert (folder / "out.json").read_text() == "old"
    finally:
        folder.chmod(0o755)


def test_an_existing_file_keeps_its_owner_and_group(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    if os.geteuid() == 0:
        os.chown(target, 12345, 23456)
    before = target.stat()
    files.write_atomic(target, b"new")
    after = target.stat()
    assert target.read_text() == "new"
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


def test_hard_links_are_not_split(tmp_path):
    target, other = tmp_path / "out.json", tmp_path / "other-name.json"
    target.write_text("old")
    os.link(target, other)
    files.write_atomic(target, b"new")
    assert other.read_text() == "new" and os.path.samefile(target, other)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-name.json", "out.json"]


def test_a_symlink_loop_is_refused_and_left_alone(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ScenarioError, match="Too many levels of symbolic links"):
        files.write_atomic(a, b"new")
    assert a.is_symlink() and b.is_symlink() and os.readlink(a) == str(b)


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link, target = tmp_path / "link.json", tmp_path / "target.json"
    link.symlink_to(target)
    files.write_atomic(link, b"new")
    assert link.is_symlink() and target.read_text() == "new"


@pytest.mark.parametrize("name", files.CLEANUP_SIGNALS)
def test_every_catchable_signal_removes_the_temporary_file(tmp_path, monkeypatch, name):
    number = getattr(signal, name)
    before = signal.getsignal(number)
    target = tmp_path / "out.bin"

    def arrive(*_args):  # the signal arrives while the file is being written
        os.kill(os.getpid(), number)

    monkeypatch.setattr(files.os, "replace", arrive)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        files.write_atomic(target, b"x" * 1000)
    assert interrupted.value.signum == number and str(interrupted.value) == name
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(number) == before


def test_a_signal_the_user_ignores_stays_ignored(tmp_path, monkeypatch):
    """``nohup capacity sweep ...``: a closed terminal must not stop the sweep."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        monkeypatch.setattr(files.os, "replace", lambda *_: os.kill(os.getpid(), signal.SIGHUP))
        files.write_atomic(tmp_path / "out.bin", b"x")  # no interruption: SIGHUP is ignored
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
