"""The implementations of the hot pure functions that tests run against (doc/store.md)."""

from __future__ import annotations

from rocketpy.common import message, speedups

#: The compiled functions; the Python ones when not built (the tests using it then skip).
C_IMPLEMENTATION = message.COMPILED or message.PYTHON
#: Why the C variants of the tests skip, or None when they run.
C_SKIP = None if message.COMPILED is not None else f"no compiled accelerator: {speedups.why_not()}"
