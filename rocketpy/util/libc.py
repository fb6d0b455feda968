"""The C library's functions the standard library does not wrap, through ctypes."""

from __future__ import annotations

import ctypes
from typing import Any


def libc_function(name: str, *argtypes: Any) -> Any:
    """libc's ``name`` through ctypes (which releases the GIL for the call), returning an int and
    setting errno; None where there is none."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function
