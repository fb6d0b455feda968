"""The implementations of the hot pure functions that tests run against (doc/store.md)."""

from __future__ import annotations

from rocketpy.common import message, speedups

#: The compiled functions; the Python ones when not built (the tests using it then skip).
C_IMPLEMENTATION = message.COMPILED or message.PYTHON
#: Why the C variants of the tests skip, or None when they run.
C_SKIP = None if message.COMPILED is not None else f"no compiled accelerator: {speedups.why_not()}"


def compiled_variant(cls: type) -> type:
    """``C<name>``: a subclass of the test case ``cls`` (whose ``impl`` is the Python reference)
    running its tests against the compiled functions, skipped with the reason when not built."""
    return type(f"C{cls.__name__}", (cls,), {"impl": C_IMPLEMENTATION, "skip": C_SKIP, "__module__": cls.__module__})
