"""Which implementation of the hot pure functions runs: the optional C extension or Python.

``rocketpy._speedups`` (``rocketpy/_speedups.c``) is built by ``pip install`` when a C compiler
is present; the Python functions in ``common/message.py`` and ``store/index.py`` are the
reference and the fallback. ``ROCKETPY_NO_SPEEDUPS=1`` in the environment forces Python.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

DISABLE_VARIABLE = "ROCKETPY_NO_SPEEDUPS"


def load() -> ModuleType | None:
    """The compiled module, or None when it is not built or is disabled by the environment."""
    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("rocketpy._speedups")
    except ImportError:
        return None


compiled = load()

#: "C" or "Python": what ``python -c 'import rocketpy.common.speedups as s; print(s.ACTIVE)'`` prints.
ACTIVE = "C" if compiled is not None else "Python"


def why_not() -> str:
    """Why the compiled module is not in use (for skipped tests and the docs)."""
    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return f"{DISABLE_VARIABLE} is set"
    return "rocketpy._speedups is not built (pip install -e . with a C compiler builds it)"
