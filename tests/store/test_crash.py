"""Crash tests: SIGKILL a child writing through StoreService, then recover the store in-process."""

from __future__ import annotations

import os
import signal
import struct
import sys
from typing import Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessExitedAlready, ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from rocketpy.common.message import RecordError, decode_record
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.status import GetMessageStatus
from tests.store.crashwriter import FILE_SIZE, QUEUES, TOPIC, body_of, crash_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACKS_BEFORE_KILL = 1500
#: commit-log files past the zeros-ahead window (1 MiB): SYNC_FLUSH appends and syncs on the reactor
REACTOR_FILE_SIZE = 4 << 20


class WriterProtocol(ProcessProtocol):
    """Collects the child's acknowledgement lines and kills it after ``kill_after`` of them."""

    def __init__(self, kill_after: int, until: Callable[[], bool] = lambda: True) -> None:
        self.kill_after = kill_after
        self.until = until
        self.acks: list[tuple[int, int, int, int]] = []
        self.errors: list[str] = []
        self._buffer = b""
        self._stderr = b""
        self.ended: Deferred[None] = Deferred()
        self.killed = False

    def outReceived(self, data: bytes) -> None:
        *lines, self._buffer = (self._buffer + data).split(b"\n")  # an unfinished line waits
        for line in lines:
            fields = line.split()
            if fields and fields[0].isdigit():
                seq, offset, queue_id, queue_offset = map(int, fields)
                self.acks.append((seq, offset, queue_id, queue_offset))
            elif fields and fields[0] == b"error":
                self.errors.append(line.decode())
        if len(self.acks) >= self.kill_after and not self.killed and self.until():
            self.killed = True
            # Let the stream run a little longer so that the kill lands among writes in flight.
            reactor.callLater(0.03, self._kill)

    def _kill(self) -> None:
        assert self.transport is not None
        try:
            self.transport.signalProcess("KILL")
        except ProcessExitedAlready:
            pass  # processEnded reports it

    def errReceived(self, data: bytes) -> None:
        self._stderr += data

    def processEnded(self, reason: Failure) -> None:
        if isinstance(reason.value, ProcessTerminated) and reason.value.signal == signal.SIGKILL:
            self.ended.callback(None)
        else:
            self.ended.errback(RuntimeError("writer exited early: " + self._stderr.decode(errors="replace")))


def last_file_end(commit_log_dir: str) -> tuple[str, int, int]:
    """Walk the newest commit-log file.

    :returns: its path, the end of its last valid record, and that record's start.
    """
    name = max(os.listdir(commit_log_dir))
    path = os.path.join(commit_log_dir, name)
    with open(path, "rb") as f:
        data = f.read()
    pos = previous = 0
    while pos + 8 <= len(data):
        try:
            size = decode_record(data, pos, check_crc=True).store_size
        except RecordError:
            break
        previous, pos = pos, pos + size
    return path, pos, previous


def checkpoint_offset(store_dir: str) -> int:
    """The ``physic_offset`` of the store's checkpoint file as on disk now (0 before there is one)."""
    try:
        with open(os.path.join(store_dir, "checkpoint"), "rb") as f:
            f.seek(40)
            data = f.read(8)
    except FileNotFoundError:
        return 0
    return struct.unpack(">q", data)[0] if len(data) == 8 else 0


def tear_tail(path: str, end: int, previous: int) -> None:
    """Leave a half-written record at ``end``, as a kill in the middle of a copy would.

    A SIGKILL rarely lands inside the write call itself, so the torn tail is made
    explicitly: the first half of the last valid record, written after it.
    """
    with open(path, "r+b") as f:
        f.seek(previous)
        head = f.read(end - previous)
        if end + len(head) // 2 > os.path.getsize(path):
            return  # the file is full: no room for a torn tail
        f.seek(end)
        f.write(head[: len(head) // 2])


class CrashTests(TestCase):
    """Acknowledged puts survive a SIGKILL; the torn tail does not."""

    timeout = 60

    async def crash_and_recover(self, flush_disk_type: str, write_path: str,
                                until_checkpoint_beyond: int | None = None, reboot: bool = False,
                                completion: str = "native", file_size: int = FILE_SIZE) -> MessageStore:
        """Write, SIGKILL the writer (once its checkpoint offset is past ``until_checkpoint_beyond``),
        tear the tail, recover in-process and check every acknowledged put; return the store.

        :param reboot: recover as after a machine restart (the abort file names another boot).
        :param completion: the writer's ``sync_flush_completion``; ``file_size``: its commit-log file size.
        """
        store_dir = os.path.abspath(self.mktemp())
        writer = WriterProtocol(ACKS_BEFORE_KILL, lambda: until_checkpoint_beyond is None
                                or checkpoint_offset(store_dir) > until_checkpoint_beyond)
        env = dict(os.environ, PYTHONPATH=ROOT)
        args = [sys.executable, "-m", "tests.store.crashwriter", store_dir, flush_disk_type, write_path]
        args.append("1.0" if until_checkpoint_beyond is None else "0.1")  # 0.1 s checkpoints: the kill comes soon
        args += [completion, str(file_size)]
        reactor.spawnProcess(writer, sys.executable, args, env=env, path=ROOT)
        await writer.ended
        self.assertEqual(writer.errors, [])
        self.assertGreaterEqual(len(writer.acks), ACKS_BEFORE_KILL)
        config = crash_config(store_dir, flush_disk_type, write_path, file_size=file_size)
        self.assertTrue(os.path.exists(config.abort_path), "the writer died without a clean shutdown")

        path, end, previous = last_file_end(config.commit_log_dir)
        tear_tail(path, end, previous)
        if reboot:
            with open(config.abort_path, "w") as abort:
                abort.write("another-boot")
        self.checkpoint_at_kill = checkpoint_offset(store_dir)
        file_start = int(os.path.basename(path))

        store = MessageStore(config)
        self.assertTrue(store.load())
        store.start()
        self.addCleanup(store.shutdown)

        # ASYNC_FLUSH acknowledges a put once it is in the page cache, not on disk. A process
        # kill leaves the page cache to the OS, which still writes it out, so those puts
        # survive too; only a power loss could lose them (not tested here).
        for seq, offset, queue_id, queue_offset in writer.acks:
            msg = store.look_message_by_offset(offset)
            self.assertIsNotNone(msg, f"acknowledged message {seq} at {offset} is gone")
            assert msg is not None
            self.assertEqual((msg.body, msg.queue_id, msg.queue_offset), (body_of(seq), queue_id, queue_offset))
            got = store.get_message("g", TOPIC, queue_id, queue_offset, 1)
            self.assertEqual(got.status, GetMessageStatus.FOUND)
            self.assertEqual(decode_record(got.records[0]).body, body_of(seq))

        # The tail after the last complete record is gone, and zeroed on disk.
        self.assertEqual(store.max_physical_offset, file_start + end)
        self.assertIsNone(store.select_one_message_by_offset(file_start + end))
        with open(path, "rb") as f:
            f.seek(end)
            self.assertEqual(f.read().count(0), os.path.getsize(path) - end)
        recovered = sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))
        self.assertGreaterEqual(recovered, len(writer.acks))
        report = store.recovery
        assert report is not None
        self.assertEqual(report.page_cache_intact, not reboot)
        if not reboot:  # only the process died: the walk starts at the last record the queues held
            self.assertGreaterEqual(report.start, max(offset for _, offset, _, _ in writer.acks))
        return store

    async def test_recovery_starts_at_the_checkpoint(self) -> None:
        """A crash recovery (as after a machine restart) of a store of many files walks from the
        checkpoint's offset, written by the running store on each consume-queue flush, not from the
        first file; nothing acknowledged is lost."""
        three_files = 3 * FILE_SIZE
        store = await self.crash_and_recover("ASYNC_FLUSH", "mmap", until_checkpoint_beyond=three_files,
                                             reboot=True)
        report = store.recovery
        assert report is not None
        self.assertTrue(report.from_checkpoint_offset)
        self.assertEqual(report.start, self.checkpoint_at_kill)
        self.assertGreater(report.start, three_files)
        self.assertLessEqual(report.start, report.end)
        # the new run checkpoints at once: a crash now would walk nothing
        self.assertEqual(checkpoint_offset(store.config.store_path_root_dir), report.end)

    async def test_async_flush_pwrite(self) -> None:
        """ASYNC_FLUSH, pwrite path: every acknowledged put is readable after a SIGKILL."""
        await self.crash_and_recover("ASYNC_FLUSH", "pwrite")

    async def test_async_flush_mmap(self) -> None:
        """ASYNC_FLUSH, mmap path: the same through mmap writes."""
        await self.crash_and_recover("ASYNC_FLUSH", "mmap")

    async def test_sync_flush(self) -> None:
        """SYNC_FLUSH: every put acknowledged after its group-commit flush survives."""
        await self.crash_and_recover("SYNC_FLUSH", "pwrite")

    async def test_sync_flush_on_the_reactor(self) -> None:
        """SYNC_FLUSH with files large enough for appends on the reactor and the group commit's sync on
        the native thread: the same."""
        await self.crash_and_recover("SYNC_FLUSH", "pwrite", completion="native", file_size=REACTOR_FILE_SIZE)

    async def test_sync_flush_uring(self) -> None:
        """The same with the syncs through io_uring (the native thread where the kernel refuses it)."""
        await self.crash_and_recover("SYNC_FLUSH", "pwrite", completion="uring", file_size=REACTOR_FILE_SIZE)
