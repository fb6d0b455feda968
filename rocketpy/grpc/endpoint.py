"""The ``--grpc-listen`` endpoint string → the address grpcio binds (no grpcio import here:
``twistd rocketpy`` checks its options before loading the gRPC extra)."""

from __future__ import annotations

import re


def listen_address(endpoint: str) -> str:
    """``tcp:8081:interface=127.0.0.1`` → ``127.0.0.1:8081`` (what grpcio binds); IPv6 as
    ``tcp6:8081:interface=\\:\\:1`` → ``[::1]:8081``.

    :raises ValueError: for anything but a ``tcp:PORT[:interface=HOST]`` endpoint.
    """
    # Twisted's endpoint syntax: ":" separates, "\\:" is a colon (an IPv6 interface)
    parts = [part.replace("\\:", ":") for part in re.split(r"(?<!\\):", endpoint)]
    if len(parts) < 2 or parts[0] not in ("tcp", "tcp6"):
        raise ValueError(f"--grpc-listen must be tcp:PORT[:interface=HOST], not {endpoint!r}")
    port, host = parts[1].removeprefix("port="), "::" if parts[0] == "tcp6" else "0.0.0.0"
    for extra in parts[2:]:
        key, _, value = extra.partition("=")
        if key != "interface" or not value:
            raise ValueError(f"--grpc-listen accepts only interface=HOST after the port, not {extra!r}")
        host = value
    if not port.isdigit():
        raise ValueError(f"--grpc-listen port must be a number, not {port!r}")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
