"""Child process for the crash tests: put messages through StoreService until killed.

Usage: ``python -m tests.store.crashwriter STORE_DIR FLUSH_DISK_TYPE WRITE_PATH [CQ_FLUSH_INTERVAL]``

Prints ``ready`` once the store is loaded, then one line per acknowledged put,
``SEQ COMMIT_LOG_OFFSET QUEUE_ID QUEUE_OFFSET``, written after the put's Deferred fired
with PUT_OK. The parent kills it with SIGKILL at some point of the stream.
"""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet.defer import Deferred

from rocketpy.common.message import MessageExt, decode_offset_msg_id
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult

FILE_SIZE = 64 * 1024  # small files: the stream rolls through many of them
QUEUES = 4
WINDOW = 32  # puts in flight
TOPIC = "crash"


def crash_config(store_dir: str, flush_disk_type: str, write_path: str,
                 cq_flush_interval: float = 1.0, completion: str = "native", file_size: int = FILE_SIZE,
                 ) -> MessageStoreConfig:
    """The store settings the writer and the test's recovery share (the consume-queue flush, which
    writes the checkpoint, every ``cq_flush_interval`` seconds; SYNC_FLUSH's ``sync_flush_completion``;
    the commit log's file size: files below the zeros-ahead window are appended and synced in the
    writer pool, larger ones on the reactor with ``completion``)."""
    return MessageStoreConfig(
        flush_interval_consume_queue=cq_flush_interval,
        store_path_root_dir=store_dir,
        mapped_file_size_commit_log=file_size,
        mapped_file_size_consume_queue=1000 * 20,
        flush_disk_type=flush_disk_type,
        commit_log_write_path=write_path,
        max_hash_slot_num=1000,
        max_index_num=4000,
        os_page_cache_busy_timeout=30.0,  # a loaded machine must not turn the writer's puts away
        sync_flush_completion=completion,
    )


def body_of(seq: int) -> bytes:
    """Message ``seq``'s body: its number, padded to a size between 50 and ~2 KiB."""
    head = b"crash-%d:" % seq
    return head + b"." * (50 + seq * 397 % 2000)


def crash_message(seq: int, queue_id: int) -> MessageExt:
    return MessageExt(topic=TOPIC, body=body_of(seq), queue_id=queue_id, properties={"KEYS": "k%d" % seq})


class Writer:
    """Keeps ``WINDOW`` puts in flight, every fourth one a batch of three."""

    def __init__(self, service: StoreService, out: Any) -> None:
        self._service = service
        self._out = out
        self._seq = 0

    def start(self) -> None:
        for _ in range(WINDOW):
            self._next()

    def _next(self) -> None:
        first = self._seq
        queue_id = first % QUEUES
        if first % 4 == 3:  # a batch goes to one queue, as RocketMQ's do
            msgs = [crash_message(first + i, queue_id) for i in range(3)]
            d = self._service.put_messages(msgs)
        else:
            msgs = [crash_message(first, queue_id)]
            d = self._service.put_message(msgs[0])
        self._seq += len(msgs)
        d.addCallback(self._acked, first, msgs)

    def _acked(self, result: PutMessageResult, first: int, msgs: list[MessageExt]) -> None:
        append = result.append
        if not result.ok or append is None:
            self._out.write("error %s\n" % result.status.value)
            self._out.flush()
            return  # stopping: put no more
        for i, (msg, msg_id) in enumerate(zip(msgs, append.msg_ids)):
            offset = decode_offset_msg_id(msg_id)[1]
            self._out.write("%d %d %d %d\n" % (first + i, offset, msg.queue_id, append.queue_offset + i))
        self._out.flush()
        self._next()


def main(reactor: Any, store_dir: str, flush_disk_type: str, write_path: str,
         cq_flush_interval: str = "1.0", completion: str = "native", file_size: str = str(FILE_SIZE),
         ) -> Deferred[None]:
    config = crash_config(store_dir, flush_disk_type, write_path, float(cq_flush_interval), completion,
                          int(file_size))
    service = StoreService(MessageStore(config), reactor, max_queue_wait=30.0)  # no busy refusals under load

    async def run() -> None:
        reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
        await service.startService()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        Writer(service, sys.stdout).start()
        await Deferred()  # until killed

    return Deferred.fromCoroutine(run())


if __name__ == "__main__":
    from twisted.internet.task import react

    react(main, sys.argv[1:7])
