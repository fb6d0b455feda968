"""GET_TIMER_CHECK_POINT (60): the master's answer (Java's 56 bytes, then rocketpy's checkpoint) and
the slave's copy of it, cut at the slave's own timer queue end."""

from __future__ import annotations

import json
import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.timer import TimerCheckpoint
from rocketpy.broker.timercopy import (
    JAVA_CHECKPOINT,
    SlaveTimerCheckpoint,
    TimerCheckpointProcessor,
    checkpoint_body,
    copy_checkpoint,
)
from rocketpy.common.message import MessageExt
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.fakes import FakeChannel, FakeStoreService


def master_checkpoint() -> TimerCheckpoint:
    cp = TimerCheckpoint()
    cp.apply_json({"lowOffset": 7, "scanOffset": 12, "pendingFromMs": 5_000, "pendingFromOffset": 9})
    return cp


class CheckpointBodyTests(SynchronousTestCase):
    def test_java_prefix_then_json(self) -> None:
        """Java's decode reads lastReadTimeMs (the earliest pending due time, at most now), no timer log
        position, the queue offsets read and delivered, a data version; the JSON follows."""
        body = checkpoint_body(master_checkpoint(), now_ms=6_000)
        self.assertEqual(JAVA_CHECKPOINT.unpack_from(body), (5_000, 0, 12, 7, 0, 6_000, 0))
        self.assertEqual(json.loads(body[56:]), master_checkpoint().to_json())
        idle = TimerCheckpoint()  # nothing pending: read up to now
        self.assertEqual(JAVA_CHECKPOINT.unpack_from(checkpoint_body(idle, now_ms=6_000))[0], 6_000)

    def test_processor(self) -> None:
        """The broker answers SUCCESS with the body of its checkpoint at the clock's time."""
        clock = Clock()
        clock.advance(8)
        processor = TimerCheckpointProcessor(master_checkpoint(), clock)
        request = RemotingCommand.request(RequestCode.GET_TIMER_CHECK_POINT, {})
        response = processor.process_request(FakeChannel(), request)
        self.assertEqual((response.code, response.body),
                         (ResponseCode.SUCCESS, checkpoint_body(master_checkpoint(), 8000)))


class CopyTests(SynchronousTestCase):
    def test_copy_when_caught_up(self) -> None:
        """A slave holding the master's whole timer queue takes the checkpoint as it is; the same
        answer again changes nothing."""
        cp = TimerCheckpoint()
        body = checkpoint_body(master_checkpoint(), 6_000)
        self.assertTrue(copy_checkpoint(cp, body, queue_end=12))
        self.assertEqual(cp.to_json(), master_checkpoint().to_json())
        self.assertFalse(copy_checkpoint(cp, body, queue_end=12))

    def test_cut_at_the_slave_queue_end(self) -> None:
        """What the slave has not received yet counts as pending: the read offset (and the delivered-below
        offset) stop at the slave's queue end."""
        cp = TimerCheckpoint()
        copy_checkpoint(cp, checkpoint_body(master_checkpoint(), 6_000), queue_end=10)
        self.assertEqual((cp.low_offset, cp.scan_offset, cp.pending_from), (7, 10, (5_000, 9)))
        copy_checkpoint(cp, checkpoint_body(master_checkpoint(), 6_000), queue_end=3)
        self.assertEqual((cp.low_offset, cp.scan_offset), (3, 3))

    def test_bad_bodies(self) -> None:
        """A Java master's 56 bytes alone, or no JSON object after them: ValueError (the sync logs it)."""
        java = JAVA_CHECKPOINT.pack(1, 2, 3, 4, 5, 6, 7)
        for body in (java, java + b"[1]", java + b"{", b""):
            self.assertRaises(ValueError, copy_checkpoint, TimerCheckpoint(), body, 10)

    def test_slave_writes_the_file_when_changed(self) -> None:
        """The slave's taker writes ``timerCheckpoint.json`` on a change only."""
        path = os.path.join(self.mktemp(), "timerCheckpoint.json")
        os.makedirs(os.path.dirname(path))
        cp = TimerCheckpoint(path)
        writes: list[bytes] = []
        cp.writer = lambda _path, data: writes.append(data)
        store = FakeStoreService()
        for i in range(12):
            self.successResultOf(store.put_message(MessageExt(topic=TIMER_TOPIC, body=b"%d" % i)))
        taker = SlaveTimerCheckpoint(cp, store)
        body = checkpoint_body(master_checkpoint(), 6_000)
        self.successResultOf(taker.take(body))
        self.successResultOf(taker.take(body))
        self.assertEqual([json.loads(w) for w in writes], [master_checkpoint().to_json()])
