"""Long polling over real loopback connections: a held pull never outlives its connection."""

from __future__ import annotations

import struct
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import TestCase

from rocketpy.broker.longpoll import PullRequestHoldService
from rocketpy.broker.pull import PullMessageProcessor
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageExt
from rocketpy.common.topic import TopicConfig
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codec import MAX_FRAME_LENGTH, encode
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost
from rocketpy.remoting.server import RemotingServer
from rocketpy.store.status import GetMessageResult
from tests.broker.test_pull import CPP_PULL
from tests.client.test_integration import IntegrationTestCase
from tests.fakes import FakeStoreService
from tests.remoting.test_network import _Watcher


class GatedReads(FakeStoreService):
    """Reads wait for ``gate`` while it is set (a read still in the store's pool)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: Deferred[None] | None = None
        self.waiting = 0

    def get_message(self, *args: Any, **kwargs: Any) -> Deferred[GetMessageResult]:
        if self.gate is None:
            return super().get_message(*args, **kwargs)
        self.waiting += 1
        read = super().get_message
        return self.gate.addCallback(lambda _: read(*args, **kwargs))


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await deferLater(reactor, 0.01, lambda: None)
    raise AssertionError(f"{what}: not reached")


def wakes(hold: PullRequestHoldService) -> list[IDelayedCall]:
    """The hold deadlines pending on the reactor."""
    return [c for c in reactor.getDelayedCalls() if getattr(c, "func", None) == hold._wake]


class HeldPullConnectionTests(TestCase):
    """A broker's pull processor and hold service behind a real remoting server on port 0."""

    async def setUp(self) -> None:  # type: ignore[override]
        self.store = GatedReads()
        topics = TopicConfigManager(Clock())
        topics.update_topic_config(TopicConfig("T", 4, 4))
        self.hold = PullRequestHoldService(reactor, self.store.get_max_offset_in_queue)
        self.hold.startService()
        self.addCleanup(self.hold.stopService)
        self.store.add_arrival_listener(self.hold.notify_message_arriving)
        self.server = RemotingServer(reactor, listeners=[self.hold])
        self.server.register_processor(RequestCode.PULL_MESSAGE, PullMessageProcessor(self.store, topics, self.hold))
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(self.server.factory())
        self.addCleanup(self.server.close)
        self.addCleanup(port.stopListening)
        self.address = f"127.0.0.1:{port.getHost().port}"

    def client(self) -> RemotingClient:
        client = RemotingClient(reactor)
        self.addCleanup(client.close)
        return client

    def pull(self, client: RemotingClient) -> Deferred[RemotingCommand]:
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL))
        return client.invoke_sync(self.address, request, 30)

    async def hold_one(self) -> tuple[RemotingClient, Deferred[RemotingCommand]]:
        """A client whose pull of the empty queue is held."""
        client = self.client()
        before = self.hold.parked_count()
        pulled = self.pull(client)
        await until(lambda: self.hold.parked_count() == before + 1, "pull held")
        return client, pulled

    async def answered_by_arrival(self, pulled: Deferred[RemotingCommand]) -> None:
        self.store.put_message(MessageExt("T", b"m", queue_id=0))
        response = await pulled
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)

    async def test_close_drops_held_pull(self) -> None:
        """When a connection closes its held pull is gone at once and its deadline cancelled; another
        connection's held pull stays and is answered by the next arrival."""
        gone, gone_pull = await self.hold_one()
        _, kept_pull = await self.hold_one()
        timers = wakes(self.hold)
        self.assertEqual(len(timers), 2)
        await gone.close()
        self.failureResultOf(gone_pull, RemotingConnectionLost)
        await until(lambda: len(self.server.channels) == 1, "server side closed")
        self.assertEqual(self.hold.parked_count(), 1)
        self.assertEqual(sorted(t.active() for t in timers), [False, True])
        self.assertEqual(len(wakes(self.hold)), 1)
        await self.answered_by_arrival(kept_pull)
        self.assertEqual(wakes(self.hold), [])

    async def test_read_ending_after_close_not_held(self) -> None:
        """A pull whose read ends after its connection closed is not held: no deadline, nothing parked;
        the other connection's held pull is untouched."""
        _, kept_pull = await self.hold_one()
        gate: Deferred[None] = Deferred()
        self.store.gate = gate
        late = self.client()
        late_pull = self.pull(late)
        await until(lambda: self.store.waiting == 1, "read in the store")
        await late.close()
        self.failureResultOf(late_pull, RemotingConnectionLost)
        await until(lambda: len(self.server.channels) == 1, "server side closed")
        self.store.gate = None
        gate.callback(None)  # the read ends: PULL_NOT_FOUND, would be held
        self.assertEqual(self.hold.parked_count(), 1)
        self.assertEqual(len(wakes(self.hold)), 1)
        await self.answered_by_arrival(kept_pull)
        self.assertEqual(wakes(self.hold), [])

    async def test_bad_frame_during_read_closes_at_once(self) -> None:
        """A connection that sent a bad frame while its pull was reading closes as soon as the read
        ends: the pull is not held (which would keep the broken connection open 15 s)."""
        gate: Deferred[None] = Deferred()
        self.store.gate = gate
        host, port = self.address.split(":")
        raw = await connectProtocol(TCP4ClientEndpoint(reactor, host, int(port)), _Watcher())
        raw.transport.write(encode(RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL))))
        await until(lambda: self.store.waiting == 1, "read in the store")
        raw.transport.write(struct.pack(">i", MAX_FRAME_LENGTH + 1))
        await until(lambda: all(channel.closing for channel in self.server.channels), "frame refused")
        self.store.gate = None
        gate.callback(None)
        self.assertEqual((self.hold.parked_count(), wakes(self.hold)), (0, []))
        await raw.lost


class BrokerStopTests(IntegrationTestCase):
    """A whole broker on loopback stopped while pulls are held or still reading."""

    async def test_stop_leaves_no_held_pull(self) -> None:
        """Stopping the broker drops its held pull (deadline cancelled), and a pull whose read ends
        after the stop is not held: no hold deadline outlives the broker."""
        cluster = await self.cluster()
        broker = cluster.brokers["broker-a"]
        hold = broker.hold
        assert hold is not None
        address = broker.config.advertised_address
        fields = {"topic": "T", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
        created = await cluster.admin.invoke_sync(
            address, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), 5)
        self.assertEqual(created.code, ResponseCode.SUCCESS, created.remark)
        client = RemotingClient(reactor)
        self.addCleanup(client.close)

        def pull() -> Deferred[RemotingCommand]:
            return client.invoke_sync(address, RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL)), 30)

        held = pull()
        await until(lambda: hold.parked_count() == 1, "pull held")
        gate: Deferred[None] = Deferred()
        store, read = broker.store, broker.store.get_message
        self.patch(store, "get_message_resident", lambda *args: None)  # every read through the pool
        read_ended: list[GetMessageResult] = []

        def gated(*args: Any) -> Deferred[GetMessageResult]:
            def wait(result: GetMessageResult) -> Deferred[GetMessageResult]:
                read_ended.append(result)
                return gate.addCallback(lambda _: result)

            return read(*args).addCallback(wait)

        self.patch(store, "get_message", gated)
        late = pull()
        await until(lambda: len(read_ended) == 1, "second read done")
        await broker.stopService()
        await self.assertFailure(held, RemotingConnectionLost)
        await self.assertFailure(late, RemotingConnectionLost)
        self.assertEqual(hold.parked_count(), 0)
        self.assertEqual(wakes(hold), [])
        gate.callback(None)  # the read ends after the stop: PULL_NOT_FOUND, would be held
        self.assertEqual(hold.parked_count(), 0)
        self.assertEqual(wakes(hold), [])
