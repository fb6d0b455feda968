"""Long polling: pull requests that found nothing wait here for a message (``PullRequestHoldService``).

A parked request is keyed ``topic@queueId``. It is re-run (by a callable the
pull processor hands over, without suspend and without committing the offset
again) as soon as the store reports a message beyond its offset, at the 5 s
re-check when the queue grew, or at its deadline. Every timer runs on the
injected clock.

A request is never held for a connection that is gone: one parked by a channel
that then closes is dropped (the service is a channel event listener of the
remoting server), and one whose read ends after its channel began closing is
dropped at once. Once stopped, the service holds nothing: stopping drops what is
parked and a later suspend is answered None (no reply) at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from zope.interface import implementer

from rocketpy.interfaces import IChannelEventListener
from rocketpy.remoting.command import RemotingCommand

#: Re-runs a parked pull; fires with its response.
Rerun = Callable[[], "Deferred[RemotingCommand | None]"]

RECHECK_INTERVAL = 5.0
#: Never hold longer than this: the clients' pull RPC timeout is 30 s.
MAX_HOLD = 20.0


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}@{queue_id}"


@dataclass(eq=False)
class _Parked:
    """One held pull request."""

    key: str
    channel: Any
    offset: int
    rerun: Rerun
    result: Deferred[RemotingCommand | None] = field(init=False)
    timer: IDelayedCall | None = None


@implementer(IChannelEventListener)
class PullRequestHoldService(Service):
    """Holds pull requests until a message arrives in their queue or their time is up.

    As a channel event listener of the remoting server it drops the requests of
    channels that close, idle out or fail.

    :param clock: schedules the deadlines and the periodic re-check.
    :param max_offset: ``(topic, queue_id) -> next offset to be written``, read in memory.
    :param recheck_interval: seconds between re-checks of every parked request.
    :param max_hold: upper bound of any hold in seconds, whatever the client asked.
    """

    log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        max_offset: Callable[[str, int], int],
        recheck_interval: float = RECHECK_INTERVAL,
        max_hold: float = MAX_HOLD,
    ) -> None:
        self._clock = clock
        self._max_offset = max_offset
        self._max_hold = max_hold
        self._recheck_interval = recheck_interval
        self._parked: dict[str, list[_Parked]] = {}
        self._arrival: Any = None  # listen_to's: wanted while something is parked
        self._loop = LoopingCall(self._recheck_all)
        self._loop.clock = clock

    # -- service -------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._loop.start(self._recheck_interval, now=False)

    def stopService(self) -> None:
        """Stop the re-check loop, cancel every deadline and drop the parked requests unanswered."""
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        for waiting in list(self._parked.values()):
            for p in list(waiting):
                self._unpark(p)
                self._finish(p, None)

    # -- parking -------------------------------------------------------------

    def suspend(
        self, channel: Any, topic: str, queue_id: int, offset: int, timeout: float, rerun: Rerun
    ) -> Deferred[RemotingCommand | None]:
        """Park a pull that found nothing at ``offset``.

        :param channel: the requesting connection (requests of a closed channel are dropped).
        :param timeout: seconds the client allows; capped at ``max_hold``.
        :param rerun: re-executes the pull; its response becomes the answer.
        :return: fires with the response to send, or None when the request was dropped.
        """
        if not self.running:  # a pull whose read ended while the broker stops
            return succeed(None)
        if _closing(channel):  # its read ended after the connection closed: nobody to answer
            self.log.debug("pull of closed channel {peer} not held", peer=getattr(channel, "remote_address", ""))
            return succeed(None)
        key = queue_key(topic, queue_id)
        parked = _Parked(key, channel, offset, rerun)
        parked.result = Deferred(lambda _: self._unpark(parked))
        parked.timer = self._clock.callLater(
            max(0.0, min(timeout, self._max_hold)), self._wake, parked
        )
        if not self._parked and self._arrival is not None:
            self._arrival.wanted = True
        self._parked.setdefault(key, []).append(parked)
        return parked.result

    def listen_to(self, store: Any) -> None:
        """Be ``store``'s arrival listener (:meth:`notify_message_arriving`), called only while a request
        is parked: else a put calls nothing here."""
        self._arrival = store.add_arrival_listener(self.notify_message_arriving)
        self._arrival.wanted = bool(self._parked)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake the requests of that queue waiting below ``max_offset``."""
        if not self._parked:  # nothing held (emptied lists are removed): no key to build per put
            return
        waiting = self._parked.get(queue_key(topic, queue_id))
        if not waiting:
            return
        for p in [p for p in waiting if max_offset > p.offset]:
            self._wake(p)

    def channel_closed(self, channel: Any) -> None:
        """Drop, unanswered, every request parked by ``channel``."""
        for waiting in list(self._parked.values()):
            for p in [p for p in waiting if p.channel is channel]:
                self._unpark(p)
                self._finish(p, None)

    def on_channel_connect(self, remote_address: str, channel: Any) -> None:
        pass

    def on_channel_close(self, remote_address: str, channel: Any) -> None:
        self.channel_closed(channel)

    def on_channel_idle(self, remote_address: str, channel: Any) -> None:
        self.channel_closed(channel)

    def on_channel_exception(self, remote_address: str, channel: Any) -> None:
        self.channel_closed(channel)

    def parked_count(self, topic: str | None = None, queue_id: int = 0) -> int:
        """How many requests are held, in total or for one queue."""
        if topic is not None:
            return len(self._parked.get(queue_key(topic, queue_id), ()))
        return sum(len(v) for v in self._parked.values())

    # -- internals -----------------------------------------------------------

    def _recheck_all(self) -> None:
        for key, waiting in list(self._parked.items()):
            topic, _, qid = key.rpartition("@")
            max_offset = self._max_offset(topic, int(qid))
            for p in [p for p in waiting if max_offset > p.offset]:
                self._wake(p)

    def _unpark(self, parked: _Parked) -> None:
        waiting = self._parked.get(parked.key)
        if waiting is not None and parked in waiting:
            waiting.remove(parked)
            if not waiting:
                del self._parked[parked.key]
                if not self._parked and self._arrival is not None:
                    self._arrival.wanted = False
        if parked.timer is not None and parked.timer.active():
            parked.timer.cancel()
        parked.timer = None

    def _wake(self, parked: _Parked) -> None:
        """Answer a parked request with a fresh run of it."""
        self._unpark(parked)
        try:
            d = parked.rerun()
        except Exception as e:  # a rerun must not kill the caller (arrival listener, loop)
            self.log.failure("re-running a held pull failed", level=LogLevel.error)
            parked.result.errback(e)
            return
        d.addCallbacks(lambda r: self._finish(parked, r), parked.result.errback)

    @staticmethod
    def _finish(parked: _Parked, response: RemotingCommand | None) -> None:
        if not parked.result.called:
            parked.result.callback(response)


def _closing(channel: Any) -> bool:
    """Whether ``channel`` is closing or closed (a :class:`RemotingProtocol`'s ``closing``; other
    channels, as the gRPC endpoint's, have no connection of their own and never are)."""
    return getattr(channel, "closing", False) is True
