"""Consume offsets of a push consumer (Java's ``RemoteBrokerOffsetStore`` and ``LocalFileOffsetStore``).

Offsets live in memory and are written every 5 s and on shutdown: to each queue's master
(clustering), or, in broadcasting mode where offsets belong to the client, to a local file
(``offsets.json``, replaced atomically, read when a queue is first held), so a restarted
broadcasting consumer resumes where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from rocketpy.client.errors import MQBrokerError, MQError, RemotingError
from rocketpy.common.fastjson import dump_json
from rocketpy.common.route import MessageQueue
from rocketpy.util.fileio import read_if_exists, write_atomically

if TYPE_CHECKING:
    from rocketpy.client.consumer import ConsumerBase

#: ``read_store`` results: the broker has no offset / the broker could not be asked.
NO_OFFSET = -1
UNKNOWN_OFFSET = -2


class OffsetStore:
    """The next offset to consume, per queue, and its copy on the broker or in a local file."""

    log = Logger()

    def __init__(self, consumer: ConsumerBase, remote: bool = True, path: str | None = None,
                 run_blocking: Callable[..., Deferred[Any]] | None = None) -> None:
        """
        :param remote: False for broadcasting: the offsets are this client's own.
        :param path: broadcasting: the file they are kept in; None keeps them in memory only.
        :param run_blocking: ``(f, *args) -> Deferred``: runs the file reads and writes off the
            reactor thread (required with ``path``).
        """
        self._consumer = consumer
        self._remote = remote
        self._path = None if remote else path
        self._run_blocking = run_blocking
        self._file: dict[MessageQueue, int] | None = None  # the local file's offsets, once read or written
        self._kept: dict[MessageQueue, int] = {}  # broadcasting: persisted one by one, read before the file
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
        """The broker's (or local file's) offset, also kept in memory; :data:`NO_OFFSET` or
        :data:`UNKNOWN_OFFSET` otherwise."""
        if not self._remote:
            return await self._read_local(mq)
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
        """Write ``mq``'s offset to its master (oneway); errors are logged. Broadcasting: it
        becomes the offset the file holds for ``mq`` (the file is written by :meth:`persist_all`)."""
        offset = self.table.get(mq)
        if offset is None or offset < 0:
            return
        if not self._remote:
            self._kept[mq] = offset
            return
        try:
            await self._consumer.update_offset(mq, offset, oneway=True)
        except (RemotingError, MQError) as e:
            self.log.warn("persisting offset {offset} of {mq} failed: {error}", offset=offset, mq=mq, error=e)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Persist the offsets of ``mqs`` (the queues this client holds)."""
        if not self._remote:
            await self._write_local(mqs)
            return
        for mq in sorted(mqs):
            await self.persist(mq)

    async def _read_local(self, mq: MessageQueue) -> int:
        if self._path is None:
            return self.read(mq)
        if self._file is None:
            assert self._run_blocking is not None
            try:
                self._file = decode_offsets(await self._run_blocking(read_if_exists, self._path))
            except (OSError, ValueError) as e:
                self.log.warn("local offsets {path} unreadable ({error}): starting without them",
                              path=self._path, error=e)
                self._file = {}
        offset = self._kept.get(mq, self._file.get(mq, NO_OFFSET))
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
        return offset

    async def _write_local(self, mqs: Iterable[MessageQueue]) -> None:
        """Replace the local file with the offsets of ``mqs`` (Java's ``persistAll``)."""
        if self._path is None:
            return
        assert self._run_blocking is not None
        offsets = {mq: self.table[mq] for mq in mqs if self.table.get(mq, NO_OFFSET) >= 0}
        self._kept.update(offsets)
        if offsets == self._file:
            return
        try:
            await self._run_blocking(write_atomically, self._path, encode_offsets(offsets))
        except OSError as e:
            self.log.warn("writing local offsets {path} failed: {error}", path=self._path, error=e)
            return
        self._file = offsets


def encode_offsets(offsets: dict[MessageQueue, int]) -> bytes:
    """The local offsets file: ``{"offsetTable":[{"brokerName":…,"offset":…,"queueId":…,"topic":…},…]}``."""
    return dump_json({"offsetTable": [
        dict(mq.to_json(), offset=offset) for mq, offset in sorted(offsets.items())
    ]})


def decode_offsets(data: bytes | None) -> dict[MessageQueue, int]:
    """:func:`encode_offsets`' output back (an absent file: no offsets).

    :raises ValueError: the content is not such a file.
    """
    if data is None:
        return {}
    try:
        entries = json.loads(data)["offsetTable"]
        return {MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"])): int(e["offset"])
                for e in entries}
    except (KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"not an offsets file: {e!r}") from None
