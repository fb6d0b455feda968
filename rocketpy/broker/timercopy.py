"""GET_TIMER_CHECK_POINT (60): a master serves its timer checkpoint, a slave copies it.

Java 5's slave copies its master's ``TimerCheckpoint`` (``SlaveSynchronize.syncTimerCheckPoint``)
so that once promoted it resumes timer delivery where the master was. The answer's body starts
with Java's 56 bytes (``TimerCheckpoint.encode``: ``lastReadTimeMs``, ``lastTimerLogFlushPos``,
``lastTimerQueueOffset``, ``masterTimerQueueOffset``, then the data version's state version,
timestamp and counter, big-endian longs), which Java's ``decode`` reads and stops at; rocketpy's
own checkpoint (``timerCheckpoint.json``, :class:`~rocketpy.broker.timer.TimerCheckpoint`)
follows as JSON, and that is what a rocketpy slave takes.
"""

from __future__ import annotations

import json
import struct

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from rocketpy.broker.timer import TimerCheckpoint
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.interfaces import IChannel, IRequestProcessor, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

JAVA_CHECKPOINT = struct.Struct(">7q")


def checkpoint_body(cp: TimerCheckpoint, now_ms: int) -> bytes:
    """The answer's body: Java's layout (read time: the earliest pending due time, at most now;
    no timer log; queue offsets read and delivered below), then ``cp`` as JSON."""
    read_ms = min(cp.pending_from[0], now_ms)
    return JAVA_CHECKPOINT.pack(read_ms, 0, cp.scan_offset, cp.low_offset, 0, now_ms, 0) + cp.encode()


def copy_checkpoint(cp: TimerCheckpoint, body: bytes, queue_end: int) -> bool:
    """Take a master's checkpoint into ``cp``; True when it changed.

    The slave's timer queue may end before what the master has read (replication lags): the copy
    is cut there, so entries this slave receives later count as pending (delivered again if the
    slave is promoted before the next copy: at least once), never as delivered unread.

    :param queue_end: this slave's timer queue end (``rmq_sys_wheel_timer`` queue 0).
    :raises ValueError: a body without rocketpy's JSON (a Java master's) or a malformed one.
    """
    if len(body) <= JAVA_CHECKPOINT.size:
        raise ValueError(f"a {len(body)}-byte timer checkpoint holds no rocketpy checkpoint")
    obj = json.loads(body[JAVA_CHECKPOINT.size:])
    if not isinstance(obj, dict):
        raise ValueError("timer checkpoint: not a JSON object")
    before = cp.to_json()
    cp.apply_json(obj)
    if cp.scan_offset > queue_end:
        cp.scan_offset = queue_end
        cp.low_offset = min(cp.low_offset, queue_end)
    return cp.to_json() != before


class SlaveTimerCheckpoint:
    """A slave's side: copy the master's answer and write ``timerCheckpoint.json`` when it changed.

    :param cp: the slave's checkpoint (its writer is the broker's config pool).
    :param store: tells the slave's timer queue end.
    """

    def __init__(self, cp: TimerCheckpoint, store: IStoreService) -> None:
        self._cp = cp
        self._store = store

    def take(self, body: bytes) -> Deferred[None]:
        """:raises ValueError: as :func:`copy_checkpoint`."""
        if copy_checkpoint(self._cp, body, self._store.get_max_offset_in_queue(TIMER_TOPIC, 0)):
            return self._cp.persist()
        return succeed(None)


@implementer(IRequestProcessor)
class TimerCheckpointProcessor:
    """GET_TIMER_CHECK_POINT (60): this broker's timer checkpoint as last written (every 1 s)."""

    codes = (RequestCode.GET_TIMER_CHECK_POINT,)

    def __init__(self, cp: TimerCheckpoint, clock: IReactorTime) -> None:
        self._cp = cp
        self._clock = clock

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        body = checkpoint_body(self._cp, int(self._clock.seconds() * 1000))
        return request.make_response(ResponseCode.SUCCESS, None, {}, body)
