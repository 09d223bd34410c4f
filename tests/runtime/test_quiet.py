"""Warnings kept from the user (issue 32): one policy for the command line, the app's server and their workers,
which a user who asks for warnings can still override."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A numpy RuntimeWarning (it names numpy's install path), after the policy; then whether children inherit it.
CODE = """
import os, sys
from capacity.runtime.quiet import quiet_warnings
quiet_warnings(children=sys.argv[1] == "children")
import numpy as np
np.log(np.zeros(2))
print(os.environ.get("PYTHONWARNINGS"))
"""


def _run(*flags: str, children: str = "children", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"} | (env or {})
    return subprocess.run([sys.executable, *flags, "-c", CODE, children], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=60)


def test_warnings_are_kept_quiet_here_and_in_the_processes_started():
    out = _run()
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.strip() == "ignore"  # what a worker or a child command inherits


def test_a_server_keeps_its_own_quiet_without_changing_the_environment():
    out = _run(children="here only")
    assert out.stderr == "" and out.stdout.strip() == "None"


def test_a_user_who_asks_for_warnings_gets_them():
    assert "RuntimeWarning" in _run("-W", "always").stderr
    assert "RuntimeWarning" in _run(env={"PYTHONWARNINGS": "always"}).stderr
