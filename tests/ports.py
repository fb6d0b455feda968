"""Free TCP ports for tests that must know a port before listening on it.

A port taken by binding port 0 comes from the kernel's ephemeral range, which outgoing
connections (every client in a parallel test) also draw from, so it can be taken again
between the probe and the real bind. These ports come from below that range instead.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32000  # below Linux's default ephemeral range (32768-60999)
_random = random.Random(os.getpid())  # parallel trial workers probe different ports
_handed_out: set[int] = set()


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now, never handed out before in this process."""
    for _ in range(1000):
        port = _random.randrange(_LOW, _HIGH)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {_LOW}-{_HIGH}")
