"""HA settings: RocketMQ's ``MessageStoreConfig`` HA names in snake_case, times in seconds."""

from __future__ import annotations

import re
from dataclasses import dataclass

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

_PORT = re.compile(r"^((?:tcp|tcp6):(?:port=)?)(\d+)")


@dataclass
class HAConfig:
    """Replication settings (doc/ha.md)."""

    #: bytes of commit log per frame (``haTransferBatchSize``)
    transfer_batch_size: int = 32 * 1024
    #: idle seconds before a heartbeat: the master's empty frame, the slave's offset report
    send_heartbeat_interval: float = 5.0
    #: seconds without reading before a link is dropped (``haHousekeepingInterval``)
    housekeeping_interval: float = 20.0
    #: a slave further behind than this makes SYNC_MASTER sends SLAVE_NOT_AVAILABLE
    slave_fall_behind_max: int = 256 * 1024 * 1024
    #: how long a SYNC_MASTER send waits for a slave's ack (``slaveTimeout``)
    slave_timeout: float = 3.0
    #: seconds between the slave's redials of its master
    reconnect_interval: float = 5.0
    #: seconds a slave's dial may take before it is given up (a black-holed master address)
    connect_timeout: float = 3.0
    #: bytes a slave buffers from its master before it stops reading
    read_buffer_size: int = 4 * 1024 * 1024
    #: seconds between the slave's copies of the master's topics, offsets and groups
    sync_interval: float = 10.0
    #: seconds between the slave's copies of the master's timer checkpoint (Java 5: 3 s)
    timer_checkpoint_sync_interval: float = 3.0


def endpoint_tcp_port(endpoint: str) -> int | None:
    """The port of a ``tcp:PORT…`` / ``tcp:port=PORT…`` endpoint string, or None."""
    match = _PORT.match(endpoint)
    return int(match.group(2)) if match else None


def ha_listen_endpoint(listen: str) -> str:
    """The HA server endpoint for a broker endpoint: its port + 1 (port 0 stays 0).

    :raises ValueError: when ``listen`` is not a ``tcp:PORT…`` endpoint.
    """
    match = _PORT.match(listen)
    if match is None:
        raise ValueError(f"cannot derive an HA port from {listen!r}: give the HA endpoint")
    port = int(match.group(2))
    return f"{match.group(1)}{port + 1 if port else 0}{listen[match.end():]}"
