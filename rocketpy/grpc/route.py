"""QueryRoute's queues and QueryAssignment's assignments from the brokers of a topic (``RouteActivity``).

Pure functions: :class:`RouteBroker` says what one master offers (its permission, queue counts
and the gRPC endpoint serving it); :mod:`rocketpy.grpc.cluster` finds the other brokers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rocketpy.common.topic import PERM_READ, PERM_WRITE
from rocketpy.grpc.v2 import definition_pb2 as pb

#: 4.x topics carry no message type: every type is accepted (the Java proxy's MIXED).
ALL_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


@dataclass(frozen=True, slots=True)
class RouteBroker:
    """One master's queues of a topic: ``broker`` names it and carries its gRPC endpoint."""

    broker: pb.Broker
    perm: int
    read_queue_nums: int
    write_queue_nums: int


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    """``host:port`` as a 5.x client dials it: IPv4, IPv6 or (a name) DOMAIN_NAME, which the
    clients turn into ``ipv4:`` / ``ipv6:`` / ``dns:`` targets."""
    version: int = 0
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        pass
    scheme = {4: pb.AddressScheme.IPv4, 6: pb.AddressScheme.IPv6}.get(version, pb.AddressScheme.DOMAIN_NAME)
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def master(name: str, endpoints: pb.Endpoints) -> pb.Broker:
    """A master (id 0: the clients read and write masters only) at ``endpoints``."""
    return pb.Broker(name=name, id=0, endpoints=endpoints)


def permission(perm: int) -> Any:
    read, write = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if read and write:
        return pb.Permission.READ_WRITE
    return pb.Permission.READ if read else pb.Permission.WRITE if write else pb.Permission.NONE


def route_queues(topic: pb.Resource, brokers: Iterable[RouteBroker]) -> list[pb.MessageQueue]:
    """Every broker's queues, numbered from 0 per broker: read-only, write-only, then read-write
    ones (``RouteActivity.genMessageQueueFromQueueData``); one NONE queue or more for a broker
    that allows neither."""
    queues = []
    for b in brokers:
        read, write = bool(b.perm & PERM_READ), bool(b.perm & PERM_WRITE)
        both = min(b.read_queue_nums, b.write_queue_nums) if read and write else 0
        plan: list[Any] = ([pb.Permission.READ] * ((b.read_queue_nums - both) if read else 0)
                           + [pb.Permission.WRITE] * ((b.write_queue_nums - both) if write else 0)
                           + [pb.Permission.READ_WRITE] * both)
        if not read and not write:
            plan = [pb.Permission.NONE] * max(1, b.read_queue_nums, b.write_queue_nums)
        queues += [pb.MessageQueue(topic=topic, id=queue_id, permission=p, broker=b.broker,
                                   accept_message_types=ALL_TYPES) for queue_id, p in enumerate(plan)]
    return queues


def assignments(topic: pb.Resource, brokers: Iterable[RouteBroker], fifo: bool) -> list[pb.Assignment]:
    """One assignment per readable broker with queue id -1 (POP from every queue), or one per
    queue for a FIFO group (``RouteActivity.queryAssignment``)."""
    found = []
    for b in brokers:
        if not b.perm & PERM_READ or b.read_queue_nums <= 0:
            continue
        ids = range(b.read_queue_nums) if fifo else [-1]
        found += [pb.Assignment(message_queue=pb.MessageQueue(topic=topic, id=queue_id, permission=permission(b.perm),
                                                              broker=b.broker)) for queue_id in ids]
    return found
