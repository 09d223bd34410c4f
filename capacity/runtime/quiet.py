"""Warnings kept from the user: one policy for every surface (the command line, the app's server, their workers).

numpy's RuntimeWarnings (and a library's DeprecationWarnings) name install paths and say nothing a user can act on;
the answer already says what went wrong in words. Where a warning for valid input shows that an arithmetic corner
is not handled, the arithmetic is fixed (``np.errstate`` where a NaN or infinity is the intended answer, a guard
where it is not); this policy only keeps the rest out of sight. A user who asks for warnings (``python -W ...``,
``PYTHONWARNINGS``) still gets them.
"""

from __future__ import annotations

import os
import sys
import warnings


def quiet_warnings(children: bool = True) -> bool:
    """Ignore every warning in this process, and with ``children`` in the processes it starts (``PYTHONWARNINGS``),
    unless the user asked for warnings; whether they are now ignored."""
    if sys.warnoptions or os.environ.get("PYTHONWARNINGS", "ignore") != "ignore":
        return False
    warnings.simplefilter("ignore")
    if children:
        os.environ["PYTHONWARNINGS"] = "ignore"
    return True


__all__ = ["quiet_warnings"]
