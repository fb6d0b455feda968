"""Consume offsets of a push consumer (Java's ``RemoteBrokerOffsetStore``).

Offsets live in memory and are written to each queue's master every 5 s and
on shutdown. In broadcasting mode nothing is written (offsets are per client
and kept in memory only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from twisted.logger import Logger

from rocketpy.client.errors import MQBrokerError, MQError, RemotingError
from rocketpy.client.message import MessageQueue

if TYPE_CHECKING:
    from rocketpy.client.consumer import ConsumerBase

#: ``read_store`` results: the broker has no offset / the broker could not be asked.
NO_OFFSET = -1
UNKNOWN_OFFSET = -2


class OffsetStore:
    """The next offset to consume, per queue, and its copy on the broker."""

    log = Logger()

    def __init__(self, consumer: ConsumerBase, remote: bool = True) -> None:
        """:param remote: False for broadcasting: memory only."""
        self._consumer = consumer
        self._remote = remote
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if increase_only:
            offset = max(offset, self.table.get(mq, -1))
        self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int:
        """The offset in memory; -1 if none."""
        return self.table.get(mq, NO_OFFSET)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    async def read_store(self, mq: MessageQueue) -> int:
        """The broker's offset (also kept in memory); :data:`NO_OFFSET` or :data:`UNKNOWN_OFFSET` otherwise."""
        if not self._remote:
            return self.read(mq)
        try:
            offset = await self._consumer.query_offset(mq)
        except MQBrokerError:
            return NO_OFFSET
        except (RemotingError, MQError) as e:
            self.log.warn("reading the offset of {mq} failed: {error}", mq=mq, error=e)
            return UNKNOWN_OFFSET
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        """Write ``mq``'s offset to its master (oneway); errors are logged."""
        offset = self.table.get(mq)
        if offset is None or offset < 0 or not self._remote:
            return
        try:
            await self._consumer.update_offset(mq, offset, oneway=True)
        except (RemotingError, MQError) as e:
            self.log.warn("persisting offset {offset} of {mq} failed: {error}", offset=offset, mq=mq, error=e)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Persist the offsets of ``mqs`` (the queues this client holds)."""
        for mq in sorted(mqs):
            await self.persist(mq)
