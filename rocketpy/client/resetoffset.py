"""RESET_CONSUMER_CLIENT_OFFSET (220) on the client side: a broker tells the clients of a group
to move to new offsets on a topic (``mqadmin resetOffsetByTime``, via INVOKE_BROKER_TO_RESET_OFFSET)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.common.fastjson import loads
from rocketpy.common.headers import get_str
from rocketpy.common.route import MessageQueue
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.command import RemotingCommand

#: ``(topic, group, offsets)``: move this client's consumer of the group (if any)
Reset = Callable[[str, str, dict[MessageQueue, int]], object]


@implementer(IRequestProcessor)
class ResetOffsetProcessor:
    """Reads the new offsets and hands them to ``reset``; no reply (the broker sends it oneway)."""

    log = Logger()

    def __init__(self, reset: Reset) -> None:
        self._reset = reset

    def process_request(self, channel: object, request: RemotingCommand) -> None:
        topic, group = get_str(request.ext_fields, "topic"), get_str(request.ext_fields, "group")
        try:
            offsets = parse_offset_table(request.body)
        except ValueError as e:
            self.log.warn("[reset-offset] bad body for {group} on {topic}: {error}", group=group, topic=topic, error=e)
            return
        self.log.info("[reset-offset] {group} on {topic}: {offsets}", group=group, topic=topic, offsets=offsets)
        self._reset(topic, group, offsets)

    def reject_request(self) -> bool:
        return False


def parse_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """ResetOffsetBody (queue objects as keys) or the C++ shape (a list of queues with offsets).

    :raises ValueError: any other body.
    """
    try:
        table: Any = loads(body)["offsetTable"]
        if isinstance(table, list):
            return {MessageQueue(e["topic"], e["brokerName"], int(e["queueId"])): int(e["offset"]) for e in table}
        return {_queue(dict(key)): int(offset) for key, offset in table.items()}
    except (KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"not a reset-offset body: {e!r}") from None


def _queue(fields: dict[str, Any]) -> MessageQueue:
    return MessageQueue(str(fields["topic"]), str(fields["brokerName"]), int(fields["queueId"]))
